import Foundation
internal import StrataExecution

// Parent–child contexts: the requests a child makes of its parent, synchronously, from
// inside its own blocks, and the merges a save schedules in the contexts that merge
// automatically. Only Sendable values cross: IDs, snapshots, fetch requests, change sets.
extension ManagedObjectContext {
    /// Runs `body` on this context for one of its children, which waits for it.
    ///
    /// The child's thread holds the child (and maybe more contexts below it): the request
    /// goes through the executor's internal-request path, which runs it at once when this
    /// thread already holds the parent, never lends the waiting child's holdings to
    /// anyone else, and reports a wait that could never end as
    /// ``StrataError/wouldDeadlock(_:)`` instead of hanging (see
    /// <doc:ParentAndChildContexts>).
    nonisolated func servingChild<T: Sendable>(_ body: (isolated ManagedObjectContext) throws -> T) throws -> T {
        try withoutActuallyEscaping(body) { body in
            // Carried as ``IsolatedBody`` for the reason given there: the block is
            // isolated to this context and runs here while the child waits.
            let body = IsolatedBody(body)
            return try contextExecutor.runInternalRequest {
                try assumeIsolated { context in try body.call(context) }
            }
        }
    }

    /// A child's fault: the row of `id` as this context sees it.
    nonisolated func rowForChild(_ id: ManagedObjectID) throws -> ObjectSnapshot? {
        try servingChild { context in try context.graph.rowsForChild([id])[id] }
    }

    /// A child's batch of faults: the rows of `ids` as this context sees them.
    nonisolated func rowsForChild(_ ids: [ManagedObjectID]) throws -> [ManagedObjectID: ObjectSnapshot] {
        try servingChild { context in try context.graph.rowsForChild(ids) }
    }

    /// A child's relationship fault: destinations as this context sees them.
    nonisolated func destinationsForChild(
        of owners: [ManagedObjectID], relationship: String
    ) throws -> [ManagedObjectID: [ManagedObjectID]] {
        try servingChild { context in try context.graph.destinationsForChild(of: owners, relationship: relationship) }
    }

    /// A child's fetch, answered by this context's own fetch.
    nonisolated func fetchForChild<Result>(_ request: FetchRequest<Result>) throws -> [FetchRows] {
        try servingChild { context in try context.graph.fetchForChild(request) }
    }

    /// A child's save into this context: applied, announced here (ObjectsDidChange), and
    /// merged into the child's siblings that merge automatically.
    ///
    /// - Returns: what settling the save's conflicts did (by the child's merge policy).
    nonisolated func acceptChildSave(_ save: ChildSave, from child: ManagedObjectContext) throws -> MergeResult {
        try servingChild { context in
            let (changed, merge) = try context.graph.acceptChildSave(save)
            try? context.processPendingChanges()
            let siblings = context.children.alive.filter { $0 !== child }
            if !siblings.isEmpty { context.scheduleAutomaticMerges(of: ChangedObjectIDs(changed), into: siblings) }
            return merge
        }
    }

    /// After a save of this context: the merges of the contexts that merge it
    /// automatically. A root context's save reaches its children and the other root
    /// contexts of its coordinator that merge automatically; every descendant also adopts
    /// the permanent IDs the save made. A child's save reaches its siblings through the
    /// parent (``acceptChildSave(_:from:)``).
    /// The IDs of what the save changed are gathered only when some context merges them.
    func didSaveToParentStore(_ saved: ObjectChangeSets) {
        guard parent == nil else { return }
        var targets = children.alive
        if let coordinator = persistentStoreCoordinator {
            targets += coordinator.mergingContexts.alive.filter { context in context !== self && !targets.contains { $0 === context } }
        }
        if !targets.isEmpty { scheduleAutomaticMerges(of: ChangedObjectIDs(saved), into: targets) }
        for child in children.alive { child.scheduleAdoptingPermanentIDs() }
    }

    /// Schedules, in each of `contexts`, a block that merges `changes` if the context
    /// merges automatically (it decides in its own block, with its current setting).
    nonisolated func scheduleAutomaticMerges(of changes: ChangedObjectIDs, into contexts: [ManagedObjectContext]) {
        guard !changes.isEmpty else { return }
        for context in contexts {
            context.perform { context in
                guard context.automaticallyMergesChangesFromParent else { return }
                try? context.mergeChanges(
                    inserted: changes.inserted, updated: changes.updated, deleted: changes.deleted, generation: changes.queryGeneration)
            }
        }
    }

    /// Schedules a block that moves this context's objects, and its descendants', to the
    /// permanent IDs their temporary ones became.
    nonisolated func scheduleAdoptingPermanentIDs() {
        perform { context in context.graph.adoptPermanentIDsIfNeeded() }
        for child in children.alive { child.scheduleAdoptingPermanentIDs() }
    }
}
