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

    static func policy(named name: String) -> MergePolicy {
        switch name {
        case "mergeByPropertyObjectTrump": .mergeByPropertyObjectTrump
        case "mergeByPropertyStoreTrump": .mergeByPropertyStoreTrump
        case "overwrite": .overwrite
        default: .rollback
        }
    }

    @Test("two new objects of one save claiming the same values become one object: the first is the existing one for the second (its team and values merged by the policy's rules); the context keeps the second instance, reports one insert, and both teams read what was stored", arguments: [
        ("mergeByPropertyObjectTrump", "second 2 h2 Blue"),
        ("mergeByPropertyStoreTrump", "first 1 h1 Red"),
        ("overwrite", "second 2 h2 Blue"),
        ("rollback", "first 1 h1 Red"),
    ])
    func duplicatesWithinASave(policyName: String, expected: String) async throws {
        let (coordinator, _) = try await Self.world()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "importer")
        context.mergePolicy = Self.policy(named: policyName)
        let saves = context.notifications(of: [.didSave])
        let outcome = try await context.perform { context in
            let red = Team(), blue = Team()
            red.name = "New red"
            blue.name = "New blue"
            try context.insert(red)
            try context.insert(blue)
            var accounts: [UserAccount] = []
            for (number, team) in [(1, red), (2, blue)] {
                let account = UserAccount()
                account.email = "new@x"
                account.region = "r\(number)"
                account.handle = "h\(number)"
                account.name = number == 1 ? "first" : "second"
                account.visits = Int64(number)
                try context.insert(account)
                account.team = team
                accounts.append(account)
            }
            try context.save()
            let kept = accounts[1]
            return (
                first: accounts[0].faultState == .inaccessible, keptID: kept.objectID,
                kept: "\(kept.name) \(kept.visits) \(kept.handle ?? "-") \(kept.team?.name.split(separator: " ").last.map(String.init) ?? "-")",
                teams: [red, blue].map { "\($0.name): \($0.accounts.map(\.name).sorted())" },
                registered: context.registeredObject(for: kept.objectID) === kept)
        }
        let expectedTeam = expected.hasSuffix("Blue") ? "Blue" : "Red"
        #expect(outcome.first, "the first instance leaves the context")
        #expect(outcome.registered && !outcome.keptID.isTemporaryID)
        #expect(outcome.kept == expected.replacingOccurrences(of: "Blue", with: "blue").replacingOccurrences(of: "Red", with: "red"))
        let name = String(expected.split(separator: " ")[0])
        #expect(outcome.teams == (expectedTeam == "Blue" ? ["New red: []", "New blue: [\"\(name)\"]"] : ["New red: [\"\(name)\"]", "New blue: []"]))
        let stored = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            var request = FetchRequest<UserAccount>()
            request.predicate = try FetchPredicate(format: "email == %@", "new@x")
            return try context.fetch(request).map { "\($0.objectID == outcome.keptID) \($0.name) \($0.visits) \($0.handle ?? "-") \($0.team?.name ?? "-")" }
        }
        #expect(stored == ["true " + expected.replacingOccurrences(of: "Blue", with: "New blue").replacingOccurrences(of: "Red", with: "New red")])
        var iterator = saves.makeAsyncIterator()
        let saved = try #require(await iterator.next())
        #expect(saved.insertedObjectIDs.filter { $0.entityName == "UserAccount" } == [outcome.keptID])
        #expect(saved.updatedObjectIDs.isEmpty)
    }

    @Test("new objects linked through several constraints become one (c@x with (r, h1), b@x with (r, h1), b@x with (r, h2)); with a stored holder among them they all become it; .error fails the same save")
    func chainsOfClaims() async throws {
        let (coordinator, existing) = try await Self.world()
        func insertChain(_ context: isolated ManagedObjectContext, withStored: Bool) throws -> [UserAccount] {
            var accounts: [UserAccount] = []
            let chain = withStored ? [("a@x", "h1"), ("d@x", "h1"), ("d@x", "h3")] : [("c@x", "h1"), ("b@x", "h1"), ("b@x", "h2")]
            for (email, handle) in chain {
                let account = UserAccount()
                account.email = email
                account.region = "r"
                account.handle = handle
                account.name = "\(email) \(handle)"
                try context.insert(account)
                accounts.append(account)
            }
            return accounts
        }
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "importer")
        let refused = try await context.perform { context -> Int in
            _ = try insertChain(context, withStored: false)
            do {
                try context.save()
                return -1
            } catch let error as StrataError where error.code == .constraintConflicts {
                context.rollback()
                return error.constraintConflicts.count
            }
        }
        #expect(refused == 2, "b@x and (r, h1): each conflict listed")
        context.mergePolicy = .mergeByPropertyObjectTrump
        let (newIDs, storedIDs) = try await context.perform { context in
            let new = try insertChain(context, withStored: false)
            try context.save()
            let newIDs = Set(new.filter { $0.faultState != .inaccessible }.map(\.objectID))
            let joined = try insertChain(context, withStored: true)
            try context.save()
            return (newIDs, Set(joined.filter { $0.faultState != .inaccessible }.map(\.objectID)))
        }
        #expect(newIDs.count == 1 && storedIDs == [existing])
        let stored = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.fetch(FetchRequest<UserAccount>()).map { "\($0.email ?? "-") \($0.region) \($0.handle ?? "-") \($0.name)" }.sorted()
        }
        // The first chain: c@x (r, h1), then b@x (r, h1) over it, then b@x (r, h2) over that.
        // The second the same over the stored a@x; (r, h1) is free again, as the first
        // chain's object moved to (r, h2) before it was written.
        #expect(stored == ["b@x r h2 b@x h2", "d@x r h3 d@x h3"])
    }

    @Test("new objects claiming values two different stored objects hold cannot become both: the save fails under a merging policy, listing the conflicts, and nothing is written")
    func twoHoldersFail() async throws {
        let (coordinator, _) = try await Self.world()
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let other = UserAccount()
            other.email = "z@x"
            other.region = "r"
            other.handle = "h"
            try context.insert(other)
            try context.save()
        }
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "importer")
        context.mergePolicy = .mergeByPropertyObjectTrump
        let conflicts = try await context.perform { context -> [ConstraintConflict] in
            let account = UserAccount()
            account.email = "a@x"   // held by the world's account
            account.region = "r"
            account.handle = "h"    // (r, h) held by z@x
            try context.insert(account)
            return try ChildUniquenessTests.savedOrConflicts(context)
        }
        #expect(conflicts.count == 2 && conflicts.allSatisfy { $0.existingObjectID != nil })
        #expect(try await Self.stored(coordinator) == ["stored 5 - Red", "Blue: 0", "Red: 1"])
    }

    @Test("after a merged save mixing an upsert, a new email, an email moved to a freed value and a version conflict, the unique index names exactly the rows that hold each value")
    func uniqueIndexAfterAMixedMerge() async throws {
        let (coordinator, existing) = try await Self.world()
        let ids = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try UniquenessConstraintTests.insert([("m@x", "", nil), ("v@x", "", nil)], into: context)
        }
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "importer")
        context.mergePolicy = .mergeByPropertyObjectTrump
        try await context.perform { context in
            let conflicting = try #require(try context.existingObject(with: ids[1]) as? UserAccount)
            _ = conflicting.email   // read at its first version
        }
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            (try context.existingObject(with: ids[1]) as? UserAccount)?.visits = 9   // a version conflict for the importer
            try context.save()
        }
        let fresh = try await context.perform { context in
            let upsert = UserAccount()
            upsert.email = "a@x"
            try context.insert(upsert)
            let fresh = UserAccount()
            fresh.email = "fresh@x"
            try context.insert(fresh)
            (try context.existingObject(with: ids[0]) as? UserAccount)?.email = "moved@x"   // frees m@x
            (try context.existingObject(with: ids[1]) as? UserAccount)?.name = "merged"
            try context.save()
            return fresh.objectID
        }
        // Each email now: a new object claiming it under .error meets exactly its holder.
        for (email, holder) in [("a@x", existing), ("fresh@x", fresh), ("moved@x", ids[0]), ("v@x", ids[1])] {
            let conflicts = try await ChildUniquenessTests.rootInsert(email, into: coordinator)
            #expect(conflicts.map(\.existingObjectID) == [holder], "\(email)")
        }
        #expect(try await ChildUniquenessTests.rootInsert("m@x", into: coordinator).isEmpty, "m@x was freed")
        #expect(try await UniquenessConstraintTests.stored(on: coordinator) == ["a@x//-", "fresh@x//-", "m@x//-", "moved@x//-", "v@x//-"])
    }
}
