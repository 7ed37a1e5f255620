import Foundation
@testable import Strata
import StrataLMDB
import StrataTesting
import Testing

/// Aggregates over numbers without groups read each stored record in place
/// (`NumericAggregates`): the walk skips every kind of field before the ones it reads,
/// stops after the last of them, and takes one field read by one aggregate in a walk of
/// its own. These tests give it records of every shape — field heads of two bytes, long
/// strings, ten-byte varints, missing optionals — and check it against the values saved.
@Suite("Numeric aggregates read from stored records")
struct NumericAggregateRecordTests {
    typealias Row = [String: any Sendable]

    /// Thirteen stored attributes, so that the later ones have field numbers of 8 and more
    /// (two-byte field heads); a long text first, numbers among and after other kinds.
    final class Wide: ManagedObject {
        @Attribute var text: String = ""
        @Attribute var flag: Bool = false
        @Attribute var when: Date = Date(timeIntervalSince1970: 0)
        @Attribute var id: UUID = UUID(uuidString: "00000000-0000-0000-0000-000000000000")!
        @Attribute var blob: Data = Data()
        @Attribute var amount: Decimal = 0
        @Attribute var ratio: Float = 0
        @Attribute var link: URL?
        @Attribute var late: Double = 0
        @Attribute var big: Int64 = 0
        @Attribute var maybe: Int32?
        @Attribute var small: Int16 = 0
        @Attribute var tail: String = ""
        /// Indexed: aggregates of these alone are read from their indexes.
        @Attribute(indexed: true) var rank: Int64 = 0
        @Attribute(indexed: true) var level: Double?
    }

    static let model: ManagedObjectModel = {
        do {
            return try ManagedObjectModel(types: [Wide.self])
        } catch {
            preconditionFailure("\(error)")
        }
    }()

    /// One row's values, as saved.
    struct Values: Sendable {
        var text: String, late: Double, big: Int64, maybe: Int32?, small: Int16, ratio: Float
        var rank: Int64 = 0, level: Double?
    }

    /// `count` rows of seeded values: texts of 0 to 300 bytes (one- and two-byte lengths),
    /// quarters (sums exact in any order), integers of every varint length, some nil.
    static func values(_ count: Int, seed: UInt64 = 27) -> [Values] {
        var random = SeededRandomNumberGenerator(seed: seed)
        return (0..<count).map { index in
            let bits = Int.random(in: 0...52, using: &random)
            let magnitude = Int64.random(in: 0...(Int64(1) << bits), using: &random)
            return Values(
                text: String(repeating: "x", count: Int.random(in: 0...300, using: &random)),
                late: Double(Int.random(in: -4_000...4_000, using: &random)) / 4,
                big: Bool.random(using: &random) ? magnitude : -magnitude,
                maybe: index % 3 == 0 ? nil : Int32.random(in: Int32.min...Int32.max, using: &random),
                small: Int16.random(in: Int16.min...Int16.max, using: &random),
                ratio: Float(Int.random(in: -64...64, using: &random)) / 8,
                rank: Int64(index) - 100,
                level: index % 4 == 0 ? nil : Double(Int.random(in: -400...400, using: &random)) / 4)
        }
    }

