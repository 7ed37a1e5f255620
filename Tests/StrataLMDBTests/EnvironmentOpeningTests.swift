import Foundation
@testable import StrataLMDB
import StrataTesting
import Testing

@Suite("Opening environments")
struct EnvironmentOpeningTests {
    @Test func createsMissingDirectoryAndFiles() throws {
        let dir = TemporaryDirectory()
        let path = dir.appending("nested/deeper/store")
        let env = try Environment(path: path)
        #expect(FileManager.default.fileExists(atPath: path + "/data.mdb"))
        #expect(FileManager.default.fileExists(atPath: path + "/lock.mdb"))
        #expect(env.path == path)
        #expect(env.staleReadersClearedAtOpen == 0)
        #expect(env.info.maxReaders == 126)
    }

    @Test func pathThatIsAFileIsNotADirectory() throws {
        let dir = TemporaryDirectory()
        let file = dir.appending("plain.txt")
        _ = FileManager.default.createFile(atPath: file, contents: Data("hello".utf8))
        #expect(throws: LMDBError.notADirectory) { try Environment(path: file) }
        // A store below a file: the parent component is the problem.
        #expect(throws: LMDBError.notADirectory) { try Environment(path: file + "/store") }
        #expect(try String(contentsOfFile: file, encoding: .utf8) == "hello")
    }

    @Test func missingStoreWithoutCreateIsNoSuchFile() throws {
        let dir = TemporaryDirectory()
        var configuration = Environment.Configuration()
        configuration.createIfMissing = false
        let path = dir.appending("absent")
        #expect(throws: LMDBError.noSuchFile) { try Environment(path: path, configuration: configuration) }
        #expect(!FileManager.default.fileExists(atPath: path))
        #expect(throws: LMDBError.noSuchFile) { try Environment(path: "") }
    }

