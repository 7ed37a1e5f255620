internal import CLMDB
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The state of an environment (`mdb_env_info`).
public struct EnvironmentInfo: Sendable, Hashable {
    /// The size of the memory map, in bytes.
    public let mapSize: Int
    /// The number of the last page used in the data file.
    public let lastPageNumber: Int
    /// The id of the last committed write transaction.
    public let lastTransactionID: Int
    /// The number of reader slots in the lock file.
    public let maxReaders: Int
    /// The reader slots ever used in the lock file (a high-water mark; see
    /// ``Environment/readers()`` for the live ones).
    public let readerSlotsUsed: Int
}

/// One reader slot of the lock file (`mdb_reader_list`).
public struct ReaderSlot: Sendable, Hashable {
    /// The process holding the slot.
    public let processID: Int32
    /// The thread that began the transaction (as LMDB prints it).
    public let thread: String
    /// The snapshot the reader sees, or nil when the slot is held without a transaction.
    public let transactionID: Int?
}

extension Environment {
    /// The map size, last transaction id and reader slots.
    ///
    /// Once the environment is closed (``close(timeout:)``), what they were just before
    /// it closed.
    public var info: EnvironmentInfo {
        state.withLock { finalInfo ?? EnvironmentInfo(reading: handle) }
    }

    /// The statistics of the main database (page size, depth, the named databases as entries).
    ///
    /// Once the environment is closed (``close(timeout:)``), what they were just before
    /// it closed.
    public var statistics: DatabaseStatistics {
        state.withLock { finalStatistics ?? DatabaseStatistics(reading: handle) }
    }

    /// The statistics of `database` in a fresh read transaction.
    public func statistics(of database: Database) throws -> DatabaseStatistics {
        try read { txn in try txn.statistics(of: database) }
    }

    /// The reader slots in use in the lock file, by every process; empty once
    /// ``close(timeout:)`` has begun.
    public func readers() -> [ReaderSlot] {
        final class Lines { var text = "" }
        let lines = Lines()
        let listed: Void? = try? withOpenHandle { handle in
            withExtendedLifetime(lines) {
                _ = mdb_reader_list(handle, { message, context in
                    guard let message, let context else { return 0 }
                    Unmanaged<Lines>.fromOpaque(context).takeUnretainedValue().text += String(cString: message)
                    return 0
                }, Unmanaged.passUnretained(lines).toOpaque())
            }
        }
        guard listed != nil else { return [] }
        // Lines look like "   1234 7f3a2c000700 42" (or "-" for no transaction);
        // the first line is a header, or "(no active readers)".
        return lines.text.split(separator: "\n").dropFirst().compactMap { line in
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count == 3, let pid = Int32(fields[0]) else { return nil }
            return ReaderSlot(processID: pid, thread: String(fields[1]), transactionID: Int(fields[2]))
        }
    }

    /// Clears reader slots left by processes that died (`mdb_reader_check`); returns how many.
    ///
    /// Runs at open, and again when a read finds every slot taken.
    ///
    /// - Throws: ``LMDBError/environmentClosed`` once ``close(timeout:)`` has begun.
    @discardableResult
    public func clearStaleReaders() throws(LMDBError) -> Int {
        try withOpenHandle { handle throws(LMDBError) in
            var dead: Int32 = 0
            try LMDBError.check(mdb_reader_check(handle, &dead), "checking reader slots")
            return Int(dead)
        }
    }

    /// Copies the environment into the directory at `destination` (created when missing),
    /// as a consistent snapshot taken while writes go on (`mdb_env_copy2`).
    ///
    /// With `compacting`, free pages are omitted and the copy is renumbered, so it can be
    /// much smaller; it takes longer.
    ///
    /// - Throws: ``LMDBError/fileExists`` when the destination already holds a
    ///   `data.mdb`, ``LMDBError/notADirectory`` when it is a file,
    ///   ``LMDBError/environmentClosed`` once ``close(timeout:)`` has begun (a copy in
    ///   progress finishes first: the close waits for it).
    public func copy(to destination: String, compacting: Bool = false) throws {
        var info = stat()
        if stat(destination, &info) == 0 {
            guard (info.st_mode & S_IFMT) == S_IFDIR else {
                throw LMDBError(code: ENOTDIR, message: "\(destination) is a file, not a directory")
            }
            if access(destination + "/data.mdb", F_OK) == 0 {
                throw LMDBError(code: EEXIST, message: "\(destination) already holds a data.mdb; copy into an empty directory")
            }
        } else {
            do {
                try FileManager.default.createDirectory(atPath: destination, withIntermediateDirectories: true)
            } catch {
                throw LMDBError(code: EACCES, message: "cannot create \(destination): \(error.localizedDescription)")
            }
        }
        // The copy runs its own read transaction over the map: count it as a reader so a
        // concurrent write waits to remap until the copy is done.
        try state.withLock { () throws(LMDBError) in
            while isResizing { state.wait() }
            try checkOpenLocked()
            try checkUsableLocked()
            activeReads += 1
        }
        defer { endRead() }
        let flags = compacting ? UInt32(MDB_CP_COMPACT) : 0
        try LMDBError.check(mdb_env_copy2(handle, destination, flags), "copying \(path) to \(destination)")
    }

    /// Flushes written data to disk (`mdb_env_sync`).
    ///
    /// With ``Durability/noSync`` or ``Durability/noMetaSync`` this is how commits are
    /// made durable; `force` flushes even when the environment would skip it.
    /// ``close(timeout:)`` flushes such an environment as it closes.
    ///
    /// - Throws: ``LMDBError/environmentClosed`` once ``close(timeout:)`` has begun.
    public func sync(force: Bool = true) throws(LMDBError) {
        try withOpenHandle { handle throws(LMDBError) in
            try LMDBError.check(mdb_env_sync(handle, force ? 1 : 0), "syncing \(path)")
        }
    }
}

extension EnvironmentInfo {
    /// Reads the state of an open environment (`mdb_env_info`).
    init(reading handle: OpaquePointer) {
        var info = MDB_envinfo()
        mdb_env_info(handle, &info)
        self.init(
            mapSize: info.me_mapsize, lastPageNumber: info.me_last_pgno,
            lastTransactionID: info.me_last_txnid, maxReaders: Int(info.me_maxreaders),
            readerSlotsUsed: Int(info.me_numreaders))
    }
}

extension DatabaseStatistics {
    /// Reads the statistics of an open environment's main database (`mdb_env_stat`).
    init(reading handle: OpaquePointer) {
        var stat = MDB_stat()
        mdb_env_stat(handle, &stat)
        self.init(stat)
    }
}
