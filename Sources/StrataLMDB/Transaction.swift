internal import CLMDB
import Foundation

/// The read operations shared by ``ReadTransaction`` and ``WriteTransaction``.
///
/// Transactions are non-copyable and lent to a closure (`borrowing`), so they cannot
/// escape it. Buffers handed to closures point into LMDB's memory map (zero copy): they
/// are valid only inside the closure, and in a write transaction only until the next
/// write.
public protocol ReadableTransaction: ~Copyable {
    /// The transaction's id (`mdb_txn_id`): the snapshot a read transaction sees, or
    /// the id a write transaction will commit as.
    var id: Int { get }

    /// Looks up `key` and lends its value, or nil when absent, to `body` without copying.
    func withValue<R>(
        forKey key: UnsafeRawBufferPointer, in database: Database,
        _ body: (UnsafeRawBufferPointer?) throws -> R
    ) throws -> R

    /// Opens a cursor on `database` for the duration of `body`.
    func withCursor<R>(on database: Database, _ body: (borrowing Cursor) throws -> R) throws -> R

    /// The statistics of `database` as this transaction sees it.
    func statistics(of database: Database) throws(LMDBError) -> DatabaseStatistics

    /// Compares two keys with `database`'s key order (`mdb_cmp`): negative, zero or positive.
    func compareKeys(_ lhs: UnsafeRawBufferPointer, _ rhs: UnsafeRawBufferPointer, in database: Database) -> Int
}

/// A read-only transaction: a consistent snapshot of the store (LMDB's MVCC).
///
/// Lent to the body of ``Environment/read(_:)`` or ``ReadSnapshot/read(_:)``. Commits by
/// other transactions after it began are invisible to it.
public struct ReadTransaction: ~Copyable, ReadableTransaction {
    @usableFromInline let pointer: OpaquePointer
    @usableFromInline let environment: ObjectIdentifier

    /// The id of the last committed write transaction this snapshot sees.
    public var id: Int { Int(mdb_txn_id(pointer)) }

    /// Looks up `key` and lends its value to `body` without copying.
    public func withValue<R>(
        forKey key: UnsafeRawBufferPointer, in database: Database,
        _ body: (UnsafeRawBufferPointer?) throws -> R
    ) throws -> R {
        try TransactionOperations.withValue(pointer, environment, key, database, body)
    }

    /// Opens a cursor on `database` for the duration of `body`.
    @inlinable
    public func withCursor<R>(on database: Database, _ body: (borrowing Cursor) throws -> R) throws -> R {
        // Inlinable so that a scan's loop and its body inline into the caller.
        let cursor = try TransactionOperations.openCursor(pointer, environment, database)
        defer { TransactionOperations.closeCursor(cursor) }
        return try body(Cursor(pointer: cursor, transaction: pointer, database: database))
    }

    /// The statistics of `database` in this snapshot.
    public func statistics(of database: Database) throws(LMDBError) -> DatabaseStatistics {
        try TransactionOperations.statistics(pointer, environment, database)
    }

    /// Compares two keys with `database`'s key order.
    public func compareKeys(_ lhs: UnsafeRawBufferPointer, _ rhs: UnsafeRawBufferPointer, in database: Database) -> Int {
        TransactionOperations.compare(pointer, database, lhs, rhs)
    }
}

/// A read-write transaction, lent to the body of ``Environment/write(_:)``.
///
/// It begins and commits inside one synchronous call on one thread: LMDB's writer mutex
/// belongs to the thread that began the transaction (see lmdb.h, `mdb_txn_begin`).
public struct WriteTransaction: ~Copyable, ReadableTransaction {
    @usableFromInline let pointer: OpaquePointer
    @usableFromInline let environment: ObjectIdentifier
    /// Set when an operation hit MDB_MAP_FULL: the environment then grows the map and
    /// runs the whole closure again, whatever the closure did with the error.
    @usableFromInline let hitMapFull: UnsafeMutablePointer<Bool>

    /// The id this transaction will commit as.
    public var id: Int { Int(mdb_txn_id(pointer)) }

    /// Looks up `key` and lends its value to `body` without copying. The buffer is valid
    /// until the next write in this transaction.
    public func withValue<R>(
        forKey key: UnsafeRawBufferPointer, in database: Database,
        _ body: (UnsafeRawBufferPointer?) throws -> R
    ) throws -> R {
        try TransactionOperations.withValue(pointer, environment, key, database, body)
    }

