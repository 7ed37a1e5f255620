import Foundation
@testable import Strata
import StrataTesting
import Testing

/// Parent–child contexts (issue 6): saving "one store up", reads through the parent,
/// one identity per object across the tree, discardable edits and automatic merging.
@Suite("Context parent and child")
struct ContextParentChildTests {
    /// Root (private, on the coordinator) → middle (main queue) → leaf (private).
    struct Chain {
        let coordinator: PersistentStoreCoordinator
        let root: ManagedObjectContext
        let middle: ManagedObjectContext
        let leaf: ManagedObjectContext

        init(_ coordinator: PersistentStoreCoordinator) {
            self.coordinator = coordinator
            root = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "root")
            middle = ManagedObjectContext(.mainQueue, parent: root, name: "middle")
            leaf = ManagedObjectContext(.privateQueue, parent: middle, name: "leaf")
        }
    }

    /// The title of `id` and whether the context has it as inserted, updated, deleted.
    static func state(of id: ManagedObjectID, in context: ManagedObjectContext) async -> (title: String?, changes: String) {
        await context.perform { context in
            guard let note = context.registeredObject(for: id) as? Note ?? (try? context.existingObject(with: id)) as? Note else {
                return (nil, "absent")
            }
            let changes = note.isInserted ? "inserted" : note.isDeleted ? "deleted" : note.isUpdated ? "updated" : "clean"
            return (note.isDeleted ? nil : note.title, changes)
        }
    }

    @Test("a three-level chain (private root, main middle, private leaf): each save moves the change one store up, and after the root's save every level knows the permanent ID")
    func threeLevelChain() async throws {
        let directory = TemporaryDirectory()
        let chain = Chain(try await ContextReference.lmdb(in: directory.url))
        #expect(chain.leaf.parent === chain.middle && chain.middle.parent === chain.root && chain.root.parent == nil)
        #expect(chain.leaf.persistentStoreCoordinator === chain.coordinator)

        let temporary = try await chain.leaf.perform { leaf in
            let folder = Folder()
            folder.name = "Inbox"
            let note = Note()
            note.title = "draft"
            note.folder = folder
            try leaf.insert(note)
            try leaf.save()
            #expect(!leaf.hasChanges && note.objectID.isTemporaryID)
            return note.objectID
        }
        #expect(await Self.state(of: temporary, in: chain.middle) == ("draft", "inserted"))
        #expect(await Self.state(of: temporary, in: chain.root) == (nil, "absent"))
        #expect(try await ContextReference.storedCounts(on: chain.coordinator) == (0, 0))

        try await chain.middle.perform { try $0.save() }
        #expect(await Self.state(of: temporary, in: chain.middle) == ("draft", "clean"))
        #expect(await Self.state(of: temporary, in: chain.root) == ("draft", "inserted"))
        #expect(try await ContextReference.storedCounts(on: chain.coordinator) == (0, 0))

        let permanent = try await chain.root.perform { root in
            try root.save()
            let note = root.registeredObject(for: temporary)
            return try #require(note).objectID
        }
        #expect(!permanent.isTemporaryID)
        #expect(try await ContextReference.storedCounts(on: chain.coordinator) == (1, 1))
        for context in [chain.root, chain.middle, chain.leaf] {
            let ids = await context.perform { context in
                let byTemporary = context.object(with: temporary)
                let byPermanent = context.object(with: permanent)
                let folder = (byTemporary as? Note)?.folder
                return (byTemporary === byPermanent, byTemporary.objectID, folder?.objectID.isTemporaryID, (byPermanent as? Note)?.title)
            }
            #expect(ids.0 && ids.1 == permanent && ids.2 == false && ids.3 == "draft")
        }

        // An update travels the same way, and the store sees it only at the root.
        try await chain.leaf.perform { leaf in
            let note = try #require(leaf.registeredObject(for: permanent) as? Note)
            note.title = "final"
            try leaf.save()
        }
        #expect(await Self.state(of: permanent, in: chain.middle) == ("final", "updated"))
        #expect(await Self.state(of: permanent, in: chain.root) == ("draft", "clean"))
        try await chain.middle.perform { try $0.save() }
        #expect(await Self.state(of: permanent, in: chain.root) == ("final", "updated"))
        try await chain.root.perform { try $0.save() }
        let stored = try await ManagedObjectContext(.privateQueue, coordinator: chain.coordinator).perform { context in
            (try context.existingObject(with: permanent) as? Note)?.title
        }
        #expect(stored == "final")

        // And a deletion.
        try await chain.leaf.perform { leaf in
            try leaf.delete(leaf.object(with: permanent))
            try leaf.save()
        }
        #expect(await Self.state(of: permanent, in: chain.middle).changes == "deleted")
        #expect(await Self.state(of: permanent, in: chain.root) == ("final", "clean"))
        try await chain.middle.perform { try $0.save() }
        try await chain.root.perform { try $0.save() }
        #expect(try await ContextReference.storedCounts(on: chain.coordinator) == (0, 1))
    }

    @Test("a child's fetch and count see the parent's unsaved inserts, changes and deletions, then the store, with the child's own changes on top")
    func fetchSemanticsThroughTheChain() async throws {
        let coordinator = try await ContextReference.inMemory()
        let ids = try await ContextReference.saveNotes([("a", 1), ("b", 2), ("c", 3), ("d", 4)], on: coordinator)
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "parent")
        let child = ManagedObjectContext(.privateQueue, parent: parent, name: "child")
        try await parent.perform { parent in
            let inserted = Note()
            inserted.title = "p-new"
            inserted.priority = 5
            try parent.insert(inserted)
            try #require(try parent.existingObject(with: ids[0]) as? Note).priority = 5   // now matches
            try parent.delete(try parent.existingObject(with: ids[3]))                    // gone for the child
            try #require(try parent.existingObject(with: ids[1]) as? Note).title = "b2"
        }
        let (titles, count, all, limited, childState) = try await child.perform { child in
            let high = try ContextReference.notes("priority >= 3")
            let titles = try child.fetch(high).map(\.title)
            let count = try child.count(for: high)
            // The child's own change on top: c leaves the match, a new child insert joins.
            try #require(try child.existingObject(with: ids[2]) as? Note).priority = 0
            let mine = Note()
            mine.title = "c-new"
            mine.priority = 4
            try child.insert(mine)
            let all = try child.fetch(high).map(\.title)
            var limit = try ContextReference.notes()
            limit.fetchLimit = 2
            limit.fetchOffset = 1
            let limited = try child.fetch(limit).map(\.title)
            let ids = try child.fetch(FetchRequest<ManagedObjectID>(entityName: "Note").with(\.resultType, .managedObjectID))
            return (titles, count, all, limited, ids.count)
        }
        #expect(titles == ["a", "c", "p-new"])
        #expect(count == 3)
        #expect(all == ["a", "c-new", "p-new"])
        #expect(limited == ["b2", "c"])
        #expect(childState == 5)   // a, b2, c, p-new, c-new
        // The parent never pulls the child's unsaved changes.
        let parentTitles = try await parent.perform { try $0.fetch(ContextReference.notes()).map(\.title) }
        #expect(parentTitles == ["a", "b2", "c", "p-new"])
    }

    @Test("a fault in a child fires with the parent's unsaved values, also for an object the parent inserted (temporary ID)")
    func faultsReadThroughTheParent() async throws {
        let coordinator = try await ContextReference.inMemory()
        let ids = try await ContextReference.saveNotes([("stored", 1)], on: coordinator)
        let parent = ManagedObjectContext(.mainQueue, coordinator: coordinator, name: "parent")
        let child = ManagedObjectContext(.privateQueue, parent: parent, name: "child")
        let inserted = try await parent.perform { parent in
            try #require(try parent.existingObject(with: ids[0]) as? Note).title = "edited in parent"
            let note = Note()
            note.title = "new in parent"
            try parent.insert(note)
            return note.objectID
        }
        let titles = try await child.perform { child in
            let stored = try #require(child.object(with: ids[0]) as? Note)
            let new = try #require(child.object(with: inserted) as? Note)
            #expect(stored.isFault && new.isFault)
            return [stored.title, new.title]
        }
        #expect(titles == ["edited in parent", "new in parent"])
    }

    @Test("a save only applies what the child changed: a property the parent changed meanwhile keeps the parent's value")
    func childSaveAppliesOnlyItsChanges() async throws {
        let coordinator = try await ContextReference.inMemory()
        let ids = try await ContextReference.saveNotes([("t", 1)], on: coordinator)
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let child = ManagedObjectContext(.privateQueue, parent: parent)
        try await child.perform { child in
            try #require(try child.existingObject(with: ids[0]) as? Note).title = "child title"
        }
        try await parent.perform { parent in
            try #require(try parent.existingObject(with: ids[0]) as? Note).priority = 4
        }
        try await child.perform { try $0.save() }
        let values = try await parent.perform { parent in
            let note = try #require(try parent.existingObject(with: ids[0]) as? Note)
            return (note.title, note.priority)
        }
        #expect(values == ("child title", 4))
    }

    @Test("moving a note between folders in a child keeps both folders' inverses right in the parent and, after the root's save, in the store")
    func relationshipChangesCrossTheChain() async throws {
        let coordinator = try await ContextReference.inMemory()
        let seeder = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let (note, from, to) = try await seeder.perform { context in
            let from = Folder(), to = Folder()
            from.name = "from"
            to.name = "to"
            let note = Note()
            note.folder = from
            try context.insert(note)
            try context.insert(to)
            try context.save()
            return (note.objectID, from.objectID, to.objectID)
        }
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let child = ManagedObjectContext(.privateQueue, parent: parent)
        try await child.perform { child in
            let object = try #require(try child.existingObject(with: note) as? Note)
            object.folder = try #require(try child.existingObject(with: to) as? Folder)
            try child.save()
        }
        func counts(_ context: ManagedObjectContext) async throws -> [Int] {
            try await context.perform { context in
                let from = try #require(try context.existingObject(with: from) as? Folder)
                let to = try #require(try context.existingObject(with: to) as? Folder)
                let note = try #require(try context.existingObject(with: note) as? Note)
                return [from.notes.count, to.notes.count, note.folder === to ? 1 : 0]
            }
        }
        #expect(try await counts(parent) == [0, 1, 1])
        try await parent.perform { try $0.save() }
        #expect(try await counts(ManagedObjectContext(.privateQueue, coordinator: coordinator)) == [0, 1, 1])
    }

    @Test("discardable edits: a child rolled back, or dropped without saving, leaves the parent exactly as it was")
    func discardableEdits() async throws {
        let coordinator = try await ContextReference.inMemory()
        let ids = try await ContextReference.saveNotes([("keep", 1)], on: coordinator)
        let parent = ManagedObjectContext(.mainQueue, coordinator: coordinator)
        var editor: ManagedObjectContext? = ManagedObjectContext(.privateQueue, parent: parent, name: "inspector")
        try await editor?.perform { editor in
            try #require(try editor.existingObject(with: ids[0]) as? Note).title = "scratch"
            try editor.insert(Note())
            try editor.delete(try editor.existingObject(with: ids[0]))
            editor.rollback()
            let hasChanges = editor.hasChanges
            #expect(!hasChanges)
            try editor.save()
        }
        try await editor?.perform { editor in
            try #require(try editor.existingObject(with: ids[0]) as? Note).title = "unsaved"
            try editor.insert(Note())
        }
        editor = nil
        let state = try await parent.perform { parent in
            (parent.hasChanges, try parent.fetch(ContextReference.notes()).map(\.title), parent.registeredObjects.count)
        }
        #expect(state.0 == false && state.1 == ["keep"])
        #expect(parent.parent == nil)
    }

    @Test("eight children of one parent save at once: every insert arrives in the parent, none in the store until it saves")
    func concurrentSiblingSaves() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "parent")
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<8 {
                let child = ManagedObjectContext(worker % 2 == 0 ? .privateQueue : .mainQueue, parent: parent, name: "child \(worker)")
                group.addTask {
                    for round in 0..<5 {
                        try await child.perform { child in
                            for item in 0..<5 {
                                let note = Note()
                                note.title = "w\(worker)-r\(round)-i\(item)"
                                try child.insert(note)
                            }
                            try child.save()
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        let inserted = await parent.perform { parent in parent.insertedObjects.count }
        #expect(inserted == 200)
        #expect(try await ContextReference.storedCounts(on: coordinator) == (0, 0))
        try await parent.perform { try $0.save() }
        #expect(try await ContextReference.storedCounts(on: coordinator) == (200, 0))
    }

    @Test("a child's save that changes an object the parent deleted fails with a conflict; nothing moves and the child keeps its changes")
    func saveIntoDeletedParentObjectConflicts() async throws {
        let coordinator = try await ContextReference.inMemory()
        let ids = try await ContextReference.saveNotes([("a", 1), ("b", 1)], on: coordinator)
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let child = ManagedObjectContext(.privateQueue, parent: parent)
        try await child.perform { child in
            try #require(try child.existingObject(with: ids[0]) as? Note).title = "a2"
            try #require(try child.existingObject(with: ids[1]) as? Note).title = "b2"
        }
        try await parent.perform { parent in try parent.delete(try parent.existingObject(with: ids[0])) }
        let failure = try await child.perform { child in
            var error: StrataError?
            do { try child.save() } catch let failure as StrataError { error = failure }
            return (error, child.hasChanges)
        }
        guard let error = failure.0, error.code == .mergeConflicts else {
            Issue.record("expected a merge conflict, got \(String(describing: failure.0))")
            return
        }
        #expect(error.conflicts.map(\.objectID) == [ids[0]] && failure.1)
        #expect(await Self.state(of: ids[1], in: parent) == ("b", "clean"))
    }

    @Test("a child's change or deletion based on a row that changed in the store since the child read it fails the child's save with a conflict, instead of overwriting the newer row at the root's save (a lost update)")
    func childSaveBasedOnAStaleRowConflicts() async throws {
        // child:  reads a, b (version 1), sets a.title, deletes b      saves: conflict
        // other:                              sets a, b; saves (v2)
        // parent: has neither registered, so it would read version 2 when the save arrives
        let coordinator = try await ContextReference.inMemory()
        let ids = try await ContextReference.saveNotes([("a", 1), ("b", 1)], on: coordinator)
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let child = ManagedObjectContext(.privateQueue, parent: parent)
        try await child.perform { child in
            try #require(try child.existingObject(with: ids[0]) as? Note).title = "a from the child"
            try child.delete(try child.existingObject(with: ids[1]))
        }
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { other in
            try #require(try other.existingObject(with: ids[0]) as? Note).title = "a from another context"
            try #require(try other.existingObject(with: ids[1]) as? Note).title = "b from another context"
            try other.save()
        }
        let failure = try await child.perform { child in
            var error: StrataError?
            do { try child.save() } catch let failure as StrataError { error = failure }
            return (error, child.hasChanges)
        }
        guard let error = failure.0, error.code == .mergeConflicts else {
            Issue.record("expected a merge conflict, got \(String(describing: failure.0))")
            return
        }
        #expect(Set(error.conflicts.map(\.objectID)) == Set(ids) && failure.1)
        #expect(await parent.perform { $0.hasChanges } == false)
        #expect(await Self.state(of: ids[0], in: parent) == ("a from another context", "clean"))
    }

    @Test("a child saving the same object again after its parent saved it (a newer row version, with the values the child sent) does not conflict")
    func childSavesAgainAfterTheParentSaved() async throws {
        let coordinator = try await ContextReference.inMemory()
        let ids = try await ContextReference.saveNotes([("a", 1)], on: coordinator)
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let child = ManagedObjectContext(.privateQueue, parent: parent)
        for title in ["one", "two", "three"] {
            try await child.perform { child in
                child.retainsRegisteredObjects = true   // the child keeps the version it read first
                try #require(try child.existingObject(with: ids[0]) as? Note).title = title
                try child.save()
            }
            try await parent.perform { try $0.save() }
            #expect(await Self.state(of: ids[0], in: ManagedObjectContext(.privateQueue, coordinator: coordinator)) == (title, "clean"))
        }
    }

    @Test("a child's save validates first: an invalid object fails the save and the parent receives nothing")
    func childSaveValidates() async throws {
        let coordinator = try await ContextReference.inMemory()
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let child = ManagedObjectContext(.privateQueue, parent: parent)
        let failed = try await child.perform { child in
            let note = Note()
            note.priority = 9
            try child.insert(note)
            do { try child.save() } catch StrataError.Code.validation { return true }
            return false
        }
        #expect(failed)
        #expect(await parent.perform { $0.hasChanges } == false)
    }

    @Test("obtainPermanentIDs in a child asks the coordinator; the object keeps that ID in the parent and in the store")
    func obtainPermanentIDsInAChild() async throws {
        let coordinator = try await ContextReference.inMemory()
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let child = ManagedObjectContext(.mainQueue, parent: parent)
        let id = try await child.perform { child in
            let note = Note()
            note.title = "early"
            try child.insert(note)
            try child.obtainPermanentIDs(for: [note])
            #expect(!note.objectID.isTemporaryID && note.isInserted)
            try child.save()
            return note.objectID
        }
        try await parent.perform { parent in
            let registered = parent.registeredObject(for: id)
            let note = try #require(registered)
            #expect(note.isInserted)
            try parent.save()
            #expect(note.objectID == id)
        }
        #expect(await Self.state(of: id, in: ManagedObjectContext(.privateQueue, coordinator: coordinator)) == ("early", "clean"))
    }

    @Test("automaticallyMergesChangesFromParent: a sibling's save into the parent, and the parent's save to the store, reach a child that merges (refreshed, faulted in, deleted) and not one that does not")
    func automaticMerging() async throws {
        let coordinator = try await ContextReference.inMemory()
        let ids = try await ContextReference.saveNotes([("one", 1), ("two", 1)], on: coordinator)
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "parent")
        let merging = ManagedObjectContext(.mainQueue, parent: parent, name: "merging")
        let plain = ManagedObjectContext(.privateQueue, parent: parent, name: "plain")
        let writer = ManagedObjectContext(.privateQueue, parent: parent, name: "writer")
        for context in [merging, plain] {
            try await context.perform { context in
                context.automaticallyMergesChangesFromParent = context === merging
                context.retainsRegisteredObjects = true
                _ = try context.fetch(ContextReference.notes())
            }
        }
        let inserted = try await writer.perform { writer in
            try #require(try writer.existingObject(with: ids[0]) as? Note).title = "one, edited"
            try writer.delete(try writer.existingObject(with: ids[1]))
            let note = Note()
            note.title = "three"
            try writer.insert(note)
            try writer.save()
            return note.objectID
        }
        func look(_ context: ManagedObjectContext) async -> [String] {
            await context.perform { context in
                let one = (context.registeredObject(for: ids[0]) as? Note)?.title ?? "-"
                let two = (context.registeredObject(for: ids[1])).map { $0.isDeleted || $0.managedObjectContextIsNil ? "gone" : "here" } ?? "gone"
                let three = (context.registeredObject(for: inserted) as? Note)?.title ?? "-"
                return [one, two, three]
            }
        }
        #expect(await look(merging) == ["one, edited", "gone", "three"])
        #expect(await look(plain) == ["one", "here", "-"])

        // The parent's own save to the store reaches the merging child too.
        try await parent.perform { parent in
            try #require(try parent.existingObject(with: ids[0]) as? Note).title = "one, saved"
            try parent.save()
        }
        #expect(await look(merging)[0] == "one, saved")
        #expect(await look(plain)[0] == "one")
    }

    @Test("a root context that merges automatically brings in the saves of the other contexts of its coordinator")
    func rootContextsMergeCoordinatorSaves() async throws {
        let coordinator = try await ContextReference.inMemory()
        let ids = try await ContextReference.saveNotes([("before", 1)], on: coordinator)
        let view = ManagedObjectContext(.mainQueue, coordinator: coordinator, name: "view")
        try await view.perform { view in
            view.automaticallyMergesChangesFromParent = true
            view.retainsRegisteredObjects = true
            _ = try view.existingObject(with: ids[0])
        }
        try await ContextReference.update(ids[0], on: coordinator) { $0.title = "after" }
        let title = await view.perform { ($0.registeredObject(for: ids[0]) as? Note)?.title }
        #expect(title == "after")
    }

    @Test("configuration: a child's coordinator is its root's; a second parent, a coordinator on a child, a parent for a root, and cycles are refused with a typed error")
    func configurationErrors() async throws {
        let coordinator = try await ContextReference.inMemory()
        let other = try await ContextReference.inMemory()
        let root = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let child = ManagedObjectContext(.privateQueue, parent: root)
        #expect(child.persistentStoreCoordinator === coordinator)
        #expect(throws: StrataError.self) { try child.setPersistentStoreCoordinator(other) }
        #expect(throws: StrataError.self) { try root.setParent(child) }
        let late = ManagedObjectContext(.privateQueue, name: "late")
        #expect(late.persistentStoreCoordinator == nil)
        try late.setParent(child)
        try late.setParent(child)   // the same again: nothing happens
        #expect(late.parent === child && late.persistentStoreCoordinator === coordinator)
        #expect(throws: StrataError.self) { try late.setParent(root) }
        let loop = ManagedObjectContext(.privateQueue)
        #expect(throws: StrataError.self) { try loop.setParent(loop) }
        // A chain whose root has no coordinator yet: reads say so.
        let orphanRoot = ManagedObjectContext(.privateQueue)
        let orphan = ManagedObjectContext(.privateQueue, parent: orphanRoot)
        let error = await orphan.perform { orphan in
            #expect(throws: StrataError.self) { try orphan.fetch(FetchRequest<Note>()) }
        }
        _ = error
    }
}

extension FetchRequest {
    /// The request with `keyPath` set to `value`.
    func with<Value>(_ keyPath: WritableKeyPath<Self, Value>, _ value: Value) -> Self {
        var copy = self
        copy[keyPath: keyPath] = value
        return copy
    }
}

extension ManagedObject {
    /// Whether the object left its context (a merged deletion).
    var managedObjectContextIsNil: Bool { owner == nil }
}
