internal import CLMDB
internal import StrataLocks
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// An open LMDB environment: one store directory holding `data.mdb` and `lock.mdb`.
///
/// An `Environment` is thread-safe and `Sendable`. Reads and writes are closure-scoped,
/// so a transaction can neither outlive its closure nor cross an `await`:
///
/// ```swift
/// let env = try Environment(path: storePath)
/// let notes = try env.openDatabase(named: "notes", flags: .create)
/// try env.write { txn in
///     try txn.put(Array("hello".utf8), forKey: [0, 0, 0, 1], in: notes)
/// }
/// let text = try env.read { txn in try txn.value(forKey: [0, 0, 0, 1], in: notes) }
/// ```
///
/// The environment is always opened with `MDB_NOTLS`: Swift tasks share threads, and
/// without it a second reader on one thread fails with `MDB_BAD_RSLOT`. At open it
/// checks the runtime `mdb_version()` and clears stale reader slots left by dead
/// processes (`mdb_reader_check`). It closes when ``close(timeout:)`` is called, or else
/// when the last reference to it, and to every ``ReadSnapshot`` taken from it, is gone.
///
/// LMDB forbids opening one environment twice in a process, so a second `Environment`
/// for a directory that is already open throws ``LMDBError/alreadyOpen``.
// @unchecked Sendable because `handle` is an MDB_env, which LMDB documents as usable
// from any thread, every mutable property is guarded by `state` or `writeMutex`, and
// `handle` is passed to LMDB only while `closed` is false (see Environment+Close.swift).
public final class Environment: @unchecked Sendable {

    /// The store directory.
    public let path: String

    /// The configuration the environment was opened with.
    public let configuration: Configuration

    /// The number of stale reader slots (of dead processes) cleared when it opened.
    public let staleReadersClearedAtOpen: Int

    /// The MDB_env. Freed by ``close(timeout:)`` (then `closed` is set) or by `deinit`:
    /// every use is either counted in the state ``close(timeout:)`` waits for, or made
    /// with `state` held after checking `closed`.
    let handle: OpaquePointer
    let fileIdentity: FileIdentity
    /// This environment's entry in the process-wide registry.
    let registration: UInt64
    let pageSize: Int

    /// Guards `activeReads`, `activeSnapshots`, `nextSnapshotSerial`, `isResizing`,
    /// `writerThread`, `terminal`, `mapGrowths`, the own-commit bookkeeping, the
    /// database-handle cache and the closing state (`closing`, `closed`, `liveSnapshots`,
    /// `snapshotReads`, `activeCalls`, `finalInfo`, `finalStatistics`).
    ///
    /// Lock order: a snapshot's `access` before `state`, `writeMutex` before `state`,
    /// `state` before the registry's lock (`OpenEnvironments`). Nothing takes a snapshot's
    /// `access` or `writeMutex` while holding `state`.
    let state = ConditionLock()
    /// Serialises this process's write transactions and map resizes.
    let writeMutex = ConditionLock()

    var activeReads = 0
    /// Open snapshots by serial number, with the monotonic time each began.
    var activeSnapshots: [UInt64: UInt64] = [:]
    var nextSnapshotSerial: UInt64 = 0
    var mapGrowths = 0
    var isResizing = false
    var writerThread: pthread_t?
    var terminal: LMDBError?
    var databaseCache: [String: Database] = [:]
    /// Set when ``close(timeout:)`` begins: from then on no new transaction, snapshot,
    /// snapshot read or call into LMDB is admitted.
    var closing = false
    /// Set once `mdb_env_close` ran in ``close(timeout:)``: `handle` is freed.
    var closed = false
    /// The open snapshots by serial, weakly, so that a close can end their transactions.
    var liveSnapshots: [UInt64: WeakSnapshot] = [:]
    /// The ``ReadSnapshot/read(_:)`` bodies running now.
    var snapshotReads = 0
    /// Calls into LMDB outside any transaction running now (`sync`, `readers()`,
    /// `clearStaleReaders()`).
    var activeCalls = 0
    /// What ``info`` and ``statistics`` answer once the environment is closed, read just
    /// before `mdb_env_close`.
    var finalInfo: EnvironmentInfo?
    var finalStatistics: DatabaseStatistics?
    /// The ids of the write transactions this process committed that
    /// ``ownCommits(after:through:)`` has not counted yet, ascending (at most
    /// ``ownCommitsKept``; older ones are dropped, and the count says so).
    var ownCommits: [Int] = []
    /// The id of the write transaction this process is committing now, if any.
    var committing: Int?
    /// The newest id dropped from `ownCommits` uncounted (0 for none).
    var ownCommitsDroppedThrough = 0
    /// The most ids `ownCommits` keeps when nobody counts them.
    static let ownCommitsKept = 65_536

