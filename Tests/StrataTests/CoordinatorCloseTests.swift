import Foundation
@testable import Strata
import StrataLMDB
import StrataLocks
import StrataTesting
import Testing

/// A graceful shutdown: ``PersistentStoreCoordinator/close(timeout:)`` refuses new
/// writes, lets those in flight finish, releases pinned generations and closes the stores.
@Suite("CoordinatorClose")
struct CoordinatorCloseTests {
    static func isClosedError(_ error: any Error) -> Bool {
        guard let error = error as? StrataError else { return false }
        return error == .coordinatorClosed
    }

    static func count(at url: URL) async throws -> Int {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        try await coordinator.addPersistentStore(at: url, options: CoordinatorStoreTests.options)
        defer { Task { try? await coordinator.close() } }
        return try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.count(for: FetchRequest<Note>())
        }
    }

    @Test("saves in flight from several contexts when the coordinator closes: every acknowledged save is in the store, the others failed with a closed error and kept their changes")
    func savesInFlight() async throws {
        let directory = TemporaryDirectory()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        try await coordinator.addPersistentStore(at: directory.url, options: CoordinatorStoreTests.options)
        let acknowledged = LockedValue(Set<String>())
        let refused = LockedValue(0)
        let started = AsyncStream<Void>.makeStream()
        let workers = (0..<6).map { worker in
            Task {
                let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "worker \(worker)")
                for index in 0..<10_000 {
                    let title = "w\(worker)-\(index)"
                    let outcome = await context.perform { context -> Bool? in
                        let note = Note()
                        note.title = title
                        do {
                            try context.insert(note)
                            try context.save()
                            return true
                        } catch {
                            #expect(Self.isClosedError(error), "\(error)")
                            let kept = context.hasChanges
                            #expect(kept)   // the context keeps what it could not save
                            return nil
                        }
                    }
                    if index == 20 { started.continuation.yield() }
                    guard outcome != nil else {
                        refused.withLock { $0 += 1 }
                        return
                    }
                    acknowledged.withLock { _ = $0.insert(title) }
                }
            }
        }
        var iterator = started.stream.makeAsyncIterator()
        for _ in 0..<6 { await iterator.next() }
        try await coordinator.close()
        for worker in workers { await worker.value }
        #expect(coordinator.isClosed)
        #expect(refused.withLock { $0 } == 6)   // every worker was eventually refused
        // The directory opens again at once; everything acknowledged is there, nothing else.
        let stored = try await Self.count(at: directory.url)
        #expect(stored == acknowledged.withLock { $0.count })
    }

    @Test("new saves, batch requests and stores are refused after close with coordinatorClosed; a second close returns at once")
    func refusesAfterClose() async throws {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        try await coordinator.addPersistentStore(type: .inMemory, options: CoordinatorStoreTests.options)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let note = Note()
            note.title = "before"
            try context.insert(note)
            try context.save()
        }
        try await coordinator.close()
        try await coordinator.close()
        try await context.perform { context in
            let note = Note()
            note.title = "after"
            try context.insert(note)
            #expect(throws: StrataError.coordinatorClosed) { try context.save() }
            #expect(context.insertedObjects.count == 1)
            // Reads of the closed stores fail with the same error.
            #expect(throws: StrataError.coordinatorClosed) { try context.fetch(FetchRequest<Note>()) }
        }
        #expect(throws: StrataError.coordinatorClosed) {
            _ = try coordinator.execute(BatchInsertRequest(entityName: "Note", objects: [["title": "x"]]))
        }
        await #expect(throws: StrataError.coordinatorClosed) {
            try await coordinator.addPersistentStore(type: .inMemory, options: CoordinatorStoreTests.options)
        }
    }

    @Test("pinned query generations are released: the store reopens at once though pinned contexts live on, and their reads fail with coordinatorClosed")
    func releasesPinnedGenerations() async throws {
        let directory = TemporaryDirectory()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        try await coordinator.addPersistentStore(at: directory.url, options: CoordinatorStoreTests.options)
        _ = try await ContextReference.saveNotes([("a", 1), ("b", 2)], on: coordinator)
        let pinned = (0..<3).map { _ in ManagedObjectContext(.privateQueue, coordinator: coordinator) }
        for context in pinned {
            try await context.perform { context in
                try context.setQueryGenerationFrom(.current)
                #expect(try context.count(for: FetchRequest<Note>()) == 2)
            }
        }
        #expect(coordinator.queryGenerationStatistics.pinnedContexts == 3)
        try await coordinator.close()
        // Another coordinator opens the same directory while the pinned contexts still exist.
        #expect(try await Self.count(at: directory.url) == 2)
        let failure = await pinned[0].perform { context -> StrataError? in
            do {
                _ = try context.count(for: FetchRequest<Note>())
                return nil
            } catch {
                return error as? StrataError
            }
        }
        #expect(failure == .coordinatorClosed)
    }

    @Test("the cross-process change feed ends when the coordinator closes, and a new iteration ends at once")
    func remoteChangesEnd() async throws {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        try await coordinator.addPersistentStore(type: .inMemory, options: CoordinatorStoreTests.options)
        let listener = Task { for await _ in coordinator.remoteChanges {} }
        try await Task.sleep(for: .milliseconds(20))
        try await coordinator.close()
        await listener.value   // ended: it would hang otherwise
        for await _ in coordinator.remoteChanges { Issue.record("a closed coordinator reported a change") }
        #expect(!coordinator.remoteChangeMonitor.isWatching)
    }

    @Test("a read held open past the timeout: close throws closeTimedOut, and closes once called again after the read ends")
    func timeout() async throws {
        let directory = TemporaryDirectory()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        let store = try await coordinator.addPersistentStore(at: directory.url, options: CoordinatorStoreTests.options)
        _ = try await ContextReference.saveNotes([("a", 1)], on: coordinator)
        let inRead = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        let reader = Thread {
            _ = try? store.file!.environment.read { _ in
                inRead.signal()
                release.wait()
            }
        }
        reader.start()
        inRead.wait()
        await #expect { try await coordinator.close(timeout: .milliseconds(50)) } throws: { error in
            (error as? StrataError)?.storageError == .closeTimedOut
        }
        #expect(coordinator.isClosed)
        release.signal()
        try await coordinator.close()
        #expect(store.file!.environment.isClosed)
    }

    @Test("a container closes its coordinator")
    func containerClose() async throws {
        let directory = TemporaryDirectory()
        let container = try PersistentContainer(name: "Notes", types: [Folder.self, Note.self])
        var description = PersistentStoreDescription(url: directory.url.appendingPathComponent("Notes.strata"))
        description.options = CoordinatorStoreTests.options
        container.persistentStoreDescriptions = [description]
        try await container.loadPersistentStores()
        try await container.performBackgroundTask { context in
            let note = Note()
            note.title = "kept"
            try context.insert(note)
            try context.save()
        }
        try await container.close()
        #expect(container.persistentStoreCoordinator.isClosed)
        #expect(try await Self.count(at: directory.url.appendingPathComponent("Notes.strata")) == 1)
    }
}
