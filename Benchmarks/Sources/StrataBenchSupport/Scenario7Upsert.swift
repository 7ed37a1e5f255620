import Foundation
import Strata
import StrataTesting

/// One row of scenario 7 (upserts), as plain Swift: what every binding stores under its
/// unique `code` and what the checks read back.
public struct UpsertRecord: Sendable, Hashable {
    /// The unique key.
    public var code: Int64
    /// `preloaded <code>` or `upserted <code>`.
    public var name: String
    /// Derived from the code, different before and after the upsert.
    public var score: Double
    /// 0 for a preloaded row, 1 once upserted.
    public var revision: Int64

    /// A row with these values.
    public init(code: Int64, name: String, score: Double, revision: Int64) {
        self.code = code
        self.name = name
        self.score = score
        self.revision = revision
    }

    /// The row the store holds for `code` before the upserts.
    public static func preloaded(_ code: Int64) -> UpsertRecord {
        UpsertRecord(code: code, name: "preloaded \(code)", score: Double(code) + 0.25, revision: 0)
    }

    /// The row an upsert of `code` writes.
    public static func upserted(_ code: Int64) -> UpsertRecord {
        UpsertRecord(code: code, name: "upserted \(code)", score: Double(code) * 2 + 0.5, revision: 1)
    }
}

/// The keys of scenario 7, the same for every binding: `upserts` upserts of the codes
/// `upserts/4 ..< upserts/4 + upserts`, shuffled with a fixed seed, into a store holding
/// the codes `0 ..< upserts/4 + upserts/2`. So half of the upserts (the codes `upserts/4
/// ..< upserts/4 + upserts/2`) collide with a stored row and half are new, and the first
/// `upserts/4` stored rows are left alone (they must keep their preloaded values).
public struct UpsertPlan: Sendable {
    /// The upserts measured.
    public let upserts: Int
    /// Upserts per save (write, transaction).
    public let batchSize: Int
    /// The first upserted code.
    public let firstUpserted: Int64
    /// The rows stored before the upserts: codes `0 ..< preloaded`.
    public let preloaded: Int
    /// The upserted codes, in the order every binding writes them.
    public let order: [Int64]

    /// The plan of `upserts` upserts saved `batchSize` at a time.
    public init(upserts: Int, batchSize: Int, seed: UInt64 = 0x0B5E_47C0) {
        self.upserts = upserts
        self.batchSize = batchSize
        firstUpserted = Int64(upserts / 4)
        preloaded = upserts / 4 + upserts / 2
        var random = SeededRandomNumberGenerator(seed: seed)
        var order = Array(firstUpserted..<firstUpserted + Int64(upserts))
        order.shuffle(using: &random)
        self.order = order
    }

    /// The upserts that find a stored row with their code.
    public var collisions: Int { preloaded - Int(firstUpserted) }
    /// The rows once every upsert landed.
    public var total: Int { Int(firstUpserted) + upserts }
    /// The saves (batches) of a run.
    public var saves: Int { (upserts + batchSize - 1) / batchSize }

    /// The preloaded rows, in code order.
    public var preloadRecords: [UpsertRecord] { (0..<Int64(preloaded)).map(UpsertRecord.preloaded) }

    /// The upserts' rows, in ``order``, cut into batches of ``batchSize``.
    public var batches: [[UpsertRecord]] {
        stride(from: 0, to: order.count, by: batchSize).map { start in
            order[start..<min(start + batchSize, order.count)].map(UpsertRecord.upserted)
        }
    }

