import Foundation
import Strata

// Typed classes for the uniqueness-constraint tests: an account's email is unique, and so
// is its (region, handle) pair; accounts belong to teams. Members (abstract) share one
// constraint across their sub-entities Staff and Guest.

final class UserAccount: ManagedObject {
    override class var uniquenessConstraints: [[String]] { [["email"], ["region", "handle"]] }
    @Attribute var email: String?
    @Attribute var region: String = ""
    @Attribute var handle: String?
    @Attribute var name: String = ""
    @Attribute var visits: Int64 = 0
    @Relationship(inverse: "accounts") var team: Team?
}

final class Team: ManagedObject {
    @Attribute var name: String = ""
    @Relationship(inverse: "team") var accounts: Set<UserAccount>
}

class Member: ManagedObject {
    override class var isAbstractEntity: Bool { true }
    override class var uniquenessConstraints: [[String]] { [["badge"]] }
    @Attribute var badge: Int64 = 0
    @Attribute var label: String = ""
}

final class Staff: Member {}

final class Guest: Member {}

enum AccountsModel {
    static let model: ManagedObjectModel = {
        do {
            return try ManagedObjectModel(types: [UserAccount.self, Team.self, Staff.self, Guest.self])
        } catch {
            preconditionFailure("the test model is invalid: \(error)")
        }
    }()

    /// A coordinator over a fresh in-memory store of the model.
    static func coordinator() async throws -> PersistentStoreCoordinator {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        try await coordinator.addPersistentStore(type: .inMemory, options: CoordinatorStoreTests.options)
        return coordinator
    }
}
