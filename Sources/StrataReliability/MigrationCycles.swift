import Foundation
import Strata
import StrataTesting

/// The two model versions the migration crash cycles migrate between, a store of the first
/// and the audit that tells which version a store holds and whether it holds it whole.
///
/// Version 1: `Shelf` (name, to-many `books`) and `Book` (title, indexed serial, optional
/// note, to-one `shelf`). Version 2, one lightweight stage that touches every row, index
/// and link: `Book` renamed `Volume`, `title` renamed `heading` and indexed, `note`
/// removed, a required `edition` (default 1) added, `serial` made unique, the to-one
/// `shelf` made the to-many `shelves`; `Shelf` gains a required `capacity` (default 10).
public enum MigrationFixture {
    /// Version 1.
    public static let version1: ManagedObjectModel = model {
        try ManagedObjectModel(entities: [
            EntityDescription(
                name: "Shelf", attributes: [AttributeDescription(name: "name", type: .string, isOptional: false, defaultValue: .string(""))],
                relationships: [RelationshipDescription(name: "books", destinationEntityName: "Book", inverseName: "shelf", isToMany: true)]),
            EntityDescription(
                name: "Book",
                attributes: [
                    AttributeDescription(name: "title", type: .string, isOptional: false, defaultValue: .string("")),
                    AttributeDescription(name: "serial", type: .integer64, isOptional: false, defaultValue: .integer(0), isIndexed: true),
                    AttributeDescription(name: "note", type: .string),
                ],
                relationships: [RelationshipDescription(name: "shelf", destinationEntityName: "Shelf", inverseName: "books")]),
        ], versionIdentifier: "1")
    }

    /// Version 2.
    public static let version2: ManagedObjectModel = model {
        try ManagedObjectModel(entities: [
            EntityDescription(
                name: "Shelf",
                attributes: [
                    AttributeDescription(name: "name", type: .string, isOptional: false, defaultValue: .string("")),
                    AttributeDescription(name: "capacity", type: .integer64, isOptional: false, defaultValue: .integer(10)),
                ],
                relationships: [RelationshipDescription(name: "books", destinationEntityName: "Volume", inverseName: "shelves", isToMany: true)]),
            EntityDescription(
                name: "Volume",
                attributes: [
                    AttributeDescription(
                        name: "heading", type: .string, isOptional: false, defaultValue: .string(""), isIndexed: true, renamingIdentifier: "title"),
                    AttributeDescription(name: "serial", type: .integer64, isOptional: false, defaultValue: .integer(0), isIndexed: true),
                    AttributeDescription(name: "edition", type: .integer16, isOptional: false, defaultValue: .integer(1)),
                ],
                relationships: [
                    RelationshipDescription(
                        name: "shelves", destinationEntityName: "Shelf", inverseName: "books", isToMany: true, renamingIdentifier: "shelf"),
                ],
                uniquenessConstraints: [["serial"]], renamingIdentifier: "Book"),
        ], versionIdentifier: "2")
    }

    private static func model(_ make: () throws -> ManagedObjectModel) -> ManagedObjectModel {
        do {
            return try make()
        } catch {
            preconditionFailure("the migration fixture's model is invalid: \(error)")
        }
    }

    /// The shelves of a store of `books` books.
    static func shelfCount(books: Int) -> Int { max(1, books / 100) }

