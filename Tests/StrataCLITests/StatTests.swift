import Foundation
import Strata
import StrataLMDB
import StrataTesting
import Testing

@testable import StrataCLI

@Suite("strata stat")
struct StatTests {
    @Test("reports the environment, each named database and its entry count")
    func statOfAStore() throws {
        let directory = TemporaryDirectory()
        let store = directory.appending("store.strata")
        try makeStore(at: store)

        let report = try StoreReport.load(path: store)
        #expect(report.path == store)
        #expect(report.lmdbVersion.hasPrefix("0.9."))
        #expect(report.pageSize == Int(sysconf(Int32(_SC_PAGESIZE))))
        #expect(report.maxReaders == 126)
        #expect(report.mapSize >= 64 << 20)
        #expect(report.lastTransactionID >= 3)
        #expect((report.dataFileSize ?? 0) > 0)
        #expect(report.databases.map(\.name) == ["alpha", "beta", "empty"])
        #expect(report.databases.map(\.entries) == [3, 40, 0])
        #expect(report.readers.isEmpty)

        let text = report.text()
        #expect(text.contains("alpha  3 entries"))
        #expect(text.contains("beta   40 entries"))
        #expect(text.contains("empty  0 entries"))
        #expect(text.contains("Last txn id   \(report.lastTransactionID)"))
        let decoded = try JSONDecoder().decode(StoreReport.self, from: Data(try report.json().utf8))
        #expect(decoded == report)
    }

    @Test("names the model a Strata store holds: its version identifier and hash; a plain LMDB environment has none")
    func statNamesTheModel() async throws {
        let directory = TemporaryDirectory()
        let path = directory.appending("model.strata")
        let model = try ManagedObjectModel(
            entities: [EntityDescription(name: "Note", attributes: [AttributeDescription(name: "title", type: .string)])],
            versionIdentifier: "2026.11")
        do {
            let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
            let store = try await coordinator.addPersistentStore(type: .lmdb, at: URL(fileURLWithPath: path))
            try await coordinator.remove(store)
        }
        let report = try StoreReport.load(path: path)
        #expect(report.modelVersionIdentifier == "2026.11" && report.modelVersionHash == model.versionHash)
        #expect(report.text().contains("Model         version 2026.11, hash \(model.versionHash)"))
        let plain = directory.appending("plain")
        try makeStore(at: plain)
        let none = try StoreReport.load(path: plain)
        #expect(none.modelVersionHash == nil && !none.text().contains("\nModel "))
    }

    @Test("stat writes nothing beyond LMDB's lock file")
    func statIsReadOnly() throws {
        let directory = TemporaryDirectory()
        let store = directory.appending("store.strata")
        try makeStore(at: store)
        let before = tree(store)["data.mdb"]
        try runCommand(["stat", store, "--json"])
        #expect(tree(store)["data.mdb"] == before)
    }

    @Test("named database handles opened without .create stay usable (read-only open)")
    func namedDatabaseHandlesSurviveReadOnlyOpen() throws {
        // What stat relies on: LMDB closes a handle opened in a transaction that aborts,
        // so openDatabase(named:) without `.create` must commit its read transaction
        // (otherwise statistics(of:) fails with EINVAL).
        let directory = TemporaryDirectory()
        let store = directory.appending("store.strata")
        try makeStore(at: store, [("alpha", 2)])
        let environment = try Environment.openExisting(at: store)
        let alpha = try environment.openDatabase(named: "alpha")
        #expect(try environment.statistics(of: alpha).entries == 2)
    }

    @Test("reports the map size the store records, not a default")
    func recordedMapSize() throws {
        let directory = TemporaryDirectory()
        let store = directory.appending("small.strata")
        do {
            var configuration = Environment.Configuration()
            configuration.mapSize = 4 << 20
            let environment = try Environment(path: store, configuration: configuration)
            _ = try environment.openDatabase(named: "alpha", flags: .create)
        }
        #expect(try StoreReport.load(path: store).mapSize == 4 << 20)
    }

