import Foundation
import StrataLMDB

/// One transaction of persistent history as a store keeps it in `strata.history`: when a
/// save or batch request committed, who made it, and what it changed: rows by entity
/// number (stable across renames) and primary key, properties by the names they had then.
///
/// The groundwork of persistent history (issue 24): the format, and how
/// ``HistoryLog`` appends, reads and trims it inside LMDB transactions.
///
/// ```
/// record  := 0x01 f64(timestamp) text?(author) text?(context) varint(pid) varint(count) change*
/// change  := kind(1 byte) varint(entity) varint(primaryKey) body
/// body    := update: varint(count) text*                 the changed properties' names
///            delete: varint(count) text* varint(length) record
///                                                       the tombstone: names, then their values as a
///                                                       record (``RecordCodec``, fields 1...count)
///            insert: nothing
/// text?   := varint(0) for nil, else varint(byteCount + 1) UTF-8 bytes
/// f64     := 8 bytes, little-endian bits of the seconds since 2001
/// ```
///
/// Decoding is total: any bytes give a record or a ``RecordDecodingError``, never a trap.
struct HistoryRecord: Sendable, Hashable {
    /// What a change did to its row.
    enum Kind: UInt8, Sendable, Hashable {
        case insert = 1, update = 2, delete = 3
    }

    /// One row's change.
    struct Change: Sendable, Hashable {
        /// Insert, update or delete.
        var kind: Kind
        /// The row's entity number (``StoreSchema``).
        var entity: UInt16
        /// The row's primary key.
        var primaryKey: UInt64
        /// For an update: the names of the properties whose values changed.
        var updatedProperties: [String] = []
        /// For a delete: the values kept of the deleted row, by attribute name.
        var tombstone: [String: AttributeValue] = [:]
    }

    /// When the transaction committed.
    var timestamp: Date
    /// The saving context's transaction author.
    var author: String?
    /// The saving context's name.
    var contextName: String?
    /// The process that committed it.
    var processID: Int32
    /// The changes, in the order they were written.
    var changes: [Change]

    /// The format version byte.
    static let formatVersion: UInt8 = 1

    /// A record of `changes` committed at `timestamp`.
    init(timestamp: Date, author: String?, contextName: String?, processID: Int32, changes: [Change]) {
        self.timestamp = timestamp
        self.author = author
        self.contextName = contextName
        self.processID = processID
        self.changes = changes
    }

    /// The record as ``HistoryLog`` stores it.
    func encoded() -> [UInt8] {
        var bytes: [UInt8] = [Self.formatVersion]
        bytes.reserveCapacity(32 + changes.count * 12)
        withUnsafeBytes(of: timestamp.timeIntervalSinceReferenceDate.bitPattern.littleEndian) { bytes.append(contentsOf: $0) }
        Self.appendOptionalText(author, to: &bytes)
        Self.appendOptionalText(contextName, to: &bytes)
        RecordCodec.appendVarint(UInt64(UInt32(bitPattern: processID)), to: &bytes)
        RecordCodec.appendVarint(UInt64(changes.count), to: &bytes)
        for change in changes {
            bytes.append(change.kind.rawValue)
            RecordCodec.appendVarint(UInt64(change.entity), to: &bytes)
            RecordCodec.appendVarint(change.primaryKey, to: &bytes)
            switch change.kind {
            case .insert:
                break
            case .update:
                RecordCodec.appendVarint(UInt64(change.updatedProperties.count), to: &bytes)
                for name in change.updatedProperties { Self.appendOptionalText(name, to: &bytes) }
            case .delete:
                let kept = change.tombstone.sorted { $0.key < $1.key }
                RecordCodec.appendVarint(UInt64(kept.count), to: &bytes)
                for (name, _) in kept { Self.appendOptionalText(name, to: &bytes) }
                var fields: [UInt32: AttributeValue] = [:]
                for (index, entry) in kept.enumerated() { fields[UInt32(index + 1)] = entry.value }
                let values = RecordCodec.encode(Record(version: 0, fields: fields))
                RecordCodec.appendVarint(UInt64(values.count), to: &bytes)
                bytes.append(contentsOf: values)
            }
        }
        return bytes
    }

