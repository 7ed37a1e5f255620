import Foundation
import Strata

extension BenchRun {
    /// The parent–child runs a round measures.
    enum ChainRun: Hashable {
        /// The changes saved directly from a root context (Strata), or the baselines'
        /// single transaction.
        case direct(Binding)
        /// Saved from a child `depth` levels below a root context, hop by hop.
        case chain(depth: Int)
        /// The 1% query in a root context, and in a child of it.
        case rootRead, childRead
    }

    /// Scenario 6: ``BenchConfig/parentChildChanges`` updates of existing objects (a new
    /// score each) made in the deepest context of a chain and saved one store up at a
    /// time, child to parent to … to the root context to the store, for chains of depth
    /// 1, 2, 3 (1 = a child of a root context). Measured: each hop's `save()` (the
    /// changes are made before the clock starts). Baselines: the same updates saved
    /// directly from a root context; raw LMDB rewriting the same rows in one write
    /// transaction; GRDB updating the same Codable records in one `write`. Sync off.
    ///
    /// Also the read hop: scenario 3's 1% query in a child context against the same
    /// query in its root.
    func runParentChild() throws {
        let stores = try stores()
        let n = stores.dataset.count
        let changes = min(config.parentChildChanges, n)
        log("Scenario 6: \(changes) changes up parent–child chains...")
        var keys: [ChainRun] = Binding.allCases.map(ChainRun.direct)
        keys += config.depths.map { ChainRun.chain(depth: $0) }
        keys += [.rootRead, .childRead]
        var hops: [Int: [[Double]]] = [:]
        var slice = 0
        let times = try medians("parent–child", keys) { run, round in
            // Different objects every run, and a score no object had before.
            let lower = Int64((slice * changes) % max(1, n - changes))
            slice += 1
            let marker = -Double(slice)
            switch run {
            case .direct(let binding):
                return try directSave(binding, lower: lower, count: changes, marker: marker, stores: stores)
            case .chain(let depth):
                let hopTimes = try chainSave(depth: depth, lower: lower, count: changes, marker: marker, stores: stores)
                if round > 0 { hops[depth, default: []].append(hopTimes) }
                return hopTimes.reduce(0, +)
            case .rootRead, .childRead:
                let queries = RangeQueries(storeCount: n, queries: config.queries, seed: 0xD00D &+ UInt64(round))
                return try readHop(child: run == .childRead, queries, stores) / Double(queries.lowers.count)
            }
        }

        let direct = times[.direct(.strata)]!
        let count = formatCount(Double(changes))
        report.add(ReportRow(
            "6 · \(count) updates saved directly from a root context (raw: one txn; GRDB: one write)",
            [.strata: .time(direct), .raw: .time(times[.direct(.raw)]!), .grdb: .time(times[.direct(.grdb)]!)]))
        for depth in config.depths {
            let total = times[.chain(depth: depth)]!
            let perHop = (0...depth).map { hop in median(hops[depth]!.map { $0[hop] }) }
            let hopText: String = perHop.enumerated().map { index, seconds -> String in
                let name = index == depth ? "root → store" : (index == 0 ? "leaf → parent" : "level \(depth - index) → parent")
                return "\(name) \(formatSeconds(seconds))"
            }.joined(separator: ", ")
            // The first hop (the leaf into its parent) against a root save of the same changes.
            let firstHop = perHop[0]
            report.add(ReportRow(
                "6 · \(count) updates up a chain of depth \(depth): total of \(depth + 1) saves (raw, GRDB: as above)",
                [.strata: .time(total), .raw: .time(times[.direct(.raw)]!), .grdb: .time(times[.direct(.grdb)]!)],
                target: depth == 1
                    ? Target(String(format: "a child → parent hop ≤ 0.5× a root save (%.2f×)", firstHop / direct), met: firstHop <= 0.5 * direct)
                    : nil,
                note: String(format: "chain / direct root save: %.2f×; hops: ", total / direct) as String + hopText))
        }
        let root = times[.rootRead]!, child = times[.childRead]!
        report.add(ReportRow(
            "6 · read hop: 1% query in a child context (Strata only): per query",
            [.strata: .time(child)],
            note: "the same query in its root context: \(formatSeconds(root)) (child / root " + String(format: "%.2f×)", child / root)))
    }

