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
///   last reference to the snapshot goes away, on whatever thread that happens.
/// - It is usable from any thread (the environment is opened with `MDB_NOTLS`) but by
///   one at a time: ``read(_:)`` serialises access. Calls nest on one thread.
/// - While it is open it holds a reader slot and stops LMDB from reusing the pages it
///   sees, so the file grows under heavy writes; and the map cannot grow (a write that
///   needs more room fails with ``LMDBError/mapFull``). Keep snapshots short-lived, and
///   watch ``Environment/openSnapshotCount`` and ``Environment/oldestSnapshotAge``.
// @unchecked Sendable because the read transaction is only touched while `access`
// (a recursive mutex) is held, and LMDB allows a MDB_NOTLS read transaction to be
// used by any thread, one at a time.
public final class ReadSnapshot: @unchecked Sendable {

    /// The environment the snapshot reads.
    public let environment: Environment
    /// The id of the last commit the snapshot sees (`mdb_txn_id`).
    public let transactionID: Int
    /// When the snapshot began.
    public let createdAt: ContinuousClock.Instant

    private let pointer: OpaquePointer
    private let serial: UInt64
    /// Serialises the use of `pointer` between threads; recursive, so a nested read on
    /// the same thread runs at once.
    private let access = ConditionLock(recursive: true)

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
        mdb_txn_abort(pointer)
        environment.endSnapshot(serial)
    }

    /// How long the snapshot has been open.
    public var age: Duration { ContinuousClock.now - createdAt }

    /// Runs `body` with the snapshot's read transaction. Callers on other threads wait
    /// until `body` returns; a nested call on the same thread runs at once.
    ///
    /// - Throws: ``LMDBError/environmentUnusable`` after the environment panicked, or what
    ///   `body` throws.
    public func read<T>(_ body: (borrowing ReadTransaction) throws -> T) throws -> T {
        access.lock()
        defer { access.unlock() }
        try environment.state.withLock { () throws(LMDBError) in try environment.checkUsableLocked() }
        do {
            return try body(ReadTransaction(pointer: pointer, environment: ObjectIdentifier(environment)))
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
    ///   ``LMDBError/environmentUnusable`` after a panic.
    public func makeSnapshot() throws -> ReadSnapshot {
        try ReadSnapshot(environment: self)
    }

    /// The number of ``ReadSnapshot``s of this environment that are open.
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
