import Foundation
import StrataLMDB
internal import StrataLocks

/// One open query generation: a pinned LMDB read snapshot of each store, shared by every
/// context pinned to it and reference counted (DESIGN.md "Query generations").
///
/// The snapshots' read transactions end when the last reference goes: the
/// ``GenerationLease``s of the contexts pinned to it, and the saves and merges passing it
/// on. The coordinator's ``QueryGenerationRegistry`` holds it weakly, to share it.
final class QueryGeneration: Sendable {
    /// The state it names.
    let token: QueryGenerationToken
    /// When it was taken.
    let createdAt: ContinuousClock.Instant
    /// The snapshot of each store it was taken of, by store identifier.
    private let snapshots: [UUID: ReadSnapshot]
    /// The snapshot of each server store it was taken of, by store identifier.
    private let serverSnapshots: [UUID: SQLSnapshot]
    /// Snapshots of stores added after it was taken, made at their first read.
    private let lateSnapshots = LockedValue<[UUID: ReadSnapshot]>([:])
    /// Snapshots of server stores added after it was taken, made at their first read.
    private let lateServerSnapshots = LockedValue<[UUID: SQLSnapshot]>([:])
    /// The contexts pinned to it now.
    private let leaseCount = LockedValue(0)
    /// The registry that shares it, told when it goes.
    private let registry: QueryGenerationRegistry

    /// A generation over `snapshots` (and `serverSnapshots`), named by their transaction
    /// ids (and the server snapshots' horizons and descriptions).
    init(snapshots: [UUID: ReadSnapshot], serverSnapshots: [UUID: SQLSnapshot] = [:], registry: QueryGenerationRegistry) {
        self.snapshots = snapshots
        self.serverSnapshots = serverSnapshots
        self.registry = registry
        token = QueryGenerationToken(
            transactions: snapshots.mapValues(\.transactionID).merging(serverSnapshots.mapValues(\.horizon)) { lmdb, _ in lmdb },
            serverStates: serverSnapshots.mapValues(\.state))
        createdAt = .now
    }

    /// The server stores' snapshots it holds open now (those taken with it and those made
    /// since), for the statistics.
    var openServerSnapshots: Int {
        serverSnapshots.values.filter(\.isUsable).count + lateServerSnapshots.withLock { $0.values.filter(\.isUsable).count }
    }

    deinit {
        registry.remove(token, identity: ObjectIdentifier(self))
    }

    /// How long it has been open.
    var age: Duration { ContinuousClock.now - createdAt }

    /// The contexts pinned to it now.
    var leases: Int { leaseCount.withLock { $0 } }

    /// Counts a context pinned to it (``GenerationLease``).
    func lease(_ delta: Int) {
        leaseCount.withLock { $0 += delta }
        registry.leasesChanged(by: delta)
    }

    /// The snapshot `store` is read in: the one taken with the generation, or for a store
    /// added since (or removed and added again), one made at the first read of it.
    ///
    /// - Throws: ``StrataError/storage(_:)`` (``StrataLMDB/LMDBError/readersFull`` when
    ///   no reader slot is free).
    /// - Throws: ``StrataError/unsupportedByStore(store:feature:)`` for a server store
    ///   (whose snapshot is ``serverSnapshot(of:_:idleTimeout:)``'s).
    func snapshot(of store: PersistentStore) throws(StrataError) -> ReadSnapshot {
        let environment = try store.requireLMDB("reading a pinned query generation (setQueryGenerationFrom) of a \(store.type.rawValue) store").environment
        if let snapshot = snapshots[store.identifier], snapshot.environment === environment { return snapshot }
        return try lateSnapshots.withLock { (late: inout [UUID: ReadSnapshot]) throws(StrataError) -> ReadSnapshot in
            if let snapshot = late[store.identifier], snapshot.environment === environment { return snapshot }
            let snapshot = try StoreFile.storage { try environment.makeSnapshot() }
            late[store.identifier] = snapshot
            return snapshot
        }
    }
}

