import Foundation
@testable import StrataLMDB
import StrataTesting
import Testing

@Suite("Map full and growth")
struct MapGrowthTests {
    /// 64 KiB of one byte value: a tiny map fills after a few of these.
    static func payload(_ byte: UInt8) -> [UInt8] { Array(repeating: byte, count: 64 << 10) }

    static func tinyEnvironment(_ dir: borrowing TemporaryDirectory, configure: (inout Environment.Configuration) -> Void = { _ in }) throws -> Environment {
        try openEnvironment(dir) {
            $0.mapSize = 256 << 10
            configure(&$0)
        }
    }

    @Test func writeGrowsTheMapAndRerunsTheWholeBody() throws {
        let dir = TemporaryDirectory()
        let env = try Self.tinyEnvironment(dir)
        let db = try env.openDatabase(named: "blobs", flags: .create)
        let startSize = env.info.mapSize
        var attempts = 0
        try env.write { txn throws in
            attempts += 1
            for n in 0..<40 { try txn.put(Self.payload(UInt8(n)), forKey: key(UInt64(n)), in: db) }
        }
        #expect(attempts > 1, "the first attempt hit the full map")
        #expect(env.mapGrowthCount == attempts - 1)
        #expect(env.info.mapSize > startSize)
        try env.read { txn throws in
            #expect(try txn.count(in: db) == 40)
            #expect(try txn.value(forKey: key(39), in: db) == Self.payload(39))
        }
    }

    @Test func mapFullCaughtInsideTheBodyStillGrowsAndRetries() throws {
        let dir = TemporaryDirectory()
        let env = try Self.tinyEnvironment(dir)
        let db = try env.openDatabase(named: "blobs", flags: .create)
        var swallowed = 0
        try env.write { txn throws in
            for n in 0..<40 {
                do { try txn.put(Self.payload(1), forKey: key(UInt64(n)), in: db) } catch LMDBError.mapFull { swallowed += 1 }
            }
        }
        #expect(swallowed > 0)
        #expect(try env.statistics(of: db).entries == 40)
    }

    @Test func maximumMapSizeIsATypedErrorAndNothingPartialIsVisible() throws {
        let dir = TemporaryDirectory()
        let env = try Self.tinyEnvironment(dir) { $0.maximumMapSize = 512 << 10 }
        let db = try env.openDatabase(named: "blobs", flags: .create)
        try env.write { txn in try txn.put(bytes("before"), forKey: key(0), in: db) }
        #expect(throws: LMDBError.mapFull) {
            try env.write { txn throws in
                for n in 1..<40 { try txn.put(Self.payload(2), forKey: key(UInt64(n)), in: db) }
            }
        }
        try env.read { txn throws in
            #expect(try txn.count(in: db) == 1)
            #expect(try txn.string(forKey: key(0), in: db) == "before")
        }
        #expect(env.info.mapSize == 512 << 10)
        // Smaller writes still work after the failure.
        try env.write { txn in try txn.put(bytes("after"), forKey: key(1), in: db) }
    }

    @Test func openSnapshotBlocksGrowthWithATypedError() throws {
        let dir = TemporaryDirectory()
        let env = try Self.tinyEnvironment(dir)
        let db = try env.openDatabase(named: "blobs", flags: .create)
        try env.write { txn in try txn.put(bytes("old"), forKey: key(0), in: db) }
        var snapshot: ReadSnapshot? = try env.makeSnapshot()
        let size = env.info.mapSize
        do {
            try env.write { txn throws in
                for n in 1..<40 { try txn.put(Self.payload(3), forKey: key(UInt64(n)), in: db) }
            }
            Issue.record("the write should fail while a snapshot pins the map")
        } catch let error as LMDBError {
            #expect(error == .mapFull)
            #expect(error.message.contains("snapshot"))
        }
        #expect(env.info.mapSize == size, "never remapped under a live reader")
        #expect(try snapshot?.read { try $0.count(in: db) } == 1)
        #expect(try env.statistics(of: db).entries == 1)
        snapshot = nil
        // With the snapshot released the same write grows the map and succeeds.
        try env.write { txn throws in
            for n in 1..<40 { try txn.put(Self.payload(3), forKey: key(UInt64(n)), in: db) }
        }
        #expect(try env.statistics(of: db).entries == 40)
    }

    @Test func readOnThisThreadBlocksGrowthAtOnce() throws {
        let dir = TemporaryDirectory()
        let env = try Self.tinyEnvironment(dir) { $0.mapGrowthReaderTimeout = .seconds(30) }
        let db = try env.openDatabase(named: "blobs", flags: .create)
        let started = ContinuousClock.now
        try env.read { _ throws in
            _ = #expect(throws: LMDBError.mapFull) {
                try env.write { txn throws in
                    for n in 0..<40 { try txn.put(Self.payload(4), forKey: key(UInt64(n)), in: db) }
                }
            }
        }
        #expect(ContinuousClock.now - started < .seconds(10), "refused at once, not after the timeout")
    }

    @Test func growthWaitsForShortReadsOnOtherThreads() throws {
        // Timeline:
        //   reader:  read { signal(reading) ── sleep 200 ms ──────────────── end }
        //   writer:                  write(needs growth) ── waits for reader ─┴─ remap, retry, commit
        let dir = TemporaryDirectory()
        let env = try Self.tinyEnvironment(dir)
        let db = try env.openDatabase(named: "blobs", flags: .create)
        let reading = DispatchSemaphore(value: 0)
        let reader = TestThread {
            try? env.read { _ throws in
                reading.signal()
                Thread.sleep(forTimeInterval: 0.2)
            }
        }
        #expect(reading.wait(timeout: .now() + 10) == .success)
        try env.write { txn throws in
            for n in 0..<40 { try txn.put(Self.payload(5), forKey: key(UInt64(n)), in: db) }
        }
        #expect(reader.join())
        #expect(env.mapGrowthCount >= 1)
        #expect(try env.statistics(of: db).entries == 40)
    }

    @Test func growthGivesUpWhenAReaderStaysOpen() throws {
        // Timeline:
        //   reader: read { signal(reading) ── wait(release) ─────────────────────── end }
        //   writer:          write(needs growth) ── 100 ms timeout ── mapFull ── signal(release)
        let dir = TemporaryDirectory()
        let env = try Self.tinyEnvironment(dir) { $0.mapGrowthReaderTimeout = .milliseconds(100) }
        let db = try env.openDatabase(named: "blobs", flags: .create)
        let reading = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let reader = TestThread {
            try? env.read { _ throws in
                reading.signal()
                _ = release.wait(timeout: .now() + 30)
            }
        }
        #expect(reading.wait(timeout: .now() + 10) == .success)
        #expect(throws: LMDBError.mapFull) {
            try env.write { txn throws in
                for n in 0..<40 { try txn.put(Self.payload(6), forKey: key(UInt64(n)), in: db) }
            }
        }
        release.signal()
        #expect(reader.join())
        #expect(try env.statistics(of: db).entries == 0)
        // New readers were only held back during the attempt, never left waiting.
        #expect(try env.read { try $0.count(in: db) } == 0)
    }
}
