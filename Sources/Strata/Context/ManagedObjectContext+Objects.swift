import Foundation
import Tracing

// Registering, fetching, changing and saving objects: the context's side of Core Data's
// NSManagedObjectContext, forwarded to its object graph inside the context's isolation.
extension ManagedObjectContext {
    // MARK: Registering and fetching

    /// The object registered for `id` in this context, or nil. Touches no store.
    public func registeredObject(for id: ManagedObjectID) -> ManagedObject? {
        graph.registeredObject(for: id)
    }

    /// The object for `id`: the registered one, or a new fault for it. Touches no store:
    /// when no such row exists, the first access to the object's values finds out (see
    /// ``shouldDeleteInaccessibleFaults``).
    public func object(with id: ManagedObjectID) -> ManagedObject {
        graph.object(for: id)
    }

    /// The object for `id`, with its values: the registered one (its unsaved values
    /// untouched), or else read from its store.
    ///
    /// - Throws: ``StrataError/objectNotFound(_:)`` when it is neither registered nor stored.
    public func existingObject(with id: ManagedObjectID) throws -> ManagedObject {
        try graph.existingObject(for: id)
    }

    /// Every object registered in the context (those still alive when
    /// ``retainsRegisteredObjects`` is false).
    public var registeredObjects: Set<ManagedObject> { Set(graph.registeredObjects) }

    /// Whether the context holds every registered object strongly. When false (the
    /// default), it holds only inserted, updated and deleted objects; the others stay
    /// registered while something else holds them.
    public var retainsRegisteredObjects: Bool {
        get { graph.retainsRegisteredObjects }
        set { graph.retainsRegisteredObjects = newValue }
    }

    /// The objects `request` matches, with this context's unsaved changes taken into
    /// account (see <doc:ContextsAndConcurrency>), in the request's result type.
    ///
    /// - Throws: ``StrataError`` for an unknown entity or key, a result type that does
    ///   not fit `Result`, or a storage failure; ``FetchPredicateError``.
    public func fetch<Result>(_ request: FetchRequest<Result>) throws -> [Result] {
        try instrumentedRead("fetch", of: request.entityName) { span in
            let results = try graph.fetch(request)
            span?.attributes["db.response.returned_rows"] = results.count
            return (results, results.count)
        }
    }

    /// The number of objects `request` would fetch (its window applied).
    public func count<Result>(for request: FetchRequest<Result>) throws -> Int {
        try instrumentedRead("count", of: request.entityName) { span in
            let count = try graph.count(for: request)
            span?.attributes["db.response.returned_rows"] = 1
            return (count, nil)
        }
    }

    /// Runs a fetch or count in a span and records its duration and rows (`body` returns
    /// its result and the rows it returned, nil for a count).
    func instrumentedRead<Result>(
        _ operation: String, of entity: String, _ body: ((any Tracing.Span)?) throws -> (Result, Int?)
    ) throws -> Result {
        let tracer = graph.instruments?.tracer
        let metrics = graph.contextMetrics
        guard tracer != nil || metrics != nil else { return try body(nil).0 }
        let start = metrics == nil ? 0 : DispatchTime.now().uptimeNanoseconds
        let (result, rows) = try Instruments.traced(by: tracer, operation, entity: entity) { span in
            span?.attributes["strata.context"] = name
            return try body(span)
        }
        metrics?.didRead(operation, entity: entity, nanoseconds: DispatchTime.now().uptimeNanoseconds &- start, rows: rows)
        return result
    }

    // MARK: Changing objects

    /// Adds a new object to the context, with a temporary ID until it is saved, and calls
    /// its ``ManagedObject/awakeFromInsert()``. New objects it already points to come
    /// along. Inserting an object of this context that is deleted takes the deletion
    /// back.
    ///
    /// - Throws: ``StrataError/unknownEntity(_:)`` for an entity the model lacks (or an
    ///   abstract one); ``StrataError/invalidObjectState(_:reason:)`` for an object of
    ///   another context or one already saved.
    public func insert(_ object: ManagedObject) throws {
        try graph.insert(object)
    }

    /// Deletes `object` at the next save. An object inserted since the last save simply
    /// leaves the context: it is not in ``deletedObjects``. Delete rules run at the end
    /// of the current block (``propagatesDeletesAtEndOfEvent``) or at save.
    ///
    /// - Throws: ``StrataError/invalidObjectState(_:reason:)`` for an object of another
    ///   context; ``StrataError/storage(_:)`` when the object is a fault and its store
    ///   cannot be read (its row version is needed for the save's conflict check).
    public func delete(_ object: ManagedObject) throws {
        try graph.delete(object)
    }

