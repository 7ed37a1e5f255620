import CLMDBRaw
import Foundation
import GRDB
import Strata

extension BenchRun {
    /// Scenario 11 (issue 27): one aggregate over every row of the populated store
    /// (1,000,000 rows in a full run), nothing realised.
    ///
    /// - Strata: a dictionary fetch of `sum(score)` (``ExpressionDescription``), from a
    ///   cold context each round: the records are scanned in place and the one field read.
    /// - raw LMDB: a cursor over the rows adding each record's score (a load at a fixed
    ///   offset of its own layout).
    /// - GRDB: `SELECT TOTAL(score) FROM item`.
    ///
    /// The target: Strata ≤ 2× raw LMDB.
    func runAggregate() throws {
        let stores = try stores()
        let count = stores.dataset.count
        log("Scenario 11: sum over \(count) objects...")
        // Each binding's answer is checked against the same sum computed another way on its
        // own store, outside the clock (earlier scenarios change the stores, each its own way).
        let strataContext = stores.strata.makeContext(name: "aggregate-check")
        let expected: [Binding: Double] = [
            .strata: try strataContext.performAndWait { context in try StrataWork.sumOfScoresThroughObjects(in: context) },
            .raw: try stores.raw.sumOfScoresDecoded(),
            .grdb: try stores.grdb.sumOfScoresInSwift(),
        ]
        let times = try medians("aggregate", Binding.allCases) { binding, _ in
            var sum = 0.0
            let seconds: Double
            switch binding {
            case .strata:
                let context = stores.strata.makeContext(name: "aggregate")
                seconds = try timed { sum = try context.performAndWait { context in try StrataWork.sumOfScores(in: context) } }
            case .raw:
                seconds = try timed { sum = try stores.raw.sumOfScores() }
            case .grdb:
                seconds = try timed { sum = try stores.grdb.sumOfScores() }
            }
            let want = expected[binding]!
            guard abs(sum - want) <= 1e-6 * max(1, abs(want)) else {
                throw BenchFailure("aggregate \(binding): sum \(sum), expected \(want)")
            }
            return seconds
        }
        let strata = times[.strata]!, raw = times[.raw]!, grdb = times[.grdb]!
        report.add(ReportRow(
            "11 · sum of one attribute over \(formatCount(Double(count))) objects (dictionary fetch; raw: cursor walk; GRDB: SELECT TOTAL)",
            [.strata: .time(strata), .raw: .time(raw), .grdb: .time(grdb)],
            target: Target(String(format: "Strata ≤ 2.0× raw (%.2f×)", strata / raw), met: strata / raw <= 2.0),
            note: String(format: "ns/row: Strata %.1f, raw %.1f, GRDB %.1f", strata * 1e9 / Double(count), raw * 1e9 / Double(count), grdb * 1e9 / Double(count))))
    }
}

extension StrataWork {
    /// `sum(score)` over every item, as a dictionary fetch.
    public static func sumOfScores(in context: isolated ManagedObjectContext) throws -> Double {
        var request = FetchRequest<[String: any Sendable]>(entityName: "Item")
        request.resultType = .dictionary
        request.propertiesToFetch = [.expression(ExpressionDescription(name: "total", function: .sum, keyPath: "score"))]
        guard let total = try context.fetch(request).first?["total"].flatMap({ $0 as? Double }) else {
            throw BenchFailure("Strata: the sum came back without a Double")
        }
        return total
    }
}

extension StrataWork {
    /// The same sum over every item fetched as objects (the check of ``sumOfScores(in:)``).
    public static func sumOfScoresThroughObjects(in context: isolated ManagedObjectContext) throws -> Double {
        var request = FetchRequest<Item>()
        request.returnsObjectsAsFaults = false
        return try context.fetch(request).reduce(0) { $0 + $1.score }
    }
}

extension RawStore {
    /// The sum of every row's score: one cursor walk, each score loaded in place.
    public func sumOfScores() throws -> Double {
        try sumOverRows { value in Double(bitPattern: UInt64(littleEndian: value.mv_data.loadUnaligned(fromByteOffset: 8, as: UInt64.self))) }
    }

    /// The same sum with every row decoded into a record (the check of ``sumOfScores()``).
    public func sumOfScoresDecoded() throws -> Double {
        try sumOverRows { value in Self.decode(id: 0, value).score }
    }

    /// The sum of `term` over every row's value, in one cursor walk.
    private func sumOverRows(_ term: (MDB_val) -> Double) throws -> Double {
        try read { txn in
            var cursor: OpaquePointer?
            try Self.check(mdb_cursor_open(txn, rows, &cursor), "mdb_cursor_open")
            defer { mdb_cursor_close(cursor) }
            var k = MDB_val(), v = MDB_val()
            var sum = 0.0
            var rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST)
            while rc == MDB_SUCCESS {
                sum += term(v)
                rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)
            }
            if rc != MDB_NOTFOUND { try Self.check(rc, "mdb_cursor_get") }
            return sum
        }
    }
}

extension GRDBStore {
    /// The same sum added up in Swift from every row's score (the check of ``sumOfScores()``).
    public func sumOfScoresInSwift() throws -> Double {
        try pool.read { db in try Double.fetchAll(db, sql: "SELECT score FROM item ORDER BY id").reduce(0, +) }
    }

    /// `SELECT TOTAL(score) FROM item`.
    public func sumOfScores() throws -> Double {
        try pool.read { db in try Double.fetchOne(db, sql: "SELECT TOTAL(score) FROM item") ?? 0 }
    }
}
