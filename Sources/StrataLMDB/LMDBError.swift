internal import CLMDB
#if canImport(Glibc)
import Glibc
#endif

/// An error reported by LMDB, by the operating system underneath it, or by the binding.
///
/// `LMDBError` mirrors LMDB's return codes (see lmdb.h, "Return Codes"): every code has a
/// named static, so an error can be matched in `catch` and `switch`:
///
/// ```swift
/// do {
///     try env.write { txn in try txn.put(value, forKey: key, in: db, flags: .noOverwrite) }
/// } catch LMDBError.keyExists {
///     // the key was already there; nothing was written
/// } catch LMDBError.mapFull {
///     // the map could not grow (see ``Environment/write(_:)``)
/// }
/// ```
///
/// Operating-system failures carry their `errno` value (``ioError``, ``noSpace``, ...).
/// Two errors are equal when their ``code`` is equal; ``message`` only explains.
public struct LMDBError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The LMDB return code (negative, in LMDB's range), the `errno` value (positive),
    /// or a binding-specific code (below LMDB's range).
    public let code: Int32

    /// A human-readable explanation: LMDB's own text plus what the binding was doing.
    public let message: String

    /// Creates an error with a code and an explanation.
    public init(code: Int32, message: String? = nil) {
        self.code = code
        self.message = message ?? LMDBError.describe(code)
    }

    /// Equality compares ``code`` only, so `catch LMDBError.mapFull` matches any map-full error.
    public static func == (lhs: LMDBError, rhs: LMDBError) -> Bool { lhs.code == rhs.code }

    /// Hashes ``code`` only, consistently with `==`.
    public func hash(into hasher: inout Hasher) { hasher.combine(code) }

    /// Lets `catch LMDBError.notFound` and `case LMDBError.notFound` match any error value.
    public static func ~= (pattern: LMDBError, value: any Error) -> Bool {
        (value as? LMDBError)?.code == pattern.code
    }

    /// The error's message, prefixed with its code's name.
    public var description: String { "LMDBError.\(name) (\(code)): \(message)" }

    /// True for errors after which the environment can no longer be used
    /// (``panic`` and ``corrupted``): see ``Environment/terminalError``.
    public var isTerminal: Bool { code == MDB_PANIC || code == MDB_CORRUPTED }

    /// Returns the same error with extra context appended to its message.
    func adding(context: String) -> LMDBError {
        LMDBError(code: code, message: "\(message) (\(context))")
    }

    /// The symbolic name of the code, e.g. `mapFull` or `errno(5)`.
    public var name: String {
        if let known = LMDBError.names[code] { return known }
        return code > 0 ? "errno(\(code))" : "code(\(code))"
    }
}

// MARK: - LMDB return codes (lmdb.h)

