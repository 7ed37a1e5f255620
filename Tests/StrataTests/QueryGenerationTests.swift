import Foundation
@testable import Strata
import StrataLocks
import StrataTesting
import Testing

/// Query generations (issue 7): contexts pinned to LMDB snapshots, on the real store.
@Suite("Query generations")
struct QueryGenerationTests {
    /// Titles of every note, sorted.
    static func titles(in context: ManagedObjectContext) async throws -> [String] {
        try await context.perform { context in try context.fetch(ContextReference.notes()).map(\.title) }
    }

    /// The number of notes.
    static func noteCount(in context: ManagedObjectContext) async throws -> Int {
        try await context.perform { context in try context.count(for: FetchRequest<Note>()) }
    }

    /// Inserts a note titled `title` in `context` and saves; the didSave notification.
    static func saveNote(_ title: String, in context: ManagedObjectContext) async throws -> ContextNotification {
        let saves = context.notifications(of: [.didSave])
        try await context.perform { context in
            let note = Note()
            note.title = title
            try context.insert(note)
            try context.save()
        }
        var iterator = saves.makeAsyncIterator()
        return try #require(await iterator.next())
    }

    /// Inserts a note titled `title` through a context of its own.
    static func insert(_ title: String, on coordinator: PersistentStoreCoordinator) async throws {
        _ = try await ContextReference.saveNotes([(title, 1)], on: coordinator)
    }

