import Foundation
@testable import Strata
import StrataLMDB
import StrataTesting
import Testing

@Suite("Fetch planner")
struct FetchPlannerTests {
    static func request(
        _ format: String? = nil, _ arguments: any Sendable..., sort: [FetchSortDescriptor] = [], limit: Int = 0,
        resultType: FetchRequest<ManagedObject>.ResultType = .managedObject
    ) throws -> FetchRequest<ManagedObject> {
        var request = FetchRequest<ManagedObject>(entityName: "Row")
        request.predicate = try format.map { try FetchPredicate(format: $0, argumentArray: arguments) }
        request.sortDescriptors = sort
        request.fetchLimit = limit
        request.resultType = resultType
        return request
    }

    static func plan(
        _ format: String? = nil, _ arguments: any Sendable..., sort: [FetchSortDescriptor] = [], limit: Int = 0,
        resultType: FetchRequest<ManagedObject>.ResultType = .managedObject
    ) throws -> FetchPlan {
        var request = FetchRequest<ManagedObject>(entityName: "Row")
        request.predicate = try format.map { try FetchPredicate(format: $0, argumentArray: arguments) }
        request.sortDescriptors = sort
        request.fetchLimit = limit
        request.resultType = resultType
        return try request.explain(in: PlannerFixtures.model())
    }

    // MARK: Plan choice

    @Test("equality and IN on an indexed attribute read points of its index, and nothing else is tested")
    func points() throws {
        var plan = try Self.plan("s == 'abc'")
        #expect(plan.access == .indexScan(attribute: "s", ranges: [#"== "abc""#], reverse: false))
        #expect(plan.filter == nil)
        #expect(plan.ordering == .primaryKey)
        plan = try Self.plan("i IN {3, 1, 1} AND x > 2")
        #expect(plan.access == .indexScan(attribute: "i", ranges: ["== 1", "== 3"], reverse: false))
        #expect(plan.filter == (try FetchPredicate(format: "x > 2")))
        // Points beat a sort order, even with a limit.
        plan = try Self.plan("s == 'abc'", sort: [FetchSortDescriptor(key: "i")], limit: 5)
        #expect(plan.access == .indexScan(attribute: "s", ranges: [#"== "abc""#], reverse: false))
        #expect(plan.ordering == .boundedHeap(capacity: 5))
        // Constants on the left are turned round.
        plan = try Self.plan("3 == i")
        #expect(plan.access == .indexScan(attribute: "i", ranges: ["== 3"], reverse: false))
    }

    @Test("ranges, BETWEEN and BEGINSWITH read ranges of the index; constraints on one attribute are intersected")
    func ranges() throws {
        #expect(try Self.plan("i > 2").access == .indexScan(attribute: "i", ranges: ["> 2"], reverse: false))
        #expect(try Self.plan("i > 2 AND i <= 7").access == .indexScan(attribute: "i", ranges: ["> 2 AND <= 7"], reverse: false))
        #expect(try Self.plan("i BETWEEN {1, 3}").access == .indexScan(attribute: "i", ranges: ["BETWEEN {1, 3}"], reverse: false))
        #expect(try Self.plan("s BEGINSWITH 'ab'").access == .indexScan(attribute: "s", ranges: [#"BEGINSWITH "ab""#], reverse: false))
        // A two-sided range beats a one-sided one.
        #expect(try Self.plan("d > 0 AND s BEGINSWITH 'a'").access == .indexScan(attribute: "s", ranges: [#"BEGINSWITH "a""#], reverse: false))
        // Integers against fractions: i > 2.5 is i >= 3.
        let fraction = try Self.plan("i > 2.5")
        #expect(fraction.access == .indexScan(attribute: "i", ranges: [">= 3"], reverse: false), "\(fraction)")
        // A double range open upwards may meet NaN, which sorts last: tested again.
        #expect(try Self.plan("d > 1").filter == (try FetchPredicate(format: "d > 1")))
        #expect(try Self.plan("d < 1").filter == nil)
    }

