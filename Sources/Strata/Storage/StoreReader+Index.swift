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
            let keyRange = IndexKeyRange(
                lower: try encoded(range.lower), includesLower: range.lower?.isInclusive ?? true,
                upper: try encoded(range.upper), includesUpper: range.upper?.isInclusive ?? true)
            var found: [(value: [UInt8], id: ManagedObjectID)] = []
            var mustSort = false
            for (order, storage) in try store.fetchedEntities(entityName, includesSubentities: includesSubentities).enumerated() {
                guard let slot = storage.attributeSlot(named: name), storage.attributes[slot].index != nil else { continue }
                mustSort = mustSort || order > 0
                try scanIndex(of: storage, slot: slot, in: IndexKeyRanges([keyRange])) { entry in
                    mustSort = mustSort || entry.group.count != entry.value.count
                    found.append((entry.value, store.objectID(entity: storage.name, key: entry.key)))
                    return true
                }
            }
            if mustSort {
                // Value, then entity (the scan order), then key: the scan order breaks ties.
                found = found.enumerated().sorted { lhs, rhs in
                    let order = IndexKeyRange.compare(lhs.element.value, rhs.element.value)
                    return order != 0 ? order < 0 : lhs.offset < rhs.offset
                }.map(\.element)
            }
            return found.map(\.id)
        }
    }
}
