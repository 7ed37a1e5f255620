import Foundation
@testable import Strata
import StrataLMDB
import StrataTesting

/// A model and random data for the planner tests: every index kind, values at the edges
/// of each kind's order (nil, ±0, ±infinity, NaN, empty and over-long strings, NUL
/// bytes), a sub-entity, and relationships for key paths.
///
/// ```
/// Row   i (Int64, indexed)  d (Double, indexed)  s (String, indexed)  b (Bool, indexed)
///       t (Date, indexed)   u (UUID, indexed)    x (Double)           f (Float, indexed)
///       group → Group       labels ⇄ Label.rows
/// └── SubRow  extra (Int32)
/// Group name (indexed)  rows ⇄ Row.group
/// Label name            rows ⇄ Row.labels
/// ```
enum PlannerFixtures {
    static func model() throws -> ManagedObjectModel {
        try ManagedObjectModel(entities: [
            EntityDescription(name: "Row", attributes: [
                AttributeDescription(name: "i", type: .integer64, isIndexed: true),
                AttributeDescription(name: "d", type: .double, isIndexed: true),
                AttributeDescription(name: "s", type: .string, isIndexed: true),
                AttributeDescription(name: "b", type: .boolean, isIndexed: true),
                AttributeDescription(name: "t", type: .date, isIndexed: true),
                AttributeDescription(name: "u", type: .uuid, isIndexed: true),
                AttributeDescription(name: "f", type: .float, isIndexed: true),
                AttributeDescription(name: "x", type: .double),
            ], relationships: [
                RelationshipDescription(name: "group", destinationEntityName: "Group", inverseName: "rows"),
                RelationshipDescription(name: "labels", destinationEntityName: "Label", inverseName: "rows", isToMany: true),
            ]),
            EntityDescription(name: "SubRow", superentityName: "Row", attributes: [
                AttributeDescription(name: "extra", type: .integer32),
            ]),
            EntityDescription(name: "Group", attributes: [
                AttributeDescription(name: "name", type: .string, isIndexed: true),
            ], relationships: [
                RelationshipDescription(name: "rows", destinationEntityName: "Row", inverseName: "group", isToMany: true),
            ]),
            EntityDescription(name: "Label", attributes: [
                AttributeDescription(name: "name", type: .string),
            ], relationships: [
                RelationshipDescription(name: "rows", destinationEntityName: "Row", inverseName: "labels", isToMany: true),
            ]),
        ])
    }

    static let long = String(repeating: "x", count: 600)
    static let integers: [Int64?] = [nil, -3, -1, 0, 1, 2, 3, 7, .max, .min]
    static let doubles: [Double?] = [nil, -.infinity, -1.5, -0.0, 0.0, 1, 2.5, .infinity, .nan, 1e300]
    static let strings: [String?] = [
        nil, "", "a", "ab", "abc", "abd", "b", "B", "Ab", "é", "e\u{301}", "a\u{0}b", "a\u{0}", "zz",
        long, long + "a", long + "b", long + "\u{0}", "x",
    ]
    static let dates: [Date?] = [
        nil, Date(timeIntervalSinceReferenceDate: -1), Date(timeIntervalSinceReferenceDate: 0),
        Date(timeIntervalSinceReferenceDate: 1e9), Date(timeIntervalSinceReferenceDate: .nan),
    ]
    static let uuids: [UUID?] = [
        nil, UUID(uuidString: "00000000-0000-0000-0000-000000000001")!,
        UUID(uuidString: "80000000-0000-0000-0000-000000000000")!, UUID(uuidString: "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF")!,
    ]
    static let floats: [Float?] = [nil, -2, 0, 0.5, 3, .nan]
    static let groupNames = ["g1", "g2", "G1", nil] as [String?]
    static let labelNames = ["red", "green", "blue"]

