import Foundation
import GRDB
import Strata

extension BenchRun {
    /// What one readers window measured.
    struct ReadersResult {
        /// Queries all readers completed.
        var queries = 0
        var seconds = 0.0
        /// Objects the writer saved in the window (0 when idle).
        var written = 0
        /// CPU seconds the writer's thread used.
        var writerCPU = 0.0

        var queriesPerSecond: Double { Double(queries) / seconds }
        var writtenPerSecond: Double { Double(written) / seconds }
    }

    /// The writer's state per binding: where its next objects' ids and ranks start.
    private final class WriterCursor {
        var next: [Binding: Int64] = [:]
    }

    /// Scenario 5: ``BenchConfig/readers`` reader contexts (threads) each running the 1%
    /// range query (scenario 3's) over and over for a fixed time, first with nothing else
    /// running (idle), then while one writer context imports ``BenchConfig/writerBatch``
    /// new objects per save every ``BenchConfig/writerInterval`` seconds (sync off; new
    /// objects have ranks above the readers' ranges, so every query keeps returning
    /// exactly n/100 objects). Reports queries/s and the ratio under a writer / idle; then
    /// the same with readers pinned to a query generation (raw: one long read
    /// transaction per reader; GRDB: a `DatabaseSnapshot` per reader).
    func runReaders() throws {
        let stores = try stores()
        let n = stores.dataset.count
        let readers = config.readers
        log("Scenario 5: \(readers) readers under a writer, \(config.readerSeconds) s per window...")
        let cursor = WriterCursor()
        for binding in Binding.allCases { cursor.next[binding] = Int64(n) }
        let perSecond = Double(config.writerBatch) / config.writerInterval
        let writerText = "\(formatCount(Double(config.writerBatch))) objects/save every \(formatSeconds(config.writerInterval))"
        var window = 0
        for pinned in [false, true] {
            var idle: [Binding: ReadersResult] = [:], busy: [Binding: ReadersResult] = [:]
            for binding in Binding.order(round: window) {
                let order = window % 2 == 0 ? [false, true] : [true, false]
                for withWriter in order {
                    let result = try readersWindow(binding, pinned: pinned, withWriter: withWriter, stores: stores, cursor: cursor)
                    if withWriter { busy[binding] = result } else { idle[binding] = result }
                }
                window += 1
            }
            let label = pinned ? "pinned readers" : "readers"
            let kind = pinned ? " (raw: long read txn; GRDB: DatabaseSnapshot)" : ""
            func rates(_ results: [Binding: ReadersResult]) -> [Binding: Measure] {
                results.mapValues { Measure.rate($0.queriesPerSecond, "q/s") }
            }
            report.add(ReportRow("5 · \(readers) \(label), 1% query, idle: queries/s\(kind)", rates(idle)))
            report.add(ReportRow(
                "5 · \(readers) \(label), 1% query, under a writer (\(writerText)): queries/s", rates(busy),
                note: "objects written/s: " + Binding.allCases.map { "\($0.rawValue) \(formatCount(busy[$0]!.writtenPerSecond))" }
                    .joined(separator: ", ") + " (asked: \(formatCount(perSecond))); the writer thread's CPU: "
                    + Binding.allCases.map { "\($0.rawValue) \(Int((busy[$0]!.writerCPU / busy[$0]!.seconds * 100).rounded()))%" }
                    .joined(separator: ", ") + " of a core"))
            let ratios = Dictionary(uniqueKeysWithValues: Binding.allCases.map { ($0, busy[$0]!.queriesPerSecond / idle[$0]!.queriesPerSecond) })
            report.add(ReportRow(
                "5 · \(label): throughput under a writer / idle",
                ratios.mapValues(Measure.ratio),
                target: Target(String(format: "Strata ≥ 0.9 (%.2f)", ratios[.strata]!), met: ratios[.strata]! >= 0.9)))
        }
        report.notes.append(
            "Scenario 5 runs \(readers) reader threads and a writer thread on \(ProcessInfo.processInfo.activeProcessorCount) cores: "
                + "whatever CPU the writer uses is taken from the readers, so the raw LMDB ratio is the physical limit of this machine.")
    }

