internal import CLMDB
internal import StrataLocks
#if canImport(Glibc)
import Glibc
#endif

extension Environment {
    /// Closes the environment now, even while ``ReadSnapshot``s of it are still referenced.
    ///
    /// For a graceful shutdown: the store is closed when this returns, and its directory
    /// can be opened again at once by a new ``Environment``, whoever still holds this one
    /// or its snapshots.
    ///
    /// ```swift
    /// // Stop taking requests, then:
    /// try env.close(timeout: .seconds(10))
    /// ```
    ///
    /// In order:
    /// 1. From the moment it begins, every new ``read(_:)``, ``write(_:)``,
    ///    ``makeSnapshot()``, ``ReadSnapshot/read(_:)``, ``openDatabase(named:flags:)``,
    ///    ``copy(to:compacting:)``, ``sync(force:)`` and ``checkUsable()`` throws
    ///    ``LMDBError/environmentClosed``. A write waiting for another write's turn is new
    ///    work: it throws too.
    /// 2. Once the snapshot reads in flight have returned, it ends the read transaction
    ///    of every open snapshot (`mdb_txn_abort`), so that its reader slot and the pages
    ///    it pins are freed now rather than when the last reference to it goes. A
    ///    snapshot's later reads throw ``LMDBError/environmentClosed``; its end is harmless.
    /// 3. It waits for this process's other transactions in flight to end: read bodies,
    ///    the write running now (with its map growth and reruns: a write that has begun
    ///    is never cut short), copies and syncs. Steps 2 and 3 wait `timeout` in all.
    /// 4. With ``Durability/noSync`` or ``Durability/noMetaSync`` it flushes the commits
    ///    to disk (`mdb_env_sync`), then closes the environment (`mdb_env_close`) and
    ///    removes it from the process's list of open stores.
    ///
    /// Afterwards ``isClosed`` is true; ``info`` and ``statistics`` answer what they were
    /// just before the close, ``readers()`` is empty and ``openSnapshotCount`` is 0. A
    /// second call returns at once. Calls from several threads are safe: one closes, the
    /// others wait with it and return.
    ///
    /// When transactions are still open after `timeout`, it throws
    /// ``LMDBError/closeTimedOut`` saying how many, and leaves the environment closing:
    /// it takes no new work, but it is not closed, and the directory cannot be opened
    /// again yet. Call `close` again once they end, or let the last reference go (the
    /// environment then closes as it always did). Called on a thread that is inside a
    /// ``read(_:)`` or ``write(_:)`` of this environment, or a ``ReadSnapshot/read(_:)``
    /// of one of its snapshots, it would wait for itself: it throws
    /// ``LMDBError/closeTimedOut`` at once, the environment closing.
    ///
    /// A close counts only this process's transactions: another process's readers and
    /// writers of the same store are unaffected. It blocks the calling thread while it
    /// waits: from async code, call it where blocking is allowed.
    ///
    /// - Parameter timeout: How long to wait for the transactions in flight. Default:
    ///   30 seconds; zero or less does not wait.
    /// - Throws: ``LMDBError/closeTimedOut`` as described; or the error of the final
    ///   flush of a ``Durability/noSync`` environment, which is closed even then (its last
    ///   commits may not be durable).
    public func close(timeout: Duration = .seconds(30)) throws(LMDBError) {
        let deadline = ConditionLock.now().addingReportingOverflow(Environment.nanoseconds(of: timeout))
        let until = deadline.overflow ? UInt64.max : deadline.partialValue
        let me = pthread_self()
        let insideRead = ThreadReads.holds(ObjectIdentifier(self))

        // 1. Refuse new work; collect the snapshots to release.
        let snapshots = try state.withLock { () throws(LMDBError) -> [ReadSnapshot]? in
            guard !closed else { return nil }
            closing = true
            if insideRead || writerThread.map({ pthread_equal($0, me) != 0 }) == true {
                throw LMDBError(
                    code: LMDBError.closeTimedOut.code,
                    message: "close() was called inside a transaction of \(path) on the same thread, so it would wait for itself; "
                        + "the environment takes no new work: call close() again once the transaction has ended")
            }
            return liveSnapshots.values.compactMap(\.snapshot)
        }
        guard let snapshots else { return }

        // 2. Release the snapshots once no snapshot read runs. None can start now, so a
        // snapshot's `access` is free or held for a moment only (by a read being
        // refused): `release` takes it, then `state`, holding no lock before.
        try state.withLock { () throws(LMDBError) in
            if !waitLocked(until: until, for: { snapshotReads == 0 }) { throw timedOut(after: timeout) }
        }
        for snapshot in snapshots { snapshot.release() }

        // 3, 4. Once the other transactions have ended, and the snapshots that were
        // beginning or ending meanwhile are gone too, close.
        let flushFailure = try state.withLock { () throws(LMDBError) -> LMDBError? in
            if !waitLocked(until: until, for: { isIdleLocked() && activeSnapshots.isEmpty }) {
                throw timedOut(after: timeout)
            }
            guard !closed else { return nil }
            var failure: LMDBError?
            if !configuration.readOnly && configuration.durability != .sync {
                let rc = mdb_env_sync(handle, 1)
                if rc != MDB_SUCCESS {
                    failure = LMDBError(code: rc).adding(context: "flushing \(path) as it closed; it is closed, but its last commits may not be durable")
                }
            }
            finalInfo = EnvironmentInfo(reading: handle)
            finalStatistics = DatabaseStatistics(reading: handle)
            mdb_env_close(handle)
            closed = true
            // After mdb_env_close: a new environment of the directory must not open while
            // this one still holds its locks (see OpenEnvironments).
            OpenEnvironments.unregister(fileIdentity, token: registration)
            state.broadcast()
            return failure
        }
        if let flushFailure { throw flushFailure }
    }

