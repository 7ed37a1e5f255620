import Foundation
import StrataLMDB

extension StoreFile {
    /// Runs `body` with a writer over one LMDB write transaction and commits it when
    /// `body` returns; when `body` throws, the transaction is aborted and nothing of it is
    /// written.
    ///
    /// Synchronous, with no `await` inside: an LMDB write transaction must begin and
    /// commit on one thread (DESIGN.md, "Concurrency"). When the map fills, the
    /// environment grows it and **runs `body` again** from the start (see
    /// ``Environment/write(_:)``), with a fresh writer: compute the writes from the
    /// inputs, and take IDs made by ``StoreWriter/makePermanentID(for:)`` from the run
    /// that returned.
    ///
    /// - Throws: ``StoreWriteError/conflict(_:)``, ``StrataError`` (LMDB failures as
    ///   ``StrataError/storage(_:)``), or what `body` throws.
    @discardableResult
    func write<R>(_ body: (inout StoreWriter) throws -> R) throws -> R {
        let result = try StoreFile.translatingStorageErrors {
            try environment.write { txn in
                try checkModelUnchanged(txn)
                return try withUnsafePointer(to: txn) { transaction in
                    CrashPoint.beforeWrite.reach()
                    var writer = StoreWriter(reader: StoreReader(store: self, transaction: transaction))
                    let result = try body(&writer)
                    try writer.finish()
                    CrashPoint.beforeCommit.reach()
                    return result
                }
            }
        }
        CrashPoint.afterCommit.reach()
        return result
    }

    /// Runs `body` with one LMDB write transaction of this store and commits it when
    /// `body` returns, for several saves in one commit (group commit): `body` writes each
    /// through ``write(nestedIn:_:)``. Same rules as ``write(_:)``: synchronous, aborted
    /// when `body` throws, and **run again from the start** when the map grows.
    @discardableResult
    func writeGroup<R>(_ body: (UnsafePointer<WriteTransaction>) throws -> R) throws -> R {
        let result = try StoreFile.translatingStorageErrors {
            try environment.write { txn in
                try checkModelUnchanged(txn)
                return try withUnsafePointer(to: txn) { transaction in
                    CrashPoint.beforeWrite.reach()
                    let result = try body(transaction)
                    CrashPoint.beforeCommit.reach()
                    return result
                }
            }
        }
        CrashPoint.afterCommit.reach()
        return result
    }

    /// Runs `body` with a writer over a nested transaction of `parent` (a transaction of
    /// ``writeGroup(_:)``): when `body` throws, none of its writes stay and `parent` goes
    /// on as before, so one save of a group fails alone.
    @discardableResult
    func write<R>(nestedIn parent: UnsafePointer<WriteTransaction>, _ body: (inout StoreWriter) throws -> R) throws -> R {
        try StoreFile.translatingStorageErrors {
            try parent.pointee.nested { txn in
                try withUnsafePointer(to: txn) { transaction in
                    var writer = StoreWriter(reader: StoreReader(store: self, transaction: transaction))
                    let result = try body(&writer)
                    try writer.finish()
                    return result
                }
            }
        }
    }
}

/// Writes objects into a ``StoreFile`` inside one LMDB write transaction, keeping rows,
/// indexes and links consistent. Lent by ``StoreFile/write(_:)``.
///
/// Every write checks its input and throws a typed error instead of writing something
/// inconsistent: ``StrataError/invalidObjectState(_:reason:)`` for a temporary ID, an ID
/// of another store or of an abstract entity, ``StrataError/unknownEntity(_:)``,
/// ``StrataError/typeMismatch(key:entity:expected:actual:)`` for a value of the wrong
/// type or a destination of the wrong entity, and ``StoreWriteError/conflict(_:)`` when
/// the stored row version is not the expected one.
struct StoreWriter: ~Copyable {
    /// Reads the store as this transaction has written it so far.
    let reader: StoreReader<WriteTransaction>
    /// The last primary key assigned per entity (by name), as read from the metadata or
    /// assigned since, and whether it changed; changed ones are written back by ``finish()``.
    private var sequences: [String: (last: UInt64, changed: Bool)] = [:]
    /// The sequence keys are being taken from now: kept apart so that taking the next
    /// key hashes nothing (``makePermanentKey(for:)``).
    private var current: (storage: EntityStorage, last: UInt64)?
    /// The next free link position per (links database, owner), once computed.
    var nextPositions: [LinkOwner: UInt64] = [:]
    /// The latest snapshot of each object with an ordered one-to-many relationship
    /// written in this transaction: their links are ordered by ``finish()``.
    var pendingOrders: [ManagedObjectID: ObjectSnapshot] = [:]
    /// The last key appended to each entity's rows in this transaction, indexed by entity
    /// number (0 for none; entity numbers are small and dense). An array, not a
    /// dictionary: it is read and written for every new row.
    private var lastAppended: [UInt64] = []

