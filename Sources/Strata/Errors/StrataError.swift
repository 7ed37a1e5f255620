import Foundation
import StrataLMDB

/// An error thrown by Strata: bad input, a validation failure, a store that cannot be
/// used with the current model, or a storage failure.
///
/// Every error carries what you need to act on it: the entity and key involved, every
/// validation failure at once, both model version hashes. `StrataError` is a struct, not
/// an enum, so that a later version can add errors without breaking your `switch`es: each
/// error has a static member (``noCoordinator``, ``unknownEntity(_:)``, ...) and a
/// ``code`` naming its kind, and what it carries is read through properties
/// (``key``, ``entityName``, ``validationFailures``, ...), each nil (or empty) for the
/// kinds that do not carry it.
///
/// Match an error exactly, or any error of a kind by its ``Code``, and read what it
/// carries from the error:
///
/// ```swift
/// do {
///     try note.setValue("high", forKey: "priority")
/// } catch let error as StrataError where error.code == .typeMismatch {
///     print("\(error.entityName!).\(error.key!) takes a \(error.expectedType!), not a \(error.actualType!)")
/// }
///
/// do {
///     try context.save()
/// } catch StrataError.noCoordinator {
///     // exactly this error
/// } catch StrataError.Code.mergeConflicts {
///     // any merge conflict
/// } catch let error as StrataError {
///     switch error.code {
///     case .validation: show(error.validationFailures)
///     case .storage: log(error.storageError!)
///     default: throw error  // a `default` is needed: later versions may add kinds
///     }
/// }
/// ```
///
/// Two errors are equal when they are of the same kind and carry equal values.
public struct StrataError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind of error and what it carries.
    private enum Base: Hashable, Sendable {
        case unknownEntity(String)
        case unknownKey(key: String, entity: String)
        case typeMismatch(key: String, entity: String, expected: String, actual: String)
        case validation([ValidationFailure])
        case modelMismatch(store: String, storeHash: String, modelHash: String, changes: [String])
        case incompatibleStore(store: String, reason: String)
        case corruptStore(store: String, reason: String)
        case inaccessibleFault(ManagedObjectID)
        case corruptRecord(entity: String, primaryKey: UInt64, reason: String)
        case invalidObjectState(ManagedObjectID, reason: String)
        case storage(LMDBError)
        case unknownConfiguration(String)
        case noStore(entity: String)
        case objectNotFound(ManagedObjectID)
        case mergeConflicts([MergeConflict])
        case constraintConflicts([ConstraintConflict])
        case noCoordinator
        case coordinatorClosed
        case readOnlyStore(String)
        case invalidContextConfiguration(String)
        case wouldDeadlock(String)
        case queryGenerationUnavailable(QueryGenerationToken)
        case queryGenerationExpired(QueryGenerationToken, age: Duration, maximumAge: Duration)
        case migrationFailed(store: String, reason: String, conflicts: [ConstraintConflict])
        case database(store: String, failure: DatabaseFailure)
        case unsupportedByStore(store: String, feature: String)
        case invalidFetchRequest(String)
    }

    private let base: Base

    private init(_ base: Base) { self.base = base }

    // MARK: - Errors

    /// The model has no entity of that name.
    public static func unknownEntity(_ name: String) -> StrataError { StrataError(.unknownEntity(name)) }

    /// The entity has no property of that name.
    public static func unknownKey(key: String, entity: String) -> StrataError {
        StrataError(.unknownKey(key: key, entity: entity))
    }

    /// A value of the wrong type was given for a property: Strata never coerces silently.
    public static func typeMismatch(key: String, entity: String, expected: String, actual: String) -> StrataError {
        StrataError(.typeMismatch(key: key, entity: entity, expected: expected, actual: actual))
    }

    /// Objects failed validation; every failure found is listed.
    public static func validation(_ failures: [ValidationFailure]) -> StrataError { StrataError(.validation(failures)) }

    /// The store was written with a different model; nothing was changed. `changes` lists
    /// what differs (see ``modelChanges``).
    public static func modelMismatch(store: String, storeHash: String, modelHash: String, changes: [String] = []) -> StrataError {
        StrataError(.modelMismatch(store: store, storeHash: storeHash, modelHash: modelHash, changes: changes))
    }

    /// The store's data does not belong to Strata, or was written by a newer format.
    public static func incompatibleStore(store: String, reason: String) -> StrataError {
        StrataError(.incompatibleStore(store: store, reason: reason))
    }

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
    public static func corruptStore(store: String, reason: String) -> StrataError {
        StrataError(.corruptStore(store: store, reason: reason))
    }

    /// The object's row no longer exists (it was deleted elsewhere) so its fault cannot
    /// be fulfilled.
    public static func inaccessibleFault(_ objectID: ManagedObjectID) -> StrataError {
        StrataError(.inaccessibleFault(objectID))
    }

    /// A stored record could not be decoded; the store's bytes are left as they are.
    public static func corruptRecord(entity: String, primaryKey: UInt64, reason: String) -> StrataError {
        StrataError(.corruptRecord(entity: entity, primaryKey: primaryKey, reason: reason))
    }

    /// The object cannot take part in this operation in its current state.
    public static func invalidObjectState(_ objectID: ManagedObjectID, reason: String) -> StrataError {
        StrataError(.invalidObjectState(objectID, reason: reason))
    }

    /// The underlying LMDB store failed (full map, full disk, I/O error, ...).
    ///
    /// `LMDBError.environmentClosed` — a store closed by its coordinator's
    /// ``PersistentStoreCoordinator/close(timeout:)`` — becomes ``coordinatorClosed``: a
    /// read after a shutdown fails with the same error as a save.
    public static func storage(_ error: LMDBError) -> StrataError {
        error.code == LMDBError.environmentClosed.code ? .coordinatorClosed : StrataError(.storage(error))
    }

    /// The model has no configuration of this name.
    public static func unknownConfiguration(_ name: String) -> StrataError { StrataError(.unknownConfiguration(name)) }

    /// No store of the coordinator can hold objects of the entity (none added, or none
    /// whose configuration includes it), or the object's store was removed.
    public static func noStore(entity: String) -> StrataError { StrataError(.noStore(entity: entity)) }

    /// The object exists neither in the context nor in its store.
    public static func objectNotFound(_ objectID: ManagedObjectID) -> StrataError { StrataError(.objectNotFound(objectID)) }

    /// A save found objects whose stored rows changed (or vanished) since the context
    /// read them: every conflict, nothing written.
    public static func mergeConflicts(_ conflicts: [MergeConflict]) -> StrataError {
        StrataError(.mergeConflicts(conflicts))
    }

    /// A save would give two objects the values of one uniqueness constraint
    /// (``EntityDescription/uniquenessConstraints``): every conflict, nothing written.
    public static func constraintConflicts(_ conflicts: [ConstraintConflict]) -> StrataError {
        StrataError(.constraintConflicts(conflicts))
    }

    /// The operation needs a coordinator, and the context has none.
    public static let noCoordinator = StrataError(.noCoordinator)

    /// The coordinator was closed (``PersistentStoreCoordinator/close(timeout:)``, a
    /// graceful shutdown): it takes no new save, batch request or store, and its stores
    /// can no longer be read. Saves that reached it before it closed were written.
    public static let coordinatorClosed = StrataError(.coordinatorClosed)

    /// A save would write to a store opened read-only; `store` describes the store.
    public static func readOnlyStore(_ store: String) -> StrataError { StrataError(.readOnlyStore(store)) }

    /// The store could not be migrated to the model it was opened with, and was left
    /// exactly as it was: the migration plan has a gap or does not know the store's
    /// version, a change needs a custom stage, a stored value does not convert, stored
    /// objects break a new uniqueness constraint (`conflicts` lists them), a custom stage
    /// threw, or the disk filled up. `reason` says which, naming the stages, entities and
    /// rows involved (see <doc:MigratingYourData>).
    public static func migrationFailed(store: String, reason: String, conflicts: [ConstraintConflict] = []) -> StrataError {
        StrataError(.migrationFailed(store: store, reason: reason, conflicts: conflicts))
    }

    /// A database server store (``PersistentStore/StoreType/isServerStore``, such as
    /// PostgreSQL) failed: the server could not be reached, the connection was lost, a
    /// statement timed out, the schema changed underneath, or the server refused a
    /// statement. `failure` says which (``DatabaseFailure/Kind``), with the server's
    /// SQLSTATE and message. A save that fails this way wrote nothing (its transaction
    /// was rolled back, or never committed) and its context keeps its changes.
    public static func database(store: String, failure: DatabaseFailure) -> StrataError {
        StrataError(.database(store: store, failure: failure))
    }

    /// The store's kind cannot do what was asked (a batch request or persistent history on
    /// a store type that has not got them, say); nothing was changed. `feature` names it.
    public static func unsupportedByStore(store: String, feature: String) -> StrataError {
        StrataError(.unsupportedByStore(store: store, feature: feature))
    }

    /// The fetch request's parts do not fit together (an aggregate in a request whose
    /// results are not dictionaries, a fetched key missing from `propertiesToGroupBy`, a
    /// sum of a string); `reason` says which. Nothing was read.
    public static func invalidFetchRequest(_ reason: String) -> StrataError {
        StrataError(.invalidFetchRequest(reason))
    }

    /// The context cannot be configured that way (a second coordinator, say); `reason` says why.
    public static func invalidContextConfiguration(_ reason: String) -> StrataError {
        StrataError(.invalidContextConfiguration(reason))
    }

    /// A synchronous wait between contexts would never end (each side waits for the
    /// other, and neither can run the other's work safely): the waiting call fails
    /// instead of hanging. The string names the contexts involved.
    public static func wouldDeadlock(_ cycle: String) -> StrataError { StrataError(.wouldDeadlock(cycle)) }

    /// The query generation a token names cannot be pinned: no context holds its
    /// snapshot any more, and its stores have committed since (or one is not added), so
    /// that state is gone. Pin ``QueryGenerationToken/current`` instead.
    public static func queryGenerationUnavailable(_ token: QueryGenerationToken) -> StrataError {
        StrataError(.queryGenerationUnavailable(token))
    }

    /// The context's query generation is older than the coordinator's
    /// ``PersistentStoreCoordinator/queryGenerationAgePolicy`` allows
    /// (``QueryGenerationAgePolicy/fail(after:)``): the read did not happen. Advance the
    /// context (``ManagedObjectContext/setQueryGenerationFrom(_:)``, a save, a merge or a
    /// reset) to read again.
    public static func queryGenerationExpired(_ token: QueryGenerationToken, age: Duration, maximumAge: Duration) -> StrataError {
        StrataError(.queryGenerationExpired(token, age: age, maximumAge: maximumAge))
    }

    // MARK: - Kinds

    /// The kind of a ``StrataError``, without what it carries: one static member per
    /// error (``unknownEntity``, ``storage``, ``mergeConflicts``, ...).
    ///
    /// Compare it (`error.code == .storage`), `switch` over it (with a `default`: later
    /// versions may add kinds), or match any error by it:
    /// `catch StrataError.Code.mergeConflicts`.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable {
            case unknownEntity, unknownKey, typeMismatch, validation, modelMismatch, incompatibleStore
            case corruptStore, inaccessibleFault, corruptRecord, invalidObjectState, storage
            case unknownConfiguration, noStore, objectNotFound, mergeConflicts, constraintConflicts, noCoordinator
            case coordinatorClosed
            case readOnlyStore, invalidContextConfiguration, wouldDeadlock, migrationFailed
            case queryGenerationUnavailable, queryGenerationExpired
            case database, unsupportedByStore, invalidFetchRequest
        }

        private let base: Base

        private init(_ base: Base) { self.base = base }

        /// ``StrataError/unknownEntity(_:)``.
        public static let unknownEntity = Code(.unknownEntity)
        /// ``StrataError/unknownKey(key:entity:)``.
        public static let unknownKey = Code(.unknownKey)
        /// ``StrataError/typeMismatch(key:entity:expected:actual:)``.
        public static let typeMismatch = Code(.typeMismatch)
        /// ``StrataError/validation(_:)``.
        public static let validation = Code(.validation)
        /// ``StrataError/modelMismatch(store:storeHash:modelHash:changes:)``.
        public static let modelMismatch = Code(.modelMismatch)
        /// ``StrataError/incompatibleStore(store:reason:)``.
        public static let incompatibleStore = Code(.incompatibleStore)
        /// ``StrataError/corruptStore(store:reason:)``.
        public static let corruptStore = Code(.corruptStore)
        /// ``StrataError/inaccessibleFault(_:)``.
        public static let inaccessibleFault = Code(.inaccessibleFault)
        /// ``StrataError/corruptRecord(entity:primaryKey:reason:)``.
        public static let corruptRecord = Code(.corruptRecord)
        /// ``StrataError/invalidObjectState(_:reason:)``.
        public static let invalidObjectState = Code(.invalidObjectState)
        /// ``StrataError/storage(_:)``.
        public static let storage = Code(.storage)
        /// ``StrataError/unknownConfiguration(_:)``.
        public static let unknownConfiguration = Code(.unknownConfiguration)
        /// ``StrataError/noStore(entity:)``.
        public static let noStore = Code(.noStore)
        /// ``StrataError/objectNotFound(_:)``.
        public static let objectNotFound = Code(.objectNotFound)
        /// ``StrataError/mergeConflicts(_:)``.
        public static let mergeConflicts = Code(.mergeConflicts)
        /// ``StrataError/constraintConflicts(_:)``.
        public static let constraintConflicts = Code(.constraintConflicts)
        /// ``StrataError/noCoordinator``.
        public static let noCoordinator = Code(.noCoordinator)
        /// ``StrataError/coordinatorClosed``.
        public static let coordinatorClosed = Code(.coordinatorClosed)
        /// ``StrataError/readOnlyStore(_:)``.
        public static let readOnlyStore = Code(.readOnlyStore)
        /// ``StrataError/migrationFailed(store:reason:conflicts:)``.
        public static let migrationFailed = Code(.migrationFailed)
        /// ``StrataError/invalidContextConfiguration(_:)``.
        public static let invalidContextConfiguration = Code(.invalidContextConfiguration)
        /// ``StrataError/wouldDeadlock(_:)``.
        public static let wouldDeadlock = Code(.wouldDeadlock)
        /// ``StrataError/queryGenerationUnavailable(_:)``.
        public static let queryGenerationUnavailable = Code(.queryGenerationUnavailable)
        /// ``StrataError/queryGenerationExpired(_:age:maximumAge:)``.
        public static let queryGenerationExpired = Code(.queryGenerationExpired)
        /// ``StrataError/database(store:failure:)``.
        public static let database = Code(.database)
        /// ``StrataError/unsupportedByStore(store:feature:)``.
        public static let unsupportedByStore = Code(.unsupportedByStore)
        /// ``StrataError/invalidFetchRequest(_:)``.
        public static let invalidFetchRequest = Code(.invalidFetchRequest)

        /// The kind's name, as its static member is spelled: `mergeConflicts`.
        public var description: String { base.rawValue }

        /// Lets `catch StrataError.Code.storage` and `case StrataError.Code.storage` match
        /// any error value: true when `value` is a ``StrataError`` of this kind.
        public static func ~= (pattern: Code, value: any Error) -> Bool {
            (value as? StrataError)?.code == pattern
        }
    }

    /// The error's kind.
    public var code: Code {
        switch base {
        case .unknownEntity: .unknownEntity
        case .unknownKey: .unknownKey
        case .typeMismatch: .typeMismatch
        case .validation: .validation
        case .modelMismatch: .modelMismatch
        case .incompatibleStore: .incompatibleStore
        case .corruptStore: .corruptStore
        case .inaccessibleFault: .inaccessibleFault
        case .corruptRecord: .corruptRecord
        case .invalidObjectState: .invalidObjectState
        case .storage: .storage
        case .unknownConfiguration: .unknownConfiguration
        case .noStore: .noStore
        case .objectNotFound: .objectNotFound
        case .mergeConflicts: .mergeConflicts
        case .constraintConflicts: .constraintConflicts
        case .noCoordinator: .noCoordinator
        case .coordinatorClosed: .coordinatorClosed
        case .readOnlyStore: .readOnlyStore
        case .migrationFailed: .migrationFailed
        case .invalidContextConfiguration: .invalidContextConfiguration
        case .wouldDeadlock: .wouldDeadlock
        case .queryGenerationUnavailable: .queryGenerationUnavailable
        case .queryGenerationExpired: .queryGenerationExpired
        case .database: .database
        case .unsupportedByStore: .unsupportedByStore
        case .invalidFetchRequest: .invalidFetchRequest
        }
    }

    /// Lets `catch StrataError.noCoordinator` and `case StrataError.unknownEntity("Note")`
    /// match any error value: true when `value` is a ``StrataError`` equal to `pattern`.
    public static func ~= (pattern: StrataError, value: any Error) -> Bool {
        (value as? StrataError) == pattern
    }

    // MARK: - What the error carries

    /// The entity involved: the name the model lacks (``Code/unknownEntity``), or the
    /// entity of ``Code/unknownKey``, ``Code/typeMismatch``, ``Code/noStore`` and
    /// ``Code/corruptRecord``; nil for other kinds (those about an object carry its
    /// ``objectID``, whose `entityName` it is).
    public var entityName: String? {
        switch base {
        case .unknownEntity(let name): name
        case .unknownKey(_, let entity), .typeMismatch(_, let entity, _, _), .noStore(let entity),
             .corruptRecord(let entity, _, _): entity
        default: nil
        }
    }

    /// The property key of ``Code/unknownKey`` and ``Code/typeMismatch``; nil for other kinds.
    public var key: String? {
        switch base {
        case .unknownKey(let key, _), .typeMismatch(let key, _, _, _): key
        default: nil
        }
    }

    /// The type the property takes, for ``Code/typeMismatch``; nil for other kinds.
    public var expectedType: String? {
        if case .typeMismatch(_, _, let expected, _) = base { expected } else { nil }
    }

    /// The type of the value given, for ``Code/typeMismatch``; nil for other kinds.
    public var actualType: String? {
        if case .typeMismatch(_, _, _, let actual) = base { actual } else { nil }
    }

    /// Every failure found, for ``Code/validation``; empty for other kinds.
    public var validationFailures: [ValidationFailure] {
        if case .validation(let failures) = base { failures } else { [] }
    }

    /// Every conflicting object, for ``Code/mergeConflicts``; empty for other kinds.
    public var conflicts: [MergeConflict] {
        if case .mergeConflicts(let conflicts) = base { conflicts } else { [] }
    }

    /// Every uniqueness conflict, for ``Code/constraintConflicts`` and for a
    /// ``Code/migrationFailed`` caused by stored objects that break a new constraint;
    /// empty for other kinds.
    public var constraintConflicts: [ConstraintConflict] {
        switch base {
        case .constraintConflicts(let conflicts), .migrationFailed(_, _, let conflicts): conflicts
        default: []
        }
    }

    /// The database server's failure, for ``Code/database``; nil for other kinds.
    public var databaseFailure: DatabaseFailure? {
        if case .database(_, let failure) = base { failure } else { nil }
    }

    /// What the store cannot do, for ``Code/unsupportedByStore``; nil for other kinds.
    public var unsupportedFeature: String? {
        if case .unsupportedByStore(_, let feature) = base { feature } else { nil }
    }

    /// The LMDB failure, for ``Code/storage``; nil for other kinds.
    public var storageError: LMDBError? {
        if case .storage(let error) = base { error } else { nil }
    }

    /// The object involved, for ``Code/inaccessibleFault``, ``Code/invalidObjectState`` and
    /// ``Code/objectNotFound``; nil for other kinds.
    public var objectID: ManagedObjectID? {
        switch base {
        case .inaccessibleFault(let id), .invalidObjectState(let id, _), .objectNotFound(let id): id
        default: nil
        }
    }

    /// The store involved: its path for ``Code/modelMismatch``, ``Code/incompatibleStore``,
    /// ``Code/corruptStore`` and ``Code/migrationFailed``, its description for ``Code/readOnlyStore``,
    /// ``Code/database`` and ``Code/unsupportedByStore``; nil for other kinds.
    public var storeName: String? {
        switch base {
        case .modelMismatch(let store, _, _, _), .incompatibleStore(let store, _), .corruptStore(let store, _),
             .readOnlyStore(let store), .migrationFailed(let store, _, _), .database(let store, _),
             .unsupportedByStore(let store, _): store
        default: nil
        }
    }

    /// The explanation the error carries: why the store cannot be opened
    /// (``Code/incompatibleStore``, ``Code/corruptStore``), the record not decoded
    /// (``Code/corruptRecord``), the operation refused (``Code/invalidObjectState``), the
    /// configuration refused (``Code/invalidContextConfiguration``), the contexts whose
    /// waits would deadlock (``Code/wouldDeadlock``), or why a migration failed
    /// (``Code/migrationFailed``); nil for other kinds.
    public var reason: String? {
        switch base {
        case .incompatibleStore(_, let reason), .corruptStore(_, let reason), .corruptRecord(_, _, let reason),
             .invalidObjectState(_, let reason), .invalidContextConfiguration(let reason), .wouldDeadlock(let reason),
             .migrationFailed(_, let reason, _):
            reason
        default: nil
        }
    }

    /// The model version hash the store was written with, for ``Code/modelMismatch``; nil
    /// for other kinds.
    public var storeHash: String? {
        if case .modelMismatch(_, let storeHash, _, _) = base { storeHash } else { nil }
    }

    /// For ``Code/modelMismatch`` of a store that records its model: what differs between
    /// that model and the current one, one line each, the changes a lightweight migration
    /// makes first (`add attribute Note.isbn`), then each change that needs a custom stage
    /// (`needs a custom stage: …`). Empty for other kinds, and for a store written before
    /// stores recorded their model (only the hashes tell the models apart then).
    public var modelChanges: [String] {
        if case .modelMismatch(_, _, _, let changes) = base { changes } else { [] }
    }

    /// The current model's version hash, for ``Code/modelMismatch``; nil for other kinds.
    public var modelHash: String? {
        if case .modelMismatch(_, _, let modelHash, _) = base { modelHash } else { nil }
    }

    /// The primary key of the record not decoded, for ``Code/corruptRecord``; nil for other kinds.
    public var primaryKey: UInt64? {
        if case .corruptRecord(_, let primaryKey, _) = base { primaryKey } else { nil }
    }

    /// The configuration name the model lacks, for ``Code/unknownConfiguration``; nil for
    /// other kinds.
    public var configurationName: String? {
        if case .unknownConfiguration(let name) = base { name } else { nil }
    }

    /// The query generation involved, for ``Code/queryGenerationUnavailable`` and
    /// ``Code/queryGenerationExpired``; nil for other kinds.
    public var token: QueryGenerationToken? {
        switch base {
        case .queryGenerationUnavailable(let token), .queryGenerationExpired(let token, _, _): token
        default: nil
        }
    }

    /// How old the context's query generation was, for ``Code/queryGenerationExpired``;
    /// nil for other kinds.
    public var age: Duration? {
        if case .queryGenerationExpired(_, let age, _) = base { age } else { nil }
    }

    /// The oldest the policy allowed, for ``Code/queryGenerationExpired``; nil for other kinds.
    public var maximumAge: Duration? {
        if case .queryGenerationExpired(_, _, let maximumAge) = base { maximumAge } else { nil }
    }

    /// A sentence describing the error.
    public var description: String {
        switch base {
        case .unknownEntity(let name):
            "the model has no entity named '\(name)'"
        case .unknownKey(let key, let entity):
            "entity '\(entity)' has no property named '\(key)'"
        case .typeMismatch(let key, let entity, let expected, let actual):
            "\(entity).\(key) takes a value of type \(expected), not \(actual)"
        case .validation(let failures):
            "validation failed (\(failures.count) problem(s)):\n"
                + failures.map { "- \($0)" }.joined(separator: "\n")
        case .modelMismatch(let store, let storeHash, let modelHash, let changes):
            "the store at \(store) was written with model version \(storeHash), but the current model's version is \(modelHash); the store was not changed (migrating stores is not built yet)"
                + (changes.isEmpty ? "" : "; what differs:\n" + changes.map { "- \($0)" }.joined(separator: "\n"))
        case .incompatibleStore(let store, let reason):
            "the store at \(store) cannot be opened: \(reason)"
        case .migrationFailed(let store, let reason, _):
            "the store at \(store) was not migrated, and is left as it was: \(reason)"
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
        case .constraintConflicts(let conflicts):
            "the save breaks \(conflicts.count) uniqueness constraint(s); nothing was written:\n"
                + conflicts.map { "- \($0)" }.joined(separator: "\n")
        case .noCoordinator:
            "the context has no persistent store coordinator"
        case .coordinatorClosed:
            "the persistent store coordinator is closed (shut down): it takes no new save, batch request or store"
        case .readOnlyStore(let store):
            "the store \(store) is read-only"
        case .invalidContextConfiguration(let reason):
            "the context cannot be configured that way: \(reason)"
        case .wouldDeadlock(let cycle):
            "waiting would deadlock: \(cycle)"
        case .database(let store, let failure):
            "the database of \(store) failed: \(failure)"
        case .unsupportedByStore(let store, let feature):
            "\(store) cannot do this: \(feature); nothing was changed"
        case .invalidFetchRequest(let reason):
            "the fetch request cannot run: \(reason)"
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
