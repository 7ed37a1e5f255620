import Foundation
@testable import Strata
import StrataTesting
import Testing

/// A root context takes a child's change to an object it has not read without reading the
/// object (issue 20: a hop costs half a root save): it checks the row's stored version only,
/// and holds the change in a fault that reads its other values when something reads them.
/// Everything a user sees is as if the parent had read the object when the change came.
@Suite("Context unread changes from a child")
struct ContextUnreadChangeTests {
    /// Notes "a" (priority 1) and "b" (priority 2) saved; a parent (root) and a child of it;
    /// the child sets a's priority to 4 and saves into the parent.
    struct Hop {
        let coordinator: PersistentStoreCoordinator
        let ids: [ManagedObjectID]
        let parent: ManagedObjectContext
        let child: ManagedObjectContext

        init(directory: URL) async throws {
            coordinator = try await ContextReference.lmdb(in: directory)
            ids = try await ContextReference.saveNotes([("a", 1), ("b", 2)], on: coordinator)
            let ids = ids
            try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
                for (index, id) in ids.enumerated() { try #require(try context.existingObject(with: id) as? Note).body = "body \(index)" }
                try context.save()
            }
            parent = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "parent")
            child = ManagedObjectContext(.privateQueue, parent: parent, name: "child")
            try await child.perform { child in
                try #require(try child.existingObject(with: ids[0]) as? Note).priority = 4
                try child.save()
            }
        }

        /// Another writer: `body` in a new context on the same store, then its save.
        func saveElsewhere(_ body: @Sendable (isolated ManagedObjectContext) throws -> Void) async throws {
            try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { other in
                try body(other)
                try other.save()
            }
        }

        /// Whether the parent holds a's change unread (the path under test was taken).
        func parentHoldsUnread() async -> Bool {
            let id = ids[0]
            return await parent.perform { $0.registeredObject(for: id)?.holdsUnreadChanges == true }
        }

