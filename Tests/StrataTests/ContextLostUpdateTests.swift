import Foundation
@testable import Strata
import StrataLocks
import StrataTesting
import Testing

/// The lost update the concurrency stress test found (issue 19), and its neighbours: a
/// child's save is a compare-and-set on the state the child read. Its parent takes it
/// only where it holds each object in that state (the properties a change sets; the
/// whole object, to-many members included, for a deletion), so that neither the child's
/// values nor the parent's delete rules act on a state the child never saw.
@Suite("Context lost updates")
struct ContextLostUpdateTests {
    /// A folder with two notes, and a third note in no folder, saved; their IDs.
    static func folderWithNotes(on coordinator: PersistentStoreCoordinator) async throws -> (folder: ManagedObjectID, notes: [ManagedObjectID]) {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "setup").perform { context in
            let folder = Folder()
            folder.name = "Inbox"
            try context.insert(folder)
            var notes: [Note] = []
            for (title, priority) in [("a", 1), ("b", 2), ("loose", 3)] as [(String, Int16)] {
                let note = Note()
                note.title = title
                note.priority = priority
                if title != "loose" { note.folder = folder }
                try context.insert(note)
                notes.append(note)
            }
            try context.save()
            return (folder.objectID, notes.map(\.objectID))
        }
    }

    /// A child of `parent` that has read the object `id` (its to-many relationships
    /// loaded: what a child that looked at it knows) and keeps what it read.
    static func child(
        of parent: ManagedObjectContext, _ type: ManagedObjectContext.ConcurrencyType = .privateQueue, name: String = "child",
        reading id: ManagedObjectID
    ) async throws -> ManagedObjectContext {
        let child = ManagedObjectContext(type, parent: parent, name: name)
        try await child.perform { child in
            child.retainsRegisteredObjects = true
            let object = try child.existingObject(with: id)
            for relationship in object.entity.relationships where relationship.isToMany {
                _ = try object.value(forKey: relationship.name)
            }
        }
        return child
    }

    /// The stored notes as (title, priority, folder name), sorted by title.
    static func storedNotes(on coordinator: PersistentStoreCoordinator) async throws -> [String] {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "reader").perform { context in
            var request = FetchRequest<Note>()
            request.sortDescriptors = [FetchSortDescriptor(key: "title")]
            return try context.fetch(request).map { "\($0.title) \($0.priority) \($0.folder?.name ?? "-")" }
        }
    }

    /// The error of `body`, which must be a merge conflict, with the conflicting IDs.
    static func conflictIDs(_ body: @escaping @Sendable (isolated ManagedObjectContext) throws -> Void, in context: ManagedObjectContext) async throws -> Set<ManagedObjectID>? {
        try await context.perform { context in
            do {
                try body(context)
                return nil
            } catch let error as StrataError where error.code == .mergeConflicts {
                return Set(error.conflicts.map(\.objectID))
            }
        }
    }

    @Test("the stress test's lost update: a child deletes a folder (cascading to the notes it sees) after another context put a note in that folder; the child's save conflicts, and no note the child never saw is deleted")
    func childCascadeOverAMemberItNeverSaw() async throws {
        // child:   reads folder (v1) and its notes {a, b}
        // other:                                      moves "loose" into the folder; saves (folder v2)
        // child:                                                                              deletes the folder (cascade: a, b); saves
        // parent:  reads the folder at v2, notes {a, b, loose}. Before the fix it took the
        //          deletion (the folder's name had not changed), and its own delete rule
        //          cascaded to "loose", which the child never saw: the root's save deleted
        //          it, with no conflict (it read every row at its newest version).
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let (folderID, noteIDs) = try await Self.folderWithNotes(on: coordinator)
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "parent")
        let child = ManagedObjectContext(.privateQueue, parent: parent, name: "child")
        let seen = try await child.perform { child in
            child.retainsRegisteredObjects = true
            let folder = try #require(try child.existingObject(with: folderID) as? Folder)
            return folder.notes.map(\.title).sorted()
        }
        #expect(seen == ["a", "b"])
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "other").perform { other in
            let loose = try #require(try other.existingObject(with: noteIDs[2]) as? Note)
            loose.folder = try #require(try other.existingObject(with: folderID) as? Folder)
            try other.save()
        }

        let conflicts = try await Self.conflictIDs({ child in
            try child.delete(try child.existingObject(with: folderID))
            try child.save()
        }, in: child)
        #expect(conflicts == [folderID])
        #expect(await child.perform { $0.hasChanges })   // the child keeps its changes
        #expect(await parent.perform { $0.hasChanges } == false)
        try await parent.perform { try $0.save() }
        #expect(try await Self.storedNotes(on: coordinator) == ["a 1 Inbox", "b 2 Inbox", "loose 3 Inbox"])

        // Read again, the child sees the new member and deletes all three.
        try await child.perform { child in
            child.rollback()
            child.reset()
            let folder = try #require(try child.existingObject(with: folderID) as? Folder)
            #expect(folder.notes.count == 3)
            try child.delete(folder)
            try child.save()
        }
        try await parent.perform { try $0.save() }
        #expect(try await Self.storedNotes(on: coordinator) == [])
    }

    @Test("a deletion needs the whole object as the child read it: a changed attribute, a changed to-one, a member removed elsewhere each make the child's delete conflict")
    func deletionComparesTheWholeObject() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let (folderID, noteIDs) = try await Self.folderWithNotes(on: coordinator)
        let changes: [(String, @Sendable (isolated ManagedObjectContext) throws -> Void)] = [
            ("an attribute", { other in try #require(try other.existingObject(with: noteIDs[0]) as? Note).priority = 5 }),
            ("a to-one", { other in try #require(try other.existingObject(with: noteIDs[0]) as? Note).folder = nil }),
        ]
        for (what, change) in changes {
            let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "parent")
            let child = try await Self.child(of: parent, reading: noteIDs[0])
            try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { other in
                try change(other)
                try other.save()
            }
            let conflicts = try await Self.conflictIDs({ child in
                try child.delete(try child.existingObject(with: noteIDs[0]))
                try child.save()
            }, in: child)
            #expect(conflicts?.contains(noteIDs[0]) == true, "after \(what) changed elsewhere")
        }
        // A member removed elsewhere: the folder's notes differ from what the child read.
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "parent")
        let child = try await Self.child(of: parent, reading: folderID)
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { other in
            try #require(try other.existingObject(with: noteIDs[1]) as? Note).folder = nil
            try other.save()
        }
        let conflicts = try await Self.conflictIDs({ child in
            try child.delete(try child.existingObject(with: folderID))
            try child.save()
        }, in: child)
        #expect(conflicts?.contains(folderID) == true)
    }

    @Test("two children of one parent change the same attribute from the same read: the second child's save conflicts instead of overwriting the first child's value in the parent")
    func siblingsChangingOneAttribute() async throws {
        // first:   reads note (priority 1)            sets 2; saves into the parent
        // second:  reads note (priority 1)                                           sets 3; saves: conflict
        // Before the fix, the parent took the second value (the same row version), and the
        // first child's change was lost at the root's save.
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let (_, noteIDs) = try await Self.folderWithNotes(on: coordinator)
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "parent")
        let first = try await Self.child(of: parent, name: "first", reading: noteIDs[0])
        let second = try await Self.child(of: parent, .mainQueue, name: "second", reading: noteIDs[0])
        try await first.perform { first in
            try #require(try first.existingObject(with: noteIDs[0]) as? Note).priority = 2
            try first.save()
        }
        let conflicts = try await Self.conflictIDs({ second in
            try #require(try second.existingObject(with: noteIDs[0]) as? Note).priority = 3
            try second.save()
        }, in: second)
        #expect(conflicts == [noteIDs[0]])

        // A sibling changing another attribute of the same object goes through: each
        // property keeps the value its own change set.
        try await second.perform { second in
            second.rollback()
            try #require(try second.existingObject(with: noteIDs[0]) as? Note).body = "from the second child"
            try second.save()
        }
        try await parent.perform { try $0.save() }
        let stored = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let note = try #require(try context.existingObject(with: noteIDs[0]) as? Note)
            return "\(note.priority) \(note.body ?? "-")"
        }
        #expect(stored == "2 from the second child")
    }

    @Test("a child's change of a property its parent changed since the child read it conflicts; the parent keeps its own value")
    func childOverParentChange() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let (_, noteIDs) = try await Self.folderWithNotes(on: coordinator)
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "parent")
        let child = try await Self.child(of: parent, reading: noteIDs[0])
        try await parent.perform { parent in
            parent.retainsRegisteredObjects = true
            try #require(try parent.existingObject(with: noteIDs[0]) as? Note).title = "parent's"
        }
        let conflicts = try await Self.conflictIDs({ child in
            try #require(try child.existingObject(with: noteIDs[0]) as? Note).title = "child's"
            try child.save()
        }, in: child)
        #expect(conflicts == [noteIDs[0]])
        let title = try await parent.perform { parent in try #require(try parent.existingObject(with: noteIDs[0]) as? Note).title }
        #expect(title == "parent's")
    }

    @Test("what is still accepted: a child goes on after its parent saved its values (another row version), deletes after it, and sets members whatever the other members are")
    func valuesAtAnotherVersionAreAccepted() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let (folderID, noteIDs) = try await Self.folderWithNotes(on: coordinator)
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "parent")
        let child = ManagedObjectContext(.privateQueue, parent: parent, name: "child")
        try await child.perform { child in
            child.retainsRegisteredObjects = true
            let folder = try #require(try child.existingObject(with: folderID) as? Folder)
            folder.name = "Renamed"
            _ = folder.notes.count
            try child.save()
        }
        try await parent.perform { parent in
            try parent.save()
            parent.reset()   // the parent reads the folder again: version 2, the child's values
        }
        // Another context adds a member: the child's own additions merge with it.
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { other in
            try #require(try other.existingObject(with: noteIDs[2]) as? Note).folder = try #require(try other.existingObject(with: folderID) as? Folder)
            try other.save()
        }
        try await child.perform { child in
            let folder = try #require(try child.existingObject(with: folderID) as? Folder)
            #expect(folder.objectID == folderID && folder.notes.count == 2)   // the child's view, read before
            let note = Note()
            note.title = "new"
            note.folder = folder
            try child.insert(note)
            folder.name = "Again"
            try child.save()
        }
        try await parent.perform { try $0.save() }
        #expect(try await Self.storedNotes(on: coordinator) == ["a 1 Again", "b 2 Again", "loose 3 Again", "new 0 Again"])
    }

    @Test("a concurrent version of the stress test's interleaving: children delete folders while other contexts move notes into them; whatever conflicts, no note is ever deleted that its deleting context did not see")
    func concurrentCascadesLoseNothing() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        // Ten folders of one note each, and twenty loose notes.
        let (folders, loose) = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            var folders: [ManagedObjectID] = [], loose: [Note] = []
            var objects: [Folder] = []
            for index in 0..<10 {
                let folder = Folder()
                folder.name = "f\(index)"
                let note = Note()
                note.title = "in f\(index)"
                note.folder = folder
                try context.insert(note)
                objects.append(folder)
            }
            for index in 0..<20 {
                let note = Note()
                note.title = "loose \(index)"
                try context.insert(note)
                loose.append(note)
            }
            try context.save()
            folders = objects.map(\.objectID)
            return (folders, loose.map(\.objectID))
        }
        let deleted = LockedValue<Set<String>>([])
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, folderID) in folders.enumerated() {
                group.addTask {
                    let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "parent \(index)")
                    let child = ManagedObjectContext(index.isMultiple(of: 2) ? .privateQueue : .mainQueue, parent: parent, name: "child \(index)")
                    let titles = try await child.perform { child in
                        child.retainsRegisteredObjects = true
                        return try #require(try child.existingObject(with: folderID) as? Folder).notes.map(\.title)
                    }
                    await Task.yield()
                    let saved = try await child.perform { child -> Bool in
                        try child.delete(try child.existingObject(with: folderID))
                        do { try child.save() } catch StrataError.Code.mergeConflicts { return false }
                        return true
                    }
                    guard saved else { return }
                    do {
                        try await parent.perform { try $0.save() }
                        deleted.withLock { $0.formUnion(titles) }
                    } catch StrataError.Code.mergeConflicts {}
                }
                group.addTask {
                    try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { mover in
                        let note = try #require(try mover.existingObject(with: loose[2 * index]) as? Note)
                        note.folder = try #require(try mover.existingObject(with: folderID) as? Folder)
                        do { try mover.save() } catch StrataError.Code.mergeConflicts {}
                    }
                }
            }
            try await group.waitForAll()
        }
        let stored = Set(try await Self.storedNotes(on: coordinator).map { String($0.split(separator: " ").dropLast(2).joined(separator: " ")) })
        let expected = Set((0..<10).map { "in f\($0)" } + (0..<20).map { "loose \($0)" }).subtracting(deleted.withLock { $0 })
        #expect(stored == expected)
    }
}