    /// Throws unless `rows` (a whole store, in any order) hold every code `0 ..< total`
    /// exactly once, the upserted codes with their upserted values and the others with
    /// their preloaded ones.
    public func check(_ rows: some Sequence<UpsertRecord>, _ who: String) throws {
        var seen = [Bool](repeating: false, count: total)
        var count = 0
        for row in rows {
            count += 1
            guard row.code >= 0, row.code < Int64(total) else { throw BenchFailure("\(who): a row with code \(row.code), outside 0..<\(total)") }
            if seen[Int(row.code)] { throw BenchFailure("\(who): code \(row.code) stored twice") }
            seen[Int(row.code)] = true
            let expected = row.code >= firstUpserted ? UpsertRecord.upserted(row.code) : UpsertRecord.preloaded(row.code)
            if row != expected { throw BenchFailure("\(who): code \(row.code) holds \(row), expected \(expected)") }
        }
        try expect(count, total, "\(who): rows after the upserts")
    }
}

extension BenchRun {
    /// How a run of scenario 7 writes.
    enum UpsertWriter: Hashable, CaseIterable, CustomStringConvertible {
        /// Strata: new objects for every code, saved under `.mergeByPropertyObjectTrump`
        /// (the store turns each collision into an update).
        case strataMerge
        /// Strata: each batch's stored objects fetched by code (an indexed `IN`), updated,
        /// the others inserted, saved under `.error`.
        case strataFetch
        /// Strata: a `BatchInsertRequest` per batch (the objects handler filling typed
        /// objects) under `.mergeByPropertyObjectTrump`: no context at all.
        case strataBatch
        /// Raw LMDB: the unique-code database looked up, the row put, in one write
        /// transaction per batch.
        case raw
        /// GRDB: a Codable record's `upsert(db)` per row, one `write` per batch.
        case grdb
        /// GRDB: a hand-written cached `INSERT ... ON CONFLICT(code) DO UPDATE` statement
        /// per row, one `write` per batch.
        case grdbStatement

        var description: String {
            switch self {
            case .strataMerge: "Strata, inserts under .mergeByPropertyObjectTrump"
            case .strataFetch: "Strata, fetch by code then update or insert (.error)"
            case .strataBatch: "Strata, BatchInsertRequest under .mergeByPropertyObjectTrump"
            case .raw: "raw LMDB"
            case .grdb: "GRDB record upsert"
            case .grdbStatement: "GRDB cached upsert statement"
            }
        }
    }