    /// Objects inserted since the last save.
    public var insertedObjects: Set<ManagedObject> { Set(graph.inserted) }
    /// Objects changed since the last save (neither inserted nor deleted).
    public var updatedObjects: Set<ManagedObject> { Set(graph.updated) }
    /// Objects deleted since the last save (not those inserted since).
    public var deletedObjects: Set<ManagedObject> { Set(graph.deleted) }
    /// Whether the context has unsaved changes.
    public var hasChanges: Bool { graph.hasChanges }

    /// Whether deletes propagate (delete rules) at the end of each block rather than
    /// only at save. True by default.
    public var propagatesDeletesAtEndOfEvent: Bool {
        get { graph.propagatesDeletesAtEndOfEvent }
        set { graph.propagatesDeletesAtEndOfEvent = newValue }
    }

    /// Whether an object whose row was deleted underneath becomes a deleted object with
    /// nil and zero values when its fault fires (true, the default), or stays
    /// inaccessible: typed accessors read defaults and ``ManagedObject/value(forKey:)``
    /// throws ``StrataError/inaccessibleFault(_:)``.
    public var shouldDeleteInaccessibleFaults: Bool {
        get { graph.shouldDeleteInaccessibleFaults }
        set { graph.shouldDeleteInaccessibleFaults = newValue }
    }

    /// Asked before an inaccessible fault is handled, with the object, its ID and the
    /// property that fired it; return false to leave the object inaccessible whatever
    /// ``shouldDeleteInaccessibleFaults`` says. Core Data's
    /// `shouldHandleInaccessibleFault(_:for:triggeredByProperty:)`, as a handler.
    public func setShouldHandleInaccessibleFault(
        _ handler: ((_ object: ManagedObject, _ id: ManagedObjectID, _ property: String?) -> Bool)?
    ) {
        graph.inaccessibleFaultHandler = handler
    }

    /// Ends an "event": runs the delete rules of objects deleted since the last call
    /// (when ``propagatesDeletesAtEndOfEvent``), then posts
    /// ``didChangeObjectsNotification`` for what changed since the last one. Every block
    /// run by ``perform(schedule:_:)`` and ``performAndWait(_:)`` ends with it, and
    /// ``save()`` starts with it.
    public func processPendingChanges() throws {
        defer { postObjectsDidChange() }
        if graph.propagatesDeletesAtEndOfEvent { try graph.propagateDeletes() }
        if let recorder = graph.undoRecorder {
            // The event's changes become one undo step, and its event group closes.
            recorder.flush()
            recorder.manager.endEvent()
        }
    }

    // MARK: Saving and discarding

    /// Saves every unsaved change to the stores, all or nothing (see
    /// <doc:ContextsAndConcurrency>).
    ///
    /// - Throws: ``StrataError/validation(_:)`` with every failure;
    ///   ``StrataError/mergeConflicts(_:)``; ``StrataError/noStore(entity:)``; storage
    ///   errors. Nothing is written then, and the context keeps its changes.
    ///
    /// In order: ``processPendingChanges()``; then, when there is anything to save,
    /// ``willSaveObjectsNotification``, each object's ``ManagedObject/willSave()``,
    /// validation, one write, each object's ``ManagedObject/didSave()``, and
    /// ``didSaveObjectsNotification`` (then ``didSaveObjectIDsNotification``). A save with
    /// nothing to save writes and posts nothing.
    ///
    /// A root context's save notifications carry the state the commit made under
    /// ``NotificationKey/queryGeneration``; a pinned root context advances to that state
    /// (see ``setQueryGenerationFrom(_:)``).
    public func save() throws {
        let tracer = graph.instruments?.tracer
        let metrics = graph.contextMetrics
        guard tracer != nil || metrics != nil else { return try saveChanges(span: nil) }
        let start = metrics == nil ? 0 : DispatchTime.now().uptimeNanoseconds
        do {
            try Instruments.traced(by: tracer, "save", entity: nil) { span in
                span?.attributes["strata.context"] = name
                try saveChanges(span: span)
            }
        } catch {
            metrics?.saveFailed(error)
            throw error
        }
        if let metrics, let saved = graph.lastSaveCounts {
            metrics.saveDuration.recordNanoseconds(Int64(clamping: DispatchTime.now().uptimeNanoseconds &- start))
            metrics.saves.increment()
            if saved.inserted > 0 { metrics.inserted.increment(by: saved.inserted) }
            if saved.updated > 0 { metrics.updated.increment(by: saved.updated) }
            if saved.deleted > 0 { metrics.deleted.increment(by: saved.deleted) }
        }
    }

