import Foundation
@_spi(StorageInternals) @testable import Strata
import StrataLMDB
import StrataLocks
import StrataTesting
import Testing

/// Stores written by one model version, opened by the next: what a lightweight migration
/// does to rows, indexes, links, constraints and metadata, and what it refuses.
@Suite("Migration: lightweight stages on real stores")
struct MigrationTests {
    typealias Library = MigrationSchemaTests

    /// The volumes every store starts with: title, pages, subtitle, stack label.
    static let volumes: [(title: String, pages: Int64, subtitle: String?, stack: String)] = [
        ("A", 10, "sa", "S1"), ("B", 20, nil, "S1"), ("C", 30, "sc", "S2"),
    ]

    /// Writes `volumes` (and their stacks) with version 1 of the library at `url`.
    static func seed(
        _ url: URL, model: ManagedObjectModel? = nil,
        volumes: [(title: String, pages: Int64, subtitle: String?, stack: String)] = volumes
    ) async throws {
        let model = try model ?? Library.library()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        let store = try await coordinator.addPersistentStore(at: url, options: CoordinatorStoreTests.options)
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "seed").perform { context in
            var stacks: [String: ManagedObject] = [:]
            for volume in volumes {
                let object = ManagedObject(entity: try #require(model.entitiesByName["Volume"]))
                try context.insert(object)
                try object.setValue(volume.title, forKey: "title")
                try object.setValue(Int32(volume.pages), forKey: "pages")
                try object.setValue(volume.subtitle, forKey: "subtitle")
                if stacks[volume.stack] == nil {
                    let stack = ManagedObject(entity: try #require(model.entitiesByName["Stack"]))
                    try context.insert(stack)
                    try stack.setValue(volume.stack, forKey: "label")
                    stacks[volume.stack] = stack
                }
                try object.setValue(stacks[volume.stack], forKey: "location")
            }
            try context.save()
        }
        try await coordinator.remove(store)
    }

    /// Options that migrate (the default) with a progress handler collecting reports.
    static func options(plan: MigrationPlan? = nil, reports: LockedValue<[MigrationProgress]>? = nil) -> PersistentStore.Options {
        var options = CoordinatorStoreTests.options
        options.migrationPlan = plan
        if let reports { options.migrationProgress = MigrationProgressHandler { progress in reports.withLock { $0.append(progress) } } }
        return options
    }

    /// Opens `url` with `model`; the coordinator and its store.
    static func open(
        _ url: URL, model: ManagedObjectModel, options: PersistentStore.Options = options()
    ) async throws -> (PersistentStoreCoordinator, PersistentStore) {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        let store = try await coordinator.addPersistentStore(at: url, options: options)
        return (coordinator, store)
    }

    /// The values of `keys` of every object of `entity`, sorted by the first key.
    static func values(
        _ entity: String, _ keys: [String], in coordinator: PersistentStoreCoordinator
    ) async throws -> [[String]] {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "reader").perform { context in
            var request = FetchRequest<ManagedObject>(entityName: entity)
            request.sortDescriptors = [FetchSortDescriptor(key: keys[0])]
            return try context.fetch(request).map { object in
                try keys.map { key in try Self.text(try object.value(forKey: key)) }
            }
        }
    }

    /// A value as text: objects by their label or title, sets sorted.
    static func text(_ value: Any?) throws -> String {
        switch value {
        case nil: return "nil"
        case let object as ManagedObject:
            let name = object.entity.attribute(named: "label") != nil ? "label" : object.entity.attribute(named: "heading") != nil ? "heading" : "title"
            return try text(object.value(forKey: name))
        case let set as Set<ManagedObject>: return try set.map { try text($0) }.sorted().joined(separator: "+")
        case let value?: return "\(value)"
        }
    }

    /// The store's database names.
    static func databases(_ store: PersistentStore) throws -> Set<String> {
        Set(try store.file!.environment.databaseNames())
    }

    /// The bytes of the store's data file.
    static func bytes(_ url: URL) throws -> Data { try Data(contentsOf: url.appendingPathComponent("data.mdb")) }

