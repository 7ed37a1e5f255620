import Foundation
import Strata
import StrataReliability
import StrataTesting
import Testing

/// The short tier of the migration crash runs (`make reliability` runs 500 cycles): a
/// worker process migrates a store of 5,000 books (one stage touching every row, index and
/// link) and is killed at a random moment or at a crash point inside the migration; the
/// store must hold version 1 exactly as it was (and then migrate in this process), or
/// version 2 complete.
@Suite("Migration crash safety", .serialized)
struct MigrationCycleTests {
    /// The run's seed: `STRATA_RELIABILITY_SEED`, else a new one (printed on failure).
    static let seed: UInt64 = ProcessInfo.processInfo.environment["STRATA_RELIABILITY_SEED"].flatMap { UInt64($0) }
        ?? UInt64.random(in: 1...UInt64(UInt32.max))

    @Test("25 migrating workers killed with SIGKILL at random moments and 25 at crash points inside the migration: each store is version 1 intact or version 2 complete")
    func killedMigrations() async throws {
        let directory = TemporaryDirectory()
        var kills = MigrationCycles(directory: directory.url.appendingPathComponent("kill"))
        kills.cycles = 25
        kills.books = 5000
        kills.maximumDelay = 250
        kills.seed = Self.seed
        let killed = await kills.run()
        #expect(killed.problems.isEmpty, "seed \(Self.seed):\n\(killed)")
        #expect(killed.cycles == 25 && killed.intact + killed.migrated == 25, "\(killed)")

        var points = MigrationCycles(directory: directory.url.appendingPathComponent("points"))
        points.cycles = 25
        points.books = 5000
        points.mode = .crashPoints
        points.seed = Self.seed
        let pointed = await points.run()
        #expect(pointed.problems.isEmpty, "seed \(Self.seed):\n\(pointed)")
        #expect(pointed.crashPointHits.values.reduce(0, +) == 25, "\(pointed)")
        // Every crash before the commit leaves version 1; after it, version 2.
        #expect(pointed.migrated == pointed.crashPointHits["after-migration-commit", default: 0], "\(pointed)")
        #expect(pointed.intact == 25 - pointed.migrated)
    }

    @Test("24 staged migrations (a custom stage, run on a copy that replaces the store by rename) killed at random moments or at crash points, the switch's included: each store is version 1 intact or version 2 complete, and no copy outlives the next open")
    func killedStagedMigrations() async throws {
        let directory = TemporaryDirectory()
        for mode in MigrationCycles.Mode.allCases {
            var run = MigrationCycles(directory: directory.url.appendingPathComponent("staged-\(mode.rawValue)"))
            run.cycles = 12
            run.books = 3000
            run.maximumDelay = 300
            run.mode = mode
            run.custom = true
            run.seed = Self.seed
            let report = await run.run()
            #expect(report.problems.isEmpty, "seed \(Self.seed):\n\(report)")
            #expect(report.cycles == 12 && report.intact + report.migrated == 12, "\(report)")
            if mode == .crashPoints {
                #expect(report.crashPointHits.values.reduce(0, +) == 12, "\(report)")
                #expect(report.migrated == report.crashPointHits["after-migration-switch", default: 0], "\(report)")
            }
        }
    }

