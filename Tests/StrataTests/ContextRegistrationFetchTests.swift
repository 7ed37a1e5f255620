import Foundation
@testable import Strata
import StrataTesting
import Testing

/// Shared set-up for the reference-behaviour suites: coordinators on a real LMDB store
/// (in a test's temporary directory) or an in-memory one, and saved notes to work on.
enum ContextReference {
    /// How many notes and folders the stores hold, counted by a new context.
    static func storedCounts(on coordinator: PersistentStoreCoordinator) async throws -> (notes: Int, folders: Int) {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            (try context.count(for: FetchRequest<Note>()), try context.count(for: FetchRequest<Folder>()))
        }
    }

    /// A coordinator on a real LMDB store under `directory`.
    static func lmdb(in directory: URL, model: ManagedObjectModel = NotesModel.model) async throws -> PersistentStoreCoordinator {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        try await coordinator.addPersistentStore(
            type: .lmdb, at: directory.appendingPathComponent("Notes.strata"), options: CoordinatorStoreTests.options)
        return coordinator
    }

    /// A coordinator on an in-memory store.
    static func inMemory(model: ManagedObjectModel = NotesModel.model) async throws -> PersistentStoreCoordinator {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        try await coordinator.addPersistentStore(type: .inMemory, options: CoordinatorStoreTests.options)
        return coordinator
    }

    /// Saves notes with these titles and priorities through a context of their own; their IDs.
    static func saveNotes(
        _ notes: [(title: String, priority: Int16)], on coordinator: PersistentStoreCoordinator
    ) async throws -> [ManagedObjectID] {
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "seeder")
        return try await context.perform { context in
            let objects = try notes.map { title, priority in
                let note = Note()
                note.title = title
                note.priority = priority
                try context.insert(note)
                return note
            }
            try context.save()
            return objects.map(\.objectID)
        }
    }

    /// Changes the stored note `id` through a context of its own.
    static func update(_ id: ManagedObjectID, on coordinator: PersistentStoreCoordinator, _ change: @escaping @Sendable (Note) -> Void) async throws {
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "other")
        try await context.perform { context in
            let note = try #require(try context.existingObject(with: id) as? Note)
            change(note)
            try context.save()
        }
    }

    /// A sorted request for notes, with an optional predicate in format syntax.
    static func notes(_ format: String? = nil) throws -> FetchRequest<Note> {
        var request = FetchRequest<Note>()
        if let format { request.predicate = try FetchPredicate(format: format) }
        request.sortDescriptors = [FetchSortDescriptor(key: "title")]
        return request
    }
}

/// NSManagedObjectContext reference behaviours (issue 5, §1 and §3): configuration,
/// registration and uniquing, and what a fetch returns. Through the public context API.
@Suite("Context reference: configuration, registration and fetching")
struct ContextRegistrationFetchTests {
    // MARK: §1 Configuration

