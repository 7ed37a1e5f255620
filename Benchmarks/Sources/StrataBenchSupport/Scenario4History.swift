import Foundation
import Strata

extension BenchRun {
    /// Scenario 4's history part (issue 24): what recording persistent history costs a
    /// save. Two Strata stores of the same objects, one tracking history and one not;
    /// 1 and 4 contexts each update 10 of their own objects per save for a window (sync
    /// off, group commit on), alternating between the stores. Reported as saves/s with
    /// history, beside saves/s without.
    func runHistoryCost() throws {
        log("Scenario 4, history: saves with persistent history on and off, \(config.contentionSeconds) s per window...")
        let contextCounts = [1, 4], perSave = 10
        let objects = (contextCounts.max() ?? 1) * config.objectsPerContext
        let records = (0..<objects).map { index in
            BenchRecord(id: Int64(index + 1), rank: Int64(index), name: "history object \(index)", score: 0, created: Date(timeIntervalSince1970: 1_700_000_000))
        }
        let directories = [StoreDirectory("history-off"), StoreDirectory("history-on")]
        let stores = try directories.enumerated().map { index, directory in
            let path = directory.appending("store")
            let store = try waitFor { try await StrataStore.open(at: path, durability: .noSync, tracksHistory: index == 1) }
            try store.makeContext().performAndWait { try StrataWork.importRecords(records, in: $0) }
            return store
        }
        try withExtendedLifetime(directories) {
            for contexts in contextCounts {
                var rates: [Double] = [0, 0]
                for round in 0..<2 {
                    for which in round % 2 == 0 ? [0, 1] : [1, 0] {
                        rates[which] += try historyWindow(stores[which], contexts: contexts, perSave: perSave) / 2
                    }
                }
                let ratio = rates[1] / rates[0]
                report.add(ReportRow(
                    "4 · history: \(contexts) context\(contexts == 1 ? "" : "s"), \(perSave) objects/save, sync off: saves/s with persistent history on",
                    [.strata: .rate(rates[1], "/s")],
                    note: String(format: "history off %@ saves/s; on / off %.2f×", formatCount(rates[0]), ratio)))
            }
            let history = try stores[1].coordinator.execute(.fetchHistory(after: nil))
            let changes = history.transactions.reduce(0) { $0 + $1.changes.count }
            report.notes.append(
                "History cost (scenario 4): two Strata stores of the same \(formatCount(Double(objects))) objects, one with "
                    + "`tracksPersistentHistory`; windows of \(config.contentionSeconds) s alternate between them (each measured twice, "
                    + "averaged). The tracking store recorded \(formatCount(Double(history.count))) transactions of "
                    + "\(formatCount(Double(changes))) changes (one per updated object, with its changed property names).")
        }
    }

    /// Saves/s of `contexts` threads bumping `perSave` of their own objects per save on `store`.
    private func historyWindow(_ store: StrataStore, contexts: Int, perSave: Int) throws -> Double {
        let owned = config.objectsPerContext
        let team = try (0..<contexts).map { index in
            let context = store.makeContext(name: "writer \(index)")
            let lower = Int64(index * owned)
            return (context, try context.performAndWait { try StrataWork.registerItems(lower: lower, upper: lower + Int64(owned), in: $0) })
        }
        let start = now()
        let deadline = start + UInt64(config.contentionSeconds * 1e9)
        let saves = try onThreads(contexts) { index in
            let (context, ids) = team[index]
            var saves = 0, next = 0
            while now() < deadline {
                try context.performAndWait { try StrataWork.bumpAndSave(ids, start: next, count: perSave, in: $0) }
                saves += 1
                next += perSave
            }
            return saves
        }
        return Double(saves.reduce(0, +)) / (Double(now() - start) / 1e9)
    }
}