    /// The owner of links in one links database.
    struct LinkOwner: Hashable {
        /// The links database.
        var database: Database
        /// The owner of the links.
        var owner: RowReference
    }

    /// A writer over the transaction `reader` reads.
    init(reader: consuming StoreReader<WriteTransaction>) {
        self.reader = reader
    }

    /// The store.
    var store: StoreFile { reader.store }

    // MARK: Primary keys

    /// A new permanent ID for an object of `entityName`: the entity's next primary key.
    ///
    /// Keys come from a per-entity sequence kept in the metadata (DESIGN.md, "Store
    /// layout"), cached in the writer and written back once before the commit. A
    /// committed key is never handed out again, even after its row is deleted; the keys
    /// of a transaction that aborted were never recorded, so they are.
    ///
    /// - Throws: ``StrataError/unknownEntity(_:)``,
    ///   ``StrataError/invalidObjectState(_:reason:)`` for an abstract entity.
    mutating func makePermanentID(for entityName: String) throws -> ManagedObjectID {
        let storage = try store.entityStorage(named: entityName)
        return store.objectID(entity: entityName, key: PrimaryKey(try makePermanentKey(for: storage))!)
    }

    /// ``makePermanentID(for:)`` as a bare primary key.
    mutating func makePermanentKey(for storage: EntityStorage) throws -> UInt64 {
        try StoreFile.translatingStorageErrors {
            let entityName = storage.name
            guard storage.rows != nil else {
                throw StrataError.invalidObjectState(
                    ManagedObjectID(temporaryFor: entityName), reason: "entity \(entityName) is abstract: it has no instances of its own")
            }
            let last: UInt64
            if let current, current.storage === storage {
                last = current.last
            } else {
                settleCurrentSequence()
                last = try lastPrimaryKey(of: entityName)
            }
            guard let key = PrimaryKey(last &+ 1), last < .max else {
                throw StrataError.incompatibleStore(store: store.path, reason: "entity \(entityName) has used every primary key")
            }
            current = (storage, key.rawValue)
            return key.rawValue
        }
    }

    /// Records the sequence keys were taken from last as changed.
    private mutating func settleCurrentSequence() {
        guard let current else { return }
        sequences[current.storage.name] = (current.last, true)
        self.current = nil
    }

    /// The last primary key assigned to `entityName` (0 when none was).
    private mutating func lastPrimaryKey(of entityName: String) throws -> UInt64 {
        if let cached = sequences[entityName] { return cached.last }
        let key = Array(StoreMetadata.Key.sequence(entity: entityName).utf8)
        let last = try reader.transaction.pointee.withValue(forKey: key, in: store.metadataDatabase) { bytes throws -> UInt64 in
            guard let bytes else { return 0 }
            do throws(MetadataDecodingError) {
                return try StoreMetadata.decodeUInt64(bytes, what: "primary-key sequence of \(entityName)")
            } catch {
                throw StrataError.incompatibleStore(store: store.path, reason: "its metadata is damaged: \(error.reason)")
            }
        }
        sequences[entityName] = (last, false)
        return last
    }

    /// Makes sure the sequence of `entityName` is at least `key`, so that a key stored
    /// under an ID made elsewhere is never handed out again.
    private mutating func noteUsed(_ key: PrimaryKey, of entityName: String) throws {
        settleCurrentSequence()
        if try lastPrimaryKey(of: entityName) < key.rawValue {
            sequences[entityName] = (key.rawValue, true)
        }
    }

    /// Writes the changed sequences back to the metadata: once per transaction.
    fileprivate mutating func finish() throws {
        let orders = pendingOrders
        pendingOrders = [:]
        for (_, snapshot) in orders.sorted(by: { $0.key.description < $1.key.description }) {
            try orderOneToManyLinks(of: snapshot)
        }
        settleCurrentSequence()
        for (entityName, sequence) in sequences.sorted(by: { $0.key < $1.key }) where sequence.changed {
            try reader.transaction.pointee.put(
                StoreMetadata.bigEndian(sequence.last), forKey: Array(StoreMetadata.Key.sequence(entity: entityName).utf8),
                in: store.metadataDatabase)
            sequences[entityName] = (sequence.last, false)
        }
    }

    // MARK: Rows

