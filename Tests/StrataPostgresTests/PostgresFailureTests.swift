import Foundation
@testable import Strata
@testable import StrataPostgres
import Testing

@Suite("PostgreSQL store: bad input and failures get typed errors and lose nothing")
struct PostgresFailureTests {
    @Test("a server that cannot be reached fails addPersistentStore with connectionFailed; nothing is added")
    func serverDown() async throws {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: PGModel.model)
        var configuration = PostgresServer.configuration(schema: "unused")
        configuration.port = 1   // nothing listens there
        configuration.connectTimeout = .seconds(2)
        await #expect {
            try await coordinator.addPersistentStore(type: .postgres(configuration))
        } throws: { error in
            (error as? StrataError)?.databaseFailure?.kind == .connectionFailed
        }
        #expect(coordinator.persistentStores.isEmpty)
        var wrongDatabase = PostgresServer.configuration(schema: "unused")
        wrongDatabase.database = "no_such_database"
        await #expect {
            try await coordinator.addPersistentStore(type: .postgres(wrongDatabase))
        } throws: { error in
            let failure = (error as? StrataError)?.databaseFailure
            return failure?.kind == .connectionFailed && failure?.sqlState == "3D000"
        }
    }

    @Test("a store written with another model is refused (modelMismatch) when migration is off; tables not the model's are refused (incompatibleStore)")
    func mismatches() async throws {
        let store = PostgresTestStore()
        _ = try await store.coordinator()
        let other = try ManagedObjectModel(types: [PGFolder.self, PGNote.self, PGTag.self])
        var off = PersistentStore.Options()
        off.shouldMigrateStoreAutomatically = false   // else the store migrates to `other` (BothStoresMigrationTests)
        await #expect {
            try await PersistentStoreCoordinator(managedObjectModel: other).addPersistentStore(type: .postgres(store.configuration), options: off)
        } throws: { ($0 as? StrataError)?.code == .modelMismatch }
        _ = try store.execute("ALTER TABLE \"\(store.schema)\".\"Note\" DROP COLUMN \"body\"")
        await #expect {
            try await PersistentStoreCoordinator(managedObjectModel: PGModel.model).addPersistentStore(type: .postgres(store.configuration))
        } throws: { error in
            let error = error as? StrataError
            return error?.code == .incompatibleStore && error?.reason?.contains("Note.body is missing") == true
        }
    }

    @Test("a column dropped under an open store fails reads with schemaChanged")
    func schemaChangedUnderneath() async throws {
        let store = PostgresTestStore()
        let coordinator = try await store.coordinator()
        _ = try await PostgresSaveTests.savedNote(in: coordinator)
        _ = try store.execute("ALTER TABLE \"\(store.schema)\".\"Note\" DROP COLUMN \"body\"")
        let error = await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context -> StrataError? in
            do {
                _ = try context.fetch(FetchRequest<PGNote>())
                return nil
            } catch {
                return error as? StrataError
            }
        }
        #expect(error?.databaseFailure?.kind == .schemaChanged && error?.databaseFailure?.sqlState == "42703")
    }

    /// Runs `body` on a thread of its own (never a thread of the cooperative pool, which its
    /// blocking waits could starve) while another connection holds a lock on row `key` of
    /// Note, then releases it.
    static func whileRowLocked<R: Sendable>(
        _ store: PostgresTestStore, key: UInt64, _ body: @escaping @Sendable (PostgresSQLConnection) throws -> R
    ) async throws -> R {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                continuation.resume(with: Result { try lockingRow(store, key: key, body) })
            }
        }
    }

    /// Waits (at most 60 seconds) until a backend waits for a lock `holder` holds, and returns
    /// how many do; with `terminating`, ends those backends' connections.
    static func waitForBlocked(by holder: PostgresSQLConnection, terminating: Bool) throws -> Int {
        let counted = terminating ? "count(pg_terminate_backend(pid))" : "count(*)"
        let deadline = Date().addingTimeInterval(60)
        while true {
            let found = try holder.execute(
                "SELECT \(counted) FROM pg_stat_activity WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))", []
            ).rows.first?.first?.integer.map(Int.init) ?? 0
            if found > 0 || Date() >= deadline { return found }
            Thread.sleep(forTimeInterval: 0.02)
        }
    }

    private static func lockingRow<R>(_ store: PostgresTestStore, key: UInt64, _ body: (PostgresSQLConnection) throws -> R) throws -> R {
        let driver = try PostgresDriver(configuration: store.configuration, logger: .init(label: "holder"))
        defer { driver.close() }
        return try driver.withConnection { connection in
            _ = try connection.execute("BEGIN", [])
            defer { _ = try? connection.execute("ROLLBACK", []) }
            _ = try connection.execute("SELECT 1 FROM \"\(store.schema)\".\"Note\" WHERE \"_pk\" = $1 FOR UPDATE", [.int64(Int64(key))])
            return try body(connection as! PostgresSQLConnection)
        }
    }

    @Test("a save that outlives the statement timeout fails with timedOut, writes nothing and keeps its changes")
    func statementTimeout() async throws {
        let store = PostgresTestStore()
        // The tables and the first note are made under the default timeout; only the instance
        // that saves against the lock has a short one — long enough (2 s) that nothing but the
        // held lock outlasts it on a loaded machine (300 ms was outlasted by the schema's DDL).
        let id = try await PostgresSaveTests.savedNote(in: try await store.coordinator())
        var configuration = store.configuration
        configuration.statementTimeout = .seconds(2)
        let coordinator = try await store.coordinator(configuration: configuration)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let failure = try await Self.whileRowLocked(store, key: try #require(id.primaryKey?.rawValue)) { _ in
            context.performAndWait { context -> StrataError? in
                do {
                    let note = try context.existingObject(with: id) as? PGNote
                    note?.title = "blocked"
                    let other = PGNote()
                    other.title = "new"
                    try context.insert(other)
                    try context.save()
                    return nil
                } catch {
                    return error as? StrataError
                }
            }
        }
        #expect(failure?.databaseFailure?.kind == .timedOut && failure?.databaseFailure?.sqlState == "57014", "\(String(describing: failure))")
        let state = await context.perform { context in (context.hasChanges, context.insertedObjects.count) }
        #expect(state.0 && state.1 == 1)
        let rows = try store.execute("SELECT title FROM \"\(store.schema)\".\"Note\"").rows
        #expect(rows == [[.text("n")]])   // nothing half-written: the insert went with the rolled-back transaction
        try await context.perform { try $0.save() }   // the lock is gone: the same changes save
        #expect(try store.execute("SELECT count(*) FROM \"\(store.schema)\".\"Note\"").rows.first?.first?.integer == 2)
    }

    @Test("a connection lost in the middle of a save fails it with connectionLost; nothing is half-written; the next save uses a new connection")
    func connectionLostMidSave() async throws {
        let store = PostgresTestStore()
        let coordinator = try await store.coordinator()
        let id = try await PostgresSaveTests.savedNote(in: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in _ = try context.existingObject(with: id).objectID }
        let failure = try await Self.whileRowLocked(store, key: try #require(id.primaryKey?.rawValue)) { holder -> StrataError? in
            let saving = Task {
                await context.perform { context -> StrataError? in
                    let inserted = PGNote()
                    inserted.title = "inserted before the blocked update"
                    try? context.insert(inserted)
                    (try? context.existingObject(with: id) as? PGNote)?.title = "lost"
                    do {
                        try context.save()
                        return nil
                    } catch {
                        return error as? StrataError
                    }
                }
            }
            // Wait for the save to block on the lock, then end its connection.
            let killed = try Self.waitForBlocked(by: holder, terminating: true)
            #expect(killed == 1)
            let semaphore = DispatchSemaphore(value: 0)
            nonisolated(unsafe) var result: StrataError?
            Task {
                result = await saving.value
                semaphore.signal()
            }
            semaphore.wait()
            return result
        }
        #expect(failure?.databaseFailure?.kind == .connectionLost)
        let titles = try store.execute("SELECT title FROM \"\(store.schema)\".\"Note\"").rows
        #expect(titles == [[.text("n")]])
        let saved = try await context.perform { context in
            let changed = context.hasChanges
            try context.save()
            return (changed, try context.count(for: FetchRequest<PGNote>()))
        }
        #expect(saved.0 && saved.1 == 2)
    }

    @Test("a one-object save (one UPDATE, no transaction around it) whose connection is lost says its outcome is unknown; the context keeps its change")
    func connectionLostInOneStatementSave() async throws {
        let store = PostgresTestStore()
        let coordinator = try await store.coordinator()
        let id = try await PostgresSaveTests.savedNote(in: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            context.retainsRegisteredObjects = true
            _ = try context.existingObject(with: id).objectID
        }
        let saving = try await Self.whileRowLocked(store, key: try #require(id.primaryKey?.rawValue)) { holder -> Task<StrataError?, Never> in
            let saving = Task {
                await context.perform { context -> StrataError? in
                    (context.registeredObject(for: id) as? PGNote)?.title = "one statement"
                    do {
                        try context.save()
                        return nil
                    } catch {
                        return error as? StrataError
                    }
                }
            }
            _ = try Self.waitForBlocked(by: holder, terminating: true)
            return saving
        }
        let failure = await saving.value
        #expect(failure?.databaseFailure?.kind == .connectionLost && failure?.databaseFailure?.commitOutcomeUnknown == true, "\(String(describing: failure))")
        #expect(try store.execute("SELECT title FROM \"\(store.schema)\".\"Note\"").rows == [[.text("n")]])
        let kept = try await context.perform { context in
            let changed = context.hasChanges
            try context.save()
            return changed
        }
        #expect(kept)
        #expect(try store.execute("SELECT title FROM \"\(store.schema)\".\"Note\"").rows == [[.text("one statement")]])
    }

    @Test("what the store cannot do is refused with unsupportedByStore, naming it: one save over a PostgreSQL store and another store (nothing written to either)")
    func unsupported() async throws {
        let model = try ManagedObjectModel(
            types: [PGFolder.self, PGNote.self, PGTag.self, PGPlaylist.self, PGTrack.self, PGBook.self, PGFilm.self],
            configurations: ["Notes": ["Folder", "Note", "Tag"], "Media": ["Playlist", "Track", "Item", "Book", "Film"]])
        let store = PostgresTestStore(model: model)
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        try await coordinator.addPersistentStore(type: .postgres(store.configuration), configuration: "Notes")
        try await coordinator.addPersistentStore(type: .inMemory, configuration: "Media")
        let error = await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context -> StrataError? in
            do {
                let note = PGNote()
                note.title = "n"
                try context.insert(note)
                let track = PGTrack()
                track.title = "t"
                try context.insert(track)
                try context.save()
                return nil
            } catch {
                return error as? StrataError
            }
        }
        #expect(error?.code == .unsupportedByStore && error?.description.contains("cannot commit together") == true, "\(String(describing: error))")
        let counts = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            (try context.count(for: FetchRequest<PGNote>()), try context.count(for: FetchRequest<PGTrack>()))
        }
        #expect(counts == (0, 0))
    }

    @Test("after the coordinator closes, reads and saves fail with coordinatorClosed")
    func closed() async throws {
        let store = PostgresTestStore()
        let coordinator = try await store.coordinator()
        _ = try await PostgresSaveTests.savedNote(in: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await coordinator.close()
        await #expect(throws: StrataError.coordinatorClosed) {
            try await context.perform { context in _ = try context.fetch(FetchRequest<PGNote>()) }
        }
    }
}
