import Foundation
import StrataLMDB

// Query generations (DESIGN.md "Query generations"): pinned LMDB snapshots, shared by
// token, reference counted, observable.
extension PersistentStoreCoordinator {
    /// What a context does at its next read when its query generation is older than a
    /// maximum age: nothing (``QueryGenerationAgePolicy/unlimited``, the default), fail,
    /// or advance to the newest state. Applies to every context of this coordinator from
    /// its next read on; settable from any thread.
    ///
    /// ```swift
    /// coordinator.queryGenerationAgePolicy = .advance(after: .seconds(300))
    /// ```
    public nonisolated var queryGenerationAgePolicy: QueryGenerationAgePolicy {
        get { generationAgePolicy.withLock { $0 } }
        set { generationAgePolicy.withLock { $0 = newValue } }
    }

    /// The query generations open now, the contexts pinned to them, and each store's
    /// reader slots: watch these, since every open generation stops LMDB from reusing
    /// pages (the file grows) and holds a reader slot. See <doc:QueryGenerations>.
    public nonisolated var queryGenerationStatistics: QueryGenerationStatistics {
        let open = generations.open
        // Only LMDB stores have reader slots; a server store's pinned snapshots are counted apart.
        let stores = persistentStores.compactMap(\.file).map { file in
            let environment = file.environment
            let info = environment.info
            let readers = environment.readers().compactMap(\.transactionID)
            return QueryGenerationStatistics.StoreReaders(
                storeIdentifier: file.identifier, readerSlotsInUse: readers.count, maxReaders: info.maxReaders,
                oldestReaderLag: readers.min().map { max(0, info.lastTransactionID - $0) } ?? 0)
        }
        return QueryGenerationStatistics(
            openGenerations: open.count, pinnedContexts: open.reduce(0) { $0 + $1.leases },
            oldestGenerationAge: open.map(\.age).max(), stores: stores,
            serverSnapshots: open.reduce(0) { $0 + $1.openServerSnapshots })
    }

    // MARK: For contexts

    /// The token of the newest committed state of every store, from each environment's
    /// last transaction id (no reader slot is taken).
    nonisolated func newestToken() -> QueryGenerationToken {
        var transactions: [UUID: Int] = [:]
        for file in persistentStores.compactMap(\.file) { transactions[file.identifier] = file.environment.info.lastTransactionID }
        return QueryGenerationToken(transactions: transactions)
    }

    /// A generation of the newest committed state: the open one when a context already
    /// took it, else a new snapshot of every store.
    ///
    /// - Throws: ``StrataError/storage(_:)``: ``StrataLMDB/LMDBError/readersFull`` when a
    ///   store has no free reader slot.
    nonisolated func newestGeneration() throws(StrataError) -> QueryGeneration {
        let stores = persistentStores
        // A server store's newest state has no name without a snapshot: a generation of
        // one is new each time (taken in one round trip).
        if !stores.contains(where: { $0.sql != nil }), let open = generations.generation(named: newestToken()) { return open }
        var snapshots: [UUID: ReadSnapshot] = [:]
        var serverSnapshots: [UUID: SQLSnapshot] = [:]
        for store in stores {
            switch store.backend {
            case .lmdb(let file):
                snapshots[file.identifier] = try StoreFile.storage { try file.environment.makeSnapshot() }
            case .sql(let sql):
                serverSnapshots[store.identifier] = try sql.makeSnapshot(idleTimeout: queryGenerationAgePolicy.maximumAge)
            }
        }
        return generations.register(QueryGeneration(snapshots: snapshots, serverSnapshots: serverSnapshots, registry: generations))
    }

    /// The generation `token` names: ``QueryGenerationToken/current`` is the newest; any
    /// other is the open generation of that name, or a new one when its state is still
    /// the newest of every store it names (the same transaction ids are the same state).
    ///
    /// - Throws: ``StrataError/queryGenerationUnavailable(_:)`` when its snapshot is gone
    ///   and a store it names has committed since (or is not added);
    ///   ``StrataError/storage(_:)``.
    nonisolated func generation(for token: QueryGenerationToken) throws(StrataError) -> QueryGeneration {
        guard let transactions = token.transactions else { return try newestGeneration() }
        if let open = generations.generation(named: token) { return open }
        let stores = persistentStores
        var snapshots: [UUID: ReadSnapshot] = [:]
        var serverSnapshots: [UUID: SQLSnapshot] = [:]
        for (identifier, transaction) in transactions {
            guard let store = stores.first(where: { $0.identifier == identifier }) else { throw .queryGenerationUnavailable(token) }
            switch store.backend {
            case .lmdb(let file):
                guard file.environment.info.lastTransactionID == transaction else { throw .queryGenerationUnavailable(token) }
                let snapshot = try StoreFile.storage { try file.environment.makeSnapshot() }
                // A commit may have landed between the check and the snapshot.
                guard snapshot.transactionID == transaction else { throw .queryGenerationUnavailable(token) }
                snapshots[identifier] = snapshot
            case .sql(let sql):
                // The state is still the newest when a new snapshot is described the same.
                let snapshot = try sql.makeSnapshot(idleTimeout: queryGenerationAgePolicy.maximumAge)
                guard snapshot.horizon == transaction, snapshot.state == token.serverStates[identifier] else {
                    throw .queryGenerationUnavailable(token)
                }
                serverSnapshots[identifier] = snapshot
            }
        }
        return generations.register(QueryGeneration(snapshots: snapshots, serverSnapshots: serverSnapshots, registry: generations))
    }

    /// The stored state of `id` in `generation`'s snapshot (never the row cache, which
    /// holds newer rows); nil when its row does not exist there.
    nonisolated func snapshot(of id: ManagedObjectID, in generation: QueryGeneration) throws -> ObjectSnapshot? {
        let store = try store(of: id)
        switch store.backend {
        case .lmdb(let file): return try file.readSnapshots(of: [id], in: try generation.snapshot(of: store)).first
        case .sql(let sql): return try sql.snapshots(of: [id], in: try serverSnapshot(of: store, sql, in: generation)).first
        }
    }

    /// `generation`'s snapshot of server store `store`.
    nonisolated func serverSnapshot(of store: PersistentStore, _ sql: SQLStore, in generation: QueryGeneration) throws(StrataError) -> SQLSnapshot {
        try generation.serverSnapshot(of: store, sql, idleTimeout: queryGenerationAgePolicy.maximumAge)
    }

    /// The states of `ids` in `generation`'s snapshots; rows that do not exist there,
    /// temporary IDs and IDs of stores not added are missing from the result.
    nonisolated func snapshots(of ids: some Sequence<ManagedObjectID>, in generation: QueryGeneration) throws -> [ManagedObjectID: ObjectSnapshot] {
        var byStore: [UUID: [ManagedObjectID]] = [:]
        for id in ids {
            if let store = id.storeIdentifier { byStore[store, default: []].append(id) }
        }
        var found: [ManagedObjectID: ObjectSnapshot] = [:]
        let stores = persistentStores
        for (identifier, wanted) in byStore {
            guard let store = stores.first(where: { $0.identifier == identifier }) else { continue }
            let rows = switch store.backend {
            case .lmdb(let file): try file.readSnapshots(of: wanted, in: try generation.snapshot(of: store))
            case .sql(let sql): try sql.snapshots(of: wanted, in: try serverSnapshot(of: store, sql, in: generation))
            }
            for row in rows { found[row.objectID] = row }
        }
        return found
    }
}
