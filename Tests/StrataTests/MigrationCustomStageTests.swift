import Foundation
@_spi(StorageInternals) @testable import Strata
import StrataLMDB
import StrataLocks
import StrataTesting
import Testing

/// Custom stages: code that sees the old objects and the new ones in one stage, run on a
/// copy of the store that replaces it only when everything succeeded.
@Suite("Migration: custom stages")
struct MigrationCustomStageTests {
    /// Version 1: a person with a full name, a city and an age kept as text.
    static let v1: ManagedObjectModel = try! ManagedObjectModel(entities: [
        EntityDescription(name: "Person", attributes: [
            AttributeDescription(name: "name", type: .string, isOptional: false, defaultValue: .string("")),
            AttributeDescription(name: "city", type: .string),
            AttributeDescription(name: "age", type: .string),
        ]),
    ], versionIdentifier: "1")

    /// Version 2: the name split in two (`last` required without a default), the city
    /// moved to an `Address` entity, the age an integer (no lightweight conversion).
    static let v2: ManagedObjectModel = try! ManagedObjectModel(entities: [
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

    static let people: [(name: String, city: String, age: String)] = [
        ("Ada Lovelace", "London", "36"), ("Grace Hopper", "New York", "85"), ("Alan Turing", "London", "41"),
    ]

    /// A version 1 store of ``people`` at `url`.
    static func seed(_ url: URL, model: ManagedObjectModel = v1) async throws {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        let store = try await coordinator.addPersistentStore(at: url, options: CoordinatorStoreTests.options)
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            for person in people {
                let object = ManagedObject(entity: model.entitiesByName["Person"]!)
                try context.insert(object)
                try object.setValue(person.name, forKey: "name")
                try object.setValue(person.city, forKey: "city")
                try object.setValue(person.age, forKey: "age")
            }
            try context.save()
        }
        try await coordinator.remove(store)
    }

    /// The split: reads every old person, writes the new one with the same ID, and one
    /// address per city.
    static let split: @Sendable (MigrationContexts) async throws -> Void = { contexts in
        let old = try await contexts.source.perform { context in
            try context.fetch(FetchRequest<ManagedObject>(entityName: "Person")).map { person in
                (person.objectID, try person.value(forKey: "name") as! String, try person.value(forKey: "city") as! String,
                 try person.value(forKey: "age") as! String)
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
                    let address = ManagedObject(entity: context.persistentStoreCoordinator!.managedObjectModel.entitiesByName["Address"]!)
                    try context.insert(address)
                    try address.setValue(city, forKey: "city")
                    addresses[city] = address
                }
                try person.setValue(addresses[city], forKey: "address")
            }
            try context.save()
        }
    }

    static func open(_ url: URL, model: ManagedObjectModel, plan: MigrationPlan?, progress: MigrationProgressHandler? = nil) async throws -> PersistentStoreCoordinator {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        var options = CoordinatorStoreTests.options
        options.migrationPlan = plan
        options.migrationProgress = progress
        try await coordinator.addPersistentStore(at: url, options: options)
        return coordinator
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

    static func bytes(_ url: URL) throws -> Data { try Data(contentsOf: url.appendingPathComponent("data.mdb")) }

    @Test("a custom stage splits an entity and converts a value in one stage: it reads the old objects and writes the new ones, IDs kept, and the store ends at the new version whole")
    func splitInOneStage() async throws {
        let directory = TemporaryDirectory()
        try await Self.seed(directory.url)
        let reports = LockedValue<[MigrationProgress]>([])
        let plan = MigrationPlan(stages: [.custom(from: Self.v1, to: Self.v2, willMigrate: nil, didMigrate: Self.split)])
        let coordinator = try await Self.open(
            directory.url, model: Self.v2, plan: plan, progress: MigrationProgressHandler { progress in reports.withLock { $0.append(progress) } })
        #expect(try await Self.people(in: coordinator) == ["Ada Lovelace 36 London", "Alan Turing 41 London", "Grace Hopper 85 New York"])
        let addresses = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.count(for: FetchRequest<ManagedObject>(entityName: "Address"))
        }
        #expect(addresses == 2)
        #expect(try await coordinator.checkIntegrity().problems.isEmpty)
        #expect(!FileManager.default.fileExists(atPath: directory.url.appendingPathComponent(StagedMigration.workDirectoryName).path))
        #expect(reports.withLock { $0 }.last?.isFinished == true)
        let store = try #require(coordinator.persistentStores.first)
        #expect(store.file!.metadata.storedModel?.versionIdentifier == "2")
    }

