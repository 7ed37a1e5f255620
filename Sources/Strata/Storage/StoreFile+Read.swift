import StrataLMDB

extension StoreFile {
    /// Runs `body` with a reader over one read transaction: a consistent snapshot of the
    /// last commit (DESIGN.md: readers never wait for the writer); or, given `snapshot`
    /// (a pinned read transaction of this store's environment: a query generation,
    /// DESIGN.md "Query generations"), over that snapshot's transaction.
    ///
    /// `snapshot` serialises its users: a call on another thread waits for this one.
    ///
    /// - Throws: ``StrataError/storage(_:)`` for an LMDB failure, the reader's
    ///   ``StrataError``s, or what `body` throws.
    // Not optimised: specialising this wrapper for some bodies crashes the 6.3.1 SIL
    // optimiser in release builds ("Abort: function forwardToInit", while inlining the
    // closure that builds the noncopyable reader). The bodies themselves are optimised.
    @_optimize(none)
    func read<R>(in snapshot: ReadSnapshot? = nil, _ body: (borrowing StoreReader<ReadTransaction>) throws -> R) throws -> R {
        try withReadTransaction(in: snapshot) { txn in
            try withUnsafePointer(to: txn) { transaction in
                try body(StoreReader(store: self, transaction: transaction))
            }
        }
    }

    /// Runs `body` in a fresh read transaction, or in `snapshot`'s; LMDB errors become
    /// ``StrataError/storage(_:)``.
    func withReadTransaction<R>(in snapshot: ReadSnapshot?, _ body: (borrowing ReadTransaction) throws -> R) throws -> R {
        try StoreFile.translatingStorageErrors {
            guard let snapshot else {
                return try environment.read { txn in
                    try checkModelUnchanged(txn)
                    return try body(txn)
                }
            }
            precondition(snapshot.environment === environment, "the snapshot belongs to another store")
            return try snapshot.read { txn in
                try checkModelUnchanged(txn)
                return try body(txn)
            }
        }
    }

    /// Throws when the store holds another model than the one it was opened with: another
    /// process migrated it since. Its databases may then be gone or hold another layout,
    /// so reading or writing on would find nothing, or the wrong fields.
    ///
    /// Reads the metadata's model hash once per committed state: only when `txn` sees
    /// another transaction id than the last one checked (a store nobody else writes is
    /// checked once per commit, by the write that made it).
    ///
    /// - Throws: ``StrataError/modelMismatch(store:storeHash:modelHash:changes:)``.
    func checkModelUnchanged<T: ReadableTransaction & ~Copyable>(_ txn: borrowing T) throws {
        let id = txn.id
        guard checkedTransaction.load(ordering: .relaxed) != id else { return }
        let stored = try Array(StoreMetadata.Key.modelVersionHash.utf8).withUnsafeBytes { key in
            try txn.withValue(forKey: key, in: metadataDatabase) { bytes in bytes.map { String(decoding: $0, as: UTF8.self) } }
        }
        guard let stored, stored != metadata.modelVersionHash else {
            checkedTransaction.store(id, ordering: .relaxed)
            return
        }
        throw StrataError.modelMismatch(
            store: path, storeHash: stored, modelHash: metadata.modelVersionHash,
            changes: ["the store was migrated by another process after it was opened here: open it again with the model it now holds"])
    }
}

/// Reads a ``StoreFile`` inside one LMDB transaction: rows as ``ObjectSnapshot``s,
/// relationship destinations, index lookups and counts.
///
/// Lent by ``StoreFile/read(_:)`` (over a read transaction) and kept by a
/// ``StoreWriter`` (over its write transaction, seeing its own writes). Non-copyable,
/// so it cannot outlive the closure it is lent to. Every method throws ``StrataError``
/// (LMDB failures as ``StrataError/storage(_:)``, undecodable rows as
/// ``StrataError/corruptRecord(entity:primaryKey:reason:)``).
struct StoreReader<Transaction: ReadableTransaction & ~Copyable>: ~Copyable {
    /// The store.
    let store: StoreFile
    // Unsafe pointer because a borrowed, non-copyable transaction cannot be stored in a
    // struct: it points at the transaction lent to the closure that made this reader
    // (`withUnsafePointer(to:)` in `StoreFile.read` and `write`), and that closure outlives
    // the reader, which is non-copyable and only ever lent to its user, never returned.
    let transaction: UnsafePointer<Transaction>

