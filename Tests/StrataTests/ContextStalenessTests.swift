import Foundation
@testable import Strata
import StrataTesting
import Testing

/// `stalenessInterval` and the coordinator's row cache: saves through one coordinator
/// are always seen; another coordinator's (another process's) only once cached rows
/// are older than the interval.
@Suite("Context staleness and the row cache")
struct ContextStalenessTests {
    /// A coordinator on an LMDB directory with a note titled "v1" saved through it, and
    /// a way to change the note as another process would.
    ///
    /// Another process writes the environment without passing through this coordinator
    /// (nor its row cache). In one process a second coordinator cannot open the same
    /// environment (LMDB forbids it; StrataLMDB refuses with `alreadyOpen`), so the
    /// other process's save is made through the store file directly, underneath the
    /// coordinator.
    final class Setup {
        let directory = TemporaryDirectory("ContextStaleness")
        let mine = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        var noteID: ManagedObjectID?

        func open() async throws {
            try await mine.addPersistentStore(at: directory.url, options: CoordinatorStoreTests.options)
            let graph = ObjectGraph(coordinator: mine)
            let note = Note()
            note.title = "v1"
            try graph.insert(note)
            try graph.save()
            noteID = note.objectID
        }

        /// Saves `title` as another process would: straight into the environment.
        func otherSaves(_ title: String) throws {
            let id = try #require(noteID)
            let store = try #require(mine.persistentStores.first)
            let slot = try #require(NotesModel.model.entitiesByName["Note"]?.attributeSlots["title"])
            var row = try #require(try store.file!.read { reader in try reader.snapshot(of: id) })
            row.attributes[slot] = .string(title)
            try store.file!.write { writer in _ = try writer.apply(StoreChanges(updated: [row])) }
        }
    }

    @Test("another process's save is seen on refresh only when the staleness interval allows it")
    func otherProcess() async throws {
        let setup = Setup()
        try await setup.open()
        let graph = ObjectGraph(coordinator: setup.mine)
        let id = try #require(setup.noteID)
        let note = try #require(try graph.existingObject(for: id) as? Note)
        #expect(note.title == "v1")

        try setup.otherSaves("v2")
        // Infinite staleness (the default): the cached row is reused.
        #expect(graph.batching.stalenessInterval < 0)
        try graph.refresh(note, mergeChanges: false)
        #expect(note.isFault && note.title == "v1")
        try graph.refresh(note, mergeChanges: true)
        #expect(note.title == "v1")

        // No staleness: the store is read.
        graph.batching.stalenessInterval = 0
        try graph.refresh(note, mergeChanges: false)
        #expect(note.title == "v2")

        // A short interval: the row read just now is reused until it is older than that.
        graph.batching.stalenessInterval = 1.5
        try graph.refresh(note, mergeChanges: false)
        #expect(note.title == "v2")                 // cached a moment ago, by the read above
        try setup.otherSaves("v3")
        try graph.refresh(note, mergeChanges: true)
        let early = note.title
        try await Task.sleep(for: .milliseconds(1700))
        try graph.refresh(note, mergeChanges: true)
        #expect(early == "v2" && note.title == "v3")
    }

    @Test("a merged remote save reads the changed rows from the store, whatever the staleness interval")
    func mergeReadsFresh() async throws {
        let setup = Setup()
        try await setup.open()
        let id = try #require(setup.noteID)
        let context = ManagedObjectContext(.privateQueue, coordinator: setup.mine)
        let before = try await context.perform { context in
            context.retainsRegisteredObjects = true
            return (try context.existingObject(with: id) as? Note)?.title
        }
        try setup.otherSaves("from another process")
        try await ManagedObjectContext.mergeChanges(fromRemoteContextSave: [NSUpdatedObjectsKey: [id]], into: [context])
        let after = await context.perform { context in
            let staleness = context.stalenessInterval
            return ((context.object(with: id) as? Note)?.title, staleness)
        }
        #expect(before == "v1" && after.0 == "from another process" && after.1 < 0)
    }

    @Test("saves through the same coordinator are always seen, also with infinite staleness")
    func sameCoordinator() async throws {
        let setup = Setup()
        try await setup.open()
        let id = try #require(setup.noteID)
        let reader = ManagedObjectContext(.privateQueue, coordinator: setup.mine, name: "reader")
        let writer = ManagedObjectContext(.privateQueue, coordinator: setup.mine, name: "writer")
        let first = try await reader.perform { context in
            context.stalenessInterval = -1
            context.retainsRegisteredObjects = true   // the note stays between blocks
            return try #require(try context.existingObject(with: id) as? Note).title
        }
        try await writer.perform { context in
            let note = try #require(try context.existingObject(with: id) as? Note)
            note.title = "from writer"
            try context.save()
        }
        let (merged, faulted) = try await reader.perform { context in
            let note = try #require(context.registeredObject(for: id) as? Note)
            try context.refresh(note, mergeChanges: true)
            let merged = note.title
            try context.refresh(note, mergeChanges: false)
            return (merged, note.title)
        }
        #expect(first == "v1" && merged == "from writer" && faulted == "from writer")

        // A deletion through the coordinator evicts the row: the fault finds it gone.
        try await writer.perform { context in
            try context.delete(try context.existingObject(with: id))
            try context.save()
        }
        let deleted = await reader.perform { context in
            guard let note = context.registeredObject(for: id) as? Note else { return false }
            try? context.refresh(note, mergeChanges: false)
            _ = note.title
            return note.isDeleted
        }
        #expect(deleted)
    }

