internal import CLMDB

/// A handle to one database (LMDB's DBI) of an ``Environment``: the unnamed main
/// database or a named one.
///
/// Handles are cheap values, valid for the life of the environment that opened them and
/// usable in any of its transactions. Open them with ``Environment/openDatabase(named:flags:)``.
public struct Database: Sendable, Hashable, CustomStringConvertible {
    /// The database's name, or nil for the main database.
    public let name: String?
    /// The flags the database was created with.
    public let flags: Flags

    let handle: MDB_dbi
    let environment: ObjectIdentifier

    /// `name` or `<main>`.
    public var description: String { name ?? "<main>" }

    /// How a database orders and stores its entries (see lmdb.h, `mdb_dbi_open`).
    public struct Flags: OptionSet, Sendable, Hashable {
        /// The raw LMDB flag bits.
        public let rawValue: UInt32
        /// Creates flags from LMDB's bits.
        public init(rawValue: UInt32) { self.rawValue = rawValue }

        /// Create the database if it does not exist (`MDB_CREATE`).
        public static let create = Flags(rawValue: UInt32(MDB_CREATE))
        /// Compare keys from their last byte to their first (`MDB_REVERSEKEY`).
        public static let reverseKey = Flags(rawValue: UInt32(MDB_REVERSEKEY))
        /// Keep several sorted values per key (`MDB_DUPSORT`): what secondary indexes use.
        public static let sortedDuplicates = Flags(rawValue: UInt32(MDB_DUPSORT))
        /// Keys are native unsigned integers of one size, `UInt32` or `UInt64` (`MDB_INTEGERKEY`).
        public static let integerKey = Flags(rawValue: UInt32(MDB_INTEGERKEY))
        /// With ``sortedDuplicates``: every value has the same size (`MDB_DUPFIXED`).
        public static let fixedSizeDuplicates = Flags(rawValue: UInt32(MDB_DUPFIXED))
        /// With ``sortedDuplicates``: values are native unsigned integers (`MDB_INTEGERDUP`).
        public static let integerDuplicates = Flags(rawValue: UInt32(MDB_INTEGERDUP))
        /// With ``sortedDuplicates``: compare values from their last byte (`MDB_REVERSEDUP`).
        public static let reverseDuplicates = Flags(rawValue: UInt32(MDB_REVERSEDUP))
    }
}

/// The size and shape of a database's B+tree (`MDB_stat`).
public struct DatabaseStatistics: Sendable, Hashable {
    /// The size of a page, in bytes.
    public let pageSize: Int
    /// The depth of the B+tree.
    public let depth: Int
    /// The number of internal (branch) pages.
    public let branchPages: Int
    /// The number of leaf pages.
    public let leafPages: Int
    /// The number of overflow pages (values larger than a page).
    public let overflowPages: Int
    /// The number of entries (key/value pairs, counting each duplicate).
    public let entries: Int

    init(_ stat: MDB_stat) {
        pageSize = Int(stat.ms_psize)
        depth = Int(stat.ms_depth)
        branchPages = stat.ms_branch_pages
        leafPages = stat.ms_leaf_pages
        overflowPages = stat.ms_overflow_pages
        entries = stat.ms_entries
    }
}

/// Options for ``WriteTransaction/put(_:forKey:in:flags:)-(UnsafeRawBufferPointer,_,_,_)`` (see lmdb.h, `mdb_put`).
public struct PutFlags: OptionSet, Sendable, Hashable {
    /// The raw LMDB flag bits.
    public let rawValue: UInt32
    /// Creates flags from LMDB's bits.
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// Fail with ``LMDBError/keyExists`` when the key is already present (`MDB_NOOVERWRITE`).
    public static let noOverwrite = PutFlags(rawValue: UInt32(MDB_NOOVERWRITE))
    /// With sorted duplicates: fail when the exact key/value pair exists (`MDB_NODUPDATA`).
    public static let noDuplicateData = PutFlags(rawValue: UInt32(MDB_NODUPDATA))
    /// Append at the end of the database: keys must arrive in increasing order, or the
    /// put fails with ``LMDBError/keyExists`` (`MDB_APPEND`). Much faster for bulk loads.
    public static let append = PutFlags(rawValue: UInt32(MDB_APPEND))
    /// With sorted duplicates: append a value in increasing order (`MDB_APPENDDUP`).
    public static let appendDuplicate = PutFlags(rawValue: UInt32(MDB_APPENDDUP))
}