    /// Whether ``close(timeout:)`` has closed the environment.
    ///
    /// False while a close that timed out still waits for transactions, although the
    /// environment already refuses new work then (``checkUsable()`` says so).
    public var isClosed: Bool {
        state.withLock { closed }
    }

    // MARK: Admission

    /// Throws ``LMDBError/environmentClosed`` once a close has begun; `state` must be held.
    func checkOpenLocked() throws(LMDBError) {
        if closing {
            throw LMDBError(
                code: LMDBError.environmentClosed.code,
                message: closed ? "the environment at \(path) is closed" : "the environment at \(path) is closing")
        }
    }

    /// Runs `body` with the handle, counted so that a close waits for it to return.
    ///
    /// - Throws: ``LMDBError/environmentClosed`` once a close has begun, or what `body` throws.
    func withOpenHandle<T>(_ body: (OpaquePointer) throws(LMDBError) -> T) throws(LMDBError) -> T {
        try state.withLock { () throws(LMDBError) in
            try checkOpenLocked()
            activeCalls += 1
        }
        defer {
            state.withLock {
                activeCalls -= 1
                if activeCalls == 0 && closing { state.broadcast() }
            }
        }
        return try body(handle)
    }

    /// Records a new snapshot, so that a close can release it.
    ///
    /// - Throws: ``LMDBError/environmentClosed`` when a close began while it was being
    ///   taken: the caller drops it, and its end releases the transaction.
    func registerSnapshot(_ snapshot: ReadSnapshot) throws(LMDBError) {
        try state.withLock { () throws(LMDBError) in
            try checkOpenLocked()
            liveSnapshots[snapshot.serial] = WeakSnapshot(snapshot: snapshot)
        }
    }

    /// Admits a ``ReadSnapshot/read(_:)`` body; the snapshot's `access` is held.
    func beginSnapshotRead() throws(LMDBError) {
        try state.withLock { () throws(LMDBError) in
            try checkOpenLocked()
            try checkUsableLocked()
            snapshotReads += 1
        }
    }

    /// Ends a ``ReadSnapshot/read(_:)`` body; the snapshot's `access` is held.
    func endSnapshotRead() {
        state.withLock {
            snapshotReads -= 1
            if snapshotReads == 0 && closing { state.broadcast() }
        }
    }

    // MARK: Waiting

    /// Whether nothing of this process uses the handle: no read, snapshot read, write,
    /// map resize or other call. `state` must be held.
    private func isIdleLocked() -> Bool {
        activeReads == 0 && snapshotReads == 0 && writerThread == nil && !isResizing && activeCalls == 0
    }

    /// Waits with `state` held until `done` is true; false when `deadline` (monotonic
    /// nanoseconds) passed first.
    private func waitLocked(until deadline: UInt64, for done: () -> Bool) -> Bool {
        while !done() {
            if !state.wait(untilNanoseconds: deadline) { return done() }
        }
        return true
    }

    /// The timeout error, naming what is still open; `state` must be held.
    private func timedOut(after timeout: Duration) -> LMDBError {
        var open: [String] = []
        if activeReads > 0 { open.append("\(activeReads) read transaction(s)") }
        if snapshotReads > 0 { open.append("\(snapshotReads) snapshot read(s)") }
        if writerThread != nil || isResizing { open.append("a write transaction") }
        if activeCalls > 0 { open.append("\(activeCalls) sync or reader-list call(s)") }
        if open.isEmpty && !activeSnapshots.isEmpty { open.append("\(activeSnapshots.count) snapshot(s) beginning or ending") }
        return LMDBError(
            code: LMDBError.closeTimedOut.code,
            message: "\(open.joined(separator: ", ")) of \(path) were still open after \(timeout); "
                + "the environment takes no new work: call close() again once they end")
    }

    /// `duration` in nanoseconds, 0 when negative, saturating.
    static func nanoseconds(of duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0, attoseconds >= 0 else { return 0 }
        let (whole, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        let (total, carry) = whole.addingReportingOverflow(UInt64(attoseconds / 1_000_000_000))
        return overflow || carry ? .max : total
    }
}

/// A weak reference to a snapshot, for ``Environment``'s list of open ones: the list must
/// not keep a snapshot alive.
struct WeakSnapshot {
    weak var snapshot: ReadSnapshot?
}
