import Foundation
@testable import Strata
import StrataLMDB
import StrataTesting
import Testing

/// A storage failure while a fault fires (here a full reader table; after a panic, a
/// terminal store) is the error that surfaces: it is never taken for a row that is gone,
/// never turned into a validation failure, and never lets a delete rule skip the objects
/// it must delete. Found by the I/O fault runs, where a save after a panic failed with
/// "validation failed: … no longer exists in its store".
@Suite("Context storage failures while faults fire")
struct ContextStorageFailureTests {
    /// A coordinator on an in-memory store of 4 reader slots holding a folder of three
    /// notes; the folder's ID.
    static func folderOfThreeNotes() async throws -> (PersistentStoreCoordinator, ManagedObjectID) {
        var options = CoordinatorStoreTests.options
        options.maxReaders = 4
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        try await coordinator.addPersistentStore(type: .inMemory, options: options)
        let id = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let folder = Folder()
            folder.name = "inbox"
            try context.insert(folder)
            for n in 0..<3 {
                let note = Note()
                note.title = "n\(n)"
                try context.insert(note)
                note.folder = folder
            }
            try context.save()
            return folder.objectID
        }
        return (coordinator, id)
    }

    /// Snapshots holding every free reader slot of the coordinator's store: until they
    /// go, every read transaction fails with readersFull.
    static func fillReaderTable(_ coordinator: PersistentStoreCoordinator) throws -> [ReadSnapshot] {
        let environment = try #require(coordinator.persistentStores.first).file!.environment
        var snapshots: [ReadSnapshot] = []
        while true {
            do {
                snapshots.append(try environment.makeSnapshot())
            } catch LMDBError.readersFull {
                return snapshots
            }
        }
    }

    /// A context that reads the store for every fault (no row cache).
    static func reader(_ coordinator: PersistentStoreCoordinator) async -> ManagedObjectContext {
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        await context.perform { $0.stalenessInterval = 0 }
        return context
    }

    @Test("a cascade delete whose destinations cannot be read fails the save with the storage error, and deletes them once they can: no orphans")
    func cascadeDoesNotSkipUnreadableDestinations() async throws {
        let (coordinator, id) = try await Self.folderOfThreeNotes()
        let context = await Self.reader(coordinator)
        let failure = try await context.perform { context -> StrataError? in
            let folder = try #require(try context.existingObject(with: id) as? Folder)
            try context.delete(folder)
            var snapshots = try Self.fillReaderTable(coordinator)
            defer { snapshots.removeAll() }
            return strataError { try context.save() }
        }
        #expect(failure == .storage(.readersFull), "the notes could not be read, so they cannot have been deleted")
        try await context.perform { try $0.save() }
        let remaining = try await Self.reader(coordinator).perform { try $0.count(for: FetchRequest<Note>()) }
        #expect(remaining == 0, "the folder's notes go with it (cascade), none left behind without a folder")
    }

    @Test("validation that cannot read a relationship fails the save with the storage error, not a validation failure")
    func validationReportsTheStorageError() async throws {
        let (coordinator, id) = try await Self.folderOfThreeNotes()
        let context = await Self.reader(coordinator)
        let failure = try await context.perform { context -> StrataError? in
            let folder = try #require(try context.existingObject(with: id) as? Folder)
            folder.name = "archive"
            var snapshots = try Self.fillReaderTable(coordinator)
            defer { snapshots.removeAll() }
            return strataError { try context.save() }
        }
        #expect(failure == .storage(.readersFull))
        try await context.perform { try $0.save() }
    }

    @Test("a fault that cannot be read throws the storage error, stays a fault, and reads its values once the store can be read")
    func faultStaysAFaultAfterAStorageFailure() async throws {
        let (coordinator, id) = try await Self.folderOfThreeNotes()
        let context = await Self.reader(coordinator)
        try await context.perform { context in
            let folder = context.object(with: id)
            var snapshots = try Self.fillReaderTable(coordinator)
            #expect(strataError { _ = try folder.value(forKey: "name") } == .storage(.readersFull))
            #expect(folder.isFault, "a storage failure says nothing about the row: the object is not inaccessible")
            #expect(!folder.isDeleted)
            snapshots.removeAll()
            #expect(try folder.value(forKey: "name") as? String == "inbox")
        }
    }

    @Test("a child's save whose objects cannot be read in the parent fails with the storage error, not a merge conflict, and goes through once they can")
    func childSaveReportsTheStorageError() async throws {
        let (coordinator, id) = try await Self.folderOfThreeNotes()
        let root = await Self.reader(coordinator)
        let child = ManagedObjectContext(.privateQueue, parent: root)
        let failure = try await child.perform { context -> StrataError? in
            let folder = try #require(try context.existingObject(with: id) as? Folder)
            #expect(folder.notes.count == 3)  // read now: the child's validation needs no store
            folder.name = "archive"
            var snapshots = try Self.fillReaderTable(coordinator)
            defer { snapshots.removeAll() }
            return strataError { try context.save() }
        }
        #expect(failure == .storage(.readersFull), "the parent could not read the folder: that is no conflict")
        try await child.perform { try $0.save() }
        try await root.perform { try $0.save() }
        let name = try await Self.reader(coordinator).perform { context in
            try #require(try context.existingObject(with: id) as? Folder).name
        }
        #expect(name == "archive")
    }

    @Test("deleting a fault that cannot be read throws the storage error at once, and works once it can be read")
    func deletingAnUnreadableFault() async throws {
        let (coordinator, id) = try await Self.folderOfThreeNotes()
        try await Self.reader(coordinator).perform { context in
            let folder = context.object(with: id)
            var snapshots = try Self.fillReaderTable(coordinator)
            #expect(strataError { try context.delete(folder) } == .storage(.readersFull))
            #expect(!folder.isDeleted)
            snapshots.removeAll()
            try context.delete(folder)
            try context.save()
            #expect(try context.count(for: FetchRequest<Note>()) == 0)
        }
    }

    /// Folder `id`'s notes and a new folder, read (the folder and its notes realised, its
    /// notes loaded); a note's fault stays a fault.
    static func noteFaultInFolder(_ context: isolated ManagedObjectContext, _ id: ManagedObjectID) throws -> (Folder, Note) {
        let folder = try #require(try context.existingObject(with: id) as? Folder)
        let note = try #require(folder.notes.first)
        try context.refresh(note, mergeChanges: false)   // a fault again: its values are read when it changes
        #expect(note.isFault)
        return (folder, note)
    }

    @Test("a relationship setter whose inverse side cannot be read changes neither side, and the next save fails with the storage error instead of saving one side (issue 19)")
    func relationshipSetterDoesNotChangeOneSide() async throws {
        let (coordinator, id) = try await Self.folderOfThreeNotes()
        let context = await Self.reader(coordinator)
        try await context.perform { context in
            let (folder, note) = try Self.noteFaultInFolder(context, id)
            let other = Folder()
            other.name = "other"
            try context.insert(other)
            var snapshots = try Self.fillReaderTable(coordinator)
            note.folder = other          // the note's fault cannot be read: nothing changes
            #expect(other.notes.isEmpty && folder.notes.contains(note) && !note.isUpdated)
            other.$notes.insert(note)    // the editor, from the other side: the same
            #expect(other.notes.isEmpty && folder.notes.contains(note))
            #expect(strataError { try other.add(note, toRelationship: "notes") } == .storage(.readersFull))
            #expect(strataError { try note.setValue(other, forKey: "folder") } == .storage(.readersFull))
            #expect(other.notes.isEmpty && folder.notes.contains(note))
            #expect(strataError { try context.save() } == .storage(.readersFull), "the save would have lost the move")
            snapshots.removeAll()
            #expect(strataError { try context.save() } == .storage(.readersFull), "still: the move did not happen")
            note.folder = other          // set again once the store reads: both sides move
            #expect(other.notes.contains(note) && !folder.notes.contains(note))
            try context.save()
        }
        let stored = try await Self.reader(coordinator).perform { context in
            try context.fetch(FetchRequest<Folder>()).map { "\($0.name) \($0.notes.count)" }.sorted()
        }
        #expect(stored == ["inbox 2", "other 1"])
    }

    @Test("an attribute setter on a fault that cannot be read changes nothing (it would have saved nil over every other attribute) and fails the next save; a rollback discards the failure")
    func attributeSetterOnAnUnreadableFault() async throws {
        let (coordinator, id) = try await Self.folderOfThreeNotes()
        let context = await Self.reader(coordinator)
        let noteID = try await context.perform { context in
            let (_, note) = try Self.noteFaultInFolder(context, id)
            var snapshots = try Self.fillReaderTable(coordinator)
            note.priority = 4
            #expect(note.isFault && !note.isUpdated)
            #expect(strataError { try note.setValue("t", forKey: "title") } == .storage(.readersFull))
            #expect(strataError { try context.save() } == .storage(.readersFull))
            snapshots.removeAll()
            context.rollback()
            try context.save()   // nothing failed any more, nothing to save
            #expect(note.priority == 0 && !note.title.isEmpty)
            return note.objectID
        }
        let title = try await Self.reader(coordinator).perform { context in
            try #require(try context.existingObject(with: noteID) as? Note).title
        }
        #expect(title.hasPrefix("n"), "the other attributes are as saved")
    }

    @Test("deleting a note whose folder cannot be read (nullify) leaves the delete pending and fails the save; once readable, the save takes the note out of the folder and bumps the folder's row version, which concurrent savers of the folder check")
    func nullifyWithAnUnreadableInverse() async throws {
        let (coordinator, id) = try await Self.folderOfThreeNotes()
        let context = await Self.reader(coordinator)
        try await context.perform { context in
            let folder = try #require(try context.existingObject(with: id) as? Folder)
            let note = try #require(folder.notes.first)
            _ = note.title
            try context.refresh(folder, mergeChanges: false)
            #expect(folder.isFault && !note.isFault)
            var snapshots = try Self.fillReaderTable(coordinator)
            try context.delete(note)
            #expect(strataError { try context.save() } == .storage(.readersFull), "the folder's side could not change")
            snapshots.removeAll()
            try context.save()
            #expect(folder.notes.count == 2 && folder.rowVersion == 2)
        }
        let integrity = try await coordinator.checkIntegrity()
        #expect(integrity.isConsistent, "\(integrity)")
    }
}
