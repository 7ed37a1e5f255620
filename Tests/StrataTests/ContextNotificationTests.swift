import Foundation
@testable import Strata
import StrataLocks
import StrataTesting
import Testing

/// What an observer saw: the notification's name and, for each key, the IDs of the
/// objects (or the IDs) under it.
struct SeenNotification: Sendable, Equatable {
    var name: Notification.Name
    var hasUserInfo: Bool
    var objects: [String: Set<ManagedObjectID>] = [:]
    var ids: [String: Set<ManagedObjectID>] = [:]
    var onContextExecutor = false
}

/// Collects the notifications a private NotificationCenter delivers for one context.
// @unchecked Sendable: `tokens` is written only in init and read only in deinit.
final class NotificationRecorder: @unchecked Sendable {
    let center = NotificationCenter()
    private let seen = LockedValue<[SeenNotification]>([])
    private var tokens: [NSObjectProtocol] = []

    init(_ context: ManagedObjectContext) async {
        await context.perform { context in context.notificationCenter = center }
        let names = [
            ManagedObjectContext.didChangeObjectsNotification, ManagedObjectContext.willSaveObjectsNotification,
            ManagedObjectContext.didSaveObjectsNotification, ManagedObjectContext.didSaveObjectIDsNotification,
        ]
        for name in names {
            let token = center.addObserver(forName: name, object: context, queue: nil) { [seen] notification in
                var entry = SeenNotification(name: notification.name, hasUserInfo: notification.userInfo != nil)
                for (key, value) in notification.userInfo ?? [:] {
                    guard let key = key as? String else { continue }
                    if let objects = value as? Set<ManagedObject> {
                        entry.objects[key] = Set(objects.map(\.objectID))
                    } else if let ids = value as? Set<ManagedObjectID> {
                        entry.ids[key] = ids
                    }
                }
                // Observers run inside the context's block, on its executor.
                entry.onContextExecutor = context.contextExecutor.isCurrentQueue
                seen.withLock { $0.append(entry) }
            }
            tokens.append(token)
        }
    }

    /// Everything seen so far, cleared.
    func take() -> [SeenNotification] {
        seen.withLock { (seen: inout [SeenNotification]) in
            defer { seen = [] }
            return seen
        }
    }

    deinit {
        for token in tokens { center.removeObserver(token) }
    }
}

@Suite("Context notifications")
struct ContextNotificationTests {
    typealias Key = ManagedObjectContext.NotificationKey

    static func context() async throws -> ManagedObjectContext {
        ManagedObjectContext(.privateQueue, coordinator: try await ManagedObjectContextTests.coordinator())
    }

    @Test("ObjectsDidChange is posted at the end of a block with inserted, updated and deleted objects, on the context's executor")
    func objectsDidChangeAtEndOfBlock() async throws {
        let context = try await Self.context()
        let recorder = await NotificationRecorder(context)
        let (savedID, deletedID) = try await context.perform { context in
            let kept = Note(), gone = Note()
            try context.insert(kept)
            try context.insert(gone)
            try context.save()
            return (kept.objectID, gone.objectID)
        }
        _ = recorder.take()
        let insertedID = try await context.perform { context in
            let kept = context.object(with: savedID) as? Note
            kept?.title = "changed"
            let gone = context.object(with: deletedID)
            try context.delete(gone)
            let new = Note()
            try context.insert(new)
            return new.objectID
        }
        let seen = recorder.take()
        #expect(seen.count == 1)
        let change = try #require(seen.first)
        #expect(change.name == ManagedObjectContext.didChangeObjectsNotification)
        #expect(change.objects[NSInsertedObjectsKey] == [insertedID])
        #expect(change.objects[NSUpdatedObjectsKey] == [savedID])
        #expect(change.objects[NSDeletedObjectsKey] == [deletedID])
        #expect(change.ids[Key.insertedObjectIDs.rawValue] == [insertedID])
        #expect(change.onContextExecutor)
    }

