import CLMDBRaw
import Foundation

/// The physical limit: the same data through LMDB's C API, with nothing Strata adds (no
/// object graph, no row versions, no history, no metadata).
///
/// Layout: rows in the `items` database keyed by the 8-byte big-endian id, each value a
/// compact record (rank, score and created as 8 bytes each, then the name's UTF-8
/// bytes); an `items.rank` index database keyed by the order-preserving encoded rank (8
/// bytes, sign bit flipped, big-endian) followed by the id, with an empty value, written
/// in the same transaction as the row. Plain `mdb_put`s (no `MDB_APPEND`: Strata uses
/// none either). Reads decode rows into ``BenchRecord``s.
public final class RawStore: @unchecked Sendable {
    // @unchecked Sendable because the environment handle and the database handles are
    // immutable after init, and LMDB allows them from any thread (MDB_NOTLS; a write
    // transaction never leaves the thread that began it).
    let environment: OpaquePointer
    let rows: MDB_dbi
    let index: MDB_dbi
    public let path: String

    /// Opens (or creates) a store in the directory `path` (which must exist), with `sync`
    /// deciding `MDB_NOSYNC`; always `MDB_NOTLS`, as Strata opens its stores.
    public init(path: String, sync: Bool) throws {
        self.path = path
        var env: OpaquePointer?
        try Self.check(mdb_env_create(&env), "mdb_env_create")
        guard let env else { throw BenchFailure("mdb_env_create returned no environment") }
        do {
            try Self.check(mdb_env_set_mapsize(env, StoreSettings.mapSize), "mdb_env_set_mapsize")
            try Self.check(mdb_env_set_maxreaders(env, UInt32(StoreSettings.maxReaders)), "mdb_env_set_maxreaders")
            try Self.check(mdb_env_set_maxdbs(env, 4), "mdb_env_set_maxdbs")
            let flags = UInt32(MDB_NOTLS) | (sync ? 0 : UInt32(MDB_NOSYNC))
            try Self.check(mdb_env_open(env, path, flags, 0o644), "mdb_env_open \(path)")
            var txn: OpaquePointer?
            try Self.check(mdb_txn_begin(env, nil, 0, &txn), "mdb_txn_begin")
            var rows = MDB_dbi(), index = MDB_dbi()
            var rc = mdb_dbi_open(txn, "items", UInt32(MDB_CREATE), &rows)
            if rc == MDB_SUCCESS { rc = mdb_dbi_open(txn, "items.rank", UInt32(MDB_CREATE), &index) }
            if rc != MDB_SUCCESS { mdb_txn_abort(txn) }
            try Self.check(rc, "mdb_dbi_open")
            try Self.check(mdb_txn_commit(txn), "mdb_txn_commit")
            environment = env
            self.rows = rows
            self.index = index
        } catch {
            mdb_env_close(env)
            throw error
        }
    }

    deinit { mdb_env_close(environment) }

    static func check(_ rc: Int32, _ what: @autoclosure () -> String) throws {
        if rc != MDB_SUCCESS { throw BenchFailure("\(what()): \(String(cString: mdb_strerror(rc))) (\(rc))") }
    }

    // MARK: Encoding

    /// The record of `record` (without its id, which is the key) into `buffer`.
    @inline(__always)
    static func encode(_ record: BenchRecord, into buffer: inout [UInt8]) {
        buffer.removeAll(keepingCapacity: true)
        withUnsafeBytes(of: record.rank.littleEndian) { buffer.append(contentsOf: $0) }
        withUnsafeBytes(of: record.score.bitPattern.littleEndian) { buffer.append(contentsOf: $0) }
        withUnsafeBytes(of: record.created.timeIntervalSince1970.bitPattern.littleEndian) { buffer.append(contentsOf: $0) }
        buffer.append(contentsOf: record.name.utf8)
    }

