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
    /// grows it) and Strata's other defaults, for `model` (the benchmark entity ``Item``,
    /// or the hot spot's ``HotObject``).
    public static func open(
        at path: String, durability: PersistentStore.Options.Durability, model: ManagedObjectModel = StrataStore.model,
        tracksHistory: Bool = false
    ) async throws -> StrataStore {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        var options = PersistentStore.Options()
        options.tracksPersistentHistory = tracksHistory
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

// MARK: Hot spot (scenario 4)

/// The entity of scenario 4's hot spot (``HotSpot/strataModel``): a few objects every
/// context updates.
///
/// Every save of a hot object adds 1 to its ``counter`` (the property every writer
/// changes, so the one a merge policy decides) and sets its ``note``; writer `i` also adds
/// 1 to its own tally (`tally0` to `tally7`), a property no other writer changes, so that
/// a merge by property must keep every increment of it.
public final class HotObject: ManagedObject {
    /// Which hot object this is: 0, 1, 2, ...
    @Attribute public var slot: Int64 = 0
    /// Every save of the object adds 1 (read, then written back plus 1).
    @Attribute public var counter: Int64 = 0
    /// Who saved the object last, and that writer's update number.
    @Attribute public var note: String = ""
    /// Writer 0's saves of this object.
    @Attribute public var tally0: Int64 = 0
    /// Writer 1's saves of this object.
    @Attribute public var tally1: Int64 = 0
    /// Writer 2's saves of this object.
    @Attribute public var tally2: Int64 = 0
    /// Writer 3's saves of this object.
    @Attribute public var tally3: Int64 = 0
    /// Writer 4's saves of this object.
    @Attribute public var tally4: Int64 = 0
    /// Writer 5's saves of this object.
    @Attribute public var tally5: Int64 = 0
    /// Writer 6's saves of this object.
    @Attribute public var tally6: Int64 = 0
    /// Writer 7's saves of this object.
    @Attribute public var tally7: Int64 = 0

    /// Writer `writer`'s tally (0 ..< ``HotSpot/maxWriters``).
    public func tally(_ writer: Int) -> Int64 {
        switch writer {
        case 0: tally0
        case 1: tally1
        case 2: tally2
        case 3: tally3
        case 4: tally4
        case 5: tally5
        case 6: tally6
        default: tally7
        }
    }

    /// Adds 1 to writer `writer`'s tally.
    public func bumpTally(_ writer: Int) {
        switch writer {
        case 0: tally0 += 1
        case 1: tally1 += 1
        case 2: tally2 += 1
        case 3: tally3 += 1
        case 4: tally4 += 1
        case 5: tally5 += 1
        case 6: tally6 += 1
        default: tally7 += 1
        }
    }
}

extension StrataWork {
    /// Inserts `count` hot objects (slots 0 ..< count, everything else 0) and saves.
    public static func insertHotObjects(_ count: Int, in context: isolated ManagedObjectContext) throws {
        for slot in 0..<count {
            let object = HotObject()
            object.slot = Int64(slot)
            try context.insert(object)
        }
        try context.save()
    }

    /// The IDs of every hot object in slot order, their objects kept registered
    /// (`retainsRegisteredObjects`), so that a writer changes them without fetching them.
    public static func registerHotObjects(count: Int, in context: isolated ManagedObjectContext) throws -> [ManagedObjectID] {
        context.retainsRegisteredObjects = true
        var request = FetchRequest<HotObject>()
        request.sortDescriptors = [FetchSortDescriptor(\HotObject.slot)]
        request.returnsObjectsAsFaults = false
        let objects = try context.fetch(request)
        try expect(objects.map(\.slot), (0..<Int64(count)).map { $0 }, "Strata hot objects' slots")
        return objects.map(\.objectID)
    }

    /// One update of the hot spot by writer `writer`: refreshes the objects `ids[picks]`
    /// (turned into faults, so that the change reads their stored rows), adds 1 to their
    /// counter and to the writer's tally, sets their note, and saves.
    public static func hotUpdate(
        _ ids: [ManagedObjectID], picks: [Int], writer: Int, note: String, in context: isolated ManagedObjectContext
    ) throws {
        for pick in picks {
            guard let object = context.object(with: ids[pick]) as? HotObject else {
                throw BenchFailure("Strata: a hot object of the wrong class")
            }
            try context.refresh(object, mergeChanges: false)
            object.counter += 1
            object.bumpTally(writer)
            object.note = note
        }
        try context.save()
    }

    /// The hot objects' totals, read from the store in a fresh fetch.
    public static func hotTotals(in context: isolated ManagedObjectContext) throws -> HotSpot.Totals {
        var request = FetchRequest<HotObject>()
        request.returnsObjectsAsFaults = false
        let objects = try context.fetch(request)
        var totals = HotSpot.Totals(rows: objects.count)
        for object in objects {
            totals.counter += object.counter
            for writer in 0..<HotSpot.maxWriters { totals.tallies[writer] += object.tally(writer) }
        }
        return totals
    }
}

// MARK: Upserts (scenario 7)

/// Scenario 7's entity: `code` unique (a uniqueness constraint, so a save under a merging
/// policy turns a new object claiming a stored code into an update of that object), and
/// three attributes an upsert rewrites. The merging run upserts into it.
public final class UpsertItem: ManagedObject, UpsertObject {
    public override class var uniquenessConstraints: [[String]] { [["code"]] }
    /// The unique key.
    @Attribute public var code: Int64 = 0
    /// `preloaded <code>` or `upserted <code>`.
    @Attribute public var name: String = ""
    /// A value derived from the code, new at each upsert.
    @Attribute public var score: Double = 0
    /// 0 when preloaded, 1 once upserted.
    @Attribute public var revision: Int64 = 0

    /// The object with `record`'s values (its ID is the store's to assign).
    public convenience init(_ record: UpsertRecord) {
        self.init()
        apply(record)
    }
}

/// ``UpsertItem`` with `code` indexed as well: what the fetch-then-update run upserts
/// into, since a fetch by code needs an index (the unique index serves no fetch).
public final class IndexedUpsertItem: ManagedObject, UpsertObject {
    public override class var uniquenessConstraints: [[String]] { [["code"]] }
    /// The unique key, indexed.
    @Attribute(indexed: true) public var code: Int64 = 0
    /// `preloaded <code>` or `upserted <code>`.
    @Attribute public var name: String = ""
    /// A value derived from the code, new at each upsert.
    @Attribute public var score: Double = 0
    /// 0 when preloaded, 1 once upserted.
    @Attribute public var revision: Int64 = 0

    /// The object with `record`'s values (its ID is the store's to assign).
    public convenience init(_ record: UpsertRecord) {
        self.init()
        apply(record)
    }
}

/// What ``UpsertItem`` and ``IndexedUpsertItem`` share: the attributes of an
/// ``UpsertRecord``.
public protocol UpsertObject: ManagedObject {
    /// The unique key.
    var code: Int64 { get set }
    /// `preloaded <code>` or `upserted <code>`.
    var name: String { get set }
    /// A value derived from the code.
    var score: Double { get set }
    /// 0 when preloaded, 1 once upserted.
    var revision: Int64 { get set }
}

extension UpsertObject {
    /// Sets every attribute from `record`.
    public func apply(_ record: UpsertRecord) {
        code = record.code
        name = record.name
        score = record.score
        revision = record.revision
    }

    /// The object's values.
    public var record: UpsertRecord { UpsertRecord(code: code, name: name, score: score, revision: revision) }
}

/// Scenario 7's Strata model.
public enum Upserts {
    /// ``UpsertItem`` and ``IndexedUpsertItem`` (a run uses one of them).
    public static let strataModel: ManagedObjectModel = {
        do {
            return try ManagedObjectModel(types: [UpsertItem.self, IndexedUpsertItem.self])
        } catch {
            preconditionFailure("the upsert model is invalid: \(error)")
        }
    }()
}

extension StrataWork {
    /// Inserts an object per record (an ``IndexedUpsertItem`` when `indexed`, else an
    /// ``UpsertItem``) and saves once, `notificationCenter` nil: the rows the upserts meet.
    public static func preloadUpserts(_ records: [UpsertRecord], indexed: Bool, in context: isolated ManagedObjectContext) throws {
        context.notificationCenter = nil
        for record in records {
            try context.insert(indexed ? IndexedUpsertItem(record) as ManagedObject : UpsertItem(record))
        }
        try context.save()
        context.reset()
    }

    /// One batch of upserts the merging way: a new ``UpsertItem`` per record, one save
    /// (the context's merge policy, `.mergeByPropertyObjectTrump`, turns the records whose
    /// code is stored into updates), then `reset()`. `notificationCenter` nil, as for a
    /// bulk import.
    public static func upsertByInserting(_ records: [UpsertRecord], in context: isolated ManagedObjectContext) throws {
        context.notificationCenter = nil
        for record in records { try context.insert(UpsertItem(record)) }
        try context.save()
        context.reset()
    }

    /// One batch of upserts without merging: fetches the stored ``IndexedUpsertItem``s of
    /// the records' codes (`code IN [...]`, through the code index), updates them, inserts
    /// a new object for each other record, saves once, then `reset()`.
    public static func upsertByFetching(_ records: [UpsertRecord], in context: isolated ManagedObjectContext) throws {
        context.notificationCenter = nil
        var request = FetchRequest<IndexedUpsertItem>()
        request.predicate = (\IndexedUpsertItem.code).in(records.map(\.code))
        request.returnsObjectsAsFaults = false
        var stored: [Int64: IndexedUpsertItem] = [:]
        for object in try context.fetch(request) { stored[object.code] = object }
        for record in records {
            if let object = stored[record.code] {
                object.apply(record)
            } else {
                try context.insert(IndexedUpsertItem(record))
            }
        }
        try context.save()
        context.reset()
    }

    /// Every stored upsert row (of ``IndexedUpsertItem`` when `indexed`, else of
    /// ``UpsertItem``), read afresh.
    public static func upsertRows(indexed: Bool, in context: isolated ManagedObjectContext) throws -> [UpsertRecord] {
        if indexed {
            var request = FetchRequest<IndexedUpsertItem>()
            request.returnsObjectsAsFaults = false
            return try context.fetch(request).map(\.record)
        }
        var request = FetchRequest<UpsertItem>()
        request.returnsObjectsAsFaults = false
        return try context.fetch(request).map(\.record)
    }
}
