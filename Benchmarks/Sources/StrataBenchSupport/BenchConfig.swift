import Foundation

/// The sizes and durations of a run (see `strata-bench --help`).
public struct BenchConfig: Sendable {
    /// Scenario 1: the sizes of the bulk imports.
    public var importSizes = [100_000, 1_000_000]
    /// Scenarios 2, 3, 5 and 6: the objects of the store they read.
    public var storeSize = 1_000_000
    /// Measured rounds per timing (one warm-up round is added).
    public var rounds = 5
    /// Scenario 3: queries per round (each over another range).
    public var queries = 20
    /// Scenarios 2 and 6: objects per batch of a batched fetch.
    public var batchSize = 1000
    /// Scenario 4: how many contexts (threads, writers) save at once.
    public var contexts = [1, 2, 4, 8]
    /// Scenario 4: objects changed per save.
    public var objectsPerSave = [1, 10]
    /// Scenario 4: objects each context owns (registered, retained) and updates in turn.
    public var objectsPerContext = 100
    /// Scenario 4: the measured window of each configuration (the hot spot's too).
    public var contentionSeconds = 2.0
    /// Scenario 4, hot spot: how many contexts (threads, writers) update the hot objects
    /// at once (at most ``HotSpot/maxWriters``).
    public var hotSpotContexts = 8
    /// Scenario 4, hot spot: the objects every context updates.
    public var hotSpotObjects = 16
    /// Scenario 4, hot spot: hot objects changed per save (picked at random).
    public var hotSpotObjectsPerSave = 2
    /// Scenario 5: reader contexts (threads).
    public var readers = 2
    /// Scenario 5: the measured window of each reader configuration.
    public var readerSeconds = 2.0
    /// Scenario 5: objects the writer inserts per save.
    public var writerBatch = 1000
    /// Scenario 5: the writer saves a batch every this many seconds (flat out when it
    /// falls behind).
    public var writerInterval = 0.05
    /// Scenario 6: objects changed and saved up the chain.
    public var parentChildChanges = 10_000
    /// Scenario 6: chain depths (1 = a child of a root context).
    public var depths = [1, 2, 3]
    /// Scenario 7: upserts measured (half of them collide with a stored row; see
    /// ``UpsertPlan``).
    public var upserts = 100_000
    /// Scenario 7: upserts per save (write transaction), the same for every binding.
    public var upsertBatch = 1000
    /// Scenario 8: the objects a migration rewrites.
    public var migrationRows = 1_000_000
    /// Scenario 9: the objects a batch insert writes (a batch update and delete then
    /// change 10% of them).
    public var batchRows = 1_000_000
    /// Run only the scenarios whose name contains one of these (case-insensitive).
    public var only: [String] = []
    /// Whether this is the `--quick` configuration.
    public var quick = false

    public init() {}

    /// Small sizes and short windows: everything in well under two minutes.
    public static var quick: BenchConfig {
        var config = BenchConfig()
        config.quick = true
        config.importSizes = [10_000, 50_000]
        config.storeSize = 20_000
        config.rounds = 3
        config.queries = 10
        config.contentionSeconds = 0.25
        config.readerSeconds = 0.5
        config.parentChildChanges = 2000
        config.upserts = 10_000
        config.migrationRows = 50_000
        config.batchRows = 50_000
        return config
    }

    /// The scenarios, by number and name; `--only` matches either. Scenario 4 has two
    /// parts: `--only 4` or `--only contention` runs both, `--only hot` the hot spot alone.
    public static let scenarios: [(number: Int, name: String)] = [
        (1, "bulk import"),
        (2, "fetch all"),
        (3, "indexed query"),
        (4, "write contention"),
        (4, "write contention, hot spot"),
        (4, "write contention, history"),
        (5, "readers under a writer"),
        (6, "parent-child"),
        (7, "upsert"),
        (8, "migration"),
        (9, "batch requests"),
        (9, "batch requests, remote-change watch"),
        (10, "live results"),
        (11, "aggregate"),
    ]

    /// Whether scenario `number` runs: its part called `name`, or any of its parts when
    /// `name` is nil.
    public func runs(_ number: Int, _ name: String? = nil) -> Bool {
        guard !only.isEmpty else { return true }
        let names = name.map { [$0] } ?? Self.scenarios.filter { $0.number == number }.map(\.name)
        return only.contains { filter in
            let filter = filter.lowercased()
            return filter == String(number) || names.contains { $0.contains(filter) || "\(number) \($0)".contains(filter) }
        }
    }
}
