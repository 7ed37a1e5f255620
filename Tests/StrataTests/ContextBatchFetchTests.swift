import Foundation
@testable import Strata
import StrataTesting
import Testing

/// `fetchBatchSize`, ``FetchedResults`` and `relationshipKeyPathsForPrefetching`: what
/// they realise, how many store reads they take, and that results never change.
@Suite("Context batched fetches and prefetching")
struct ContextBatchFetchTests {
    /// A coordinator whose store holds `notes` notes titled "n00"… with priorities 0…4,
    /// spread over `folders` folders, every note tagged with one of two tags.
    static func coordinator(notes: Int = 25, folders: Int = 4) async throws -> PersistentStoreCoordinator {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        try await coordinator.addPersistentStore(type: .inMemory, options: CoordinatorStoreTests.options)
        let graph = ObjectGraph(coordinator: coordinator)
        let folderObjects = try (0..<folders).map { index in
            let folder = Folder()
            folder.name = "f\(index)"
            try graph.insert(folder)
            return folder
        }
        let tags = try ["red", "blue"].map { label in
            let tag = Tag()
            tag.label = label
            try graph.insert(tag)
            return tag
        }
        for index in 0..<notes {
            let note = Note()
            note.title = String(format: "n%02d", index)
            note.priority = Int16(index % 5)
            note.folder = folderObjects.isEmpty ? nil : folderObjects[index % folders]
            note.tags = [tags[index % 2]]
            try graph.insert(note)
        }
        try graph.save()
        return coordinator
    }

    /// A graph that never reuses cached rows (staleness 0): every row it needs is a
    /// store read, so that reads can be counted (the save that seeded the store left its
    /// rows in the coordinator's cache).
    static func uncachedGraph(_ coordinator: PersistentStoreCoordinator) -> ObjectGraph {
        let graph = ObjectGraph(coordinator: coordinator)
        graph.batching.stalenessInterval = 0
        return graph
    }

    static func sortedRequest(batch: Int) -> FetchRequest<Note> {
        var request = FetchRequest<Note>()
        request.sortDescriptors = [FetchSortDescriptor(key: "priority", ascending: false), FetchSortDescriptor(key: "title")]
        request.fetchBatchSize = batch
        return request
    }

    @Test("a batched fetch realises the first batch; a fault fulfils its whole batch in one read")
    func batchedFetch() async throws {
        let coordinator = try await Self.coordinator()
        let graph = Self.uncachedGraph(coordinator)
        let notes = try graph.fetch(Self.sortedRequest(batch: 10))
        #expect(notes.count == 25)
        #expect(notes.prefix(10).allSatisfy { !$0.isFault })
        #expect(notes.dropFirst(10).allSatisfy { $0.isFault })

        let before = coordinator.storeReadCount
        #expect(notes[14].title.hasPrefix("n"))                 // fires a fault of batch 2
        #expect(coordinator.storeReadCount == before + 1)
        #expect(notes[10..<20].allSatisfy { !$0.isFault })
        #expect(notes[20...].allSatisfy { $0.isFault })
        _ = notes[19].priority
        _ = notes[10].title
        #expect(coordinator.storeReadCount == before + 1)       // the batch is realised

        // Exactly the objects, in exactly the order, of an unbatched fetch.
        let plainGraph = ObjectGraph(coordinator: coordinator)
        let plain = try plainGraph.fetch(Self.sortedRequest(batch: 0))
        #expect(notes.map(\.objectID) == plain.map(\.objectID))
        #expect(notes.map(\.title) == plain.map(\.title))
    }

    @Test("a batched fetch merges unsaved changes exactly as an unbatched one")
    func batchedFetchWithPendingChanges() async throws {
        let coordinator = try await Self.coordinator()
        let graph = ObjectGraph(coordinator: coordinator)
        let some = try graph.fetch(FetchRequest<Note>()).filter { $0.title == "n03" || $0.title == "n07" }
        some[0].priority = 4                              // moves up
        try graph.delete(some[1])                         // leaves
        let added = Note()
        added.title = "new"
        added.priority = 2
        try graph.insert(added)
        for object in graph.registeredObjects where !object.hasChanges { try graph.refresh(object, mergeChanges: false) }

        var request = Self.sortedRequest(batch: 6)
        request.fetchLimit = 20
        request.fetchOffset = 1
        let batched = try graph.fetch(request)
        let faults = batched.map(\.isFault)
        request.fetchBatchSize = 0
        request.returnsObjectsAsFaults = false
        let plain = try graph.fetch(request)
        #expect(batched.map(\.objectID) == plain.map(\.objectID))
        #expect(batched.contains(added) && !batched.contains(some[1]))
        #expect(faults.prefix(6).allSatisfy { !$0 })
        #expect(faults.dropFirst(6).contains(true))       // later batches were left as faults
    }

