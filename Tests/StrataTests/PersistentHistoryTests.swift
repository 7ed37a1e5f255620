import Foundation
@testable import Strata
import StrataTesting
import Testing

/// A typed entity whose `email` is kept in history when a subscriber is deleted.
final class Subscriber: ManagedObject {
    @Attribute(preservesValueInHistoryOnDeletion: true) var email: String = ""
    @Attribute var visits: Int64 = 0
}

/// Persistent history recorded by saves: one transaction per save that reaches a store
/// that tracks it, in the same LMDB transaction as the data, with author, context name,
/// process and changes; fetched after a token or a date, filtered, trimmed.
@Suite("Persistent history")
struct PersistentHistoryTests {
    static func coordinator(tracking: Bool = true) async throws -> (PersistentStoreCoordinator, PersistentStore) {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        var options = CoordinatorStoreTests.options
        options.tracksPersistentHistory = tracking
        let store = try await coordinator.addPersistentStore(type: .inMemory, options: options)
        return (coordinator, store)
    }

    static func context(_ coordinator: PersistentStoreCoordinator, author: String?, name: String = "editor") -> ManagedObjectContext {
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: name)
        context.transactionAuthor = author
        return context
    }

    @Test("each save records one transaction: its author, context name, process, and its inserts, updates (with the changed properties) and deletes")
    func savesRecordTransactions() async throws {
        let (coordinator, store) = try await Self.coordinator()
        let context = Self.context(coordinator, author: "app")
        let ids = try await context.perform { context in
            let folder = Folder()
            folder.name = "Inbox"
            let note = Note()
            note.title = "milk"
            try context.insert(folder)
            try context.insert(note)
            note.folder = folder
            try context.save()
            note.title = "oat milk"
            note.priority = 2
            try context.save()
            try context.delete(note)
            try context.save()
            return (folder.objectID, note.objectID)
        }
        let history = try coordinator.execute(.fetchHistory(after: nil))
        #expect(history.count == 3 && history.transactions.map(\.token.sequence) == [1, 2, 3])
        let first = try #require(history.transactions.first)
        #expect(first.author == "app" && first.contextName == "editor" && first.processID == getpid())
        #expect(first.token.storeIdentifier == store.identifier)
        #expect(Set(first.changes.map(\.changedObjectID)) == [ids.0, ids.1] && first.changes.allSatisfy { $0.changeType == .insert })
        let update = history.transactions[1].changes
        #expect(update.map(\.changeType) == [.update] && update.first?.changedObjectID == ids.1)
        #expect(update.first?.updatedProperties == ["title", "priority"])
        // Deleting the note nullifies the folder's side: the folder is updated in the same transaction.
        let deletion = history.transactions[2].changes
        #expect(deletion.first { $0.changeType == .delete }?.changedObjectID == ids.1)
        #expect(deletion.first { $0.changeType == .delete }?.tombstone == [:])
        #expect(deletion.first { $0.changeType == .update }?.changedObjectID == ids.0)
        #expect(deletion.first { $0.changeType == .update }?.updatedProperties == ["notes"])
        #expect(try coordinator.currentPersistentHistoryToken() == history.transactions.last?.token)
        #expect(try coordinator.execute(.fetchHistory(after: first.token)).transactions.map(\.token.sequence) == [2, 3])
        #expect(try await context.perform { try $0.execute(.fetchHistory(after: history.transactions[1].token)) }.count == 1)
    }

    @Test("a store that does not track history records nothing; a save that fails records nothing")
    func nothingWithoutTrackingOrOnFailure() async throws {
        let (untracked, _) = try await Self.coordinator(tracking: false)
        try await Self.context(untracked, author: "app").perform { context in
            try context.insert(Note())
            try context.save()
        }
        #expect(try untracked.execute(.fetchHistory(after: nil)).transactions.isEmpty)
        #expect(try untracked.currentPersistentHistoryToken() == nil)

        let (coordinator, _) = try await Self.coordinator()
        let (writer, other) = (Self.context(coordinator, author: "a"), Self.context(coordinator, author: "b"))
        let id = try await writer.perform { context in
            context.retainsRegisteredObjects = true   // the note stays as this context read it
            let note = Note()
            try context.insert(note)
            try context.save()
            return note.objectID
        }
        try await other.perform { context in
            let note = try #require(context.existingObject(with: id) as? Note)
            note.title = "theirs"
            try context.save()
        }
        let failed = await #expect(throws: StrataError.self) {
            try await writer.perform { context in
                let note = try #require(context.existingObject(with: id) as? Note)
                note.title = "mine"   // read before the other save: a conflict under .error
                try context.save()
            }
        }
        #expect(failed?.code == .mergeConflicts)
        #expect(try coordinator.execute(.fetchHistory(after: nil)).transactions.map { $0.author ?? "-" } == ["a", "b"])
    }

    @Test("contexts saving at once (group commit) each record their own transaction, filtered by author and entity")
    func concurrentSaversAndFilters() async throws {
        let (coordinator, _) = try await Self.coordinator()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<4 {
                group.addTask {
                    try await Self.context(coordinator, author: "worker\(worker)").perform { context in
                        for index in 0..<10 {
                            let note = Note()
                            note.title = "w\(worker)-\(index)"
                            try context.insert(note)
                            if index % 2 == 1 {
                                let folder = Folder()
                                try context.insert(folder)
                            }
                            try context.save()
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        let all = try coordinator.execute(.fetchHistory(after: nil))
        #expect(all.count == 40)
        #expect(all.transactions.map(\.token.sequence) == Array(1...40))
        for worker in 0..<4 {
            #expect(all.transactions.filter { $0.author == "worker\(worker)" }.count == 10)
        }
        var byAuthor = PersistentHistoryChangeRequest.fetchHistory(after: nil)
        byAuthor.authors = ["worker2"]
        #expect(try coordinator.execute(byAuthor).transactions.allSatisfy { $0.author == "worker2" })
        var folders = PersistentHistoryChangeRequest.fetchHistory(after: nil)
        folders.entityNames = ["Folder"]
        let withFolders = try coordinator.execute(folders)
        #expect(withFolders.count == 20 && withFolders.transactions.allSatisfy { $0.changes.allSatisfy { $0.changedObjectID.entityName == "Folder" } })
        var limited = PersistentHistoryChangeRequest.fetchHistory(after: nil)
        limited.fetchLimit = 5
        #expect(try coordinator.execute(limited).count == 5)
    }

    @Test("deleted objects leave tombstones of their attributes marked preservesValueInHistoryOnDeletion; history is trimmed by token and by date, and its sequence never restarts")
    func tombstonesAndTrimming() async throws {
        let model = try ManagedObjectModel(entities: [
            EntityDescription(name: "Account", attributes: [
                AttributeDescription(name: "email", type: .string, preservesValueInHistoryOnDeletion: true),
                AttributeDescription(name: "balance", type: .integer64, defaultValue: .integer(0)),
            ]),
        ])
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        var options = CoordinatorStoreTests.options
        options.tracksPersistentHistory = true
        try await coordinator.addPersistentStore(type: .inMemory, options: options)
        let context = Self.context(coordinator, author: nil)
        try await context.perform { context in
            let account = ManagedObject(entity: model.entitiesByName["Account"]!)
            try context.insert(account)
            try account.setValue("ada@example.com", forKey: "email")
            try account.setValue(Int64(10), forKey: "balance")
            try context.save()
            try context.delete(account)
            try context.save()
        }
        let history = try coordinator.execute(.fetchHistory(after: nil)).transactions
        #expect(history.count == 2 && history[0].author == nil)
        #expect(history[1].changes.first?.tombstone == ["email": .string("ada@example.com")])

        let marker = Date()
        #expect(try coordinator.execute(.fetchHistory(after: marker)).count == 0)
        if history[0].timestamp < history[1].timestamp {   // records before the date are stepped over
            #expect(try coordinator.execute(.fetchHistory(after: history[1].timestamp)).transactions.map(\.token) == [history[1].token])
        }
        #expect(try coordinator.execute(.deleteHistory(before: history[1].token)).count == 1)
        #expect(try coordinator.execute(.fetchHistory(after: nil)).transactions.map(\.token) == [history[1].token])
        #expect(try coordinator.execute(.deleteHistory(before: Date().addingTimeInterval(1))).count == 1)
        #expect(try coordinator.execute(.fetchHistory(after: nil)).count == 0)
        try await context.perform { context in
            try context.insert(ManagedObject(entity: model.entitiesByName["Account"]!))
            try context.save()
        }
        #expect(try coordinator.currentPersistentHistoryToken()?.sequence == 3)
    }

    @Test("typed classes mark attributes for tombstones with @Attribute(preservesValueInHistoryOnDeletion:)")
    func typedTombstones() async throws {
        let model = try ManagedObjectModel(types: [Subscriber.self])
        let entity = try #require(model.entitiesByName["Subscriber"])
        #expect(entity.attributes.map { "\($0.name) \($0.preservesValueInHistoryOnDeletion)" } == ["email true", "visits false"])
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        var options = CoordinatorStoreTests.options
        options.tracksPersistentHistory = true
        try await coordinator.addPersistentStore(type: .inMemory, options: options)
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let subscriber = Subscriber()
            subscriber.email = "grace@example.com"
            subscriber.visits = 3
            try context.insert(subscriber)
            try context.save()
            try context.delete(subscriber)
            try context.save()
        }
        let deleted = try coordinator.execute(.fetchHistory(after: nil)).transactions.last?.changes.first
        #expect(deleted?.changeType == .delete && deleted?.tombstone == ["email": .string("grace@example.com")])
    }
}

extension PersistentHistoryTests {
    @Test("a retention policy keeps history bounded as saves record it: by count, by age; unlimited keeps everything; the default is 7 days and 1,000,000 transactions")
    func retention() async throws {
        #expect(PersistentStore.Options().historyRetention == .default)
        #expect(PersistentHistoryRetention.default.maximumTransactions == 1_000_000 && PersistentHistoryRetention.default.maximumAge == .seconds(604_800))
        func coordinator(_ retention: PersistentHistoryRetention) async throws -> PersistentStoreCoordinator {
            let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
            var options = CoordinatorStoreTests.options
            options.tracksPersistentHistory = true
            options.historyRetention = retention
            try await coordinator.addPersistentStore(type: .inMemory, options: options)
            return coordinator
        }
        func save(_ count: Int, in coordinator: PersistentStoreCoordinator) async throws {
            try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
                for _ in 0..<count {
                    try context.insert(Note())
                    try context.save()
                }
            }
        }
        let counted = try await coordinator(PersistentHistoryRetention(maximumTransactions: 5, maximumAge: nil))
        try await save(12, in: counted)
        #expect(try counted.execute(.fetchHistory(after: nil)).transactions.map(\.token.sequence) == [8, 9, 10, 11, 12])

        let aged = try await coordinator(PersistentHistoryRetention(maximumTransactions: nil, maximumAge: .milliseconds(300)))
        try await save(2, in: aged)
        try await Task.sleep(for: .milliseconds(400))
        try await save(1, in: aged)
        #expect(try aged.execute(.fetchHistory(after: nil)).transactions.map(\.token.sequence) == [3])

        let kept = try await coordinator(.unlimited)
        try await save(12, in: kept)
        #expect(try kept.execute(.fetchHistory(after: nil)).count == 12)
    }
}

extension PersistentHistoryTests {
    @Test("a context catches up from history: updated objects it holds are refreshed, deleted ones leave; objectIDChanges feeds mergeChanges(fromRemoteContextSave:into:)")
    func mergingHistory() async throws {
        let (coordinator, _) = try await Self.coordinator()
        let reader = Self.context(coordinator, author: "reader", name: "reader")
        let writer = Self.context(coordinator, author: "writer", name: "writer")
        let ids = try await writer.perform { context in
            let kept = Note(), gone = Note()
            kept.title = "kept"
            gone.title = "gone"
            try context.insert(kept)
            try context.insert(gone)
            try context.save()
            return (kept.objectID, gone.objectID)
        }
        let start = try #require(try coordinator.currentPersistentHistoryToken())
        try await reader.perform { context in
            context.retainsRegisteredObjects = true
            #expect(try (context.existingObject(with: ids.0) as? Note)?.title == "kept")
            _ = try context.existingObject(with: ids.1)
        }
        try await writer.perform { context in
            (try context.existingObject(with: ids.0) as? Note)?.title = "changed"
            try context.delete(try context.existingObject(with: ids.1))
            try context.save()
        }
        let transactions = try coordinator.execute(.fetchHistory(after: start)).transactions
        #expect(transactions.count == 1)
        #expect(transactions[0].objectIDChanges[ManagedObjectContext.NotificationKey.deletedObjectIDs.rawValue] == [ids.1])
        try await reader.perform { context in
            #expect((context.registeredObject(for: ids.0) as? Note)?.title == "kept", "not merged yet")
            try context.mergeChanges(fromHistory: transactions)
            #expect((context.registeredObject(for: ids.0) as? Note)?.title == "changed")
            #expect(context.registeredObject(for: ids.1) == nil)
        }
        let other = Self.context(coordinator, author: nil, name: "other")
        try await other.perform { context in
            context.retainsRegisteredObjects = true
            _ = try context.existingObject(with: ids.0)
        }
        try await ManagedObjectContext.mergeChanges(fromRemoteContextSave: transactions[0].objectIDChanges, into: [other])
        let title = await other.perform { context in (context.registeredObject(for: ids.0) as? Note)?.title }
        #expect(title == "changed")
    }
}
