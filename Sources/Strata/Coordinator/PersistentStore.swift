import Foundation
import Logging
import StrataLMDB
internal import StrataLocks

/// One store a ``PersistentStoreCoordinator`` reads and writes: an LMDB environment in a
/// directory, or an in-memory one that behaves exactly the same.
///
/// Added with ``PersistentStoreCoordinator/addPersistentStore(type:configuration:at:options:)``;
/// a `Sendable` reference you pass back to ``PersistentStoreCoordinator/remove(_:)``
/// and ``ManagedObjectContext/assign(_:to:)``.
public final class PersistentStore: Sendable, Hashable, CustomStringConvertible {
    /// The kinds of store.
    public enum StoreType: String, Sendable, Hashable {
        /// An LMDB environment in a directory (created when missing).
        case lmdb
        /// An LMDB environment in a private directory in memory (`/dev/shm` when the
        /// system has one, else the temporary directory), removed when the last
        /// reference to the store goes (after it is removed from its coordinator, or
        /// with the coordinator). Same format, same semantics and the
        /// same limits (map size, readers, key sizes) as ``lmdb``, so tests of an
        /// in-memory store hold for the real one.
        case inMemory
    }

    /// How a store is opened.
    public struct Options: Sendable, Hashable {
        /// When a commit is durable.
        public enum Durability: Sendable, Hashable {
            /// Every commit is flushed to disk before a save returns.
            case sync
            /// Commits are flushed, but the meta page is not: a crash may lose the last
            /// commit, never consistency.
            case noMetaSync
            /// Nothing is flushed by a commit: a system crash may lose recent commits.
            case noSync
        }

        /// The initial size of the memory map; it grows as needed up to ``maximumMapSize``.
        public var mapSize = 64 << 20
        /// The largest the map may grow to.
        public var maximumMapSize = 1 << 40
        /// The most read transactions (fetches in flight, pinned query generations) at once.
        public var maxReaders = 126
        /// When commits are durable.
        public var durability = Durability.sync
        /// Whether the store is only read; a save touching it fails.
        public var readOnly = false
        /// Whether opening the store first reads every page its trees reach (without
        /// LMDB) and refuses a damaged one with ``StrataError/corruptStore(store:reason:)``.
        ///
        /// LMDB trusts its pages: a page whose structure was damaged (by a disk, a copy
        /// tool, a bit flip) can crash the process when a fetch meets it. Turn this on for
        /// stores of unknown provenance (restored backups, imported files). It costs about
        /// one `pread` per page of the store's trees at open; a truncated file and damaged
        /// meta pages are refused at every open anyway.
        public var verifiesPagesAtOpen = false

        /// Whether opening a store written with another version of the model migrates it
        /// (Core Data's `NSMigratePersistentStoresAutomaticallyOption`); true by default.
        /// When false, such a store is refused with
        /// ``StrataError/modelMismatch(store:storeHash:modelHash:changes:)``, listing what
        /// a migration would change. See <doc:MigratingYourData>.
        public var shouldMigrateStoreAutomatically = true
        /// Whether a migration may infer a lightweight stage from the model the store
        /// recorded when it was written, for a store whose version ``migrationPlan`` does
        /// not list (Core Data's `NSInferMappingModelAutomaticallyOption`); true by default.
        /// The app then needs no code of its old models for lightweight changes.
        public var shouldInferMappingModelAutomatically = true
        /// The versions of the model and the stages between them, for stores of versions
        /// that need a declared stage (or that recorded no model); nil by default.
        public var migrationPlan: MigrationPlan?
        /// Where a migration reports its progress; nil by default.
        public var migrationProgress: MigrationProgressHandler?
        /// Whether every save that reaches the store records a transaction of persistent
        /// history in the same LMDB transaction as its data (Core Data's
        /// `NSPersistentHistoryTrackingKey`); false by default here, true in a
        /// ``PersistentContainer``'s default description. Off, it costs nothing.
        public var tracksPersistentHistory = false
        /// How much history a tracking store keeps: older transactions are deleted as
        /// saves record new ones. ``PersistentHistoryRetention/default``: 7 days, at most
        /// 1,000,000 transactions.
        public var historyRetention = PersistentHistoryRetention.default

        /// The defaults: 64 MiB growing to 1 TiB, 126 readers, durable commits, writable,
        /// migrating stores of earlier model versions with inferred lightweight stages.
        public init() {}

