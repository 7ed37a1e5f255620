import StrataLMDB

/// The values to look up in an index, in index order: nil first, then values ascending
/// (``IndexKeyEncoding``'s order).
///
/// ```swift
/// IndexRange.equal(to: .string("Groceries"))         // title == "Groceries"
/// IndexRange(lower: .init(.integer(3)), upper: nil)   // priority >= 3 (nil excluded: it sorts first)
/// IndexRange(lower: .excluding(nil), upper: .excluding(.integer(3)))   // priority < 3, not nil
/// ```
struct IndexRange: Sendable, Hashable {
    /// One end of a range.
    struct Bound: Sendable, Hashable {
        /// The value; nil is the smallest value of every index.
        var value: AttributeValue?
        /// Whether ``value`` itself belongs to the range.
        var isInclusive: Bool

        /// A bound at `value`, inclusive by default.
        init(_ value: AttributeValue?, isInclusive: Bool = true) {
            self.value = value
            self.isInclusive = isInclusive
        }

        /// A bound at `value` that excludes it.
        static func excluding(_ value: AttributeValue?) -> Bound { Bound(value, isInclusive: false) }
    }

    /// Where the range starts; nil for the first entry (nil values included).
    var lower: Bound?
    /// Where the range ends; nil for the last entry.
    var upper: Bound?

    /// Every entry of the index, nil values first.
    static let all = IndexRange(lower: nil, upper: nil)

    /// The entries whose value is `value` (nil: the rows where the attribute is nil).
    static func equal(to value: AttributeValue?) -> IndexRange {
        IndexRange(lower: Bound(value), upper: Bound(value))
    }
}

/// The key layout of an `index:<Entity>.<attribute>` database.
///
/// key = ``IndexKeyEncoding`` of the value (nil has its own encoding, which sorts
/// first), cut to ``maximumValueLength`` bytes, then the 8-byte primary key; the value
/// is empty. LMDB keys are at most 511 bytes, so a long string, URL or data value is
/// kept by its first 503 encoded bytes: such a *truncated* key still sorts at or before
/// every larger value, and a lookup that meets one reads the row to compare the whole
/// value (see ``StoreReader/primaryKeys(entity:attribute:in:includesSubentities:)``).
enum IndexLayout {
    /// LMDB's largest key (`mdb_env_get_maxkeysize` of Debian's liblmdb).
    static let maximumKeyLength = 511
    /// The longest encoded value kept in a key.
    static let maximumValueLength = maximumKeyLength - 8

    /// The encoded value, cut to ``maximumValueLength``; nil when `value` is not of `kind`.
    static func valuePart(_ value: AttributeValue?, kind: IndexKeyKind) -> [UInt8]? {
        guard var bytes = IndexKeyEncoding.encode(value, as: kind) else { return nil }
        if bytes.count > maximumValueLength { bytes.removeLast(bytes.count - maximumValueLength) }
        return bytes
    }

    /// The index key of row `key` holding `value`; nil when `value` is not of `kind`.
    static func key(_ value: AttributeValue?, kind: IndexKeyKind, primaryKey key: PrimaryKey) -> [UInt8]? {
        guard var bytes = valuePart(value, kind: kind) else { return nil }
        bytes.append(contentsOf: key.encoded)
        return bytes
    }

    /// Whether an encoded value part was cut. A whole encoding is either short (fixed-size
    /// kinds, nil) or ends with the terminator `00 00`, which an escaped value never
    /// contains elsewhere.
    static func isTruncated(_ valuePart: UnsafeRawBufferPointer) -> Bool {
        valuePart.count == maximumValueLength && !(valuePart[valuePart.count - 2] == 0 && valuePart[valuePart.count - 1] == 0)
    }
}

