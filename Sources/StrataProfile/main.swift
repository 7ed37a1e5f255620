// strata-profile: the synchronous workloads `make profile` counts instructions of under
// valgrind's callgrind (Scripts/profile.sh). Each command does one thing to a store in
// DIRECTORY and prints what it did; the script runs a command at two sizes and divides
// the difference by the extra objects, so that process start, store opening and every
// other fixed cost cancel out.
//
//   strata-profile import N DIRECTORY        N objects through a context, one save
//   strata-profile raw-import N DIRECTORY    the same rows and index entries through liblmdb
//   strata-profile fetch DIRECTORY           every object, fully realised, every attribute read
//   strata-profile faults DIRECTORY          every object as faults, fetchBatchSize 1000, walked
//   strata-profile raw-fetch DIRECTORY       every row decoded through liblmdb, every field read
//   strata-profile sum DIRECTORY             sum(score) over every object: a dictionary fetch, nothing realised
//   strata-profile raw-sum DIRECTORY         the same sum through liblmdb: a cursor walk, each score loaded
//   strata-profile sum-indexed DIRECTORY     sum(rank) over every object: rank is indexed, so read from its index
//   strata-profile query DIRECTORY           100 queries of 1% of the ranks each (indexed, sorted), every
//                                            attribute read: every object once
//   strata-profile pages N DIRECTORY        N queries of fetchLimit 20, each in its own performAndWait
//   strata-profile update DIRECTORY          every object fetched, its score changed, one save
//   strata-profile fetch-update DIRECTORY    every object fetched, its score changed, no save
//   strata-profile child-fetch DIRECTORY     the same in a child context
//   strata-profile child-update DIRECTORY    every object fetched in a child context, its score changed,
//                                            the child saved into its parent (one hop)
//   strata-profile chain-leaf DIRECTORY      a chain root <- middle <- leaf: every object fetched in the leaf,
//                                            its score changed, the leaf saved into the middle
//   strata-profile chain-hop DIRECTORY       the same, then the middle saved into the root (a hop from the
//                                            middle of a chain)
//   strata-profile batch-import N DIRECTORY  the same objects through a BatchInsertRequest's object handler
//   strata-profile batch-update DIRECTORY    a BatchUpdateRequest: score = score + 1 on every object
//   strata-profile batch-delete DIRECTORY    a BatchDeleteRequest of every object
//   strata-profile generate N                the import's input alone (subtracted from the imports)
//   strata-profile coded-preload N DIRECTORY N coded objects (codes 0..<N, unique) for the upserts
//   strata-profile upsert N DIRECTORY        N new coded objects, half of them with a stored code (N/2..<3N/2),
//                                            saved 1,000 at a time under .mergeByPropertyObjectTrump
//   strata-profile upsert-unsaved N DIRECTORY the same, each batch reset instead of saved
//   strata-profile batch-upsert N DIRECTORY  the same upserts through a BatchInsertRequest per 1,000 (no context)
//   strata-profile coded-insert N DIRECTORY  N new coded objects with new codes (N..<2N), saved 1,000 at a time
//   strata-profile coded-unsaved N DIRECTORY the same, each batch reset instead of saved
//
// Everything runs on the main thread, synchronously: valgrind serialises threads, and
// an `await` on another executor stalled it (see the Performance article).
import CLMDB
import Foundation
import Strata
import StrataTesting

/// The benchmark entity of `make bench` (Benchmarks/, `Item`): four attributes, `rank`
/// indexed.
final class Item: ManagedObject {
    @Attribute(indexed: true) var rank: Int64 = 0
    @Attribute var name: String = ""
    @Attribute var score: Double = 0
    @Attribute var created: Date = Date(timeIntervalSince1970: 0)
}

/// One object's values, as the bench's `Dataset` makes them: ranks a seeded permutation,
/// names of 16 to 24 ASCII letters.
struct Record {
    var rank: Int64
    var name: String
    var score: Double
    var created: Date