        var configuration: Environment.Configuration {
            var configuration = Environment.Configuration()
            configuration.mapSize = mapSize
            configuration.maximumMapSize = max(mapSize, maximumMapSize)
            configuration.maxReaders = maxReaders
            configuration.durability = switch durability {
            case .sync: .sync
            case .noMetaSync: .noMetaSync
            case .noSync: .noSync
            }
            configuration.readOnly = readOnly
            return configuration
        }
    }

    /// The store's UUID (recorded in the store: the same across openings).
    public var identifier: UUID { file.identifier }
    /// The kind of store.
    public let type: StoreType
    /// The store directory; nil for an in-memory store.
    public let url: URL?
    /// The model configuration whose entities the store holds; nil for every entity.
    public let configurationName: String?
    /// How the store was opened.
    public let options: Options
    /// The names of the concrete entities the store can hold.
    public let entityNames: Set<String>

    let file: StoreFile
    private let scratch: ScratchDirectory?
    /// What the coordinator has logged of the store's state: map growths and whether it
    /// went terminal (``PersistentStoreCoordinator/noteState(of:logger:)``).
    let loggedState = LockedValue(LoggedStoreState())

    init(type: StoreType, url: URL?, configurationName: String?, options: Options, model: ManagedObjectModel) throws(StrataError) {
        self.type = type
        self.configurationName = configurationName
        self.options = options
        let entities = try model.entityNames(inConfiguration: configurationName)
        entityNames = entities
        switch type {
        case .lmdb:
            guard let url else {
                throw .incompatibleStore(store: "(no location)", reason: "an LMDB store needs a directory URL")
            }
            guard url.isFileURL else {
                throw .incompatibleStore(store: url.absoluteString, reason: "a store's location must be a file URL")
            }
            self.url = url
            scratch = nil
            file = try StoreFile(
                directory: url, model: model, readOnly: options.readOnly, configuration: options.configuration,
                verifyingPages: options.verifiesPagesAtOpen, migration: MigrationSettings(options))
        case .inMemory:
            guard !options.readOnly else {
                throw .incompatibleStore(store: "(in memory)", reason: "an in-memory store cannot be read-only: nothing could ever be in it")
            }
            let directory = try ScratchDirectory()
            self.url = nil
            scratch = directory
            file = try StoreFile(directory: directory.url, model: model, configuration: options.configuration)
        }
    }

    /// Whether the store can hold objects of `entityName`.
    func holds(_ entityName: String) -> Bool { entityNames.contains(entityName) }

    /// `PersistentStore(lmdb, /path/Notes.strata, 6F1E…)`.
    public var description: String {
        "PersistentStore(\(type.rawValue), \(url?.path ?? "in memory")\(configurationName.map { ", configuration \($0)" } ?? ""), \(identifier))"
    }

    /// Stores are equal only to themselves.
    public static func == (lhs: PersistentStore, rhs: PersistentStore) -> Bool { lhs === rhs }

    /// Hashes the store's identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}

/// The private directory of an in-memory store, removed when the store goes away.
private final class ScratchDirectory: Sendable {
    let url: URL

    init() throws(StrataError) {
        let shm = URL(fileURLWithPath: "/dev/shm", isDirectory: true)
        let base = FileManager.default.isWritableFile(atPath: shm.path) ? shm : FileManager.default.temporaryDirectory
        url = base.appendingPathComponent("strata-in-memory-\(UUID().uuidString)", isDirectory: true)
        do {
            try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        } catch {
            throw .incompatibleStore(store: url.path, reason: "the in-memory store's directory cannot be made: \(error.localizedDescription)")
        }
    }

    deinit {
        // The environment's files stay valid while open (Linux keeps unlinked files).
        try? FileManager.default.removeItem(at: url)
    }
}

/// What a coordinator has logged of a store's state.
struct LoggedStoreState {
    /// The environment's map growths already logged.
    var mapGrowths = 0
    /// Whether the terminal state was logged.
    var terminal = false
}

extension PersistentStore {
    /// The store's path and identifier as log metadata.
    var logMetadata: Logger.Metadata {
        ["strata.store": "\(url?.path ?? "(in memory)")", "strata.store.id": "\(identifier)"]
    }
}
