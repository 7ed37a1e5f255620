import Foundation
import StrataLMDB

/// Reading rows for faults, batches and prefetching: through the coordinator's
/// ``RowCache`` (under a context's staleness interval), and many at once in one read
/// transaction per store.
extension PersistentStoreCoordinator {
    /// Counts one read transaction in ``storeReadCount``; called just before each.
    nonisolated func countRead() {
        readStatistics.withLock { $0 += 1 }
    }

    /// How many read transactions this coordinator has opened (fetches, faults,
    /// batches, prefetching). For tests and diagnostics.
    nonisolated var storeReadCount: Int { readStatistics.withLock { $0 } }

    /// The state of `id`: its cached row when that is no older than `staleness` seconds
    /// (negative: any age; 0: never cached), else read from the store and cached.
    ///
    /// - Returns: nil when the row does not exist.
    nonisolated func snapshot(of id: ManagedObjectID, staleness: Double) throws -> ObjectSnapshot? {
        if let cached = rowCache.snapshot(of: id, staleness: staleness) {
            try checkUsable(store: id.storeIdentifier)
            return cached
        }
        let epoch = rowCache.epoch, stamp = RowCache.now
        let snapshot = try snapshot(of: id)
        if let snapshot { rowCache.fill(CollectionOfOne(snapshot), readAt: stamp, epoch: epoch) }
        return snapshot
    }

    /// The states of `ids` (permanent IDs of added stores; others are skipped): cached
    /// rows no older than `staleness`, the rest read in one read transaction per store
    /// and cached. Rows that do not exist are missing from the result.
    nonisolated func snapshots(of ids: some Sequence<ManagedObjectID>, staleness: Double) throws -> [ManagedObjectID: ObjectSnapshot] {
        var found: [ManagedObjectID: ObjectSnapshot] = [:]
        var missing: [UUID: [ManagedObjectID]] = [:]
        var cachedStores: Set<UUID> = []
        for id in ids {
            if let cached = rowCache.snapshot(of: id, staleness: staleness) {
                found[id] = cached
                if let store = id.storeIdentifier { cachedStores.insert(store) }
            } else if let store = id.storeIdentifier {
                missing[store, default: []].append(id)
            }
        }
        for store in cachedStores { try checkUsable(store: store) }
        for (identifier, wanted) in missing {
            guard let store = persistentStores.first(where: { $0.identifier == identifier }) else { continue }
            let epoch = rowCache.epoch, stamp = RowCache.now
            countRead()
            let rows = try store.readSnapshots(of: wanted)
            rowCache.fill(rows, readAt: stamp, epoch: epoch)
            for row in rows { found[row.objectID] = row }
        }
        return found
    }

    /// The rows of `ids` (permanent IDs of added stores; others are skipped): cached rows
    /// no older than `staleness`, as snapshots, and the rest as their stored records, read
    /// in one read transaction per store (not cached: a batch of faults reads each row
    /// once). Rows that do not exist are missing.
    nonisolated func records(of ids: some Sequence<ManagedObjectID>, staleness: Double) throws -> (cached: [ObjectSnapshot], batches: [RowBatch]) {
        var cached: [ObjectSnapshot] = []
        var missing: [UUID: [ManagedObjectID]] = [:]
        var cachedStores: Set<UUID> = []
        for id in ids {
            if let row = rowCache.snapshot(of: id, staleness: staleness) {
                cached.append(row)
                if let store = id.storeIdentifier { cachedStores.insert(store) }
            } else if let store = id.storeIdentifier {
                missing[store, default: []].append(id)
            }
        }
        for store in cachedStores { try checkUsable(store: store) }
        var batches: [RowBatch] = []
        for (identifier, wanted) in missing {
            guard let store = persistentStores.first(where: { $0.identifier == identifier }) else { continue }
            countRead()
            switch store.backend {
            case .lmdb(let file): batches.append(try file.readRecords(of: wanted))
            case .sql(let sql): cached += try sql.snapshots(of: wanted)   // a server store's rows come as snapshots
            }
        }
        return (cached, batches)
    }

