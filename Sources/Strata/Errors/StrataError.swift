import Foundation
import StrataLMDB

/// An error thrown by Strata: bad input, a validation failure, a store that cannot be
/// used with the current model, or a storage failure.
///
/// Every case carries what you need to act on it: the entity and key involved, every
/// validation failure at once, both model version hashes. Match cases in `catch`:
///
/// ```swift
/// do {
///     try note.setValue("high", forKey: "priority")
/// } catch StrataError.typeMismatch(let key, let entity, let expected, let actual) {
///     print("\(entity).\(key) takes a \(expected), not a \(actual)")
/// }
/// ```
public enum StrataError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The model has no entity of that name.
    case unknownEntity(String)
    /// The entity has no property of that name.
    case unknownKey(key: String, entity: String)
    /// A value of the wrong type was given for a property: Strata never coerces silently.
    case typeMismatch(key: String, entity: String, expected: String, actual: String)
    /// Objects failed validation; every failure found is listed.
    case validation([ValidationFailure])
    /// The store was written with a different model; nothing was changed.
    case modelMismatch(store: String, storeHash: String, modelHash: String)
    /// The store's data does not belong to Strata, or was written by a newer format.
    case incompatibleStore(store: String, reason: String)
    /// The store's files are damaged: `data.mdb` is truncated, or its meta pages or the
    /// pages they lead to are not what LMDB writes (or it is not an LMDB file at all).
    /// Thrown when the store is opened; nothing was changed. Restore the store from a copy.
    ///
    /// An empty (0-byte) `data.mdb` is not damage: LMDB initialises it as a new
    /// environment, and so Strata opens it as a new, empty store. A crash between creating
    /// the file and writing its first meta pages leaves one, and nothing can have been
    /// committed to it.
    ///
    /// Damage inside the file is met later: as ``corruptRecord(entity:primaryKey:reason:)``
    /// when a row does not decode, ``storage(_:)`` with `LMDBError.corrupted` or
    /// `.pageNotFound` when LMDB finds a page of the wrong kind, as a problem of
    /// ``PersistentStoreCoordinator/checkIntegrity()``, or not at all: LMDB has no page
    /// checksums. LMDB also trusts a page's structure, so a damaged one can crash the
    /// process when a read meets it; ``PersistentStore/Options/verifiesPagesAtOpen``
    /// checks every page at open and throws this error instead.
    case corruptStore(store: String, reason: String)
    /// The object's row no longer exists (it was deleted elsewhere) so its fault cannot
    /// be fulfilled.
    case inaccessibleFault(ManagedObjectID)
    /// A stored record could not be decoded; the store's bytes are left as they are.
    case corruptRecord(entity: String, primaryKey: UInt64, reason: String)
    /// The object cannot take part in this operation in its current state.
    case invalidObjectState(ManagedObjectID, reason: String)
    /// The underlying LMDB store failed (full map, full disk, I/O error, ...).
    case storage(LMDBError)
    /// The model has no configuration of this name.
    case unknownConfiguration(String)
    /// No store of the coordinator can hold objects of the entity (none added, or none
    /// whose configuration includes it), or the object's store was removed.
    case noStore(entity: String)
    /// The object exists neither in the context nor in its store.
    case objectNotFound(ManagedObjectID)
    /// A save found objects whose stored rows changed (or vanished) since the context
    /// read them: every conflict, nothing written.
    case mergeConflicts([MergeConflict])
    /// The operation needs a coordinator, and the context has none.
    case noCoordinator
    /// A save would write to a store opened read-only.
    case readOnlyStore(String)
    /// The context cannot be configured that way (a second coordinator, say).
    case invalidContextConfiguration(String)
    /// A synchronous wait between contexts would never end (each side waits for the
    /// other, and neither can run the other's work safely): the waiting call fails
    /// instead of hanging. The string names the contexts involved.
    case wouldDeadlock(String)
    /// The query generation a token names cannot be pinned: no context holds its
    /// snapshot any more, and its stores have committed since (or one is not added), so
    /// that state is gone. Pin ``QueryGenerationToken/current`` instead.
    case queryGenerationUnavailable(QueryGenerationToken)
    /// The context's query generation is older than the coordinator's
    /// ``PersistentStoreCoordinator/queryGenerationAgePolicy`` allows
    /// (``QueryGenerationAgePolicy/fail(after:)``): the read did not happen. Advance the
    /// context (``ManagedObjectContext/setQueryGenerationFrom(_:)``, a save, a merge or a
    /// reset) to read again.
    case queryGenerationExpired(QueryGenerationToken, age: Duration, maximumAge: Duration)

    /// A sentence describing the error.
    public var description: String {
        switch self {
        case .unknownEntity(let name):
            "the model has no entity named '\(name)'"
        case .unknownKey(let key, let entity):
            "entity '\(entity)' has no property named '\(key)'"
        case .typeMismatch(let key, let entity, let expected, let actual):
            "\(entity).\(key) takes a value of type \(expected), not \(actual)"
        case .validation(let failures):
            "validation failed (\(failures.count) problem(s)):\n"
                + failures.map { "- \($0)" }.joined(separator: "\n")
        case .modelMismatch(let store, let storeHash, let modelHash):
            "the store at \(store) was written with model version \(storeHash), but the current model's version is \(modelHash); the store was not changed (migration is not supported yet)"
        case .incompatibleStore(let store, let reason):
            "the store at \(store) cannot be opened: \(reason)"
        case .corruptStore(let store, let reason):
            "the store at \(store) is damaged and cannot be opened (restore it from a copy): \(reason)"
        case .inaccessibleFault(let id):
            "the object \(id) no longer exists in its store, so its fault cannot be fulfilled"
        case .corruptRecord(let entity, let primaryKey, let reason):
            "the stored record of \(entity) p\(primaryKey) is corrupt: \(reason)"
        case .invalidObjectState(let id, let reason):
            "\(id): \(reason)"
        case .storage(let error):
            "storage error: \(error)"
        case .unknownConfiguration(let name):
            "the model has no configuration named '\(name)'"
        case .noStore(let entity):
            "no store of the coordinator can hold objects of entity '\(entity)'"
        case .objectNotFound(let id):
            "the object \(id) exists neither in the context nor in its store"
        case .mergeConflicts(let conflicts):
            "the save conflicts with changes saved elsewhere (\(conflicts.count) object(s)); nothing was written:\n"
                + conflicts.map { "- \($0)" }.joined(separator: "\n")
        case .noCoordinator:
            "the context has no persistent store coordinator"
        case .readOnlyStore(let store):
            "the store \(store) is read-only"
        case .invalidContextConfiguration(let reason):
            "the context cannot be configured that way: \(reason)"
        case .wouldDeadlock(let cycle):
            "waiting would deadlock: \(cycle)"
        case .queryGenerationUnavailable(let token):
            "the query generation \(token) is no longer available: no context is pinned to it and its store has committed since; pin .current instead"
        case .queryGenerationExpired(let token, let age, let maximumAge):
            "the context's query generation \(token) is \(age) old, older than the maximum age of \(maximumAge) (queryGenerationAgePolicy); advance it with setQueryGenerationFrom, save, merge or reset"
        }
    }
}

