import Foundation
@testable import Strata
import StrataTesting
import Testing

/// A crate whose bottles are left alone when it is deleted (delete rule `.noAction`).
final class Crate: ManagedObject {
    @Attribute var label: String = ""
    @Relationship(inverse: "crate", deleteRule: .noAction) var bottles: Set<Bottle>
}

final class Bottle: ManagedObject {
    @Attribute var name: String = ""
    @Relationship(inverse: "bottles") var crate: Crate?
}

/// Schedules `body` with the fire-and-forget `perform(_:)` (async code would get the
/// async overload).
private func fireAndForget(_ context: ManagedObjectContext, _ body: @escaping @Sendable (isolated ManagedObjectContext) -> Void) {
    context.perform(body)
}

/// NSManagedObjectContext reference behaviours (issue 5, §2, §8, §9, §11, §13):
/// processPendingChanges and delete propagation, inaccessible faults, the legacy lock,
/// and several stores. Through the public context API.
@Suite("Context reference: pending changes, faults, locks and stores")
struct ContextFaultDeleteStoreTests {
    /// Saves a folder with two notes; their IDs (folder first).
    static func folderWithNotes(on coordinator: PersistentStoreCoordinator) async throws -> [ManagedObjectID] {
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        return try await context.perform { context in
            let folder = Folder()
            folder.name = "Inbox"
            let notes = [Note(), Note()]
            for (index, note) in notes.enumerated() {
                note.title = "n\(index)"
                note.folder = folder
            }
            try context.insert(folder)
            try context.save()
            return [folder.objectID] + notes.map(\.objectID)
        }
    }

    // MARK: §2 processPendingChanges, §9 delete propagation

    @Test("fire-and-forget perform and performAndWait both end with processPendingChanges: a cascade has run when the block ends")
    func blocksEndWithProcessPendingChanges() async throws {
        let coordinator = try await ContextReference.inMemory()
        let ids = try await Self.folderWithNotes(on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        fireAndForget(context) { context in
            context.retainsRegisteredObjects = true
            if let folder = try? context.existingObject(with: ids[0]) { try? context.delete(folder) }
        }
        let deleted = await context.perform(schedule: .enqueued) { context in
            context.deletedObjects.map(\.objectID)
        }
        #expect(Set(deleted) == Set(ids))
        await context.perform { context in context.rollback() }

        let waited = await runsOnThread {
            context.performAndWait { context in
                if let folder = try? context.existingObject(with: ids[0]) { try? context.delete(folder) }
            }
        }
        #expect(waited)
        let again = await context.perform { context in Set(context.deletedObjects.map(\.objectID)) }
        #expect(again == Set(ids))
    }

    @Test("processPendingChanges called inside a block runs the delete rules at once")
    func processPendingChangesRunsDeleteRulesNow() async throws {
        let coordinator = try await ContextReference.inMemory()
        let ids = try await Self.folderWithNotes(on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let folder = try #require(try context.existingObject(with: ids[0]) as? Folder)
            let notes = Array(folder.notes)
            try context.delete(folder)
            #expect(notes.allSatisfy { !$0.isDeleted })       // not propagated yet
            try context.processPendingChanges()
            #expect(notes.allSatisfy { $0.isDeleted })
            let deleted = context.deletedObjects.count
            #expect(deleted == 3)
        }
    }

    @Test("propagatesDeletesAtEndOfEvent is true by default; when false, delete rules run only at save")
    func deletesPropagateOnlyAtSaveWhenAsked() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let ids = try await Self.folderWithNotes(on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let byDefault = context.propagatesDeletesAtEndOfEvent
            #expect(byDefault)
            context.propagatesDeletesAtEndOfEvent = false
            context.retainsRegisteredObjects = true
            let folder = try #require(try context.existingObject(with: ids[0]) as? Folder)
            #expect(folder.notes.count == 2)                    // registers the notes
            try context.delete(folder)
            try context.processPendingChanges()
        }
        try await context.perform { context in
            let note = try #require(context.registeredObject(for: ids[1]) as? Note)
            let deleted = context.deletedObjects.count
            #expect(!note.isDeleted && deleted == 1)            // the block ended: still not propagated
            try context.save()                                  // propagated now
        }
        let stored = try await ContextReference.storedCounts(on: coordinator)
        #expect(stored == (0, 0))
    }