    @Test("the typed version 2 opens a version 1 store by inferring the stage: the entity, an attribute and a relationship renamed, a type widened, an attribute and an index dropped; IDs, links, sequences and integrity carry over")
    func inferredTypedStage() async throws {
        let directory = TemporaryDirectory()
        try await Self.seed(directory.url)
        let reports = LockedValue<[MigrationProgress]>([])
        let v2 = try ManagedObjectModel(types: [Tome.self, Stack.self], versionIdentifier: "2")
        try await Self.checkTypedStage(directory.url, model: v2, reports: reports)

        // Opened again with version 2: nothing to migrate.
        let again = LockedValue<[MigrationProgress]>([])
        let (reopened, _) = try await Self.open(directory.url, model: v2, options: Self.options(reports: again))
        #expect(again.withLock { $0 }.isEmpty)
        #expect(try await Self.values("Tome", ["heading"], in: reopened) == [["A"], ["B"], ["C"], ["D"]])
    }

    /// Opens the version 1 store at `url` with the typed version 2 and checks what it holds.
    static func checkTypedStage(_ url: URL, model v2: ManagedObjectModel, reports: LockedValue<[MigrationProgress]>) async throws {
        let (coordinator, store) = try await Self.open(url, model: v2, options: Self.options(reports: reports))

        #expect(try await Self.values("Tome", ["heading", "pages", "shelf"], in: coordinator)
            == [["A", "10", "S1"], ["B", "20", "S1"], ["C", "30", "S2"]])
        #expect(try await Self.values("Stack", ["label", "books"], in: coordinator) == [["S1", "A+B"], ["S2", "C"]])
        let names = try Self.databases(store)
        #expect(names.contains("rows:Tome") && !names.contains("rows:Volume"))
        #expect(!names.contains { $0.hasPrefix("index:") }, "Tome.pages is not indexed")
        #expect(names.contains("links:Stack.books"))
        #expect(store.file!.metadata.storedModel == StoredModel(v2) && store.file!.metadata.modelVersionHash == v2.versionHash)
        let integrity = try await coordinator.checkIntegrity()
        #expect(integrity.problems.isEmpty && integrity.rows == 5 && integrity.links == 3)

