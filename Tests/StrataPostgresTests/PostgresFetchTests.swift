import Foundation
@testable import Strata
import StrataPostgres
import Testing

/// The PostgreSQL store's fetches against the LMDB store's on the same objects: every
/// predicate, sort and window must give the same objects in the same order, whether the
/// SQL store compiles it, tests it in memory, or both.
@Suite("PostgreSQL store: fetches mean what they mean on LMDB")
struct PostgresFetchTests {
    /// The same objects in a context of either store.
    static func populate(_ context: isolated ManagedObjectContext) throws {
        let inbox = PGFolder()
        inbox.name = "Inbox"
        let archive = PGFolder()
        archive.name = "Archive"
        let swift = PGTag()
        swift.label = "swift"
        let server = PGTag()
        server.label = "server"
        for object in [inbox, archive, swift, server] as [ManagedObject] { try context.insert(object) }
        let titles = ["apple", "Apple", "éclair", "e\u{301}clair", "eclair", "Zebra", "", "a%b_c", "star*", "Ünïcødé", "banana",
                      "cherry", "date", "Elder", "fig", "grape", "kiwi", "lemon", "mango", "nectarine", "Orange", "papaya"]
        for (index, title) in titles.enumerated() {
            let note = PGNote()
            note.title = title
            note.priority = Int16(index % 7) - 2
            note.views = Int32(index * 1000)
            note.size = Int64(index) * 1_000_000_007
            note.body = index % 3 == 0 ? nil : (index % 2 == 0 ? "Xylophone \(index)" : "body \(index)")
            note.created = index % 4 == 0 ? nil : Date(timeIntervalSince1970: 1_600_000_000 + Double(index) * 86_400)
            note.score = index == 5 ? .nan : Double(index) * 0.5 - 3
            note.ratio = Float(index) / 4
            note.pinned = index % 2 == 1
            note.token = index == 3 ? UUID(uuidString: "11111111-2222-3333-4444-555555555555") : nil
            note.folder = index % 3 == 0 ? inbox : (index % 3 == 1 ? archive : nil)
            note.tags = index % 4 == 0 ? [swift, server] : (index % 4 == 1 ? [swift] : [])
            try context.insert(note)
        }
        for (title, pages) in [("Dune", 412), ("Emma", 320)] {
            let book = PGBook()
            book.title = title
            book.pages = Int32(pages)
            try context.insert(book)
        }
        let film = PGFilm()
        film.title = "Alien"
        film.minutes = 117
        try context.insert(film)
        try context.save()
    }

    static let predicates: [String] = [
        "title == 'apple'", "title ==[c] 'apple'", "title != 'apple'", "title < 'b'", "title >= 'E'", "'m' > title",
        "title BEGINSWITH 'a'", "title ENDSWITH 'e'", "title CONTAINS 'pp'", "title CONTAINS 'clair'", "title CONTAINS[cd] 'ECL'",
        "title LIKE 'a*e'", "title LIKE '?pple'", "title LIKE 'a%b_c'", "title LIKE 'star\\\\*'", "title MATCHES '[a-z]+'",
        "title IN {'apple', 'Zebra', 'none'}", "title == ''",
        "priority > 2", "priority BETWEEN {-1, 1}", "priority == 2.0", "priority != 1", "priority < 0.5", "views >= 5000",
        "#size > 3000000021", "score < 1.5", "score != 0", "score > -1", "score == 0", "ratio < 1.25", "ratio BETWEEN {1, 2}",
        "body == nil", "body != nil", "body < 'c'", "body CONTAINS 'X'", "created == nil",
        "pinned == YES", "pinned == 1", "pinned != NO", "token == nil", "token != nil",
        "folder == nil", "folder != nil", "folder.name == 'Inbox'", "ANY tags.label == 'swift'", "tags.@count > 1",
        "NOT (priority > 2)", "priority > 2 OR title BEGINSWITH 'a'", "NOT (title CONTAINS 'pp') AND priority < 3",
        "#size > 10 AND (body == nil OR body CONTAINS[c] 'x')", "NOT (body CONTAINS 'X')", "TRUEPREDICATE", "FALSEPREDICATE",
        "title IN {'apple', nil}", "body IN {'body 1', nil}",
        // Negations over columns holding nil: bare comparisons are made two-valued under NOT.
        "NOT (body == 'body 1')", "NOT (body < 'c')", "NOT (body BEGINSWITH 'b') AND priority > 0", "NOT (NOT (body BEGINSWITH 'b'))",
        "NOT (body IN {'body 1', 'body 2'} OR priority > 2)", "NOT (score > 1 AND body != nil)", "NOT (folder != nil)",
    ]