    static func make(count: Int) -> [Record] {
        var random = SeededRandomNumberGenerator(seed: 0x57A7A_BE4C)
        var ranks = Array(Int64(0)..<Int64(count))
        ranks.shuffle(using: &random)
        let letters = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8)
        return ranks.map { rank in
            let length = Int.random(in: 16...24, using: &random)
            let name = String(decoding: (0..<length).map { _ in letters[Int.random(in: 0..<letters.count, using: &random)] }, as: UTF8.self)
            return Record(
                rank: rank, name: name, score: Double.random(in: 0..<1_000_000, using: &random),
                created: Date(timeIntervalSince1970: Double(1_600_000_000_000 + Int64.random(in: 0..<100_000_000_000, using: &random)) / 1000))
        }
    }

    var checksum: Int64 {
        rank &+ Int64(name.utf8.count) &* 1_000_003 &+ Int64(bitPattern: score.bitPattern >> 11)
            &+ Int64(created.timeIntervalSince1970 * 1000)
    }
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("strata-profile: \(message)\n".utf8))
    exit(2)
}

// MARK: Strata

func openStrata(_ directory: String, types: [ManagedObject.Type] = [Item.self], history: Bool = false) throws -> PersistentStoreCoordinator {
    let coordinator = PersistentStoreCoordinator(managedObjectModel: try ManagedObjectModel(types: types))
    var options = PersistentStore.Options()
    options.tracksPersistentHistory = history
    options.mapSize = 1 << 30
    options.durability = .noSync
    try coordinator.addPersistentStoreSynchronously(type: .lmdb, at: URL(fileURLWithPath: directory, isDirectory: true), options: options)
    return coordinator
}

func strataImport(_ records: [Record], into directory: String) throws {
    let context = ManagedObjectContext(.privateQueue, coordinator: try openStrata(directory))
    try context.performAndWait { context in
        context.notificationCenter = nil
        for record in records {
            let item = Item()
            item.rank = record.rank
            item.name = record.name
            item.score = record.score
            item.created = record.created
            try context.insert(item)
        }
        try context.save()
    }
    print("imported \(records.count) objects")
}

func strataBatchImport(_ records: [Record], into directory: String) throws {
    let coordinator = try openStrata(directory)
    var index = 0
    var request = BatchInsertRequest(Item.self) { item in
        guard index < records.count else { return true }
        let record = records[index]
        index += 1
        item.rank = record.rank
        item.name = record.name
        item.score = record.score
        item.created = record.created
        return false
    }
    request.resultType = .count
    print("batch-inserted \(try coordinator.execute(request).count ?? 0) objects")
}

func strataBatchChange(_ directory: String, delete: Bool) throws {
    let coordinator = try openStrata(directory)
    let result: PersistentStoreResult
    if delete {
        var request = BatchDeleteRequest(fetchRequest: FetchRequest<Item>())
        request.resultType = .count
        result = try coordinator.execute(request)
    } else {
        var request = BatchUpdateRequest(entityName: "Item")
        request.propertiesToUpdate = ["score": try UpdateExpression(format: "score + 1")]
        request.resultType = .count
        result = try coordinator.execute(request)
    }
    print("batch-\(delete ? "deleted" : "updated") \(result.count ?? 0) objects")
}

func strataFetch(_ directory: String, batchSize: Int) throws {
    let context = ManagedObjectContext(.privateQueue, coordinator: try openStrata(directory))
    let (count, checksum) = try context.performAndWait { context in
        var request = FetchRequest<Item>()
        if batchSize > 0 { request.fetchBatchSize = batchSize } else { request.returnsObjectsAsFaults = false }
        let items = try context.fetch(request)
        var checksum: Int64 = 0
        for item in items {
            checksum &+= Record(rank: item.rank, name: item.name, score: item.score, created: item.created).checksum
        }
        return (items.count, checksum)
    }
    print("fetched \(count) objects, checksum \(checksum)")
}

func strataSum(_ directory: String, of attribute: String = "score") throws {
    let context = ManagedObjectContext(.privateQueue, coordinator: try openStrata(directory))
    let total = try context.performAndWait { context in
        var request = FetchRequest<[String: any Sendable]>(entityName: "Item")
        request.resultType = .dictionary
        request.propertiesToFetch = [.expression(ExpressionDescription(name: "total", function: .sum, keyPath: attribute))]
        return try context.fetch(request).first?["total"].map { "\($0)" } ?? "none"
    }
    print("summed \(total)")
}

