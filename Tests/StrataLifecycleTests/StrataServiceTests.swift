import Foundation
import ServiceLifecycle
import ServiceLifecycleTestKit
import Strata
import StrataLifecycle
import StrataTesting
import Testing

/// Notes for the service tests.
final class Entry: ManagedObject {
    @Attribute(indexed: true) var title: String = ""
}

/// ``StrataService``: loads a container's stores when it runs, and closes them at a
/// graceful shutdown or a cancellation, letting saves in flight finish.
@Suite("StrataService")
struct StrataServiceTests {
    static func container(at directory: URL) throws -> PersistentContainer {
        let container = try PersistentContainer(name: "Entries", types: [Entry.self])
        var options = PersistentStore.Options()
        options.durability = .noSync
        container.persistentStoreDescriptions = [
            PersistentStoreDescription(url: directory.appendingPathComponent("Entries.strata"), options: options),
        ]
        return container
    }

    static func stored(at directory: URL) async throws -> Set<String> {
        let container = try Self.container(at: directory)
        try await container.loadPersistentStores()
        defer { Task { try? await container.close() } }
        return try await container.performBackgroundTask { context in
            Set(try context.fetch(FetchRequest<Entry>()).map { $0.title })
        }
    }

    @Test("run loads the stores and waits; a graceful shutdown closes the container, and new saves are refused")
    func loadsAndCloses() async throws {
        let directory = TemporaryDirectory()
        let container = try Self.container(at: directory.url)
        try await testGracefulShutdown { trigger in
            let service = StrataService(container: container)
            let running = Task { try await service.run() }
            // The service loads the stores; a second load waits for it and adds nothing.
            while container.persistentStoreCoordinator.persistentStores.isEmpty {
                try await Task.sleep(for: .milliseconds(5))
            }
            try await container.loadPersistentStores()
            try await container.performBackgroundTask { context in
                let entry = Entry()
                entry.title = "before"
                try context.insert(entry)
                try context.save()
            }
            #expect(!container.persistentStoreCoordinator.isClosed)
            trigger.triggerGracefulShutdown()
            try await running.value
        }
        #expect(container.persistentStoreCoordinator.isClosed)
        await #expect(throws: StrataError.coordinatorClosed) {
            try await container.performBackgroundTask { context in
                let entry = Entry()
                entry.title = "after"
                try context.insert(entry)
                try context.save()
            }
        }
        #expect(try await Self.stored(at: directory.url) == ["before"])
    }

    @Test("saves in flight from several tasks at the shutdown: every acknowledged save is on disk")
    func savesInFlight() async throws {
        let directory = TemporaryDirectory()
        let container = try Self.container(at: directory.url)
        try await container.loadPersistentStores()
        let acknowledged = try await testGracefulShutdown { trigger in
            let service = StrataService(container: container)
            let running = Task { try await service.run() }
            let (progress, progressed) = AsyncStream<Void>.makeStream()
            let writers = (0..<4).map { writer in
                Task { () -> [String] in
                    let context = container.newBackgroundContext()
                    var saved: [String] = []
                    for index in 0... {
                        let title = "w\(writer)-\(index)"
                        let ok = await context.perform { context -> Bool in
                            let entry = Entry()
                            entry.title = title
                            do {
                                try context.insert(entry)
                                try context.save()
                                return true
                            } catch {
                                context.rollback()
                                return false
                            }
                        }
                        guard ok else { return saved }
                        saved.append(title)
                        if index == 10 { progressed.yield() }
                    }
                    return saved
                }
            }
            var iterator = progress.makeAsyncIterator()
            for _ in 0..<4 { await iterator.next() }
            trigger.triggerGracefulShutdown()
            try await running.value
            var all: Set<String> = []
            for writer in writers { all.formUnion(await writer.value) }
            return all
        }
        #expect(acknowledged.count >= 44)
        #expect(try await Self.stored(at: directory.url) == acknowledged)
    }

    @Test("a cancelled service closes the container too")
    func cancellation() async throws {
        let directory = TemporaryDirectory()
        let container = try Self.container(at: directory.url)
        let service = StrataService(container: container)
        let running = Task { try await service.run() }
        let deadline = ContinuousClock.now + .seconds(30)
        while container.persistentStoreCoordinator.persistentStores.isEmpty, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(5))
        }
        running.cancel()
        try await running.value
        #expect(container.persistentStoreCoordinator.isClosed)
    }

    @Test("a store that fails to load fails the service with the container's error")
    func loadFailure() async throws {
        let directory = TemporaryDirectory()
        let file = directory.url.appendingPathComponent("not-a-directory")
        _ = FileManager.default.createFile(atPath: file.path, contents: Data("x".utf8))
        let container = try PersistentContainer(name: "Entries", types: [Entry.self])
        container.persistentStoreDescriptions = [PersistentStoreDescription(url: file)]
        await #expect(throws: PersistentContainerError.self) {
            try await StrataService(container: container).run()
        }
        #expect(container.persistentStoreCoordinator.isClosed)
    }
}
