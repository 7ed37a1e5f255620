import Foundation
import StrataLMDB

extension ObjectGraph {
    // A save runs in stages, which the context drives and posts its notifications
    // between (``ManagedObjectContext/save()``); the graph calls nobody back:
    //
    //   beginSave()          edits that failed, delete rules, new destinations: any work?
    //   runWillSave()        each object's willSave(), which may change more
    //   validatedSave(_:)    the objects to write, validated (every failure at once)
    //   writeToStores(_:)    a root context: one write job, then the objects commit
    //   childSave(of:)       a child: its changes as values for the parent, which the
    //   didSaveIntoParent(_:)  context hands up; then the objects commit here
    //
    // Nothing changes in the stores or the parent before the last stage succeeds, and a
    // failure leaves the context with its changes.

    /// The first stage of a save: an edit that failed since the last save fails this
    /// one; delete rules run; new objects reached from changed ones come in.
    ///
    /// - Returns: whether there is anything to save.
    /// - Throws: the storage error of an edit that could not happen (a setter whose
    ///   reads failed); errors of the delete rules.
    func beginSave() throws -> Bool {
        try throwIfEditsFailed()
        readUnreadChanges()
        try propagateDeletes()
        try adoptNewDestinations()
        return hasChanges
    }

    /// The second stage: ``ManagedObject/willSave()`` on every object to save; what
    /// those calls change or insert joins the save (delete rules and new destinations
    /// run again).
    func runWillSave() throws -> WillSaveRound {
        let round = WillSaveRound(updated: updated, changedCount: changedCount)
        let deleted = self.deleted.filter { !unsaved.vanished.contains(ObjectIdentifier($0)) }
        for object in inserted + round.updated + deleted { object.willSave() }
        try propagateDeletes()
        try adoptNewDestinations()
        return round
    }

    /// The third stage: the objects the save writes, each validated
    /// (`validateForInsert`, `validateForUpdate`, `validateForDelete`).
    ///
    /// - Throws: ``StrataError/validation(_:)`` with every failure of every object.
    func validatedSave(after round: WillSaveRound) throws -> SaveBatch {
        // Changed objects only join the changed set during a save: the same count is the
        // same set (whose members may have been deleted since).
        let batch = SaveBatch(
            inserted: inserted,
            updated: changedCount == round.changedCount ? round.updated.filter(\.isUpdated) : updated,
            // Objects whose rows were gone when their faults fired are discarded, unwritten.
            deleted: deleted.filter { !unsaved.vanished.contains(ObjectIdentifier($0)) },
            discarded: deleted.filter { unsaved.vanished.contains(ObjectIdentifier($0)) })
        var failures: [ValidationFailure] = []
        func collect(_ check: () throws -> Void) throws {
            do {
                try check()
            } catch let error as StrataError where error.code == .validation {
                failures += error.validationFailures
            }
        }
        for object in batch.inserted { try collect(object.validateForInsert) }
        for object in batch.updated { try collect(object.validateForUpdate) }
        for object in batch.deleted { try collect(object.validateForDelete) }
        guard failures.isEmpty else { throw StrataError.validation(failures) }
        return batch
    }

    /// The last stage of a child context's save, after its parent took
    /// ``childSave(of:)``: the objects' values become their committed values here,
    /// deleted objects leave, and each gets ``ManagedObject/didSave()``.
    ///
    /// - Returns: the objects saved (temporary IDs stay: the root's save assigns
    ///   permanent ones).
    ///
    /// When the parent settled conflicts (`merge`), the objects it merged take the merged
    /// state, as for a root context's save (``writeToStores(_:policy:)``).
    func didSaveIntoParent(_ batch: SaveBatch, merge: MergeResult = MergeResult()) -> ObjectChangeSets {
        var batch = batch
        for object in batch.inserted + batch.updated {
            if merge.isEmpty {
                object.didCommit(permanentID: nil, version: object.rowVersion)
            } else if let merged = merge.merged[object.objectID] {
                object.apply(merged)
            } else if !merge.vanished.contains(object.objectID) {
                object.didCommit(permanentID: nil, version: object.rowVersion)
            }
        }
        if !merge.isEmpty { settle(merge, in: &batch) }
        for object in batch.deleted + batch.discarded { forget(object) }
        clearChanges()
        refreshTouched(by: merge)
        for object in batch.inserted + batch.updated + batch.deleted { object.didSave() }
        return ObjectChangeSets(inserted: batch.inserted, updated: batch.updated, deleted: batch.deleted)
    }