    /// The record stored under `id` with value `value`.
    @inline(__always)
    static func decode(id: Int64, _ value: MDB_val) -> BenchRecord {
        let bytes = UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size)
        return BenchRecord(
            id: id,
            rank: Int64(littleEndian: bytes.loadUnaligned(fromByteOffset: 0, as: Int64.self)),
            name: String(decoding: bytes[24...], as: UTF8.self),
            score: Double(bitPattern: UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self))),
            created: Date(timeIntervalSince1970: Double(bitPattern: UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 16, as: UInt64.self)))))
    }

    @inline(__always)
    static func idKey(_ id: Int64) -> UInt64 { UInt64(bitPattern: id).bigEndian }

    @inline(__always)
    static func rankKey(_ rank: Int64, id: Int64) -> (UInt64, UInt64) {
        ((UInt64(bitPattern: rank) ^ (1 << 63)).bigEndian, UInt64(bitPattern: id).bigEndian)
    }

    @inline(__always)
    static func rank(ofIndexKey key: MDB_val) -> Int64 {
        Int64(bitPattern: UInt64(bigEndian: key.mv_data.loadUnaligned(as: UInt64.self)) ^ (1 << 63))
    }

    @inline(__always)
    static func id(ofIndexKey key: MDB_val) -> Int64 {
        Int64(bitPattern: UInt64(bigEndian: key.mv_data.loadUnaligned(fromByteOffset: 8, as: UInt64.self)))
    }

    // MARK: Writing

    /// Runs `body` in one write transaction on the calling thread and commits it.
    func write(_ body: (OpaquePointer) throws -> Void) throws {
        var txn: OpaquePointer?
        try Self.check(mdb_txn_begin(environment, nil, 0, &txn), "mdb_txn_begin")
        do {
            try body(txn!)
        } catch {
            mdb_txn_abort(txn)
            throw error
        }
        try Self.check(mdb_txn_commit(txn), "mdb_txn_commit")
    }

    /// Stores `record`'s row and index entry in `txn`.
    @inline(__always)
    func put(_ record: BenchRecord, buffer: inout [UInt8], in txn: OpaquePointer) throws {
        Self.encode(record, into: &buffer)
        var id = Self.idKey(record.id)
        try withUnsafeMutableBytes(of: &id) { idBytes in
            try buffer.withUnsafeMutableBytes { valueBytes in
                var k = MDB_val(mv_size: 8, mv_data: idBytes.baseAddress)
                var v = MDB_val(mv_size: valueBytes.count, mv_data: valueBytes.baseAddress)
                try Self.check(mdb_put(txn, rows, &k, &v, 0), "mdb_put row")
            }
        }
        var rankKey = Self.rankKey(record.rank, id: record.id)
        try withUnsafeMutableBytes(of: &rankKey) { keyBytes in
            var k = MDB_val(mv_size: 16, mv_data: keyBytes.baseAddress)
            var v = MDB_val(mv_size: 0, mv_data: nil)
            try Self.check(mdb_put(txn, index, &k, &v, 0), "mdb_put index")
        }
    }

    /// Inserts every record (row and index entry) in one write transaction.
    public func insert(_ records: some Collection<BenchRecord>) throws {
        try write { txn in
            var buffer: [UInt8] = []
            buffer.reserveCapacity(64)
            for record in records { try put(record, buffer: &buffer, in: txn) }
        }
    }

    /// Reads, changes and writes back the rows of `ids` in one write transaction: each
    /// row's score becomes `change(score)`. The rank, and so the index, is unchanged.
    public func update(ids: some Collection<Int64>, _ change: (Double) -> Double) throws {
        try write { txn in
            var buffer: [UInt8] = []
            buffer.reserveCapacity(64)
            for id in ids {
                var key = Self.idKey(id)
                var record: BenchRecord = try withUnsafeMutableBytes(of: &key) { keyBytes in
                    var k = MDB_val(mv_size: 8, mv_data: keyBytes.baseAddress)
                    var v = MDB_val()
                    try Self.check(mdb_get(txn, rows, &k, &v), "mdb_get row \(id)")
                    return Self.decode(id: id, v)
                }
                record.score = change(record.score)
                Self.encode(record, into: &buffer)
                try withUnsafeMutableBytes(of: &key) { keyBytes in
                    try buffer.withUnsafeMutableBytes { valueBytes in
                        var k = MDB_val(mv_size: 8, mv_data: keyBytes.baseAddress)
                        var v = MDB_val(mv_size: valueBytes.count, mv_data: valueBytes.baseAddress)
                        try Self.check(mdb_put(txn, rows, &k, &v, 0), "mdb_put row")
                    }
                }
            }
        }
    }

    // MARK: Reading

    /// A read transaction: a fresh one per call, or a long-lived ``RawSnapshot``'s.
    public func read<T>(in snapshot: RawSnapshot? = nil, _ body: (OpaquePointer) throws -> T) throws -> T {
        if let snapshot { return try body(snapshot.transaction) }
        var txn: OpaquePointer?
        try Self.check(mdb_txn_begin(environment, nil, UInt32(MDB_RDONLY), &txn), "mdb_txn_begin")
        defer { mdb_txn_abort(txn) }
        return try body(txn!)
    }

    /// Row and index entry counts.
    public func counts() throws -> (rows: Int, index: Int) {
        try read { txn in
            var stat = MDB_stat()
            try Self.check(mdb_stat(txn, rows, &stat), "mdb_stat")
            let rowCount = stat.ms_entries
            try Self.check(mdb_stat(txn, index, &stat), "mdb_stat")
            return (rowCount, stat.ms_entries)
        }
    }

    /// Every row decoded into a ``BenchRecord`` array (held all at once, as a fully
    /// realised fetch holds its objects), then every attribute touched.
    public func fetchAll() throws -> (count: Int, checksum: Int64) {
        let records: [BenchRecord] = try read { txn in
            var records: [BenchRecord] = []
            try walk(txn) { records.append($0) }
            return records
        }
        var checksum: Int64 = 0
        for record in records { checksum &+= record.checksum }
        return (records.count, checksum)
    }

    /// Every row decoded into a ``BenchRecord`` one at a time and touched, none kept (the
    /// memory-bounded walk, as a batched fetch is).
    public func walkAll() throws -> (count: Int, checksum: Int64) {
        try read { txn in
            var count = 0
            var checksum: Int64 = 0
            try walk(txn) { record in
                count += 1
                checksum &+= record.checksum
            }
            return (count, checksum)
        }
    }

    private func walk(_ txn: OpaquePointer, _ body: (BenchRecord) -> Void) throws {
        var cursor: OpaquePointer?
        try Self.check(mdb_cursor_open(txn, rows, &cursor), "mdb_cursor_open")
        defer { mdb_cursor_close(cursor) }
        var k = MDB_val(), v = MDB_val()
        var rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST)
        while rc == MDB_SUCCESS {
            let id = Int64(bitPattern: UInt64(bigEndian: k.mv_data.loadUnaligned(as: UInt64.self)))
            body(Self.decode(id: id, v))
            rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)
        }
        if rc != MDB_NOTFOUND { try Self.check(rc, "mdb_cursor_get") }
    }

    /// The records with `lower <= rank < upper` in rank order (at most `limit`, 0 for
    /// all): an index range scan, each row read by id and decoded.
    public func range(lower: Int64, upper: Int64, limit: Int, in snapshot: RawSnapshot? = nil) throws -> [BenchRecord] {
        try read(in: snapshot) { txn in
            var cursor: OpaquePointer?
            try Self.check(mdb_cursor_open(txn, index, &cursor), "mdb_cursor_open")
            defer { mdb_cursor_close(cursor) }
            var records: [BenchRecord] = []
            var start = Self.rankKey(lower, id: 0)
            var k = MDB_val(), v = MDB_val()
            var rc = withUnsafeMutableBytes(of: &start) { bytes in
                k = MDB_val(mv_size: 16, mv_data: bytes.baseAddress)
                return mdb_cursor_get(cursor, &k, &v, MDB_SET_RANGE)
            }
            while rc == MDB_SUCCESS, Self.rank(ofIndexKey: k) < upper, limit == 0 || records.count < limit {
                let id = Int64(bitPattern: UInt64(bigEndian: k.mv_data.loadUnaligned(fromByteOffset: 8, as: UInt64.self)))
                var rowKey = UInt64(bitPattern: id).bigEndian
                var row = MDB_val()
                try withUnsafeMutableBytes(of: &rowKey) { keyBytes in
                    var rk = MDB_val(mv_size: 8, mv_data: keyBytes.baseAddress)
                    try Self.check(mdb_get(txn, rows, &rk, &row), "mdb_get row \(id)")
                }
                records.append(Self.decode(id: id, row))
                rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)
            }
            if rc != MDB_SUCCESS && rc != MDB_NOTFOUND { try Self.check(rc, "mdb_cursor_get") }
            return records
        }
    }

    /// The ids of the records with `lower <= rank < upper`, in rank order.
    public func ids(lower: Int64, upper: Int64) throws -> [Int64] {
        try range(lower: lower, upper: upper, limit: 0).map(\.id)
    }

    /// The sum of the scores of the records with `lower <= rank < upper`.
    public func scoreSum(lower: Int64, upper: Int64) throws -> Double {
        try range(lower: lower, upper: upper, limit: 0).reduce(0) { $0 + $1.score }
    }

    /// A read transaction kept open until ``RawSnapshot/close()``: a pinned reader.
    public func makeSnapshot() throws -> RawSnapshot {
        var txn: OpaquePointer?
        try Self.check(mdb_txn_begin(environment, nil, UInt32(MDB_RDONLY), &txn), "mdb_txn_begin")
        return RawSnapshot(transaction: txn!)
    }
}