/// The number of items in the store (ranks are 0..<count).
func itemCount(in context: isolated ManagedObjectContext) throws -> Int {
    try context.count(for: FetchRequest<Item>())
}

func strataQuery(_ directory: String) throws {
    let context = ManagedObjectContext(.privateQueue, coordinator: try openStrata(directory))
    let (count, checksum) = try context.performAndWait { context in
        let total = try itemCount(in: context)
        let width = Int64(total / 100)
        var count = 0
        var checksum: Int64 = 0
        for query in 0..<100 {
            let lower = Int64(query) * width
            var request = FetchRequest<Item>()
            request.predicate = \Item.rank >= lower && \Item.rank < lower + width
            request.sortDescriptors = [FetchSortDescriptor(\Item.rank)]
            request.returnsObjectsAsFaults = false
            let items = try context.fetch(request)
            for item in items {
                checksum &+= Record(rank: item.rank, name: item.name, score: item.score, created: item.created).checksum
            }
            count += items.count
        }
        return (count, checksum)
    }
    print("queried \(count) objects, checksum \(checksum)")
}

/// `queries` queries of fetchLimit 20 (a page of the 1% range query), each in its own
/// `performAndWait`, every attribute read.
func strataPages(_ queries: Int, _ directory: String) throws {
    let context = ManagedObjectContext(.privateQueue, coordinator: try openStrata(directory))
    let total = try context.performAndWait { try itemCount(in: $0) }
    var checksum: Int64 = 0
    for query in 0..<queries {
        let lower = Int64(query * 37 % max(1, total - 100))
        checksum &+= try context.performAndWait { context in
            var request = FetchRequest<Item>()
            request.predicate = \Item.rank >= lower && \Item.rank < lower + 100
            request.sortDescriptors = [FetchSortDescriptor(\Item.rank)]
            request.fetchLimit = 20
            request.returnsObjectsAsFaults = false
            var sum: Int64 = 0
            for item in try context.fetch(request) {
                sum &+= Record(rank: item.rank, name: item.name, score: item.score, created: item.created).checksum
            }
            return sum
        }
    }
    print("ran \(queries) queries, checksum \(checksum)")
}

/// Fetches every item in `context` and negates its score; returns how many.
func negateScores(in context: isolated ManagedObjectContext) throws -> Int {
    var request = FetchRequest<Item>()
    request.returnsObjectsAsFaults = false
    let items = try context.fetch(request)
    for item in items { item.score = -item.score }
    return items.count
}

func strataUpdate(_ directory: String, child: Bool, saving: Bool, history: Bool = false) throws {
    let root = ManagedObjectContext(.privateQueue, coordinator: try openStrata(directory, history: history))
    let context = child ? ManagedObjectContext(.privateQueue, parent: root) : root
    let count = try context.performAndWait { context in
        context.notificationCenter = nil
        let count = try negateScores(in: context)
        if saving { try context.save() }
        return count
    }
    print("updated \(count) objects\(saving ? ", saved" : "")")
    withExtendedLifetime(root) {}
}

/// ``strataUpdate(_:child:saving:history:)`` with `observers` live results registered on
/// the root context, each of `rank == j` (none reads `score`, which the save changes): what
/// observers cost a save — the changed keys gathered and each observer's check.
func strataObservedUpdate(_ directory: String, observers: Int, saving: Bool) throws {
    let root = ManagedObjectContext(.privateQueue, coordinator: try openStrata(directory))
    var kept: [AnyObject] = []
    for rank in 0..<observers {
        var request = FetchRequest<Item>()
        request.predicate = try FetchPredicate(format: "rank == %d", rank)
        kept.append(try root.results(for: request).startObservingSynchronously())
    }
    let count = try root.performAndWait { context in
        context.notificationCenter = nil
        let count = try negateScores(in: context)
        if saving { try context.save() }
        return count
    }
    print("updated \(count) objects with \(kept.count) observers\(saving ? ", saved" : "")")
    withExtendedLifetime(kept) {}
}

