import Foundation
internal import StrataLocks

/// One state of live results: the objects a request matches now, their sections, and
/// how they differ from the previous snapshot. See <doc:ObservingResults>.
public struct ResultsSnapshot<Element: Sendable>: Sendable {
    /// The results, in the request's order: object IDs, or the values the transform made.
    public let elements: [Element]
    /// The object ID of each element.
    public let objectIDs: [ManagedObjectID]
    /// The sections, in order, when the results were asked for with a section key path
    /// (one unnamed section holding everything otherwise; none when there are no results).
    public let sections: [ResultsSection]
    /// What changed since the previous snapshot; for the first, every element inserted.
    public let difference: ResultsDifference
    /// Whether this is the first snapshot of the iteration.
    public let isInitial: Bool
}

/// A run of consecutive results that share their section key's value.
public struct ResultsSection: Sendable, Hashable {
    /// The section key's value as text (`""` for nil, and for results without a section key path).
    public let name: String
    /// The indexes of its elements in ``ResultsSnapshot/elements``.
    public let range: Range<Int>
}

/// How a snapshot differs from the previous one, in the terms list and table views
/// apply: remove ``deleted`` (indexes in the previous snapshot), insert ``inserted``
/// (indexes in the new one), move ``moved``, and reload ``updated``.
public struct ResultsDifference: Sendable, Hashable {
    /// An element that stayed but changed place.
    public struct Move: Sendable, Hashable {
        /// Its index in the previous snapshot.
        public let from: Int
        /// Its index in the new snapshot.
        public let to: Int
    }

    /// Indexes, in the new snapshot, of elements that were not there before.
    public internal(set) var inserted: [Int] = []
    /// Indexes, in the previous snapshot, of elements that are gone.
    public internal(set) var deleted: [Int] = []
    /// Elements that changed place.
    public internal(set) var moved: [Move] = []
    /// Indexes, in the new snapshot, of elements that stayed (in place or moved) and whose
    /// object was changed.
    public internal(set) var updated: [Int] = []
    /// Indexes, in the new snapshot, of sections that were not there before.
    public internal(set) var insertedSections: [Int] = []
    /// Indexes, in the previous snapshot, of sections that are gone.
    public internal(set) var deletedSections: [Int] = []

    /// Whether nothing changed.
    public var isEmpty: Bool {
        inserted.isEmpty && deleted.isEmpty && moved.isEmpty && updated.isEmpty && insertedSections.isEmpty && deletedSections.isEmpty
    }
}

extension ManagedObjectContext {
    /// The live results of `request` in this context: an `AsyncSequence` of
    /// ``ResultsSnapshot``s of object IDs, the first at once, then one after every change
    /// that can affect them (Core Data's `NSFetchedResultsController`, SwiftData's
    /// `@Query`, GRDB's `ValueObservation`).
    ///
    /// ```swift
    /// var request = FetchRequest<Note>()
    /// request.predicate = try FetchPredicate(format: "folder.name == %@", "Inbox")
    /// request.sortDescriptors = [FetchSortDescriptor(key: "title")]
    /// for try await snapshot in context.results(for: request) {
    ///     apply(snapshot.difference)   // inserted, deleted, moved, updated indexes
    /// }
    /// ```
    ///
    /// A snapshot follows the saves of every context of the coordinator (this one's
    /// included), batch requests, this context's own changes and merges (and, for a child,
    /// its ancestors'), and other processes' commits to the stores (watched while the
    /// iteration lasts, as ``PersistentStoreCoordinator/remoteChanges`` is). A change that
    /// cannot affect the request (another entity, or keys the request neither filters,
    /// sorts nor sections by, on objects not in the results) costs the observer a set
    /// lookup and no fetch. Changes that arrive while the consumer works on a snapshot are
    /// coalesced: the next snapshot reflects them all, fetched once. A change that leaves
    /// the results as they were yields nothing.
    ///
    /// Each snapshot is fetched in this context (a `perform` block) with
    /// `includesPendingChanges` as the request says; without a section key path as object
    /// IDs only, so no object's values are read for it. Ending the iteration (a `break`, the
    /// task cancelled) removes the observer: nothing keeps running.
    ///
    /// - Parameters:
    ///   - request: what to observe; `fetchLimit`, `fetchOffset` and
    ///     `includesSubentities` apply. Sort by the section key first when sectioning.
    ///   - sectionNameKeyPath: the key path whose value names each result's section
    ///     (consecutive results of equal value form one section); nil for one section.
    /// - Returns: the sequence; its iterator throws the fetch's errors
    ///   (``StrataError/noCoordinator``, an unknown key, a storage failure).
    public nonisolated func results<Result: ManagedObject>(
        for request: FetchRequest<Result>, sectionNameKeyPath: String? = nil
    ) -> LiveResults<ManagedObjectID> {
        LiveResults(context: self, request: request, sectionNameKeyPath: sectionNameKeyPath, reading: .objectIDs { $0 })
    }

