import Foundation

/// The store's key codecs, for the key-decoder fuzzer (`Sources/KeyDecoderFuzzer`):
/// thin wrappers over `IndexKeyEncoding`, `IndexLayout`, `PrimaryKey`, `RowReference`
/// and `LinkLayout`, which stay internal.
///
/// Every decoder here is total: any bytes decode, or give a ``DecodingError`` or nil.
@_spi(StorageInternals)
public enum StorageKeyCodecs {
    /// A kind of indexed value, with its order-preserving encoding.
    public struct IndexKind: Sendable, Hashable, CustomStringConvertible {
        let kind: IndexKeyKind

        /// Every kind: integer, double, boolean, string, date, UUID, binary data, URI.
        public static let all = IndexKeyKind.allCases.map(IndexKind.init)

        /// `integer`, `string`, ...
        public var description: String { "\(kind)" }
    }

    /// Why bytes could not be decoded as an index value.
    public struct DecodingError: Error, Sendable, Hashable, CustomStringConvertible {
        /// What was wrong.
        public let reason: String
        /// Where, as a byte offset into the key.
        public let offset: Int

        /// `invalid index key at byte N: reason`.
        public var description: String { "invalid index key at byte \(offset): \(reason)" }
    }

    // MARK: Index keys

    /// The longest index key (LMDB's largest key).
    public static var maximumIndexKeyLength: Int { IndexLayout.maximumKeyLength }

    /// Decodes one value of `kind` at `offset` and moves `offset` past it; on an error
    /// `offset` is unchanged.
    public static func decodeIndexValue(
        _ bytes: UnsafeRawBufferPointer, as kind: IndexKind, at offset: inout Int
    ) throws(DecodingError) -> AttributeValue? {
        var position = offset
        do {
            let value = try IndexKeyEncoding.decode(bytes, as: kind.kind, at: &position)
            offset = position
            return value
        } catch {
            throw DecodingError(reason: error.reason, offset: error.offset)
        }
    }

    /// The encoding of `value` as `kind`; nil when the value is not of that kind.
    public static func encodeIndexValue(_ value: AttributeValue?, as kind: IndexKind) -> [UInt8]? {
        IndexKeyEncoding.encode(value, as: kind.kind)
    }

    /// The key of row `primaryKey` in an index of `kind`: the value's encoding, cut to fit,
    /// then the primary key. Nil when the value is not of `kind` or the key is 0.
    public static func indexKey(_ value: AttributeValue?, as kind: IndexKind, primaryKey: UInt64) -> [UInt8]? {
        PrimaryKey(primaryKey).flatMap { IndexLayout.key(value, kind: kind.kind, primaryKey: $0) }
    }

    /// Whether the value part of an index key (all but its last 8 bytes) was cut to fit.
    public static func isTruncatedIndexValue(_ valuePart: UnsafeRawBufferPointer) -> Bool {
        IndexLayout.isTruncated(valuePart)
    }

    // MARK: Rows and links

    /// The primary key 8 bytes hold; nil for any other length, or 0.
    public static func decodePrimaryKey(_ bytes: UnsafeRawBufferPointer) -> UInt64? {
        PrimaryKey(encoded: bytes)?.rawValue
    }

    /// The 8 bytes of primary key `key`; nil for 0, which is never a key.
    public static func encodePrimaryKey(_ key: UInt64) -> [UInt8]? {
        PrimaryKey(key)?.encoded
    }

    /// The row reference 10 bytes hold; nil for any other length, entity 0 or key 0.
    public static func decodeRowReference(_ bytes: UnsafeRawBufferPointer) -> (entityNumber: UInt16, primaryKey: UInt64)? {
        RowReference(encoded: bytes).map { ($0.entityNumber, $0.primaryKey.rawValue) }
    }

    /// The 10 bytes of a row reference; nil for key 0.
    public static func encodeRowReference(entityNumber: UInt16, primaryKey: UInt64) -> [UInt8]? {
        PrimaryKey(primaryKey).map { RowReference(entityNumber: entityNumber, primaryKey: $0).encoded }
    }

    /// The destination of a link key (owner, then destination); nil when malformed.
    public static func linkDestination(inKey key: UnsafeRawBufferPointer) -> (entityNumber: UInt16, primaryKey: UInt64)? {
        LinkLayout.destination(inKey: key).map { ($0.entityNumber, $0.primaryKey.rawValue) }
    }

    /// The key of the link from `owner` to `destination`; nil when a key is 0.
    public static func linkKey(
        owner: (entityNumber: UInt16, primaryKey: UInt64), destination: (entityNumber: UInt16, primaryKey: UInt64)
    ) -> [UInt8]? {
        guard let ownerKey = PrimaryKey(owner.primaryKey), let destinationKey = PrimaryKey(destination.primaryKey) else { return nil }
        return LinkLayout.key(
            owner: RowReference(entityNumber: owner.entityNumber, primaryKey: ownerKey),
            destination: RowReference(entityNumber: destination.entityNumber, primaryKey: destinationKey))
    }

    /// The position a link's value holds: nil for an empty value; `isValid` false unless
    /// the value is empty or 8 bytes.
    public static func linkPosition(inValue value: UnsafeRawBufferPointer) -> (position: UInt64?, isValid: Bool) {
        LinkLayout.position(inValue: value)
    }

    /// The value of a link at `position` (nil: unordered, an empty value).
    public static func linkValue(position: UInt64?) -> [UInt8] {
        LinkLayout.value(position: position)
    }
}