/// A chain root <- middle <- leaf: every object fetched in the leaf, its score changed,
/// the leaf saved into the middle, and with `hopping` the middle into the root (a hop
/// from the middle of a chain).
func strataChainUpdate(_ directory: String, hopping: Bool) throws {
    let root = ManagedObjectContext(.privateQueue, coordinator: try openStrata(directory))
    let middle = ManagedObjectContext(.privateQueue, parent: root)
    let leaf = ManagedObjectContext(.privateQueue, parent: middle)
    middle.performAndWait { $0.notificationCenter = nil }
    let count = try leaf.performAndWait { context in
        context.notificationCenter = nil
        let count = try negateScores(in: context)
        try context.save()
        return count
    }
    if hopping { try middle.performAndWait { try $0.save() } }
    print("updated \(count) objects\(hopping ? ", saved into the root" : "")")
    withExtendedLifetime(root) {}
}

// MARK: Raw liblmdb (the layout of Benchmarks' RawStore: a row per id, an index entry per rank)

struct RawStore {
    var environment: OpaquePointer
    var rows = MDB_dbi()
    var index = MDB_dbi()

    init(_ directory: String) {
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var env: OpaquePointer?
        guard mdb_env_create(&env) == MDB_SUCCESS, let env else { fail("mdb_env_create") }
        environment = env
        mdb_env_set_mapsize(env, 1 << 30)
        mdb_env_set_maxdbs(env, 4)
        guard mdb_env_open(env, directory, UInt32(MDB_NOTLS | MDB_NOSYNC), 0o644) == MDB_SUCCESS else { fail("mdb_env_open") }
        var txn: OpaquePointer?
        mdb_txn_begin(env, nil, 0, &txn)
        mdb_dbi_open(txn, "items", UInt32(MDB_CREATE), &rows)
        mdb_dbi_open(txn, "items.rank", UInt32(MDB_CREATE), &index)
        mdb_txn_commit(txn)
    }

    func insert(_ records: [Record]) {
        var txn: OpaquePointer?
        mdb_txn_begin(environment, nil, 0, &txn)
        var buffer: [UInt8] = []
        buffer.reserveCapacity(64)
        for (offset, record) in records.enumerated() {
            buffer.removeAll(keepingCapacity: true)
            withUnsafeBytes(of: record.rank.littleEndian) { buffer.append(contentsOf: $0) }
            withUnsafeBytes(of: record.score.bitPattern.littleEndian) { buffer.append(contentsOf: $0) }
            withUnsafeBytes(of: record.created.timeIntervalSince1970.bitPattern.littleEndian) { buffer.append(contentsOf: $0) }
            buffer.append(contentsOf: record.name.utf8)
            var id = UInt64(offset + 1).bigEndian
            withUnsafeMutableBytes(of: &id) { key in
                buffer.withUnsafeMutableBytes { value in
                    var k = MDB_val(mv_size: 8, mv_data: key.baseAddress), v = MDB_val(mv_size: value.count, mv_data: value.baseAddress)
                    if mdb_put(txn, rows, &k, &v, 0) != MDB_SUCCESS { fail("mdb_put row") }
                }
            }
            var rankKey = ((UInt64(bitPattern: record.rank) ^ (1 << 63)).bigEndian, UInt64(offset + 1).bigEndian)
            withUnsafeMutableBytes(of: &rankKey) { key in
                var k = MDB_val(mv_size: 16, mv_data: key.baseAddress), v = MDB_val(mv_size: 0, mv_data: nil)
                if mdb_put(txn, index, &k, &v, 0) != MDB_SUCCESS { fail("mdb_put index") }
            }
        }
        if mdb_txn_commit(txn) != MDB_SUCCESS { fail("mdb_txn_commit") }
        print("imported \(records.count) rows")
    }

