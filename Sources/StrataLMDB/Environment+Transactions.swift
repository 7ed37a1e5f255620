internal import CLMDB
internal import StrataLocks
#if canImport(Glibc)
import Glibc
#endif

extension Environment {
    /// Runs `body` in a read-only transaction: a consistent snapshot of the last commit.
    ///
    /// Readers never wait for the writer (LMDB's MVCC). The only wait is the moment a
    /// write remaps a full map, which it does only once no read of this process is open.
    /// The transaction ends (`mdb_txn_abort`) when `body` returns or throws.
    ///
    /// - Throws: ``LMDBError/readersFull`` when every reader slot is taken (after clearing
    ///   stale slots once), ``LMDBError/environmentUnusable`` after a panic,
    ///   ``LMDBError/environmentClosed`` once ``close(timeout:)`` has begun (a read already
    ///   running finishes: the close waits for it), or what `body` throws.
    public func read<T>(_ body: (borrowing ReadTransaction) throws -> T) throws -> T {
        let txn = try beginReadTransaction()
        ThreadReads.enter(ObjectIdentifier(self))
        defer {
            mdb_txn_abort(txn)
            ThreadReads.leave(ObjectIdentifier(self))
            endRead()
        }
        do {
            return try body(ReadTransaction(pointer: txn, environment: ObjectIdentifier(self)))
        } catch {
            noteIfTerminal(error)
            throw error
        }
    }

    /// Runs `body` in a write transaction and commits it when `body` returns.
    ///
    /// The transaction begins and commits in this one synchronous call, on this thread:
    /// LMDB's writer mutex belongs to the thread that took it (a commit from another
    /// thread leaves it held forever). Writers of this process and of others are
    /// serialised; readers are never blocked.
    ///
    /// - When `body` throws, the transaction is aborted: nothing it wrote is visible.
    /// - When the map is full (`MDB_MAP_FULL` from a write or from the commit), the
    ///   transaction is aborted, the map doubles (up to
    ///   ``Configuration/maximumMapSize``) and **`body` runs again from the start** in a
    ///   new transaction, so it must compute its writes from its inputs and the store,
    ///   not from state it changed on a previous attempt. Growth remaps the file, so it
    ///   waits (up to ``Configuration/mapGrowthReaderTimeout``) for this process's read
    ///   transactions to end, and fails at once with ``LMDBError/mapFull`` while a
    ///   ``ReadSnapshot`` is open or this thread holds a read transaction.
    /// - A failed commit has already freed the transaction; it is never aborted twice.
    ///
    /// - Throws: ``LMDBError/nestedWrite`` on a thread already inside a write of this
    ///   environment, ``LMDBError/readOnly``, ``LMDBError/mapFull``,
    ///   ``LMDBError/environmentClosed`` once ``close(timeout:)`` has begun (also for a
    ///   write still waiting for its turn; the write running then finishes, reruns
    ///   included, and the close waits for it), I/O errors, or what `body` throws.
    public func write<T>(_ body: (borrowing WriteTransaction) throws -> T) throws -> T {
        guard !configuration.readOnly else {
            throw LMDBError(code: LMDBError.readOnly.code, message: "the environment at \(path) was opened read-only")
        }
        let me = pthread_self()
        let nested = try state.withLock { () throws(LMDBError) -> Bool in
            try checkOpenLocked()
            return writerThread.map { pthread_equal($0, me) != 0 } ?? false
        }
        if nested {
            throw LMDBError(code: LMDBError.nestedWrite.code, message: "this thread is already inside a write transaction of \(path)")
        }
        writeMutex.lock()
        do {
            // Admitted (or refused) together with taking the writer's place: a close sees
            // either this write running or no write at all.
            try state.withLock { () throws(LMDBError) in
                try checkOpenLocked()
                writerThread = me
            }
        } catch {
            writeMutex.unlock()
            throw error
        }
        defer {
            state.withLock {
                writerThread = nil
                if closing { state.broadcast() }
            }
            writeMutex.unlock()
        }
        while true {
            try state.withLock { () throws(LMDBError) in try checkUsableLocked() }
            var txnPointer: OpaquePointer?
            let begun = mdb_txn_begin(handle, nil, 0, &txnPointer)
            if begun == MDB_MAP_RESIZED {
                try resizeMap(to: 0, failure: .mapResized)
                continue
            }
            guard begun == MDB_SUCCESS, let txn = txnPointer else {
                let error = LMDBError(code: begun).adding(context: "beginning a write transaction")
                noteIfTerminal(error)
                throw error
            }
            var hitMapFull = false
            let result: T
            do {
                result = try withUnsafeMutablePointer(to: &hitMapFull) { flag in
                    try body(WriteTransaction(pointer: txn, environment: ObjectIdentifier(self), hitMapFull: flag))
                }
            } catch {
                mdb_txn_abort(txn)
                if hitMapFull {
                    try growMap()
                    continue
                }
                noteIfTerminal(error)
                throw error
            }
            if hitMapFull {
                // The body caught the map-full error itself; the transaction is unusable.
                mdb_txn_abort(txn)
                try growMap()
                continue
            }
            // Known as this process's before it is visible to anyone (see ownCommits(after:through:)).
            let id = mdb_txn_id(txn)
            state.withLock { committing = id }
            let committed = mdb_txn_commit(txn)  // frees txn, even when it fails
            state.withLock {
                committing = nil
                if committed == MDB_SUCCESS {
                    if ownCommits.count >= Self.ownCommitsKept {
                        ownCommitsDroppedThrough = ownCommits[ownCommits.count / 2 - 1]
                        ownCommits.removeFirst(ownCommits.count / 2)
                    }
                    ownCommits.append(id)
                }
            }
            if committed == MDB_MAP_FULL {
                try growMap()
                continue
            }
            if committed != MDB_SUCCESS {
                let error = LMDBError(code: committed).adding(context: "committing a write transaction")
                noteIfTerminal(error)
                throw noteIfPanicked(after: error)
            }
            return result
        }
    }

