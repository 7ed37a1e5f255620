import ArgumentParser
import Foundation
import Strata
import StrataReliability

/// `strata-reliability migrate-worker`: opens a version 1 store of the migration fixture
/// with version 2 (migrating it) and prints `migrated`; or, with `--pin`, holds a pinned
/// query generation of the version 1 store while another process migrates it.
struct MigrateWorkerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate-worker",
        abstract: "Migrate a store of the migration fixture (a child of the migration runs), or pin it while another process does.")

    @Option(help: "The store directory.")
    var store: String

    @Option(help: "With --pin: the file whose appearance means 'read the pinned generation again and exit'.")
    var pin: String?

    @Flag(help: "Migrate through the fixture's custom stage (a staged migration on a copy) instead of the inferred one.")
    var custom = false

    func run() async throws {
        let url = URL(fileURLWithPath: store, isDirectory: true)
        guard let pin else {
            say("start")
            do {
                try await MigrationFixture.migrate(at: url, custom: custom)
            } catch let error as StrataError {
                say("error \(error.code) \(error)")
                throw ExitCode(3)
            }
            say("migrated")
            return
        }
        // Version 1, never migrating: a reader of the old model in another process.
        let coordinator = PersistentStoreCoordinator(managedObjectModel: MigrationFixture.version1)
        var options = PersistentStore.Options()
        options.shouldMigrateStoreAutomatically = false
        try await coordinator.addPersistentStore(at: url, options: options)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "pinned")
        /// The books the pinned generation holds, and how many have their seeded titles.
        let read: @Sendable (isolated ManagedObjectContext) throws -> (Int, Int) = { context in
            var request = FetchRequest<ManagedObject>(entityName: "Book")
            request.sortDescriptors = [FetchSortDescriptor(key: "serial")]
            let books = try context.fetch(request)
            let titled = try books.enumerated().filter { try $0.element.value(forKey: "title") as? String == "book-\($0.offset)" }.count
            // No reset() or refreshAllObjects(): either moves the context to the newest generation.
            return (books.count, titled)
        }
        let (count, titled) = try await context.perform { context in
            try context.setQueryGenerationFrom(.current)
            return try read(context)
        }
        say("pinned \(count) \(titled)")
        while !FileManager.default.fileExists(atPath: pin) { try await Task.sleep(nanoseconds: 20_000_000) }
        let (after, titledAfter) = try await context.perform { context in try read(context) }
        say("read \(after) \(titledAfter)")
        // An unpinned read sees the migrated store: refused, not an empty result.
        let fresh = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "fresh")
        let outcome = await fresh.perform { context -> String in
            do {
                return "count \(try context.count(for: FetchRequest<ManagedObject>(entityName: "Book")))"
            } catch let error as StrataError {
                return "\(error.code)"
            } catch {
                return "\(error)"
            }
        }
        say("fresh \(outcome)")
    }
}

/// `strata-reliability migration-cycles`: the migration crash run.
struct MigrationCyclesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migration-cycles",
        abstract: "Kill a migrating worker at random moments (or at crash points inside the migration) and audit the store each time.")

    @Option(help: "The number of cycles.")
    var cycles = 500

    @Option(help: "kill (SIGKILL after a random delay), crash-points (STRATA_CRASH_POINT inside the migration) or both (alternating).")
    var mode = "both"

    @Option(help: "The run's seed (default: random, printed).")
    var seed: UInt64?

    @Option(help: "The books of the migrated store.")
    var books = 20_000

    @Flag(help: "Migrate through a custom stage (a staged migration on a copy, switched by rename) instead of one transaction.")
    var custom = false

    @Option(help: "Where the stores go (default: a new temporary directory; kept when a problem is found).")
    var directory: String?

    func validate() throws {
        guard mode == "both" || MigrationCycles.Mode(rawValue: mode) != nil else {
            throw ValidationError("--mode must be kill, crash-points or both, not '\(mode)'")
        }
        guard cycles > 0, books > 0 else { throw ValidationError("--cycles and --books must be positive") }
    }

    func run() async throws {
        let seed = seed ?? UInt64.random(in: 1...UInt64(UInt32.max))
        let modes: [(MigrationCycles.Mode, Int)] = switch mode {
        case "kill": [(.kill, cycles)]
        case "crash-points": [(.crashPoints, cycles)]
        default: [(.kill, cycles - cycles / 2), (.crashPoints, cycles / 2)]
        }
        var failed = false
        for (runMode, count) in modes where count > 0 {
            let where_ = directory.map { URL(fileURLWithPath: $0, isDirectory: true).appendingPathComponent(runMode.rawValue) }
                ?? FileManager.default.temporaryDirectory.appendingPathComponent("strata-migration-cycles-\(seed)-\(runMode.rawValue)")
            var run = MigrationCycles(directory: where_)
            run.tool = reliabilityToolPath(runningTheTool: true)
            run.cycles = count
            run.mode = runMode
            run.seed = seed
            run.books = books
            run.custom = custom
            say("migration-cycles: \(count) cycles, mode \(runMode.rawValue)\(custom ? ", custom stage" : ""), seed \(seed), \(books) books, stores in \(where_.path)")
            let step = max(count / 10, 1)
            let report = await run.run { report in
                if report.cycles % step == 0 { say("  \(report.cycles) cycles, \(report.problems.count) problems") }
            }
            say(report)
            if !report.problems.isEmpty {
                say("FAILED: reproduce with --seed \(seed); the stores are kept in \(where_.path)")
                failed = true
            }
        }
        if failed { throw ExitCode(1) }
    }
}
