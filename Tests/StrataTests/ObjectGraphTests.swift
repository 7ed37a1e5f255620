import Foundation
@testable import Strata
import StrataTesting
import Testing

/// The context's object graph on a real (in-memory LMDB) store, driven directly: what
/// the `ManagedObjectContext` actor forwards to.
@Suite("Context object graph")
struct ObjectGraphTests {
    static func graph() async throws -> ObjectGraph {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        try await coordinator.addPersistentStore(type: .inMemory, options: CoordinatorStoreTests.options)
        return ObjectGraph(coordinator: coordinator)
    }

    static func note(_ title: String, priority: Int16 = 1, in graph: ObjectGraph) throws -> Note {
        let note = Note()
        note.title = title
        note.priority = priority
        try graph.insert(note)
        return note
    }

    @Test("insert gives a temporary ID; save gives a permanent one and clears the changes")
    func insertAndSave() async throws {
        let graph = try await Self.graph()
        let note = try Self.note("a", in: graph)
        #expect(note.objectID.isTemporaryID && note.isInserted && graph.hasChanges)
        #expect(graph.inserted == [note])
        try graph.save()
        #expect(!note.objectID.isTemporaryID && !note.isInserted && !graph.hasChanges)
        #expect(graph.registeredObject(for: note.objectID) === note)
        // A second graph on the same coordinator reads it back.
        let other = ObjectGraph(coordinator: try graph.coordinator)
        let fetched = try #require(try other.existingObject(for: note.objectID) as? Note)
        #expect(fetched !== note && fetched.title == "a")
        #expect(throws: StrataError.self) { try graph.insert(fetched) }  // another context's object
    }

    @Test("after a save the saved objects are held weakly again; released objects' registrations go as the table grows")
    func savedObjectsAreReleasedAndRegistrationsPruned() async throws {
        let coordinator = try await ContextReference.inMemory()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let ids = try await context.perform { context in
            let notes = try (0..<3_000).map { index in
                let note = Note()
                note.title = "n\(index)"
                try context.insert(note)
                return note
            }
            try context.save()
            return notes.map(\.objectID)
        }
        try await context.perform { context in
            // Nothing but the context held them, and only while they had changes.
            #expect(ids.allSatisfy { context.registeredObject(for: $0) == nil })
            // Registering more objects drops the released ones' registrations on the way.
            let kept = try (0..<1_500).map { index in
                let note = Note()
                note.title = "k\(index)"
                try context.insert(note)
                return note
            }
            #expect(context.graph.registrationCount < 3_000 + kept.count)
            #expect(kept.allSatisfy { context.registeredObject(for: $0.objectID) === $0 })
        }
    }

    @Test("a fetch merges unsaved inserts, in-memory values and deletions")
    func fetchSeesPendingChanges() async throws {
        let graph = try await Self.graph()
        let a = try Self.note("a", priority: 1, in: graph)
        let b = try Self.note("b", priority: 2, in: graph)
        let c = try Self.note("c", priority: 3, in: graph)
        try graph.save()
        var request = FetchRequest<Note>()
        request.predicate = try FetchPredicate(format: "priority >= 2")
        request.sortDescriptors = [FetchSortDescriptor(key: "title")]
        #expect(try graph.fetch(request) == [b, c])
        let d = try Self.note("d", priority: 5, in: graph)   // inserted, matches
        b.priority = 0                                      // stored value matches, in-memory does not
        a.priority = 4                                      // stored value does not match, in-memory does
        try graph.delete(c)                                 // deleted
        #expect(try graph.fetch(request) == [a, d])
        #expect(try graph.count(for: request) == 2)
        request.fetchLimit = 1
        request.fetchOffset = 1
        #expect(try graph.fetch(request) == [d])
        request.fetchLimit = 0
        request.fetchOffset = 0
        request.includesPendingChanges = false
        #expect(Set(try graph.fetch(request)) == [b, c])     // the stored state; same instances
        #expect(b.priority == 0)                             // in-memory value untouched
        var ids = FetchRequest<ManagedObjectID>(entityName: "Note")
        ids.resultType = .managedObjectID
        ids.sortDescriptors = [FetchSortDescriptor(key: "title")]
        #expect(try graph.fetch(ids) == [a.objectID, b.objectID, d.objectID])
        var dictionaries = FetchRequest<[String: any Sendable]>(entityName: "Note")
        dictionaries.resultType = .dictionary
        dictionaries.propertiesToFetch = ["title", "folder"]
        dictionaries.sortDescriptors = [FetchSortDescriptor(key: "title")]
        #expect(try graph.fetch(dictionaries).map { $0["title"] as? String } == ["a", "b", "d"])
        // A result type that does not fit the request's element type is a typed error.
        var wrong = FetchRequest<Note>()
        wrong.resultType = .count
        #expect(throws: StrataError.self) { try graph.fetch(wrong) }
    }

