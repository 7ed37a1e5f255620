import Foundation
@testable import Strata
import StrataTesting
import Testing

/// A root context's fetch of faults or IDs with no filter and no sort meets its rows in
/// key order and makes each fault from its row's key as the store is read (no ID per
/// row). Whatever the window, it must return what the same fetch returns sorted by title
/// (the titles follow the key order), which goes the general way: matches collected,
/// sorted, windowed.
@Suite("Streamed fetches of faults and IDs")
struct StreamedFaultFetchTests {
    @Test("batched faults and IDs, every window, on an LMDB store: the same objects as the general path, faults that fire with their values")
    func streamedWindowsMatchTheGeneralPath() async throws {
        let directory = TemporaryDirectory()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        try await coordinator.addPersistentStore(
            type: .lmdb, at: directory.url.appendingPathComponent("Notes.strata"), options: CoordinatorStoreTests.options)
        let titles = (0..<40).map { String(format: "n%02d", $0) }
        let ids = try await ContextReference.saveNotes(titles.map { ($0, 1) }, on: coordinator)
        // A hole in the keys.
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.delete(try context.existingObject(with: ids[7]))
            try context.save()
        }
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            for (offset, limit) in [(0, 0), (0, 5), (3, 10), (35, 10), (39, 0), (50, 3)] {
                var streamed = FetchRequest<Note>()
                streamed.fetchBatchSize = 4
                streamed.fetchOffset = offset
                streamed.fetchLimit = limit
                var general = streamed
                general.sortDescriptors = [FetchSortDescriptor(key: "title")]
                general.fetchBatchSize = 0
                general.returnsObjectsAsFaults = false
                let expected = try context.fetch(general)
                let notes = try context.fetch(streamed)
                #expect(notes.map(\.objectID) == expected.map(\.objectID), "offset \(offset), limit \(limit)")
                #expect(notes.map(\.title) == expected.map(\.title))   // faults fire with their rows' values
                #expect(notes.allSatisfy { $0 === context.registeredObject(for: $0.objectID) })

                var idRequest = FetchRequest<ManagedObjectID>(entityName: "Note")
                idRequest.resultType = .managedObjectID
                idRequest.fetchOffset = offset
                idRequest.fetchLimit = limit
                #expect(try context.fetch(idRequest) == expected.map(\.objectID))
            }
            #expect(try context.fetch(FetchRequest<Note>()).count == 39)
        }
    }

    @Test("a batch of faults from two LMDB stores fires together: each object gets its own store's row")
    func batchesAcrossStores() async throws {
        let directory = TemporaryDirectory()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        _ = try await coordinator.addPersistentStore(
            type: .lmdb, at: directory.url.appendingPathComponent("First.strata"), options: CoordinatorStoreTests.options)
        let second = try await coordinator.addPersistentStore(
            type: .lmdb, at: directory.url.appendingPathComponent("Second.strata"), options: CoordinatorStoreTests.options)
        let titles = (0..<30).map { String(format: "n%02d", $0) }
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            for (index, title) in titles.enumerated() {
                let note = Note()
                note.title = title
                note.priority = Int16(index % 5)
                try context.insert(note)
                if index % 2 == 1 { try context.assign(note, to: second) }   // the stores alternate
            }
            try context.save()
        }
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            var request = FetchRequest<Note>()
            request.sortDescriptors = [FetchSortDescriptor(key: "title")]
            request.fetchBatchSize = 4
            let notes = try context.fetch(request)
            #expect(notes.count == 30)
            #expect(notes[5].isFault && notes[6].isFault)
            #expect(notes[5].title == "n05")                 // fires the batch n04...n07, both stores
            #expect(!notes[6].isFault && notes[6].priority == 1)
            #expect(notes.map(\.title) == titles)
            #expect(notes.map(\.priority) == titles.indices.map { Int16($0 % 5) })
            #expect(notes.map { coordinator.persistentStore(for: $0.objectID) == second } == titles.indices.map { $0 % 2 == 1 })
        }
    }
}