    @Test("willMigrate fixes the old data before the inferred part: duplicates removed so a new uniqueness constraint holds")
    func willMigrateBeforeTheInferredPart() async throws {
        let directory = TemporaryDirectory()
        let tags1 = try ManagedObjectModel(entities: [
            EntityDescription(name: "Tag", attributes: [AttributeDescription(name: "label", type: .string)]),
        ], versionIdentifier: "1")
        let tags2 = try ManagedObjectModel(entities: [
            EntityDescription(name: "Tag", attributes: [AttributeDescription(name: "label", type: .string)], uniquenessConstraints: [["label"]]),
        ], versionIdentifier: "2")
        do {
            let coordinator = PersistentStoreCoordinator(managedObjectModel: tags1)
            let store = try await coordinator.addPersistentStore(at: directory.url, options: CoordinatorStoreTests.options)
            try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
                for label in ["red", "blue", "red", "green", "blue"] {
                    let tag = ManagedObject(entity: tags1.entitiesByName["Tag"]!)
                    try context.insert(tag)
                    try tag.setValue(label, forKey: "label")
                }
                try context.save()
            }
            try await coordinator.remove(store)
        }
        // The lightweight stage refuses: stored objects break the constraint.
        let refused = await #expect(throws: StrataError.self) { _ = try await Self.open(directory.url, model: tags2, plan: nil) }
        #expect(refused?.code == .migrationFailed && refused?.constraintConflicts.count == 2)

        let dedupe: @Sendable (ManagedObjectContext) async throws -> Void = { context in
            try await context.perform { context in
                var seen = Set<String>()
                for tag in try context.fetch(FetchRequest<ManagedObject>(entityName: "Tag")) {
                    let label = try tag.value(forKey: "label") as? String ?? ""
                    if !seen.insert(label).inserted { try context.delete(tag) }
                }
                try context.save()
            }
        }
        let plan = MigrationPlan(stages: [.custom(from: tags1, to: tags2, willMigrate: dedupe, didMigrate: nil)])
        let coordinator = try await Self.open(directory.url, model: tags2, plan: plan)
        let labels = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.fetch(FetchRequest<ManagedObject>(entityName: "Tag")).map { try $0.value(forKey: "label") as? String ?? "" }.sorted()
        }
        #expect(labels == ["blue", "green", "red"])
        #expect(try await coordinator.checkIntegrity().problems.isEmpty)
    }

    @Test("a stage that throws, or leaves a required attribute empty, fails the migration and leaves the store byte for byte, with no copy behind")
    func failingStages() async throws {
        let directory = TemporaryDirectory()
        try await Self.seed(directory.url)
        let before = try Self.bytes(directory.url)
        struct Refusal: Error, CustomStringConvertible { var description: String { "the stage refuses" } }
        let throwing = MigrationPlan(stages: [.custom(from: Self.v1, to: Self.v2, willMigrate: nil, didMigrate: { _ in throw Refusal() })])
        let thrown = await #expect(throws: StrataError.self) { _ = try await Self.open(directory.url, model: Self.v2, plan: throwing) }
        #expect(thrown?.code == .migrationFailed && thrown?.reason?.contains("stage 1 (custom version 1 → version 2) threw: the stage refuses") == true,
            "\(String(describing: thrown))")
        #expect(try Self.bytes(directory.url) == before)

        let lazy = MigrationPlan(stages: [.custom(from: Self.v1, to: Self.v2, willMigrate: nil, didMigrate: nil)])
        let unfilled = await #expect(throws: StrataError.self) { _ = try await Self.open(directory.url, model: Self.v2, plan: lazy) }
        #expect(unfilled?.reason?.contains("left required attributes without a value: 3 Person object(s) hold no last") == true,
            "\(String(describing: unfilled))")
        #expect(try Self.bytes(directory.url) == before)
        #expect(!FileManager.default.fileExists(atPath: directory.url.appendingPathComponent(StagedMigration.workDirectoryName).path))

        // Without the plan, the inferred stage says what needs a custom stage.
        let inferred = await #expect(throws: StrataError.self) { _ = try await Self.open(directory.url, model: Self.v2, plan: nil) }
        #expect(inferred?.reason?.contains("Person.age changes from string to integer64") == true)
        #expect(inferred?.reason?.contains("Person.last is new and required without a default value") == true)
        // The store still opens with its own model.
        let coordinator = try await Self.open(directory.url, model: Self.v1, plan: nil)
        #expect(try await coordinator.checkIntegrity().problems.isEmpty)
    }

    @Test("a chain of a lightweight and a custom stage runs in one open; the preview lists what is left to the stage's code")
    func lightweightThenCustom() async throws {
        let directory = TemporaryDirectory()
        let v0 = try ManagedObjectModel(entities: [
            EntityDescription(name: "Person", attributes: [
                AttributeDescription(name: "name", type: .string, isOptional: false, defaultValue: .string("")),
                AttributeDescription(name: "city", type: .string),
            ]),
        ], versionIdentifier: "0")
        // Version 0 has no age; the lightweight stage to version 1 adds it (optional).
        do {
            let coordinator = PersistentStoreCoordinator(managedObjectModel: v0)
            let store = try await coordinator.addPersistentStore(at: directory.url, options: CoordinatorStoreTests.options)
            try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
                for person in Self.people {
                    let object = ManagedObject(entity: v0.entitiesByName["Person"]!)
                    try context.insert(object)
                    try object.setValue(person.name, forKey: "name")
                    try object.setValue(person.city, forKey: "city")
                }
                try context.save()
            }
            try await coordinator.remove(store)
        }
        let fillAges: @Sendable (ManagedObjectContext) async throws -> Void = { context in
            try await context.perform { context in
                for person in try context.fetch(FetchRequest<ManagedObject>(entityName: "Person")) {
                    let name = try person.value(forKey: "name") as? String ?? ""
                    try person.setValue(Self.people.first { $0.name == name }?.age, forKey: "age")
                }
                try context.save()
            }
        }
        let plan = MigrationPlan(stages: [
            .lightweight(from: v0, to: Self.v1),
            .custom(from: Self.v1, to: Self.v2, willMigrate: fillAges, didMigrate: Self.split),
        ])
        let preview = try PersistentStoreCoordinator(managedObjectModel: Self.v2).migrationPreview(forStoreAt: directory.url, options: {
            var options = PersistentStore.Options()
            options.migrationPlan = plan
            return options
        }())
        #expect(preview.stages.map(\.name) == ["lightweight version 0 → version 1", "custom version 1 → version 2"])
        #expect(preview.stages[1].changes.contains { $0.hasPrefix("left to the stage's code: attribute Person.last is new and required") })
        let coordinator = try await Self.open(directory.url, model: Self.v2, plan: plan)
        #expect(try await Self.people(in: coordinator) == ["Ada Lovelace 36 London", "Alan Turing 41 London", "Grace Hopper 85 New York"])
    }

    @Test("a plan with a custom stage needs the store to itself, and the asynchronous add: refused while the store is open, refused by the synchronous add; a copy left by an interrupted migration is discarded at the next open")
    func exclusivityAndLeftovers() async throws {
        let directory = TemporaryDirectory()
        try await Self.seed(directory.url)
        let plan = MigrationPlan(stages: [.custom(from: Self.v1, to: Self.v2, willMigrate: nil, didMigrate: Self.split)])
        do {
            let holder = try await Self.open(directory.url, model: Self.v1, plan: nil)
            let error = await #expect(throws: StrataError.self) { _ = try await Self.open(directory.url, model: Self.v2, plan: plan) }
            #expect(error != nil)
            _ = holder
        }
        var options = CoordinatorStoreTests.options
        options.migrationPlan = plan
        let synchronous = #expect(throws: StrataError.self) {
            try PersistentStoreCoordinator(managedObjectModel: Self.v2).addPersistentStoreSynchronously(at: directory.url, options: options)
        }
        #expect(synchronous?.reason?.contains("is custom: its code runs through contexts") == true)

        // What a migration killed before its switch leaves: a copy, discarded at the next open.
        let work = directory.url.appendingPathComponent(StagedMigration.workDirectoryName)
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        try Data("half a copy".utf8).write(to: work.appendingPathComponent("data.mdb"))
        let coordinator = try await Self.open(directory.url, model: Self.v1, plan: nil)
        #expect(!FileManager.default.fileExists(atPath: work.path))
        #expect(try await coordinator.checkIntegrity().rows == 3)
    }
}

