import Foundation
import StrataLMDB

/// What `strata stat` reports about a store: environment info, named databases, readers.
struct StoreReport: Codable, Equatable, Sendable {
    /// One named database and its size.
    struct DatabaseSummary: Codable, Equatable, Sendable {
        /// The database's name.
        var name: String
        /// Its number of entries (key/value pairs).
        var entries: Int
        /// Its pages (branch, leaf and overflow).
        var pages: Int
    }

    /// One live reader slot of the lock file.
    struct Reader: Codable, Equatable, Sendable {
        /// The process holding the slot.
        var processID: Int32
        /// The transaction the reader sees, or nil when the slot holds no transaction.
        var transactionID: Int?
    }

    /// The store directory.
    var path: String
    /// The runtime liblmdb version, e.g. `0.9.31`.
    var lmdbVersion: String
    /// The size of `data.mdb` on disk, in bytes.
    var dataFileSize: Int?
    /// The size of the memory map, in bytes (for a store opened by ``load(path:)``, the size
    /// its meta page records).
    var mapSize: Int
    /// The id of the last committed write transaction.
    var lastTransactionID: Int
    /// The page size, in bytes.
    var pageSize: Int
    /// The number of reader slots in the lock file.
    var maxReaders: Int
    /// The reader slots used since the lock file was set up (a high-water mark).
    var readerSlotsEverUsed: Int
    /// The named databases, sorted by name.
    var databases: [DatabaseSummary]
    /// The live reader slots, of every process.
    var readers: [Reader]
    /// The number of live reader slots holding a transaction.
    var readersInTransaction: Int
    /// How many commits behind the last one the oldest reader's snapshot is (0 when no
    /// reader is behind). While it reads, LMDB cannot reuse the pages those commits
    /// freed, so the file grows: a long-lived Strata query generation is such a reader.
    var oldestReaderLag: Int
    /// The version hash of the model the Strata store holds (nil when the environment holds
    /// no Strata store).
    var modelVersionHash: String? = nil
    /// The version identifier of that model (nil when it names none, or the store was
    /// written before stores recorded their model).
    var modelVersionIdentifier: String? = nil
}

extension StoreReport {
    /// Opens the store at `path` read-only and reports on it; writes nothing when it is not a store.
    ///
    /// - Throws: a ``StoreError`` when `path` is not a store or cannot be read.
    static func load(path: String) throws -> StoreReport {
        let environment = try Environment.openExisting(at: path)
        do {
            return try StoreReport(environment: environment)
        } catch {
            throw StoreError(kind: .other, message: "cannot read the store at \(path): \(error)")
        }
    }

    /// Reports on an environment that is already open.
    init(environment: Environment) throws {
        let info = environment.info
        let version = Environment.libraryVersion
        var databases: [DatabaseSummary] = []
        for name in try environment.databaseNames() {
            let database = try environment.openDatabase(named: name)
            let statistics = try environment.statistics(of: database)
            let pages = statistics.branchPages + statistics.leafPages + statistics.overflowPages
            databases.append(DatabaseSummary(name: name, entries: statistics.entries, pages: pages))
        }
        let readers = environment.readers().map { Reader(processID: $0.processID, transactionID: $0.transactionID) }
        let oldest = readers.compactMap(\.transactionID).min()
        self.init(
            path: environment.path,
            lmdbVersion: "\(version.major).\(version.minor).\(version.patch)",
            dataFileSize: FileSystem.dataFileSize(inStore: environment.path),
            mapSize: info.mapSize,
            lastTransactionID: info.lastTransactionID,
            pageSize: environment.statistics.pageSize,
            maxReaders: info.maxReaders,
            readerSlotsEverUsed: info.readerSlotsUsed,
            databases: databases,
            readers: readers,
            readersInTransaction: readers.filter { $0.transactionID != nil }.count,
            oldestReaderLag: oldest.map { max(0, info.lastTransactionID - $0) } ?? 0)
        if databases.contains(where: { $0.name == "strata.metadata" }) {
            let metadata = try environment.openDatabase(named: "strata.metadata")
            try environment.read { txn in
                modelVersionHash = try txn.value(forKey: Array("model".utf8), in: metadata).map { String(decoding: $0, as: UTF8.self) }
                if let description = try txn.value(forKey: Array("modelDescription".utf8), in: metadata),
                   let object = try? JSONSerialization.jsonObject(with: Data(description)) as? [String: Any] {
                    modelVersionIdentifier = object["versionIdentifier"] as? String
                }
            }
        }
    }

    /// The report as aligned, human-readable lines.
    func text() -> String {
        func row(_ label: String, _ value: String) -> String {
            label.padding(toLength: 14, withPad: " ", startingAt: 0) + value
        }
        var lines = [
            row("Store", path),
            row("LMDB library", lmdbVersion),
            row("data.mdb", dataFileSize.map(FileSystem.describeBytes) ?? "unknown"),
            row("Map size", FileSystem.describeBytes(mapSize)),
            row("Last txn id", String(lastTransactionID)),
            row("Page size", "\(pageSize) bytes"),
            row("Max readers", String(maxReaders)),
        ]
        if let modelVersionHash {
            lines.append(row("Model", "version \(modelVersionIdentifier ?? "(none named)"), hash \(modelVersionHash)"))
        }
        lines.append(row("Databases", databases.isEmpty ? "none" : String(databases.count)))
        let nameWidth = databases.map(\.name.count).max() ?? 0
        for database in databases {
            let name = database.name.padding(toLength: nameWidth, withPad: " ", startingAt: 0)
            let entries = database.entries == 1 ? "1 entry" : "\(database.entries) entries"
            let pages = database.pages == 1 ? "1 page" : "\(database.pages) pages"
            lines.append("  \(name)  \(entries), \(pages)")
        }
        lines.append(row("Readers", "\(readers.count) live slot(s), \(readersInTransaction) in a transaction"))
        for reader in readers {
            let behind = reader.transactionID.map { max(0, lastTransactionID - $0) } ?? 0
            let lag = behind == 0 ? "" : ", \(behind) commit(s) behind"
            lines.append("  pid \(reader.processID)  " + (reader.transactionID.map { "at transaction \($0)\(lag)" } ?? "no transaction"))
        }
        if oldestReaderLag > 0 {
            lines.append(row("Oldest reader", "\(oldestReaderLag) commit(s) behind: the pages those commits freed cannot be reused until it ends (a pinned query generation is such a reader)"))
        }
        return lines.joined(separator: "\n")
    }

    /// The report as pretty-printed JSON with sorted keys.
    func json() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(self), as: UTF8.self)
    }
}
