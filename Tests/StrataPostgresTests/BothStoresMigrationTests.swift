import Foundation
@testable import Strata
@testable import StrataPostgres
import StrataLocks
import Testing

/// Lightweight migration, one source against both stores: an LMDB store rewrites its
/// records and databases in one write transaction; a PostgreSQL store runs the same plan
/// as DDL in one transaction. What a user sees must be the same.
@Suite("Migration on both stores: the same plans, the same results")
struct BothStoresMigrationTests {
    /// Version 1 of a small library: Volume (title, pages indexed, subtitle) on a Stack.
    static func library(
        version: String = "1", volume: [AttributeDescription]? = nil, volumeName: String = "Volume", volumeRenaming: String? = nil,
        location: RelationshipDescription? = nil, books: RelationshipDescription? = nil, stackName: String = "Stack",
        stackRenaming: String? = nil, constraints: [[String]] = []
    ) throws -> ManagedObjectModel {
        try ManagedObjectModel(entities: [
            EntityDescription(
                name: volumeName,
                attributes: volume ?? [
                    AttributeDescription(name: "title", type: .string, isOptional: false, defaultValue: .string("")),
                    AttributeDescription(name: "pages", type: .integer32, defaultValue: .integer(0), isIndexed: true),
                    AttributeDescription(name: "subtitle", type: .string),
                ],
                relationships: [location ?? RelationshipDescription(name: "location", destinationEntityName: stackName, inverseName: "books")],
                uniquenessConstraints: constraints, renamingIdentifier: volumeRenaming),
            EntityDescription(
                name: stackName, attributes: [AttributeDescription(name: "label", type: .string)],
                relationships: [books ?? RelationshipDescription(
                    name: "books", destinationEntityName: volumeName, inverseName: "location", isToMany: true)],
                renamingIdentifier: stackRenaming),
        ], versionIdentifier: version)
    }

    /// The volumes every store starts with: title, pages, subtitle, stack label.
    static let volumes: [(title: String, pages: Int64, subtitle: String?, stack: String)] = [
        ("A", 10, "sa", "S1"), ("B", 20, nil, "S1"), ("C", 30, "sc", "S2"),
    ]

    /// Writes `volumes` and their stacks with version 1, and closes the store.
    static func seed(
        _ store: BothStoresTestStore, volumes: [(title: String, pages: Int64, subtitle: String?, stack: String)] = volumes
    ) async throws {
        let model = try library()
        let (coordinator, added) = try await store.open(model: model)
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
        try await coordinator.remove(added)
    }

    /// Options that migrate (the default), with a plan and a progress handler collecting reports.
    static func options(plan: MigrationPlan? = nil, reports: LockedValue<[MigrationProgress]>? = nil) -> PersistentStore.Options {
        var options = PersistentStore.Options()
        options.migrationPlan = plan
        if let reports { options.migrationProgress = MigrationProgressHandler { progress in reports.withLock { $0.append(progress) } } }
        return options
    }