    /// Starts `strata-reliability migrate-worker --pin` on `store` (version 1) and waits
    /// until it holds its pinned generation; it reads again and exits once `go` exists.
    /// Nil, with an issue recorded, when it ended early.
    static func pinnedReader(of store: URL, releasedBy go: String, in directory: borrowing TemporaryDirectory) async throws -> ChildProcess? {
        let child = try ChildProcess.spawn(
            reliabilityToolPath(), ["migrate-worker", "--store", store.path, "--pin", go],
            outputPath: directory.appending("pin.out"), errorPath: directory.appending("pin.err"))
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, !child.output.contains("pinned") {
            if let ended = child.poll() {
                Issue.record("the pinning child ended early (\(ended)): \(child.errorOutput)")
                return nil
            }
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        return child
    }

    @Test("a staged migration is refused while another process has the store open, which it leaves as it was; it runs once that process is gone")
    func stagedMigrationNeedsTheStoreAlone() async throws {
        let directory = TemporaryDirectory()
        let store = directory.url.appendingPathComponent("library.strata")
        try await MigrationFixture.seed(at: store, books: 500)
        let go = directory.appending("go")
        guard let child = try await Self.pinnedReader(of: store, releasedBy: go, in: directory) else { return }
        let before = try Data(contentsOf: store.appendingPathComponent("data.mdb"))
        let error = await #expect(throws: StrataError.self) { try await MigrationFixture.migrate(at: store, custom: true) }
        #expect(error?.code == .migrationFailed && error?.reason?.contains("another process has the store open") == true, "\(String(describing: error))")
        #expect(try Data(contentsOf: store.appendingPathComponent("data.mdb")) == before)
        _ = FileManager.default.createFile(atPath: go, contents: Data())
        _ = await child.ended(atMost: 60)
        try await MigrationFixture.migrate(at: store, custom: true)
        let finding = await MigrationFixture.audit(at: store, books: 500)
        #expect(finding.version == 2 && finding.problems.isEmpty, "\(finding.problems)")
    }

    @Test("a process holding a pinned query generation of version 1 does not stop a migration in another process, keeps reading its snapshot whole, and its reads past the migration are refused with modelMismatch")
    func migrationUnderAPinnedReader() async throws {
        let directory = TemporaryDirectory()
        let store = directory.url.appendingPathComponent("library.strata")
        try await MigrationFixture.seed(at: store, books: 1000)
        let go = directory.appending("go")
        guard let child = try await Self.pinnedReader(of: store, releasedBy: go, in: directory) else { return }
        #expect(child.output.contains("pinned 1000 1000"), "\(child.output)")

        try await MigrationFixture.migrate(at: store, durability: .noSync)
        let finding = await MigrationFixture.audit(at: store, books: 1000)
        #expect(finding.version == 2 && finding.problems.isEmpty, "\(finding.problems)")

        _ = FileManager.default.createFile(atPath: go, contents: Data())
        let (ended, killed) = await child.ended(atMost: 60)
        #expect(!killed && ended == .exited(0), "\(child.errorOutput)")
        #expect(child.output.contains("read 1000 1000"), "the pinned snapshot still reads every book of version 1: \(child.output)")
        #expect(child.output.contains("fresh modelMismatch"), "a read past the migration is refused, not empty: \(child.output)")
    }
}

extension MigrationCycleTests {
    @Test("the disk fills up (ENOSPC from every write from the Nth on) while a migration commits: a typed migrationFailed, the store left at version 1, which migrates once there is room")
    func fullDiskDuringMigration() async throws {
        guard let shim = IOFaultTests.shim() else { return }
        let directory = TemporaryDirectory()
        let template = directory.url.appendingPathComponent("template.strata")
        try await MigrationFixture.seed(at: template, books: 5000)
        var failures = 0
        for n in 1...6 {
            let store = directory.url.appendingPathComponent("full-\(n).strata")
            try FileManager.default.createDirectory(at: store, withIntermediateDirectories: true)
            try FileManager.default.copyItem(at: template.appendingPathComponent("data.mdb"), to: store.appendingPathComponent("data.mdb"))
            let environment = [
                "LD_PRELOAD": shim, "STRATA_FAULT_OPS": "pwrite,writev,fdatasync", "STRATA_FAULT_AT": String(n), "STRATA_FAULT_ERRNO": "ENOSPC",
                "STRATA_FAULT_MODE": "forever", "STRATA_FAULT_PATH": store.path + "/", "STRATA_CRASH_POINT": "",
            ]
            let child = try ChildProcess.spawn(
                reliabilityToolPath(), ["migrate-worker", "--store", store.path], environment: environment,
                outputPath: directory.appending("full-\(n).out"), errorPath: directory.appending("full-\(n).err"))
            let (ended, killed) = await child.ended(atMost: 60)
            #expect(!killed, "the worker hung at N = \(n)")
            let finding = await MigrationFixture.audit(at: store, books: 5000)
            #expect(finding.problems.isEmpty, "N = \(n): \(finding.problems)")
            if ended == .exited(0) {
                #expect(finding.version == 2 && child.output.contains("migrated"), "N = \(n): \(child.output)")
                continue
            }
            failures += 1
            #expect(ended == .exited(3) && child.output.contains("error migrationFailed"), "N = \(n), \(ended): \(child.output) \(child.errorOutput.suffix(400))")
            #expect(finding.version == 1, "N = \(n): a failed migration must leave version 1")
            try await MigrationFixture.migrate(at: store, durability: .noSync)
            #expect(await MigrationFixture.audit(at: store, books: 5000).version == 2)
        }
        #expect(failures >= 3, "the faults must land inside the migration's writes")
    }
}