    /// Writes a version 1 store of `books` books at `url`: book `i` has title `book-i`,
    /// serial `i`, a note when `i` is a multiple of 3, and shelf `i % shelves`.
    public static func seed(at url: URL, books: Int) async throws {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: version1)
        var options = PersistentStore.Options()
        options.durability = .noSync
        let store = try await coordinator.addPersistentStore(at: url, options: options)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "seed")
        try await context.perform { context in
            context.notificationCenter = nil
            let shelfEntity = version1.entitiesByName["Shelf"]!, bookEntity = version1.entitiesByName["Book"]!
            var shelves: [ManagedObject] = []
            for index in 0..<shelfCount(books: books) {
                let shelf = ManagedObject(entity: shelfEntity)
                try context.insert(shelf)
                try shelf.setValue("shelf-\(index)", forKey: "name")
                shelves.append(shelf)
            }
            for index in 0..<books {
                let book = ManagedObject(entity: bookEntity)
                try context.insert(book)
                try book.setValue("book-\(index)", forKey: "title")
                try book.setValue(Int64(index), forKey: "serial")
                try book.setValue(index % 3 == 0 ? "note-\(index)" : nil, forKey: "note")
                try book.setValue(shelves[index % shelves.count], forKey: "shelf")
            }
            try context.save()
        }
        try await coordinator.remove(store)
    }

    /// What an audit found: the version the store holds (1 or 2; 0 when neither model
    /// opens it) and what is wrong with its contents.
    public struct Finding: Sendable {
        public var version = 0
        public var problems: [String] = []
    }

    /// Opens the store at `url` (of `books` books) without migrating, with version 1 and
    /// then version 2, and checks every object, relationship, index and link of the one
    /// that opens it.
    public static func audit(at url: URL, books: Int) async -> Finding {
        var finding = Finding()
        var options = PersistentStore.Options()
        options.shouldMigrateStoreAutomatically = false
        for (version, model) in [(1, version1), (2, version2)] {
            let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
            let store: PersistentStore
            do {
                store = try await coordinator.addPersistentStore(at: url, options: options)
            } catch where error.code == .modelMismatch {
                continue
            } catch {
                finding.problems.append("opening with version \(version): \(error)")
                return finding
            }
            finding.version = version
            do {
                finding.problems += try await check(version: version, books: books, coordinator: coordinator)
                let integrity = try await coordinator.checkIntegrity()
                finding.problems += integrity.problems.map { "integrity: \($0)" }
                try await coordinator.remove(store)
            } catch {
                finding.problems.append("reading version \(version): \(error)")
            }
            return finding
        }
        finding.problems.append("neither version 1 nor version 2 opens the store")
        return finding
    }

    /// Every object of a store of `version`, checked against what the seed wrote (and, for
    /// version 2, what the migration makes of it).
    private static func check(version: Int, books: Int, coordinator: PersistentStoreCoordinator) async throws -> [String] {
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "audit")
        return try await context.perform { context in
            var problems: [String] = []
            let shelves = shelfCount(books: books)
            var shelfRequest = FetchRequest<ManagedObject>(entityName: "Shelf")
            shelfRequest.sortDescriptors = [FetchSortDescriptor(key: "name")]
            let storedShelves = try context.fetch(shelfRequest)
            if storedShelves.count != shelves { problems.append("\(storedShelves.count) shelves, not \(shelves)") }
            for shelf in storedShelves {
                let name = try shelf.value(forKey: "name") as? String ?? ""
                guard let index = Int(name.dropFirst("shelf-".count)) else {
                    problems.append("a shelf named \(name)")
                    continue
                }
                let expected = books / shelves + (index < books % shelves ? 1 : 0)
                let members = (try shelf.value(forKey: "books") as? Set<ManagedObject>)?.count ?? -1
                if members != expected { problems.append("\(name) holds \(members) books, not \(expected)") }
                if version == 2, try shelf.value(forKey: "capacity") as? Int64 != 10 { problems.append("\(name) has no capacity 10") }
            }
            var request = FetchRequest<ManagedObject>(entityName: version == 1 ? "Book" : "Volume")
            request.sortDescriptors = [FetchSortDescriptor(key: "serial")]
            let found = try context.fetch(request)
            if found.count != books { problems.append("\(found.count) books, not \(books)") }
            for (index, book) in found.enumerated() where problems.count < 20 {
                let serial = try book.value(forKey: "serial") as? Int64
                let title = try book.value(forKey: version == 1 ? "title" : "heading") as? String
                guard serial == Int64(index), title == "book-\(index)" else {
                    problems.append("book \(index) holds serial \(String(describing: serial)), title \(String(describing: title))")
                    continue
                }
                let shelf = "shelf-\(index % shelves)"
                if version == 1 {
                    let note = try book.value(forKey: "note") as? String
                    if note != (index % 3 == 0 ? "note-\(index)" : nil) { problems.append("book \(index) has note \(String(describing: note))") }
                    let owner = try (book.value(forKey: "shelf") as? ManagedObject)?.value(forKey: "name") as? String
                    if owner != shelf { problems.append("book \(index) is on \(String(describing: owner)), not \(shelf)") }
                } else {
                    if try book.value(forKey: "edition") as? Int16 != 1 { problems.append("book \(index) has no edition 1") }
                    let owners = try (book.value(forKey: "shelves") as? Set<ManagedObject>)?.map { try $0.value(forKey: "name") as? String }
                    if owners != [shelf] { problems.append("book \(index) is on \(String(describing: owners)), not [\(shelf)]") }
                }
            }
            if version == 2 {
                // The new index and the unique index answer queries.
                var byHeading = FetchRequest<ManagedObject>(entityName: "Volume")
                byHeading.predicate = try FetchPredicate(format: "heading == %@", "book-\(books / 2)")
                if try context.count(for: byHeading) != 1 { problems.append("the heading index does not find book-\(books / 2)") }
            }
            return problems
        }
    }

    /// The plan of one custom stage from version 1 to version 2, whose code reads every
    /// old book and writes its new edition (1, what the inferred part's default also
    /// gives): the path of a staged migration (a copy, both versions' contexts, a switch).
    public static let customPlan = MigrationPlan(stages: [
        .custom(from: version1, to: version2, willMigrate: nil, didMigrate: { contexts in
            let serials = try await contexts.source.perform { context in
                try context.fetch(FetchRequest<ManagedObject>(entityName: "Book")).map { try $0.value(forKey: "serial") as? Int64 ?? -1 }
            }
            try await contexts.destination.perform { context in
                let volumes = try context.fetch(FetchRequest<ManagedObject>(entityName: "Volume"))
                guard volumes.count == serials.count else {
                    throw StrataError.invalidContextConfiguration("the destination holds \(volumes.count) volumes, the source \(serials.count) books")
                }
                for volume in volumes { try volume.setValue(Int16(1), forKey: "edition") }
                try context.save()
            }
        }),
    ])

    /// Opens the store at `url` with version 2, migrating it (through ``customPlan`` when
    /// `custom`): what a worker does.
    public static func migrate(at url: URL, durability: PersistentStore.Options.Durability = .sync, custom: Bool = false) async throws {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: version2)
        var options = PersistentStore.Options()
        options.durability = durability
        options.migrationPlan = custom ? customPlan : nil
        let store = try await coordinator.addPersistentStore(at: url, options: options)
        try await coordinator.remove(store)
    }
}

