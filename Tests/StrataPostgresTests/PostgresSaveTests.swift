import Foundation
@testable import Strata
import StrataLocks
import StrataPostgres
import Testing

@Suite("PostgreSQL store: optimistic locking, constraints and concurrency across instances")
struct PostgresSaveTests {
    /// A saved note "n" (priority 0) in `store`; its ID.
    static func savedNote(in coordinator: PersistentStoreCoordinator) async throws -> ManagedObjectID {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let note = PGNote()
            note.title = "n"
            try context.insert(note)
            try context.save()
            return note.objectID
        }
    }

    @Test("a save based on a row another instance changed fails with the conflict; the context keeps its changes")
    func conflictAcrossInstances() async throws {
        let store = PostgresTestStore()
        let a = try await store.coordinator()
        let b = try await store.coordinator()
        let id = try await Self.savedNote(in: a)
        let first = ManagedObjectContext(.privateQueue, coordinator: a)
        let second = ManagedObjectContext(.privateQueue, coordinator: b)
        try await first.perform { context in _ = try context.existingObject(with: id).objectID }
        try await second.perform { context in _ = try context.existingObject(with: id).objectID }
        try await first.perform { context in
            (try context.existingObject(with: id) as? PGNote)?.title = "from A"
            try context.save()
        }
        let failure = await second.perform { context -> StrataError? in
            (try? context.existingObject(with: id) as? PGNote)?.title = "from B"
            do {
                try context.save()
                return nil
            } catch {
                return error as? StrataError
            }
        }
        let error = try #require(failure)
        #expect(error.code == .mergeConflicts)
        let conflict = try #require(error.conflicts.first)
        #expect(conflict.objectID == id && conflict.oldVersion == 1 && conflict.newVersion == 2)
        #expect(conflict.persistedSnapshot?.values["title"] == .attribute(.string("from A")))
        // The context kept its change; after a refresh that merges it, the save goes through.
        let retried = try await second.perform { context in
            let note = try #require(try context.existingObject(with: id) as? PGNote)
            let kept = context.hasChanges && note.title == "from B"
            try context.refresh(note, mergeChanges: true)
            try context.save()
            return (kept, note.title)
        }
        #expect(retried.0 && retried.1 == "from B")
        let stored = try await ManagedObjectContext(.privateQueue, coordinator: a).perform { context in
            (try context.existingObject(with: id) as? PGNote)?.title
        }
        #expect(stored == "from B")
    }

    @Test("a change to a row deleted by another instance, and a delete of a row it changed, conflict")
    func deletedElsewhere() async throws {
        let store = PostgresTestStore()
        let a = try await store.coordinator()
        let b = try await store.coordinator()
        let kept = try await Self.savedNote(in: a)
        let removed = try await Self.savedNote(in: a)
        let stale = ManagedObjectContext(.privateQueue, coordinator: b)
        try await stale.perform { context in
            context.retainsRegisteredObjects = true   // keeps the objects, at the versions read
            _ = try context.existingObject(with: kept).objectID
            _ = try context.existingObject(with: removed).objectID
        }
        try await ManagedObjectContext(.privateQueue, coordinator: a).perform { context in
            (try context.existingObject(with: kept) as? PGNote)?.priority = 3
            try context.delete(try context.existingObject(with: removed))
            try context.save()
        }
        let errors = await stale.perform { context -> [StrataError] in
            var errors: [StrataError] = []
            (context.object(with: removed) as? PGNote)?.priority = 1
            do { try context.save() } catch { errors.append(error as! StrataError) }
            context.rollback()
            if let note = context.registeredObject(for: kept) { try? context.delete(note) }
            do { try context.save() } catch { errors.append(error as! StrataError) }
            return errors
        }
        #expect(errors.count == 2)
        #expect(errors.first?.conflicts.first?.newVersion == nil)    // the row is gone
        #expect(errors.last?.conflicts.first?.newVersion == 2)       // the row moved on
        let count = try await ManagedObjectContext(.privateQueue, coordinator: b).perform { try $0.count(for: FetchRequest<PGNote>()) }
        #expect(count == 1)
    }

    @Test("a uniqueness constraint holds across saves and within one save")
    func uniqueness() async throws {
        let store = PostgresTestStore()
        let coordinator = try await store.coordinator()
        let existing = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let tag = PGTag()
            tag.label = "swift"
            try context.insert(tag)
            try context.save()
            return tag.objectID
        }
        let (later, both) = await ManagedObjectContext(.privateQueue, coordinator: try await store.coordinator()).perform { context in
            let tag = PGTag()
            tag.label = "swift"
            try? context.insert(tag)
            var errors: [StrataError?] = []
            do { try context.save() } catch { errors.append(error as? StrataError) }
            context.rollback()
            for _ in 0..<2 {
                let twin = PGTag()
                twin.label = "linux"
                try? context.insert(twin)
            }
            do { try context.save() } catch { errors.append(error as? StrataError) }
            return (errors.first ?? nil, errors.count > 1 ? errors[1] : nil)
        }
        let conflict = try #require(later?.constraintConflicts.first)
        #expect(conflict.constraint == ["label"] && conflict.existingObjectID == existing && conflict.objectIDs.count == 1)
        let pair = try #require(both?.constraintConflicts.first)
        #expect(pair.existingObjectID == nil && pair.objectIDs.count == 2 && pair.values["label"] == .string("linux"))
        let labels = try store.execute("SELECT label FROM \"\(store.schema)\".\"Tag\"").rows
        #expect(labels.count == 1)
    }

    @Test("two instances, four contexts each, saving at once: every insert lands, and counters incremented with retries lose nothing")
    func concurrentInstances() async throws {
        let store = PostgresTestStore()
        let instances = [try await store.coordinator(), try await store.coordinator()]
        let counter = try await Self.savedNote(in: instances[0])
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<8 {
                let context = ManagedObjectContext(.privateQueue, coordinator: instances[index % 2])
                group.addTask {
                    for step in 0..<10 {
                        try await context.perform { context in
                            let note = PGNote()
                            note.title = "c\(index)-\(step)"
                            try context.insert(note)
                            try context.save()
                        }
                        // An increment of one shared row: retried after each conflict.
                        while true {
                            let saved = try await context.perform { context -> Bool in
                                let note = try #require(try context.existingObject(with: counter) as? PGNote)
                                try context.refresh(note, mergeChanges: false)
                                note.views += 1
                                do {
                                    try context.save()
                                    return true
                                } catch let error as StrataError where error.code == .mergeConflicts {
                                    context.rollback()
                                    return false
                                }
                            }
                            if saved { break }
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        let (count, views) = try await ManagedObjectContext(.privateQueue, coordinator: instances[1]).perform { context in
            (try context.count(for: FetchRequest<PGNote>()), (try context.existingObject(with: counter) as? PGNote)?.views)
        }
        #expect(count == 81)
        #expect(views == 80)
    }

    @Test("permanent IDs come from the entity's sequence in blocks, unique across instances")
    func permanentIDs() async throws {
        let store = PostgresTestStore()
        let a = try await store.coordinator()
        let b = try await store.coordinator()
        let ids = try await withThrowingTaskGroup(of: [ManagedObjectID].self) { group in
            for coordinator in [a, b, a, b] {
                group.addTask {
                    try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
                        let notes = (0..<100).map { _ in PGNote() }
                        for note in notes { try context.insert(note) }
                        try context.obtainPermanentIDs(for: Array(notes.prefix(10)))
                        try context.save()
                        return notes.map(\.objectID)
                    }
                }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        #expect(ids.count == 400 && Set(ids).count == 400 && ids.allSatisfy { !$0.isTemporaryID })
    }
}