    /// Opens a cursor on `database` for the duration of `body`.
    @inlinable
    public func withCursor<R>(on database: Database, _ body: (borrowing Cursor) throws -> R) throws -> R {
        // Inlinable so that a scan's loop and its body inline into the caller.
        let cursor = try TransactionOperations.openCursor(pointer, environment, database)
        defer { TransactionOperations.closeCursor(cursor) }
        return try body(Cursor(pointer: cursor, transaction: pointer, database: database, hitMapFull: hitMapFull))
    }

    /// The statistics of `database` including this transaction's writes.
    public func statistics(of database: Database) throws(LMDBError) -> DatabaseStatistics {
        try TransactionOperations.statistics(pointer, environment, database)
    }

    /// Compares two keys with `database`'s key order.
    public func compareKeys(_ lhs: UnsafeRawBufferPointer, _ rhs: UnsafeRawBufferPointer, in database: Database) -> Int {
        TransactionOperations.compare(pointer, database, lhs, rhs)
    }

    /// Stores `value` under `key` (`mdb_put`).
    ///
    /// - Throws: ``LMDBError/keyExists`` with `.noOverwrite` when the key exists (or with
    ///   `.append` when the key is not greater than the last one), ``LMDBError/badValueSize``
    ///   for an empty key or one longer than 511 bytes, ``LMDBError/mapFull`` (the
    ///   environment then grows the map and reruns the whole ``Environment/write(_:)`` body).
    public func put(
        _ value: UnsafeRawBufferPointer, forKey key: UnsafeRawBufferPointer, in database: Database,
        flags: PutFlags = []
    ) throws(LMDBError) {
        TransactionOperations.check(database, environment)
        var k = MDB_val(key), v = MDB_val(value)
        let rc = mdb_put(pointer, database.handle, &k, &v, flags.rawValue)
        if rc != MDB_SUCCESS { throw failure(rc, "put in \(database)") }
    }

    /// Reserves `count` bytes under `key` and lets `body` fill them in place (`MDB_RESERVE`),
    /// saving the copy of a separately encoded value.
    public func reserve<R>(
        count: Int, forKey key: UnsafeRawBufferPointer, in database: Database, flags: PutFlags = [],
        _ body: (UnsafeMutableRawBufferPointer) throws -> R
    ) throws -> R {
        TransactionOperations.check(database, environment)
        var k = MDB_val(key)
        var v = MDB_val(mv_size: count, mv_data: nil)
        let rc = mdb_put(pointer, database.handle, &k, &v, flags.rawValue | UInt32(MDB_RESERVE))
        if rc != MDB_SUCCESS { throw failure(rc, "reserve in \(database)") }
        return try body(UnsafeMutableRawBufferPointer(start: v.mv_data, count: count))
    }

    /// Deletes `key` (and every duplicate of it). Returns false when it was absent.
    @discardableResult
    public func delete(forKey key: UnsafeRawBufferPointer, in database: Database) throws(LMDBError) -> Bool {
        TransactionOperations.check(database, environment)
        var k = MDB_val(key)
        let rc = mdb_del(pointer, database.handle, &k, nil)
        if rc == MDB_NOTFOUND { return false }
        if rc != MDB_SUCCESS { throw failure(rc, "delete in \(database)") }
        return true
    }

    /// Deletes one key/value pair of a database with sorted duplicates. Returns false when absent.
    @discardableResult
    public func delete(
        forKey key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, in database: Database
    ) throws(LMDBError) -> Bool {
        TransactionOperations.check(database, environment)
        var k = MDB_val(key), v = MDB_val(value)
        let rc = mdb_del(pointer, database.handle, &k, &v)
        if rc == MDB_NOTFOUND { return false }
        if rc != MDB_SUCCESS { throw failure(rc, "delete in \(database)") }
        return true
    }

    /// Deletes every entry of `database`, keeping the database itself (`mdb_drop(0)`).
    public func removeAll(in database: Database) throws(LMDBError) {
        TransactionOperations.check(database, environment)
        let rc = mdb_drop(pointer, database.handle, 0)
        if rc != MDB_SUCCESS { throw failure(rc, "emptying \(database)") }
    }

