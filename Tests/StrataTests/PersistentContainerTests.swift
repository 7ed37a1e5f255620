import Foundation
@testable import Strata
import StrataTesting
import Testing

@Suite("Persistent container")
struct PersistentContainerTests {
    /// A container of the notes model with one LMDB store at `url` (no fsync).
    static func container(at url: URL) -> PersistentContainer {
        let container = PersistentContainer(name: "Notes", managedObjectModel: NotesModel.model)
        container.persistentStoreDescriptions = [PersistentStoreDescription(url: url, options: CoordinatorStoreTests.options)]
        return container
    }

    /// A container of the notes model with one in-memory store.
    static func inMemoryContainer() -> PersistentContainer {
        let container = PersistentContainer(name: "Notes", managedObjectModel: NotesModel.model)
        container.persistentStoreDescriptions = [.inMemory(options: CoordinatorStoreTests.options)]
        return container
    }

    /// The titles of every note, sorted, as `context` fetches them.
    static func titles(in context: ManagedObjectContext) async throws -> [String] {
        try await context.perform { context in
            var request = FetchRequest<Note>()
            request.sortDescriptors = [FetchSortDescriptor(\Note.title)]
            return try context.fetch(request).map(\.title)
        }
    }

    // MARK: Configuration

    @Test("the default directory: STRATA_STORE_DIRECTORY, then XDG_DATA_HOME/strata, then ~/.local/share/strata")
    func defaultDirectory() {
        let home = URL(fileURLWithPath: "/home/ada", isDirectory: true)
        func directory(_ environment: [String: String]) -> String {
            PersistentContainer.defaultDirectoryURL(environment: environment, home: home).path
        }
        #expect(directory([:]) == "/home/ada/.local/share/strata")
        #expect(directory(["XDG_DATA_HOME": "/data"]) == "/data/strata")
        #expect(directory(["XDG_DATA_HOME": "relative/data"]) == "/home/ada/.local/share/strata")
        #expect(directory(["XDG_DATA_HOME": ""]) == "/home/ada/.local/share/strata")
        #expect(directory(["STRATA_STORE_DIRECTORY": "/srv/stores", "XDG_DATA_HOME": "/data"]) == "/srv/stores")
        #expect(directory(["STRATA_STORE_DIRECTORY": "", "XDG_DATA_HOME": "/data"]) == "/data/strata")

        let container = PersistentContainer(name: "Notes", managedObjectModel: NotesModel.model)
        let expected = PersistentContainer.defaultDirectoryURL().appendingPathComponent("Notes.strata", isDirectory: true)
        var description = PersistentStoreDescription(url: expected)
        description.tracksPersistentHistory = true   // a container's default store tracks history
        #expect(container.persistentStoreDescriptions == [description])
        #expect(container.persistentStoreDescriptions[0].type == .lmdb)
        #expect(container.name == "Notes")
        #expect(container.persistentStoreCoordinator.managedObjectModel === container.managedObjectModel)
        #expect(container.persistentStoreCoordinator.persistentStores.isEmpty)  // nothing opened
    }