    // MARK: Rows

    /// The decoded row `key` of `storage`'s entity, or nil when there is none.
    func record(at key: PrimaryKey, of storage: EntityStorage) throws -> Record? {
        guard let rows = storage.rows else { return nil }
        return try transaction.pointee.withValue(forKey: key.encoded, in: rows) { bytes throws -> Record? in
            guard let bytes else { return nil }
            do throws(RecordDecodingError) {
                return try RecordCodec.decode(bytes)
            } catch {
                throw StrataError.corruptRecord(entity: storage.name, primaryKey: key.rawValue, reason: error.reason)
            }
        }
    }

    /// The version of row `key` of `storage`'s entity (read from the record's header
    /// alone), or nil when there is no such row.
    func version(at key: PrimaryKey, of storage: EntityStorage) throws -> UInt64? {
        guard let rows = storage.rows else { return nil }
        var encoded = key.rawValue.bigEndian
        return try withUnsafeBytes(of: &encoded) { keyBytes in
            try transaction.pointee.withValue(forKey: keyBytes, in: rows) { bytes throws -> UInt64? in
                guard let bytes else { return nil }
                do throws(RecordDecodingError) {
                    return try RecordCodec.version(of: bytes)
                } catch {
                    throw StrataError.corruptRecord(entity: storage.name, primaryKey: key.rawValue, reason: error.reason)
                }
            }
        }
    }

    /// The stored state of `id`, or nil when its row does not exist (never saved, or deleted).
    ///
    /// To-one relationships come back as permanent IDs of the destination's actual entity;
    /// to-many ones as ``RelationshipSnapshot/notLoaded`` (see ``destinations(of:relationship:)``).
    /// A field the model does not know is ignored; a missing one is nil.
    ///
    /// - Throws: ``StrataError/invalidObjectState(_:reason:)`` for a temporary ID or one
    ///   of another store, ``StrataError/unknownEntity(_:)``,
    ///   ``StrataError/corruptRecord(entity:primaryKey:reason:)``.
    func snapshot(of id: ManagedObjectID) throws -> ObjectSnapshot? {
        try StoreFile.translatingStorageErrors {
            let (storage, key) = try store.row(of: id)
            return try record(at: key, of: storage).map { record throws(StrataError) in
                try store.snapshot(of: record, storage: storage, key: key)
            }
        }
    }

    /// The destinations of `relationship` of `id`, in order for an ordered relationship.
    ///
    /// For a to-many relationship they come from its links database (the object's row
    /// need not exist); for a to-one one from the row's foreign key (none when the row
    /// does not exist).
    ///
    /// - Throws: ``StrataError/unknownKey(key:entity:)`` when the entity has no such
    ///   relationship, and what ``snapshot(of:)`` throws.
    func destinations(of id: ManagedObjectID, relationship name: String) throws -> [ManagedObjectID] {
        try StoreFile.translatingStorageErrors {
            let (storage, key) = try store.row(of: id)
            guard let slot = storage.relationshipSlot(named: name) else { throw StrataError.unknownKey(key: name, entity: storage.name) }
            let relationship = storage.relationships[slot]
            if let links = relationship.links {
                let owner = RowReference(entityNumber: storage.number, primaryKey: key)
                return try self.links(of: owner, in: links, ownerEntity: storage.name).map { link throws(StrataError) in
                    try store.objectID(for: link.destination, whereOwner: storage.name, key: key)
                }
            }
            guard let field = relationship.field, let record = try record(at: key, of: storage),
                  let value = record.fields[field] else { return [] }
            return [try store.destinationID(value, of: slot, storage: storage, key: key)]
        }
    }

