import Foundation
import InMemoryLogging
import Logging
@testable import Strata
import StrataTesting
import Testing

/// What the coordinator logs (swift-log), to the logger it was given or the caller's
/// task-local one: stores opened and removed, saves and batch requests that failed, with
/// `strata.*` metadata.
@Suite("Logging")
struct LoggingTests {
    static func logger(level: Logger.Level = .trace) -> (Logger, InMemoryLogHandler) {
        var handler = InMemoryLogHandler()
        handler.logLevel = level
        let logger = Logger(label: "strata-tests") { _ in handler }
        return (logger, handler)
    }

    @Test("opening and removing a store, a save that fails on a conflict and a batch request that fails are logged with the store, context, author and error")
    func coordinatorEvents() async throws {
        let (logger, handler) = Self.logger()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: AccountsModel.model, logger: logger)
        var options = CoordinatorStoreTests.options
        options.tracksPersistentHistory = true
        let store = try await coordinator.addPersistentStore(type: .inMemory, options: options)
        let opened = try #require(handler.entries.first { $0.message == "store opened" })
        #expect(opened.level == .debug)
        #expect(opened.metadata["strata.store.id"] == "\(store.identifier)")
        #expect(opened.metadata["strata.store.history"] == "true")

        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "signup")
        context.transactionAuthor = "web"
        try await context.perform { context in
            let first = UserAccount()
            first.email = "a@x"
            try context.insert(first)
            try context.save()
            let second = UserAccount()
            second.email = "a@x"
            try context.insert(second)
            #expect(throws: StrataError.self) { try context.save() }
        }
        let failed = try #require(handler.entries.first { $0.message == "save failed" })
        #expect(failed.level == .debug)
        #expect(failed.metadata["strata.error"] == "constraintConflicts")
        #expect(failed.metadata["strata.context"] == "signup" && failed.metadata["strata.author"] == "web")

        #expect(throws: StrataError.self) {
            _ = try coordinator.execute(BatchInsertRequest(entityName: "UserAccount", objects: [["nope": 1]]))
        }
        let batch = try #require(handler.entries.first { $0.message == "batch request failed" })
        #expect(batch.metadata["strata.error"] == "unknownKey" && batch.metadata["strata.request"] == "batch insert")
        _ = try coordinator.execute(BatchInsertRequest(entityName: "UserAccount", objects: [["email": "b@x"]]))
        #expect(handler.entries.contains { $0.message == "batch request written" && $0.level == .debug })

        try await coordinator.remove(store)
        #expect(handler.entries.contains { $0.message == "store removed" && $0.metadata["strata.store.id"] == "\(store.identifier)" })
        // Nothing above debug: a process that never set up logging (swift-log's default
        // handler prints info and above) sees nothing from Strata.
        #expect(handler.entries.allSatisfy { $0.level <= .debug })
    }

    @Test("a coordinator made inside withLogger logs to that task-local logger, its metadata included")
    func taskLocalLogger() async throws {
        let (logger, handler) = Self.logger(level: .debug)
        let coordinator = try await withLogger(logger) { _ in
            try await withLogger(mergingMetadata: ["request.id": "r1"]) { _ in
                let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
                try await coordinator.addPersistentStore(type: .inMemory, options: CoordinatorStoreTests.options)
                return coordinator
            }
        }
        #expect(handler.entries.contains { $0.message == "store opened" && $0.metadata["request.id"] == "r1" })
        // Settable afterwards.
        let (other, otherHandler) = Self.logger()
        coordinator.logger = other
        try await coordinator.addPersistentStore(type: .inMemory, options: CoordinatorStoreTests.options)
        #expect(otherHandler.entries.count == 1)
    }

    @Test("a store migrated as it opens is logged with the versions and stages")
    func migrationIsLogged() async throws {
        let directory = TemporaryDirectory()
        let version1 = try ThingVersions.version1(), version2 = try ThingVersions.version2()
        do {
            let coordinator = PersistentStoreCoordinator(managedObjectModel: version1)
            let store = try await coordinator.addPersistentStore(at: directory.url, options: CoordinatorStoreTests.options)
            try await coordinator.remove(store)
        }
        let (logger, handler) = Self.logger(level: .debug)
        let coordinator = PersistentStoreCoordinator(managedObjectModel: version2, logger: logger)
        try await coordinator.addPersistentStore(at: directory.url, options: CoordinatorStoreTests.options)
        let migrated = try #require(handler.entries.first { $0.message == "store migrated" })
        #expect(migrated.level == .debug)
        #expect(migrated.metadata["strata.migration.from"] == "version 1" && migrated.metadata["strata.migration.to"] == "version 2",
                "\(migrated.metadata)")
        #expect(handler.entries.map(\.message) == ["store migrated", "store opened"])
    }

    @Test("a save or a batch request made inside a withLogger scope logs to that logger, with its metadata, not the coordinator's")
    func requestLoggerFlows() async throws {
        let (coordinatorLogger, coordinatorHandler) = Self.logger()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: AccountsModel.model, logger: coordinatorLogger)
        try await coordinator.addPersistentStore(type: .inMemory, options: CoordinatorStoreTests.options)
        let (requestLogger, requestHandler) = Self.logger()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await withLogger(requestLogger) { _ in
            try await withLogger(mergingMetadata: ["request.id": "r7"]) { _ in
                try await context.perform { context in
                    let first = UserAccount(), second = UserAccount()
                    first.email = "same@x"
                    second.email = "same@x"
                    try context.insert(first)
                    try context.insert(second)
                    #expect(throws: StrataError.self) { try context.save() }
                }
                #expect(throws: StrataError.self) {
                    _ = try coordinator.execute(BatchInsertRequest(entityName: "UserAccount", objects: [["nope": 1]]))
                }
            }
        }
        #expect(requestHandler.entries.contains { $0.message == "save failed" && $0.metadata["request.id"] == "r7" })
        #expect(requestHandler.entries.contains { $0.message == "batch request failed" && $0.metadata["request.id"] == "r7" })
        #expect(!coordinatorHandler.entries.contains { $0.message == "save failed" || $0.message == "batch request failed" })
    }

    @Test("a map growth is logged at debug once, and a pinned generation that advanced past its maximum age at info")
    func storeStateIsLogged() async throws {
        let (logger, handler) = Self.logger()
        let directory = TemporaryDirectory()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model, logger: logger)
        var options = CoordinatorStoreTests.options
        options.mapSize = 1 << 20   // 1 MiB: the saves below need more
        try await coordinator.addPersistentStore(type: .lmdb, at: directory.url, options: options)
        let writer = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await writer.perform { context in
            for round in 0..<4 {
                for index in 0..<2_000 {
                    let note = Note()
                    note.title = "a fairly long title so that the rows need room \(round) \(index)"
                    try context.insert(note)
                }
                try context.save()
                context.reset()
            }
        }
        let growths = handler.entries.filter { $0.message == "store map grew" }
        #expect(!growths.isEmpty && growths.allSatisfy { $0.level == .debug })
        // Once per growth: the count in the entries rises.
        let counts = growths.compactMap { $0.metadata["strata.map.growths"].flatMap { Int("\($0)") } }
        #expect(counts == counts.sorted() && Set(counts).count == counts.count)
        #expect(growths.allSatisfy { Int("\($0.metadata["strata.map.size"] ?? "0")") ?? 0 > 1 << 20 })

        // A pinned generation (it would stop the map from growing, so taken after).
        let pinned = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await pinned.perform { context in
            try context.setQueryGenerationFrom(.current)
            _ = try context.count(for: FetchRequest<Note>())
        }
        _ = try await ContextReference.saveNotes([("late", 1)], on: coordinator)
        coordinator.queryGenerationAgePolicy = .advance(after: .nanoseconds(1))
        let count = try await pinned.perform { try $0.count(for: FetchRequest<Note>()) }
        #expect(count == 8_001)
        let advanced = try #require(handler.entries.first { $0.message == "query generation past its maximum age advanced" })
        #expect(advanced.level == .info)
        #expect(advanced.metadata["strata.generation.maximum_age"] == "\(Duration.nanoseconds(1))")
        // Nothing else at info: the run had no failure that went untold.
        #expect(handler.entries.filter { $0.level >= .info }.count == 1)
    }
}
