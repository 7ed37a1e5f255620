import Foundation
import GRDB

/// The peer a Swift-on-Linux user would pick instead: SQLite through GRDB, a
/// `DatabasePool` in WAL mode, table `item(id INTEGER PRIMARY KEY, rank, name, score,
/// created)` with an index on `rank`.
///
/// Dates are stored as REAL seconds since 1970 (GRDB's `.timeIntervalSince1970`
/// strategy) rather than GRDB's default text, the cheaper encoding for GRDB and the same
/// value the other bindings store.
public final class GRDBStore: Sendable {
    public let pool: DatabasePool
    public let path: String

    /// Opens (or creates) the database `directory/items.sqlite`, with `synchronous =
    /// FULL` (sync on) or `OFF` (sync off) on the writer connection.
    public init(directory: String, sync: Bool) throws {
        path = directory + "/items.sqlite"
        var configuration = Configuration()
        configuration.maximumReaderCount = 10
        // The writer waits out a passing lock as GRDB's pool readers do (their default): WAL
        // mode still returns SQLITE_BUSY in its "obscure cases" (a connection closing and
        // cleaning up the WAL, recovery), and once in a quick run the hot spot's
        // `BEGIN IMMEDIATE` failed with "database is locked" under the default
        // `.immediateError`. What a user of a pool would configure.
        configuration.busyMode = .timeout(10)
        pool = try DatabasePool(path: path, configuration: configuration)
        // After the pool is open: GRDB sets `synchronous = NORMAL` when it turns WAL on,
        // after `prepareDatabase` runs. Only the writer connection writes, so only its
        // setting matters.
        let mode = sync ? "FULL" : "OFF"
        try pool.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA synchronous = \(mode)")
            let actual = try Int.fetchOne(db, sql: "PRAGMA synchronous")
            try expect(actual, sync ? 2 : 0, "GRDB PRAGMA synchronous")
            try db.execute(sql: """
                CREATE TABLE IF NOT EXISTS item (
                    id INTEGER PRIMARY KEY, rank INTEGER NOT NULL, name TEXT NOT NULL,
                    score REAL NOT NULL, created REAL NOT NULL);
                CREATE INDEX IF NOT EXISTS item_rank ON item(rank);
                """)
        }
    }

    /// Inserts every record as a Codable record (`insert(_:)`), in one `write`.
    public func insert(_ records: some Collection<BenchRecord>) throws {
        try pool.write { db in
            for record in records { try GRDBItem(record).insert(db) }
        }
    }

    /// The row count.
    public func count() throws -> Int {
        try pool.read { db in try GRDBItem.fetchCount(db) }
    }

    /// Every row as a Codable record, then every attribute touched.
    public func fetchAllCodable() throws -> (count: Int, checksum: Int64) {
        let items = try pool.read { db in try GRDBItem.fetchAll(db) }
        var checksum: Int64 = 0
        for item in items { checksum &+= BenchRecord.checksum(rank: item.rank, name: item.name, score: item.score, created: item.created) }
        return (items.count, checksum)
    }

    /// Every row as a hand-written record (``BenchRecord``'s `init(row:)`, columns read by index), then
    /// every attribute touched.
    public func fetchAllRows() throws -> (count: Int, checksum: Int64) {
        let items = try pool.read { db in
            try BenchRecord.fetchAll(db.cachedStatement(sql: "SELECT id, rank, name, score, created FROM item"))
        }
        var checksum: Int64 = 0
        for item in items { checksum &+= item.checksum }
        return (items.count, checksum)
    }

    /// Every row through a cursor of hand-written records, one at a time, none kept:
    /// GRDB's memory-bounded walk.
    public func walkAll() throws -> (count: Int, checksum: Int64) {
        try pool.read { db in
            let cursor = try BenchRecord.fetchCursor(db.cachedStatement(sql: "SELECT id, rank, name, score, created FROM item"))
            var count = 0
            var checksum: Int64 = 0
            while let item = try cursor.next() {
                count += 1
                checksum &+= item.checksum
            }
            return (count, checksum)
        }
    }

    static let rangeSQL = "SELECT id, rank, name, score, created FROM item WHERE rank >= ? AND rank < ? ORDER BY rank"
    static let rangeLimitSQL = rangeSQL + " LIMIT ?"

    /// The records with `lower <= rank < upper` in rank order (at most `limit`, 0 for
    /// all), as hand-written records, from a cached statement.
    public static func range(_ db: Database, lower: Int64, upper: Int64, limit: Int) throws -> [BenchRecord] {
        if limit > 0 {
            return try BenchRecord.fetchAll(db.cachedStatement(sql: rangeLimitSQL), arguments: [lower, upper, limit])
        }
        return try BenchRecord.fetchAll(db.cachedStatement(sql: rangeSQL), arguments: [lower, upper])
    }

    /// ``range(_:lower:upper:limit:)`` in a read of the pool.
    public func range(lower: Int64, upper: Int64, limit: Int) throws -> [BenchRecord] {
        try pool.read { db in try Self.range(db, lower: lower, upper: upper, limit: limit) }
    }

    /// Codable records of `lower <= rank < upper` (what a writer updates).
    public func items(lower: Int64, upper: Int64) throws -> [GRDBItem] {
        try pool.read { db in
            try GRDBItem.filter(Column("rank") >= lower && Column("rank") < upper).order(Column("rank")).fetchAll(db)
        }
    }

    /// The sum of the scores of the records with `lower <= rank < upper`.
    public func scoreSum(lower: Int64, upper: Int64) throws -> Double {
        try pool.read { db in
            try Double.fetchOne(db, sql: "SELECT TOTAL(score) FROM item WHERE rank >= ? AND rank < ?", arguments: [lower, upper]) ?? 0
        }
    }

    /// Updates every record (`update(_:)`, all columns) in one `write`.
    public func update(_ items: some Collection<GRDBItem>) throws {
        try pool.write { db in
            for item in items { try item.update(db) }
        }
    }
}