        // The rows kept their primary keys; the sequence moved with the entity.
        let keys = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let tome = Tome()
            tome.heading = "D"
            try context.insert(tome)
            try context.save()
            return try context.fetch(FetchRequest<Tome>()).compactMap { $0.objectID.primaryKey?.rawValue }.sorted()
        }
        #expect(keys == [1, 2, 3, 4])

        let seen = reports.withLock { $0 }
        #expect(seen.last?.isFinished == true && seen.last?.fractionCompleted == 1)
        #expect(seen.contains { $0.entityName == "Tome" && $0.stage == 1 && $0.stageCount == 1 && $0.completedRows == 5 && $0.totalRows == 5 }, "\(seen)")
        try await coordinator.remove(store)
    }

    @Test("new required attributes take their defaults, an optional one made required fills its nils, new indexes and a new uniqueness constraint are built from the rows and enforced")
    func defaultsIndexesAndConstraints() async throws {
        let directory = TemporaryDirectory()
        try await Self.seed(directory.url)
        let v2 = try Library.library(version: "2", volume: [
            AttributeDescription(name: "title", type: .string, isOptional: false, defaultValue: .string(""), isIndexed: true),
            AttributeDescription(name: "pages", type: .integer32, defaultValue: .integer(0), isIndexed: true),
            AttributeDescription(name: "subtitle", type: .string, isOptional: false, defaultValue: .string("none")),
            AttributeDescription(name: "edition", type: .integer16, isOptional: false, defaultValue: .integer(1), isIndexed: true),
        ], constraints: [["title"]])
        let (coordinator, store) = try await Self.open(directory.url, model: v2)
        #expect(try await Self.values("Volume", ["title", "subtitle", "edition"], in: coordinator)
            == [["A", "sa", "1"], ["B", "none", "1"], ["C", "sc", "1"]])
        let names = try Self.databases(store)
        #expect(names.isSuperset(of: ["index:Volume.title", "index:Volume.pages", "index:Volume.edition", "unique:Volume.title"]))
        let integrity = try await coordinator.checkIntegrity()
        #expect(integrity.problems.isEmpty && integrity.indexEntries == 9)

        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            var request = FetchRequest<ManagedObject>(entityName: "Volume")
            request.predicate = try FetchPredicate(format: "edition == 1 AND title == %@", "B")
            #expect(try context.fetch(request).count == 1)
            let duplicate = ManagedObject(entity: try #require(v2.entitiesByName["Volume"]))
            try context.insert(duplicate)
            try duplicate.setValue("A", forKey: "title")
            let error = #expect(throws: StrataError.self) { try context.save() }
            #expect(error?.code == .constraintConflicts && error?.constraintConflicts.first?.existingObjectID != nil)
        }
    }

    @Test("stored objects that break a new uniqueness constraint fail the migration, every conflict named, and the store is left byte for byte")
    func brokenConstraint() async throws {
        let directory = TemporaryDirectory()
        try await Self.seed(directory.url, volumes: Self.volumes + [("A", 40, nil, "S2"), ("C", 50, nil, "S1")])
        let before = try Self.bytes(directory.url)
        let v2 = try Library.library(version: "2", constraints: [["title"]])
        let error = await #expect(throws: StrataError.self) { _ = try await Self.open(directory.url, model: v2) }
        #expect(error?.code == .migrationFailed)
        let conflicts = error?.constraintConflicts ?? []
        #expect(conflicts.map { $0.values["title"] } == [.string("A"), .string("C")])
        #expect(conflicts.map { $0.objectIDs.compactMap(\.primaryKey?.rawValue).sorted() } == [[1, 4], [3, 5]])
        #expect(error?.reason?.contains("Volume[title] = \"A\" held by Volume p1, Volume p4") == true, "\(String(describing: error?.reason))")
        #expect(try Self.bytes(directory.url) == before)
        // The store still opens with its own model, every row there.
        let (coordinator, _) = try await Self.open(directory.url, model: try Library.library())
        #expect(try await Self.values("Volume", ["title"], in: coordinator).count == 5)
    }

    @Test("a checked conversion converts every value exactly or fails naming the row and value, leaving the store as it was; widening to double rebuilds the index")
    func conversions() async throws {
        let directory = TemporaryDirectory()
        try await Self.seed(directory.url, volumes: Self.volumes + [("D", 40_000, nil, "S2")])
        let before = try Self.bytes(directory.url)
        func pages(_ type: AttributeType) throws -> ManagedObjectModel {
            try Library.library(version: "2", volume: [
                AttributeDescription(name: "title", type: .string, isOptional: false, defaultValue: .string("")),
                AttributeDescription(name: "pages", type: type, defaultValue: type == .double ? .double(0) : .integer(0), isIndexed: true),
                AttributeDescription(name: "subtitle", type: .string),
            ])
        }
        let error = await #expect(throws: StrataError.self) { _ = try await Self.open(directory.url, model: try pages(.integer16)) }
        #expect(error?.code == .migrationFailed)
        #expect(error?.reason?.contains("row p4 of entity Volume: Volume.pages holds 40000") == true, "\(String(describing: error?.reason))")
        #expect(try Self.bytes(directory.url) == before)

        let (coordinator, store) = try await Self.open(directory.url, model: try pages(.double))
        #expect(try await Self.values("Volume", ["title", "pages"], in: coordinator).map { $0[1] } == ["10.0", "20.0", "30.0", "40000.0"])
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            var request = FetchRequest<ManagedObject>(entityName: "Volume")
            request.predicate = try FetchPredicate(format: "pages > 15.5")
            #expect(try context.fetch(request).count == 3)
        }
        #expect(try await coordinator.checkIntegrity().problems.isEmpty)
        #expect(try Self.databases(store).contains("index:Volume.pages"))
    }

    @Test("what needs a custom stage is refused, every change at once, before anything is written; with automatic migration off the store is refused as a mismatch; read-only stores are not migrated")
    func refusals() async throws {
        let directory = TemporaryDirectory()
        try await Self.seed(directory.url)
        let before = try Self.bytes(directory.url)
        let v2 = try Library.library(version: "2", volume: [
            AttributeDescription(name: "title", type: .integer64, isOptional: false, defaultValue: .integer(0)),
            AttributeDescription(name: "pages", type: .integer32, defaultValue: .integer(0), isIndexed: true),
            AttributeDescription(name: "isbn", type: .string, isOptional: false),
        ])
        let error = await #expect(throws: StrataError.self) { _ = try await Self.open(directory.url, model: v2) }
        #expect(error?.code == .migrationFailed)
        #expect(error?.reason?.contains("Volume.title changes from string to integer64") == true)
        #expect(error?.reason?.contains("Volume.isbn is new and required without a default value") == true)
        #expect(error?.description.hasPrefix("the store at \(directory.url.path) was not migrated, and is left as it was") == true)

        var off = Self.options()
        off.shouldMigrateStoreAutomatically = false
        let lightweight = try Library.library(version: "2", constraints: [["pages"]])
        let mismatch = await #expect(throws: StrataError.self) { _ = try await Self.open(directory.url, model: lightweight, options: off) }
        #expect(mismatch?.code == .modelMismatch && mismatch?.modelChanges == ["add uniqueness constraint Volume[pages]"])
        var readOnly = Self.options()
        readOnly.readOnly = true
        let refused = await #expect(throws: StrataError.self) { _ = try await Self.open(directory.url, model: lightweight, options: readOnly) }
        #expect(refused?.code == .modelMismatch)
        #expect(try Self.bytes(directory.url) == before)
    }

    @Test("a to-one made to-many keeps its destination as its one member; a renamed entity that owns a to-many keeps its links; a removed entity and relationship take their databases with them")
    func relationshipChanges() async throws {
        // To-one made to-many: many-to-many with Stack.books.
        let directory = TemporaryDirectory()
        try await Self.seed(directory.url)
        let toMany = try Library.library(version: "2", relationships: [
            RelationshipDescription(name: "location", destinationEntityName: "Stack", inverseName: "books", isToMany: true),
        ])
        let (coordinator, store) = try await Self.open(directory.url, model: toMany)
        #expect(try await Self.values("Volume", ["title", "location"], in: coordinator) == [["A", "S1"], ["B", "S1"], ["C", "S2"]])
        #expect(try await Self.values("Stack", ["label", "books"], in: coordinator) == [["S1", "A+B"], ["S2", "C"]])
        #expect(try Self.databases(store).contains("links:Volume.location"))
        #expect(try await coordinator.checkIntegrity().problems.isEmpty)

        // Stack renamed Shelf: its links database follows it.
        let renamed = TemporaryDirectory()
        try await Self.seed(renamed.url)
        let shelf = try ManagedObjectModel(entities: [
            EntityDescription(
                name: "Volume",
                attributes: [
                    AttributeDescription(name: "title", type: .string, isOptional: false, defaultValue: .string("")),
                    AttributeDescription(name: "pages", type: .integer32, defaultValue: .integer(0), isIndexed: true),
                    AttributeDescription(name: "subtitle", type: .string),
                ],
                relationships: [RelationshipDescription(name: "location", destinationEntityName: "Shelf", inverseName: "books")]),
            EntityDescription(
                name: "Shelf", attributes: [AttributeDescription(name: "label", type: .string)],
                relationships: [RelationshipDescription(name: "books", destinationEntityName: "Volume", inverseName: "location", isToMany: true)],
                renamingIdentifier: "Stack"),
        ], versionIdentifier: "2")
        let (shelves, shelfStore) = try await Self.open(renamed.url, model: shelf)
        #expect(try await Self.values("Shelf", ["label", "books"], in: shelves) == [["S1", "A+B"], ["S2", "C"]])
        let names = try Self.databases(shelfStore)
        #expect(names.contains("links:Shelf.books") && !names.contains("links:Stack.books") && !names.contains("rows:Stack"))
        #expect(try await shelves.checkIntegrity().problems.isEmpty)

        // Stack removed, and Volume.location with it.
        let removed = TemporaryDirectory()
        try await Self.seed(removed.url)
        let alone = try ManagedObjectModel(entities: [
            EntityDescription(name: "Volume", attributes: [
                AttributeDescription(name: "title", type: .string, isOptional: false, defaultValue: .string("")),
                AttributeDescription(name: "pages", type: .integer32, defaultValue: .integer(0), isIndexed: true),
            ]),
        ], versionIdentifier: "2")
        let (volumes, aloneStore) = try await Self.open(removed.url, model: alone)
        #expect(try await Self.values("Volume", ["title", "pages"], in: volumes) == [["A", "10"], ["B", "20"], ["C", "30"]])
        #expect(try Self.databases(aloneStore) == ["strata.metadata", "strata.history", "rows:Volume", "index:Volume.pages"])
        let sequences = try aloneStore.file!.environment.read { txn in
            try txn.value(forKey: Array("seq:Stack".utf8), in: aloneStore.file!.metadataDatabase)
        }
        #expect(sequences == nil)
        #expect(try await volumes.checkIntegrity().problems.isEmpty)
    }

    /// Versions 2 and 3 of the library: 2 adds `edition` (default 1); 3 renames it
    /// `printing`, widens it to integer64 and drops `subtitle`.
    static func chain() throws -> (v1: ManagedObjectModel, v2: ManagedObjectModel, v3: ManagedObjectModel) {
        let v1 = try Library.library()
        let v2 = try Library.library(version: "2", volume: [
            AttributeDescription(name: "title", type: .string, isOptional: false, defaultValue: .string("")),
            AttributeDescription(name: "pages", type: .integer32, defaultValue: .integer(0), isIndexed: true),
            AttributeDescription(name: "subtitle", type: .string),
            AttributeDescription(name: "edition", type: .integer16, isOptional: false, defaultValue: .integer(1)),
        ])
        let v3 = try Library.library(version: "3", volume: [
            AttributeDescription(name: "title", type: .string, isOptional: false, defaultValue: .string("")),
            AttributeDescription(name: "pages", type: .integer32, defaultValue: .integer(0), isIndexed: true),
            AttributeDescription(
                name: "printing", type: .integer64, isOptional: false, defaultValue: .integer(1), renamingIdentifier: "edition"),
        ])
        return (v1, v2, v3)
    }

    @Test("a declared plan migrates a store through a chain of three versions in one open, from whichever version it holds, reporting each stage")
    func chainOfVersions() async throws {
        let (v1, v2, v3) = try Self.chain()
        let plan = MigrationPlan(models: [v1, v2, v3])
        #expect(plan.models.map(\.versionIdentifier) == ["1", "2", "3"] && plan.stages.count == 2)

        let directory = TemporaryDirectory()
        try await Self.seed(directory.url)
        let reports = LockedValue<[MigrationProgress]>([])
        let (coordinator, store) = try await Self.open(directory.url, model: v3, options: Self.options(plan: plan, reports: reports))
        #expect(try await Self.values("Volume", ["title", "printing"], in: coordinator) == [["A", "1"], ["B", "1"], ["C", "1"]])
        #expect(store.file!.metadata.storedModel?.versionIdentifier == "3")
        #expect(Set(reports.withLock { $0 }.filter { !$0.isFinished }.map(\.stage)) == [1, 2])
        #expect(try await coordinator.checkIntegrity().problems.isEmpty)

        // A store at version 2 starts at the second stage.
        let second = TemporaryDirectory()
        try await Self.seed(second.url)
        do {
            let (c2, s2) = try await Self.open(second.url, model: v2)
            try await c2.remove(s2)
        }
        let later = LockedValue<[MigrationProgress]>([])
        let (coordinator3, _) = try await Self.open(second.url, model: v3, options: Self.options(plan: plan, reports: later))
        #expect(try await Self.values("Volume", ["title", "printing"], in: coordinator3).count == 3)
        #expect(Set(later.withLock { $0 }.map(\.stageCount)) == [1])
    }

    @Test("bad plans are refused before anything is read: a gap, a plan that ends at another version, an unknown store version with inference off, a store that recorded no model")
    func badPlans() async throws {
        let (v1, v2, v3) = try Self.chain()
        let directory = TemporaryDirectory()
        try await Self.seed(directory.url)
        let before = try Self.bytes(directory.url)
        func failure(_ model: ManagedObjectModel, _ options: PersistentStore.Options) async -> String? {
            let error = await #expect(throws: StrataError.self) { _ = try await Self.open(directory.url, model: model, options: options) }
            #expect(error?.code == .migrationFailed)
            return error?.reason
        }
        let gap = MigrationPlan(stages: [.lightweight(from: v1, to: v2), .lightweight(from: v1, to: v3)])
        #expect(await failure(v3, Self.options(plan: gap))?.contains("the migration plan has a gap: stage 1 ends at version 2 but stage 2 begins at version 1") == true)
        #expect(await failure(v3, Self.options(plan: MigrationPlan(models: [v1, v2])))?.contains("ends at version 2, not at the model the store is opened with (version 3)") == true)
        #expect(await failure(v3, Self.options(plan: MigrationPlan(stages: [])))?.contains("no stages") == true)
        var noInference = Self.options(plan: MigrationPlan(models: [v2, v3]))
        noInference.shouldInferMappingModelAutomatically = false
        #expect(await failure(v3, noInference)?.contains("inferring stages is turned off") == true)
        #expect(try Self.bytes(directory.url) == before)

        // A store written before stores recorded their model: only a plan that names its
        // version migrates it.
        do {
            let environment = try Environment(path: directory.url.path)
            let metadata = try environment.openDatabase(named: "strata.metadata")
            try environment.write { txn in _ = try txn.delete(forKey: Array("modelDescription".utf8), in: metadata) }
        }
        #expect(await failure(v2, Self.options())?.contains("written before stores recorded their model") == true)
        let (coordinator, _) = try await Self.open(directory.url, model: v3, options: Self.options(plan: MigrationPlan(models: [v1, v2, v3])))
        #expect(try await Self.values("Volume", ["title", "printing"], in: coordinator).count == 3)
    }

    @Test("after a migration several contexts save at once, in tasks of their own")
    func concurrentSavesAfterMigration() async throws {
        let directory = TemporaryDirectory()
        try await Self.seed(directory.url)
        let v2 = try ManagedObjectModel(types: [Tome.self, Stack.self], versionIdentifier: "2")
        let (coordinator, _) = try await Self.open(directory.url, model: v2)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<4 {
                group.addTask {
                    try await ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "w\(worker)").perform { context in
                        for index in 0..<25 {
                            let tome = Tome()
                            tome.heading = "w\(worker)-\(index)"
                            try context.insert(tome)
                            if index % 5 == 4 { try context.save() }
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        let keys = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.fetch(FetchRequest<Tome>()).compactMap { $0.objectID.primaryKey?.rawValue }
        }
        #expect(keys.count == 103 && Set(keys).count == 103 && keys.min() == 1)
        #expect(try await coordinator.checkIntegrity().problems.isEmpty)
    }
}

/// The change kinds not covered by the combined tests above, each alone on a real store.
extension MigrationTests {
    /// The default attributes of version 1's `Volume`, with `change` applied.
    static func volume(_ change: (inout [AttributeDescription]) -> Void = { _ in }) -> [AttributeDescription] {
        var attributes = [
            AttributeDescription(name: "title", type: .string, isOptional: false, defaultValue: .string("")),
            AttributeDescription(name: "pages", type: .integer32, defaultValue: .integer(0), isIndexed: true),
            AttributeDescription(name: "subtitle", type: .string),
        ]
        change(&attributes)
        return attributes
    }

    @Test("each lightweight change alone on a store of the version before it, then read back", arguments: [
        "add entity", "make optional", "remove index", "remove constraint", "add relationship", "rename to-many", "ordered to unordered",
    ])
    func changeAlone(kind: String) async throws {
        let directory = TemporaryDirectory()
        let orderedShelf = RelationshipDescription(name: "books", destinationEntityName: "Volume", inverseName: "location", isToMany: true, isOrdered: true)
        let v1: ManagedObjectModel = switch kind {
        case "remove constraint": try Library.library(constraints: [["title"]])
        case "ordered to unordered": try Library.library(shelfRelationship: orderedShelf)
        default: try Library.library()
        }
        try await Self.seed(directory.url, model: v1)
        let v2: ManagedObjectModel
        switch kind {
        case "add entity":
            v2 = try Library.library(
                version: "2", extraEntities: [EntityDescription(name: "Label", attributes: [AttributeDescription(name: "text", type: .string)])])
        case "make optional":
            v2 = try Library.library(version: "2", volume: Self.volume { $0[0] = AttributeDescription(name: "title", type: .string) })
        case "remove index":
            v2 = try Library.library(version: "2", volume: Self.volume { $0[1] = AttributeDescription(name: "pages", type: .integer32, defaultValue: .integer(0)) })
        case "remove constraint", "ordered to unordered":
            v2 = try Library.library(version: "2")
        case "add relationship":
            v2 = try Library.library(
                version: "2",
                relationships: [
                    RelationshipDescription(name: "location", destinationEntityName: "Stack", inverseName: "books"),
                    RelationshipDescription(name: "favourite", destinationEntityName: "Stack", inverseName: "favourites"),
                ],
                extraStackRelationships: [
                    RelationshipDescription(name: "favourites", destinationEntityName: "Volume", inverseName: "favourite", isToMany: true),
                ])
        default:   // rename to-many
            v2 = try Library.library(
                version: "2",
                relationships: [RelationshipDescription(name: "location", destinationEntityName: "Stack", inverseName: "volumes")],
                shelfRelationship: RelationshipDescription(
                    name: "volumes", destinationEntityName: "Volume", inverseName: "location", isToMany: true, renamingIdentifier: "books"))
        }
        let (coordinator, store) = try await Self.open(directory.url, model: v2)
        #expect(try await coordinator.checkIntegrity().problems.isEmpty, "\(kind)")
        #expect(try await Self.values("Volume", ["title", "pages"], in: coordinator) == [["A", "10"], ["B", "20"], ["C", "30"]], "\(kind)")
        let names = try Self.databases(store)
        switch kind {
        case "add entity":
            #expect(names.contains("rows:Label"))
        case "remove index":
            #expect(!names.contains("index:Volume.pages"))
        case "remove constraint":
            #expect(!names.contains { $0.hasPrefix("unique:") })
            try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
                let twin = ManagedObject(entity: v2.entitiesByName["Volume"]!)
                try context.insert(twin)
                try twin.setValue("A", forKey: "title")
                try context.save()   // no constraint any more
            }
        case "add relationship":
            #expect(try await Self.values("Stack", ["label", "books", "favourites"], in: coordinator) == [["S1", "A+B", ""], ["S2", "C", ""]])
        case "rename to-many":
            #expect(names.contains("links:Stack.volumes") && !names.contains("links:Stack.books"))
            #expect(try await Self.values("Stack", ["label", "volumes"], in: coordinator) == [["S1", "A+B"], ["S2", "C"]])
        case "ordered to unordered":
            #expect(try await Self.values("Stack", ["label", "books"], in: coordinator) == [["S1", "A+B"], ["S2", "C"]])
        default:
            break
        }
    }
}

