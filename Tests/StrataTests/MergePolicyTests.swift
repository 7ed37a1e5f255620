import Foundation
@testable import Strata
import Testing

/// Merge policies on a root context's save against the store: each policy × {attribute,
/// to-one, to-many} × {one side changed, both sides changed}, on the real LMDB store.
@Suite("Merge policies")
struct MergePolicyTests {
    static let policies: [MergePolicy] = [.error, .mergeByPropertyObjectTrump, .mergeByPropertyStoreTrump, .overwrite, .rollback]

    /// The saving side reads note "a"; the other side changes it and saves; the saving
    /// side changes it and saves under `policy`.
    /// - Returns: the saving side's save error (nil when it saved), its state of the note
    ///   afterwards, and the stored state.
    static func run(
        _ policy: MergePolicy, _ property: MergeWorld.Property, _ sides: MergeWorld.Sides
    ) async throws -> (error: StrataError?, mine: MergeWorld.State, stored: MergeWorld.State, id: ManagedObjectID) {
        let coordinator = try await MergeWorld.coordinator()
        let saving = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "saving")
        saving.mergePolicy = policy
        let id = try await saving.perform { context in
            try MergeWorld.readEverything(in: context)
        }
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "other").perform { context in
            try MergeWorld.otherChange(property, sides, to: try MergeWorld.note(id, in: context), in: context)
            try context.save()
        }
        let (error, mine) = try await saving.perform { context -> (StrataError?, MergeWorld.State) in
            try MergeWorld.ownChange(property, to: try MergeWorld.note(id, in: context), in: context)
            do {
                try context.save()
                return (nil, try MergeWorld.state(of: id, in: context))
            } catch let error as StrataError {
                return (error, try MergeWorld.state(of: id, in: context))
            }
        }
        return (error, mine, try await MergeWorld.stored(id, on: coordinator), id)
    }

    /// A child reads note "a" through its parent; the parent changes it (unsaved); the
    /// child changes it and saves under `policy` into the parent; the parent saves.
    /// - Returns: the child's save error (nil when it saved), the child's state of the
    ///   note afterwards, the parent's state then, and the stored state after the
    ///   parent's save.
    static func runChild(
        _ policy: MergePolicy, _ property: MergeWorld.Property, _ sides: MergeWorld.Sides
    ) async throws -> (error: StrataError?, mine: MergeWorld.State, stored: MergeWorld.State, id: ManagedObjectID) {
        let coordinator = try await MergeWorld.coordinator()
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "parent")
        let child = ManagedObjectContext(.privateQueue, parent: parent, name: "child")
        child.mergePolicy = policy
        let id = try await child.perform { context in
            try MergeWorld.readEverything(in: context)
        }
        try await parent.perform { context in
            context.retainsRegisteredObjects = true
            try MergeWorld.otherChange(property, sides, to: try MergeWorld.note(id, in: context), in: context)
        }
        let (error, mine) = try await child.perform { context -> (StrataError?, MergeWorld.State) in
            try MergeWorld.ownChange(property, to: try MergeWorld.note(id, in: context), in: context)
            do {
                try context.save()
                return (nil, try MergeWorld.state(of: id, in: context))
            } catch let error as StrataError {
                return (error, try MergeWorld.state(of: id, in: context))
            }
        }
        let parentState = try await parent.perform { context in
            let state = try MergeWorld.state(of: id, in: context)
            try context.save()
            return state
        }
        let stored = try await MergeWorld.stored(id, on: coordinator)
        #expect(parentState == stored, "the parent held \(parentState), saved \(stored)")
        return (error, mine, stored, id)
    }

    @Test(
        "a root context's save under each policy, for each kind of property, changed on one side or both",
        arguments: policies.map { $0.description }, MergeWorld.Property.allCases)
    func rootSave(policyName: String, property: MergeWorld.Property) async throws {
        try await check(policyName: policyName, property: property, level: "root")
    }

    @Test(
        "a child context's save into its parent under each policy, for each kind of property, changed on one side or both",
        arguments: policies.map { $0.description }, MergeWorld.Property.allCases)
    func childSave(policyName: String, property: MergeWorld.Property) async throws {
        try await check(policyName: policyName, property: property, level: "child")
    }

    func check(policyName: String, property: MergeWorld.Property, level: String) async throws {
        let policy = try #require(Self.policies.first { $0.description == policyName })
        for sides in MergeWorld.Sides.allCases {
            let (error, mine, stored, id) = level == "root"
                ? try await Self.run(policy, property, sides) : try await Self.runChild(policy, property, sides)
            guard let expected = MergeWorld.expected(policy, property, sides, child: level == "child") else {
                // .error: the row changed since it was read, so the save fails, listing the conflict.
                let error = try #require(error, "\(sides): the save went through under .error")
                #expect(error.code == .mergeConflicts)
                // Every conflicting row is listed (for a relationship, the other ends too).
                let conflict = try #require(error.conflicts.first { $0.objectID == id })
                // A child's conflict is with the parent's unsaved state, at the version it read.
                #expect(conflict.oldVersion == 1 && conflict.newVersion == (level == "root" ? 2 : 1))
                let changedHere: Set<String> = [property == .attribute ? "title" : property == .toOne ? "folder" : "tags"]
                #expect(conflict.changedKeysInMemory == changedHere, "\(sides)")
                #expect(conflict.changedKeysInStore == (sides == .bothSides ? changedHere : ["priority"]), "\(sides)")
                #expect(conflict.cachedSnapshot?.attributeValue("priority") == .integer(1))
                #expect(conflict.persistedSnapshot?.version == (level == "root" ? 2 : 1) && conflict.objectSnapshot != nil)
                #expect(stored.title == (sides == .bothSides && property == .attribute ? "theirs" : "a"))
                continue
            }
            #expect(error == nil, "\(sides): \(String(describing: error))")
            #expect(stored == expected, "\(sides): stored \(stored), expected \(expected)")
            let conflicted = level == "root" || (sides == .bothSides && !(policyName == "error" && property == .toMany))
            if conflicted {
                // A resolved save: the saving context holds exactly what was stored.
                #expect(mine == stored, "\(sides): the saving context holds \(mine), the store \(stored)")
            } else {
                // No conflict: the child's change went in; its other values stay as it read them.
                #expect(mine.title == stored.title && mine.folder == stored.folder, "\(sides): \(mine) vs \(stored)")
                #expect(Set(mine.tags).isSubset(of: Set(stored.tags)), "\(sides): \(mine) vs \(stored)")
            }
        }
    }
}
