import Foundation

// A context's parent store: the coordinator for a root context, the parent context for a
// child. Every read a graph makes goes through these, so a child sees its parent's
// current state (unsaved changes included) and then the store, at every level; and a
// pinned root context reads its query generation's snapshots, never the row cache.
extension ObjectGraph {
    /// Whether `id` may have a row upstream: a permanent ID always; a temporary one only
    /// in a child, whose parent may have inserted the object.
    func mayReadUpstream(_ id: ManagedObjectID) -> Bool {
        !id.isTemporaryID || parentContext != nil
    }

    /// The current state of `id` in the parent store; nil when it has none (never saved,
    /// deleted there, or its store is not added).
    func upstreamSnapshot(of id: ManagedObjectID) throws -> ObjectSnapshot? {
        if let parent = parentContext { return try parent.rowForChild(id) }
        guard !id.isTemporaryID else { return nil }
        let coordinator = try coordinator
        guard coordinator.persistentStore(for: id) != nil else { return nil }
        if let generation = try readGeneration() { return try coordinator.snapshot(of: id, in: generation) }
        return try coordinator.snapshot(of: id, staleness: batching.stalenessInterval)
    }

    /// The current states of `ids` in the parent store, in one read; missing ones are
    /// left out.
    func upstreamSnapshots(of ids: [ManagedObjectID]) throws -> [ManagedObjectID: ObjectSnapshot] {
        if let parent = parentContext { return try parent.rowsForChild(ids) }
        let permanent = ids.filter { !$0.isTemporaryID }
        if let generation = try readGeneration() { return try coordinator.snapshots(of: permanent, in: generation) }
        return try coordinator.snapshots(of: permanent, staleness: batching.stalenessInterval)
    }

    /// The current rows of `ids` in the parent store, read in one go (missing ones are
    /// left out): stored records from the stores, snapshots from a parent context or the
    /// row cache.
    func upstreamRows(of ids: [ManagedObjectID]) throws -> [FetchedRow] {
        if let parent = parentContext { return try parent.rowsForChild(ids).values.map(FetchedRow.snapshot) }
        let permanent = ids.filter { !$0.isTemporaryID }
        let (cached, batches) = if let generation = try readGeneration() {
            try coordinator.records(of: permanent, in: generation)
        } else {
            try coordinator.records(of: permanent, staleness: batching.stalenessInterval)
        }
        var rows = cached.map(FetchedRow.snapshot)
        for batch in batches {
            let records = FetchedRecords(batch)
            for index in batch.rows.indices { rows.append(.record(records, index)) }
        }
        return rows
    }

    /// The destinations of `relationship` of `id` in the parent store.
    func upstreamDestinations(of id: ManagedObjectID, relationship: String) throws -> [ManagedObjectID] {
        if let parent = parentContext { return try parent.destinationsForChild(of: [id], relationship: relationship)[id] ?? [] }
        guard !id.isTemporaryID else { return [] }
        let coordinator = try coordinator
        guard coordinator.persistentStore(for: id) != nil else { return [] }
        return try coordinator.destinations(of: id, relationship: relationship, in: readGeneration())
    }

    /// The destinations of `relationship` of each of `owners` in the parent store.
    func upstreamDestinations(of owners: [ManagedObjectID], relationship: String) throws -> [ManagedObjectID: [ManagedObjectID]] {
        if let parent = parentContext { return try parent.destinationsForChild(of: owners, relationship: relationship) }
        return try coordinator.destinations(of: owners.filter { !$0.isTemporaryID }, relationship: relationship, in: readGeneration())
    }

    /// The rows `request` matches in the parent store: the stores' rows for a root
    /// context (one list per store), the parent's own fetch result for a child (one
    /// list, merged with the parent's unsaved changes, sorted and windowed).
    func upstreamFetch<Result>(_ request: FetchRequest<Result>, sink: FetchRowSink? = nil) throws -> [FetchRows] {
        if let parent = parentContext { return try parent.fetchForChild(request) }
        return try coordinator.fetch(request, in: readGeneration(), sink: sink)
    }

    /// How many lists ``upstreamFetch(_:)`` returns for the entity: a child's parent
    /// merges its lists into one, a coordinator returns one per store.
    func upstreamSourceCount<Result>(for request: FetchRequest<Result>) throws -> Int {
        if parentContext != nil { return 1 }
        return try coordinator.stores(for: request).count
    }
}
