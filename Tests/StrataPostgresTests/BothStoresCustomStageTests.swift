import Foundation
@testable import Strata
import StrataLocks
import StrataPostgres
import Testing

/// Custom migration stages on both stores: an LMDB store runs them on a copy of its file; a
/// PostgreSQL store on copies of its tables in schemas of its own, switched in by renaming
/// the schemas in one transaction.
@Suite("Custom migration stages on both stores")
struct BothStoresCustomStageTests {
    /// Version 1: a person with a full name, a city and an age kept as text.
    static let v1: ManagedObjectModel = {
        do {
            return try ManagedObjectModel(entities: [
                EntityDescription(name: "Person", attributes: [
                    AttributeDescription(name: "name", type: .string, isOptional: false, defaultValue: .string("")),
                    AttributeDescription(name: "city", type: .string),
                    AttributeDescription(name: "age", type: .string),
                ]),
            ], versionIdentifier: "1")
        } catch {
            preconditionFailure("\(error)")
        }
    }()

    /// Version 2: the name split (`last` required without a default), the city moved to an
    /// `Address` entity, the age an integer (no lightweight conversion from text).
    static let v2: ManagedObjectModel = {
        do {
            return try ManagedObjectModel(entities: [
                EntityDescription(
                    name: "Person",
                    attributes: [
                        AttributeDescription(name: "first", type: .string, isOptional: false, defaultValue: .string("")),
                        AttributeDescription(name: "last", type: .string, isOptional: false),
                        AttributeDescription(name: "age", type: .integer64),
                    ],
                    relationships: [RelationshipDescription(name: "address", destinationEntityName: "Address", inverseName: "residents")]),
                EntityDescription(
                    name: "Address", attributes: [AttributeDescription(name: "city", type: .string, isOptional: false, defaultValue: .string(""))],
                    relationships: [RelationshipDescription(name: "residents", destinationEntityName: "Person", inverseName: "address", isToMany: true)]),
            ], versionIdentifier: "2")
        } catch {
            preconditionFailure("\(error)")
        }
    }()

    static let people: [(name: String, city: String, age: String)] = [
        ("Ada Lovelace", "London", "36"), ("Grace Hopper", "New York", "85"), ("Alan Turing", "London", "41"),
    ]

    /// A version 1 store of ``people``; their IDs.
    static func seed(_ store: BothStoresTestStore) async throws -> [ManagedObjectID] {
        let (coordinator, added) = try await store.open(model: v1)
        let ids = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            var objects: [ManagedObject] = []
            for person in people {
                let object = ManagedObject(entity: try #require(v1.entitiesByName["Person"]))
                try context.insert(object)
                try object.setValue(person.name, forKey: "name")
                try object.setValue(person.city, forKey: "city")
                try object.setValue(person.age, forKey: "age")
                objects.append(object)
            }
            try context.save()
            return objects.map(\.objectID)
        }
        try await coordinator.remove(added)
        return ids
    }

    /// The split: reads every old person, writes the new one with the same ID, and one
    /// address per city.
    static let split: @Sendable (MigrationContexts) async throws -> Void = { contexts in
        let old = try await contexts.source.perform { context in
            try context.fetch(FetchRequest<ManagedObject>(entityName: "Person")).map { person in
                (person.objectID, try person.value(forKey: "name") as? String ?? "", try person.value(forKey: "city") as? String ?? "",
                 try person.value(forKey: "age") as? String ?? "")
            }
        }
        try await contexts.destination.perform { context in
            var addresses: [String: ManagedObject] = [:]
            for (id, name, city, age) in old {
                let person = try context.existingObject(with: id)
                let parts = name.split(separator: " ", maxSplits: 1).map(String.init)
                try person.setValue(parts[0], forKey: "first")
                try person.setValue(parts.count > 1 ? parts[1] : "", forKey: "last")
                try person.setValue(Int64(age), forKey: "age")
                if addresses[city] == nil {
                    let address = ManagedObject(entity: try #require(v2.entitiesByName["Address"]))
                    try context.insert(address)
                    try address.setValue(city, forKey: "city")
                    addresses[city] = address
                }
                try person.setValue(addresses[city], forKey: "address")
            }
            try context.save()
        }
    }

    static func options(_ plan: MigrationPlan) -> PersistentStore.Options {
        var options = PersistentStore.Options()
        options.migrationPlan = plan
        return options
    }

    /// `first last age city` of every person, sorted.
    static func people(in coordinator: PersistentStoreCoordinator) async throws -> [String] {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.fetch(FetchRequest<ManagedObject>(entityName: "Person")).map { person in
                let city = try (person.value(forKey: "address") as? ManagedObject)?.value(forKey: "city") as? String
                return "\(try person.value(forKey: "first") ?? "-") \(try person.value(forKey: "last") ?? "-") "
                    + "\(try person.value(forKey: "age") ?? "-") \(city ?? "-")"
            }.sorted()
        }
    }