    /// Scenario 7 (issue 22): ``BenchConfig/upserts`` upserts (100,000) saved
    /// ``BenchConfig/upsertBatch`` at a time (1,000) into a store already holding 3/4 as
    /// many rows, half of the upserts colliding with a stored row (``UpsertPlan``), sync
    /// off. An entity with a unique `code` (Strata: a uniqueness constraint; GRDB: a
    /// `UNIQUE` column; raw LMDB: a unique-code database) and three other attributes.
    ///
    /// - Strata, merging: one private-queue context with `.mergeByPropertyObjectTrump`
    ///   inserts a new object per code and saves each batch (then `reset()`); the store
    ///   turns a collision into an update of the stored row inside the save's write.
    /// - Strata, fetch then update: the pattern without merging, under `.error`: each
    ///   batch fetches the stored objects of its codes (`code IN [...]`, an indexed
    ///   attribute: the unique index serves no fetch), updates them, inserts the rest,
    ///   saves.
    /// - raw LMDB: per row, the unique-code database looked up and the row put under the
    ///   found or a new id (plus its unique entry), one write transaction per batch.
    /// - GRDB: `record.upsert(db)` (`INSERT ... ON CONFLICT DO UPDATE`) per row, one
    ///   `write` per batch; and, as a third row against Strata's merging, the same SQL
    ///   through a hand-written cached statement, without the record layer.
    ///
    /// Each run gets a fresh store preloaded outside the clock. Checks after each: every
    /// code once, the upserted values on the upserted codes and the preloaded ones on the
    /// others; Strata's `writeStatistics` counted one save per batch, no failed save, and
    /// one resolved conflict per collision when merging (none otherwise).
    func runUpserts() throws {
        let plan = UpsertPlan(upserts: config.upserts, batchSize: config.upsertBatch)
        let batches = plan.batches
        let count = formatCount(Double(plan.upserts)), batch = formatCount(Double(plan.batchSize))
        log("Scenario 7: \(count) upserts in saves of \(batch) into \(formatCount(Double(plan.preloaded))) rows, \(formatCount(Double(plan.collisions))) colliding...")
        let times = try medians("upserts", UpsertWriter.allCases) { writer, _ in
            try withDirectory("upsert") { directory in try upsertOnce(writer, plan: plan, batches: batches, directory: directory) }
        }
        let raw = times[.raw]!
        func rate(_ seconds: Double) -> Measure { .rate(Double(plan.upserts) / seconds, "/s") }
        func perUpsert(_ seconds: Double) -> String { String(format: "%.2f", seconds * 1e6 / Double(plan.upserts)) }
        let subject = "\(count) upserts (\(formatCount(Double(plan.collisions))) collide), \(batch) per save, "
            + "into \(formatCount(Double(plan.preloaded))) rows (sync off)"
        let rows: [(strata: UpsertWriter, grdb: UpsertWriter, how: String)] = [
            (.strataMerge, .grdb, "Strata inserts under `.mergeByPropertyObjectTrump`; GRDB record `upsert(db)`"),
            (.strataFetch, .grdb, "Strata fetch by code then update or insert, `.error`; GRDB record `upsert(db)`"),
            (.strataMerge, .grdbStatement, "Strata inserts under `.mergeByPropertyObjectTrump`; GRDB cached `INSERT ... ON CONFLICT DO UPDATE` statement"),
            (.strataBatch, .grdbStatement, "Strata `BatchInsertRequest` under `.mergeByPropertyObjectTrump` (no context); GRDB cached `INSERT ... ON CONFLICT DO UPDATE` statement"),
        ]
        for (strataWriter, grdbWriter, how) in rows {
            let strata = times[strataWriter]!, grdb = times[grdbWriter]!
            var note = "run: Strata \(formatSeconds(strata)), raw \(formatSeconds(raw)), GRDB \(formatSeconds(grdb)); "
                + "µs/upsert: Strata \(perUpsert(strata)), raw \(perUpsert(raw)), GRDB \(perUpsert(grdb))"
            if strataWriter == .strataMerge && grdbWriter == .grdb {
                note += "; \(formatCount(Double(plan.collisions))) conflicts resolved per run (writeStatistics); "
                    + String(format: "merging / fetch-then-update time: %.2f×", strata / times[.strataFetch]!)
            }
            report.add(ReportRow(
                "7 · upsert: \(subject), \(how): upserts/s (raw: lookup + put)",
                [.strata: rate(strata), .raw: rate(raw), .grdb: rate(grdb)],
                note: note))
        }
        report.notes.append(
            "Upserts (scenario 7): an entity with a unique `code` (Strata: `uniquenessConstraints` [[\"code\"]]; GRDB: `code INTEGER "
                + "NOT NULL UNIQUE`; raw LMDB: a database from code to id) plus `name`, `score`, `revision`. The store holds codes "
                + "0..<\(formatCount(Double(plan.preloaded))) (preloaded, not measured); the run upserts codes "
                + "\(formatCount(Double(plan.firstUpserted)))..<\(formatCount(Double(plan.total))) in a seeded shuffled order with new "
                + "values for the other attributes, \(batch) per save, so half collide. Strata merging: new objects only, the store "
                + "turns collisions into updates (`writeStatistics.resolvedConflicts` checked to equal the collisions). Strata fetch "
                + "then update: `code` also `indexed: true` (the unique index serves no fetch), each batch fetches its codes with "
                + "`code IN [...]`, updates what it finds and inserts the rest. Raw LMDB: a lookup in the code database per row, "
                + "then the row (and a new code entry) put, one write transaction per batch. GRDB: a Codable record's `upsert(db)`, "
                + "one `write` per batch; the third row's GRDB runs the same SQL through a hand-written cached statement (`ON CONFLICT(code) DO "
                + "UPDATE SET name, score, revision`), without the record layer. Every run ends with \(formatCount(Double(plan.total))) rows, each code once, checked row by row.")
    }

