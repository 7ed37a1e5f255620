import Foundation
@testable import Strata
import StrataPostgres
import Testing

/// Dictionary results, aggregates and groups, one source against both stores (issue 27):
/// an LMDB store's records are read in place; a PostgreSQL store's rows come from its
/// fetch, and the same code groups and aggregates them.
@Suite("Dictionary results on both stores")
struct BothStoresDictionaryTests {
    typealias Row = [String: any Sendable]

    @Test("key paths through to-ones, aggregates, groups and having give the same results on both stores",
          arguments: StoreKind.allCases)
    func sameResults(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        defer { withExtendedLifetime(store) {} }
        let coordinator = try await store.instance()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let rows = try await context.perform { context in
            let inbox = PGFolder()
            inbox.name = "Inbox"
            let work = PGFolder()
            work.name = "Work"
            try context.insert(inbox)
            try context.insert(work)
            for index in 0..<12 {
                let note = PGNote()
                note.title = "t\(index)"
                note.priority = Int16(index % 4)
                note.score = Double(index) / 2
                note.amount = index % 3 == 0 ? Decimal(index) : nil
                try context.insert(note)
                note.folder = index < 8 ? inbox : work
            }
            try context.save()
            var request = FetchRequest<Row>(entityName: "Note")
            request.resultType = .dictionary
            request.propertiesToFetch = [
                "folder.name",
                .expression(ExpressionDescription(name: "n", function: .count, keyPath: "self")),
                .expression(ExpressionDescription(name: "total", function: .sum, keyPath: "priority")),
                .expression(ExpressionDescription(name: "mean", function: .average, keyPath: "score")),
                .expression(ExpressionDescription(name: "money", function: .sum, keyPath: "amount")),
                .expression(ExpressionDescription(name: "top", function: .max, keyPath: "title")),
            ]
            request.propertiesToGroupBy = ["folder.name"]
            request.predicate = try FetchPredicate(format: "priority > 0")
            request.havingPredicate = try FetchPredicate(format: "n >= 2")
            request.sortDescriptors = [FetchSortDescriptor(key: "folder.name")]
            return try context.fetch(request).map { row in
                ["folder.name", "n", "total", "mean", "money", "top"].map { key in row[key].map { "\($0)" } ?? "-" }.joined(separator: " ")
            }
        }
        // Inbox: t1..t7 with priority > 0 (t1 t2 t3 t5 t6 t7); Work: t9 t10 t11.
        #expect(rows == ["Inbox 6 12 2.0 9 t7", "Work 3 6 5.0 9 t9"])
    }
}
