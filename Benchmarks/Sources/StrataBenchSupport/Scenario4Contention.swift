import Foundation
import Strata

extension BenchRun {
    /// Who writes in a contention window.
    enum Writer: Hashable, CustomStringConvertible {
        /// Strata, with the coordinator's group commit on or off.
        case strata(groupCommit: Bool)
        case raw
        case grdb

        var binding: Binding {
            switch self {
            case .strata: .strata
            case .raw: .raw
            case .grdb: .grdb
            }
        }

        var description: String {
            switch self {
            case .strata(groupCommit: true): "Strata, group commit on"
            case .strata(groupCommit: false): "Strata, group commit off"
            case .raw: "raw LMDB"
            case .grdb: "GRDB"
            }
        }
    }

    /// What one contention window measured.
    struct ContentionResult {
        var saves = 0
        var conflicts = 0
        var seconds = 0.0
        /// Every save's latency, sorted (ns).
        var latencies: [UInt64] = []
        /// LMDB commits, when known.
        var commits: Int?

        var savesPerSecond: Double { Double(saves) / seconds }
    }

    /// What one worker thread measured.
    private struct WorkerResult: Sendable {
        var saves = 0
        var conflicts = 0
        var latencies: [UInt64] = []
    }

    /// The stores of one durability, one per binding, each holding
    /// `max(contexts) × objectsPerContext` objects with score 0 (object `i` has rank `i`):
    /// context `c` updates ranks `c × objectsPerContext ..< (c + 1) × objectsPerContext`.
    private final class ContentionStores {
        let strata: StrataStore
        let raw: RawStore
        let grdb: GRDBStore
        /// The score sum each store must hold: every successful save adds `objectsPerSave`.
        var expectedScore: [Binding: Double] = [.strata: 0, .raw: 0, .grdb: 0]
        let objects: Int
        private let directories: [StoreDirectory]

        init(sync: Bool, objects: Int) throws {
            self.objects = objects
            let strataDirectory = StoreDirectory("contention-strata"), rawDirectory = StoreDirectory("contention-raw")
            let grdbDirectory = StoreDirectory("contention-grdb")
            directories = [strataDirectory, rawDirectory, grdbDirectory]
            let records = (0..<objects).map { index in
                BenchRecord(
                    id: Int64(index + 1), rank: Int64(index), name: "contention object \(index)", score: 0,
                    created: Date(timeIntervalSince1970: 1_700_000_000))
            }
            let path = strataDirectory.appending("store")
            strata = try waitFor { try await StrataStore.open(at: path, durability: sync ? .sync : .noSync) }
            try strata.makeContext().performAndWait { try StrataWork.importRecords(records, in: $0) }
            raw = try RawStore(path: rawDirectory.path, sync: sync)
            try raw.insert(records)
            grdb = try GRDBStore(directory: grdbDirectory.path, sync: sync)
            try grdb.insert(records)
        }

        /// Throws unless `binding`'s store holds the expected score sum.
        func check(_ binding: Binding) throws {
            let upper = Int64(objects)
            let actual: Double = switch binding {
            case .strata: try strata.makeContext().performAndWait { try StrataWork.scoreSum(lower: 0, upper: upper, in: $0) }
            case .raw: try raw.scoreSum(lower: 0, upper: upper)
            case .grdb: try grdb.scoreSum(lower: 0, upper: upper)
            }
            try expect(actual, expectedScore[binding]!, "\(binding.rawValue) contention score sum (one per saved change)")
        }
    }