/// The migration crash run: a worker process opens a version 1 store with version 2 (a
/// migration) and dies at a random moment (SIGKILL from the parent) or at a crash point
/// inside the migration; the store is audited: it must hold version 1 exactly as it was,
/// or version 2 complete. An intact store is then migrated in this process and audited
/// again (the next open finishes what the killed one began).
public struct MigrationCycles: Sendable {
    /// How each cycle's worker dies: SIGKILL after a random delay, or a crash point
    /// (`STRATA_CRASH_POINT`) inside the migration.
    public typealias Mode = KillCycles.Mode

    /// The number of cycles.
    public var cycles = 50
    /// How the workers die.
    public var mode = Mode.kill
    /// The run's seed: kill delays and crash points.
    public var seed: UInt64 = 1
    /// The books of the store each cycle migrates.
    public var books = 20_000
    /// The longest delay before the kill, in milliseconds.
    public var maximumDelay = 400
    /// Whether the workers migrate through ``MigrationFixture/customPlan`` (a staged
    /// migration on a copy) instead of the inferred stage (one transaction).
    public var custom = false
    /// Where the stores go (removed at the end unless a problem was found).
    public var directory: URL
    /// The `strata-reliability` executable the workers run.
    public var tool = reliabilityToolPath()

    /// A run over stores in `directory`.
    public init(directory: URL) { self.directory = directory }

    /// The crash points inside a migration, and the visits each may be armed for.
    static let points: [(name: String, visits: Int)] = [
        ("migration-stage", 1), ("mid-migration", 2), ("before-migration-commit", 1), ("after-migration-commit", 1),
    ]
    /// The crash points of a staged migration's switch (custom stages), on top of ``points``
    /// (which a staged migration reaches on its copy).
    static let switchPoints: [(name: String, visits: Int)] = [("before-migration-switch", 1), ("after-migration-switch", 1)]

    /// What a run found.
    public struct Report: Sendable, CustomStringConvertible {
        /// Cycles run.
        public var cycles = 0
        /// Cycles that left the store at version 1 (intact), and at version 2 (migrated).
        public var intact = 0, migrated = 0
        /// Cycles whose worker finished the migration before the kill.
        public var finishedBeforeKill = 0
        /// Cycles ended by a crash point, by name.
        public var crashPointHits: [String: Int] = [:]
        /// What went wrong, by cycle. Empty when the run passed.
        public var problems: [String] = []
        /// The wall-clock time, in seconds.
        public var seconds = 0.0

