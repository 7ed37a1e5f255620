import Foundation
import Strata
import StrataTesting

/// The pieces of scenario 4's hot spot the bindings share.
public enum HotSpot {
    /// The most writers a hot-spot window runs: the hot objects have one tally (attribute,
    /// column, field) per writer.
    public static let maxWriters = 8

    /// The model of the hot spot's Strata store: ``HotObject`` alone.
    public static let strataModel: ManagedObjectModel = {
        do {
            return try ManagedObjectModel(types: [HotObject.self])
        } catch {
            preconditionFailure("the hot-spot model is invalid: \(error)")
        }
    }()

    /// What a store's hot objects add up to.
    public struct Totals: Sendable, Equatable {
        /// The hot objects (rows) in the store.
        public var rows: Int
        /// The sum of their counters.
        public var counter: Int64 = 0
        /// The sum of each writer's tallies.
        public var tallies = [Int64](repeating: 0, count: HotSpot.maxWriters)

        /// Nothing counted yet over `rows` rows.
        public init(rows: Int) { self.rows = rows }
    }

    /// The merge policies Strata's windows run with: `.error` and the four built-in
    /// merging policies (not `.custom`).
    public enum Policy: CaseIterable, Sendable, CustomStringConvertible {
        /// A conflicting save fails; the writer rolls back and retries.
        case error
        /// Merge by property, the store's value winning a property changed on both sides.
        case mergeByPropertyStoreTrump
        /// Merge by property, the saving context's value winning.
        case mergeByPropertyObjectTrump
        /// The saving context's whole state of a conflicting object wins.
        case overwrite
        /// The saving context's changes to a conflicting object are dropped.
        case rollback

        /// The context's merge policy.
        public var mergePolicy: MergePolicy {
            switch self {
            case .error: .error
            case .mergeByPropertyStoreTrump: .mergeByPropertyStoreTrump
            case .mergeByPropertyObjectTrump: .mergeByPropertyObjectTrump
            case .overwrite: .overwrite
            case .rollback: .rollback
            }
        }

        /// `.error`, `.overwrite`, ...
        public var description: String { "." + mergePolicy.description }
    }

    /// `count` distinct hot objects out of `objects` (indexes 0 ..< objects), in
    /// increasing order: what one update changes.
    static func picks(_ count: Int, of objects: Int, using random: inout SeededRandomNumberGenerator) -> [Int] {
        var picks: Set<Int> = []
        while picks.count < count { picks.insert(Int.random(in: 0..<objects, using: &random)) }
        return picks.sorted()
    }

    /// The seed of writer `writer`'s picks: the same in every window and binding, so that
    /// every binding updates the same objects in the same order.
    static func seed(writer: Int) -> UInt64 { 0x4075_9071 &+ UInt64(writer) &* 0x9E37_79B9 }
}

