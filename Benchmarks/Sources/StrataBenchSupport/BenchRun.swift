import Foundation
import Strata

/// One run of the scenarios: measures them through the three bindings and fills
/// ``report``. Runs on one thread (the runner's main thread); scenarios that need
/// concurrency start their own threads.
public final class BenchRun {
    public let config: BenchConfig
    public let report = Report()
    /// Progress, one line at a time (the runner prints it to standard error).
    let log: (String) -> Void
    /// Measures peak memory in a child process; nil to skip those rows.
    let probe: ((MemoryProbe.Request) throws -> MemoryProbe.Outcome)?
    private var populated: PopulatedStores?

    public init(
        config: BenchConfig, log: @escaping (String) -> Void,
        probe: ((MemoryProbe.Request) throws -> MemoryProbe.Outcome)?
    ) {
        self.config = config
        self.log = log
        self.probe = probe
    }

    /// Runs every selected scenario, in an order that keeps the shared stores valid:
    /// the scenarios that check whole-store contents (2, 3) read them before 5 adds
    /// objects and 6 changes scores. Scenario 7 makes stores of its own.
    public func run() throws {
        if config.runs(1) { try runBulkImport() }
        if config.runs(2) { try runFetchAll() }
        if config.runs(3) { try runIndexedQueries() }
        if config.runs(4, "write contention") { try runContention() }
        if config.runs(4, "write contention, hot spot") { try runHotSpot() }
        if config.runs(4, "write contention, history") { try runHistoryCost() }
        if config.runs(5) { try runReaders() }
        if config.runs(6) { try runParentChild() }
        if config.runs(7) { try runUpserts() }
        if config.runs(8) { try runMigration() }
        if config.runs(9, "batch requests") { try runBatchRequests() }
        if config.runs(9, "batch requests, remote-change watch") { try runWatchCost() }
        if config.runs(10) { try runLiveResults() }
        if config.runs(11) { try runAggregate() }
        populated = nil
    }

    /// The shared populated stores, made at first use.
    func stores() throws -> PopulatedStores {
        if let populated { return populated }
        log("Filling a store of \(config.storeSize) objects per binding (not measured)...")
        let stores = try PopulatedStores(dataset: Dataset(count: config.storeSize), log: log)
        populated = stores
        return stores
    }

    /// Measures each of `keys` for one warm-up round and ``BenchConfig/rounds`` measured
    /// ones, the order reversed every other round; `body(key, round)` does one run and
    /// returns its measured seconds. Returns the median per key.
    func medians<Key: Hashable>(
        _ what: String, _ keys: [Key], _ body: (Key, Int) throws -> Double
    ) throws -> [Key: Double] {
        var times: [Key: [Double]] = [:]
        for round in 0...config.rounds {
            for key in round % 2 == 0 ? keys : keys.reversed() {
                let seconds = try body(key, round)
                if round > 0 { times[key, default: []].append(seconds) }
            }
        }
        log("  \(what): done")
        return times.mapValues(median)
    }

    /// `body` with a fresh store directory that lives until `body` returns.
    func withDirectory<T>(_ name: String, _ body: (StoreDirectory) throws -> T) rethrows -> T {
        let directory = StoreDirectory(name)
        return try withExtendedLifetime(directory) { try body(directory) }
    }
}

/// A row a range query returns: a record, or Strata's `Item`.
protocol RankedRow {
    /// The indexed attribute.
    var rank: Int64 { get }
    /// Every attribute read, summed.
    var checksum: Int64 { get }
}

extension BenchRecord: RankedRow {}

/// Checks a range query's result (count, rank order from `lower`) and returns its
/// checksum, every attribute touched.
func checkRange<Row: RankedRow>(_ rows: [Row], lower: Int64, expectedCount: Int, _ who: String) throws -> Int64 {
    try expect(rows.count, expectedCount, "\(who) range query from \(lower) count")
    var checksum: Int64 = 0
    var rank = lower
    for row in rows {
        if row.rank != rank { throw BenchFailure("\(who) range query: rank \(row.rank) where \(rank) was due") }
        rank += 1
        checksum &+= row.checksum
    }
    return checksum
}