    /// Predicates with arguments.
    static let withArguments: [(String, [any Sendable])] = [
        ("created > %@", [Date(timeIntervalSince1970: 1_600_500_000)]), ("created <= %@", [Date(timeIntervalSince1970: 1_601_000_000)]),
        ("token == %@", [UUID(uuidString: "11111111-2222-3333-4444-555555555555")!]), ("priority IN %@", [[1, 2, 7]]),
        ("title IN %@", [["apple", "fig"]]), ("score >= %@ AND score < %@", [0.0, 4.0]),
    ]

    static let sorts: [[FetchSortDescriptor]] = [
        [], [FetchSortDescriptor(key: "title")], [FetchSortDescriptor(key: "priority", ascending: false), FetchSortDescriptor(key: "title")],
        [FetchSortDescriptor(key: "body"), FetchSortDescriptor(key: "title", ascending: false)], [FetchSortDescriptor(key: "score")],
        [FetchSortDescriptor(key: "created", ascending: false)], [FetchSortDescriptor(key: "title", comparison: .caseInsensitive)],
        [FetchSortDescriptor(key: "folder.name"), FetchSortDescriptor(key: "title")], [FetchSortDescriptor(key: "pinned"), FetchSortDescriptor(key: "views")],
    ]

    /// What `request` returns in `context`: titles in order, and the count.
    static func run(
        _ context: isolated ManagedObjectContext, predicate: String, arguments: [any Sendable] = [], sort: [FetchSortDescriptor], offset: Int, limit: Int
    ) throws -> ([String], Int, Int) {
        var request = FetchRequest<PGNote>()
        request.predicate = try FetchPredicate(format: predicate, argumentArray: arguments)
        request.sortDescriptors = sort
        request.fetchOffset = offset
        request.fetchLimit = limit
        let notes = try context.fetch(request)
        let count = try context.count(for: request)
        var ids = FetchRequest<ManagedObjectID>(entityName: "Note")
        ids.predicate = request.predicate
        ids.sortDescriptors = sort
        ids.fetchOffset = offset
        ids.fetchLimit = limit
        ids.resultType = .managedObjectID
        return (notes.map(\.title), count, try context.fetch(ids).count)
    }