    @Test("a pinned context's fetches, counts, faults and to-many loads keep seeing its snapshot while another context saves; an unpinned one sees each save")
    func pinnedAndUnpinnedWhileAnotherSaves() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let (folderID, noteIDs) = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let folder = Folder()
            folder.name = "Inbox"
            try context.insert(folder)
            let notes = try ["a", "b"].map { title in
                let note = Note()
                note.title = title
                note.folder = folder
                try context.insert(note)
                return note
            }
            try context.save()
            return (folder.objectID, notes.map(\.objectID))
        }
        let pinned = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "pinned")
        let unpinned = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "unpinned")
        try await pinned.perform { try $0.setQueryGenerationFrom(.current) }
        #expect(try await Self.titles(in: pinned) == ["a", "b"])

        // Another context inserts, changes, and deletes (a note, and the folder link of another).
        try await Self.insert("c", on: coordinator)
        try await ContextReference.update(noteIDs[0], on: coordinator) { $0.title = "a2" }
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.delete(context.existingObject(with: noteIDs[1]))
            try context.save()
        }

        #expect(try await Self.titles(in: unpinned) == ["a2", "c"])
        #expect(try await Self.noteCount(in: unpinned) == 2)
        #expect(try await Self.titles(in: pinned) == ["a", "b"])
        #expect(try await Self.noteCount(in: pinned) == 2)
        let faulted = try await pinned.perform { pinned in
            // Faults made now (never registered before) read the snapshot: the deleted
            // note is still there, so no inaccessible fault.
            let deleted = try #require(pinned.object(with: noteIDs[1]) as? Note)
            let folder = try #require(pinned.object(with: folderID) as? Folder)
            let inFolder = folder.notes.map(\.title).sorted()
            return (deleted.title, deleted.isDeleted, inFolder)
        }
        #expect(faulted.0 == "b" && !faulted.1 && faulted.2 == ["a", "b"])
        let unpinnedFault = await unpinned.perform { unpinned in
            let note = unpinned.object(with: noteIDs[1])
            _ = (note as? Note)?.title
            return note.isDeleted
        }
        #expect(unpinnedFault)   // gone for the unpinned context: an inaccessible fault, deleted
    }

    @Test("pinning is lazy: the snapshot is taken at the first read after setQueryGenerationFrom(.current), not at the call")
    func pinningIsLazy() async throws {
        let coordinator = try await ContextReference.inMemory()
        try await Self.insert("a", on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let before = try await context.perform { context in
            try context.setQueryGenerationFrom(.current)
            return coordinator.queryGenerationStatistics.openGenerations
        }
        #expect(before == 0)
        try await Self.insert("b", on: coordinator)
        #expect(try await Self.titles(in: context) == ["a", "b"])   // taken now
        #expect(coordinator.queryGenerationStatistics.openGenerations == 1)
        try await Self.insert("c", on: coordinator)
        #expect(try await Self.titles(in: context) == ["a", "b"])
    }

    @Test("queryGenerationToken is nil unpinned; reading it on a lazily pinned context takes the snapshot; tokens are equal exactly for the same state")
    func tokenValues() async throws {
        let coordinator = try await ContextReference.inMemory()
        try await Self.insert("a", on: coordinator)
        let first = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let second = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let tokens = try await first.perform { first in
            let unpinned = first.queryGenerationToken
            try first.setQueryGenerationFrom(.current)
            return (unpinned, first.queryGenerationToken)
        }
        #expect(tokens.0 == nil)
        let token = try #require(tokens.1)
        #expect(!token.isCurrent && QueryGenerationToken.current.isCurrent && token != .current)
        let store = try #require(coordinator.persistentStores.first)
        #expect(token.transactionID(in: store) == store.file!.environment.info.lastTransactionID)
        #expect(QueryGenerationToken.current.transactionID(in: store) == nil)
        #expect("\(token)".contains(": \(token.transactionID(in: store)!)") && "\(QueryGenerationToken.current)" == "QueryGenerationToken(current)")

        // Same state, same token (and one shared snapshot); a later state, another token.
        let same = try await second.perform { second in
            try second.setQueryGenerationFrom(.current)
            return second.queryGenerationToken
        }
        #expect(same == token)
        #expect(coordinator.queryGenerationStatistics.openGenerations == 1)
        #expect(coordinator.queryGenerationStatistics.pinnedContexts == 2)
        try await Self.insert("b", on: coordinator)
        let later = try await second.perform { second in
            try second.setQueryGenerationFrom(.current)
            return second.queryGenerationToken
        }
        #expect(later != token)
        #expect(Set([token, later, token]).count == 2)
        // Unpinning lets the snapshot go.
        try await second.perform { try $0.setQueryGenerationFrom(nil) }
        let unpinned = await second.perform { $0.queryGenerationToken }
        #expect(unpinned == nil)
        #expect(coordinator.queryGenerationStatistics.openGenerations == 1)
    }

    @Test("setQueryGenerationFrom(otherContext.queryGenerationToken) makes two contexts read the very same snapshot, saves in between notwithstanding")
    func tokenSharing() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        try await Self.insert("a", on: coordinator)
        let first = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "first")
        let second = ManagedObjectContext(.mainQueue, coordinator: coordinator, name: "second")
        let token = try await first.perform { first in
            try first.setQueryGenerationFrom(.current)
            _ = try first.count(for: FetchRequest<Note>())
            return first.queryGenerationToken
        }
        try await Self.insert("b", on: coordinator)
        try await second.perform { try $0.setQueryGenerationFrom(token) }
        #expect(try await Self.titles(in: second) == ["a"])
        #expect(await second.perform { $0.queryGenerationToken } == token)
        let statistics = coordinator.queryGenerationStatistics
        #expect(statistics.openGenerations == 1 && statistics.pinnedContexts == 2)
        #expect(try #require(statistics.stores.first).readerSlotsInUse == 1)
        // The first lets go; the second still holds the snapshot.
        try await first.perform { try $0.setQueryGenerationFrom(nil) }
        try await Self.insert("c", on: coordinator)
        #expect(try await Self.titles(in: second) == ["a"])
        #expect(try await Self.titles(in: first) == ["a", "b", "c"])
        try await first.perform { try $0.setQueryGenerationFrom(token) }
        #expect(try await Self.titles(in: first) == ["a"])
    }

    @Test("a token whose snapshot is gone gives queryGenerationUnavailable once its store has committed since; while its state is still the newest it can be pinned again")
    func unavailableToken() async throws {
        let coordinator = try await ContextReference.inMemory()
        try await Self.insert("a", on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let pinnedToken = try await context.perform { context in
            try context.setQueryGenerationFrom(.current)
            let token = context.queryGenerationToken
            try context.setQueryGenerationFrom(nil)
            return token
        }
        let token = try #require(pinnedToken)
        #expect(coordinator.queryGenerationStatistics.openGenerations == 0)
        // Nothing committed since: the same state is opened again.
        try await context.perform { try $0.setQueryGenerationFrom(token) }
        #expect(await context.perform { $0.queryGenerationToken } == token)
        try await context.perform { try $0.setQueryGenerationFrom(nil) }

        try await Self.insert("b", on: coordinator)
        let failure = await context.perform { context in strataError { try context.setQueryGenerationFrom(token) } }
        #expect(failure == .queryGenerationUnavailable(token))
        #expect("\(try #require(failure))".contains("no longer available"))
        // The context keeps reading what it read before: unpinned.
        #expect(await context.perform { $0.queryGenerationToken } == nil)
        #expect(try await Self.titles(in: context) == ["a", "b"])
    }

    @Test("a token from another store's coordinator, and a token on a child context, are refused with typed errors")
    func refusedTokens() async throws {
        let coordinator = try await ContextReference.inMemory()
        let other = try await ContextReference.inMemory()
        let foreignToken = try await ManagedObjectContext(.privateQueue, coordinator: other).perform { context in
            try context.setQueryGenerationFrom(.current)
            return context.queryGenerationToken
        }
        let foreign = try #require(foreignToken)
        let root = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let child = ManagedObjectContext(.privateQueue, parent: root)
        let foreignError = await root.perform { root in strataError { try root.setQueryGenerationFrom(foreign) } }
        #expect(foreignError == .queryGenerationUnavailable(foreign))
        let childError = await child.perform { child in strataError { try child.setQueryGenerationFrom(.current) } }
        guard let childError, childError.code == .invalidContextConfiguration, let reason = childError.reason else {
            Issue.record("expected invalidContextConfiguration, got \(String(describing: childError))")
            return
        }
        #expect(reason.contains("child"))
        try await child.perform { child in
            try child.setQueryGenerationFrom(nil)
            #expect(child.queryGenerationToken == nil)
        }
        // No coordinator yet: .current is remembered, a token cannot be resolved.
        let loose = ManagedObjectContext(.privateQueue)
        let looseError = try await loose.perform { loose in
            try loose.setQueryGenerationFrom(.current)
            return strataError { try loose.setQueryGenerationFrom(foreign) }
        }
        #expect(looseError == .noCoordinator)
    }

    @Test("the generation advances on the context's own save, to exactly the state its commit made, and registered objects keep their values until refreshAllObjects")
    func advancesOnSave() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let ids = try await ContextReference.saveNotes([("a", 1)], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let before = try await context.perform { context in
            context.retainsRegisteredObjects = true
            try context.setQueryGenerationFrom(.current)
            let note = try #require(try context.existingObject(with: ids[0]) as? Note)
            return (note.title, context.queryGenerationToken)
        }
        #expect(before.0 == "a")
        try await ContextReference.update(ids[0], on: coordinator) { $0.title = "a-elsewhere" }
        try await Self.insert("b", on: coordinator)

        let saved = context.notifications(of: [.didSave])
        let after = try await context.perform { context in
            let note = Note()
            note.title = "mine"
            try context.insert(note)
            try context.save()
            let registered = try #require(context.registeredObject(for: ids[0]) as? Note)
            let stale = registered.title
            let titles = try context.fetch(ContextReference.notes()).map(\.title)
            try context.refreshAllObjects()
            return (stale, titles, registered.title, context.queryGenerationToken)
        }
        #expect(after.0 == "a")                                 // not refreshed by the advance
        #expect(after.1 == ["a", "b", "mine"])                  // the registered object's own values win in a fetch
        #expect(after.2 == "a-elsewhere")                       // refreshAllObjects reads the new generation
        let token = try #require(after.3)
        #expect(token != before.1)
        var iterator = saved.makeAsyncIterator()
        let notification = try #require(await iterator.next())
        #expect(notification.queryGenerationToken == token)     // exactly the state the save made
        let store = try #require(coordinator.persistentStores.first)
        #expect(token.transactionID(in: store) == store.file!.environment.info.lastTransactionID)
    }

    @Test("the generation advances on mergeChanges (to the merged save's state), on reset, and on setQueryGenerationFrom")
    func advancesOnMergeResetAndSet() async throws {
        let coordinator = try await ContextReference.inMemory()
        try await Self.insert("a", on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { try $0.setQueryGenerationFrom(.current) }
        #expect(try await Self.titles(in: context) == ["a"])

        // Merge: to the state the notification names.
        let writer = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "writer")
        let saved = try await Self.saveNote("b", in: writer)
        let savedToken = try #require(saved.queryGenerationToken)
        #expect(try await Self.titles(in: context) == ["a"])
        let merged = context.notifications(of: [.didMergeChanges])
        try await context.perform { try $0.mergeChanges(fromContextDidSave: saved) }
        #expect(await context.perform { $0.queryGenerationToken } == savedToken)
        #expect(try await Self.titles(in: context) == ["a", "b"])
        var mergedIterator = merged.makeAsyncIterator()
        #expect(await mergedIterator.next()?.queryGenerationToken == savedToken)

        // Reset: the newest state, taken at the next read.
        try await Self.insert("c", on: coordinator)
        #expect(try await Self.titles(in: context) == ["a", "b"])
        await context.perform { $0.reset() }
        #expect(try await Self.titles(in: context) == ["a", "b", "c"])

        // setQueryGenerationFrom(.current) again.
        try await Self.insert("d", on: coordinator)
        #expect(try await Self.titles(in: context) == ["a", "b", "c"])
        try await context.perform { try $0.setQueryGenerationFrom(.current) }
        #expect(try await Self.titles(in: context) == ["a", "b", "c", "d"])

        // A remote merge advances to the newest.
        try await Self.insert("e", on: coordinator)
        try await ManagedObjectContext.mergeChanges(fromRemoteContextSave: [:], into: [context])
        #expect(try await Self.titles(in: context) == ["a", "b", "c", "d", "e"])

        // Merging an older save never moves the context back.
        let current = await context.perform { $0.queryGenerationToken }
        try await context.perform { try $0.mergeChanges(fromContextDidSave: saved) }
        #expect(await context.perform { $0.queryGenerationToken } == current)
    }

    @Test("an unpinned context's save notification names the post-save state: an observer pins it while it is the newest, and gets a typed error once it is gone")
    func saveNotificationTokenFromUnpinnedSaver() async throws {
        let coordinator = try await ContextReference.inMemory()
        let saver = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "saver")
        let observer = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "observer")
        let center = NotificationCenter()
        await saver.perform { $0.notificationCenter = center }
        let received = LockedValue<QueryGenerationToken?>(nil)
        let observation = center.addObserver(forName: ManagedObjectContext.didSaveObjectsNotification, object: saver, queue: nil) { notification in
            let token = notification.userInfo?[NSManagedObjectContextQueryGenerationKey] as? QueryGenerationToken
            received.withLock { $0 = token }
        }
        defer { center.removeObserver(observation) }
        let merger = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "merger")
        let before = try await merger.perform { merger in
            try merger.setQueryGenerationFrom(.current)
            _ = try merger.count(for: FetchRequest<Note>())
            return merger.queryGenerationToken
        }
        try await saver.perform { saver in
            let note = Note()
            note.title = "a"
            try saver.insert(note)
            try saver.save()
        }
        let token = try #require(received.withLock { $0 })
        #expect(await saver.perform { $0.queryGenerationToken } == nil)   // the saver stays unpinned
        try await observer.perform { try $0.setQueryGenerationFrom(token) }
        try await Self.insert("b", on: coordinator)
        #expect(try await Self.titles(in: observer) == ["a"])
        // A context pinned before the save, merging the NotificationCenter notification after a later commit, advances to its token (held by the observer), not to the newest.
        let posted = Notification(
            name: ManagedObjectContext.didSaveObjectIDsNotification, object: nil,
            userInfo: [NSManagedObjectContextQueryGenerationKey: token])
        #expect(before != token)
        try await merger.perform { try $0.mergeChanges(fromContextDidSave: posted) }
        #expect(await merger.perform { $0.queryGenerationToken } == token)
        try await merger.perform { try $0.setQueryGenerationFrom(nil) }

        // Once no context holds it and a later save committed, it is gone.
        try await observer.perform { try $0.setQueryGenerationFrom(nil) }
        let gone = await observer.perform { observer in strataError { try observer.setQueryGenerationFrom(token) } }
        #expect(gone == .queryGenerationUnavailable(token))
    }

    @Test("a pinned saver's notification token stays pinnable after later saves: the saver holds that snapshot")
    func saveNotificationTokenFromPinnedSaver() async throws {
        let coordinator = try await ContextReference.inMemory()
        let saver = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "saver")
        try await saver.perform { try $0.setQueryGenerationFrom(.current) }
        let token = try #require(try await Self.saveNote("a", in: saver).queryGenerationToken)
        try await Self.insert("b", on: coordinator)
        try await Self.insert("c", on: coordinator)
        let observer = ManagedObjectContext(.mainQueue, coordinator: coordinator, name: "observer")
        try await observer.perform { try $0.setQueryGenerationFrom(token) }
        #expect(try await Self.titles(in: observer) == ["a"])
        #expect(coordinator.queryGenerationStatistics.openGenerations == 1)
    }

    @Test("child contexts are unpinned and read through their parent: a pinned parent's snapshot is what the child sees, below the parent's own changes")
    func childThroughPinnedParent() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let ids = try await ContextReference.saveNotes([("a", 1), ("b", 1)], on: coordinator)
        let parent = ManagedObjectContext(.mainQueue, coordinator: coordinator, name: "parent")
        let child = ManagedObjectContext(.privateQueue, parent: parent, name: "child")
        try await parent.perform { parent in
            try parent.setQueryGenerationFrom(.current)
            _ = try parent.count(for: FetchRequest<Note>())
            let note = Note()
            note.title = "parent-new"
            try parent.insert(note)
        }
        try await Self.insert("c", on: coordinator)
        try await ContextReference.update(ids[0], on: coordinator) { $0.title = "a-elsewhere" }
        #expect(try await Self.titles(in: child) == ["a", "b", "parent-new"])
        #expect(try await Self.noteCount(in: child) == 3)
        let faulted = await child.perform { child in
            ((child.object(with: ids[0]) as? Note)?.title, child.queryGenerationToken)
        }
        #expect(faulted.0 == "a" && faulted.1 == nil)

        // The child's save goes into the parent; the parent's save advances the parent, and so what the child reads.
        try await child.perform { child in
            let note = Note()
            note.title = "child-new"
            try child.insert(note)
            try child.save()
        }
        try await parent.perform { try $0.save() }
        #expect(try await Self.titles(in: child) == ["a-elsewhere", "b", "c", "child-new", "parent-new"])
    }
}