    /// The live results of `request`, each object turned into a `Sendable` value by
    /// `transform` in this context (a row for an API, say): see
    /// ``results(for:sectionNameKeyPath:)``. Objects the changes name are refreshed before
    /// they are transformed (their unsaved changes stay on top), so values are current;
    /// ``ResultsDifference/updated`` lists them.
    public nonisolated func results<Result: ManagedObject, Value: Sendable>(
        for request: FetchRequest<Result>, sectionNameKeyPath: String? = nil,
        transform: @escaping @Sendable (Result) throws -> Value
    ) -> LiveResults<Value> {
        LiveResults(context: self, request: request, sectionNameKeyPath: sectionNameKeyPath, reading: .objects { object in
            guard let typed = object as? Result else {
                throw StrataError.typeMismatch(
                    key: "self", entity: request.entityName, expected: "\(Result.self)", actual: "\(type(of: object))")
            }
            return try transform(typed)
        })
    }
}

/// The live results of a fetch request in a context: see
/// ``ManagedObjectContext/results(for:sectionNameKeyPath:)``.
public struct LiveResults<Value: Sendable>: AsyncSequence, Sendable {
    /// The elements are snapshots.
    public typealias Element = ResultsSnapshot<Value>

    /// What a snapshot reads of each result.
    enum Reading: Sendable {
        /// Object IDs only: with no section key path, fetched as IDs (no object's values
        /// read).
        case objectIDs(@Sendable (ManagedObjectID) -> Value)
        /// A value made from each object, realised in the context.
        case objects(@Sendable (ManagedObject) throws -> Value)
    }

    let context: ManagedObjectContext
    let request: FetchRequest<ManagedObject>
    let sectionNameKeyPath: String?
    let reading: Reading

    init<Result>(
        context: ManagedObjectContext, request: FetchRequest<Result>, sectionNameKeyPath: String?, reading: Reading
    ) {
        self.context = context
        var objects = request.objectRequest()
        objects.relationshipKeyPathsForPrefetching = request.relationshipKeyPathsForPrefetching
        objects.returnsObjectsAsFaults = false   // every result is read: read them in one go
        self.request = objects
        self.sectionNameKeyPath = sectionNameKeyPath
        self.reading = reading
    }

    /// The request as an object-ID fetch.
    var idRequest: FetchRequest<ManagedObjectID> {
        var ids = FetchRequest<ManagedObjectID>(entityName: request.entityName)
        ids.predicate = request.predicate
        ids.sortDescriptors = request.sortDescriptors
        ids.fetchLimit = request.fetchLimit
        ids.fetchOffset = request.fetchOffset
        ids.includesPendingChanges = request.includesPendingChanges
        ids.includesSubentities = request.includesSubentities
        ids.resultType = .managedObjectID
        return ids
    }

    /// An iterator that starts observing at its first `next()`.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(observer: LiveResultsObserver(results: self))
    }

    /// An observer registered now, without its first snapshot and without watching other
    /// processes (no timer): for `strata-profile`, which counts what observers cost a save
    /// on one thread. It observes until the returned value goes.
    package func startObservingSynchronously() throws -> AnyObject {
        let observer = LiveResultsObserver(results: self)
        _ = try observer.start(watchingOtherProcesses: false)
        return observer
    }

    /// Gives the snapshots one at a time; the observer goes with it.
    public struct AsyncIterator: AsyncIteratorProtocol {
        let observer: LiveResultsObserver<Value>

        /// The first snapshot, then the next one that differs, after a change that can
        /// affect the results; nil once the task is cancelled.
        ///
        /// - Throws: the fetch's errors.
        public mutating func next() async throws -> ResultsSnapshot<Value>? {
            try await observer.next()
        }
    }
}