    /// Opens (and by default creates) the environment in the directory at `path`.
    ///
    /// - Throws: ``LMDBError/notADirectory`` when `path` is a file,
    ///   ``LMDBError/noSuchFile`` when it is missing and `createIfMissing` is false,
    ///   ``LMDBError/permissionDenied`` when it is not writable,
    ///   ``LMDBError/invalid`` when `data.mdb` is not an LMDB file,
    ///   ``LMDBError/corrupted`` when it is truncated or its meta pages are damaged
    ///   (checked before LMDB maps it: see `DataFileCheck`),
    ///   ``LMDBError/alreadyOpen`` when this process already has it open,
    ///   ``LMDBError/libraryVersion`` when the runtime liblmdb is not 0.9.x.
    public init(path: String, configuration: Configuration = Configuration()) throws {
        try Environment.checkLibraryVersion()
        let (directory, existing) = try Environment.prepareDirectory(path, configuration)
        self.path = directory
        self.configuration = configuration
        self.pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))

        let identity = try FileIdentity(path: directory)
        let token = try OpenEnvironments.register(identity, path: directory)
        self.fileIdentity = identity
        self.registration = token

        var env: OpaquePointer?
        var rc = mdb_env_create(&env)
        guard rc == MDB_SUCCESS, let env else {
            OpenEnvironments.unregister(identity, token: token)
            throw LMDBError(code: rc).adding(context: "mdb_env_create")
        }
        let mapSize = Environment.roundUp(max(configuration.mapSize, pageSize), to: pageSize)
        // A new store starts at the configured size. An existing one opens at the size its
        // meta page records (LMDB's choice when no size is set), then grows to the
        // configured size if that is larger: a store that grew keeps its room.
        if !existing { rc = mdb_env_set_mapsize(env, mapSize) }
        if rc == MDB_SUCCESS { rc = mdb_env_set_maxreaders(env, UInt32(clamping: max(1, configuration.maxReaders))) }
        if rc == MDB_SUCCESS { rc = mdb_env_set_maxdbs(env, UInt32(clamping: max(0, configuration.maxDatabases))) }
        if rc == MDB_SUCCESS {
            rc = mdb_env_open(env, directory, Environment.flags(for: configuration), configuration.fileMode)
        }
        if rc != MDB_SUCCESS {
            mdb_env_close(env)
            OpenEnvironments.unregister(identity, token: token)
            throw LMDBError(code: rc).adding(context: "opening the environment at \(directory)")
        }
        if existing {
            var info = MDB_envinfo()
            mdb_env_info(env, &info)
            if info.me_mapsize < mapSize { rc = mdb_env_set_mapsize(env, mapSize) }
            if rc != MDB_SUCCESS {
                mdb_env_close(env)
                OpenEnvironments.unregister(identity, token: token)
                throw LMDBError(code: rc).adding(context: "setting the map size of \(directory)")
            }
        }
        var fd: Int32 = -1
        var dataInfo = stat()
        let dataFile = mdb_env_get_fd(env, &fd) == MDB_SUCCESS && fstat(fd, &dataInfo) == 0 ? FileIdentity(dataInfo) : nil
        OpenEnvironments.opened(identity, token: token, dataFile: dataFile)
        var dead: Int32 = 0
        _ = mdb_reader_check(env, &dead)
        self.handle = env
        self.staleReadersClearedAtOpen = Int(dead)
    }

    /// The error that made an environment of the directory at `path`, still open in this
    /// process, terminal; nil when no environment of it is open, or the open one is usable.
    ///
    /// Opening the directory again fails with ``LMDBError/alreadyOpen`` until that
    /// environment closes (``close(timeout:)``, or the last reference to it and to its
    /// snapshots goes): this tells a caller why, so that it can say what to let go of.
    public static func terminalErrorOfOpenEnvironment(atPath path: String) -> LMDBError? {
        OpenEnvironments.terminalError(atPath: path)
    }

    /// Opens (and by default creates) the environment in the directory at `url`.
    public convenience init(url: URL, configuration: Configuration = Configuration()) throws {
        try self.init(path: url.path, configuration: configuration)
    }

    deinit {
        // Nothing else refers to the environment now; the lock orders this read after the
        // write of `closed` by a close on another thread.
        guard !state.withLock({ closed }) else { return }
        mdb_env_close(handle)
        OpenEnvironments.unregister(fileIdentity, token: registration)
    }

    /// The error that put the environment into its terminal state, or nil while it is usable.
    ///
    /// After LMDB reports ``LMDBError/panic`` (a fatal write failure) or
    /// ``LMDBError/corrupted``, every new transaction throws
    /// ``LMDBError/environmentUnusable`` until the store is closed and opened again.
    public var terminalError: LMDBError? {
        state.withLock { terminal }
    }

    /// Throws ``LMDBError/environmentClosed`` once ``close(timeout:)`` has begun, and
    /// ``LMDBError/environmentUnusable`` when the environment is in its terminal state
    /// (``terminalError`` is set), as every new transaction then does.
    ///
    /// For callers that answer reads from a cache of their own: a terminal or closed
    /// environment's data must not be served at all until the store is opened again.
    public func checkUsable() throws(LMDBError) {
        try state.withLock { () throws(LMDBError) in
            try checkOpenLocked()
            try checkUsableLocked()
        }
    }

    /// Records a terminal error (panic, corruption) so later transactions are refused.
    func noteIfTerminal(_ error: any Error) {
        guard let error = error as? LMDBError, error.isTerminal else { return }
        let first = state.withLock { () -> Bool in
            guard terminal == nil else { return false }
            terminal = error
            return true
        }
        if first { OpenEnvironments.terminated(fileIdentity, token: registration, error: error) }
    }

    /// Throws ``LMDBError/environmentUnusable`` when the environment is terminal; the lock must be held.
    func checkUsableLocked() throws(LMDBError) {
        if let terminal {
            throw LMDBError(
                code: LMDBError.environmentUnusable.code,
                message: "the environment at \(path) is unusable after \(terminal.name): \(terminal.message); close it and open the store again")
        }
    }

    // MARK: Opening

    private static func flags(for configuration: Configuration) -> UInt32 {
        var flags = UInt32(MDB_NOTLS)
        switch configuration.durability {
        case .sync: break
        case .noMetaSync: flags |= UInt32(MDB_NOMETASYNC)
        case .noSync: flags |= UInt32(MDB_NOSYNC)
        }
        if configuration.readOnly { flags |= UInt32(MDB_RDONLY) }
        return flags
    }

    /// The version of the liblmdb this process runs against, e.g. `(0, 9, 24)`.
    public static var libraryVersion: (major: Int, minor: Int, patch: Int) {
        var major: Int32 = 0, minor: Int32 = 0, patch: Int32 = 0
        _ = mdb_version(&major, &minor, &patch)
        return (Int(major), Int(minor), Int(patch))
    }

    private static func checkLibraryVersion() throws(LMDBError) {
        let runtime = libraryVersion
        guard runtime.major == Int(MDB_VERSION_MAJOR), runtime.minor == Int(MDB_VERSION_MINOR) else {
            throw LMDBError(
                code: LMDBError.libraryVersion.code,
                message: "liblmdb \(runtime.major).\(runtime.minor).\(runtime.patch) is loaded, but StrataLMDB was built for \(MDB_VERSION_MAJOR).\(MDB_VERSION_MINOR).x")
        }
    }

    /// Checks (and creates) the store directory, and that an existing `data.mdb` is LMDB's.
    /// Returns the directory and whether it already holds an initialised store.
    private static func prepareDirectory(_ path: String, _ configuration: Configuration) throws(LMDBError) -> (String, Bool) {
        guard !path.isEmpty else {
            throw LMDBError(code: ENOENT, message: "the store path is empty")
        }
        var info = stat()
        if stat(path, &info) == 0 {
            guard (info.st_mode & S_IFMT) == S_IFDIR else {
                throw LMDBError(code: ENOTDIR, message: "\(path) is a file, not a store directory")
            }
        } else {
            let error = errno
            guard error == ENOENT else {
                throw LMDBError(code: error, message: "cannot use \(path) as a store directory: \(String(cString: strerror(error)))")
            }
            guard configuration.createIfMissing, !configuration.readOnly else {
                throw LMDBError(code: ENOENT, message: "no store at \(path)")
            }
            try createDirectory(path)
        }
        if !configuration.readOnly, access(path, W_OK) != 0 {
            throw LMDBError(code: EACCES, message: "the store directory \(path) is not writable")
        }
        let existing = try checkDataFile(in: path, mustExist: configuration.readOnly)
        return (path, existing)
    }

    private static func createDirectory(_ path: String) throws(LMDBError) {
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        } catch {
            // Find the first component that blocks creation, for a precise error.
            var prefix = ""
            for component in path.split(separator: "/", omittingEmptySubsequences: true) {
                prefix += (prefix.isEmpty && !path.hasPrefix("/") ? "" : "/") + component
                var info = stat()
                if stat(prefix, &info) == 0, (info.st_mode & S_IFMT) != S_IFDIR {
                    throw LMDBError(code: ENOTDIR, message: "cannot create \(path): \(prefix) is a file")
                }
            }
            throw LMDBError(code: EACCES, message: "cannot create the store directory \(path): \(error.localizedDescription)")
        }
    }

    /// Whether an initialised data file is there, checked before LMDB maps it (see
    /// ``DataFileCheck``): a truncated or damaged one throws instead of crashing LMDB.
    private static func checkDataFile(in directory: String, mustExist: Bool) throws(LMDBError) -> Bool {
        try DataFileCheck.check(directory: directory, mustExist: mustExist)
    }

    static func roundUp(_ value: Int, to multiple: Int) -> Int {
        let (sum, overflow) = value.addingReportingOverflow(multiple - 1)
        return overflow ? Int.max - Int.max % multiple : sum - sum % multiple
    }
}