    /// ``save()``'s work; `span` (when traced) learns how many objects it wrote, and the
    /// graph's ``ObjectGraph/lastSaveCounts`` is set when it wrote something.
    private func saveChanges(span: (any Tracing.Span)?) throws {
        graph.lastSaveCounts = nil
        try processPendingChanges()
        #if DEBUG
        graph._checkInvariants()  // once a save, which reads every change anyway
        #endif
        guard try graph.beginSave() else {
            span?.attributes["db.operation.batch.size"] = 0
            return
        }
        post(.willSave, ObjectChangeSets())
        let round = try graph.runWillSave()
        postObjectsDidChange()   // what the objects' willSave() changed
        let batch = try graph.validatedSave(after: round)
        let saved: ObjectChangeSets
        if let parent {
            // One store up: the parent takes the changes as values, in its isolation.
            let changes = graph.childSave(of: batch, policy: mergePolicy)
            var merge = MergeResult()
            if !changes.isEmpty {
                do {
                    merge = try parent.acceptChildSave(changes, from: self)
                } catch let error as StrataError where error.code == .mergeConflicts {
                    throw StrataError.mergeConflicts(error.conflicts.map(graph.completed))
                }
            }
            saved = graph.didSaveIntoParent(batch, merge: merge)
        } else {
            saved = try graph.writeToStores(batch, policy: mergePolicy, history: SaveHistory(author: transactionAuthor, contextName: name))
        }
        span?.attributes["db.operation.batch.size"] = saved.inserted.count + saved.updated.count + saved.deleted.count
        span?.attributes["strata.save.destination"] = parent == nil ? "store" : "parent"
        guard !saved.isEmpty else { return }
        graph.lastSaveCounts = (saved.inserted.count, saved.updated.count, saved.deleted.count)
        post(.didSave, saved)
        didSaveToParentStore(saved)
    }

    /// Discards every unsaved change: inserted objects leave, deleted ones come back,
    /// changed ones take their last saved or fetched values. Posts
    /// ``didChangeObjectsNotification``: the inserted objects as invalidated, the others
    /// as refreshed.
    public func rollback() {
        #if DEBUG
        graph._checkInvariants()
        #endif
        graph.rollback()
        postObjectsDidChange()
    }

    /// Forgets every object: they leave the context and can no longer be used. Posts
    /// ``didChangeObjectsNotification`` with every object invalidated. A pinned context's
    /// query generation advances: it takes the newest state at its next read.
    public func reset() {
        graph.reset()
        graph.advanceGeneration(toward: nil)
        postObjectsDidChange()
    }

    /// Refreshes `object` from its store: with `mergeChanges`, its unsaved changes stay
    /// on top of the stored values; without, they are discarded and it becomes a fault.
    public func refresh(_ object: ManagedObject, mergeChanges: Bool) throws {
        try graph.refresh(object, mergeChanges: mergeChanges)
    }

    /// Refreshes every registered object, keeping unsaved changes.
    public func refreshAllObjects() throws {
        for object in graph.registeredObjects {
            try graph.refresh(object, mergeChanges: true)
        }
    }

    /// Makes the next save fail with ``StrataError/mergeConflicts(_:)`` if `object` was
    /// changed or deleted in its store since this context read it, even though `object`
    /// itself has no changes: optimistic locking for an object your changes depend on.
    /// Changed and deleted objects are always checked. The check happens only when the
    /// save has changes to write; it is dropped after a successful save, a rollback or a
    /// reset. A fault is read now.
    ///
    /// - Throws: ``StrataError/invalidObjectState(_:reason:)`` for an object of another
    ///   context; ``StrataError/inaccessibleFault(_:)`` when its row is already gone.
    public func detectConflicts(for object: ManagedObject) throws {
        try graph.detectConflicts(for: object)
    }

    /// Gives inserted objects their permanent IDs now (one write per store involved).
    public func obtainPermanentIDs(for objects: [ManagedObject]) throws {
        try graph.obtainPermanentIDs(for: objects)
    }

    /// Chooses the store a new object is saved to. Without it, an object goes to the
    /// first store that can hold its entity.
    ///
    /// - Throws: ``StrataError/noStore(entity:)`` when `store` cannot hold the object.
    public func assign(_ object: ManagedObject, to store: PersistentStore) throws {
        try graph.assign(object, to: store)
    }
}
