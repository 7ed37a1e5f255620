import ArgumentParser
import Foundation
import StrataReliability

/// `strata-reliability kill-cycles`: the kill -9 durability run.
struct KillCyclesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kill-cycles",
        abstract: "Kill a saving worker at random moments (or at crash points inside save) and audit the store each time.")

    @Option(help: "The number of cycles.")
    var cycles = 200

    @Option(help: "kill (SIGKILL after a random delay) or crash-points (STRATA_CRASH_POINT inside save).")
    var mode = "kill"

    @Option(help: "The run's seed (default: random, printed).")
    var seed: UInt64?

    @Option(help: "The longest delay before the kill, in milliseconds.")
    var maximumDelay = 250

    @Option(help: "A fresh store every this many cycles.")
    var cyclesPerStore = 25

    @Option(help: "Where the stores go (default: a new temporary directory; kept when a problem is found).")
    var directory: String?

    func validate() throws {
        guard KillCycles.Mode(rawValue: mode) != nil else {
            throw ValidationError("--mode must be kill or crash-points, not '\(mode)'")
        }
        guard cycles > 0, maximumDelay >= 0, cyclesPerStore > 0 else {
            throw ValidationError("--cycles and --cycles-per-store must be positive, --maximum-delay not negative")
        }
    }

    func run() async throws {
        let seed = seed ?? UInt64.random(in: 1...UInt64(UInt32.max))
        let where_ = directory.map { URL(fileURLWithPath: $0, isDirectory: true) }
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("strata-kill-cycles-\(seed)")
        var run = KillCycles(directory: where_)
        run.tool = reliabilityToolPath(runningTheTool: true)
        run.cycles = cycles
        run.mode = KillCycles.Mode(rawValue: mode) ?? .kill
        run.seed = seed
        run.maximumDelay = maximumDelay
        run.cyclesPerStore = cyclesPerStore
        say("kill-cycles: \(cycles) cycles, mode \(mode), seed \(seed), stores in \(where_.path)")
        let step = max(cycles / 20, 1)
        let report = await run.run { report in
            if report.cycles % step == 0 { say("  \(report.cycles) cycles, \(report.acknowledgedSaves) acknowledged saves, \(report.problems.count) problems") }
        }
        say(report)
        if !report.problems.isEmpty {
            say("FAILED: reproduce with --seed \(seed); the stores are kept in \(where_.path)")
            throw ExitCode(1)
        }
    }
}

/// Writes a line to standard output at once (`print` buffers when the output is a file,
/// and a long run's log should show its progress).
func say(_ line: CustomStringConvertible) {
    FileHandle.standardOutput.write(Data("\(line)\n".utf8))
}
