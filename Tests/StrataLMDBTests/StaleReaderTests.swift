import Foundation
@testable import StrataLMDB
import StrataTesting
import Testing

/// Child processes take reader slots and are killed with SIGKILL, so they never release them.
///
/// LMDB resets the reader table when the first process opens an environment, so stale
/// slots survive only while some other live process keeps the store open: the tests
/// either keep it open themselves or run a second child that does.
@Suite("Stale reader slots of dead processes")
struct StaleReaderTests {
    static func configuration() -> Environment.Configuration {
        var configuration = Environment.Configuration()
        configuration.maxReaders = 2
        configuration.mapSize = 4 << 20
        return configuration
    }

    /// A child that takes `count` reader slots and dies without releasing them.
    static func childHoldsReadersAndDies(path: String, count: Int, after marker: String? = nil) async {
        await #expect(processExitsWith: .signal(SIGKILL)) { [path = path as String, count = count as Int, marker = marker as String?] in
            if let marker {
                while !FileManager.default.fileExists(atPath: marker) { usleep(1_000) }
            }
            let env = try Environment(path: path, configuration: StaleReaderTests.configuration())
            let snapshots = try (0..<count).map { _ in try env.makeSnapshot() }
            withExtendedLifetime(snapshots) { _ = kill(getpid(), SIGKILL) }
        }
    }

    /// A child that keeps the store open (so LMDB does not reset the reader table) until
    /// `release` exists, after announcing itself through `ready`.
    static func childKeepsStoreOpen(path: String, ready: String, release: String) async {
        await #expect(processExitsWith: .success) { [path = path as String, ready = ready as String, release = release as String] in
            let env = try Environment(path: path, configuration: StaleReaderTests.configuration())
            _ = FileManager.default.createFile(atPath: ready, contents: nil)
            let deadline = Date().addingTimeInterval(60)
            while !FileManager.default.fileExists(atPath: release), Date() < deadline { usleep(1_000) }
            withExtendedLifetime(env) {}
        }
    }

    @Test func staleSlotsAreClearedAtOpen() async throws {
        // Timeline:
        //   holder child: open ─ touch(ready) ───────────────────────────── wait(release) ─ exit 0
        //   dying child:            wait(ready) ─ 2 snapshots ─ SIGKILL
        //   this process:                                        open: clears 2 ─ touch(release)
        let dir = TemporaryDirectory()
        let store = dir.appending("store")
        do {
            let env = try Environment(path: store, configuration: Self.configuration())
            let db = try env.openDatabase(named: "t", flags: .create)
            try env.write { txn in try txn.put(bytes("x"), forKey: key(1), in: db) }
        }
        let ready = dir.appending("ready"), release = dir.appending("release")
        async let holder: Void = Self.childKeepsStoreOpen(path: store, ready: ready, release: release)
        await Self.childHoldsReadersAndDies(path: store, count: 2, after: ready)

        let env = try Environment(path: store, configuration: Self.configuration())
        #expect(env.staleReadersClearedAtOpen == 2)
        #expect(env.readers().allSatisfy { $0.processID != 0 && $0.transactionID == nil })
        // Both slots are usable again.
        let a = try env.makeSnapshot(), b = try env.makeSnapshot()
        #expect(a.transactionID == b.transactionID)
        _ = FileManager.default.createFile(atPath: release, contents: nil)
        await holder
    }

    @Test func readersFullClearsStaleSlotsOnce() async throws {
        let dir = TemporaryDirectory()
        let env = try Environment(path: dir.appending("store"), configuration: Self.configuration())
        let db = try env.openDatabase(named: "t", flags: .create)
        try env.write { txn in try txn.put(bytes("x"), forKey: key(1), in: db) }
        await Self.childHoldsReadersAndDies(path: dir.appending("store"), count: 2)
        #expect(env.readers().filter { $0.transactionID != nil }.count == 2, "the dead child's slots")
        // Every slot belongs to the dead child; the read clears them and goes on.
        #expect(try env.read { try $0.string(forKey: key(1), in: db) } == "x")
        #expect(try env.clearStaleReaders() == 0)
    }
}
