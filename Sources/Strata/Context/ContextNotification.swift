import Foundation

/// One notification of a context, as a `Sendable` value: what
/// ``ManagedObjectContext/notifications(of:bufferingPolicy:)`` streams.
///
/// The same events are posted on `NotificationCenter.default` under Core Data's names
/// (``ManagedObjectContext/didChangeObjectsNotification`` and the others), with the
/// objects themselves in `userInfo`. Objects cannot leave their context, so the stream
/// carries their IDs: another context turns them into its own objects with
/// ``ManagedObjectContext/object(with:)``.
///
/// ```swift
/// for await saved in context.notifications(of: [.didSave]) {
///     print("saved", saved.insertedObjectIDs.count, "new objects")
/// }
/// ```
public struct ContextNotification: Sendable {
    /// Which notification it is.
    public enum Kind: Sendable, Hashable, CaseIterable {
        /// Objects changed: posted by ``ManagedObjectContext/processPendingChanges()`` (the
        /// end of every block), by ``ManagedObjectContext/reset()`` and
        /// ``ManagedObjectContext/rollback()``, and inside ``ManagedObjectContext/save()``.
        /// Never for objects that a fetch merely registered.
        case objectsDidChange
        /// A save with changes is about to start. It carries no object sets.
        case willSave
        /// A save committed: the inserted, updated and deleted objects, with permanent IDs.
        case didSave
        /// Another context's saved changes were merged in
        /// (``ManagedObjectContext/mergeChanges(fromContextDidSave:)-(ContextNotification)``):
        /// the IDs merged, of objects this context had registered (updated, deleted) or
        /// now has (inserted).
        case didMergeChanges
        /// The context's query generation outlived the coordinator's
        /// ``PersistentStoreCoordinator/queryGenerationAgePolicy``
        /// (``QueryGenerationAgePolicy/advance(after:)``), and a read moved it to the newest
        /// state: ``ContextNotification/expiredQueryGenerationToken`` is the one left,
        /// ``ContextNotification/queryGenerationToken`` the one taken. Posted at the end
        /// of the block in which the read happened. Registered objects keep their values.
        case didExpireQueryGeneration
    }

    /// Which notification it is.
    public let kind: Kind
    /// The context that posted it.
    public let context: ManagedObjectContext
    /// The context's name when it posted.
    public let contextName: String?
    /// Objects inserted (into the context; or saved, for ``Kind/didSave``).
    public let insertedObjectIDs: Set<ManagedObjectID>
    /// Objects changed.
    public let updatedObjectIDs: Set<ManagedObjectID>
    /// Objects deleted. An object inserted and deleted without a save in between is in
    /// no set.
    public let deletedObjectIDs: Set<ManagedObjectID>
    /// Objects refreshed (``ManagedObjectContext/refresh(_:mergeChanges:)``, a
    /// rollback's reverted objects) and not changed in the same event.
    public let refreshedObjectIDs: Set<ManagedObjectID>
    /// Objects that left the context and can no longer be used (inserted objects of a
    /// rollback; every object of a reset).
    public let invalidatedObjectIDs: Set<ManagedObjectID>
    /// Whether every object of the context was invalidated (a reset).
    public let invalidatedAllObjects: Bool
    /// The query generation the notification names: for ``Kind/didSave`` of a root
    /// context, the state right after the save's commit (pin it with
    /// ``ManagedObjectContext/setQueryGenerationFrom(_:)`` to read exactly what the
    /// save left); for ``Kind/didMergeChanges`` and ``Kind/didExpireQueryGeneration``,
    /// the generation the context reads now (``QueryGenerationToken/current`` when it
    /// takes the newest at its next read). Nil otherwise, for a child's save, and for an
    /// unpinned context's merge.
    public let queryGenerationToken: QueryGenerationToken?
    /// For ``Kind/didExpireQueryGeneration``, the generation that expired; nil otherwise.
    public let expiredQueryGenerationToken: QueryGenerationToken?

    /// The `NotificationCenter` name the same event is posted under.
    public var name: Notification.Name {
        switch kind {
        case .objectsDidChange: ManagedObjectContext.didChangeObjectsNotification
        case .willSave: ManagedObjectContext.willSaveObjectsNotification
        case .didSave: ManagedObjectContext.didSaveObjectsNotification
        case .didMergeChanges: ManagedObjectContext.didMergeChangesObjectIDsNotification
        case .didExpireQueryGeneration: ManagedObjectContext.didExpireQueryGenerationNotification
        }
    }

