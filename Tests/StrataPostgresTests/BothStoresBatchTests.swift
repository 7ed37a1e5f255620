import Foundation
@testable import Strata
import StrataLocks
import StrataPostgres
import Testing

/// Batch update and delete requests, one source against both stores: an LMDB store
/// rewrites records in its write transaction; a PostgreSQL store runs set-based statements
/// in one transaction, on rows it locks.
@Suite("Batch insert, update and delete on both stores")
struct BothStoresBatchTests {
    /// Notes t0…t(count-1), priority i % 4, saved through a context; their IDs in order.
    static func notes(_ count: Int, in coordinator: PersistentStoreCoordinator) async throws -> [ManagedObjectID] {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            var notes: [PGNote] = []
            for index in 0..<count {
                let note = PGNote()
                note.title = "t\(index)"
                note.priority = Int16(index % 4)
                try context.insert(note)
                notes.append(note)
            }
            try context.save()
            return notes.map(\.objectID)
        }
    }

    /// Every note's title, priority and body (or "-"), by title.
    static func stored(_ coordinator: PersistentStoreCoordinator) async throws -> [String] {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            var request = FetchRequest<PGNote>()
            request.sortDescriptors = [FetchSortDescriptor(key: "title")]
            return try context.fetch(request).map { "\($0.title) \($0.priority) \($0.body ?? "-")" }
        }
    }

    /// A store of `kind` that records history, its coordinator.
    static func historyStore(_ kind: StoreKind) async throws -> (BothStoresTestStore, PersistentStoreCoordinator) {
        let store = BothStoresTestStore(kind)
        var options = PersistentStore.Options()
        options.tracksPersistentHistory = true
        let (coordinator, _) = try await store.open(model: PGModel.model, options: options)
        return (store, coordinator)
    }

    @Test("an update sets constants and expressions of each row's own values on the rows the predicate matches; unchanged rows are not counted; nil clears; history records it",
          arguments: StoreKind.allCases)
    func updateRows(kind: StoreKind) async throws {
        let (store, coordinator) = try await Self.historyStore(kind)
        defer { withExtendedLifetime(store) {} }   // its schema or directory lives as long as the test
        _ = try await Self.notes(10, in: coordinator)
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
        let notes = try await Self.stored(coordinator)
        #expect(notes.filter { $0.hasSuffix("bumped") } == ["t2! 3 bumped", "t3! 4 bumped", "t6! 3 bumped", "t7! 4 bumped"])
        #expect(notes.filter { !$0.hasSuffix("bumped") }.count == 6)
        var again = BatchUpdateRequest(entityName: "Note")
        again.propertiesToUpdate = ["body": .constant("bumped")]
        again.predicate = try FetchPredicate(format: "body == 'bumped'")
        again.resultType = .count
        #expect(try coordinator.execute(again).count == 0)
        var clear = BatchUpdateRequest(entityName: "Note")
        clear.propertiesToUpdate = ["body": .constant(nil)]
        clear.resultType = .count
        #expect(try coordinator.execute(clear).count == 4)
        #expect(try await Self.stored(coordinator).allSatisfy { $0.hasSuffix(" -") })
        let history = try coordinator.execute(.fetchHistory(after: nil)).transactions
        #expect(history.count == 3, "the save and two updates that changed rows")
        #expect(history.count == 3 && history[1].changes.count == 4
            && history[1].changes.allSatisfy { $0.changeType == .update && $0.updatedProperties == ["body", "priority", "title"] })
    }

    @Test("an update that breaks a rule, a type or a constraint fails with a typed error and writes nothing", arguments: StoreKind.allCases)
    func updateBadInput(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let coordinator = try await store.instance()
        _ = try await Self.notes(4, in: coordinator)
        let before = try await Self.stored(coordinator)
        func update(_ properties: [String: UpdateExpression], _ code: StrataError.Code, sourceLocation: SourceLocation = #_sourceLocation) {
            var request = BatchUpdateRequest(entityName: "Note")
            request.propertiesToUpdate = properties
            let error = #expect(throws: StrataError.self, sourceLocation: sourceLocation) { _ = try coordinator.execute(request) }
            #expect(error?.code == code, "\(String(describing: error))", sourceLocation: sourceLocation)
        }
        update(["title": .constant(nil)], .validation)   // required
        update(["priority": .constant("high")], .typeMismatch)
        update(["priority": try UpdateExpression(format: "priority / 0")], .typeMismatch)
        update(["nope": .constant(1)], .unknownKey)
        update(["priority": try UpdateExpression(format: "missing + 1")], .unknownKey)
        #expect(try await Self.stored(coordinator) == before)

        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            for label in ["a", "b", "c"] {
                let tag = PGTag()
                tag.label = label
                try context.insert(tag)
            }
            try context.save()
        }
        var collide = BatchUpdateRequest(entityName: "Tag")
        collide.predicate = try FetchPredicate(format: "label != 'a'")
        collide.propertiesToUpdate = ["label": .constant("a")]
        let error = #expect(throws: StrataError.self) { _ = try coordinator.execute(collide) }
        #expect(error?.code == .constraintConflicts && error?.constraintConflicts.isEmpty == false, "\(String(describing: error))")
        let labels = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.fetch(FetchRequest<PGTag>()).map(\.label).sorted()
        }
        #expect(labels == ["a", "b", "c"])
    }

    @Test("an updated row has a new version: a context that read it before fails its save with a merge conflict under the error policy",
          arguments: StoreKind.allCases)
    func updateMovesVersions(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let coordinator = try await store.instance()
        let id = try #require(try await Self.notes(1, in: coordinator).first)
        let holder = ManagedObjectContext(.privateQueue, coordinator: try await store.instance())
        try await holder.perform { context in try #require(context.existingObject(with: id) as? PGNote).title = "mine" }
        var request = BatchUpdateRequest(entityName: "Note")
        request.propertiesToUpdate = ["priority": .constant(Int16(3))]
        _ = try coordinator.execute(request)
        let error = await holder.perform { context -> StrataError? in
            do {
                try context.save()
                return nil
            } catch {
                return error as? StrataError
            }
        }
        #expect(error?.code == .mergeConflicts)
    }

    @Test("batch updates racing each other and contexts' saves lose nothing: every increment is counted", arguments: StoreKind.allCases)
    func concurrentUpdates(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let coordinator = try await store.instance()
        _ = try await Self.notes(5, in: coordinator)
        let other = try await store.instance()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<4 {
                group.addTask {
                    let target = worker % 2 == 0 ? coordinator : other
                    for _ in 0..<10 {
                        var request = BatchUpdateRequest(entityName: "Note")
                        request.propertiesToUpdate = ["views": try UpdateExpression(format: "views + 1")]
                        _ = try target.execute(request)
                    }
                }
            }
            group.addTask {
                try await ManagedObjectContext(.privateQueue, coordinator: other).perform { context in
                    for index in 0..<10 {
                        let note = PGNote()
                        note.title = "new \(index)"
                        try context.insert(note)
                        try context.save()
                    }
                }
            }
            try await group.waitForAll()
        }
        let views = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            var request = FetchRequest<PGNote>()
            request.predicate = try FetchPredicate(format: "title BEGINSWITH 't'")
            return try context.fetch(request).map(\.views)
        }
        #expect(views == [40, 40, 40, 40, 40])
    }

    @Test("a delete follows the delete rules: cascades delete the folder's notes, their join-table rows go, an ordered member leaves its playlist in order, nullify empties the tracks of a deleted playlist",
          arguments: StoreKind.allCases)
    func deleteRules(kind: StoreKind) async throws {
        let (store, coordinator) = try await Self.historyStore(kind)
        defer { withExtendedLifetime(store) {} }   // its schema or directory lives as long as the test
        let (folder, tagID, playlistID, trackIDs) = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let folder = PGFolder(), other = PGFolder(), tag = PGTag(), playlist = PGPlaylist()
            for object in [folder, other, tag, playlist] as [ManagedObject] { try context.insert(object) }
            folder.name = "doomed"
            other.name = "kept"
            tag.label = "swift"
            playlist.name = "p"
            for (title, home) in [("n1", folder), ("n2", folder), ("n3", other)] {
                let note = PGNote()
                note.title = title
                try context.insert(note)
                note.folder = home
                note.tags = [tag]
            }
            var tracks: [PGTrack] = []
            for title in ["a", "b", "c"] {
                let track = PGTrack()
                track.title = title
                try context.insert(track)
                tracks.append(track)
            }
            playlist.tracks = tracks
            try context.save()
            return (folder.objectID, tag.objectID, playlist.objectID, tracks.map(\.objectID))
        }
        var byFetch = FetchRequest<PGFolder>()
        byFetch.predicate = try FetchPredicate(format: "name == 'doomed'")
        var delete = BatchDeleteRequest(fetchRequest: byFetch)
        delete.resultType = .objectIDs
        let result = try coordinator.execute(delete)
        #expect(result.objectIDs?.count == 3 && result.objectIDs?.contains(folder) == true, "the folder and its two notes")
        var middle = BatchDeleteRequest(objectIDs: [trackIDs[1]])
        middle.resultType = .count
        #expect(try coordinator.execute(middle).count == 1)
        let state = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let notes = try context.fetch(FetchRequest<PGNote>()).map(\.title).sorted()
            let tag = try #require(try context.existingObject(with: tagID) as? PGTag)
            let playlist = try #require(try context.existingObject(with: playlistID) as? PGPlaylist)
            return "\(notes) \(tag.notes.map(\.title).sorted()) \(playlist.tracks.map(\.title))"
        }
        #expect(state == #"["n3"] ["n3"] ["a", "c"]"#)

        // Nullify: the playlist goes, its tracks stay without one.
        _ = try coordinator.execute(BatchDeleteRequest(objectIDs: [playlistID]))
        let tracks = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.fetch(FetchRequest<PGTrack>()).map { "\($0.title) \($0.playlist == nil)" }.sorted()
        }
        #expect(tracks == ["a true", "c true"])
        let history = try coordinator.execute(.fetchHistory(after: nil)).transactions
        #expect(history.count == 4)
        #expect(history.count == 4 && history[1].changes.filter { $0.changeType == .delete }.count == 3)
        #expect(history.count == 4 && history[3].changes.contains { $0.changeType == .update && $0.updatedProperties == ["playlist"] })
    }

    /// Owners whose pieces deny their deletion.
    static let denyModel: ManagedObjectModel = {
        do {
            return try ManagedObjectModel(entities: [
                EntityDescription(
                    name: "Owner", attributes: [AttributeDescription(name: "name", type: .string)],
                    relationships: [RelationshipDescription(name: "pieces", destinationEntityName: "Piece", inverseName: "owner", isToMany: true, deleteRule: .deny)]),
                EntityDescription(
                    name: "Piece", attributes: [AttributeDescription(name: "name", type: .string)],
                    relationships: [RelationshipDescription(name: "owner", destinationEntityName: "Owner", inverseName: "pieces")]),
            ])
        } catch {
            preconditionFailure("the deny model is invalid: \(error)")
        }
    }()

    @Test("deny refuses a delete that would leave a denying relationship's destinations, naming each (nothing deleted); deleting the destinations too goes through",
          arguments: StoreKind.allCases)
    func deleteDenied(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let coordinator = try await store.instance(model: Self.denyModel)
        let (owner, pieces) = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let owner = ManagedObject(entity: try #require(Self.denyModel.entitiesByName["Owner"]))
            try context.insert(owner)
            var pieces: [ManagedObject] = []
            for name in ["x", "y"] {
                let piece = ManagedObject(entity: try #require(Self.denyModel.entitiesByName["Piece"]))
                try context.insert(piece)
                try piece.setValue(name, forKey: "name")
                try piece.setValue(owner, forKey: "owner")
                pieces.append(piece)
            }
            try context.save()
            return (owner.objectID, pieces.map(\.objectID))
        }
        let error = #expect(throws: StrataError.self) { _ = try coordinator.execute(BatchDeleteRequest(objectIDs: [owner])) }
        #expect(error?.code == .validation && error?.validationFailures.map(\.reason) == [.deleteDenied(count: 2)], "\(String(describing: error))")
        let count = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.count(for: FetchRequest<ManagedObject>(entityName: "Owner"))
        }
        #expect(count == 1)
        var all = BatchDeleteRequest(objectIDs: [owner] + pieces)
        all.resultType = .count
        #expect(try coordinator.execute(all).count == 3)
    }

    @Test("contexts that merge automatically take in what a batch updated and deleted", arguments: StoreKind.allCases)
    func automaticMerges(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let coordinator = try await store.instance()
        let ids = try await Self.notes(2, in: coordinator)
        let merger = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await merger.perform { context in
            context.automaticallyMergesChangesFromParent = true
            context.retainsRegisteredObjects = true
            for id in ids { _ = try context.existingObject(with: id) }
        }
        var request = BatchUpdateRequest(entityName: "Note")
        request.propertiesToUpdate = ["priority": .constant(Int16(3))]
        _ = try coordinator.execute(request)
        _ = try coordinator.execute(BatchDeleteRequest(objectIDs: [ids[1]]))
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(5)
        var seen = ""
        while clock.now < deadline {
            seen = await merger.perform { context in
                let first = (context.registeredObject(for: ids[0]) as? PGNote)?.priority
                let second = context.registeredObject(for: ids[1])
                return "\(first.map { "\($0)" } ?? "nil") \(second == nil || second?.isDeleted == true)"
            }
            if seen == "3 true" { break }
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(seen == "3 true")
    }

    // MARK: Insert

    @Test("an insert from dictionaries writes every object with its defaults and relationships, and both sides agree: a folder lists its new notes, a tag its new members, a playlist its new tracks last",
          arguments: StoreKind.allCases)
    func insertObjects(kind: StoreKind) async throws {
        let (store, coordinator) = try await Self.historyStore(kind)
        defer { withExtendedLifetime(store) {} }
        let (folder, tag, playlist) = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let folder = PGFolder(), tag = PGTag(), playlist = PGPlaylist(), first = PGTrack()
            for object in [folder, tag, playlist, first] as [ManagedObject] { try context.insert(object) }
            folder.name = "inbox"
            tag.label = "swift"
            playlist.name = "p"
            first.title = "a"
            playlist.tracks = [first]
            try context.save()
            return (folder.objectID, tag.objectID, playlist.objectID)
        }
        var insert = BatchInsertRequest(entityName: "Note", objects: (0..<250).map { index in
            ["title": "n\(index)", "priority": Int16(index % 3), "folder": folder, "tags": [tag]] as [String: any Sendable]
        })
        insert.resultType = .objectIDs
        let result = try coordinator.execute(insert)
        #expect(result.count == 250 && result.objectIDs?.count == 250 && Set(result.objectIDs ?? []).count == 250)
        _ = try coordinator.execute(BatchInsertRequest(entityName: "Track", objects: [["title": "b", "playlist": playlist], ["title": "c", "playlist": playlist]]))
        let state = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let inbox = try #require(try context.existingObject(with: folder) as? PGFolder)
            let swift = try #require(try context.existingObject(with: tag) as? PGTag)
            let list = try #require(try context.existingObject(with: playlist) as? PGPlaylist)
            var request = FetchRequest<PGNote>()
            request.predicate = try FetchPredicate(format: "priority == 2 AND folder == %@", folder)
            let twos = try context.count(for: request)
            let note = try #require(try context.fetch(FetchRequest<PGNote>()).first { $0.title == "n7" })
            return "\(inbox.notes.count) \(swift.notes.count) \(list.tracks.map(\.title)) \(twos) \(note.tags.map(\.label)) \(note.score) \(note.pinned)"
        }
        #expect(state == #"250 250 ["a", "b", "c"] 83 ["swift"] 0.0 false"#)
        let history = try coordinator.execute(.fetchHistory(after: nil)).transactions
        #expect(history.count == 3 && history[1].changes.filter { $0.changeType == .insert }.count == 250)
        #expect(history.count == 3 && history[1].changes.contains { $0.changeType == .update && $0.updatedProperties == ["notes"] })
    }

    @Test("a handler is called until it returns true, across chunks", arguments: StoreKind.allCases)
    func insertFromHandler(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let coordinator = try await store.instance()
        let calls = LockedValue(0)
        var insert = BatchInsertRequest(entityName: "Note") { values in
            let index = calls.withLock { calls -> Int in
                defer { calls += 1 }
                return calls
            }
            guard index < 3000 else { return true }
            values["title"] = "h\(index)"
            values["size"] = Int64(index)
            return false
        }
        insert.resultType = .count
        #expect(try coordinator.execute(insert).count == 3000)
        var request = FetchRequest<PGNote>()
        request.predicate = try FetchPredicate(format: "#size >= 2990")
        let found = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in try context.count(for: request) }
        #expect(found == 10)
    }

    @Test("bad input fails the whole insert with a typed error and writes nothing: an unknown key, a wrong type, a destination not stored",
          arguments: StoreKind.allCases)
    func insertBadInput(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let coordinator = try await store.instance()
        let gone = try #require(try await Self.notes(1, in: coordinator).first)
        let folderID = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let folder = PGFolder()
            try context.insert(folder)
            try context.save()
            let id = folder.objectID
            try context.delete(folder)
            try context.save()
            return id
        }
        func insert(_ objects: [[String: any Sendable]], _ code: StrataError.Code, sourceLocation: SourceLocation = #_sourceLocation) {
            let error = #expect(throws: StrataError.self, sourceLocation: sourceLocation) {
                _ = try coordinator.execute(BatchInsertRequest(entityName: "Note", objects: objects))
            }
            #expect(error?.code == code, "\(String(describing: error))", sourceLocation: sourceLocation)
        }
        insert([["title": "ok"], ["nope": 1]], .unknownKey)
        insert([["title": "ok"], ["priority": "high"]], .typeMismatch)
        insert([["title": "ok"], ["title": "lost", "folder": folderID]], .objectNotFound)
        _ = gone
        #expect(try await store.count("Note") == 1)
    }

    @Test("uniqueness: a collision fails under the error policy; a merging policy turns it into an update of the stored object (an upsert), objects of the request claiming one value becoming one",
          arguments: StoreKind.allCases)
    func insertUpserts(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let coordinator = try await store.instance()
        let stored = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let tag = PGTag()
            tag.label = "a"
            try context.insert(tag)
            try context.save()
            return tag.objectID
        }
        let rows: [[String: any Sendable]] = [["label": "a"], ["label": "b"], ["label": "b"]]
        let refused = #expect(throws: StrataError.self) { _ = try coordinator.execute(BatchInsertRequest(entityName: "Tag", objects: rows)) }
        #expect(refused?.code == .constraintConflicts)
        var upsert = BatchInsertRequest(entityName: "Tag", objects: rows)
        upsert.mergePolicy = .mergeByPropertyObjectTrump
        upsert.resultType = .objectIDs
        let result = try coordinator.execute(upsert)
        #expect(result.count == 2)
        #expect(result.objectIDs?.first == stored && result.objectIDs?.count == 3 && result.objectIDs?[1] == result.objectIDs?[2])
        let labels = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.fetch(FetchRequest<PGTag>()).map(\.label).sorted()
        }
        #expect(labels == ["a", "b"])
    }
}