/// What live results keep between snapshots, and what changes mark stale. Registered
/// with the coordinator's ``LiveResultsHub`` and the context's (and its ancestors')
/// notifications from the first `next()` until it goes (with its iterator) or the task
/// is cancelled.
final class LiveResultsObserver<Element: Sendable>: Sendable {
    /// What the request depends on.
    private struct Interest: Sendable {
        /// The entity and, when included, its sub-entities.
        var entities: Set<String> = []
        /// The first component of every key path the request filters, sorts or sections by.
        var keys: Set<String> = []
        /// Whether a key path crosses a relationship: then an update of any entity may matter.
        var followsRelationships = false
    }

    private struct State {
        var started = false
        var ended = false
        var stale = false
        /// Objects of the results the changes named as updated since the last snapshot.
        var updated: Set<ManagedObjectID> = []
        /// The object IDs of the last snapshot.
        var current: Set<ManagedObjectID> = []
        var interest = Interest()
        var waiter: CheckedContinuation<Void, Never>?
        var hub: (LiveResultsHub, UInt64)?
        var contexts: [(ManagedObjectContext, UInt64)] = []
    }

    private let results: LiveResults<Element>
    private let state = LockedValue(State())
    /// The last snapshot's IDs in order and section names (only `next()` touches it, one call at a time).
    private let previous = LockedValue<(ids: [ManagedObjectID], sections: [ResultsSection])?>(nil)

    init(results: LiveResults<Element>) {
        self.results = results
    }

    deinit {
        stop()
    }

