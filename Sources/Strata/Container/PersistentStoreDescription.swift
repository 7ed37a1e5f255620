import Foundation

/// What a ``PersistentContainer`` needs to add one store: its type, location,
/// model configuration and options.
///
/// A value: change a container's descriptions before
/// ``PersistentContainer/loadPersistentStores()``.
///
/// ```swift
/// let container = PersistentContainer(name: "Notes", managedObjectModel: model)
/// container.persistentStoreDescriptions = [
///     PersistentStoreDescription(url: URL(fileURLWithPath: "/srv/notes/Notes.strata")),
///     .inMemory(configuration: "Cache"),
/// ]
/// try await container.loadPersistentStores()
/// ```
///
/// Core Data's `NSPersistentStoreDescription`; the options are
/// ``PersistentStore/Options``.
public struct PersistentStoreDescription: Sendable, Hashable, CustomStringConvertible {
    /// The kind of store: ``PersistentStore/StoreType/lmdb`` (a directory at ``url``) or
    /// ``PersistentStore/StoreType/inMemory``.
    public var type: PersistentStore.StoreType
    /// The store directory; ignored for an in-memory store. Missing directories are
    /// created by ``PersistentContainer/loadPersistentStores()``.
    public var url: URL?
    /// The model configuration whose entities the store holds; nil for every entity.
    public var configuration: String?
    /// Map size, readers, durability, read-only.
    public var options: PersistentStore.Options

    /// A description of a store of `type` at `url`.
    ///
    /// - Parameters:
    ///   - type: the kind of store; ``PersistentStore/StoreType/lmdb`` by default.
    ///   - url: the store directory (a file URL); nil for an in-memory store.
    ///   - configuration: the model configuration whose entities the store holds; nil
    ///     for every entity.
    ///   - options: how the store is opened.
    public init(
        type: PersistentStore.StoreType = .lmdb, url: URL?, configuration: String? = nil,
        options: PersistentStore.Options = .init()
    ) {
        self.type = type
        self.url = url
        self.configuration = configuration
        self.options = options
    }

    /// A description of an in-memory store: it behaves like an LMDB store and is gone
    /// with its coordinator.
    public static func inMemory(configuration: String? = nil, options: PersistentStore.Options = .init()) -> Self {
        Self(type: .inMemory, url: nil, configuration: configuration, options: options)
    }

    /// Whether loading migrates a store written with an earlier model version
    /// (``PersistentStore/Options/shouldMigrateStoreAutomatically``); true by default.
    public var shouldMigrateStoreAutomatically: Bool {
        get { options.shouldMigrateStoreAutomatically }
        set { options.shouldMigrateStoreAutomatically = newValue }
    }

    /// Whether a migration may infer a lightweight stage from the model the store recorded
    /// (``PersistentStore/Options/shouldInferMappingModelAutomatically``); true by default.
    public var shouldInferMappingModelAutomatically: Bool {
        get { options.shouldInferMappingModelAutomatically }
        set { options.shouldInferMappingModelAutomatically = newValue }
    }

    /// The model versions and stages a migration follows (``PersistentStore/Options/migrationPlan``).
    public var migrationPlan: MigrationPlan? {
        get { options.migrationPlan }
        set { options.migrationPlan = newValue }
    }

    /// Whether saves record persistent history (``PersistentStore/Options/tracksPersistentHistory``).
    public var tracksPersistentHistory: Bool {
        get { options.tracksPersistentHistory }
        set { options.tracksPersistentHistory = newValue }
    }

    /// `lmdb store at /srv/notes/Notes.strata (configuration Cache)`.
    public var description: String {
        let location = type == .inMemory ? "in memory" : "at \(url?.path ?? "(no location)")"
        return "\(type.rawValue) store \(location)" + (configuration.map { " (configuration \($0))" } ?? "")
    }
}