    /// Calls `body` with every row of `entityName` (and of its sub-entities when
    /// `includesSubentities`), entity by entity in name order, each in primary-key order,
    /// until `body` returns false.
    ///
    /// - Throws: ``StrataError/unknownEntity(_:)``, a corrupt row's error, or what `body` throws.
    func forEachRow(entity entityName: String, includesSubentities: Bool, _ body: (ObjectSnapshot) throws -> Bool) throws {
        try scanRows(entity: entityName, includesSubentities: includesSubentities) { storage, key, value in
            let record: Record
            do throws(RecordDecodingError) {
                record = try RecordCodec.decode(value)
            } catch {
                throw StrataError.corruptRecord(entity: storage.name, primaryKey: key.rawValue, reason: error.reason)
            }
            return try body(try store.snapshot(of: record, storage: storage, key: key))
        }
    }

    /// Calls `body` with every row's stored record (valid only during the call), in the
    /// order of ``forEachRow(entity:includesSubentities:_:)``, until `body` returns false.
    func forEachRecord(
        entity entityName: String, includesSubentities: Bool, _ body: (EntityStorage, PrimaryKey, UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        try scanRows(entity: entityName, includesSubentities: includesSubentities, body)
    }

    /// Calls `body` with the ID of every row, in the order of ``forEachRow(entity:includesSubentities:_:)``,
    /// without decoding the rows, until `body` returns false.
    func forEachKey(entity entityName: String, includesSubentities: Bool, _ body: (EntityStorage, PrimaryKey) throws -> Bool) throws {
        try scanRows(entity: entityName, includesSubentities: includesSubentities) { storage, key, _ in
            try body(storage, key)
        }
    }

    /// The raw rows of the entities a fetch of `entityName` covers, entity by entity in
    /// name order, each in primary-key order, until `body` returns false.
    private func scanRows(
        entity entityName: String, includesSubentities: Bool,
        _ body: (EntityStorage, PrimaryKey, UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        try StoreFile.translatingStorageErrors {
            for storage in try store.fetchedEntities(entityName, includesSubentities: includesSubentities) {
                guard let rows = storage.rows else { continue }
                var keepGoing = true
                try transaction.pointee.scan(rows) { keyBytes, value in
                    guard let key = PrimaryKey(encoded: keyBytes) else {
                        throw StrataError.corruptRecord(entity: storage.name, primaryKey: 0, reason: "a row key is not an 8-byte primary key")
                    }
                    keepGoing = try body(storage, key, value)
                    return keepGoing ? .continue : .stop
                }
                if !keepGoing { return }
            }
        }
    }

    /// The number of rows of `entityName` (and of its sub-entities when `includesSubentities`).
    ///
    /// - Throws: ``StrataError/unknownEntity(_:)``, ``StrataError/storage(_:)``.
    func count(of entityName: String, includesSubentities: Bool) throws -> Int {
        try StoreFile.translatingStorageErrors {
            try store.fetchedEntities(entityName, includesSubentities: includesSubentities).reduce(0) { total, storage in
                guard let rows = storage.rows else { return total }
                return total + (try transaction.pointee.count(in: rows))
            }
        }
    }

    // MARK: Links

    /// One link of an owner: its destination and, for an ordered relationship, its position.
    struct Link: Hashable {
        /// The row the link points to.
        var destination: RowReference
        /// Its position among the owner's links (ordered relationships only).
        var position: UInt64?
    }

    /// The links of `owner` in `links`, by position when they have one (ties and
    /// unordered links by destination).
    func links(of owner: RowReference, in links: Database, ownerEntity: String) throws -> [Link] {
        var found: [Link] = []
        try transaction.pointee.scan(links, range: .prefix(owner.encoded)) { key, value in
            let (position, valid) = LinkLayout.position(inValue: value)
            guard valid, let destination = LinkLayout.destination(inKey: key) else {
                throw StrataError.corruptRecord(
                    entity: ownerEntity, primaryKey: owner.primaryKey.rawValue,
                    reason: "\(links) holds a malformed link (key of \(key.count) bytes, value of \(value.count))")
            }
            found.append(Link(destination: destination, position: position))
            return .continue
        }
        if found.contains(where: { $0.position != nil }) {
            // Stable: the scan gave destination order, which breaks ties.
            found = found.enumerated().sorted { ($0.element.position ?? 0, $0.offset) < ($1.element.position ?? 0, $1.offset) }.map(\.element)
        }
        return found
    }
}

// MARK: - Decoding rows

extension StoreFile {
    /// The entities a fetch of `entityName` covers (abstract ones included: they have no rows).
    func fetchedEntities(_ entityName: String, includesSubentities: Bool) throws(StrataError) -> [EntityStorage] {
        let storage = try entityStorage(named: entityName)
        guard includesSubentities else { return [storage] }
        return model.entityNames(kindOf: entityName).compactMap { entities[$0] }
    }

    /// The snapshot of a decoded row.
    func snapshot(of record: Record, storage: EntityStorage, key: PrimaryKey) throws(StrataError) -> ObjectSnapshot {
        var snapshot = ObjectSnapshot(objectID: objectID(entity: storage.name, key: key), entity: storage.entity, version: record.version)
        for (number, value) in record.fields {
            try setField(number, value, of: &snapshot, storage: storage, key: key)
        }
        return snapshot
    }

    /// The snapshot of an encoded stored record, decoded field by field into it (no
    /// ``Record`` in between). The same checks as ``snapshot(of:storage:key:)``.
    func snapshot(ofRecord bytes: UnsafeRawBufferPointer, storage: EntityStorage, key: PrimaryKey) throws(StrataError) -> ObjectSnapshot {
        var snapshot = ObjectSnapshot(objectID: objectID(entity: storage.name, key: key), entity: storage.entity, version: 0)
        snapshot.version = try RecordCodec.forEachField(
            bytes, corrupt: { .corruptRecord(entity: storage.name, primaryKey: key.rawValue, reason: $0.reason) }
        ) { number, value throws(StrataError) in
            try setField(number, value, of: &snapshot, storage: storage, key: key)
        }
        return snapshot
    }

    /// Sets field `number`'s stored `value` in `snapshot` (a field this model does not
    /// know is ignored).
    private func setField(
        _ number: UInt32, _ value: AttributeValue, of snapshot: inout ObjectSnapshot, storage: EntityStorage, key: PrimaryKey
    ) throws(StrataError) {
        switch storage.fields[number] {
        case nil:
            return
        case .attribute(let slot):
            let attribute = storage.attributes[slot].description
            guard attribute.type.accepts(value) else {
                throw .corruptRecord(
                    entity: storage.name, primaryKey: key.rawValue,
                    reason: "field \(number) (\(attribute.name)) holds a \(value.kindName) value, not a \(attribute.type)")
            }
            snapshot.attributes[slot] = value
        case .relationship(let slot):
            snapshot.relationships[slot] = .toOne(try destinationID(value, of: slot, storage: storage, key: key))
        }
    }

    /// The destination a to-one relationship's foreign-key value names.
    ///
    /// - Throws: ``StrataError/corruptRecord(entity:primaryKey:reason:)`` unless it is a
    ///   10-byte reference to a concrete entity of the relationship's destination kind.
    func destinationID(_ value: AttributeValue, of slot: Int, storage: EntityStorage, key: PrimaryKey) throws(StrataError) -> ManagedObjectID {
        let relationship = storage.relationships[slot].description
        guard let reference = value.foreignKey,
              let destination = entityStorage(numbered: reference.entityNumber), destination.rows != nil,
              destination.entity.isKind(of: relationship.destinationEntityName)
        else {
            throw .corruptRecord(
                entity: storage.name, primaryKey: key.rawValue,
                reason: "the foreign key of \(relationship.name) is not a reference to a \(relationship.destinationEntityName)")
        }
        return objectID(entity: destination.name, key: reference.primaryKey)
    }

    /// The ID of a link's destination.
    func objectID(for reference: RowReference, whereOwner entityName: String, key: PrimaryKey) throws(StrataError) -> ManagedObjectID {
        guard let destination = entityStorage(numbered: reference.entityNumber), destination.rows != nil else {
            throw .corruptRecord(
                entity: entityName, primaryKey: key.rawValue,
                reason: "a link names entity number \(reference.entityNumber), which is not a concrete entity of the store")
        }
        return objectID(entity: destination.name, key: reference.primaryKey)
    }
}
