import Foundation
@testable import StrataLMDB
import StrataTesting
import Testing

@Suite("Closing an environment")
struct EnvironmentCloseTests {
    /// Polls `condition` every millisecond; false when it is still false after `seconds`.
    static func eventually(seconds: Double = 10, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while !condition() {
            if Date() > deadline { return false }
            usleep(1_000)
        }
        return true
    }

    /// Whether a close has begun: the environment refuses new work.
    static func isClosing(_ env: Environment) -> Bool {
        do {
            try env.checkUsable()
            return false
        } catch {
            return error == .environmentClosed
        }
    }

    /// Whether `error` is ``LMDBError/environmentClosed``.
    static func isClosedError(_ error: any Error) -> Bool {
        if case LMDBError.environmentClosed = error { return true }
        return false
    }

    // MARK: Closing and opening again

    @Test func closeWithNothingOpen() throws {
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "t", flags: .create)
        try env.write { txn in try txn.put(bytes("one"), forKey: key(1), in: db) }
        #expect(!env.isClosed)
        try env.close()
        #expect(env.isClosed)
    }

    @Test(arguments: [Environment.Durability.sync, .noMetaSync, .noSync])
    func theDirectoryOpensAgainAtOnceWithItsData(durability: Environment.Durability) throws {
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir) { $0.durability = durability }
        let db = try env.openDatabase(named: "t", flags: .create)
        try env.write { txn in try txn.put(bytes("one"), forKey: key(1), in: db) }
        #expect(throws: LMDBError.alreadyOpen) { try openEnvironment(dir) }

        try env.close()
        let again = try openEnvironment(dir)
        let reopened = try again.openDatabase(named: "t")
        #expect(try again.read { try $0.string(forKey: key(1), in: reopened) } == "one")
        try again.close()

        // And read-only, which closes without flushing.
        let readOnly = try openEnvironment(dir) { $0.readOnly = true }
        let readOnlyDatabase = try readOnly.openDatabase(named: "t")
        #expect(try readOnly.read { try $0.string(forKey: key(1), in: readOnlyDatabase) } == "one")
        try readOnly.close()
        #expect(readOnly.isClosed)
    }

    @Test func aSnapshotHeldAcrossCloseIsReleased() throws {
        let dir = TemporaryDirectory()
        var env: Environment? = try openEnvironment(dir)
        let db = try env!.openDatabase(named: "t", flags: .create)
        try env!.write { txn in try txn.put(bytes("one"), forKey: key(1), in: db) }
        var snapshot: ReadSnapshot? = try env!.makeSnapshot()
        #expect(try snapshot!.read { try $0.string(forKey: key(1), in: db) } == "one")
        #expect(env!.openSnapshotCount == 1)

        try env!.close()
        #expect(env!.openSnapshotCount == 0)
        #expect(env!.oldestSnapshotAge == nil)
        #expect(throws: LMDBError.environmentClosed) { try snapshot!.read { _ in } }

        // The directory opens again while the old snapshot and environment are still
        // referenced; the snapshot's reader slot was freed.
        let again = try openEnvironment(dir)
        #expect(again.readers().isEmpty)
        // Their ends must not touch the new environment (no second abort or close).
        snapshot = nil
        env = nil
        let reopened = try again.openDatabase(named: "t")
        try again.write { txn in try txn.put(bytes("two"), forKey: key(2), in: reopened) }
        #expect(try again.read { try $0.string(forKey: key(2), in: reopened) } == "two")
        #expect(again.readers().isEmpty)
    }

    @Test func newWorkAfterCloseThrowsEnvironmentClosed() throws {
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "t", flags: .create)
        try env.write { txn in try txn.put(bytes("one"), forKey: key(1), in: db) }
        try env.close()

        #expect(throws: LMDBError.environmentClosed) { try env.read { _ in } }
        #expect(throws: LMDBError.environmentClosed) { try env.write { _ in } }
        #expect(throws: LMDBError.environmentClosed) { try env.makeSnapshot() }
        #expect(throws: LMDBError.environmentClosed) { try env.openDatabase(named: "t") }
        #expect(throws: LMDBError.environmentClosed) { try env.openDatabase(named: "new", flags: .create) }
        #expect(throws: LMDBError.environmentClosed) { try env.mainDatabase }
        #expect(throws: LMDBError.environmentClosed) { try env.databaseNames() }
        #expect(throws: LMDBError.environmentClosed) { try env.statistics(of: db) }
        #expect(throws: LMDBError.environmentClosed) { try env.checkUsable() }
        #expect(throws: LMDBError.environmentClosed) { try env.sync() }
        #expect(throws: LMDBError.environmentClosed) { try env.clearStaleReaders() }
        #expect(throws: LMDBError.environmentClosed) { try env.copy(to: dir.appending("copy")) }
        #expect(throws: LMDBError.environmentClosed) { try env.verifyPages() }
        #expect(env.terminalError == nil, "closed is not terminal")

        do {
            try env.read { _ in }
            Issue.record("a read after close succeeded")
        } catch LMDBError.environmentClosed {
            // matched by `catch`, as the other binding errors are
        } catch {
            Issue.record("unexpected \(error)")
        }
        #expect(LMDBError.environmentClosed.name == "environmentClosed")
        #expect(LMDBError.closeTimedOut.name == "closeTimedOut")
        #expect(LMDBError.environmentClosed.description.contains("closed"))
        #expect(LMDBError.environmentClosed != .environmentUnusable)
    }

    @Test func infoAndCountersAfterCloseDoNotTouchTheHandle() throws {
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "t", flags: .create)
        for n in 1...3 { try env.write { txn in try txn.put(bytes("v"), forKey: key(UInt64(n)), in: db) } }
        let info = env.info
        let statistics = env.statistics
        try env.close()

        #expect(env.info == info, "what it was as it closed")
        #expect(env.statistics == statistics)
        #expect(env.readers().isEmpty)
        #expect(env.openSnapshotCount == 0)
        #expect(env.oldestSnapshotAge == nil)
        #expect(env.activeReadCount == 0)
        #expect(env.mapGrowthCount == 0)
        #expect(env.terminalError == nil)
        #expect(env.ownCommits(after: 0, through: info.lastTransactionID) == 4, "the database's creation and 3 writes")
        #expect(Environment.terminalErrorOfOpenEnvironment(atPath: env.path) == nil)
    }

    @Test func closingTwiceAndFromSeveralThreads() throws {
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        try env.close()
        try env.close()
        #expect(env.isClosed)

        // Timeline:
        //   reader:   read { signal(inRead) ── wait(release) }
        //   closers:        └─ 3 threads: close() ────────────── (all wait) ── return
        //   main:     wait(inRead) ─ start closers ─ wait until closing ─ signal(release)
        let second = try openEnvironment(dir, "second")
        let inRead = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let reader = TestThread {
            try? second.read { _ in
                inRead.signal()
                release.wait()
            }
        }
        #expect(inRead.wait(timeout: .now() + 10) == .success)
        let failures = (0..<3).map { _ in TestBox<[String]>([]) }
        let closers = failures.map { mine in
            TestThread {
                do { try second.close() } catch { mine.value.append("\(error)") }
            }
        }
        #expect(Self.eventually { Self.isClosing(second) })
        release.signal()
        #expect(reader.join())
        for closer in closers { #expect(closer.join()) }
        #expect(failures.allSatisfy { $0.value.isEmpty })
        #expect(second.isClosed)
    }

    // MARK: Work in flight

    @Test func aReadInFlightFinishesBeforeTheCloseCompletes() throws {
        // Timeline:
        //   reader:  read { signal(inRead) ───────── wait(release) ─ readEnded = true }
        //   closer:                close() ─ (waits for the read) ─────────────────── sawReadEnded = readEnded
        //   main:    wait(inRead) ─ start closer ─ wait until closing ─ close not done ─ signal(release)
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "t", flags: .create)
        try env.write { txn in try txn.put(bytes("one"), forKey: key(1), in: db) }

        let inRead = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let closed = DispatchSemaphore(value: 0)
        let readEnded = TestBox(false)
        let value = TestBox<String?>(nil)
        let sawReadEnded = TestBox(false)
        let reader = TestThread {
            value.value = try? env.read { txn in
                inRead.signal()
                release.wait()
                // Still readable: the close has not freed anything under this read.
                let text = try txn.string(forKey: key(1), in: db)
                readEnded.value = true
                return text
            }
        }
        #expect(inRead.wait(timeout: .now() + 10) == .success)
        let closer = TestThread {
            try? env.close()
            sawReadEnded.value = readEnded.value
            closed.signal()
        }
        #expect(Self.eventually { Self.isClosing(env) })
        #expect(throws: LMDBError.environmentClosed) { try env.read { _ in } }
        #expect(closed.wait(timeout: .now() + .milliseconds(200)) == .timedOut, "the close waits for the read")
        #expect(!env.isClosed)
        release.signal()
        #expect(reader.join())
        #expect(closer.join())
        #expect(value.value == "one")
        #expect(sawReadEnded.value, "the read ended before the close returned")
        #expect(env.isClosed)
    }

    @Test func aSnapshotReadInFlightFinishesBeforeItsSnapshotIsReleased() throws {
        // Timeline:
        //   reader:  snapshot.read { signal(inRead) ── wait(release) ─ readEnded = true }
        //   closer:                 close() ─ (waits for the snapshot read) ─────────── sawReadEnded = readEnded
        //   main:    wait(inRead) ─ start closer ─ wait until closing ─ close not done ─ signal(release)
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "t", flags: .create)
        try env.write { txn in try txn.put(bytes("one"), forKey: key(1), in: db) }
        let snapshot = try env.makeSnapshot()

        let inRead = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let closed = DispatchSemaphore(value: 0)
        let readEnded = TestBox(false)
        let value = TestBox<String?>(nil)
        let sawReadEnded = TestBox(false)
        let reader = TestThread {
            value.value = try? snapshot.read { txn in
                inRead.signal()
                release.wait()
                let text = try txn.string(forKey: key(1), in: db)
                readEnded.value = true
                return text
            }
        }
        #expect(inRead.wait(timeout: .now() + 10) == .success)
        let closer = TestThread {
            try? env.close()
            sawReadEnded.value = readEnded.value
            closed.signal()
        }
        #expect(Self.eventually { Self.isClosing(env) })
        #expect(closed.wait(timeout: .now() + .milliseconds(200)) == .timedOut, "the close waits for the snapshot read")
        #expect(env.openSnapshotCount == 1, "not released under the read")
        release.signal()
        #expect(reader.join())
        #expect(closer.join())
        #expect(value.value == "one")
        #expect(sawReadEnded.value)
        #expect(env.isClosed)
        #expect(env.openSnapshotCount == 0)
        #expect(throws: LMDBError.environmentClosed) { try snapshot.read { _ in } }
    }

    @Test func aWriteInFlightFinishesAndIsCommitted() throws {
        // Timeline:
        //   writer:  write { put ─ signal(inWrite) ── wait(release) } ─ commit
        //   closer:                close() ─ (waits for the write) ────────────── return
        //   main:    wait(inWrite) ─ start closer ─ wait until closing ─ a new write is refused ─ signal(release)
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "t", flags: .create)

        let inWrite = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let closed = DispatchSemaphore(value: 0)
        let written = TestBox(false)
        let closeError = TestBox<String?>(nil)
        let writer = TestThread {
            do {
                try env.write { txn in
                    try txn.put(bytes("written while closing"), forKey: key(1), in: db)
                    inWrite.signal()
                    release.wait()
                }
                written.value = true
            } catch {}
        }
        #expect(inWrite.wait(timeout: .now() + 10) == .success)
        let closer = TestThread {
            do { try env.close() } catch { closeError.value = "\(error)" }
            closed.signal()
        }
        #expect(Self.eventually { Self.isClosing(env) })
        // A second writer comes after the close began: refused, though it would only
        // have waited for its turn.
        let refused = TestBox(false)
        let secondWriter = TestThread {
            do {
                try env.write { txn in try txn.put(bytes("refused"), forKey: key(2), in: db) }
            } catch {
                refused.value = Self.isClosedError(error)
            }
        }
        #expect(closed.wait(timeout: .now() + .milliseconds(200)) == .timedOut, "the close waits for the write")
        release.signal()
        #expect(writer.join())
        #expect(secondWriter.join())
        #expect(closer.join())
        #expect(written.value)
        #expect(refused.value)
        #expect(closeError.value == nil)
        #expect(env.isClosed)

        let again = try openEnvironment(dir)
        let reopened = try again.openDatabase(named: "t")
        try again.read { txn throws in
            #expect(try txn.string(forKey: key(1), in: reopened) == "written while closing")
            #expect(try txn.string(forKey: key(2), in: reopened) == nil)
        }
    }

    @Test func aWriteWaitingForMapGrowthFinishesAndTheCloseWaitsForIt() throws {
        // Timeline:
        //   reader:  read { signal(inRead) ──────────────────── wait(release) }
        //   writer:          write { map full ─ grow: waits for the reader ─────────── rerun ─ commit }
        //   closer:                                  close() ─ (waits for the write) ─────────────── return
        //   main:    wait(inRead) ─ start writer ─ wait until resizing ─ start closer ─ wait until closing ─ signal(release)
        // Neither the resize nor the close may wait for the other.
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir) {
            $0.mapSize = 256 << 10
            $0.mapGrowthReaderTimeout = .seconds(30)
        }
        let db = try env.openDatabase(named: "blobs", flags: .create)
        let payload = [UInt8](repeating: 7, count: 64 << 10)

        let inRead = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let reader = TestThread {
            try? env.read { _ in
                inRead.signal()
                release.wait()
            }
        }
        #expect(inRead.wait(timeout: .now() + 10) == .success)
        let writeError = TestBox<String?>("not run")
        let writer = TestThread {
            do {
                try env.write { txn in
                    for n in 0..<40 { try txn.put(payload, forKey: key(UInt64(n)), in: db) }
                }
                writeError.value = nil
            } catch {
                writeError.value = "\(error)"
            }
        }
        #expect(Self.eventually { env.state.withLock { env.isResizing } }, "the write waits to grow the map")
        let closeError = TestBox<String?>("not run")
        let closer = TestThread {
            do {
                try env.close()
                closeError.value = nil
            } catch {
                closeError.value = "\(error)"
            }
        }
        #expect(Self.eventually { Self.isClosing(env) })
        release.signal()
        #expect(reader.join())
        #expect(writer.join())
        #expect(closer.join())
        #expect(writeError.value == nil)
        #expect(closeError.value == nil)
        #expect(env.isClosed)
        #expect(env.mapGrowthCount >= 1)

        let again = try openEnvironment(dir)
        #expect(try again.statistics(of: again.openDatabase(named: "blobs")).entries == 40)
    }

    // MARK: Timing out

    @Test func aReadThatOutlivesTheTimeoutLeavesTheEnvironmentClosing() throws {
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "t", flags: .create)
        try env.write { txn in try txn.put(bytes("one"), forKey: key(1), in: db) }
        let snapshot = try env.makeSnapshot()

        let inRead = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let value = TestBox<String?>(nil)
        let reader = TestThread {
            value.value = try? env.read { txn in
                inRead.signal()
                release.wait()
                return try txn.string(forKey: key(1), in: db)
            }
        }
        #expect(inRead.wait(timeout: .now() + 10) == .success)

        let started = ContinuousClock.now
        do {
            try env.close(timeout: .milliseconds(100))
            Issue.record("the close did not time out")
        } catch {
            #expect(error == .closeTimedOut)
            #expect(error.message.contains("1 read transaction(s)"), "\(error)")
        }
        #expect(ContinuousClock.now - started < .seconds(10))
        // Closing, not closed: no new work, and the directory is still taken.
        #expect(!env.isClosed)
        #expect(throws: LMDBError.environmentClosed) { try env.read { _ in } }
        #expect(throws: LMDBError.environmentClosed) { try env.write { _ in } }
        #expect(throws: LMDBError.environmentClosed) { try env.makeSnapshot() }
        #expect(throws: LMDBError.environmentClosed) { try snapshot.read { _ in } }
        #expect(throws: LMDBError.alreadyOpen) { try openEnvironment(dir) }
        #expect(env.info.lastTransactionID > 0, "still answered from the open handle")

        release.signal()
        #expect(reader.join())
        #expect(value.value == "one")
        try env.close(timeout: .seconds(10))
        #expect(env.isClosed)
        #expect(env.openSnapshotCount == 0)
        let again = try openEnvironment(dir)
        let reopened = try again.openDatabase(named: "t")
        #expect(try again.read { try $0.string(forKey: key(1), in: reopened) } == "one")
    }

    @Test func closeInsideATransactionOfTheSameThreadFailsAtOnce() throws {
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "t", flags: .create)
        let started = ContinuousClock.now
        try env.write { txn in
            try txn.put(bytes("one"), forKey: key(1), in: db)
            #expect(throws: LMDBError.closeTimedOut) { try env.close() }
        }
        // The write committed; the environment refuses new work until a close completes.
        #expect(throws: LMDBError.environmentClosed) { try env.write { _ in } }
        try env.close()
        #expect(ContinuousClock.now - started < .seconds(10), "no wait for the 30-second default timeout")

        let second = try openEnvironment(dir, "second")
        let snapshot = try second.makeSnapshot()
        try second.read { _ -> Void in
            #expect(throws: LMDBError.closeTimedOut) { try second.close() }
        }
        let third = try openEnvironment(dir, "third")
        let thirdSnapshot = try third.makeSnapshot()
        try thirdSnapshot.read { _ -> Void in
            #expect(throws: LMDBError.closeTimedOut) { try third.close() }
        }
        try second.close()
        try third.close()
        #expect(throws: LMDBError.environmentClosed) { try snapshot.read { _ in } }
        #expect(throws: LMDBError.environmentClosed) { try thirdSnapshot.read { _ in } }
        #expect(ContinuousClock.now - started < .seconds(10))

        let again = try openEnvironment(dir)
        let reopened = try again.openDatabase(named: "t")
        #expect(try again.read { try $0.string(forKey: key(1), in: reopened) } == "one")
    }

    // MARK: Concurrency

    @Test(arguments: 0..<3)
    func workOnManyThreadsWhileAnotherCloses(round: Int) throws {
        // Writers, readers and a snapshot taker loop until they are refused; a closer
        // closes once each writer has committed a few times. Every operation succeeds or
        // throws environmentClosed, and every acknowledged write is on disk afterwards.
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir) { $0.mapSize = 64 << 20 }
        let db = try env.openDatabase(named: "t", flags: .create)
        let writers = 2
        let limit = 100_000
        let warmedUp = DispatchSemaphore(value: 0)
        let acknowledged = (0..<writers).map { _ in TestBox(0) }
        let unexpected = (0..<(writers + 3)).map { _ in TestBox<[String]>([]) }

        var threads: [TestThread] = []
        for w in 0..<writers {
            let acks = acknowledged[w], errors = unexpected[w]
            threads.append(TestThread {
                for n in 0..<limit {
                    do {
                        try env.write { txn in
                            try txn.put(bytes("w\(w)-\(n)"), forKey: key(UInt64(w) << 32 | UInt64(n)), in: db)
                        }
                        acks.value = n + 1
                        if n == 19 { warmedUp.signal() }
                    } catch {
                        if !Self.isClosedError(error) { errors.value.append("\(error)") }
                        if n < 20 { warmedUp.signal() }
                        return
                    }
                }
            })
        }
        for r in 0..<2 {
            let errors = unexpected[writers + r]
            threads.append(TestThread {
                for _ in 0..<limit {
                    do {
                        _ = try env.read { txn in try txn.count(in: db) }
                    } catch {
                        if !Self.isClosedError(error) { errors.value.append("\(error)") }
                        return
                    }
                }
            })
        }
        let snapshotErrors = unexpected[writers + 2]
        threads.append(TestThread {
            var held: [ReadSnapshot] = []
            for n in 0..<limit {
                do {
                    let snapshot = try env.makeSnapshot()
                    held.append(snapshot)
                    if held.count > 3 { held.removeFirst() }
                    for old in held { _ = try old.read { txn in try txn.value(forKey: key(0), in: db) } }
                    if n % 7 == 0 { held.removeAll() }
                } catch {
                    if !Self.isClosedError(error) { snapshotErrors.value.append("\(error)") }
                    // Snapshots held across the close: their reads are refused, their ends harmless.
                    for old in held where (try? old.read { _ in }) != nil { snapshotErrors.value.append("a read after close") }
                    return
                }
            }
        })
        for _ in 0..<writers { #expect(warmedUp.wait(timeout: .now() + 60) == .success) }
        let closeError = TestBox<String?>("not run")
        let closer = TestThread {
            do {
                try env.close()
                closeError.value = nil
            } catch {
                closeError.value = "\(error)"
            }
        }
        #expect(closer.join())
        for thread in threads { #expect(thread.join()) }
        #expect(closeError.value == nil)
        #expect(unexpected.allSatisfy { $0.value.isEmpty }, "\(unexpected.flatMap(\.value))")
        #expect(env.isClosed)

        let again = try openEnvironment(dir)
        let reopened = try again.openDatabase(named: "t")
        try again.read { txn throws in
            for w in 0..<writers {
                let acks = acknowledged[w].value
                #expect(acks >= 20)
                for n in [0, acks / 2, acks - 1] {
                    #expect(try txn.string(forKey: key(UInt64(w) << 32 | UInt64(n)), in: reopened) == "w\(w)-\(n)")
                }
                // The refused write committed nothing.
                #expect(try txn.value(forKey: key(UInt64(w) << 32 | UInt64(acks)), in: reopened) == nil)
            }
            #expect(try txn.count(in: reopened) == acknowledged.reduce(0) { $0 + $1.value })
        }
    }
}
