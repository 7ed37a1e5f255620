import Foundation
import Strata

/// The benchmark entity through Strata: four attributes, `rank` indexed.
public final class Item: ManagedObject {
    @Attribute(indexed: true) public var rank: Int64 = 0
    @Attribute public var name: String = ""
    @Attribute public var score: Double = 0
    @Attribute public var created: Date = Date(timeIntervalSince1970: 0)

    /// The object with `record`'s values (its id is the store's to assign).
    public convenience init(_ record: BenchRecord) {
        self.init()
        rank = record.rank
        name = record.name
        score = record.score
        created = record.created
    }

    /// Reads every attribute: what a benchmark read adds to its checksum.
    @inline(__always)
    public var checksum: Int64 { BenchRecord.checksum(rank: rank, name: name, score: score, created: created) }
}

/// A Strata store of ``Item``s: a coordinator with one LMDB store.
public final class StrataStore: Sendable {
    public static let model: ManagedObjectModel = {
        do {
            return try ManagedObjectModel(types: [Item.self])
        } catch {
            preconditionFailure("the benchmark model is invalid: \(error)")
        }
    }()

    public let coordinator: PersistentStoreCoordinator
    public let path: String

    private init(coordinator: PersistentStoreCoordinator, path: String) {
        self.coordinator = coordinator
        self.path = path
    }

    /// Opens (or creates) the store in the directory `path` with `durability`
    /// (`.sync`: every commit flushed; `.noSync`: none), a 4 GiB map (so no measurement
    /// grows it) and Strata's other defaults.
    public static func open(at path: String, durability: PersistentStore.Options.Durability) async throws -> StrataStore {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        var options = PersistentStore.Options()
        options.mapSize = StoreSettings.mapSize
        options.maxReaders = StoreSettings.maxReaders
        options.durability = durability
        try await coordinator.addPersistentStore(type: .lmdb, at: URL(fileURLWithPath: path, isDirectory: true), options: options)
        return StrataStore(coordinator: coordinator, path: path)
    }

    /// A new private-queue context of the store.
    public func makeContext(name: String? = nil) -> ManagedObjectContext {
        ManagedObjectContext(.privateQueue, coordinator: coordinator, name: name)
    }
}

/// The scenarios' work inside a Strata context: synchronous bodies run by
/// `performAndWait` (the runner, from its own threads) or `perform` (the benchmark
/// suite), so that both measure exactly the same calls.
public enum StrataWork {
    /// Inserts an ``Item`` per record and saves once: a bulk import. Turns the context's
    /// `notificationCenter` off first, as the documentation advises for bulk imports
    /// (nothing then builds the notifications' object sets).
    public static func importRecords(_ records: some Collection<BenchRecord>, in context: isolated ManagedObjectContext) throws {
        context.notificationCenter = nil
        for record in records { try context.insert(Item(record)) }
        try context.save()
    }

    /// The number of stored items.
    public static func count(in context: isolated ManagedObjectContext) throws -> Int {
        try context.count(for: FetchRequest<Item>())
    }

    /// Every item, fully realised (`returnsObjectsAsFaults = false`), every attribute read.
    public static func fetchAllRealised(in context: isolated ManagedObjectContext) throws -> (count: Int, checksum: Int64) {
        var request = FetchRequest<Item>()
        request.returnsObjectsAsFaults = false
        return try fetchAndTouch(request, in: context)
    }

    /// Every item as a fault with `fetchBatchSize = batchSize`, walked in order, every
    /// attribute read (each batch is read in one transaction when its first object fires).
    public static func fetchAllBatched(batchSize: Int, in context: isolated ManagedObjectContext) throws -> (count: Int, checksum: Int64) {
        var request = FetchRequest<Item>()
        request.fetchBatchSize = batchSize
        return try fetchAndTouch(request, in: context)
    }

    /// Fetches `request` and reads every attribute of every object.
    private static func fetchAndTouch(
        _ request: FetchRequest<Item>, in context: isolated ManagedObjectContext
    ) throws -> (count: Int, checksum: Int64) {
        let items = try context.fetch(request)
        var checksum: Int64 = 0
        for item in items { checksum &+= item.checksum }
        return (items.count, checksum)
    }

