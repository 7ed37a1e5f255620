import Foundation
@testable import Strata
@testable import StrataPostgres
import StrataLocks
import Testing

/// What a PostgreSQL store's migration does beyond the store-independent suite: several
/// instances at once, instances still running the old model, stores written before the
/// model was recorded, and what the store refuses.
@Suite("PostgreSQL store: migration as DDL among several instances")
struct PostgresMigrationTests {
    typealias Both = BothStoresMigrationTests

    /// Version 2 of the library: `edition` added (default 1), `pages` widened, indexed title.
    static func v2() throws -> ManagedObjectModel {
        try Both.library(version: "2", volume: [
            AttributeDescription(name: "title", type: .string, isOptional: false, defaultValue: .string(""), isIndexed: true),
            AttributeDescription(name: "pages", type: .integer64, defaultValue: .integer(0), isIndexed: true),
            AttributeDescription(name: "subtitle", type: .string),
            AttributeDescription(name: "edition", type: .integer16, isOptional: false, defaultValue: .integer(1)),
        ])
    }

    @Test("instances opening the old store with the new model at once migrate it once: the others wait for the migration and open the result")
    func instancesMigrateOnce() async throws {
        let store = BothStoresTestStore(.postgres)
        try await Both.seed(store)
        let model = try Self.v2()
        let stages = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    let (coordinator, added) = try await store.open(model: model)
                    #expect(try await Both.values("Volume", ["title", "edition"], in: coordinator) == [["A", "1"], ["B", "1"], ["C", "1"]])
                    return added.migration?.stages.count ?? 0
                }
            }
            return try await group.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(stages.sorted() == [0, 0, 0, 1], "exactly one instance migrated: \(stages)")
        let columns = try store.postgres.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'Volume' ORDER BY 1",
            [.text(store.postgres.schema)]
        ).rows.map { "\($0[0])" }
        #expect(columns.filter { $0.contains("edition") }.count == 1, "\(columns)")
    }

    @Test("an instance still running the old model gets modelMismatch once another migrated the store, and cannot reopen it without migrating back; its unsaved changes stay in its context")
    func oldInstanceAfterMigration() async throws {
        let store = BothStoresTestStore(.postgres)
        try await Both.seed(store)
        let (old, _) = try await store.open(model: try Both.library())
        let context = ManagedObjectContext(.privateQueue, coordinator: old)
        try await context.perform { context in
            var request = FetchRequest<ManagedObject>(entityName: "Volume")
            request.predicate = try FetchPredicate(format: "title == 'A'")
            try #require(try context.fetch(request).first).setValue("A2", forKey: "title")
        }
        // Another instance migrates: subtitle is gone.
        let (migrated, _) = try await store.open(model: try Both.library(version: "2", volume: [
            AttributeDescription(name: "title", type: .string, isOptional: false, defaultValue: .string("")),
            AttributeDescription(name: "pages", type: .integer32, defaultValue: .integer(0), isIndexed: true),
        ]))
        #expect(try await Both.values("Volume", ["title"], in: migrated) == [["A"], ["B"], ["C"]])
        let error = await context.perform { context -> StrataError? in
            do {
                try context.save()
                return nil
            } catch {
                return error as? StrataError
            }
        }
        #expect(error?.code == .modelMismatch, "\(String(describing: error))")
        #expect(await context.perform { $0.hasChanges })
        // Reopening with the old model is a migration back (subtitle returns empty): refused when migration is off.
        var off = PersistentStore.Options()
        off.shouldMigrateStoreAutomatically = false
        let reopen = await #expect(throws: StrataError.self) { _ = try await store.open(model: try Both.library(), options: off) }
        #expect(reopen?.code == .modelMismatch && reopen?.modelChanges == ["add attribute Volume.subtitle"], "\(String(describing: reopen))")
    }

    @Test("an instance still running the old model during a migration with a custom stage: its save waits for the switch, then fails with modelMismatch, nothing written; the stage's work is whole")
    func oldInstanceDuringStagedMigration() async throws {
        let store = BothStoresTestStore(.postgres)
        try await Both.seed(store)
        let v1 = try Both.library()
        let (old, _) = try await store.open(model: v1)
        let context = ManagedObjectContext(.privateQueue, coordinator: old)
        try await context.perform { context in
            var request = FetchRequest<ManagedObject>(entityName: "Volume")
            request.predicate = try FetchPredicate(format: "title == 'B'")
            try #require(try context.fetch(request).first).setValue("B changed", forKey: "title")
        }
        let started = LockedValue(false)
        let plan = MigrationPlan(stages: [.custom(from: v1, to: try Self.v2(), willMigrate: { _ in
            started.withLock { $0 = true }
            try await Task.sleep(for: .milliseconds(800))   // the old instance saves meanwhile
        }, didMigrate: nil)])
        var options = PersistentStore.Options()
        options.migrationPlan = plan
        let migrating = Task { try await store.open(model: try Self.v2(), options: options).coordinator }
        while !started.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(10)) }
        let saved = await context.perform { context -> StrataError? in
            do {
                try context.save()
                return nil
            } catch {
                return error as? StrataError
            }
        }
        let migrated = try await migrating.value
        #expect(saved?.code == .modelMismatch, "\(String(describing: saved))")
        #expect(try await Both.values("Volume", ["title", "edition"], in: migrated) == [["A", "1"], ["B", "1"], ["C", "1"]])
    }

    @Test("a store written before stores recorded their model and numbers records them at its next open, and migrates from then on")
    func recordsModelOfOlderStore() async throws {
        let store = BothStoresTestStore(.postgres)
        try await Both.seed(store)
        let metadata = "\"\(store.postgres.schema)\".strata_metadata"
        _ = try store.postgres.execute("DELETE FROM \(metadata) WHERE key IN ('model', 'schema')")
        // Another model cannot be migrated to without knowing what the store holds.
        let refused = await #expect(throws: StrataError.self) { _ = try await store.open(model: try Self.v2()) }
        #expect(refused?.code == .migrationFailed && refused?.reason?.contains("written before stores recorded their model") == true)
        do {
            let (coordinator, added) = try await store.open(model: try Both.library())
            try await coordinator.remove(added)
        }
        let keys = try store.postgres.execute("SELECT key FROM \(metadata) ORDER BY key").rows.map { "\($0[0])" }
        #expect(keys.contains("text(\"model\")") && keys.contains("text(\"schema\")"), "\(keys)")
        let (migrated, _) = try await store.open(model: try Self.v2())
        #expect(try await Both.values("Volume", ["title", "edition"], in: migrated) == [["A", "1"], ["B", "1"], ["C", "1"]])
    }

    @Test("damaged metadata is refused with a typed error, not a trap")
    func damagedMetadata() async throws {
        let store = BothStoresTestStore(.postgres)
        try await Both.seed(store)
        let metadata = "\"\(store.postgres.schema)\".strata_metadata"
        _ = try store.postgres.execute("UPDATE \(metadata) SET value = 'not base64!' WHERE key = 'schema'")
        let schema = await #expect(throws: StrataError.self) { _ = try await store.open(model: try Both.library()) }
        #expect(schema?.code == .incompatibleStore && schema?.reason?.contains("schema it recorded") == true, "\(String(describing: schema))")
        _ = try store.postgres.execute("UPDATE \(metadata) SET value = 'AQ==' WHERE key = 'schema'")
        _ = try store.postgres.execute("UPDATE \(metadata) SET value = '{\"no\": 1}' WHERE key = 'model'")
        let model = await #expect(throws: StrataError.self) { _ = try await store.open(model: try Both.library()) }
        #expect(model?.code == .incompatibleStore && model?.reason?.contains("model it recorded") == true, "\(String(describing: model))")
    }

    @Test("the model guard refuses an old instance's writes even where its statements would still fit (a column only added), reads that name a dropped column say modelMismatch too, and a connection that is not an instance's (a tool) may still write")
    func guardRefusesOldWrites() async throws {
        let store = BothStoresTestStore(.postgres)
        try await Both.seed(store)
        let v1 = try Both.library()
        let (old, _) = try await store.open(model: v1)
        let (_, _) = try await store.open(model: try Self.v2())   // adds edition, widens pages
        let error = await ManagedObjectContext(.privateQueue, coordinator: old).perform { context -> StrataError? in
            do {
                let volume = ManagedObject(entity: try #require(v1.entitiesByName["Volume"]))
                try context.insert(volume)
                try volume.setValue("D", forKey: "title")
                try context.save()
                return nil
            } catch {
                return error as? StrataError
            }
        }
        #expect(error?.code == .modelMismatch, "\(String(describing: error))")
        #expect("\(String(describing: error))".contains(try Self.v2().versionHash))
        _ = try store.postgres.execute("INSERT INTO \"\(store.postgres.schema)\".\"Volume\" (_pk, _version, title, edition) VALUES (1000, 1, 'tool', 1)")

        // A migration that drops a column: the old instance's fetch names it.
        let (_, _) = try await store.open(model: try Both.library(version: "3", volume: [
            AttributeDescription(name: "title", type: .string, isOptional: false, defaultValue: .string("")),
        ]))
        let read = await ManagedObjectContext(.privateQueue, coordinator: old).perform { context -> StrataError? in
            do {
                _ = try context.fetch(FetchRequest<ManagedObject>(entityName: "Volume"))
                return nil
            } catch {
                return error as? StrataError
            }
        }
        #expect(read?.code == .modelMismatch, "\(String(describing: read))")
    }

    @Test("a preview runs the migration in a transaction it rolls back: the stages, their changes and SQL statements with bound values; what the migration would refuse is found now; nothing is written")
    func preview() async throws {
        let store = BothStoresTestStore(.postgres)
        try await Both.seed(store, volumes: Both.volumes + [("A", 40, nil, "S2")])
        let before = try store.fingerprint()
        let model = try Self.v2()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        let preview = try coordinator.migrationPreview(ofType: store.type)
        #expect(preview.fromVersion == "version 1" && preview.toVersion == "version 2" && preview.stages.count == 1)
        let statements = preview.stages.first?.statements ?? []
        #expect(statements.contains { $0.contains("ADD COLUMN \"edition\" smallint") }, "\(statements)")
        #expect(statements.contains { $0.contains("SET \"edition\" = $1") && $0.hasSuffix("-- $1 = 1") }, "\(statements)")
        #expect(statements.contains { $0.contains("ALTER COLUMN \"pages\" TYPE bigint") }, "\(statements)")
        #expect(preview.stages.first?.changes.contains("add attribute Volume.edition") == true)
        #expect(preview.description.contains("sql: ALTER TABLE"), "\(preview)")
        #expect(try store.fingerprint() == before)

        // A new constraint the stored objects break: found by the preview, as the migration would.
        let constrained = try Both.library(version: "3", constraints: [["title"]])
        let error = #expect(throws: StrataError.self) {
            _ = try PersistentStoreCoordinator(managedObjectModel: constrained).migrationPreview(ofType: store.type)
        }
        #expect(error?.code == .migrationFailed && error?.constraintConflicts.count == 1, "\(String(describing: error))")
        #expect(try store.fingerprint() == before)

        // After the migration, nothing to preview; an LMDB type or an empty schema are refused.
        _ = try await store.open(model: model)
        #expect(try coordinator.migrationPreview(ofType: store.type).stages.isEmpty)
        #expect(throws: StrataError.self) { _ = try coordinator.migrationPreview(ofType: .lmdb) }
        let empty = PostgresTestStore()
        let none = #expect(throws: StrataError.self) { _ = try coordinator.migrationPreview(ofType: .postgres(empty.configuration)) }
        #expect(none?.code == .incompatibleStore, "\(String(describing: none))")
    }
}