    func sum() {
        var txn: OpaquePointer?
        mdb_txn_begin(environment, nil, UInt32(MDB_RDONLY), &txn)
        var cursor: OpaquePointer?
        mdb_cursor_open(txn, rows, &cursor)
        var k = MDB_val(), v = MDB_val()
        var total = 0.0
        var rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST)
        while rc == MDB_SUCCESS {
            total += Double(bitPattern: UInt64(littleEndian: v.mv_data.loadUnaligned(fromByteOffset: 8, as: UInt64.self)))
            rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)
        }
        mdb_cursor_close(cursor)
        mdb_txn_abort(txn)
        print("summed \(total)")
    }

    func fetch() {
        var txn: OpaquePointer?
        mdb_txn_begin(environment, nil, UInt32(MDB_RDONLY), &txn)
        var cursor: OpaquePointer?
        mdb_cursor_open(txn, rows, &cursor)
        var records: [Record] = []
        var k = MDB_val(), v = MDB_val()
        var rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST)
        while rc == MDB_SUCCESS {
            let bytes = UnsafeRawBufferPointer(start: v.mv_data, count: v.mv_size)
            records.append(Record(
                rank: Int64(littleEndian: bytes.loadUnaligned(fromByteOffset: 0, as: Int64.self)),
                name: String(decoding: bytes[24...], as: UTF8.self),
                score: Double(bitPattern: UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self))),
                created: Date(timeIntervalSince1970: Double(bitPattern: UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 16, as: UInt64.self))))))
            rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)
        }
        mdb_cursor_close(cursor)
        mdb_txn_abort(txn)
        var checksum: Int64 = 0
        for record in records { checksum &+= record.checksum }
        print("fetched \(records.count) rows, checksum \(checksum)")
    }
}

// MARK: Upserts

/// Scenario 7's entity (Benchmarks/, `UpsertItem`): a unique code and three attributes.
final class Coded: ManagedObject {
    override class var uniquenessConstraints: [[String]] { [["code"]] }
    @Attribute var code: Int64 = 0
    @Attribute var name: String = ""
    @Attribute var score: Double = 0
    @Attribute var revision: Int64 = 0
}

/// Inserts a coded object for each of `codes`, `batch` per save (or per `reset()` when not
/// `saving`), under `policy`.
func codedInsert(_ codes: Range<Int64>, into directory: String, revision: Int64, policy: MergePolicy, saving: Bool, batch: Int = 1000) throws {
    let context = ManagedObjectContext(.privateQueue, coordinator: try openStrata(directory, types: [Coded.self]))
    context.mergePolicy = policy
    try context.performAndWait { context in
        context.notificationCenter = nil
        var code = codes.lowerBound
        while code < codes.upperBound {
            let end = min(code + Int64(batch), codes.upperBound)
            for value in code..<end {
                let object = Coded()
                object.code = value
                object.name = revision == 0 ? "preloaded \(value)" : "upserted \(value)"
                object.score = Double(value) * 2 + 0.5
                object.revision = revision
                try context.insert(object)
            }
            if saving { try context.save() }
            context.reset()
            code = end
        }
    }
    print("inserted \(codes.count) coded objects\(saving ? "" : " (unsaved)")")
}

/// Upserts a coded object for each of `codes` through a `BatchInsertRequest` per `batch`
/// under `.mergeByPropertyObjectTrump`: no context.
func batchUpsert(_ codes: Range<Int64>, into directory: String, batch: Int = 1000) throws {
    let coordinator = try openStrata(directory, types: [Coded.self])
    var code = codes.lowerBound
    while code < codes.upperBound {
        let end = min(code + Int64(batch), codes.upperBound)
        var next = code
        var request = BatchInsertRequest(Coded.self) { object in
            guard next < end else { return true }
            object.code = next
            object.name = "upserted \(next)"
            object.score = Double(next) * 2 + 0.5
            object.revision = 1
            next += 1
            return false
        }
        request.mergePolicy = .mergeByPropertyObjectTrump
        _ = try coordinator.execute(request)
        code = end
    }
    print("batch-upserted \(codes.count) coded objects")
}

/// Opens the store of `import` with version 2 of its model, which adds a required
/// `edition` with a default: a migration that rewrites every row (issue 23).
func strataMigrate(_ directory: String) throws {
    let item = try ManagedObjectModel(types: [Item.self]).entitiesByName["Item"]!
    let version2 = try ManagedObjectModel(entities: [
        EntityDescription(
            name: "Item",
            attributes: item.attributes + [AttributeDescription(name: "edition", type: .integer64, isOptional: false, defaultValue: .integer(1))]),
    ], versionIdentifier: "2")
    let coordinator = PersistentStoreCoordinator(managedObjectModel: version2)
    var options = PersistentStore.Options()
    options.mapSize = 1 << 30
    options.durability = .noSync
    try coordinator.addPersistentStoreSynchronously(type: .lmdb, at: URL(fileURLWithPath: directory, isDirectory: true), options: options)
    print("migrated")
}