    /// Stores a new object: its row (version 1), its index entries and its links.
    ///
    /// `snapshot.objectID` must be a permanent ID of this store (from
    /// ``makePermanentID(for:)``). A to-many relationship's `.toMany` destinations are
    /// stored for a many-to-many relationship; for a one-to-many one they only order
    /// the links the destinations' own foreign keys made (``StoreFile``).
    ///
    /// - Returns: the new row version, 1.
    /// - Throws: ``StrataError/invalidObjectState(_:reason:)`` when the row exists, and
    ///   the errors listed on ``StoreWriter``.
    @discardableResult
    mutating func insert(_ snapshot: ObjectSnapshot) throws -> UInt64 {
        let (storage, key) = try store.row(of: snapshot.objectID)
        var rows = EncodedRows()
        try RowEncoder.append(snapshot, storage: storage, key: key.rawValue, baseVersion: 0, carriesID: true, to: &rows)
        _ = try writeChecked(rows, deleting: [])
        return 1
    }

    /// Stores a changed object, if its row is still at `snapshot.version` (optimistic
    /// locking): the row with the version bumped, its changed index entries, its links.
    ///
    /// A to-one relationship given as `.notLoaded` keeps its stored value; a to-many one
    /// given as `.notLoaded` keeps its links.
    ///
    /// - Returns: the new row version.
    /// - Throws: ``StoreWriteError/conflict(_:)`` when the row is at another version or
    ///   no longer exists, and the errors listed on ``StoreWriter``.
    @discardableResult
    mutating func update(_ snapshot: ObjectSnapshot) throws -> UInt64 {
        let (storage, key) = try store.row(of: snapshot.objectID)
        guard snapshot.version > 0 else {
            let stored = try StoreFile.translatingStorageErrors { try reader.version(at: key, of: storage) }
            throw StoreWriteError.conflict([StoreConflict(objectID: snapshot.objectID, expectedVersion: 0, storedVersion: stored)])
        }
        var rows = EncodedRows()
        try RowEncoder.append(snapshot, storage: storage, key: key.rawValue, baseVersion: snapshot.version, carriesID: true, to: &rows)
        _ = try apply(rows, deleting: [], checking: [])
        return snapshot.version + 1
    }

    /// Deletes an object: its row, its index entries, its links and, for a
    /// many-to-many relationship, the other side's links to it.
    ///
    /// Rows that still hold a foreign key to the object are left as they are: the
    /// context nullifies (or cascades to) them in the same save, by its delete rules.
    ///
    /// - Parameter expectedVersion: the version the delete was based on; nil to delete
    ///   whatever is stored.
    /// - Returns: false when there was no row (and no version was expected).
    /// - Throws: ``StoreWriteError/conflict(_:)`` when the row is at another version, or
    ///   is gone while a version was expected.
    @discardableResult
    mutating func delete(_ id: ManagedObjectID, expectedVersion: UInt64?) throws -> Bool {
        try StoreFile.translatingStorageErrors {
            let (storage, key) = try store.row(of: id)
            let stored = try reader.record(at: key, of: storage)
            if let expectedVersion, stored?.version != expectedVersion {
                throw StoreWriteError.conflict([StoreConflict(objectID: id, expectedVersion: expectedVersion, storedVersion: stored?.version)])
            }
            guard let stored, let rows = storage.rows else { return false }
            try reader.transaction.pointee.delete(forKey: key.encoded, in: rows)
            try updateIndexes(storage: storage, key: key, old: stored, new: nil)
            let reference = RowReference(entityNumber: storage.number, primaryKey: key).encoded
            for constraint in storage.constraints {
                guard let entry = constraint.key(of: stored) else { continue }
                let holder = try reader.transaction.pointee.withValue(forKey: entry, in: constraint.database) { $0.map(Array.init) }
                if holder == reference { try reader.transaction.pointee.delete(forKey: entry, in: constraint.database) }
            }
            try deleteRelationships(storage: storage, key: key, stored: stored)
            return true
        }
    }

    /// Applies one save: checks every expected version first and throws every conflict
    /// at once, then deletes, inserts and updates (ordered one-to-many relationships are
    /// ordered when the transaction finishes, after every foreign key moved).
    ///
    /// - Returns: the new row version of every inserted and updated object.
    /// - Throws: ``StoreWriteError/conflict(_:)`` with all conflicts, before anything is
    ///   written; the errors of ``insert(_:)``, ``update(_:)`` and ``delete(_:expectedVersion:)``.
    mutating func apply(_ changes: StoreChanges) throws -> [ManagedObjectID: UInt64] {
        var rows = EncodedRows()
        for snapshot in changes.inserted {
            let (storage, key) = try store.row(of: snapshot.objectID)
            try RowEncoder.append(snapshot, storage: storage, key: key.rawValue, baseVersion: 0, carriesID: true, to: &rows)
        }
        for snapshot in changes.updated {
            let (storage, key) = try store.row(of: snapshot.objectID)
            guard snapshot.version > 0 else {
                throw StoreWriteError.conflict([StoreConflict(objectID: snapshot.objectID, expectedVersion: 0, storedVersion: nil)])
            }
            try RowEncoder.append(snapshot, storage: storage, key: key.rawValue, baseVersion: snapshot.version, carriesID: true, to: &rows)
        }
        _ = try apply(rows, deleting: changes.deleted, checking: changes.checked)
        var versions: [ManagedObjectID: UInt64] = [:]
        for snapshot in changes.inserted { versions[snapshot.objectID] = 1 }
        for snapshot in changes.updated { versions[snapshot.objectID] = snapshot.version + 1 }
        return versions
    }