extension StoreReader where Transaction: ~Copyable {
    /// The IDs of the rows of `entityName` whose `attribute` lies in `range`, in index
    /// order (value, then entity name, then primary key), read from the index alone
    /// except for values longer than an index key can hold.
    ///
    /// Returns nil when the attribute has no index, so the caller can scan the rows
    /// instead. With `includesSubentities`, the indexes of every concrete sub-entity are
    /// merged.
    ///
    /// - Throws: ``StrataError/unknownEntity(_:)``, ``StrataError/unknownKey(key:entity:)``,
    ///   ``StrataError/typeMismatch(key:entity:expected:actual:)`` for a bound of the
    ///   wrong type, ``StrataError/corruptRecord(entity:primaryKey:reason:)``.
    func primaryKeys(
        entity entityName: String, attribute name: String, in range: IndexRange, includesSubentities: Bool = false
    ) throws -> [ManagedObjectID]? {
        try StoreFile.translatingStorageErrors {
            let root = try store.entityStorage(named: entityName)
            guard let slot = root.attributeSlot(named: name) else { throw StrataError.unknownKey(key: name, entity: entityName) }
            guard root.attributes[slot].description.isIndexed, !root.attributes[slot].description.isTransient,
                  let kind = root.attributes[slot].indexKind else { return nil }
            func encoded(_ bound: IndexRange.Bound?) throws -> [UInt8]? {
                guard let bound else { return nil }
                guard let bytes = IndexKeyEncoding.encode(bound.value, as: kind) else {
                    throw StrataError.typeMismatch(
                        key: name, entity: entityName, expected: root.attributes[slot].description.type.description,
                        actual: bound.value?.kindName ?? "nil")
                }
                return bytes
            }
            let lower = try encoded(range.lower), upper = try encoded(range.upper)
            var found: [(value: [UInt8], id: ManagedObjectID)] = []
            var mustSort = false
            for (order, storage) in try store.fetchedEntities(entityName, includesSubentities: includesSubentities).enumerated() {
                guard let slot = storage.attributeSlot(named: name), let index = storage.attributes[slot].index else { continue }
                mustSort = mustSort || order > 0
                let start = lower.map { Array($0.prefix(IndexLayout.maximumValueLength)) }
                try transaction.pointee.scan(index, range: start.map { KeyRange.from($0) } ?? .all) { key, _ in
                    guard key.count > 8, let primaryKey = PrimaryKey(encoded: UnsafeRawBufferPointer(rebasing: key[(key.count - 8)...])) else {
                        throw StrataError.corruptRecord(entity: storage.name, primaryKey: 0, reason: "\(index) holds a malformed key")
                    }
                    let part = UnsafeRawBufferPointer(rebasing: key[..<(key.count - 8)])
                    let truncated = IndexLayout.isTruncated(part)
                    // The whole encoded value: from the key, or from the row when the key holds a prefix.
                    let value = truncated ? try wholeValue(slot: slot, kind: kind, storage: storage, key: primaryKey) : Array(part)
                    mustSort = mustSort || truncated
                    if let lower, let bound = range.lower {
                        let order = Self.compare(value, lower)
                        if order < 0 || (order == 0 && !bound.isInclusive) { return .continue }
                    }
                    if let upper, let bound = range.upper {
                        let order = Self.compare(value, upper)
                        // Past the end. A truncated key is followed by keys of the same
                        // prefix in primary-key order, which may still be in range.
                        if order > 0 || (order == 0 && !bound.isInclusive) { return truncated ? .continue : .stop }
                    }
                    found.append((value, store.objectID(entity: storage.name, key: primaryKey)))
                    return .continue
                }
            }
            if mustSort {
                // Value, then entity (the scan order), then key: the scan order breaks ties.
                found = found.enumerated().sorted { lhs, rhs in
                    let order = Self.compare(lhs.element.value, rhs.element.value)
                    return order != 0 ? order < 0 : lhs.offset < rhs.offset
                }.map(\.element)
            }
            return found.map(\.id)
        }
    }

    /// The encoded value of `slot` in row `key`, for a truncated index key.
    private func wholeValue(slot: Int, kind: IndexKeyKind, storage: EntityStorage, key: PrimaryKey) throws -> [UInt8] {
        guard let record = try record(at: key, of: storage) else {
            throw StrataError.corruptRecord(entity: storage.name, primaryKey: key.rawValue, reason: "an index entry names a row that does not exist")
        }
        let value = storage.attributes[slot].field.flatMap { record.fields[$0] }
        guard let bytes = IndexKeyEncoding.encode(value, as: kind) else {
            throw StrataError.corruptRecord(
                entity: storage.name, primaryKey: key.rawValue,
                reason: "the value of \(storage.attributes[slot].description.name) cannot be indexed as \(kind)")
        }
        return bytes
    }

    /// Byte-wise (memcmp) order: negative, zero or positive.
    private static func compare(_ lhs: [UInt8], _ rhs: [UInt8]) -> Int {
        for (left, right) in zip(lhs, rhs) where left != right {
            return left < right ? -1 : 1
        }
        return lhs.count - rhs.count
    }
}