// MARK: Hot spot (scenario 4)

extension RawStore {
    /// A hot row's fixed fields: counter, version, then one tally per writer, each 8 bytes
    /// little-endian; the note's UTF-8 bytes follow. A hot-spot store holds nothing else
    /// in its `items` database (ids 1...n) and nothing in its index.
    private static let hotFields = 2 + HotSpot.maxWriters

    /// The fields of the hot row `id` in `txn`.
    private func hotFields(_ id: Int64, in txn: OpaquePointer) throws -> [Int64] {
        var key = Self.idKey(id)
        return try withUnsafeMutableBytes(of: &key) { keyBytes in
            var k = MDB_val(mv_size: 8, mv_data: keyBytes.baseAddress)
            var v = MDB_val()
            try Self.check(mdb_get(txn, rows, &k, &v), "mdb_get hot row \(id)")
            guard v.mv_size >= Self.hotFields * 8 else { throw BenchFailure("raw: hot row \(id) is \(v.mv_size) bytes") }
            let bytes = UnsafeRawBufferPointer(start: v.mv_data, count: v.mv_size)
            return (0..<Self.hotFields).map { Int64(littleEndian: bytes.loadUnaligned(fromByteOffset: $0 * 8, as: Int64.self)) }
        }
    }

    /// Puts the hot row `id` with `fields` and `note` in `txn`.
    private func putHot(_ id: Int64, fields: [Int64], note: String, buffer: inout [UInt8], in txn: OpaquePointer) throws {
        buffer.removeAll(keepingCapacity: true)
        for field in fields { withUnsafeBytes(of: field.littleEndian) { buffer.append(contentsOf: $0) } }
        buffer.append(contentsOf: note.utf8)
        var key = Self.idKey(id)
        try withUnsafeMutableBytes(of: &key) { keyBytes in
            try buffer.withUnsafeMutableBytes { valueBytes in
                var k = MDB_val(mv_size: 8, mv_data: keyBytes.baseAddress)
                var v = MDB_val(mv_size: valueBytes.count, mv_data: valueBytes.baseAddress)
                try Self.check(mdb_put(txn, rows, &k, &v, 0), "mdb_put hot row")
            }
        }
    }