    /// Applies one save: checks the base version of every changed row, deletion and
    /// check first and throws every conflict at once, then deletes, then writes `rows`
    /// (``write(_:)``).
    ///
    /// - Returns: the primary key of each row of `rows`, in order.
    /// - Throws: ``StoreWriteError/conflict(_:)`` with all conflicts, before anything is
    ///   written; the errors of ``write(_:)`` and ``delete(_:expectedVersion:)``.
    mutating func apply(
        _ rows: EncodedRows, deleting deleted: [StoreChanges.Deletion], checking checked: [StoreChanges.Deletion]
    ) throws -> [UInt64] {
        try apply(rows, deleting: deleted, checking: checked, merging: nil).keys
    }

    /// Applies one save, its conflicts settled by `merging`'s policy when it has one: checks
    /// the base version of every changed row, deletion and check first; with no conflict,
    /// deletes, then writes `rows` (``write(_:)``). Conflicts fail the save, all at once and
    /// before anything is written, unless `merging` settles them (a failed
    /// ``ManagedObjectContext/detectConflicts(for:)`` check always fails it); then the
    /// merged save is written (``merge(_:deleting:merging:rowConflicts:deletionConflicts:)``).
    ///
    /// - Returns: the primary key of each row of `rows`, in order, and what the merge did
    ///   (nil when there was no conflict).
    /// - Throws: ``StoreWriteError/conflict(_:)`` with all conflicts (each with the stored
    ///   state), before anything is written; the errors of ``write(_:)`` and
    ///   ``delete(_:expectedVersion:)``; what a custom merge policy throws.
    mutating func apply(
        _ rows: EncodedRows, deleting deleted: [StoreChanges.Deletion], checking checked: [StoreChanges.Deletion],
        merging: SaveMerging?
    ) throws -> (keys: [UInt64], merge: MergeResult?) {
        var rowConflicts: [(index: Int, stored: UInt64?)] = []
        var deletionConflicts: [(index: Int, stored: UInt64?)] = []
        var checkConflicts: [StoreConflict] = []
        try StoreFile.translatingStorageErrors {
            for (index, row) in rows.rows.enumerated() where !row.isInsert {
                guard let storage = store.entityStorage(numbered: row.entity), let key = PrimaryKey(row.key) else { continue }
                let stored = try reader.version(at: key, of: storage)
                if stored != row.baseVersion { rowConflicts.append((index, stored)) }
            }
            for (index, deletion) in deleted.enumerated() {
                guard let expected = deletion.expectedVersion else { continue }
                let (storage, key) = try store.row(of: deletion.objectID)
                let stored = try reader.version(at: key, of: storage)
                if stored != expected { deletionConflicts.append((index, stored)) }
            }
            for check in checked {
                guard let expected = check.expectedVersion else { continue }
                let (storage, key) = try store.row(of: check.objectID)
                let stored = try reader.version(at: key, of: storage)
                if stored != expected {
                    checkConflicts.append(StoreConflict(objectID: check.objectID, expectedVersion: expected, storedVersion: stored))
                }
            }
        }
        var unique: UniqueChanges?
        if rowConflicts.isEmpty && deletionConflicts.isEmpty && checkConflicts.isEmpty {
            let changes = try uniqueChanges(rows, deleting: deleted)
            guard !changes.conflicts.isEmpty, let merging, merging.policy.merges else {
                return (try writeChecked(rows, deleting: deleted, unique: changes), nil)
            }
            unique = changes   // nothing was written: the merge settles the constraints it can (upserts)
        }
        if let merging, merging.policy.merges, checkConflicts.isEmpty {
            // (Also reached with no version conflict, for the save's constraint conflicts.)
            let (keys, result) = try merge(
                rows, deleting: deleted, merging: merging, rowConflicts: rowConflicts, deletionConflicts: deletionConflicts,
                unique: unique)
            return (keys, result)
        }
        // Every conflict, with the stored state for its record.
        var conflicts: [StoreConflict] = []
        for (index, stored) in rowConflicts {
            let row = rows.rows[index]
            guard let storage = store.entityStorage(numbered: row.entity), let key = PrimaryKey(row.key) else { continue }
            let id = store.objectID(entity: storage.name, key: key)
            conflicts.append(StoreConflict(
                objectID: id, expectedVersion: row.baseVersion, storedVersion: stored, persisted: try persistedSnapshot(of: id)))
        }
        for (index, stored) in deletionConflicts {
            let deletion = deleted[index]
            conflicts.append(StoreConflict(
                objectID: deletion.objectID, expectedVersion: deletion.expectedVersion ?? 0, storedVersion: stored,
                persisted: try persistedSnapshot(of: deletion.objectID)))
        }
        for var conflict in checkConflicts {
            conflict.persisted = try persistedSnapshot(of: conflict.objectID)
            conflicts.append(conflict)
        }
        throw StoreWriteError.conflict(conflicts)
    }

