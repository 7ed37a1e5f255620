import Foundation
import Testing
@testable import Strata
import StrataTesting

/// Typed objects saved to the real LMDB store as snapshots and read back as faults:
/// the object layer and the store agree on slots, relationships and versions.
@Suite struct ObjectStoreRoundTripTests {
    /// An object store for one "context" that reads a ``StoreFile``.
    final class StoreOwner: ObjectOwner {
        let file: StoreFile
        var registered: [ManagedObjectID: ManagedObject] = [:]
        init(file: StoreFile) { self.file = file }
        deinit {
            // Objects hold their owner unowned: an owner lets go of its objects before it goes.
            for object in registered.values where object.owner === self { object.owner = nil }
        }

        override func snapshotForFault(of object: ManagedObject) throws(StrataError) -> ObjectSnapshot {
            let found: ObjectSnapshot?
            do { found = try file.read { reader in try reader.snapshot(of: object.objectID) } } catch { throw error as? StrataError ?? .inaccessibleFault(object.objectID) }
            guard let found else { throw .inaccessibleFault(object.objectID) }
            return found
        }

        override func object(for id: ManagedObjectID) -> ManagedObject {
            if let known = registered[id] { return known }
            let entity = file.model.entitiesByName[id.entityName]!
            let object = entity.managedObjectClass.init(entity: entity)
            object.becomeFault(for: id, owner: self)
            registered[id] = object
            return object
        }

        override func destinations(of object: ManagedObject, relationship: RelationshipDescription) throws(StrataError) -> [ManagedObjectID] {
            do { return try file.read { reader in try reader.destinations(of: object.objectID, relationship: relationship.name) } } catch { throw error as? StrataError ?? .inaccessibleFault(object.objectID) }
        }

        override func objectWillChange(_ object: ManagedObject, key: String) {}
        override func editFailed(_ object: ManagedObject, key: String, error: StrataError) {}
        override func handleInaccessibleFault(_ object: ManagedObject, property: String?, error: StrataError) -> Bool { true }

        /// Saves `objects` (new or changed) in one write transaction, as a context will.
        func save(_ objects: [ManagedObject]) throws {
            try file.write { writer in
                for object in objects where object.objectID.isTemporaryID {
                    object.objectID = try writer.makePermanentID(for: object.entity.name)
                }
                var versions: [ObjectIdentifier: UInt64] = [:]
                for object in objects {
                    let snapshot = object.makeSnapshot()
                    versions[ObjectIdentifier(object)] = object.rowVersion == 0
                        ? try writer.insert(snapshot) : try writer.update(snapshot)
                }
                for object in objects {
                    object.didCommit(permanentID: nil, version: versions[ObjectIdentifier(object)]!)
                    object.owner = self
                    registered[object.objectID] = object
                }
            }
        }
    }

    @Test func typedObjectsRoundTripThroughLMDB() throws {
        let directory = TemporaryDirectory()
        let file = try StoreFile(directory: directory.url, model: NotesModel.model)
        let writer = StoreOwner(file: file)

        let inbox = Folder()
        inbox.name = "Inbox"
        let swift = Tag()
        swift.label = "swift"
        let note = Note()
        note.title = "Ünïcødé ✓"
        note.priority = 4
        note.created = Date(timeIntervalSinceReferenceDate: 1234.5)
        note.colour = Colour(red: 0.1, green: 0.2, blue: 0.3)
        note.isSelected = true  // transient: never stored
        note.folder = inbox
        note.tags = [swift]
        let list = Playlist()
        let tracks = (0..<3).map { index in
            let track = Track()
            track.title = "t\(index)"
            return track
        }
        list.tracks = [tracks[2], tracks[0], tracks[1]]
        try writer.save([inbox, swift, note, list] + tracks)
        #expect(!note.objectID.isTemporaryID && note.rowVersion == 1)

        // A second "context" reads everything back as faults from the store.
        let reader = StoreOwner(file: file)
        let copy = try #require(reader.object(for: note.objectID) as? Note)
        #expect(copy.isFault)
        #expect(copy.title == "Ünïcødé ✓")
        #expect(copy.priority == 4)
        #expect(copy.created == Date(timeIntervalSinceReferenceDate: 1234.5))
        #expect(copy.colour == Colour(red: 0.1, green: 0.2, blue: 0.3))
        #expect(copy.isSelected == false)
        #expect(copy.body == nil)
        #expect(copy.folder?.objectID == inbox.objectID)
        #expect(copy.folder?.name == "Inbox")
        #expect(copy.folder?.notes.map { $0.objectID } == [note.objectID])
        #expect(copy.tags.map { $0.objectID } == [swift.objectID])
        #expect(copy.changedValues().isEmpty && !copy.hasPersistentChangedValues)
        let listCopy = try #require(reader.object(for: list.objectID) as? Playlist)
        #expect(listCopy.tracks.map { $0.title } == ["t2", "t0", "t1"])

        // An edit in the reader is saved as an update (version 2) and moves the inverse.
        let archive = Folder()
        archive.name = "Archive"
        copy.folder = archive
        copy.title = "moved"
        try reader.save([archive, copy, try #require(reader.registered[inbox.objectID])])
        #expect(copy.rowVersion == 2)
        let third = StoreOwner(file: file)
        let inboxAgain = try #require(third.object(for: inbox.objectID) as? Folder)
        #expect(inboxAgain.notes.isEmpty)
        let archiveAgain = try #require(third.object(for: archive.objectID) as? Folder)
        #expect(archiveAgain.notes.map { $0.title } == ["moved"])
    }

    @Test func aStaleVersionIsAConflict() throws {
        let directory = TemporaryDirectory()
        let file = try StoreFile(directory: directory.url, model: NotesModel.model)
        let first = StoreOwner(file: file)
        let note = Note()
        note.title = "v1"
        try first.save([note])
        let ownerA = StoreOwner(file: file)
        let ownerB = StoreOwner(file: file)
        let a = try #require(ownerA.object(for: note.objectID) as? Note)
        let b = try #require(ownerB.object(for: note.objectID) as? Note)
        a.title = "from a"
        b.title = "from b"
        try ownerA.save([a])
        #expect(throws: StoreWriteError.self) { try ownerB.save([b]) }
        let third = StoreOwner(file: file)
        let fresh = try #require(third.object(for: note.objectID) as? Note)
        #expect(fresh.title == "from a")
    }

    @Test func aDifferentModelCannotOpenTheStore() throws {
        let directory = TemporaryDirectory()
        do {
            let file = try StoreFile(directory: directory.url, model: NotesModel.model)
            try StoreOwner(file: file).save([Note()])
        }
        let other = try ManagedObjectModel(types: [Playlist.self])
        let url = directory.url
        let error = #expect(throws: StrataError.self) { _ = try StoreFile(directory: url, model: other) }
        guard let error, error.code == .modelMismatch, let storeHash = error.storeHash, let modelHash = error.modelHash else {
            Issue.record("expected a model mismatch, got \(String(describing: error))")
            return
        }
        #expect(storeHash == NotesModel.model.versionHash && modelHash == other.versionHash)
        #expect(error.description.contains(storeHash) && error.description.contains(modelHash))
    }
}