    /// After a failed commit: records the terminal state when the failure panicked LMDB.
    ///
    /// When the meta-page write at the end of a commit fails, LMDB marks the environment
    /// fatal (mdb.c, `mdb_env_write_meta`: `MDB_FATAL_ERROR`) but returns the write's own
    /// error (`EIO`, `ENOSPC`); only the next transaction sees ``LMDBError/panic``. A read
    /// transaction begun here finds out at once, so ``terminalError`` is set before the
    /// failed save returns and nothing reads the environment in between. The write mutex
    /// is held: no remap can run. Returns `error`, saying the environment is now unusable
    /// when it is.
    private func noteIfPanicked(after error: LMDBError) -> LMDBError {
        var probe: OpaquePointer?
        let rc = mdb_txn_begin(handle, nil, UInt32(MDB_RDONLY), &probe)
        if rc == MDB_SUCCESS {
            mdb_txn_abort(probe)
            return error
        }
        guard rc == MDB_PANIC else { return error }  // readers full, say: the next transaction will tell
        noteIfTerminal(LMDBError(code: MDB_PANIC).adding(context: "after \(error.name) committing a write transaction"))
        return error.adding(context: "the environment is now unusable: close it and open the store again")
    }

    // MARK: Reader accounting

    /// Begins a read transaction, registered so that a remap waits for it (a short read)
    /// or refuses to happen (a snapshot, registered under `snapshot`), and a close waits
    /// for it to end.
    func beginReadTransaction(snapshot: UInt64? = nil) throws -> OpaquePointer {
        var clearedStaleReaders = false
        while true {
            try state.withLock { () throws(LMDBError) in
                while isResizing { state.wait() }
                try checkOpenLocked()
                try checkUsableLocked()
                if let snapshot {
                    activeSnapshots[snapshot] = ConditionLock.now()
                } else {
                    activeReads += 1
                }
            }
            var txn: OpaquePointer?
            let rc = mdb_txn_begin(handle, nil, UInt32(MDB_RDONLY), &txn)
            if rc == MDB_SUCCESS, let txn { return txn }
            // Cleared while still registered: a close cannot free the handle meanwhile.
            var dead: Int32 = 0
            let cleared = rc == MDB_READERS_FULL && !clearedStaleReaders
                && mdb_reader_check(handle, &dead) == MDB_SUCCESS && dead > 0
            if let snapshot { endSnapshot(snapshot) } else { endRead() }
            switch rc {
            case MDB_READERS_FULL where !clearedStaleReaders:
                clearedStaleReaders = true
                if cleared { continue }
                throw readersFullError()
            case MDB_READERS_FULL:
                throw readersFullError()
            case MDB_MAP_RESIZED:
                try adoptGrownMap()
            default:
                let error = LMDBError(code: rc).adding(context: "beginning a read transaction")
                noteIfTerminal(error)
                throw error
            }
        }
    }

    func endRead() {
        state.withLock {
            activeReads -= 1
            if activeReads == 0 && (isResizing || closing) { state.broadcast() }
        }
    }

    /// Unregisters a snapshot whose read transaction has ended (or never began).
    func endSnapshot(_ serial: UInt64) {
        state.withLock {
            activeSnapshots.removeValue(forKey: serial)
            liveSnapshots.removeValue(forKey: serial)
            if closing { state.broadcast() }
        }
    }