    /// Deletes `deleted` and writes `rows` (their versions checked already), keeping the
    /// unique indexes: the save's uniqueness constraints are checked first.
    ///
    /// - Returns: the primary key of each row.
    /// - Throws: ``StoreWriteError/constraintConflict(_:)`` with every constraint the save
    ///   breaks, before anything is written; the errors of ``write(_:)`` and
    ///   ``delete(_:expectedVersion:)``.
    mutating func writeChecked(
        _ rows: EncodedRows, deleting deleted: [StoreChanges.Deletion], unique checked: UniqueChanges? = nil
    ) throws -> [UInt64] {
        let unique = try checked ?? uniqueChanges(rows, deleting: deleted)
        guard unique.conflicts.isEmpty else { throw StoreWriteError.constraintConflict(records(of: unique.conflicts, in: rows)) }
        // The first row written is where `mid-write` crashes (CrashPoint).
        var midWrite: CrashPoint? = .midWrite
        for deletion in deleted {
            try delete(deletion.objectID, expectedVersion: deletion.expectedVersion)
            midWrite?.reach(); midWrite = nil
        }
        let keys = try write(rows, reachingMidWrite: midWrite != nil)
        try applyUniqueChanges(unique, rows: rows, keys: keys)
        return keys
    }

    /// Writes `rows`: new rows get their entity's next primary key (when they have none)
    /// and version 1; changed rows are written at their base version + 1, keeping the
    /// fields of their stored record this model does not know; then every index entry
    /// and link follows. New rows are appended to their entity's rows (`MDB_APPEND`)
    /// when their keys ascend, and index entries are put in key order, which is LMDB's
    /// cheapest way to fill a B-tree.
    ///
    /// Base versions are not checked here (``apply(_:deleting:checking:)`` does).
    ///
    /// - Returns: the primary key of each row, in order.
    /// - Throws: ``StrataError/invalidObjectState(_:reason:)`` when a new row's key is
    ///   stored already, or a changed row is gone; the errors listed on ``StoreWriter``.
    mutating func write(_ rows: EncodedRows, reachingMidWrite: Bool = false) throws -> [UInt64] {
        try StoreFile.translatingStorageErrors {
            var keys = [UInt64](repeating: 0, count: rows.count)
            // Keys first, so that references among the new rows resolve.
            var permanentIDs: [ManagedObjectID: ManagedObjectID] = [:]
            // Rows are read field by field: copying a whole row (its ID and relationships
            // included) costs more than the row's own write.
            for index in rows.rows.indices {
                let entity = rows.rows[index].entity
                guard let storage = store.entityStorage(numbered: entity) else {
                    throw StrataError.unknownEntity("number \(entity)")
                }
                let key = rows.rows[index].key
                if key == 0 {
                    keys[index] = try makePermanentKey(for: storage)
                    if let id = rows.rows[index].objectID, id.isTemporaryID {
                        permanentIDs[id] = store.objectID(entity: storage.name, key: PrimaryKey(keys[index])!)
                    }
                } else {
                    keys[index] = key
                }
            }
            var indexEntries = IndexEntryBatches()
            try rows.bytes.withUnsafeBytes { bytes in
                var index = 0
                while index < rows.rows.count {
                    let entity = rows.rows[index].entity
                    guard let storage = store.entityStorage(numbered: entity), let key = PrimaryKey(keys[index]) else {
                        index += 1
                        continue
                    }
                    let record = UnsafeRawBufferPointer(rebasing: bytes[rows.rows[index].record])
                    let indexValues = UnsafeRawBufferPointer(rebasing: bytes[rows.rows[index].indexValues])
                    let isInsert = rows.rows[index].isInsert
                    if rows.rows[index].relationships != nil {
                        try writeRelated(rows.rows[index], record: record, storage: storage, key: key, permanentIDs: permanentIDs)
                    } else if isInsert {
                        try insertRow(record, key: key, storage: storage, id: rows.rows[index].objectID, assigned: rows.rows[index].key == 0)
                        addIndexEntries(indexValues, storage: storage, key: key, to: &indexEntries)
                    } else if let table = storage.rows {
                        // A run of changed rows of one entity through one cursor: rows
                        // saved in key order are each the next entry or a few on.
                        var end = index + 1
                        while end < rows.rows.count, rows.rows[end].entity == entity, !rows.rows[end].isInsert,
                              rows.rows[end].relationships == nil {
                            end += 1
                        }
                        let first = index, txn = reader.transaction
                        try txn.pointee.withCursor(on: table) { cursor in
                            var at: UInt64?
                            for member in first..<end {
                                guard let memberKey = PrimaryKey(keys[member]) else { continue }
                                try updateRow(
                                    UnsafeRawBufferPointer(rebasing: bytes[rows.rows[member].record]),
                                    indexValues: UnsafeRawBufferPointer(rebasing: bytes[rows.rows[member].indexValues]),
                                    key: memberKey, storage: storage, cursor: cursor, at: &at)
                                if reachingMidWrite && member == 0 { CrashPoint.midWrite.reach() }
                            }
                        }
                        index = end
                        continue
                    }
                    if reachingMidWrite && index == 0 { CrashPoint.midWrite.reach() }
                    index += 1
                }
            }
            for batch in indexEntries.batches {
                try batch.forEachInOrder { entry in
                    try reader.transaction.pointee.put(UnsafeRawBufferPointer(start: nil, count: 0), forKey: entry, in: batch.database)
                }
            }
            return keys
        }
    }