/// The Codable record: GRDB's convenient path (bulk import, updates, and one of the two
/// fetch-all measurements).
public struct GRDBItem: Codable, Sendable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "item"
    public var id: Int64
    public var rank: Int64
    public var name: String
    public var score: Double
    public var created: Date

    public init(_ record: BenchRecord) {
        id = record.id
        rank = record.rank
        name = record.name
        score = record.score
        created = record.created
    }

    public static func databaseDateEncodingStrategy(for column: String) -> DatabaseDateEncodingStrategy { .timeIntervalSince1970 }
    public static func databaseDateDecodingStrategy(for column: String) -> DatabaseDateDecodingStrategy { .timeIntervalSince1970 }
}

/// The hand-written record: `init(row:)` reads columns by index, GRDB's fastest record
/// path (select `id, rank, name, score, created` in this order).
extension BenchRecord: FetchableRecord {
    public init(row: Row) throws {
        self.init(
            id: row[0], rank: row[1], name: row[2], score: row[3],
            created: Date(timeIntervalSince1970: row[4]))
    }
}

// MARK: Hot spot (scenario 4)

/// A hot row as a GRDB writer reads it before its optimistic update.
public struct GRDBHotRow: Sendable {
    /// The row's primary key.
    public var id: Int64
    /// The counter read.
    public var counter: Int64
    /// The reading writer's tally read.
    public var tally: Int64
    /// The version read: the update applies only while the row still has it.
    public var version: Int64
}

extension GRDBStore {
    /// Creates table `hot(id INTEGER PRIMARY KEY, counter, note, tally0 ... tally7,
    /// version)` with `count` rows (ids 1...count, everything else 0): the hot spot's
    /// objects, with the version column optimistic locking needs.
    public func createHotSpot(rows count: Int) throws {
        let tallies = (0..<HotSpot.maxWriters).map { "tally\($0) INTEGER NOT NULL DEFAULT 0" }.joined(separator: ", ")
        try pool.write { db in
            try db.execute(sql: """
                CREATE TABLE hot (
                    id INTEGER PRIMARY KEY, counter INTEGER NOT NULL DEFAULT 0, note TEXT NOT NULL DEFAULT '',
                    \(tallies), version INTEGER NOT NULL DEFAULT 0)
                """)
            for id in 1...Int64(count) { try db.execute(sql: "INSERT INTO hot (id) VALUES (?)", arguments: [id]) }
        }
    }

    /// The rows `ids` as writer `writer` reads them (its tally), in one `read`.
    public func hotRows(_ ids: [Int64], writer: Int) throws -> [GRDBHotRow] {
        try pool.read { db in
            let statement = try db.cachedStatement(sql: "SELECT counter, tally\(writer), version FROM hot WHERE id = ?")
            return try ids.map { id in
                guard let row = try Row.fetchOne(statement, arguments: [id]) else { throw BenchFailure("GRDB: hot row \(id) is missing") }
                return GRDBHotRow(id: id, counter: row[0], tally: row[1], version: row[2])
            }
        }
    }

    /// Writes `rows` back, each with its counter and writer `writer`'s tally plus 1,
    /// `note` and the next version, in one `write`: `UPDATE ... WHERE id = ? AND version
    /// = ?` (optimistic locking). Returns false, having written nothing, when a row's
    /// version changed since it was read.
    public func hotUpdate(_ rows: [GRDBHotRow], writer: Int, note: String) throws -> Bool {
        do {
            try pool.write { db in
                let statement = try db.cachedStatement(sql: """
                    UPDATE hot SET counter = ?, tally\(writer) = ?, note = ?, version = ? WHERE id = ? AND version = ?
                    """)
                for row in rows {
                    try statement.execute(arguments: [row.counter + 1, row.tally + 1, note, row.version + 1, row.id, row.version])
                    if db.changesCount == 0 { throw StaleRow() }
                }
            }
            return true
        } catch is StaleRow {
            return false
        }
    }

    /// Thrown inside a `write` to roll it back: a row changed since it was read.
    private struct StaleRow: Error {}