    @Test("what an index cannot answer is a full scan")
    func fullScans() throws {
        for format in ["x > 2", "s ==[c] 'abc'", "s CONTAINS 'b'", "i != 3", "group.name == 'g1'", "s != nil",
                       "i == 3 OR i == 4", "NOT i == 3", "ANY labels.name == 'red'", "i == 1.0e300"] {
            let plan = try Self.plan(format)
            #expect(plan.access == .fullScan, "\(format): \(plan)")
            #expect(plan.filter != nil)
        }
        #expect(try Self.plan().description == "SCAN Row; ORDER BY PRIMARY KEY")
        #expect(try Self.plan(limit: 3).stopsEarly)
    }

    @Test("a predicate that leaves nothing reads nothing")
    func empty() throws {
        for format in ["FALSEPREDICATE", "i == 2.5", "i > 3 AND i < 2", "i IN {}", "d == %@", "s == 3",
                       "i > 1 AND FALSEPREDICATE", "t == %@"] {
            let argument: any Sendable = format == "d == %@" ? Double.nan : Date(timeIntervalSinceReferenceDate: .nan)
            let plan = format.contains("%@")
                ? try Self.plan(format, argument, resultType: .count) : try Self.plan(format, resultType: .count)
            #expect(!plan.readsRows, "\(format): \(plan)")
            #expect(plan.description.hasPrefix("NOTHING"), "\(format): \(plan)")
        }
    }

    @Test("a sort key with an index and a limit reads the index in order and stops early")
    func sortOrder() throws {
        var plan = try Self.plan(sort: [FetchSortDescriptor(key: "i")], limit: 20)
        #expect(plan.access == .indexScan(attribute: "i", ranges: ["ALL"], reverse: false))
        #expect(plan.ordering == .index)
        #expect(plan.stopsEarly)
        plan = try Self.plan("x > 1", sort: [FetchSortDescriptor(key: "t", ascending: false)], limit: 5)
        #expect(plan.access == .indexScan(attribute: "t", ranges: ["ALL"], reverse: true))
        #expect(plan.description == "SEARCH Row USING INDEX t REVERSE FILTER x > 1; ORDER BY INDEX (t DESC); STOP AFTER 5")
        // The sort key's own range is kept.
        plan = try Self.plan("i > 2", sort: [FetchSortDescriptor(key: "i")], limit: 5)
        #expect(plan.access == .indexScan(attribute: "i", ranges: ["> 2"], reverse: false))
        #expect(plan.filter == nil)
        // Without a limit the whole result is needed anyway: scan and sort.
        plan = try Self.plan(sort: [FetchSortDescriptor(key: "i")])
        #expect(plan.access == .fullScan)
        #expect(plan.ordering == .inMemory)
        // Case-insensitive string order is not the index's byte order.
        plan = try Self.plan(sort: [FetchSortDescriptor(key: "s", comparison: .caseInsensitive)], limit: 5)
        #expect(plan.access == .fullScan)
        #expect(plan.ordering == .boundedHeap(capacity: 5))
        // For other kinds the comparison option changes nothing.
        #expect(try Self.plan(sort: [FetchSortDescriptor(key: "i", comparison: .localized)], limit: 5).ordering == .index)
        // A key through a relationship has no index of the entity.
        #expect(try Self.plan(sort: [FetchSortDescriptor(key: "group.name")], limit: 5).access == .fullScan)
    }

    @Test("counts and ID fetches that the index decides alone read no rows")
    func withoutRows() throws {
        #expect(try !Self.plan("s == 'a'", resultType: .count).readsRows)
        #expect(try !Self.plan("s BEGINSWITH 'a'", resultType: .managedObjectID).readsRows)
        #expect(try !Self.plan(resultType: .count).readsRows)
        #expect(try !Self.plan(sort: [FetchSortDescriptor(key: "i")], limit: 3, resultType: .managedObjectID).readsRows)
        #expect(try Self.plan("s == 'a'").readsRows)
        #expect(try Self.plan("d > 0", resultType: .count).readsRows)
        #expect(try Self.plan("s == 'a'", sort: [FetchSortDescriptor(key: "x")], resultType: .managedObjectID).readsRows)
    }