    /// Decodes ``encoded()``.
    ///
    /// - Throws: ``RecordDecodingError`` for an unknown version, a truncated or over-long
    ///   record, an unknown change kind, an entity number or field number out of range,
    ///   text that is not UTF-8, or a tombstone that does not decode.
    init(decoding bytes: UnsafeRawBufferPointer) throws(RecordDecodingError) {
        var offset = 0
        func fail(_ reason: String) -> RecordDecodingError { RecordDecodingError(reason: reason, offset: offset) }
        guard bytes.first == Self.formatVersion else { throw fail("unknown history format \(bytes.first.map(String.init) ?? "(empty)")") }
        offset = 1
        guard bytes.count - offset >= 8 else { throw fail("the timestamp is cut short") }
        let seconds = Double(bitPattern: UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)))
        offset += 8
        guard seconds.isFinite else { throw fail("the timestamp is not a finite number") }
        timestamp = Date(timeIntervalSinceReferenceDate: seconds)
        author = try Self.readOptionalText(bytes, at: &offset)
        contextName = try Self.readOptionalText(bytes, at: &offset)
        let pid = try RecordCodec.readVarint(bytes, at: &offset)
        guard pid <= UInt64(UInt32.max) else { throw fail("the process id \(pid) is out of range") }
        processID = Int32(bitPattern: UInt32(pid))
        let count = try RecordCodec.readVarint(bytes, at: &offset)
        // Each change takes at least three bytes: a count beyond that is damage.
        guard count <= UInt64(bytes.count - offset) / 3 else { throw fail("\(count) changes cannot fit in \(bytes.count - offset) bytes") }
        var changes: [Change] = []
        changes.reserveCapacity(Int(count))
        for _ in 0..<count {
            guard offset < bytes.count, let kind = Kind(rawValue: bytes[offset]) else { throw fail("an unknown change kind") }
            offset += 1
            let entity = try RecordCodec.readVarint(bytes, at: &offset)
            guard entity >= 1, entity <= UInt64(UInt16.max) else { throw fail("entity number \(entity) is out of range") }
            let key = try RecordCodec.readVarint(bytes, at: &offset)
            guard key >= 1 else { throw fail("primary key 0") }
            var change = Change(kind: kind, entity: UInt16(entity), primaryKey: key)
            switch kind {
            case .insert:
                break
            case .update:
                change.updatedProperties = try Self.readNames(bytes, at: &offset)
            case .delete:
                let names = try Self.readNames(bytes, at: &offset)
                let length = try RecordCodec.readVarint(bytes, at: &offset)
                guard length <= UInt64(bytes.count - offset) else { throw fail("the tombstone is cut short") }
                let values = try RecordCodec.decode(UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + Int(length)]))
                offset += Int(length)
                for (number, value) in values.fields {
                    guard number >= 1, Int(number) <= names.count else { throw fail("the tombstone holds a value of no name") }
                    change.tombstone[names[Int(number) - 1]] = value
                }
            }
            changes.append(change)
        }
        guard offset == bytes.count else { throw fail("the record has trailing bytes") }
        self.changes = changes
    }

    /// Reads a count, then that many names (none nil).
    private static func readNames(_ bytes: UnsafeRawBufferPointer, at offset: inout Int) throws(RecordDecodingError) -> [String] {
        let count = try RecordCodec.readVarint(bytes, at: &offset)
        guard count <= UInt64(bytes.count - offset) else { throw RecordDecodingError(reason: "\(count) names cannot fit", offset: offset) }
        var names: [String] = []
        for _ in 0..<count {
            guard let name = try readOptionalText(bytes, at: &offset) else { throw RecordDecodingError(reason: "a name is missing", offset: offset) }
            names.append(name)
        }
        return names
    }

    private static func appendOptionalText(_ text: String?, to bytes: inout [UInt8]) {
        guard let text else {
            bytes.append(0)
            return
        }
        RecordCodec.appendVarint(UInt64(text.utf8.count) + 1, to: &bytes)
        bytes.append(contentsOf: text.utf8)
    }

    private static func readOptionalText(_ bytes: UnsafeRawBufferPointer, at offset: inout Int) throws(RecordDecodingError) -> String? {
        let length = try RecordCodec.readVarint(bytes, at: &offset)
        guard length > 0 else { return nil }
        guard length - 1 <= UInt64(bytes.count - offset) else { throw RecordDecodingError(reason: "text is cut short", offset: offset) }
        let slice = UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + Int(length - 1)])
        guard let text = String(validating: slice, as: UTF8.self) else { throw RecordDecodingError(reason: "text is not UTF-8", offset: offset) }
        offset += Int(length - 1)
        return text
    }
}

/// The persistent-history database of a store (`strata.history`): one entry per
/// transaction, keyed by its sequence number (8 bytes big-endian, from 1, never reused:
/// the last one given is kept in the metadata under `historySequence`, so trimming the
/// log does not restart it).
enum HistoryLog {
    /// The metadata key of the last sequence number given.
    static let sequenceKey = "historySequence"

    /// Appends `record` in `txn` and returns its sequence number.
    ///
    /// Then deletes what `retention` no longer keeps: the oldest records past its count,
    /// and those older than its age (one look at the oldest record when nothing is due).
    static func append(
        _ record: HistoryRecord, in txn: borrowing WriteTransaction, history: Database, metadata: Database,
        retention: PersistentHistoryRetention = .unlimited
    ) throws -> UInt64 {
        let key = Array(sequenceKey.utf8)
        let last = try txn.value(forKey: key, in: metadata).map { bytes throws in
            try bytes.withUnsafeBytes { raw throws(MetadataDecodingError) in try StoreMetadata.decodeUInt64(raw, what: "history sequence") }
        } ?? 0
        guard last < .max else { throw StrataError.corruptStore(store: "strata.history", reason: "the history has used every sequence number") }
        let sequence = last + 1
        try txn.put(StoreMetadata.bigEndian(sequence), forKey: key, in: metadata)
        try txn.put(record.encoded(), forKey: StoreMetadata.bigEndian(sequence), in: history, flags: .append)
        try trim(to: retention, newest: sequence, now: record.timestamp, in: txn, history: history)
        return sequence
    }