    @Test("lists this process's snapshot among the readers")
    func readersInUse() throws {
        let directory = TemporaryDirectory()
        let environment = try Environment(path: directory.appending("store.strata"))
        _ = try environment.openDatabase(named: "alpha", flags: .create)
        let snapshot = try environment.makeSnapshot()
        let report = try StoreReport(environment: environment)
        #expect(report.readers == [.init(processID: getpid(), transactionID: snapshot.transactionID)])
        #expect(report.readersInTransaction == 1)
        #expect(report.text().contains("1 live slot(s), 1 in a transaction"))
        #expect(report.oldestReaderLag == 0 && !report.text().contains("Oldest reader"))
        withExtendedLifetime(snapshot) {}
    }

    @Test("says how many commits behind a pinned snapshot is, and what it costs")
    func readerLag() throws {
        let directory = TemporaryDirectory()
        let environment = try Environment(path: directory.appending("store.strata"))
        let database = try environment.openDatabase(named: "alpha", flags: .create)
        let snapshot = try environment.makeSnapshot()
        for value in 0..<3 as Range<UInt8> {
            try environment.write { txn in try txn.put([value], forKey: [value], in: database) }
        }
        let report = try StoreReport(environment: environment)
        #expect(report.oldestReaderLag == 3)
        #expect(report.text().contains("at transaction \(snapshot.transactionID), 3 commit(s) behind"))
        #expect(report.text().contains("Oldest reader 3 commit(s) behind"))
        #expect(try report.json().contains("\"oldestReaderLag\" : 3"))
        withExtendedLifetime(snapshot) {}
    }

    /// A path that is not a store, and the error stat must give for it.
    struct BadPath: Sendable, CustomTestStringConvertible {
        let name: String
        let kind: StoreError.Kind
        /// Prepares the test directory; returns the path to stat.
        let prepare: @Sendable (String) throws -> String
        var testDescription: String { name }
    }

    static let badPaths: [BadPath] = [
        BadPath(name: "missing", kind: .missing) { $0 + "/nothing.strata" },
        BadPath(name: "missing, nested", kind: .missing) { $0 + "/a/b/c.strata" },
        BadPath(name: "a file", kind: .notADirectory) { directory in
            try Data("not a store".utf8).write(to: URL(fileURLWithPath: directory + "/file"))
            return directory + "/file"
        },
        BadPath(name: "under a file", kind: .notADirectory) { directory in
            try Data("not a store".utf8).write(to: URL(fileURLWithPath: directory + "/file"))
            return directory + "/file/store"
        },
        BadPath(name: "an empty directory", kind: .noDataFile) { directory in
            try FileManager.default.createDirectory(atPath: directory + "/empty", withIntermediateDirectories: false)
            return directory + "/empty"
        },
        BadPath(name: "a data.mdb that is not LMDB", kind: .notLMDB) { directory in
            try FileManager.default.createDirectory(atPath: directory + "/fake", withIntermediateDirectories: false)
            try Data(repeating: 0x41, count: 8192).write(to: URL(fileURLWithPath: directory + "/fake/data.mdb"))
            return directory + "/fake"
        },
        BadPath(name: "an empty data.mdb", kind: .notLMDB) { directory in
            try FileManager.default.createDirectory(atPath: directory + "/zero", withIntermediateDirectories: false)
            _ = FileManager.default.createFile(atPath: directory + "/zero/data.mdb", contents: Data())
            return directory + "/zero"
        },
    ]

    @Test("a path that is not a store fails with a one-line error and creates nothing", arguments: badPaths)
    func statOfABadPath(_ bad: BadPath) throws {
        let directory = TemporaryDirectory()
        let path = try bad.prepare(directory.path)
        let before = tree(directory.path)

        let error = #expect(throws: StoreError.self) { try runCommand(["stat", path]) }
        #expect(error?.kind == bad.kind)
        let message = error.map { StrataCommand.message(for: $0) } ?? ""
        #expect(message.contains(path))
        #expect(!message.contains("\n"))
        #expect(error.map { StrataCommand.exitCode(for: $0) } == .failure)
        #expect(tree(directory.path) == before)
    }
}
