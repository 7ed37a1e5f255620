import Foundation
@testable import Strata
import StrataLocks
import StrataTesting
import Testing

@Suite("Context merging of saves made elsewhere")
struct ContextMergeTests {
    /// A coordinator with three saved notes "one", "two", "three"; their IDs.
    static func setUp() async throws -> (PersistentStoreCoordinator, [ManagedObjectID]) {
        let coordinator = try await ManagedObjectContextTests.coordinator()
        let ids = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let notes = ["one", "two", "three"].map { title in
                let note = Note()
                note.title = title
                return note
            }
            for note in notes { try context.insert(note) }
            try context.save()
            return notes.map(\.objectID)
        }
        return (coordinator, ids)
    }

    /// In `writer`: "one" retitled, "two" deleted, "four" inserted; the DidSave event.
    static func writerSaves(_ writer: ManagedObjectContext, _ ids: [ManagedObjectID]) async throws -> ContextNotification {
        let saves = writer.notifications(of: [.didSave])
        try await writer.perform { context in
            (try context.existingObject(with: ids[0]) as? Note)?.title = "one, edited elsewhere"
            try context.delete(try context.existingObject(with: ids[1]))
            let four = Note()
            four.title = "four"
            try context.insert(four)
            try context.save()
        }
        var iterator = saves.makeAsyncIterator()
        return try #require(await iterator.next())
    }

    @Test("mergeChanges(fromContextDidSave:) refreshes updated objects keeping local changes, registers inserted ones, deletes deleted ones")
    func mergeFromDidSave() async throws {
        let (coordinator, ids) = try await Self.setUp()
        let viewer = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await viewer.perform { context in
            context.retainsRegisteredObjects = true
            for id in ids { _ = try context.existingObject(with: id) }
            (context.object(with: ids[0]) as? Note)?.priority = 4     // an unsaved local change
        }
        let changes = viewer.notifications(of: [.objectsDidChange, .didMergeChanges])
        let saved = try await Self.writerSaves(ManagedObjectContext(.privateQueue, coordinator: coordinator), ids)
        let fourID = try #require(saved.insertedObjectIDs.first)
        let state = try await viewer.perform { context in
            try context.mergeChanges(fromContextDidSave: saved)
            let one = context.object(with: ids[0]) as? Note
            let two = context.registeredObject(for: ids[1])
            let four = context.registeredObject(for: fourID) as? Note
            return (one?.title, one?.priority, one?.hasChanges, two == nil, four?.title, context.hasChanges)
        }
        #expect(state.0 == "one, edited elsewhere" && state.1 == 4 && state.2 == true)
        #expect(state.3)                 // "two" left the context
        #expect(state.4 == "four")       // "four" is registered and fulfils
        #expect(state.5)                 // only the local change is unsaved
        var iterator = changes.makeAsyncIterator()
        let didChange = try #require(await iterator.next())
        #expect(didChange.kind == .objectsDidChange)
        #expect(didChange.insertedObjectIDs == [fourID] && didChange.deletedObjectIDs == [ids[1]])
        #expect(didChange.updatedObjectIDs.isEmpty)
        let merged = try #require(await iterator.next())
        #expect(merged.kind == .didMergeChanges && merged.name == ManagedObjectContext.didMergeChangesObjectIDsNotification)
        #expect(merged.insertedObjectIDs == [fourID] && merged.updatedObjectIDs == [ids[0]] && merged.deletedObjectIDs == [ids[1]])
    }

    @Test("a merged deletion takes the object out even when it had unsaved changes; the next save does not conflict on it")
    func mergedDeletionOfChangedObject() async throws {
        let (coordinator, ids) = try await Self.setUp()
        let viewer = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await viewer.perform { context in
            (try context.existingObject(with: ids[1]) as? Note)?.title = "edited here"
            (try context.existingObject(with: ids[2]) as? Note)?.title = "three, edited here"
        }
        let saved = try await Self.writerSaves(ManagedObjectContext(.privateQueue, coordinator: coordinator), ids)
        let titles = try await viewer.perform { context in
            try context.mergeChanges(fromContextDidSave: saved)
            let updated = context.updatedObjects.count
            try context.save()
            return (updated, try context.fetch(FetchRequest<Note>()).map(\.title).sorted())
        }
        #expect(titles.0 == 1)
        #expect(titles.1 == ["four", "one, edited elsewhere", "three, edited here"])
    }

    @Test("mergeChanges(fromContextDidSave:) takes a NotificationCenter DidSave notification, reading only its IDs")
    func mergeFromNotificationCenter() async throws {
        let (coordinator, ids) = try await Self.setUp()
        let writer = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let center = NotificationCenter()
        let captured = LockedValue<[String: Set<ManagedObjectID>]?>(nil)
        let token = center.addObserver(forName: ManagedObjectContext.didSaveObjectIDsNotification, object: writer, queue: nil) { note in
            var info: [String: Set<ManagedObjectID>] = [:]
            for (key, value) in note.userInfo ?? [:] {
                if let key = key as? String, let ids = value as? Set<ManagedObjectID> { info[key] = ids }
            }
            captured.withLock { $0 = info }
        }
        defer { center.removeObserver(token) }
        await writer.perform { context in context.notificationCenter = center }
        let viewer = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await viewer.perform { context in
            context.retainsRegisteredObjects = true
            for id in ids { _ = try context.existingObject(with: id) }
        }
        _ = try await Self.writerSaves(writer, ids)
        let userInfo = try #require(captured.withLock { $0 })
        #expect(userInfo.keys.sorted() == ["deleted_objectIDs", "inserted_objectIDs", "updated_objectIDs"])
        let titles = try await viewer.perform { context in
            let notification = Notification(
                name: ManagedObjectContext.didSaveObjectIDsNotification, object: nil,
                userInfo: userInfo.reduce(into: [AnyHashable: Any]()) { $0[$1.key] = $1.value })
            try context.mergeChanges(fromContextDidSave: notification)
            return ((context.object(with: ids[0]) as? Note)?.title, context.registeredObject(for: ids[1]) == nil)
        }
        #expect(titles.0 == "one, edited elsewhere" && titles.1)
    }

    @Test("mergeChanges(fromRemoteContextSave:into:) merges IDs given under Core Data's keys into several contexts")
    func mergeFromRemoteSave() async throws {
        let (coordinator, ids) = try await Self.setUp()
        let contexts = (0..<3).map { _ in ManagedObjectContext(.privateQueue, coordinator: coordinator) }
        for context in contexts {
            try await context.perform { context in
                context.retainsRegisteredObjects = true
                for id in ids { _ = try context.existingObject(with: id) }
            }
        }
        let saved = try await Self.writerSaves(ManagedObjectContext(.privateQueue, coordinator: coordinator), ids)
        try await ManagedObjectContext.mergeChanges(
            fromRemoteContextSave: [
                NSInsertedObjectsKey: Array(saved.insertedObjectIDs), NSUpdatedObjectsKey: Array(saved.updatedObjectIDs),
                NSDeletedObjectsKey: Array(saved.deletedObjectIDs), "ignored": [ids[2]],
            ],
            into: contexts)
        for context in contexts {
            let state = await context.perform { context in
                ((context.object(with: ids[0]) as? Note)?.title, context.registeredObject(for: ids[1]) == nil, context.registeredObjects.count)
            }
            #expect(state.0 == "one, edited elsewhere" && state.1 && state.2 == 3)
        }
    }
}