    /// The last stage of a root context's save: `batch` written in one write job
    /// (permanent IDs assigned, row versions checked and bumped); then objects take
    /// their permanent IDs and committed values, deleted objects leave, and each gets
    /// ``ManagedObject/didSave()``.
    ///
    /// - Returns: the objects saved, with their permanent IDs, and the query generation
    ///   the commit made.
    /// - Throws: ``StrataError/mergeConflicts(_:)`` when rows changed underneath;
    ///   ``StrataError/noStore(entity:)``, ``StrataError/invalidObjectState(_:reason:)``
    ///   for a relationship between stores; storage errors. Nothing is written then.
    ///
    /// `history` (the saving context's author and name) goes to the saves of the stores
    /// that track persistent history, with the names of each updated object's changed
    /// properties.
    func writeToStores(_ batch: SaveBatch, policy: MergePolicy = .error, history: SaveHistory? = nil) throws -> ObjectChangeSets {
        var plan = SavePlan()
        // Live results follow the save; they need the keys updated objects set, by entity,
        // read before the commit clears them (only while something observes).
        let hub = try coordinator.liveResults
        let touchedKeys = hub.hasObservers ? TouchedKeys(batch.updated) : nil
        for object in batch.inserted {
            let store = try store(forNew: object, plan: &plan)
            try plan.add(object, to: store, key: object.hasTemporaryID ? 0 : object.rowKey, baseVersion: 0)
        }
        for object in batch.updated {
            let store = try plan.store(of: object, coordinator: coordinator)
            try plan.add(object, to: store, key: object.rowKey, baseVersion: object.rowVersion)
            if let history, store.options.tracksPersistentHistory {
                let index = plan.index(of: store)
                if plan.saves[index].history == nil { plan.saves[index].history = history }
                plan.saves[index].history!.setUpdatedProperties(object.changedPropertyNames(), ofRow: plan.saves[index].rows.count - 1)
            }
            if policy.merges {
                // What the object changed, with the values it read: what the write merges
                // from when the row changed meanwhile.
                let index = plan.index(of: store)
                if plan.saves[index].merging == nil { plan.saves[index].merging = SaveMerging(policy: policy, changes: [:]) }
                plan.saves[index].merging!.changes[plan.saves[index].rows.count - 1] = ObjectChange(of: object)
            }
        }
        for object in batch.deleted {
            let store = try plan.store(of: object, coordinator: coordinator)
            plan.saves[plan.index(of: store)].deleted.append(StoreChanges.Deletion(objectID: object.objectID, expectedVersion: object.rowVersion))
        }
        for object in unsaved.conflictChecks.values where object.owner === self && !object.hasChanges && !object.objectID.isTemporaryID {
            let store = try plan.store(of: object, coordinator: coordinator)
            plan.saves[plan.index(of: store)].checked.append(StoreChanges.Deletion(objectID: object.objectID, expectedVersion: object.rowVersion))
        }
        if policy.merges {
            // Every store's part, deletions alone included: a deletion of a row changed
            // elsewhere is settled by the policy too (kept or undone).
            for index in plan.saves.indices where plan.saves[index].merging == nil {
                plan.saves[index].merging = SaveMerging(policy: policy, changes: [:])
            }
        }
        try checkStores(plan.related, plan.storeOfRelated)
        if let history {
            for index in plan.saves.indices where plan.saves[index].history == nil && plan.saves[index].store.options.tracksPersistentHistory {
                plan.saves[index].history = history
            }
        }

        let outcome: SaveOutcome
        do {
            if case .pinned = generationPin {
                // The coordinator may let the lease go and take it back (map full): it must
                // hold the only reference meanwhile.
                var pin = generationPin
                generationPin = .newest
                defer { generationPin = pin }
                outcome = try coordinator.save(plan.saves, pin: &pin)
            } else {
                outcome = try coordinator.save(plan.saves, pinning: generationPin.isPinned)
            }
        } catch let error as StrataError where error.code == .mergeConflicts {
            throw StrataError.mergeConflicts(error.conflicts.map(completed))
        }
        advanceGeneration(afterSavingTo: outcome.generation)

        var madePermanent: [ManagedObjectID: ManagedObjectID] = [:]
        var replaced: Set<ObjectIdentifier> = []
        let recordsIDs = isInTree
        for (index, save) in plan.saves.enumerated() {
            let storeNumber = StoreNumbers.number(for: save.store.identifier)
            let keys = index < outcome.keys.count ? outcome.keys[index] : []
            for (row, (object, key)) in zip(save.rows.rows, zip(plan.objects[index], keys)) {
                guard row.isInsert else {
                    if outcome.merge.isEmpty {
                        object.didCommit(permanentID: nil, version: row.baseVersion + 1)
                    } else if let merged = outcome.merge.merged[object.objectID] {
                        object.apply(merged)   // exactly what was stored
                    } else if !outcome.merge.vanished.contains(object.objectID) {
                        object.didCommit(permanentID: nil, version: row.baseVersion + 1)
                    }
                    continue
                }
                if object.hasTemporaryID {
                    if !outcome.merge.adopted.isEmpty, let existing = outcome.merge.adopted[object.objectID],
                       let other = registeredObject(for: existing), other !== object {
                        // The new object became this stored one, or another new one of this
                        // save (an upsert): it takes the place of the object registered for
                        // it, which leaves.
                        unregister(other)
                        other.invalidate()
                        recordEvent(other, in: .invalidated)
                        replaced.insert(ObjectIdentifier(other))
                    }
                    let temporary = recordsIDs ? object.storedObjectID : nil
                    reregister(object, store: storeNumber, primaryKey: key)
                    if let temporary { madePermanent[temporary] = object.storedObjectID }
                }
                if !outcome.merge.isEmpty, let merged = outcome.merge.merged[object.objectID] {
                    object.apply(merged)   // an upsert: the stored object's merged state
                } else {
                    object.didCommit(permanentID: nil, version: 1)
                }
            }
        }
        // Descendants may have these objects under their temporary IDs.
        if recordsIDs && !madePermanent.isEmpty { family.record(madePermanent) }
        var batch = batch
        if !outcome.merge.isEmpty { settle(outcome.merge, replaced: replaced, in: &batch) }
        for object in batch.deleted + batch.discarded {
            forget(object)
        }
        clearChanges()
        refreshTouched(by: outcome.merge)
        for object in batch.inserted + batch.updated + batch.deleted { object.didSave() }
        var saved = ObjectChangeSets(inserted: batch.inserted, updated: batch.updated, deleted: batch.deleted)
        saved.queryGeneration = outcome.token
        if let touchedKeys, hub.hasObservers {
            var change = LiveChange()
            change.inserted = Set(saved.inserted.map(\.objectID))
            change.updated = Set(saved.updated.map(\.objectID))
            change.deleted = Set(saved.deleted.map(\.objectID))
            change.entities = touchedKeys.summary(inserted: saved.inserted, updated: saved.updated)
            hub.publish(change)
        }
        return saved
    }