    /// Fills a store: groups, labels, then `count` rows (some of them SubRows) with
    /// random values and relationships.
    static func populate(_ store: StoreFile, count: Int, using random: inout SeededRandomNumberGenerator) throws {
        var groups: [ManagedObjectID] = []
        for name in groupNames { groups.append(try store.insert("Group", ["name": name.map(AttributeValue.string)])) }
        var labels: [ManagedObjectID] = []
        for name in labelNames { labels.append(try store.insert("Label", ["name": .string(name)])) }
        for _ in 0..<count {
            let entity = random.next() % 5 == 0 ? "SubRow" : "Row"
            var values: [String: AttributeValue?] = [
                "i": integers.randomElement(using: &random)!.map(AttributeValue.integer),
                "d": doubles.randomElement(using: &random)!.map(AttributeValue.double),
                "s": strings.randomElement(using: &random)!.map(AttributeValue.string),
                "b": [nil, true, false].randomElement(using: &random)!.map(AttributeValue.boolean),
                "t": dates.randomElement(using: &random)!.map(AttributeValue.date),
                "u": uuids.randomElement(using: &random)!.map(AttributeValue.uuid),
                "f": floats.randomElement(using: &random)!.map(AttributeValue.float),
                "x": doubles.randomElement(using: &random)!.map(AttributeValue.double),
            ]
            if entity == "SubRow" { values["extra"] = .integer(Int64.random(in: 0...3, using: &random)) }
            let group = random.next() % 4 == 0 ? nil : groups.randomElement(using: &random)
            let chosen = labels.filter { _ in random.next() % 2 == 0 }
            try store.insert(entity, values, relationships: ["group": .toOne(group), "labels": .toMany(chosen)])
        }
    }

    // MARK: Random requests

    /// The attributes of Row, with the constants a predicate may compare them with
    /// (their own values and a few of other kinds).
    static func constants(for key: String) -> [PredicateValue] {
        let extras: [PredicateValue] = [.integer(2), .double(2.5), .double(-0.5), .string("a"), .null, .bool(true), .decimal(Decimal(1))]
        let own: [PredicateValue] = switch key {
        case "i", "extra": integers.map { $0.map(PredicateValue.integer) ?? .null }
        case "d", "x": doubles.map { $0.map(PredicateValue.double) ?? .null }
        case "f": floats.map { $0.map { PredicateValue.double(Double($0)) } ?? .null }
        case "s", "group.name", "labels.name": strings.map { $0.map(PredicateValue.string) ?? .null } + [.string("G"), .string("g")]
        case "b": [.bool(true), .bool(false), .integer(1), .integer(0), .null]
        case "t": dates.map { $0.map(PredicateValue.date) ?? .null }
        case "u": uuids.map { $0.map(PredicateValue.uuid) ?? .null }
        default: []
        }
        return own + extras
    }

    static let keys = ["i", "d", "s", "b", "t", "u", "f", "x", "group.name"]

    static func comparison(using random: inout SeededRandomNumberGenerator) -> PredicateNode {
        let roll = random.next() % 20
        if roll == 0 {
            // A to-many key path: quantified or counted.
            let name = PredicateValue.string(labelNames.randomElement(using: &random)!)
            let modifier = [PredicateComparison.Modifier.any, .all, .none].randomElement(using: &random)!
            return .comparison(PredicateComparison(modifier: modifier, left: .keyPath(["labels", "name"]), op: .equal, right: .constant(name)))
        }
        if roll == 1 {
            return .comparison(PredicateComparison(
                left: .keyPath(["labels", "@count"]), op: [.greater, .equal, .lessOrEqual].randomElement(using: &random)!,
                right: .constant(.integer(Int64.random(in: 0...3, using: &random)))))
        }
        let key = keys.randomElement(using: &random)!
        let values = constants(for: key)
        let ops: [PredicateComparison.Operator] = [.equal, .notEqual, .less, .lessOrEqual, .greater, .greaterOrEqual, .between, .in, .beginsWith]
        let op = ops.randomElement(using: &random)!
        var options: PredicateComparison.Options = []
        if key == "s" || key == "group.name", random.next() % 4 == 0 { options = [.caseInsensitive] }
        let right: Strata.PredicateExpression
        switch op {
        case .between:
            right = .aggregate([.constant(values.randomElement(using: &random)!), .constant(values.randomElement(using: &random)!)])
        case .in:
            right = .constant(.array((0..<Int.random(in: 0...3, using: &random)).map { _ in values.randomElement(using: &random)! }))
        default:
            right = .constant(values.randomElement(using: &random)!)
        }
        let path = Strata.PredicateExpression.keyPath(key.split(separator: ".").map(String.init))
        if op.flipped != nil, random.next() % 5 == 0 {
            return .comparison(PredicateComparison(left: right, op: op.flipped!, options: options, right: path))
        }
        return .comparison(PredicateComparison(left: path, op: op, options: options, right: right))
    }