    /// The values of `keys` of every object of `entity`, as text, sorted by the first key.
    static func values(_ entity: String, _ keys: [String], in coordinator: PersistentStoreCoordinator) async throws -> [[String]] {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "reader").perform { context in
            var request = FetchRequest<ManagedObject>(entityName: entity)
            request.sortDescriptors = [FetchSortDescriptor(key: keys[0])]
            return try context.fetch(request).map { object in try keys.map { key in try text(object.value(forKey: key)) } }
        }
    }

    /// A value as text: objects by their label, title or heading; collections sorted.
    static func text(_ value: Any?) throws -> String {
        switch value {
        case nil: return "nil"
        case let object as ManagedObject:
            let name = ["label", "heading", "title"].first { object.entity.attribute(named: $0) != nil } ?? "title"
            return try text(object.value(forKey: name))
        case let set as Set<ManagedObject>: return try set.map { try text($0) }.sorted().joined(separator: "+")
        case let list as [ManagedObject]: return try list.map { try text($0) }.sorted().joined(separator: "+")
        case let value?: return "\(value)"
        }
    }

    /// The number of objects of `entity` matching `format`.
    static func count(_ entity: String, _ format: String, in coordinator: PersistentStoreCoordinator) async throws -> Int {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            var request = FetchRequest<ManagedObject>(entityName: entity)
            request.predicate = try FetchPredicate(format: format)
            return try context.fetch(request).count
        }
    }

    @Test("an inferred stage renames the entity, an attribute and a relationship, widens a type, drops an attribute and an index; IDs, relationships and key sequences carry over; progress is reported; a second open migrates nothing",
          arguments: StoreKind.allCases)
    func inferredStage(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        try await Self.seed(store)
        let v2 = try Self.library(
            version: "2",
            volume: [
                AttributeDescription(name: "heading", type: .string, isOptional: false, defaultValue: .string(""), renamingIdentifier: "title"),
                AttributeDescription(name: "pages", type: .integer64, defaultValue: .integer(0)),
            ],
            volumeName: "Tome", volumeRenaming: "Volume",
            location: RelationshipDescription(name: "shelf", destinationEntityName: "Stack", inverseName: "books", renamingIdentifier: "location"),
            books: RelationshipDescription(name: "books", destinationEntityName: "Tome", inverseName: "shelf", isToMany: true))
        let reports = LockedValue<[MigrationProgress]>([])
        try await Self.checkInferredStage(store, model: v2, reports: reports)

        let again = LockedValue<[MigrationProgress]>([])
        let (reopened, _) = try await store.open(model: v2, options: Self.options(reports: again))
        #expect(again.withLock { $0 }.isEmpty)
        #expect(try await Self.values("Tome", ["heading"], in: reopened).count == 6)
    }

    /// Opens the version 1 `store` with `v2` of ``inferredStage(kind:)``, checks what it holds, saves, and closes it.
    static func checkInferredStage(_ store: BothStoresTestStore, model v2: ManagedObjectModel, reports: LockedValue<[MigrationProgress]>) async throws {
        let (coordinator, added) = try await store.open(model: v2, options: Self.options(reports: reports))
        #expect(try await Self.values("Tome", ["heading", "pages", "shelf"], in: coordinator)
            == [["A", "10", "S1"], ["B", "20", "S1"], ["C", "30", "S2"]])
        #expect(try await Self.values("Stack", ["label", "books"], in: coordinator) == [["S1", "A+B"], ["S2", "C"]])
        #expect(try await Self.count("Tome", "heading == 'B' AND pages == 20", in: coordinator) == 1)
        let seen = reports.withLock { $0 }
        #expect(seen.contains { $0.entityName == "Tome" && $0.stage == 1 && $0.stageCount == 1 } && seen.last?.isFinished == true, "\(seen)")
        if let tables = try store.tables() {
            #expect(tables.isSuperset(of: ["Tome", "Stack"]) && !tables.contains("Volume"), "\(tables)")
        }

        // The objects keep their keys; new ones get keys the old ones never had; saves work.
        let keys = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let stack = try #require(try context.fetch(FetchRequest<ManagedObject>(entityName: "Stack")).first)
            for index in 0..<3 {
                let tome = ManagedObject(entity: try #require(v2.entitiesByName["Tome"]))
                try context.insert(tome)
                try tome.setValue("new\(index)", forKey: "heading")
                try tome.setValue(Int64(1) << 40, forKey: "pages")
                try tome.setValue(stack, forKey: "shelf")
            }
            try context.save()
            return try context.fetch(FetchRequest<ManagedObject>(entityName: "Tome")).compactMap { $0.objectID.primaryKey?.rawValue }
        }
        #expect(keys.count == 6 && Set(keys).count == 6)
        #expect(try await Self.count("Tome", "pages > 2000000000", in: coordinator) == 3)
        try await coordinator.remove(added)
    }

    @Test("new required attributes take their defaults, an optional one made required fills its nils, new indexes and a new uniqueness constraint are built and enforced",
          arguments: StoreKind.allCases)
    func defaultsIndexesAndConstraints(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        try await Self.seed(store)
        let v2 = try Self.library(version: "2", volume: [
            AttributeDescription(name: "title", type: .string, isOptional: false, defaultValue: .string(""), isIndexed: true),
            AttributeDescription(name: "pages", type: .integer32, defaultValue: .integer(0), isIndexed: true),
            AttributeDescription(name: "subtitle", type: .string, isOptional: false, defaultValue: .string("none")),
            AttributeDescription(name: "edition", type: .integer16, isOptional: false, defaultValue: .integer(1), isIndexed: true),
        ], constraints: [["title"]])
        let (coordinator, _) = try await store.open(model: v2)
        #expect(try await Self.values("Volume", ["title", "subtitle", "edition"], in: coordinator)
            == [["A", "sa", "1"], ["B", "none", "1"], ["C", "sc", "1"]])
        #expect(try await Self.count("Volume", "edition == 1 AND title == 'B'", in: coordinator) == 1)
        if kind == .postgres {
            let indexes = try store.postgres.execute(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = 'Volume'", [.text(store.postgres.schema)]
            ).rows.map { "\($0)" }
            #expect(indexes.contains { $0.contains("UNIQUE") && $0.contains("(title)") }, "\(indexes)")
            #expect(indexes.contains { $0.contains("(edition)") }, "\(indexes)")
        }
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let duplicate = ManagedObject(entity: try #require(v2.entitiesByName["Volume"]))
            try context.insert(duplicate)
            try duplicate.setValue("A", forKey: "title")
            let error = #expect(throws: StrataError.self) { try context.save() }
            #expect(error?.code == .constraintConflicts && error?.constraintConflicts.first?.existingObjectID != nil)
        }
    }

    @Test("stored objects that break a new uniqueness constraint fail the migration naming every conflict, and the store is left as it was",
          arguments: StoreKind.allCases)
    func brokenConstraint(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        try await Self.seed(store, volumes: Self.volumes + [("A", 40, nil, "S2"), ("C", 50, nil, "S1")])
        let before = try store.fingerprint()
        let v2 = try Self.library(version: "2", volume: [
            AttributeDescription(name: "title", type: .string, isOptional: false, defaultValue: .string("")),
            AttributeDescription(name: "pages", type: .integer32, defaultValue: .integer(0), isIndexed: true),
            AttributeDescription(name: "subtitle", type: .string),
            AttributeDescription(name: "edition", type: .integer16, isOptional: false, defaultValue: .integer(1)),
        ], constraints: [["title"]])
        let error = await #expect(throws: StrataError.self) { _ = try await store.open(model: v2) }
        #expect(error?.code == .migrationFailed)
        let conflicts = error?.constraintConflicts ?? []
        #expect(conflicts.map { $0.values["title"] } == [.string("A"), .string("C")])
        #expect(conflicts.map { $0.objectIDs.compactMap(\.primaryKey?.rawValue).sorted() } == [[1, 4], [3, 5]])
        #expect(error?.reason?.contains("Volume[title] = \"A\" held by Volume p1, Volume p4") == true, "\(String(describing: error?.reason))")
        #expect(try store.fingerprint() == before)
        let (coordinator, _) = try await store.open(model: try Self.library())
        #expect(try await Self.values("Volume", ["title"], in: coordinator).count == 5)
    }

    @Test("a checked conversion converts every value exactly or fails naming the row and value, leaving the store as it was; widening to double keeps the index usable",
          arguments: StoreKind.allCases)
    func conversions(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        try await Self.seed(store, volumes: Self.volumes + [("D", 40_000, nil, "S2")])
        let before = try store.fingerprint()
        func pages(_ type: AttributeType) throws -> ManagedObjectModel {
            try Self.library(version: "2", volume: [
                AttributeDescription(name: "title", type: .string, isOptional: false, defaultValue: .string("")),
                AttributeDescription(name: "pages", type: type, defaultValue: type == .double ? .double(0) : .integer(0), isIndexed: true),
                AttributeDescription(name: "subtitle", type: .string),
            ])
        }
        let error = await #expect(throws: StrataError.self) { _ = try await store.open(model: try pages(.integer16)) }
        #expect(error?.code == .migrationFailed)
        #expect(error?.reason?.contains("row p4 of entity Volume: Volume.pages holds 40000") == true, "\(String(describing: error?.reason))")
        #expect(try store.fingerprint() == before)

        let (coordinator, _) = try await store.open(model: try pages(.double))
        #expect(try await Self.values("Volume", ["title", "pages"], in: coordinator).map { $0[1] } == ["10.0", "20.0", "30.0", "40000.0"])
        #expect(try await Self.count("Volume", "pages > 15.5", in: coordinator) == 3)
    }

    @Test("what needs a custom stage is refused, every change at once, before anything is written; with automatic migration off the store is refused as a mismatch listing the changes",
          arguments: StoreKind.allCases)
    func refusals(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        try await Self.seed(store)
        let before = try store.fingerprint()
        let v2 = try Self.library(version: "2", volume: [
            AttributeDescription(name: "title", type: .integer64, isOptional: false, defaultValue: .integer(0)),
            AttributeDescription(name: "pages", type: .integer32, defaultValue: .integer(0), isIndexed: true),
            AttributeDescription(name: "isbn", type: .string, isOptional: false),
        ])
        let error = await #expect(throws: StrataError.self) { _ = try await store.open(model: v2) }
        #expect(error?.code == .migrationFailed)
        #expect(error?.reason?.contains("Volume.title changes from string to integer64") == true)
        #expect(error?.reason?.contains("Volume.isbn is new and required without a default value") == true)

        var off = Self.options()
        off.shouldMigrateStoreAutomatically = false
        let lightweight = try Self.library(version: "2", constraints: [["pages"]])
        let mismatch = await #expect(throws: StrataError.self) { _ = try await store.open(model: lightweight, options: off) }
        #expect(mismatch?.code == .modelMismatch && mismatch?.modelChanges == ["add uniqueness constraint Volume[pages]"])
        #expect(try store.fingerprint() == before)
    }

    @Test("a to-one made to-many keeps its destination as its one member (both ends of the many-to-many); renaming the entity and the relationship then keeps the links; removing an entity takes its storage with it",
          arguments: StoreKind.allCases)
    func relationshipChanges(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        try await Self.seed(store)
        let toMany = try Self.library(version: "2", location: RelationshipDescription(
            name: "location", destinationEntityName: "Stack", inverseName: "books", isToMany: true))
        do {
            let (coordinator, added) = try await store.open(model: toMany)
            #expect(try await Self.values("Volume", ["title", "location"], in: coordinator) == [["A", "S1"], ["B", "S1"], ["C", "S2"]])
            #expect(try await Self.values("Stack", ["label", "books"], in: coordinator) == [["S1", "A+B"], ["S2", "C"]])
            // The many-to-many works both ways after the migration.
            try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
                var request = FetchRequest<ManagedObject>(entityName: "Volume")
                request.predicate = try FetchPredicate(format: "title == 'C'")
                let c = try #require(try context.fetch(request).first)
                var stacks = FetchRequest<ManagedObject>(entityName: "Stack")
                stacks.predicate = try FetchPredicate(format: "label == 'S1'")
                let s1 = try #require(try context.fetch(stacks).first)
                let current = try #require(try c.value(forKey: "location") as? Set<ManagedObject>)
                try c.setValue(current.union([s1]), forKey: "location")
                try context.save()
            }
            #expect(try await Self.values("Stack", ["label", "books"], in: coordinator) == [["S1", "A+B+C"], ["S2", "C"]])
            try await coordinator.remove(added)
        }

        // Stack renamed Shelf and Volume.location renamed shelves: the links follow.
        let renamed = try Self.library(
            version: "3",
            location: RelationshipDescription(
                name: "shelves", destinationEntityName: "Shelf", inverseName: "books", isToMany: true, renamingIdentifier: "location"),
            books: RelationshipDescription(name: "books", destinationEntityName: "Volume", inverseName: "shelves", isToMany: true),
            stackName: "Shelf", stackRenaming: "Stack")
        do {
            let (coordinator, added) = try await store.open(model: renamed, options: Self.options(plan: MigrationPlan(models: [toMany, renamed])))
            #expect(try await Self.values("Shelf", ["label", "books"], in: coordinator) == [["S1", "A+B+C"], ["S2", "C"]])
            #expect(try await Self.values("Volume", ["title", "shelves"], in: coordinator) == [["A", "S1"], ["B", "S1"], ["C", "S1+S2"]])
            if let tables = try store.tables() {
                #expect(tables.isSuperset(of: ["Shelf", "Volume.shelves", "Shelf.books"]) && !tables.contains("Stack"), "\(tables)")
            }
            try await coordinator.remove(added)
        }

        // Shelf removed, and Volume.shelves with it.
        let alone = try ManagedObjectModel(entities: [
            EntityDescription(name: "Volume", attributes: [
                AttributeDescription(name: "title", type: .string, isOptional: false, defaultValue: .string("")),
                AttributeDescription(name: "pages", type: .integer32, defaultValue: .integer(0), isIndexed: true),
            ]),
        ], versionIdentifier: "4")
        let (volumes, _) = try await store.open(model: alone, options: Self.options(plan: MigrationPlan(models: [toMany, renamed, alone])))
        #expect(try await Self.values("Volume", ["title", "pages"], in: volumes) == [["A", "10"], ["B", "20"], ["C", "30"]])
        if let tables = try store.tables() {
            #expect(tables == ["Volume", "strata_metadata", "strata_history"], "\(tables)")
        }
    }

    @Test("a declared plan migrates a store through three versions in one open, reporting each stage; a store at the second version starts at the second stage",
          arguments: StoreKind.allCases)
    func chainOfVersions(kind: StoreKind) async throws {
        let v1 = try Self.library()
        let v2 = try Self.library(version: "2", volume: [
            AttributeDescription(name: "title", type: .string, isOptional: false, defaultValue: .string("")),
            AttributeDescription(name: "pages", type: .integer32, defaultValue: .integer(0), isIndexed: true),
            AttributeDescription(name: "subtitle", type: .string),
            AttributeDescription(name: "edition", type: .integer16, isOptional: false, defaultValue: .integer(1)),
        ])
        let v3 = try Self.library(version: "3", volume: [
            AttributeDescription(name: "title", type: .string, isOptional: false, defaultValue: .string("")),
            AttributeDescription(name: "pages", type: .integer32, defaultValue: .integer(0), isIndexed: true),
            AttributeDescription(name: "printing", type: .integer64, isOptional: false, defaultValue: .integer(1), renamingIdentifier: "edition"),
        ])
        let plan = MigrationPlan(models: [v1, v2, v3])

        let store = BothStoresTestStore(kind)
        try await Self.seed(store)
        let reports = LockedValue<[MigrationProgress]>([])
        let (coordinator, _) = try await store.open(model: v3, options: Self.options(plan: plan, reports: reports))
        #expect(try await Self.values("Volume", ["title", "printing"], in: coordinator) == [["A", "1"], ["B", "1"], ["C", "1"]])
        #expect(Set(reports.withLock { $0 }.filter { !$0.isFinished }.map(\.stage)) == [1, 2])

        let second = BothStoresTestStore(kind)
        try await Self.seed(second)
        do {
            let (c2, s2) = try await second.open(model: v2)
            try await c2.remove(s2)
        }
        let later = LockedValue<[MigrationProgress]>([])
        let (coordinator3, _) = try await second.open(model: v3, options: Self.options(plan: plan, reports: later))
        #expect(try await Self.values("Volume", ["title", "printing"], in: coordinator3).count == 3)
        #expect(Set(later.withLock { $0 }.map(\.stageCount)) == [1])
    }

    @Test("after a migration several contexts save at once, in tasks of their own", arguments: StoreKind.allCases)
    func concurrentSavesAfterMigration(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        try await Self.seed(store)
        let v2 = try Self.library(version: "2", volume: [
            AttributeDescription(name: "title", type: .string, isOptional: false, defaultValue: .string(""), isIndexed: true),
            AttributeDescription(name: "pages", type: .integer64, defaultValue: .integer(0), isIndexed: true),
        ])
        let (coordinator, _) = try await store.open(model: v2)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<4 {
                group.addTask {
                    try await ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "w\(worker)").perform { context in
                        for index in 0..<25 {
                            let volume = ManagedObject(entity: try #require(v2.entitiesByName["Volume"]))
                            try context.insert(volume)
                            try volume.setValue("w\(worker)-\(index)", forKey: "title")
                            if index % 5 == 4 { try context.save() }
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        let keys = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.fetch(FetchRequest<ManagedObject>(entityName: "Volume")).compactMap { $0.objectID.primaryKey?.rawValue }
        }
        #expect(keys.count == 103 && Set(keys).count == 103)
    }

    /// An abstract Item (title) with Book and Film, and a Shelf whose to-one `favorite`
    /// points into the hierarchy (a polymorphic reference: two tables on PostgreSQL).
    static func items(version: String, film: String = "Film", filmRenaming: String? = nil, itemAttributes: [AttributeDescription]? = nil) throws -> ManagedObjectModel {
        try ManagedObjectModel(entities: [
            EntityDescription(
                name: "Item", isAbstract: true, attributes: itemAttributes ?? [AttributeDescription(name: "title", type: .string)],
                relationships: [RelationshipDescription(name: "shelves", destinationEntityName: "Shelf", inverseName: "favorite", isToMany: true)]),
            EntityDescription(name: "Book", superentityName: "Item", attributes: [AttributeDescription(name: "pages", type: .integer32)]),
            EntityDescription(
                name: film, superentityName: "Item", attributes: [AttributeDescription(name: "minutes", type: .integer32)],
                renamingIdentifier: filmRenaming),
            EntityDescription(
                name: "Shelf", attributes: [AttributeDescription(name: "label", type: .string)],
                relationships: [RelationshipDescription(name: "favorite", destinationEntityName: "Item", inverseName: "shelves")]),
        ], versionIdentifier: version)
    }

    @Test("an entity hierarchy migrates as a whole: an attribute added to the abstract parent reaches every sub-entity with its default, a renamed sub-entity keeps its rows, and a reference into the hierarchy still finds them",
          arguments: StoreKind.allCases)
    func hierarchy(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let v1 = try Self.items(version: "1")
        do {
            let (coordinator, added) = try await store.open(model: v1)
            try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
                let book = ManagedObject(entity: try #require(v1.entitiesByName["Book"]))
                try context.insert(book)
                try book.setValue("b", forKey: "title")
                let film = ManagedObject(entity: try #require(v1.entitiesByName["Film"]))
                try context.insert(film)
                try film.setValue("f", forKey: "title")
                for (label, favorite) in [("S1", book), ("S2", film)] {
                    let shelf = ManagedObject(entity: try #require(v1.entitiesByName["Shelf"]))
                    try context.insert(shelf)
                    try shelf.setValue(label, forKey: "label")
                    try shelf.setValue(favorite, forKey: "favorite")
                }
                try context.save()
            }
            try await coordinator.remove(added)
        }
        let v2 = try Self.items(version: "2", film: "Movie", filmRenaming: "Film", itemAttributes: [
            AttributeDescription(name: "title", type: .string),
            AttributeDescription(name: "rating", type: .integer16, isOptional: false, defaultValue: .integer(3)),
        ])
        let (coordinator, _) = try await store.open(model: v2)
        #expect(try await Self.values("Item", ["title", "rating"], in: coordinator) == [["b", "3"], ["f", "3"]])
        #expect(try await Self.values("Movie", ["title"], in: coordinator) == [["f"]])
        #expect(try await Self.values("Shelf", ["label", "favorite"], in: coordinator) == [["S1", "b"], ["S2", "f"]])
        let entities = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            var request = FetchRequest<ManagedObject>(entityName: "Shelf")
            request.sortDescriptors = [FetchSortDescriptor(key: "label")]
            return try context.fetch(request).map { shelf in (try shelf.value(forKey: "favorite") as? ManagedObject)?.entity.name ?? "nil" }
        }
        #expect(entities == ["Book", "Movie"])
    }

    @Test("persistent history written before a migration reads after it under the new names: a renamed entity's changes name it, and their IDs find the objects",
          arguments: StoreKind.allCases)
    func historyAcrossMigration(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        var options = Self.options()
        options.tracksPersistentHistory = true
        do {
            let (coordinator, added) = try await store.open(model: try Self.library(), options: options)
            try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
                let volume = ManagedObject(entity: try #require(coordinator.managedObjectModel.entitiesByName["Volume"]))
                try context.insert(volume)
                try volume.setValue("A", forKey: "title")
                try context.save()
            }
            try await coordinator.remove(added)
        }
        let v2 = try Self.library(version: "2", volumeName: "Tome", volumeRenaming: "Volume",
                                  books: RelationshipDescription(name: "books", destinationEntityName: "Tome", inverseName: "location", isToMany: true))
        let (coordinator, _) = try await store.open(model: v2, options: options)
        let history = try coordinator.execute(.fetchHistory(after: nil)).transactions
        let inserted = history.flatMap(\.changes).filter { $0.changeType == .insert }.map(\.changedObjectID)
        #expect(inserted.map(\.entityName) == ["Tome"], "\(inserted)")
        let title = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try inserted.first.map { try context.existingObject(with: $0).value(forKey: "title") as? String }
        }
        #expect(title == "A")
    }
}
