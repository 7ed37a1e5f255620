import Foundation
internal import StrataLocks

/// A change that live results (``ManagedObjectContext/results(for:sectionNameKeyPath:)``)
/// may have to follow: what a commit, a batch request, another process's commit or a
/// context's own event changed, with a summary by entity made once by its producer, so
/// that each observer decides in time proportional to its own results, not to the change.
struct LiveChange: Sendable {
    /// What the change did to one entity's objects.
    struct EntitySummary: Sendable {
        var inserted = false
        var updates = false
        /// The keys updated objects of the entity changed (or set); nil when some are
        /// not known (a batch request, another process, a context's event).
        var updatedKeys: Set<String>? = []
    }

    /// Objects inserted.
    var inserted: Set<ManagedObjectID> = []
    /// Objects updated.
    var updated: Set<ManagedObjectID> = []
    /// Objects deleted.
    var deleted: Set<ManagedObjectID> = []
    /// Something changed that names no object (a context reset, another process's
    /// commit to a store without history): every observer looks again.
    var everything = false
    /// The change by entity name.
    var entities: [String: EntitySummary] = [:]

    var isEmpty: Bool { inserted.isEmpty && updated.isEmpty && deleted.isEmpty && !everything }

    init() {}

    /// A change of objects known by ID only: updated keys unknown.
    init(inserted: Set<ManagedObjectID>, updated: Set<ManagedObjectID>, deleted: Set<ManagedObjectID>) {
        self.inserted = inserted
        self.updated = updated
        self.deleted = deleted
        for id in inserted { entities[id.entityName, default: EntitySummary()].inserted = true }
        for id in updated {
            entities[id.entityName, default: EntitySummary()].updates = true
            entities[id.entityName]?.updatedKeys = nil
        }
    }

    /// The change of a batch request or a merge of other processes' changes.
    init(_ changes: BatchChanges) {
        self.init(inserted: Set(changes.inserted), updated: Set(changes.updated), deleted: Set(changes.deleted))
    }

    /// What a context's notification names.
    init(_ notification: ContextNotification) {
        self.init(
            inserted: notification.insertedObjectIDs, updated: notification.updatedObjectIDs.union(notification.refreshedObjectIDs),
            deleted: notification.deletedObjectIDs.union(notification.invalidatedObjectIDs))
        everything = notification.invalidatedAllObjects
    }
}

/// The live results observed on a coordinator: every commit of this process (saves of
/// root contexts, batch requests) and every merge of other processes' commits is offered
/// to each observer, which decides at once, under its own lock, whether it must look
/// again. With no observer, publishing costs one check.
final class LiveResultsHub: Sendable {
    private struct State {
        var observers: [UInt64: @Sendable (LiveChange) -> Void] = [:]
        var next: UInt64 = 0
    }

    private let state = LockedValue(State())
    /// How many observers there are, read without the lock on the save path.
    private let count = LockedValue(0)

    /// Whether anything observes: saves gather their changed keys only then.
    var hasObservers: Bool { count.withLock { $0 > 0 } }

    /// Registers `offer`, called with every change until ``remove(_:)``.
    func add(_ offer: @escaping @Sendable (LiveChange) -> Void) -> UInt64 {
        let id = state.withLock { state in
            state.next += 1
            state.observers[state.next] = offer
            return state.next
        }
        count.withLock { $0 += 1 }
        return id
    }

    /// Removes the observer registered as `id`.
    func remove(_ id: UInt64) {
        let removed = state.withLock { $0.observers.removeValue(forKey: id) }
        if removed != nil { count.withLock { $0 -= 1 } }
    }

    /// Offers `change` to every observer.
    func publish(_ change: LiveChange) {
        guard !change.isEmpty, hasObservers else { return }
        let observers = state.withLock { Array($0.observers.values) }
        for offer in observers { offer(change) }
    }
}
