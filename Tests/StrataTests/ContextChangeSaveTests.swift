import Foundation
@testable import Strata
import StrataTesting
import Testing

/// NSManagedObjectContext reference behaviours (issue 5, §4–§7): inserting and deleting,
/// the change sets, save, rollback, reset, refresh and permanent IDs. Through the public
/// context API, on real LMDB stores where a store is read back.
@Suite("Context reference: changes, saving and discarding")
struct ContextChangeSaveTests {
    // MARK: §4 insert, delete, change sets

    @Test("insert registers the object under a temporary ID; the save gives it a permanent ID under which it stays registered")
    func insertTemporaryThenPermanentID() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let (temporary, permanent) = try await context.perform { context in
            let note = Note()
            try context.insert(note)
            let temporary = note.objectID
            #expect(temporary.isTemporaryID && note.isInserted)
            #expect(context.registeredObject(for: temporary) === note)
            try context.save()
            #expect(!note.objectID.isTemporaryID && !note.isInserted)
            #expect(context.registeredObject(for: note.objectID) === note)
            #expect(context.registeredObject(for: temporary) == nil)
            return (temporary, note.objectID)
        }
        #expect(temporary != permanent && coordinator.persistentStore(for: permanent) != nil)
    }

    @Test("rollback before a save unregisters inserted objects")
    func rollbackUnregistersInserts() async throws {
        let coordinator = try await ContextReference.inMemory()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let note = Note()
            try context.insert(note)
            let id = note.objectID
            context.rollback()
            #expect(context.registeredObject(for: id) == nil && !note.isInserted)
            let (inserted, changes, count) = (context.insertedObjects.count, context.hasChanges, try context.count(for: FetchRequest<Note>()))
            #expect(inserted == 0 && !changes && count == 0)
        }
    }

    @Test("deleting an object inserted since the last save simply removes it: it is not in deletedObjects and nothing is left to save")
    func deleteOfUnsavedInsertRemovesIt() async throws {
        let coordinator = try await ContextReference.inMemory()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let note = Note()
            try context.insert(note)
            try context.delete(note)
            let deleted = context.deletedObjects
            let inserted = context.insertedObjects
            #expect(deleted.isEmpty && inserted.isEmpty)
        }
        // The block ended (processPendingChanges): the object has left the context.
        let (changes, registered) = await context.perform { context in (context.hasChanges, context.registeredObjects.count) }
        #expect(!changes && registered == 0)
    }

    @Test("a saved deletion removes the object from the uniquing table and from the store")
    func savedDeletionLeavesTheUniquingTable() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let ids = try await ContextReference.saveNotes([("a", 1)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let note = try context.existingObject(with: ids[0])
            try context.delete(note)
            #expect(context.registeredObject(for: ids[0]) === note)   // until the save
            try context.save()
            #expect(context.registeredObject(for: ids[0]) == nil)
            let deleted = context.deletedObjects
            #expect(deleted.isEmpty)
        }
        let reader = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let count = try await reader.perform { context in try context.count(for: FetchRequest<Note>()) }
        #expect(count == 0)
    }

    @Test("insertedObjects, updatedObjects and deletedObjects hold the unsaved work of each kind, and hasChanges follows them")
    func changeSetsAndHasChanges() async throws {
        let coordinator = try await ContextReference.inMemory()
        _ = try await ContextReference.saveNotes([("a", 1), ("b", 2), ("c", 3)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let notes = try context.fetch(ContextReference.notes())
            let clean = context.hasChanges
            #expect(!clean)
            let new = Note()
            try context.insert(new)
            notes[0].title = "a2"
            try context.delete(notes[1])
            let (inserted, updated, deleted, changes) = (context.insertedObjects, context.updatedObjects, context.deletedObjects, context.hasChanges)
            #expect(inserted == [new] && updated == [notes[0]] && deleted == [notes[1]] && changes)
            #expect(!updated.contains(notes[2]))
            try context.save()
            let after = (context.insertedObjects.isEmpty, context.updatedObjects.isEmpty, context.deletedObjects.isEmpty, context.hasChanges)
            #expect(after == (true, true, true, false))
        }
    }

    // MARK: §5 save

    @Test("save reports every validation failure together, writes nothing and keeps the context's changes")
    func saveReportsEveryFailureAndWritesNothing() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let failures = await context.perform { context in
            let high = Note()
            high.priority = 9           // above the maximum (5)
            let low = Note()
            low.priority = -1           // below the minimum (0)
            let folder = Folder()
            folder.name = ""            // shorter than the minimum length (1)
            let fine = Note()
            fine.title = "fine"
            var failures: [ValidationFailure] = []
            do {
                for object in [high, low, folder, fine] as [ManagedObject] { try context.insert(object) }
                try context.save()
            } catch let error as StrataError where error.code == .validation {
                failures = error.validationFailures
            } catch {
                Issue.record("unexpected \(error)")
            }
            let kept = (context.insertedObjects.count, context.hasChanges, fine.objectID.isTemporaryID)
            #expect(kept == (4, true, true))
            return failures.map(\.objectID)
        }
        #expect(failures.count == 3)
        let stored = try await ContextReference.storedCounts(on: coordinator)
        #expect(stored == (0, 0))
    }

    @Test("save fails with every merge conflict when rows changed underneath; nothing is written, inserts included, and the changes stay")
    func saveReportsEveryConflictAndWritesNothing() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let ids = try await ContextReference.saveNotes([("a", 1), ("b", 2)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            context.retainsRegisteredObjects = true
            for note in try context.fetch(ContextReference.notes()) { note.priority = 3 }
        }
        for id in ids { try await ContextReference.update(id, on: coordinator) { $0.body = "theirs" } }
        let conflicted = await context.perform { context in
            let new = Note()
            new.title = "new"
            try? context.insert(new)
            var found: [ManagedObjectID] = []
            do {
                try context.save()
            } catch let error as StrataError where error.code == .mergeConflicts {
                found = error.conflicts.map(\.objectID)
            } catch {
                Issue.record("unexpected \(error)")
            }
            let kept = (context.updatedObjects.count, context.insertedObjects.count)
            #expect(kept == (2, 1))
            return found
        }
        #expect(Set(conflicted) == Set(ids))
        let reader = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let stored = try await reader.perform { context in
            try context.fetch(ContextReference.notes()).map { "\($0.title) \($0.priority) \($0.body ?? "-")" }
        }
        #expect(stored == ["a 1 theirs", "b 2 theirs"])
    }

    @Test("a save with no changes does nothing and succeeds")
    func saveWithoutChangesIsANoOp() async throws {
        let coordinator = try await ContextReference.inMemory()
        _ = try await ContextReference.saveNotes([("a", 1)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let notes = try context.fetch(FetchRequest<Note>())
            let changes = context.hasChanges
            #expect(!changes)
            try context.save()
            #expect(notes[0].priority == 1 && !notes[0].hasChanges)
            #expect(try context.count(for: FetchRequest<Note>()) == 1)
        }
    }

    // MARK: §6 rollback, reset, refresh

    @Test("rollback discards insertions and deletions and restores updated objects to their last committed values, without refetching")
    func rollbackRestoresCommittedValues() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let ids = try await ContextReference.saveNotes([("a", 1), ("b", 2)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            context.retainsRegisteredObjects = true
            let notes = try context.fetch(ContextReference.notes())
            notes[0].title = "a2"
            try context.delete(notes[1])
            try context.insert(Note())
        }
        // The stored row changes underneath: rollback does not pick that up.
        try await ContextReference.update(ids[0], on: coordinator) { $0.priority = 4 }
        try await context.perform { context in
            context.rollback()
            let a = try #require(context.registeredObject(for: ids[0]) as? Note)
            let b = try #require(context.registeredObject(for: ids[1]) as? Note)
            #expect(a.title == "a" && a.priority == 1 && !a.hasChanges)
            #expect(!b.isDeleted)
            let sets = (context.insertedObjects.count, context.deletedObjects.count, context.updatedObjects.count, context.hasChanges)
            #expect(sets == (0, 0, 0, false))
            let all = try context.fetch(ContextReference.notes()).map(\.title)
            #expect(all == ["a", "b"])
        }
    }

    @Test("reset forgets every object: none stays registered, no changes remain, and the old objects can no longer be used")
    func resetForgetsEverything() async throws {
        let coordinator = try await ContextReference.inMemory()
        let ids = try await ContextReference.saveNotes([("a", 1)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let a = try #require(try context.existingObject(with: ids[0]) as? Note)
            a.title = "changed"
            let new = Note()
            try context.insert(new)
            context.reset()
            let (registered, changes) = (context.registeredObjects.count, context.hasChanges)
            #expect(registered == 0 && !changes)
            #expect(context.registeredObject(for: ids[0]) == nil)
            #expect(throws: StrataError.inaccessibleFault(ids[0])) { try a.value(forKey: "title") }
            #expect(throws: StrataError.inaccessibleFault(new.objectID)) { try new.value(forKey: "title") }
            // The context itself is as good as new: the store still has the saved row.
            let fresh = try #require(try context.existingObject(with: ids[0]) as? Note)
            #expect(fresh !== a && fresh.title == "a")
        }
    }

    @Test("refresh(mergeChanges: false) turns the object into a fault, discards its changes and transient values, and lets go of related objects; the next access reads the store")
    func refreshWithoutMerging() async throws {
        let coordinator = try await ContextReference.inMemory()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let (noteID, folderID) = try await context.perform { context in
            let folder = Folder()
            folder.name = "Inbox"
            let note = Note()
            note.title = "a"
            note.folder = folder
            try context.insert(note)
            try context.save()
            return (note.objectID, folder.objectID)
        }
        try await ContextReference.update(noteID, on: coordinator) { $0.priority = 3 }
        try await context.perform { context in
            let note = try #require(try context.existingObject(with: noteID) as? Note)
            #expect(note.folder?.objectID == folderID)      // the folder is held by the note only
            note.title = "unsaved"
            note.isSelected = true
            try context.refresh(note, mergeChanges: false)
            #expect(note.isFault && !note.hasChanges)
            #expect(context.registeredObject(for: folderID) == nil)   // the note let go of it
            let updated = context.updatedObjects
            #expect(updated.isEmpty)
            #expect(note.title == "a" && note.priority == 3 && !note.isSelected)   // read from the store
        }
    }

    @Test("refresh(mergeChanges: true) takes the stored values and applies the local changes on top; transient values stay; it never conflicts")
    func refreshMergingChanges() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let ids = try await ContextReference.saveNotes([("a", 1)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            context.retainsRegisteredObjects = true
            let note = try #require(try context.existingObject(with: ids[0]) as? Note)
            note.title = "mine"
            note.isSelected = true
        }
        try await ContextReference.update(ids[0], on: coordinator) { note in
            note.title = "theirs"
            note.priority = 4
        }
        try await context.perform { context in
            let note = try #require(context.registeredObject(for: ids[0]) as? Note)
            try context.refresh(note, mergeChanges: true)
            #expect(note.title == "mine" && note.priority == 4 && note.isSelected && note.hasChanges)
            try context.save()   // based on the refreshed row version: no conflict
        }
        let reader = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let stored = try await reader.perform { context in
            try context.fetch(FetchRequest<Note>()).map { "\($0.title) \($0.priority)" }
        }
        #expect(stored == ["mine 4"])
    }

    // MARK: §7 obtainPermanentIDs

    @Test("obtainPermanentIDs gives inserted objects permanent IDs now; they stay inserted until saved; objects with permanent IDs are ignored; the save keeps the IDs")
    func obtainPermanentIDsBeforeSaving() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let ids = try await ContextReference.saveNotes([("saved", 1)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let obtained = try await context.perform { context in
            let saved = try context.existingObject(with: ids[0])
            let a = Note()
            a.title = "a"
            let b = Note()
            b.title = "b"
            try context.insert(a)
            try context.insert(b)
            try context.obtainPermanentIDs(for: [a, b, saved])
            #expect(!a.objectID.isTemporaryID && !b.objectID.isTemporaryID && a.objectID != b.objectID)
            #expect(saved.objectID == ids[0])
            #expect(a.isInserted && b.isInserted)
            let inserted = context.insertedObjects
            #expect(inserted == [a, b])
            #expect(context.registeredObject(for: a.objectID) === a)
            let before = [a.objectID, b.objectID]
            try context.obtainPermanentIDs(for: [a])   // already permanent: ignored
            #expect(a.objectID == before[0])
            try context.save()
            #expect([a.objectID, b.objectID] == before && !a.isInserted)
            return before
        }
        let reader = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let titles = try await reader.perform { context in
            try obtained.map { try (context.existingObject(with: $0) as? Note)?.title }
        }
        #expect(titles == ["a", "b"])
    }
}
