import Foundation

/// A request that a store runs below every context (Core Data's `NSPersistentStoreRequest`):
/// ``BatchInsertRequest``, ``BatchUpdateRequest`` and ``BatchDeleteRequest``, run by
/// ``ManagedObjectContext/execute(_:)-(PersistentStoreRequest)`` or
/// ``PersistentStoreCoordinator/execute(_:)-(PersistentStoreRequest)``.
///
/// Each request is one atomic write through the coordinator's write queue; no context's
/// objects change (see <doc:BatchRequests> for how contexts catch up).
public protocol PersistentStoreRequest {
    /// What the store is asked to do. Strata's request types provide it; it cannot be
    /// made elsewhere.
    var storeRequest: StoreRequest { get }
}

/// What a ``PersistentStoreRequest`` asks of the store: made only by Strata's batch
/// request types.
public struct StoreRequest {
    enum Kind {
        case insert(BatchInsertRequest)
        case update(BatchUpdateRequest)
        case delete(BatchDeleteRequest)
    }

    let kind: Kind

    /// The request's kind and entity, for logs.
    var logDescription: (kind: String, entity: String) {
        switch kind {
        case .insert(let request): ("batch insert", request.entityName)
        case .update(let request): ("batch update", request.entityName)
        case .delete(let request):
            switch request.target {
            case .fetch(let fetch): ("batch delete", fetch.entityName)
            case .objectIDs(let ids): ("batch delete", ids.first?.entityName ?? "")
            }
        }
    }
}

/// What a batch request returns (Core Data's `NSBatchInsertRequestResultType` and its
/// siblings).
public enum BatchRequestResultType: Sendable, Hashable {
    /// Only that the request succeeded (failures throw).
    case statusOnly
    /// How many objects it inserted, updated or deleted.
    case count
    /// The IDs of those objects, and what changed for merging into contexts.
    case objectIDs
}

/// The result of a batch request (Core Data's `NSBatchInsertResult`, `NSBatchUpdateResult`
/// and `NSBatchDeleteResult`).
public struct PersistentStoreResult: Sendable, Hashable {
    /// What was asked for.
    public let resultType: BatchRequestResultType
    /// How many objects the request inserted (new or merged into a stored object by a
    /// uniqueness constraint), updated, or deleted (cascades included); nil for
    /// ``BatchRequestResultType/statusOnly``.
    public let count: Int?
    /// The IDs of those objects, in the order of the input for an insert and of the
    /// primary key otherwise; nil unless ``BatchRequestResultType/objectIDs`` was asked for.
    public let objectIDs: [ManagedObjectID]?
    /// Every object the request changed, by what happened to it, under the keys of
    /// ``ManagedObjectContext/NotificationKey`` (`inserted_objectIDs`, `updated_objectIDs`,
    /// `deleted_objectIDs`): ready for
    /// ``ManagedObjectContext/mergeChanges(fromRemoteContextSave:into:)``. Besides
    /// ``objectIDs`` it holds the objects whose relationships the request changed to keep
    /// inverses consistent (a delete's nullified objects, an insert's new partners).
    /// Empty unless ``BatchRequestResultType/objectIDs`` was asked for.
    public let changes: [String: [ManagedObjectID]]
    /// The persistent-history transaction the request recorded (of the last store it
    /// wrote, when it wrote several); nil when no store it wrote tracks history, or it
    /// changed nothing.
    public let historyToken: PersistentHistoryToken?

    init(
        resultType: BatchRequestResultType, count: Int, objectIDs: [ManagedObjectID], changes: BatchChanges,
        historyToken: PersistentHistoryToken?
    ) {
        self.resultType = resultType
        self.count = resultType == .statusOnly ? nil : count
        self.objectIDs = resultType == .objectIDs ? objectIDs : nil
        var dictionary: [String: [ManagedObjectID]] = [:]
        if resultType == .objectIDs {
            if !changes.inserted.isEmpty { dictionary[ManagedObjectContext.NotificationKey.insertedObjectIDs.rawValue] = changes.inserted }
            if !changes.updated.isEmpty { dictionary[ManagedObjectContext.NotificationKey.updatedObjectIDs.rawValue] = changes.updated }
            if !changes.deleted.isEmpty { dictionary[ManagedObjectContext.NotificationKey.deletedObjectIDs.rawValue] = changes.deleted }
        }
        self.changes = dictionary
        self.historyToken = historyToken
    }
}