    /// Calls `body` with each of `objects` whose row `store` holds (by entity and primary
    /// key), with the row's stored record, in one read transaction, not cached: the
    /// record is valid only during the call. Objects without a row are skipped.
    nonisolated func forEachRecord(
        of objects: [ManagedObject], in store: PersistentStore,
        _ body: (ManagedObject, EntityStorage, PrimaryKey, UnsafeRawBufferPointer) throws -> Void
    ) throws {
        countRead()
        try store.requireLMDB("reading stored records").forEachRecord(of: objects, body)
    }

    /// The rows of `ids` in `generation`'s snapshots: stored records of LMDB stores,
    /// snapshots of server stores' rows.
    nonisolated func records(
        of ids: some Sequence<ManagedObjectID>, in generation: QueryGeneration
    ) throws -> (snapshots: [ObjectSnapshot], batches: [RowBatch]) {
        var byStore: [UUID: [ManagedObjectID]] = [:]
        for id in ids {
            if let store = id.storeIdentifier { byStore[store, default: []].append(id) }
        }
        var snapshots: [ObjectSnapshot] = []
        var batches: [RowBatch] = []
        for (identifier, wanted) in byStore {
            guard let store = persistentStores.first(where: { $0.identifier == identifier }) else { continue }
            switch store.backend {
            case .lmdb(let file): batches.append(try file.readRecords(of: wanted, in: try generation.snapshot(of: store)))
            case .sql(let sql): snapshots += try sql.snapshots(of: wanted, in: try serverSnapshot(of: store, sql, in: generation))
            }
        }
        return (snapshots, batches)
    }

    /// Throws ``StrataError/storage(_:)`` of ``LMDBError/environmentUnusable`` when the
    /// store `identifier` names is terminal (``PersistentStore/terminalError``): its
    /// cached rows are not served either, since every read of it fails.
    private nonisolated func checkUsable(store identifier: UUID?) throws(StrataError) {
        guard let identifier, let store = persistentStores.first(where: { $0.identifier == identifier }), let file = store.file else { return }
        try StoreFile.storage { try file.environment.checkUsable() }
    }

    /// The stored destinations of `relationship` (to-many) of every object in `ids`, in
    /// one read transaction per store (or in `generation`'s snapshots). Temporary IDs and IDs of stores not added are
    /// missing from the result.
    nonisolated func destinations(
        of ids: some Sequence<ManagedObjectID>, relationship: String, in generation: QueryGeneration? = nil
    ) throws -> [ManagedObjectID: [ManagedObjectID]] {
        var byStore: [UUID: [ManagedObjectID]] = [:]
        for id in ids {
            if let store = id.storeIdentifier { byStore[store, default: []].append(id) }
        }
        var found: [ManagedObjectID: [ManagedObjectID]] = [:]
        for (identifier, owners) in byStore {
            guard let store = persistentStores.first(where: { $0.identifier == identifier }) else { continue }
            if generation == nil { countRead() }
            let links = switch store.backend {
            case .lmdb(let file): try file.readDestinations(of: owners, relationship: relationship, in: try generation?.snapshot(of: store))
            case .sql(let sql):
                try sql.destinations(of: owners, relationship: relationship, in: try generation.map { try serverSnapshot(of: store, sql, in: $0) })
            }
            found.merge(links) { $1 }
        }
        return found
    }

    /// Records a committed save in the row cache: the rows it changed or deleted leave
    /// it (new rows cannot be in it). A row is cached again when a context reads it, so
    /// a save builds no cache entry nobody may read (DESIGN.md, "Object layout and cost").
    nonisolated func cacheSavedRows(_ saves: [StoreSave], outcome: SaveOutcome) {
        evictRows(of: saves)
    }

    /// Forgets the cached rows a save changed or deleted (after its commit, or after it
    /// failed: a commit may have gone through in one store and not in another).
    nonisolated func evictRows(of saves: [StoreSave]) {
        var ids: [ManagedObjectID] = []
        for save in saves {
            ids += save.deleted.map(\.objectID)
            for row in save.rows.rows where !row.isInsert {
                guard let storage = save.store.entityStorage(numbered: row.entity), let key = PrimaryKey(row.key) else { continue }
                ids.append(save.store.objectID(entity: storage.name, key: key))
            }
        }
        rowCache.didSave(written: [], deleted: ids)
    }

