import Benchmark
import Strata
import StrataBenchSupport

// The Strata scenarios of `strata-bench`, small, in the ordo-one/benchmark suite: Strata
// only (the baselines and the ratios are `strata-bench`'s job). The work inside each
// context is StrataBenchSupport's `StrataWork`, the same calls `strata-bench` times; here
// they run through `await context.perform`, so no cooperative-pool thread ever blocks.

/// The objects of the read benchmarks' store.
let storeSize = 10_000
/// Objects per bulk import.
let importSize = 10_000

/// The state the benchmarks share: the read store, made once.
final class Suite: @unchecked Sendable {
    // @unchecked Sendable because the benchmark driver runs setup, iterations and teardown
    // of one benchmark at a time.
    let dataset = Dataset(count: storeSize)
    private var directory: StoreDirectory?
    private var cachedStore: StrataStore?

    /// The store of ``dataset`` (sync off), filled at first use.
    func store() async throws -> StrataStore {
        if let cachedStore { return cachedStore }
        let directory = StoreDirectory("suite")
        let store = try await StrataStore.open(at: directory.appending("store"), durability: .noSync)
        let records = dataset.records
        try await store.makeContext().perform { try StrataWork.importRecords(records, in: $0) }
        self.directory = directory
        cachedStore = store
        return store
    }

    /// Closes the store and removes its directory.
    func release() {
        cachedStore = nil
        directory = nil
    }
}

let benchmarks: @Sendable () -> Void = {
    let suite = Suite()
    let metrics: [BenchmarkMetric] = [.wallClock, .throughput, .cpuTotal, .mallocCountTotal]
    let configuration = Benchmark.Configuration(
        metrics: metrics,
        timeUnits: .milliseconds,
        warmupIterations: 1,
        maxDuration: .seconds(3),
        maxIterations: 20,
        // No regression thresholds: run-to-run noise on 2 shared cores is far above 5%.
        thresholds: Dictionary(uniqueKeysWithValues: metrics.map { ($0, BenchmarkThresholds()) }))
    let queries = RangeQueries(storeCount: storeSize, queries: 10)

    Benchmark("Strata · bulk import 10K, one save", configuration: configuration) { benchmark in
        let directory = StoreDirectory("import")
        let store = try await StrataStore.open(at: directory.appending("store"), durability: .noSync)
        let records = suite.dataset.records
        let context = store.makeContext()
        benchmark.startMeasurement()
        try await context.perform { try StrataWork.importRecords(records, in: $0) }
        benchmark.stopMeasurement()
        try expect(try await context.perform { try StrataWork.count(in: $0) }, importSize, "imported count")
        withExtendedLifetime(directory) {}
    }

    Benchmark("Strata · fetch all 10K, fully realised", configuration: configuration) { benchmark in
        let store = try await suite.store()
        let context = store.makeContext()
        benchmark.startMeasurement()
        let result = try await context.perform { try StrataWork.fetchAllRealised(in: $0) }
        benchmark.stopMeasurement()
        try expect(result.checksum, suite.dataset.checksum, "fetch all checksum")
    } teardown: {
        suite.release()
    }

    Benchmark("Strata · fetch all 10K as faults, fetchBatchSize 1000", configuration: configuration) { benchmark in
        let store = try await suite.store()
        let context = store.makeContext()
        benchmark.startMeasurement()
        let result = try await context.perform { try StrataWork.fetchAllBatched(batchSize: 1000, in: $0) }
        benchmark.stopMeasurement()
        try expect(result.checksum, suite.dataset.checksum, "batched fetch checksum")
    } teardown: {
        suite.release()
    }

    for limit in [0, 20] {
        let name = limit == 0 ? "Strata · 10 × 1% range query (100 of 10K), sorted" : "Strata · 10 × range query, fetchLimit 20"
        Benchmark(name, configuration: configuration) { benchmark in
            let store = try await suite.store()
            let context = store.makeContext()
            let width = queries.width, expectedCount = queries.expectedCount(limit: limit)
            benchmark.startMeasurement()
            for lower in queries.lowers {
                _ = try await context.perform { context in
                    try StrataWork.rangeQuery(lower: lower, width: width, limit: limit, expectedCount: expectedCount, in: context)
                }
            }
            benchmark.stopMeasurement()
        } teardown: {
            suite.release()
        }
    }

    Benchmark("Strata · 100 saves of 1 changed object (sync off)", configuration: configuration) { benchmark in
        let store = try await suite.store()
        let context = store.makeContext()
        let ids = try await context.perform { try StrataWork.registerItems(lower: 0, upper: 100, in: $0) }
        let before = try await context.perform { try StrataWork.scoreSum(lower: 0, upper: 100, in: $0) }
        benchmark.startMeasurement()
        for index in 0..<100 {
            try await context.perform { try StrataWork.bumpAndSave(ids, start: index, count: 1, in: $0) }
        }
        benchmark.stopMeasurement()
        let after = try await store.makeContext().perform { try StrataWork.scoreSum(lower: 0, upper: 100, in: $0) }
        try expect(after - before, 100, "score added by 100 saves")
    } teardown: {
        suite.release()
    }

    Benchmark("Strata · 1K updates saved up a chain of depth 2", configuration: configuration) { benchmark in
        let store = try await suite.store()
        let root = store.makeContext(name: "root")
        let middle = ManagedObjectContext(.privateQueue, parent: root, name: "middle")
        let leaf = ManagedObjectContext(.privateQueue, parent: middle, name: "leaf")
        let marker = -Double(benchmark.currentIteration + 1)
        let changed = try await leaf.perform { try StrataWork.setScores(lower: 2000, upper: 3000, to: marker, in: $0) }
        try expect(changed, 1000, "objects changed in the leaf")
        benchmark.startMeasurement()
        for context in [leaf, middle, root] {
            try await context.perform { try $0.save() }
        }
        benchmark.stopMeasurement()
        let saved = try await store.makeContext().perform { try StrataWork.allScores(lower: 2000, upper: 3000, equal: marker, in: $0) }
        if !saved { throw BenchFailure("the chain's changes did not reach the store") }
    } teardown: {
        suite.release()
    }
}