extension Environment {
    /// The unnamed main database. When named databases are in use it holds their names.
    public var mainDatabase: Database {
        get throws {
            try openDatabase(named: nil, flags: [])
        }
    }

    /// Opens a named database, creating it when `flags` contains ``Database/Flags/create``.
    ///
    /// Handles are cached by name: opening a name twice returns the same handle. Opening
    /// without `.create` a database that does not exist throws ``LMDBError/notFound``;
    /// more names than ``Configuration/maxDatabases`` throws ``LMDBError/databasesFull``.
    /// Asking for one that exists with other flags throws ``LMDBError/incompatible``.
    /// Creating runs its own write transaction, so inside ``Environment/write(_:)`` on the
    /// same thread it throws ``LMDBError/nestedWrite``: open databases up front. Once
    /// ``close(timeout:)`` has begun it throws ``LMDBError/environmentClosed``, even for a
    /// cached handle.
    public func openDatabase(named name: String?, flags: Database.Flags = []) throws -> Database {
        let key = name ?? ""
        let wanted = flags.subtracting(.create)
        let cachedHandle = try state.withLock { () throws(LMDBError) -> Database? in
            try checkOpenLocked()
            return databaseCache[key]
        }
        if let cached = cachedHandle {
            guard wanted.isEmpty || wanted == cached.flags else {
                throw LMDBError(
                    code: LMDBError.incompatible.code,
                    message: "database \(cached) exists with flags \(cached.flags.rawValue), not \(wanted.rawValue)")
            }
            return cached
        }
        let creating = flags.contains(.create) && !configuration.readOnly
        // A read-only environment opens without MDB_CREATE: asking to create in a read
        // transaction fails with EACCES even for a database that exists.
        let openFlags = creating ? flags.rawValue : wanted.rawValue
        // mdb_dbi_open must not run in concurrent transactions of one process (lmdb.h),
        // so each call holds the state lock; it is short and never held across a commit.
        let open = { (txn: OpaquePointer) throws(LMDBError) -> Database in
            try self.state.withLock { () throws(LMDBError) -> Database in
                var dbi = MDB_dbi()
                let rc = name.map { mdb_dbi_open(txn, $0, openFlags, &dbi) }
                    ?? mdb_dbi_open(txn, nil, openFlags & ~UInt32(MDB_CREATE), &dbi)
                try LMDBError.check(rc, "opening database \(name ?? "<main>")")
                var actual: UInt32 = 0
                mdb_dbi_flags(txn, dbi, &actual)
                return Database(
                    name: name, flags: Database.Flags(rawValue: actual), handle: dbi,
                    environment: ObjectIdentifier(self))
            }
        }
        let database: Database
        if creating {
            // Opened inside the write, so a map-full rerun opens (and creates) it again.
            database = try write { txn in try open(txn.pointer) }
        } else {
            // A handle opened in a transaction that aborts is closed again (lmdb.h,
            // mdb_dbi_open), so even a read-only open commits its transaction.
            let txn = try beginReadTransaction()
            defer { endRead() }
            let opened: Database
            do {
                opened = try open(txn)
            } catch {
                mdb_txn_abort(txn)
                throw error
            }
            // mdb_txn_commit frees the transaction even when it fails: never abort after it.
            try LMDBError.check(mdb_txn_commit(txn), "opening database \(name ?? "<main>")")
            database = opened
        }
        // Cached only once the opening transaction committed: the handle is valid for good.
        return state.withLock {
            if let cached = databaseCache[key] { return cached }
            databaseCache[key] = database
            return database
        }
    }

    /// The names of the named databases in the environment, sorted.
    public func databaseNames() throws -> [String] {
        let main = try mainDatabase
        return try read { txn in
            var names: [String] = []
            try txn.withCursor(on: main) { cursor in
                var entry = try cursor.first()
                while let (key, value) = entry {
                    // A named database's entry holds its 48-byte MDB_db record; other
                    // keys someone put in the main database are not names.
                    if value.count == 48, !key.contains(0), let name = String(validating: key, as: UTF8.self) {
                        names.append(name)
                    }
                    entry = try cursor.next()
                }
            }
            return names
        }
    }
}