extension BenchRun {
    /// Who writes in a hot-spot window.
    enum HotWriter: Hashable, CustomStringConvertible {
        /// Strata, its contexts with this merge policy.
        case strata(HotSpot.Policy)
        /// Raw LMDB: read, change and write back in one write transaction.
        case raw
        /// GRDB: read, then an optimistic `write`, retried when a version changed.
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
            case .strata(let policy): "Strata, \(policy)"
            case .raw: "raw LMDB, one write txn"
            case .grdb: "GRDB, optimistic locking"
            }
        }
    }

    /// What one hot-spot window measured.
    struct HotResult {
        /// Committed saves (updates that landed).
        var saves = 0
        /// Saves that failed and were retried: Strata's merge conflicts under `.error`,
        /// GRDB's optimistic writes that found a version changed. Always 0 for raw LMDB.
        var failed = 0
        /// Conflicts the committed saves settled (Strata's `writeStatistics`).
        var resolved = 0
        var seconds = 0.0
        /// Every attempt's latency (read, change, save), sorted (ns).
        var latencies: [UInt64] = []
        /// LMDB commits, when known.
        var commits: Int?
        /// The counter increments the store gained ÷ those the committed saves made.
        var counterKept = 0.0
        /// The same for the writers' tallies (each written by one writer only).
        var talliesKept = 0.0

        var savesPerSecond: Double { Double(saves) / seconds }
        var failedPerSecond: Double { Double(failed) / seconds }
        var resolvedPerSecond: Double { Double(resolved) / seconds }
    }

    /// What one hot-spot writer thread measured.
    private struct HotWorkerResult: Sendable {
        var saves = 0
        var failed = 0
        var latencies: [UInt64] = []
    }

    /// The hot-spot stores of one durability, one per binding, each holding `objects` hot
    /// objects with every count 0. Windows follow one another on the same stores; each
    /// checks what its own saves added.
    private final class HotSpotStores {
        let strata: StrataStore
        let raw: RawStore
        let grdb: GRDBStore
        let objects: Int
        private let directories: [StoreDirectory]

        init(sync: Bool, objects: Int) throws {
            self.objects = objects
            let strataDirectory = StoreDirectory("hotspot-strata"), rawDirectory = StoreDirectory("hotspot-raw")
            let grdbDirectory = StoreDirectory("hotspot-grdb")
            directories = [strataDirectory, rawDirectory, grdbDirectory]
            let path = strataDirectory.appending("store")
            strata = try waitFor {
                try await StrataStore.open(at: path, durability: sync ? .sync : .noSync, model: HotSpot.strataModel)
            }
            try strata.makeContext().performAndWait { try StrataWork.insertHotObjects(objects, in: $0) }
            raw = try RawStore(path: rawDirectory.path, sync: sync)
            try raw.insertHotRows(objects)
            grdb = try GRDBStore(directory: grdbDirectory.path, sync: sync)
            try grdb.createHotSpot(rows: objects)
            for binding in Binding.allCases { try expect(try totals(binding), HotSpot.Totals(rows: objects), "\(binding.rawValue) new hot spot") }
        }

        /// The totals of `binding`'s store, read afresh.
        func totals(_ binding: Binding) throws -> HotSpot.Totals {
            switch binding {
            case .strata: try strata.makeContext().performAndWait { try StrataWork.hotTotals(in: $0) }
            case .raw: try raw.hotTotals()
            case .grdb: try grdb.hotTotals()
            }
        }
    }

    /// Scenario 4's hot spot: ``BenchConfig/hotSpotContexts`` contexts (8; raw: threads;
    /// GRDB: concurrent writers on one pool), each on its own thread, all updating the
    /// same ``BenchConfig/hotSpotObjects`` objects (16) as fast as they can for a fixed
    /// time: each update picks ``BenchConfig/hotSpotObjectsPerSave`` of them (2) at
    /// random, reads them, adds 1 to their counter and to the writer's own tally, sets
    /// their note and saves. Strata runs once per merge policy (`.error` and the four
    /// merging ones); under `.error` a save that conflicts fails, is rolled back and
    /// retried until it lands. GRDB does the same with optimistic locking (read, then
    /// `UPDATE ... WHERE id = ? AND version = ?` in a `write`, retried when a row
    /// changed); raw LMDB reads and writes in one write transaction, which cannot
    /// conflict. Sync off, then sync on. Reports committed saves/s, failed saves
    /// (retries), conflicts resolved per second, and the increments each store kept.
    func runHotSpot() throws {
        let contexts = config.hotSpotContexts, objects = config.hotSpotObjects, perSave = config.hotSpotObjectsPerSave
        log("Scenario 4, hot spot: \(contexts) contexts on the same \(objects) objects, \(config.contentionSeconds) s per window...")
        var detail = DetailTable(
            title: "Hot-spot write contention (scenario 4): every window",
            header: ["durability", "who", "saves/s", "failed saves (retries)", "failed/s", "conflicts resolved", "resolved/s",
                     "p50", "p99", "saves/commit", "counter increments kept", "tally increments kept"])
        let writers: [HotWriter] = HotSpot.Policy.allCases.map { .strata($0) } + [.raw, .grdb]
        let subject = "\(contexts) context\(contexts == 1 ? "" : "s") on \(objects) objects, \(perSave) object\(perSave == 1 ? "" : "s")/save"
        for (window, sync) in [false, true].enumerated() {
            let durability = sync ? "sync on" : "sync off"
            let stores = try HotSpotStores(sync: sync, objects: objects)
            // A short unrecorded window per writer first, so that no measured window pays
            // for a cold store (file growth, first pages).
            for writer in writers {
                _ = try hotSpotWindow(writer, contexts: contexts, perSave: perSave, stores: stores, seconds: min(0.1, config.contentionSeconds))
            }
            var results: [HotWriter: HotResult] = [:]
            for writer in window % 2 == 0 ? writers : writers.reversed() {
                results[writer] = try hotSpotWindow(writer, contexts: contexts, perSave: perSave, stores: stores, seconds: config.contentionSeconds)
            }
            for writer in writers {
                let result = results[writer]!
                detail.rows.append([
                    durability, writer.description, formatCount(result.savesPerSecond),
                    wholeNumber(result.failed), formatCount(result.failedPerSecond),
                    writer.binding == .strata ? wholeNumber(result.resolved) : "—",
                    writer.binding == .strata ? formatCount(result.resolvedPerSecond) : "—",
                    formatSeconds(Double(percentile(result.latencies, 0.5)) / 1e9),
                    formatSeconds(Double(percentile(result.latencies, 0.99)) / 1e9),
                    result.commits.map { String(format: "%.2f", Double(result.saves) / Double(max($0, 1))) } ?? "?",
                    percent(result.counterKept), percent(result.talliesKept),
                ])
            }
            let strictest = results[.strata(.error)]!, raw = results[.raw]!, grdb = results[.grdb]!
            for policy in HotSpot.Policy.allCases {
                let result = results[.strata(policy)]!
                var notes: [String]
                if policy == .error {
                    notes = ["Strata: \(wholeNumber(result.failed)) failed saves (\(formatCount(result.failedPerSecond))/s), rolled back and retried"]
                } else {
                    notes = [
                        "Strata: \(wholeNumber(result.resolved)) conflicts resolved (\(formatCount(result.resolvedPerSecond))/s), no failed save; "
                            + String(format: "saves/s %.2f× .error's", result.savesPerSecond / strictest.savesPerSecond),
                    ]
                }
                notes.append("counter increments kept \(percent(result.counterKept)), tallies \(percent(result.talliesKept))")
                notes.append("GRDB: \(wholeNumber(grdb.failed)) retries (\(formatCount(grdb.failedPerSecond))/s)")
                notes.append("p99: Strata \(formatSeconds(Double(percentile(result.latencies, 0.99)) / 1e9)), "
                    + "raw \(formatSeconds(Double(percentile(raw.latencies, 0.99)) / 1e9)), "
                    + "GRDB \(formatSeconds(Double(percentile(grdb.latencies, 0.99)) / 1e9))")
                report.add(ReportRow(
                    "4 · hot spot: \(subject), \(durability), Strata \(policy): saves/s (raw: one write txn; GRDB: optimistic locking, retried)",
                    [.strata: .rate(result.savesPerSecond, "/s"), .raw: .rate(raw.savesPerSecond, "/s"),
                     .grdb: .rate(grdb.savesPerSecond, "/s")],
                    note: notes.joined(separator: "; ")))
            }
            log("  hot spot, \(durability): done")
        }
        report.details.append(detail)
        report.notes.append(
            "Hot-spot write contention (scenario 4): \(subject) picked at random, every context updating the same objects "
                + "(Strata: private-queue root contexts of one coordinator, group commit on, the objects registered and retained; each "
                + "update refreshes the objects it changes, adds 1 to their `counter` and to the writer's own tally, sets their `note` and "
                + "saves). Saves/s counts committed saves only. Under `.error` a conflicting save fails, is rolled back and retried until it "
                + "lands (failed saves); under the merging policies every save goes through and `writeStatistics.resolvedConflicts` counts "
                + "the conflicts settled (one per object). GRDB: read the rows in a `read`, then `UPDATE ... WHERE id = ? AND version = ?` "
                + "in a `write`, rolled back and retried when a row changed (retries): optimistic locking, the counterpart of `.error`. "
                + "Raw LMDB reads and writes in one write transaction, which cannot conflict. Counter increments kept: what the store's "
                + "counters gained ÷ the increments the committed saves made (a last-writer-wins merge loses some by design); tallies: "
                + "the same for the properties only one writer changes (a merge by property keeps every one). Every window checks them "
                + "(`--hot-contexts`, `--hot-objects`, `--hot-objects-per-save` change the shape).")
    }

    private func percent(_ fraction: Double) -> String { String(format: "%.1f%%", fraction * 100) }

    /// `7`, `1,234`: a count, grouped.
    private func wholeNumber(_ count: Int) -> String { count < 100 ? String(count) : formatCount(Double(count)) }

    /// One hot-spot window: `contexts` threads of `writer` updating for `seconds`; then
    /// checks what the store gained against what the committed saves made.
    private func hotSpotWindow(
        _ writer: HotWriter, contexts: Int, perSave: Int, stores: HotSpotStores, seconds windowSeconds: Double
    ) throws -> HotResult {
        let objects = stores.objects
        let duration = UInt64(windowSeconds * 1e9)
        let before = try stores.totals(writer.binding)
        var result = HotResult()
        let workers: [HotWorkerResult]
        let start: UInt64
        switch writer {
        case .strata(let policy):
            let coordinator = stores.strata.coordinator
            let statistics = coordinator.writeStatistics
            // Each context reads the hot objects once, before the window.
            let team = try (0..<contexts).map { index in
                let context = stores.strata.makeContext(name: "hot writer \(index)")
                context.mergePolicy = policy.mergePolicy
                let ids = try context.performAndWait { try StrataWork.registerHotObjects(count: objects, in: $0) }
                return (context, ids)
            }
            start = now()
            let deadline = start + duration
            workers = try onThreads(contexts) { index in
                let (context, ids) = team[index]
                var random = SeededRandomNumberGenerator(seed: HotSpot.seed(writer: index))
                var worker = HotWorkerResult()
                var update = 0
                while now() < deadline {
                    let picks = HotSpot.picks(perSave, of: objects, using: &random)
                    update += 1
                    let note = "writer \(index) update \(update)"
                    while true {   // until the update lands, or the window ends
                        let begin = now()
                        do {
                            try context.performAndWait { try StrataWork.hotUpdate(ids, picks: picks, writer: index, note: note, in: $0) }
                            worker.latencies.append(now() &- begin)
                            worker.saves += 1
                            break
                        } catch StrataError.Code.mergeConflicts {
                            worker.latencies.append(now() &- begin)
                            worker.failed += 1
                            context.performAndWait { $0.rollback() }
                            if now() >= deadline { break }
                        }
                    }
                }
                return worker
            }
            let after = coordinator.writeStatistics
            result.commits = after.commits - statistics.commits
            result.resolved = after.resolvedConflicts - statistics.resolvedConflicts
            let saves = workers.map(\.saves).reduce(0, +), failed = workers.map(\.failed).reduce(0, +)
            try expect(after.saves - statistics.saves, saves, "Strata writeStatistics saves in the hot-spot window (\(policy))")
            try expect(after.failedSaves - statistics.failedSaves, failed, "Strata writeStatistics failed saves in the hot-spot window (\(policy))")
            if policy == .error {
                try expect(result.resolved, 0, "Strata conflicts resolved under .error")
            } else {
                try expect(failed, 0, "Strata failed saves under \(policy)")
            }
        case .raw:
            let raw = stores.raw
            start = now()
            let deadline = start + duration
            workers = try onThreads(contexts) { index in
                var random = SeededRandomNumberGenerator(seed: HotSpot.seed(writer: index))
                var worker = HotWorkerResult()
                var update = 0
                while now() < deadline {
                    let ids = HotSpot.picks(perSave, of: objects, using: &random).map { Int64($0 + 1) }
                    update += 1
                    let begin = now()
                    try raw.hotUpdate(ids: ids, writer: index, note: "writer \(index) update \(update)")
                    worker.latencies.append(now() &- begin)
                    worker.saves += 1
                }
                return worker
            }
            result.commits = workers.map(\.saves).reduce(0, +)
        case .grdb:
            let grdb = stores.grdb
            start = now()
            let deadline = start + duration
            workers = try onThreads(contexts) { index in
                var random = SeededRandomNumberGenerator(seed: HotSpot.seed(writer: index))
                var worker = HotWorkerResult()
                var update = 0
                while now() < deadline {
                    let ids = HotSpot.picks(perSave, of: objects, using: &random).map { Int64($0 + 1) }
                    update += 1
                    let note = "writer \(index) update \(update)"
                    while true {   // until the update lands, or the window ends
                        let begin = now()
                        let rows = try grdb.hotRows(ids, writer: index)
                        let landed = try grdb.hotUpdate(rows, writer: index, note: note)
                        worker.latencies.append(now() &- begin)
                        if landed {
                            worker.saves += 1
                            break
                        }
                        worker.failed += 1
                        if now() >= deadline { break }
                    }
                }
                return worker
            }
            result.commits = workers.map(\.saves).reduce(0, +)
        }
        result.seconds = seconds(since: start)
        result.saves = workers.map(\.saves).reduce(0, +)
        result.failed = workers.map(\.failed).reduce(0, +)
        result.latencies = workers.flatMap(\.latencies).sorted()
        if result.saves == 0 { throw BenchFailure("\(writer) saved nothing in \(windowSeconds) s") }

        let after = try stores.totals(writer.binding)
        try expect(after.rows, objects, "\(writer): hot objects in the store")
        let made = Int64(result.saves * perSave)
        let counter = after.counter - before.counter
        let tallies = (0..<contexts).map { after.tallies[$0] - before.tallies[$0] }
        let madeBy = workers.map { Int64($0.saves * perSave) }
        result.counterKept = Double(counter) / Double(made)
        result.talliesKept = Double(tallies.reduce(0, +)) / Double(made)
        try checkHotSpot(writer, counter: counter, tallies: tallies, made: made, madeBy: madeBy, resolved: Int64(result.resolved))
        return result
    }

    /// Throws unless what the store gained in a window (`counter`, `tallies` per writer)
    /// fits what its committed saves made (`made` increments, `madeBy` per writer) under
    /// `writer`'s rules.
    ///
    /// What must hold: every increment lands where saves cannot lose one (raw LMDB, GRDB's
    /// and Strata's optimistic locking); a property only one writer changes keeps every
    /// increment under a merge by property; an update that did not conflict lands under
    /// every policy, so a policy that drops conflicting changes (rollback; store trump, for
    /// the counter) loses at most one increment per conflict resolved; and no store gains
    /// more than the saves made (each save writes back a value it read plus 1).
    ///
    /// Rollback loses fewer than one per conflict resolved when some conflicts are
    /// one-sided: a save that `.rollback` settles still rewrites the stored row at the next
    /// version with its values unchanged, so a writer that read the row before finds the
    /// version changed but no property it changed changed in the store. Such a conflict is
    /// counted in `resolvedConflicts`, and its changes land (one-sided changes merge under
    /// every policy).
    private func checkHotSpot(
        _ writer: HotWriter, counter: Int64, tallies: [Int64], made: Int64, madeBy: [Int64], resolved: Int64
    ) throws {
        func exactTallies() throws {
            for (index, gained) in tallies.enumerated() {
                try expect(gained, madeBy[index], "\(writer): writer \(index)'s tally increments")
            }
        }
        func boundedTallies() throws {
            for (index, gained) in tallies.enumerated() where gained < 0 || gained > madeBy[index] {
                throw BenchFailure("\(writer): writer \(index)'s tallies gained \(gained), outside 0...\(madeBy[index])")
            }
        }
        func counterWithin(_ range: ClosedRange<Int64>) throws {
            if !range.contains(counter) {
                throw BenchFailure("\(writer): the counters gained \(counter), outside \(range) (\(made) increments saved, \(resolved) conflicts resolved)")
            }
        }
        switch writer {
        case .raw, .grdb, .strata(.error):
            try expect(counter, made, "\(writer): counter increments (one per committed change)")
            try exactTallies()
        case .strata(.mergeByPropertyStoreTrump):
            try counterWithin(max(1, made - resolved)...made)
            try exactTallies()
        case .strata(.mergeByPropertyObjectTrump):
            try counterWithin(1...made)
            try exactTallies()
        case .strata(.overwrite):
            try counterWithin(1...made)
            try boundedTallies()
        case .strata(.rollback):
            try counterWithin(max(1, made - resolved)...made)
            let tallySum = tallies.reduce(0, +)
            if tallySum < made - resolved || tallySum > made {
                throw BenchFailure("\(writer): the tallies gained \(tallySum), outside \(made - resolved)...\(made) (\(made) increments saved, \(resolved) conflicts resolved)")
            }
            try boundedTallies()
        }
    }
}
