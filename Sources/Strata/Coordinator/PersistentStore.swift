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
    /// The kinds of store: ``lmdb`` and ``inMemory`` here, and server stores that other
    /// products add (StrataPostgres's `.postgres(_:)`).
    ///
    /// A struct rather than an enum, so that a store type of another module (which brings
    /// its driver and its dependencies) is spelled like the built-in ones:
    /// `addPersistentStore(type: .postgres(configuration))`. Compare with `==` (a
    /// `switch` over it needs a `default`).
    public struct StoreType: Sendable, Hashable, CustomStringConvertible {
        enum Kind: Sendable, Hashable {
            case lmdb
            case inMemory
            case server(String)
        }

        let kind: Kind
        /// What opens a server store; nil for the LMDB kinds.
        package let server: (any SQLStoreOpener)?

        private init(kind: Kind, server: (any SQLStoreOpener)?) {
            self.kind = kind
            self.server = server
        }

        /// An LMDB environment in a directory (created when missing).
        public static let lmdb = StoreType(kind: .lmdb, server: nil)
        /// An LMDB environment in a private directory in memory (`/dev/shm` when the
        /// system has one, else the temporary directory), removed when the last
        /// reference to the store goes (after it is removed from its coordinator, or
        /// with the coordinator). Same format, same semantics and the
        /// same limits (map size, readers, key sizes) as ``lmdb``, so tests of an
        /// in-memory store hold for the real one.
        public static let inMemory = StoreType(kind: .inMemory, server: nil)

        /// A store in a database server, opened by `opener`; `name` names the kind
        /// (`postgres`). For modules that add store types.
        package static func server(named name: String, opener: any SQLStoreOpener) -> StoreType {
            StoreType(kind: .server(name), server: opener)
        }

        /// The kind's name: `lmdb`, `inMemory`, `postgres`.
        public var rawValue: String {
            switch kind {
            case .lmdb: "lmdb"
            case .inMemory: "inMemory"
            case .server(let name): name
            }
        }

        /// Whether the store lives in a database server that several processes share
        /// (PostgreSQL), rather than in this machine's files.
        public var isServerStore: Bool { server != nil }

        /// The kind's name, and the server's location for a server store.
        public var description: String {
            server.map { "\(rawValue)(\($0.location))" } ?? rawValue
        }

        /// Same kind, and for server stores the same configuration.
        public static func == (lhs: StoreType, rhs: StoreType) -> Bool {
            lhs.kind == rhs.kind && lhs.server?.identity == rhs.server?.identity
        }

        /// Hashes what `==` compares.
        public func hash(into hasher: inout Hasher) {
            hasher.combine(kind)
            hasher.combine(server?.identity)
        }
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

    /// The store's UUID (recorded in the store: the same across openings, and for a
    /// server store the same in every process).
    public var identifier: UUID {
        switch backend {
        case .lmdb(let file): file.identifier
        case .sql(let store): store.identifier
        }
    }
    /// The kind of store.
    public let type: StoreType
    /// The store directory; nil for an in-memory store and a server store.
    public let url: URL?
    /// The model configuration whose entities the store holds; nil for every entity.
    public let configurationName: String?
    /// How the store was opened.
    public let options: Options
    /// The names of the concrete entities the store can hold.
    public let entityNames: Set<String>

    /// Where the store's rows live.
    enum Backend: Sendable {
        /// An LMDB environment.
        case lmdb(StoreFile)
        /// Tables in a database server.
        case sql(SQLStore)
    }

    let backend: Backend
    private let scratch: ScratchDirectory?

    /// The LMDB store; nil for a server store.
    var file: StoreFile? {
        if case .lmdb(let file) = backend { file } else { nil }
    }

    /// The lightweight migration the store's opening ran, if it ran one: the versions and stages.
    var migration: (from: String, to: String, stages: [String])? {
        switch backend {
        case .lmdb(let file): file.migration
        case .sql(let store): store.migration
        }
    }

    /// The server store; nil for an LMDB one.
    var sql: SQLStore? {
        if case .sql(let store) = backend { store } else { nil }
    }
    /// What the coordinator has logged of the store's state: map growths and whether it
    /// went terminal (``PersistentStoreCoordinator/noteState(of:logger:)``).
    let loggedState = LockedValue(LoggedStoreState())

    init(
        type: StoreType, url: URL?, configurationName: String?, options: Options, model: ManagedObjectModel, logger: Logger
    ) throws(StrataError) {
        self.type = type
        self.configurationName = configurationName
        self.options = options
        let entities = try model.entityNames(inConfiguration: configurationName)
        entityNames = entities
        switch type.kind {
        case .server:
            guard let opener = type.server else {
                throw .incompatibleStore(store: type.rawValue, reason: "a server store type without its driver")
            }
            self.url = nil
            scratch = nil
            // The model guard (SQLLayout.guardFunction) knows this instance's connections by it.
            let driver = try opener.makeDriver(logger: logger, settings: [(SQLLayout.guardSetting, model.versionHash)])
            do {
                backend = .sql(try SQLStore(driver: driver, model: model, entityNames: entities, migration: MigrationSettings(options)))
            } catch {
                driver.close()
                throw error
            }
        case .lmdb:
            guard let url else {
                throw .incompatibleStore(store: "(no location)", reason: "an LMDB store needs a directory URL")
            }
            guard url.isFileURL else {
                throw .incompatibleStore(store: url.absoluteString, reason: "a store's location must be a file URL")
            }
            self.url = url
            scratch = nil
            backend = .lmdb(try StoreFile(
                directory: url, model: model, readOnly: options.readOnly, configuration: options.configuration,
                verifyingPages: options.verifiesPagesAtOpen, migration: MigrationSettings(options)))
        case .inMemory:
            guard !options.readOnly else {
                throw .incompatibleStore(store: "(in memory)", reason: "an in-memory store cannot be read-only: nothing could ever be in it")
            }
            let directory = try ScratchDirectory()
            self.url = nil
            scratch = directory
            backend = .lmdb(try StoreFile(directory: directory.url, model: model, configuration: options.configuration))
        }
    }

    /// Whether the store can hold objects of `entityName`.
    func holds(_ entityName: String) -> Bool { entityNames.contains(entityName) }

    /// The store's location: its directory, `in memory`, or the server's address.
    var location: String {
        switch backend {
        case .lmdb: url?.path ?? "in memory"
        case .sql(let store): store.location
        }
    }

    /// How `entityName` is stored.
    ///
    /// - Throws: ``StrataError/unknownEntity(_:)``.
    func entityStorage(named entityName: String) throws(StrataError) -> EntityStorage {
        switch backend {
        case .lmdb(let file): try file.entityStorage(named: entityName)
        case .sql(let store): try store.entityStorage(named: entityName)
        }
    }

    /// The storage of entity `number`, or nil.
    func entityStorage(numbered number: UInt16) -> EntityStorage? {
        switch backend {
        case .lmdb(let file): file.entityStorage(numbered: number)
        case .sql(let store): store.entityStorage(numbered: number)
        }
    }

    /// The permanent ID of row `key` of `entityName`.
    func objectID(entity entityName: String, key: PrimaryKey) -> ManagedObjectID {
        ManagedObjectID(store: identifier, entityName: entityName, primaryKey: key)
    }

    /// The stored rows of `ids` (permanent IDs of this store), in one read transaction or
    /// one query per table; rows that do not exist are missing.
    func readSnapshots(of ids: [ManagedObjectID]) throws -> [ObjectSnapshot] {
        switch backend {
        case .lmdb(let file): try file.readSnapshots(of: ids)
        case .sql(let store): try store.snapshots(of: ids)
        }
    }

    /// The store's entity and field numbers.
    var schema: StoreSchema {
        switch backend {
        case .lmdb(let file): file.schema
        case .sql(let store): store.schema
        }
    }

    /// Throws ``StrataError/unsupportedByStore(store:feature:)`` for a server store:
    /// `feature` is what it cannot do (yet).
    func requireLMDB(_ feature: @autoclosure () -> String) throws(StrataError) -> StoreFile {
        switch backend {
        case .lmdb(let file): return file
        case .sql(let store): throw .unsupportedByStore(store: store.location, feature: feature())
        }
    }

    /// `PersistentStore(lmdb, /path/Notes.strata, 6F1E…)`.
    public var description: String {
        "PersistentStore(\(type.rawValue), \(location)\(configurationName.map { ", configuration \($0)" } ?? ""), \(identifier))"
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
        ["strata.store": "\(url?.path ?? (sql?.location ?? "(in memory)"))", "strata.store.id": "\(identifier)"]
    }
}