    /// The hot rows' totals.
    public func hotTotals() throws -> HotSpot.Totals {
        let tallies = (0..<HotSpot.maxWriters).map { "COALESCE(SUM(tally\($0)), 0)" }.joined(separator: ", ")
        return try pool.read { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT COUNT(*), COALESCE(SUM(counter), 0), \(tallies) FROM hot") else {
                throw BenchFailure("GRDB: no hot totals")
            }
            var totals = HotSpot.Totals(rows: row[0])
            totals.counter = row[1]
            for writer in 0..<HotSpot.maxWriters { totals.tallies[writer] = row[2 + writer] }
            return totals
        }
    }
}

// MARK: Upserts (scenario 7)

/// Scenario 7's Codable record: table `upsert_item(id INTEGER PRIMARY KEY, code INTEGER
/// NOT NULL UNIQUE, name, score, revision)`. `upsert(db)` writes `INSERT ... ON CONFLICT
/// DO UPDATE SET` every column but the primary key.
public struct GRDBUpsertItem: Codable, Sendable, FetchableRecord, MutablePersistableRecord {
    public static let databaseTableName = "upsert_item"
    /// The row id: nil until inserted (SQLite assigns it).
    public var id: Int64?
    /// The unique key.
    public var code: Int64
    /// `preloaded <code>` or `upserted <code>`.
    public var name: String
    /// A value derived from the code.
    public var score: Double
    /// 0 when preloaded, 1 once upserted.
    public var revision: Int64

    /// A new record (no id yet) with `record`'s values.
    public init(_ record: UpsertRecord) {
        id = nil
        code = record.code
        name = record.name
        score = record.score
        revision = record.revision
    }

    /// Keeps the row id SQLite assigned (or the upsert found).
    public mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }

    /// The record's values.
    public var record: UpsertRecord { UpsertRecord(code: code, name: name, score: score, revision: revision) }
}

extension GRDBStore {
    /// Creates table `upsert_item` (``GRDBUpsertItem``; `code` UNIQUE) and inserts
    /// `records` in one `write`.
    public func createUpsertTable(_ records: [UpsertRecord]) throws {
        try pool.write { db in
            try db.execute(sql: """
                CREATE TABLE upsert_item (
                    id INTEGER PRIMARY KEY, code INTEGER NOT NULL UNIQUE, name TEXT NOT NULL,
                    score REAL NOT NULL, revision INTEGER NOT NULL)
                """)
            for record in records {
                var item = GRDBUpsertItem(record)
                try item.insert(db)
            }
        }
    }

    /// Upserts every record (`upsert(db)` of a new ``GRDBUpsertItem``: `INSERT ... ON
    /// CONFLICT DO UPDATE`) in one `write`.
    public func upsert(_ records: [UpsertRecord]) throws {
        try pool.write { db in
            for record in records {
                var item = GRDBUpsertItem(record)
                try item.upsert(db)
            }
        }
    }

    /// Upserts every record with a hand-written cached statement, `INSERT INTO upsert_item
    /// (code, name, score, revision) VALUES (?, ?, ?, ?) ON CONFLICT(code) DO UPDATE SET`
    /// the three other columns, in one `write`: the same SQL without the record layer.
    public func upsertWithStatement(_ records: [UpsertRecord]) throws {
        try pool.write { db in
            let statement = try db.cachedStatement(sql: """
                INSERT INTO upsert_item (code, name, score, revision) VALUES (?, ?, ?, ?)
                ON CONFLICT(code) DO UPDATE SET name = excluded.name, score = excluded.score, revision = excluded.revision
                """)
            for record in records {
                try statement.execute(arguments: [record.code, record.name, record.score, record.revision])
            }
        }
    }

    /// Every row of `upsert_item`.
    public func upsertRows() throws -> [UpsertRecord] {
        try pool.read { db in try GRDBUpsertItem.fetchAll(db).map(\.record) }
    }
}

// MARK: Batch requests (scenario 9)

extension GRDBStore {
    /// Inserts every record with a hand-written cached `INSERT` statement in one `write`:
    /// SQLite's fastest import, without the record layer.
    public func insertWithStatement(_ records: some Collection<BenchRecord>) throws {
        try pool.write { db in
            let statement = try db.cachedStatement(sql: "INSERT INTO item (id, rank, name, score, created) VALUES (?, ?, ?, ?, ?)")
            for record in records {
                try statement.execute(arguments: [record.id, record.rank, record.name, record.score, record.created.timeIntervalSince1970])
            }
        }
    }

    /// `UPDATE item SET score = score + 1 WHERE rank >= lower AND rank < upper` through
    /// GRDB's `updateAll`, in one `write`. Returns how many rows changed.
    public func bumpScores(lower: Int64, upper: Int64) throws -> Int {
        try pool.write { db in
            try GRDBItem.filter(Column("rank") >= lower && Column("rank") < upper).updateAll(db, Column("score") += 1)
        }
    }

    /// `DELETE FROM item WHERE rank >= lower AND rank < upper` through GRDB's
    /// `deleteAll`, in one `write`. Returns how many rows went.
    public func deleteRange(lower: Int64, upper: Int64) throws -> Int {
        try pool.write { db in
            try GRDBItem.filter(Column("rank") >= lower && Column("rank") < upper).deleteAll(db)
        }
    }
}
