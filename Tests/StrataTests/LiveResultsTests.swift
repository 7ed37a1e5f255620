import Foundation
import MetricsTestKit
@testable import Strata
import StrataTesting
import Testing

/// Live results (`context.results(for:)`): snapshots with their differences after every
/// change that can affect a request, and none after changes that cannot.
@Suite("LiveResults")
struct LiveResultsTests {
    struct World {
        let coordinator: PersistentStoreCoordinator
        let metrics: TestMetrics
        let observed: ManagedObjectContext

        /// How many fetches the observed context ran (each snapshot is one).
        var fetches: Int {
            metrics.timers(label: StrataMetricName.fetchDuration).filter { timer in
                timer.dimensions.contains { $0 == ("context", "observed") } && timer.dimensions.contains { $0 == ("operation", "fetch") }
            }.reduce(0) { $0 + $1.values.count }
        }
    }

    static func world() async throws -> World {
        let metrics = TestMetrics()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model, metricsFactory: metrics)
        try await coordinator.addPersistentStore(type: .inMemory, options: CoordinatorStoreTests.options)
        return World(coordinator: coordinator, metrics: metrics, observed: ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "observed"))
    }

    /// Notes with priority >= 2, by title.
    static var urgent: FetchRequest<Note> {
        var request = FetchRequest<Note>()
        request.predicate = try? FetchPredicate(format: "priority >= 2")
        request.sortDescriptors = [FetchSortDescriptor(key: "title")]
        return request
    }

    static func save(_ coordinator: PersistentStoreCoordinator, _ body: @escaping @Sendable (isolated ManagedObjectContext) throws -> Void) async throws {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "writer").perform { context in
            try body(context)
            try context.save()
        }
    }

    static func note(_ title: String, _ priority: Int16, in context: isolated ManagedObjectContext) throws {
        let note = Note()
        note.title = title
        note.priority = priority
        try context.insert(note)
    }

    static func titles(_ snapshot: ResultsSnapshot<String>) -> [String] { snapshot.elements }

    @Test("the first snapshot at once; other contexts' inserts, updates, moves and deletes arrive as differences")
    func differences() async throws {
        let world = try await Self.world()
        try await Self.save(world.coordinator) { context in
            try Self.note("b", 3, in: context)
            try Self.note("d", 2, in: context)
            try Self.note("low", 0, in: context)
        }
        let recorder = AsyncRecorder(world.observed.results(for: Self.urgent) { $0.title })
        let first = try await recorder.wait(forCount: 1)[0]
        #expect(first.isInitial && first.elements == ["b", "d"] && first.difference.inserted == [0, 1])
        #expect(first.sections == [ResultsSection(name: "", range: 0..<2)])

        // An insert that matches, between the two.
        try await Self.save(world.coordinator) { try Self.note("c", 5, in: $0) }
        let second = try await recorder.wait(forCount: 2)[1]
        #expect(second.elements == ["b", "c", "d"] && second.difference.inserted == [1] && second.difference.deleted.isEmpty)

        // An update that moves "b" to the end, and one that changes "d" in place.
        let ids = second.objectIDs
        try await Self.save(world.coordinator) { context in
            (try context.existingObject(with: ids[0]) as! Note).title = "z"
            (try context.existingObject(with: ids[2]) as! Note).body = "new body"
        }
        let third = try await recorder.wait(forCount: 3)[2]
        #expect(third.elements == ["c", "d", "z"])
        #expect(third.difference.moved.contains { $0.from == 0 && $0.to == 2 } || third.difference.moved.contains { $0.to == 2 }, "\(third.difference)")
        #expect(third.difference.updated.contains(1), "d changed in place: \(third.difference)")

        // A delete, and an update that leaves the predicate.
        try await Self.save(world.coordinator) { context in
            try context.delete(try context.existingObject(with: ids[1]))
            (try context.existingObject(with: ids[2]) as! Note).priority = 0
        }
        let fourth = try await recorder.wait(forCount: 4)[3]
        #expect(fourth.elements == ["z"] && Set(fourth.difference.deleted) == [0, 1], "\(fourth.difference)")
        await recorder.cancel()
    }

    @Test("changes that cannot affect the request fetch nothing: another entity, keys it does not read on objects outside it")
    func irrelevantChanges() async throws {
        let world = try await Self.world()
        try await Self.save(world.coordinator) { context in
            try Self.note("in", 3, in: context)
            try Self.note("out", 0, in: context)
        }
        // A context that keeps what it registers: objects the observer's fetches realised would show.
        await world.observed.perform { $0.retainsRegisteredObjects = true }
        let recorder = AsyncRecorder(world.observed.results(for: Self.urgent))
        try await recorder.wait(forCount: 1)
        let before = world.fetches
        #expect(before == 1)
        // Object IDs without sections are fetched as IDs: no object's values are read.
        let realised = await world.observed.perform { $0.registeredObjects.filter { !$0.isFault }.count }
        #expect(realised == 0)
        // Another entity; a key the request does not read, on an object outside the results.
        try await Self.save(world.coordinator) { context in
            let folder = Folder()
            folder.name = "Work"
            try context.insert(folder)
        }
        try await Self.save(world.coordinator) { context in
            let out = try context.fetch(FetchRequest<Note>()).first { $0.title == "out" }!
            out.body = "still low"
        }
        try await Task.sleep(for: .milliseconds(50))
        #expect(world.fetches == before, "no fetch for changes that cannot matter")
        #expect(recorder.elements.count == 1)
        // A key it reads, on an object outside: one fetch, and a snapshot as it enters.
        try await Self.save(world.coordinator) { context in
            let out = try context.fetch(FetchRequest<Note>()).first { $0.title == "out" }!
            out.priority = 4
        }
        let snapshots = try await recorder.wait(forCount: 2)
        #expect(snapshots[1].objectIDs.count == 2 && snapshots[1].difference.inserted.count == 1)
        #expect(world.fetches == before + 1)
        await recorder.cancel()
    }

    @Test("a burst of saves while the consumer is busy is fetched once: the next snapshot reflects them all")
    func coalescing() async throws {
        let world = try await Self.world()
        var iterator = world.observed.results(for: Self.urgent).makeAsyncIterator()
        let first = try await iterator.next()
        #expect(first?.elements.isEmpty == true)
        for index in 0..<50 {
            try await Self.save(world.coordinator) { try Self.note(String(format: "n%02d", index), 3, in: $0) }
        }
        let fetchesBefore = world.fetches
        let next = try #require(try await iterator.next())
        #expect(next.objectIDs.count == 50 && next.difference.inserted.count == 50)
        #expect(world.fetches == fetchesBefore + 1)
    }

    @Test("sections by a key path, and section differences")
    func sections() async throws {
        let world = try await Self.world()
        try await Self.save(world.coordinator) { context in
            try Self.note("a", 2, in: context)
            try Self.note("b", 2, in: context)
            try Self.note("c", 4, in: context)
        }
        var request = FetchRequest<Note>()
        request.sortDescriptors = [FetchSortDescriptor(key: "priority"), FetchSortDescriptor(key: "title")]
        let recorder = AsyncRecorder(world.observed.results(for: request, sectionNameKeyPath: "priority"))
        let first = try await recorder.wait(forCount: 1)[0]
        #expect(first.sections == [ResultsSection(name: "2", range: 0..<2), ResultsSection(name: "4", range: 2..<3)])
        try await Self.save(world.coordinator) { try Self.note("d", 5, in: $0) }
        let second = try await recorder.wait(forCount: 2)[1]
        #expect(second.sections.map(\.name) == ["2", "4", "5"] && second.difference.insertedSections == [2])
        await recorder.cancel()
    }

    @Test("batch updates and deletes reach live results")
    func batchRequests() async throws {
        let world = try await Self.world()
        try await Self.save(world.coordinator) { context in
            for index in 0..<5 { try Self.note("n\(index)", 2, in: context) }
        }
        let recorder = AsyncRecorder(world.observed.results(for: Self.urgent) { "\($0.title):\($0.priority)" })
        try await recorder.wait(forCount: 1)
        var update = BatchUpdateRequest(entityName: "Note")
        update.predicate = try FetchPredicate(format: "title == 'n0'")
        update.propertiesToUpdate = ["priority": .constant(5)]
        _ = try world.coordinator.execute(update)
        let updated = try await recorder.wait(forCount: 2)[1]
        #expect(updated.elements.contains("n0:5") && updated.difference.updated == [0], "\(updated.elements) \(updated.difference)")
        var delete = FetchRequest<Note>()
        delete.predicate = try FetchPredicate(format: "title IN %@", ["n1", "n2"])
        _ = try world.coordinator.execute(BatchDeleteRequest(fetchRequest: delete))
        let deleted = try await recorder.wait(forCount: 3)[2]
        #expect(deleted.elements.count == 3 && deleted.difference.deleted.count == 2)
        await recorder.cancel()
    }

    @Test("a child context's results follow a sibling's save into the parent, and the child's own pending changes")
    func childContexts() async throws {
        let world = try await Self.world()
        let parent = ManagedObjectContext(.privateQueue, coordinator: world.coordinator, name: "parent")
        let child = ManagedObjectContext(.privateQueue, parent: parent, name: "observed")
        let sibling = ManagedObjectContext(.privateQueue, parent: parent, name: "sibling")
        let recorder = AsyncRecorder(child.results(for: Self.urgent) { $0.title })
        try await recorder.wait(forCount: 1)
        try await sibling.perform { context in
            try Self.note("from sibling", 3, in: context)
            try context.save()   // into the parent only
        }
        let second = try await recorder.wait(forCount: 2)[1]
        #expect(second.elements == ["from sibling"])
        try await child.perform { context in
            try Self.note("pending here", 4, in: context)
            try context.processPendingChanges()
        }
        let third = try await recorder.wait(forCount: 3)[2]
        #expect(third.elements == ["from sibling", "pending here"])
        await recorder.cancel()
    }

    @Test("a parent saving a child's change to an object it never read: the keys are unknown there, and the observer looks again")
    func unreadChangesThroughAParent() async throws {
        let world = try await Self.world()
        try await Self.save(world.coordinator) { try Self.note("low", 0, in: $0) }
        let recorder = AsyncRecorder(world.observed.results(for: Self.urgent) { $0.title })
        #expect(try await recorder.wait(forCount: 1)[0].elements.isEmpty)
        let parent = ManagedObjectContext(.privateQueue, coordinator: world.coordinator, name: "parent")
        let child = ManagedObjectContext(.privateQueue, parent: parent, name: "child")
        try await child.perform { context in
            let note = try context.fetch(FetchRequest<Note>())[0]
            note.priority = 4
            try context.save()   // into the parent, which has not read the note
        }
        try await parent.perform { try $0.save() }
        let second = try await recorder.wait(forCount: 2)[1]
        #expect(second.elements == ["low"])
        await recorder.cancel()
    }

    @Test("ending the iteration removes the observer: a break, and a cancelled task")
    func endingRemovesObserver() async throws {
        let world = try await Self.world()
        for try await snapshot in world.observed.results(for: Self.urgent) {
            #expect(snapshot.isInitial)
            break
        }
        #expect(await eventually { !world.coordinator.liveResults.hasObservers })
        let recorder = AsyncRecorder(world.observed.results(for: Self.urgent))
        try await recorder.wait(forCount: 1)
        #expect(world.coordinator.liveResults.hasObservers)
        #expect(world.coordinator.remoteChangeMonitor.isWatching)   // other processes' commits, while observed
        await recorder.cancel()
        #expect(recorder.isFinished)
        #expect(!world.coordinator.liveResults.hasObservers)
        #expect(await eventually { !world.coordinator.remoteChangeMonitor.isWatching })
    }

    @Test("bad input: an unknown entity fails the iteration with a typed error; a context without a coordinator too")
    func badInput() async throws {
        let world = try await Self.world()
        var iterator = world.observed.results(for: FetchRequest<Note>(entityName: "Nope")).makeAsyncIterator()
        await #expect(throws: StrataError.unknownEntity("Nope")) { _ = try await iterator.next() }
        var orphan = ManagedObjectContext(.privateQueue).results(for: Self.urgent).makeAsyncIterator()
        await #expect(throws: StrataError.noCoordinator) { _ = try await orphan.next() }
    }

    @Test("many observers of different requests and several writers at once: each ends at its request's final state")
    func concurrentObserversAndWriters() async throws {
        let world = try await Self.world()
        let recorders = (0..<6).map { priority -> AsyncRecorder<ResultsSnapshot<String>> in
            var request = FetchRequest<Note>()
            request.predicate = try? FetchPredicate(format: "priority == %d", priority)
            request.sortDescriptors = [FetchSortDescriptor(key: "title")]
            let context = ManagedObjectContext(.privateQueue, coordinator: world.coordinator, name: "observer \(priority)")
            return AsyncRecorder(context.results(for: request) { $0.title })
        }
        for recorder in recorders { try await recorder.wait(forCount: 1) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<4 {
                group.addTask {
                    for index in 0..<15 {
                        try await Self.save(world.coordinator) { try Self.note("w\(writer)-\(index)", Int16(index % 6), in: $0) }
                    }
                }
            }
            try await group.waitForAll()
        }
        for (priority, recorder) in recorders.enumerated() {
            let expected = (0..<4).flatMap { writer in (0..<15).filter { $0 % 6 == priority }.map { "w\(writer)-\($0)" } }.sorted()
            let snapshots = try await recorder.wait { $0.last?.elements == expected }
            // Applying the differences in order rebuilds the final state.
            var rebuilt: [ManagedObjectID] = []
            for snapshot in snapshots {
                for index in snapshot.difference.deleted.sorted(by: >) { rebuilt.remove(at: index) }
                let moved = snapshot.difference.moved.map { snapshot.objectIDs[$0.to] }
                rebuilt.removeAll { moved.contains($0) }
                for index in (snapshot.difference.inserted + snapshot.difference.moved.map(\.to)).sorted() {
                    rebuilt.insert(snapshot.objectIDs[index], at: index)
                }
                #expect(rebuilt == snapshot.objectIDs)
            }
            await recorder.cancel()
        }
    }
}
