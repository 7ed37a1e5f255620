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
                try withUnsafePointer(to: txn) { transaction in
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
                try withUnsafePointer(to: txn) { transaction in
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
    /// The last primary key assigned per entity, as read from the metadata or assigned
    /// since; written back by ``finish()``.
    private var sequences: [String: UInt64] = [:]
    private var changedSequences: Set<String> = []
    /// The next free link position per (links database, owner), once computed.
    var nextPositions: [LinkOwner: UInt64] = [:]
    /// The latest snapshot of each object with an ordered one-to-many relationship
    /// written in this transaction: their links are ordered by ``finish()``.
    var pendingOrders: [ManagedObjectID: ObjectSnapshot] = [:]

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
        try StoreFile.translatingStorageErrors {
            let storage = try store.entityStorage(named: entityName)
            guard storage.rows != nil else {
                throw StrataError.invalidObjectState(
                    ManagedObjectID(temporaryFor: entityName), reason: "entity \(entityName) is abstract: it has no instances of its own")
            }
            let last = try lastPrimaryKey(of: entityName)
            guard let key = PrimaryKey(last &+ 1), last < .max else {
                throw StrataError.incompatibleStore(store: store.path, reason: "entity \(entityName) has used every primary key")
            }
            sequences[entityName] = key.rawValue
            changedSequences.insert(entityName)
            return store.objectID(entity: entityName, key: key)
        }
    }

    /// The last primary key assigned to `entityName` (0 when none was).
    private mutating func lastPrimaryKey(of entityName: String) throws -> UInt64 {
        if let cached = sequences[entityName] { return cached }
        let key = Array(StoreMetadata.Key.sequence(entity: entityName).utf8)
        let last = try reader.transaction.pointee.withValue(forKey: key, in: store.metadataDatabase) { bytes throws -> UInt64 in
            guard let bytes else { return 0 }
            do throws(MetadataDecodingError) {
                return try StoreMetadata.decodeUInt64(bytes, what: "primary-key sequence of \(entityName)")
            } catch {
                throw StrataError.incompatibleStore(store: store.path, reason: "its metadata is damaged: \(error.reason)")
            }
        }
        sequences[entityName] = last
        return last
    }

    /// Makes sure the sequence of `entityName` is at least `key`, so that a key stored
    /// under an ID made elsewhere is never handed out again.
    private mutating func noteUsed(_ key: PrimaryKey, of entityName: String) throws {
        if try lastPrimaryKey(of: entityName) < key.rawValue {
            sequences[entityName] = key.rawValue
            changedSequences.insert(entityName)
        }
    }

    /// Writes the changed sequences back to the metadata: once per transaction.
    fileprivate mutating func finish() throws {
        let orders = pendingOrders
        pendingOrders = [:]
        for (_, snapshot) in orders.sorted(by: { $0.key.description < $1.key.description }) {
            try orderOneToManyLinks(of: snapshot)
        }
        for entityName in changedSequences.sorted() {
            guard let last = sequences[entityName] else { continue }
            try reader.transaction.pointee.put(
                StoreMetadata.bigEndian(last), forKey: Array(StoreMetadata.Key.sequence(entity: entityName).utf8),
                in: store.metadataDatabase)
        }
        changedSequences = []
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
        try StoreFile.translatingStorageErrors {
            let (storage, key) = try store.row(of: snapshot.objectID)
            let record = try makeRecord(snapshot, storage: storage, version: 1, stored: nil)
            do {
                try putRow(record, key: key, storage: storage, flags: .noOverwrite)
            } catch LMDBError.keyExists {
                throw StrataError.invalidObjectState(snapshot.objectID, reason: "it is already stored; update it instead")
            }
            try noteUsed(key, of: storage.name)
            try updateIndexes(storage: storage, key: key, old: nil, new: record)
            try writeRelationships(snapshot, storage: storage, key: key, old: nil, new: record)
            return record.version
        }
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
        try StoreFile.translatingStorageErrors {
            let (storage, key) = try store.row(of: snapshot.objectID)
            let stored = try reader.record(at: key, of: storage)
            guard let stored, stored.version == snapshot.version else {
                throw StoreWriteError.conflict([
                    StoreConflict(objectID: snapshot.objectID, expectedVersion: snapshot.version, storedVersion: stored?.version),
                ])
            }
            guard stored.version < .max else {
                throw StrataError.corruptRecord(entity: storage.name, primaryKey: key.rawValue, reason: "its version cannot grow any more")
            }
            let record = try makeRecord(snapshot, storage: storage, version: stored.version + 1, stored: stored)
            try putRow(record, key: key, storage: storage, flags: [])
            try updateIndexes(storage: storage, key: key, old: stored, new: record)
            try writeRelationships(snapshot, storage: storage, key: key, old: stored, new: record)
            return record.version
        }
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
        var conflicts: [StoreConflict] = []
        let expectations = changes.updated.map { ($0.objectID, $0.version) }
            + (changes.deleted + changes.checked).compactMap { deletion in deletion.expectedVersion.map { (deletion.objectID, $0) } }
        for (id, expected) in expectations {
            let stored = try StoreFile.translatingStorageErrors {
                let (storage, key) = try store.row(of: id)
                return try reader.record(at: key, of: storage)?.version
            }
            if stored != expected {
                conflicts.append(StoreConflict(objectID: id, expectedVersion: expected, storedVersion: stored))
            }
        }
        guard conflicts.isEmpty else { throw StoreWriteError.conflict(conflicts) }

        var versions: [ManagedObjectID: UInt64] = [:]
        // The first row written is where `mid-write` crashes (CrashPoint).
        var midWrite: CrashPoint? = .midWrite
        for deletion in changes.deleted {
            try delete(deletion.objectID, expectedVersion: deletion.expectedVersion)
            midWrite?.reach(); midWrite = nil
        }
        for snapshot in changes.inserted {
            versions[snapshot.objectID] = try insert(snapshot)
            midWrite?.reach(); midWrite = nil
        }
        for snapshot in changes.updated {
            versions[snapshot.objectID] = try update(snapshot)
            midWrite?.reach(); midWrite = nil
        }
        return versions
    }

    // MARK: Records and indexes

    /// The record of `snapshot`: its stored attributes and to-one foreign keys, over the
    /// `stored` record's fields (which keeps fields this model does not know, and
    /// `.notLoaded` to-one relationships).
    private func makeRecord(_ snapshot: ObjectSnapshot, storage: EntityStorage, version: UInt64, stored: Record?) throws -> Record {
        precondition(
            snapshot.attributes.count == storage.attributes.count && snapshot.relationships.count == storage.relationships.count,
            "the snapshot of \(snapshot.objectID) does not have the shape of entity \(storage.name)")
        var record = Record(version: version, fields: stored?.fields ?? [:])
        for (slot, attribute) in storage.attributes.enumerated() {
            guard let field = attribute.field else { continue }
            let value = snapshot.attributes[slot]
            if let value, !attribute.description.type.accepts(value) {
                throw StrataError.typeMismatch(
                    key: attribute.description.name, entity: storage.name,
                    expected: attribute.description.type.description, actual: "\(value.kindName) \(value)")
            }
            record.fields[field] = value
        }
        for (slot, relationship) in storage.relationships.enumerated() {
            guard let field = relationship.field else { continue }
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
        return record
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

    private func putRow(_ record: Record, key: PrimaryKey, storage: EntityStorage, flags: PutFlags) throws {
        guard let rows = storage.rows else { return }
        try reader.transaction.pointee.put(RecordCodec.encode(record), forKey: key.encoded, in: rows, flags: flags)
    }

    /// Replaces the index entries of row `key` that changed from `old` to `new` (nil:
    /// no row). A nil value has an entry too.
    private func updateIndexes(storage: EntityStorage, key: PrimaryKey, old: Record?, new: Record?) throws {
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
