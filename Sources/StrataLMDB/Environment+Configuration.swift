#if canImport(Glibc)
import Glibc
#endif

extension Environment {
    /// How an ``Environment`` is opened.
    ///
    /// ```swift
    /// var configuration = Environment.Configuration()
    /// configuration.mapSize = 256 << 20
    /// configuration.durability = .noMetaSync
    /// let env = try Environment(path: "/var/lib/app/store", configuration: configuration)
    /// ```
    public struct Configuration: Sendable, Hashable {
        /// The initial size of the memory map, in bytes (rounded up to the page size).
        ///
        /// An existing store whose recorded map is larger (it grew) keeps its larger size. Writes
        /// grow the map geometrically when it fills (see ``Environment/write(_:)``), up
        /// to ``maximumMapSize``. Default: 64 MiB.
        public var mapSize: Int = 64 << 20

        /// The largest size the map may grow to. Default: 1 TiB (address space only:
        /// the file grows with the data, not with the map).
        public var maximumMapSize: Int = 1 << 40

        /// The number of reader slots in the lock file (`mdb_env_set_maxreaders`).
        /// Every open read transaction and every ``ReadSnapshot`` holds one. Default: 126.
        public var maxReaders: Int = 126

        /// The number of named databases the environment can hold
        /// (`mdb_env_set_maxdbs`). Default: 64.
        public var maxDatabases: Int = 64

        /// What a commit waits for. Default: ``Durability/sync``.
        public var durability: Durability = .sync

        /// The permission bits of files the environment creates. Default: `0o644`.
        public var fileMode: mode_t = 0o644

        /// Create the directory when it does not exist. Default: true.
        public var createIfMissing: Bool = true

        /// Open the environment read-only (`MDB_RDONLY`): writes throw ``LMDBError/readOnly``.
        public var readOnly: Bool = false

        /// How long a write that must grow the map waits for this process's open read
        /// transactions to end before it gives up with ``LMDBError/mapFull``. Long-lived
        /// ``ReadSnapshot``s are never waited for. Default: 5 seconds.
        public var mapGrowthReaderTimeout: Duration = .seconds(5)

        /// Creates the default configuration.
        public init() {}
    }

    /// The durability of a commit.
    ///
    /// See lmdb.h, `MDB_NOSYNC` and `MDB_NOMETASYNC`.
    public enum Durability: Sendable, Hashable {
        /// Flush data and meta pages at every commit: a committed transaction survives a
        /// system crash.
        case sync
        /// Flush data pages but not the meta page (`MDB_NOMETASYNC`): a system crash may
        /// lose the last transaction, never the store's integrity.
        case noMetaSync
        /// Do not flush at commit (`MDB_NOSYNC`): a system crash may lose the
        /// transactions since the last ``Environment/sync(force:)``; a process crash loses
        /// nothing.
        case noSync
    }
}