    @Test("concurrencyType is fixed at init; name and userInfo are the context's own and settable; several contexts share one coordinator")
    func configuration() async throws {
        let coordinator = try await ContextReference.inMemory()
        let a = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "a")
        let b = ManagedObjectContext(.mainQueue, coordinator: coordinator)
        #expect(a.concurrencyType == .privateQueue && b.concurrencyType == .mainQueue)
        #expect(a.persistentStoreCoordinator === coordinator && b.persistentStoreCoordinator === coordinator)
        let (name, value, otherName, otherInfo) = await a.perform { context in
            let before = context.name
            context.name = "renamed"
            context.userInfo["answer"] = 42
            return (before, context.userInfo["answer"] as? Int, context.name, context.userInfo.count)
        }
        #expect(name == "a" && value == 42 && otherName == "renamed" && otherInfo == 1)
        let (bName, bInfo) = await b.perform { context in (context.name, context.userInfo.isEmpty) }
        #expect(bName == nil && bInfo)
    }

    // MARK: §3 Uniquing and registration

    @Test("uniquing is per context: one instance per object ID in a context, another instance in another context")
    func uniquingIsPerContext() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let ids = try await ContextReference.saveNotes([("a", 1)], on: coordinator)
        let a = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let b = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let inA = try await a.perform { context in
            context.retainsRegisteredObjects = true   // alive while b makes its own: identifiers are not reused
            let fetched = try context.fetch(ContextReference.notes())
            let again = try context.fetch(ContextReference.notes())
            let byID = context.object(with: ids[0])
            let existing = try context.existingObject(with: ids[0])
            let registered = context.registeredObject(for: ids[0])
            #expect(fetched.count == 1 && fetched[0] === again[0] && fetched[0] === byID)
            #expect(existing === byID && registered === byID)
            return ObjectIdentifier(fetched[0])
        }
        let inB = try await b.perform { context in
            ObjectIdentifier(try context.existingObject(with: ids[0]))
        }
        #expect(inA != inB)
    }

    @Test("registeredObject(for:) returns the registered object, or nil for an object only in the store; it reads nothing")
    func registeredObjectNeverReadsTheStore() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let ids = try await ContextReference.saveNotes([("a", 1)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let before = context.registeredObject(for: ids[0])
            let registeredCount = context.registeredObjects.count
            #expect(before == nil && registeredCount == 0)   // stored, but not registered here
            let fetched = try context.fetch(ContextReference.notes())
            let after = context.registeredObject(for: ids[0])
            #expect(after === fetched[0])
            let unknown = context.registeredObject(for: ManagedObjectID(temporaryFor: "Note"))
            #expect(unknown == nil)
        }
    }

    @Test("object(with:) returns a fault without touching the store; firing it for a missing row deletes it")
    func objectWithReturnsAFault() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let ids = try await ContextReference.saveNotes([("kept", 2), ("gone", 3)], on: coordinator)
        let store = try #require(coordinator.persistentStores.first)
        // A row that was never written: object(with:) makes no attempt to verify it.
        let neverWritten = ManagedObjectID(store: store.identifier, entityName: "Note", primaryKey: PrimaryKey(9_999)!)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        await context.perform { context in
            context.retainsRegisteredObjects = true   // keep the faults registered for the second block
            let kept = context.object(with: ids[0])
            let gone = context.object(with: ids[1])
            let missing = context.object(with: neverWritten)
            let faults = [kept, gone, missing].map(\.isFault)
            #expect(faults == [true, true, true])
            #expect(context.registeredObject(for: neverWritten) === missing)
            #expect(context.object(with: ids[0]) === kept)      // the registered one again
            #expect((kept as? Note)?.title == "kept" && !kept.isFault)
        }
        // Another context deletes one of them; firing that fault now finds no row.
        let other = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await other.perform { context in
            try context.delete(try context.existingObject(with: ids[1]))
            try context.save()
        }
        try await context.perform { context in
            let gone = try #require(context.registeredObject(for: ids[1]) as? Note)
            let missing = try #require(context.registeredObject(for: neverWritten) as? Note)
            #expect(gone.title == "" && gone.priority == 0 && gone.isDeleted)
            #expect(missing.title == "" && missing.isDeleted)
        }
    }

    @Test("existingObject(with:) returns the registered object with its unsaved values, else reads a fully realised one; never a fault")
    func existingObjectNeverReturnsAFault() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let ids = try await ContextReference.saveNotes([("a", 1), ("b", 2), ("c", 3)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            // Not registered: read from the store, realised.
            let a = try #require(try context.existingObject(with: ids[0]) as? Note)
            #expect(!a.isFault)
            #expect(a.title == "a" && a.priority == 1)
            // Registered as a fault: the same instance, now realised.
            let fault = context.object(with: ids[1])
            let b = try context.existingObject(with: ids[1])
            #expect(b === fault)
            #expect(!b.isFault)
            // Registered with unsaved changes: returned as it is.
            a.title = "local"
            #expect((try context.existingObject(with: ids[0]) as? Note)?.title == "local")
            // Registered and deleted (not saved yet): still returned, as it is registered.
            let c = try context.existingObject(with: ids[2])
            try context.delete(c)
            #expect(try context.existingObject(with: ids[2]) === c)
        }
    }

    @Test("existingObject(with:) throws objectNotFound for an object neither registered nor stored, temporary IDs included")
    func existingObjectThrowsWhenMissing() async throws {
        let coordinator = try await ContextReference.inMemory()
        let ids = try await ContextReference.saveNotes([("a", 1)], on: coordinator)
        try await ContextReference.update(ids[0], on: coordinator) { _ in }
        let eraser = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await eraser.perform { context in
            try context.delete(try context.existingObject(with: ids[0]))
            try context.save()
        }
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let temporary = ManagedObjectID(temporaryFor: "Note")
        let errors = await context.perform { context in
            var errors: [StrataError?] = []
            for id in [ids[0], temporary] {
                do { _ = try context.existingObject(with: id); errors.append(nil) } catch { errors.append(error as? StrataError) }
            }
            return errors
        }
        #expect(errors == [.objectNotFound(ids[0]), .objectNotFound(temporary)])
    }

    @Test("registeredObjects is the set of every fetched, faulted and inserted object of the context")
    func registeredObjectsListsEverything() async throws {
        let coordinator = try await ContextReference.inMemory()
        let ids = try await ContextReference.saveNotes([("a", 1), ("b", 2)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            context.retainsRegisteredObjects = true
            var request = try ContextReference.notes("title == 'a'")
            request.sortDescriptors = []
            let fetched = try context.fetch(request)
            let fault = context.object(with: ids[1])
            let inserted = Note()
            try context.insert(inserted)
            #expect(context.registeredObjects == Set(fetched + [fault, inserted]))
        }
    }

    @Test("retainsRegisteredObjects is false by default: unchanged objects stay registered only while held; inserted, updated and deleted ones are kept")
    func registeredObjectsAreHeldWeaklyByDefault() async throws {
        let coordinator = try await ContextReference.inMemory()
        let ids = try await ContextReference.saveNotes([("a", 1), ("b", 2), ("c", 3), ("d", 4)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let retains = context.retainsRegisteredObjects
            #expect(!retains)
            var insertedID: ManagedObjectID?
            do {
                let notes = try context.fetch(ContextReference.notes())
                notes[1].title = "b2"            // updated
                try context.delete(notes[2])     // deleted
                let new = Note()
                try context.insert(new)          // inserted
                insertedID = new.objectID
            }
            #expect(context.registeredObject(for: ids[0]) == nil)    // nothing held it
            #expect(context.registeredObject(for: ids[3]) == nil)
            #expect((context.registeredObject(for: ids[1]) as? Note)?.title == "b2")
            #expect(context.registeredObject(for: ids[2])?.isDeleted == true)
            #expect(context.registeredObject(for: try #require(insertedID))?.isInserted == true)
            #expect(context.insertedObjects.count == 1 && context.updatedObjects.count == 1 && context.deletedObjects.count == 1)

            context.retainsRegisteredObjects = true
            do { _ = try context.fetch(ContextReference.notes("title == 'a'")) }
            #expect((context.registeredObject(for: ids[0]) as? Note)?.title == "a")  // kept now
        }
    }

    // MARK: §3 Fetching

    @Test("fetch returns the stores' matches registered with the context; no match gives an empty array")
    func fetchRegistersMatchesAndReturnsEmpty() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let ids = try await ContextReference.saveNotes([("a", 1), ("b", 2)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let found = try context.fetch(ContextReference.notes("priority == 2"))
            #expect(found.map(\.objectID) == [ids[1]])
            #expect(context.registeredObject(for: ids[1]) === found.first)
            let none = try context.fetch(ContextReference.notes("title == 'zzz'"))
            #expect(none.isEmpty)
            let tags = try context.fetch(FetchRequest<Tag>())
            #expect(tags.isEmpty)
        }
    }

    @Test("fetch without a predicate returns every instance of the entity")
    func fetchWithoutPredicateReturnsAll() async throws {
        let coordinator = try await ContextReference.inMemory()
        let ids = try await ContextReference.saveNotes([("a", 1), ("b", 2), ("c", 3)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let fetched = try await context.perform { context in
            try context.fetch(FetchRequest<Note>()).map(\.objectID)
        }
        #expect(Set(fetched) == Set(ids))
    }

    @Test("fetch includes pending inserts that match, before they are saved")
    func fetchIncludesPendingInserts() async throws {
        let coordinator = try await ContextReference.inMemory()
        _ = try await ContextReference.saveNotes([("a", 1)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let matching = Note()
            matching.title = "b"
            matching.priority = 1
            let other = Note()
            other.title = "c"
            other.priority = 4
            try context.insert(matching)
            try context.insert(other)
            let titles = try context.fetch(ContextReference.notes("priority == 1")).map(\.title)
            #expect(titles == ["a", "b"])
            let found = try context.fetch(ContextReference.notes("title == 'b'"))
            #expect(found.first === matching && found.count == 1)
        }
    }

    @Test("fetch evaluates the predicate on in-memory values: a changed object that no longer matches is left out though its stored row matches, and one that now matches is included")
    func fetchSeesInMemoryState() async throws {
        let coordinator = try await ContextReference.inMemory()
        _ = try await ContextReference.saveNotes([("a", 1), ("b", 2)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let notes = try context.fetch(ContextReference.notes())
            notes[0].priority = 5   // stored 1: matches "priority == 1" in the store only
            notes[1].priority = 1   // stored 2: matches in memory only
            let titles = try context.fetch(ContextReference.notes("priority == 1")).map(\.title)
            #expect(titles == ["b"])
            let high = try context.fetch(ContextReference.notes("priority == 5")).map(\.title)
            #expect(high == ["a"])
        }
    }

    @Test("fetch leaves out objects deleted in the context even before the deletion is saved")
    func fetchExcludesPendingDeletes() async throws {
        let coordinator = try await ContextReference.inMemory()
        _ = try await ContextReference.saveNotes([("a", 1), ("b", 1)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let notes = try context.fetch(ContextReference.notes())
            try context.delete(notes[0])
            let titles = try context.fetch(ContextReference.notes("priority == 1")).map(\.title)
            let all = try context.fetch(FetchRequest<Note>()).map(\.title)
            #expect(titles == ["b"] && all == ["b"])
        }
    }

    @Test("fetch never changes realised or dirty objects: values saved by another context do not overwrite the registered instances")
    func fetchLeavesRegisteredObjectsUntouched() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let ids = try await ContextReference.saveNotes([("a", 1), ("b", 2)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let before = try await context.perform { context in
            context.retainsRegisteredObjects = true   // keep the realised, clean one too
            let notes = try context.fetch(ContextReference.notes())
            #expect(notes[0].priority == 1)         // realised (the fetch returned faults)
            notes[1].body = "unsaved"              // dirty
            return notes.map(ObjectIdentifier.init)
        }
        try await ContextReference.update(ids[0], on: coordinator) { $0.priority = 4 }
        try await ContextReference.update(ids[1], on: coordinator) { $0.priority = 5 }
        try await context.perform { context in
            let notes = try context.fetch(ContextReference.notes())
            #expect(notes.map(ObjectIdentifier.init) == before)
            let a = try #require(context.registeredObject(for: ids[0]) as? Note)
            let b = try #require(context.registeredObject(for: ids[1]) as? Note)
            #expect(a.priority == 1 && !a.hasChanges)         // realised: not refreshed by the fetch
            #expect(b.priority == 2 && b.body == "unsaved")   // dirty: the context's own state
            // A predicate on the new stored value does not pull it in either: it sees b's in-memory 2.
            let five = try context.fetch(ContextReference.notes("priority == 5"))
            #expect(five.isEmpty)
        }
    }

    @Test("fetch never changes a realised object held by the caller: its values stay those it was read with")
    func fetchLeavesRealisedObjectsUntouched() async throws {
        let coordinator = try await ContextReference.inMemory()
        let ids = try await ContextReference.saveNotes([("a", 1)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let a = try #require(try context.existingObject(with: ids[0]) as? Note)
            #expect(a.priority == 1)
            let other = ManagedObjectContext(.privateQueue, coordinator: try #require(context.persistentStoreCoordinator))
            other.performAndWait { other in
                let copy = try? other.existingObject(with: ids[0]) as? Note
                copy?.priority = 3
                try? other.save()
            }
            let fetched = try context.fetch(FetchRequest<Note>())
            #expect(fetched == [a] && a.priority == 1 && !a.hasChanges)
        }
    }

    @Test("count(for:) is the number fetch would return, pending inserts, changes and deletes included")
    func countMatchesFetch() async throws {
        let coordinator = try await ContextReference.inMemory()
        _ = try await ContextReference.saveNotes([("a", 1), ("b", 1), ("c", 2)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let request = try ContextReference.notes("priority == 1")
            let stored = try context.count(for: request)
            #expect(stored == 2)
            let notes = try context.fetch(ContextReference.notes())
            try context.delete(notes[0])      // a: leaves
            notes[2].priority = 1             // c: joins
            let d = Note()
            d.priority = 1
            try context.insert(d)             // d: joins
            let count = try context.count(for: request)
            let fetched = try context.fetch(request).count
            #expect(count == 3 && fetched == 3)
            var window = request
            window.fetchOffset = 1
            window.fetchLimit = 5
            let windowCount = try context.count(for: window)
            let windowFetch = try context.fetch(window).count
            #expect(windowCount == windowFetch && windowCount == 2)
        }
    }

    @Test("refreshAllObjects reloads every registered object from the store and keeps the context's unsaved changes")
    func refreshAllObjectsKeepsChanges() async throws {
        let coordinator = try await ContextReference.inMemory()
        let ids = try await ContextReference.saveNotes([("a", 1), ("b", 2)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let before = try await context.perform { context in
            context.retainsRegisteredObjects = true
            let notes = try context.fetch(ContextReference.notes())
            notes[1].body = "local"
            return notes.map(ObjectIdentifier.init)
        }
        try await ContextReference.update(ids[0], on: coordinator) { $0.priority = 4 }
        try await ContextReference.update(ids[1], on: coordinator) { $0.priority = 5 }
        try await context.perform { context in
            try context.refreshAllObjects()
            let a = try #require(context.registeredObject(for: ids[0]) as? Note)
            let b = try #require(context.registeredObject(for: ids[1]) as? Note)
            #expect([ObjectIdentifier(a), ObjectIdentifier(b)] == before)
            #expect(a.priority == 4 && !a.hasChanges)
            #expect(b.priority == 5 && b.body == "local" && b.hasChanges)
            let updated = context.updatedObjects
            #expect(updated == [b])
        }
    }

    @Test("a root context's plain fetch takes its rows as the store reads them: the window in key order, each fault filled once and awoken once, registered objects reused as they are; several contexts at once")
    func streamedFetchesFillTheirObjectsInPlace() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url, model: AwakeCounter.model)
        let seeder = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let ids = try await seeder.perform { context in
            let objects = try (0..<50).map { index in
                let object = AwakeCounter()
                object.title = "t\(index)"
                object.priority = Int16(index)
                try context.insert(object)
                return object
            }
            try context.save()
            return objects.map(\.objectID)
        }
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            // Registered before the fetch, unchanged (a change would merge, not stream): one
            // realised (its values stay as they are), one a fault (filled by the fetch).
            let realised = try #require(try context.existingObject(with: ids[12]) as? AwakeCounter)
            #expect(realised.awakenings == 1)
            let fault = try #require(context.object(with: ids[13]) as? AwakeCounter)
            #expect(fault.isFault && fault.awakenings == 0)
            var request = FetchRequest<AwakeCounter>()
            request.returnsObjectsAsFaults = false
            request.fetchOffset = 10
            request.fetchLimit = 15
            let window = try context.fetch(request)
            #expect(window.map(\.objectID) == Array(ids[10..<25]))
            #expect(window.allSatisfy { !$0.isFault && $0.awakenings == 1 })
            #expect(window.map(\.priority) == (10..<25).map(Int16.init))
            #expect(window[2] === realised && window[3] === fault && !fault.isFault)
            // Fetched again: the same objects, nothing filled or awoken twice.
            var everything = request
            everything.fetchOffset = 0
            everything.fetchLimit = 0
            let all = try context.fetch(everything)
            #expect(all.count == 50)
            let sameObjects = Array(all[10..<25]).elementsEqual(window, by: ===)
            #expect(sameObjects)
            #expect(all.allSatisfy { $0.awakenings == 1 })
            #expect(all.map(\.title) == (0..<50).map { "t\($0)" })
            let hasChanges = context.hasChanges
            #expect(!hasChanges)
        }
        // Several contexts fetching at once, while another saves new rows.
        try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
                        var request = FetchRequest<AwakeCounter>()
                        request.returnsObjectsAsFaults = false
                        let objects = try context.fetch(request)
                        #expect(objects.allSatisfy { !$0.isFault && $0.awakenings == 1 && $0.title == "t\($0.priority)" })
                        return objects.count
                    }
                }
            }
            group.addTask {
                try await seeder.perform { context in
                    for index in 50..<60 {
                        let object = AwakeCounter()
                        object.title = "t\(index)"
                        object.priority = Int16(index)
                        try context.insert(object)
                        try context.save()
                    }
                    return 0
                }
            }
            for try await count in group { #expect(count == 0 || (50...60).contains(count)) }
        }
    }
}


/// An entity with an indexed optional attribute (nil values are indexed too).
final class IndexedCode: ManagedObject {
    @Attribute(indexed: true) var code: Int64?
}

@Suite("Index entries of updated rows")
struct IndexedUpdateTests {
    @Test("an indexed attribute saved nil and then set (and back) moves its index entry: no stale entry, the store's integrity holds")
    func nilToValueMovesTheIndexEntry() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url, model: try ManagedObjectModel(types: [IndexedCode.self]))
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let objects = try (0..<3).map { _ in
                let object = IndexedCode()
                try context.insert(object)
                return object
            }
            try context.save()
            objects[0].code = 7
            objects[1].code = 8
            try context.save()
            objects[1].code = nil
            try context.save()
        }
        let report = try await coordinator.checkIntegrity()
        #expect(report.problems.isEmpty, "\(report.problems)")
        #expect(report.indexEntries == 3)
        let counts = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            var unset = FetchRequest<IndexedCode>()
            unset.predicate = \IndexedCode.code == nil
            var seven = FetchRequest<IndexedCode>()
            seven.predicate = \IndexedCode.code == 7
            return (try context.count(for: unset), try context.count(for: seven))
        }
        #expect(counts.0 == 2 && counts.1 == 1)
    }
}
