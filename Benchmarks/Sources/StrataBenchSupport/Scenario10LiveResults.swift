import Foundation
import GRDB
import Strata
import Synchronization

extension BenchRun {
    /// Scenario 10 (issue 25): what a change costs when 100 live observers watch
    /// different requests. Strata's `context.results(for:)` against GRDB's
    /// `ValueObservation`, each observer watching the one item of its `rank`
    /// (`rank == j`, j < 100) and reading its score, in stores of 10,000 items.
    ///
    /// - One change that affects one observer: a save updating the score of an observed
    ///   item; the next save waits until that observer has the new value. Measured: the
    ///   process's CPU time per change (the save, the observers' checks, the re-fetch and
    ///   the delivery; every thread), and the delay from the save's start to the delivery.
    /// - One change that affects none: the score of an item no observer watches.
    /// - The same saves with no observer, in the same run: the baseline both are read against.
    func runLiveResults() throws {
        let observers = 100, changes = config.quick ? 100 : 400, items = 10_000
        log("Scenario 10: live results, \(observers) observers, \(changes) changes...")
        let records = Dataset(count: items).records.enumerated().map { index, record in
            var record = record
            record.rank = Int64(index)   // rank j is item j: observer j watches one item
            return record
        }
        var rows: [Binding: LiveFigures] = [:]
        try withDirectory("live-strata") { directory in
            let path = directory.path
            let store = try waitFor { try await StrataStore.open(at: path, durability: .noSync) }
            try store.makeContext().performAndWait { try StrataWork.importRecords(records, in: $0) }
            rows[.strata] = try measureStrataLive(store, observers: observers, changes: changes)
        }
        try withDirectory("live-grdb") { directory in
            let store = try GRDBStore(directory: directory.path, sync: false)
            try store.insert(records)
            rows[.grdb] = try measureGRDBLive(store, observers: observers, changes: changes)
        }
        guard let strata = rows[.strata], let grdb = rows[.grdb] else { return }
        func ms(_ seconds: Double) -> String { String(format: "%.3f ms", seconds * 1000) }
        report.add(ReportRow(
            "10 · a change one of 100 live observers watches: CPU time per change",
            [.strata: .time(strata.affectedCPU), .grdb: .time(grdb.affectedCPU)],
            note: "with no observer: Strata \(ms(strata.baselineCPU)), GRDB \(ms(grdb.baselineCPU)); "
                + String(format: "the observers add Strata %@, GRDB %@", ms(strata.affectedCPU - strata.baselineCPU), ms(grdb.affectedCPU - grdb.baselineCPU))))
        report.add(ReportRow(
            "10 · a change no live observer watches (100 observing): CPU time per change",
            [.strata: .time(strata.unaffectedCPU), .grdb: .time(grdb.unaffectedCPU)],
            note: "with no observer: Strata \(ms(strata.baselineCPU)), GRDB \(ms(grdb.baselineCPU)); re-fetches per change: "
                + String(format: "Strata %.2f, GRDB %.2f", strata.unaffectedFetches, grdb.unaffectedFetches)))
        report.add(ReportRow(
            "10 · save start → the affected observer has the new value (p50)",
            [.strata: .time(strata.latencyP50), .grdb: .time(grdb.latencyP50)],
            note: "p99: Strata \(ms(strata.latencyP99)), GRDB \(ms(grdb.latencyP99))"))
    }
}

/// One binding's figures for scenario 10.
struct LiveFigures {
    var baselineCPU = 0.0
    var affectedCPU = 0.0
    var unaffectedCPU = 0.0
    /// Observer fetches per unaffected change (0 when observers tell at once).
    var unaffectedFetches = 0.0
    var latencyP50 = 0.0
    var latencyP99 = 0.0
}

/// What the observers received: the latest score per observer, and how many values
/// (fetches) they took.
// @unchecked Sendable because `state` is only touched with `lock` held.
final class LiveLog: @unchecked Sendable {
    private let lock = NSLock()
    private var state = (scores: [Int: Double](), deliveries: 0, times: [Int: UInt64]())

    func deliver(_ observer: Int, _ score: Double) {
        let now = DispatchTime.now().uptimeNanoseconds
        lock.withLock {
            state.scores[observer] = score
            state.times[observer] = now
            state.deliveries += 1
        }
    }

    var deliveries: Int { lock.withLock { state.deliveries } }

    /// Waits until `observer` holds `score`; returns when it arrived (uptime ns).
    func wait(for observer: Int, score: Double, timeout: Double = 30) throws -> UInt64 {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let (held, time) = lock.withLock { (state.scores[observer], state.times[observer]) }
            if held == score, let time { return time }
            guard Date() < deadline else { throw LiveTimeout(description: "observer \(observer) never saw score \(score) (holds \(held.map { "\($0)" } ?? "nothing"))") }
            usleep(50)
        }
    }

    func waitForAll(_ count: Int, timeout: Double = 60) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while lock.withLock({ state.scores.count }) < count {
            guard Date() < deadline else { throw LiveTimeout(description: "only \(lock.withLock { state.scores.count }) of \(count) observers started") }
            usleep(200)
        }
    }
}

/// An observer that did not see a change in time.
struct LiveTimeout: Error, CustomStringConvertible {
    let description: String
}

/// The process's CPU time (user + system) so far, in seconds.
func processCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

