import CoreMetrics
import Foundation
import Logging
import Tracing
internal import StrataLocks

/// A model, a coordinator, its stores and the contexts that work on them, set up in one
/// place: Core Data's `NSPersistentContainer`.
///
/// ```swift
/// let container = try PersistentContainer(name: "Notes", types: [Folder.self, Note.self])
/// try await container.loadPersistentStores()       // ~/.local/share/strata/Notes.strata
///
/// try await container.performBackgroundTask { context in
///     let note = Note()
///     note.title = "Groceries"
///     try context.insert(note)
///     try context.save()
/// }
///
/// @MainActor func titles() throws -> [String] {       // main-actor code uses the
///     try container.viewContext.performAndWait { context in   // viewContext directly
///         try context.fetch(FetchRequest<Note>()).map(\.title)
///     }
/// }
/// ```
///
/// By default the container has one LMDB store at
/// `<defaultDirectoryURL()>/<name>.strata`; set ``persistentStoreDescriptions``
/// before ``loadPersistentStores()`` to put stores elsewhere, in memory, or several of
/// them. Until a store is loaded, the container's contexts have no coordinator: their
/// fetches and saves throw ``StrataError/noCoordinator`` (nothing traps). See
/// <doc:PersistentContainers>.
public final class PersistentContainer: Sendable {
    /// The container's name: the default store is `<name>.strata`.
    public let name: String
    /// The model of every store and context.
    public let managedObjectModel: ManagedObjectModel
    /// The coordinator the stores are added to, and the contexts' root.
    public let persistentStoreCoordinator: PersistentStoreCoordinator
    /// The main-queue context, one per container, named "viewContext": `@MainActor`
    /// code uses it directly (``ManagedObjectContext/performAndWait(_:)`` runs inline
    /// there). Use it to read; do long writes in background contexts.
    public let viewContext: ManagedObjectContext

    /// Descriptions, loaded stores and contexts waiting for their coordinator.
    let state: LockedValue<ContainerState>

    /// A container named `name` for `managedObjectModel`, with one store description:
    /// an LMDB store at `<defaultDirectoryURL()>/<name>.strata`. Nothing is opened
    /// or created until ``loadPersistentStores()``. Its coordinator logs to `logger` (by
    /// default the caller's task-local `Logger.current`; see
    /// ``PersistentStoreCoordinator/logger``), reports metrics to `metricsFactory` (by
    /// default the bootstrapped one) and spans to `tracer` (by default the one active at
    /// each operation): see
    /// ``PersistentStoreCoordinator/init(managedObjectModel:logger:metricsFactory:tracer:)``.
    public init(
        name: String, managedObjectModel: ManagedObjectModel, logger: Logger = Logger.current,
        metricsFactory: (any MetricsFactory)? = nil, tracer: (any Tracer)? = nil
    ) {
        self.name = name
        self.managedObjectModel = managedObjectModel
        persistentStoreCoordinator = PersistentStoreCoordinator(
            managedObjectModel: managedObjectModel, logger: logger, metricsFactory: metricsFactory, tracer: tracer)
        let viewContext = ManagedObjectContext(.mainQueue, name: "viewContext")
        self.viewContext = viewContext
        var state = ContainerState(descriptions: [Self.defaultStoreDescription(name: name)])
        state.waiting.append(WeakContext(context: viewContext))
        self.state = LockedValue(state)
    }

    /// A container named `name` whose model is built from typed classes, as
    /// ``ManagedObjectModel/init(types:configurations:versionIdentifier:)`` builds it.
    ///
    /// - Throws: ``ModelError`` with every problem of the model.
    public convenience init(
        name: String, types: [ManagedObject.Type], configurations: [String: [String]] = [:]
    ) throws(ModelError) {
        self.init(name: name, managedObjectModel: try ManagedObjectModel(types: types, configurations: configurations))
    }

    /// The stores ``loadPersistentStores()`` adds, in order. By default one LMDB store at
    /// `<defaultDirectoryURL()>/<name>.strata`.
    ///
    /// Change it before loading. Descriptions already loaded are not loaded again, and
    /// removing a description does not remove its store (use
    /// ``PersistentStoreCoordinator/remove(_:)``).
    public var persistentStoreDescriptions: [PersistentStoreDescription] {
        get { state.withLock { $0.descriptions } }
        set { state.withLock { $0.descriptions = newValue } }
    }

    // MARK: Contexts

    /// A new private-queue context on the container's coordinator, each time you ask.
    ///
    /// Made before ``loadPersistentStores()``, it gets the coordinator when a store is
    /// loaded; until then its fetches and saves throw ``StrataError/noCoordinator``.
    public func newBackgroundContext() -> ManagedObjectContext {
        state.withLock { state in
            if state.attached {
                return ManagedObjectContext(.privateQueue, coordinator: persistentStoreCoordinator)
            }
            let context = ManagedObjectContext(.privateQueue)
            state.waiting.removeAll { $0.context == nil }
            state.waiting.append(WeakContext(context: context))
            return context
        }
    }

    /// Runs `body` on a new background context (``newBackgroundContext()``) and returns
    /// its result.
    ///
    /// ```swift
    /// let id = try await container.performBackgroundTask { context in
    ///     let folder = Folder()
    ///     try context.insert(folder)
    ///     try context.save()
    ///     return folder.objectID        // IDs cross contexts; objects never do
    /// }
    /// ```
    ///
    /// Overloading: in `async` code `container.performBackgroundTask { … }` is this
    /// function (the compiler asks for `await`); the fire-and-forget overload is what
    /// synchronous code gets by that spelling, as with
    /// ``ManagedObjectContext/perform(schedule:_:)`` and ``ManagedObjectContext/perform(_:)``.
    nonisolated(nonsending)
    public func performBackgroundTask<T: Sendable>(
        _ body: (isolated ManagedObjectContext) throws -> T
    ) async rethrows -> T {
        try await newBackgroundContext().perform(body)
    }

    /// Schedules `body` on a new background context and returns at once.
    ///
    /// The context lives until the block has run. Several calls run on different
    /// contexts, so their blocks may run at the same time, in any order.
    public func performBackgroundTask(_ body: @escaping @Sendable (isolated ManagedObjectContext) -> Void) {
        newBackgroundContext().perform(body)
    }
}

/// What a container changes after its creation; guarded by its mutex.
struct ContainerState {
    /// The descriptions to load.
    var descriptions: [PersistentStoreDescription]
    /// The stores loaded so far, with the description each came from.
    var loaded: [(description: PersistentStoreDescription, store: PersistentStore)] = []
    /// Whether the container's contexts are given the coordinator when made (a store
    /// was loaded).
    var attached = false
    /// Contexts made before a store was loaded: they get the coordinator then.
    var waiting: [WeakContext] = []
    /// The last call of `loadPersistentStores()`: the next one waits for it.
    var lastLoad: Task<[PersistentContainerError.Failure], Never>?
}

/// A context the container does not keep alive.
struct WeakContext {
    weak var context: ManagedObjectContext?
}