        /// a's (title, priority, body) as a new context reads them from the store.
        func stored(_ index: Int = 0) async throws -> (String, Int16, String?) {
            let id = ids[index]
            return try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
                let note = try #require(try context.existingObject(with: id) as? Note)
                return (note.title, note.priority, note.body)
            }
        }
    }

    /// The conflicts `context`'s save fails with; nil (and an issue recorded) when it
    /// succeeds or fails otherwise.
    static func conflicts(saving context: ManagedObjectContext) async -> [MergeConflict]? {
        let failure = await context.perform { context -> StrataError? in
            do { try context.save() } catch let error as StrataError { return error } catch { return nil }
            return nil
        }
        guard let failure, failure.code == .mergeConflicts else {
            Issue.record("expected a merge conflict, got \(String(describing: failure))")
            return nil
        }
        return failure.conflicts
    }

    @Test("the parent holds the change unread, and reports it as a change: updated, not a fault, changed and committed values, the other values read on first access")
    func changeIsVisibleBeforeTheRead() async throws {
        let directory = TemporaryDirectory()
        let hop = try await Hop(directory: directory.url)
        #expect(await hop.parentHoldsUnread())
        let id = hop.ids[0]
        let seen = try await hop.parent.perform { parent in
            let registered = parent.registeredObject(for: id) as? Note
            let note = try #require(registered)
            let before = (note.isFault, note.isUpdated, parent.hasChanges, parent.updatedObjects.contains(note))
            let changed = note.changedValues()["priority"] as? Int16
            let committed = try note.committedValues(forKeys: ["priority", "title"])
            return (before, changed, committed["priority"] as? Int16, committed["title"] as? String, note.title, note.body, note.priority)
        }
        #expect(seen.0 == (false, true, true, true))
        #expect(seen.1 == 4 && seen.2 == 1 && seen.3 == "a")
        #expect(seen.4 == "a" && seen.5 == "body 0" && seen.6 == 4)
    }

    @Test("the parent's save writes the change over the stored values it never read, and only to the changed object")
    func parentSaveWritesTheChange() async throws {
        let directory = TemporaryDirectory()
        let hop = try await Hop(directory: directory.url)
        #expect(await hop.parentHoldsUnread())
        try await hop.parent.perform { parent in
            parent.retainsRegisteredObjects = true   // the saved object stays, to be looked at below
            try parent.save()
        }
        #expect(try await hop.stored(0) == ("a", 4, "body 0"))
        #expect(try await hop.stored(1) == ("b", 2, "body 1"))
        let id = hop.ids[0]
        let after = await hop.parent.perform { parent in
            let note = parent.registeredObject(for: id) as? Note
            return (parent.hasChanges, note?.isUpdated, note?.priority)
        }
        #expect(after == (false, false, 4))
    }

    @Test("a row changed in the store after the hop (another property) fails the parent's save with a conflict, as it did when the parent read the object at the hop")
    func storeChangedAfterTheHopConflicts() async throws {
        let directory = TemporaryDirectory()
        let hop = try await Hop(directory: directory.url)
        #expect(await hop.parentHoldsUnread())
        let ids = hop.ids
        try await hop.saveElsewhere { other in
            try #require(try other.existingObject(with: ids[0]) as? Note).body = "from another context"
        }
        let conflicts = try #require(await Self.conflicts(saving: hop.parent))
        #expect(conflicts.map(\.objectID) == [ids[0]])
        #expect(try await hop.stored(0) == ("a", 1, "from another context"))
        // The parent still has its change, and reads the newer stored values under it.
        let state = await hop.parent.perform { parent in
            let note = parent.registeredObject(for: ids[0]) as? Note
            return (parent.hasChanges, note?.priority, note?.body)
        }
        #expect(state == (true, 4, "from another context"))
    }

    @Test("a row deleted in the store after the hop: the object still reads the change (its other values the defaults) and is no deleted object; the parent's save fails with a conflict naming it, as when the parent read it at the hop")
    func rowDeletedAfterTheHopConflicts() async throws {
        let directory = TemporaryDirectory()
        let hop = try await Hop(directory: directory.url)
        #expect(await hop.parentHoldsUnread())
        let ids = hop.ids
        try await hop.saveElsewhere { other in
            try other.delete(try other.existingObject(with: ids[0]))
        }
        let read = try await hop.parent.perform { parent in
            let registered = parent.registeredObject(for: ids[0])
            let existing = try parent.existingObject(with: ids[0])   // not objectNotFound: the change is here
            let note = try #require(existing as? Note)
            #expect(existing === registered)
            return (note.priority, note.body, note.isDeleted, note.isUpdated, parent.deletedObjects.isEmpty)
        }
        #expect(read == (4, nil, false, true, true))
        let conflicts = try #require(await Self.conflicts(saving: hop.parent))
        #expect(conflicts.map(\.objectID) == [ids[0]] && conflicts.first?.newVersion == nil)
    }

    @Test("a child's change based on the parent's unsaved values, since rolled back, is not taken unread (the row's version is the same, its values are not): it conflicts")
    func changeBasedOnUnsavedParentValuesConflicts() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let ids = try await ContextReference.saveNotes([("a", 1)], on: coordinator)
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "parent")
        let child = ManagedObjectContext(.privateQueue, parent: parent, name: "child")
        try await parent.perform { parent in try #require(try parent.existingObject(with: ids[0]) as? Note).priority = 3 }
        try await child.perform { child in
            let note = try #require(try child.existingObject(with: ids[0]) as? Note)
            #expect(note.priority == 3)
            note.priority += 1
        }
        // The parent drops its change, and with it the object (nothing holds it now).
        let registered = await parent.perform { parent in
            parent.rollback()
            return parent.registeredObject(for: ids[0]) != nil
        }
        #expect(!registered)
        let conflicts = try #require(await Self.conflicts(saving: child))
        #expect(conflicts.map(\.objectID) == [ids[0]])
        #expect(conflicts.allSatisfy { $0.oldVersion < ObjectSnapshot.unsavedMark && ($0.newVersion ?? 0) < ObjectSnapshot.unsavedMark })
        #expect(await parent.perform { $0.hasChanges } == false)
    }

    @Test("refresh with mergeChanges keeps the change over the newer stored values and takes their version: the parent's save then goes through")
    func refreshMergingKeepsTheChange() async throws {
        let directory = TemporaryDirectory()
        let hop = try await Hop(directory: directory.url)
        let ids = hop.ids
        try await hop.saveElsewhere { other in
            try #require(try other.existingObject(with: ids[0]) as? Note).body = "from another context"
        }
        try await hop.parent.perform { parent in
            let registered = parent.registeredObject(for: ids[0])
            let note = try #require(registered)
            try parent.refresh(note, mergeChanges: true)
            #expect(note.hasChanges && !note.isFault)
            try parent.save()
        }
        #expect(try await hop.stored(0) == ("a", 4, "from another context"))
    }

    @Test("rollback, refresh without merging and reset drop the change: the object reads its stored values")
    func discardingDropsTheChange() async throws {
        let directory = TemporaryDirectory()
        for discard in ["rollback", "refresh", "reset"] {
            let hop = try await Hop(directory: URL(fileURLWithPath: directory.appending(discard)))
            #expect(await hop.parentHoldsUnread())
            let ids = hop.ids
            let state = try await hop.parent.perform { parent in
                let registered = parent.registeredObject(for: ids[0]) as? Note
                let note = try #require(registered)
                switch discard {
                case "rollback": parent.rollback()
                case "refresh": try parent.refresh(note, mergeChanges: false)
                default: parent.reset()
                }
                let reread = try #require(try parent.existingObject(with: ids[0]) as? Note)
                return (parent.hasChanges, reread.hasChanges, reread.priority, reread.body)
            }
            #expect(state == (false, false, 1, "body 0"), "\(discard)")
            try await hop.parent.perform { try $0.save() }
            #expect(try await hop.stored(0) == ("a", 1, "body 0"), "\(discard)")
        }
    }

    @Test("another child of the parent reads the change; the parent's fetch matches and sorts on it; a second child's change to the object applies on top")
    func otherReadersSeeTheChange() async throws {
        let directory = TemporaryDirectory()
        let hop = try await Hop(directory: directory.url)
        let ids = hop.ids
        let sibling = ManagedObjectContext(.privateQueue, parent: hop.parent, name: "sibling")
        let read = try await sibling.perform { sibling in
            try #require(try sibling.existingObject(with: ids[0]) as? Note).priority
        }
        #expect(read == 4)
        #expect(await hop.parentHoldsUnread() == false)  // the sibling's read made the parent read it
        // A fresh hop: the parent's fetch matches on the unread change.
        let again = try await Hop(directory: URL(fileURLWithPath: directory.appending("again")))
        #expect(await again.parentHoldsUnread())
        let fetched = try await again.parent.perform { parent in
            var request = FetchRequest<Note>()
            request.predicate = try FetchPredicate(format: "priority > 3")
            let high = try parent.fetch(request).map(\.title)
            request.predicate = nil
            request.sortDescriptors = [FetchSortDescriptor(\Note.priority, ascending: false)]
            return (high, try parent.fetch(request).map(\.title))
        }
        #expect(fetched.0 == ["a"] && fetched.1 == ["a", "b"])
        // A second child changes the body of the same object (still unread in a new hop).
        let third = try await Hop(directory: URL(fileURLWithPath: directory.appending("third")))
        let second = ManagedObjectContext(.privateQueue, parent: third.parent, name: "second")
        let thirdIDs = third.ids
        try await second.perform { second in
            let note = try #require(try second.existingObject(with: thirdIDs[0]) as? Note)
            #expect(note.priority == 4)
            note.body = "from the second child"
            try second.save()
        }
        try await third.parent.perform { try $0.save() }
        #expect(try await third.stored(0) == ("a", 4, "from the second child"))
    }

    @Test("the parent deletes an object holding an unread change: the row is deleted at its save")
    func deletingTheObject() async throws {
        let directory = TemporaryDirectory()
        let hop = try await Hop(directory: directory.url)
        let ids = hop.ids
        try await hop.parent.perform { parent in
            let registered = parent.registeredObject(for: ids[0])
            try parent.delete(try #require(registered))
            try parent.save()
        }
        let left = try await ManagedObjectContext(.privateQueue, coordinator: hop.coordinator).perform { context in
            try context.fetch(FetchRequest<Note>()).map(\.title)
        }
        #expect(left == ["b"])
    }

    @Test("a change whose row moved on before the hop (to another value of the property changed), or whose row is gone, is not taken unread: the conflict is reported at the child's save")
    func staleOrMissingRowsConflictAtTheHop() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let ids = try await ContextReference.saveNotes([("a", 1), ("b", 2)], on: coordinator)
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let child = ManagedObjectContext(.privateQueue, parent: parent)
        try await child.perform { child in
            try #require(try child.existingObject(with: ids[0]) as? Note).priority = 4
            try #require(try child.existingObject(with: ids[1]) as? Note).priority = 5
        }
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { other in
            try #require(try other.existingObject(with: ids[0]) as? Note).priority = 3
            try other.delete(try other.existingObject(with: ids[1]))
            try other.save()
        }
        let conflicts = try #require(await Self.conflicts(saving: child))
        #expect(Set(conflicts.map(\.objectID)) == Set(ids))
        #expect(try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.fetch(FetchRequest<Note>()).map(\.priority)
        } == [3])
    }

    @Test("eight children of one root, each on its own objects and several tasks at once, hop their changes unread; one save of the root writes them all, and concurrent increments through fresh chains lose none")
    func concurrentChildren() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let ids = try await ContextReference.saveNotes((0..<64).map { ("n\($0)", 0) }, on: coordinator)
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<8 {
                group.addTask {
                    let child = ManagedObjectContext(.privateQueue, parent: parent)
                    try await child.perform { child in
                        for id in ids[(worker * 8)..<(worker * 8 + 8)] {
                            try #require(try child.existingObject(with: id) as? Note).body = "worker \(worker)"
                        }
                        try child.save()
                    }
                }
            }
            try await group.waitForAll()
        }
        let unread = await parent.perform { parent in ids.filter { parent.registeredObject(for: $0)?.holdsUnreadChanges == true }.count }
        #expect(unread == 64)
        try await parent.perform { try $0.save() }
        let bodies = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try ids.map { try #require(try context.existingObject(with: $0) as? Note).body }
        }
        #expect(bodies == (0..<64).map { "worker \($0 / 8)" })

        // Increments of one counter (priority, 0...5) through chains made per attempt:
        // each read-modify-write either lands or conflicts and retries; none is lost.
        let counter = ids[0]
        try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<5 {
                group.addTask {
                    while true {
                        let root = ManagedObjectContext(.privateQueue, coordinator: coordinator)
                        let leaf = ManagedObjectContext(.privateQueue, parent: root)
                        do {
                            try await leaf.perform { leaf in
                                let note = try #require(try leaf.existingObject(with: counter) as? Note)
                                note.priority += 1
                                try leaf.save()
                            }
                            try await root.perform { try $0.save() }
                            return 1
                        } catch StrataError.Code.mergeConflicts {
                            continue
                        }
                    }
                }
            }
            var landed = 0
            for try await one in group { landed += one }
            #expect(landed == 5)
        }
        let final = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try #require(try context.existingObject(with: counter) as? Note).priority
        }
        #expect(final == 5)
    }
}
