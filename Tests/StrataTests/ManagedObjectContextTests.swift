import Foundation
@testable import Strata
import StrataTesting
import Testing

@Suite("Managed object context")
struct ManagedObjectContextTests {
    static func coordinator() async throws -> PersistentStoreCoordinator {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        try await coordinator.addPersistentStore(type: .inMemory, options: CoordinatorStoreTests.options)
        return coordinator
    }

    @Test("perform inserts and saves; another context fetches the saved object by ID")
    func performInsertSaveFetch() async throws {
        let coordinator = try await Self.coordinator()
        let writer = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "writer")
        let id = try await writer.perform { context in
            let note = Note()
            note.title = "Groceries"
            try context.insert(note)
            let before = (context.hasChanges, context.insertedObjects.count)
            try context.save()
            let after = context.hasChanges
            #expect(before == (true, 1) && !after)
            return note.objectID
        }
        #expect(!id.isTemporaryID)
        let reader = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let title = try await reader.perform { context in
            let existing = try context.existingObject(with: id)
            let note = try #require(existing as? Note)
            var request = FetchRequest<Note>()
            request.predicate = \Note.title == "Groceries"
            let fetched = try context.fetch(request)
            let count = try context.count(for: request)
            #expect(fetched == [note] && count == 1)
            return note.title
        }
        #expect(title == "Groceries")
        #expect(await writer.name == "writer")
    }

    @Test("each block ends with processPendingChanges: cascades run without a save")
    func blocksProcessPendingChanges() async throws {
        let coordinator = try await Self.coordinator()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let noteID = try await context.perform { context in
            let folder = Folder()
            let note = Note()
            note.folder = folder
            try context.insert(folder)
            try context.save()
            try context.delete(folder)
            return note.objectID
        }
        await context.perform { context in
            let note = context.registeredObject(for: noteID)
            let deletedCount = context.deletedObjects.count
            #expect(note?.isDeleted == true)           // cascaded at the end of the last block
            #expect(deletedCount == 2)
        }
    }

    @Test("performAndWait from plain threads is reentrant, also across contexts")
    func performAndWaitFromThreads() async throws {
        let coordinator = try await Self.coordinator()
        let a = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let b = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let done = TestBox(0)
        let thread = TestRun {
            a.performAndWait { a in
                let note = Note()
                note.title = "from a"
                try? a.insert(note)
                b.performAndWait { _ in
                    a.performAndWait { a in   // A → B → A: runs inline
                        done.value = a.insertedObjects.count
                    }
                }
            }
        }
        #expect(await thread.joined(seconds: 30))
        #expect(done.value == 1)
    }

    @MainActor
    @Test("a main-queue context is used directly from main-actor code")
    func mainQueueContext() async throws {
        let coordinator = try await Self.coordinator()
        let context = ManagedObjectContext(.mainQueue, coordinator: coordinator)
        #expect(context.concurrencyType == .mainQueue)
        let count = try context.performAndWait { context in
            let note = Note()
            try context.insert(note)
            try context.save()
            return try context.count(for: FetchRequest<Note>())
        }
        #expect(count == 1)
        let fetched = try await context.perform { context in try context.fetch(FetchRequest<Note>()).count }
        #expect(fetched == 1)
    }

    @Test("eight contexts insert and update at once; every saved object is there after")
    func concurrentContexts() async throws {
        let coordinator = try await Self.coordinator()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<8 {
                group.addTask {
                    let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "worker \(worker)")
                    for round in 0..<10 {
                        try await context.perform { context in
                            for n in 0..<5 {
                                let note = Note()
                                note.title = "w\(worker)-r\(round)-n\(n)"
                                note.priority = Int16(n % 5)
                                try context.insert(note)
                            }
                            try context.save()
                            var mine = FetchRequest<Note>()
                            mine.predicate = try FetchPredicate(format: "title BEGINSWITH %@", "w\(worker)-")
                            let notes = try context.fetch(mine)
                            let expected = (round + 1) * 5
                            #expect(notes.count == expected)
                            for note in notes.prefix(2) { note.priority = (note.priority + 1) % 5 }
                            try context.save()
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        let check = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let total = try await check.perform { context in try context.count(for: FetchRequest<Note>()) }
        #expect(total == 400)
    }

    @Test("lock gives a thread exclusive use of the context; unlock without lock is an error")
    func legacyLock() async throws {
        let coordinator = try await Self.coordinator()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let result = TestBox<Bool?>(nil)
        let thread = TestRun {
            context.lock()
            let inserted = context.performAndWait { context in
                try? context.insert(Note())
                return context.insertedObjects.count
            }
            let unlocked = (try? context.unlock()) != nil
            let strayUnlock = (try? context.unlock()) == nil
            result.value = inserted == 1 && unlocked && strayUnlock
        }
        #expect(await thread.joined(seconds: 30))
        #expect(result.value == true)
    }
}

@Suite("Managed object context: no coordinator yet")
struct ContextWithoutCoordinatorTests {
    @Test("init(_:) makes a context with no coordinator: fetch, save and insert throw noCoordinator; object(with:) is inaccessible")
    func contextWithoutCoordinator() async throws {
        let context = ManagedObjectContext(.privateQueue)
        #expect(context.persistentStoreCoordinator == nil)
        let errors = await context.perform { context in
            var errors: [StrataError] = []
            func record(_ body: () throws -> Void) {
                do { try body() } catch let error as StrataError { errors.append(error) } catch {}
            }
            record { _ = try context.fetch(FetchRequest<Note>()) }
            record { _ = try context.count(for: FetchRequest<Note>()) }
            record { try context.insert(Note()) }
            record { try context.save() }   // nothing to save: no error
            return errors
        }
        #expect(errors == [.noCoordinator, .noCoordinator, .noCoordinator])
    }

    @Test("a coordinator without any store refuses fetch and count with noStore instead of returning nothing")
    func coordinatorWithoutStores() async throws {
        let context = ManagedObjectContext(.privateQueue, coordinator: PersistentStoreCoordinator(managedObjectModel: NotesModel.model))
        let errors = await context.perform { context in
            var errors: [StrataError] = []
            do { _ = try context.fetch(FetchRequest<Note>()) } catch let error as StrataError { errors.append(error) } catch {}
            do { _ = try context.count(for: FetchRequest<Note>()) } catch let error as StrataError { errors.append(error) } catch {}
            return errors
        }
        #expect(errors == [.noStore(entity: "Note"), .noStore(entity: "Note")])
    }

    @Test("setPersistentStoreCoordinator connects it once; another coordinator is refused, the same one is accepted")
    func setCoordinatorOnce() async throws {
        let coordinator = try await ManagedObjectContextTests.coordinator()
        let context = ManagedObjectContext(.privateQueue)
        try context.setPersistentStoreCoordinator(coordinator)
        try context.setPersistentStoreCoordinator(coordinator)
        #expect(context.persistentStoreCoordinator === coordinator)
        let other = try await ManagedObjectContextTests.coordinator()
        let error = #expect(throws: StrataError.self) { try context.setPersistentStoreCoordinator(other) }
        #expect(error == .invalidContextConfiguration("it already has a persistent store coordinator"))
        let saved = try await context.perform { context in
            let note = Note()
            note.title = "connected"
            try context.insert(note)
            try context.save()
            return try context.count(for: FetchRequest<Note>())
        }
        #expect(saved == 1)
    }
}

@Suite("Managed object context: detectConflicts(for:)")
struct ContextDetectConflictsTests {
    /// Saves two notes and returns their IDs.
    static func twoNotes(_ context: ManagedObjectContext) async throws -> (ManagedObjectID, ManagedObjectID) {
        try await context.perform { context in
            let a = Note(), b = Note()
            a.title = "read"
            b.title = "written"
            try context.insert(a)
            try context.insert(b)
            try context.save()
            return (a.objectID, b.objectID)
        }
    }

    @Test("detectConflicts(for:) makes the next save fail when the unchanged object changed in the store; nothing is written")
    func detectsConflictOnUnchangedObject() async throws {
        let coordinator = try await ManagedObjectContextTests.coordinator()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let other = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let (read, written) = try await Self.twoNotes(context)
        try await context.perform { context in
            try context.detectConflicts(for: context.object(with: read))
        }
        try await other.perform { context in
            (try context.existingObject(with: read) as? Note)?.title = "changed elsewhere"
            try context.save()
        }
        let error = await context.perform { context in
            (context.object(with: written) as? Note)?.title = "depends on read"
            do {
                try context.save()
                return nil as StrataError?
            } catch {
                return error as? StrataError
            }
        }
        guard let error, error.code == .mergeConflicts else {
            Issue.record("expected a merge conflict, got \(String(describing: error))")
            return
        }
        #expect(error.conflicts.map(\.objectID) == [read])
        let stored = try await other.perform { context in
            (try context.existingObject(with: written) as? Note)?.title
        }
        #expect(stored == "written")
    }

    @Test("without detectConflicts(for:) the same save succeeds; after a successful save the check is dropped")
    func checkIsOptInAndDropped() async throws {
        let coordinator = try await ManagedObjectContextTests.coordinator()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let other = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let (read, written) = try await Self.twoNotes(context)
        let held = try await context.perform { context in
            context.retainsRegisteredObjects = true   // keep the checked object across blocks
            _ = try context.existingObject(with: read)
            (context.object(with: written) as? Note)?.title = "first"
            try context.detectConflicts(for: context.object(with: read))
            try context.save()      // nothing changed underneath yet: succeeds
            return context.registeredObject(for: read) != nil
        }
        #expect(held)
        try await other.perform { context in
            (try context.existingObject(with: read) as? Note)?.title = "changed elsewhere"
            try context.save()
        }
        try await context.perform { context in
            (context.object(with: written) as? Note)?.title = "second"
            try context.save()      // the check went with the first save
        }
    }
}
