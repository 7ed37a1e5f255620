import Foundation
@testable import Strata
import StrataTesting
import Testing

/// Asynchronous fetches (issue 27): results in steps with progress, other blocks between
/// the steps, and cooperative cancellation.
@Suite("Asynchronous fetches")
struct AsynchronousFetchTests {
    private static func seed(_ count: Int, on coordinator: PersistentStoreCoordinator) async throws {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            for index in 0..<count {
                let note = Note()
                note.title = String(format: "%04d", index)
                note.priority = Int16(index % 5)
                try context.insert(note)
            }
            try context.save()
        }
    }

    @Test("objects come in the request's order, read a batch at a time, with progress after each batch")
    func stepsAndProgress() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        try await Self.seed(250, on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let seen = Locked<[FetchProgress]>([])
        var fetch = FetchRequest<Note>()
        fetch.predicate = try FetchPredicate(format: "priority < 4")
        fetch.sortDescriptors = [FetchSortDescriptor(key: "title", ascending: false)]
        var request = AsynchronousFetchRequest(fetchRequest: fetch) { progress in seen.withLock { $0.append(progress) } }
        request.batchSize = 64
        let (titles, faults) = try await context.execute(request) { context, notes in
            (notes.map(\.title), notes.filter(\.isFault).count)
        }
        #expect(titles.count == 200 && titles.first == "0248" && titles == titles.sorted(by: >))
        #expect(faults == 0)
        let steps = seen.withLock { $0 }
        #expect(steps.map(\.completed) == [0, 64, 128, 192, 200] && steps.allSatisfy { $0.total == 200 })
        #expect(steps.last?.fractionCompleted == 1)
    }

    @Test("unsaved changes count, as in a synchronous fetch; dictionary and count results run in one step")
    func pendingChangesAndOtherResults() async throws {
        let coordinator = try await ContextReference.inMemory()
        try await Self.seed(10, on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let note = Note()
            note.title = "new"
            try context.insert(note)
        }
        let titles = try await context.execute(AsynchronousFetchRequest(fetchRequest: FetchRequest<Note>())) { _, notes in
            notes.map(\.title).sorted()
        }
        #expect(titles.count == 11 && titles.last == "new")
        var dictionaries = FetchRequest<[String: any Sendable]>(entityName: "Note")
        dictionaries.resultType = .dictionary
        dictionaries.propertiesToFetch = [.expression(ExpressionDescription(name: "n", function: .count, keyPath: "self"))]
        let counted = try await context.execute(AsynchronousFetchRequest(fetchRequest: dictionaries)) { _, rows in
            rows.first?["n"].map { "\($0)" }
        }
        #expect(counted == "11")
    }

    @Test("a cancelled task stops the fetch at the next step and lets go of what it held; other blocks run between steps")
    func cancellation() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        try await Self.seed(400, on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let started = AsyncStream<Void>.makeStream()
        let steps = Locked(0)
        var request = AsynchronousFetchRequest(fetchRequest: FetchRequest<Note>()) { _ in
            if steps.withLock({ $0 += 1; return $0 }) == 2 { started.continuation.yield() }
        }
        request.batchSize = 10
        let task = Task {
            try await context.execute(request) { _, notes in notes.count }
        }
        for await _ in started.stream { break }
        // A block of the context runs while the fetch is between steps.
        let between = await context.perform { _ in true }
        task.cancel()
        let outcome = await task.result
        #expect(between)
        #expect(throws: CancellationError.self) { try outcome.get() }
        #expect(steps.withLock { $0 } < 41)
        let holds = await context.perform { context in context.graph.batching.holds.count }
        #expect(holds == 0)
    }

    @Test("cancelled from its progress after the second batch, the fetch runs no further step; a reset between steps fails it with invalidObjectState")
    func cancellationAtAStepAndReset() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        try await Self.seed(100, on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let reports = Locked<[Int]>([])
        var request = AsynchronousFetchRequest(fetchRequest: FetchRequest<Note>()) { progress in
            reports.withLock { $0.append(progress.completed) }
            // Progress is reported on the context, inside the fetch's own task.
            if progress.completed == 20 { withUnsafeCurrentTask { $0?.cancel() } }
        }
        request.batchSize = 10
        // (In a task of its own: the fetch cancels the task it runs in.)
        let outcome = await Task { try await context.execute(request) { _, notes in notes.count } }.result
        #expect(throws: CancellationError.self) { try outcome.get() }
        #expect(reports.withLock { $0 } == [0, 10, 20])
        #expect(await context.perform { context in context.graph.batching.holds.count } == 0)

        // A block queued from the progress of the first batch runs before the next one:
        // the context is reset while the fetch holds its objects.
        var resetting = AsynchronousFetchRequest(fetchRequest: FetchRequest<Note>()) { progress in
            if progress.completed == 10 { context.perform { context in context.reset() } }
        }
        resetting.batchSize = 10
        let error = await #expect(throws: StrataError.self) {
            try await context.execute(resetting) { _, notes in notes.count }
        }
        #expect(error?.code == .invalidObjectState, "\(String(describing: error))")
        #expect(await context.perform { context in context.graph.batching.holds.count } == 0)
    }

    @Test("a request the model refuses fails with its typed error before any step, and holds nothing")
    func badRequest() async throws {
        let coordinator = try await ContextReference.inMemory()
        try await Self.seed(5, on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        var fetch = FetchRequest<Note>()
        fetch.predicate = try FetchPredicate(format: "nope == 1")
        let steps = Locked(0)
        let request = AsynchronousFetchRequest(fetchRequest: fetch) { _ in steps.withLock { $0 += 1 } }
        do {
            _ = try await context.execute(request) { _, notes in notes.count }
            Issue.record("an unknown key was accepted")
        } catch {
            #expect((error as? StrataError)?.code == .unknownKey)
        }
        let holds = await context.perform { context in context.graph.batching.holds.count }
        #expect(holds == 0 && steps.withLock { $0 } == 0)
    }

    @Test("several contexts fetch asynchronously at once while a writer saves")
    func concurrent() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        try await Self.seed(300, on: coordinator)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                let writer = ManagedObjectContext(.privateQueue, coordinator: coordinator)
                for round in 0..<10 {
                    try await writer.perform { writer in
                        let note = Note()
                        note.title = "w\(round)"
                        try writer.insert(note)
                        try writer.save()
                    }
                }
            }
            for _ in 0..<3 {
                group.addTask {
                    let reader = ManagedObjectContext(.privateQueue, coordinator: coordinator)
                    var request = AsynchronousFetchRequest(fetchRequest: FetchRequest<Note>())
                    request.batchSize = 50
                    let count = try await reader.execute(request) { _, notes in notes.filter { !$0.title.isEmpty }.count }
                    #expect(count >= 300 && count <= 310)
                }
            }
            try await group.waitForAll()
        }
    }
}