extension MigrationCustomStageTests {
    @Test("a container migrates through its descriptions' plans, custom stages included, and reports a failed migration per description")
    func containerMigration() async throws {
        let directory = TemporaryDirectory()
        let url = directory.url.appendingPathComponent("People.strata")
        try await Self.seed(url)
        var description = PersistentStoreDescription(url: url)
        description.options.durability = .noSync
        description.migrationPlan = MigrationPlan(stages: [.custom(from: Self.v1, to: Self.v2, willMigrate: nil, didMigrate: nil)])
        let failing = PersistentContainer(name: "People", managedObjectModel: Self.v2)
        failing.persistentStoreDescriptions = [description]
        let error = await #expect(throws: PersistentContainerError.self) { try await failing.loadPersistentStores() }
        #expect(error?.failures.first?.error.code == .migrationFailed)

        description.migrationPlan = MigrationPlan(stages: [.custom(from: Self.v1, to: Self.v2, willMigrate: nil, didMigrate: Self.split)])
        #expect(description.shouldMigrateStoreAutomatically && description.shouldInferMappingModelAutomatically)
        let container = PersistentContainer(name: "People", managedObjectModel: Self.v2)
        container.persistentStoreDescriptions = [description]
        try await container.loadPersistentStores()
        #expect(try await Self.people(in: container.persistentStoreCoordinator)
            == ["Ada Lovelace 36 London", "Alan Turing 41 London", "Grace Hopper 85 New York"])
    }
}
