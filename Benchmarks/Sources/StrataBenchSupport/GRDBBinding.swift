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
