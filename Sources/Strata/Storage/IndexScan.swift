import Foundation
import StrataLMDB

/// A range of encoded index values (``IndexKeyEncoding`` bytes, without the primary key
/// an index key ends with), compared byte-wise.
///
/// The planner builds these from predicate constants; ``IndexRange`` (by attribute
/// values) converts to one.
struct IndexKeyRange: Sendable, Hashable {
    /// The smallest encoded value; nil for the start of the index.
    var lower: [UInt8]?
    /// Whether ``lower`` itself is in the range.
    var includesLower = true
    /// The largest encoded value; nil for the end of the index.
    var upper: [UInt8]?
    /// Whether ``upper`` itself is in the range.
    var includesUpper = true

    /// Every entry.
    static let all = IndexKeyRange()

    /// Exactly `value`.
    static func equal(_ value: [UInt8]) -> IndexKeyRange {
        IndexKeyRange(lower: value, upper: value)
    }

    /// Every string that starts with `prefix` (a ``IndexKeyKind/string`` index): from
    /// the prefix itself up to, not including, the prefix's escaped bytes followed by
    /// `0xFF`, a byte that never follows them in an encoded string (UTF-8 has no `0xFF`,
    /// and an escaped `0x00` is `0x00 0xFF`, which sorts below it).
    static func prefix(_ prefix: String) -> IndexKeyRange {
        let lower = IndexKeyEncoding.encode(.string(prefix), as: .string) ?? [0x01, 0x00, 0x00]
        var upper = lower
        upper.removeLast(2)  // the terminator
        upper.append(0xFF)
        return IndexKeyRange(lower: lower, upper: upper, includesUpper: false)
    }

    /// Whether no value lies in the range.
    var isEmpty: Bool {
        guard let lower, let upper else { return false }
        let order = Self.compare(lower, upper)
        return order > 0 || (order == 0 && !(includesLower && includesUpper))
    }

    /// Whether `value` lies above the lower bound.
    func isAboveLower(_ value: [UInt8]) -> Bool {
        guard let lower else { return true }
        let order = Self.compare(value, lower)
        return order > 0 || (order == 0 && includesLower)
    }

    /// Whether `value` lies below the upper bound.
    func isBelowUpper(_ value: [UInt8]) -> Bool {
        guard let upper else { return true }
        let order = Self.compare(value, upper)
        return order < 0 || (order == 0 && includesUpper)
    }

    /// Whether `value` lies in the range.
    func contains(_ value: [UInt8]) -> Bool { isAboveLower(value) && isBelowUpper(value) }

    /// Whether the encoded value `value`, read in place, lies in the range.
    func contains(encoded value: UnsafeRawBufferPointer) -> Bool {
        if let lower {
            let order = lower.withUnsafeBytes { Self.compare(value, $0) }
            if order < 0 || (order == 0 && !includesLower) { return false }
        }
        if let upper {
            let order = upper.withUnsafeBytes { Self.compare(value, $0) }
            if order > 0 || (order == 0 && !includesUpper) { return false }
        }
        return true
    }

    /// The keys of an index holding this range's values: every primary key after the
    /// largest value, for values no longer than ``IndexLayout/maximumValueLength`` (the
    /// range is checked again on each value, ``contains(encoded:)``).
    var keyRange: KeyRange {
        KeyRange(lower: lower, upper: upper.map { $0 + Array(repeating: 0xFF, count: 9) }, includesUpper: true)
    }

    /// The values in both ranges.
    func intersection(_ other: IndexKeyRange) -> IndexKeyRange {
        var result = self
        if let bound = other.lower {
            if let lower {
                let order = Self.compare(bound, lower)
                if order > 0 || (order == 0 && !other.includesLower) {
                    result.lower = bound
                    result.includesLower = other.includesLower
                }
            } else {
                result.lower = bound
                result.includesLower = other.includesLower
            }
        }
        if let bound = other.upper {
            if let upper {
                let order = Self.compare(bound, upper)
                if order < 0 || (order == 0 && !other.includesUpper) {
                    result.upper = bound
                    result.includesUpper = other.includesUpper
                }
            } else {
                result.upper = bound
                result.includesUpper = other.includesUpper
            }
        }
        return result
    }

    /// Byte-wise (memcmp) order: negative, zero or positive.
    static func compare(_ lhs: [UInt8], _ rhs: [UInt8]) -> Int {
        lhs.withUnsafeBytes { l in rhs.withUnsafeBytes { r in compare(l, r) } }
    }

    /// Byte-wise (memcmp) order of two buffers.
    static func compare(_ lhs: UnsafeRawBufferPointer, _ rhs: UnsafeRawBufferPointer) -> Int {
        let common = min(lhs.count, rhs.count)
        if common > 0 {
            let order = memcmp(lhs.baseAddress!, rhs.baseAddress!, common)
            if order != 0 { return order < 0 ? -1 : 1 }
        }
        return lhs.count - rhs.count
    }
}

/// Sorted, disjoint ranges: what a conjunction of constraints on one indexed attribute
/// leaves (several ranges for `IN`).
struct IndexKeyRanges: Sendable, Hashable {
    /// The ranges, ascending and disjoint.
    private(set) var ranges: [IndexKeyRange]

    /// The whole index.
    static let all = IndexKeyRanges(ranges: [.all])
    /// Nothing.
    static let none = IndexKeyRanges(ranges: [])