    /// Objects whose state the merge changed beyond what this context saved (to keep
    /// inverses consistent) are read again.
    private func refreshTouched(by merge: MergeResult) {
        for id in merge.touched {
            guard let object = registeredObject(for: id), object.owner === self, !object.hasChanges else { continue }
            try? refresh(object, mergeChanges: false)
        }
    }

    /// After a save whose conflicts the write settled: objects whose rows were deleted
    /// elsewhere leave as deleted (the save reports them so); objects the save meant to
    /// delete that stay take their stored state and are no longer deleted; new objects
    /// another took the place of (`replaced`) are not reported.
    private func settle(_ merge: MergeResult, replaced: Set<ObjectIdentifier> = [], in batch: inout SaveBatch) {
        if !merge.adopted.isEmpty {
            // New objects that another new object of the save took the place of were never
            // stored; those that became stored ones were updates of those.
            batch.inserted.removeAll { replaced.contains(ObjectIdentifier($0)) }
            let adopted = Set(merge.adopted.values).subtracting(merge.joinedInserts)
            batch.updated += batch.inserted.filter { adopted.contains($0.objectID) }
            batch.inserted.removeAll { adopted.contains($0.objectID) }
        }
        if !merge.vanished.isEmpty {
            let gone = batch.updated.filter { merge.vanished.contains($0.objectID) }
            batch.updated.removeAll { merge.vanished.contains($0.objectID) }
            batch.deleted += gone
        }
        if !merge.undeleted.isEmpty {
            for object in batch.deleted {
                guard let stored = merge.undeleted[object.objectID] else { continue }
                unsaved.forgetChanges(of: object)
                object.restoreFromDeletion(reinserting: false)
                object.apply(stored)
                recordEvent(object, in: .refreshed)
            }
            batch.deleted.removeAll { merge.undeleted[$0.objectID] != nil }
        }
    }

