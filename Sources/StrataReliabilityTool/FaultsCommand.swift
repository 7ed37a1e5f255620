import ArgumentParser
import Foundation
import StrataReliability

/// `strata-reliability faults`: the I/O fault runs.
struct FaultsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "faults",
        abstract: "Fail the Nth write or sync call of a saving worker (LD_PRELOAD shim), N = 1, 2, ..., and audit the store each time.")

    @Option(help: "The fault shim (default: STRATA_FAULT_SHIM, else .build-faults/libstrata_faults.so; `make faults` builds it).")
    var shim: String?

    @Option(help: "Comma list of write, pwrite, writev, pwritev, fsync, fdatasync, msync.")
    var operations = "write,pwrite,writev,pwritev,fsync,fdatasync"

    @Option(help: "Comma list of EIO, ENOSPC.")
    var errnos = "EIO,ENOSPC"

    @Option(help: "Comma list of once, forever, short.")
    var modes = "once,forever"

    @Option(help: "every (N = 1, 2, 3, ...) or sparse (N = 1, 2, 3, 5, 8, ...), up to the first run without a fault.")
    var steps = "every"

    @Option(help: "Saves in the store before the faulted worker starts.")
    var baselineSaves = 4

    @Option(help: "Saves each writer of a faulted worker makes.")
    var saves = 12

    @Option(help: "Writers per worker (more than one: saves meet in group commits).")
    var writers = 1

    @Option(help: "The save plan's seed.")
    var seed: UInt64 = 1

    @Option(help: "The workers' durability: sync, noMetaSync or noSync.")
    var durability = "sync"

    @Option(help: "Where the stores go (default: a new temporary directory; kept when a problem is found).")
    var directory: String?

    func validate() throws {
        _ = try parsed()
        guard FaultRuns.Steps(rawValue: steps) != nil else { throw ValidationError("--steps must be every or sparse, not '\(steps)'") }
        guard ["sync", "noMetaSync", "noSync"].contains(durability) else {
            throw ValidationError("--durability must be sync, noMetaSync or noSync, not '\(durability)'")
        }
        guard (1...16).contains(writers) else { throw ValidationError("--writers must be 1 to 16") }
        guard baselineSaves > 0, saves > 0 else { throw ValidationError("--baseline-saves and --saves must be positive") }
    }

    private func parsed() throws -> ([FaultRuns.Operation], [FaultRuns.FaultErrno], [FaultRuns.Mode]) {
        func list<T: RawRepresentable>(_ text: String, _ option: String) throws -> [T] where T.RawValue == String {
            try text.split(separator: ",").map {
                guard let value = T(rawValue: String($0)) else { throw ValidationError("--\(option): unknown value '\($0)'") }
                return value
            }
        }
        return (try list(operations, "operations"), try list(errnos, "errnos"), try list(modes, "modes"))
    }

    func run() async throws {
        let (operations, errnos, modes) = try parsed()
        let where_ = directory.map { URL(fileURLWithPath: $0, isDirectory: true) }
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("strata-faults-\(UUID().uuidString.prefix(8))")
        let tool = reliabilityToolPath(runningTheTool: true)
        var run = FaultRuns(directory: where_, shim: shim ?? FaultRuns.defaultShimPath(tool: tool))
        run.tool = tool
        run.operations = operations
        run.errnos = errnos
        run.modes = modes
        run.steps = FaultRuns.Steps(rawValue: steps) ?? .every
        run.baselineSaves = baselineSaves
        run.saves = saves
        run.seed = seed
        run.durability = durability
        run.writers = writers
        say("faults: \(operations.count * errnos.count * modes.count) combinations, steps \(steps), \(saves) saves per writer, \(writers) writer(s), durability \(durability), seed \(seed), stores in \(where_.path)")
        let report = await run.run { report in
            if let last = report.combinations.last, let figures = report.figures[last] {
                say("  \(last): N up to \(figures.tried.last ?? 0), \(figures.faults) faults, \(report.problems.count) problems so far")
            }
        }
        say(report)
        if !report.problems.isEmpty {
            say("FAILED: the stores, worker output and shim reports are kept in \(where_.path)")
            throw ExitCode(1)
        }
    }
}