    static func predicate(using random: inout SeededRandomNumberGenerator) -> PredicateNode? {
        switch random.next() % 10 {
        case 0: return nil
        case 1: return .or([comparison(using: &random), comparison(using: &random)])
        case 2: return .not(comparison(using: &random))
        case 3: return .and([comparison(using: &random), .constant(random.next() % 4 != 0)])
        default: return .and((0..<Int.random(in: 1...3, using: &random)).map { _ in comparison(using: &random) })
        }
    }

    static func request(using random: inout SeededRandomNumberGenerator) -> FetchRequest<ManagedObject> {
        var request = FetchRequest<ManagedObject>(entityName: "Row")
        request.predicate = predicate(using: &random).map { FetchPredicate(node: $0) }
        let sortKeys = ["i", "d", "s", "b", "t", "u", "f", "x", "group.name"]
        request.sortDescriptors = (0..<Int.random(in: 0...2, using: &random)).map { _ in
            FetchSortDescriptor(
                key: sortKeys.randomElement(using: &random)!, ascending: random.next() % 2 == 0,
                comparison: [.literal, .literal, .caseInsensitive, .localized].randomElement(using: &random)!)
        }
        request.fetchLimit = random.next() % 2 == 0 ? 0 : Int.random(in: 1...12, using: &random)
        request.fetchOffset = random.next() % 3 == 0 ? Int.random(in: 1...6, using: &random) : 0
        request.includesSubentities = random.next() % 4 != 0
        request.resultType = [.managedObject, .managedObjectID, .count].randomElement(using: &random)!
        return request
    }
}

extension StoreFile {
    /// What `request` must return, found the slow way: every row tested, all sorted.
    func bruteForce(_ request: FetchRequest<ManagedObject>) throws -> FetchRows {
        try read { reader in
            let loader = RowLoader(store: reader.store, transaction: reader.transaction)
            var matches: [RowSubject<ReadTransaction>] = []
            try reader.forEachRow(entity: request.entityName, includesSubentities: request.includesSubentities) { snapshot in
                let subject = try loader.subject(snapshot)
                if try request.predicate.map({ try PredicateEvaluator.evaluate($0.node, on: subject) }) ?? true {
                    matches.append(subject)
                }
                return true
            }
            var failure: (any Error)?
            matches.sort { a, b in
                do { return try FetchSorting.precedes(a, b, by: request.sortDescriptors) } catch {
                    failure = error
                    return false
                }
            }
            if let failure { throw failure }
            let window = matches.dropFirst(max(0, request.fetchOffset)).prefix(request.fetchLimit > 0 ? request.fetchLimit : Int.max)
            switch request.resultType {
            case .managedObject, .dictionary: return .snapshots(window.map(\.snapshot))
            case .managedObjectID: return .objectIDs(window.map(\.snapshot.objectID))
            case .count: return .count(window.count)
            }
        }
    }

    /// What `plan` returns.
    func run(_ plan: FetchPlan) throws -> FetchRows {
        try read { reader in try reader.execute(plan) }
    }
}