extension QueryGeneration {
    /// The snapshot server store `store` (`sql`) is read in: the one taken with the
    /// generation, or for a store added since (or removed and added again), one made at
    /// the first read of it (`idleTimeout`: ``SQLSnapshot/init(driver:location:idleTimeout:)``).
    ///
    /// - Throws: ``StrataError/queryGenerationUnavailable(_:)`` when the snapshot's
    ///   connection failed or closed (the server ended the transaction: an idle timeout, a
    ///   restart); ``StrataError/database(store:failure:)`` when a new one cannot be taken.
    func serverSnapshot(of store: PersistentStore, _ sql: SQLStore, idleTimeout: Duration?) throws(StrataError) -> SQLSnapshot {
        let snapshot: SQLSnapshot
        if let taken = serverSnapshots[store.identifier] {
            snapshot = taken
        } else {
            snapshot = try lateServerSnapshots.withLock { (late: inout [UUID: SQLSnapshot]) throws(StrataError) -> SQLSnapshot in
                if let made = late[store.identifier] { return made }
                let made = try sql.makeSnapshot(idleTimeout: idleTimeout)
                late[store.identifier] = made
                return made
            }
        }
        guard snapshot.isUsable else { throw .queryGenerationUnavailable(token) }
        return snapshot
    }
}

/// A context's hold on a ``QueryGeneration``: counted while it lives, so the coordinator
/// can report how many contexts are pinned.
final class GenerationLease: Sendable {
    /// The generation held.
    let generation: QueryGeneration

    init(_ generation: QueryGeneration) {
        self.generation = generation
        generation.lease(1)
    }

    deinit {
        generation.lease(-1)
    }
}

/// The open query generations of a coordinator, held weakly and found by token, so that
/// contexts asking for the same state share one snapshot per store.
final class QueryGenerationRegistry: Sendable {
    /// A weak reference to one generation.
    // @unchecked Sendable because `generation` is only read and written with the
    // registry's lock held (and weak references are safe against the object's deinit).
    private final class Entry: @unchecked Sendable {
        weak var generation: QueryGeneration?
        /// Which generation it was, compared without loading the weak reference.
        let identity: ObjectIdentifier

        init(_ generation: QueryGeneration) {
            self.generation = generation
            identity = ObjectIdentifier(generation)
        }
    }

    private let entries = LockedValue<[QueryGenerationToken: Entry]>([:])
    /// The gauges of open generations and pinned contexts, nil without metrics.
    private let metrics: GenerationMetrics?
    /// Generations registered and contexts pinned, for the gauges (kept only with metrics).
    private let counts = LockedValue((open: 0, pinned: 0))

    init(metrics: GenerationMetrics? = nil) {
        self.metrics = metrics
    }

    /// Counts contexts pinned (or let go), for the gauge.
    func leasesChanged(by delta: Int) {
        guard let metrics else { return }
        let now = counts.withLock { counts in
            counts.pinned += delta
            return counts
        }
        metrics.set(open: now.open, pinned: now.pinned)
    }

    /// Counts generations opened (or closed), for the gauge.
    private func generationsChanged(by delta: Int) {
        guard let metrics else { return }
        let now = counts.withLock { counts in
            counts.open += delta
            return counts
        }
        metrics.set(open: now.open, pinned: now.pinned)
    }

    /// The open generation named `token`, if any.
    func generation(named token: QueryGenerationToken) -> QueryGeneration? {
        entries.withLock { entries in entries[token]?.generation }
    }

    /// Registers `generation`, or returns the open one of the same name (taken by another
    /// context meanwhile), dropping `generation`.
    func register(_ generation: QueryGeneration) -> QueryGeneration {
        let (registered, replacedDead) = entries.withLock { entries -> (QueryGeneration?, Bool) in
            if let open = entries[generation.token]?.generation { return (open, false) }
            // An entry whose generation is going (its deinit will not find it) is
            // replaced: the count stays, one generation for another.
            let replacedDead = entries[generation.token] != nil
            entries[generation.token] = Entry(generation)
            return (nil, replacedDead)
        }
        if let registered { return registered }
        if !replacedDead { generationsChanged(by: 1) }
        return generation
    }

    /// Forgets `token`'s entry if it is the generation `identity` (called from its
    /// deinit; a new generation of the same name may have replaced it). The weak
    /// reference is not loaded here: a strong reference released under the lock could
    /// run another generation's deinit, and so this method, inside the lock.
    func remove(_ token: QueryGenerationToken, identity: ObjectIdentifier) {
        let removed = entries.withLock { entries -> Entry? in
            guard entries[token]?.identity == identity else { return nil }
            return entries.removeValue(forKey: token)
        }
        if removed != nil { generationsChanged(by: -1) }
        _ = removed   // released outside the lock
    }

    /// The generations open now.
    var open: [QueryGeneration] {
        entries.withLock { entries in entries.values.compactMap(\.generation) }
    }
}