    @Test("ObjectsDidChange is not posted for objects a fetch registers, nor for a block that changes nothing")
    func noNotificationForFetch() async throws {
        let context = try await Self.context()
        try await context.perform { context in
            try context.insert(Note())
            try context.save()
        }
        let recorder = await NotificationRecorder(context)
        let other = ManagedObjectContext(.privateQueue, coordinator: try #require(context.persistentStoreCoordinator))
        let otherRecorder = await NotificationRecorder(other)
        let fetched = try await other.perform { context in try context.fetch(FetchRequest<Note>()).count }
        await context.perform { _ in }
        #expect(fetched == 1)
        #expect(recorder.take().isEmpty && otherRecorder.take().isEmpty)
    }

    @Test("an object inserted and deleted in one event is in no set; deleted later, it is reported deleted")
    func insertedAndDeleted() async throws {
        let context = try await Self.context()
        let recorder = await NotificationRecorder(context)
        try await context.perform { context in
            let note = Note()
            try context.insert(note)
            try context.delete(note)
        }
        #expect(recorder.take().isEmpty)
        let id = try await context.perform { context in
            let note = Note()
            try context.insert(note)
            return note.objectID
        }
        #expect(recorder.take().first?.objects[NSInsertedObjectsKey] == [id])
        try await context.perform { context in
            let note = context.object(with: id)
            try context.delete(note)
        }
        #expect(recorder.take().first?.objects[NSDeletedObjectsKey] == [id])
    }

    @Test("save posts ObjectsDidChange, WillSave (no userInfo) and DidSave then DidSaveObjectIDs, with permanent IDs")
    func saveNotifications() async throws {
        let context = try await Self.context()
        let stored = try await context.perform { context in
            let a = Note(), b = Note()
            try context.insert(a)
            try context.insert(b)
            try context.save()
            return (a.objectID, b.objectID)
        }
        let recorder = await NotificationRecorder(context)
        let inserted = try await context.perform { context in
            (context.object(with: stored.0) as? Note)?.title = "updated"
            try context.delete(context.object(with: stored.1))
            let new = Note()
            try context.insert(new)
            let dropped = Note()
            try context.insert(dropped)
            try context.delete(dropped)
            try context.save()
            return new.objectID
        }
        let seen = recorder.take()
        #expect(seen.map(\.name) == [
            ManagedObjectContext.didChangeObjectsNotification, ManagedObjectContext.willSaveObjectsNotification,
            ManagedObjectContext.didSaveObjectsNotification, ManagedObjectContext.didSaveObjectIDsNotification,
        ])
        guard seen.count == 4 else { return }
        #expect(!seen[1].hasUserInfo)
        let didSave = seen[2]
        #expect(!inserted.isTemporaryID)
        #expect(didSave.objects[NSInsertedObjectsKey] == [inserted])
        #expect(didSave.objects[NSUpdatedObjectsKey] == [stored.0])
        #expect(didSave.objects[NSDeletedObjectsKey] == [stored.1])
        #expect(seen[3].objects.isEmpty)
        #expect(seen[3].ids == [
            Key.insertedObjectIDs.rawValue: [inserted], Key.updatedObjectIDs.rawValue: [stored.0],
            Key.deletedObjectIDs.rawValue: [stored.1],
        ])
    }

    @Test("a save with nothing to save posts nothing; a failed save posts WillSave but no DidSave")
    func emptyAndFailedSaves() async throws {
        let context = try await Self.context()
        let recorder = await NotificationRecorder(context)
        try await context.perform { context in try context.save() }
        #expect(recorder.take().isEmpty)
        let failed = await context.perform { context in
            let note = Note()
            note.priority = 9   // above the maximum
            do {
                try context.insert(note)
                try context.save()
                return false
            } catch {
                return true
            }
        }
        #expect(failed)
        let names = recorder.take().map(\.name)
        #expect(names.contains(ManagedObjectContext.willSaveObjectsNotification))
        #expect(!names.contains(ManagedObjectContext.didSaveObjectsNotification))
    }

    @Test("reset posts every object as invalidated, with invalidatedAll; rollback invalidates inserts and refreshes the rest")
    func resetAndRollback() async throws {
        let context = try await Self.context()
        let saved = try await context.perform { context in
            let note = Note()
            try context.insert(note)
            try context.save()
            return note.objectID
        }
        let recorder = await NotificationRecorder(context)
        let inserted = try await context.perform { context in
            (context.object(with: saved) as? Note)?.title = "edited"
            let new = Note()
            try context.insert(new)
            try context.processPendingChanges()
            context.rollback()
            return new.objectID
        }
        let rollback = try #require(recorder.take().last)
        #expect(rollback.objects[NSInvalidatedObjectsKey] == [inserted])
        #expect(rollback.objects[NSRefreshedObjectsKey] == [saved])
        let reset = try await context.perform { context in
            let held = try context.existingObject(with: saved)
            context.reset()
            return withExtendedLifetime(held) { context.registeredObjects.count }
        }
        let invalidated = try #require(recorder.take().last)
        #expect(reset == 0)
        #expect(invalidated.ids[NSInvalidatedAllObjectsKey] == [saved])
        #expect(invalidated.objects[NSInvalidatedObjectsKey] == [saved])
    }

    @Test("refresh(_:mergeChanges:) reports the object as refreshed; changes in the same event make it updated instead")
    func refreshNotifications() async throws {
        let context = try await Self.context()
        let id = try await context.perform { context in
            let note = Note()
            try context.insert(note)
            try context.save()
            return note.objectID
        }
        let recorder = await NotificationRecorder(context)
        try await context.perform { context in
            try context.refresh(context.object(with: id), mergeChanges: false)
        }
        #expect(recorder.take().first?.objects[NSRefreshedObjectsKey] == [id])
        try await context.perform { context in
            let object = context.object(with: id)
            try context.refresh(object, mergeChanges: true)
            (object as? Note)?.title = "changed after the refresh"
        }
        let seen = try #require(recorder.take().first)
        #expect(seen.objects[NSRefreshedObjectsKey] == nil && seen.objects[NSUpdatedObjectsKey] == [id])
    }

    @Test("notifications(of:) streams Sendable events of the kinds asked for, in order")
    func streams() async throws {
        let context = try await Self.context()
        let all = context.notifications()
        let saves = context.notifications(of: [.didSave])
        let id = try await context.perform { context in
            context.name = "streamed"
            let note = Note()
            try context.insert(note)
            try context.save()
            return note.objectID
        }
        var kinds: [ContextNotification.Kind] = []
        for await event in all {
            kinds.append(event.kind)
            if event.kind == .didSave { break }
        }
        #expect(kinds == [.objectsDidChange, .willSave, .didSave])
        var iterator = saves.makeAsyncIterator()
        let saved = try #require(await iterator.next())
        #expect(saved.kind == .didSave && saved.insertedObjectIDs == [id] && saved.contextName == "streamed")
        #expect(saved.context === context && saved.name == ManagedObjectContext.didSaveObjectsNotification)
    }

    @Test("a dropped stream unsubscribes; with no stream and no notification center nothing is built")
    func droppedStream() async throws {
        let context = try await Self.context()
        do {
            let stream = context.notifications()
            _ = stream
            #expect(context.notifier.wants(.didSave))
        }
        #expect(!context.notifier.wants(.didSave))
        try await context.perform { context in
            context.notificationCenter = nil
            try context.insert(Note())
            try context.save()
        }
    }

    @Test("eight contexts on one coordinator each stream only their own saves")
    func concurrentStreams() async throws {
        let coordinator = try await ManagedObjectContextTests.coordinator()
        let contexts = (0..<8).map { ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "c\($0)") }
        let streams = contexts.map { $0.notifications(of: [.didSave]) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for context in contexts {
                group.addTask {
                    for round in 0..<5 {
                        try await context.perform { context in
                            let note = Note()
                            note.title = "\(context.name ?? "") \(round)"
                            try context.insert(note)
                            try context.save()
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        for (index, stream) in streams.enumerated() {
            var iterator = stream.makeAsyncIterator()
            for _ in 0..<5 {
                let event = try #require(await iterator.next())
                #expect(event.contextName == "c\(index)" && event.insertedObjectIDs.count == 1)
            }
        }
    }
}