    @Test("init(name:types:) builds the model from typed classes and reports model errors")
    func initFromTypes() throws {
        let container = try PersistentContainer(name: "Typed", types: [Folder.self, Note.self])
        #expect(Set(container.managedObjectModel.entitiesByName.keys).isSuperset(of: ["Folder", "Note"]))
        #expect(throws: ModelError.self) {
            try PersistentContainer(name: "Bad", types: [Folder.self], configurations: ["C": ["Nothing"]])
        }
    }

    @Test("loading creates missing directories and adds the store at the description's URL")
    func loadsAnLMDBStore() async throws {
        let directory = TemporaryDirectory()
        let url = directory.url.appendingPathComponent("a/b/Notes.strata", isDirectory: true)
        let container = Self.container(at: url)
        try await container.loadPersistentStores()
        let stores = container.persistentStoreCoordinator.persistentStores
        #expect(stores.count == 1)
        #expect(stores.first?.type == .lmdb)
        #expect(stores.first?.url == url)
        #expect(FileManager.default.fileExists(atPath: url.appendingPathComponent("data.mdb").path))
        #expect(container.viewContext.persistentStoreCoordinator === container.persistentStoreCoordinator)
    }

    // MARK: Bad locations and configurations

    @Test("a store location that is a file fails with a typed error naming the description; nothing is added")
    func locationIsAFile() async throws {
        let directory = TemporaryDirectory()
        let file = directory.appending("Notes.strata")
        #expect(FileManager.default.createFile(atPath: file, contents: Data("not a store".utf8)))
        let container = Self.container(at: URL(fileURLWithPath: file))
        let error = await #expect(throws: PersistentContainerError.self) { try await container.loadPersistentStores() }
        let path = URL(fileURLWithPath: file).standardizedFileURL.path
        #expect(error?.containerName == "Notes")
        #expect(error?.failures == [.init(
            storeDescription: container.persistentStoreDescriptions[0],
            error: .incompatibleStore(store: path, reason: "it is a file, not a directory"))])
        #expect(error?.description.contains(path) == true)
        #expect(container.persistentStoreCoordinator.persistentStores.isEmpty)
        #expect(FileManager.default.contents(atPath: file) == Data("not a store".utf8))
        // The contexts still have no coordinator: they throw, they do not trap.
        let fetch = await #expect(throws: StrataError.self) {
            try await container.viewContext.perform { try $0.fetch(FetchRequest<Note>()).count }
        }
        #expect(fetch == .noCoordinator)
    }

    @Test("a location under a file cannot be created: a typed error names the file")
    func locationUnderAFile() async throws {
        let directory = TemporaryDirectory()
        let file = directory.appending("plain")
        #expect(FileManager.default.createFile(atPath: file, contents: Data()))
        let url = URL(fileURLWithPath: file).appendingPathComponent("stores/Notes.strata", isDirectory: true)
        let container = Self.container(at: url)
        let error = await #expect(throws: PersistentContainerError.self) { try await container.loadPersistentStores() }
        let failure = try #require(error?.failures.first)
        #expect(error?.failures.count == 1)
        #expect(failure.storeDescription.url == url)
        guard failure.error.code == .incompatibleStore, let store = failure.error.storeName, let reason = failure.error.reason else {
            Issue.record("unexpected error \(failure.error)")
            return
        }
        #expect(store == url.standardizedFileURL.path)
        #expect(reason.contains("\(URL(fileURLWithPath: file).standardizedFileURL.path) is a file, not a directory"))
        #expect(container.persistentStoreCoordinator.persistentStores.isEmpty)
    }

    @Test("an unknown configuration fails alone: the other stores load, and a retry loads only what failed")
    func unknownConfigurationAndRetry() async throws {
        let directory = TemporaryDirectory()
        let good = directory.url.appendingPathComponent("Notes.strata", isDirectory: true)
        let container = Self.container(at: good)
        container.persistentStoreDescriptions.insert(.inMemory(configuration: "Nope"), at: 0)
        let error = await #expect(throws: PersistentContainerError.self) { try await container.loadPersistentStores() }
        #expect(error?.failures == [.init(storeDescription: .inMemory(configuration: "Nope"), error: .unknownConfiguration("Nope"))])
        let loaded = container.persistentStoreCoordinator.persistentStores
        #expect(loaded.map(\.url) == [good])
        // The store that loaded is usable at once.
        try await container.performBackgroundTask { context in
            let note = Note()
            note.title = "Kept"
            try context.insert(note)
            try context.save()
        }
        #expect(try await Self.titles(in: container.viewContext) == ["Kept"])

        container.persistentStoreDescriptions[0] = .inMemory(options: CoordinatorStoreTests.options)
        try await container.loadPersistentStores()
        let stores = container.persistentStoreCoordinator.persistentStores
        #expect(stores.count == 2)
        #expect(stores.first === loaded.first)  // not opened twice
        #expect(stores.last?.type == .inMemory)
    }

    // MARK: Loading twice

    @Test("loading again adds nothing; concurrent loads add each store once; a removed store is added again")
    func loadingTwice() async throws {
        let directory = TemporaryDirectory()
        let container = Self.container(at: directory.url.appendingPathComponent("Notes.strata", isDirectory: true))
        container.persistentStoreDescriptions.append(.inMemory(options: CoordinatorStoreTests.options))
        container.persistentStoreDescriptions.append(.inMemory(options: CoordinatorStoreTests.options))
        async let first: Void = container.loadPersistentStores()
        async let second: Void = container.loadPersistentStores()
        _ = try await (first, second)
        let coordinator = container.persistentStoreCoordinator
        let stores = coordinator.persistentStores
        #expect(stores.map(\.type) == [.lmdb, .inMemory, .inMemory])  // two equal descriptions, two stores

        try await container.loadPersistentStores()
        #expect(coordinator.persistentStores == stores)

        try await coordinator.remove(stores[1])
        try await container.loadPersistentStores()
        let reloaded = coordinator.persistentStores
        #expect(reloaded.count == 3)
        #expect(reloaded[0] === stores[0] && reloaded[1] === stores[2])
        #expect(reloaded[2] !== stores[1] && reloaded[2].type == .inMemory)
    }

    // MARK: Contexts

    @Test("before loading, fetches and saves throw noCoordinator; contexts made then work once a store is loaded")
    func contextsBeforeLoading() async throws {
        let container = Self.inMemoryContainer()
        let early = container.newBackgroundContext()
        #expect(early.persistentStoreCoordinator == nil)
        let fetch = await #expect(throws: StrataError.self) {
            try await container.viewContext.perform { try $0.count(for: FetchRequest<Note>()) }
        }
        #expect(fetch == .noCoordinator)
        let save = await #expect(throws: StrataError.self) {
            try await early.perform { context in
                let note = Note()
                note.title = "Too early"
                try context.insert(note)
                try context.save()
            }
        }
        #expect(save == .noCoordinator)
        let task = await #expect(throws: StrataError.self) {
            try await container.performBackgroundTask { try $0.fetch(FetchRequest<Note>()).count }
        }
        #expect(task == .noCoordinator)

        try await container.loadPersistentStores()
        #expect(early.persistentStoreCoordinator === container.persistentStoreCoordinator)
        #expect(container.viewContext.persistentStoreCoordinator === container.persistentStoreCoordinator)
        try await early.perform { context in
            context.rollback()
            let note = Note()
            note.title = "In time"
            try context.insert(note)
            try context.save()
        }
        #expect(try await Self.titles(in: container.viewContext) == ["In time"])
    }

    @Test("newBackgroundContext makes a new private-queue context each time; the viewContext is one main-queue context")
    func contextKinds() async throws {
        let container = Self.inMemoryContainer()
        try await container.loadPersistentStores()
        let a = container.newBackgroundContext()
        let b = container.newBackgroundContext()
        #expect(a !== b)
        #expect(a.concurrencyType == .privateQueue && b.concurrencyType == .privateQueue)
        #expect(a.persistentStoreCoordinator === container.persistentStoreCoordinator)
        #expect(container.viewContext === container.viewContext)
        #expect(container.viewContext.concurrencyType == .mainQueue)
        #expect(await container.viewContext.perform { $0.name } == "viewContext")
    }

    @MainActor @Test("main-actor code uses the viewContext synchronously")
    func viewContextOnTheMainActor() async throws {
        let container = Self.inMemoryContainer()
        try await container.loadPersistentStores()
        let view = container.viewContext
        // Synchronous from here on: performAndWait runs inline on the main actor.
        let (titles, hasChanges, name) = try view.performAndWait { context in
            let note = Note()
            note.title = "From the main actor"
            try context.insert(note)
            let unsaved = try context.fetch(FetchRequest<Note>()).map(\.title)
            try context.save()
            return (unsaved, context.hasChanges, context.name)
        }
        #expect(titles == ["From the main actor"])
        #expect(!hasChanges)
        #expect(name == "viewContext")
        let stored = try await container.performBackgroundTask { try $0.count(for: FetchRequest<Note>()) }
        #expect(stored == 1)
    }

    @Test("performBackgroundTask returns the body's result and rethrows its error")
    func performBackgroundTaskResult() async throws {
        let container = Self.inMemoryContainer()
        try await container.loadPersistentStores()
        let id = try await container.performBackgroundTask { context in
            let folder = Folder()
            folder.name = "Inbox"
            try context.insert(folder)
            try context.save()
            return folder.objectID
        }
        #expect(!id.isTemporaryID)
        let invalid = await #expect(throws: StrataError.self) {
            try await container.performBackgroundTask { context in
                let folder = Folder()
                folder.name = ""  // shorter than the minimum length
                try context.insert(folder)
                try context.save()
            }
        }
        #expect(invalid.map { $0.code == .validation } == true)
        let name = try await container.viewContext.perform { context in
            try #require(context.existingObject(with: id) as? Folder).name
        }
        #expect(name == "Inbox")
    }

    @Test("the fire-and-forget performBackgroundTask runs its block on a new private-queue context")
    func performBackgroundTaskFireAndForget() async throws {
        let container = Self.inMemoryContainer()
        try await container.loadPersistentStores()
        let outcome = await withCheckedContinuation { (continuation: CheckedContinuation<Result<ManagedObjectID, any Error>, Never>) in
            container.performBackgroundTask { context in
                let folder = Folder()
                folder.name = "Later"
                do {
                    guard context.concurrencyType == .privateQueue else {
                        throw StrataError.invalidContextConfiguration("not a private queue")
                    }
                    try context.insert(folder)
                    try context.save()
                    continuation.resume(returning: .success(folder.objectID))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        let id = try outcome.get()
        let name = try await container.viewContext.perform { context in
            try #require(context.existingObject(with: id) as? Folder).name
        }
        #expect(name == "Later")
    }

    @Test("several background tasks save at once; the viewContext fetches all of their results")
    func concurrentBackgroundTasks() async throws {
        let directory = TemporaryDirectory()
        let container = Self.container(at: directory.url.appendingPathComponent("Notes.strata", isDirectory: true))
        try await container.loadPersistentStores()
        let batches = 4, notesPerBatch = 5
        try await withThrowingTaskGroup(of: Void.self) { group in
            for batch in 0..<batches {
                group.addTask {
                    try await container.performBackgroundTask { context in
                        let folder = Folder()
                        folder.name = "Batch \(batch)"
                        for index in 0..<notesPerBatch {
                            let note = Note()
                            note.title = "\(batch)-\(index)"
                            note.folder = folder
                        }
                        try context.insert(folder)
                        try context.save()
                    }
                }
            }
            try await group.waitForAll()
        }
        let counts = try await container.viewContext.perform { context in
            var request = FetchRequest<Folder>()
            request.sortDescriptors = [FetchSortDescriptor(\Folder.name)]
            return try context.fetch(request).map { "\($0.name): \($0.notes.count)" }
        }
        #expect(counts == (0..<batches).map { "Batch \($0): \(notesPerBatch)" })
        #expect(try await Self.titles(in: container.viewContext).count == batches * notesPerBatch)
    }

    @Test("a second container on the same URL reopens the store files")
    func reopenedByASecondContainer() async throws {
        let directory = TemporaryDirectory()
        let url = directory.url.appendingPathComponent("Notes.strata", isDirectory: true)
        let identifier = try await Self.saveNotes(["Alpha", "Beta"], at: url)
        let second = Self.container(at: url)
        try await second.loadPersistentStores()
        #expect(second.persistentStoreCoordinator.persistentStores.first?.identifier == identifier)
        #expect(try await Self.titles(in: second.viewContext) == ["Alpha", "Beta"])
    }

    /// Saves notes titled `titles` through a container at `url`, then lets the
    /// container go (LMDB: one environment per store per process); returns the store's UUID.
    static func saveNotes(_ titles: [String], at url: URL) async throws -> UUID {
        let container = Self.container(at: url)
        try await container.loadPersistentStores()
        try await container.performBackgroundTask { context in
            for title in titles {
                let note = Note()
                note.title = title
                try context.insert(note)
            }
            try context.save()
        }
        return try #require(container.persistentStoreCoordinator.persistentStores.first).identifier
    }
}
