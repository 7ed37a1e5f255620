/// A description of objects to fetch: an entity, a predicate, a sort order, a window
/// and what form the results take.
///
/// `Result` is the type a fetch returns element by element: a typed subclass,
/// `ManagedObject`, `ManagedObjectID`, `[String: any Sendable]` for
/// ``ResultType/dictionary`` or `Int` for ``ResultType/count``. A request is `Sendable`:
/// a child context hands it to its parent.
///
/// ```swift
/// var request = FetchRequest<Note>(entityName: "Note")
/// request.predicate = try FetchPredicate(format: "priority >= %d", 3)
/// request.sortDescriptors = [FetchSortDescriptor(key: "title")]
/// request.fetchLimit = 20
/// ```
public struct FetchRequest<Result>: Sendable, CustomStringConvertible {
    /// The form of the results.
    public enum ResultType: Sendable, Hashable {
        /// Managed objects (faults when ``FetchRequest/returnsObjectsAsFaults``).
        case managedObject
        /// Object IDs only: no row is read into an object (the objects are registered as
        /// faults, as ``ManagedObjectContext/object(with:)`` registers them).
        case managedObjectID
        /// One dictionary per object holding ``FetchRequest/propertiesToFetch``.
        case dictionary
        /// The number of matching objects.
        case count
    }

    /// The entity whose objects are fetched.
    public var entityName: String
    /// The condition objects must satisfy; nil for all.
    public var predicate: FetchPredicate?
    /// The sort order; objects equal by every key (or with no keys) come in primary-key
    /// order.
    public var sortDescriptors: [FetchSortDescriptor] = []
    /// The most objects returned; 0 for no limit.
    public var fetchLimit = 0
    /// How many matching objects to skip first.
    public var fetchOffset = 0
    /// With a value above 0, a managed-object fetch realises only the first this many
    /// objects; the others come back as faults, and firing one reads its whole batch in
    /// one read transaction. 0 (the default) applies no batching.
    /// ``ManagedObjectContext/fetchedResults(for:)`` materialises one batch at a time.
    public var fetchBatchSize = 0
    /// The form of the results.
    public var resultType: ResultType = .managedObject
    /// Whether objects come back as faults (their values read on first access) rather
    /// than with their values.
    public var returnsObjectsAsFaults = true
    /// Whether the context's unsaved inserts, updates and deletes are taken into account.
    public var includesPendingChanges = true
    /// Whether objects of sub-entities are included.
    public var includesSubentities = true
    /// Relationship key paths (`"folder"`, `"tags"`, `"folder.notes"`) whose
    /// destinations are read for all the results right after a managed-object fetch, a
    /// few reads in all instead of one per object. A hint that never changes the
    /// results; an unknown key throws ``StrataError/unknownKey(key:entity:)``.
    public var relationshipKeyPathsForPrefetching: [String] = []
    /// What each ``ResultType/dictionary`` result holds (every attribute when empty): key
    /// paths of the entity — attributes, to-one relationships (their object IDs), key
    /// paths through to-ones (`"folder.name"`) — and aggregates
    /// (``FetchProperty/expression(_:)``). With aggregates and no
    /// ``propertiesToGroupBy``, the result is one dictionary for all the matching objects.
    /// String literals are key paths. Ignored by the other result types.
    public var propertiesToFetch: [FetchProperty] = []
    /// Key paths whose values group the matching objects of a ``ResultType/dictionary``
    /// fetch: one result per distinct combination, holding the group's values and the
    /// aggregates of ``propertiesToFetch`` over the group. Every key path fetched must be
    /// one of these. Results come in the order of ``sortDescriptors``, whose keys must
    /// then be result keys (grouped key paths or aggregate names).
    public var propertiesToGroupBy: [FetchProperty] = []
    /// The condition groups must meet (with ``propertiesToGroupBy``), evaluated on each
    /// group's result: its keys are the grouped key paths and the aggregates' names
    /// (`total > 10`).
    public var havingPredicate: FetchPredicate?
    /// Whether a ``ResultType/dictionary`` fetch leaves out results equal to one before
    /// them (SQL's `DISTINCT`). False by default.
    public var returnsDistinctResults = false
    /// Whether a ``ResultType/managedObject`` fetch reads the objects' rows (true, the
    /// default). False fetches only the matching objects' IDs and returns faults, read on
    /// first access: what a fetch to delete or count objects, or to take their IDs,
    /// wants. (Rows are read anyway when unsaved changes are merged in.)
    public var includesPropertyValues = true
    /// Whether objects this context has registered already take the values of the rows
    /// the fetch reads (their unsaved changes stay on top, as a refresh that merges
    /// changes keeps them). False by default: a registered object keeps the values it has.
    public var shouldRefreshRefetchedObjects = false
    /// The stores searched; nil (the default) searches every store of the coordinator
    /// that holds the entity. Unsaved objects count when they are in (or, new, go to) one
    /// of these stores.
    public var affectedStores: [PersistentStore]?

    /// A request for objects of `entityName`.
    public init(entityName: String) {
        self.entityName = entityName
    }

    /// `FetchRequest(Note where priority >= 3 sorted by title ASC limit 20)`.
    public var description: String {
        var text = "FetchRequest(\(entityName)"
        if let predicate { text += " where \(predicate)" }
        if !sortDescriptors.isEmpty { text += " sorted by " + sortDescriptors.map(\.description).joined(separator: ", ") }
        if fetchOffset > 0 { text += " offset \(fetchOffset)" }
        if fetchLimit > 0 { text += " limit \(fetchLimit)" }
        return text + ")"
    }
}

extension FetchRequest {
    /// The same search with managed objects as its results: the entity, the predicate,
    /// the order and the window, sub-entities, pending changes and the stores searched
    /// (what live results and dictionary fetches read their rows with).
    func objectRequest() -> FetchRequest<ManagedObject> {
        var objects = FetchRequest<ManagedObject>(entityName: entityName)
        objects.predicate = predicate
        objects.sortDescriptors = sortDescriptors
        objects.fetchLimit = fetchLimit
        objects.fetchOffset = fetchOffset
        objects.includesSubentities = includesSubentities
        objects.includesPendingChanges = includesPendingChanges
        objects.affectedStores = affectedStores
        return objects
    }
}

extension FetchRequest where Result: ManagedObject {
    /// A request for objects of `Result`'s entity (``ManagedObject/entityName``).
    public init() {
        self.init(entityName: Result.entityName)
    }
}
