import StrataLMDB

/// Runs a ``Scenario`` through one ``Binding``, measuring only the scenario's own work.
///
/// - Write scenarios get a fresh, empty store in a new temporary directory every run: the
///   environment is opened before the stopwatch starts, and closed and the directory
///   removed after it stops.
/// - Read scenarios share one pre-populated store per binding (1M entries appended in key
///   order through the C API, so both bindings read byte-identical files), opened once by
///   ``prepareReadStore(for:)`` and removed by ``releaseReadStore(for:)``.
///
/// Durability: the 1M-entry scenarios use `MDB_NOSYNC` / `.noSync` (the commit writes its
/// pages but does not fsync ~100 MB); the sync-commit scenario uses no flag / `.sync`.
public final class ScenarioRunner: @unchecked Sendable {
    // @unchecked Sendable because a runner is used by one thread at a time (the benchmark
    // driver and lmdb-ratios both run scenarios sequentially).

    public let workload: Workload

    private var strataReadStore: (directory: TemporaryDirectory, store: StrataPath.Store)?
    private var rawReadStore: (directory: TemporaryDirectory, store: RawPath.Store)?

    public init(workload: Workload) {
        self.workload = workload
    }

    deinit {
        releaseReadStore(for: .strata)
        releaseReadStore(for: .raw)
    }

    /// Builds and opens the populated store `binding` reads (once; later calls do nothing).
    public func prepareReadStore(for binding: Binding) throws {
        switch binding {
        case .strata:
            guard strataReadStore == nil else { return }
            let directory = try TemporaryDirectory(prefix: "strata-bench-read-strata")
            do {
                try RawPath.populate(at: directory.path, keys: workload.ordered, value: workload.value)
                strataReadStore = (directory, try StrataPath.open(at: directory.path, durability: .noSync))
            } catch {
                directory.remove()
                throw error
            }
        case .raw:
            guard rawReadStore == nil else { return }
            let directory = try TemporaryDirectory(prefix: "strata-bench-read-raw")
            do {
                try RawPath.populate(at: directory.path, keys: workload.ordered, value: workload.value)
                rawReadStore = (directory, try RawPath.open(at: directory.path, sync: false))
            } catch {
                directory.remove()
                throw error
            }
        }
    }

    /// Closes and removes the populated store of `binding`.
    public func releaseReadStore(for binding: Binding) {
        switch binding {
        case .strata:
            guard let (directory, _) = strataReadStore else { return }
            strataReadStore = nil  // the last reference: the environment closes here
            directory.remove()
        case .raw:
            guard let (directory, _) = rawReadStore else { return }
            rawReadStore = nil
            directory.remove()
        }
    }

    /// Runs `scenario` once through `binding`; `stopwatch` brackets the measured work.
    /// Throws when the result is not what the workload must produce.
    public func run(_ scenario: Scenario, _ binding: Binding, stopwatch: Stopwatch) throws {
        if scenario.writesToEmptyStore {
            try runWrite(scenario, binding, stopwatch: stopwatch)
        } else {
            try runRead(scenario, binding, stopwatch: stopwatch)
        }
    }

    /// The sync-commit scenario with both bindings at once: two empty stores, and commit
    /// `i` of StrataLMDB and commit `i` of the C API back to back (alternating which goes
    /// first), each timed on its own. Returns the summed seconds per binding.
    ///
    /// A synced commit costs what the disk's flush costs at that moment, which drifts by
    /// several times over a few seconds on a shared virtual disk; interleaving commit by
    /// commit puts both bindings under the same drift, where back-to-back batches do not.
    public func runSyncCommitsInterleaved() throws -> (strata: Double, raw: Double) {
        let strataDirectory = try TemporaryDirectory()
        defer { strataDirectory.remove() }
        let rawDirectory = try TemporaryDirectory()
        defer { rawDirectory.remove() }
        let keys = UnsafeBufferPointer(rebasing: workload.shuffled[0..<workload.syncCommitCount])
        let value = workload.value
        var strataNanoseconds: UInt64 = 0
        var rawNanoseconds: UInt64 = 0
        let (strataCount, rawCount) = try {
            let strata = try StrataPath.open(at: strataDirectory.path, durability: .sync)
            let raw = try RawPath.open(at: rawDirectory.path, sync: true)
            let base = UnsafeRawPointer(keys.baseAddress!)
            for index in 0..<keys.count {
                let key = UnsafeRawBufferPointer(start: base + index &* Workload.keySize, count: Workload.keySize)
                if index & 1 == 0 {
                    let t0 = monotonicNanoseconds()
                    try StrataPath.putOne(strata, key: key, value: value)
                    let t1 = monotonicNanoseconds()
                    try RawPath.putOne(raw, key: key, value: value)
                    let t2 = monotonicNanoseconds()
                    strataNanoseconds &+= t1 &- t0
                    rawNanoseconds &+= t2 &- t1
                } else {
                    let t0 = monotonicNanoseconds()
                    try RawPath.putOne(raw, key: key, value: value)
                    let t1 = monotonicNanoseconds()
                    try StrataPath.putOne(strata, key: key, value: value)
                    let t2 = monotonicNanoseconds()
                    rawNanoseconds &+= t1 &- t0
                    strataNanoseconds &+= t2 &- t1
                }
            }
            return (try StrataPath.count(strata), try RawPath.count(raw))
        }()  // both environments close here, before their directories are removed
        try expect(strataCount, keys.count, "interleaved sync commits entry count via StrataLMDB")
        try expect(rawCount, keys.count, "interleaved sync commits entry count via raw C")
        return (Double(strataNanoseconds) / 1e9, Double(rawNanoseconds) / 1e9)
    }

