import Foundation

/// The rows one save writes to one store, encoded where the save is prepared (in the
/// saving context, from its objects' slots): record bytes and index values back to back
/// in one buffer, and per row only what the write itself must decide (a new row's
/// primary key, and the references of an entity with relationships, which may name rows
/// that get their keys in the same write). `Sendable` bytes, never objects: what crosses
/// from a context to the coordinator's write queue.
struct EncodedRows: Sendable {
    /// Every row's record, then its index value parts, back to back.
    var bytes: [UInt8] = []
    /// The rows, in the order they are written.
    var rows: [EncodedRow] = []

    /// Whether there is no row.
    var isEmpty: Bool { rows.isEmpty }

    /// The number of rows.
    var count: Int { rows.count }
}

/// One row of ``EncodedRows``.
struct EncodedRow: Sendable {
    /// The number of the row's entity in the store (``StoreSchema``).
    var entity: UInt16
    /// The row's primary key; 0 for a new row, which the write gives its entity's next key.
    var key: UInt64
    /// 0 for a new row, written at version 1. For a changed row, the version the store
    /// must still hold (optimistic locking): it is written at the next one.
    var baseVersion: UInt64
    /// The record (its header holds the version the row is written at), in ``EncodedRows/bytes``.
    /// For an entity with relationships, the foreign keys of its to-one relationships are
    /// left out: the write adds them from ``relationships``.
    var record: Range<Int>
    /// The index value part of each indexed attribute (``EntityStorage/indexedSlots``), each
    /// after its length as a varint, in ``EncodedRows/bytes``.
    var indexValues: Range<Int>
    /// For an entity with relationships, or a row encoded from a snapshot: the object's ID
    /// (temporary for a new object that has none yet).
    var objectID: ManagedObjectID?
    /// For an entity with relationships: their values, whose foreign keys and links the
    /// write sets once every new row of the save has its key.
    var relationships: [RelationshipSnapshot]?

    /// Whether the row is new.
    var isInsert: Bool { baseVersion == 0 }
}

/// Where ``RowEncoder`` reads the values of one row: an object's slots, or a snapshot's.
protocol RowSource {
    /// The value of attribute `slot`.
    func rowAttribute(_ slot: Int) -> AttributeValue?
    /// The values of the relationships, for an entity that has some.
    func rowRelationships() -> [RelationshipSnapshot]
    /// The row's object ID, when it must travel with the row.
    var rowObjectID: ManagedObjectID { get }
    /// Appends attribute `slot`'s field, numbered `number`, straight from where the source
    /// keeps it, when it holds the value unboxed in the type `type` stores; false (nothing
    /// appended) to go through ``rowAttribute(_:)``.
    func appendUnboxedField(_ slot: Int, number: UInt32, of type: AttributeType, to bytes: inout [UInt8]) -> Bool
}

extension RowSource {
    func appendUnboxedField(_ slot: Int, number: UInt32, of type: AttributeType, to bytes: inout [UInt8]) -> Bool { false }
}

extension ManagedObject: RowSource {
    func rowAttribute(_ slot: Int) -> AttributeValue? { attributeValue(at: slot) }

    /// A plain typed field of an attribute of the field's own type (a 64-bit integer, a
    /// double, a date or a string) is encoded from the field: no ``AttributeValue`` is made,
    /// and there is nothing to check, as the field cannot hold a value the attribute
    /// refuses. (A field standing in for a nil is not plain: `nilOverrides`.)
    func appendUnboxedField(_ slot: Int, number: UInt32, of type: AttributeType, to bytes: inout [UInt8]) -> Bool {
        guard _bits & ObjectBits.nilOverrides == 0, case .field(let offset, .plain(let base)) = _entity.layout.attributes[slot] else {
            return false
        }
        switch (base, type) {
        case (.int64, .integer64): RecordCodec.appendInteger(number, fieldPointer(at: offset, as: Int64.self).pointee, to: &bytes)
        case (.int, .integer64): RecordCodec.appendInteger(number, Int64(fieldPointer(at: offset, as: Int.self).pointee), to: &bytes)
        case (.double, .double): RecordCodec.appendDouble(number, fieldPointer(at: offset, as: Double.self).pointee, to: &bytes)
        case (.date, .date): RecordCodec.appendDate(number, fieldPointer(at: offset, as: Date.self).pointee, to: &bytes)
        case (.string, .string): RecordCodec.appendString(number, fieldPointer(at: offset, as: String.self).pointee, to: &bytes)
        default: return false
        }
        return true
    }
    func rowRelationships() -> [RelationshipSnapshot] { entity.relationships.indices.map { relationshipStorage(at: $0).snapshot } }
    var rowObjectID: ManagedObjectID { objectID }
}