        /// One line per figure.
        public var description: String {
            let hits = crashPointHits.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
            return """
                cycles: \(cycles) in \(String(format: "%.1f", seconds)) s: store left at version 1 (intact, then migrated here) \(intact), \
                at version 2 (complete) \(migrated); migration finished before the kill \(finishedBeforeKill)
                \(hits.isEmpty ? "" : "crash points hit: \(hits) (total \(crashPointHits.values.reduce(0, +)))\n")problems: \(problems.count)\(problems.prefix(20).map { "\n  - \($0)" }.joined())
                """
        }
    }

    /// Runs the cycles; `progress` is called after each with the report so far.
    public func run(progress: (Report) -> Void = { _ in }) async -> Report {
        var report = Report()
        let began = Date()
        var random = SeededRandomNumberGenerator(seed: seed)
        let template = directory.appendingPathComponent("template.strata")
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            try? FileManager.default.removeItem(at: template)   // a kept run's: start afresh
            try await MigrationFixture.seed(at: template, books: books)
        } catch {
            report.problems.append("the version 1 store cannot be written: \(error)")
            return report
        }
        let store = directory.appendingPathComponent("cycle.strata")
        for cycle in 0..<cycles {
            do {
                try? FileManager.default.removeItem(at: store)
                try FileManager.default.createDirectory(at: store, withIntermediateDirectories: true)
                try FileManager.default.copyItem(
                    at: template.appendingPathComponent("data.mdb"), to: store.appendingPathComponent("data.mdb"))
            } catch {
                report.problems.append("cycle \(cycle): the store cannot be copied: \(error)")
                break
            }
            var environment: [String: String] = ["STRATA_CRASH_POINT": ""]
            var armed: String?
            if mode == .crashPoints {
                let points = custom ? Self.points + Self.switchPoints : Self.points
                let point = points[Int(random.next() % UInt64(points.count))]
                armed = point.name
                environment["STRATA_CRASH_POINT"] = "\(point.name)@\(1 + random.next() % UInt64(point.visits))"
            }
            let output = directory.appendingPathComponent("worker.out").path
            let errors = directory.appendingPathComponent("worker.err").path
            let child: ChildProcess
            do {
                child = try ChildProcess.spawn(
                    tool, ["migrate-worker", "--store", store.path] + (custom ? ["--custom"] : []), environment: environment,
                    outputPath: output, errorPath: errors)
            } catch {
                report.problems.append("cycle \(cycle): \(error)")
                break
            }
            let termination = await mode.end(
                child, maximumDelay: maximumDelay, random: &random, armed: environment["STRATA_CRASH_POINT"] ?? "", cycle: cycle,
                problems: &report.problems)
            let finished = child.output.contains("migrated")
            if finished { report.finishedBeforeKill += 1 }
            if termination != .signalled(SIGKILL) && !(mode == .kill && finished && termination == .exited(0)) {
                report.problems.append("cycle \(cycle): the worker ended with \(termination): \(child.errorOutput.suffix(500))")
            }
            if let armed, child.errorOutput.contains("crash point \(armed)") { report.crashPointHits[armed, default: 0] += 1 }

            let finding = await MigrationFixture.audit(at: store, books: books)
            if FileManager.default.fileExists(atPath: store.appendingPathComponent("migration-in-progress").path) {
                report.problems.append("cycle \(cycle): the copy of an interrupted migration was not discarded by the next open")
            }
            report.problems += finding.problems.map { "cycle \(cycle) (seed \(seed), version \(finding.version)): \($0)" }
            if finished && finding.version != 2 { report.problems.append("cycle \(cycle): the worker said it migrated, but the store holds version \(finding.version)") }
            switch finding.version {
            case 1:
                report.intact += 1
                // The next open migrates what the killed one left as it was.
                do {
                    try await MigrationFixture.migrate(at: store, durability: .noSync, custom: custom)
                    let again = await MigrationFixture.audit(at: store, books: books)
                    if again.version != 2 { report.problems.append("cycle \(cycle): migrating the intact store left version \(again.version)") }
                    report.problems += again.problems.map { "cycle \(cycle), migrated after the crash: \($0)" }
                } catch {
                    report.problems.append("cycle \(cycle): the intact store does not migrate: \(error)")
                }
            case 2:
                report.migrated += 1
            default:
                break
            }
            report.cycles += 1
            report.seconds = Date().timeIntervalSince(began)
            progress(report)
            if report.problems.count > 50 { break }
        }
        if report.problems.isEmpty { try? FileManager.default.removeItem(at: directory) }
        return report
    }
}
