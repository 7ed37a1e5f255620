import Foundation

/// A set of keys to scan, in the database's key order.
///
/// ```swift
/// try txn.scan(notes, range: .prefix([0x01])) { key, value in
///     print(key.count, value.count)
///     return .continue
/// }
/// ```
///
/// Bounds compare with the database's own comparator (`mdb_cmp`), so they also hold for
/// ``Database/Flags/reverseKey`` and ``Database/Flags/integerKey`` databases. A prefix
/// range is meaningful only for the default byte order.
public struct KeyRange: Sendable, Hashable {
    /// The first key of the range, inclusive; nil for the start of the database.
    public var lower: [UInt8]?
    /// The end of the range; nil for the end of the database.
    public var upper: [UInt8]?
    /// Whether ``upper`` itself belongs to the range.
    public var includesUpper: Bool

    /// A range from `lower` (inclusive) to `upper`, inclusive or not.
    public init(lower: [UInt8]?, upper: [UInt8]?, includesUpper: Bool = false) {
        self.lower = lower
        self.upper = upper
        self.includesUpper = includesUpper
    }

    /// Every key.
    public static let all = KeyRange(lower: nil, upper: nil)

    /// Every key that starts with `prefix` (default byte order).
    public static func prefix(_ prefix: [UInt8]) -> KeyRange {
        // The first key after every key with the prefix: increment the last byte that is
        // not 0xFF and drop what follows it. A prefix of only 0xFF bytes has no such key.
        var upper = prefix
        while let last = upper.last, last == 0xFF { upper.removeLast() }
        if upper.isEmpty { return KeyRange(lower: prefix.isEmpty ? nil : prefix, upper: nil) }
        upper[upper.count - 1] += 1
        return KeyRange(lower: prefix, upper: upper)
    }

    /// Keys from `lower`, inclusive, to `upper`, exclusive.
    public static func from(_ lower: [UInt8], upTo upper: [UInt8]) -> KeyRange {
        KeyRange(lower: lower, upper: upper)
    }

    /// Keys from `lower` to `upper`, both inclusive.
    public static func from(_ lower: [UInt8], through upper: [UInt8]) -> KeyRange {
        KeyRange(lower: lower, upper: upper, includesUpper: true)
    }

    /// Keys at or after `lower`.
    public static func from(_ lower: [UInt8]) -> KeyRange {
        KeyRange(lower: lower, upper: nil)
    }
}

/// What a scan's body asks for next.
public enum ScanStep: Sendable {
    /// Go on to the next entry.
    case `continue`
    /// Stop the scan.
    case stop
}

extension ReadableTransaction where Self: ~Copyable {
    /// Visits the entries of `range` in key order (or reverse order), zero-copy, until the
    /// body returns ``ScanStep/stop``. Returns the number of entries visited.
    ///
    /// With sorted duplicates every key/value pair is visited.
    @inlinable @discardableResult
    public func scan(
        _ database: Database, range: KeyRange = .all, reverse: Bool = false,
        _ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> ScanStep
    ) throws -> Int {
        try withCursor(on: database) { cursor in
            var visited = 0
            if reverse {
                var entry = try Self.start(reverse: cursor, range)
                if let lower = range.lower {
                    while let current = entry, lower.withUnsafeBytes({ cursor.compare(current.key, $0) }) >= 0 {
                        visited += 1
                        if try body(current.key, current.value) == .stop { break }
                        entry = try cursor.previous()
                    }
                } else {
                    while let current = entry {
                        visited += 1
                        if try body(current.key, current.value) == .stop { break }
                        entry = try cursor.previous()
                    }
                }
            } else {
                var entry = try range.lower.map { try cursor.seek(atOrAfter: $0) } ?? cursor.first()
                while let current = entry {
                    if let upper = range.upper {
                        let order = upper.withUnsafeBytes { cursor.compare(current.key, $0) }
                        if order > 0 || (order == 0 && !range.includesUpper) { break }
                    }
                    visited += 1
                    if try body(current.key, current.value) == .stop { break }
                    entry = try cursor.next()
                }
            }
            return visited
        }
    }

    @usableFromInline
    static func start(reverse cursor: borrowing Cursor, _ range: KeyRange) throws -> Cursor.Entry? {
        guard let upper = range.upper else { return try cursor.last() }
        guard var entry = try cursor.seek(atOrBefore: upper) else { return nil }
        if !range.includesUpper, upper.withUnsafeBytes({ cursor.compare(entry.key, $0) }) == 0 {
            // Skip every duplicate of the excluded upper key.
            guard let previous = try cursor.previousKey() else { return nil }
            entry = previous
            // previousKey lands on the last value of the previous key already.
        } else if cursor.database.flags.contains(.sortedDuplicates) {
            entry = try cursor.lastDuplicate() ?? entry
        }
        return entry
    }
}