    /// `conflict` with this context's side filled in: the object's values, the values it
    /// read, and the properties changed on each side.
    func completed(_ conflict: MergeConflict) -> MergeConflict {
        guard let object = registeredObject(for: conflict.objectID), object.owner === self else { return conflict }
        let entity = object.entity
        let cached = object.makeCommittedSnapshot()
        let current = object.isDeleted ? nil : object.makeSnapshot()
        var mine = Set<String>()
        if let cached, let current {
            for slot in entity.storedAttributeSlots where current.attributes[slot] != cached.attributes[slot] {
                mine.insert(entity.attributes[slot].name)
            }
            for slot in entity.relationships.indices where object.relationshipChanged(slot) {
                mine.insert(entity.relationships[slot].name)
            }
        } else if object.isDeleted {
            mine = Set(entity.propertyNames)
        }
        let cachedSnapshot = cached.map { PropertySnapshot($0, entity: entity) }
        var theirs = Set<String>()
        if let cachedSnapshot, let persisted = conflict.persistedSnapshot {
            for (key, value) in cachedSnapshot.values {
                guard let stored = persisted[key] else { continue }
                if case .toMany(let a) = value, case .toMany(let b) = stored, entity.relationshipsByName[key]?.isOrdered == false {
                    if Set(a) != Set(b) { theirs.insert(key) }
                } else if value != stored {
                    theirs.insert(key)
                }
            }
        }
        return MergeConflict(
            objectID: conflict.objectID, objectSnapshot: current.map { PropertySnapshot($0, entity: entity) },
            cachedSnapshot: cachedSnapshot, persistedSnapshot: conflict.persistedSnapshot, oldVersion: conflict.oldVersion,
            newVersion: conflict.newVersion, changedKeysInMemory: mine, changedKeysInStore: theirs)
    }

    /// The store a new object will be saved to, the last one found for its entity reused.
    private func store(forNew object: ManagedObject, plan: inout SavePlan) throws -> PersistentStore {
        if !assignedStoresAreEmpty, let store = assignedStore(of: object) { return store }
        if let last = plan.lastNew, last.entity === object.entity { return last.store }
        let store = try coordinator.defaultStore(for: object.entity.name)
        plan.lastNew = (object.entity, store)
        return store
    }