    @Test("explain checks the request like a fetch does")
    func explainValidates() throws {
        let unknown = #expect(throws: StrataError.self) { try Self.plan("nope == 1") }
        #expect(unknown == .unknownKey(key: "nope", entity: "Row"))
        var request = FetchRequest<ManagedObject>(entityName: "Nope")
        #expect(throws: StrataError.unknownEntity("Nope")) { try request.explain(in: PlannerFixtures.model()) }
        request = FetchRequest(entityName: "Row")
        request.predicate = try FetchPredicate(format: "i == $LEVEL")
        #expect(throws: FetchPredicateError.self) { try request.explain(in: PlannerFixtures.model()) }
    }

    // MARK: Results

    @Test("every plan returns what testing every row returns, on random data and random requests")
    func randomRequestsAgreeWithBruteForce() throws {
        let directory = TemporaryDirectory()
        let model = try PlannerFixtures.model()
        let store = try StoreFile(
            directory: URL(fileURLWithPath: directory.appending("planner")), model: model, readOnly: false,
            configuration: StoreFixtures.configuration)
        var random = SeededRandomNumberGenerator(seed: 0x5EED_0004)
        try PlannerFixtures.populate(store, count: 300, using: &random)
        var plansRun = 0, indexPlansRun = 0, earlyStops = 0
        for round in 0..<300 {
            let request = PlannerFixtures.request(using: &random)
            let expected = try store.bruteForce(request)
            let chosen = try request.explain(in: model)
            let alternatives = try FetchPlanner.alternatives(request, in: model)
            #expect(alternatives.map(\.description).contains(chosen.description), "round \(round): \(chosen) is not among the alternatives")
            for plan in alternatives {
                let rows = try store.run(plan)
                #expect(rows.comparable == expected.comparable, "seed \(random.seed) round \(round): \(request) with plan \(plan)")
                plansRun += 1
                if case .indexScan = plan.access { indexPlansRun += 1 }
                if plan.stopsEarly { earlyStops += 1 }
            }
        }
        // The generator reaches every kind of plan.
        #expect(indexPlansRun > 200)
        #expect(earlyStops > 20)
        #expect(plansRun > 500, "\(plansRun) plans, \(indexPlansRun) on an index, \(earlyStops) stopping early")
    }

    @Test("an index scan in order stops early: it reads a fraction of the rows")
    func earlyStopReadsLittle() throws {
        let directory = TemporaryDirectory()
        let model = try PlannerFixtures.model()
        let store = try StoreFile(
            directory: URL(fileURLWithPath: directory.appending("early")), model: model, readOnly: false,
            configuration: StoreFixtures.configuration)
        try store.write { writer in
            for n in 0..<2_000 {
                let id = try writer.makePermanentID(for: "Row")
                try writer.insert(store.snapshot(id, ["i": .integer(Int64(n % 1000)), "x": .double(Double(n))]))
            }
        }
        var request = FetchRequest<ManagedObject>(entityName: "Row")
        request.sortDescriptors = [FetchSortDescriptor(key: "i", ascending: false)]
        request.fetchLimit = 3
        request.fetchOffset = 1
        let plan = try request.explain(in: model)
        #expect(plan.ordering == .index)
        // Count the rows read through a predicate that counts its calls... by reading
        // the results: 999, 999, 998, 998 are the first four; offset 1 leaves three.
        guard case .snapshots(let rows) = try store.run(plan).asSnapshots else { Issue.record("not snapshots"); return }
        let values = rows.map { $0.attributes[store.entities["Row"]!.attributeSlot(named: "i")!] }
        #expect(values == [.integer(999), .integer(998), .integer(998)])
        // Ties (the same i) come in primary-key order even in a descending scan.
        #expect(rows[1].objectID.primaryKey! < rows[2].objectID.primaryKey!)
        #expect(rows == (try store.bruteForce(request)).snapshotsValue)
    }