    /// Inserts `count` hot rows (ids 1...count, every field 0, an empty note) in one
    /// write transaction.
    public func insertHotRows(_ count: Int) throws {
        try write { txn in
            var buffer: [UInt8] = []
            for id in 1...Int64(count) {
                try putHot(id, fields: Array(repeating: 0, count: Self.hotFields), note: "", buffer: &buffer, in: txn)
            }
        }
    }

    /// One update of the hot spot by writer `writer`, read, changed and written back in
    /// one write transaction (which cannot conflict: LMDB runs one writer at a time):
    /// each row of `ids` gets its counter, its version and the writer's tally plus 1, and
    /// `note`.
    public func hotUpdate(ids: [Int64], writer: Int, note: String) throws {
        try write { txn in
            var buffer: [UInt8] = []
            buffer.reserveCapacity(Self.hotFields * 8 + 32)
            for id in ids {
                var fields = try hotFields(id, in: txn)
                fields[0] += 1
                fields[1] += 1
                fields[2 + writer] += 1
                try putHot(id, fields: fields, note: note, buffer: &buffer, in: txn)
            }
        }
    }

    /// The hot rows' totals.
    public func hotTotals() throws -> HotSpot.Totals {
        try read { txn in
            var cursor: OpaquePointer?
            try Self.check(mdb_cursor_open(txn, rows, &cursor), "mdb_cursor_open")
            defer { mdb_cursor_close(cursor) }
            var totals = HotSpot.Totals(rows: 0)
            var k = MDB_val(), v = MDB_val()
            var rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST)
            while rc == MDB_SUCCESS {
                let id = Int64(bitPattern: UInt64(bigEndian: k.mv_data.loadUnaligned(as: UInt64.self)))
                let fields = try hotFields(id, in: txn)
                totals.rows += 1
                totals.counter += fields[0]
                for writer in 0..<HotSpot.maxWriters { totals.tallies[writer] += fields[2 + writer] }
                rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)
            }
            if rc != MDB_NOTFOUND { try Self.check(rc, "mdb_cursor_get") }
            return totals
        }
    }
}