extension MigrationTests {
    @Test("what the version hash leaves out still migrates: optional made required fills its nils, a new version identifier is recorded, required without a default is refused; a store that recorded no model records it at its next open")
    func sameHashDifferentDescription() async throws {
        let directory = TemporaryDirectory()
        try await Self.seed(directory.url)
        let required = try Library.library(version: "1.1", volume: Self.volume { $0[2] = AttributeDescription(name: "subtitle", type: .string, isOptional: false, defaultValue: .string("none")) })
        #expect(required.versionHash == (try Library.library()).versionHash, "optionality and defaults are not in the hash")
        let strict = try Library.library(version: "1.1", volume: Self.volume { $0[2] = AttributeDescription(name: "subtitle", type: .string, isOptional: false) })
        let before = try Self.bytes(directory.url)
        let refused = await #expect(throws: StrataError.self) { _ = try await Self.open(directory.url, model: strict) }
        #expect(refused?.reason?.contains("Volume.subtitle becomes required without a default value") == true, "\(String(describing: refused))")
        #expect(try Self.bytes(directory.url) == before)

        let preview = try PersistentStoreCoordinator(managedObjectModel: required).migrationPreview(forStoreAt: directory.url)
        #expect(preview.stages.first?.changes == ["make Volume.subtitle required (nil takes the default)"])
        do {
            let (coordinator, store) = try await Self.open(directory.url, model: required)
            #expect(try await Self.values("Volume", ["title", "subtitle"], in: coordinator) == [["A", "sa"], ["B", "none"], ["C", "sc"]])
            #expect(store.file!.metadata.storedModel?.versionIdentifier == "1.1")
            try await coordinator.remove(store)
        }

        // A store without a recorded model (written before stores kept it) records it.
        do {
            let environment = try Environment(path: directory.url.path)
            let metadata = try environment.openDatabase(named: "strata.metadata")
            try environment.write { txn in _ = try txn.delete(forKey: Array("modelDescription".utf8), in: metadata) }
        }
        let (_, store) = try await Self.open(directory.url, model: required)
        #expect(store.file!.metadata.storedModel == StoredModel(required))
    }
}
