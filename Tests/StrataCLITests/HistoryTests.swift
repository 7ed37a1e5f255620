import Foundation
import Strata
import StrataTesting
import Testing

@testable import StrataCLI

@Suite("strata history")
struct HistoryTests {
    @Test("prints each transaction with its author, context and changes; --after and --limit; a store without history says so; a path that is not a store fails")
    func transcript() async throws {
        let directory = TemporaryDirectory()
        let path = directory.appending("accounts.strata")
        let model = try ManagedObjectModel(entities: [
            EntityDescription(name: "Account", attributes: [
                AttributeDescription(name: "email", type: .string, preservesValueInHistoryOnDeletion: true),
                AttributeDescription(name: "balance", type: .integer64, defaultValue: .integer(0)),
            ]),
        ])
        do {
            let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
            var options = PersistentStore.Options()
            options.tracksPersistentHistory = true
            let store = try await coordinator.addPersistentStore(at: URL(fileURLWithPath: path), options: options)
            let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "billing")
            context.transactionAuthor = "importer"
            try await context.perform { context in
                let account = ManagedObject(entity: model.entitiesByName["Account"]!)
                try context.insert(account)
                try account.setValue("ada@example.com", forKey: "email")
                try context.save()
                try account.setValue(Int64(5), forKey: "balance")
                try context.save()
                try context.delete(account)
                try context.save()
            }
            try await coordinator.remove(store)
        }
        func run(_ arguments: [String]) throws -> String {
            try #require(try StrataCommand.parseAsRoot(["history", path] + arguments) as? HistoryCommand).transcript()
        }
        let lines = try run([]).split(separator: "\n").map(String.init)
        #expect(lines.count == 6)
        #expect(lines[0].hasPrefix("history 1  ") && lines[0].hasSuffix("  author importer  context billing  pid \(getpid())"))
        #expect(lines[1] == "  insert Account p1")
        #expect(lines[3] == "  update Account p1: balance")
        #expect(lines[5] == "  delete Account p1 (tombstone: email \"ada@example.com\")")
        #expect(try run(["--after", "2"]).split(separator: "\n").count == 2)
        #expect(try run(["--limit", "1"]).split(separator: "\n").count == 2)
        #expect(try run(["--after", "3"]) == "\(path) has no history after 3")
        #expect(throws: (any Error).self) { try run(["--limit", "0"]) }   // refused by validation
        let nothing = try #require(try StrataCommand.parseAsRoot(["history", directory.appending("none")]) as? HistoryCommand)
        #expect(throws: StoreError.self) { try nothing.transcript() }
    }
}