    /// A child context's save as values for its parent (which takes it in
    /// ``acceptChildSave(_:)``): inserted objects whole, changed ones property by
    /// property with the values they were based on, deleted and checked ones with the
    /// state the child read them in.
    func childSave(of batch: SaveBatch, policy: MergePolicy = .error) -> ChildSave {
        var save = ChildSave()
        save.policy = policy
        if policy.merges {
            for object in batch.updated { save.objectStates[object.objectID] = object.makeSnapshot() }
        }
        for object in batch.inserted {
            save.inserted.append(object.makeSnapshot())
            if let store = assignedStore(of: object) { save.stores[object.objectID] = store }
        }
        save.updated = batch.updated.map(ObjectChange.init(of:))
        save.deleted = batch.deleted.map(\.objectID)
        let checked = unsaved.conflictChecks.values.filter { $0.owner === self && !$0.hasChanges && !$0.isInserted }
        save.checked = checked.map(\.objectID)
        for object in batch.deleted + checked {
            if let base = object.makeCommittedSnapshot() { save.bases[object.objectID] = base }
        }
        return save
    }

    /// Objects reached through relationships of inserted or changed objects that are in
    /// no context yet are inserted too (a graph built before it was inserted).
    private func adoptNewDestinations() throws {
        for object in inserted + updatedWithRelationships {
            for slot in object.entity.relationships.indices {
                let storage = object.relationshipStorage(at: slot)
                if case .notLoaded = storage { continue }
                for destination in storage.objects where destination.owner == nil && destination.objectID.isTemporaryID {
                    try insert(destination)
                }
            }
        }
    }

    /// Relationships cannot cross stores: each object's destinations must be saved to
    /// (or live in) the same store.
    private func checkStores(_ objects: [ManagedObject], _ stores: [ObjectIdentifier: PersistentStore]) throws {
        for object in objects {
            guard let store = stores[ObjectIdentifier(object)] else { continue }
            for slot in object.entity.relationships.indices {
                for destination in object.relationshipStorage(at: slot).objects where !destination.isDeleted {
                    if destination.owner !== self {
                        throw StrataError.invalidObjectState(
                            destination.objectID, reason: "\(object.entity.name).\(object.entity.relationships[slot].name) refers to it, but it is in another context (or none)")
                    }
                    let other = try stores[ObjectIdentifier(destination)]
                        ?? (destination.objectID.isTemporaryID ? self.store(forNew: destination) : coordinator.store(of: destination.objectID))
                    if other !== store {
                        throw StrataError.invalidObjectState(
                            object.objectID, reason: "\(object.entity.name).\(object.entity.relationships[slot].name) leads to an object in another store; relationships cannot cross stores")
                    }
                }
            }
        }
    }

    /// Makes the next save fail with a conflict if `object`'s stored row changed (or went)
    /// since the context read it, even when `object` itself has no changes: optimistic
    /// locking of an object the save depends on. Changed and deleted objects are always
    /// checked. A fault is read now, so the check is against the row as it is now.
    func detectConflicts(for object: ManagedObject) throws {
        guard object.owner === self else {
            throw StrataError.invalidObjectState(object.objectID, reason: "it does not belong to this context")
        }
        guard !object.objectID.isTemporaryID, !object.isInserted else { return }
        guard object.fulfilIfNeeded() else { throw object.inaccessibleError }
        unsaved.conflictChecks[ObjectIdentifier(object)] = object
    }

    /// A saved deletion: the object leaves the context.
    private func forget(_ object: ManagedObject) {
        unregister(object)
        object.leaveContextDeleted()
    }
}

/// What ``ObjectGraph/runWillSave()`` found before the objects' `willSave()` ran.
struct WillSaveRound {
    /// The changed objects then.
    let updated: [ManagedObject]
    /// How many objects had joined the changed set then.
    let changedCount: Int
}

/// The objects one save writes, validated (``ObjectGraph/validatedSave(after:)``).
struct SaveBatch {
    var inserted: [ManagedObject]
    var updated: [ManagedObject]
    var deleted: [ManagedObject]
    /// Deleted objects whose rows were already gone: they leave, unwritten.
    var discarded: [ManagedObject]
}

/// A root save being prepared: per store, the encoded rows and the objects they come
/// from, in the same order.
private struct SavePlan {
    var saves: [StoreSave] = []
    /// The objects of each save's rows.
    var objects: [[ManagedObject]] = []
    /// Objects with relationships and the store each goes to, for the check that
    /// relationships stay inside one store.
    var related: [ManagedObject] = []
    var storeOfRelated: [ObjectIdentifier: PersistentStore] = [:]
    /// The store the last new object went to, by entity.
    var lastNew: (entity: EntityDescription, store: PersistentStore)?
    /// The store of the last saved object, by store number.
    private var lastStore: (number: UInt32, store: PersistentStore)?
    /// The entity storage the last row was encoded with.
    private var lastStorage: (entity: EntityDescription, store: PersistentStore, storage: EntityStorage)?

