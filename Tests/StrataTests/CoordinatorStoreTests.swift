import Foundation
@testable import Strata
@testable import StrataLMDB
import StrataTesting
import Testing

@Suite("Coordinator: stores")
struct CoordinatorStoreTests {
    static var options: PersistentStore.Options {
        var options = PersistentStore.Options()
        options.durability = .noSync
        return options
    }

    static func configuredModel() throws -> ManagedObjectModel {
        try ManagedObjectModel(
            types: [Folder.self, Note.self, Playlist.self, Person.self, Book.self, Film.self],
            configurations: ["Notes": ["Folder", "Note", "Tag"], "Media": ["Playlist", "Track", "Item"]])
    }

    /// A saved snapshot of a new object of `entity` with attribute values by name.
    static func newObject(_ entity: String, _ values: [String: AttributeValue?], in model: ManagedObjectModel) -> ObjectSnapshot {
        let description = model.entitiesByName[entity]!
        var snapshot = ObjectSnapshot(objectID: ManagedObjectID(temporaryFor: entity), entity: description)
        for (name, value) in values { snapshot.attributes[description.attributeSlots[name]!] = value }
        return snapshot
    }

    @Test("an LMDB store is a directory; adding it twice is refused; a second coordinator reopens it")
    func lmdbStores() async throws {
        let directory = TemporaryDirectory()
        let url = directory.url.appendingPathComponent("Notes.strata")
        let (id, identifier) = try await Self.saveAndRemove(at: url)
        // Once the removed store is released, another coordinator can open it.
        let other = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        let reopened = try await other.addPersistentStore(at: url, options: Self.options)
        #expect(reopened.identifier == identifier)
        let folder = try #require(try other.snapshot(of: id))
        #expect(folder.attributes[NotesModel.model.entitiesByName["Folder"]!.attributeSlots["name"]!] == .string("Inbox"))
    }

    static func saveAndRemove(at url: URL) async throws -> (ManagedObjectID, UUID) {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        let store = try await coordinator.addPersistentStore(type: .lmdb, at: url, options: Self.options)
        #expect(coordinator.persistentStores == [store])
        #expect(store.url == url && store.type == .lmdb && store.configurationName == nil)
        #expect(FileManager.default.fileExists(atPath: url.appendingPathComponent("data.mdb").path))
        let again = await #expect(throws: StrataError.self) { try await coordinator.addPersistentStore(type: .lmdb, at: url) }
        #expect(again.map { $0.code == .incompatibleStore } == true)
        let missing = await #expect(throws: StrataError.self) { try await coordinator.addPersistentStore(type: .lmdb) }
        #expect(missing.map { $0.code == .incompatibleStore } == true)

        let outcome = try coordinator.save([StoreSave(store: store, inserted: [Self.newObject("Folder", ["name": .string("Inbox")], in: NotesModel.model)])])
        let id = try #require(outcome.permanentIDs.values.first)
        #expect(id.storeIdentifier == store.identifier && outcome.versions[id] == 1)
        let identifier = store.identifier
        try await coordinator.remove(store)
        #expect(coordinator.persistentStores.isEmpty)
        #expect(throws: StrataError.noStore(entity: "Folder")) { try coordinator.snapshot(of: id) }
        await #expect(throws: StrataError.self) { try await coordinator.remove(store) }
        return (id, identifier)
    }

    @Test("re-adding a store in a terminal state says what to do: remove it, let go of every reference (a pinned context's included), then add it again, with every acknowledged save there (issue 19)")
    func readdingATerminalStore() async throws {
        let directory = TemporaryDirectory()
        let url = directory.url.appendingPathComponent("Notes.strata")
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        var store: PersistentStore? = try await coordinator.addPersistentStore(type: .lmdb, at: url, options: Self.options)
        let ids = try await ContextReference.saveNotes([("kept", 1)], on: coordinator)
        let pinned = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "pinned")
        try await pinned.perform { context in
            try context.setQueryGenerationFrom(.current)
            #expect(try context.count(for: FetchRequest<Note>()) == 1)   // holds a snapshot of the store
        }
        // What the store does when LMDB reports MDB_PANIC (a failed meta-page write).
        store?.file?.environment.noteIfTerminal(LMDBError.panic)
        #expect(store?.terminalError == .storage(.panic))

