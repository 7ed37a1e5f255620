import Foundation
@testable import Strata
import Testing

/// Uniqueness constraints under the merging policies: a new object whose constrained
/// values a stored object holds becomes that object (an upsert), by each policy's rules.
@Suite("Upserts")
struct UpsertTests {
    /// A stored account a@x (region eu, name "stored", 5 visits, team Red), and team Blue.
    static func world() async throws -> (PersistentStoreCoordinator, ManagedObjectID) {
        let coordinator = try await AccountsModel.coordinator()
        let id = try await ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "setup").perform { context in
            let red = Team(), blue = Team()
            red.name = "Red"
            blue.name = "Blue"
            try context.insert(red)
            try context.insert(blue)
            let account = UserAccount()
            account.email = "a@x"
            account.region = "eu"
            account.handle = nil
            account.name = "stored"
            account.visits = 5
            try context.insert(account)
            account.team = red
            try context.save()
            return account.objectID
        }
        return (coordinator, id)
    }

    /// The stored account(s) with email a@x: `name visits handle team`.
    static func stored(_ coordinator: PersistentStoreCoordinator) async throws -> [String] {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            var request = FetchRequest<UserAccount>()
            request.predicate = try FetchPredicate(format: "email == %@", "a@x")
            let teams = try context.fetch(FetchRequest<Team>()).map { "\($0.name): \($0.accounts.count)" }.sorted()
            return try context.fetch(request).map { "\($0.name) \($0.visits) \($0.handle ?? "-") \($0.team?.name ?? "-")" } + teams
        }
    }

    @Test("each policy settles an insert of a stored object's email: the new object takes the stored object's ID, its values merged by the policy's rules", arguments: [
        ("mergeByPropertyObjectTrump", "new 1 h Blue"),
        ("mergeByPropertyStoreTrump", "stored 5 h Red"),
        ("overwrite", "new 1 h Blue"),
        ("rollback", "stored 5 - Red"),
    ])
    func upsert(policyName: String, expected: String) async throws {
        let policy: MergePolicy = switch policyName {
        case "mergeByPropertyObjectTrump": .mergeByPropertyObjectTrump
        case "mergeByPropertyStoreTrump": .mergeByPropertyStoreTrump
        case "overwrite": .overwrite
        default: .rollback
        }
        let (coordinator, existing) = try await Self.world()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "importer")
        context.mergePolicy = policy
        let saves = context.notifications(of: [.didSave])
        let (adoptedID, mine, other) = try await context.perform { context in
            let blue = try #require(try context.fetch(FetchRequest<Team>()).first { $0.name == "Blue" })
            let account = UserAccount()
            account.email = "a@x"
            account.region = "us"   // (us, h) is free
            account.handle = "h"
            account.name = "new"
            account.visits = 1
            try context.insert(account)
            account.team = blue
            let other = UserAccount()
            other.email = "b@x"
            try context.insert(other)
            try context.save()
            return (account.objectID, "\(account.name) \(account.visits) \(account.handle ?? "-") \(account.team?.name ?? "-")", other.objectID)
        }
        #expect(adoptedID == existing)
        let stored = try await Self.stored(coordinator)
        let teams = expected.hasSuffix("Blue") ? ["Blue: 1", "Red: 0"] : ["Blue: 0", "Red: 1"]
        #expect(stored == [expected] + teams)
        #expect(mine == expected, "the saving context's object holds the stored state")
        var iterator = saves.makeAsyncIterator()
        let saved = try #require(await iterator.next())
        #expect(saved.updatedObjectIDs.contains(existing) && saved.insertedObjectIDs == [other])
        #expect(coordinator.writeStatistics.resolvedConflicts == 1)
    }

    @Test("an upsert replaces the instance the context had registered for the stored object, and .error still fails the same save")
    func registeredInstanceLeaves() async throws {
        let (coordinator, existing) = try await Self.world()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "importer")
        let failed = try await context.perform { context -> Bool in
            context.retainsRegisteredObjects = true
            _ = try context.existingObject(with: existing)
            let account = UserAccount()
            account.email = "a@x"
            try context.insert(account)
            do {
                try context.save()
                return false
            } catch StrataError.Code.constraintConflicts {
                return true
            }
        }
        #expect(failed)
        context.mergePolicy = .mergeByPropertyObjectTrump
        let (same, oldGone) = try await context.perform { context -> (Bool, Bool) in
            let old = context.registeredObject(for: existing)
            try context.save()
            let now = context.registeredObject(for: existing)
            return (old != nil && now != nil && now !== old, old?.faultState == .inaccessible)
        }
        #expect(same && oldGone)
        // Object trump: the new object's values (its defaults included) over the stored ones.
        #expect(try await Self.stored(coordinator).first == " 0 - Red")
    }

    @Test("a custom resolver decides each attribute both objects hold differently")
    func customUpsert() async throws {
        let (coordinator, existing) = try await Self.world()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "importer")
        context.mergePolicy = .custom(MergeResolver(name: "visits add up") { conflict, key in
            guard key == "visits", case .integer(let mine)? = conflict.objectSnapshot?.attributeValue(key),
                  case .integer(let theirs)? = conflict.persistedSnapshot?.attributeValue(key) else { return .store }
            return .attribute(.integer(mine + theirs))
        })
        try await context.perform { context in
            let account = UserAccount()
            account.email = "a@x"
            account.region = "eu"
            account.name = "new"
            account.visits = 3
            try context.insert(account)
            try context.save()
            #expect(account.objectID == existing)
        }
        #expect(try await Self.stored(coordinator) == ["stored 8 - Red", "Blue: 0", "Red: 1"])
    }

    @Test("two new objects of one save claiming the same values are not merged into each other: the save fails under every policy")
    func duplicatesWithinASaveStillFail() async throws {
        let (coordinator, _) = try await Self.world()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "importer")
        context.mergePolicy = .mergeByPropertyObjectTrump
        let failed = try await context.perform { context -> Bool in
            for _ in 0..<2 {
                let account = UserAccount()
                account.email = "new@x"
                try context.insert(account)
            }
            do {
                try context.save()
                return false
            } catch let error as StrataError where error.code == .constraintConflicts {
                return error.constraintConflicts.count == 1 && error.constraintConflicts[0].objectIDs.count == 2
            }
        }
        #expect(failed)
    }
}