    @Test("a bounded heap keeps the first rows of a sort")
    func boundedHeap() {
        var random = SeededRandomNumberGenerator(seed: 42)
        for capacity in [0, 1, 2, 7, 50] {
            var heap = BoundedHeap<Int>(capacity: capacity, by: <)
            let values = (0..<100).map { _ in Int.random(in: 0..<40, using: &random) }
            values.forEach { heap.insert($0) }
            #expect(heap.sorted() == Array(values.sorted().prefix(capacity)))
        }
    }

    @Test("several tasks fetch from one store at once with the same results")
    func concurrentFetches() async throws {
        let directory = TemporaryDirectory()
        let model = try PlannerFixtures.model()
        let store = try StoreFile(
            directory: URL(fileURLWithPath: directory.appending("concurrent")), model: model, readOnly: false,
            configuration: StoreFixtures.configuration)
        var random = SeededRandomNumberGenerator(seed: 7)
        try PlannerFixtures.populate(store, count: 200, using: &random)
        let requests = (0..<40).map { _ in PlannerFixtures.request(using: &random) }
        let expected = try requests.map { try store.bruteForce($0) }
        try await withThrowingTaskGroup(of: (Int, FetchRows).self) { group in
            for (index, request) in requests.enumerated() {
                group.addTask { (index, try store.run(try request.explain(in: model))) }
            }
            // A writer commits meanwhile: readers see the snapshot they started with,
            // and the rows they compare against were read before it.
            let gate = try store.insert("Group", ["name": .string("late")])
            #expect(gate.primaryKey != nil)
            for try await (index, rows) in group {
                #expect(rows.comparable == expected[index].comparable, "\(requests[index])")
            }
        }
    }
}

extension FetchRows {
    /// The rows with NaN values replaced by a marker: NaN is not equal to itself, and a
    /// date whose time is NaN cannot even be printed.
    /// Rows read from a store, as snapshots (what a brute-force scan makes).
    var asSnapshots: FetchRows {
        guard case .rows(let batch) = self else { return self }
        return (try? batch.snapshots()).map(FetchRows.snapshots) ?? self
    }

    var comparable: FetchRows {
        guard case .snapshots(let rows) = asSnapshots else { return self }
        return .snapshots(rows.map { row in
            var row = row
            row.attributes = row.attributes.map { value in
                switch value {
                case .double(let d)? where d.isNaN: .string("NaN")
                case .float(let f)? where f.isNaN: .string("NaN")
                case .date(let t)? where t.timeIntervalSinceReferenceDate.isNaN: .string("NaN")
                default: value
                }
            }
            return row
        })
    }

    var snapshotsValue: [ObjectSnapshot] {
        if case .snapshots(let rows) = asSnapshots { return rows }
        return []
    }
}

@Suite("Fetch planner: documented examples")
struct FetchPlannerExampleTests {
    @Test("the README's and the Queries article's example plans")
    func documentedPlans() throws {
        let model = try ManagedObjectModel(types: [Folder.self, Note.self, Tag.self])
        var request = FetchRequest<Note>()
        request.predicate = \Note.priority >= 3 && \Note.title == "Groceries"
        request.sortDescriptors = [FetchSortDescriptor(\Note.title)]
        request.fetchLimit = 20
        #expect(try request.explain(in: model).description
            == #"SEARCH Note USING INDEX title (== "Groceries") FILTER priority >= 3; ORDER BY INDEX (title ASC); STOP AFTER 20"#)
        request.predicate = try FetchPredicate(format: "title BEGINSWITH %@ AND body CONTAINS %@", "Gro", "milk")
        #expect(try request.explain(in: model).description
            == #"SEARCH Note USING INDEX title (BEGINSWITH "Gro") FILTER body CONTAINS "milk"; ORDER BY INDEX (title ASC); STOP AFTER 20"#)
        request.predicate = try FetchPredicate(format: "title BEGINSWITH %@ AND priority > 2", "Gro")
        request.sortDescriptors = []
        #expect(try request.explain(in: model).description
            == #"SEARCH Note USING INDEX title (BEGINSWITH "Gro") FILTER priority > 2; ORDER BY PRIMARY KEY"#)
    }
}