    init(kind: Kind, context: ManagedObjectContext, contextName: String?, ids: ChangedObjectIDs) {
        self.kind = kind
        self.context = context
        self.contextName = contextName
        insertedObjectIDs = ids.inserted
        updatedObjectIDs = ids.updated
        deletedObjectIDs = ids.deleted
        refreshedObjectIDs = ids.refreshed
        invalidatedObjectIDs = ids.invalidated
        invalidatedAllObjects = ids.invalidatedAll
        queryGenerationToken = ids.queryGeneration
        expiredQueryGenerationToken = ids.expiredQueryGeneration
    }
}

/// The IDs of a notification's objects, by set: computed once per notification and
/// shared by its `userInfo` and its ``ContextNotification``.
struct ChangedObjectIDs: Sendable {
    var inserted: Set<ManagedObjectID> = []
    var updated: Set<ManagedObjectID> = []
    var deleted: Set<ManagedObjectID> = []
    var refreshed: Set<ManagedObjectID> = []
    var invalidated: Set<ManagedObjectID> = []
    var invalidatedAll = false
    /// The query generation the notification names (``ContextNotification/queryGenerationToken``).
    var queryGeneration: QueryGenerationToken?
    /// The generation that expired (``ContextNotification/Kind/didExpireQueryGeneration``).
    var expiredQueryGeneration: QueryGenerationToken?

    init(inserted: Set<ManagedObjectID> = [], updated: Set<ManagedObjectID> = [], deleted: Set<ManagedObjectID> = []) {
        self.inserted = inserted
        self.updated = updated
        self.deleted = deleted
    }

    init(_ sets: ObjectChangeSets) {
        inserted = Set(sets.inserted.map(\.objectID))
        updated = Set(sets.updated.map(\.objectID))
        deleted = Set(sets.deleted.map(\.objectID))
        refreshed = Set(sets.refreshed.map(\.objectID))
        invalidated = Set(sets.invalidated.map(\.objectID))
        invalidatedAll = sets.invalidatedAll
        queryGeneration = sets.queryGeneration
    }

    var isEmpty: Bool { inserted.isEmpty && updated.isEmpty && deleted.isEmpty && refreshed.isEmpty && invalidated.isEmpty && !invalidatedAll }
}

extension ManagedObjectContext {
    /// Posted when objects of the context changed: during
    /// ``processPendingChanges()`` (which ends every block), after the changes are
    /// processed; also by ``reset()`` and ``rollback()``. Not posted for objects a fetch
    /// registers. `object` is the context; `userInfo` holds sets of objects under
    /// ``NotificationKey/insertedObjects``, ``NotificationKey/updatedObjects``,
    /// ``NotificationKey/deletedObjects``, ``NotificationKey/refreshedObjects``,
    /// ``NotificationKey/invalidatedObjects`` (and ``NotificationKey/invalidatedAllObjects``
    /// on a reset), and sets of their IDs under the `…ObjectIDs` keys. Observers run on
    /// the context's executor, inside the context's block: the objects may be used there
    /// (through `context.assumeIsolated`) and nowhere else; do not save from the
    /// observer (Core Data warns of an infinite loop).
    public static let didChangeObjectsNotification = Notification.Name("NSManagedObjectContextObjectsDidChangeNotification")
    /// Posted when a save that has changes starts, before any object's
    /// ``ManagedObject/willSave()``. `object` is the context; no `userInfo`.
    public static let willSaveObjectsNotification = Notification.Name("NSManagedObjectContextWillSaveNotification")
    /// Posted after a save committed. `object` is the context; `userInfo` holds the
    /// saved objects (with their permanent IDs) under ``NotificationKey/insertedObjects``,
    /// ``NotificationKey/updatedObjects`` and ``NotificationKey/deletedObjects``, and their
    /// IDs under the `…ObjectIDs` keys. Objects inserted and deleted before the save are in
    /// no set. Use the objects only on the context's executor; pass IDs elsewhere.
    public static let didSaveObjectsNotification = Notification.Name("NSManagedObjectContextDidSaveNotification")
    /// Posted after ``didSaveObjectsNotification``, with only the saved object IDs in
    /// `userInfo` (``NotificationKey/insertedObjectIDs``, ``NotificationKey/updatedObjectIDs``,
    /// ``NotificationKey/deletedObjectIDs``): every value is `Sendable`.
    public static let didSaveObjectIDsNotification = Notification.Name("NSManagedObjectContextDidSaveObjectIDsNotification")
    /// Posted when a read moved the context off a query generation that outlived the
    /// coordinator's ``PersistentStoreCoordinator/queryGenerationAgePolicy``
    /// (``QueryGenerationAgePolicy/advance(after:)``), at the end of that block. `object`
    /// is the context; `userInfo` holds the new token under
    /// ``NotificationKey/queryGeneration`` and the expired one under
    /// ``NotificationKey/expiredQueryGeneration``.
    public static let didExpireQueryGenerationNotification = Notification.Name("StrataContextDidExpireQueryGenerationNotification")