extension QueryGenerationTests {
    @Test("a pinned root context that merges automatically advances to each merged save's state")
    func automaticMergesAdvance() async throws {
        let coordinator = try await ContextReference.inMemory()
        try await Self.insert("a", on: coordinator)
        let viewer = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "viewer")
        let merges = viewer.notifications(of: [.didMergeChanges])
        try await viewer.perform { viewer in
            viewer.automaticallyMergesChangesFromParent = true
            try viewer.setQueryGenerationFrom(.current)
            _ = try viewer.count(for: FetchRequest<Note>())
        }
        let writer = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "writer")
        let savedToken = try #require(try await Self.saveNote("b", in: writer).queryGenerationToken)
        var mergeIterator = merges.makeAsyncIterator()
        let merged = try #require(await mergeIterator.next())
        #expect(merged.queryGenerationToken == savedToken)
        #expect(await viewer.perform { $0.queryGenerationToken } == savedToken)
        #expect(try await Self.titles(in: viewer) == ["a", "b"])
    }

    @Test("a generation covers every store: each is read in its own snapshot, and a store added after the pin is pinned at its first read")
    func severalStores() async throws {
        let model = try CoordinatorStoreTests.configuredModel()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        try await coordinator.addPersistentStore(type: .inMemory, configuration: "Notes", options: CoordinatorStoreTests.options)
        let writer = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "writer")
        try await writer.perform { writer in
            let note = Note()
            note.title = "a"
            try writer.insert(note)
            try writer.save()
        }
        let reader = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "reader")
        let token = try await reader.perform { reader in
            try reader.setQueryGenerationFrom(.current)
            _ = try reader.count(for: FetchRequest<Note>())
            return reader.queryGenerationToken
        }
        let media = try await coordinator.addPersistentStore(type: .inMemory, configuration: "Media", options: CoordinatorStoreTests.options)
        #expect(token?.transactionID(in: media) == nil)
        func save(_ title: String) async throws {
            try await writer.perform { writer in
                let note = Note()
                note.title = title
                try writer.insert(note)
                let playlist = Playlist()
                playlist.name = title
                try writer.insert(playlist)
                try writer.save()
            }
        }
        try await save("b")
        let counts = try await reader.perform { reader in
            (try reader.count(for: FetchRequest<Note>()), try reader.count(for: FetchRequest<Playlist>()))
        }
        #expect(counts == (1, 1))   // Notes as pinned; Media pinned now, at its first read
        try await save("c")
        let later = try await reader.perform { reader in
            (try reader.count(for: FetchRequest<Note>()), try reader.count(for: FetchRequest<Playlist>()), reader.queryGenerationToken)
        }
        #expect(later.0 == 1 && later.1 == 1 && later.2 == token)
        #expect(try Self.liveReaderCount(coordinator) == 2)
    }

    /// Reader slots holding a transaction, over every store.
    static func liveReaderCount(_ coordinator: PersistentStoreCoordinator) throws -> Int {
        coordinator.queryGenerationStatistics.stores.reduce(0) { $0 + $1.readerSlotsInUse }
    }
}

/// The ``StrataError`` `body` throws, or nil when it throws nothing (or another error).
/// For checks inside a context's block, where `#expect(throws:)`'s closure would leave the
/// context's isolation.
func strataError(_ body: () throws -> Void) -> StrataError? {
    do {
        try body()
        return nil
    } catch {
        return error as? StrataError
    }
}