    private static func isToMany(_ id: ManagedObjectID, slot: Int, in model: ManagedObjectModel) -> Bool {
        guard let entity = model.entitiesByName[id.entityName], slot < entity.relationships.count else { return true }
        return entity.relationships[slot].isToMany
    }
}

// Several rows or link lists in one read transaction. Not written as
// `read { reader in … }` with a body of their own: specialising `StoreFile.read` for such
// bodies crashes the 6.3.1 optimiser in release builds ("Cannot initialize a nonCopyable
// type with a guaranteed value", EarlyPerfInliner), so the reader is made here directly.
extension StoreFile {
    /// The rows of `ids` that exist, read in one transaction (or in `snapshot`).
    func readSnapshots(of ids: [ManagedObjectID], in snapshot: ReadSnapshot? = nil) throws -> [ObjectSnapshot] {
        try withReadTransaction(in: snapshot) { txn in
            try withUnsafePointer(to: txn) { transaction in
                let reader = StoreReader(store: self, transaction: transaction)
                var rows: [ObjectSnapshot] = []
                rows.reserveCapacity(ids.count)
                for id in ids {
                    if let row = try reader.snapshot(of: id) { rows.append(row) }
                }
                return rows
            }
        }
    }

    /// The stored records of the rows of `ids` that exist, read in one transaction (or in
    /// `snapshot`).
    func readRecords(of ids: [ManagedObjectID], in snapshot: ReadSnapshot? = nil) throws -> RowBatch {
        try withReadTransaction(in: snapshot) { txn in
            var batch = RowBatch(store: self)
            for id in ids {
                let (storage, key) = try row(of: id)
                guard let rows = storage.rows else { continue }
                var encoded = key.rawValue.bigEndian
                try withUnsafeBytes(of: &encoded) { keyBytes in
                    try txn.withValue(forKey: keyBytes, in: rows) { record in
                        if let record { batch.append(entity: storage, key: key, record: record) }
                    }
                }
            }
            return batch
        }
    }

    /// Calls `body` with each of `objects` whose row exists (by entity and primary key)
    /// and its stored record, in one read transaction; the record is valid only during
    /// the call.
    func forEachRecord(
        of objects: [ManagedObject], _ body: (ManagedObject, EntityStorage, PrimaryKey, UnsafeRawBufferPointer) throws -> Void
    ) throws {
        try withReadTransaction(in: nil) { txn in
            var start = 0
            // Each run of rows of one entity through one cursor: rows asked for in key
            // order (a fetch's batch) are mostly the next entry or a few entries on,
            // reached without a search from the root (``Cursor/moveToRow(_:from:)``).
            while start < objects.count {
                let entity = objects[start].entity
                var end = start + 1
                while end < objects.count, objects[end].entity === entity { end += 1 }
                let storage = try entityStorage(named: entity.name)
                if let table = storage.rows {
                    try txn.withCursor(on: table) { cursor in
                        var at: UInt64?   // the key the cursor is at
                        for object in objects[start..<end] {
                            guard let key = PrimaryKey(object.rowKey) else { continue }
                            if let record = try cursor.moveToRow(key.rawValue, from: &at) { try body(object, storage, key, record) }
                        }
                    }
                }
                start = end
            }
        }
    }

    /// The destinations of `relationship` of each of `owners`, read in one transaction
    /// (or in `snapshot`).
    func readDestinations(
        of owners: [ManagedObjectID], relationship: String, in snapshot: ReadSnapshot? = nil
    ) throws -> [ManagedObjectID: [ManagedObjectID]] {
        try withReadTransaction(in: snapshot) { txn in
            try withUnsafePointer(to: txn) { transaction in
                let reader = StoreReader(store: self, transaction: transaction)
                var links: [ManagedObjectID: [ManagedObjectID]] = [:]
                for owner in owners { links[owner] = try reader.destinations(of: owner, relationship: relationship) }
                return links
            }
        }
    }
}