    /// Scenario 4: 1, 2, 4, 8 contexts (raw: threads; GRDB: concurrent writers on one
    /// pool), each on its own thread, each updating its own objects (score + 1) and
    /// saving 1 or 10 of them per save as fast as it can for a fixed time; sync off, then
    /// sync on. Strata runs with group commit on and off (when the library has the
    /// switch). Reports saves/s, p50 and p99 save latency, conflicts and saves per commit.
    ///
    /// Every context owns ``BenchConfig/objectsPerContext`` objects, registered and
    /// retained (Strata) or held as records (GRDB), and changes the next ones in turn.
    func runContention() throws {
        log("Scenario 4: write contention, \(config.contentionSeconds) s per window...")
        let maxContexts = config.contexts.max() ?? 1
        var detail = DetailTable(
            title: "Write contention (scenario 4): every window",
            header: ["durability", "contexts", "objects/save", "who", "saves/s", "p50", "p99", "conflicts", "saves/commit"])
        let writers: [Writer] = [.strata(groupCommit: true), .strata(groupCommit: false), .raw, .grdb]
        var window = 0
        for sync in [false, true] {
            let durability = sync ? "sync on" : "sync off"
            let stores = try ContentionStores(sync: sync, objects: maxContexts * config.objectsPerContext)
            // A short unrecorded window per writer first, so that no measured window pays
            // for a cold store (file growth, first pages).
            for writer in writers {
                _ = try contentionWindow(writer, contexts: 1, perSave: 1, stores: stores, seconds: min(0.1, config.contentionSeconds))
            }
            for contexts in config.contexts {
                for perSave in config.objectsPerSave {
                    var results: [Writer: ContentionResult] = [:]
                    for writer in window % 2 == 0 ? writers : writers.reversed() {
                        results[writer] = try contentionWindow(
                            writer, contexts: contexts, perSave: perSave, stores: stores, seconds: config.contentionSeconds)
                    }
                    window += 1
                    for writer in writers {
                        let result = results[writer]!
                        detail.rows.append([
                            durability, String(contexts), String(perSave), writer.description,
                            formatCount(result.savesPerSecond),
                            formatSeconds(Double(percentile(result.latencies, 0.5)) / 1e9),
                            formatSeconds(Double(percentile(result.latencies, 0.99)) / 1e9),
                            String(result.conflicts),
                            result.commits.map { String(format: "%.2f", Double(result.saves) / Double(max($0, 1))) } ?? "?",
                        ])
                    }
                    let main = results[writers[0]]!
                    var target: Target?
                    if sync && contexts == maxContexts && maxContexts >= 8 {
                        if let on = results[.strata(groupCommit: true)], let off = results[.strata(groupCommit: false)] {
                            let gain = on.savesPerSecond / off.savesPerSecond
                            target = Target(String(format: "group commit on ≥ 4× saves/s of off (%.2f×)", gain), met: gain >= 4)
                        }
                    }
                    let conflicts = writers.map { results[$0]!.conflicts }.reduce(0, +)
                    report.add(ReportRow(
                        "4 · \(contexts) context\(contexts == 1 ? "" : "s"), \(perSave) object\(perSave == 1 ? "" : "s")/save, \(durability): saves/s"
                            + " (Strata: group commit on)",
                        [.strata: .rate(main.savesPerSecond, "/s"), .raw: .rate(results[.raw]!.savesPerSecond, "/s"),
                         .grdb: .rate(results[.grdb]!.savesPerSecond, "/s")],
                        target: target,
                        note: "p99: Strata \(p99(main)), raw \(p99(results[.raw]!)), GRDB \(p99(results[.grdb]!)); conflicts \(conflicts)"))
                }
            }
            log("  \(durability): done")
        }
        report.details.append(detail)
        report.notes.append(
            "Write contention (scenario 4): each context updates its own \(config.objectsPerContext) objects in turn (Strata: registered "
                + "and retained in the context; raw: rows by id; GRDB: Codable records, `update`); saves/s counts every thread's saves "
                + "over the window; conflicts are saves that threw a merge conflict (`--objects-per-context` changes how many "
                + "objects each context owns).")
    }

    private func p99(_ result: ContentionResult) -> String {
        formatSeconds(Double(percentile(result.latencies, 0.99)) / 1e9)
    }

