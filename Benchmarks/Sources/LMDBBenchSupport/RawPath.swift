import CLMDBRaw

/// The scenarios through LMDB's C API: the baseline StrataLMDB is compared against. Every
/// function mirrors its ``StrataPath`` twin call for call.
enum RawPath {
    final class Store {
        let environment: OpaquePointer
        let database: MDB_dbi

        init(environment: OpaquePointer, database: MDB_dbi) {
            self.environment = environment
            self.database = database
        }

        deinit { mdb_env_close(environment) }
    }

    static func check(_ rc: Int32, _ what: @autoclosure () -> String) throws {
        if rc != MDB_SUCCESS {
            throw BenchmarkFailure("\(what()): \(String(cString: mdb_strerror(rc))) (\(rc))")
        }
    }

    /// The flags StrataLMDB opens with: always `MDB_NOTLS`, plus the durability's flag.
    static func open(at path: String, sync: Bool) throws -> Store {
        var env: OpaquePointer?
        try check(mdb_env_create(&env), "mdb_env_create")
        guard let env else { throw BenchmarkFailure("mdb_env_create returned no environment") }
        do {
            try check(mdb_env_set_mapsize(env, StoreSettings.mapSize), "mdb_env_set_mapsize")
            try check(mdb_env_set_maxreaders(env, StoreSettings.maxReaders), "mdb_env_set_maxreaders")
            try check(mdb_env_set_maxdbs(env, StoreSettings.maxDatabases), "mdb_env_set_maxdbs")
            let flags = UInt32(MDB_NOTLS) | (sync ? 0 : UInt32(MDB_NOSYNC))
            try check(mdb_env_open(env, path, flags, StoreSettings.fileMode), "mdb_env_open \(path)")
            var txn: OpaquePointer?
            try check(mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &txn), "mdb_txn_begin")
            var dbi = MDB_dbi()
            let opened = mdb_dbi_open(txn, nil, 0, &dbi)
            if opened != MDB_SUCCESS { mdb_txn_abort(txn) }
            try check(opened, "mdb_dbi_open")
            try check(mdb_txn_commit(txn), "mdb_txn_commit")
            return Store(environment: env, database: dbi)
        } catch {
            mdb_env_close(env)
            throw error
        }
    }

    /// All `keys` in one write transaction, begin to commit.
    static func put(
        _ store: Store, keys: UnsafeBufferPointer<UInt64>, value: UnsafeRawBufferPointer, append: Bool
    ) throws {
        let dbi = store.database
        let flags: UInt32 = append ? UInt32(MDB_APPEND) : 0
        let base = UnsafeMutableRawPointer(mutating: keys.baseAddress!)
        let valueData = UnsafeMutableRawPointer(mutating: value.baseAddress!)
        let count = keys.count
        var txn: OpaquePointer?
        try check(mdb_txn_begin(store.environment, nil, 0, &txn), "mdb_txn_begin")
        for index in 0..<count {
            var k = MDB_val(mv_size: Workload.keySize, mv_data: base + index &* Workload.keySize)
            var v = MDB_val(mv_size: value.count, mv_data: valueData)
            let rc = mdb_put(txn, dbi, &k, &v, flags)
            if rc != MDB_SUCCESS {
                mdb_txn_abort(txn)
                try check(rc, "mdb_put")
            }
        }
        try check(mdb_txn_commit(txn), "mdb_txn_commit")
    }

    /// One write transaction per key.
    static func putEach(_ store: Store, keys: UnsafeBufferPointer<UInt64>, value: UnsafeRawBufferPointer) throws {
        let dbi = store.database
        let base = UnsafeMutableRawPointer(mutating: keys.baseAddress!)
        let valueData = UnsafeMutableRawPointer(mutating: value.baseAddress!)
        for index in 0..<keys.count {
            var txn: OpaquePointer?
            try check(mdb_txn_begin(store.environment, nil, 0, &txn), "mdb_txn_begin")
            var k = MDB_val(mv_size: Workload.keySize, mv_data: base + index &* Workload.keySize)
            var v = MDB_val(mv_size: value.count, mv_data: valueData)
            let rc = mdb_put(txn, dbi, &k, &v, 0)
            if rc != MDB_SUCCESS {
                mdb_txn_abort(txn)
                try check(rc, "mdb_put")
            }
            try check(mdb_txn_commit(txn), "mdb_txn_commit")
        }
    }

    /// One write transaction storing one key.
    @inline(__always)
    static func putOne(_ store: Store, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) throws {
        var txn: OpaquePointer?
        try check(mdb_txn_begin(store.environment, nil, 0, &txn), "mdb_txn_begin")
        var k = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress!))
        var v = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress!))
        let rc = mdb_put(txn, store.database, &k, &v, 0)
        if rc != MDB_SUCCESS {
            mdb_txn_abort(txn)
            try check(rc, "mdb_put")
        }
        try check(mdb_txn_commit(txn), "mdb_txn_commit")
    }

    /// Looks up every key in one read transaction; sums each value's size and first byte.
    static func get(_ store: Store, keys: UnsafeBufferPointer<UInt64>) throws -> Int {
        let dbi = store.database
        let base = UnsafeMutableRawPointer(mutating: keys.baseAddress!)
        var txn: OpaquePointer?
        try check(mdb_txn_begin(store.environment, nil, UInt32(MDB_RDONLY), &txn), "mdb_txn_begin")
        defer { mdb_txn_abort(txn) }
        var sum = 0
        for index in 0..<keys.count {
            var k = MDB_val(mv_size: Workload.keySize, mv_data: base + index &* Workload.keySize)
            var v = MDB_val()
            let rc = mdb_get(txn, dbi, &k, &v)
            if rc == MDB_SUCCESS {
                sum &+= v.mv_size &+ Int(v.mv_data.load(fromByteOffset: 0, as: UInt8.self))
            } else if rc == MDB_NOTFOUND {
                sum &+= Int.min / 2
            } else {
                try check(rc, "mdb_get")
            }
        }
        return sum
    }

    /// Walks every entry with a cursor, first to last; sums each value's size and key's last byte.
    static func scan(_ store: Store) throws -> Int {
        var txn: OpaquePointer?
        try check(mdb_txn_begin(store.environment, nil, UInt32(MDB_RDONLY), &txn), "mdb_txn_begin")
        defer { mdb_txn_abort(txn) }
        var cursor: OpaquePointer?
        try check(mdb_cursor_open(txn, store.database, &cursor), "mdb_cursor_open")
        defer { mdb_cursor_close(cursor) }
        var sum = 0
        var k = MDB_val(), v = MDB_val()
        var rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST)
        while rc == MDB_SUCCESS {
            sum &+= v.mv_size &+ Int(k.mv_data.load(fromByteOffset: Workload.keySize - 1, as: UInt8.self))
            rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)
        }
        if rc != MDB_NOTFOUND { try check(rc, "mdb_cursor_get") }
        return sum
    }

    static func count(_ store: Store) throws -> Int {
        var txn: OpaquePointer?
        try check(mdb_txn_begin(store.environment, nil, UInt32(MDB_RDONLY), &txn), "mdb_txn_begin")
        defer { mdb_txn_abort(txn) }
        var stat = MDB_stat()
        try check(mdb_stat(txn, store.database, &stat), "mdb_stat")
        return stat.ms_entries
    }

    /// Fills a new store at `path` with `keys` (in increasing order) by appending, and
    /// flushes it: the store the get and scan scenarios read.
    static func populate(at path: String, keys: UnsafeBufferPointer<UInt64>, value: UnsafeRawBufferPointer) throws {
        let store = try open(at: path, sync: false)
        try put(store, keys: keys, value: value, append: true)
        try check(mdb_env_sync(store.environment, 1), "mdb_env_sync")
    }
}

/// The liblmdb this process runs against.
public enum LMDBInfo {
    public static var versionString: String {
        String(cString: mdb_version(nil, nil, nil))
    }
}