        func reason(_ error: StrataError?) -> String {
            switch error?.code {
            case .incompatibleStore?: error?.reason ?? ""
            case .storage?: error?.storageError?.message ?? ""
            default: "\(String(describing: error))"
            }
        }
        let sameCoordinator = await #expect(throws: StrataError.self) {
            try await coordinator.addPersistentStore(type: .lmdb, at: url, options: Self.options)
        }
        #expect(reason(sameCoordinator).contains("terminal state") && reason(sameCoordinator).contains("remove(_:)"), "\(reason(sameCoordinator))")

        try await coordinator.remove(try #require(store))
        store = nil   // the pinned context still holds a snapshot: the environment stays open
        let stillOpen = await #expect(throws: StrataError.self) {
            try await coordinator.addPersistentStore(type: .lmdb, at: url, options: Self.options)
        }
        #expect(stillOpen == .storage(.alreadyOpen))
        #expect(reason(stillOpen).contains("terminal state") && reason(stillOpen).contains("query generations"), "\(reason(stillOpen))")
        let elsewhere = await #expect(throws: StrataError.self) {
            try await PersistentStoreCoordinator(managedObjectModel: NotesModel.model).addPersistentStore(type: .lmdb, at: url, options: Self.options)
        }
        #expect(reason(elsewhere).contains("terminal state"))

        try await pinned.perform { try $0.setQueryGenerationFrom(nil) }   // the last reference goes
        try await coordinator.addPersistentStore(type: .lmdb, at: url, options: Self.options)
        let title = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try #require(try context.existingObject(with: ids[0]) as? Note).title
        }
        #expect(title == "kept")
    }

    @Test("an in-memory store behaves like an LMDB store and leaves nothing behind")
    func inMemoryStores() async throws {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        let store = try await coordinator.addPersistentStore(type: .inMemory, options: Self.options)
        #expect(store.url == nil)
        let path = store.file!.path
        #expect(FileManager.default.fileExists(atPath: path))
        let outcome = try coordinator.save([StoreSave(store: store, inserted: [Self.newObject("Note", ["title": .string("a")], in: NotesModel.model)])])
        let id = try #require(outcome.permanentIDs.values.first)
        var request = FetchRequest<Note>()
        request.predicate = \Note.title == "a"
        #expect(try coordinator.fetch(request).map(\.asSnapshots) == [.snapshots([try #require(try coordinator.snapshot(of: id))])])
        // Same limits as LMDB: a key longer than LMDB allows is refused the same way.
        try await coordinator.remove(store)
        var readOnly = Self.options
        readOnly.readOnly = true
        await #expect(throws: StrataError.self) { try await coordinator.addPersistentStore(type: .inMemory, options: readOnly) }
        _ = consume store
        #expect(!FileManager.default.fileExists(atPath: path))
    }

    @Test("configurations route entities to stores; URIs resolve only for added stores")
    func configurations() async throws {
        let model = try Self.configuredModel()
        #expect(model.configurations["Media"] == ["Playlist", "Track", "Item", "Book", "Film"])
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        let notes = try await coordinator.addPersistentStore(type: .inMemory, configuration: "Notes", options: Self.options)
        let media = try await coordinator.addPersistentStore(type: .inMemory, configuration: "Media", options: Self.options)
        #expect(try coordinator.defaultStore(for: "Note") == notes)
        #expect(try coordinator.defaultStore(for: "Book") == media)
        #expect(coordinator.stores(for: "Item", includesSubentities: true) == [media])
        #expect(throws: StrataError.noStore(entity: "Person")) { try coordinator.defaultStore(for: "Person") }
        await #expect(throws: StrataError.unknownConfiguration("Nope")) {
            try await coordinator.addPersistentStore(type: .inMemory, configuration: "Nope")
        }
        let outcome = try coordinator.save([
            StoreSave(store: notes, inserted: [Self.newObject("Note", ["title": .string("n")], in: model)]),
            StoreSave(store: media, inserted: [Self.newObject("Book", ["title": .string("b")], in: model)]),
        ])
        #expect(outcome.permanentIDs.count == 2)
        for id in outcome.permanentIDs.values {
            #expect(coordinator.managedObjectID(forURIRepresentation: id.uriRepresentation) == id)
            #expect(coordinator.persistentStore(for: id) == (id.entityName == "Note" ? notes : media))
        }
        let stranger = ManagedObjectID(store: UUID(), entityName: "Note", primaryKey: PrimaryKey(1)!)
        #expect(coordinator.managedObjectID(forURIRepresentation: stranger.uriRepresentation) == nil)
        #expect(coordinator.managedObjectID(forURIRepresentation: URL(string: "x-strata://nope")!) == nil)
        // A configuration whose relationships leave it is refused when the model is built.
        #expect(throws: ModelError.self) { try ManagedObjectModel(types: [Folder.self, Note.self], configurations: ["Half": ["Note"]]) }
    }

    @Test("a save is all or nothing: every conflict reported, nothing written")
    func conflicts() async throws {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        let store = try await coordinator.addPersistentStore(type: .inMemory, options: Self.options)
        let outcome = try coordinator.save([StoreSave(store: store, inserted: [
            Self.newObject("Note", ["title": .string("a")], in: NotesModel.model),
            Self.newObject("Note", ["title": .string("b")], in: NotesModel.model),
        ])])
        let ids = outcome.permanentIDs.values.sorted { $0.primaryKey! < $1.primaryKey! }
        var first = try #require(try coordinator.snapshot(of: ids[0]))
        var second = try #require(try coordinator.snapshot(of: ids[1]))
        first.attributes[NotesModel.model.entitiesByName["Note"]!.attributeSlots["title"]!] = .string("a2")
        _ = try coordinator.save([StoreSave(store: store, updated: [first])])
        // Both based on stale versions now (first was bumped; second is stale by hand).
        second.version = 7
        let error = #expect(throws: StrataError.self) {
            try coordinator.save([StoreSave(
                store: store, inserted: [Self.newObject("Note", ["title": .string("c")], in: NotesModel.model)],
                updated: [first, second])])
        }
        guard let error, error.code == .mergeConflicts else { Issue.record("\(String(describing: error))"); return }
        let found = error.conflicts
        #expect(Set(found.map(\.objectID)) == Set(ids))
        #expect(found.first { $0.objectID == ids[0] }?.newVersion == 2)
        var request = FetchRequest<Note>()
        request.resultType = .count
        #expect(try coordinator.fetch(request) == [.count(2)])  // the insert was not written either
    }

    @Test("a store of another model version is refused and left untouched when automatic migration is off")
    func otherModel() async throws {
        let directory = TemporaryDirectory()
        let url = directory.url.appendingPathComponent("Other.strata")
        _ = try StoreFile(directory: url, model: StoreFixtures.model(), configuration: StoreFixtures.configuration)
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        var options = PersistentStore.Options()
        options.shouldMigrateStoreAutomatically = false
        let error = await #expect(throws: StrataError.self) { try await coordinator.addPersistentStore(at: url, options: options) }
        guard error?.code == .modelMismatch else { Issue.record("\(String(describing: error))"); return }
        #expect(coordinator.persistentStores.isEmpty)
    }

    @Test("several tasks save and read through one coordinator at once")
    func concurrentSaves() async throws {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        let store = try await coordinator.addPersistentStore(type: .inMemory, options: Self.options)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for task in 0..<8 {
                group.addTask {
                    for n in 0..<25 {
                        let snapshot = Self.newObject("Note", ["title": .string("t\(task)-\(n)")], in: NotesModel.model)
                        let outcome = try coordinator.save([StoreSave(store: store, inserted: [snapshot])])
                        let id = try #require(outcome.permanentIDs[snapshot.objectID])
                        #expect(try coordinator.snapshot(of: id) != nil)
                    }
                }
            }
            try await group.waitForAll()
        }
        var request = FetchRequest<Note>()
        request.resultType = .count
        #expect(try coordinator.fetch(request) == [.count(200)])
    }
}