    /// Strata: changes `count` objects in a root context and times its save; the
    /// baselines: times writing the same rows. Checks the store afterwards.
    private func directSave(_ binding: Binding, lower: Int64, count: Int, marker: Double, stores: PopulatedStores) throws -> Double {
        let upper = lower + Int64(count)
        let seconds: Double
        switch binding {
        case .strata:
            let root = stores.strata.makeContext(name: "root")
            let changed = try root.performAndWait { try StrataWork.setScores(lower: lower, upper: upper, to: marker, in: $0) }
            try expect(changed, count, "Strata objects changed")
            seconds = try timed { try root.performAndWait { try $0.save() } }
        case .raw:
            let ids = try stores.raw.ids(lower: lower, upper: upper)
            try expect(ids.count, count, "raw rows to change")
            seconds = try timed { try stores.raw.update(ids: ids) { _ in marker } }
            try expect(try stores.raw.scoreSum(lower: lower, upper: upper), marker * Double(count), "raw scores after the update")
            return seconds
        case .grdb:
            var items = try stores.grdb.items(lower: lower, upper: upper)
            try expect(items.count, count, "GRDB records to change")
            for index in items.indices { items[index].score = marker }
            seconds = try timed { try stores.grdb.update(items) }
            try expect(try stores.grdb.scoreSum(lower: lower, upper: upper), marker * Double(count), "GRDB scores after the update")
            return seconds
        }
        try checkStrataScores(lower: lower, upper: upper, marker: marker, stores: stores)
        return seconds
    }

    /// Makes a chain root ← child 1 ← … ← child `depth`, changes `count` objects in the
    /// deepest child, then saves each context in turn, deepest first. Returns each save's
    /// seconds (leaf first, root last).
    private func chainSave(depth: Int, lower: Int64, count: Int, marker: Double, stores: PopulatedStores) throws -> [Double] {
        let upper = lower + Int64(count)
        var chain = [stores.strata.makeContext(name: "root")]
        for level in 1...depth {
            chain.append(ManagedObjectContext(.privateQueue, parent: chain[level - 1], name: "child \(level)"))
        }
        let changed = try chain[depth].performAndWait { try StrataWork.setScores(lower: lower, upper: upper, to: marker, in: $0) }
        try expect(changed, count, "Strata objects changed in the child")
        var hops: [Double] = []
        for context in chain.reversed() {
            hops.append(try timed { try context.performAndWait { try $0.save() } })
        }
        try checkStrataScores(lower: lower, upper: upper, marker: marker, stores: stores)
        return hops
    }

    private func checkStrataScores(lower: Int64, upper: Int64, marker: Double, stores: PopulatedStores) throws {
        let saved = try stores.strata.makeContext(name: "check").performAndWait { context in
            try StrataWork.allScores(lower: lower, upper: upper, equal: marker, in: context)
        }
        if !saved { throw BenchFailure("Strata: the changes did not all reach the store") }
    }

    /// The queries of a round in a root context, or in a child of a root context.
    private func readHop(child: Bool, _ queries: RangeQueries, _ stores: PopulatedStores) throws -> Double {
        let root = stores.strata.makeContext(name: "root")
        let context = child ? ManagedObjectContext(.privateQueue, parent: root, name: "child") : root
        let width = queries.width, expectedCount = queries.expectedCount()
        return try withExtendedLifetime(root) {
            try timed {
                for lower in queries.lowers {
                    _ = try context.performAndWait { context in
                        try StrataWork.rangeQuery(lower: lower, width: width, limit: 0, expectedCount: expectedCount, in: context)
                    }
                }
            }
        }
    }
}
