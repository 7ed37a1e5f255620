import Foundation
import InMemoryTracing
@testable import Strata
import StrataTesting
import Testing
import Tracing

/// The spans a coordinator starts (swift-distributed-tracing), with OpenTelemetry's
/// database attributes, to a tracer given to it or bound by the caller with `withTracer`
/// (no global bootstrap: each test has its own `InMemoryTracer`).
@Suite("Tracing")
struct TracingTests {
    static func spans(_ tracer: InMemoryTracer, named name: String) -> [FinishedInMemorySpan] {
        tracer.finishedSpans.filter { $0.operationName == name }
    }

    @Test("save, fetch and count spans carry db.system.name, db.operation.name, db.collection.name, returned rows and batch size")
    func contextSpans() async throws {
        let tracer = InMemoryTracer()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model, tracer: tracer)
        try await coordinator.addPersistentStore(type: .inMemory, options: CoordinatorStoreTests.options)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "api")
        try await context.perform { context in
            for index in 0..<4 {
                let note = Note()
                note.title = "n\(index)"
                note.priority = Int16(index)
                try context.insert(note)
            }
            try context.save()
            var request = FetchRequest<Note>()
            request.predicate = try FetchPredicate(format: "priority >= 2")
            #expect(try context.fetch(request).count == 2)
            #expect(try context.count(for: FetchRequest<Note>()) == 4)
        }
        let save = try #require(Self.spans(tracer, named: "save").first)
        #expect(save.kind == .client)
        #expect(save.attributes.get("db.system.name") == .string("lmdb"))
        #expect(save.attributes.get("db.operation.name") == .string("save"))
        #expect(save.attributes.get("db.operation.batch.size") == .int64(4))
        #expect(save.attributes.get("strata.context") == .string("api"))
        #expect(save.attributes.get("strata.save.destination") == .string("store"))

        let fetch = try #require(Self.spans(tracer, named: "fetch Note").first)
        #expect(fetch.attributes.get("db.operation.name") == .string("fetch"))
        #expect(fetch.attributes.get("db.collection.name") == .string("Note"))
        #expect(fetch.attributes.get("db.response.returned_rows") == .int64(2))
        let count = try #require(Self.spans(tracer, named: "count Note").first)
        #expect(count.attributes.get("db.operation.name") == .string("count"))
        #expect(tracer.activeSpans.isEmpty)
    }

    @Test("a failing save's span records the error and its code, and ends")
    func failedSave() async throws {
        let tracer = InMemoryTracer()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: AccountsModel.model, tracer: tracer)
        try await coordinator.addPersistentStore(type: .inMemory, options: CoordinatorStoreTests.options)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let first = UserAccount(), second = UserAccount()
            first.email = "same@x"
            second.email = "same@x"
            try context.insert(first)
            try context.insert(second)
            #expect(throws: StrataError.self) { try context.save() }
        }
        let save = try #require(Self.spans(tracer, named: "save").first)
        #expect(save.status?.code == .error)
        #expect(save.errors.count == 1)
        #expect(save.attributes.get("error.type") == .string("constraintConflicts"))
        #expect(tracer.activeSpans.isEmpty)
    }

    @Test("spans are children of the caller's span, with the tracer the caller bound with withTracer")
    func callerScope() async throws {
        let tracer = InMemoryTracer()
        // No tracer given: the active one is used at each operation.
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        try await coordinator.addPersistentStore(type: .inMemory, options: CoordinatorStoreTests.options)
        _ = try await ContextReference.saveNotes([("a", 1), ("b", 2)], on: coordinator)
        #expect(tracer.finishedSpans.isEmpty)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await withTracer(tracer) {
            try await withSpan("GET /notes") { _ in
                try await context.perform { context in
                    _ = try context.fetch(FetchRequest<Note>())
                }
            }
        }
        let request = try #require(Self.spans(tracer, named: "GET /notes").first)
        let fetch = try #require(Self.spans(tracer, named: "fetch Note").first)
        #expect(fetch.parentSpanID == request.spanID)
        #expect(fetch.traceID == request.traceID)
    }

    @Test("batch requests are spanned with their affected rows; opening a store that migrates is spanned as migrate")
    func batchAndMigration() async throws {
        let tracer = InMemoryTracer()
        let directory = TemporaryDirectory()
        let version1 = try ThingVersions.version1(), version2 = try ThingVersions.version2()
        do {
            let coordinator = PersistentStoreCoordinator(managedObjectModel: version1, tracer: tracer)
            let store = try await coordinator.addPersistentStore(at: directory.url, options: CoordinatorStoreTests.options)
            var insert = BatchInsertRequest(entityName: "Thing", objects: [["title": "a"], ["title": "b"], ["title": "c"]])
            insert.resultType = .count
            _ = try coordinator.execute(insert)
            try await coordinator.remove(store)
        }
        #expect(Self.spans(tracer, named: "open").count == 1)
        let batch = try #require(Self.spans(tracer, named: "batch_insert Thing").first)
        #expect(batch.attributes.get("db.operation.batch.size") == .int64(3))
        #expect(batch.attributes.get("db.collection.name") == .string("Thing"))

        let coordinator = PersistentStoreCoordinator(managedObjectModel: version2, tracer: tracer)
        try await coordinator.addPersistentStore(at: directory.url, options: CoordinatorStoreTests.options)
        let migrate = try #require(Self.spans(tracer, named: "migrate").first)
        #expect(migrate.attributes.get("db.operation.name") == .string("migrate"))
        #expect(migrate.attributes.get("strata.migration.to") == .string("version 2"))

        // A request that fails is spanned with its error.
        #expect(throws: StrataError.self) {
            _ = try coordinator.execute(BatchInsertRequest(entityName: "Thing", objects: [["nope": 1]]))
        }
        let failed = try #require(Self.spans(tracer, named: "batch_insert Thing").last)
        #expect(failed.status?.code == .error && failed.attributes.get("error.type") == .string("unknownKey"))
    }

    @Test("spans of several contexts at once each end, one per operation")
    func concurrentSpans() async throws {
        let tracer = InMemoryTracer()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model, tracer: tracer)
        try await coordinator.addPersistentStore(type: .inMemory, options: CoordinatorStoreTests.options)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<6 {
                group.addTask {
                    let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
                    for index in 0..<10 {
                        try await context.perform { context in
                            let note = Note()
                            note.title = "\(worker)-\(index)"
                            try context.insert(note)
                            try context.save()
                            _ = try context.fetch(FetchRequest<Note>())
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(Self.spans(tracer, named: "save").count == 60)
        #expect(Self.spans(tracer, named: "fetch Note").count == 60)
        #expect(tracer.activeSpans.isEmpty)
    }
}
