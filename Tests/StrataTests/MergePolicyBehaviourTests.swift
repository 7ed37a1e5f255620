import Foundation
@testable import Strata
import StrataLocks
import Testing

/// Merge policies beyond the property table: custom resolvers, deletions on either side,
/// conflict checks, notifications, many contexts at once (group commit), and a policy set
/// from another thread.
@Suite("Merge policy behaviour")
struct MergePolicyBehaviourTests {
    /// A coordinator with note "a" (priority 1) and the folders and tags of ``MergeWorld``.
    static func world() async throws -> (PersistentStoreCoordinator, ManagedObjectID) {
        let coordinator = try await MergeWorld.coordinator()
        let id = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try MergeWorld.named(Note.self, "a", in: context).objectID
        }
        return (coordinator, id)
    }

    /// A context that has read note `id` (kept registered).
    static func reader(_ coordinator: PersistentStoreCoordinator, _ id: ManagedObjectID, policy: MergePolicy, name: String) async throws -> ManagedObjectContext {
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: name)
        context.mergePolicy = policy
        try await context.perform { context in
            context.retainsRegisteredObjects = true
            _ = try MergeWorld.note(id, in: context)
        }
        return context
    }

    /// Saves `change` to note `id` in a fresh context.
    static func otherSave(_ coordinator: PersistentStoreCoordinator, _ id: ManagedObjectID, _ change: @escaping @Sendable (Note, isolated ManagedObjectContext) throws -> Void) async throws {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "other").perform { context in
            try change(try MergeWorld.note(id, in: context), context)
            try context.save()
        }
    }

    @Test("a custom resolver sums a counter changed on both sides and lets the latest timestamp win; it sees the three snapshots")
    func customResolverSumsCounters() async throws {
        let (coordinator, id) = try await Self.world()
        let early = Date(timeIntervalSince1970: 1_000), late = Date(timeIntervalSince1970: 2_000)
        let seen = LockedValue<[String]>([])
        let resolver = MergeResolver(name: "sum") { conflict, key in
            seen.withLock { $0.append(key) }
            if key == "priority",
               case .integer(let mine)? = conflict.objectSnapshot?.attributeValue(key),
               case .integer(let theirs)? = conflict.persistedSnapshot?.attributeValue(key),
               case .integer(let base)? = conflict.cachedSnapshot?.attributeValue(key) {
                return .attribute(.integer(theirs + mine - base))
            }
            if key == "created",
               case .date(let mine)? = conflict.objectSnapshot?.attributeValue(key),
               case .date(let theirs)? = conflict.persistedSnapshot?.attributeValue(key) {
                return mine >= theirs ? .object : .store
            }
            return .object
        }
        let saving = try await Self.reader(coordinator, id, policy: .custom(resolver), name: "saving")
        try await Self.otherSave(coordinator, id) { note, _ in
            note.priority = 3   // +2
            note.created = late
            note.body = "theirs"
        }
        let mine = try await saving.perform { context in
            let note = try MergeWorld.note(id, in: context)
            note.priority = 2   // +1
            note.created = early
            note.title = "mine"
            try context.save()
            return "\(note.title) \(note.priority) \(note.created == late) \(note.body ?? "-")"
        }
        // 1 + 2 + 1; the later timestamp; title from here, body from there.
        #expect(mine == "mine 4 true theirs")
        #expect(seen.withLock { Set($0) } == ["priority", "created"])
        let stored = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let note = try MergeWorld.note(id, in: context)
            return "\(note.title) \(note.priority) \(note.created == late) \(note.body ?? "-")"
        }
        #expect(stored == mine)
        #expect(coordinator.writeStatistics.resolvedConflicts == 1)
    }

    struct Refused: Error {}

    @Test("a custom resolver that throws fails the save with its error and writes nothing; one that returns a value of the wrong type fails it with a type mismatch")
    func customResolverFailures() async throws {
        let (coordinator, id) = try await Self.world()
        let throwing = try await Self.reader(coordinator, id, policy: .custom(MergeResolver { _, _ in throw Refused() }), name: "throwing")
        let wrong = try await Self.reader(coordinator, id, policy: .custom(MergeResolver { _, _ in .attribute(.string("x")) }), name: "wrong")
        try await Self.otherSave(coordinator, id) { note, _ in note.priority = 3 }
        let first = try await throwing.perform { context -> String in
            let note = try MergeWorld.note(id, in: context)
            note.priority = 2
            note.title = "never"
            do {
                try context.save()
                return "saved"
            } catch is Refused {
                return "refused \(context.hasChanges)"
            }
        }
        #expect(first == "refused true")
        let second = try await wrong.perform { context -> String in
            let note = try MergeWorld.note(id, in: context)
            note.priority = 2
            do {
                try context.save()
                return "saved"
            } catch let error as StrataError where error.code == .typeMismatch {
                return "mismatch \(error.key ?? "?")"
            }
        }
        #expect(second == "mismatch priority")
        let stored = try await MergeWorld.stored(id, on: coordinator)
        #expect(stored.title == "a" && stored.priority == 3)
    }

    @Test("an object changed here and deleted elsewhere: under a merging policy the deletion stands, the change is dropped, the rest of the save goes in, and didSave reports the object deleted")
    func updateOfARowDeletedElsewhere() async throws {
        for policy in [MergePolicy.mergeByPropertyObjectTrump, .mergeByPropertyStoreTrump, .overwrite, .rollback] {
            let (coordinator, id) = try await Self.world()
            let saving = try await Self.reader(coordinator, id, policy: policy, name: "saving")
            let saves = saving.notifications(of: [.didSave])
            try await ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "deleter").perform { context in
                try context.delete(try MergeWorld.note(id, in: context))
                try context.save()
            }
            let (newID, registered) = try await saving.perform { context in
                let note = try MergeWorld.note(id, in: context)
                note.title = "changed"
                note.tags.insert(try MergeWorld.named(Tag.self, "green", in: context))
                let other = Note()
                other.title = "new"
                try context.insert(other)
                try context.save()
                return (other.objectID, context.registeredObject(for: id) != nil)
            }
            #expect(!registered, "\(policy)")
            var iterator = saves.makeAsyncIterator()
            let saved = try #require(await iterator.next())
            #expect(saved.deletedObjectIDs == [id] && saved.insertedObjectIDs == [newID], "\(policy)")
            let state = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
                let green = try MergeWorld.named(Tag.self, "green", in: context)
                let notes = try context.fetch(FetchRequest<Note>()).map(\.title).sorted()
                return "\(notes) green: \(green.notes.map(\.title))"
            }
            // The new note went in; green does not hold the deleted note.
            #expect(state == "[\"new\"] green: []", "\(policy)")
        }
    }

    @Test("an object deleted here and changed elsewhere: the object-trumping policies delete it (cutting the relationships made elsewhere), the others keep it as stored")
    func deletionOfARowChangedElsewhere() async throws {
        let policies: [(MergePolicy, Bool)] = [(.mergeByPropertyObjectTrump, true), (.overwrite, true), (.mergeByPropertyStoreTrump, false), (.rollback, false)]
        for (policy, deletes) in policies {
            let (coordinator, id) = try await Self.world()
            let saving = try await Self.reader(coordinator, id, policy: policy, name: "saving")
            // Elsewhere: the note gets the blue tag and a new priority.
            try await Self.otherSave(coordinator, id) { note, context in
                note.priority = 4
                note.tags.insert(try MergeWorld.named(Tag.self, "blue", in: context))
            }
            let (deletedHere, stillRegistered) = try await saving.perform { context in
                let note = try MergeWorld.note(id, in: context)
                try context.delete(note)
                try context.save()
                let registered = context.registeredObject(for: id)
                return (registered?.isDeleted ?? true, registered.map { ($0 as? Note)?.priority } ?? nil)
            }
            let state = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
                let notes = try context.fetch(FetchRequest<Note>()).map { "\($0.title) p\($0.priority) \($0.tags.map(\.label).sorted())" }
                let tags = try context.fetch(FetchRequest<Tag>()).map { "\($0.label): \($0.notes.count)" }.sorted()
                return "\(notes) \(tags)"
            }
            if deletes {
                #expect(state == "[] [\"blue: 0\", \"green: 0\", \"red: 0\"]", "\(policy)")
                #expect(deletedHere, "\(policy)")
            } else {
                #expect(state == "[\"a p4 [\\\"blue\\\", \\\"red\\\"]\"] [\"blue: 1\", \"green: 0\", \"red: 1\"]", "\(policy)")
                #expect(!deletedHere && stillRegistered == 4, "\(policy)")
            }
        }
    }

    @Test("a save that only deletes an object changed elsewhere is settled by the policy too: deleted under object trump, kept under store trump")
    func deletionAloneOfARowChangedElsewhere() async throws {
        for (policy, deletes) in [(MergePolicy.mergeByPropertyObjectTrump, true), (.mergeByPropertyStoreTrump, false)] {
            let coordinator = try await MergeWorld.coordinator()
            let id = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
                let note = Note()
                note.title = "alone"
                try context.insert(note)
                try context.save()
                return note.objectID
            }
            let saving = try await Self.reader(coordinator, id, policy: policy, name: "saving")
            try await Self.otherSave(coordinator, id) { note, _ in note.priority = 4 }
            try await saving.perform { context in
                try context.delete(try MergeWorld.note(id, in: context))
                try context.save()
            }
            let stored = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
                try context.fetch(FetchRequest<Note>()).first { $0.objectID == id }?.priority
            }
            #expect(stored == (deletes ? nil : 4), "\(policy)")
        }
    }

    @Test("detectConflicts(for:) fails the save whatever the policy when the checked object changed")
    func conflictChecksStillFail() async throws {
        let (coordinator, id) = try await Self.world()
        let saving = try await Self.reader(coordinator, id, policy: .mergeByPropertyObjectTrump, name: "saving")
        try await Self.otherSave(coordinator, id) { note, _ in note.priority = 3 }
        let failed = try await saving.perform { context -> Bool in
            let note = try MergeWorld.note(id, in: context)
            try context.detectConflicts(for: note)
            try MergeWorld.named(Folder.self, "Work", in: context).name = "Office"
            do {
                try context.save()
                return false
            } catch let error as StrataError where error.code == .mergeConflicts {
                return error.conflicts.map(\.objectID) == [id]
            }
        }
        #expect(failed)
    }

    @Test("a merged object is reported updated by didSave, and the saving context's object holds the merged values at the stored version")
    func didSaveReportsMergedObjects() async throws {
        let (coordinator, id) = try await Self.world()
        let saving = try await Self.reader(coordinator, id, policy: .mergeByPropertyStoreTrump, name: "saving")
        let saves = saving.notifications(of: [.didSave])
        try await Self.otherSave(coordinator, id) { note, _ in note.priority = 3; note.title = "theirs" }
        let (title, priority, changes) = try await saving.perform { context in
            let note = try MergeWorld.note(id, in: context)
            note.title = "mine"
            note.body = "body"
            try context.save()
            return (note.title, note.priority, note.hasChanges)
        }
        #expect(title == "theirs" && priority == 3 && !changes)
        var iterator = saves.makeAsyncIterator()
        let saved = try #require(await iterator.next())
        #expect(saved.updatedObjectIDs == [id])
        let stored = try await MergeWorld.stored(id, on: coordinator)
        #expect(stored.title == "theirs" && stored.priority == 3)
    }

    @Test("eight contexts change different properties of the same objects at once under mergeByPropertyObjectTrump: every save goes through (group commit included) and every change is kept")
    func manyContextsDisjointProperties() async throws {
        let coordinator = try await MergeWorld.coordinator()
        let ids = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            var notes: [Note] = []
            for index in 0..<4 {
                let folder = Folder()
                folder.name = "f\(index)"
                try context.insert(folder)
                let note = Note()
                note.title = "n\(index)"
                try context.insert(note)
                note.folder = folder
                notes.append(note)
            }
            try context.save()
            return notes.map(\.objectID)
        }
        let rounds = 20
        // Contexts k and k + 4 own one property of every note: title, body, priority or created.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<8 {
                group.addTask {
                    let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "worker \(worker)")
                    context.mergePolicy = .mergeByPropertyObjectTrump
                    for round in 0..<rounds {
                        try await context.perform { context in
                            for id in ids {
                                let note = try #require(try context.existingObject(with: id) as? Note)
                                switch worker % 4 {
                                case 0: note.title = "t\(worker)-\(round)"
                                case 1: note.body = "b\(worker)-\(round)"
                                case 2: note.priority = Int16(round % 6)
                                default: note.created = Date(timeIntervalSince1970: Double(worker * 1000 + round))
                                }
                            }
                            try context.save()
                            try context.refreshAllObjects()
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        let statistics = coordinator.writeStatistics
        #expect(statistics.failedSaves == 0, "\(statistics)")
        #expect(statistics.resolvedConflicts > 0, "no save met another's change: nothing was merged (\(statistics))")
        // Each note's property is the last value one of its two owners wrote in the last round.
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            for id in ids {
                let note = try #require(try context.existingObject(with: id) as? Note)
                #expect(note.title.hasSuffix("-\(rounds - 1)"), "\(note.title)")
                #expect(note.body?.hasSuffix("-\(rounds - 1)") == true, "\(note.body ?? "nil")")
                #expect(note.priority == Int16((rounds - 1) % 6))
                let stamp = Int(note.created?.timeIntervalSince1970 ?? -1)
                #expect(stamp % 1000 == rounds - 1, "\(stamp)")
            }
        }
    }

    @Test("the merge policy is settable from any thread while the context works, and a save uses the policy set when it begins")
    func policySetFromAnyThread() async throws {
        let (coordinator, id) = try await Self.world()
        let saving = try await Self.reader(coordinator, id, policy: .error, name: "saving")
        try await Self.otherSave(coordinator, id) { note, _ in note.priority = 3 }
        await withTaskGroup(of: Void.self) { group in
            for index in 0..<100 {
                group.addTask { saving.mergePolicy = index % 2 == 0 ? .rollback : .mergeByPropertyObjectTrump }
            }
        }
        saving.mergePolicy = .mergeByPropertyObjectTrump
        #expect(saving.mergePolicy.description == "mergeByPropertyObjectTrump")
        let title = try await saving.perform { context in
            let note = try MergeWorld.note(id, in: context)
            note.title = "mine"
            try context.save()
            return "\(note.title) \(note.priority)"
        }
        #expect(title == "mine 3")
    }

    @Test("one-to-one relationships stay consistent when the store's choice wins: the object the saving side chose is not left pointing back")
    func oneToOneStaysConsistent() async throws {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        try await coordinator.addPersistentStore(type: .inMemory, options: CoordinatorStoreTests.options)
        let (personID, passports) = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let person = Person()
            person.name = "p"
            try context.insert(person)
            var passports: [Passport] = []
            for number in ["one", "two", "three"] {
                let passport = Passport()
                passport.number = number
                try context.insert(passport)
                passports.append(passport)
            }
            person.passport = passports[0]
            try context.save()
            return (person.objectID, passports.map(\.objectID))
        }
        let saving = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "saving")
        saving.mergePolicy = .mergeByPropertyStoreTrump
        try await saving.perform { context in
            context.retainsRegisteredObjects = true
            let person = try #require(try context.existingObject(with: personID) as? Person)
            _ = person.passport?.number
            for id in passports { _ = (try context.existingObject(with: id) as? Passport)?.holder }
        }
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let person = try #require(try context.existingObject(with: personID) as? Person)
            person.passport = try #require(try context.existingObject(with: passports[2]) as? Passport)
            try context.save()
        }
        try await saving.perform { context in
            let person = try #require(try context.existingObject(with: personID) as? Person)
            person.passport = try #require(try context.existingObject(with: passports[1]) as? Passport)
            try context.save()
        }
        let holders = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let person = try #require(try context.existingObject(with: personID) as? Person)
            let holders = try passports.map { id in (try context.existingObject(with: id) as? Passport)?.holder?.name ?? "-" }
            return "\(person.passport?.number ?? "-") \(holders)"
        }
        #expect(holders == "three [\"-\", \"-\", \"p\"]")
    }
}