/// What a batch request changed, by kind.
struct BatchChanges: Sendable {
    var inserted: [ManagedObjectID] = []
    var updated: [ManagedObjectID] = []
    var deleted: [ManagedObjectID] = []

    var isEmpty: Bool { inserted.isEmpty && updated.isEmpty && deleted.isEmpty }

    mutating func add(_ other: BatchChanges) {
        inserted += other.inserted
        updated += other.updated
        deleted += other.deleted
    }
}

// MARK: - Insert

/// Inserts objects straight into the store, without making managed objects in a context
/// (Core Data's `NSBatchInsertRequest`).
///
/// Give the objects as dictionaries (attribute names to Swift values, relationship names
/// to ``ManagedObjectID``s), all at once or one at a time from a handler, or fill a
/// managed object of the entity in a handler: a handler is called until it returns
/// true, so a million objects never sit in memory together. Missing attributes take
/// their defaults. The model's rules are checked (required values, ranges, lengths,
/// patterns, dates); there are no objects, so no `validateFor…` override runs.
///
/// Uniqueness constraints hold: an object whose constrained values a stored object (or an
/// earlier object of the request) has is settled by ``mergePolicy``: ``MergePolicy/error``
/// fails the request with ``StrataError/constraintConflicts(_:)``; a merging policy
/// turns the insert into an update of the stored object (an upsert) as a context's save
/// does (see <doc:MergePolicies>).
///
/// ```swift
/// var rows = source.makeIterator()
/// let request = BatchInsertRequest(entityName: "Quake") { dictionary in
///     guard let row = rows.next() else { return true }     // true: done
///     dictionary = ["code": row.code, "magnitude": row.magnitude, "time": row.time]
///     return false
/// }
/// try await context.perform { context in try context.execute(request) }
/// ```
public struct BatchInsertRequest: PersistentStoreRequest {
    /// Where the objects come from.
    enum Source {
        case objects([[String: any Sendable]])
        case dictionaries((inout [String: any Sendable]) -> Bool)
        /// Whether an object is of the handler's class (nil: any is), its name, and the handler.
        case managedObjects(accepts: ((ManagedObject) -> Bool)?, className: String, fill: (ManagedObject) -> Bool)
    }

    /// The entity of the new objects.
    public let entityName: String
    /// What the request returns. ``BatchRequestResultType/statusOnly`` by default.
    public var resultType: BatchRequestResultType = .statusOnly
    /// How an object that collides with a stored one on a uniqueness constraint is
    /// settled. ``MergePolicy/error`` by default: the request fails and writes nothing.
    public var mergePolicy: MergePolicy = .error
    let source: Source

    /// Inserts `objects`: each a dictionary of attribute names to values of the
    /// attribute's Swift type (as ``ManagedObject/setValue(_:forKey:)`` takes them) and
    /// relationship names to a ``ManagedObjectID`` (to-one) or an array or set of them
    /// (to-many).
    public init(entityName: String, objects: [[String: any Sendable]]) {
        self.entityName = entityName
        source = .objects(objects)
    }

    /// Inserts the objects `handler` fills in, one dictionary per call (empty at each
    /// call), until it returns true; the dictionary of that last call is not inserted.
    public init(entityName: String, handler: @escaping (inout [String: any Sendable]) -> Bool) {
        self.entityName = entityName
        source = .dictionaries(handler)
    }

    /// Inserts the objects `handler` fills in: it is handed one managed object of the
    /// entity, in no context and reset to the attributes' defaults before every call,
    /// and sets its attributes, until it returns true (that call's values are not
    /// inserted). The fastest form: typed properties are encoded straight from the
    /// object's fields. Relationships are not read from the object: give them as IDs with
    /// the dictionary forms.
    public init(entityName: String, managedObjectHandler handler: @escaping (ManagedObject) -> Bool) {
        self.entityName = entityName
        source = .managedObjects(accepts: nil, className: "ManagedObject", fill: handler)
    }

    /// ``init(entityName:managedObjectHandler:)`` for a typed subclass: the handler gets
    /// an `Object`.
    public init<Object: ManagedObject>(_ type: Object.Type, handler: @escaping (Object) -> Bool) {
        entityName = Object.entity().name
        // The object is made from the model's class for the entity, checked to be an `Object`
        // before the first call.
        source = .managedObjects(
            accepts: { $0 is Object }, className: "\(Object.self)", fill: { handler(unsafeDowncast($0, to: Object.self)) })
    }

