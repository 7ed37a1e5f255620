import Foundation
@testable import Strata
import StrataTesting
import Testing

/// Undo and redo (issue 27): the undo manager's own rules, and every change a context
/// records taken back and redone, before and after saves, on real stores.
@Suite("Undo and redo")
struct UndoTests {
    /// A saved folder holding saved notes titled `titles`; the folder's and notes' IDs.
    private static func seed(_ titles: [String], on coordinator: PersistentStoreCoordinator) async throws -> (ManagedObjectID, [ManagedObjectID]) {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let folder = Folder()
            folder.name = "Inbox"
            try context.insert(folder)
            let notes = try titles.map { title in
                let note = Note()
                note.title = title
                try context.insert(note)
                note.folder = folder
                return note
            }
            try context.save()
            return (folder.objectID, notes.map(\.objectID))
        }
    }

    /// The stored titles, read by a new context.
    private static func storedTitles(on coordinator: PersistentStoreCoordinator) async throws -> [String] {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            var request = FetchRequest<Note>()
            request.sortDescriptors = [FetchSortDescriptor(key: "title")]
            return try context.fetch(request).map(\.title)
        }
    }

    // MARK: The manager

    @Test("with no undo manager undo and redo do nothing, and nothing is recorded")
    func noManager() async throws {
        let coordinator = try await ContextReference.inMemory()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            #expect(context.undoManager == nil)
            let note = Note()
            try context.insert(note)
            note.title = "kept"
            try context.processPendingChanges()
            try context.undo()
            try context.redo()
            #expect(note.title == "kept" && note.isInserted && context.graph.undoRecorder == nil)
        }
    }

    @Test("each event is one step: undo takes back the last, redo puts it back, with the action name on both stacks")
    func eventsAreSteps() async throws {
        let coordinator = try await ContextReference.inMemory()
        let (_, ids) = try await Self.seed(["a"], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let manager = UndoManager()
        try await context.perform { context in
            context.undoManager = manager
            let note = try context.existingObject(with: ids[0]) as! Note
            note.title = "b"
            manager.setActionName("Rename")
        }
        try await context.perform { context in
            let note = try context.existingObject(with: ids[0]) as! Note
            note.title = "c"
            note.priority = 3
        }
        #expect(manager.canUndo && !manager.canRedo && manager.undoActionName == "")
        try await context.perform { context in
            let note = try context.existingObject(with: ids[0]) as! Note
            try context.undo()
            #expect(note.title == "b" && note.priority == 0)
            #expect(manager.undoActionName == "Rename" && manager.canRedo)
            try context.undo()
            let holds78 = note.title == "a" && !note.hasChanges && !context.hasChanges
            #expect(holds78)
            #expect(!manager.canUndo && manager.redoActionName == "Rename")
            try context.undo()   // nothing left: nothing happens
            try context.redo()
            #expect(note.title == "b" && note.hasChanges)
            try context.redo()
            #expect(note.title == "c" && note.priority == 3 && !manager.canRedo)
        }
    }

    @Test("a new change empties the redo stack")
    func newChangeClearsRedo() async throws {
        let coordinator = try await ContextReference.inMemory()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let manager = UndoManager()
        try await context.perform { context in
            context.undoManager = manager
            let note = Note()
            try context.insert(note)
            try context.processPendingChanges()
            note.title = "x"
            try context.undo()
            #expect(manager.canRedo && note.title == "")
            note.title = "y"
            try context.processPendingChanges()
            #expect(!manager.canRedo)
        }
    }

    @Test("explicit groups nest inside the event's group; with groupsByEvent off, only explicit groups make steps")
    func grouping() async throws {
        let coordinator = try await ContextReference.inMemory()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let manager = UndoManager()
        try await context.perform { context in
            context.undoManager = manager
            let note = Note()
            try context.insert(note)
            try context.processPendingChanges()
            // An explicit group in an event that already changed something: one step.
            note.title = "1"
            manager.beginUndoGrouping()
            #expect(manager.groupingLevel == 2)
            note.priority = 1
            try manager.endUndoGrouping()
            try context.processPendingChanges()
            #expect(manager.groupingLevel == 0)
            try context.undo()
            #expect(note.title == "" && note.priority == 0)
            try context.redo()

            // An explicit group alone is its own step, and spans events.
            manager.beginUndoGrouping()
            note.title = "2"
            try context.processPendingChanges()
            note.priority = 2
            try context.processPendingChanges()
            manager.setActionName("Both")
            #expect(throws: UndoError.groupOpen(level: 1)) { try context.undo() }
            try manager.endUndoGrouping()
            #expect(manager.undoActionName == "Both")
            try context.undo()
            #expect(note.title == "1" && note.priority == 1)
            #expect(throws: UndoError.noOpenGroup) { try manager.endUndoGrouping() }

            manager.groupsByEvent = false
            note.title = "3"   // no group open: kept for the next group
            try context.processPendingChanges()
            #expect(manager.groupingLevel == 0 && manager.canRedo)   // nothing registered yet
            manager.beginUndoGrouping()
            note.priority = 3
            try manager.endUndoGrouping()
            try context.undo()
            #expect(note.title == "1" && note.priority == 1)
            #expect(throws: UndoError.noOpenGroup) { try manager.registerUndo(withTarget: manager) { _ in } }
        }
    }

    @Test("levelsOfUndo keeps only the newest groups")
    func levels() async throws {
        let coordinator = try await ContextReference.inMemory()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let manager = UndoManager()
        manager.levelsOfUndo = 2
        try await context.perform { context in
            context.undoManager = manager
            let note = Note()
            try context.insert(note)
            for title in ["a", "b", "c", "d"] {
                try context.processPendingChanges()
                note.title = title
            }
            try context.undo()
            try context.undo()
            #expect(note.title == "b" && !manager.canUndo)
            // The steps the manager let go of are dropped by the context too.
            try context.processPendingChanges()
        }
    }

    @Test("changes made while registration is disabled are not undoable")
    func disabledRegistration() async throws {
        let coordinator = try await ContextReference.inMemory()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let manager = UndoManager()
        try await context.perform { context in
            context.undoManager = manager
            let note = Note()
            try context.insert(note)
            try context.processPendingChanges()
            note.title = "recorded"
            manager.disableUndoRegistration()
            manager.disableUndoRegistration()
            #expect(!manager.isUndoRegistrationEnabled)
            note.priority = 4
            manager.enableUndoRegistration()
            note.body = "still off"
            manager.enableUndoRegistration()
            #expect(manager.isUndoRegistrationEnabled)
            try context.processPendingChanges()
            try context.undo()
            #expect(note.title == "" && note.priority == 4 && note.body == "still off")
            manager.enableUndoRegistration()   // unbalanced: nothing happens
            #expect(manager.isUndoRegistrationEnabled)
        }
    }

    @Test("actions registered with a target run on undo and register their redo; removeAllActions(withTarget:) drops them")
    func userActions() async throws {
        final class Counter: Sendable {
            let value = Locked(0)
        }
        let manager = UndoManager()
        let counter = Counter()
        @Sendable func increment(_ counter: Counter) {
            counter.value.withLock { $0 += 1 }
            try? manager.registerUndo(withTarget: counter) { counter in
                counter.value.withLock { $0 -= 1 }
                try? manager.registerUndo(withTarget: counter, handler: increment)
            }
        }
        increment(counter)
        manager.endEvent()
        #expect(counter.value.withLock { $0 } == 1 && manager.canUndo)
        try manager.undo()
        #expect(counter.value.withLock { $0 } == 0 && manager.canRedo)
        try manager.redo()
        #expect(counter.value.withLock { $0 } == 1 && manager.canUndo)
        manager.removeAllActions(withTarget: counter)
        #expect(!manager.canUndo && !manager.canRedo)
    }

    // MARK: What a context records

    @Test("to-one and to-many changes are undone on both sides")
    func relationships() async throws {
        let coordinator = try await ContextReference.inMemory()
        let (folderID, ids) = try await Self.seed(["a", "b"], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            context.undoManager = UndoManager()
            let inbox = try context.existingObject(with: folderID) as! Folder
            let a = try context.existingObject(with: ids[0]) as! Note
            let b = try context.existingObject(with: ids[1]) as! Note
            let archive = Folder()
            archive.name = "Archive"
            try context.insert(archive)
            let tag = Tag()
            tag.label = "swift"
            try context.insert(tag)
            try context.processPendingChanges()
            a.folder = archive
            b.tags = [tag]
            try context.processPendingChanges()
            #expect(inbox.notes == [b] && archive.notes == [a] && tag.notes == [b])
            try context.undo()
            #expect(a.folder === inbox && inbox.notes == [a, b] && archive.notes.isEmpty)
            #expect(b.tags.isEmpty && tag.notes.isEmpty)
            try context.redo()
            #expect(a.folder === archive && inbox.notes == [b] && archive.notes == [a] && tag.notes == [b])
            // The inserts of the folder and the tag, undone: they leave, and the notes are
            // back as stored.
            try context.undo()
            try context.undo()
            #expect(!archive.isInserted && archive.owner == nil && !tag.isInserted)
            let holds263 = context.insertedObjects.isEmpty && !context.hasChanges
            #expect(holds263)
            #expect(a.folder === inbox && inbox.notes == [a, b])
        }
    }

    @Test("an insert undone leaves the context; redone, it is inserted again under its ID with its values")
    func insertUndoRedo() async throws {
        let coordinator = try await ContextReference.inMemory()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            context.undoManager = UndoManager()
            let note = Note()
            note.title = "new"
            try context.insert(note)
            let id = note.objectID
            try context.undo()
            let holds279 = !note.isInserted && context.registeredObject(for: id) == nil && !context.hasChanges
            #expect(holds279)
            try context.redo()
            let holds281 = note.isInserted && context.registeredObject(for: id) === note && note.title == "new"
            #expect(holds281)
            try context.save()
        }
        #expect(try await Self.storedTitles(on: coordinator) == ["new"])
    }

    @Test("a cascading delete is one step: undo brings back the folder and its notes with their relationships")
    func cascadeDelete() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let (folderID, ids) = try await Self.seed(["a", "b", "c"], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            context.undoManager = UndoManager()
            let folder = try context.existingObject(with: folderID) as! Folder
            try context.delete(folder)
        }
        try await context.perform { context in
            let folder = try context.existingObject(with: folderID) as! Folder
            let holds300 = context.deletedObjects.count == 4
            #expect(holds300)
            try context.undo()
            let holds302 = !folder.isDeleted && context.deletedObjects.isEmpty && !context.hasChanges
            #expect(holds302)
            let notes = try ids.map { try context.existingObject(with: $0) as! Note }
            #expect(notes.allSatisfy { !$0.isDeleted && $0.folder === folder } && folder.notes.count == 3)
            try context.redo()
            #expect(folder.isDeleted && notes.allSatisfy(\.isDeleted))
            try context.undo()
            try context.save()
        }
        #expect(try await ContextReference.storedCounts(on: coordinator) == (3, 1))
    }

    @Test("undo after a save makes the objects dirty again with their earlier values, which the next save stores")
    func undoAfterSave() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let (_, ids) = try await Self.seed(["a"], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            context.undoManager = UndoManager()
            let note = try context.existingObject(with: ids[0]) as! Note
            note.title = "b"
            try context.save()
            let holds324 = !context.hasChanges
            #expect(holds324)
            try context.undo()
            let holds326 = note.title == "a" && note.isUpdated && context.updatedObjects.contains(note)
            #expect(holds326)
            let committed = try note.committedValues(forKeys: ["title"])["title"] as? String
            #expect(committed == "b")
            try context.save()
        }
        #expect(try await Self.storedTitles(on: coordinator) == ["a"])
        // A fault (refreshed since) is read before its step is applied.
        try await context.perform { context in
            let note = try context.existingObject(with: ids[0]) as! Note
            try context.refresh(note, mergeChanges: false)
            #expect(note.isFault)
            try context.redo()
            #expect(note.title == "b" && note.hasChanges)
        }
    }

    @Test("an insert saved and undone is deleted at the next save; a saved deletion undone stores the object again under its ID")
    func savedInsertsAndDeletions() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let (folderID, ids) = try await Self.seed(["a", "b"], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let newID = try await context.perform { context in
            context.undoManager = UndoManager()
            let folder = try context.existingObject(with: folderID) as! Folder
            let note = Note()
            note.title = "c"
            try context.insert(note)
            note.folder = folder
            try context.save()
            try context.undo()
            #expect(note.isDeleted && !folder.notes.contains(note))
            try context.save()
            return note.objectID
        }
        #expect(try await Self.storedTitles(on: coordinator) == ["a", "b"])
        try await context.perform { context in
            try context.redo()   // the insert again: under the ID it had
            try context.save()
            let note = try context.existingObject(with: newID) as! Note
            #expect(note.title == "c")
            let a = try context.existingObject(with: ids[0]) as! Note
            try context.delete(a)
            try context.save()
            try context.undo()
            #expect(a.isInserted && a.objectID == ids[0] && a.title == "a")
            try context.save()
        }
        #expect(try await Self.storedTitles(on: coordinator) == ["a", "b", "c"])
        let folderNotes = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let folder = try context.existingObject(with: folderID) as! Folder
            return folder.notes.map(\.title).sorted()
        }
        #expect(folderNotes == ["a", "b", "c"])
    }

    @Test("a child's save into its parent is one step of the parent")
    func childSaveIsAStep() async throws {
        let coordinator = try await ContextReference.inMemory()
        let (folderID, ids) = try await Self.seed(["a"], on: coordinator)
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        await parent.perform { parent in parent.undoManager = UndoManager() }
        let child = ManagedObjectContext(.privateQueue, parent: parent)
        try await child.perform { child in
            let note = try child.existingObject(with: ids[0]) as! Note
            note.title = "from child"
            let added = Note()
            added.title = "added"
            try child.insert(added)
            added.folder = try child.existingObject(with: folderID) as? Folder
            try child.save()
        }
        try await parent.perform { parent in
            let note = try parent.existingObject(with: ids[0]) as! Note
            let folder = try parent.existingObject(with: folderID) as! Folder
            let holds401 = note.title == "from child" && parent.insertedObjects.count == 1 && folder.notes.count == 2
            #expect(holds401)
            try parent.undo()
            let holds403 = note.title == "a" && parent.insertedObjects.isEmpty && folder.notes == [note] && !parent.hasChanges
            #expect(holds403)
            try parent.redo()
            let holds405 = note.title == "from child" && parent.insertedObjects.count == 1 && folder.notes.count == 2
            #expect(holds405)
        }
    }

    @Test("rollback and reset empty the stacks")
    func rollbackAndReset() async throws {
        let coordinator = try await ContextReference.inMemory()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let manager = UndoManager()
        try await context.perform { context in
            context.undoManager = manager
            try context.insert(Note())
            try context.processPendingChanges()
            #expect(manager.canUndo)
            context.rollback()
            #expect(!manager.canUndo && !manager.canRedo)
            try context.insert(Note())
            try context.undo()
            #expect(manager.canRedo)
            context.reset()
            #expect(!manager.canUndo && !manager.canRedo)
        }
    }

    @Test("ObjectsDidChange reports what an undo changed")
    func undoNotifies() async throws {
        let coordinator = try await ContextReference.inMemory()
        let (_, ids) = try await Self.seed(["a"], on: coordinator)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            context.undoManager = UndoManager()
            let note = try context.existingObject(with: ids[0]) as! Note
            note.title = "b"
        }
        let stream = context.notifications(of: [.objectsDidChange])
        try await context.perform { context in try context.undo() }
        for await notification in stream {
            #expect(notification.updatedObjectIDs == [ids[0]])
            break
        }
    }

    // MARK: Several contexts

    @Test("a manager's groups run only where their context runs: elsewhere undo throws and changes nothing")
    func otherContextsStep() async throws {
        let coordinator = try await ContextReference.inMemory()
        let manager = UndoManager()
        let a = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "a")
        let b = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "b")
        try await a.perform { a in
            a.undoManager = manager
            try a.insert(Note())
        }
        await b.perform { b in
            b.undoManager = manager
            #expect(throws: UndoError.notOnContext("a")) { try b.undo() }
        }
        #expect(throws: UndoError.notOnContext("a")) { try manager.undo() }
        let inserted = try await a.perform { a in
            try a.undo()
            return a.insertedObjects.count
        }
        #expect(inserted == 0 && manager.canRedo)
    }

    @Test("main-queue contexts share one manager: a group spanning both is undone and redone at once")
    func sharedOnMainQueue() async throws {
        let coordinator = try await ContextReference.inMemory()
        let (_, ids) = try await Self.seed(["a", "b"], on: coordinator)
        let manager = UndoManager()
        let first = ManagedObjectContext(.mainQueue, coordinator: coordinator, name: "first")
        let second = ManagedObjectContext(.mainQueue, coordinator: coordinator, name: "second")
        await first.perform { first in first.undoManager = manager }
        await second.perform { second in second.undoManager = manager }
        try await first.perform { first in
            manager.beginUndoGrouping()
            (try first.existingObject(with: ids[0]) as! Note).title = "A"
        }
        try await second.perform { second in
            (try second.existingObject(with: ids[1]) as! Note).title = "B"
            try manager.endUndoGrouping()
        }
        try await first.perform { first in
            try first.undo()   // the main thread runs both contexts
            #expect((try first.existingObject(with: ids[0]) as! Note).title == "a")
        }
        try await second.perform { second in
            #expect((try second.existingObject(with: ids[1]) as! Note).title == "b")
            try second.redo()
            #expect((try second.existingObject(with: ids[1]) as! Note).title == "B")
        }
        let title = try await first.perform { first in (try first.existingObject(with: ids[0]) as! Note).title }
        #expect(title == "A")
    }

    @Test("contexts with managers of their own undo concurrently without affecting each other")
    func concurrentContexts() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let (_, ids) = try await Self.seed((0..<8).map { "n\($0)" }, on: coordinator)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, id) in ids.enumerated() {
                group.addTask {
                    let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "c\(index)")
                    await context.perform { context in context.undoManager = UndoManager() }
                    for round in 0..<20 {
                        try await context.perform { context in
                            let note = try context.existingObject(with: id) as! Note
                            note.title = "n\(index)-\(round)"
                        }
                    }
                    for _ in 0..<19 {
                        try await context.perform { context in try context.undo() }
                    }
                    try await context.perform { context in
                        let note = try context.existingObject(with: id) as! Note
                        #expect(note.title == "n\(index)-0")
                        try context.undo()
                        let holds494 = note.title == "n\(index)" && !context.hasChanges
                        #expect(holds494)
                        try context.redo()
                        try context.save()
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(try await Self.storedTitles(on: coordinator) == (0..<8).map { "n\($0)-0" })
    }
}

/// A value behind a lock, for test closures.
final class Locked<Value: Sendable>: @unchecked Sendable {   // @unchecked because every access holds `lock`
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<T>(_ body: (inout Value) -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}
