import Foundation
@testable import Strata
import StrataLocks
import StrataLMDB
import StrataTesting
import Testing

/// Query generations as resources (issue 7): reader slots, their release, the reader
/// limit, map growth under pins, pins across threads and `await`s, and the age policy.
@Suite("Query generation resources")
struct QueryGenerationResourceTests {
    /// A coordinator on an in-memory store with `options` changed by `configure`.
    static func coordinator(_ configure: (inout PersistentStore.Options) -> Void = { _ in }) async throws -> PersistentStoreCoordinator {
        var options = CoordinatorStoreTests.options
        configure(&options)
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        try await coordinator.addPersistentStore(type: .inMemory, options: options)
        return coordinator
    }

    /// The environment of the coordinator's only store.
    static func environment(of coordinator: PersistentStoreCoordinator) throws -> Environment {
        try #require(coordinator.persistentStores.first).file!.environment
    }

    /// Reader slots of this store holding a transaction now.
    static func liveReaders(_ coordinator: PersistentStoreCoordinator) throws -> Int {
        try environment(of: coordinator).readers().filter { $0.transactionID != nil }.count
    }

    /// The error a count in `context` throws, or nil when it counts.
    static func countError(in context: ManagedObjectContext) async -> StrataError? {
        await context.perform { context in strataError { _ = try context.count(for: FetchRequest<Note>()) } }
    }