    /// The work schemas a staged migration of `store` left in the database (PostgreSQL):
    /// named after the store's UUID.
    static func leftovers(_ store: BothStoresTestStore) throws -> [String] {
        guard store.kind == .postgres else { return [] }
        let identifier = try store.postgres.execute(
            "SELECT value FROM \"\(store.postgres.schema)\".strata_metadata WHERE key = 'identifier'").rows.first?.first
        guard case .text(let uuid)? = identifier else { return ["no identifier"] }
        let tag = String(uuid.lowercased().replacingOccurrences(of: "-", with: "").prefix(20))
        return try store.postgres.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname IN ($1, $2, $3)",
            [.text("strata_migrating_" + tag), .text("strata_source_" + tag), .text("strata_replaced_" + tag)]
        ).rows.map { "\($0)" }
    }

    @Test("a custom stage splits an entity and converts a value: it reads the old objects and writes the new ones, IDs kept; the store ends at the new version, and new objects get new keys",
          arguments: StoreKind.allCases)
    func splitInOneStage(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let ids = try await Self.seed(store)
        let plan = MigrationPlan(stages: [.custom(from: Self.v1, to: Self.v2, willMigrate: nil, didMigrate: Self.split)])
        let (coordinator, _) = try await store.open(model: Self.v2, options: Self.options(plan))
        #expect(try await Self.people(in: coordinator) == ["Ada Lovelace 36 London", "Alan Turing 41 London", "Grace Hopper 85 New York"])
        let (kept, addresses, newKey) = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let kept = try ids.map { try context.existingObject(with: $0).value(forKey: "first") as? String }
            let addresses = try context.count(for: FetchRequest<ManagedObject>(entityName: "Address"))
            let person = ManagedObject(entity: try #require(Self.v2.entitiesByName["Person"]))
            try context.insert(person)
            try person.setValue("Edsger", forKey: "first")
            try person.setValue("Dijkstra", forKey: "last")
            try context.save()
            return (kept, addresses, person.objectID.primaryKey?.rawValue)
        }
        #expect(kept == ["Ada", "Grace", "Alan"] && addresses == 2)
        #expect(newKey.map { key in !ids.contains { $0.primaryKey?.rawValue == key } } == true)
        #expect(try Self.leftovers(store) == [])
    }

    @Test("a stage whose code throws, or that leaves a required value unset, fails the migration and leaves the store as it was, copies gone; willMigrate sees the old version",
          arguments: StoreKind.allCases)
    func failures(kind: StoreKind) async throws {
        struct Refusal: Error, CustomStringConvertible {
            var description: String { "the stage refuses" }
        }
        let store = BothStoresTestStore(kind)
        _ = try await Self.seed(store)
        let before = try store.fingerprint()
        let throwing = MigrationPlan(stages: [.custom(from: Self.v1, to: Self.v2, willMigrate: nil, didMigrate: { _ in throw Refusal() })])
        let thrown = await #expect(throws: StrataError.self) { _ = try await store.open(model: Self.v2, options: Self.options(throwing)) }
        #expect(thrown?.code == .migrationFailed && thrown?.reason?.contains("threw: the stage refuses") == true, "\(String(describing: thrown))")
        #expect(try store.fingerprint() == before)
        #expect(try Self.leftovers(store).isEmpty)

        let seen = LockedValue(0)
        let lazy = MigrationPlan(stages: [.custom(from: Self.v1, to: Self.v2, willMigrate: { context in
            let count = try await context.perform { try $0.count(for: FetchRequest<ManagedObject>(entityName: "Person")) }
            seen.withLock { $0 = count }
        }, didMigrate: nil)])
        let unfilled = await #expect(throws: StrataError.self) { _ = try await store.open(model: Self.v2, options: Self.options(lazy)) }
        #expect(unfilled?.reason?.contains("left required attributes without a value: 3 Person object(s) hold no last") == true,
                "\(String(describing: unfilled))")
        #expect(seen.withLock { $0 } == 3)
        #expect(try store.fingerprint() == before)
        #expect(try Self.leftovers(store).isEmpty)
        // The store still opens with its own model.
        let (coordinator, _) = try await store.open(model: Self.v1)
        let count = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform {
            try $0.count(for: FetchRequest<ManagedObject>(entityName: "Person"))
        }
        #expect(count == 3)
    }
}