// MARK: Upserts (scenario 7)

/// The unique-code database of an upsert store (``RawStore/openCodeDatabase()``).
public struct RawCodeDatabase: Sendable {
    let handle: MDB_dbi
}

extension RawStore {
    /// Opens (creating it) the `items.code` database: the order-preserving encoded code
    /// (8 bytes, sign bit flipped, big-endian) to the 8-byte big-endian id of the row that
    /// holds it, the raw twin of a unique index. An upsert store keeps its rows in
    /// `items` (an ``UpsertRecord`` per id: code, score and revision as 8 bytes each, then
    /// the name's UTF-8 bytes) and nothing in `items.rank`.
    public func openCodeDatabase() throws -> RawCodeDatabase {
        var handle = MDB_dbi()
        try write { txn in try Self.check(mdb_dbi_open(txn, "items.code", UInt32(MDB_CREATE), &handle), "mdb_dbi_open items.code") }
        return RawCodeDatabase(handle: handle)
    }

    @inline(__always)
    static func codeKey(_ code: Int64) -> UInt64 { (UInt64(bitPattern: code) ^ (1 << 63)).bigEndian }

    /// Upserts `records` in one write transaction: for each, the code database looked
    /// up; a found id gets its row rewritten with the record's values, a missing code a
    /// new row under the next id (one past the largest stored, read once per
    /// transaction) and its code entry.
    public func upsert(_ records: [UpsertRecord], codes: RawCodeDatabase) throws {
        try write { txn in
            var nextID: Int64 = 1
            var cursor: OpaquePointer?
            try Self.check(mdb_cursor_open(txn, rows, &cursor), "mdb_cursor_open")
            var k = MDB_val(), v = MDB_val()
            let rc = mdb_cursor_get(cursor, &k, &v, MDB_LAST)
            if rc == MDB_SUCCESS {
                nextID = Int64(bitPattern: UInt64(bigEndian: k.mv_data.loadUnaligned(as: UInt64.self))) + 1
            }
            mdb_cursor_close(cursor)
            if rc != MDB_SUCCESS && rc != MDB_NOTFOUND { try Self.check(rc, "mdb_cursor_get MDB_LAST") }
            var buffer: [UInt8] = []
            buffer.reserveCapacity(64)
            for record in records {
                var code = Self.codeKey(record.code)
                var idKey: UInt64 = try withUnsafeMutableBytes(of: &code) { codeBytes in
                    var ck = MDB_val(mv_size: 8, mv_data: codeBytes.baseAddress)
                    var found = MDB_val()
                    let rc = mdb_get(txn, codes.handle, &ck, &found)
                    if rc == MDB_SUCCESS {
                        guard found.mv_size == 8 else { throw BenchFailure("raw: code entry of \(record.code) is \(found.mv_size) bytes") }
                        return found.mv_data.loadUnaligned(as: UInt64.self)
                    }
                    if rc != MDB_NOTFOUND { try Self.check(rc, "mdb_get code \(record.code)") }
                    var id = Self.idKey(nextID)
                    nextID += 1
                    try withUnsafeMutableBytes(of: &id) { idBytes in
                        var iv = MDB_val(mv_size: 8, mv_data: idBytes.baseAddress)
                        try Self.check(mdb_put(txn, codes.handle, &ck, &iv, UInt32(MDB_NOOVERWRITE)), "mdb_put code entry")
                    }
                    return id
                }
                buffer.removeAll(keepingCapacity: true)
                withUnsafeBytes(of: record.code.littleEndian) { buffer.append(contentsOf: $0) }
                withUnsafeBytes(of: record.score.bitPattern.littleEndian) { buffer.append(contentsOf: $0) }
                withUnsafeBytes(of: record.revision.littleEndian) { buffer.append(contentsOf: $0) }
                buffer.append(contentsOf: record.name.utf8)
                try withUnsafeMutableBytes(of: &idKey) { keyBytes in
                    try buffer.withUnsafeMutableBytes { valueBytes in
                        var k = MDB_val(mv_size: 8, mv_data: keyBytes.baseAddress)
                        var v = MDB_val(mv_size: valueBytes.count, mv_data: valueBytes.baseAddress)
                        try Self.check(mdb_put(txn, rows, &k, &v, 0), "mdb_put upsert row")
                    }
                }
            }
        }
    }