/// A file's device and inode: how the process-wide registry recognises a store however
/// its path is spelled.
struct FileIdentity: Hashable, Sendable {
    let device: UInt64
    let inode: UInt64

    init(path: String) throws(LMDBError) {
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw LMDBError(code: errno, message: "cannot stat \(path)")
        }
        self.init(info)
    }

    init(_ info: stat) {
        self.init(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    init(device: UInt64, inode: UInt64) {
        self.device = device
        self.inode = inode
    }

    /// The identity of the file at `path`, or nil when there is none.
    static func existing(atPath path: String) -> FileIdentity? {
        var info = stat()
        return stat(path, &info) == 0 ? FileIdentity(info) : nil
    }
}

/// The environments open in this process (LMDB: never open one environment twice).
///
/// Keyed by the directory's identity. A directory removed while its environment is still
/// open frees its inode number for a new directory, so a match is the same store only
/// when the registered environment's data file is still in its directory, or is in the
/// new one (it moved): an open file's inode number is never reused.
enum OpenEnvironments {
    private struct Entry {
        let token: UInt64
        let path: String
        /// The environment's data.mdb, once it is open.
        var dataFile: FileIdentity?
        /// The error that made the environment terminal, if one did.
        var terminal: LMDBError?
    }

    private static let lock = ConditionLock()
    // nonisolated(unsafe) because every access holds `lock`.
    private nonisolated(unsafe) static var open: [FileIdentity: [Entry]] = [:]
    // nonisolated(unsafe) because every access holds `lock`.
    private nonisolated(unsafe) static var lastToken: UInt64 = 0

    /// Registers the directory `identity` at `path`; the token unregisters it.
    static func register(_ identity: FileIdentity, path: String) throws(LMDBError) -> UInt64 {
        let dataFile = FileIdentity.existing(atPath: path + "/data.mdb")
        return try lock.withLock { () throws(LMDBError) -> UInt64 in
            for entry in open[identity] ?? [] {
                let stillThere = FileIdentity.existing(atPath: entry.path) == identity
                let sameStore: Bool
                if let registeredData = entry.dataFile {
                    // Its data file still where it was opened, or here under another path (moved).
                    sameStore = (stillThere && FileIdentity.existing(atPath: entry.path + "/data.mdb") == registeredData)
                        || dataFile == registeredData
                } else {
                    sameStore = stillThere   // still opening
                }
                if sameStore, let terminal = entry.terminal {
                    throw LMDBError(
                        code: LMDBError.alreadyOpen.code,
                        message: "\(path) is still open in this process (as \(entry.path)), in a terminal state after "
                            + "LMDBError.\(terminal.name): it can be opened again once its Environment closes (Environment.close(timeout:), "
                            + "or when the last reference to it and to its snapshots is gone)")
                }
                if sameStore {
                    throw LMDBError(
                        code: LMDBError.alreadyOpen.code,
                        message: "\(path) is already open in this process (as \(entry.path)); share that Environment")
                }
            }
            lastToken += 1
            open[identity, default: []].append(Entry(token: lastToken, path: path, dataFile: dataFile))
            return lastToken
        }
    }

    /// Records the data file of the environment registered with `token`, once it is open.
    static func opened(_ identity: FileIdentity, token: UInt64, dataFile: FileIdentity?) {
        lock.withLock {
            guard let index = open[identity]?.firstIndex(where: { $0.token == token }) else { return }
            open[identity]?[index].dataFile = dataFile
        }
    }

    /// Records that the environment registered with `token` became terminal, so that
    /// opening its directory again says why it cannot be opened yet.
    static func terminated(_ identity: FileIdentity, token: UInt64, error: LMDBError) {
        lock.withLock {
            guard let index = open[identity]?.firstIndex(where: { $0.token == token }) else { return }
            open[identity]?[index].terminal = error
        }
    }

    /// The terminal error of an environment of the directory at `path` that is still
    /// open in this process, if that environment is terminal.
    static func terminalError(atPath path: String) -> LMDBError? {
        guard let identity = FileIdentity.existing(atPath: path) else { return nil }
        return lock.withLock { open[identity]?.lazy.compactMap(\.terminal).first }
    }

    static func unregister(_ identity: FileIdentity, token: UInt64) {
        lock.withLock {
            open[identity]?.removeAll { $0.token == token }
            if open[identity]?.isEmpty == true { open[identity] = nil }
        }
    }
}
