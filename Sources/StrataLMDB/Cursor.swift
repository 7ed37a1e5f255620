public import CLMDB
import Foundation

/// A position in a database, lent by ``ReadableTransaction/withCursor(on:_:)``.
///
/// Every move returns the entry it lands on, or nil when there is none (the end of the
/// database, or no such key). The entry's buffers point into the memory map: valid
/// until the transaction ends, and in a write transaction until its next write.
///
/// ```swift
/// try env.read { txn in
///     try txn.withCursor(on: notes) { cursor in
///         var entry = try cursor.seek(atOrAfter: lowerKey)
///         while let (key, value) = entry {
///             // ...
///             entry = try cursor.next()
///         }
///     }
/// }
/// ```
public struct Cursor: ~Copyable {
    /// A key and its value, both zero-copy views into the memory map.
    public typealias Entry = (key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer)

    @usableFromInline let pointer: OpaquePointer
    let transaction: OpaquePointer
    /// The database the cursor walks.
    public let database: Database
    /// A write transaction's map-full flag (see ``WriteTransaction``), set when a write
    /// through the cursor hits MDB_MAP_FULL; nil in a read transaction.
    let hitMapFull: UnsafeMutablePointer<Bool>?

    @usableFromInline
    init(pointer: OpaquePointer, transaction: OpaquePointer, database: Database, hitMapFull: UnsafeMutablePointer<Bool>? = nil) {
        self.pointer = pointer
        self.transaction = transaction
        self.database = database
        self.hitMapFull = hitMapFull
    }

    @inline(__always)
    private func move(_ op: MDB_cursor_op, key: UnsafeRawBufferPointer? = nil, value: UnsafeRawBufferPointer? = nil) throws(LMDBError) -> Entry? {
        var k = key.map(MDB_val.init) ?? MDB_val()
        var v = value.map(MDB_val.init) ?? MDB_val()
        let rc = mdb_cursor_get(pointer, &k, &v, op)
        switch rc {
        case MDB_SUCCESS: return (UnsafeRawBufferPointer(k), UnsafeRawBufferPointer(v))
        case MDB_NOTFOUND: return nil
        default: throw LMDBError(code: rc).adding(context: "cursor on \(database)")
        }
    }

    /// A move that takes no key or value, inlined into the caller: one `mdb_cursor_get`.
    @inlinable @inline(__always)
    func step(_ op: MDB_cursor_op) throws(LMDBError) -> Entry? {
        var k = MDB_val(), v = MDB_val()
        let rc = mdb_cursor_get(pointer, &k, &v, op)
        if rc == MDB_SUCCESS {
            return (UnsafeRawBufferPointer(start: k.mv_data, count: k.mv_size),
                    UnsafeRawBufferPointer(start: v.mv_data, count: v.mv_size))
        }
        if rc == MDB_NOTFOUND { return nil }
        throw failure(rc)
    }

    /// The error of a failed move (kept out of line).
    @usableFromInline
    func failure(_ rc: Int32) -> LMDBError {
        LMDBError(code: rc).adding(context: "cursor on \(database)")
    }

    /// Moves to the first entry.
    @inlinable public func first() throws(LMDBError) -> Entry? { try step(MDB_FIRST) }
    /// Moves to the last entry.
    @inlinable public func last() throws(LMDBError) -> Entry? { try step(MDB_LAST) }
    /// Moves to the next entry (the next duplicate first, with sorted duplicates).
    @inlinable public func next() throws(LMDBError) -> Entry? { try step(MDB_NEXT) }
    /// Moves to the previous entry.
    @inlinable public func previous() throws(LMDBError) -> Entry? { try step(MDB_PREV) }
    /// The entry at the cursor, or nil when it is not positioned.
    public func current() throws(LMDBError) -> Entry? {
        do { return try move(MDB_GET_CURRENT) } catch where error.code == EINVAL { return nil }
    }

    /// Moves to `key` exactly (`MDB_SET_KEY`); nil when it is absent.
    public func seek(to key: UnsafeRawBufferPointer) throws(LMDBError) -> Entry? {
        try move(MDB_SET_KEY, key: key)
    }

    /// Moves to the first key at or after `key` (`MDB_SET_RANGE`).
    public func seek(atOrAfter key: UnsafeRawBufferPointer) throws(LMDBError) -> Entry? {
        try move(MDB_SET_RANGE, key: key)
    }

