import Foundation
@testable import Strata
import StrataTesting
import Testing

/// Uniqueness constraints under the default policy (`.error`): declared on entities and
/// typed classes, part of the model's hash, enforced by the store's unique indexes.
@Suite("Uniqueness constraints")
struct UniquenessConstraintTests {
    /// Inserts accounts `(email, region, handle)` and saves; their IDs.
    static func insert(_ accounts: [(String?, String, String?)], into context: isolated ManagedObjectContext) throws -> [ManagedObjectID] {
        var inserted: [UserAccount] = []
        for (email, region, handle) in accounts {
            let account = UserAccount()
            account.email = email
            account.region = region
            account.handle = handle
            try context.insert(account)
            inserted.append(account)
        }
        try context.save()
        return inserted.map(\.objectID)
    }

    /// The stored accounts as `email/region/handle`, sorted.
    static func stored(on coordinator: PersistentStoreCoordinator) async throws -> [String] {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.fetch(FetchRequest<UserAccount>()).map { "\($0.email ?? "-")/\($0.region)/\($0.handle ?? "-")" }.sorted()
        }
    }

    @Test("constraints come from typed classes and descriptions, sub-entities inherit them, and they change the version hash only when present")
    func modelDeclarations() throws {
        let account = try #require(AccountsModel.model.entitiesByName["UserAccount"])
        #expect(account.uniquenessConstraints == [["email"], ["region", "handle"]])
        #expect(AccountsModel.model.entitiesByName["Staff"]?.uniquenessConstraints == [["badge"]])
        #expect(AccountsModel.model.entitiesByName["Staff"]?.declaredUniquenessConstraints == [])
        #expect(AccountsModel.model.entitiesByName["Member"]?.declaredUniquenessConstraints == [["badge"]])
        func model(_ constraints: [[String]]) throws -> ManagedObjectModel {
            try ManagedObjectModel(entities: [EntityDescription(
                name: "User", attributes: [AttributeDescription(name: "email", type: .string), AttributeDescription(name: "age", type: .integer32)],
                uniquenessConstraints: constraints)])
        }
        let plain = try model([]), unique = try model([["email"]]), compound = try model([["email", "age"]])
        #expect(Set([plain.versionHash, unique.versionHash, compound.versionHash]).count == 3)
        #expect(try model([]).versionHash == plain.versionHash)
    }

    @Test("a constraint that names nothing, an unknown, transient or unindexable attribute, or a relationship is a model error listing each")
    func invalidConstraints() throws {
        let error = #expect(throws: ModelError.self) {
            try ManagedObjectModel(entities: [
                EntityDescription(
                    name: "User",
                    attributes: [
                        AttributeDescription(name: "email", type: .string),
                        AttributeDescription(name: "scratch", type: .string, isTransient: true),
                        AttributeDescription(name: "blob", type: .decimal),
                    ],
                    relationships: [RelationshipDescription(name: "friend", destinationEntityName: "User", inverseName: "friend")],
                    uniquenessConstraints: [[], ["nope"], ["scratch"], ["blob"], ["friend"], ["email", "email"]]),
            ])
        }
        let reasons = error?.problems.map { "\($0)" } ?? []
        #expect(reasons.count == 6, "\(reasons)")
        #expect(reasons.contains { $0.contains("names no attribute") })
        #expect(reasons.contains { $0.contains("no attribute 'nope'") })
        #expect(reasons.contains { $0.contains("transient") })
        #expect(reasons.contains { $0.contains("cannot be indexed") })
        #expect(reasons.contains { $0.contains("is a relationship") })
        #expect(reasons.contains { $0.contains("twice") })
    }

    @Test("inserting values a stored object holds fails the save, naming the constraint, the new object and the stored one; nothing of the save is written")
    func duplicateOfAStoredObject() async throws {
        let coordinator = try await AccountsModel.coordinator()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let first = try await context.perform { context in try Self.insert([("a@x", "eu", "ann")], into: context)[0] }
        let (conflicts, stillChanged) = try await context.perform { context -> ([ConstraintConflict], Bool) in
            let team = Team()
            team.name = "new team"
            try context.insert(team)
            do {
                _ = try Self.insert([("a@x", "us", "bob"), ("c@x", "us", "cy")], into: context)
                return ([], false)
            } catch let error as StrataError where error.code == .constraintConflicts {
                return (error.constraintConflicts, context.hasChanges)
            }
        }
        let conflict = try #require(conflicts.first)
        #expect(conflicts.count == 1 && stillChanged)
        #expect(conflict.entityName == "UserAccount" && conflict.constraint == ["email"] && conflict.values == ["email": .string("a@x")])
        #expect(conflict.existingObjectID == first && conflict.objectIDs.count == 1 && conflict.objectIDs[0].isTemporaryID)
        #expect(try await Self.stored(on: coordinator) == ["a@x/eu/ann"])
        let teams = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.count(for: FetchRequest<Team>())
        }
        #expect(teams == 0)
    }

    @Test("two new objects of one save claiming the same values conflict with each other; nil values are not constrained; compound constraints need every value equal")
    func duplicatesWithinOneSave() async throws {
        let coordinator = try await AccountsModel.coordinator()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let conflicts = try await context.perform { context -> [ConstraintConflict] in
            do {
                _ = try Self.insert([("same@x", "eu", "a"), ("same@x", "eu", "b"), (nil, "eu", "c")], into: context)
                return []
            } catch let error as StrataError where error.code == .constraintConflicts {
                context.rollback()
                return error.constraintConflicts
            }
        }
        #expect(conflicts.count == 1 && conflicts[0].objectIDs.count == 2 && conflicts[0].existingObjectID == nil)
        // Nil emails and handles never conflict; (eu, x) and (us, x) differ.
        try await context.perform { context in
            _ = try Self.insert([(nil, "eu", "x"), (nil, "us", "x"), ("d@x", "eu", nil), ("e@x", "eu", nil)], into: context)
        }
        #expect(try await Self.stored(on: coordinator) == ["-/eu/x", "-/us/x", "d@x/eu/-", "e@x/eu/-"])
        let compound = try await context.perform { context -> [String] in
            do {
                _ = try Self.insert([("f@x", "eu", "x")], into: context)
                return []
            } catch let error as StrataError where error.code == .constraintConflicts {
                context.rollback()
                return error.constraintConflicts.map { $0.constraint.joined(separator: "+") }
            }
        }
        #expect(compound == ["region+handle"])
    }

    @Test("changing an object onto another's values conflicts; swapping values between two objects, or deleting one and giving its values to a new one, in one save, does not")
    func updatesSwapsAndDeletions() async throws {
        let coordinator = try await AccountsModel.coordinator()
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let ids = try await context.perform { context in try Self.insert([("a@x", "eu", "a"), ("b@x", "eu", "b")], into: context) }
        let clash = try await context.perform { context -> Bool in
            (try context.existingObject(with: ids[1]) as? UserAccount)?.email = "a@x"
            do {
                try context.save()
                return false
            } catch StrataError.Code.constraintConflicts {
                context.rollback()
                return true
            }
        }
        #expect(clash)
        try await context.perform { context in
            let a = try #require(try context.existingObject(with: ids[0]) as? UserAccount)
            let b = try #require(try context.existingObject(with: ids[1]) as? UserAccount)
            (a.email, b.email) = (b.email, a.email)
            try context.save()
            try context.delete(a)
            let replacement = UserAccount()
            replacement.email = "b@x"
            replacement.region = "eu"
            replacement.handle = "a"
            try context.insert(replacement)
            try context.save()
        }
        #expect(try await Self.stored(on: coordinator) == ["a@x/eu/b", "b@x/eu/a"])
        // The freed values are free in a later save too.
        try await context.perform { context in
            try context.delete(try #require(try context.existingObject(with: ids[1]) as? UserAccount))
            try context.save()
            _ = try Self.insert([("a@x", "eu", "b")], into: context)
        }
        #expect(try await Self.stored(on: coordinator) == ["a@x/eu/b", "b@x/eu/a"])
    }

    @Test("a constraint declared on an abstract entity holds across its sub-entities")
    func subEntitiesShareTheIndex() async throws {
        let coordinator = try await AccountsModel.coordinator()
        let failed = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context -> Bool in
            let staff = Staff()
            staff.badge = 7
            try context.insert(staff)
            try context.save()
            let guest = Guest()
            guest.badge = 7
            try context.insert(guest)
            do {
                try context.save()
                return false
            } catch let error as StrataError where error.code == .constraintConflicts {
                return error.constraintConflicts.first?.entityName == "Member" && error.constraintConflicts.first?.existingObjectID == staff.objectID
            }
        }
        #expect(failed)
    }

    @Test("the unique index lives in the store: it holds after the store is closed and opened again")
    func persistsAcrossOpens() async throws {
        let directory = TemporaryDirectory()
        let url = directory.url.appendingPathComponent("accounts")
        do {
            let coordinator = PersistentStoreCoordinator(managedObjectModel: AccountsModel.model)
            try await coordinator.addPersistentStore(at: url, options: CoordinatorStoreTests.options)
            try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
                _ = try Self.insert([("a@x", "eu", "a")], into: context)
            }
            for store in coordinator.persistentStores { try await coordinator.remove(store) }
        }
        let coordinator = PersistentStoreCoordinator(managedObjectModel: AccountsModel.model)
        try await coordinator.addPersistentStore(at: url, options: CoordinatorStoreTests.options)
        let failed = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context -> Bool in
            do {
                _ = try Self.insert([("a@x", "us", "b")], into: context)
                return false
            } catch StrataError.Code.constraintConflicts {
                return true
            }
        }
        #expect(failed)
    }

    @Test("eight contexts insert accounts with overlapping emails at once (group commit): each email is stored once, and every losing save fails with a constraint conflict")
    func concurrentInserts() async throws {
        let coordinator = try await AccountsModel.coordinator()
        let outcomes = try await withThrowingTaskGroup(of: (saved: Int, failed: Int).self) { group in
            for worker in 0..<8 {
                group.addTask {
                    let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "worker \(worker)")
                    var saved = 0, failed = 0
                    for round in 0..<10 {
                        try await context.perform { context in
                            let account = UserAccount()
                            account.email = "user\(round)@x"   // every worker tries the same ten emails
                            account.region = "w\(worker)"
                            try context.insert(account)
                            do {
                                try context.save()
                                saved += 1
                            } catch StrataError.Code.constraintConflicts {
                                context.rollback()
                                failed += 1
                            }
                        }
                    }
                    return (saved, failed)
                }
            }
            var total = (saved: 0, failed: 0)
            for try await outcome in group { total = (total.saved + outcome.saved, total.failed + outcome.failed) }
            return total
        }
        #expect(outcomes.saved == 10 && outcomes.failed == 70)
        let emails = try await Self.stored(on: coordinator).map { $0.split(separator: "/")[0] }
        #expect(emails.count == 10 && Set(emails).count == 10)
    }
}