    /// The `userInfo` keys of context notifications (Core Data's
    /// `NSManagedObjectContext.NotificationKey`; the raw values are Core Data's).
    public enum NotificationKey: String, Sendable, CaseIterable {
        /// `Set<ManagedObject>`: objects inserted (or saved as new).
        case insertedObjects = "inserted"
        /// `Set<ManagedObject>`: objects changed.
        case updatedObjects = "updated"
        /// `Set<ManagedObject>`: objects deleted.
        case deletedObjects = "deleted"
        /// `Set<ManagedObject>`: objects refreshed and not changed in the same event.
        case refreshedObjects = "refreshed"
        /// `Set<ManagedObject>`: objects that can no longer be used.
        case invalidatedObjects = "invalidated"
        /// `Set<ManagedObjectID>`: every object of the context, after a reset.
        case invalidatedAllObjects = "invalidatedAll"
        /// `Set<ManagedObjectID>`: IDs of the inserted objects.
        case insertedObjectIDs = "inserted_objectIDs"
        /// `Set<ManagedObjectID>`: IDs of the updated objects.
        case updatedObjectIDs = "updated_objectIDs"
        /// `Set<ManagedObjectID>`: IDs of the deleted objects.
        case deletedObjectIDs = "deleted_objectIDs"
        /// `Set<ManagedObjectID>`: IDs of the refreshed objects.
        case refreshedObjectIDs = "refreshed_objectIDs"
        /// `Set<ManagedObjectID>`: IDs of the invalidated objects.
        case invalidatedObjectIDs = "invalidated_objectIDs"
        /// ``QueryGenerationToken``: after a save, the state the save made; after a merge
        /// or an expiry, the generation the context reads now
        /// (``ContextNotification/queryGenerationToken``). Core Data's
        /// `NSManagedObjectContextQueryGenerationKey`.
        case queryGeneration = "queryGeneration"
        /// ``QueryGenerationToken``: the generation that expired
        /// (``ManagedObjectContext/didExpireQueryGenerationNotification``).
        case expiredQueryGeneration = "expiredQueryGeneration"
    }
}

extension Notification.Name {
    /// Core Data's older name of ``ManagedObjectContext/didChangeObjectsNotification``.
    public static let NSManagedObjectContextObjectsDidChange = ManagedObjectContext.didChangeObjectsNotification
    /// Core Data's older name of ``ManagedObjectContext/willSaveObjectsNotification``.
    public static let NSManagedObjectContextWillSave = ManagedObjectContext.willSaveObjectsNotification
    /// Core Data's older name of ``ManagedObjectContext/didSaveObjectsNotification``.
    public static let NSManagedObjectContextDidSave = ManagedObjectContext.didSaveObjectsNotification
}

/// Core Data's key for inserted objects in a notification's `userInfo`
/// (``ManagedObjectContext/NotificationKey/insertedObjects``).
public let NSInsertedObjectsKey = ManagedObjectContext.NotificationKey.insertedObjects.rawValue
/// Core Data's key for updated objects (``ManagedObjectContext/NotificationKey/updatedObjects``).
public let NSUpdatedObjectsKey = ManagedObjectContext.NotificationKey.updatedObjects.rawValue
/// Core Data's key for deleted objects (``ManagedObjectContext/NotificationKey/deletedObjects``).
public let NSDeletedObjectsKey = ManagedObjectContext.NotificationKey.deletedObjects.rawValue
/// Core Data's key for refreshed objects (``ManagedObjectContext/NotificationKey/refreshedObjects``).
public let NSRefreshedObjectsKey = ManagedObjectContext.NotificationKey.refreshedObjects.rawValue
/// Core Data's key for invalidated objects (``ManagedObjectContext/NotificationKey/invalidatedObjects``).
public let NSInvalidatedObjectsKey = ManagedObjectContext.NotificationKey.invalidatedObjects.rawValue
/// Core Data's key marking that every object was invalidated
/// (``ManagedObjectContext/NotificationKey/invalidatedAllObjects``).
public let NSInvalidatedAllObjectsKey = ManagedObjectContext.NotificationKey.invalidatedAllObjects.rawValue
/// Core Data's key for the query generation token in a notification's `userInfo`
/// (``ManagedObjectContext/NotificationKey/queryGeneration``).
public let NSManagedObjectContextQueryGenerationKey = ManagedObjectContext.NotificationKey.queryGeneration.rawValue
