import Foundation
import Strata
import StrataLocks
import StrataTesting
import Testing

@testable import StrataCLI

@Suite("strata migrate")
struct MigrateTests {
    /// Version 1 (a note with a title) and 2 (a new indexed, required `rank` with a default,
    /// `title` renamed `heading`) of a small model.
    static func models() throws -> (ManagedObjectModel, ManagedObjectModel) {
        let v1 = try ManagedObjectModel(
            entities: [EntityDescription(name: "Note", attributes: [AttributeDescription(name: "title", type: .string)])],
            versionIdentifier: "1")
        let v2 = try ManagedObjectModel(
            entities: [EntityDescription(name: "Note", attributes: [
                AttributeDescription(name: "heading", type: .string, renamingIdentifier: "title"),
                AttributeDescription(name: "rank", type: .integer64, isOptional: false, defaultValue: .integer(5), isIndexed: true),
            ])],
            versionIdentifier: "2")
        return (v1, v2)
    }

    /// A version 1 store of three notes at `path`, and the two models' files in `directory`.
    static func setUp(_ directory: borrowing TemporaryDirectory, path: String) async throws -> (v1: String, v2: String) {
        let (v1, v2) = try models()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: v1)
        let store = try await coordinator.addPersistentStore(type: .lmdb, at: URL(fileURLWithPath: path))
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            for title in ["a", "b", "c"] {
                let note = ManagedObject(entity: v1.entitiesByName["Note"]!)
                try context.insert(note)
                try note.setValue(title, forKey: "title")
            }
            try context.save()
        }
        try await coordinator.remove(store)
        let files = (directory.appending("v1.json"), directory.appending("v2.json"))
        try v1.jsonRepresentation.write(to: URL(fileURLWithPath: files.0))
        try v2.jsonRepresentation.write(to: URL(fileURLWithPath: files.1))
        return files
    }

    /// The `migrate` command `arguments` parse to.
    static func command(_ arguments: [String]) throws -> MigrateCommand {
        try #require(try StrataCommand.parseAsRoot(arguments) as? MigrateCommand)
    }

    @Test("--dry-run prints the plan (stages, changes, rows rewritten, indexes built) and writes nothing; without it the store migrates")
    func dryRunThenMigrate() async throws {
        let directory = TemporaryDirectory()
        let path = directory.appending("notes.strata")
        let (v1, v2) = try await Self.setUp(directory, path: path)
        let before = tree(path)
        let dry = try Self.command(["migrate", path, "--model", v1, "--model", v2, "--model-version", "2", "--dry-run"])
        let plan = try dry.perform()
        #expect(plan == """
            migrate \(path) from version 1 to version 2: 1 stage, 3 rows rewritten
            stage 1: lightweight version 1 → version 2
              rename attribute Note.title to heading
              add attribute Note.rank
              add index Note.rank
              rewrite 3 rows of Note
              build index Note.rank
            """)
        #expect(tree(path).filter { $0.key != "lock.mdb" } == before.filter { $0.key != "lock.mdb" })

        let reports = LockedValue<[MigrationProgress]>([])
        let run = try Self.command(["migrate", path, "--model", v1, "--model", v2])
        #expect(try run.perform { progress in reports.withLock { $0.append(progress) } }.hasSuffix("migrated: \(path) now holds version 2"))
        #expect(reports.withLock { $0 }.last?.isFinished == true)
        #expect(try StoreReport.load(path: path).modelVersionIdentifier == "2")
        #expect(try run.perform() == "\(path) holds version 2: nothing to migrate")
    }

    @Test("bad input fails with one line and changes nothing: no model, an unknown version, a model file that is not one, a path that is not a store")
    func badInput() async throws {
        let directory = TemporaryDirectory()
        let path = directory.appending("notes.strata")
        let (v1, v2) = try await Self.setUp(directory, path: path)
        let before = tree(path)
        #expect(throws: (any Error).self) { try StrataCommand.parseAsRoot(["migrate", path]) }
        let unknown = try Self.command(["migrate", path, "--model", v1, "--model", v2, "--model-version", "9"])
        #expect(throws: StoreError.self) { try unknown.perform() }
        let garbage = directory.appending("garbage.json")
        try Data("{\"entities\": 1}".utf8).write(to: URL(fileURLWithPath: garbage))
        let bad = try Self.command(["migrate", path, "--model", garbage])
        let error = #expect(throws: StoreError.self) { try bad.perform() }
        #expect(error?.message.contains("is not a model description") == true)
        let notStore = try Self.command(["migrate", directory.appending("nothing"), "--model", v2])
        #expect(throws: StoreError.self) { try notStore.perform() }
        #expect(tree(path).filter { $0.key != "lock.mdb" } == before.filter { $0.key != "lock.mdb" })
    }
}
