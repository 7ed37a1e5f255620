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
        let environment = try #require(coordinator.persistentStores.first).file.environment
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
}
