import Foundation

/// Rows read from one store, as their stored records: what a fetch, a batch of faults or
/// a prefetch hands from the store to a context. One buffer holds every record back to
/// back, copied out of the read transaction (LMDB's memory is only valid inside it); the
/// context decodes each record straight into its object's slots
/// (``ManagedObject/apply(record:of:in:)``), so no per-row dictionary or snapshot is made.
/// `Sendable` bytes, never objects.
struct RowBatch: Sendable {
    /// One row: its entity's number in the store, its primary key and where its record is.
    struct Row: Sendable {
        var entity: UInt16
        var key: UInt64
        var start: Int32
        var count: Int32
    }

    /// The store the rows come from.
    let store: StoreFile
    /// The records, back to back.
    private(set) var bytes: [UInt8] = []
    /// The rows, in order.
    private(set) var rows: [Row] = []

    init(store: StoreFile) {
        self.store = store
    }

    /// The number of rows.
    var count: Int { rows.count }

    /// Whether there is no row.
    var isEmpty: Bool { rows.isEmpty }

    /// Appends row `key` of `storage`'s entity, whose record is `record`.
    mutating func append(entity storage: EntityStorage, key: PrimaryKey, record: UnsafeRawBufferPointer) {
        let start = bytes.count
        bytes.append(contentsOf: record)
        rows.append(Row(entity: storage.number, key: key.rawValue, start: Int32(start), count: Int32(record.count)))
    }

    /// Appends row `index` of `other` (a batch of the same store).
    mutating func append(_ index: Int, of other: RowBatch) {
        let row = other.rows[index]
        let start = bytes.count
        other.bytes.withUnsafeBufferPointer { source in
            bytes.append(contentsOf: source[Int(row.start)..<Int(row.start + row.count)])
        }
        rows.append(Row(entity: row.entity, key: row.key, start: Int32(start), count: row.count))
    }

    /// The entity storage of row `index`.
    func storage(of index: Int) -> EntityStorage? {
        store.entityStorage(numbered: rows[index].entity)
    }

    /// The ID of row `index`.
    func objectID(of index: Int) -> ManagedObjectID? {
        guard let storage = storage(of: index), let key = PrimaryKey(rows[index].key) else { return nil }
        return store.objectID(entity: storage.name, key: key)
    }

    /// Runs `body` with the record of row `index`.
    func withRecord<R, E: Error>(of index: Int, _ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        let row = rows[index]
        // Array's withUnsafeBytes rethrows untyped errors: the body's typed one is carried out.
        let result: Result<R, E> = bytes.withUnsafeBytes { buffer in
            do throws(E) {
                return .success(try body(UnsafeRawBufferPointer(rebasing: buffer[Int(row.start)..<Int(row.start + row.count)])))
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    /// Row `index` decoded as a snapshot (for the paths that work on snapshots: merged
    /// fetches, children's reads).
    ///
    /// - Throws: ``StrataError/corruptRecord(entity:primaryKey:reason:)``.
    func snapshot(of index: Int) throws(StrataError) -> ObjectSnapshot {
        guard let storage = storage(of: index), let key = PrimaryKey(rows[index].key) else {
            throw .corruptRecord(entity: "number \(rows[index].entity)", primaryKey: rows[index].key, reason: "the entity is not in the store")
        }
        let decoded: Result<Record, RecordDecodingError> = withRecord(of: index) { bytes in
            do throws(RecordDecodingError) { return .success(try RecordCodec.decode(bytes)) } catch { return .failure(error) }
        }
        switch decoded {
        case .success(let record): return try store.snapshot(of: record, storage: storage, key: key)
        case .failure(let error): throw .corruptRecord(entity: storage.name, primaryKey: key.rawValue, reason: error.reason)
        }
    }

    /// Every row decoded as a snapshot.
    func snapshots() throws(StrataError) -> [ObjectSnapshot] {
        var snapshots: [ObjectSnapshot] = []
        snapshots.reserveCapacity(count)
        for index in rows.indices { snapshots.append(try snapshot(of: index)) }
        return snapshots
    }
}

extension RowBatch: Hashable {
    static func == (lhs: RowBatch, rhs: RowBatch) -> Bool {
        guard lhs.store === rhs.store, lhs.bytes == rhs.bytes, lhs.rows.count == rhs.rows.count else { return false }
        for (a, b) in zip(lhs.rows, rhs.rows) where a.entity != b.entity || a.key != b.key || a.start != b.start || a.count != b.count {
            return false
        }
        return true
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(ObjectIdentifier(store))
        hasher.combine(bytes)
    }
}