extension LMDBError {
    /// MDB_KEYEXIST: the key/data pair already exists (a put with `noOverwrite` or `noDuplicateData`).
    public static let keyExists = LMDBError(code: MDB_KEYEXIST)
    /// MDB_NOTFOUND: the key/data pair was not found (or a cursor reached the end).
    public static let notFound = LMDBError(code: MDB_NOTFOUND)
    /// MDB_PAGE_NOTFOUND: a requested page was not found; the file is usually corrupted.
    public static let pageNotFound = LMDBError(code: MDB_PAGE_NOTFOUND)
    /// MDB_CORRUPTED: a located page was the wrong type. Terminal for the environment.
    public static let corrupted = LMDBError(code: MDB_CORRUPTED)
    /// MDB_PANIC: an update failed fatally; the environment must be closed and reopened.
    public static let panic = LMDBError(code: MDB_PANIC)
    /// MDB_VERSION_MISMATCH: the environment was written by an incompatible LMDB version.
    public static let versionMismatch = LMDBError(code: MDB_VERSION_MISMATCH)
    /// MDB_INVALID: the file is not an LMDB data file.
    public static let invalid = LMDBError(code: MDB_INVALID)
    /// MDB_MAP_FULL: the environment's map size was reached and could not be grown.
    public static let mapFull = LMDBError(code: MDB_MAP_FULL)
    /// MDB_DBS_FULL: the environment's maximum number of named databases was reached.
    public static let databasesFull = LMDBError(code: MDB_DBS_FULL)
    /// MDB_READERS_FULL: every reader slot of the environment is in use.
    public static let readersFull = LMDBError(code: MDB_READERS_FULL)
    /// MDB_TLS_FULL: too many thread-local-storage keys (cannot happen with MDB_NOTLS).
    public static let tlsFull = LMDBError(code: MDB_TLS_FULL)
    /// MDB_TXN_FULL: the write transaction has too many dirty pages.
    public static let transactionFull = LMDBError(code: MDB_TXN_FULL)
    /// MDB_CURSOR_FULL: the cursor stack is too deep (internal error).
    public static let cursorFull = LMDBError(code: MDB_CURSOR_FULL)
    /// MDB_PAGE_FULL: a page has no more space (internal error).
    public static let pageFull = LMDBError(code: MDB_PAGE_FULL)
    /// MDB_MAP_RESIZED: another process grew the map beyond this process's mapping.
    public static let mapResized = LMDBError(code: MDB_MAP_RESIZED)
    /// MDB_INCOMPATIBLE: the operation is incompatible with the database or its flags.
    public static let incompatible = LMDBError(code: MDB_INCOMPATIBLE)
    /// MDB_BAD_RSLOT: a reader slot was used in a way LMDB does not allow.
    public static let badReaderSlot = LMDBError(code: MDB_BAD_RSLOT)
    /// MDB_BAD_TXN: the transaction must abort, has a child, or is invalid.
    public static let badTransaction = LMDBError(code: MDB_BAD_TXN)
    /// MDB_BAD_VALSIZE: a key or value has an unsupported size (a key over 511 bytes, an empty key).
    public static let badValueSize = LMDBError(code: MDB_BAD_VALSIZE)
    /// MDB_BAD_DBI: the database handle was changed or closed unexpectedly.
    public static let badDatabase = LMDBError(code: MDB_BAD_DBI)
}

// MARK: - errno values LMDB passes through

extension LMDBError {
    /// EIO: an input/output error while reading or writing the files.
    public static let ioError = LMDBError(code: EIO)
    /// ENOSPC: the disk is full.
    public static let noSpace = LMDBError(code: ENOSPC)
    /// ENOMEM: out of memory (LMDB also returns it for an environment already open).
    public static let outOfMemory = LMDBError(code: ENOMEM)
    /// EACCES: permission denied (a directory or file that is not writable).
    public static let permissionDenied = LMDBError(code: EACCES)
    /// ENOENT: no such file or directory (a store that does not exist).
    public static let noSuchFile = LMDBError(code: ENOENT)
    /// ENOTDIR: the store path, or a component of it, is not a directory.
    public static let notADirectory = LMDBError(code: ENOTDIR)
    /// EEXIST: the destination already exists.
    public static let fileExists = LMDBError(code: EEXIST)
    /// EINVAL: an invalid argument.
    public static let invalidArgument = LMDBError(code: EINVAL)
    /// EROFS: a read-only file system.
    public static let readOnlyFileSystem = LMDBError(code: EROFS)
    /// EAGAIN: the lock file is held incompatibly by another process.
    public static let wouldBlock = LMDBError(code: EAGAIN)
    /// EBUSY: the resource is busy.
    public static let busy = LMDBError(code: EBUSY)

    /// The error for an `errno` value.
    public static func errno(_ value: Int32) -> LMDBError { LMDBError(code: value) }
}

// MARK: - Binding-specific codes (below LMDB's range, never returned by liblmdb)