    private func readersFullError() -> LMDBError {
        LMDBError(
            code: LMDBError.readersFull.code,
            message: "all \(configuration.maxReaders) reader slots of \(path) are in use (open read transactions and snapshots)")
    }

    /// Another process grew the map: adopt its size (`mdb_env_set_mapsize(0)`), which
    /// needs the write lock and no open reader of this process.
    private func adoptGrownMap() throws {
        let me = pthread_self()
        if state.withLock({ writerThread.map { pthread_equal($0, me) != 0 } ?? false }) {
            throw LMDBError(code: MDB_MAP_RESIZED, message: "another process grew the map; end this thread's write transaction first")
        }
        writeMutex.lock()
        defer { writeMutex.unlock() }
        // Not part of a running write: refused once a close has begun.
        try resizeMap(to: 0, failure: .mapResized, refusingWhenClosing: true)
    }

    // MARK: Map growth

    /// Doubles the map, up to the configured maximum; the write mutex must be held.
    func growMap() throws {
        var info = MDB_envinfo()
        mdb_env_info(handle, &info)
        let current = info.me_mapsize
        guard current < configuration.maximumMapSize else {
            throw LMDBError(
                code: MDB_MAP_FULL,
                message: "the map of \(path) is full at its maximum size of \(configuration.maximumMapSize) bytes")
        }
        let doubled = current > Int.max / 2 ? Int.max : current * 2
        let target = Environment.roundUp(min(doubled, configuration.maximumMapSize), to: pageSize)
        try resizeMap(to: max(target, current + pageSize), failure: .mapFull)
        state.withLock { mapGrowths += 1 }
    }

    /// Remaps to `size` (0: the size on disk) once no read of this process is open.
    /// The write mutex must be held.
    ///
    /// A close waits for a resize (`isResizing`) as for a write. Inside a write the
    /// environment cannot be closed (the close waits for the write); outside one
    /// (`refusingWhenClosing`) the resize is refused once a close has begun, checked in the
    /// same critical section that sets `isResizing`, so it never remaps a closed handle.
    private func resizeMap(to size: Int, failure: LMDBError, refusingWhenClosing: Bool = false) throws(LMDBError) {
        let environment = ObjectIdentifier(self)
        let timeout = configuration.mapGrowthReaderTimeout.components
        let timeoutNanoseconds = UInt64(max(0, timeout.seconds)) * 1_000_000_000 + UInt64(max(0, timeout.attoseconds) / 1_000_000_000)
        try state.withLock { () throws(LMDBError) in
            if refusingWhenClosing { try checkOpenLocked() }
            if !activeSnapshots.isEmpty {
                throw LMDBError(
                    code: failure.code,
                    message: "\(failure.message): the map of \(path) cannot be remapped while \(activeSnapshots.count) read snapshot(s) are open; release them and save again")
            }
            if ThreadReads.holds(environment) {
                throw LMDBError(
                    code: failure.code,
                    message: "\(failure.message): the map of \(path) cannot be remapped while this thread holds a read transaction of it")
            }
            isResizing = true
            defer {
                isResizing = false
                state.broadcast()
            }
            let deadline = ConditionLock.now() + timeoutNanoseconds
            while activeReads > 0 {
                if !state.wait(untilNanoseconds: deadline), activeReads > 0 {
                    throw LMDBError(
                        code: failure.code,
                        message: "\(failure.message): \(activeReads) read transaction(s) of \(path) stayed open for \(configuration.mapGrowthReaderTimeout), so the map could not be remapped")
                }
            }
            try LMDBError.check(mdb_env_set_mapsize(handle, size), "resizing the map of \(path)")
        }
    }
}

extension Environment {
    /// How many of the write transactions committed after transaction `after` up to
    /// `through` (both ids from ``EnvironmentInfo/lastTransactionID``) this process committed,
    /// forgetting them: the others were committed by other processes. Exact even for a
    /// commit in progress while it is asked (its id is known before it becomes visible).
    ///
    /// Meant for one caller that asks with ascending `through`, each `after` the last
    /// `through` (a watcher of other processes' commits); ids up to `through` are dropped.
    /// Returns nil when the ids of that range were dropped unread (more than 65,536
    /// commits of this process since the last call), so the count is unknown.
    public func ownCommits(after: Int, through: Int) -> Int? {
        state.withLock {
            var count = 0
            if let committing, committing > after, committing <= through { count += 1 }
            var taken = 0
            for id in ownCommits {
                guard id <= through else { break }
                if id > after { count += 1 }
                taken += 1
            }
            ownCommits.removeFirst(taken)
            return ownCommitsDroppedThrough > after ? nil : count
        }
    }
}