extension ObjectSnapshot: RowSource {
    func rowAttribute(_ slot: Int) -> AttributeValue? { slot < attributes.count ? attributes[slot] : nil }
    func rowRelationships() -> [RelationshipSnapshot] { relationships }
    var rowObjectID: ManagedObjectID { objectID }
}

/// Encodes rows into ``EncodedRows``: the record in field order, then the index values.
enum RowEncoder {
    /// Appends the row of `source`, of entity `storage`: a new row when `baseVersion` is
    /// 0 (with `key` 0 when the write must give it one), else a change of the row `key`
    /// at `baseVersion`. With `carriesID`, the row carries its object ID (always for an
    /// entity with relationships).
    ///
    /// - Throws: ``StrataError/typeMismatch(key:entity:expected:actual:)`` for a value that
    ///   is not of its attribute's type; nothing is appended then.
    static func append<Source: RowSource>(
        _ source: Source, storage: EntityStorage, key: UInt64, baseVersion: UInt64, carriesID: Bool = false,
        to rows: inout EncodedRows
    ) throws(StrataError) {
        let start = rows.bytes.count
        RecordCodec.appendHeader(version: baseVersion + 1, to: &rows.bytes)
        for (number, field) in storage.fieldOrder {
            guard case .attribute(let slot) = field else { continue }
            if source.appendUnboxedField(slot, number: number, of: storage.attributes[slot].type, to: &rows.bytes) { continue }
            guard let value = source.rowAttribute(slot) else { continue }
            guard storage.attributes[slot].type.accepts(value) else {
                rows.bytes.removeLast(rows.bytes.count - start)
                let attribute = storage.attributes[slot].description
                throw StrataError.typeMismatch(
                    key: attribute.name, entity: storage.name, expected: attribute.type.description, actual: "\(value.kindName) \(value)")
            }
            RecordCodec.appendField(number, value, to: &rows.bytes)
        }
        let recordEnd = rows.bytes.count
        for slot in storage.indexedSlots {
            guard let kind = storage.attributes[slot].indexKind else { continue }
            let lengthAt = rows.bytes.count
            rows.bytes.append(0)   // the length, once known (a value part is at most 503 bytes)
            let valueStart = rows.bytes.count
            IndexKeyEncoding.append(source.rowAttribute(slot), as: kind, to: &rows.bytes)
            var length = rows.bytes.count - valueStart
            if length > IndexLayout.maximumValueLength {
                rows.bytes.removeLast(length - IndexLayout.maximumValueLength)
                length = IndexLayout.maximumValueLength
            }
            // A varint of up to two bytes: shift the value part when it needs the second.
            if length >= 0x80 {
                rows.bytes.insert(UInt8(length >> 7), at: valueStart)
                rows.bytes[lengthAt] = UInt8(truncatingIfNeeded: length) | 0x80
            } else {
                rows.bytes[lengthAt] = UInt8(length)
            }
        }
        var row = EncodedRow(
            entity: storage.number, key: key, baseVersion: baseVersion, record: start..<recordEnd,
            indexValues: recordEnd..<rows.bytes.count)
        if storage.hasRelationships {
            row.objectID = source.rowObjectID
            row.relationships = source.rowRelationships()
        } else if carriesID || !storage.constraints.isEmpty {
            // A constrained row names its object in a constraint conflict.
            row.objectID = source.rowObjectID
        }
        rows.rows.append(row)
    }

    /// Calls `body` with each index value part of a row, as ``append(_:storage:key:baseVersion:carriesID:to:)``
    /// wrote them: one per indexed attribute of its entity, in order (empty for a value
    /// that has no entry).
    static func forEachIndexValue(_ bytes: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> Void) rethrows {
        var offset = 0
        while offset < bytes.count {
            var length = Int(bytes[offset] & 0x7F)
            offset += 1
            if bytes[offset - 1] & 0x80 != 0 {
                length |= Int(bytes[offset]) << 7
                offset += 1
            }
            try body(UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + length]))
            offset += length
        }
    }
}
