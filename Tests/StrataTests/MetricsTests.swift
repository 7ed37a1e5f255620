import CoreMetrics
import Foundation
import MetricsTestKit
@testable import Strata
import StrataTesting
import Testing

/// What a coordinator reports through swift-metrics, to a factory given to it (no global
/// bootstrap: each test has its own `TestMetrics`).
@Suite("Metrics")
struct MetricsTests {
    static func coordinator(
        _ metrics: TestMetrics, model: ManagedObjectModel = NotesModel.model
    ) async throws -> (PersistentStoreCoordinator, PersistentStore) {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model, metricsFactory: metrics)
        let store = try await coordinator.addPersistentStore(type: .inMemory, options: CoordinatorStoreTests.options)
        return (coordinator, store)
    }

    static func counter(_ metrics: TestMetrics, _ label: String, _ dimensions: [(String, String)]) -> Int64 {
        metrics.counterTotal(label: label, dimensions: dimensions)
    }

    @Test("saves, saved objects, commits, group sizes and commit durations are reported by context and store")
    func saves() async throws {
        let metrics = TestMetrics()
        let (coordinator, store) = try await Self.coordinator(metrics)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "importer")
        try await context.perform { context in
            for index in 0..<3 {
                let note = Note()
                note.title = "n\(index)"
                try context.insert(note)
            }
            try context.save()
            let notes = try context.fetch(FetchRequest<Note>())
            notes[0].title = "changed"
            try context.delete(notes[1])
            try context.save()
            try context.save()   // nothing to save: not counted
        }
        let importer = [("context", "importer")]
        #expect(Self.counter(metrics, StrataMetricName.saves, importer) == 2)
        #expect(Self.counter(metrics, StrataMetricName.savedObjects, importer + [("change", "inserted")]) == 3)
        #expect(Self.counter(metrics, StrataMetricName.savedObjects, importer + [("change", "updated")]) == 1)
        #expect(Self.counter(metrics, StrataMetricName.savedObjects, importer + [("change", "deleted")]) == 1)
        let saveTimer = try metrics.expectTimer(StrataMetricName.saveDuration, importer)
        #expect(saveTimer.values.count == 2 && saveTimer.values.allSatisfy { $0 > 0 })

        let storeDimension = [("store", "in-memory:\(store.identifier)")]
        #expect(Self.counter(metrics, StrataMetricName.commits, storeDimension) == 2)
        #expect(try metrics.expectRecorder(StrataMetricName.commitGroupSize, storeDimension).values == [1, 1])
        #expect(try metrics.expectTimer(StrataMetricName.commitDuration, storeDimension).values.count == 2)
        // The state gauges were refreshed after the first commit.
        #expect(try metrics.expectMeter(StrataMetricName.mapSize, storeDimension).lastValue ?? 0 >= Double(64 << 20))
        #expect(try metrics.expectMeter(StrataMetricName.mapUsed, storeDimension).lastValue ?? 0 > 0)
    }

    @Test("fetches and counts are timed by context, entity and operation, with the rows they returned; faults fired are counted")
    func fetches() async throws {
        let metrics = TestMetrics()
        let (coordinator, _) = try await Self.coordinator(metrics)
        let ids = try await ContextReference.saveNotes([("a", 1), ("b", 2), ("c", 3)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "reader")
        try await context.perform { context in
            #expect(try context.fetch(FetchRequest<Note>()).count == 3)
            var request = FetchRequest<Note>()
            request.predicate = try FetchPredicate(format: "priority > 1")
            #expect(try context.fetch(request).count == 2)
            #expect(try context.count(for: FetchRequest<Note>()) == 3)
            context.name = "renamed"
            let fault = context.object(with: ids[0]) as! Note
            try context.refresh(fault, mergeChanges: false)
            #expect(fault.title == "a")   // fires the fault
        }
        let fetch = [("context", "reader"), ("entity", "Note"), ("operation", "fetch")]
        #expect(try metrics.expectTimer(StrataMetricName.fetchDuration, fetch).values.count == 2)
        #expect(try metrics.expectTimer(StrataMetricName.fetchDuration,
                                        [("context", "reader"), ("entity", "Note"), ("operation", "count")]).values.count == 1)
        #expect(Self.counter(metrics, StrataMetricName.fetchedRows, [("context", "reader"), ("entity", "Note")]) == 5)
        // The rename took effect for what came after it.
        #expect(Self.counter(metrics, StrataMetricName.faultsFired, [("context", "renamed")]) >= 1)
        // The seeding context's fetch-free saves left no fetch metrics.
        #expect(metrics.timers(label: StrataMetricName.fetchDuration).allSatisfy { timer in
            timer.dimensions.contains { $0 == ("context", "reader") }
        })
    }

    @Test("a failed save is counted by its error code; a settled conflict is counted by store")
    func failuresAndConflicts() async throws {
        let metrics = TestMetrics()
        let (coordinator, store) = try await Self.coordinator(metrics, model: AccountsModel.model)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "signup")
        try await context.perform { context in
            let first = UserAccount()
            first.email = "a@x"
            try context.insert(first)
            try context.save()
            let second = UserAccount()
            second.email = "a@x"
            try context.insert(second)
            #expect(throws: StrataError.self) { try context.save() }
            context.rollback()
        }
        #expect(Self.counter(metrics, StrataMetricName.saveFailures, [("context", "signup"), ("error", "constraintConflicts")]) == 1)
        #expect(Self.counter(metrics, StrataMetricName.saves, [("context", "signup")]) == 1)

        // Two contexts change the same account; the second settles the conflict.
        let first = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "first")
        let second = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "second")
        second.mergePolicy = .mergeByPropertyObjectTrump
        let id = try await first.perform { context in
            try context.fetch(FetchRequest<UserAccount>())[0].objectID
        }
        try await second.perform { context in
            context.retainsRegisteredObjects = true   // keeps the object, and the version it read
            _ = try context.existingObject(with: id)
        }
        try await first.perform { context in
            (try context.existingObject(with: id) as! UserAccount).email = "b@x"
            try context.save()
        }
        try await second.perform { context in
            (try context.existingObject(with: id) as! UserAccount).email = "c@x"
            try context.save()
        }
        #expect(Self.counter(metrics, StrataMetricName.conflictsResolved, [("store", "in-memory:\(store.identifier)")]) == 1)
    }

    @Test("saves from several contexts at once are all counted, group commit's group sizes add up to them")
    func concurrentSaves() async throws {
        let metrics = TestMetrics()
        let (coordinator, store) = try await Self.coordinator(metrics)
        let contexts = 8, savesEach = 20
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<contexts {
                group.addTask {
                    let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "worker")
                    for index in 0..<savesEach {
                        try await context.perform { context in
                            let note = Note()
                            note.title = "w\(worker)-\(index)"
                            try context.insert(note)
                            try context.save()
                            _ = try context.count(for: FetchRequest<Note>())
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        let total = contexts * savesEach
        #expect(Self.counter(metrics, StrataMetricName.saves, [("context", "worker")]) == Int64(total))
        #expect(Self.counter(metrics, StrataMetricName.savedObjects, [("context", "worker"), ("change", "inserted")]) == Int64(total))
        let storeDimension = [("store", "in-memory:\(store.identifier)")]
        let groups = try metrics.expectRecorder(StrataMetricName.commitGroupSize, storeDimension).values
        #expect(groups.reduce(0, +) == Double(total))
        #expect(Self.counter(metrics, StrataMetricName.commits, storeDimension) == Int64(groups.count))
        #expect(try metrics.expectTimer(StrataMetricName.fetchDuration,
                                        [("context", "worker"), ("entity", "Note"), ("operation", "count")]).values.count == total)
    }

    @Test("open query generations and pinned contexts are gauged as contexts pin and let go")
    func generationGauges() async throws {
        let metrics = TestMetrics()
        let (coordinator, _) = try await Self.coordinator(metrics)
        _ = try await ContextReference.saveNotes([("a", 1)], on: coordinator)
        let open = { () -> TestMeter? in try? metrics.expectMeter(StrataMetricName.openGenerations) }
        var pinned: [ManagedObjectContext] = []
        for _ in 0..<3 {
            let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
            try await context.perform { context in
                try context.setQueryGenerationFrom(.current)
                _ = try context.count(for: FetchRequest<Note>())
            }
            pinned.append(context)
        }
        // Three contexts share one generation (nothing was written in between).
        #expect(open()?.lastValue == 1)
        #expect(try metrics.expectMeter(StrataMetricName.pinnedContexts).lastValue == 3)
        _ = try await ContextReference.saveNotes([("b", 1)], on: coordinator)
        try await pinned[0].perform { context in
            try context.setQueryGenerationFrom(.current)
            _ = try context.count(for: FetchRequest<Note>())
        }
        #expect(open()?.lastValue == 2)
        #expect(try metrics.expectMeter(StrataMetricName.pinnedContexts).lastValue == 3)
        pinned.removeAll()
        // Contexts go away on their own queues: wait a little for the leases to drop.
        let deadline = ContinuousClock.now + .seconds(10)
        while open()?.lastValue != 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        #expect(open()?.lastValue == 0)
        #expect(try metrics.expectMeter(StrataMetricName.pinnedContexts).lastValue == 0)
        #expect(coordinator.queryGenerationStatistics.openGenerations == 0)
    }

    @Test("with swift-metrics' no-op factory nothing is made: contexts keep no metrics")
    func noopFactoryCostsNothing() async throws {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model, metricsFactory: NOOPMetricsHandler.instance)
        try await coordinator.addPersistentStore(type: .inMemory, options: CoordinatorStoreTests.options)
        #expect(coordinator.instruments.metrics == nil)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let kept = try await context.perform { context in
            let note = Note()
            try context.insert(note)
            try context.save()
            _ = try context.fetch(FetchRequest<Note>())
            return context.graph.contextMetrics == nil
        }
        #expect(kept)
    }
}