    @Test("FetchedResults materialises one batch per read and lets earlier batches go")
    func fetchedResults() async throws {
        let coordinator = try await Self.coordinator(notes: 95)
        let graph = Self.uncachedGraph(coordinator)
        let before = coordinator.storeReadCount
        let results = try graph.fetchedResults(for: Self.sortedRequest(batch: 20))
        #expect(results.count == 95 && results.fetchBatchSize == 20)
        #expect(coordinator.storeReadCount == before + 1)       // the IDs only
        #expect(graph.registeredObjects.isEmpty)                // no object made yet

        var titles: [String] = []
        var priorities = 0
        for note in results {
            titles.append(note.title)
            priorities += Int(note.priority)
        }
        #expect(coordinator.storeReadCount == before + 1 + 5)   // one read per batch
        #expect(graph.registeredObjects.count <= 20)             // only the current batch lives
        let plainGraph = ObjectGraph(coordinator: coordinator)
        let plain = try plainGraph.fetch(Self.sortedRequest(batch: 0))
        #expect(titles == plain.map(\.title))
        #expect(priorities == plain.reduce(0) { $0 + Int($1.priority) })
        #expect(results.objectIDs == plain.map(\.objectID))

        // Random access back into an earlier batch reads it again, once.
        let reads = coordinator.storeReadCount
        #expect(results[3].objectID == plain[3].objectID && results[5].title == plain[5].title)
        #expect(coordinator.storeReadCount == reads + 1)
    }

    @Test("FetchedResults keeps unsaved objects and follows the merged order")
    func fetchedResultsWithPendingChanges() async throws {
        let coordinator = try await Self.coordinator(notes: 12)
        let graph = ObjectGraph(coordinator: coordinator)
        let added = Note()
        added.title = "zz"
        added.priority = 4
        try graph.insert(added)
        let results = try graph.fetchedResults(for: Self.sortedRequest(batch: 5))
        let merged = try graph.fetch(Self.sortedRequest(batch: 0))
        #expect(results.count == 13)
        #expect(results.map(\.objectID) == merged.map(\.objectID))
        #expect(results.contains { $0 === added })
    }

    @Test("FetchedResults refuses a Result class the entity does not have")
    func fetchedResultsTypeMismatch() async throws {
        let coordinator = try await Self.coordinator(notes: 1)
        let graph = ObjectGraph(coordinator: coordinator)
        let error = #expect(throws: StrataError.self) { () throws in
            _ = try graph.fetchedResults(for: FetchRequest<Note>(entityName: "Folder"))
        }
        if let error, error.code == .typeMismatch { #expect(error.entityName == "Folder") } else { Issue.record("\(String(describing: error))") }
    }

    @Test("prefetching to-one and to-many destinations reads them together, not once per object")
    func prefetching() async throws {
        let coordinator = try await Self.coordinator(notes: 24, folders: 6)
        func touchAll(_ notes: [Note]) -> [String] {
            notes.map { note in "\(note.title) \(note.folder?.name ?? "-") \(note.tags.map(\.label).sorted())" }
        }

        var request = FetchRequest<Note>()
        request.sortDescriptors = [FetchSortDescriptor(key: "title")]
        let plainGraph = Self.uncachedGraph(coordinator)
        var reads = coordinator.storeReadCount
        let plain = touchAll(try plainGraph.fetch(request))
        let plainReads = coordinator.storeReadCount - reads

        request.relationshipKeyPathsForPrefetching = ["folder", "tags"]
        let graph = Self.uncachedGraph(coordinator)
        reads = coordinator.storeReadCount
        let notes = try graph.fetch(request)
        let fetchReads = coordinator.storeReadCount - reads
        reads = coordinator.storeReadCount
        let prefetched = touchAll(notes)
        #expect(coordinator.storeReadCount == reads)           // nothing left to read
        #expect(prefetched == plain)
        // fetch, note rows, folder rows, tag links, tag rows.
        #expect(fetchReads <= 5)
        #expect(plainReads >= 24 + 6 + 24)                      // each note, folder, tag set
    }