/// Uniqueness constraints at a child context's save: the parent checks the child's new
/// objects against its own state and the store, so an editor child gets the conflict first.
@Suite("Uniqueness constraints at child saves")
struct ChildUniquenessTests {
    /// Saves a child's new account with `email` into `parent`; the constraint conflicts, if any.
    static func childInserts(_ emails: [String], into parent: ManagedObjectContext, policy: MergePolicy = .error) async throws -> [ConstraintConflict] {
        try await childChanges(in: parent, policy: policy) { context in
            for email in emails {
                let account = UserAccount()
                account.email = email
                try context.insert(account)
            }
        }
    }

    @Test("a child's new object conflicts with a stored one, with the parent's unsaved one, and with another of its own; the parent is left unchanged")
    func childConflicts() async throws {
        let coordinator = try await AccountsModel.coordinator()
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "parent")
        let (stored, pending) = try await parent.perform { context in
            let ids = try UniquenessConstraintTests.insert([("stored@x", "eu", nil)], into: context)
            let account = UserAccount()
            account.email = "pending@x"
            try context.insert(account)
            return (ids[0], account.objectID)
        }
        let first = try await Self.childInserts(["stored@x"], into: parent)
        #expect(first.count == 1 && first[0].existingObjectID == stored)
        let second = try await Self.childInserts(["pending@x"], into: parent)
        #expect(second.count == 1 && second[0].existingObjectID == pending)
        let third = try await Self.childInserts(["twice@x", "twice@x"], into: parent)
        #expect(third.count == 1 && third[0].objectIDs.count == 2 && third[0].existingObjectID == nil)
        let inserted = await parent.perform { context in context.insertedObjects.count }
        #expect(inserted == 1, "only the parent's own pending account")
    }

    @Test("values the parent freed (deleting or changing the stored holder) are free for the child; under a merging policy the stored holder is left to the root's upsert")
    func freedValuesAndUpserts() async throws {
        let coordinator = try await AccountsModel.coordinator()
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "parent")
        let ids = try await parent.perform { context in
            try UniquenessConstraintTests.insert([("a@x", "eu", nil), ("b@x", "eu", nil), ("c@x", "eu", nil)], into: context)
        }
        try await parent.perform { context in
            try context.delete(try context.existingObject(with: ids[0]))
            (try context.existingObject(with: ids[1]) as? UserAccount)?.email = "moved@x"
        }
        #expect(try await Self.childInserts(["a@x", "b@x"], into: parent).isEmpty)
        #expect(try await Self.childInserts(["c@x"], into: parent, policy: .mergeByPropertyObjectTrump).isEmpty)
        parent.mergePolicy = .mergeByPropertyObjectTrump
        try await parent.perform { context in try context.save() }
        #expect(try await UniquenessConstraintTests.stored(on: coordinator) == ["a@x//-", "b@x//-", "c@x//-", "moved@x/eu/-"])
    }

    /// Inserts an account with `email` through a new root context under `.error`; the
    /// constraint conflicts, if any (nothing is kept of a failed save).
    static func rootInsert(_ email: String, into coordinator: PersistentStoreCoordinator) async throws -> [ConstraintConflict] {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let account = UserAccount()
            account.email = email
            try context.insert(account)
            return try savedOrConflicts(context)
        }
    }

    /// Saves `context`: no conflicts, or the constraint conflicts that failed the save.
    static func savedOrConflicts(_ context: isolated ManagedObjectContext) throws -> [ConstraintConflict] {
        do {
            try context.save()
            return []
        } catch let error as StrataError where error.code == .constraintConflicts {
            return error.constraintConflicts
        }
    }

    /// The account `id` in `context`.
    static func account(_ context: isolated ManagedObjectContext, _ id: ManagedObjectID) throws -> UserAccount {
        try #require(try context.existingObject(with: id) as? UserAccount)
    }

    /// Runs `body` in a new child of `parent` and saves it; the constraint conflicts, if any.
    static func childChanges(
        in parent: ManagedObjectContext, policy: MergePolicy = .error,
        _ body: @escaping @Sendable (isolated ManagedObjectContext) throws -> Void
    ) async throws -> [ConstraintConflict] {
        let child = ManagedObjectContext(.privateQueue, parent: parent, name: "editor")
        child.mergePolicy = policy
        return try await child.perform { context in
            try body(context)
            return try savedOrConflicts(context)
        }
    }

    @Test("a child's changes of constrained values are checked too: onto a stored object's email, a parent's new object's, another changed object's, or a compound pair completed by the parent's values; swapping emails and moving onto values the save frees pass")
    func childChangesOfConstrainedValues() async throws {
        let coordinator = try await AccountsModel.coordinator()
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "parent")
        let ids = try await parent.perform { context in
            try UniquenessConstraintTests.insert([("a@x", "eu", "h"), ("b@x", "us", "h"), ("c@x", "eu", nil)], into: context)
        }
        let pending = try await parent.perform { context in
            let account = UserAccount()
            account.email = "pending@x"
            try context.insert(account)
            return account.objectID
        }
        let ontoStored = try await Self.childChanges(in: parent) { context in try ChildUniquenessTests.account(context, ids[2]).email = "a@x" }
        #expect(ontoStored.count == 1 && ontoStored[0].existingObjectID == ids[0] && ontoStored[0].objectIDs == [ids[2]])
        let ontoPending = try await Self.childChanges(in: parent) { context in try ChildUniquenessTests.account(context, ids[2]).email = "pending@x" }
        #expect(ontoPending.count == 1 && ontoPending[0].existingObjectID == pending)
        let bothOntoOne = try await Self.childChanges(in: parent) { context in
            try ChildUniquenessTests.account(context, ids[0]).email = "same@x"
            try ChildUniquenessTests.account(context, ids[1]).email = "same@x"
        }
        #expect(bothOntoOne.count == 1 && Set(bothOntoOne[0].objectIDs) == [ids[0], ids[1]] && bothOntoOne[0].existingObjectID == nil)
        // (us, h) is b@x's: c@x's handle alone is set; its region comes from the parent.
        let compound = try await Self.childChanges(in: parent) { context in
            let c = try ChildUniquenessTests.account(context, ids[2])
            c.region = "us"
            c.handle = "h"
        }
        #expect(compound.count == 1 && compound[0].constraint == ["region", "handle"] && compound[0].existingObjectID == ids[1])
        let swapped = try await Self.childChanges(in: parent) { context in
            try ChildUniquenessTests.account(context, ids[0]).email = "b@x"
            try ChildUniquenessTests.account(context, ids[1]).email = "a@x"
            try ChildUniquenessTests.account(context, ids[2]).email = "c2@x"
        }
        #expect(swapped.isEmpty)
        let freed = try await Self.childChanges(in: parent) { context in
            try ChildUniquenessTests.account(context, ids[2]).email = "a@x"   // a@x is b@x's now, which moves on
            try ChildUniquenessTests.account(context, ids[1]).email = "z@x"
        }
        #expect(freed.isEmpty)
        try await parent.perform { context in try context.save() }
        #expect(try await UniquenessConstraintTests.stored(on: coordinator) == ["a@x/eu/-", "b@x/eu/h", "pending@x//-", "z@x/us/h"])
    }

    @Test("under a merging policy a child's new objects that claim the same values as each other or as the parent's are left to the root's save, which makes them one object")
    func childDuplicatesMergeAtTheRoot() async throws {
        let coordinator = try await AccountsModel.coordinator()
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "parent")
        parent.mergePolicy = .mergeByPropertyObjectTrump
        try await parent.perform { context in
            context.retainsRegisteredObjects = true
            let account = UserAccount()
            account.email = "twice@x"
            account.name = "parent's"
            try context.insert(account)
        }
        let conflicts = try await Self.childChanges(in: parent, policy: .mergeByPropertyObjectTrump) { context in
            for name in ["child's first", "child's second"] {
                let account = UserAccount()
                account.email = "twice@x"
                account.name = name
                try context.insert(account)
            }
        }
        #expect(conflicts.isEmpty)
        let (inserted, kept) = try await parent.perform { context in
            let inserted = context.insertedObjects.count
            try context.save()
            return (inserted, context.registeredObjects.compactMap { $0 as? UserAccount }.filter { $0.faultState != .inaccessible }.map(\.name))
        }
        #expect(inserted == 3 && kept == ["child's second"], "\(kept)")
        let names = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.fetch(FetchRequest<UserAccount>()).map(\.name)
        }
        #expect(names == ["child's second"], "the parent's object first, then the child's two over it, in the save's order")
    }
}