    /// Opens (with `create`, creates) database `name` (nil: the main database, never
    /// created) inside this transaction, for a
    /// migration that must create and fill databases atomically with its other writes.
    ///
    /// Unlike ``Environment/openDatabase(named:flags:)`` the handle is not cached: it is
    /// valid in this transaction and, once it commits, for the environment's life (a later
    /// ``Environment/openDatabase(named:flags:)`` of the name returns the same handle); when
    /// the transaction aborts, LMDB closes it. lmdb.h forbids opening databases in
    /// concurrent transactions of one process: call it only while no other transaction of
    /// the environment is open (a store being opened, before anyone else can use it).
    ///
    /// - Throws: ``LMDBError/notFound`` when it does not exist and `create` is false,
    ///   ``LMDBError/databasesFull``, ``LMDBError/incompatible``.
    public func openDatabase(named name: String?, create: Bool, flags: Database.Flags = []) throws(LMDBError) -> Database {
        var dbi = MDB_dbi()
        let openFlags = flags.subtracting(.create).rawValue | (create && name != nil ? UInt32(MDB_CREATE) : 0)
        let rc = name.map { mdb_dbi_open(pointer, $0, openFlags, &dbi) } ?? mdb_dbi_open(pointer, nil, openFlags, &dbi)
        if rc != MDB_SUCCESS { throw failure(rc, "opening database \(name ?? "<main>")") }
        var actual: UInt32 = 0
        mdb_dbi_flags(pointer, dbi, &actual)
        return Database(name: name, flags: Database.Flags(rawValue: actual), handle: dbi, environment: environment)
    }

    /// Deletes `database` itself, entries and name (`mdb_drop(1)`): once this transaction
    /// commits the handle is closed, and neither it nor a handle of the same name cached by
    /// ``Environment/openDatabase(named:flags:)`` may be used again (open it anew instead).
    /// Drop only databases opened with ``openDatabase(named:create:flags:)`` of this
    /// transaction.
    public func dropDatabase(_ database: Database) throws(LMDBError) {
        TransactionOperations.check(database, environment)
        let rc = mdb_drop(pointer, database.handle, 1)
        if rc != MDB_SUCCESS { throw failure(rc, "dropping \(database)") }
    }

    /// Runs `body` in a nested transaction of this one (`mdb_txn_begin` with this
    /// transaction as its parent): when `body` returns, its writes join this transaction;
    /// when it throws, they are undone and this transaction goes on as if `body` had
    /// never run.
    ///
    /// Use only the nested transaction inside `body`: LMDB forbids using a parent while
    /// its child is open. Nothing is durable until the outermost transaction commits.
    /// A full map inside `body` still makes ``Environment/write(_:)`` grow the map and
    /// run its whole body again, whatever `body` did with the error.
    ///
    /// - Throws: what `body` throws; ``LMDBError/mapFull`` when `body` hit a full map
    ///   and returned anyway; LMDB's errors from beginning or committing the child.
    public func nested<T>(_ body: (borrowing WriteTransaction) throws -> T) throws -> T {
        var childPointer: OpaquePointer?
        let begun = mdb_txn_begin(mdb_txn_env(pointer), pointer, 0, &childPointer)
        guard begun == MDB_SUCCESS, let child = childPointer else {
            throw failure(begun, "beginning a nested transaction")
        }
        let result: T
        do {
            result = try body(WriteTransaction(pointer: child, environment: environment, hitMapFull: hitMapFull))
        } catch {
            mdb_txn_abort(child)
            throw error
        }
        if hitMapFull.pointee {
            // The body caught the map-full error itself; the child is unusable.
            mdb_txn_abort(child)
            throw LMDBError(code: MDB_MAP_FULL).adding(context: "a nested transaction")
        }
        let committed = mdb_txn_commit(child)  // frees the child, even when it fails
        if committed != MDB_SUCCESS { throw failure(committed, "committing a nested transaction") }
        return result
    }

    private func failure(_ rc: Int32, _ context: String) -> LMDBError {
        if rc == MDB_MAP_FULL { hitMapFull.pointee = true }
        return LMDBError(code: rc).adding(context: context)
    }
}

// MARK: - Conveniences over any transaction

extension ReadableTransaction where Self: ~Copyable {
    /// Looks up `key` and lends its value to `body` without copying.
    @inlinable
    public func withValue<Key: ContiguousBytes, R>(
        forKey key: Key, in database: Database, _ body: (UnsafeRawBufferPointer?) throws -> R
    ) throws -> R {
        try key.withUnsafeBytes { k in try withValue(forKey: k, in: database, body) }
    }

    /// A copy of the value stored under `key`, or nil when absent.
    @inlinable
    public func value<Key: ContiguousBytes>(forKey key: Key, in database: Database) throws -> [UInt8]? {
        try withValue(forKey: key, in: database) { $0.map { Array($0) } }
    }