    /// Every upsert row, decoded, and the number of code entries; throws unless each row's
    /// code entry names it.
    public func upsertRows(codes: RawCodeDatabase) throws -> (rows: [UpsertRecord], codeEntries: Int) {
        try read { txn in
            var stat = MDB_stat()
            try Self.check(mdb_stat(txn, codes.handle, &stat), "mdb_stat items.code")
            var cursor: OpaquePointer?
            try Self.check(mdb_cursor_open(txn, rows, &cursor), "mdb_cursor_open")
            defer { mdb_cursor_close(cursor) }
            var records: [UpsertRecord] = []
            var k = MDB_val(), v = MDB_val()
            var rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST)
            while rc == MDB_SUCCESS {
                let bytes = UnsafeRawBufferPointer(start: v.mv_data, count: v.mv_size)
                guard bytes.count >= 24 else { throw BenchFailure("raw: an upsert row of \(bytes.count) bytes") }
                let record = UpsertRecord(
                    code: Int64(littleEndian: bytes.loadUnaligned(fromByteOffset: 0, as: Int64.self)),
                    name: String(decoding: bytes[24...], as: UTF8.self),
                    score: Double(bitPattern: UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self))),
                    revision: Int64(littleEndian: bytes.loadUnaligned(fromByteOffset: 16, as: Int64.self)))
                let id = k.mv_data.loadUnaligned(as: UInt64.self)
                var code = Self.codeKey(record.code)
                try withUnsafeMutableBytes(of: &code) { codeBytes in
                    var ck = MDB_val(mv_size: 8, mv_data: codeBytes.baseAddress)
                    var found = MDB_val()
                    try Self.check(mdb_get(txn, codes.handle, &ck, &found), "mdb_get code \(record.code)")
                    if found.mv_size != 8 || found.mv_data.loadUnaligned(as: UInt64.self) != id {
                        throw BenchFailure("raw: the code entry of \(record.code) names another row")
                    }
                }
                records.append(record)
                rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)
            }
            if rc != MDB_NOTFOUND { try Self.check(rc, "mdb_cursor_get") }
            return (records, stat.ms_entries)
        }
    }
}

/// A long-lived LMDB read transaction (the raw twin of a pinned query generation); used
/// by one thread at a time.
public final class RawSnapshot {
    let transaction: OpaquePointer
    private var isOpen = true

    init(transaction: OpaquePointer) { self.transaction = transaction }

    public func close() {
        if isOpen { mdb_txn_abort(transaction) }
        isOpen = false
    }

    deinit { close() }
}

/// The settings every LMDB store of the runner shares, Strata's and raw.
public enum StoreSettings {
    /// 4 GiB, so that no store grows its map during a measurement (Strata grows it by
    /// rerunning the write; the raw path would fail instead).
    public static let mapSize = 4 << 30
    /// Strata's default.
    public static let maxReaders = 126
}

// MARK: Scenario 8: a copy of every row

extension RawStore {
    /// Copies every row of `items` into a new database, each value 8 bytes longer (the
    /// room a new attribute takes), in one write transaction with `MDB_APPEND` (the rows
    /// come in key order): what touching every row once costs LMDB, the baseline of a
    /// migration that rewrites every row. Returns the rows copied.
    public func copyRows() throws -> Int {
        var copied = 0
        try write { txn in
            var target = MDB_dbi()
            try Self.check(mdb_dbi_open(txn, "items.copy", UInt32(MDB_CREATE), &target), "mdb_dbi_open items.copy")
            var cursor: OpaquePointer?
            try Self.check(mdb_cursor_open(txn, rows, &cursor), "mdb_cursor_open")
            defer { mdb_cursor_close(cursor) }
            var buffer: [UInt8] = []
            var key = MDB_val(), value = MDB_val()
            var rc = mdb_cursor_get(cursor, &key, &value, MDB_FIRST)
            while rc == MDB_SUCCESS {
                buffer.removeAll(keepingCapacity: true)
                buffer.append(contentsOf: UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size))
                buffer.append(contentsOf: [0, 0, 0, 0, 0, 0, 0, 1])
                try buffer.withUnsafeMutableBytes { bytes in
                    var copy = MDB_val(mv_size: bytes.count, mv_data: bytes.baseAddress)
                    try Self.check(mdb_put(txn, target, &key, &copy, UInt32(MDB_APPEND)), "mdb_put copy")
                }
                copied += 1
                rc = mdb_cursor_get(cursor, &key, &value, MDB_NEXT)
            }
            if rc != MDB_NOTFOUND { try Self.check(rc, "mdb_cursor_get") }
        }
        return copied
    }
}

