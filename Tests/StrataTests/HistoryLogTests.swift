import Foundation
@_spi(StorageInternals) @testable import Strata
import StrataLMDB
import StrataTesting
import Testing

/// The persistent-history log's format and its database: records round-trip, any bytes
/// decode or fail with a typed error, sequence numbers never repeat, trimming by sequence
/// and by date.
@Suite("Persistent history log")
struct HistoryLogTests {
    static let sample = HistoryRecord(
        timestamp: Date(timeIntervalSinceReferenceDate: 812_345_678.25), author: "importer", contextName: "background",
        processID: 4242,
        changes: [
            .init(kind: .insert, entity: 2, primaryKey: 17),
            .init(kind: .update, entity: 2, primaryKey: 3, updatedProperties: ["title", "folder", "tags"]),
            .init(kind: .delete, entity: 5, primaryKey: 1 << 40, tombstone: ["code": .string("gone"), "rank": .integer(-3)]),
        ])

    @Test("a record round-trips (nil author and context too), and its encoding is stable")
    func roundTrip() throws {
        let bytes = Self.sample.encoded()
        let decoded = try bytes.withUnsafeBytes { try HistoryRecord(decoding: $0) }
        #expect(decoded == Self.sample)
        #expect(decoded.encoded() == bytes)
        let bare = HistoryRecord(timestamp: Date(timeIntervalSinceReferenceDate: 0), author: nil, contextName: nil, processID: -1, changes: [])
        #expect(try bare.encoded().withUnsafeBytes { try HistoryRecord(decoding: $0) } == bare)
    }

    @Test("any bytes decode or throw RecordDecodingError: every truncation of a record, every single-byte change, and 5,000 random strings")
    func totalDecoding() {
        let bytes = Self.sample.encoded()
        for length in 0..<bytes.count {
            #expect(throws: RecordDecodingError.self) { try Array(bytes.prefix(length)).withUnsafeBytes { try HistoryRecord(decoding: $0) } }
        }
        for index in bytes.indices {
            for value: UInt8 in [0, 1, 0x7F, 0x80, 0xFF] {
                var damaged = bytes
                damaged[index] = value
                _ = try? damaged.withUnsafeBytes { try HistoryRecord(decoding: $0) }   // decodes or throws; never traps
            }
        }
        var random = SeededRandomNumberGenerator(seed: 24)
        for _ in 0..<5000 {
            let count = Int(random.next() % 64)
            let junk = (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            _ = try? junk.withUnsafeBytes { try HistoryRecord(decoding: $0) }
        }
        #expect(throws: RecordDecodingError.self) { try (bytes + [0]).withUnsafeBytes { try HistoryRecord(decoding: $0) } }
    }

    @Test("appended records get increasing sequence numbers that survive trimming; reads after a sequence, with a limit; trims by sequence and by date")
    func appendReadTrim() throws {
        let directory = TemporaryDirectory()
        let file = try StoreFixtures.open(directory)
        let environment = file.environment
        func append(_ seconds: Double) throws -> UInt64 {
            var record = Self.sample
            record.timestamp = Date(timeIntervalSinceReferenceDate: seconds)
            return try environment.write { txn in
                try HistoryLog.append(record, in: txn, history: file.historyDatabase, metadata: file.metadataDatabase)
            }
        }
        #expect(try (1...5).map { try append(Double($0) * 100) } == [1, 2, 3, 4, 5])
        func sequences(after: UInt64?, limit: Int? = nil) throws -> [UInt64] {
            try environment.read { txn in try HistoryLog.records(after: after, limit: limit, in: txn, history: file.historyDatabase).map(\.sequence) }
        }
        #expect(try sequences(after: nil) == [1, 2, 3, 4, 5])
        #expect(try sequences(after: 3) == [4, 5])
        #expect(try sequences(after: 1, limit: 2) == [2, 3])
        #expect(try sequences(after: 5) == [] && sequences(after: .max) == [])
        #expect(try environment.read { txn in try HistoryLog.records(after: 4, in: txn, history: file.historyDatabase).first?.record.author } == "importer")

        #expect(try environment.write { txn in try HistoryLog.delete(before: 3, in: txn, history: file.historyDatabase) } == 2)
        #expect(try sequences(after: nil) == [3, 4, 5])
        #expect(try environment.write { txn in try HistoryLog.delete(before: Date(timeIntervalSinceReferenceDate: 450), in: txn, history: file.historyDatabase) } == 2)
        #expect(try sequences(after: nil) == [5])
        #expect(try environment.write { txn in try HistoryLog.delete(before: 100, in: txn, history: file.historyDatabase) } == 1)
        #expect(try append(600) == 6, "a trimmed log does not restart its sequence")

        // A damaged entry is a typed error naming it.
        try environment.write { txn in try txn.put([9, 9, 9], forKey: StoreMetadata.bigEndian(7), in: file.historyDatabase) }
        let error = #expect(throws: StrataError.self) { try sequences(after: 6) }
        #expect(error?.code == .corruptRecord && error?.primaryKey == 7)
    }
}