    func next() async throws -> ResultsSnapshot<Element>? {
        if state.withLock({ $0.ended }) { return nil }
        if try start() {
            return try await snapshot(refreshing: [])
        }
        while true {
            let proceed = await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let resumeNow = state.withLock { state -> Bool in
                        if state.stale || state.ended { return true }
                        state.waiter = continuation
                        return false
                    }
                    if resumeNow { continuation.resume() }
                }
                return !Task.isCancelled
            } onCancel: {
                let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
                    state.ended = true
                    defer { state.waiter = nil }
                    return state.waiter
                }
                waiter?.resume()
            }
            guard proceed, !state.withLock({ $0.ended }) else {
                stop()
                return nil
            }
            let updated = state.withLock { state -> Set<ManagedObjectID> in
                state.stale = false
                defer { state.updated = [] }
                return state.updated
            }
            let snapshot = try await snapshot(refreshing: updated)
            if !snapshot.difference.isEmpty { return snapshot }
        }
    }

    /// Registers the observer at the first call (returns true then).
    func start(watchingOtherProcesses: Bool = true) throws -> Bool {
        guard !state.withLock({ $0.started }) else { return false }
        let context = results.context
        guard let coordinator = context.persistentStoreCoordinator else { throw StrataError.noCoordinator }
        let interest = try Self.interest(of: results.request, sectionNameKeyPath: results.sectionNameKeyPath, model: coordinator.managedObjectModel)
        state.withLock { state in
            state.started = true
            state.interest = interest
        }
        let offer: @Sendable (LiveChange) -> Void = { [weak self] change in self?.offer(change) }
        let hubID = coordinator.liveResults.add(offer)
        // The context's own changes and merges, and for a child its ancestors' (a sibling's
        // save into the parent changes what the child fetches).
        var contexts: [(ManagedObjectContext, UInt64)] = []
        var next: ManagedObjectContext? = context
        while let observed = next {
            let token = observed.notifier.subscribe(to: [.objectsDidChange, .didMergeChanges]) { [weak self] notification in
                self?.offer(LiveChange(notification))
            }
            contexts.append((observed, token))
            next = observed.parent
        }
        state.withLock { state in
            state.hub = (coordinator.liveResults, hubID)
            state.contexts = contexts
        }
        if watchingOtherProcesses { coordinator.remoteChangeMonitor.update() }   // other processes' commits, while observed
        return true
    }

    /// Unregisters the observer and ends the iteration.
    private func stop() {
        let (hub, contexts, waiter) = state.withLock { state in
            state.ended = true
            defer {
                state.hub = nil
                state.contexts = []
                state.waiter = nil
            }
            return (state.hub, state.contexts, state.waiter)
        }
        if let (hub, id) = hub {
            hub.remove(id)
            results.context.persistentStoreCoordinator?.remoteChangeMonitor.update()
        }
        for (context, token) in contexts { context.notifier.unsubscribe(token) }
        waiter?.resume()
    }

    /// Marks the observer stale when `change` can affect the results, and wakes `next()`.
    /// Costs a look at the change's summary per entity it touched, and set lookups in
    /// proportion to the smaller of the change and the results: never a fetch.
    private func offer(_ change: LiveChange) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.ended else { return nil }
            let interest = state.interest
            var relevant = change.everything
            // Objects of the results that the change updated (reported as updated) or deleted.
            if !change.updated.isEmpty {
                if state.current.count <= change.updated.count {
                    for id in state.current where change.updated.contains(id) { state.updated.insert(id) }
                } else {
                    for id in change.updated where state.current.contains(id) { state.updated.insert(id) }
                }
                if !state.updated.isEmpty { relevant = true }
            }
            if !relevant, !change.deleted.isEmpty {
                relevant = state.current.count <= change.deleted.count
                    ? state.current.contains { change.deleted.contains($0) }
                    : change.deleted.contains { state.current.contains($0) }
            }
            if !relevant {
                // New objects of the entity, or updates of keys the request reads.
                for (entity, entitySummary) in change.entities {
                    let ours = interest.entities.contains(entity)
                    if ours && entitySummary.inserted { relevant = true; break }
                    guard entitySummary.updates, ours || interest.followsRelationships else { continue }
                    if interest.followsRelationships { relevant = true; break }
                    if entitySummary.updatedKeys.map({ !$0.isDisjoint(with: interest.keys) }) ?? true { relevant = true; break }
                }
            }
            guard relevant else { return nil }
            state.stale = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Fetches the results in the context (refreshing the objects in `updated` first),
    /// and the difference from the previous snapshot.
    private func snapshot(refreshing updated: Set<ManagedObjectID>) async throws -> ResultsSnapshot<Element> {
        let request = results.request, sectionKey = results.sectionNameKeyPath, reading = results.reading
        let idRequest = sectionKey == nil ? results.idRequest : nil
        let fetched = try await results.context.perform { context -> (ids: [ManagedObjectID], elements: [Element], names: [String]) in
            // Object IDs without sections: no object to realise, none to refresh.
            if case .objectIDs(let make) = reading, let idRequest {
                let ids = try context.fetch(idRequest)
                return (ids, ids.map(make), [])
            }
            for id in updated {
                guard let object = context.registeredObject(for: id), !object.isInserted else { continue }
                try context.refresh(object, mergeChanges: true)
            }
            let objects = try context.fetch(request)
            var ids: [ManagedObjectID] = [], elements: [Element] = [], names: [String] = []
            ids.reserveCapacity(objects.count)
            elements.reserveCapacity(objects.count)
            for object in objects {
                ids.append(object.objectID)
                switch reading {
                case .objectIDs(let make): elements.append(make(object.objectID))
                case .objects(let transform): elements.append(try transform(object))
                }
                if let sectionKey { names.append(Self.sectionName(try Self.value(at: sectionKey, of: object))) }
            }
            return (ids, elements, names)
        }
        let sections = Self.sections(names: fetched.names, count: fetched.ids.count, sectioned: sectionKey != nil)
        let earlier = previous.withLock { $0 }
        var difference = ResultsDifference()
        if let earlier {
            difference = Self.difference(from: earlier.ids, to: fetched.ids, updated: updated)
            let oldNames = earlier.sections.map { $0.name }, newNames = sections.map { $0.name }
            for change in newNames.difference(from: oldNames) {
                switch change {
                case .insert(let offset, _, _): difference.insertedSections.append(offset)
                case .remove(let offset, _, _): difference.deletedSections.append(offset)
                }
            }
        } else {
            difference.inserted = Array(fetched.ids.indices)
            difference.insertedSections = Array(sections.indices)
        }
        previous.withLock { $0 = (fetched.ids, sections) }
        let current = Set(fetched.ids)
        state.withLock { $0.current = current }
        return ResultsSnapshot(
            elements: fetched.elements, objectIDs: fetched.ids, sections: sections, difference: difference, isInitial: earlier == nil)
    }

    /// Inserted, deleted, moved and updated indexes from `old` to `new`.
    static func difference(from old: [ManagedObjectID], to new: [ManagedObjectID], updated: Set<ManagedObjectID>) -> ResultsDifference {
        var result = ResultsDifference()
        var movedTo = Set<Int>()
        for change in new.difference(from: old).inferringMoves() {
            switch change {
            case .insert(let offset, _, let associated):
                if let from = associated {
                    result.moved.append(.init(from: from, to: offset))
                    movedTo.insert(offset)
                } else {
                    result.inserted.append(offset)
                }
            case .remove(let offset, _, let associated):
                if associated == nil { result.deleted.append(offset) }
            }
        }
        result.moved.sort { $0.to < $1.to }
        if !updated.isEmpty {
            let inserted = Set(result.inserted)
            for (index, id) in new.enumerated() where updated.contains(id) && !inserted.contains(index) {
                result.updated.append(index)
            }
        }
        return result
    }

    /// Runs of equal names as sections.
    static func sections(names: [String], count: Int, sectioned: Bool) -> [ResultsSection] {
        guard count > 0 else { return [] }
        guard sectioned else { return [ResultsSection(name: "", range: 0..<count)] }
        var sections: [ResultsSection] = []
        var start = 0
        for index in 1...count where index == count || names[index] != names[start] {
            sections.append(ResultsSection(name: names[start], range: start..<index))
            start = index
        }
        return sections
    }

    /// A section key's value as text.
    static func sectionName(_ value: Any?) -> String {
        guard let value else { return "" }
        if let object = value as? ManagedObject { return object.objectID.uriRepresentation.absoluteString }
        return "\(value)"
    }

    /// The value at a key path (`folder.name`) of `object`, through to-one relationships.
    static func value(at keyPath: String, of object: ManagedObject) throws -> Any? {
        var current: Any? = object
        for key in keyPath.split(separator: ".") {
            guard let object = current as? ManagedObject else { return nil }
            current = try object.value(forKey: String(key))
        }
        return current
    }

    /// The entities and keys `request` depends on.
    private static func interest(of request: FetchRequest<ManagedObject>, sectionNameKeyPath: String?, model: ManagedObjectModel) throws -> Interest {
        guard model.entitiesByName[request.entityName] != nil else { throw StrataError.unknownEntity(request.entityName) }
        var interest = Interest()
        interest.entities = request.includesSubentities ? Set(model.entityNames(kindOf: request.entityName)) : [request.entityName]
        var paths: [[String]] = request.sortDescriptors.map { $0.key.split(separator: ".").map(String.init) }
        if let sectionNameKeyPath { paths.append(sectionNameKeyPath.split(separator: ".").map(String.init)) }
        if let predicate = request.predicate { paths += predicate.node.keyPaths }
        for path in paths {
            guard let first = path.first else { continue }
            interest.keys.insert(first)
            if path.count > 1 && !path[1].hasPrefix("@") { interest.followsRelationships = true }
            if path.count > 1 { interest.keys.insert(first) }
        }
        return interest
    }
}

extension PredicateNode {
    /// Every key path the predicate reads.
    var keyPaths: [[String]] {
        switch self {
        case .constant: []
        case .not(let node): node.keyPaths
        case .and(let nodes), .or(let nodes): nodes.flatMap(\.keyPaths)
        case .comparison(let comparison): comparison.left.keyPaths + comparison.right.keyPaths
        }
    }
}

extension PredicateExpression {
    /// Every key path the expression reads.
    var keyPaths: [[String]] {
        switch self {
        case .keyPath(let path): [path]
        case .constant, .variable: []
        case .aggregate(let expressions): expressions.flatMap(\.keyPaths)
        }
    }
}
