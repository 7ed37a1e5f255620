import Foundation
@testable import Strata
import StrataTesting
import Testing

/// A gadget: a unique serial, an indexed optional label.
final class Gadget: ManagedObject {
    override class var uniquenessConstraints: [[String]] { [["serial"]] }
    @Attribute var serial: Int64 = 0
    @Attribute(indexed: true) var label: String?
    @Attribute var count: Int64 = 0
}

/// Batch requests: inserts, updates and deletes written straight to the store in one write
/// transaction, below every context, keeping indexes, constraints and both sides of every
/// relationship consistent, recording history, and reaching contexts by merges.
@Suite("Batch requests")
struct BatchRequestTests {
    static func coordinator(
        model: ManagedObjectModel = NotesModel.model, tracking: Bool = true
    ) async throws -> PersistentStoreCoordinator {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        var options = CoordinatorStoreTests.options
        options.tracksPersistentHistory = tracking
        try await coordinator.addPersistentStore(type: .inMemory, options: options)
        return coordinator
    }

    /// The stored notes, as (title, priority, body, folder) sorted by title.
    static func notes(
        _ coordinator: PersistentStoreCoordinator, _ format: String? = nil
    ) async throws -> [(title: String, priority: Int16, body: String?, folder: ManagedObjectID?)] {
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let rows = try await context.perform { context in
            var request = FetchRequest<Note>(entityName: "Note")
            if let format { request.predicate = try FetchPredicate(format: format) }
            request.sortDescriptors = [FetchSortDescriptor(key: "title")]
            return try context.fetch(request).map { note in NoteRow(title: note.title, priority: note.priority, body: note.body, folder: note.folder?.objectID) }
        }
        return rows.map { ($0.title, $0.priority, $0.body, $0.folder) }
    }

    struct NoteRow: Sendable {
        var title: String
        var priority: Int16
        var body: String?
        var folder: ManagedObjectID?
    }

    static func saved(
        _ coordinator: PersistentStoreCoordinator, _ make: @escaping @Sendable (isolated ManagedObjectContext) throws -> [ManagedObject]
    ) async throws -> [ManagedObjectID] {
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        return try await context.perform { context in
            let objects = try make(context)
            try context.save()
            return objects.map(\.objectID)
        }
    }

    // MARK: Insert

    @Test("an insert from dictionaries writes every object with its defaults, indexed, and returns what was asked for")
    func insertFromDictionaries() async throws {
        let coordinator = try await Self.coordinator()
        var request = BatchInsertRequest(entityName: "Note", objects: [
            ["title": "b", "priority": Int16(2), "body": "second"],
            ["title": "a"],
            ["title": "c", "priority": 3, "created": Date(timeIntervalSinceReferenceDate: 0), "colour": Colour(red: 1, green: 0, blue: 0)],
        ])
        request.resultType = .objectIDs
        let result = try coordinator.execute(request)
        #expect(result.count == 3 && result.objectIDs?.count == 3)
        #expect(result.objectIDs?.allSatisfy { !$0.isTemporaryID && $0.entityName == "Note" } == true)
        #expect(result.changes[ManagedObjectContext.NotificationKey.insertedObjectIDs.rawValue] == result.objectIDs)
        let notes = try await Self.notes(coordinator)
        #expect(notes.map(\.title) == ["a", "b", "c"])
        #expect(notes.map(\.priority) == [0, 2, 3] && notes.map(\.body) == [nil, "second", nil])
        // The title index has the new rows: an indexed query finds them.
        #expect(try await Self.notes(coordinator, "title BEGINSWITH 'b'").map(\.title) == ["b"])
        // Status only and count results.
        #expect(try coordinator.execute(BatchInsertRequest(entityName: "Note", objects: [["title": "d"]])).count == nil)
        var counted = BatchInsertRequest(entityName: "Note", objects: [["title": "e"], ["title": "f"]])
        counted.resultType = .count
        let countResult = try coordinator.execute(counted)
        #expect(countResult.count == 2 && countResult.objectIDs == nil && countResult.changes.isEmpty)
        #expect(try await Self.notes(coordinator).count == 6)
    }