    /// The records after sequence `after` (all of them for nil) committed at or after
    /// `since` (any time for nil), in order, at most `limit`. Records before `since` are
    /// stepped over by their timestamp alone, without being decoded.
    ///
    /// - Throws: ``StrataError/corruptRecord(entity:primaryKey:reason:)`` (entity
    ///   `strata.history`) for an entry that does not decode; LMDB errors.
    static func records<T: ReadableTransaction & ~Copyable>(
        after: UInt64?, since: Date? = nil, limit: Int? = nil, in txn: borrowing T, history: Database
    ) throws -> [(sequence: UInt64, record: HistoryRecord)] {
        var found: [(sequence: UInt64, record: HistoryRecord)] = []
        try txn.withCursor(on: history) { cursor in
            var entry = try after.map { try cursor.seek(atOrAfter: StoreMetadata.bigEndian($0 &+ 1)) } ?? cursor.first()
            if let after, after == .max { entry = nil }
            while let (key, value) = entry, found.count < (limit ?? .max) {
                guard let sequence = PrimaryKey(encoded: key)?.rawValue else {
                    throw StrataError.corruptRecord(entity: StoreLayout.historyDatabase, primaryKey: 0, reason: "a key of \(key.count) bytes")
                }
                if let since, value.count >= 9,
                   Double(bitPattern: UInt64(littleEndian: value.loadUnaligned(fromByteOffset: 1, as: UInt64.self))) < since.timeIntervalSinceReferenceDate {
                    entry = try cursor.next()
                    continue
                }
                do throws(RecordDecodingError) {
                    found.append((sequence, try HistoryRecord(decoding: value)))
                } catch {
                    throw StrataError.corruptRecord(entity: StoreLayout.historyDatabase, primaryKey: sequence, reason: error.description)
                }
                entry = try cursor.next()
            }
        }
        return found
    }

    /// Deletes the records `retention` no longer keeps, `newest` being the last sequence and
    /// `now` the time.
    static func trim(
        to retention: PersistentHistoryRetention, newest: UInt64, now: Date, in txn: borrowing WriteTransaction, history: Database
    ) throws {
        guard retention.maximumTransactions != nil || retention.maximumAge != nil else { return }
        let oldest = try txn.withCursor(on: history) { cursor -> (sequence: UInt64, seconds: Double)? in
            guard let (key, value) = try cursor.first(), let sequence = PrimaryKey(encoded: key)?.rawValue, value.count >= 9 else { return nil }
            return (sequence, Double(bitPattern: UInt64(littleEndian: value.loadUnaligned(fromByteOffset: 1, as: UInt64.self))))
        }
        guard let oldest else { return }
        if let count = retention.maximumTransactions, newest - oldest.sequence >= UInt64(count) {
            _ = try delete(before: newest - UInt64(count) + 1, in: txn, history: history)
        }
        if let age = retention.maximumAge {
            let limit = now.addingTimeInterval(-(Double(age.components.seconds) + Double(age.components.attoseconds) / 1e18))
            if oldest.seconds < limit.timeIntervalSinceReferenceDate { _ = try delete(before: limit, in: txn, history: history) }
        }
    }

    /// Deletes the records before sequence `before` and returns how many went.
    static func delete(before: UInt64, in txn: borrowing WriteTransaction, history: Database) throws -> Int {
        try txn.withCursor(on: history) { cursor in
            var deleted = 0
            while let (key, _) = try cursor.first(), let sequence = PrimaryKey(encoded: key)?.rawValue, sequence < before {
                try cursor.deleteCurrent()
                deleted += 1
            }
            return deleted
        }
    }

    /// Deletes the records, oldest first, until one committed at or after `date`; returns
    /// how many went. (Records are in commit order; a clock set back is not looked past.)
    static func delete(before date: Date, in txn: borrowing WriteTransaction, history: Database) throws -> Int {
        try txn.withCursor(on: history) { cursor in
            var deleted = 0
            while let (_, value) = try cursor.first() {
                guard value.count >= 9 else { break }
                let seconds = Double(bitPattern: UInt64(littleEndian: value.loadUnaligned(fromByteOffset: 1, as: UInt64.self)))
                guard seconds < date.timeIntervalSinceReferenceDate else { break }
                try cursor.deleteCurrent()
                deleted += 1
            }
            return deleted
        }
    }
}