    /// One window of `binding`'s readers, with or without the writer.
    private func readersWindow(
        _ binding: Binding, pinned: Bool, withWriter: Bool, stores: PopulatedStores, cursor: WriterCursor
    ) throws -> ReadersResult {
        let n = stores.dataset.count
        let readers = config.readers
        let queries = RangeQueries(storeCount: n, queries: 1)
        let width = queries.width, expectedCount = queries.expectedCount()
        let batch = config.writerBatch
        let interval = UInt64(config.writerInterval * 1e9)
        let duration = UInt64(config.readerSeconds * 1e9)
        // The writer's batches, made before the window (enough for a writer on time).
        let first = cursor.next[binding]!
        let batches: [[BenchRecord]] = withWriter
            ? (0..<(Int(config.readerSeconds / config.writerInterval) + 2)).map { index in
                let start = first + Int64(index * batch)
                return Dataset.appended(count: batch, firstID: start + 1, firstRank: start, seed: UInt64(start))
            }
            : []
        // Each reader's ranges: its own seeded sequence.
        let lowers: [[Int64]] = (0..<readers).map { reader in
            RangeQueries(storeCount: n, queries: 512, seed: 0xBEEF &+ UInt64(reader)).lowers
        }

        // Per-binding readers and writer, made before the window starts.
        let read: @Sendable (Int, Int64) throws -> Void
        let write: @Sendable ([BenchRecord]) throws -> Void
        var cleanup: () -> Void = {}
        switch binding {
        case .strata:
            let contexts = (0..<readers).map { stores.strata.makeContext(name: "reader \($0)") }
            if pinned {
                for context in contexts { try context.performAndWait { try $0.setQueryGenerationFrom(.current) } }
            }
            read = { reader, lower in
                _ = try contexts[reader].performAndWait { context in
                    try StrataWork.rangeQuery(lower: lower, width: width, limit: 0, expectedCount: expectedCount, in: context)
                }
            }
            let writer = stores.strata.makeContext(name: "writer")
            write = { records in try writer.performAndWait { try StrataWork.insertBatch(records, in: $0) } }
        case .raw:
            let raw = stores.raw
            let snapshots = SnapshotBox()
            read = { reader, lower in
                // A pinned reader opens its long transaction on its own thread, at its first query.
                let snapshot = pinned ? try snapshots.snapshot(for: reader, of: raw) : nil
                let records = try raw.range(lower: lower, upper: lower + width, limit: 0, in: snapshot)
                _ = try checkRange(records, lower: lower, expectedCount: expectedCount, "raw")
            }
            write = { records in try raw.insert(records) }
            cleanup = { snapshots.closeAll() }
        case .grdb:
            let grdb = stores.grdb
            let snapshots = pinned ? try (0..<readers).map { _ in try grdb.pool.makeSnapshot() } : []
            read = { reader, lower in
                let records = pinned
                    ? try snapshots[reader].read { db in try GRDBStore.range(db, lower: lower, upper: lower + width, limit: 0) }
                    : try grdb.range(lower: lower, upper: lower + width, limit: 0)
                _ = try checkRange(records, lower: lower, expectedCount: expectedCount, "GRDB")
            }
            write = { records in try grdb.insert(records) }
        }
        defer { cleanup() }

        let start = now()
        let deadline = start + duration
        let counts = try onThreads(readers + (withWriter ? 1 : 0)) { index -> (done: Int, cpu: Double) in
            if index == readers {
                // The writer: a batch per interval, flat out when it falls behind.
                let cpu = threadCPUSeconds()
                var saved = 0
                while now() < deadline && saved < batches.count {
                    try write(batches[saved])
                    saved += 1
                    let due = start + UInt64(saved) * interval
                    let current = now()
                    if due > current && due < deadline { usleep(UInt32((due - current) / 1000)) }
                }
                return (saved, threadCPUSeconds() - cpu)
            }
            var done = 0
            let mine = lowers[index]
            while now() < deadline {
                try read(index, mine[done % mine.count])
                done += 1
            }
            return (done, 0)
        }
        var result = ReadersResult()
        result.seconds = seconds(since: start)
        result.queries = counts.prefix(readers).map(\.done).reduce(0, +)
        if withWriter {
            result.written = counts[readers].done * batch
            result.writerCPU = counts[readers].cpu
            cursor.next[binding]! += Int64(result.written)
            if result.written == 0 { throw BenchFailure("\(binding.rawValue) writer saved nothing") }
        }
        if result.queries == 0 { throw BenchFailure("\(binding.rawValue) readers completed no query") }
        return result
    }
}

/// Raw LMDB pinned readers' long transactions, one per reader, each opened and used by its
/// reader's thread only.
// @unchecked Sendable because each slot is touched by one reader thread, and closeAll runs
// after every reader thread has finished.
private final class SnapshotBox: @unchecked Sendable {
    private var snapshots: [Int: RawSnapshot] = [:]
    private let lock = NSLock()

    func snapshot(for reader: Int, of store: RawStore) throws -> RawSnapshot {
        if let existing = lock.withLock({ snapshots[reader] }) { return existing }
        let snapshot = try store.makeSnapshot()
        lock.withLock { snapshots[reader] = snapshot }
        return snapshot
    }

    func closeAll() {
        lock.withLock {
            for snapshot in snapshots.values { snapshot.close() }
            snapshots = [:]
        }
    }
}
