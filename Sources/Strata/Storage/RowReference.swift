import Foundation

/// A reference to one row of a store: the row's entity number (``StoreSchema``) and its
/// primary key. What a foreign key and both ends of a link hold.
///
/// Encoded as 10 bytes, the entity number (2 bytes big-endian) then the primary key
/// (8 bytes big-endian), so that references sort by entity, then by key.
struct RowReference: Hashable, Sendable, CustomStringConvertible {
    /// The size of an encoded reference.
    static let byteCount = 10

    /// The number of the row's entity, ≥ 1.
    let entityNumber: UInt16
    /// The row's primary key.
    let primaryKey: PrimaryKey

    /// A reference to row `primaryKey` of entity number `entityNumber`.
    init(entityNumber: UInt16, primaryKey: PrimaryKey) {
        self.entityNumber = entityNumber
        self.primaryKey = primaryKey
    }

    /// Decodes exactly 10 bytes; nil for any other length, entity number 0 or key 0.
    init?(encoded bytes: UnsafeRawBufferPointer) {
        guard bytes.count == Self.byteCount else { return nil }
        let entity = UInt16(bigEndian: bytes.loadUnaligned(as: UInt16.self))
        guard entity != 0, let key = PrimaryKey(encoded: UnsafeRawBufferPointer(rebasing: bytes[2...])) else { return nil }
        self.init(entityNumber: entity, primaryKey: key)
    }

    /// The 10 encoded bytes.
    var encoded: [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Self.byteCount)
        append(to: &bytes)
        return bytes
    }

    /// Appends the 10 encoded bytes to `bytes`.
    func append(to bytes: inout [UInt8]) {
        withUnsafeBytes(of: entityNumber.bigEndian) { bytes.append(contentsOf: $0) }
        bytes.append(contentsOf: primaryKey.encoded)
    }

    /// `e3/p42`.
    var description: String { "e\(entityNumber)/\(primaryKey)" }
}

/// The key and value layout of a `links:<Entity>.<relationship>` database.
///
/// - key: the owner's ``RowReference`` (10 bytes), then the destination's (10 bytes),
///   so an owner's links are one contiguous key range;
/// - value: empty for an unordered relationship; for an ordered one, the destination's
///   position among the owner's links, 8 bytes big-endian (positions only order, they
///   need not be contiguous).
enum LinkLayout {
    /// The key of the link from `owner` to `destination`.
    static func key(owner: RowReference, destination: RowReference) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(2 * RowReference.byteCount)
        owner.append(to: &bytes)
        destination.append(to: &bytes)
        return bytes
    }

    /// The destination of a link key, or nil when the key is malformed.
    static func destination(inKey key: UnsafeRawBufferPointer) -> RowReference? {
        guard key.count == 2 * RowReference.byteCount else { return nil }
        return RowReference(encoded: UnsafeRawBufferPointer(rebasing: key[RowReference.byteCount...]))
    }

    /// The value of a link at `position` (nil: unordered).
    static func value(position: UInt64?) -> [UInt8] {
        position.map { StoreMetadata.bigEndian($0) } ?? []
    }

    /// The position a link's value holds: nil for an empty value, or when it is not 8 bytes
    /// (`isValid` false).
    static func position(inValue value: UnsafeRawBufferPointer) -> (position: UInt64?, isValid: Bool) {
        switch value.count {
        case 0: (nil, true)
        case 8: (UInt64(bigEndian: value.loadUnaligned(as: UInt64.self)), true)
        default: (nil, false)
        }
    }
}

extension AttributeValue {
    /// The foreign-key field value of a to-one relationship: the destination's
    /// ``RowReference`` as 10 bytes of binary data.
    static func foreignKey(_ reference: RowReference) -> AttributeValue {
        .binaryData(Data(reference.encoded))
    }

    /// The row reference this foreign-key value holds, or nil when it is not one.
    var foreignKey: RowReference? {
        guard case .binaryData(let data) = self else { return nil }
        return data.withUnsafeBytes { RowReference(encoded: $0) }
    }
}