    @Test("the row cache is bounded, keeps newer versions and ignores rows read before a save")
    func rowCacheRules() throws {
        let entity = try #require(NotesModel.model.entitiesByName["Note"])
        func row(_ key: UInt64, version: UInt64) -> ObjectSnapshot {
            let store = UUID(uuidString: "00000000-0000-0000-0000-000000000001") ?? UUID()
            let id = ManagedObjectID(store: store, entityName: "Note", primaryKey: PrimaryKey(key) ?? PrimaryKey(1)!)
            return ObjectSnapshot(objectID: id, entity: entity, version: version)
        }
        let cache = RowCache(capacity: 3)
        cache.fill((1...10).map { row($0, version: 1) }, readAt: RowCache.now, epoch: cache.epoch)
        #expect(cache.count == 3)
        #expect(cache.snapshot(of: row(10, version: 1).objectID, staleness: -1) != nil)
        #expect(cache.snapshot(of: row(1, version: 1).objectID, staleness: -1) == nil)   // the oldest went
        #expect(cache.snapshot(of: row(10, version: 1).objectID, staleness: 0) == nil)   // 0: never

        // A read that began before a save must not overwrite what the save wrote.
        let epoch = cache.epoch
        cache.didSave(written: [row(10, version: 5)], deleted: [row(9, version: 1).objectID])
        cache.fill([row(10, version: 4)], readAt: RowCache.now, epoch: epoch)
        #expect(cache.snapshot(of: row(10, version: 1).objectID, staleness: -1)?.version == 5)
        #expect(cache.snapshot(of: row(9, version: 1).objectID, staleness: -1) == nil)
        // An older version never replaces a newer one.
        cache.fill([row(10, version: 3)], readAt: RowCache.now, epoch: cache.epoch)
        #expect(cache.snapshot(of: row(10, version: 1).objectID, staleness: -1)?.version == 5)
        // Nor does a save recorded late (issue 19: two groups' records landing out of order).
        cache.didSave(written: [row(10, version: 4)], deleted: [])
        #expect(cache.snapshot(of: row(10, version: 1).objectID, staleness: -1)?.version == 5)
    }

    @Test("after saves from many contexts at once (group commits), the row cache holds each row's newest version, so faults read what the store holds")
    func rowCacheAfterConcurrentSaves() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let ids = try await ContextReference.saveNotes((0..<4).map { ("n\($0)", 0) }, on: coordinator)
        // Eight contexts each save every note 25 times, retrying conflicts: the saves meet
        // in group commits, and each records its rows in the cache.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<8 {
                group.addTask {
                    let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "writer \(writer)")
                    for round in 0..<25 {
                        try await context.perform { context in
                            context.stalenessInterval = 0
                            for id in ids { try #require(try context.existingObject(with: id) as? Note).body = "\(writer).\(round)" }
                            do { try context.save() } catch StrataError.Code.mergeConflicts { context.rollback() }
                            context.reset()
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        // A row is cached at its stored version, or not at all (a failed save evicts the
        // rows it meant to write).
        for id in ids {
            let stored = try #require(try coordinator.snapshot(of: id))
            if let cached = coordinator.rowCache.snapshot(of: id, staleness: -1) {
                #expect(cached.version == stored.version && cached.attributes == stored.attributes)
            }
        }
        #expect(coordinator.writeStatistics.saves > 8)
    }
}

@Suite("Context faults of a fetch keep the fetch's rows")
struct ContextFetchedFaultRowsTests {
    @Test("faults returned by a fetch fire with the values of the fetch's moment, even after another context saved; stalenessInterval 0 reads the store")
    func faultsFireFromTheFetchedRows() async throws {
        let coordinator = try await ManagedObjectContextTests.coordinator()
        let writer = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let ids = try await writer.perform { context in
            let notes = (0..<3).map { index in
                let note = Note()
                note.title = "v1 \(index)"
                return note
            }
            for note in notes { try context.insert(note) }
            try context.save()
            return notes.map(\.objectID)
        }
        for staleness in [-1.0, 0] {
            let reader = ManagedObjectContext(.privateQueue, coordinator: coordinator)
            let faults = try await reader.perform { context in
                context.stalenessInterval = staleness
                context.retainsRegisteredObjects = true
                var request = FetchRequest<Note>()
                request.sortDescriptors = [FetchSortDescriptor(\Note.title)]
                return try context.fetch(request).map(\.isFault)
            }
            #expect(faults == [true, true, true])
            let version = staleness < 0 ? "v2" : "v3"
            try await writer.perform { context in
                for id in ids { (context.object(with: id) as? Note)?.title = "\(version) \(id.uriRepresentation.lastPathComponent)" }
                try context.save()
            }
            let titles = await reader.perform { context in
                ids.compactMap { (context.object(with: $0) as? Note)?.title.prefix(2) }
            }
            #expect(titles == (staleness < 0 ? ["v1", "v1", "v1"] : ["v3", "v3", "v3"]))
            // The rows were used once: a refresh reads what the coordinator has now.
            let refreshed = try await reader.perform { context in
                try context.refreshAllObjects()
                return ids.compactMap { (context.object(with: $0) as? Note)?.title.prefix(2) }
            }
            #expect(refreshed == [Substring(version), Substring(version), Substring(version)])
        }
    }
}