// MARK: Command line

let arguments = CommandLine.arguments.dropFirst()
guard let command = arguments.first else { fail("usage: strata-profile import|raw-import N DIRECTORY, or fetch|faults|raw-fetch DIRECTORY") }
do {
    switch (command, arguments.count) {
    case ("import", 3), ("raw-import", 3), ("batch-import", 3):
        let rest = Array(arguments.dropFirst())
        guard let count = Int(rest[0]), count > 0 else { fail("N must be a positive number") }
        let records = Record.make(count: count)
        switch command {
        case "import": try strataImport(records, into: rest[1])
        case "batch-import": try strataBatchImport(records, into: rest[1])
        default: RawStore(rest[1]).insert(records)
        }
    case ("batch-update", 2), ("batch-delete", 2):
        try strataBatchChange(arguments.last!, delete: command == "batch-delete")
    case ("coded-preload", 3), ("upsert", 3), ("upsert-unsaved", 3), ("coded-insert", 3), ("coded-unsaved", 3), ("batch-upsert", 3):
        let rest = Array(arguments.dropFirst())
        guard let count = Int64(rest[0]), count > 1 else { fail("N must be a number above 1") }
        switch command {
        case "coded-preload":
            try codedInsert(0..<count, into: rest[1], revision: 0, policy: .error, saving: true, batch: Int(count))
        case "batch-upsert":
            try batchUpsert(count / 2..<count / 2 + count, into: rest[1])
        case "upsert", "upsert-unsaved":
            try codedInsert(count / 2..<count / 2 + count, into: rest[1], revision: 1, policy: .mergeByPropertyObjectTrump, saving: command == "upsert")
        default:
            try codedInsert(count..<2 * count, into: rest[1], revision: 1, policy: .error, saving: command == "coded-insert")
        }
    case ("generate", 2):
        guard let count = Int(arguments.last!), count > 0 else { fail("N must be a positive number") }
        let records = Record.make(count: count)
        print("generated \(records.count) records, checksum \(records.reduce(0) { $0 &+ $1.checksum })")
    case ("fetch", 2):
        try strataFetch(arguments.last!, batchSize: 0)
    case ("faults", 2):
        try strataFetch(arguments.last!, batchSize: 1000)
    case ("raw-fetch", 2):
        RawStore(arguments.last!).fetch()
    case ("sum", 2):
        try strataSum(arguments.last!)
    case ("sum-indexed", 2):
        try strataSum(arguments.last!, of: "rank")
    case ("raw-sum", 2):
        RawStore(arguments.last!).sum()
    case ("pages", 3):
        guard let count = Int(arguments.dropFirst().first!), count > 0 else { fail("N must be a positive number") }
        try strataPages(count, arguments.last!)
    case ("query", 2):
        try strataQuery(arguments.last!)
    case ("update", 2):
        try strataUpdate(arguments.last!, child: false, saving: true)
    case ("update-history", 2):
        try strataUpdate(arguments.last!, child: false, saving: true, history: true)
    case ("fetch-update-history", 2):
        try strataUpdate(arguments.last!, child: false, saving: false, history: true)
    case ("fetch-update", 2):
        try strataUpdate(arguments.last!, child: false, saving: false)
    case ("observed-update", 2), ("observed-fetch-update", 2):
        try strataObservedUpdate(arguments.last!, observers: 100, saving: command == "observed-update")
    case ("child-fetch", 2):
        try strataUpdate(arguments.last!, child: true, saving: false)
    case ("child-update", 2):
        try strataUpdate(arguments.last!, child: true, saving: true)
    case ("chain-leaf", 2):
        try strataChainUpdate(arguments.last!, hopping: false)
    case ("chain-hop", 2):
        try strataChainUpdate(arguments.last!, hopping: true)
    case ("migrate", 2):
        try strataMigrate(arguments.last!)
    default:
        fail("unknown command or wrong arguments: \(arguments.joined(separator: " "))")
    }
} catch {
    fail("\(error)")
}
