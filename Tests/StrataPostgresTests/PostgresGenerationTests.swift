import Foundation
@testable import Strata
@testable import StrataPostgres
import Testing

/// Query generations on a PostgreSQL store: a pinned context reads a `REPEATABLE READ`
/// snapshot held on a connection of its own, whatever other instances save.
@Suite("Query generations on both stores (PostgreSQL: snapshots on connections of their own)")
struct PostgresGenerationTests {
    /// The folder "F" with notes "n1" and "n2", saved in `coordinator`.
    static func folder(in coordinator: PersistentStoreCoordinator) async throws -> (folder: ManagedObjectID, notes: [ManagedObjectID]) {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let folder = PGFolder()
            folder.name = "F"
            try context.insert(folder)
            var notes: [PGNote] = []
            for title in ["n1", "n2"] {
                let note = PGNote()
                note.title = title
                try context.insert(note)
                note.folder = folder
                notes.append(note)
            }
            try context.save()
            return (folder.objectID, notes.map(\.objectID))
        }
    }

    /// What `context` sees: the notes' titles (a fetch), their count, and folder F's notes.
    static func view(in context: isolated ManagedObjectContext, folder: ManagedObjectID) throws -> String {
        var request = FetchRequest<PGNote>()
        request.sortDescriptors = [FetchSortDescriptor(key: "title")]
        let titles = try context.fetch(request).map(\.title)
        let count = try context.count(for: FetchRequest<PGNote>())
        let members = try #require(try context.existingObject(with: folder) as? PGFolder).notes.map(\.title).sorted()
        return "\(titles) \(count) \(members)"
    }

    /// The snapshot sessions of `store` in a transaction on the server now (an ended
    /// session's connection may stay, idle, for the next snapshot).
    static func sessions(of store: PostgresTestStore) throws -> Int {
        let rows = try store.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state <> 'idle'",
            [.text("strata snapshot \(store.schema)")]).rows
        return Int(rows.first?.first?.integer ?? -1)
    }

    /// The server processes of `store`'s snapshot sessions in a transaction now.
    static func sessionPIDs(of store: PostgresTestStore) throws -> [SQLValue] {
        try store.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND state <> 'idle' ORDER BY pid",
            [.text("strata snapshot \(store.schema)")]).rows.map { $0[0] }
    }

    @Test("a pinned context (and another pinned to its token) reads its snapshot while another instance saves: fetches, counts, faults and to-many relationships repeat; unpinned contexts see the saves; the snapshot closes with the last context", arguments: StoreKind.allCases)
    func pinnedReadsRepeat(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let a = try await store.instance()
        let b = try await store.instance()
        let (folder, notes) = try await Self.folder(in: b)
        let reader = ManagedObjectContext(.privateQueue, coordinator: a, name: "reader")
        let (before, token) = try await reader.perform { context in
            try context.setQueryGenerationFrom(.current)
            let view = try Self.view(in: context, folder: folder)
            let token = context.queryGenerationToken
            return (view, try #require(token))
        }
        #expect(before == #"["n1", "n2"] 2 ["n1", "n2"]"#)
        #expect(!token.isCurrent)
        #expect(token.transactionID(in: try #require(a.persistentStores.first)) != nil)
        #expect(a.queryGenerationStatistics.serverSnapshots == (kind == .postgres ? 1 : 0))
        let firstPIDs = kind == .postgres ? try Self.sessionPIDs(of: store.postgres) : []
        if kind == .postgres { #expect(try Self.sessions(of: store.postgres) == 1) }

        // Another instance changes n1, deletes n2 and adds n3 to the folder.
        try await ManagedObjectContext(.privateQueue, coordinator: b).perform { context in
            try #require(try context.existingObject(with: notes[0]) as? PGNote).title = "n1 changed"
            try context.delete(try context.existingObject(with: notes[1]))
            let added = PGNote()
            added.title = "n3"
            try context.insert(added)
            added.folder = try #require(try context.existingObject(with: folder) as? PGFolder)
            try context.save()
        }
        let after = #"["n1 changed", "n3"] 2 ["n1 changed", "n3"]"#
        let again = try await reader.perform { context in
            try context.refreshAllObjects()   // read again, in the generation
            return try Self.view(in: context, folder: folder)
        }
        #expect(again == before)
        let sharing = ManagedObjectContext(.privateQueue, coordinator: a, name: "sharing")
        let shared = try await sharing.perform { context in
            try context.setQueryGenerationFrom(token)
            return try Self.view(in: context, folder: folder)
        }
        #expect(shared == before)
        let statistics = a.queryGenerationStatistics
        #expect(statistics.openGenerations == 1 && statistics.pinnedContexts == 2 && statistics.serverSnapshots == (kind == .postgres ? 1 : 0))
        let fresh = try await ManagedObjectContext(.privateQueue, coordinator: a).perform { context in try Self.view(in: context, folder: folder) }
        #expect(fresh == after)

        try await sharing.perform { try $0.setQueryGenerationFrom(nil) }
        let unpinned = try await reader.perform { context in
            try context.setQueryGenerationFrom(nil)
            try context.refreshAllObjects()
            return try Self.view(in: context, folder: folder)
        }
        #expect(unpinned == after)
        #expect(a.queryGenerationStatistics.serverSnapshots == 0)
        guard kind == .postgres else { return }
        #expect(try await PostgresHistoryTests.eventually { try Self.sessions(of: store.postgres) == 0 })
        // The ended session's connection serves the next snapshot (once parked: the rollback's
        // answer reaches the driver just after the server shows the session idle).
        try await Task.sleep(for: .milliseconds(100))
        let (next, pids) = try await reader.perform { context in
            try context.setQueryGenerationFrom(.current)
            defer { try? context.setQueryGenerationFrom(nil) }
            return (try Self.view(in: context, folder: folder), try Self.sessionPIDs(of: store.postgres))
        }
        #expect(next == after)
        #expect(pids == firstPIDs)
    }

    @Test("a token whose snapshot is gone is unavailable once the store changed; a pinned context's save moves it to the state its save made", arguments: StoreKind.allCases)
    func tokensAndSaves(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let a = try await store.instance()
        let (folder, _) = try await Self.folder(in: a)
        let reader = ManagedObjectContext(.privateQueue, coordinator: a)
        let token = try await reader.perform { context in
            try context.setQueryGenerationFrom(.current)
            _ = try Self.view(in: context, folder: folder)
            let pinned = context.queryGenerationToken
            let token = try #require(pinned)
            try context.setQueryGenerationFrom(nil)   // its snapshot closes
            return token
        }
        _ = try await PostgresSaveTests.savedNote(in: a)
        let refused = await reader.perform { context -> StrataError? in
            do {
                try context.setQueryGenerationFrom(token)
                return nil
            } catch {
                return error as? StrataError
            }
        }
        #expect(refused?.code == .queryGenerationUnavailable)

        // A pinned context that saves reads the state its save made, still pinned.
        let (seen, moved) = try await reader.perform { context in
            try context.setQueryGenerationFrom(.current)
            let before = context.queryGenerationToken
            let first = try #require(before)
            let note = PGNote()
            note.title = "mine"
            try context.insert(note)
            try context.save()
            let after = context.queryGenerationToken
            let second = try #require(after)
            let titles = try context.fetch(FetchRequest<PGNote>()).map(\.title).sorted()
            return (titles, first != second && !second.isCurrent && !second.isNotNewer(than: first))
        }
        #expect(seen == ["mine", "n", "n1", "n2"])
        #expect(moved)
    }

    @Test("a snapshot whose connection the server ended makes the generation unavailable (a typed error, no hang); unpinned, the context reads again")
    func lostSnapshot() async throws {
        let store = PostgresTestStore()
        let a = try await store.coordinator()
        let (folder, _) = try await Self.folder(in: a)
        let reader = ManagedObjectContext(.privateQueue, coordinator: a)
        try await reader.perform { context in
            try context.setQueryGenerationFrom(.current)
            _ = try Self.view(in: context, folder: folder)
        }
        _ = try store.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", [.text("strata snapshot \(store.schema)")])
        #expect(try await PostgresHistoryTests.eventually { try Self.sessions(of: store) == 0 })
        var codes: [StrataError.Code] = []
        for _ in 0..<2 {
            let code = await reader.perform { context -> StrataError.Code? in
                do {
                    try context.refreshAllObjects()
                    _ = try context.fetch(FetchRequest<PGNote>())
                    return nil
                } catch {
                    return (error as? StrataError)?.code
                }
            }
            codes.append(try #require(code))
        }
        // The first read finds the connection gone (or already knows), the second knows.
        #expect(codes[0] == .database || codes[0] == .queryGenerationUnavailable, "\(codes)")
        #expect(codes[1] == .queryGenerationUnavailable, "\(codes)")
        let titles = try await reader.perform { context in
            try context.setQueryGenerationFrom(nil)
            return try context.fetch(FetchRequest<PGNote>()).map(\.title).sorted()
        }
        #expect(titles == ["n1", "n2"])
    }

    @Test("the age policy's maximum age ends a snapshot left idle on the server too, and a pinned context past it fails as the policy says")
    func agePolicy() async throws {
        let store = PostgresTestStore()
        let a = try await store.coordinator()
        let (folder, _) = try await Self.folder(in: a)
        // Long enough that no pause between the statements of one read reaches it (a run
        // under the thread sanitizer is slow), short for a test.
        a.queryGenerationAgePolicy = .fail(after: .milliseconds(1_500))
        let reader = ManagedObjectContext(.privateQueue, coordinator: a)
        try await reader.perform { context in
            try context.setQueryGenerationFrom(.current)
            _ = try Self.view(in: context, folder: folder)
        }
        // The server ends the idle transaction (idle_in_transaction_session_timeout), while
        // the context is still pinned to it.
        #expect(try await PostgresHistoryTests.eventually { try Self.sessions(of: store) == 0 })
        let expired = await reader.perform { context -> StrataError.Code? in
            do {
                _ = try context.fetch(FetchRequest<PGNote>())
                return nil
            } catch {
                return (error as? StrataError)?.code
            }
        }
        #expect(expired == .queryGenerationExpired)
    }

    @Test("four contexts pinned to one token read it at once, again and again, while another instance saves: every read is the pinned state, on one shared snapshot", arguments: StoreKind.allCases)
    func sharedSnapshotUnderConcurrentReads(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let a = try await store.instance()
        let b = try await store.instance()
        let (folder, notes) = try await Self.folder(in: b)
        let first = ManagedObjectContext(.privateQueue, coordinator: a)
        let (expected, token) = try await first.perform { context in
            try context.setQueryGenerationFrom(.current)
            let view = try Self.view(in: context, folder: folder)
            let token = context.queryGenerationToken
            return (view, try #require(token))
        }
        let readers = (0..<4).map { ManagedObjectContext(.privateQueue, coordinator: a, name: "reader \($0)") }
        for reader in readers { try await reader.perform { try $0.setQueryGenerationFrom(token) } }
        let views = try await withThrowingTaskGroup(of: [String].self) { group in
            group.addTask {
                for round in 0..<10 {
                    try await ManagedObjectContext(.privateQueue, coordinator: b).perform { context in
                        try #require(try context.existingObject(with: notes[0]) as? PGNote).title = "round \(round)"
                        let added = PGNote()
                        added.title = "added \(round)"
                        try context.insert(added)
                        added.folder = try #require(try context.existingObject(with: folder) as? PGFolder)
                        try context.save()
                    }
                }
                return []
            }
            for reader in readers {
                group.addTask {
                    var seen: [String] = []
                    for _ in 0..<10 {
                        seen.append(try await reader.perform { context in
                            try context.refreshAllObjects()
                            return try Self.view(in: context, folder: folder)
                        })
                    }
                    return seen
                }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        #expect(views.count == 40)
        #expect(views.allSatisfy { $0 == expected }, "\(Set(views))")
        let statistics = a.queryGenerationStatistics
        #expect(statistics.openGenerations == 1 && statistics.pinnedContexts == 5 && statistics.serverSnapshots == (kind == .postgres ? 1 : 0))
        if kind == .postgres { #expect(try Self.sessions(of: store.postgres) == 1) }
    }
}