    /// A coordinator on a new LMDB store holding `rows`, saved 100 to a save; their IDs.
    static func store(_ rows: [Values], in directory: borrowing TemporaryDirectory) async throws -> (PersistentStoreCoordinator, [ManagedObjectID]) {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        try await coordinator.addPersistentStore(type: .lmdb, at: directory.url.appendingPathComponent("Wide.strata"), options: CoordinatorStoreTests.options)
        var ids: [ManagedObjectID] = []
        for start in stride(from: 0, to: rows.count, by: 100) {
            let chunk = Array(rows[start..<min(start + 100, rows.count)])
            ids += try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
                let objects = try chunk.map { values in
                    let wide = Wide()
                    wide.text = values.text
                    wide.flag = values.small % 2 == 0
                    wide.when = Date(timeIntervalSince1970: Double(values.small))
                    wide.id = UUID()
                    wide.blob = Data(repeating: 7, count: Int(values.small & 0xFF))
                    wide.amount = Decimal(Int(values.small))
                    wide.ratio = values.ratio
                    wide.link = values.maybe == nil ? nil : URL(string: "https://example.com/\(values.small)")
                    wide.late = values.late
                    wide.big = values.big
                    wide.maybe = values.maybe
                    wide.small = values.small
                    wide.tail = values.text.isEmpty ? "" : "end"
                    wide.rank = values.rank
                    wide.level = values.level
                    try context.insert(wide)
                    return wide
                }
                try context.save()
                return objects.map(\.objectID)
            }
        }
        return (coordinator, ids)
    }

    static func request(_ aggregates: [(String, ExpressionDescription.Function, String)]) -> FetchRequest<Row> {
        var request = FetchRequest<Row>(entityName: "Wide")
        request.resultType = .dictionary
        request.propertiesToFetch = aggregates.map { .expression(ExpressionDescription(name: $0.0, function: $0.1, keyPath: $0.2)) }
        return request
    }

    /// The one result row of `request`, fetched by a new context.
    static func fetch(_ request: FetchRequest<Row>, on coordinator: PersistentStoreCoordinator) async throws -> Row {
        let rows = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let rows = try context.fetch(request)
            let registered = context.registeredObjects.count
            return (rows, registered)
        }
        #expect(rows.0.count == 1 && rows.1 == 0)   // one result, no object made
        return try #require(rows.0.first)
    }

    @Test("one aggregate of one field (its own walk): the sum of a double behind a long text, and of an optional behind it, equal the saved values")
    func oneField() async throws {
        let directory = TemporaryDirectory()
        let values = Self.values(700)
        let (coordinator, _) = try await Self.store(values, in: directory)

        let late = try await Self.fetch(Self.request([("total", .sum, "late")]), on: coordinator)
        #expect(late["total"] as? Double == values.reduce(0) { $0 + $1.late })

        // A count of self beside it is still one field for one aggregate.
        let maybe = try await Self.fetch(Self.request([("rows", .count, "self"), ("total", .sum, "maybe")]), on: coordinator)
        #expect(maybe["rows"] as? Int64 == 700)
        #expect(maybe["total"] as? Int64 == values.reduce(0) { $0 + Int64($1.maybe ?? 0) })

        // The last stored number, after a two-byte field head.
        let small = try await Self.fetch(Self.request([("low", .min, "small")]), on: coordinator)
        #expect(small["low"] as? Int64 == Int64(values.map(\.small).min()!))
    }

    @Test("several aggregates and fields: sums, averages, extremes and counts of every numeric kind equal the saved values; nil fields are not counted")
    func manyFields() async throws {
        let directory = TemporaryDirectory()
        let values = Self.values(600, seed: 28)
        let (coordinator, _) = try await Self.store(values, in: directory)
        let row = try await Self.fetch(Self.request([
            ("n", .count, "self"), ("present", .count, "maybe"),
            ("sumLate", .sum, "late"), ("meanLate", .average, "late"), ("maxLate", .max, "late"),
            ("minBig", .min, "big"), ("maxBig", .max, "big"),
            ("sumMaybe", .sum, "maybe"), ("meanSmall", .average, "small"),
            ("sumRatio", .sum, "ratio"), ("minRatio", .min, "ratio"),
        ]), on: coordinator)
        let present = values.compactMap(\.maybe)
        #expect(row["n"] as? Int64 == 600 && row["present"] as? Int64 == Int64(present.count))
        let sumLate = values.reduce(0) { $0 + $1.late }
        #expect(row["sumLate"] as? Double == sumLate && row["meanLate"] as? Double == sumLate / 600)
        #expect(row["maxLate"] as? Double == values.map(\.late).max())
        #expect(row["minBig"] as? Int64 == values.map(\.big).min() && row["maxBig"] as? Int64 == values.map(\.big).max())
        #expect(row["sumMaybe"] as? Int64 == present.reduce(0) { $0 + Int64($1) })
        #expect(row["meanSmall"] as? Double == Double(values.reduce(0) { $0 + Int64($1.small) }) / 600)
        #expect(row["sumRatio"] as? Double == values.reduce(0) { $0 + Double($1.ratio) })
        #expect(row["minRatio"] as? Float == values.map(\.ratio).min())
    }

    @Test("integers of ten-byte varints are read exactly; a sum that fits is exact even when the running sum wraps, one that does not is a typed error")
    func extremeIntegers() async throws {
        var values = Self.values(20, seed: 29)
        values[3].big = .max
        values[11].big = .max
        values[12].big = .min
        values[13].big = .min
        let directory = TemporaryDirectory()
        let (coordinator, _) = try await Self.store(values, in: directory)
        let row = try await Self.fetch(Self.request([("low", .min, "big"), ("high", .max, "big"), ("total", .sum, "big")]), on: coordinator)
        #expect(row["low"] as? Int64 == .min && row["high"] as? Int64 == .max)
        // Rows 3 and 11 wrap the running sum past the top, 12 and 13 back: the total fits.
        #expect(row["total"] as? Int64 == values.reduce(0) { $0 &+ $1.big })

        values[13].big = .max   // now max + max + max + min and the rest: past the top
        let other = TemporaryDirectory()
        let (overflowing, _) = try await Self.store(values, in: other)
        let context = ManagedObjectContext(.privateQueue, coordinator: overflowing)
        let error = await #expect(throws: StrataError.self) {
            try await context.perform { try $0.fetch(Self.request([("total", .sum, "big")])) }
        }
        #expect(error?.code == .invalidFetchRequest)
    }

    @Test("a record that does not decode up to the fields read fails the aggregate with corruptRecord naming the entity and row, in either walk")
    func corruptRecords() async throws {
        let directory = TemporaryDirectory()
        let values = Self.values(50, seed: 30)
        let (coordinator, ids) = try await Self.store(values, in: directory)
        let file = try #require(coordinator.persistentStores.first?.file)
        let rows = try #require(file.entities["Wide"]?.rows)
        let key = try #require(ids[17].primaryKey)
        let stored = try file.environment.read { txn in try txn.value(forKey: key.encoded, in: rows) }
        let record = try #require(stored)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        // Cut short (inside the long text, the first field), not a record at all, an unknown tag.
        for damaged in [Array(record.prefix(12)), [0xDE, 0xAD, 0xBE, 0xEF], [record[0], record[1], 0x1F]] {
            try file.environment.write { txn throws in try txn.put(damaged, forKey: key.encoded, in: rows) }
            for request in [Self.request([("total", .sum, "late")]), Self.request([("total", .sum, "late"), ("low", .min, "small")])] {
                let error = await #expect(throws: StrataError.self) { try await context.perform { try $0.fetch(request) } }
                #expect(error?.code == .corruptRecord && error?.entityName == "Wide" && error?.primaryKey == key.rawValue, "\(String(describing: error))")
            }
        }
        try file.environment.write { txn throws in try txn.put(record, forKey: key.encoded, in: rows) }
        let row = try await Self.fetch(Self.request([("total", .sum, "late")]), on: coordinator)
        #expect(row["total"] as? Double == values.reduce(0) { $0 + $1.late })
    }

    @Test("aggregates of one indexed attribute are read from its index, with no filter or one its ranges answer: the same values, counts of self and nil included, and no row read")
    func fromTheIndex() async throws {
        let directory = TemporaryDirectory()
        let values = Self.values(400, seed: 32)
        let (coordinator, ids) = try await Self.store(values, in: directory)
        let aggregates: [(String, ExpressionDescription.Function, String)] = [
            ("n", .count, "self"), ("present", .count, "level"), ("total", .sum, "level"),
            ("mean", .average, "level"), ("low", .min, "level"), ("high", .max, "level"),
        ]
        func expected(_ rows: [Values]) -> (Int64, Int64, Double, Double?, Double?, Double?) {
            let levels = rows.compactMap(\.level)
            let total = levels.reduce(0, +)
            return (Int64(rows.count), Int64(levels.count), total, levels.isEmpty ? nil : total / Double(levels.count), levels.min(), levels.max())
        }
        func check(_ row: Row, _ rows: [Values], _ label: String) {
            let want = expected(rows)
            #expect(row["n"] as? Int64 == want.0 && row["present"] as? Int64 == want.1, "\(label)")
            #expect(row["total"] as? Double == want.2 && row["mean"] as? Double == want.3, "\(label)")
            #expect(row["low"] as? Double == want.4 && row["high"] as? Double == want.5, "\(label)")
        }
        check(try await Self.fetch(Self.request(aggregates), on: coordinator), values, "all")
        let picked: Set<Double> = [-50, 0.25, 12.5, 99]
        let filters: [(String, @Sendable (Values) -> Bool)] = [
            ("level >= -20.5 AND level < 40", { v in guard let level = v.level else { return false }; return level >= -20.5 && level < 40 }),
            ("level > -20.5 AND level <= 40", { v in guard let level = v.level else { return false }; return level > -20.5 && level <= 40 }),
            ("level IN {-50, 0.25, 12.5, 99}", { v in v.level.map(picked.contains) ?? false }),
            ("level == nil", { v in v.level == nil }),
        ]
        for (format, test) in filters {
            var request = Self.request(aggregates)
            request.predicate = try FetchPredicate(format: format)
            check(try await Self.fetch(request, on: coordinator), values.filter(test), format)
        }
        // An integer index: the sum of rank over a range.
        var ranks = Self.request([("total", .sum, "rank"), ("n", .count, "rank")])
        ranks.predicate = try FetchPredicate(format: "rank BETWEEN {0, 99}")
        let rankRow = try await Self.fetch(ranks, on: coordinator)
        #expect(rankRow["total"] as? Int64 == (0...99).reduce(0, +) && rankRow["n"] as? Int64 == 100)

        // Damage one row's record: what the index answers alone (no filter, its ranges)
        // still adds up, no row read; a filter it does not answer reads the rows, and
        // meets the damaged one.
        let file = try #require(coordinator.persistentStores.first?.file)
        let rowsDatabase = try #require(file.entities["Wide"]?.rows)
        let damagedKey = try #require(ids[5].primaryKey)
        try file.environment.write { txn throws in try txn.put([0xDE, 0xAD], forKey: damagedKey.encoded, in: rowsDatabase) }
        check(try await Self.fetch(Self.request(aggregates), on: coordinator), values, "all, a row damaged")
        var picks = Self.request(aggregates)
        picks.predicate = try FetchPredicate(format: "level IN {-50, 0.25, 12.5, 99}")
        check(try await Self.fetch(picks, on: coordinator), values.filter { v in v.level.map(picked.contains) ?? false }, "IN, a row damaged")
        var nils = Self.request(aggregates)
        nils.predicate = try FetchPredicate(format: "level == nil")
        check(try await Self.fetch(nils, on: coordinator), values.filter { $0.level == nil }, "nil, a row damaged")
        #expect(try await Self.fetch(ranks, on: coordinator)["total"] as? Int64 == (0...99).reduce(0, +))
        var mixed = Self.request([("total", .sum, "level")])
        mixed.predicate = try FetchPredicate(format: "tail != 'never'")
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let error = await #expect(throws: StrataError.self) { try await context.perform { try $0.fetch(mixed) } }
        #expect(error?.code == .corruptRecord)
    }

    @Test("rows grouped by a value that is NaN for some make one group of them, beside the others")
    func nanGroups() async throws {
        let directory = TemporaryDirectory()
        var values = Self.values(12, seed: 34)
        for index in values.indices { values[index].level = index % 3 == 0 ? .nan : Double(index % 2) }
        let (coordinator, _) = try await Self.store(values, in: directory)
        var request = FetchRequest<Row>(entityName: "Wide")
        request.resultType = .dictionary
        request.propertiesToFetch = ["level", .expression(ExpressionDescription(name: "n", function: .count, keyPath: "self"))]
        request.propertiesToGroupBy = ["level"]
        request.sortDescriptors = [FetchSortDescriptor(key: "level")]
        let rows = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { try $0.fetch(request) }
        let counts = rows.map { $0["n"].map { "\($0)" } ?? "-" }
        let levels = rows.map { $0["level"].map { "\($0)" } ?? "-" }
        #expect(levels == ["0.0", "1.0", "nan"] && counts == ["4", "4", "4"], "\(rows)")
    }

    @Test("an index entry that is not a number's fails an aggregate read from the index with corruptRecord")
    func corruptIndexEntry() async throws {
        let directory = TemporaryDirectory()
        let (coordinator, _) = try await Self.store(Self.values(30, seed: 33), in: directory)
        let file = try #require(coordinator.persistentStores.first?.file)
        let storage = try #require(file.entities["Wide"])
        let slot = try #require(storage.attributeSlot(named: "rank"))
        let index = try #require(storage.attributes[slot].index)
        // A value part of 3 bytes (present, but no 8-byte number), then a primary key.
        try file.environment.write { txn throws in try txn.put([UInt8](), forKey: [0x01, 0x80, 0x00] + PrimaryKey(999)!.encoded, in: index) }
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let error = await #expect(throws: StrataError.self) {
            try await context.perform { try $0.fetch(Self.request([("total", .sum, "rank")])) }
        }
        #expect(error?.code == .corruptRecord && error?.entityName == "Wide", "\(String(describing: error))")
    }

    @Test("contexts summing at once while another saves see whole saves: each sum is the seeded total plus whole batches")
    func concurrentSums() async throws {
        let directory = TemporaryDirectory()
        let values = Self.values(400, seed: 31)
        let (coordinator, _) = try await Self.store(values, in: directory)
        let base = values.reduce(0) { $0 + $1.late }
        let sums = try await withThrowingTaskGroup(of: [Double].self) { group in
            group.addTask {
                // The writer: ten batches of ten rows of 1.5 each (15 a batch).
                for _ in 0..<10 {
                    try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
                        for _ in 0..<10 {
                            let wide = Wide()
                            wide.late = 1.5
                            try context.insert(wide)
                        }
                        try context.save()
                    }
                }
                return []
            }
            for _ in 0..<4 {
                group.addTask {
                    var seen: [Double] = []
                    for _ in 0..<15 {
                        let row = try await Self.fetch(Self.request([("total", .sum, "late")]), on: coordinator)
                        seen.append(try #require(row["total"] as? Double))
                    }
                    return seen
                }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        #expect(sums.count == 60)
        for sum in sums {
            let batches = (sum - base) / 15
            #expect(batches >= 0 && batches <= 10 && batches == batches.rounded(), "\(sum)")
        }
        let last = try await Self.fetch(Self.request([("total", .sum, "late")]), on: coordinator)
        #expect(last["total"] as? Double == base + 150)
    }
}