    /// Whether `key` is present in `database`.
    @inlinable
    public func contains<Key: ContiguousBytes>(key: Key, in database: Database) throws -> Bool {
        try withValue(forKey: key, in: database) { $0 != nil }
    }

    /// The number of entries in `database` as this transaction sees it.
    public func count(in database: Database) throws(LMDBError) -> Int {
        try statistics(of: database).entries
    }
}

extension WriteTransaction {
    /// Stores `value` under `key`; see ``put(_:forKey:in:flags:)-(UnsafeRawBufferPointer,_,_,_)``.
    @inlinable
    public func put<Value: ContiguousBytes, Key: ContiguousBytes>(
        _ value: Value, forKey key: Key, in database: Database, flags: PutFlags = []
    ) throws {
        try key.withUnsafeBytes { k in
            try value.withUnsafeBytes { v in
                try put(v, forKey: k, in: database, flags: flags)
            }
        }
    }

    /// Reserves `count` bytes under `key` and lets `body` fill them in place.
    @inlinable
    public func reserve<Key: ContiguousBytes, R>(
        count: Int, forKey key: Key, in database: Database, flags: PutFlags = [],
        _ body: (UnsafeMutableRawBufferPointer) throws -> R
    ) throws -> R {
        try key.withUnsafeBytes { k in try reserve(count: count, forKey: k, in: database, flags: flags, body) }
    }

    /// Deletes `key` (and every duplicate of it). Returns false when it was absent.
    @inlinable @discardableResult
    public func delete<Key: ContiguousBytes>(forKey key: Key, in database: Database) throws -> Bool {
        try key.withUnsafeBytes { k in try delete(forKey: k, in: database) }
    }
}

// MARK: - Shared implementation

@usableFromInline
enum TransactionOperations {
    @inline(__always)
    static func check(_ database: Database, _ environment: ObjectIdentifier) {
        precondition(database.environment == environment, "database \(database) belongs to another environment")
    }

    static func withValue<R>(
        _ txn: OpaquePointer, _ environment: ObjectIdentifier, _ key: UnsafeRawBufferPointer,
        _ database: Database, _ body: (UnsafeRawBufferPointer?) throws -> R
    ) throws -> R {
        check(database, environment)
        var k = MDB_val(key), v = MDB_val()
        let rc = mdb_get(txn, database.handle, &k, &v)
        switch rc {
        case MDB_SUCCESS: return try body(UnsafeRawBufferPointer(v))
        case MDB_NOTFOUND: return try body(nil)
        default: throw LMDBError(code: rc).adding(context: "get in \(database)")
        }
    }

    @usableFromInline
    static func openCursor(
        _ txn: OpaquePointer, _ environment: ObjectIdentifier, _ database: Database
    ) throws(LMDBError) -> OpaquePointer {
        check(database, environment)
        var cursor: OpaquePointer?
        let rc = mdb_cursor_open(txn, database.handle, &cursor)
        guard rc == MDB_SUCCESS, let cursor else {
            throw LMDBError(code: rc).adding(context: "opening a cursor on \(database)")
        }
        return cursor
    }

    @usableFromInline
    static func closeCursor(_ cursor: OpaquePointer) {
        mdb_cursor_close(cursor)
    }

    static func statistics(
        _ txn: OpaquePointer, _ environment: ObjectIdentifier, _ database: Database
    ) throws(LMDBError) -> DatabaseStatistics {
        check(database, environment)
        var stat = MDB_stat()
        try LMDBError.check(mdb_stat(txn, database.handle, &stat), "statistics of \(database)")
        return DatabaseStatistics(stat)
    }

    static func compare(
        _ txn: OpaquePointer, _ database: Database, _ lhs: UnsafeRawBufferPointer, _ rhs: UnsafeRawBufferPointer
    ) -> Int {
        var a = MDB_val(lhs), b = MDB_val(rhs)
        return Int(mdb_cmp(txn, database.handle, &a, &b))
    }
}

extension MDB_val {
    @inline(__always)
    init(_ buffer: UnsafeRawBufferPointer) {
        self.init(mv_size: buffer.count, mv_data: UnsafeMutableRawPointer(mutating: buffer.baseAddress))
    }
}

extension UnsafeRawBufferPointer {
    @inline(__always)
    init(_ value: MDB_val) {
        self.init(start: value.mv_data, count: value.mv_size)
    }
}
