// strata-bench: the Strata scenarios (bulk import, fetch all, indexed queries, write
// contention, readers under a writer, parent–child saves, upserts, a migration) measured through
// Strata, raw liblmdb and GRDB in one process, printed as a markdown table.
//
//   swift run -c release strata-bench [--quick] [--only SCENARIO] [--rounds N] [--markdown-out FILE] ...
//
// Progress goes to standard error, the table to standard output. See --help and
// Benchmarks/README.md.

import Foundation
import StrataBenchSupport

/// Writes a line to standard error at once.
func progress(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}

let arguments = Array(CommandLine.arguments.dropFirst())

// The hidden child mode: one fetch in a fresh process, for its peak memory.
if arguments.first == "--child" {
    guard let request = MemoryProbe.Request(arguments: Array(arguments.dropFirst())) else {
        progress("strata-bench: --child needs: variant side path count checksum batch-size")
        exit(2)
    }
    do {
        print(try MemoryProbe.run(request).line)
        exit(0)
    } catch {
        progress("strata-bench --child: \(error)")
        exit(1)
    }
}

let options = CommandLineOptions.parse(arguments)

/// Runs one fetch in a child process (this executable with `--child`) and reads back
/// what it measured.
///
/// The child is started through `/bin/sh`, which forks it (the command is not the
/// shell's last, so the shell cannot exec it in place): Foundation's `Process` spawns
/// with `vfork`, and Linux then hands the spawner's peak RSS on to the child's
/// `ru_maxrss`; a forked child of the small shell starts from the shell's.
func runChild(_ request: MemoryProbe.Request) throws -> MemoryProbe.Outcome {
    let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/bin/sh")
    process.arguments = ["-c", #""$0" "$@"; exit $?"#, executable, "--child"] + request.arguments
    let output = Pipe()
    process.standardOutput = output
    try process.run()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    let text = String(decoding: data, as: UTF8.self)
    guard process.terminationStatus == 0, let outcome = MemoryProbe.Outcome(output: text) else {
        throw BenchFailure("the child measuring \(request.variant.rawValue) via \(request.side.rawValue) failed (status \(process.terminationStatus)): \(text)")
    }
    return outcome
}

let started = now()
let loadAtStart = Machine.loadAverage
progress("strata-bench: \(Machine.summary); stores under \(Machine.temporaryDirectory)")
var probe: ((MemoryProbe.Request) throws -> MemoryProbe.Outcome)?
if options.measuresMemory { probe = { request in try runChild(request) } }
let run = BenchRun(
    config: options.config,
    log: { line in progress(String(format: "[%6.1f s] ", seconds(since: started)) as String + line) },
    probe: probe)
do {
    try run.run()
} catch {
    progress("strata-bench: a scenario failed: \(error)")
    exit(1)
}
let elapsed = seconds(since: started)

let config = options.config
var preamble = [
    "Machine: \(Machine.summary); \(LibraryVersions.summary). Stores in fresh directories under `\(Machine.temporaryDirectory)`.",
    "Durability: **sync off** (`MDB_NOSYNC` / Strata `.noSync` / GRDB WAL `synchronous = OFF`) for scenarios 1, 2, 3, 5, 6, 7, 8; "
        + "scenario 4 runs sync off and **sync on** (LMDB's default fsync at each commit / Strata `.sync` / GRDB WAL `synchronous = FULL`).",
    "Timings: median of \(config.rounds) measured rounds after one warm-up, the bindings' order reversed every other round. "
        + "Contention and reader windows: one window each (\(config.contentionSeconds) s and \(config.readerSeconds) s).",
    "Sizes: bulk import \(config.importSizes.map { formatCount(Double($0)) }.joined(separator: " and ")); "
        + "the read scenarios' store \(formatCount(Double(config.storeSize))) objects; \(config.queries) queries per round; "
        + "\(formatCount(Double(config.parentChildChanges))) parent–child changes; "
        + "\(formatCount(Double(config.upserts))) upserts, \(formatCount(Double(config.upsertBatch))) per save; "
        + "a migration of \(formatCount(Double(config.migrationRows))) rows.",
    "The run took \(Int(elapsed.rounded())) s\(config.quick ? " (--quick)" : ""); 1-minute load average \(loadAtStart) at the start, "
        + "\(Machine.loadAverage) at the end (the machine's other work shares its \(ProcessInfo.processInfo.activeProcessorCount) cores).",
]
if !config.only.isEmpty { preamble.append("Only: \(config.only.joined(separator: ", ")).") }
let markdown = run.report.markdown(title: "Strata benchmarks", preamble: preamble)
print(markdown, terminator: "")
if let path = options.markdownOut {
    do {
        try markdown.write(toFile: path, atomically: true, encoding: .utf8)
        progress("strata-bench: table written to \(path)")
    } catch {
        progress("strata-bench: cannot write \(path): \(error)")
        exit(1)
    }
}
progress(String(format: "strata-bench: done in %.0f s", elapsed))
