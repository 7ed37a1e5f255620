import Foundation
@testable import Strata
import StrataLocks
import StrataPostgres
import Testing

@Suite("Merge policies on both stores: conflicts across contexts (and PostgreSQL instances) settle the same way")
struct PostgresMergeTests {
    /// What a fresh context of `coordinator` reads of note `id`: title, body, priority.
    static func stored(_ id: ManagedObjectID, in coordinator: PersistentStoreCoordinator) async throws -> (String, String?, Int16)? {
        // A fetch asks the server (a fault may reuse a row this coordinator cached).
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.fetch(FetchRequest<PGNote>()).first { $0.objectID == id }.map { ($0.title, $0.body, $0.priority) }
        }
    }

    /// A note saved in A; a context of B under `policy` that read it; then A changes its
    /// title and body, and B's context its title and priority, and saves.
    static func conflict(
        _ kind: StoreKind, under policy: MergePolicy
    ) async throws -> (store: BothStoresTestStore, a: PersistentStoreCoordinator, b: ManagedObjectContext, id: ManagedObjectID, error: (any Error)?) {
        let store = BothStoresTestStore(kind)
        let a = try await store.instance()
        let coordinatorB = try await store.instance()
        let id = try await PostgresSaveTests.savedNote(in: a)
        let b = ManagedObjectContext(.privateQueue, coordinator: coordinatorB)
        b.mergePolicy = policy
        try await b.perform { context in
            context.retainsRegisteredObjects = true
            _ = try context.existingObject(with: id).objectID
        }
        try await ManagedObjectContext(.privateQueue, coordinator: a).perform { context in
            let note = try #require(try context.existingObject(with: id) as? PGNote)
            note.title = "A"
            note.body = "A-body"
            try context.save()
        }
        let error = await b.perform { context -> (any Error)? in
            guard let note = context.registeredObject(for: id) as? PGNote else { return nil }
            note.title = "B"
            note.priority = 5
            do {
                try context.save()
                return nil
            } catch {
                return error
            }
        }
        return (store, a, b, id, error)
    }

    @Test("property trumps: each side's own changes stay, the property both changed goes to the object (object trump) or the store (store trump); the saving context holds the merged state", arguments: StoreKind.allCases)
    func propertyTrumps(kind: StoreKind) async throws {
        let object = try await Self.conflict(kind, under: .mergeByPropertyObjectTrump)
        #expect(object.error == nil, "\(String(describing: object.error))")
        #expect(try await Self.stored(object.id, in: object.a).map { "\($0.0) \($0.1 ?? "nil") \($0.2)" } == "B A-body 5")
        let held = await object.b.perform { context in
            (context.registeredObject(for: object.id) as? PGNote).map { "\($0.title) \($0.body ?? "nil") \($0.priority) \(context.hasChanges)" }
        }
        #expect(held == "B A-body 5 false")
        // The context's version is the stored one: its next change saves without a conflict.
        try await object.b.perform { context in
            (context.registeredObject(for: object.id) as? PGNote)?.priority = 6
            try context.save()
        }
        #expect(try await Self.stored(object.id, in: object.a)?.2 == 6)

        let store = try await Self.conflict(kind, under: .mergeByPropertyStoreTrump)
        #expect(store.error == nil)
        #expect(try await Self.stored(store.id, in: store.a).map { "\($0.0) \($0.1 ?? "nil") \($0.2)" } == "A A-body 5")
    }

    @Test("overwrite writes the saving side's whole state; rollback keeps the stored state and drops the save's changes to it", arguments: StoreKind.allCases)
    func overwriteAndRollback(kind: StoreKind) async throws {
        let overwrite = try await Self.conflict(kind, under: .overwrite)
        #expect(overwrite.error == nil)
        #expect(try await Self.stored(overwrite.id, in: overwrite.a).map { "\($0.0) \($0.1 ?? "nil") \($0.2)" } == "B nil 5")
        let rollback = try await Self.conflict(kind, under: .rollback)
        #expect(rollback.error == nil)
        #expect(try await Self.stored(rollback.id, in: rollback.a).map { "\($0.0) \($0.1 ?? "nil") \($0.2)" } == "A A-body 0")
        let held = await rollback.b.perform { context in (context.registeredObject(for: rollback.id) as? PGNote).map { "\($0.title) \($0.priority)" } }
        #expect(held == "A 0")
    }

    @Test("a custom policy decides each property both sides changed, and what it throws fails the save, writing nothing", arguments: StoreKind.allCases)
    func customPolicy(kind: StoreKind) async throws {
        let resolver = MergeResolver { conflict, key in
            key == "title" ? .attribute(.string("custom \(conflict.objectID.primaryKey?.rawValue ?? 0)")) : .object
        }
        let custom = try await Self.conflict(kind, under: .custom(resolver))
        #expect(custom.error == nil)
        let title = try await Self.stored(custom.id, in: custom.a)?.0
        #expect(title == "custom \(custom.id.primaryKey?.rawValue ?? 0)")

        struct Refused: Error {}
        let failing = try await Self.conflict(kind, under: .custom(MergeResolver { _, _ in throw Refused() }))
        #expect(failing.error is Refused, "the policy's own error, as it threw it: \(String(describing: failing.error))")
        #expect(try await Self.stored(failing.id, in: failing.a).map { "\($0.0) \($0.2)" } == "A 0", "nothing written")
    }

    @Test("a change to a row deleted elsewhere is dropped; a deletion of a row changed elsewhere stands under object trump and is undone under store trump", arguments: StoreKind.allCases)
    func deletions(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let a = try await store.instance()
        let b = try await store.instance()
        let changed = try await PostgresSaveTests.savedNote(in: a)
        let removed = try await PostgresSaveTests.savedNote(in: a)
        let kept = try await PostgresSaveTests.savedNote(in: a)
        // Object trump: B changes `changed` (which A deletes) and deletes `removed` (which A changes).
        let first = ManagedObjectContext(.privateQueue, coordinator: b)
        first.mergePolicy = .mergeByPropertyObjectTrump
        try await first.perform { context in
            context.retainsRegisteredObjects = true
            _ = try context.existingObject(with: changed).objectID
            _ = try context.existingObject(with: removed).objectID
        }
        try await ManagedObjectContext(.privateQueue, coordinator: a).perform { context in
            (try context.existingObject(with: removed) as? PGNote)?.title = "changed in A"
            try context.delete(try context.existingObject(with: changed))
            try context.save()
        }
        try await first.perform { context in
            (context.registeredObject(for: changed) as? PGNote)?.title = "changed in B"
            let doomed = context.registeredObject(for: removed)
            try context.delete(try #require(doomed))
            try context.save()
        }
        let vanished = await first.perform { context in context.registeredObject(for: changed) == nil }
        #expect(vanished, "the object deleted elsewhere left the saving context")
        // Store trump: B deletes `kept`, which A changes.
        let second = ManagedObjectContext(.privateQueue, coordinator: b)
        second.mergePolicy = .mergeByPropertyStoreTrump
        try await second.perform { context in
            context.retainsRegisteredObjects = true
            _ = try context.existingObject(with: kept).objectID
        }
        try await ManagedObjectContext(.privateQueue, coordinator: a).perform { context in
            (try context.existingObject(with: kept) as? PGNote)?.title = "changed in A"
            try context.save()
        }
        try await second.perform { context in
            let doomed = context.registeredObject(for: kept)
            try context.delete(try #require(doomed))
            try context.save()
        }
        #expect(try await Self.stored(changed, in: a) == nil, "deleted in A: B's change was dropped, not resurrected")
        #expect(try await Self.stored(removed, in: a) == nil, "object trump: B's deletion stands")
        #expect(try await Self.stored(kept, in: a)?.0 == "changed in A", "store trump: the row A changed stays")
        #expect(try await store.count("Note") == 1)
    }

    @Test("many-to-many members both sides changed merge member by member, and both join tables agree", arguments: StoreKind.allCases)
    func membersMerge(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let a = try await store.instance()
        let b = try await store.instance()
        let (note, t1, t2, t3) = try await ManagedObjectContext(.privateQueue, coordinator: a).perform { context in
            let note = PGNote(), t1 = PGTag(), t2 = PGTag(), t3 = PGTag()
            note.title = "n"
            t1.label = "t1"
            t2.label = "t2"
            t3.label = "t3"
            for object in [note, t1, t2, t3] as [ManagedObject] { try context.insert(object) }
            note.tags = [t1]
            try context.save()
            return (note.objectID, t1.objectID, t2.objectID, t3.objectID)
        }
        let context = ManagedObjectContext(.privateQueue, coordinator: b)
        context.mergePolicy = .mergeByPropertyObjectTrump
        try await context.perform { context in
            context.retainsRegisteredObjects = true
            _ = try #require(context.existingObject(with: note) as? PGNote).tags.count
        }
        try await ManagedObjectContext(.privateQueue, coordinator: a).perform { context in
            let stored = try #require(try context.existingObject(with: note) as? PGNote)
            stored.tags.insert(try #require(try context.existingObject(with: t3) as? PGTag))
            try context.save()
        }
        try await context.perform { context in
            let held = try #require(context.registeredObject(for: note) as? PGNote)
            held.tags.insert(try #require(try context.existingObject(with: t2) as? PGTag))
            held.tags.remove(try #require(try context.existingObject(with: t1) as? PGTag))
            try context.save()
        }
        let (members, inverse) = try await ManagedObjectContext(.privateQueue, coordinator: try await store.instance()).perform { context in
            let stored = try #require(try context.existingObject(with: note) as? PGNote)
            let members = Set(stored.tags.map(\.objectID))
            var inverse: [ManagedObjectID: Bool] = [:]
            for id in [t1, t2, t3] {
                inverse[id] = try #require(try context.existingObject(with: id) as? PGTag).notes.contains { $0.objectID == note }
            }
            return (members, inverse)
        }
        #expect(members == [t2, t3], "A's addition and B's addition and removal")
        #expect(inverse == [t1: false, t2: true, t3: true], "the tags' side agrees")
    }

    @Test("detectConflicts(for:) fails the save under a merging policy too, writing nothing", arguments: StoreKind.allCases)
    func detectedConflicts(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let a = try await store.instance()
        let b = try await store.instance()
        let watched = try await PostgresSaveTests.savedNote(in: a)
        let context = ManagedObjectContext(.privateQueue, coordinator: b)
        context.mergePolicy = .mergeByPropertyObjectTrump
        try await context.perform { context in
            context.retainsRegisteredObjects = true
            try context.detectConflicts(for: try context.existingObject(with: watched))
        }
        try await ManagedObjectContext(.privateQueue, coordinator: a).perform { context in
            (try context.existingObject(with: watched) as? PGNote)?.title = "A"
            try context.save()
        }
        let failure = await context.perform { context -> StrataError? in
            let note = PGNote()
            note.title = "new"
            do {
                try context.insert(note)
                try context.save()
                return nil
            } catch {
                return error as? StrataError
            }
        }
        #expect(failure?.code == .mergeConflicts)
        #expect(try await store.count("Note") == 1)
    }

    @Test("contexts of two instances each changing their own property of one note at once, under object trump: every change is kept", arguments: StoreKind.allCases)
    func concurrentMerges(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let a = try await store.instance()
        let b = try await store.instance()
        let id = try await PostgresSaveTests.savedNote(in: a)
        // Writers 0 and 1 own size and score; writers 2 and 3 share views (and set pinned).
        let coordinators = [a, b, a, b]
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (role, coordinator) in coordinators.enumerated() {
                group.addTask {
                    let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
                    context.mergePolicy = .mergeByPropertyObjectTrump
                    for round in 1...10 {
                        try await context.perform { context in
                            let note = try #require(try context.existingObject(with: id) as? PGNote)
                            switch role {
                            case 0: note.size = Int64(round)
                            case 1: note.score = Double(round)
                            default:
                                note.views = Int32(role * 100 + round)
                                note.pinned = true
                            }
                            try context.save()
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        let final = try await ManagedObjectContext(.privateQueue, coordinator: try await store.instance()).perform { context in
            let note = try #require(try context.existingObject(with: id) as? PGNote)
            return (note.size, note.score, note.views, note.pinned)
        }
        #expect(final.0 == 10 && final.1 == 10 && final.3)
        #expect(final.2 == 210 || final.2 == 310, "the last views written by one of its two writers")
    }

    @Test("a save chosen as a deadlock's victim (40P01) is run again, and goes through")
    func deadlockVictimRetried() async throws {
        let store = PostgresTestStore()
        let coordinator = try await store.coordinator()
        let x = try await PostgresSaveTests.savedNote(in: coordinator)
        let y = try await PostgresSaveTests.savedNote(in: coordinator)
        let (keyX, keyY) = (try #require(x.primaryKey?.rawValue), try #require(y.primaryKey?.rawValue))
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            context.retainsRegisteredObjects = true
            for id in [x, y] { _ = try context.existingObject(with: id).objectID }
        }
        // Another transaction holds y; the save locks x, then waits for y; the other
        // transaction then asks for x: a deadlock, whose victim is the save (it waited first).
        let saving = try await PostgresFailureTests.whileRowLocked(store, key: keyY) { holder -> Task<StrataError?, Never> in
            let saving = Task {
                await context.perform { context -> StrataError? in
                    (context.registeredObject(for: x) as? PGNote)?.title = "x saved"
                    (context.registeredObject(for: y) as? PGNote)?.title = "y saved"
                    do {
                        try context.save()
                        return nil
                    } catch {
                        return error as? StrataError
                    }
                }
            }
            #expect(try PostgresFailureTests.waitForBlocked(by: holder, terminating: false) == 1)
            // Returns once the server ends the deadlock by aborting the save's transaction:
            // this side checks for deadlocks only after 10 s (the save after the default
            // 1 s), so on a loaded machine too the save is the one that finds it, and the
            // victim.
            _ = try holder.execute("SET LOCAL deadlock_timeout = '10s'", [])
            _ = try holder.execute("SELECT 1 FROM \"\(store.schema)\".\"Note\" WHERE \"_pk\" = $1 FOR UPDATE", [.int64(Int64(keyX))])
            return saving   // this transaction ends (ROLLBACK) as the helper returns; the retry then goes through
        }
        let failure = await saving.value
        #expect(failure == nil, "\(String(describing: failure))")
        let titles = try store.execute("SELECT title FROM \"\(store.schema)\".\"Note\" ORDER BY \"_pk\"").rows
        #expect(titles == [[.text("x saved")], [.text("y saved")]])
    }

    @Test("upserts: under a merging policy a new object claiming a stored object's constrained values becomes it (its ID, its row), and new objects claiming each other's become one; relationships follow; .error still fails", arguments: StoreKind.allCases)
    func upserts(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let a = try await store.instance()
        let b = try await store.instance()
        let stored = try await ManagedObjectContext(.privateQueue, coordinator: a).perform { context in
            let tag = PGTag()
            tag.label = "swift"
            try context.insert(tag)
            try context.save()
            return tag.objectID
        }
        // .error: the same save fails, writing nothing.
        let strict = await ManagedObjectContext(.privateQueue, coordinator: b).perform { context -> StrataError? in
            let tag = PGTag()
            tag.label = "swift"
            do {
                try context.insert(tag)
                try context.save()
                return nil
            } catch {
                return error as? StrataError
            }
        }
        #expect(strict?.code == .constraintConflicts)
        let context = ManagedObjectContext(.privateQueue, coordinator: b)
        context.mergePolicy = .mergeByPropertyObjectTrump
        let (note, adopted) = try await context.perform { context in
            let note = PGNote(), tag = PGTag(), first = PGTag(), second = PGTag()
            note.title = "tagged"
            tag.label = "swift"
            first.label = "new"
            second.label = "new"
            for object in [note, tag, first, second] as [ManagedObject] { try context.insert(object) }
            note.tags = [tag, first, second]
            try context.save()
            return (note.objectID, tag.objectID)
        }
        #expect(adopted == stored, "the new tag took the stored tag's ID")
        let labels = try await ManagedObjectContext(.privateQueue, coordinator: try await store.instance()).perform { context in
            try context.fetch(FetchRequest<PGTag>()).map(\.label).sorted()
        }
        #expect(labels == ["new", "swift"])
        let (members, linked) = try await ManagedObjectContext(.privateQueue, coordinator: try await store.instance()).perform { context in
            let fetched = try #require(try context.fetch(FetchRequest<PGNote>()).first { $0.objectID == note })
            let swift = try #require(try context.existingObject(with: stored) as? PGTag)
            return (fetched.tags.map(\.label).sorted(), swift.notes.map(\.objectID))
        }
        #expect(members == ["new", "swift"])
        #expect(linked == [note], "the stored tag's side lists the note")
    }

    @Test("upserts racing across instances: contexts of two instances inserting the same new labels at once end with one row per label, and every save goes through", arguments: StoreKind.allCases)
    func racingUpserts(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let a = try await store.instance()
        let b = try await store.instance()
        let failures = LockedValue<[String]>([])
        try await withThrowingTaskGroup(of: Void.self) { group in
            for role in 0..<4 {
                group.addTask {
                    let context = ManagedObjectContext(.privateQueue, coordinator: role % 2 == 0 ? a : b)
                    context.mergePolicy = .mergeByPropertyObjectTrump
                    for round in 0..<8 {
                        await context.perform { context in
                            do {
                                let tag = PGTag()
                                tag.label = "label \(round)"
                                try context.insert(tag)
                                try context.save()
                                context.reset()
                            } catch {
                                failures.withLock { $0.append("\(error)") }
                            }
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
        let labels = try await ManagedObjectContext(.privateQueue, coordinator: try await store.instance()).perform { context in
            try context.fetch(FetchRequest<PGTag>()).map(\.label)
        }
        #expect(labels.count == 8 && Set(labels).count == 8)
    }

    /// Folder `name`'s notes and note `title`'s folder, as a new context of `coordinator` reads them.
    static func membership(_ title: String, folder name: String, in coordinator: PersistentStoreCoordinator) async throws -> String {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            var notes = FetchRequest<PGNote>()
            notes.predicate = try FetchPredicate(format: "title == %@", title)
            let note = try #require(try context.fetch(notes).first)
            var folders = FetchRequest<PGFolder>()
            folders.predicate = try FetchPredicate(format: "name == %@", name)
            let folder = try #require(try context.fetch(folders).first)
            return "\(note.folder?.name ?? "-") \(folder.notes.map(\.title).sorted())"
        }
    }

    @Test("a note another instance moved out of its folder is not linked back by a merging root save whose view of the folder mixes two moments (the stress test's lost write, on PostgreSQL)", arguments: StoreKind.allCases)
    func staleMemberIsNotLinkedBack(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let a = try await store.instance()
        let b = try await store.instance()
        let id = try await ManagedObjectContext(.privateQueue, coordinator: a).perform { context in
            let folder = PGFolder()
            folder.name = "Inbox"
            try context.insert(folder)
            let note = PGNote()
            note.title = "a"
            try context.insert(note)
            note.folder = folder
            try context.save()
            return note.objectID
        }
        let root = ManagedObjectContext(.privateQueue, coordinator: a, name: "root")
        root.mergePolicy = .mergeByPropertyObjectTrump
        try await root.perform { context in
            context.retainsRegisteredObjects = true
            let note = try #require(try context.existingObject(with: id) as? PGNote)
            #expect(note.folder?.name == "Inbox")   // the folder is read, its notes are not
        }
        let child = ManagedObjectContext(.privateQueue, parent: root, name: "child")
        child.mergePolicy = .mergeByPropertyObjectTrump
        try await child.perform { context in
            context.retainsRegisteredObjects = true
            let folder = try #require(try context.existingObject(with: id) as? PGNote).folder
            let titles = folder?.notes.map(\.title)
            #expect(titles == ["a"])   // read through the root, which does not load them
        }
        // Another instance moves the note out of the folder.
        try await ManagedObjectContext(.privateQueue, coordinator: b).perform { context in
            let note = try #require(try context.existingObject(with: id) as? PGNote)
            _ = note.folder?.notes.count
            note.folder = nil
            try context.save()
        }
        try await child.perform { context in
            let note = try #require(try context.existingObject(with: id) as? PGNote)
            let added = PGNote()
            added.title = "b"
            try context.insert(added)
            added.folder = note.folder
            note.priority = 5
            try context.save()
        }
        try await root.perform { context in try context.save() }
        #expect(try await Self.membership("a", folder: "Inbox", in: b) == #"- ["b"]"#)
        let priority = try await ManagedObjectContext(.privateQueue, coordinator: b).perform { context in
            try #require(try context.existingObject(with: id) as? PGNote).priority
        }
        #expect(priority == 5)
    }
}