extension BenchRun {
    /// Strata's part of scenario 10.
    private func measureStrataLive(_ store: StrataStore, observers: Int, changes: Int) throws -> LiveFigures {
        let writer = store.makeContext(name: "writer")
        let ids = try writer.performAndWait { context in
            var request = FetchRequest<Item>()
            request.sortDescriptors = [FetchSortDescriptor(key: "rank")]
            request.fetchLimit = 2_000
            return try context.fetch(request).map(\.objectID)
        }
        var score = 1_000_000.0
        func change(_ index: Int) throws {
            score += 1
            let value = score
            try writer.performAndWait { context in
                (try context.existingObject(with: ids[index]) as? Item)?.score = value
                try context.save()
                context.reset()
            }
        }
        var figures = LiveFigures()
        // Baseline: no observer.
        var start = processCPUSeconds()
        for index in 0..<changes { try change(index % observers) }
        figures.baselineCPU = (processCPUSeconds() - start) / Double(changes)

        let log = LiveLog()
        let tasks = (0..<observers).map { observer in
            let context = store.makeContext(name: "observer")
            var request = FetchRequest<Item>()
            request.predicate = try? FetchPredicate(format: "rank == %d", observer)
            return Task {
                for try await snapshot in context.results(for: request, transform: { $0.score }) {
                    log.deliver(observer, snapshot.elements.first ?? -1)
                }
            }
        }
        defer { for task in tasks { task.cancel() } }
        try log.waitForAll(observers)
        var delays: [UInt64] = []
        start = processCPUSeconds()
        for index in 0..<changes {
            let began = DispatchTime.now().uptimeNanoseconds
            try change(index % observers)
            let arrived = try log.wait(for: index % observers, score: score)
            delays.append(arrived &- began)
        }
        figures.affectedCPU = (processCPUSeconds() - start) / Double(changes)
        let before = log.deliveries
        start = processCPUSeconds()
        for index in 0..<changes { try change(1_000 + index) }
        Thread.sleep(forTimeInterval: 0.05)   // anything an observer would do has happened
        figures.unaffectedCPU = (processCPUSeconds() - start) / Double(changes)
        // Strata's observers deliver a snapshot per fetch that changed something, and fetch
        // nothing for these: deliveries stay as they were.
        figures.unaffectedFetches = Double(log.deliveries - before) / Double(changes)
        delays.sort()
        figures.latencyP50 = Double(percentile(delays, 0.5)) / 1e9
        figures.latencyP99 = Double(percentile(delays, 0.99)) / 1e9
        return figures
    }

    /// GRDB's part of scenario 10: `ValueObservation`s of `SELECT score FROM item WHERE rank = ?`,
    /// scheduled on a dispatch queue each.
    private func measureGRDBLive(_ store: GRDBStore, observers: Int, changes: Int) throws -> LiveFigures {
        var score = 1_000_000.0
        func change(_ rank: Int) throws {
            score += 1
            let value = score
            try store.pool.write { db in
                try db.execute(sql: "UPDATE item SET score = ? WHERE rank = ?", arguments: [value, rank])
            }
        }
        var figures = LiveFigures()
        var start = processCPUSeconds()
        for index in 0..<changes { try change(index % observers) }
        figures.baselineCPU = (processCPUSeconds() - start) / Double(changes)

        let log = LiveLog()
        let fetches = Atomic(0)
        var cancellables: [AnyDatabaseCancellable] = []
        for observer in 0..<observers {
            // Every fetch counted (GRDB re-fetches an observation whose region a write touched).
            let observation = ValueObservation.tracking { db -> Double? in
                fetches.add(1, ordering: .relaxed)
                return try Double.fetchOne(db, sql: "SELECT score FROM item WHERE rank = ?", arguments: [observer])
            }.removeDuplicates()
            let queue = DispatchQueue(label: "grdb.observer.\(observer)")
            cancellables.append(observation.start(
                in: store.pool, scheduling: .async(onQueue: queue),
                onError: { error in FileHandle.standardError.write(Data("GRDB observation failed: \(error)\n".utf8)) },
                onChange: { value in log.deliver(observer, value ?? -1) }))
        }
        defer { for cancellable in cancellables { cancellable.cancel() } }
        try log.waitForAll(observers)
        var delays: [UInt64] = []
        start = processCPUSeconds()
        for index in 0..<changes {
            let began = DispatchTime.now().uptimeNanoseconds
            try change(index % observers)
            let arrived = try log.wait(for: index % observers, score: score)
            delays.append(arrived &- began)
        }
        figures.affectedCPU = (processCPUSeconds() - start) / Double(changes)
        Thread.sleep(forTimeInterval: 0.2)   // the last change's re-fetches settle
        let before = fetches.load(ordering: .relaxed)
        start = processCPUSeconds()
        for index in 0..<changes { try change(1_000 + index) }
        // GRDB's observers re-fetch after each write on their queues: wait until they stop.
        var settled = fetches.load(ordering: .relaxed)
        repeat {
            settled = fetches.load(ordering: .relaxed)
            Thread.sleep(forTimeInterval: 0.05)
        } while fetches.load(ordering: .relaxed) != settled
        figures.unaffectedCPU = (processCPUSeconds() - start) / Double(changes)
        figures.unaffectedFetches = Double(settled - before) / Double(changes)
        delays.sort()
        figures.latencyP50 = Double(percentile(delays, 0.5)) / 1e9
        figures.latencyP99 = Double(percentile(delays, 0.99)) / 1e9
        return figures
    }
}