    /// Puts a new row. A key this transaction took from the sequence is greater than every
    /// stored key, so the row is appended when it also follows the rows appended before.
    private mutating func insertRow(_ record: UnsafeRawBufferPointer, key: PrimaryKey, storage: EntityStorage, id: ManagedObjectID?, assigned: Bool) throws {
        guard let rows = storage.rows else {
            throw StrataError.invalidObjectState(
                id ?? store.objectID(entity: storage.name, key: key), reason: "entity \(storage.name) is abstract, so it has no rows")
        }
        let txn = reader.transaction
        var encoded = key.rawValue.bigEndian
        try withUnsafeBytes(of: &encoded) { keyBytes in
            let entity = Int(storage.number)
            if assigned, key.rawValue > (entity < lastAppended.count ? lastAppended[entity] : 0) {
                do {
                    try txn.pointee.put(record, forKey: keyBytes, in: rows, flags: [.noOverwrite, .append])
                    if entity >= lastAppended.count { lastAppended += repeatElement(0, count: entity + 1 - lastAppended.count) }
                    lastAppended[entity] = key.rawValue
                    return
                } catch LMDBError.keyExists {
                    // Not after the last stored key after all: an ordinary put says whether it exists.
                }
            }
            do {
                try txn.pointee.put(record, forKey: keyBytes, in: rows, flags: .noOverwrite)
            } catch LMDBError.keyExists {
                throw StrataError.invalidObjectState(id ?? store.objectID(entity: storage.name, key: key), reason: "it is already stored; update it instead")
            }
        }
        if !assigned { try noteUsed(key, of: storage.name) }
    }

