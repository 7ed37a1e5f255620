/// One object whose stored row changed since the snapshot a save was based on: the
/// optimistic-locking failure the coordinator turns into a merge conflict
/// (DESIGN.md: "every row carries a version number … merge-policy conflicts compare it").
struct StoreConflict: Sendable, Hashable, CustomStringConvertible {
    /// The object.
    let objectID: ManagedObjectID
    /// The row version the save was based on.
    let expectedVersion: UInt64
    /// The row version in the store, or nil when the row no longer exists (deleted elsewhere).
    let storedVersion: UInt64?
    /// The stored state (to-many relationships included), when the write read it for the
    /// conflict record. Not part of the conflict's identity (equality and hashing).
    var persisted: ObjectSnapshot? = nil

    /// Conflicts are equal when they name the same object and versions.
    static func == (lhs: StoreConflict, rhs: StoreConflict) -> Bool {
        lhs.objectID == rhs.objectID && lhs.expectedVersion == rhs.expectedVersion && lhs.storedVersion == rhs.storedVersion
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(objectID)
        hasher.combine(expectedVersion)
        hasher.combine(storedVersion)
    }

    /// `x-strata://…/Note/p3: expected version 2, stored 3`.
    var description: String {
        "\(objectID): expected version \(expectedVersion), " + (storedVersion.map { "stored \($0)" } ?? "the row was deleted")
    }
}

/// An error of a store write that is not a ``StrataError``: optimistic locking failed.
///
/// Thrown out of the ``StoreFile/write(_:)`` body, it aborts the transaction, so nothing
/// of the save is written.
enum StoreWriteError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Rows changed or vanished since the snapshots were read: every conflict found
    /// (all of a batch with ``StoreWriter/apply(_:)``).
    case conflict([StoreConflict])
    /// The save breaks uniqueness constraints: every conflict.
    case constraintConflict([ConstraintConflict])

    /// One line per conflict.
    var description: String {
        switch self {
        case .conflict(let conflicts):
            "the store changed under \(conflicts.count) object(s):\n" + conflicts.map { "- \($0)" }.joined(separator: "\n")
        case .constraintConflict(let conflicts):
            "the save breaks \(conflicts.count) uniqueness constraint(s):\n" + conflicts.map { "- \($0)" }.joined(separator: "\n")
        }
    }
}

/// The changes of one save, applied together by ``StoreWriter/apply(_:)``.
struct StoreChanges: Sendable, Hashable {
    /// One object to delete, with the row version the delete was based on (nil: delete
    /// whatever is stored, without a conflict check).
    struct Deletion: Sendable, Hashable {
        /// The object.
        var objectID: ManagedObjectID
        /// The version the delete expects; nil for no check.
        var expectedVersion: UInt64?
    }

    /// New objects, with permanent IDs.
    var inserted: [ObjectSnapshot] = []
    /// Changed objects, each with the version it was based on.
    var updated: [ObjectSnapshot] = []
    /// Deleted objects.
    var deleted: [Deletion] = []
    /// Objects not written whose stored versions must still match (optimistic locking
    /// of ``ManagedObjectContext/detectConflicts(for:)``).
    var checked: [Deletion] = []
}
