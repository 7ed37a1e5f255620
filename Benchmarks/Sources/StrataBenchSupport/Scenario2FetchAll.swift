import Foundation
import Strata

extension BenchRun {
    /// The fetch-all variants a round measures.
    enum FetchAllRun: Hashable, CaseIterable {
        case strataRealised, strataBatched, strataFetchedResults
        case rawRealised, rawWalk
        case grdbCodable, grdbRows, grdbCursor
    }

    /// Scenario 2: every object of the populated store read back and every attribute
    /// touched, from a cold context (a new one each round).
    ///
    /// - Fully realised: Strata `returnsObjectsAsFaults = false`; raw LMDB a cursor walk
    ///   decoding every row into an array of structs; GRDB `fetchAll` of Codable records
    ///   and of hand-written records.
    /// - Batched: Strata faults with `fetchBatchSize` (and, separately,
    ///   `fetchedResults(for:)`), walked in order; the baselines' memory-bounded walks are
    ///   a raw cursor and a GRDB cursor of hand-written records, nothing kept.
    ///
    /// Peak memory of each is measured once in a child process (``MemoryProbe``).
    func runFetchAll() throws {
        let stores = try stores()
        let dataset = stores.dataset
        let batch = config.batchSize
        log("Scenario 2: fetch all \(dataset.count) objects...")
        let times = try medians("fetch all", FetchAllRun.allCases) { run, _ in
            var result: (count: Int, checksum: Int64) = (0, 0)
            var elapsed = 0.0
            switch run {
            case .strataRealised, .strataBatched, .strataFetchedResults:
                let context = stores.strata.makeContext(name: "fetch-all")
                let start = now()
                result = try context.performAndWait { context in
                    switch run {
                    case .strataRealised: try StrataWork.fetchAllRealised(in: context)
                    case .strataBatched: try StrataWork.fetchAllBatched(batchSize: batch, in: context)
                    default: try StrataWork.walkFetchedResults(batchSize: batch, in: context)
                    }
                }
                elapsed = seconds(since: start)
            case .rawRealised: elapsed = try timed { result = try stores.raw.fetchAll() }
            case .rawWalk: elapsed = try timed { result = try stores.raw.walkAll() }
            case .grdbCodable: elapsed = try timed { result = try stores.grdb.fetchAllCodable() }
            case .grdbRows: elapsed = try timed { result = try stores.grdb.fetchAllRows() }
            case .grdbCursor: elapsed = try timed { result = try stores.grdb.walkAll() }
            }
            try expect(result.count, dataset.count, "fetch all \(run) count")
            try expect(result.checksum, dataset.checksum, "fetch all \(run) checksum")
            return elapsed
        }

        let n = formatCount(Double(dataset.count))
        let realised = times[.strataRealised]!, rows = times[.grdbRows]!
        report.add(ReportRow(
            "2 · fetch all \(n), fully realised, cold context (GRDB: hand-written records)",
            [.strata: .time(realised), .raw: .time(times[.rawRealised]!), .grdb: .time(rows)],
            target: Target(String(format: "Strata at least as fast as GRDB hand-written records (%.2f×)", rows / realised), met: realised <= rows)))
        report.add(ReportRow(
            "2 · fetch all \(n), fully realised (GRDB: Codable records)",
            [.strata: .time(realised), .raw: .time(times[.rawRealised]!), .grdb: .time(times[.grdbCodable]!)]))
        let batched = times[.strataBatched]!
        report.add(ReportRow(
            "2 · fetch all \(n) as faults, fetchBatchSize \(batch), walk all (raw, GRDB: cursors)",
            [.strata: .time(batched), .raw: .time(times[.rawWalk]!), .grdb: .time(times[.grdbCursor]!)],
            target: Target(String(format: "Strata ≤ 2× its fully realised fetch (%.2f×)", batched / realised), met: batched <= 2 * realised)))
        report.add(ReportRow(
            "2 · fetch all \(n) through fetchedResults(for:), batch \(batch) (raw, GRDB: cursors)",
            [.strata: .time(times[.strataFetchedResults]!), .raw: .time(times[.rawWalk]!), .grdb: .time(times[.grdbCursor]!)]))

        guard let probe else {
            report.notes.append("Peak memory of scenario 2 was not measured (no child process).")
            return
        }
        log("  peak memory, one child process per fetch...")
        func peak(_ variant: MemoryProbe.Variant, _ side: MemoryProbe.Side, _ path: String) throws -> MemoryProbe.Outcome {
            try probe(MemoryProbe.Request(
                variant: variant, side: side, path: path, count: dataset.count, checksum: dataset.checksum, batchSize: batch))
        }
        let strataRealised = try peak(.realised, .strata, stores.strataPath)
        let rawRealised = try peak(.realised, .raw, stores.rawPath)
        let grdbRowsRealised = try peak(.realised, .grdbRows, stores.grdbPath)
        let grdbCodableRealised = try peak(.realised, .grdbCodable, stores.grdbPath)
        let strataBatched = try peak(.batched, .strata, stores.strataPath)
        let strataResults = try peak(.fetchedResults, .strata, stores.strataPath)
        let rawWalk = try peak(.batched, .raw, stores.rawPath)
        let grdbCursor = try peak(.batched, .grdbRows, stores.grdbPath)
        let outcomes = [strataRealised, rawRealised, grdbRowsRealised, grdbCodableRealised, strataBatched, strataResults, rawWalk, grdbCursor]
        let disagreement = outcomes.compactMap { outcome in outcome.highWaterKiB.map { abs($0 - outcome.peakKiB) } }.max()
        report.notes.append(
            "Peak RSS (scenario 2): each fetch ran once in a child process started through a fork; the cells are the growth of its "
                + "`ru_maxrss` over its value before the fetch (after opening the store). `ru_maxrss` and the kernel's `VmHWM` "
                + (disagreement.map { "differed by at most \(formatCount(Double($0))) KiB." } ?? "could not be compared."))
        let bytesPerObject = Double(strataRealised.growthKiB) * 1024 / Double(max(1, dataset.count))
        let mib = { (outcome: MemoryProbe.Outcome) in String(format: "%.0f", Double(outcome.startKiB) / 1024) }
        report.add(ReportRow(
            "2 · peak RSS growth: fetch all \(n), fully realised (GRDB: hand-written)",
            [.strata: .memory(kib: strataRealised.growthKiB), .raw: .memory(kib: rawRealised.growthKiB), .grdb: .memory(kib: grdbRowsRealised.growthKiB)],
            target: Target(
                String(format: "Strata ≤ 300 B per realised object (%.0f B)", bytesPerObject), met: bytesPerObject <= 300),
            note: "GRDB Codable: \(Measure.memory(kib: grdbCodableRealised.growthKiB).text); process before the fetch: Strata \(mib(strataRealised)), raw \(mib(rawRealised)), GRDB \(mib(grdbRowsRealised)) MiB"))
        report.add(ReportRow(
            "2 · peak RSS growth: faults, fetchBatchSize \(batch), walk all (raw, GRDB: cursors)",
            [.strata: .memory(kib: strataBatched.growthKiB), .raw: .memory(kib: rawWalk.growthKiB), .grdb: .memory(kib: grdbCursor.growthKiB)]))
        report.add(ReportRow(
            "2 · peak RSS growth: fetchedResults(for:), batch \(batch) (raw, GRDB: cursors)",
            [.strata: .memory(kib: strataResults.growthKiB), .raw: .memory(kib: rawWalk.growthKiB), .grdb: .memory(kib: grdbCursor.growthKiB)]))
    }
}