    /// One run of `writer`: a fresh store of the preloaded rows (not measured), then every
    /// batch of upserts, timed; checks the store afterwards and returns the seconds.
    private func upsertOnce(
        _ writer: UpsertWriter, plan: UpsertPlan, batches: [[UpsertRecord]], directory: StoreDirectory
    ) throws -> Double {
        let preload = plan.preloadRecords
        switch writer {
        case .strataBatch:
            let path = directory.appending("store")
            let store = try waitFor { try await StrataStore.open(at: path, durability: .noSync, model: Upserts.strataModel) }
            try store.makeContext(name: "preload").performAndWait { context in
                try StrataWork.preloadUpserts(preload, indexed: false, in: context)
            }
            let seconds = try timed {
                for batch in batches {
                    var index = 0
                    var request = BatchInsertRequest(UpsertItem.self) { item in
                        guard index < batch.count else { return true }
                        let record = batch[index]
                        index += 1
                        item.code = record.code
                        item.name = record.name
                        item.score = record.score
                        item.revision = record.revision
                        return false
                    }
                    request.mergePolicy = .mergeByPropertyObjectTrump
                    _ = try store.coordinator.execute(request)
                }
            }
            let rows = try store.makeContext(name: "check").performAndWait { context in
                try StrataWork.upsertRows(indexed: false, in: context)
            }
            try plan.check(rows, "Strata (\(writer))")
            return seconds
        case .strataMerge, .strataFetch:
            let path = directory.appending("store")
            let store = try waitFor { try await StrataStore.open(at: path, durability: .noSync, model: Upserts.strataModel) }
            let merging = writer == .strataMerge
            try store.makeContext(name: "preload").performAndWait { context in
                try StrataWork.preloadUpserts(preload, indexed: !merging, in: context)
            }
            let context = store.makeContext(name: "upserter")
            context.mergePolicy = merging ? .mergeByPropertyObjectTrump : .error
            let before = store.coordinator.writeStatistics
            let seconds = try timed {
                for batch in batches {
                    try context.performAndWait { context in
                        if merging {
                            try StrataWork.upsertByInserting(batch, in: context)
                        } else {
                            try StrataWork.upsertByFetching(batch, in: context)
                        }
                    }
                }
            }
            let after = store.coordinator.writeStatistics
            try expect(after.saves - before.saves, batches.count, "Strata (\(writer)) saves")
            try expect(after.failedSaves - before.failedSaves, 0, "Strata (\(writer)) failed saves")
            try expect(after.resolvedConflicts - before.resolvedConflicts, merging ? plan.collisions : 0, "Strata (\(writer)) conflicts resolved")
            let rows = try store.makeContext(name: "check").performAndWait { context in
                try StrataWork.upsertRows(indexed: !merging, in: context)
            }
            try plan.check(rows, "Strata (\(writer))")
            return seconds
        case .raw:
            let store = try RawStore(path: directory.path, sync: false)
            let codes = try store.openCodeDatabase()
            try store.upsert(preload, codes: codes)
            let seconds = try timed {
                for batch in batches { try store.upsert(batch, codes: codes) }
            }
            let (rows, entries) = try store.upsertRows(codes: codes)
            try expect(entries, plan.total, "raw: unique-code entries")
            try plan.check(rows, "raw")
            return seconds
        case .grdb, .grdbStatement:
            let store = try GRDBStore(directory: directory.path, sync: false)
            try store.createUpsertTable(preload)
            let statement = writer == .grdbStatement
            let seconds = try timed {
                for batch in batches {
                    if statement { try store.upsertWithStatement(batch) } else { try store.upsert(batch) }
                }
            }
            try plan.check(try store.upsertRows(), "GRDB (\(writer))")
            return seconds
        }
    }
}
