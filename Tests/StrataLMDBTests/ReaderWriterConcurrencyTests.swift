import Foundation
@testable import StrataLMDB
import StrataTesting
import Testing

@Suite("Readers and the writer")
struct ReaderWriterConcurrencyTests {
    @Test func readersNeverWaitForAnOpenWriteTransaction() throws {
        // Timeline:
        //   writer:  write { put ─ signal(inWrite) ─────────── wait(readersDone) ─ commit }
        //   readers:                └─ 4 threads × 100 reads ─ signal(readersDone)
        // If a reader waited for the writer, readersDone would never come: the writer's
        // wait times out and the test fails instead of hanging.
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "t", flags: .create)
        try env.write { txn in try txn.put(bytes("committed"), forKey: key(1), in: db) }

        let inWrite = DispatchSemaphore(value: 0)
        let readersDone = DispatchSemaphore(value: 0)
        let readersFinishedInTime = TestBox(false)
        let writer = TestThread {
            try? env.write { txn throws in
                try txn.put(bytes("pending"), forKey: key(1), in: db)
                inWrite.signal()
                readersFinishedInTime.value = readersDone.wait(timeout: .now() + 10) == .success
            }
        }
        #expect(inWrite.wait(timeout: .now() + 10) == .success)
        let seen = (0..<4).map { _ in TestBox<[String]>([]) }  // one per thread: no shared mutation
        let readers = seen.map { mine in
            TestThread {
                for _ in 0..<100 {
                    let value = try? env.read { try $0.string(forKey: key(1), in: db) }
                    mine.value.append(value ?? "error")
                }
            }
        }
        for reader in readers { #expect(reader.join()) }
        readersDone.signal()
        #expect(writer.join())
        #expect(readersFinishedInTime.value)
        #expect(seen.allSatisfy { $0.value.count == 100 && $0.value.allSatisfy { $0 == "committed" } })
        #expect(try env.read { try $0.string(forKey: key(1), in: db) } == "pending")
    }

    @Test func readersSeeEveryCommitWholeUnderAContinuousWriter() throws {
        // The writer keeps two keys equal in every commit; readers must never see them differ.
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "pair", flags: .create)
        try env.write { txn throws in
            try txn.put(key(0), forKey: bytes("a"), in: db)
            try txn.put(key(0), forKey: bytes("b"), in: db)
        }
        let writer = TestThread {
            for n in 1...300 {
                try? env.write { txn throws in
                    try txn.put(key(UInt64(n)), forKey: bytes("a"), in: db)
                    try txn.put(key(UInt64(n)), forKey: bytes("b"), in: db)
                }
            }
        }
        let torn = TestBox(0)
        let reader = TestThread {
            for _ in 0..<2000 {
                let pair = try? env.read { txn throws in
                    (try txn.value(forKey: bytes("a"), in: db), try txn.value(forKey: bytes("b"), in: db))
                }
                if pair == nil || pair!.0 != pair!.1 { torn.value += 1 }
            }
        }
        #expect(writer.join(seconds: 60))
        #expect(reader.join(seconds: 60))
        #expect(torn.value == 0)
    }

    @Test func readersFullIsATypedError() throws {
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir) { $0.maxReaders = 3 }
        let snapshots = try (0..<3).map { _ in try env.makeSnapshot() }
        #expect(throws: LMDBError.readersFull) { try env.makeSnapshot() }
        #expect(throws: LMDBError.readersFull) { try env.read { _ in } }
        #expect(env.openSnapshotCount == 3)
        _ = snapshots
    }
}