    /// One window: `contexts` threads of `writer` saving for `seconds`.
    private func contentionWindow(
        _ writer: Writer, contexts: Int, perSave: Int, stores: ContentionStores, seconds windowSeconds: Double
    ) throws -> ContentionResult {
        let owned = config.objectsPerContext
        let duration = UInt64(windowSeconds * 1e9)
        var result = ContentionResult()
        let workers: [WorkerResult]
        let start: UInt64
        switch writer {
        case .strata(let groupCommit):
            let coordinator = stores.strata.coordinator
            coordinator.isGroupCommitEnabled = groupCommit
            let before = coordinator.writeStatistics
            // Each context reads its own objects once, before the window.
            let team = try (0..<contexts).map { index in
                let context = stores.strata.makeContext(name: "writer \(index)")
                let lower = Int64(index * owned)
                let ids = try context.performAndWait { try StrataWork.registerItems(lower: lower, upper: lower + Int64(owned), in: $0) }
                return (context, ids)
            }
            start = now()
            let deadline = start + duration
            workers = try onThreads(contexts) { index in
                let (context, ids) = team[index]
                var worker = WorkerResult()
                var next = 0
                while now() < deadline {
                    let begin = now()
                    do {
                        try context.performAndWait { try StrataWork.bumpAndSave(ids, start: next, count: perSave, in: $0) }
                        worker.saves += 1
                    } catch StrataError.Code.mergeConflicts {
                        worker.conflicts += 1
                        try context.performAndWait { context in
                            context.rollback()
                            try context.refreshAllObjects()
                        }
                    }
                    worker.latencies.append(now() &- begin)
                    next += perSave
                }
                return worker
            }
            let after = coordinator.writeStatistics
            result.commits = after.commits - before.commits
            try expect(after.saves - before.saves, workers.map(\.saves).reduce(0, +), "Strata writeStatistics saves in the window")
            coordinator.isGroupCommitEnabled = true
        case .raw:
            let raw = stores.raw
            start = now()
            let deadline = start + duration
            workers = try onThreads(contexts) { index in
                let ids = (0..<Int64(owned)).map { Int64(index * owned) + $0 + 1 }
                var worker = WorkerResult()
                var next = 0
                while now() < deadline {
                    let begin = now()
                    try raw.update(ids: (0..<perSave).map { ids[(next + $0) % owned] }) { $0 + 1 }
                    worker.saves += 1
                    worker.latencies.append(now() &- begin)
                    next += perSave
                }
                return worker
            }
            result.commits = workers.map(\.saves).reduce(0, +)
        case .grdb:
            let owners = try (0..<contexts).map { index in
                try stores.grdb.items(lower: Int64(index * owned), upper: Int64((index + 1) * owned))
            }
            let grdb = stores.grdb
            start = now()
            let deadline = start + duration
            workers = try onThreads(contexts) { index in
                var items = owners[index]
                var worker = WorkerResult()
                var next = 0
                while now() < deadline {
                    let begin = now()
                    var changed: [GRDBItem] = []
                    for offset in 0..<perSave {
                        let slot = (next + offset) % owned
                        items[slot].score += 1
                        changed.append(items[slot])
                    }
                    try grdb.update(changed)
                    worker.saves += 1
                    worker.latencies.append(now() &- begin)
                    next += perSave
                }
                return worker
            }
            result.commits = workers.map(\.saves).reduce(0, +)
        }
        result.seconds = seconds(since: start)
        result.saves = workers.map(\.saves).reduce(0, +)
        result.conflicts = workers.map(\.conflicts).reduce(0, +)
        result.latencies = workers.flatMap(\.latencies).sorted()
        stores.expectedScore[writer.binding]! += Double(result.saves * perSave)
        try stores.check(writer.binding)
        if result.saves == 0 { throw BenchFailure("\(writer) saved nothing in \(windowSeconds) s") }
        return result
    }
}