    /// Every item through ``FetchedResults`` (`fetchedResults(for:)`, one batch of
    /// `batchSize` held at a time), every attribute read.
    public static func walkFetchedResults(batchSize: Int, in context: isolated ManagedObjectContext) throws -> (count: Int, checksum: Int64) {
        var request = FetchRequest<Item>()
        request.fetchBatchSize = batchSize
        var count = 0
        var checksum: Int64 = 0
        for item in try context.fetchedResults(for: request) {
            count += 1
            checksum &+= item.checksum
        }
        return (count, checksum)
    }

    /// The fetch of items with `lower <= rank < upper`, sorted by rank, at most `limit` (0
    /// for all).
    public static func rangeRequest(lower: Int64, upper: Int64, limit: Int) -> FetchRequest<Item> {
        var request = FetchRequest<Item>()
        request.predicate = \Item.rank >= lower && \Item.rank < upper
        request.sortDescriptors = [FetchSortDescriptor(\Item.rank)]
        request.fetchLimit = limit
        request.returnsObjectsAsFaults = false
        return request
    }

    /// Runs ``rangeRequest(lower:upper:limit:)``, reads every attribute of every object,
    /// and checks the count, the order and the ranks.
    public static func rangeQuery(
        lower: Int64, width: Int64, limit: Int, expectedCount: Int, in context: isolated ManagedObjectContext
    ) throws -> Int64 {
        let items = try context.fetch(rangeRequest(lower: lower, upper: lower + width, limit: limit))
        return try checkRange(items, lower: lower, expectedCount: expectedCount, "Strata (limit \(limit))")
    }

    /// Inserts `records` as new items and saves; then forgets them (`reset()`), so that a
    /// writer saving batch after batch holds no memory.
    public static func insertBatch(_ records: some Collection<BenchRecord>, in context: isolated ManagedObjectContext) throws {
        for record in records { try context.insert(Item(record)) }
        try context.save()
        context.reset()
    }

    /// The IDs of the items with `lower <= rank < upper`, in rank order, their objects
    /// kept registered (`retainsRegisteredObjects`), so that later blocks change them
    /// without reading them again.
    public static func registerItems(lower: Int64, upper: Int64, in context: isolated ManagedObjectContext) throws -> [ManagedObjectID] {
        context.retainsRegisteredObjects = true
        let items = try context.fetch(rangeRequest(lower: lower, upper: upper, limit: 0))
        try expect(items.count, Int(upper - lower), "Strata items of ranks [\(lower), \(upper))")
        return items.map(\.objectID)
    }

    /// Adds 1 to the score of the registered items `ids[start..<start + count]` (wrapping
    /// around) and saves: one small save of a contention worker.
    public static func bumpAndSave(
        _ ids: [ManagedObjectID], start: Int, count: Int, in context: isolated ManagedObjectContext
    ) throws {
        for offset in 0..<count {
            guard let item = context.object(with: ids[(start + offset) % ids.count]) as? Item else {
                throw BenchFailure("Strata: an object of the wrong class")
            }
            item.score += 1
        }
        try context.save()
    }

    /// The sum of the scores of the items with `lower <= rank < upper`, read from the
    /// store in a fresh fetch.
    public static func scoreSum(lower: Int64, upper: Int64, in context: isolated ManagedObjectContext) throws -> Double {
        try context.fetch(rangeRequest(lower: lower, upper: upper, limit: 0)).reduce(0) { $0 + $1.score }
    }

    /// Sets the score of the items with `lower <= rank < upper` to `score` (the changes a
    /// parent–child save carries); returns how many changed.
    public static func setScores(lower: Int64, upper: Int64, to score: Double, in context: isolated ManagedObjectContext) throws -> Int {
        let items = try context.fetch(rangeRequest(lower: lower, upper: upper, limit: 0))
        for item in items { item.score = score }
        return items.count
    }

    /// Whether every item with `lower <= rank < upper` has `score` in the store.
    public static func allScores(lower: Int64, upper: Int64, equal score: Double, in context: isolated ManagedObjectContext) throws -> Bool {
        var request = rangeRequest(lower: lower, upper: upper, limit: 0)
        request.predicate = \Item.rank >= lower && \Item.rank < upper && \Item.score == score
        return try context.count(for: request) == Int(upper - lower)
    }
}

extension Item: RankedRow {}
