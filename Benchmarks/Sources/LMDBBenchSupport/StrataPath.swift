import StrataLMDB

/// The scenarios through StrataLMDB's public API (the zero-copy `UnsafeRawBufferPointer`
/// overloads, so no bytes are copied that the raw path does not copy).
enum StrataPath {
    struct Store {
        let environment: Environment
        let database: Database
    }

    static func open(at path: String, durability: Environment.Durability) throws -> Store {
        var configuration = Environment.Configuration()
        configuration.mapSize = StoreSettings.mapSize
        configuration.maximumMapSize = StoreSettings.mapSize
        configuration.maxReaders = Int(StoreSettings.maxReaders)
        configuration.maxDatabases = Int(StoreSettings.maxDatabases)
        configuration.fileMode = StoreSettings.fileMode
        configuration.durability = durability
        let environment = try Environment(path: path, configuration: configuration)
        return Store(environment: environment, database: try environment.mainDatabase)
    }

    /// All `keys` in one write transaction, begin to commit.
    static func put(
        _ store: Store, keys: UnsafeBufferPointer<UInt64>, value: UnsafeRawBufferPointer, append: Bool
    ) throws {
        let database = store.database
        let flags: PutFlags = append ? .append : []
        let base = UnsafeRawPointer(keys.baseAddress!)
        let count = keys.count
        try store.environment.write { txn in
            for index in 0..<count {
                let key = UnsafeRawBufferPointer(start: base + index &* Workload.keySize, count: Workload.keySize)
                try txn.put(value, forKey: key, in: database, flags: flags)
            }
        }
    }

    /// One write transaction per key (each commit synced when the store is `.sync`).
    static func putEach(_ store: Store, keys: UnsafeBufferPointer<UInt64>, value: UnsafeRawBufferPointer) throws {
        let database = store.database
        let base = UnsafeRawPointer(keys.baseAddress!)
        for index in 0..<keys.count {
            let key = UnsafeRawBufferPointer(start: base + index &* Workload.keySize, count: Workload.keySize)
            try store.environment.write { txn in
                try txn.put(value, forKey: key, in: database)
            }
        }
    }

    /// One write transaction storing one key.
    @inline(__always)
    static func putOne(_ store: Store, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) throws {
        let database = store.database
        try store.environment.write { txn in
            try txn.put(value, forKey: key, in: database)
        }
    }

    /// Looks up every key in one read transaction; sums each value's size and first byte.
    static func get(_ store: Store, keys: UnsafeBufferPointer<UInt64>) throws -> Int {
        let database = store.database
        let base = UnsafeRawPointer(keys.baseAddress!)
        let count = keys.count
        return try store.environment.read { txn in
            var sum = 0
            for index in 0..<count {
                let key = UnsafeRawBufferPointer(start: base + index &* Workload.keySize, count: Workload.keySize)
                sum &+= try txn.withValue(forKey: key, in: database) { value in
                    guard let value else { return Int.min / 2 }
                    return value.count &+ Int(value.load(fromByteOffset: 0, as: UInt8.self))
                }
            }
            return sum
        }
    }

    /// Walks every entry with a cursor, first to last; sums each value's size and key's last byte.
    static func scan(_ store: Store) throws -> Int {
        try store.environment.read { txn in
            try txn.withCursor(on: store.database) { cursor in
                var sum = 0
                var entry = try cursor.first()
                while let (key, value) = entry {
                    sum &+= value.count &+ Int(key.load(fromByteOffset: Workload.keySize - 1, as: UInt8.self))
                    entry = try cursor.next()
                }
                return sum
            }
        }
    }

    /// The same walk through ``ReadableTransaction/scan(_:range:reverse:_:)``.
    static func scanClosure(_ store: Store) throws -> Int {
        try store.environment.read { txn in
            var sum = 0
            try txn.scan(store.database) { key, value in
                sum &+= value.count &+ Int(key.load(fromByteOffset: Workload.keySize - 1, as: UInt8.self))
                return .continue
            }
            return sum
        }
    }

    static func count(_ store: Store) throws -> Int {
        try store.environment.read { txn in try txn.count(in: store.database) }
    }
}