    @Test("every predicate, sort and window gives what the LMDB store gives")
    func sameAsLMDB() async throws {
        let store = PostgresTestStore()
        let postgres = ManagedObjectContext(.privateQueue, coordinator: try await store.coordinator())
        let lmdbCoordinator = PersistentStoreCoordinator(managedObjectModel: PGModel.model)
        try await lmdbCoordinator.addPersistentStore(type: .inMemory)
        let lmdb = ManagedObjectContext(.privateQueue, coordinator: lmdbCoordinator)
        try await postgres.perform { try Self.populate($0) }
        try await lmdb.perform { try Self.populate($0) }
        // Fresh contexts: every fetch reads the stores (nothing pending, nothing registered).
        let pgReader = ManagedObjectContext(.privateQueue, coordinator: try #require(postgres.persistentStoreCoordinator))
        let lmdbReader = ManagedObjectContext(.privateQueue, coordinator: lmdbCoordinator)
        for (predicate, arguments) in Self.predicates.map({ ($0, [any Sendable]()) }) + Self.withArguments {
            for (sortIndex, sort) in Self.sorts.enumerated() {
                for (offset, limit) in [(0, 0), (2, 5)] where sortIndex < 3 || offset == 0 {
                    let expected = try await lmdbReader.perform {
                        try Self.run($0, predicate: predicate, arguments: arguments, sort: sort, offset: offset, limit: limit)
                    }
                    let actual = try await pgReader.perform {
                        try Self.run($0, predicate: predicate, arguments: arguments, sort: sort, offset: offset, limit: limit)
                    }
                    // Without sort descriptors only the set is defined across stores (keys differ).
                    let same = sort.isEmpty ? Set(actual.0) == Set(expected.0) || offset > 0 : actual.0 == expected.0
                    #expect(same, "\(predicate) sorted by \(sort) window \(offset)/\(limit): \(actual.0) ≠ \(expected.0)")
                    #expect(actual.1 == expected.1 && actual.2 == expected.2, "\(predicate) counts \(actual.1)/\(actual.2) ≠ \(expected.1)/\(expected.2)")
                }
            }
        }
    }

    @Test("sub-entities: a fetch of the abstract entity reads every sub-entity's table, in one order")
    func subentities() async throws {
        let store = PostgresTestStore()
        let context = ManagedObjectContext(.privateQueue, coordinator: try await store.coordinator())
        try await context.perform { try Self.populate($0) }
        let titles = try await context.perform { context in
            var request = FetchRequest<PGItem>()
            request.sortDescriptors = [FetchSortDescriptor(key: "title")]
            let all = try context.fetch(request).map(\.title)
            request.fetchOffset = 1
            request.fetchLimit = 1
            let window = try context.fetch(request).map(\.title)
            request.predicate = try FetchPredicate(format: "title > 'B'")
            request.fetchOffset = 0
            request.fetchLimit = 0
            let count = try context.count(for: request)
            var books = FetchRequest<PGItem>(entityName: "Book")
            books.includesSubentities = false
            return (all, window, count, try context.fetch(books).map(\.title).sorted())
        }
        #expect(titles.0 == ["Alien", "Dune", "Emma"] && titles.1 == ["Dune"] && titles.2 == 2 && titles.3 == ["Dune", "Emma"])
    }

    @Test("explain names the SQL and what is left to memory")
    func explain() async throws {
        let store = PostgresTestStore()
        let coordinator = try await store.coordinator()
        var request = FetchRequest<PGNote>()
        request.predicate = try FetchPredicate(format: "priority > %@ AND title CONTAINS[c] 'x'", 2)
        request.sortDescriptors = [FetchSortDescriptor(key: "title")]
        request.fetchLimit = 10
        let text = try coordinator.explain(request)
        // Not negated: a bare comparison, which the column's index serves.
        #expect(text.contains("SELECT FROM Note WHERE (\"priority\" > $1)"), "\(text)")
        #expect(text.contains("FILTER IN MEMORY title CONTAINS[c] \"x\""))
        #expect(text.contains("ORDER BY \"title\" COLLATE \"C\" ASC NULLS FIRST"))
        #expect(text.contains("WINDOW IN MEMORY"))
        request.predicate = try FetchPredicate(format: "priority > 2")
        #expect(try coordinator.explain(request).contains("LIMIT 10 OFFSET 0"))
        // Negated: two-valued, so that a NULL is not negated into a match.
        request.predicate = try FetchPredicate(format: "NOT (body == 'x')")
        #expect(try coordinator.explain(request).contains("(NOT COALESCE(\"body\" COLLATE \"C\" = $1, FALSE))"))
    }

    @Test("a predicate the evaluator refuses while testing rows in memory fails with its FetchPredicateError on both stores, not as a database failure",
          arguments: StoreKind.allCases)
    func evaluatorErrors(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let coordinator = try await store.instance()
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let note = PGNote(), tag = PGTag()
            try context.insert(note)
            try context.insert(tag)
            note.title = "n"
            tag.label = "swift"
            note.tags = [tag]
            try context.save()
        }
        let error = await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context -> (any Error)? in
            var request = FetchRequest<PGNote>()
            request.predicate = try? FetchPredicate(format: "tags.@sum.label > 1")
            do {
                _ = try context.fetch(request)
                return nil
            } catch {
                return error
            }
        }
        #expect(error is FetchPredicateError, "\(String(describing: error))")
    }
}