    /// Rewrites a changed row with its new record (keeping stored fields this model does
    /// not know) and moves its changed index entries.
    ///
    /// The stored record is read in place (in LMDB's page, before anything is written):
    /// only its version, whether it holds unknown fields, and the values of indexed
    /// attributes are taken from it. `cursor` walks the entity's rows (`at`: see
    /// ``Cursor/moveToRow(_:from:)``); the new record replaces the entry where it stands.
    private mutating func updateRow(
        _ record: UnsafeRawBufferPointer, indexValues: UnsafeRawBufferPointer, key: PrimaryKey, storage: EntityStorage,
        cursor: borrowing Cursor, at: inout UInt64?
    ) throws {
        let txn = reader.transaction
        let indexed = storage.indexedSlots
        // The stored value part of each indexed attribute, in `indexed` order: an attribute
        // the record does not hold is nil, which is indexed too.
        var oldParts = indexed.map { slot in storage.attributes[slot].indexKind.flatMap { IndexLayout.valuePart(nil, kind: $0) } }
        var hasUnknownFields = false
        var keyBytes = key.rawValue.bigEndian
        let stored = try cursor.moveToRow(key.rawValue, from: &at)
        guard let stored else {
            throw StoreWriteError.conflict([StoreConflict(objectID: store.objectID(entity: storage.name, key: key), expectedVersion: 0, storedVersion: nil)])
        }
        var fields = RecordCodec.Reader(stored)
        var version: UInt64 = 0
        do throws(RecordDecodingError) {
            version = try fields.header()
            while let (number, tag) = try fields.nextField() {
                switch storage.field(numbered: number) {
                case nil:
                    hasUnknownFields = true
                    try fields.skip(tag)
                case .attribute(let slot):
                    guard let position = indexed.firstIndex(of: slot), let kind = storage.attributes[slot].indexKind else {
                        try fields.skip(tag)
                        continue
                    }
                    oldParts[position] = IndexLayout.valuePart(try fields.value(tag), kind: kind)
                case .relationship:
                    try fields.skip(tag)
                }
            }
        } catch {
            throw StrataError.corruptRecord(entity: storage.name, primaryKey: key.rawValue, reason: error.reason)
        }
        guard version < .max else {
            throw StrataError.corruptRecord(entity: storage.name, primaryKey: key.rawValue, reason: "its version cannot grow any more")
        }
        if !hasUnknownFields {
            try withUnsafeBytes(of: &keyBytes) { encodedKey throws(LMDBError) in try cursor.replaceCurrent(key: encodedKey, with: record) }
        } else if let rows = storage.rows {
            // Rare (a store written by a newer model): keep the fields this one does not know.
            at = nil   // written past the cursor: search next time
            guard let stored = try reader.record(at: key, of: storage) else { return }
            var merged = try RecordCodec.decode(record)
            merged.fields.merge(stored.fields.filter { storage.fields[$0.key] == nil }) { own, _ in own }
            try txn.pointee.put(RecordCodec.encode(merged), forKey: key.encoded, in: rows)
        }
        var position = 0
        try RowEncoder.forEachIndexValue(indexValues) { newPart in
            let slot = indexed[position]
            let oldPart = oldParts[position]
            position += 1
            guard let index = storage.attributes[slot].index else { return }
            if let oldPart, !newPart.isEmpty, oldPart.elementsEqual(newPart) { return }   // unchanged
            if oldPart == nil && newPart.isEmpty { return }
            if let oldPart { try txn.pointee.delete(forKey: oldPart + key.encoded, in: index) }
            if !newPart.isEmpty { try txn.pointee.put([UInt8](), forKey: Array(newPart) + key.encoded, in: index) }
        }
    }

    /// Adds the index entries of a new row to `entries`, put in order by ``write(_:)``.
    private func addIndexEntries(_ indexValues: UnsafeRawBufferPointer, storage: EntityStorage, key: PrimaryKey, to entries: inout IndexEntryBatches) {
        var position = 0
        RowEncoder.forEachIndexValue(indexValues) { part in
            let slot = storage.indexedSlots[position]
            position += 1
            guard !part.isEmpty, let index = storage.attributes[slot].index else { return }
            entries.add(part, primaryKey: key.rawValue, to: index)
        }
    }

    /// Writes a row of an entity with relationships: its record with the foreign keys of
    /// its to-one relationships (destinations new in this save have their keys by now),
    /// its index entries and its links, as its relationships say.
    private mutating func writeRelated(
        _ row: EncodedRow, record encoded: UnsafeRawBufferPointer, storage: EntityStorage, key: PrimaryKey,
        permanentIDs: [ManagedObjectID: ManagedObjectID]
    ) throws {
        var snapshot = ObjectSnapshot(
            objectID: store.objectID(entity: storage.name, key: key), version: row.baseVersion,
            attributes: [], relationships: row.relationships ?? [])
        snapshot = snapshot.replacingIDs(permanentIDs)
        let stored: Record?
        if row.isInsert {
            stored = nil
        } else {
            stored = try reader.record(at: key, of: storage)
            guard let stored else {
                throw StoreWriteError.conflict([StoreConflict(objectID: snapshot.objectID, expectedVersion: row.baseVersion, storedVersion: nil)])
            }
            guard stored.version < .max else {
                throw StrataError.corruptRecord(entity: storage.name, primaryKey: key.rawValue, reason: "its version cannot grow any more")
            }
        }
        let attributes = try RecordCodec.decode(encoded)
        var record = Record(version: row.baseVersion + 1, fields: stored?.fields ?? [:])
        for attribute in storage.attributes {
            guard let field = attribute.field else { continue }
            record.fields[field] = attributes.fields[field]
        }
        for (slot, relationship) in storage.relationships.enumerated() {
            guard let field = relationship.field, slot < snapshot.relationships.count else { continue }
            switch snapshot.relationships[slot] {
            case .toOne(nil):
                record.fields[field] = nil
            case .toOne(let id?):
                record.fields[field] = .foreignKey(try destinationReference(id, of: relationship, in: storage))
            case .notLoaded:
                break  // keep the stored value
            case .toMany:
                throw StrataError.typeMismatch(
                    key: relationship.description.name, entity: storage.name,
                    expected: "\(relationship.description.destinationEntityName)?", actual: "a to-many value")
            }
        }
        guard let rows = storage.rows else { return }
        let flags: PutFlags = row.isInsert ? .noOverwrite : []
        do {
            try reader.transaction.pointee.put(RecordCodec.encode(record), forKey: key.encoded, in: rows, flags: flags)
        } catch LMDBError.keyExists {
            throw StrataError.invalidObjectState(snapshot.objectID, reason: "it is already stored; update it instead")
        }
        if row.isInsert && row.key != 0 { try noteUsed(key, of: storage.name) }
        try updateIndexes(storage: storage, key: key, old: stored, new: record)
        try writeRelationships(snapshot, storage: storage, key: key, old: stored, new: record)
    }