    @Test("delete rules: nullify removes the deleted object from its destinations, cascade deletes them, deny fails the save naming the object, noAction leaves them untouched")
    func deleteRules() async throws {
        let model = try ManagedObjectModel(types: [Folder.self, Note.self, Crate.self])
        let coordinator = try await ContextReference.inMemory(model: model)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let folder = Folder()
            let tag = Tag()
            let notes = [Note(), Note()]
            for note in notes { note.folder = folder }
            notes[0].tags = [tag]
            let crate = Crate()
            let bottle = Bottle()
            bottle.crate = crate
            for object in [folder, tag, crate] as [ManagedObject] { try context.insert(object) }
            try context.save()

            // Nullify (Note.tags, Note.folder): the note leaves its tag's and folder's sets.
            try context.delete(notes[1])
            try context.processPendingChanges()
            #expect(folder.notes == [notes[0]] && !folder.isDeleted)
            // Deny (Tag.notes): the save fails with a validation error naming the tag; nothing written.
            try context.delete(tag)
            let denied = #expect(throws: StrataError.self) { try context.save() }
            if let denied, denied.code == .validation {
                #expect(denied.validationFailures.map(\.objectID) == [tag.objectID])
            } else {
                Issue.record("expected a validation error, got \(String(describing: denied))")
            }
            context.rollback()
            #expect(!tag.isDeleted && !notes[1].isDeleted)
            // Cascade (Folder.notes): the notes go with the folder.
            try context.delete(folder)
            try context.processPendingChanges()
            #expect(notes.allSatisfy { $0.isDeleted })
            #expect(tag.notes.isEmpty)                       // nullified on the tag's side
            // No action (Crate.bottles): the bottle still points at the deleted crate.
            try context.delete(crate)
            try context.processPendingChanges()
            #expect(bottle.crate === crate && !bottle.isDeleted && !bottle.hasChanges)
            try context.save()
            let counts = (try context.count(for: FetchRequest<Note>()), try context.count(for: FetchRequest<Bottle>()), try context.count(for: FetchRequest<Tag>()))
            #expect(counts == (0, 1, 1))
        }
    }

    // MARK: §8 Inaccessible faults

    /// A context holding a fault for a note whose row another context then deleted.
    static func contextWithVanishedNote(_ configure: @escaping @Sendable (isolated ManagedObjectContext) -> Void = { _ in }) async throws -> (ManagedObjectContext, ManagedObjectID, ManagedObjectID) {
        let coordinator = try await ContextReference.inMemory()
        let ids = try await ContextReference.saveNotes([("vanishing", 2), ("staying", 1)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        await context.perform { context in
            context.retainsRegisteredObjects = true
            configure(context)
            _ = context.object(with: ids[0])
        }
        let eraser = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await eraser.perform { context in
            try context.delete(try context.existingObject(with: ids[0]))
            try context.save()
        }
        return (context, ids[0], ids[1])
    }

    @Test("deleting fetched faults that were never touched saves (the version the fetch read is checked), in the same block or a later one; a row changed since the fetch is still a conflict")
    func deletingUntouchedFaults() async throws {
        // Books have no relationships, so no delete rule fires the fault for the save.
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let ids = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let books = ["a", "b", "c"].map { title in
                let book = Book()
                book.title = title
                return book
            }
            for book in books { try context.insert(book) }
            try context.save()
            return books.map(\.objectID)
        }
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        // Fetched as faults (returnsObjectsAsFaults is true by default) and deleted untouched.
        let faults = try await context.perform { context in
            var request = FetchRequest<Book>()
            request.predicate = \Book.title == "a"
            let books = try context.fetch(request)
            let faults = books.filter(\.isFault).count
            for book in books { try context.delete(book) }
            try context.save()
            return faults
        }
        #expect(faults == 1)
        // Faults fetched in one block and deleted in another, after another context changed one.
        try await context.perform { context in
            context.retainsRegisteredObjects = true
            _ = try context.fetch(FetchRequest<Book>())
        }
        let other = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await other.perform { context in
            var request = FetchRequest<Book>()
            request.predicate = \Book.title == "c"
            try context.fetch(request).first?.pages = 500
            try context.save()
        }
        let outcome = try await context.perform { context -> (wasFault: Bool, conflicts: Int) in
            let registeredB = context.registeredObject(for: ids[1])
            let b = try #require(registeredB)
            let wasFault = b.isFault
            try context.delete(b)
            try context.save()
            // The book changed elsewhere after this context fetched it: a conflict, nothing written.
            let registeredC = context.registeredObject(for: ids[2])
            try context.delete(try #require(registeredC))
            do {
                try context.save()
                return (wasFault, 0)
            } catch let error as StrataError where error.code == .mergeConflicts {
                context.rollback()
                return (wasFault, error.conflicts.count)
            }
        }
        #expect(outcome.wasFault && outcome.conflicts == 1)
        let titles = try await other.perform { context in try context.fetch(FetchRequest<Book>()).map(\.title).sorted() }
        #expect(titles == ["c"])
    }

    @Test("shouldDeleteInaccessibleFaults (true by default): a fault whose row is gone reads nil and zero and is deleted")
    func inaccessibleFaultsAreDeleted() async throws {
        let (context, id, _) = try await Self.contextWithVanishedNote()
        try await context.perform { context in
            let byDefault = context.shouldDeleteInaccessibleFaults
            #expect(byDefault)
            let note = try #require(context.registeredObject(for: id) as? Note)
            #expect(note.title == "" && note.priority == 0 && note.body == nil)
            #expect(note.isDeleted)
        }
    }

    @Test("an inaccessible fault that was deleted is in deletedObjects, is exempt from validation, and the next save discards it")
    func inaccessibleFaultsJoinDeletedObjectsUntilSave() async throws {
        let (context, id, stayingID) = try await Self.contextWithVanishedNote()
        try await context.perform { context in
            let note = try #require(context.registeredObject(for: id) as? Note)
            _ = note.title
            let deleted = context.deletedObjects
            #expect(deleted == [note])
            let staying = try #require(try context.existingObject(with: stayingID) as? Note)
            staying.title = "changed"
            try context.save()                                   // nil title etc. are not validated
            #expect(context.registeredObject(for: id) == nil)
            let after = context.deletedObjects
            #expect(after.isEmpty)
        }
    }

    @Test("with shouldDeleteInaccessibleFaults false, an inaccessible fault is not deleted: typed reads give defaults and value(forKey:) throws inaccessibleFault")
    func inaccessibleFaultsCanStay() async throws {
        let (context, id, _) = try await Self.contextWithVanishedNote { $0.shouldDeleteInaccessibleFaults = false }
        await context.perform { context in
            guard let note = context.registeredObject(for: id) as? Note else {
                Issue.record("the fault is not registered")
                return
            }
            #expect(note.title == "")
            #expect(throws: StrataError.inaccessibleFault(id)) { try note.value(forKey: "priority") }
            #expect(!note.isDeleted)
            let deleted = context.deletedObjects
            #expect(deleted.isEmpty)
        }
    }

    @Test("the inaccessible-fault handler is asked with the object, its ID and the property that fired it; returning false leaves the object inaccessible")
    func inaccessibleFaultHandler() async throws {
        let asked = TestBox<[String]>([])
        let (context, id, _) = try await Self.contextWithVanishedNote { context in
            context.setShouldHandleInaccessibleFault { object, objectID, property in
                asked.value.append("\(object.objectID == objectID) \(objectID.entityName) \(property ?? "-")")
                return false
            }
        }
        await context.perform { context in
            guard let note = context.registeredObject(for: id) as? Note else {
                Issue.record("the fault is not registered")
                return
            }
            #expect(note.title == "")
            #expect(!note.isDeleted)     // the handler said no, whatever shouldDeleteInaccessibleFaults says
            #expect(throws: StrataError.inaccessibleFault(id)) { try note.value(forKey: "title") }
        }
        #expect(asked.value == ["true Note title"])
    }

    // MARK: §11 Legacy locking

    @Test("tryLock takes the lock of a free context and returns false at once while another thread holds it")
    func tryLockNeverWaits() async throws {
        let coordinator = try await ContextReference.inMemory()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let holding = TestSignal()
        let release = TestSignal()
        let held = TestBox<Int?>(nil)
        let holder = TestRun {
            context.lock()
            held.value = context.performAndWait { context in     // runs at once on the locking thread
                try? context.insert(Note())
                return context.insertedObjects.count
            }
            holding.signal()
            release.wait()
            try? context.unlock()
        }
        #expect(await signalled(holding))
        let whileHeld = TestBox<Bool?>(nil)
        #expect(await runsOnThread { whileHeld.value = context.tryLock() })
        #expect(whileHeld.value == false)
        release.signal()
        #expect(await holder.joined())
        #expect(held.value == 1)
        let afterwards = TestBox<Bool?>(nil)
        #expect(await runsOnThread {
            let taken = context.tryLock()
            if taken { try? context.unlock() }
            afterwards.value = taken
        })
        #expect(afterwards.value == true)
        let inserted = await context.perform { context in context.insertedObjects.count }
        #expect(inserted == 1)
    }

    // MARK: §13 Several stores

    @Test("a new object goes to the first store that holds its entity unless assign(_:to:) names another; fetch and count merge every store")
    func assignChoosesTheStore() async throws {
        let directory = TemporaryDirectory()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        let first = try await coordinator.addPersistentStore(type: .lmdb, at: directory.url.appendingPathComponent("First.strata"), options: CoordinatorStoreTests.options)
        let second = try await coordinator.addPersistentStore(type: .lmdb, at: directory.url.appendingPathComponent("Second.strata"), options: CoordinatorStoreTests.options)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let ids = try await context.perform { context in
            let a = Note()
            a.title = "a"
            let b = Note()
            b.title = "b"
            try context.insert(a)
            try context.insert(b)
            try context.assign(b, to: second)
            try context.save()
            return [a.objectID, b.objectID]
        }
        #expect(coordinator.persistentStore(for: ids[0]) == first)
        #expect(coordinator.persistentStore(for: ids[1]) == second)
        let reader = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let (titles, count) = try await reader.perform { context in
            (try context.fetch(ContextReference.notes()).map(\.title), try context.count(for: FetchRequest<Note>()))
        }
        #expect(titles == ["a", "b"] && count == 2)
    }

    @Test("with configurations each new object goes to the store holding its entity, for save and obtainPermanentIDs alike")
    func configurationsRouteNewObjects() async throws {
        let model = try CoordinatorStoreTests.configuredModel()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        let notes = try await coordinator.addPersistentStore(type: .inMemory, configuration: "Notes", options: CoordinatorStoreTests.options)
        let media = try await coordinator.addPersistentStore(type: .inMemory, configuration: "Media", options: CoordinatorStoreTests.options)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let ids = try await context.perform { context in
            let note = Note()
            let book = Book()
            let playlist = Playlist()
            for object in [note, book, playlist] as [ManagedObject] { try context.insert(object) }
            try context.obtainPermanentIDs(for: [playlist])
            try context.save()
            return [note.objectID, book.objectID, playlist.objectID]
        }
        #expect(ids.map { coordinator.persistentStore(for: $0) } == [notes, media, media])
    }

    @Test("assign(_:to:) refuses a store that cannot hold the entity, an object already saved, and an object of another context")
    func assignRefusesWhatItCannotDo() async throws {
        let model = try CoordinatorStoreTests.configuredModel()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        _ = try await coordinator.addPersistentStore(type: .inMemory, configuration: "Notes", options: CoordinatorStoreTests.options)
        let media = try await coordinator.addPersistentStore(type: .inMemory, configuration: "Media", options: CoordinatorStoreTests.options)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let errors = await context.perform { context in
            var errors: [StrataError?] = []
            func record(_ body: () throws -> Void) {
                do { try body(); errors.append(nil) } catch { errors.append(error as? StrataError) }
            }
            let note = Note()
            record { try context.insert(note) }
            record { try context.assign(note, to: media) }              // Media holds no notes
            record { try context.save() }
            record { try context.assign(note, to: media) }              // saved already
            record { try context.assign(Note(), to: media) }            // in no context
            return errors.map { error -> String in
                guard let error else { return "ok" }
                return switch error.code {
                case .noStore: "noStore \(error.entityName ?? "")"
                case .invalidObjectState: "invalidObjectState"
                default: "\(error)"
                }
            }
        }
        #expect(errors == ["ok", "noStore Note", "ok", "invalidObjectState", "invalidObjectState"])
    }
}
