import Foundation
@testable import Strata
import StrataPostgres
import Testing

@Suite("Containers, parent–child contexts and live results on both stores")
struct PostgresContextTests {
    @Test("a PersistentContainer loads the store's description; a child context's save reaches the store through its parent, and only when the parent saves",
          arguments: StoreKind.allCases)
    func containerAndChildren(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let container = PersistentContainer(name: "Notes", managedObjectModel: PGModel.model)
        container.persistentStoreDescriptions = [store.storeDescription]
        try await container.loadPersistentStores()
        store.adopt(container.persistentStoreCoordinator)
        let root = container.newBackgroundContext()
        let folderID = try await root.perform { context in
            let folder = PGFolder()
            folder.name = "Inbox"
            try context.insert(folder)
            try context.save()
            return folder.objectID
        }
        let child = ManagedObjectContext(.privateQueue, parent: root)
        try await child.perform { context in
            let folder = try #require(try context.existingObject(with: folderID) as? PGFolder)
            folder.name = "Renamed"
            let note = PGNote()
            note.title = "from the child"
            note.folder = folder
            try context.insert(note)
            try context.save()   // into the parent: nothing reaches the server yet
        }
        #expect(try await store.count("Note") == 0)
        try await root.perform { try $0.save() }
        let reader = ManagedObjectContext(.privateQueue, coordinator: try await store.instance())
        let state = try await reader.perform { context in
            let folder = try #require(try context.existingObject(with: folderID) as? PGFolder)
            return (folder.name, folder.notes.map(\.title))
        }
        #expect(state.0 == "Renamed" && state.1 == ["from the child"])
        // A child's change to an object its parent has not read: taken from the row's version.
        let unread = ManagedObjectContext(.privateQueue, coordinator: container.persistentStoreCoordinator)
        let editor = ManagedObjectContext(.privateQueue, parent: unread)
        try await editor.perform { context in
            (try context.existingObject(with: folderID) as? PGFolder)?.name = "Edited"
            try context.save()
        }
        try await unread.perform { try $0.save() }
        let name = try await reader.perform { context in
            // The reader's coordinator cached the row; another coordinator (another instance)
            // saved since: a staleness interval of 0 reads it again, as for another process on LMDB.
            context.stalenessInterval = 0
            let folder = try #require(try context.existingObject(with: folderID) as? PGFolder)
            try context.refresh(folder, mergeChanges: false)
            return folder.name
        }
        #expect(name == "Edited")
        try await container.close()
    }

    @Test("live results follow this instance's saves", arguments: StoreKind.allCases)
    func liveResults(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let coordinator = try await store.instance()
        let observer = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        var request = FetchRequest<PGNote>()
        request.predicate = try FetchPredicate(format: "priority > 2")
        request.sortDescriptors = [FetchSortDescriptor(key: "title")]
        let results = observer.results(for: request)
        var iterator = results.makeAsyncIterator()
        let first = try #require(try await iterator.next())
        #expect(first.elements.isEmpty)
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            for (title, priority) in [("b", 3), ("a", 4), ("c", 1)] {
                let note = PGNote()
                note.title = title
                note.priority = Int16(priority)
                try context.insert(note)
            }
            try context.save()
        }
        let second = try #require(try await iterator.next())
        #expect(second.elements.count == 2 && second.difference.inserted == [0, 1])
    }
}