    @Test func readOnlyOpenOfADirectoryWithoutStoreWritesNothing() throws {
        let dir = TemporaryDirectory()
        var configuration = Environment.Configuration()
        configuration.readOnly = true
        #expect(throws: LMDBError.noSuchFile) { try Environment(path: dir.path, configuration: configuration) }
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).isEmpty)
    }

    @Test func dataFileThatIsNotLMDBIsInvalid() throws {
        let dir = TemporaryDirectory()
        let data = Data(repeating: 0x42, count: 8192)
        _ = FileManager.default.createFile(atPath: dir.appending("data.mdb"), contents: data)
        #expect(throws: LMDBError.invalid) { try Environment(path: dir.path) }
        // Too short to be a meta page.
        _ = FileManager.default.createFile(atPath: dir.appending("data.mdb"), contents: Data([1, 2, 3]))
        #expect(throws: LMDBError.invalid) { try Environment(path: dir.path) }
        #expect(try Data(contentsOf: URL(fileURLWithPath: dir.appending("data.mdb"))) == Data([1, 2, 3]))
        #expect(!FileManager.default.fileExists(atPath: dir.appending("lock.mdb")))
    }

    @Test func unwritableDirectoryIsRefused() throws {
        // Root ignores permission bits, so use a directory no one can create files in.
        #expect(throws: LMDBError.permissionDenied) { try Environment(path: "/proc/strata-store") }
    }

    @Test func sameStoreTwiceInOneProcessIsAlreadyOpen() throws {
        let dir = TemporaryDirectory()
        var env: Environment? = try Environment(path: dir.path)
        // Another spelling of the same directory is recognised too.
        #expect(throws: LMDBError.alreadyOpen) { try Environment(path: dir.path + "/./") }
        _ = env
        env = nil
        // Once the first one closed, the store opens again.
        let reopened = try Environment(path: dir.path)
        #expect(reopened.info.lastTransactionID == 0)
    }

    @Test func aMovedStoreIsStillOpenButARemovedOnesDirectoryIsFree() throws {
        let dir = TemporaryDirectory()
        // Moved while open: the same data file, so the same store.
        let first = dir.appending("first")
        let moved = dir.appending("moved")
        let env = try Environment(path: first)
        let database = try env.openDatabase(named: nil)
        try env.write { txn throws in try txn.put([1], forKey: [1], in: database) }
        #expect(rename(first, moved) == 0)
        #expect(throws: LMDBError.alreadyOpen) { try Environment(path: moved) }

        _ = env
    }

    @Test func aRemovedStoresInodeNumberReusedByANewDirectoryIsNotAlreadyOpen() throws {
        // A directory removed while its environment is open frees its inode number; a new
        // directory that gets it is another store. Played on the registry with the identity
        // such a reuse gives, since the file system decides when a number comes back.
        let dir = TemporaryDirectory()
        let reused = FileIdentity(device: 1, inode: 424_242)
        let gone = dir.appending("removed")   // never created: the registered directory is gone
        let oldData = try FileIdentity(path: dir.path)   // stands for the leaked environment's data file
        let leaked = try OpenEnvironments.register(reused, path: gone)
        OpenEnvironments.opened(reused, token: leaked, dataFile: oldData)
        defer { OpenEnvironments.unregister(reused, token: leaked) }

        let fresh = dir.appending("fresh")
        #expect(mkdir(fresh, 0o755) == 0)
        let token = try OpenEnvironments.register(reused, path: fresh)
        OpenEnvironments.unregister(reused, token: token)

        // The same number with the leaked environment's data file in it: that store, moved.
        let moved = dir.appending("moved")
        #expect(mkdir(moved, 0o755) == 0)
        #expect(FileManager.default.createFile(atPath: moved + "/data.mdb", contents: Data()))
        let movedData = try FileIdentity(path: moved + "/data.mdb")
        OpenEnvironments.opened(reused, token: leaked, dataFile: movedData)
        #expect(throws: LMDBError.alreadyOpen) { try OpenEnvironments.register(reused, path: moved) }
    }

    @Test func existingStoreKeepsItsData() throws {
        let dir = TemporaryDirectory()
        do {
            let env = try Environment(path: dir.path)
            let db = try env.openDatabase(named: "things", flags: .create)
            try env.write { txn in try txn.put(bytes("kept"), forKey: key(1), in: db) }
        }
        var configuration = Environment.Configuration()
        configuration.readOnly = true
        configuration.createIfMissing = false
        let env = try Environment(path: dir.path, configuration: configuration)
        let db = try env.openDatabase(named: "things")
        #expect(try env.read { try $0.string(forKey: key(1), in: db) } == "kept")
        #expect(throws: LMDBError.readOnly) { try env.write { _ in } }
        #expect(try env.databaseNames() == ["things"])
        // Asking to create a database that exists is fine read-only; one that does not
        // exist is not found, and nothing is created.
        #expect(try env.openDatabase(named: "things", flags: .create) == db)
        #expect(throws: LMDBError.notFound) { try env.openDatabase(named: "missing", flags: .create) }
        #expect(try env.databaseNames() == ["things"])
    }

    @Test func libraryVersionIsChecked() {
        let version = Environment.libraryVersion
        #expect(version.major == 0 && version.minor == 9)
    }

    @Test func mapSizeIsRoundedToPagesAndLargerExistingMapWins() throws {
        let dir = TemporaryDirectory()
        do {
            let env = try openEnvironment(dir) { $0.mapSize = 8 << 20 }
            #expect(env.info.mapSize == 8 << 20)
        }
        let env = try openEnvironment(dir) { $0.mapSize = 1_000_001 }
        #expect(env.info.mapSize == 8 << 20)
        let other = try openEnvironment(dir, "other") { $0.mapSize = 1_000_001 }
        #expect(other.info.mapSize % 4096 == 0)
        #expect(other.info.mapSize >= 1_000_001)
    }

    @Test(arguments: [Environment.Durability.sync, .noMetaSync, .noSync])
    func everyDurabilityCommitsAndSyncs(durability: Environment.Durability) throws {
        let dir = TemporaryDirectory()
        do {
            let env = try openEnvironment(dir) { $0.durability = durability }
            let db = try env.openDatabase(named: "d", flags: .create)
            try env.write { txn in try txn.put(bytes("v"), forKey: key(7), in: db) }
            try env.sync(force: true)
        }
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "d")
        #expect(try env.read { try $0.string(forKey: key(7), in: db) } == "v")
    }

    @Test func fileModeApplies() throws {
        let dir = TemporaryDirectory()
        _ = try openEnvironment(dir) { $0.fileMode = 0o600 }
        let attributes = try FileManager.default.attributesOfItem(atPath: dir.appending("store/data.mdb"))
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
    }
}