    /// The closure-based ``ReadableTransaction/scan(_:range:reverse:_:)`` over the
    /// populated store: StrataLMDB only (its raw twin is the cursor scan).
    public func runStrataScanClosure(stopwatch: Stopwatch) throws {
        try prepareReadStore(for: .strata)
        let store = strataReadStore!.store
        stopwatch.start()
        let sum = try StrataPath.scanClosure(store)
        stopwatch.stop()
        try expect(sum, workload.expectedScanChecksum, "scan() checksum")
    }

    private func runRead(_ scenario: Scenario, _ binding: Binding, stopwatch: Stopwatch) throws {
        try prepareReadStore(for: binding)
        let sum: Int
        switch (scenario, binding) {
        case (.getRandom, .strata):
            let store = strataReadStore!.store
            stopwatch.start()
            sum = try StrataPath.get(store, keys: workload.lookups)
            stopwatch.stop()
        case (.getRandom, .raw):
            let store = rawReadStore!.store
            stopwatch.start()
            sum = try RawPath.get(store, keys: workload.lookups)
            stopwatch.stop()
        case (.cursorScan, .strata):
            let store = strataReadStore!.store
            stopwatch.start()
            sum = try StrataPath.scan(store)
            stopwatch.stop()
        case (.cursorScan, .raw):
            let store = rawReadStore!.store
            stopwatch.start()
            sum = try RawPath.scan(store)
            stopwatch.stop()
        default:
            preconditionFailure("\(scenario) is not a read scenario")
        }
        let expected = scenario == .getRandom ? workload.expectedGetChecksum : workload.expectedScanChecksum
        try expect(sum, expected, "\(scenario.rawValue) checksum via \(binding.rawValue)")
    }

    private func runWrite(_ scenario: Scenario, _ binding: Binding, stopwatch: Stopwatch) throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let sync = scenario == .syncCommits
        let keys: UnsafeBufferPointer<UInt64>
        switch scenario {
        case .putRandom: keys = workload.shuffled
        case .putAppend: keys = workload.ordered
        case .syncCommits: keys = UnsafeBufferPointer(rebasing: workload.shuffled[0..<workload.syncCommitCount])
        default: preconditionFailure("\(scenario) is not a write scenario")
        }
        let stored: Int
        switch binding {
        case .strata:
            let store = try StrataPath.open(at: directory.path, durability: sync ? .sync : .noSync)
            stopwatch.start()
            switch scenario {
            case .syncCommits: try StrataPath.putEach(store, keys: keys, value: workload.value)
            default: try StrataPath.put(store, keys: keys, value: workload.value, append: scenario == .putAppend)
            }
            stopwatch.stop()
            stored = try StrataPath.count(store)
        case .raw:
            let store = try RawPath.open(at: directory.path, sync: sync)
            stopwatch.start()
            switch scenario {
            case .syncCommits: try RawPath.putEach(store, keys: keys, value: workload.value)
            default: try RawPath.put(store, keys: keys, value: workload.value, append: scenario == .putAppend)
            }
            stopwatch.stop()
            stored = try RawPath.count(store)
        }
        try expect(stored, keys.count, "\(scenario.rawValue) entry count via \(binding.rawValue)")
    }

    private func expect(_ actual: Int, _ expected: Int, _ what: String) throws {
        if actual != expected {
            throw BenchmarkFailure("\(what): \(actual), expected \(expected)")
        }
    }
}