    /// `ranges`, sorted and with empty ones dropped; overlapping ones are merged.
    init(_ ranges: [IndexKeyRange]) {
        let sorted = ranges.filter { !$0.isEmpty }.sorted { a, b in
            switch (a.lower, b.lower) {
            case (nil, nil): false
            case (nil, _): true
            case (_, nil): false
            case (let x?, let y?):
                IndexKeyRange.compare(x, y) < 0 || (IndexKeyRange.compare(x, y) == 0 && a.includesLower && !b.includesLower)
            }
        }
        var merged: [IndexKeyRange] = []
        for range in sorted {
            if var last = merged.last, Self.overlap(last, range) {
                if Self.extends(range, beyond: last) {
                    last.upper = range.upper
                    last.includesUpper = range.includesUpper
                }
                merged[merged.count - 1] = last
            } else {
                merged.append(range)
            }
        }
        self.ranges = merged
    }

    private init(ranges: [IndexKeyRange]) { self.ranges = ranges }

    /// Whether `next` (which starts at or after `range`) touches it.
    private static func overlap(_ range: IndexKeyRange, _ next: IndexKeyRange) -> Bool {
        guard let upper = range.upper else { return true }
        guard let lower = next.lower else { return true }
        let order = IndexKeyRange.compare(lower, upper)
        return order < 0 || (order == 0 && (range.includesUpper || next.includesLower))
    }

    /// Whether `range`'s upper end lies past `other`'s.
    private static func extends(_ range: IndexKeyRange, beyond other: IndexKeyRange) -> Bool {
        guard let otherUpper = other.upper else { return false }
        guard let upper = range.upper else { return true }
        let order = IndexKeyRange.compare(upper, otherUpper)
        return order > 0 || (order == 0 && range.includesUpper && !other.includesUpper)
    }

    /// The values in both sets.
    func intersection(_ other: IndexKeyRanges) -> IndexKeyRanges {
        var result: [IndexKeyRange] = []
        for a in ranges {
            for b in other.ranges {
                let both = a.intersection(b)
                if !both.isEmpty { result.append(both) }
            }
        }
        return IndexKeyRanges(result)
    }

    /// Whether `value` lies in one of the ranges.
    func contains(_ value: [UInt8]) -> Bool { ranges.contains { $0.contains(value) } }
}

/// One entry met by an index scan.
struct IndexEntry {
    /// The value part of the index key: the whole encoded value, or its first
    /// ``IndexLayout/maximumValueLength`` bytes when it was too long for a key. Entries
    /// with equal value parts form one group, the unit of early stopping.
    var group: [UInt8]
    /// The whole encoded value.
    var value: [UInt8]
    /// The row.
    var key: PrimaryKey
}

extension StoreReader where Transaction: ~Copyable {
    /// Calls `body` with the entries of the index on `storage`'s attribute `slot` whose
    /// values lie in `ranges`, in index order (value, then primary key) or in reverse,
    /// until `body` returns false.
    ///
    /// Index keys hold at most ``IndexLayout/maximumValueLength`` bytes of a value; for
    /// a longer one the row is read to compare the whole value. Such truncated entries
    /// of one prefix come in primary-key order, not value order, but always as one
    /// group (same ``IndexEntry/group``), which sits where the prefix sorts.
    ///
    /// - Throws: ``StrataError/corruptRecord(entity:primaryKey:reason:)`` for a malformed
    ///   key or a dangling entry; ``StrataError/storage(_:)``; what `body` throws.
    func scanIndex(
        of storage: EntityStorage, slot: Int, in ranges: IndexKeyRanges, reverse: Bool = false,
        _ body: (IndexEntry) throws -> Bool
    ) throws {
        guard let index = storage.attributes[slot].index, let kind = storage.attributes[slot].indexKind else { return }
        for range in reverse ? ranges.ranges.reversed() : ranges.ranges {
            let maximum = IndexLayout.maximumValueLength
            let keyRange = KeyRange(
                lower: range.lower.map { Array($0.prefix(maximum)) },
                upper: range.upper.map { Array($0.prefix(maximum)) + Array(repeating: 0xFF, count: 9) },
                includesUpper: true)
            var keepGoing = true
            _ = try StoreFile.translatingStorageErrors {
                try transaction.pointee.scan(index, range: keyRange, reverse: reverse) { key, _ in
                    guard key.count > 8,
                          let primaryKey = PrimaryKey(encoded: UnsafeRawBufferPointer(rebasing: key[(key.count - 8)...]))
                    else {
                        throw StrataError.corruptRecord(entity: storage.name, primaryKey: 0, reason: "\(index) holds a malformed key")
                    }
                    let part = UnsafeRawBufferPointer(rebasing: key[..<(key.count - 8)])
                    let truncated = IndexLayout.isTruncated(part)
                    let group = Array(part)
                    let value = truncated ? try wholeValue(slot: slot, kind: kind, storage: storage, key: primaryKey) : group
                    // Outside the range on the side the scan walks away from: the end,
                    // unless inside a run of truncated keys, which are not in value order.
                    if !range.isAboveLower(value) { return reverse && !truncated ? .stop : .continue }
                    if !range.isBelowUpper(value) { return !reverse && !truncated ? .stop : .continue }
                    keepGoing = try body(IndexEntry(group: group, value: value, key: primaryKey))
                    return keepGoing ? .continue : .stop
                }
            }
            if !keepGoing { return }
        }
    }

    /// The encoded value of `slot` in row `key`, for a truncated index key.
    func wholeValue(slot: Int, kind: IndexKeyKind, storage: EntityStorage, key: PrimaryKey) throws -> [UInt8] {
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
}