    /// The reference to `id` as a destination of `relationship`.
    ///
    /// - Throws: the errors of ``StoreFile/row(of:)``, and
    ///   ``StrataError/typeMismatch(key:entity:expected:actual:)`` when `id`'s entity is
    ///   not of the relationship's destination entity.
    func destinationReference(_ id: ManagedObjectID, of relationship: StoredRelationship, in storage: EntityStorage) throws -> RowReference {
        let (destination, key) = try store.row(of: id)
        guard destination.entity.isKind(of: relationship.description.destinationEntityName) else {
            throw StrataError.typeMismatch(
                key: relationship.description.name, entity: storage.name,
                expected: relationship.description.destinationEntityName, actual: id.entityName)
        }
        return RowReference(entityNumber: destination.number, primaryKey: key)
    }

    /// Replaces the index entries of row `key` that changed from `old` to `new` (nil:
    /// no row). A nil value has an entry too.
    func updateIndexes(storage: EntityStorage, key: PrimaryKey, old: Record?, new: Record?) throws {
        let txn = reader.transaction
        for attribute in storage.attributes {
            guard let index = attribute.index, let kind = attribute.indexKind, let field = attribute.field else { continue }
            let oldKey = old.flatMap { IndexLayout.key($0.fields[field], kind: kind, primaryKey: key) }
            let newKey = new.flatMap { IndexLayout.key($0.fields[field], kind: kind, primaryKey: key) }
            guard oldKey != newKey else { continue }
            if let oldKey { try txn.pointee.delete(forKey: oldKey, in: index) }
            if let newKey { try txn.pointee.put([UInt8](), forKey: newKey, in: index) }
        }
    }
}

/// The index entries of a write's new rows, kept per index database in one buffer each,
/// to be put in key order (sorted puts touch each B-tree page once, where puts in row
/// order land all over the tree).
struct IndexEntryBatches {
    /// One index database's entries.
    struct Batch {
        let database: Database
        /// The entries (value part, then the 8-byte primary key), back to back.
        var bytes: [UInt8] = []
        /// Where each entry is in `bytes`, with its first 8 bytes as a big-endian number
        /// (zero-padded), which orders most pairs without reading the bytes.
        var entries: [(prefix: UInt64, start: Int32, count: Int32)] = []

        /// Adds the entry of `part` for row `primaryKey`.
        mutating func append(_ part: UnsafeRawBufferPointer, primaryKey: UInt64) {
            let start = bytes.count
            bytes.append(contentsOf: part)
            var key = primaryKey.bigEndian
            withUnsafeBytes(of: &key) { bytes.append(contentsOf: $0) }
            var prefix: UInt64
            if part.count >= 8 {
                prefix = UInt64(bigEndian: part.loadUnaligned(as: UInt64.self))
            } else {
                // The part, then the key's first bytes.
                prefix = 0
                for byte in part { prefix = prefix << 8 | UInt64(byte) }
                prefix = prefix << (8 * UInt64(8 - part.count)) | primaryKey >> (8 * UInt64(part.count))
            }
            entries.append((prefix, Int32(start), Int32(part.count + 8)))
        }

        /// Calls `body` with every entry, in key order (bytewise, as LMDB compares).
        func forEachInOrder(_ body: (UnsafeRawBufferPointer) throws -> Void) throws {
            try bytes.withUnsafeBytes { buffer in
                guard let base = buffer.baseAddress else { return }
                for entry in IndexEntryOrder.sorted(entries, base: base) {
                    try body(UnsafeRawBufferPointer(start: base + Int(entry.start), count: Int(entry.count)))
                }
            }
        }
    }

    private(set) var batches: [Batch] = []

    /// Adds the entry of `part` for row `primaryKey` to `database`'s batch.
    mutating func add(_ part: UnsafeRawBufferPointer, primaryKey: UInt64, to database: Database) {
        // Entries of one index usually come in a row: look at the last batch first.
        if let last = batches.indices.last, batches[last].database == database {
            batches[last].append(part, primaryKey: primaryKey)
        } else if let found = batches.firstIndex(where: { $0.database == database }) {
            batches[found].append(part, primaryKey: primaryKey)
        } else {
            var batch = Batch(database: database)
            batch.append(part, primaryKey: primaryKey)
            batches.append(batch)
        }
    }
}
