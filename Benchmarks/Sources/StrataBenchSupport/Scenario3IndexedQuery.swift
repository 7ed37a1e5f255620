import Foundation
import GRDB
import Strata

extension BenchRun {
    /// The indexed-query variants a round measures.
    enum QueryRun: Hashable, CaseIterable {
        case range, limited, pinned
    }

    /// Scenario 3: `lower <= rank < lower + n/100` (1% of the objects) sorted by rank,
    /// over ``BenchConfig/queries`` different ranges per round; the same with
    /// `fetchLimit = 20`; and the 1% query in a pinned context (raw: one long-lived read
    /// transaction; GRDB: a `DatabaseSnapshot`). Every query touches every attribute and
    /// checks its count and order. Reported per query.
    ///
    /// Strata runs each query in its own `performAndWait` on one context per round; raw
    /// LMDB in its own read transaction; GRDB in its own `read` (cached statements,
    /// hand-written records).
    func runIndexedQueries() throws {
        let stores = try stores()
        let n = stores.dataset.count
        log("Scenario 3: indexed range queries on \(n) objects...")
        var keys: [QueryKey] = []
        for run in QueryRun.allCases { for binding in Binding.allCases { keys.append(QueryKey(run: run, binding: binding)) } }
        let times = try medians("indexed queries", keys) { key, round in
            let queries = RangeQueries(storeCount: n, queries: config.queries, seed: 0xC0FFEE &+ UInt64(round))
            return try queryRound(key, queries, stores) / Double(queries.lowers.count)
        }
        let width = RangeQueries(storeCount: n, queries: 1).width
        func values(_ run: QueryRun) -> [Binding: Measure] {
            Dictionary(uniqueKeysWithValues: Binding.allCases.map { ($0, Measure.time(times[QueryKey(run: run, binding: $0)]!)) })
        }
        let strataRange = times[QueryKey(run: .range, binding: .strata)]!, grdbRange = times[QueryKey(run: .range, binding: .grdb)]!
        report.add(ReportRow(
            "3 · 1% range (\(formatCount(Double(width))) of \(formatCount(Double(n)))) on the indexed Int64, sorted: per query",
            values(.range),
            target: Target(String(format: "Strata at least as fast as GRDB (%.2f×)", grdbRange / strataRange), met: strataRange <= grdbRange)))
        report.add(ReportRow("3 · the same with fetchLimit 20: per query", values(.limited)))
        let pinnedStrata = times[QueryKey(run: .pinned, binding: .strata)]!, unpinned = times[QueryKey(run: .range, binding: .strata)]!
        report.add(ReportRow(
            "3 · 1% range in a pinned context (raw: long read txn; GRDB: DatabaseSnapshot): per query",
            values(.pinned),
            note: String(format: "Strata pinned / unpinned: %.2f", pinnedStrata / unpinned)))
    }

    struct QueryKey: Hashable {
        var run: QueryRun
        var binding: Binding
    }

    /// One round of `key`'s queries; returns the seconds they took together.
    private func queryRound(_ key: QueryKey, _ queries: RangeQueries, _ stores: PopulatedStores) throws -> Double {
        let limit = key.run == .limited ? 20 : 0
        let expectedCount = queries.expectedCount(limit: limit)
        let width = queries.width
        switch key.binding {
        case .strata:
            let context = stores.strata.makeContext(name: "query")
            if key.run == .pinned {
                try context.performAndWait { try $0.setQueryGenerationFrom(.current) }
            }
            return try timed {
                for lower in queries.lowers {
                    _ = try context.performAndWait { context in
                        try StrataWork.rangeQuery(lower: lower, width: width, limit: limit, expectedCount: expectedCount, in: context)
                    }
                }
            }
        case .raw:
            let snapshot = key.run == .pinned ? try stores.raw.makeSnapshot() : nil
            defer { snapshot?.close() }
            return try timed {
                for lower in queries.lowers {
                    let records = try stores.raw.range(lower: lower, upper: lower + width, limit: limit, in: snapshot)
                    _ = try checkRange(records, lower: lower, expectedCount: expectedCount, "raw")
                }
            }
        case .grdb:
            if key.run == .pinned {
                let snapshot = try stores.grdb.pool.makeSnapshot()
                return try timed {
                    for lower in queries.lowers {
                        let records = try snapshot.read { db in try GRDBStore.range(db, lower: lower, upper: lower + width, limit: limit) }
                        _ = try checkRange(records, lower: lower, expectedCount: expectedCount, "GRDB snapshot")
                    }
                }
            }
            return try timed {
                for lower in queries.lowers {
                    let records = try stores.grdb.range(lower: lower, upper: lower + width, limit: limit)
                    _ = try checkRange(records, lower: lower, expectedCount: expectedCount, "GRDB")
                }
            }
        }
    }
}