    @Test("a handler is called until it returns true, across chunks; the typed form resets the object before every call")
    func insertFromHandlers() async throws {
        let coordinator = try await Self.coordinator()
        var index = 0
        let total = BatchRowProducer.chunkSize + 100
        var request = BatchInsertRequest(entityName: "Note") { dictionary in
            guard index < total else { return true }
            dictionary["title"] = String(format: "n%06d", index)
            dictionary["priority"] = Int16(index % 6)
            index += 1
            return false
        }
        request.resultType = .count
        #expect(try coordinator.execute(request).count == total)
        #expect(index == total)
        #expect(try await Self.notes(coordinator, "priority == 5").count == total / 6)

        var calls = 0
        let typed = BatchInsertRequest(Note.self) { note in
            calls += 1
            guard calls <= 10 else { return true }
            #expect(note.body == nil && note.priority == 0 && note.title == "")   // reset
            note.title = "typed \(calls)"
            if calls.isMultiple(of: 2) { note.body = "even" }
            note.priority = 4
            return false
        }
        _ = try coordinator.execute(typed)
        let notes = try await Self.notes(coordinator, "title BEGINSWITH 'typed'")
        #expect(notes.count == 10 && notes.allSatisfy { $0.priority == 4 })
        #expect(notes.filter { $0.body == "even" }.count == 5)
        var untypedCalls = 0
        _ = try coordinator.execute(BatchInsertRequest(entityName: "Folder", managedObjectHandler: { folder in
            untypedCalls += 1
            guard untypedCalls <= 3 else { return true }
            try? folder.setValue("f\(untypedCalls)", forKey: "name")
            return false
        }))
        let folders = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.fetch(FetchRequest<Folder>(entityName: "Folder")).map(\.name).sorted()
        }
        #expect(folders == ["f1", "f2", "f3"])
    }

    @Test("a handler's rows survive a map growth in the middle of the write: the handler is not asked again")
    func insertAcrossMapGrowth() async throws {
        let directory = TemporaryDirectory()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        var options = CoordinatorStoreTests.options
        options.mapSize = 1 << 20   // 1 MiB: the insert below needs several
        try await coordinator.addPersistentStore(type: .lmdb, at: directory.url, options: options)
        var calls = 0
        let total = 60_000
        var request = BatchInsertRequest(entityName: "Note") { dictionary in
            calls += 1
            guard calls <= total else { return true }
            dictionary["title"] = "a fairly long title so that the rows need room \(calls)"
            return false
        }
        request.resultType = .count
        #expect(try coordinator.execute(request).count == total)
        #expect(calls == total + 1)
        let count = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.count(for: FetchRequest<Note>(entityName: "Note"))
        }
        #expect(count == total)
    }

    @Test("bad input fails the whole request with a typed error and writes nothing")
    func insertBadInput() async throws {
        let coordinator = try await Self.coordinator()
        func fails(_ request: BatchInsertRequest, _ code: StrataError.Code, sourceLocation: SourceLocation = #_sourceLocation) throws {
            try expectCode(code, sourceLocation: sourceLocation) { _ = try coordinator.execute(request) }
        }
        try fails(BatchInsertRequest(entityName: "Note", objects: [["title": "ok"], ["nope": 1]]), .unknownKey)
        try fails(BatchInsertRequest(entityName: "Note", objects: [["title": "ok"], ["title": 42]]), .typeMismatch)
        try fails(BatchInsertRequest(entityName: "Note", objects: [["title": "ok"], ["title": "x", "priority": 9]]), .validation)
        try fails(BatchInsertRequest(entityName: "Note", objects: [["title": "ok", "folder": "not an ID"]]), .typeMismatch)
        try fails(BatchInsertRequest(entityName: "Person", objects: [["name": "no passport"]]), .validation)
        try fails(BatchInsertRequest(entityName: "Nope", objects: [["title": "x"]]), .noStore)
        try fails(BatchInsertRequest(entityName: "Item", objects: [["title": "abstract"]]), .invalidObjectState)
        let missingFolder = ManagedObjectID(store: try #require(coordinator.persistentStores.first).identifier, entityName: "Folder", primaryKey: PrimaryKey(99)!)
        try fails(BatchInsertRequest(entityName: "Note", objects: [["title": "x", "folder": missingFolder]]), .objectNotFound)
        #expect(try await Self.notes(coordinator).isEmpty)
        #expect(try coordinator.execute(.fetchHistory(after: nil)).transactions.isEmpty)
    }

    @Test("uniqueness constraints: a collision fails under .error; a merging policy turns it into an update of the stored object")
    func insertUpserts() async throws {
        let coordinator = try await Self.coordinator(model: AccountsModel.model)
        let stored = try await Self.saved(coordinator) { context in
            let account = UserAccount()
            try context.insert(account)
            account.email = "a@x"
            account.name = "old"
            account.visits = 7
            return [account]
        }
        let rows: [[String: any Sendable]] = [["email": "a@x", "name": "new", "visits": Int64(1)], ["email": "b@x", "name": "b"], ["email": "b@x", "name": "b again"]]
        try expectCode(.constraintConflicts) { _ = try coordinator.execute(BatchInsertRequest(entityName: "UserAccount", objects: rows)) }
        var upsert = BatchInsertRequest(entityName: "UserAccount", objects: rows)
        upsert.mergePolicy = .mergeByPropertyObjectTrump
        upsert.resultType = .objectIDs
        let result = try coordinator.execute(upsert)
        #expect(result.count == 2)
        #expect(result.objectIDs?.first == stored.first)
        #expect(result.objectIDs?[1] == result.objectIDs?[2])
        let accounts = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            var request = FetchRequest<UserAccount>(entityName: "UserAccount")
            request.sortDescriptors = [FetchSortDescriptor(key: "email")]
            return try context.fetch(request).map { "\($0.email ?? "-") \($0.name) \($0.visits)" }
        }
        #expect(accounts == ["a@x new 1", "b@x b again 0"])
        let history = try coordinator.execute(.fetchHistory(after: nil)).transactions.last?.changes ?? []
        #expect(history.filter { $0.changeType == .update }.map(\.changedObjectID) == [stored[0]])
        #expect(history.filter { $0.changeType == .insert }.count == 1)
    }

    @Test("an upsert under mergeByPropertyObjectTrump or overwrite: what the stored object keeps of the attributes the new one leaves nil or at their defaults")
    func upsertUnsetAttributes() async throws {
        for policy in [MergePolicy.mergeByPropertyObjectTrump, .overwrite] {
            let coordinator = try await Self.coordinator(model: AccountsModel.model)
            _ = try await Self.saved(coordinator) { context in
                let account = UserAccount()
                try context.insert(account)
                account.email = "a@x"
                account.handle = "kept?"
                account.region = "eu"
                account.name = "old"
                account.visits = 7
                return [account]
            }
            var upsert = BatchInsertRequest(entityName: "UserAccount", objects: [["email": "a@x", "name": "new"]])
            upsert.mergePolicy = policy
            _ = try coordinator.execute(upsert)
            let row = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
                try context.fetch(FetchRequest<UserAccount>(entityName: "UserAccount")).map { "\($0.email ?? "-") \($0.handle ?? "nil") \($0.region) \($0.name) \($0.visits)" }
            }
            // Object trump: what the new object holds wins (a default is a value), a nil
            // keeps the stored value; overwrite: the new object's state, nils included.
            let overwrites: Bool = if case .overwrite = policy { true } else { false }
            #expect(row == [overwrites ? "a@x nil  new 0" : "a@x kept?  new 0"], "\(policy)")
        }
    }

    @Test("an upsert that changes a second constrained value moves its unique entry, or leaves a taken value to the general merge")
    func upsertSecondConstraint() async throws {
        let coordinator = try await Self.coordinator(model: AccountsModel.model)
        _ = try coordinator.execute(BatchInsertRequest(entityName: "UserAccount", objects: [
            ["email": "a@x", "region": "eu", "handle": "x"], ["email": "b@x", "region": "eu", "handle": "y"],
        ]))
        var move = BatchInsertRequest(entityName: "UserAccount", objects: [["email": "a@x", "region": "eu", "handle": "z"]])
        move.mergePolicy = .mergeByPropertyObjectTrump
        move.resultType = .count
        #expect(try coordinator.execute(move).count == 1)
        // (eu, x) is free again; (eu, z) is a@x's.
        _ = try coordinator.execute(BatchInsertRequest(entityName: "UserAccount", objects: [["email": "c@x", "region": "eu", "handle": "x"]]))
        try expectCode(.constraintConflicts) {
            _ = try coordinator.execute(BatchInsertRequest(entityName: "UserAccount", objects: [["email": "d@x", "region": "eu", "handle": "z"]]))
        }
        // a@x taking b@x's (eu, y): not a rewrite in place; the general merge settles it.
        var taken = BatchInsertRequest(entityName: "UserAccount", objects: [["email": "a@x", "region": "eu", "handle": "y"]])
        taken.mergePolicy = .mergeByPropertyObjectTrump
        _ = try? coordinator.execute(taken)
        let report = try await coordinator.checkIntegrity()
        #expect(report.isConsistent, "\(report)")
    }

    @Test("many upserts across chunks: collisions rewritten in place keep indexes, unique indexes and history right")
    func manyUpserts() async throws {
        let model = try ManagedObjectModel(types: [Gadget.self])
        let coordinator = try await Self.coordinator(model: model)
        _ = try coordinator.execute(BatchInsertRequest(entityName: "Gadget", objects: (0..<1_000).map {
            ["serial": Int64($0), "label": "old \($0)", "count": Int64(1)]
        }))
        let total = BatchRowProducer.chunkSize + 4_000
        var next = 500
        var request = BatchInsertRequest(Gadget.self) { gadget in
            guard next < 500 + total else { return true }
            gadget.serial = Int64(next)
            if next.isMultiple(of: 2) { gadget.label = "new \(next)" }   // odd ones leave it nil
            gadget.count = 2
            next += 1
            return false
        }
        request.mergePolicy = .mergeByPropertyObjectTrump
        request.resultType = .count
        #expect(try coordinator.execute(request).count == total)
        let report = try await coordinator.checkIntegrity()
        #expect(report.isConsistent, "\(report)")
        let rows = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            var request = FetchRequest<Gadget>(entityName: "Gadget")
            request.predicate = try FetchPredicate(format: "serial IN %@", [0, 501, 502, 999, 1_000, 1_001])
            request.sortDescriptors = [FetchSortDescriptor(key: "serial")]
            return try context.fetch(request).map { "\($0.serial) \($0.label ?? "nil") \($0.count)" }
        }
        #expect(rows == ["0 old 0 1", "501 old 501 2", "502 new 502 2", "999 old 999 2", "1000 new 1000 2", "1001 nil 2"])
        #expect(try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            var byLabel = FetchRequest<Gadget>(entityName: "Gadget")
            byLabel.predicate = try FetchPredicate(format: "label == 'old 501'")   // through the label index
            return try context.count(for: byLabel)
        } == 1)
        let last = try #require(try coordinator.execute(.fetchHistory(after: nil)).transactions.last)
        #expect(last.changes.filter { $0.changeType == .update }.count == 500)
        #expect(last.changes.filter { $0.changeType == .insert }.count == total - 500)
    }

    @Test("relationships given as IDs: both sides agree afterwards (many-to-one, one-to-many, many-to-many, one-to-one)")
    func insertRelationships() async throws {
        let coordinator = try await Self.coordinator()
        let ids = try await Self.saved(coordinator) { context in
            let inbox = Folder(), archive = Folder(), tag = Tag(), old = Note(), passport = Passport(), holder = Person()
            for object in [inbox, archive, tag, old, passport, holder] as [ManagedObject] { try context.insert(object) }
            inbox.name = "Inbox"
            archive.name = "Archive"
            tag.label = "red"
            old.title = "old"
            old.folder = archive
            holder.name = "first"
            holder.passport = passport
            return [inbox, archive, tag, old, passport, holder]
        }
        let (inbox, archive, tag, old, passport, firstHolder) = (ids[0], ids[1], ids[2], ids[3], ids[4], ids[5])
        var notes = BatchInsertRequest(entityName: "Note", objects: [
            ["title": "n1", "folder": inbox, "tags": [tag]],
            ["title": "n2", "folder": inbox],
        ])
        notes.resultType = .objectIDs
        let noteResult = try coordinator.execute(notes)
        let inserted = try #require(noteResult.objectIDs)
        // The folder both notes joined is one update, once, in the result and in history.
        #expect(noteResult.changes[ManagedObjectContext.NotificationKey.updatedObjectIDs.rawValue].map(Set.init) == [inbox, tag])
        let noteHistory = try #require(try coordinator.execute(.fetchHistory(after: nil)).transactions.last)
        #expect(noteHistory.changes.filter { $0.changedObjectID == inbox }.map(\.updatedProperties) == [["notes"]])
        var folder = BatchInsertRequest(entityName: "Folder", objects: [["name": "Moved", "notes": [old]]])
        folder.resultType = .objectIDs
        let folderResult = try coordinator.execute(folder)
        let moved = try #require(folderResult.objectIDs?.first)
        #expect(Set(folderResult.changes[ManagedObjectContext.NotificationKey.updatedObjectIDs.rawValue] ?? []) == [old, archive])
        let person = try #require(try coordinator.execute({
            var request = BatchInsertRequest(entityName: "Person", objects: [["name": "second", "passport": passport]])
            request.resultType = .objectIDs
            return request
        }()).objectIDs?.first)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let inboxNotes = try #require(context.existingObject(with: inbox) as? Folder).notes
            #expect(Set(inboxNotes.map(\.objectID)) == Set(inserted))
            #expect(Set(try #require(context.existingObject(with: tag) as? Tag).notes.map(\.objectID)) == [inserted[0]])
            #expect(try #require(context.existingObject(with: archive) as? Folder).notes.isEmpty)
            #expect(try #require(context.existingObject(with: moved) as? Folder).notes.map(\.objectID) == [old])
            #expect(try #require(context.existingObject(with: old) as? Note).folder?.objectID == moved)
            #expect(try #require(context.existingObject(with: passport) as? Passport).holder?.objectID == person)
            #expect(try #require(context.existingObject(with: firstHolder) as? Person).passport == nil)
        }
        // Every store invariant (links mirror foreign keys, indexes match rows) holds.
        let report = try await coordinator.checkIntegrity()
        #expect(report.isConsistent, "\(report)")
    }

    // MARK: Update

    @Test("an update sets constants and expressions of each row's own values, on the rows the predicate matches")
    func updateRows() async throws {
        let coordinator = try await Self.coordinator()
        _ = try coordinator.execute(BatchInsertRequest(entityName: "Note", objects: (0..<10).map { ["title": "t\($0)", "priority": Int16($0 % 4)] }))
        var request = BatchUpdateRequest(entityName: "Note")
        request.predicate = try FetchPredicate(format: "priority >= 2")
        request.propertiesToUpdate = [
            "priority": try UpdateExpression(format: "priority + 2 - 1"),
            "body": .constant("bumped"),
            "title": try UpdateExpression(format: "title + %@", "!"),
        ]
        request.resultType = .objectIDs
        let result = try coordinator.execute(request)
        #expect(result.count == 4 && result.objectIDs?.count == 4)
        let notes = try await Self.notes(coordinator)
        #expect(notes.filter { $0.body == "bumped" }.map(\.title).sorted() == ["t2!", "t3!", "t6!", "t7!"])
        #expect(notes.filter { $0.body == "bumped" }.map(\.priority).sorted() == [3, 3, 4, 4])
        // The title index follows: the new titles are found through it, the old ones are not.
        #expect(try await Self.notes(coordinator, "title == 't2!'").count == 1)
        #expect(try await Self.notes(coordinator, "title == 't2'").isEmpty)
        // A row whose values would not change is not counted or written.
        var again = BatchUpdateRequest(entityName: "Note")
        again.propertiesToUpdate = ["body": .constant("bumped")]
        again.predicate = try FetchPredicate(format: "body == 'bumped'")
        again.resultType = .count
        #expect(try coordinator.execute(again).count == 0)
        // nil clears.
        var clear = BatchUpdateRequest(entityName: "Note")
        clear.propertiesToUpdate = ["body": .constant(nil)]
        clear.resultType = .count
        #expect(try coordinator.execute(clear).count == 4)
        #expect(try await Self.notes(coordinator).allSatisfy { $0.body == nil })
        let history = try coordinator.execute(.fetchHistory(after: nil)).transactions
        #expect(history.count == 3)
        #expect(history[1].changes.allSatisfy { $0.changeType == .update && $0.updatedProperties == ["body", "priority", "title"] })
    }

    @Test("an update that breaks a rule, a type or a constraint fails with a typed error and writes nothing")
    func updateBadInput() async throws {
        let coordinator = try await Self.coordinator()
        _ = try coordinator.execute(BatchInsertRequest(entityName: "Note", objects: (0..<5).map { ["title": "t\($0)", "priority": Int16($0)] }))
        func update(_ properties: [String: UpdateExpression], _ code: StrataError.Code, sourceLocation: SourceLocation = #_sourceLocation) throws {
            var request = BatchUpdateRequest(entityName: "Note")
            request.propertiesToUpdate = properties
            try expectCode(code, sourceLocation: sourceLocation) { _ = try coordinator.execute(request) }
        }
        try update(["priority": try UpdateExpression(format: "priority + 2")], .validation)   // t4 would be 6, above the maximum 5
        try update(["priority": .constant("high")], .typeMismatch)
        try update(["priority": try UpdateExpression(format: "priority / 0")], .typeMismatch)
        try update(["priority": try UpdateExpression(format: "priority * 1.5")], .typeMismatch)
        try update(["nope": .constant(1)], .unknownKey)
        try update(["isSelected": .constant(true)], .unknownKey)
        try update(["priority": try UpdateExpression(format: "missing + 1")], .unknownKey)
        try update(["folder": .constant(nil)], .unknownKey)
        #expect(try await Self.notes(coordinator).map(\.priority) == [0, 1, 2, 3, 4])
        #expect(try coordinator.execute(.fetchHistory(after: nil)).transactions.count == 1)

        let accounts = try await Self.coordinator(model: AccountsModel.model)
        _ = try accounts.execute(BatchInsertRequest(entityName: "UserAccount", objects: [["email": "a@x"], ["email": "b@x"]]))
        var collide = BatchUpdateRequest(entityName: "UserAccount")
        collide.propertiesToUpdate = ["email": .constant("same@x")]
        try expectCode(.constraintConflicts) { _ = try accounts.execute(collide) }
        var rename = BatchUpdateRequest(entityName: "UserAccount")
        rename.predicate = try FetchPredicate(format: "email == 'a@x'")
        rename.propertiesToUpdate = ["email": .constant("c@x")]
        #expect(try accounts.execute(rename).count == nil)
        // The unique index moved: a@x is free again, c@x is taken.
        _ = try accounts.execute(BatchInsertRequest(entityName: "UserAccount", objects: [["email": "a@x"]]))
        try expectCode(.constraintConflicts) {
            _ = try accounts.execute(BatchInsertRequest(entityName: "UserAccount", objects: [["email": "c@x"]]))
        }
    }

    @Test("expressions: integer, double, decimal, string and date arithmetic; parse errors are typed")
    func expressions() throws {
        let attribute = AttributeDescription(name: "n", type: .integer64)
        func value(_ format: String, _ row: [String: AttributeValue] = [:], as type: AttributeType = .double) throws -> AttributeValue? {
            try UpdateExpression(format: format).evaluate(for: AttributeDescription(name: "x", type: type), entityName: "E") { row[$0] }
        }
        #expect(try value("1 + 2 * 3 - (4 - 2) % 3") == .integer(5))
        #expect(try value("-n + 1", ["n": .integer(3)]) == .integer(-2))
        #expect(try value("n * 1.5", ["n": .integer(3)]) == .double(4.5))
        #expect(try value("n + 1", ["n": .decimal(Decimal(string: "1.25")!)]) == .decimal(Decimal(string: "2.25")!))
        #expect(try value("s + '!'", ["s": .string("hi")]) == .string("hi!"))
        #expect(try value("d + 60", ["d": .date(Date(timeIntervalSinceReferenceDate: 0))]) == .date(Date(timeIntervalSinceReferenceDate: 60)))
        #expect(try value("n + 1", [:]) == nil)   // nil in, nil out
        #expect(try value("NULL") == nil && value("YES") == .boolean(true))
        #expect(throws: UpdateExpression.EvaluationError.self) { try value("9223372036854775807 + 1") }
        #expect(throws: UpdateExpression.EvaluationError.self) { try value("s * 2", ["s": .string("x")]) }
        #expect(UpdateExpression.stored(.double(3), as: .integer16) == .integer(3))
        #expect(UpdateExpression.stored(.double(3.5), as: .integer16) == nil)
        #expect(UpdateExpression.stored(.integer(70_000), as: .integer16) == nil)
        #expect(UpdateExpression.stored(.integer(2), as: .double) == .double(2))
        _ = attribute
        for bad in ["", "1 +", "(1", "'open", "1 2", "n + @"] {
            #expect(throws: FetchPredicateError.self, "\(bad)") { try UpdateExpression(format: bad) }
        }
        #expect(throws: FetchPredicateError.self) { try UpdateExpression(format: "%@ + %@", 1) }
        #expect(throws: FetchPredicateError.self) { try UpdateExpression(format: "n", 1) }
    }

    @Test("a context holding an object the update changed gets a conflict when it saves it; an automatic merger sees the new values")
    func updateReachesContexts() async throws {
        let coordinator = try await Self.coordinator()
        let id = try #require(try await Self.saved(coordinator) { context in
            let note = Note()
            try context.insert(note)
            note.title = "x"
            return [note]
        }.first)
        let holder = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let merger = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        await merger.perform { $0.automaticallyMergesChangesFromParent = true }
        // Both hold the object changed and unsaved: a context keeps such objects registered.
        try await holder.perform { context in try #require(context.existingObject(with: id) as? Note).title = "y" }
        try await merger.perform { context in try #require(context.existingObject(with: id) as? Note).body = "local" }
        var request = BatchUpdateRequest(entityName: "Note")
        request.propertiesToUpdate = ["priority": .constant(Int16(5))]
        _ = try coordinator.execute(request)
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(5)
        while try await merger.perform({ context in try #require(context.existingObject(with: id) as? Note).priority }) != 5 {
            #expect(clock.now < deadline, "the automatic merge did not arrive")
            if clock.now >= deadline { break }
            try await Task.sleep(for: .milliseconds(5))
        }
        // The merge kept the merger's own unsaved change on top.
        #expect(try await merger.perform { context in try #require(context.existingObject(with: id) as? Note).body } == "local")
        try await holder.perform { context in
            try expectCode(.mergeConflicts) { try context.save() }
        }
    }

    // MARK: Delete

    @Test("a delete applies cascade, nullify and deny, and checks deny against everything it deletes")
    func deleteRules() async throws {
        let coordinator = try await Self.coordinator()
        let ids = try await Self.saved(coordinator) { context in
            let folder = Folder(), keep = Folder(), tag = Tag(), n1 = Note(), n2 = Note(), n3 = Note(), passport = Passport(), person = Person()
            for object in [folder, keep, tag, n1, n2, n3, passport, person] as [ManagedObject] { try context.insert(object) }
            folder.name = "doomed"
            keep.name = "keep"
            tag.label = "red"
            n1.title = "n1"
            n2.title = "n2"
            n3.title = "n3"
            n1.folder = folder
            n2.folder = folder
            n3.folder = keep
            n1.tags = [tag]
            person.name = "p"
            person.passport = passport
            return [folder, keep, tag, n1, n2, n3, passport, person]
        }
        let (folder, keep, tag, n1, n2, n3, passport, person) = (ids[0], ids[1], ids[2], ids[3], ids[4], ids[5], ids[6], ids[7])
        // Deny: the tag still has n1.
        do {
            _ = try coordinator.execute(BatchDeleteRequest(objectIDs: [tag]))
            Issue.record("deny did not stop the delete")
        } catch let error as StrataError {
            #expect(error.validationFailures.map(\.reason) == [.deleteDenied(count: 1)])
        }
        // Cascade: the folder takes n1 and n2; n1's tag link goes with it.
        var cascade = BatchDeleteRequest(objectIDs: [folder])
        cascade.resultType = .objectIDs
        let result = try coordinator.execute(cascade)
        #expect(result.count == 3 && Set(result.objectIDs ?? []) == [folder, n1, n2])
        #expect(result.changes[ManagedObjectContext.NotificationKey.updatedObjectIDs.rawValue] == [tag])
        // Now the tag has no notes: deny lets it go.
        #expect(try coordinator.execute(BatchDeleteRequest(objectIDs: [tag])).count == nil)
        // Nullify, one-to-one: the person no longer has the deleted passport.
        _ = try coordinator.execute(BatchDeleteRequest(objectIDs: [passport]))
        // Nullify, many-to-one: deleting n3 leaves its folder without it.
        _ = try coordinator.execute(BatchDeleteRequest(objectIDs: [n3]))
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context throws in
            #expect(try #require(context.existingObject(with: person) as? Person).passport == nil)
            #expect(try #require(context.existingObject(with: keep) as? Folder).notes.isEmpty)
            for gone in [folder, n1, n2, n3, tag, passport] {
                #expect(throws: StrataError.self) { try context.existingObject(with: gone) }
            }
        }
        #expect(try await coordinator.checkIntegrity().isConsistent)
        // A tag and every note it has, deleted together: deny is satisfied.
        let more = try await Self.saved(coordinator) { context in
            let tag = Tag(), note = Note()
            try context.insert(tag)
            try context.insert(note)
            note.title = "tagged"
            note.tags = [tag]
            return [tag, note]
        }
        var both = BatchDeleteRequest(objectIDs: more)
        both.resultType = .count
        #expect(try coordinator.execute(both).count == 2)
    }

    @Test("a delete from a fetch request honours its predicate and window; history keeps tombstones")
    func deleteFromFetch() async throws {
        let model = try ManagedObjectModel(types: [Subscriber.self])
        let coordinator = try await Self.coordinator(model: model)
        _ = try coordinator.execute(BatchInsertRequest(entityName: "Subscriber", objects: (0..<20).map { ["email": "s\($0)@x", "visits": Int64($0)] }))
        var fetch = FetchRequest<Subscriber>(entityName: "Subscriber")
        fetch.predicate = try FetchPredicate(format: "visits >= 10")
        fetch.sortDescriptors = [FetchSortDescriptor(key: "visits", ascending: false)]
        fetch.fetchLimit = 3
        var request = BatchDeleteRequest(fetchRequest: fetch)
        request.resultType = .count
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        context.transactionAuthor = "janitor"
        await context.perform { $0.name = "cleanup" }
        #expect(try await context.perform { try $0.execute(request) }.count == 3)
        let left = try await context.perform { context in
            try context.fetch(FetchRequest<Subscriber>(entityName: "Subscriber")).map(\.visits).sorted()
        }
        #expect(left == Array(0..<17))
        let last = try #require(try coordinator.execute(.fetchHistory(after: nil)).transactions.last)
        #expect(last.author == "janitor" && last.contextName == "cleanup")
        #expect(Set(last.changes.compactMap { $0.tombstone?["email"] }) == [.string("s17@x"), .string("s18@x"), .string("s19@x")])
        // IDs no longer stored are skipped; a temporary ID is refused.
        try expectCode(.invalidObjectState) {
            _ = try coordinator.execute(BatchDeleteRequest(objectIDs: [ManagedObjectID(temporaryFor: "Subscriber")]))
        }
    }

    @Test("a large update and delete (many pages, indexed and unique values) leave rows, indexes and unique indexes consistent")
    func largeUpdateAndDelete() async throws {
        let coordinator = try await Self.coordinator(model: AccountsModel.model, tracking: false)
        let total = 20_000
        _ = try coordinator.execute(BatchInsertRequest(entityName: "UserAccount", objects: (0..<total).map {
            ["email": "u\($0)@x", "name": String(repeating: "n", count: $0 % 50), "visits": Int64($0)]
        }))
        var update = BatchUpdateRequest(entityName: "UserAccount")
        update.predicate = try FetchPredicate(format: "visits < %@", total / 2)
        update.propertiesToUpdate = ["email": try UpdateExpression(format: "'new-' + email"), "visits": try UpdateExpression(format: "visits * 2")]
        update.resultType = .count
        #expect(try coordinator.execute(update).count == total / 2)
        var every = FetchRequest<UserAccount>(entityName: "UserAccount")
        every.predicate = try FetchPredicate(format: "name BEGINSWITH 'nnnnn'")   // a full scan: every few rows
        var delete = BatchDeleteRequest(fetchRequest: every)
        delete.resultType = .count
        let deleted = try #require(try coordinator.execute(delete).count)
        #expect(deleted == (0..<total).filter { $0 % 50 >= 5 }.count)
        let report = try await coordinator.checkIntegrity()
        #expect(report.isConsistent, "\(report)")
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let (count, renamed) = try await context.perform { context in
            var renamed = FetchRequest<UserAccount>(entityName: "UserAccount")
            renamed.predicate = try FetchPredicate(format: "email BEGINSWITH 'new-'")
            return (try context.count(for: FetchRequest<UserAccount>(entityName: "UserAccount")), try context.count(for: renamed))
        }
        #expect(count == total - deleted)
        #expect(renamed == (0..<(total / 2)).filter { $0 % 50 < 5 }.count)
        // The freed emails can be taken again; the new ones cannot.
        _ = try coordinator.execute(BatchInsertRequest(entityName: "UserAccount", objects: [["email": "u1@x"]]))
        try expectCode(.constraintConflicts) {
            _ = try coordinator.execute(BatchInsertRequest(entityName: "UserAccount", objects: [["email": "new-u1@x"]]))
        }
    }

    // MARK: Concurrency

    @Test("batch requests and saves from several tasks at once: each is atomic, none is lost")
    func concurrentRequests() async throws {
        let directory = TemporaryDirectory()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        var options = CoordinatorStoreTests.options
        options.tracksPersistentHistory = true
        try await coordinator.addPersistentStore(type: .lmdb, at: directory.url, options: options)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<4 {
                group.addTask {
                    for round in 0..<10 {
                        _ = try coordinator.execute(BatchInsertRequest(
                            entityName: "Note", objects: (0..<50).map { ["title": "w\(worker) r\(round) \($0)", "priority": Int16(1)] }))
                    }
                }
                group.addTask {
                    let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
                    for round in 0..<20 {
                        try await context.perform { context in
                            let note = Note()
                            note.title = "saved \(worker) \(round)"
                            try context.insert(note)
                            try context.save()
                        }
                    }
                }
            }
            group.addTask {
                for _ in 0..<10 {
                    var bump = BatchUpdateRequest(entityName: "Note")
                    bump.predicate = try FetchPredicate(format: "priority == 1")
                    bump.propertiesToUpdate = ["priority": try UpdateExpression(format: "priority + 1")]
                    _ = try coordinator.execute(bump)
                }
            }
            try await group.waitForAll()
        }
        let notes = try await Self.notes(coordinator)
        let expected: Int = 4 * 10 * 50 + 4 * 20
        #expect(notes.count == expected)
        #expect(notes.filter { $0.title.hasPrefix("w") }.allSatisfy { $0.priority == 1 || $0.priority == 2 })
        // Every batch insert is one history transaction with all 50 of its inserts.
        let transactions = try coordinator.execute(.fetchHistory(after: nil)).transactions
        #expect(transactions.filter { $0.changes.count == 50 && $0.changes.allSatisfy { $0.changeType == .insert } }.count == 40)
        #expect(try await coordinator.checkIntegrity().isConsistent)
    }
}

/// Expects `body` to throw a ``StrataError`` of `code`.
func expectCode(
    _ code: StrataError.Code, sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> Void
) throws {
    do {
        try body()
        Issue.record("expected \(code), nothing was thrown", sourceLocation: sourceLocation)
    } catch let error as StrataError {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
    }
}