extension LMDBError {
    /// The environment is in a terminal state after ``panic`` or ``corrupted``:
    /// close every reference to it and open the store again.
    public static let environmentUnusable = LMDBError(code: -31_000)
    /// The same store directory is already open in this process. LMDB forbids opening
    /// one environment twice in a process (its POSIX locks would be released by the
    /// second close); share the open ``Environment`` instead.
    public static let alreadyOpen = LMDBError(code: -31_001)
    /// A write transaction was requested on a thread that is already inside one of this
    /// environment's write transactions (LMDB would deadlock on its writer mutex).
    public static let nestedWrite = LMDBError(code: -31_002)
    /// The runtime liblmdb is incompatible with the version this binding was built for.
    public static let libraryVersion = LMDBError(code: -31_003)
    /// The environment was opened read-only and a write was requested.
    public static let readOnly = LMDBError(code: -31_004)
    /// The environment was closed with ``Environment/close(timeout:)``, or is closing: it
    /// takes no new transaction, snapshot or snapshot read. Open the store again for more
    /// work; this is not a failure of the store (compare ``environmentUnusable``).
    public static let environmentClosed = LMDBError(code: -31_005)
    /// ``Environment/close(timeout:)`` gave up waiting for this process's open
    /// transactions. The environment takes no new work, but it is not closed yet: call
    /// `close` again once they end (or let the last reference go).
    public static let closeTimedOut = LMDBError(code: -31_006)

    /// A precondition-free check for LMDB's success code.
    @inline(__always)
    static func check(_ rc: Int32, _ context: @autoclosure () -> String) throws(LMDBError) {
        if rc != MDB_SUCCESS { throw LMDBError(code: rc).adding(context: context()) }
    }

    private static let names: [Int32: String] = [
        MDB_KEYEXIST: "keyExists", MDB_NOTFOUND: "notFound", MDB_PAGE_NOTFOUND: "pageNotFound",
        MDB_CORRUPTED: "corrupted", MDB_PANIC: "panic", MDB_VERSION_MISMATCH: "versionMismatch",
        MDB_INVALID: "invalid", MDB_MAP_FULL: "mapFull", MDB_DBS_FULL: "databasesFull",
        MDB_READERS_FULL: "readersFull", MDB_TLS_FULL: "tlsFull", MDB_TXN_FULL: "transactionFull",
        MDB_CURSOR_FULL: "cursorFull", MDB_PAGE_FULL: "pageFull", MDB_MAP_RESIZED: "mapResized",
        MDB_INCOMPATIBLE: "incompatible", MDB_BAD_RSLOT: "badReaderSlot",
        MDB_BAD_TXN: "badTransaction", MDB_BAD_VALSIZE: "badValueSize", MDB_BAD_DBI: "badDatabase",
        EIO: "ioError", ENOSPC: "noSpace", ENOMEM: "outOfMemory", EACCES: "permissionDenied",
        ENOENT: "noSuchFile", ENOTDIR: "notADirectory", EEXIST: "fileExists",
        EINVAL: "invalidArgument", EROFS: "readOnlyFileSystem", EAGAIN: "wouldBlock", EBUSY: "busy",
        -31_000: "environmentUnusable", -31_001: "alreadyOpen", -31_002: "nestedWrite",
        -31_003: "libraryVersion", -31_004: "readOnly", -31_005: "environmentClosed",
        -31_006: "closeTimedOut",
    ]

    private static func describe(_ code: Int32) -> String {
        switch code {
        case -31_000: return "the environment is unusable after a fatal error; reopen the store"
        case -31_001: return "the store is already open in this process"
        case -31_002: return "a write transaction is already open on this thread"
        case -31_003: return "the runtime liblmdb version is incompatible"
        case -31_004: return "the environment is read-only"
        case -31_005: return "the environment is closed"
        case -31_006: return "the environment did not close in time: transactions of this process were still open"
        default: return String(cString: mdb_strerror(code))
        }
    }
}