/// One reason an object failed validation.
public struct ValidationFailure: Sendable, Hashable, CustomStringConvertible {
    /// What rule was broken.
    public enum Reason: Sendable, Hashable {
        /// A required attribute or to-one relationship is nil.
        case missingValue
        /// A number is below the attribute's minimum.
        case belowMinimum(Double)
        /// A number is above the attribute's maximum.
        case aboveMaximum(Double)
        /// A string is shorter than the attribute's minimum length.
        case tooShort(minimumLength: Int)
        /// A string is longer than the attribute's maximum length.
        case tooLong(maximumLength: Int)
        /// A string does not match the attribute's regular expression.
        case patternMismatch(String)
        /// A date is before the attribute's earliest date.
        case tooEarly(Date)
        /// A date is after the attribute's latest date.
        case tooLate(Date)
        /// A value does not fit the attribute's type (e.g. an integer out of range).
        case wrongType(expected: String)
        /// A to-many relationship holds fewer objects than its minimum count.
        case tooFewObjects(minimum: Int, actual: Int)
        /// A to-many relationship holds more objects than its maximum count.
        case tooManyObjects(maximum: Int, actual: Int)
        /// The object cannot be deleted: a relationship with the deny rule is not empty.
        case deleteDenied(count: Int)
        /// A failure reported by your own `validateValue(_:forKey:)` or `validateFor…` override.
        case custom(String)
    }

    /// The object that failed.
    public let objectID: ManagedObjectID
    /// The property that failed, or nil for a failure of the whole object.
    public let key: String?
    /// Why.
    public let reason: Reason

    /// A failure.
    public init(objectID: ManagedObjectID, key: String?, reason: Reason) {
        self.objectID = objectID
        self.key = key
        self.reason = reason
    }

    /// `Note.title: is required`.
    public var description: String {
        let subject = key.map { "\(objectID.entityName).\($0)" } ?? objectID.entityName
        let text: String = switch reason {
        case .missingValue: "is required"
        case .belowMinimum(let minimum): "is below the minimum \(minimum)"
        case .aboveMaximum(let maximum): "is above the maximum \(maximum)"
        case .tooShort(let length): "is shorter than \(length) characters"
        case .tooLong(let length): "is longer than \(length) characters"
        case .patternMismatch(let pattern): "does not match /\(pattern)/"
        case .tooEarly(let date): "is earlier than \(date)"
        case .tooLate(let date): "is later than \(date)"
        case .wrongType(let expected): "is not a valid \(expected)"
        case .tooFewObjects(let minimum, let actual): "holds \(actual) object(s), fewer than the minimum \(minimum)"
        case .tooManyObjects(let maximum, let actual): "holds \(actual) object(s), more than the maximum \(maximum)"
        case .deleteDenied(let count): "cannot be deleted: it still refers to \(count) object(s) (delete rule deny)"
        case .custom(let message): message
        }
        return "\(subject) \(text) (\(objectID))"
    }
}

/// An object a save could not write because its stored row changed since the context
/// read it (optimistic locking: every row carries a version).
public struct MergeConflict: Sendable, Hashable, CustomStringConvertible {
    /// The object.
    public let objectID: ManagedObjectID
    /// The row version the context's changes were based on.
    public let oldVersion: UInt64
    /// The row version now stored; nil when the row was deleted.
    public let newVersion: UInt64?

    /// A conflict on `objectID`.
    public init(objectID: ManagedObjectID, oldVersion: UInt64, newVersion: UInt64?) {
        self.objectID = objectID
        self.oldVersion = oldVersion
        self.newVersion = newVersion
    }

    /// `x-strata://…/Note/p3: based on version 2, stored version 3`.
    public var description: String {
        "\(objectID): based on version \(oldVersion), " + (newVersion.map { "stored version \($0)" } ?? "since deleted")
    }
}
