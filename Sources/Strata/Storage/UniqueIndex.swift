import Foundation
import StrataLMDB

/// One uniqueness constraint as a store keeps it (``EntityDescription/uniquenessConstraints``):
/// a unique index, shared by the entity that declares the constraint and its sub-entities,
/// from the constrained values to the one row that holds them.
///
/// An entry's key is the order-preserving encoding of each constrained value
/// (``IndexKeyEncoding``, self-delimiting, so the parts never run together), its value the
/// row's ``RowReference``. A row with a nil among its constrained values has no entry: it
/// is not constrained. A key longer than LMDB allows ends with a 64-bit digest of the
/// whole; two different values with the same shortened key are told apart by reading the
/// row the entry names (``StoreWriter``).
///
/// A class, so that the writer's bookkeeping of each claimed value holds one reference.
final class StoredConstraint: Sendable {
    /// The constrained attributes' names, as declared.
    let attributes: [String]
    /// Their slots in the entity.
    let slots: [Int]
    /// Their field numbers in records.
    let fields: [UInt32]
    /// Their index key kinds.
    let kinds: [IndexKeyKind]
    /// The unique index.
    let database: Database
    /// The entity that declares the constraint.
    let owner: String

    init(attributes: [String], slots: [Int], fields: [UInt32], kinds: [IndexKeyKind], database: Database, owner: String) {
        self.attributes = attributes
        self.slots = slots
        self.fields = fields
        self.kinds = kinds
        self.database = database
        self.owner = owner
    }

    /// The longest key LMDB takes by default.
    static let maximumKeyLength = 511

    /// The index key of the values `value(slot)` gives, or nil when one is nil (or not of
    /// its attribute's kind: the write refuses such a value anyway).
    func key(_ value: (Int) -> AttributeValue?) -> [UInt8]? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(24)
        for (slot, kind) in zip(slots, kinds) {
            guard let part = value(slot), IndexKeyEncoding.append(part, as: kind, to: &bytes) else { return nil }
        }
        return Self.fitted(bytes)
    }

    /// `bytes` as a key: unchanged when short enough, else cut and ended with a 64-bit
    /// digest of the whole.
    static func fitted(_ bytes: [UInt8]) -> [UInt8] {
        guard bytes.count > Self.maximumKeyLength else { return bytes }
        var digest: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in bytes {
            digest ^= UInt64(byte)
            digest = digest &* 0x0000_0100_0000_01B3
        }
        return Array(bytes.prefix(Self.maximumKeyLength - 8)) + withUnsafeBytes(of: digest.bigEndian) { Array($0) }
    }

    /// The key of a stored record's values.
    func key(of record: Record) -> [UInt8]? {
        key { slot in slots.firstIndex(of: slot).flatMap { record.fields[fields[$0]] } }
    }

    /// The key of an encoded record's values, decoding only the constrained fields (the
    /// others are stepped over).
    func key(ofRecord bytes: UnsafeRawBufferPointer) throws(RecordDecodingError) -> [UInt8]? {
        var reader = RecordCodec.Reader(bytes)
        _ = try reader.header()
        if fields.count == 1 {
            let wanted = fields[0]
            while let (number, tag) = try reader.nextField() {
                guard number == wanted else {
                    if number > wanted { return nil }   // fields come in ascending order: it is nil
                    try reader.skip(tag)
                    continue
                }
                let value = try reader.value(tag)
                return key { _ in value }
            }
            return nil
        }
        var values = [AttributeValue?](repeating: nil, count: fields.count)
        var found = 0
        while found < fields.count, let (number, tag) = try reader.nextField() {
            if let position = fields.firstIndex(of: number) {
                values[position] = try reader.value(tag)
                found += 1
            } else {
                try reader.skip(tag)
            }
        }
        guard found == fields.count else { return nil }
        return key { slot in slots.firstIndex(of: slot).flatMap { values[$0] } }
    }
}

extension StoreLayout {
    /// The unique index of the constraint on `attributes` that `entity` declares.
    static func uniqueDatabase(entity: String, attributes: [String]) -> String {
        "unique:\(entity).\(attributes.joined(separator: "+"))"
    }
}