    /// The index of `store`'s save, made when needed.
    mutating func index(of store: PersistentStore) -> Int {
        if let index = saves.firstIndex(where: { $0.store === store }) { return index }
        saves.append(StoreSave(store: store))
        objects.append([])
        return saves.count - 1
    }

    /// The store a saved object (permanent ID) lives in.
    mutating func store(of object: ManagedObject, coordinator: PersistentStoreCoordinator) throws -> PersistentStore {
        if let lastStore, lastStore.number == object.storeNumber { return lastStore.store }
        let store = try coordinator.store(of: object.objectID)
        lastStore = (object.storeNumber, store)
        return store
    }

    /// Encodes `object`'s row into `store`'s save.
    mutating func add(_ object: ManagedObject, to store: PersistentStore, key: UInt64, baseVersion: UInt64) throws {
        let storage: EntityStorage
        if let last = lastStorage, last.entity === object.entity, last.store === store {
            storage = last.storage
        } else {
            storage = try store.entityStorage(named: object.entity.name)
            lastStorage = (object.entity, store, storage)
        }
        let index = index(of: store)
        // A server store's rows always carry their IDs: its conflicts and constraint checks name the objects.
        try RowEncoder.append(
            object, storage: storage, key: key, baseVersion: baseVersion, carriesID: store.file == nil, to: &saves[index].rows)
        objects[index].append(object)
        if storage.hasRelationships {
            related.append(object)
            storeOfRelated[ObjectIdentifier(object)] = store
        }
    }
}

/// The keys a save's updated objects set, by entity, for live results: slots gathered per
/// object (no value compared, no string hashed), named once per entity.
struct TouchedKeys {
    private var byEntity: [ObjectIdentifier: (entity: EntityDescription, attributes: [Bool], relationships: [Bool], unknown: Bool)] = [:]

    init(_ objects: [ManagedObject]) {
        for object in objects {
            let entity = object.entity
            let key = ObjectIdentifier(entity)
            var touched = byEntity[key] ?? (entity, Array(repeating: false, count: entity.attributes.count),
                                             Array(repeating: false, count: entity.relationships.count), false)
            if !object.markTouchedSlots(attributes: &touched.attributes, relationships: &touched.relationships) { touched.unknown = true }
            byEntity[key] = touched
        }
    }

    /// The summary by entity name of a save that inserted `inserted` and updated `updated`.
    func summary(inserted: [ManagedObject], updated: [ManagedObject]) -> [String: LiveChange.EntitySummary] {
        var entities: [String: LiveChange.EntitySummary] = [:]
        for (entity, attributes, relationships, unknown) in byEntity.values {
            var keys = Set<String>()
            for (slot, touched) in attributes.enumerated() where touched { keys.insert(entity.attributes[slot].name) }
            for (slot, touched) in relationships.enumerated() where touched { keys.insert(entity.relationships[slot].name) }
            // An entity may come with two descriptions (a class's and the model's): union them.
            let known = entities[entity.name].map { $0.updatedKeys.map { $0.union(keys) } } ?? keys
            entities[entity.name] = LiveChange.EntitySummary(inserted: false, updates: false, updatedKeys: unknown ? nil : known)
        }
        var seen = Set<ObjectIdentifier>()
        for object in updated where seen.insert(ObjectIdentifier(object.entity)).inserted {
            entities[object.entity.name, default: LiveChange.EntitySummary(updatedKeys: nil)].updates = true
        }
        seen = []
        for object in inserted where seen.insert(ObjectIdentifier(object.entity)).inserted {
            entities[object.entity.name, default: LiveChange.EntitySummary()].inserted = true
        }
        return entities
    }
}
