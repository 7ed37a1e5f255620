import Foundation
import Strata

extension BenchRun {
    /// Who scenario 9's batch insert runs through.
    enum BatchInsertRunner: Hashable, CaseIterable {
        /// `BatchInsertRequest(Item.self) { item in … }`: the managed-object handler.
        case strataObjects
        /// `BatchInsertRequest(entityName:handler:)`: a dictionary per object.
        case strataDictionaries
        /// Raw `mdb_put`s of rows and index entries in one write transaction.
        case raw
        /// GRDB, a hand-written cached `INSERT` statement in one `write`.
        case grdbStatement
    }

    /// Who scenario 9's update and delete run through.
    enum BatchRunner: Hashable, CaseIterable {
        case strata, raw, grdb
    }

    /// Scenario 9 (issue 24): batch requests beside raw LMDB and GRDB, sync off.
    ///
    /// 1. A batch insert of ``BenchConfig/batchRows`` (1,000,000) objects into an empty store:
    ///    Strata's managed-object handler and dictionary handler; raw LMDB's puts of the
    ///    same records (target: Strata ≤ 1.5× raw); GRDB's cached `INSERT` statement.
    /// 2. A batch update and a batch delete of the 10% of those objects whose rank is
    ///    below a tenth of the count (found through the rank index): Strata's
    ///    `BatchUpdateRequest` (`score + 1`) and `BatchDeleteRequest`; raw LMDB's index scan
    ///    and rewrites or deletes in one write transaction; GRDB's `updateAll` / `deleteAll`.
    ///    Each run works on a fresh file copy of a store filled once, outside the clock.
    func runBatchRequests() throws {
        let rows = config.batchRows
        let dataset = Dataset(count: rows)
        let records = dataset.records
        log("Scenario 9: batch requests over \(formatCount(Double(rows))) objects...")
        let insertTimes = try medians("batch insert", BatchInsertRunner.allCases) { runner, _ in
            try withDirectory("batch-insert") { directory in
                switch runner {
                case .strataObjects, .strataDictionaries:
                    let path = directory.path
                    let store = try waitFor { try await StrataStore.open(at: path, durability: .noSync) }
                    let request = runner == .strataObjects ? Self.objectInsert(records) : Self.dictionaryInsert(records)
                    var inserted = 0
                    let seconds = try timed { inserted = try store.coordinator.execute(request).count ?? -1 }
                    try expect(inserted, rows, "Strata: objects batch-inserted")
                    try expect(try store.makeContext().performAndWait { try StrataWork.count(in: $0) }, rows, "Strata: stored items")
                    return seconds
                case .raw:
                    let store = try RawStore(path: directory.path, sync: false)
                    let seconds = try timed { try store.insert(records) }
                    try expect(try store.counts().rows, rows, "raw: rows")
                    return seconds
                case .grdbStatement:
                    let store = try GRDBStore(directory: directory.path, sync: false)
                    let seconds = try timed { try store.insertWithStatement(records) }
                    try expect(try store.count(), rows, "GRDB: rows")
                    return seconds
                }
            }
        }
        let objects = insertTimes[.strataObjects]!, dictionaries = insertTimes[.strataDictionaries]!
        let raw = insertTimes[.raw]!, grdb = insertTimes[.grdbStatement]!
        report.add(ReportRow(
            "9 · batch insert of \(formatCount(Double(rows))) objects, managed-object handler (sync off)",
            [.strata: .time(objects), .raw: .time(raw), .grdb: .time(grdb)],
            target: Target(String(format: "Strata ≤ 1.5× raw puts (%.2f×)", objects / raw), met: objects <= 1.5 * raw),
            note: String(
                format: "µs/object: Strata %.2f, raw %.2f, GRDB (cached INSERT) %.2f; dictionary handler %.2f (%.2f× raw)",
                objects * 1e6 / Double(rows), raw * 1e6 / Double(rows), grdb * 1e6 / Double(rows),
                dictionaries * 1e6 / Double(rows), dictionaries / raw)))

        // Update and delete: one template per binding, copied fresh for every run.
        let cut = Int64(rows / 10)
        let template = StoreDirectory("batch-template")
        let strataTemplate = template.appending("strata"), rawTemplate = template.appending("raw"), grdbTemplate = template.appending("grdb")
        for path in [strataTemplate, rawTemplate, grdbTemplate] {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
        do {
            let path = strataTemplate
            let strata = try waitFor { try await StrataStore.open(at: path, durability: .noSync) }
            _ = try strata.coordinator.execute(Self.objectInsert(records))
            try RawStore(path: rawTemplate, sync: false).insert(records)
            try GRDBStore(directory: grdbTemplate, sync: false).insertWithStatement(records)
        }
        let templates: [BatchRunner: String] = [.strata: strataTemplate, .raw: rawTemplate, .grdb: grdbTemplate]
        func copy(_ runner: BatchRunner, to directory: StoreDirectory) throws {
            let source = templates[runner]!
            for file in try FileManager.default.contentsOfDirectory(atPath: source) where file != "lock.mdb" {
                try FileManager.default.copyItem(atPath: source + "/" + file, toPath: directory.path + "/" + file)
            }
        }
        for operation in ["update", "delete"] {
            let times = try medians("batch \(operation)", BatchRunner.allCases) { runner, _ in
                try withDirectory("batch-\(operation)") { directory in
                    try copy(runner, to: directory)
                    var changed = 0
                    let seconds: Double
                    switch runner {
                    case .strata:
                        let path = directory.path
                        let store = try waitFor { try await StrataStore.open(at: path, durability: .noSync) }
                        let predicate = try FetchPredicate(format: "rank < %@", cut)
                        if operation == "update" {
                            var request = BatchUpdateRequest(entityName: "Item")
                            request.predicate = predicate
                            request.propertiesToUpdate = ["score": try UpdateExpression(format: "score + 1")]
                            request.resultType = .count
                            seconds = try timed { changed = try store.coordinator.execute(request).count ?? -1 }
                        } else {
                            var fetch = FetchRequest<Item>(entityName: "Item")
                            fetch.predicate = predicate
                            var request = BatchDeleteRequest(fetchRequest: fetch)
                            request.resultType = .count
                            seconds = try timed { changed = try store.coordinator.execute(request).count ?? -1 }
                        }
                    case .raw:
                        let store = try RawStore(path: directory.path, sync: false)
                        seconds = try timed {
                            changed = operation == "update" ? try store.updateRange(lower: 0, upper: cut) { $0 + 1 } : try store.deleteRange(lower: 0, upper: cut)
                        }
                    case .grdb:
                        let store = try GRDBStore(directory: directory.path, sync: false)
                        seconds = try timed {
                            changed = operation == "update" ? try store.bumpScores(lower: 0, upper: cut) : try store.deleteRange(lower: 0, upper: cut)
                        }
                    }
                    try expect(changed, Int(cut), "\(runner): rows \(operation)d")
                    return seconds
                }
            }
            let strata = times[.strata]!, raw = times[.raw]!, grdb = times[.grdb]!
            report.add(ReportRow(
                "9 · batch \(operation) of 10% of \(formatCount(Double(rows))) objects, found by an indexed range (sync off)",
                [.strata: .time(strata), .raw: .time(raw), .grdb: .time(grdb)],
                note: String(
                    format: "µs/object: Strata %.2f, raw %.2f, GRDB %@ %.2f",
                    strata * 1e6 / Double(cut), raw * 1e6 / Double(cut), operation == "update" ? "updateAll" : "deleteAll",
                    grdb * 1e6 / Double(cut))))
        }
        report.notes.append(
            "Batch requests (scenario 9): the insert writes \(formatCount(Double(rows))) `Item`s into an empty store in one "
                + "request (Strata: `BatchInsertRequest`, its managed-object handler setting the four typed properties, and "
                + "its dictionary handler; raw LMDB: `mdb_put`s of the rows and rank-index entries in one write transaction; "
                + "GRDB: a cached `INSERT` statement in one `write`). The update sets `score = score + 1` and the delete removes "
                + "the rows of rank below a tenth of the count (10%, found through the rank index: Strata's planner picks it, "
                + "raw LMDB scans it, SQLite uses it): `BatchUpdateRequest` and `BatchDeleteRequest`, raw LMDB in one write "
                + "transaction, GRDB's `updateAll` and `deleteAll`. Each update and delete run works on a fresh copy of a store "
                + "filled once.")
    }

    /// A managed-object-handler batch insert of `records`.
    static func objectInsert(_ records: [BenchRecord]) -> BatchInsertRequest {
        var index = 0
        var request = BatchInsertRequest(Item.self) { item in
            guard index < records.count else { return true }
            let record = records[index]
            index += 1
            item.rank = record.rank
            item.name = record.name
            item.score = record.score
            item.created = record.created
            return false
        }
        request.resultType = .count
        return request
    }

    /// A dictionary-handler batch insert of `records`.
    static func dictionaryInsert(_ records: [BenchRecord]) -> BatchInsertRequest {
        var index = 0
        var request = BatchInsertRequest(entityName: "Item") { dictionary in
            guard index < records.count else { return true }
            let record = records[index]
            index += 1
            dictionary["rank"] = record.rank
            dictionary["name"] = record.name
            dictionary["score"] = record.score
            dictionary["created"] = record.created
            return false
        }
        request.resultType = .count
        return request
    }
}

extension BenchRun {
    /// Scenario 9's last part (issue 24): what watching a store for other processes'
    /// commits costs while nothing happens. The process's CPU time (user + system) over an
    /// idle window, with nobody watching and with an iterator of `remoteChanges` at a
    /// 50 ms and a 5 ms polling interval.
    func runWatchCost() throws {
        let window = config.quick ? 1.0 : 5.0
        log("Scenario 9: idle cost of watching for remote changes (\(window) s windows)...")
        try withDirectory("watch") { directory in
            let path = directory.path
            let store = try waitFor { try await StrataStore.open(at: path, durability: .noSync, tracksHistory: true) }
            func cpuSeconds() -> Double {
                var usage = rusage()
                getrusage(RUSAGE_SELF.rawValue, &usage)
                return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
            }
            func idle() -> Double {
                let start = cpuSeconds()
                Thread.sleep(forTimeInterval: window)
                return (cpuSeconds() - start) / window
            }
            let baseline = idle()
            var watched: [(Duration, Double)] = []
            for interval in [Duration.milliseconds(50), .milliseconds(5)] {
                store.coordinator.remoteChangePollingInterval = interval
                let coordinator = store.coordinator
                let listener = Task { for await _ in coordinator.remoteChanges {} }
                Thread.sleep(forTimeInterval: 0.2)
                watched.append((interval, idle()))
                listener.cancel()
                Thread.sleep(forTimeInterval: 0.2)
            }
            let at50 = watched[0].1, at5 = watched[1].1
            report.add(ReportRow(
                "9 · watching one store for remote changes, idle: CPU time per second (50 ms interval)",
                [.strata: .time(at50)],
                note: String(
                    format: "CPU ms per s: not watching %.3f, watching at 50 ms %.3f, at 5 ms %.3f (the process's user + system time over %.0f s idle)",
                    baseline * 1000, at50 * 1000, at5 * 1000, window)))
        }
    }
}
