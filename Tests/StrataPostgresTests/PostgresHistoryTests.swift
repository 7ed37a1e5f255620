import Foundation
@testable import Strata
import StrataLocks
import StrataPostgres
import Testing

final class PGContact: ManagedObject {
    override class var entityName: String { "Contact" }
    @Attribute var name: String = ""
    @Attribute(preservesValueInHistoryOnDeletion: true) var email: String = ""
}

final class PGGroup: ManagedObject {
    override class var entityName: String { "Group" }
    @Attribute var title: String = ""
}

enum PGHistoryModel {
    static let model: ManagedObjectModel = {
        do {
            return try ManagedObjectModel(types: [PGContact.self, PGGroup.self])
        } catch {
            preconditionFailure("the test model is invalid: \(error)")
        }
    }()
}

@Suite("PostgreSQL store: persistent history and changes from other instances")
struct PostgresHistoryTests {
    /// A coordinator of `store` that tracks history (with `retention`).
    static func coordinator(_ store: PostgresTestStore, retention: PersistentHistoryRetention = .unlimited) async throws -> PersistentStoreCoordinator {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: store.model)
        var options = PersistentStore.Options()
        options.tracksPersistentHistory = true
        options.historyRetention = retention
        try await coordinator.addPersistentStore(type: .postgres(store.configuration), options: options)
        return coordinator
    }

    /// Saves a new contact; its ID.
    static func saveContact(_ name: String, in coordinator: PersistentStoreCoordinator, author: String? = nil) async throws -> ManagedObjectID {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            context.transactionAuthor = author
            let contact = PGContact()
            contact.name = name
            contact.email = name + "@example.com"
            try context.insert(contact)
            try context.save()
            return contact.objectID
        }
    }

    /// Whether `condition` holds within 10 seconds.
    static func eventually(_ condition: () async throws -> Bool) async throws -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(10)
        while clock.now < deadline {
            if try await condition() { return true }
            try await Task.sleep(for: .milliseconds(5))
        }
        return try await condition()
    }

    @Test("each save records one transaction with it: inserts, updates with their changed properties, deletes with tombstones, author and context; fetched after a token or a date, filtered and limited; deleted before a token or a date; the token survives")
    func historyOfSaves() async throws {
        let store = PostgresTestStore(model: PGHistoryModel.model)
        let coordinator = try await Self.coordinator(store)
        #expect(try coordinator.currentPersistentHistoryToken() == nil)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let (a, b) = try await context.perform { context in
            context.transactionAuthor = "importer"
            context.name = "import"
            let a = PGContact(), b = PGContact(), group = PGGroup()
            a.name = "a"
            a.email = "a@example.com"
            b.name = "b"
            b.email = "b@example.com"
            group.title = "g"
            for object in [a, b, group] as [ManagedObject] { try context.insert(object) }
            try context.save()
            return (a.objectID, b.objectID)
        }
        try await context.perform { context in
            context.transactionAuthor = "editor"
            (try context.existingObject(with: a) as? PGContact)?.name = "a2"
            try context.save()
            try context.delete(try context.existingObject(with: b))
            try context.save()
        }
        // A failed save records nothing.
        let stale = ManagedObjectContext(.privateQueue, coordinator: try await Self.coordinator(store))
        try await stale.perform { context in
            context.retainsRegisteredObjects = true
            _ = try context.existingObject(with: a).objectID
        }
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            (try context.existingObject(with: a) as? PGContact)?.email = "new@example.com"
            try context.save()
        }
        let failed = await stale.perform { context -> StrataError? in
            (context.registeredObject(for: a) as? PGContact)?.name = "lost"
            do {
                try context.save()
                return nil
            } catch {
                return error as? StrataError
            }
        }
        #expect(failed?.code == .mergeConflicts)

        let all = try coordinator.execute(.fetchHistory(after: nil as PersistentHistoryToken?)).transactions
        try #require(all.count == 4)
        #expect(zip(all, all.dropFirst()).allSatisfy { $0.token.sequence < $1.token.sequence })
        #expect(all[0].author == "importer" && all[0].contextName == "import" && all[0].processID == getpid())
        #expect(all[0].changes.count == 3 && all[0].changes.allSatisfy { $0.changeType == .insert })
        #expect(all[1].author == "editor")
        #expect(all[1].changes.map(\.changedObjectID) == [a] && all[1].changes.first?.updatedProperties == ["name"])
        #expect(all[2].changes.first?.changeType == .delete && all[2].changes.first?.changedObjectID == b)
        #expect(all[2].changes.first?.tombstone == ["email": .string("b@example.com")])
        #expect(all[3].changes.first?.updatedProperties == ["email"])

        #expect(try coordinator.execute(.fetchHistory(after: all[0].token)).transactions.map(\.token) == all.dropFirst().map(\.token))
        var byAuthor = PersistentHistoryChangeRequest.fetchHistory(after: nil as PersistentHistoryToken?)
        byAuthor.authors = ["editor"]
        #expect(try coordinator.execute(byAuthor).transactions.map(\.token) == [all[1].token, all[2].token])
        var byEntity = PersistentHistoryChangeRequest.fetchHistory(after: nil as PersistentHistoryToken?)
        byEntity.entityNames = ["Group"]
        let groups = try coordinator.execute(byEntity).transactions
        #expect(groups.count == 1 && groups[0].changes.count == 1)
        var limited = PersistentHistoryChangeRequest.fetchHistory(after: nil as PersistentHistoryToken?)
        limited.fetchLimit = 2
        #expect(try coordinator.execute(limited).transactions.map(\.token) == all.prefix(2).map(\.token))
        #expect(try coordinator.execute(.fetchHistory(after: all[2].timestamp)).transactions.map(\.token) == all.suffix(2).map(\.token))
        // Another instance reads the same history.
        #expect(try stale.persistentStoreCoordinator?.execute(.fetchHistory(after: nil as PersistentHistoryToken?)).transactions.map(\.token) == all.map(\.token))

        #expect(try coordinator.currentPersistentHistoryToken() == all[3].token)
        #expect(try coordinator.execute(.deleteHistory(before: all[2].token)).count == 2)
        #expect(try coordinator.execute(.fetchHistory(after: nil as PersistentHistoryToken?)).transactions.map(\.token) == all.suffix(2).map(\.token))
        #expect(try coordinator.execute(.deleteHistory(before: Date().addingTimeInterval(60))).count == 2)
        #expect(try coordinator.execute(.fetchHistory(after: nil as PersistentHistoryToken?)).transactions.isEmpty)
        #expect(try coordinator.currentPersistentHistoryToken() == all[3].token, "the token survives the deletion")
        _ = try await Self.saveContact("c", in: coordinator)
        #expect(try coordinator.currentPersistentHistoryToken()?.sequence == all[3].token.sequence + 1, "the sequence never restarts")
    }

    @Test("a retention by count and by age trims the history in the saves that pass it")
    func retention() async throws {
        let store = PostgresTestStore(model: PGHistoryModel.model)
        let counted = try await Self.coordinator(store, retention: PersistentHistoryRetention(maximumTransactions: 3, maximumAge: nil))
        for index in 0..<6 { _ = try await Self.saveContact("c\(index)", in: counted) }
        let kept = try counted.execute(.fetchHistory(after: nil as PersistentHistoryToken?)).transactions
        let current = try counted.currentPersistentHistoryToken()
        #expect(kept.count == 3 && kept.last?.token == current)
        let aged = try await Self.coordinator(store, retention: PersistentHistoryRetention(maximumTransactions: nil, maximumAge: .milliseconds(1)))
        try await Task.sleep(for: .milliseconds(20))
        _ = try await Self.saveContact("late", in: aged)
        #expect(try aged.execute(.fetchHistory(after: nil as PersistentHistoryToken?)).transactions.count == 1)
    }

    @Test("another instance's saves raise remote changes with their token, its own raise none; its automatically merging root context takes the update and the delete")
    func remoteChangesAcrossInstances() async throws {
        let store = PostgresTestStore(model: PGHistoryModel.model)
        let a = try await Self.coordinator(store)
        let b = try await Self.coordinator(store)
        let id = try await Self.saveContact("x", in: a)
        let other = try await Self.saveContact("y", in: a)
        let events = LockedValue<[RemoteChange]>([])
        let listening = Task { for await change in b.remoteChanges { events.withLock { $0.append(change) } } }
        defer { listening.cancel() }
        let merger = ManagedObjectContext(.privateQueue, coordinator: b)
        try await merger.perform { context in
            context.automaticallyMergesChangesFromParent = true
            context.retainsRegisteredObjects = true
            _ = try context.existingObject(with: id).objectID
            _ = try context.existingObject(with: other).objectID
        }
        // b's own save: no event.
        _ = try await Self.saveContact("b's own", in: b)
        try await ManagedObjectContext(.privateQueue, coordinator: a).perform { context in
            (try context.existingObject(with: id) as? PGContact)?.name = "from A"
            try context.delete(try context.existingObject(with: other))
            try context.save()
        }
        let token = try a.currentPersistentHistoryToken()
        #expect(try await Self.eventually { events.withLock { $0.contains { $0.historyToken == token } } })
        #expect(try await Self.eventually {
            await merger.perform { context in
                (context.registeredObject(for: id) as? PGContact)?.name == "from A" && context.registeredObject(for: other) == nil
            }
        })
        let seen = events.withLock { $0 }
        #expect(seen.allSatisfy { $0.storeIdentifier == b.persistentStores[0].identifier && $0.storeURL == nil })
        #expect(seen.reduce(0) { $0 + ($1.commits ?? 0) } == 1, "only A's commit after the listener started: \(seen)")
    }

    @Test("a store without history raises remote changes when its writers notify (notifiesOtherInstances), with no token, counting the commits")
    func remoteChangesWithoutHistory() async throws {
        let store = PostgresTestStore(model: PGHistoryModel.model)
        var notifying = store.configuration
        notifying.notifiesOtherInstances = true
        let a = try await store.coordinator(configuration: notifying)
        let b = try await store.coordinator()
        let events = LockedValue<[RemoteChange]>([])
        // Made here, so that b listens before the saves below (making an iterator starts the watch).
        nonisolated(unsafe) var iterator = b.remoteChanges.makeAsyncIterator()
        let listening = Task {
            while let change = await iterator.next() { events.withLock { $0.append(change) } }
        }
        defer { listening.cancel() }
        for index in 0..<3 { _ = try await Self.saveContact("n\(index)", in: a) }
        #expect(try await Self.eventually { events.withLock { $0.reduce(0) { $0 + ($1.commits ?? 0) } } == 3 }, "\(events.withLock { $0 })")
        #expect(events.withLock { $0.allSatisfy { $0.historyToken == nil } })
        #expect(try a.execute(.fetchHistory(after: nil as PersistentHistoryToken?)).transactions.isEmpty)
    }

    @Test("notifiesOtherInstances false (the default): saves without history are not announced; with history they always are, in the history's statement")
    func quietInstances() async throws {
        let store = PostgresTestStore(model: PGHistoryModel.model)
        let silent = try await store.coordinator()   // notifiesOtherInstances is false by default
        var notifying = store.configuration
        notifying.notifiesOtherInstances = true
        let loud = try await store.coordinator(configuration: notifying)
        let listener = try await store.coordinator()
        let events = LockedValue<[RemoteChange]>([])
        nonisolated(unsafe) var iterator = listener.remoteChanges.makeAsyncIterator()
        let listening = Task {
            while let change = await iterator.next() { events.withLock { $0.append(change) } }
        }
        defer { listening.cancel() }
        for index in 0..<3 { _ = try await Self.saveContact("quiet \(index)", in: silent) }
        _ = try await Self.saveContact("loud", in: loud)
        // Notifications arrive in commit order: the quiet saves' would have come first.
        #expect(try await Self.eventually { !events.withLock { $0.isEmpty } })
        #expect(events.withLock { $0.reduce(0) { $0 + ($1.commits ?? 0) } } == 1)

        let tracked = PostgresTestStore(model: PGHistoryModel.model)
        let coordinator = PersistentStoreCoordinator(managedObjectModel: tracked.model)
        var options = PersistentStore.Options()
        options.tracksPersistentHistory = true
        var configuration = tracked.configuration
        configuration.notifiesOtherInstances = false
        try await coordinator.addPersistentStore(type: .postgres(configuration), options: options)
        let hearing = try await Self.coordinator(tracked)
        let heard = LockedValue<[RemoteChange]>([])
        nonisolated(unsafe) var second = hearing.remoteChanges.makeAsyncIterator()
        let listening2 = Task {
            while let change = await second.next() { heard.withLock { $0.append(change) } }
        }
        defer { listening2.cancel() }
        _ = try await Self.saveContact("tracked", in: coordinator)
        let token = try coordinator.currentPersistentHistoryToken()
        #expect(try await Self.eventually { heard.withLock { $0.contains { $0.historyToken == token } } })
    }

    @Test("the listening connection lost (its backend terminated): the instance listens again and catches up from history; nothing is missed")
    func listenerLost() async throws {
        let store = PostgresTestStore(model: PGHistoryModel.model)
        let a = try await Self.coordinator(store)
        let b = try await Self.coordinator(store)
        let id = try await Self.saveContact("x", in: a)
        let merger = ManagedObjectContext(.privateQueue, coordinator: b)
        try await merger.perform { context in
            context.automaticallyMergesChangesFromParent = true
            context.retainsRegisteredObjects = true
            _ = try context.existingObject(with: id).objectID
        }
        let listeners = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1"
        let name = "strata listen \(store.schema)"
        #expect(try await Self.eventually { (try store.execute(listeners, [.text(name)]).rows.first?.first?.integer ?? 0) >= 1 })
        // The commit may land before b listens again: it is read from history either way.
        try await ManagedObjectContext(.privateQueue, coordinator: a).perform { context in
            (try context.existingObject(with: id) as? PGContact)?.name = "while lost"
            try context.save()
        }
        #expect(try await Self.eventually {
            await merger.perform { context in (context.registeredObject(for: id) as? PGContact)?.name == "while lost" }
        })
        // And b listens again.
        #expect(try await Self.eventually {
            (try store.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", [.text(name)]).rows.first?.first?.integer ?? 0) == 1
        })
    }

    @Test("saves from several contexts of two instances at once: sequence order is commit order, so readers following the history never skip a transaction")
    func concurrentHistory() async throws {
        let store = PostgresTestStore(model: PGHistoryModel.model)
        let a = try await Self.coordinator(store)
        let b = try await Self.coordinator(store)
        let done = LockedValue(false)
        // A reader that follows the history while the saves run, as an instance catching up does.
        let reader = Task { () -> [UInt64] in
            var seen: [UInt64] = []
            var last: PersistentHistoryToken?
            while true {
                let finished = done.withLock { $0 }
                for transaction in try a.execute(.fetchHistory(after: last)).transactions {
                    seen.append(transaction.token.sequence)
                    last = transaction.token
                }
                if finished { return seen }
                try await Task.sleep(for: .milliseconds(2))
            }
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, coordinator) in [a, a, b, b].enumerated() {
                group.addTask {
                    for round in 0..<10 { _ = try await Self.saveContact("w\(index)-\(round)", in: coordinator) }
                }
            }
            try await group.waitForAll()
        }
        done.withLock { $0 = true }
        let followed = try await reader.value
        let all = try a.execute(.fetchHistory(after: nil as PersistentHistoryToken?)).transactions.map(\.token.sequence)
        #expect(all.count == 40)
        #expect(followed == all, "the reader following the history saw every transaction, in order")
    }

    @Test("a history row that does not decode is a typed corruptRecord, for fetches; remote watching goes on")
    func corruptHistory() async throws {
        let store = PostgresTestStore(model: PGHistoryModel.model)
        let coordinator = try await Self.coordinator(store)
        _ = try await Self.saveContact("x", in: coordinator)
        _ = try store.execute(
            "INSERT INTO \"\(store.schema)\".strata_history (sequence, instance, committed, record) VALUES (1000, $1, now(), $2)",
            [.uuid(UUID()), .bytes([0x01, 0xFF, 0x02])])
        #expect {
            try coordinator.execute(.fetchHistory(after: nil as PersistentHistoryToken?))
        } throws: { ($0 as? StrataError)?.code == .corruptRecord }
    }
}
