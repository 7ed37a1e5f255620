import Foundation
internal import StrataLocks

/// A change that live results (``ManagedObjectContext/results(for:sectionNameKeyPath:)``)
/// may have to follow: what a commit, a batch request, another process's commit or a
/// context's own event changed.
struct LiveChange: Sendable {
    /// Objects inserted.
    var inserted: Set<ManagedObjectID> = []
    /// Objects updated, with the keys that changed; nil keys when they are not known
    /// (a batch request, another process, a context's event).
    var updated: [ManagedObjectID: Set<String>?] = [:]
    /// Objects deleted.
    var deleted: Set<ManagedObjectID> = []
    /// Something changed that names no object (a context reset, another process's
    /// commit to a store without history): every observer looks again.
    var everything = false

    var isEmpty: Bool { inserted.isEmpty && updated.isEmpty && deleted.isEmpty && !everything }

    /// What the change did to one entity, summed once per change so that each observer
    /// decides in time proportional to its own results, not to the change.
    struct EntitySummary: Sendable {
        var inserted = false
        /// The keys updated objects of the entity changed; nil when some are unknown.
        var updatedKeys: Set<String>? = []
        var updates = false
    }

    /// The change by entity name.
    func summary() -> [String: EntitySummary] {
        var entities: [String: EntitySummary] = [:]
        for id in inserted { entities[id.entityName, default: EntitySummary()].inserted = true }
        for (id, keys) in updated {
            var summary = entities[id.entityName, default: EntitySummary()]
            summary.updates = true
            if let keys, summary.updatedKeys != nil { summary.updatedKeys!.formUnion(keys) } else { summary.updatedKeys = nil }
            entities[id.entityName] = summary
        }
        return entities
    }

    /// The change of a batch request or a merge of other processes' changes (no keys).
    init(_ changes: BatchChanges) {
        inserted = Set(changes.inserted)
        for id in changes.updated { updated[id] = .some(nil) }
        deleted = Set(changes.deleted)
    }

    /// What a context's notification names (no keys).
    init(_ notification: ContextNotification) {
        inserted = notification.insertedObjectIDs
        for id in notification.updatedObjectIDs.union(notification.refreshedObjectIDs) { updated[id] = .some(nil) }
        deleted = notification.deletedObjectIDs.union(notification.invalidatedObjectIDs)
        everything = notification.invalidatedAllObjects
    }

    init() {}
}

/// The live results observed on a coordinator: every commit of this process (saves of
/// root contexts, batch requests) and every merge of other processes' commits is offered
/// to each observer, which decides at once, under its own lock, whether it must look
/// again. With no observer, publishing costs one check.
final class LiveResultsHub: Sendable {
    private struct State {
        var observers: [UInt64: @Sendable (LiveChange, [String: LiveChange.EntitySummary]) -> Void] = [:]
        var next: UInt64 = 0
    }

    private let state = LockedValue(State())
    /// How many observers there are, read without the lock on the save path.
    private let count = LockedValue(0)

    /// Whether anything observes: saves gather their changed keys only then.
    var hasObservers: Bool { count.withLock { $0 > 0 } }

    /// Registers `offer`, called with every change (and its summary by entity) until ``remove(_:)``.
    func add(_ offer: @escaping @Sendable (LiveChange, [String: LiveChange.EntitySummary]) -> Void) -> UInt64 {
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
        let summary = change.summary()
        for offer in observers { offer(change, summary) }
    }
}