    @Test("10,000 pin, read and unpin cycles in four contexts at once, with saves in between, leave no snapshot and no reader slot behind")
    func noReaderSlotLeaks() async throws {
        let coordinator = try await Self.coordinator()
        _ = try await ContextReference.saveNotes([("seed", 1)], on: coordinator)
        let contexts = (0..<4).map { ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "pinner \($0)") }
        let smallest = try await withThrowingTaskGroup(of: Int.self) { group in
            for context in contexts {
                group.addTask {
                    try await context.perform { context in
                        var smallest = Int.max
                        for cycle in 0..<2_500 {
                            try context.setQueryGenerationFrom(.current)
                            smallest = min(smallest, try context.count(for: FetchRequest<Note>()))
                            if cycle % 250 == 0 {
                                let note = Note()
                                note.title = "cycle \(cycle)"
                                try context.insert(note)
                                try context.save()   // a pinned save: advances to its own state
                            }
                            try context.setQueryGenerationFrom(nil)
                        }
                        return smallest
                    }
                }
            }
            return try await group.reduce(Int.max) { min($0, $1) }
        }
        #expect(smallest >= 1)
        let environment = try Self.environment(of: coordinator)
        #expect(environment.openSnapshotCount == 0)
        #expect(try Self.liveReaders(coordinator) == 0)
        let statistics = coordinator.queryGenerationStatistics
        #expect(statistics.openGenerations == 0 && statistics.pinnedContexts == 0 && statistics.oldestGenerationAge == nil)
        #expect(try await QueryGenerationTests.noteCount(in: contexts[0]) == 1 + 4 * 10)
    }

    @Test("a context going away releases its snapshot")
    func releasedWithTheContext() async throws {
        let coordinator = try await Self.coordinator()
        var context: ManagedObjectContext? = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context!.perform { context in
            try context.setQueryGenerationFrom(.current)
            _ = try context.count(for: FetchRequest<Note>())
        }
        #expect(coordinator.queryGenerationStatistics.pinnedContexts == 1)
        #expect(try Self.liveReaders(coordinator) == 1)
        context = nil
        #expect(coordinator.queryGenerationStatistics.openGenerations == 0)
        #expect(try Self.liveReaders(coordinator) == 0)
    }

    @Test("contexts pinned to distinct states fill the reader table; past it, reads throw readersFull (typed), a shared token still pins, a pinned save still commits, and releasing a pin frees a slot")
    func readerLimit() async throws {
        let coordinator = try await Self.coordinator { $0.maxReaders = 8 }
        let limit = try Self.environment(of: coordinator).info.maxReaders   // LMDB rounds the table up to a page
        #expect(limit >= 8)
        var pinned: [ManagedObjectContext] = []
        for index in 0..<limit {
            _ = try await ContextReference.saveNotes([("note \(index)", 1)], on: coordinator)
            let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "pinned \(index)")
            let counted = try await context.perform { context in
                try context.setQueryGenerationFrom(.current)
                return try context.count(for: FetchRequest<Note>())
            }
            #expect(counted == index + 1)
            pinned.append(context)
        }
        var statistics = coordinator.queryGenerationStatistics
        #expect(statistics.openGenerations == limit && statistics.pinnedContexts == limit)
        #expect(statistics.stores.first?.readerSlotsInUse == limit)
        #expect(statistics.stores.first?.oldestReaderLag == limit - 1)

        // One more state, one more pin: no slot.
        _ = try await ContextReference.saveNotes([("one too many", 1)], on: coordinator)
        let late = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "late")
        try await late.perform { try $0.setQueryGenerationFrom(.current) }
        let full = await Self.countError(in: late)
        guard let storageError = full?.storageError else {
            Issue.record("expected a storage error, got \(String(describing: full))")
            return
        }
        #expect(storageError == .readersFull)
        #expect("\(storageError)".contains("reader slots"))
        #expect(await Self.countError(in: ManagedObjectContext(.privateQueue, coordinator: coordinator)) == .storage(.readersFull))
        // Its token stays lazy.
        #expect(await late.perform { $0.queryGenerationToken } == .current)

        // A token already open costs no slot.
        let shared = await pinned[0].perform { $0.queryGenerationToken }
        let sharer = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "sharer")
        try await sharer.perform { try $0.setQueryGenerationFrom(shared) }
        #expect(try await QueryGenerationTests.noteCount(in: sharer) == 1)

        // A pinned context saves with every slot taken: the commit happens, and the
        // context takes the newest state at its next read (its own slot, given back).
        try await pinned[1].perform { context in
            let note = Note()
            note.title = "saved while full"
            try context.insert(note)
            try context.save()
        }
        #expect(try await QueryGenerationTests.noteCount(in: pinned[1]) == limit + 2)

        // Releasing a pin frees a slot for the late context.
        try await pinned[limit - 1].perform { try $0.setQueryGenerationFrom(nil) }
        #expect(await Self.countError(in: late) == nil)
        #expect(try await QueryGenerationTests.noteCount(in: late) == limit + 2)
        statistics = coordinator.queryGenerationStatistics
        #expect(statistics.pinnedContexts == limit + 1)   // pinned[0..<limit-1], sharer, late
    }

    @Test("a save that needs the map to grow while another context is pinned fails with mapFull and writes nothing; once the pin is released it grows the map and commits; a pinned context's own save lets its pin go and grows")
    func mapGrowthUnderPins() async throws {
        let coordinator = try await Self.coordinator { options in
            options.mapSize = 1 << 20
            options.maximumMapSize = 64 << 20
        }
        let environment = try Self.environment(of: coordinator)
        let reader = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "reader")
        try await reader.perform { reader in
            try reader.setQueryGenerationFrom(.current)
            _ = try reader.count(for: FetchRequest<Note>())
        }
        let writer = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "writer")
        let body = String(repeating: "x", count: 8_000)
        let failure = try await writer.perform { writer in
            for index in 0..<300 {
                let note = Note()
                note.title = "big \(index)"
                note.body = body
                try writer.insert(note)
            }
            return strataError { try writer.save() }
        }
        guard let storageError = failure?.storageError else {
            Issue.record("expected mapFull, got \(String(describing: failure))")
            return
        }
        #expect(storageError == .mapFull)
        #expect("\(storageError)".contains("snapshot"))
        #expect(await writer.perform { $0.hasChanges })
        #expect(try await QueryGenerationTests.noteCount(in: ManagedObjectContext(.privateQueue, coordinator: coordinator)) == 0)
        #expect(environment.mapGrowthCount == 0)

        try await reader.perform { try $0.setQueryGenerationFrom(nil) }
        try await writer.perform { try $0.save() }
        #expect(environment.mapGrowthCount >= 1)
        #expect(try await QueryGenerationTests.noteCount(in: reader) == 300)

        // The only pin is the saver's own: it lets it go, the map grows, and it advances.
        let growthsBefore = environment.mapGrowthCount
        let pinnedSaver = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "pinned saver")
        let after = try await pinnedSaver.perform { context in
            try context.setQueryGenerationFrom(.current)
            _ = try context.count(for: FetchRequest<Note>())
            for index in 0..<600 {
                let note = Note()
                note.title = "bigger \(index)"
                note.body = body
                try context.insert(note)
            }
            try context.save()
            return (try context.count(for: FetchRequest<Note>()), context.queryGenerationToken)
        }
        #expect(environment.mapGrowthCount > growthsBefore)
        #expect(after.0 == 900 && after.1 != nil && after.1 != .current)
    }

    @Test("a pin holds across awaits and thread hops: perform, performAndWait from plain threads, and a main-queue context, while another context saves")
    func pinsAcrossAwaitsAndThreads() async throws {
        let coordinator = try await Self.coordinator()
        _ = try await ContextReference.saveNotes([("a", 1), ("b", 1)], on: coordinator)
        let background = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "background")
        let main = ManagedObjectContext(.mainQueue, coordinator: coordinator, name: "main")
        let token = try await background.perform { context in
            try context.setQueryGenerationFrom(.current)
            _ = try context.count(for: FetchRequest<Note>())
            return context.queryGenerationToken
        }
        try await main.perform { try $0.setQueryGenerationFrom(token) }
        let writer = Task {
            for index in 0..<20 {
                _ = try await ContextReference.saveNotes([("w\(index)", 1)], on: coordinator)
                await Task.yield()
            }
        }
        let seen = LockedValue<[Int]>([])
        for _ in 0..<10 {
            for context in [background, main] {
                let counted = try await QueryGenerationTests.noteCount(in: context)
                seen.withLock { $0.append(counted) }
                await Task.yield()
                let run = TestRun {
                    let counted = context.performAndWait { context in
                        (try? context.count(for: FetchRequest<Note>())) ?? -1
                    }
                    seen.withLock { $0.append(counted) }
                }
                #expect(await run.joined())
            }
        }
        try await writer.value
        #expect(seen.withLock { $0 }.allSatisfy { $0 == 2 })
        #expect(seen.withLock { $0.count } == 40)
        #expect(await background.perform { $0.queryGenerationToken } == token)
        #expect(try await QueryGenerationTests.noteCount(in: ManagedObjectContext(.privateQueue, coordinator: coordinator)) == 22)
    }

    @Test("two contexts sharing one snapshot read it from many tasks at once while a writer saves: every read sees the pinned state")
    func sharedSnapshotUnderConcurrentReads() async throws {
        let coordinator = try await Self.coordinator()
        _ = try await ContextReference.saveNotes((0..<50).map { ("n\($0)", Int16($0 % 5)) }, on: coordinator)
        let first = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "first")
        let second = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "second")
        let token = try await first.perform { context in
            try context.setQueryGenerationFrom(.current)
            _ = try context.count(for: FetchRequest<Note>())
            return context.queryGenerationToken
        }
        try await second.perform { try $0.setQueryGenerationFrom(token) }
        let results = try await withThrowingTaskGroup(of: [Int].self) { group in
            group.addTask {
                for index in 0..<40 { _ = try await ContextReference.saveNotes([("new \(index)", 1)], on: coordinator) }
                return []
            }
            for task in 0..<6 {
                let context = task % 2 == 0 ? first : second
                group.addTask {
                    var counts: [Int] = []
                    for _ in 0..<60 {
                        counts.append(try await context.perform { context in
                            try context.fetch(ContextReference.notes("priority >= 0")).count
                        })
                    }
                    return counts
                }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        #expect(results.count == 360 && results.allSatisfy { $0 == 50 })
        #expect(coordinator.queryGenerationStatistics.openGenerations == 1)
    }

    @Test("age policy fail: a read of a context whose generation is too old throws queryGenerationExpired until the context advances")
    func agePolicyFail() async throws {
        let coordinator = try await Self.coordinator()
        coordinator.queryGenerationAgePolicy = .fail(after: .nanoseconds(1))
        #expect(coordinator.queryGenerationAgePolicy == .fail(after: .nanoseconds(1)))
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let results = try await context.perform { context in
            try context.setQueryGenerationFrom(.current)
            let first = strataError { _ = try context.count(for: FetchRequest<Note>()) }   // takes it: age 0
            let second = strataError { _ = try context.count(for: FetchRequest<Note>()) }
            let third = strataError { _ = try context.fetch(FetchRequest<Note>()) }
            try context.setQueryGenerationFrom(.current)
            let afterAdvance = strataError { _ = try context.count(for: FetchRequest<Note>()) }
            return (first, second, third, afterAdvance)
        }
        #expect(results.0 == nil && results.3 == nil)
        guard let expired = results.1, expired.code == .queryGenerationExpired, let age = expired.age,
              let maximumAge = expired.maximumAge else {
            Issue.record("expected queryGenerationExpired, got \(String(describing: results.1))")
            return
        }
        #expect(age > maximumAge && maximumAge == .nanoseconds(1))
        #expect("\(results.1!)".contains("maximum age"))
        if results.2?.code == .queryGenerationExpired {} else { Issue.record("a fetch should fail as the count did") }
        // Unpinned contexts are not concerned.
        #expect(await Self.countError(in: ManagedObjectContext(.privateQueue, coordinator: coordinator)) == nil)
    }

    @Test("age policy advance: a read of a context whose generation is too old moves it to the newest state and announces it at the end of the block; registered objects keep their values")
    func agePolicyAdvance() async throws {
        let coordinator = try await Self.coordinator()
        let ids = try await ContextReference.saveNotes([("a", 1)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let first = try await context.perform { context in
            context.retainsRegisteredObjects = true
            try context.setQueryGenerationFrom(.current)
            _ = try context.existingObject(with: ids[0])
            return context.queryGenerationToken
        }
        try await ContextReference.update(ids[0], on: coordinator) { $0.title = "a2" }
        _ = try await ContextReference.saveNotes([("b", 1)], on: coordinator)
        #expect(try await QueryGenerationTests.noteCount(in: context) == 1)

        coordinator.queryGenerationAgePolicy = .advance(after: .nanoseconds(1))
        let expiries = context.notifications(of: [.didExpireQueryGeneration])
        let center = NotificationCenter()
        await context.perform { $0.notificationCenter = center }
        let posted = LockedValue<QueryGenerationToken?>(nil)
        let observation = center.addObserver(forName: ManagedObjectContext.didExpireQueryGenerationNotification, object: context, queue: nil) { notification in
            let expired = notification.userInfo?[ManagedObjectContext.NotificationKey.expiredQueryGeneration.rawValue] as? QueryGenerationToken
            posted.withLock { $0 = expired }
        }
        defer { center.removeObserver(observation) }
        let after = try await context.perform { context in
            let counted = try context.count(for: FetchRequest<Note>())
            let title = (context.registeredObject(for: ids[0]) as? Note)?.title
            return (counted, title, context.queryGenerationToken)
        }
        #expect(after.0 == 2 && after.1 == "a")
        var iterator = expiries.makeAsyncIterator()
        let notice = try #require(await iterator.next())
        #expect(notice.expiredQueryGenerationToken == first && notice.queryGenerationToken == after.2)
        #expect(posted.withLock { $0 } == first)
        coordinator.queryGenerationAgePolicy = .unlimited
    }

    @Test("statistics report open generations, pinned contexts, the oldest age, reader slots and how far behind the oldest reader is")
    func statistics() async throws {
        let coordinator = try await Self.coordinator()
        var statistics = coordinator.queryGenerationStatistics
        #expect(statistics.openGenerations == 0 && statistics.oldestGenerationAge == nil)
        #expect(statistics.stores.count == 1 && statistics.stores[0].readerSlotsInUse == 0 && statistics.stores[0].oldestReaderLag == 0)
        #expect(statistics.stores[0].maxReaders >= 126 && statistics.stores[0].storeIdentifier == coordinator.persistentStores[0].identifier)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            try context.setQueryGenerationFrom(.current)
            _ = try context.count(for: FetchRequest<Note>())
        }
        for index in 0..<3 { _ = try await ContextReference.saveNotes([("n\(index)", 1)], on: coordinator) }
        statistics = coordinator.queryGenerationStatistics
        #expect(statistics.openGenerations == 1 && statistics.pinnedContexts == 1)
        #expect(try #require(statistics.oldestGenerationAge) > .zero)
        #expect(statistics.stores[0].readerSlotsInUse == 1 && statistics.stores[0].oldestReaderLag == 3)
    }
}