    @Test("an inserted-then-deleted object simply leaves; deletes follow the delete rules")
    func deletes() async throws {
        let graph = try await Self.graph()
        let scratch = try Self.note("scratch", in: graph)
        try graph.delete(scratch)
        try graph.propagateDeletes()
        #expect(graph.inserted.isEmpty && graph.deleted.isEmpty && !graph.hasChanges)

        // Inserting a deleted object takes the deletion back, whether it was saved or not.
        let again = try Self.note("again", in: graph)
        try graph.delete(again)
        try graph.insert(again)
        #expect(graph.inserted == [again] && again.isInserted && !again.isDeleted)
        try graph.save()
        try graph.delete(again)
        try graph.insert(again)
        #expect(graph.deleted.isEmpty && !again.isDeleted && !graph.hasChanges)
        try graph.delete(again)
        try graph.save()

        let folder = Folder()
        folder.name = "Inbox"
        try graph.insert(folder)
        let notes = try (0..<3).map { try Self.note("n\($0)", in: graph) }
        for note in notes { note.folder = folder }
        let tag = Tag()
        tag.label = "red"
        try graph.insert(tag)
        notes[0].tags = [tag]
        try graph.save()
        // Tag.notes denies deletion while it has notes: every failure reported, nothing saved.
        try graph.delete(tag)
        let denied = #expect(throws: StrataError.self) { try graph.save() }
        guard let denied, denied.code == .validation else { Issue.record("\(String(describing: denied))"); return }
        #expect(denied.validationFailures.count == 1)
        graph.rollback()
        #expect(!tag.isDeleted && graph.deleted.isEmpty)
        // Folder.notes cascades; Note.tags nullifies the tag's side.
        try graph.delete(folder)
        try graph.propagateDeletes()
        #expect(Set(graph.deleted) == Set([folder] + notes))
        #expect(tag.notes.isEmpty)
        try graph.save()
        var request = FetchRequest<Note>()
        request.resultType = .count
        #expect(try graph.count(for: request) == 0)
        #expect(try graph.fetch(FetchRequest<Tag>()) == [tag])
    }

    @Test("rollback puts everything back; refresh discards or merges; reset forgets")
    func rollbackRefreshReset() async throws {
        let graph = try await Self.graph()
        let note = try Self.note("a", priority: 1, in: graph)
        try graph.save()
        let added = try Self.note("b", in: graph)
        note.title = "changed"
        graph.rollback()
        #expect(note.title == "a" && !note.hasChanges)
        #expect(added.owner == nil && graph.inserted.isEmpty)

        // Another graph saves a new title underneath.
        let other = ObjectGraph(coordinator: try graph.coordinator)
        let copy = try #require(try other.existingObject(for: note.objectID) as? Note)
        copy.title = "stored"
        try other.save()
        note.priority = 3
        try graph.refresh(note, mergeChanges: true)
        #expect(note.title == "stored" && note.priority == 3 && note.hasChanges)
        try graph.refresh(note, mergeChanges: false)
        #expect(note.isFault)
        #expect(note.title == "stored" && note.priority == 1 && !note.hasChanges)

        graph.reset()
        #expect(graph.registeredObjects.isEmpty && !graph.hasChanges)
    }

    @Test("objects without changes are held weakly unless retainsRegisteredObjects")
    func registration() async throws {
        let graph = try await Self.graph()
        var id: ManagedObjectID?
        do {
            let note = try Self.note("a", in: graph)
            try graph.save()
            id = note.objectID
            _ = graph.takeChangeEvent()   // the event holds its objects until processed
        }
        #expect(graph.registeredObject(for: try #require(id)) == nil)  // released
        let fault = graph.object(for: try #require(id))
        #expect(fault.isFault)
        #expect(graph.object(for: try #require(id)) === fault)      // uniqued while alive
        #expect((fault as? Note)?.title == "a")                     // fulfils from the store
        graph.retainsRegisteredObjects = true
        let kept = ObjectIdentifier(graph.object(for: try #require(id)))
        #expect(graph.registeredObjects.map(ObjectIdentifier.init) == [kept])
        let unknown = ManagedObjectID(temporaryFor: "Note")
        #expect(throws: StrataError.objectNotFound(unknown)) { () throws in _ = try graph.existingObject(for: unknown) }
    }

    @Test("obtainPermanentIDs ahead of a save; assign chooses the store")
    func permanentIDsAndStores() async throws {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        let first = try await coordinator.addPersistentStore(type: .inMemory, options: CoordinatorStoreTests.options)
        let second = try await coordinator.addPersistentStore(type: .inMemory, options: CoordinatorStoreTests.options)
        let graph = ObjectGraph(coordinator: coordinator)
        let a = try Self.note("a", in: graph)
        let b = try Self.note("b", in: graph)
        try graph.assign(b, to: second)
        try graph.obtainPermanentIDs(for: [a])
        #expect(!a.objectID.isTemporaryID && coordinator.persistentStore(for: a.objectID) == first)
        #expect(graph.registeredObject(for: a.objectID) === a)
        try graph.save()
        #expect(coordinator.persistentStore(for: b.objectID) == second)
        #expect(try graph.existingObject(for: a.objectID) === a)
        var request = FetchRequest<Note>()
        request.sortDescriptors = [FetchSortDescriptor(key: "title")]
        let other = ObjectGraph(coordinator: coordinator)
        #expect(try other.fetch(request).map(\.title) == ["a", "b"])   // merged across stores
    }
}
