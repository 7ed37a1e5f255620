import Foundation
import Synchronization
@testable import StrataLMDB
import StrataTesting
import Testing

@Suite("Transactions and MVCC")
struct TransactionMVCCTests {
    @Test func readTransactionKeepsItsSnapshotAcrossLaterCommits() throws {
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "notes", flags: .create)
        try env.write { txn in try txn.put(bytes("one"), forKey: key(1), in: db) }

        try env.read { old throws in
            let before = old.id
            // A commit while the read transaction is open (same thread, MDB_NOTLS).
            try env.write { txn throws in
                try txn.put(bytes("two"), forKey: key(1), in: db)
                try txn.put(bytes("new"), forKey: key(2), in: db)
            }
            #expect(try old.string(forKey: key(1), in: db) == "one")
            #expect(try old.string(forKey: key(2), in: db) == nil)
            #expect(try old.count(in: db) == 1)
            #expect(old.id == before)
            // A new read transaction sees the commit.
            try env.read { fresh throws in
                #expect(try fresh.string(forKey: key(1), in: db) == "two")
                #expect(try fresh.count(in: db) == 2)
                #expect(fresh.id == before + 1)
            }
        }
    }

    @Test func snapshotKeepsSeeingOldDataWhileWritesCommit() throws {
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "notes", flags: .create)
        try env.write { txn in try txn.put(bytes("v1"), forKey: key(1), in: db) }
        let snapshot = try env.makeSnapshot()
        #expect(snapshot.transactionID == env.info.lastTransactionID)
        #expect(env.openSnapshotCount == 1)
        for version in 2...5 {
            try env.write { txn in try txn.put(bytes("v\(version)"), forKey: key(1), in: db) }
        }
        #expect(try snapshot.read { try $0.string(forKey: key(1), in: db) } == "v1")
        #expect(try env.read { try $0.string(forKey: key(1), in: db) } == "v5")
        #expect(env.readers().contains { $0.transactionID == snapshot.transactionID })
    }

    @Test func snapshotIsReleasedWithItsLastReference() throws {
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        var first: ReadSnapshot? = try env.makeSnapshot()
        var shared: ReadSnapshot? = first
        #expect(env.openSnapshotCount == 1)
        #expect(env.oldestSnapshotAge != nil)
        first = nil
        #expect(env.openSnapshotCount == 1, "another reference still uses it")
        _ = shared
        shared = nil
        #expect(env.openSnapshotCount == 0)
        #expect(env.oldestSnapshotAge == nil)
        #expect(env.readers().allSatisfy { $0.transactionID == nil })
    }

    @Test func notlsReadTransactionMovesBetweenThreads() throws {
        // Timeline:
        //   thread A: makeSnapshot() ──► hands it over
        //   thread B:                    reads through it ──► hands it over
        //   thread C:                                         reads, drops the last reference (abort)
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "t", flags: .create)
        try env.write { txn in try txn.put(bytes("A"), forKey: key(1), in: db) }

        let handoff = TestBox<ReadSnapshot?>(nil)
        let results = TestBox<[String]>([])
        let a = TestThread { handoff.value = try? env.makeSnapshot() }
        #expect(a.join())
        try env.write { txn in try txn.put(bytes("B"), forKey: key(1), in: db) }
        let b = TestThread {
            results.value.append((try? handoff.value?.read { try $0.string(forKey: key(1), in: db) }) ?? "error")
        }
        #expect(b.join())
        let c = TestThread {
            results.value.append((try? handoff.value?.read { try $0.string(forKey: key(1), in: db) }) ?? "error")
            handoff.value = nil  // the abort happens here, on thread C
        }
        #expect(c.join())
        #expect(results.value == ["A", "A"])
        #expect(env.openSnapshotCount == 0)
    }

    @Test func sharedSnapshotSerialisesItsUsers() throws {
        // Four threads read through one snapshot; each body stays inside for a moment.
        // If access were not serialised, two bodies would overlap and `most` would exceed 1.
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "t", flags: .create)
        try env.write { txn in try txn.put(bytes("shared"), forKey: key(1), in: db) }
        let snapshot = try env.makeSnapshot()
        let inside = Mutex(0), most = Mutex(0), reads = Mutex(0)
        let threads = (0..<4).map { _ in
            TestThread {
                for _ in 0..<25 {
                    let value = try? snapshot.read { txn throws in
                        let now = inside.withLock { $0 += 1; return $0 }
                        most.withLock { $0 = max($0, now) }
                        usleep(200)
                        defer { inside.withLock { $0 -= 1 } }
                        return try txn.string(forKey: key(1), in: db)
                    }
                    if value == "shared" { reads.withLock { $0 += 1 } }
                }
            }
        }
        for thread in threads { #expect(thread.join(seconds: 60)) }
        #expect(most.withLock { $0 } == 1)
        #expect(reads.withLock { $0 } == 100)
    }

    @Test func severalReadTransactionsOnOneThread() throws {
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "t", flags: .create)
        try env.write { txn in try txn.put(bytes("1"), forKey: key(1), in: db) }
        let s1 = try env.makeSnapshot()
        try env.write { txn in try txn.put(bytes("2"), forKey: key(1), in: db) }
        let s2 = try env.makeSnapshot()
        try env.read { outer throws in
            try env.read { inner throws in
                #expect(try outer.string(forKey: key(1), in: db) == "2")
                #expect(try inner.string(forKey: key(1), in: db) == "2")
                #expect(try s1.read { try $0.string(forKey: key(1), in: db) } == "1")
                // Nested use of one snapshot on one thread does not deadlock.
                try s2.read { _ throws in
                    #expect(try s2.read { try $0.string(forKey: key(1), in: db) } == "2")
                }
            }
        }
        #expect(env.activeReadCount == 0)
    }

    @Test func errorThrownInsideWriteLeavesNothing() throws {
        struct Abandon: Error {}
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "t", flags: .create)
        try env.write { txn in try txn.put(bytes("keep"), forKey: key(1), in: db) }
        let before = env.info.lastTransactionID
        #expect(throws: Abandon.self) {
            try env.write { txn throws in
                try txn.put(bytes("changed"), forKey: key(1), in: db)
                try txn.put(bytes("added"), forKey: key(2), in: db)
                try txn.delete(forKey: key(1), in: db)
                throw Abandon()
            }
        }
        try env.read { txn throws in
            #expect(try txn.string(forKey: key(1), in: db) == "keep")
            #expect(try txn.string(forKey: key(2), in: db) == nil)
        }
        #expect(env.info.lastTransactionID == before)
        // The writer lock was released: the next write goes through.
        try env.write { txn in try txn.put(bytes("after"), forKey: key(3), in: db) }
    }

    @Test func writeSeesItsOwnChangesAndReturnsAValue() throws {
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "t", flags: .create)
        let count = try env.write { txn throws in
            for n in 0..<10 { try txn.put(bytes("\(n)"), forKey: key(UInt64(n)), in: db) }
            #expect(try txn.delete(forKey: key(3), in: db))
            #expect(try txn.delete(forKey: key(3), in: db) == false)
            #expect(try txn.string(forKey: key(9), in: db) == "9")
            return try txn.count(in: db)
        }
        #expect(count == 9)
        try env.write { txn throws in
            try txn.reserve(count: 4, forKey: key(100), in: db) { buffer in
                bytes("rsvd").withUnsafeBytes { buffer.copyMemory(from: $0) }
            }
        }
        #expect(try env.read { try $0.string(forKey: key(100), in: db) } == "rsvd")
        try env.write { txn in try txn.removeAll(in: db) }
        #expect(try env.statistics(of: db).entries == 0)
    }

    @Test func nestedTransactionJoinsItsParentOrLeavesNothing() throws {
        struct Abandon: Error {}
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "t", flags: .create)
        let before = env.info.lastTransactionID
        let outcome = try env.write { txn throws in
            try txn.put(bytes("parent"), forKey: key(1), in: db)
            let joined = try txn.nested { child throws in
                #expect(try child.string(forKey: key(1), in: db) == "parent")
                try child.put(bytes("child"), forKey: key(2), in: db)
                return 2
            }
            #expect(throws: Abandon.self) {
                try txn.nested { child throws in
                    try child.put(bytes("undone"), forKey: key(3), in: db)
                    try child.put(bytes("undone"), forKey: key(1), in: db)
                    throw Abandon()
                }
            }
            // The parent goes on as if the failed child had never run.
            #expect(try txn.string(forKey: key(1), in: db) == "parent")
            #expect(try txn.string(forKey: key(3), in: db) == nil)
            try txn.put(bytes("after"), forKey: key(4), in: db)
            return joined
        }
        #expect(outcome == 2)
        #expect(env.info.lastTransactionID == before + 1)  // one commit for all of it
        try env.read { txn throws in
            #expect(try txn.string(forKey: key(1), in: db) == "parent")
            #expect(try txn.string(forKey: key(2), in: db) == "child")
            #expect(try txn.string(forKey: key(3), in: db) == nil)
            #expect(try txn.string(forKey: key(4), in: db) == "after")
        }
    }

    @Test func mapFullInANestedTransactionGrowsTheMapAndRerunsTheOuterBody() throws {
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir) { $0.mapSize = 256 << 10 }
        let db = try env.openDatabase(named: "t", flags: .create)
        let payload = [UInt8](repeating: 7, count: 3_000)
        var attempts = 0
        var swallowed = 0
        try env.write { txn throws in
            attempts += 1
            for group in 0..<8 {
                do {
                    try txn.nested { child throws in
                        for n in 0..<20 { try child.put(payload, forKey: key(UInt64(group * 100 + n)), in: db) }
                    }
                } catch LMDBError.mapFull {
                    swallowed += 1  // the child is undone; the whole body still runs again
                }
            }
        }
        #expect(attempts > 1 && swallowed > 0)
        #expect(env.info.mapSize > 256 << 10)
        #expect(try env.statistics(of: db).entries == 160)
    }

    @Test func nestedWriteOnOneThreadIsATypedError() throws {
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "t", flags: .create)
        try env.write { txn throws in
            try txn.put(bytes("outer"), forKey: key(1), in: db)
            #expect(throws: LMDBError.nestedWrite) { try env.write { _ in } }
        }
        #expect(try env.read { try $0.string(forKey: key(1), in: db) } == "outer")
    }

    @Test func writersFromManyThreadsAreSerialised() throws {
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "counter", flags: .create)
        try env.write { txn in try txn.put(key(0), forKey: bytes("n"), in: db) }
        let threads = (0..<4).map { _ in
            TestThread {
                for _ in 0..<50 {
                    try? env.write { txn throws in
                        let current = try txn.withValue(forKey: bytes("n"), in: db) { $0!.loadUnaligned(as: UInt64.self) }
                        try txn.put(key(UInt64(bigEndian: current) + 1), forKey: bytes("n"), in: db)
                    }
                }
            }
        }
        for thread in threads { #expect(thread.join(seconds: 60)) }
        let final = try env.read { try $0.value(forKey: bytes("n"), in: db) }
        #expect(final == key(200))
    }
}

@Suite("Own commits")
struct OwnCommitTests {
    @Test("the environment counts the commits this process made in a range of transaction ids, each once; aborted writes are not commits")
    func countsOwnCommits() throws {
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "notes", flags: .create)
        let start = env.info.lastTransactionID
        _ = env.ownCommits(after: start, through: start)   // forget the setup's
        for n in 0..<5 { try env.write { txn in try txn.put(bytes("v"), forKey: key(UInt64(n)), in: db) } }
        struct Stop: Error {}
        #expect(throws: Stop.self) { try env.write { txn in try txn.put(bytes("x"), forKey: key(99), in: db); throw Stop() } }
        let last = env.info.lastTransactionID
        #expect(last == start + 5)
        #expect(env.ownCommits(after: start, through: start + 2) == 2)
        #expect(env.ownCommits(after: start + 2, through: last) == 3)
        #expect(env.ownCommits(after: last, through: last) == 0)   // each counted once
        try env.write { txn in try txn.put(bytes("w"), forKey: key(6), in: db) }
        // A range holding a commit of another process (here: one this call did not see
        // made, as an id gap) counts only this process's.
        #expect(env.ownCommits(after: last - 1, through: last + 1) == 1)
    }
}