    @Test("prefetching a key path of two steps, and with batches, never changes results")
    func prefetchingPathsAndBatches() async throws {
        let coordinator = try await Self.coordinator(notes: 30, folders: 3)
        var request = FetchRequest<Note>()
        request.predicate = \Note.priority >= 1
        request.sortDescriptors = [FetchSortDescriptor(key: "title", ascending: false)]
        let plain = try Self.uncachedGraph(coordinator).fetch(request).map(\.objectID)

        // Two steps: every note's folder, and every folder's notes.
        request.relationshipKeyPathsForPrefetching = ["folder.notes"]
        let graph = Self.uncachedGraph(coordinator)
        let notes = try graph.fetch(request)
        #expect(notes.map(\.objectID) == plain)
        var reads = coordinator.storeReadCount
        #expect(notes.allSatisfy { $0.folder?.notes.count == 10 && $0.folder?.notes.allSatisfy { !$0.isFault } == true })
        #expect(coordinator.storeReadCount == reads)

        // With batches: each batch prefetches when it is read.
        request.relationshipKeyPathsForPrefetching = ["folder", "tags"]
        request.fetchBatchSize = 8
        let batchedGraph = Self.uncachedGraph(coordinator)
        let batched = try batchedGraph.fetch(request)
        #expect(batched.map(\.objectID) == plain)
        #expect(batched.prefix(8).allSatisfy { $0.folder?.isFault == false })
        #expect(batched[8].isFault)
        reads = coordinator.storeReadCount
        _ = batched[9].title
        // The batch's rows, then its tags' links (folders and tags are realised already).
        let afterBatch = coordinator.storeReadCount
        #expect(afterBatch > reads && afterBatch <= reads + 3)
        #expect(batched[8..<16].allSatisfy { $0.folder?.name.isEmpty == false && $0.tags.count == 1 })
        #expect(coordinator.storeReadCount == afterBatch)
    }

    @Test("an unknown prefetching key path is a typed error")
    func unknownPrefetchKeyPath() async throws {
        let coordinator = try await Self.coordinator(notes: 2)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        for path in ["nope", "folder.nope", "title.folder"] {
            let error = await context.perform { context -> StrataError? in
                var request = FetchRequest<Note>()
                request.relationshipKeyPathsForPrefetching = [path]
                do {
                    _ = try context.fetch(request)
                    return nil
                } catch {
                    return error as? StrataError
                }
            }
            guard error?.code == .unknownKey else {
                Issue.record("\(path): \(String(describing: error))")
                continue
            }
        }
    }

    @Test("several contexts fault batches in at once while another saves")
    func concurrentBatches() async throws {
        let coordinator = try await Self.coordinator(notes: 120, folders: 5)
        let writer = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "writer")
        let counts = try await withThrowingTaskGroup(of: [Int].self) { group in
            for reader in 0..<4 {
                group.addTask {
                    let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "reader \(reader)")
                    var seen: [Int] = []
                    for round in 0..<5 {
                        let count = try await context.perform { context in
                            var request = Self.sortedRequest(batch: 7 + reader)
                            request.relationshipKeyPathsForPrefetching = round % 2 == 0 ? ["folder"] : []
                            context.stalenessInterval = reader % 2 == 0 ? -1 : 0
                            var total = 0
                            if round % 2 == 0 {
                                for note in try context.fetch(request) where !note.title.isEmpty && note.folder != nil { total += 1 }
                            } else {
                                for note in try context.fetchedResults(for: request) where !note.title.isEmpty && note.folder != nil { total += 1 }
                            }
                            context.reset()
                            return total
                        }
                        seen.append(count)
                    }
                    return seen
                }
            }
            group.addTask {
                for round in 0..<10 {
                    try await writer.perform { context in
                        var request = FetchRequest<Folder>()
                        request.fetchLimit = 1
                        let folder = try #require(try context.fetch(request).first)
                        let note = Note()
                        note.title = "w\(round)"
                        note.folder = folder
                        try context.insert(note)
                        try context.save()
                    }
                }
                return []
            }
            var all: [[Int]] = []
            for try await counts in group { all.append(counts) }
            return all
        }
        let readers = counts.filter { !$0.isEmpty }
        #expect(readers.count == 4)
        for seen in readers {
            #expect(seen.allSatisfy { $0 >= 120 && $0 <= 130 })
            #expect(seen == seen.sorted())                       // saves only add notes
        }
    }
}
