import Synchronization
internal import StrataLocks

/// Where a context's rows come from and its saves go: nothing yet, a coordinator (a root
/// context), or a parent context (a child).
enum ContextLineage: Sendable {
    /// Neither yet (``ManagedObjectContext/init(_:name:)``).
    case unset
    /// A root context on this coordinator.
    case coordinator(PersistentStoreCoordinator)
    /// A child of this context.
    case parent(ManagedObjectContext)
}

/// What the contexts of one parent–child tree share: the permanent IDs that temporary IDs
/// became, so an object keeps one identity in every context of the tree.
///
/// An object inserted in a child and saved up the chain is registered under its
/// temporary ID in the child, the middle contexts and the root. When the root saves (or
/// any context of the tree calls `obtainPermanentIDs(for:)`), the new permanent ID is
/// recorded here and the ``generation`` moves. Each context's object graph compares the
/// generation with the last one it adopted the first time it next looks up an ID or an
/// object reads its `objectID`, and then moves its objects to their permanent IDs: the
/// check is one atomic load, and the table's lock is taken only when something is new.
/// (Core Data leaves children with stale temporary IDs; Strata does not.)
///
/// The table is bounded (``capacity`` entries, oldest first out). Every context of the
/// tree also adopts new IDs in a block scheduled right after the root's save, so only a
/// context that runs no block while that many further IDs are made could miss one; it
/// would then keep the temporary ID, which ``ManagedObjectContext/object(with:)`` still
/// resolves while the object is registered.
final class ContextFamily: Sendable {
    /// The most entries kept.
    static let capacity = 1 << 16

    private struct Table: Sendable {
        var permanent: [ManagedObjectID: ManagedObjectID] = [:]
        var temporary: [ManagedObjectID: ManagedObjectID] = [:]
        var order: [ManagedObjectID] = []
        var start = 0
    }

    private let table = LockedValue(Table())
    /// Moves each time IDs are recorded.
    private let counter = Atomic<Int>(0)

    /// Changes whenever new permanent IDs are recorded.
    var generation: Int { counter.load(ordering: .acquiring) }

    /// Records that each temporary ID (key) is now the permanent ID (value).
    func record(_ ids: [ManagedObjectID: ManagedObjectID]) {
        guard !ids.isEmpty else { return }
        table.withLock { table in
            for (temporary, permanent) in ids where temporary != permanent {
                if table.permanent.updateValue(permanent, forKey: temporary) == nil { table.order.append(temporary) }
                table.temporary[permanent] = temporary
            }
            while table.order.count - table.start > Self.capacity {
                let old = table.order[table.start]
                table.start += 1
                if let permanent = table.permanent.removeValue(forKey: old) { table.temporary[permanent] = nil }
            }
            if table.start > Self.capacity {
                table.order.removeFirst(table.start)
                table.start = 0
            }
        }
        counter.add(1, ordering: .releasing)
    }

    /// The permanent ID `temporary` became, if known.
    func permanentID(for temporary: ManagedObjectID) -> ManagedObjectID? {
        table.withLock { $0.permanent[temporary] }
    }

    /// The temporary ID `permanent` had, if known.
    func temporaryID(for permanent: ManagedObjectID) -> ManagedObjectID? {
        table.withLock { $0.temporary[permanent] }
    }

    /// The permanent IDs of those of `temporaries` that have one.
    func permanentIDs(for temporaries: some Sequence<ManagedObjectID>) -> [ManagedObjectID: ManagedObjectID] {
        table.withLock { table in
            var found: [ManagedObjectID: ManagedObjectID] = [:]
            for id in temporaries { if let permanent = table.permanent[id] { found[id] = permanent } }
            return found
        }
    }
}

/// Contexts held weakly: a context's children, and the root contexts of a coordinator
/// that merge its saves by themselves
/// (``ManagedObjectContext/automaticallyMergesChangesFromParent``).
final class WeakContexts: Sendable {
    private struct Entry: Sendable {
        weak var context: ManagedObjectContext?
    }

    private let entries = LockedValue<[Entry]>([])

    /// Adds `context` (once).
    func add(_ context: ManagedObjectContext) {
        update(context, included: true)
    }

    /// Adds or removes `context`.
    func update(_ context: ManagedObjectContext, included: Bool) {
        entries.withLock { entries in
            entries.removeAll { $0.context == nil || $0.context === context }
            if included { entries.append(Entry(context: context)) }
        }
    }

    /// The contexts still alive, in the order they were added.
    var alive: [ManagedObjectContext] {
        entries.withLock { entries in
            entries.removeAll { $0.context == nil }
            return entries.compactMap(\.context)
        }
    }
}