// MARK: Batch requests (scenario 9)

extension RawStore {
    /// The (rank, id) pairs with `lower <= rank < upper`, read with the index cursor of
    /// the write transaction `txn`.
    private func indexEntries(lower: Int64, upper: Int64, in txn: OpaquePointer) throws -> [(rank: Int64, id: Int64)] {
        var cursor: OpaquePointer?
        try Self.check(mdb_cursor_open(txn, index, &cursor), "mdb_cursor_open")
        defer { mdb_cursor_close(cursor) }
        var entries: [(rank: Int64, id: Int64)] = []
        var start = Self.rankKey(lower, id: 0)
        var k = MDB_val(), v = MDB_val()
        var rc = withUnsafeMutableBytes(of: &start) { bytes in
            k = MDB_val(mv_size: 16, mv_data: bytes.baseAddress)
            return mdb_cursor_get(cursor, &k, &v, MDB_SET_RANGE)
        }
        while rc == MDB_SUCCESS, Self.rank(ofIndexKey: k) < upper {
            entries.append((Self.rank(ofIndexKey: k), Self.id(ofIndexKey: k)))
            rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)
        }
        if rc != MDB_SUCCESS && rc != MDB_NOTFOUND { try Self.check(rc, "mdb_cursor_get") }
        return entries
    }

    /// In one write transaction: finds the rows with `lower <= rank < upper` through the
    /// index and rewrites each with its score changed by `change`. Returns how many.
    public func updateRange(lower: Int64, upper: Int64, _ change: (Double) -> Double) throws -> Int {
        var count = 0
        try write { txn in
            var buffer: [UInt8] = []
            buffer.reserveCapacity(64)
            let entries = try indexEntries(lower: lower, upper: upper, in: txn).sorted { $0.id < $1.id }
            for (_, id) in entries {
                var key = Self.idKey(id)
                try withUnsafeMutableBytes(of: &key) { keyBytes in
                    var k = MDB_val(mv_size: 8, mv_data: keyBytes.baseAddress)
                    var v = MDB_val()
                    try Self.check(mdb_get(txn, rows, &k, &v), "mdb_get row \(id)")
                    var record = Self.decode(id: id, v)
                    record.score = change(record.score)
                    Self.encode(record, into: &buffer)
                    try buffer.withUnsafeMutableBytes { valueBytes in
                        var value = MDB_val(mv_size: valueBytes.count, mv_data: valueBytes.baseAddress)
                        try Self.check(mdb_put(txn, rows, &k, &value, 0), "mdb_put row")
                    }
                }
                count += 1
            }
        }
        return count
    }

    /// In one write transaction: deletes the rows with `lower <= rank < upper`, found
    /// through the index, and their index entries. Returns how many.
    public func deleteRange(lower: Int64, upper: Int64) throws -> Int {
        var count = 0
        try write { txn in
            let entries = try indexEntries(lower: lower, upper: upper, in: txn)
            for (rank, id) in entries {
                var key = Self.idKey(id)
                try withUnsafeMutableBytes(of: &key) { keyBytes in
                    var k = MDB_val(mv_size: 8, mv_data: keyBytes.baseAddress)
                    try Self.check(mdb_del(txn, rows, &k, nil), "mdb_del row \(id)")
                }
                var indexKey = Self.rankKey(rank, id: id)
                try withUnsafeMutableBytes(of: &indexKey) { keyBytes in
                    var k = MDB_val(mv_size: 16, mv_data: keyBytes.baseAddress)
                    try Self.check(mdb_del(txn, index, &k, nil), "mdb_del index")
                }
                count += 1
            }
        }
        return count
    }
}
