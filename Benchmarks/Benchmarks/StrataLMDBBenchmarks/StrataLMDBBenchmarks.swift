import Benchmark
import LMDBBenchSupport

// Every scenario twice, `<scenario> · StrataLMDB` and `<scenario> · raw C`, one after the
// other in the same run. The scenarios and their setup live in LMDBBenchSupport, shared
// with `lmdb-ratios`, so both bindings do exactly the same work.

/// The state the benchmarks share: the workload (built once) and the runner holding the
/// populated read stores.
final class Suite: @unchecked Sendable {
    // @unchecked Sendable because the benchmark driver runs setup, iterations and teardown
    // of one benchmark at a time, on one thread.
    private var cachedRunner: ScenarioRunner?

    var runner: ScenarioRunner {
        if let cachedRunner { return cachedRunner }
        let runner = ScenarioRunner(workload: Workload())
        cachedRunner = runner
        return runner
    }
}

let benchmarks: @Sendable () -> Void = {
    let suite = Suite()

    /// Synced commits per second (the sync-commit scenario times a batch of 10,000, so
    /// the built-in throughput would read 0 per second).
    let commitsPerSecond = BenchmarkMetric.custom("Commits / s", polarity: .prefersLarger, useScalingFactor: false)

    for scenario in Scenario.allCases {
        let sync = scenario == .syncCommits
        // The 1M-operation scenarios report per operation (scaling .mega); the sync-commit
        // scenario reports per batch of 10,000 commits (scaling .one) plus commits per second.
        let metrics: [BenchmarkMetric] =
            sync
            ? [.wallClock, commitsPerSecond, .cpuTotal, .mallocCountTotal]
            : [.wallClock, .throughput, .cpuTotal, .mallocCountTotal]
        let configuration = Benchmark.Configuration(
            metrics: metrics,
            timeUnits: sync ? .milliseconds : .nanoseconds,
            warmupIterations: sync ? 0 : 1,
            scalingFactor: sync ? .one : .mega,
            maxDuration: .seconds(sync ? 12 : 8),
            maxIterations: sync ? 2 : 5,
            // No regression thresholds: on 2 shared cores the run-to-run noise is far above
            // the default 5%. Compare the bindings with `lmdb-ratios` instead.
            thresholds: Dictionary(uniqueKeysWithValues: metrics.map { ($0, BenchmarkThresholds()) })
        )
        for binding in Binding.allCases {
            Benchmark("\(scenario.benchmarkName) · \(binding.rawValue)", configuration: configuration) { benchmark in
                var started: UInt64 = 0
                var stopped: UInt64 = 0
                try suite.runner.run(
                    scenario, binding,
                    stopwatch: Stopwatch(
                        start: {
                            benchmark.startMeasurement()
                            started = monotonicNanoseconds()
                        },
                        stop: {
                            stopped = monotonicNanoseconds()
                            benchmark.stopMeasurement()
                        }))
                if sync, stopped > started {
                    let commits = Double(suite.runner.workload.syncCommitCount)
                    benchmark.measurement(commitsPerSecond, Int(commits * 1e9 / Double(stopped - started)))
                }
            } setup: {
                if !scenario.writesToEmptyStore { try suite.runner.prepareReadStore(for: binding) }
            } teardown: {
                suite.runner.releaseReadStore(for: binding)
            }
        }
    }
}