    /// This request.
    public var storeRequest: StoreRequest { StoreRequest(kind: .insert(self)) }
}

// MARK: - Update

/// Changes attributes of every stored object that matches a predicate, straight in the
/// store (Core Data's `NSBatchUpdateRequest`): no object is fetched into a context.
///
/// ```swift
/// var request = BatchUpdateRequest(entityName: "Task")
/// request.predicate = try FetchPredicate(format: "due < %@", Date())
/// request.propertiesToUpdate = ["priority": try UpdateExpression(format: "priority + 1")]
/// request.resultType = .count
/// let bumped = try await context.perform { context in try context.execute(request).count }
/// ```
///
/// Every matching row gets its new values, computed from its own values before the
/// update, and a new row version (so contexts that hold a changed object see a conflict
/// when they save it, settled by their merge policy). Indexes follow; a uniqueness
/// constraint two rows would then share fails the request with
/// ``StrataError/constraintConflicts(_:)``, and the model's rules (required values,
/// ranges, lengths, patterns) with ``StrataError/validation(_:)``: nothing is written then.
public struct BatchUpdateRequest: PersistentStoreRequest, Sendable {
    /// The entity whose objects change.
    public let entityName: String
    /// Which objects change; nil for all of them.
    public var predicate: FetchPredicate?
    /// The new value of each attribute, by name: a constant or an expression of the row's
    /// own values. Only attributes: relationships are not batch-updated.
    public var propertiesToUpdate: [String: UpdateExpression] = [:]
    /// Whether objects of sub-entities change too. True by default.
    public var includesSubentities = true
    /// What the request returns. ``BatchRequestResultType/statusOnly`` by default.
    public var resultType: BatchRequestResultType = .statusOnly

    /// An update of objects of `entityName`; set ``propertiesToUpdate``.
    public init(entityName: String) {
        self.entityName = entityName
    }

    /// This request.
    public var storeRequest: StoreRequest { StoreRequest(kind: .update(self)) }
}

// MARK: - Delete

/// Deletes stored objects straight in the store (Core Data's `NSBatchDeleteRequest`),
/// applying the delete rules of their relationships so the store stays consistent:
/// ``DeleteRule/cascade`` deletes the destinations too (and theirs, and so on),
/// ``DeleteRule/nullify`` removes the deleted objects from their destinations' inverse
/// relationships, ``DeleteRule/deny`` fails the whole request with
/// ``StrataError/validation(_:)`` (``ValidationFailure/Reason/deleteDenied(count:)``)
/// when a destination is not itself deleted by the request, and
/// ``DeleteRule/noAction`` leaves the destinations as they are.
///
/// ```swift
/// var old = FetchRequest<Note>(entityName: "Note")
/// old.predicate = try FetchPredicate(format: "modified < %@", cutoff)
/// var request = BatchDeleteRequest(fetchRequest: old)
/// request.resultType = .objectIDs
/// let result = try await context.perform { context in try context.execute(request) }
/// try await ManagedObjectContext.mergeChanges(fromRemoteContextSave: result.changes, into: [viewContext])
/// ```
public struct BatchDeleteRequest: PersistentStoreRequest, Sendable {
    enum Target: Sendable {
        case fetch(FetchRequest<ManagedObjectID>)
        case objectIDs([ManagedObjectID])
    }

    let target: Target
    /// What the request returns. ``BatchRequestResultType/statusOnly`` by default.
    public var resultType: BatchRequestResultType = .statusOnly

    /// Deletes the objects `fetchRequest` finds: its entity, predicate, sub-entities, and
    /// its sort descriptors, offset and limit when it has a limit.
    public init<Result>(fetchRequest: FetchRequest<Result>) {
        var request = FetchRequest<ManagedObjectID>(entityName: fetchRequest.entityName)
        request.predicate = fetchRequest.predicate
        request.sortDescriptors = fetchRequest.sortDescriptors
        request.fetchLimit = fetchRequest.fetchLimit
        request.fetchOffset = fetchRequest.fetchOffset
        request.includesSubentities = fetchRequest.includesSubentities
        request.resultType = .managedObjectID
        target = .fetch(request)
    }

    /// Deletes the objects `objectIDs` name; IDs of objects no longer stored are skipped.
    public init(objectIDs: [ManagedObjectID]) {
        target = .objectIDs(objectIDs)
    }

    /// This request.
    public var storeRequest: StoreRequest { StoreRequest(kind: .delete(self)) }
}
