internal import CLMDB
internal import StrataLocks
#if canImport(Glibc)
import Glibc
#endif

/// A long-lived read transaction: one frozen state of the store that several users can
/// share, across threads and across `await`s.
///
/// Take one with ``Environment/makeSnapshot()``. It keeps seeing exactly the commit that
/// was the newest when it began, whatever is written afterwards; this is what Strata's
/// query generations are built on.
///
/// ```swift
/// let snapshot = try env.makeSnapshot()
/// try env.write { txn in try txn.put(newValue, forKey: key, in: db) }
/// let old = try snapshot.read { txn in try txn.value(forKey: key, in: db) }  // the old value
/// ```
///
/// - It is reference counted: the LMDB read transaction ends (`mdb_txn_abort`) when the
///   last reference to the snapshot goes away, on whatever thread that happens, or
///   earlier when its environment closes (``Environment/close(timeout:)``); its reads
///   then throw ``LMDBError/environmentClosed``.
/// - It is usable from any thread (the environment is opened with `MDB_NOTLS`) but by
///   one at a time: ``read(_:)`` serialises access. Calls nest on one thread.
/// - While it is open it holds a reader slot and stops LMDB from reusing the pages it
///   sees, so the file grows under heavy writes; and the map cannot grow (a write that
///   needs more room fails with ``LMDBError/mapFull``). Keep snapshots short-lived, and
///   watch ``Environment/openSnapshotCount`` and ``Environment/oldestSnapshotAge``.
// @unchecked Sendable because the read transaction and `released` are only touched
// while `access` (a recursive mutex) is held, and LMDB allows a MDB_NOTLS read
// transaction to be used by any thread, one at a time.
public final class ReadSnapshot: @unchecked Sendable {

    /// The environment the snapshot reads.
    public let environment: Environment
    /// The id of the last commit the snapshot sees (`mdb_txn_id`).
    public let transactionID: Int
    /// When the snapshot began.
    public let createdAt: ContinuousClock.Instant

    private let pointer: OpaquePointer
    /// The snapshot's key in the environment's `activeSnapshots` and `liveSnapshots`.
    let serial: UInt64
    /// Serialises the use of `pointer` between threads; recursive, so a nested read on
    /// the same thread runs at once. Taken before the environment's `state`, never while
    /// holding it.
    private let access = ConditionLock(recursive: true)
    /// Whether a close ended the read transaction (``release()``). Guarded by `access`.
    private var released = false

    init(environment: Environment) throws {
        let serial = environment.state.withLock {
            environment.nextSnapshotSerial += 1
            return environment.nextSnapshotSerial
        }
        let txn = try environment.beginReadTransaction(snapshot: serial)
        self.environment = environment
        self.serial = serial
        self.pointer = txn
        self.transactionID = Int(mdb_txn_id(txn))
        self.createdAt = .now
    }

    deinit {
        // Nobody else refers to the snapshot now; the lock orders this read after a
        // release on another thread.
        guard !access.withLock({ released }) else { return }
        mdb_txn_abort(pointer)
        environment.endSnapshot(serial)
    }

    /// Ends the read transaction now, for ``Environment/close(timeout:)``: waits for a
    /// read in flight on another thread, then aborts the transaction and unregisters it,
    /// once (`deinit` then does neither). The caller holds no lock.
    func release() {
        access.lock()
        defer { access.unlock() }
        guard !released else { return }
        released = true
        mdb_txn_abort(pointer)
        environment.endSnapshot(serial)
    }

    /// How long the snapshot has been open.
    public var age: Duration { ContinuousClock.now - createdAt }

    /// Runs `body` with the snapshot's read transaction. Callers on other threads wait
    /// until `body` returns; a nested call on the same thread runs at once.
    ///
    /// - Throws: ``LMDBError/environmentUnusable`` after the environment panicked,
    ///   ``LMDBError/environmentClosed`` once ``Environment/close(timeout:)`` has begun (a
    ///   read already running finishes first: the close waits for it), or what `body` throws.
    public func read<T>(_ body: (borrowing ReadTransaction) throws -> T) throws -> T {
        access.lock()
        defer { access.unlock() }
        if released {
            throw LMDBError(code: LMDBError.environmentClosed.code, message: "the environment at \(environment.path) is closed")
        }
        try environment.beginSnapshotRead()
        let id = ObjectIdentifier(environment)
        // Recorded for this thread so that a close called inside `body` fails at once
        // instead of waiting for itself.
        ThreadReads.enter(id)
        defer {
            ThreadReads.leave(id)
            environment.endSnapshotRead()
        }
        do {
            return try body(ReadTransaction(pointer: pointer, environment: id))
        } catch {
            environment.noteIfTerminal(error)
            throw error
        }
    }
}

extension Environment {
    /// Begins a ``ReadSnapshot`` of the newest commit.
    ///
    /// - Throws: ``LMDBError/readersFull`` when no reader slot is free,
    ///   ``LMDBError/environmentUnusable`` after a panic, ``LMDBError/environmentClosed``
    ///   once ``close(timeout:)`` has begun.
    public func makeSnapshot() throws -> ReadSnapshot {
        let snapshot = try ReadSnapshot(environment: self)
        // Refused when a close began meanwhile: dropping the snapshot ends its transaction.
        try registerSnapshot(snapshot)
        return snapshot
    }

    /// The number of ``ReadSnapshot``s of this environment that are open (0 once closed).
    public var openSnapshotCount: Int {
        state.withLock { activeSnapshots.count }
    }

    /// How long the oldest open snapshot has been open, or nil when none is.
    public var oldestSnapshotAge: Duration? {
        let oldest = state.withLock { activeSnapshots.values.min() }
        return oldest.map { .nanoseconds(Int64(ConditionLock.now() - $0)) }
    }

    /// The number of short read transactions (``read(_:)`` bodies) running now.
    public var activeReadCount: Int {
        state.withLock { activeReads }
    }

    /// How many times this process grew the map since the environment opened.
    public var mapGrowthCount: Int {
        state.withLock { mapGrowths }
    }
}