    /// Moves to the last key at or before `key`.
    public func seek(atOrBefore key: UnsafeRawBufferPointer) throws(LMDBError) -> Entry? {
        guard let entry = try move(MDB_SET_RANGE, key: key) else { return try move(MDB_LAST) }
        if compare(entry.key, key) == 0 { return entry }
        return try move(MDB_PREV)
    }

    // MARK: Sorted duplicates

    /// Moves to the next value of the current key; nil after its last one.
    public func nextDuplicate() throws(LMDBError) -> Entry? { try move(MDB_NEXT_DUP) }
    /// Moves to the previous value of the current key; nil before its first one.
    public func previousDuplicate() throws(LMDBError) -> Entry? { try move(MDB_PREV_DUP) }
    /// Moves to the first value of the next key.
    public func nextKey() throws(LMDBError) -> Entry? { try move(MDB_NEXT_NODUP) }
    /// Moves to the last value of the previous key.
    public func previousKey() throws(LMDBError) -> Entry? { try move(MDB_PREV_NODUP) }
    /// Moves to the first value of the current key.
    public func firstDuplicate() throws(LMDBError) -> Entry? {
        guard try current() != nil else { return nil }
        // MDB_FIRST_DUP and MDB_LAST_DUP return the value only: read the key back.
        guard try move(MDB_FIRST_DUP) != nil else { return nil }
        return try current()
    }
    /// Moves to the last value of the current key.
    public func lastDuplicate() throws(LMDBError) -> Entry? {
        guard try current() != nil else { return nil }
        guard try move(MDB_LAST_DUP) != nil else { return nil }
        return try current()
    }
    /// Moves to the first value at or after `value` under `key` (`MDB_GET_BOTH_RANGE`).
    public func seek(key: UnsafeRawBufferPointer, valueAtOrAfter value: UnsafeRawBufferPointer) throws(LMDBError) -> Entry? {
        // The returned key would be the caller's buffer: return the map's copy instead.
        guard try move(MDB_GET_BOTH_RANGE, key: key, value: value) != nil else { return nil }
        return try current()
    }
    /// The number of values under the current key (`mdb_cursor_count`).
    public func duplicateCount() throws(LMDBError) -> Int {
        var count = 0
        try LMDBError.check(mdb_cursor_count(pointer, &count), "counting duplicates in \(database)")
        return count
    }

    // MARK: Writing through a cursor

    /// Deletes the entry at the cursor (only in a write transaction). The cursor then
    /// stands on the following entry: call ``current()`` to read it.
    public func deleteCurrent() throws(LMDBError) {
        let rc = mdb_cursor_del(pointer, 0)
        if rc == MDB_MAP_FULL { hitMapFull?.pointee = true }
        try LMDBError.check(rc, "cursor delete in \(database)")
    }

    /// Replaces the value of the entry at the cursor with `value` (`MDB_CURRENT`, only in
    /// a write transaction): no search, where a put under the same key would search the
    /// tree again. `key` must be the entry's key. The cursor stays on the entry.
    public func replaceCurrent(key: UnsafeRawBufferPointer, with value: UnsafeRawBufferPointer) throws(LMDBError) {
        var k = MDB_val(key), v = MDB_val(value)
        let rc = mdb_cursor_put(pointer, &k, &v, UInt32(MDB_CURRENT))
        if rc == MDB_MAP_FULL { hitMapFull?.pointee = true }
        try LMDBError.check(rc, "cursor put in \(database)")
    }

    /// Compares two keys with the database's key order.
    public func compare(_ lhs: UnsafeRawBufferPointer, _ rhs: UnsafeRawBufferPointer) -> Int {
        var a = MDB_val(lhs), b = MDB_val(rhs)
        return Int(mdb_cmp(transaction, database.handle, &a, &b))
    }
}

extension Cursor {
    /// Moves to `key` exactly; nil when it is absent.
    @inlinable
    public func seek<Key: ContiguousBytes>(to key: Key) throws -> Entry? {
        try key.withUnsafeBytes { try seek(to: $0) }
    }

    /// Moves to the first key at or after `key`.
    @inlinable
    public func seek<Key: ContiguousBytes>(atOrAfter key: Key) throws -> Entry? {
        try key.withUnsafeBytes { try seek(atOrAfter: $0) }
    }

    /// Moves to the last key at or before `key`.
    @inlinable
    public func seek<Key: ContiguousBytes>(atOrBefore key: Key) throws -> Entry? {
        try key.withUnsafeBytes { try seek(atOrBefore: $0) }
    }
}
