// lmdb-ratios: runs every scenario through StrataLMDB and through LMDB's C API in one
// process, interleaved, for several rounds, and prints the median wall time of each and
// the ratio StrataLMDB / raw C.
//
//   swift run -c release lmdb-ratios [--rounds N] [--entries N] [--commits N]
//                                    [--only SUBSTRING] [--check [LIMIT]] [--sequential-sync] [--verbose]

import Foundation
import LMDBBenchSupport

struct Options {
    var rounds = 7
    var entries = 1_000_000
    var commits = 10_000
    var only: String?
    var limit: Double?
    var verbose = false
    var sequentialSync = false

    static let usage = """
        usage: lmdb-ratios [--rounds N] [--entries N] [--commits N] [--only SUBSTRING] [--check [LIMIT]]
                           [--sequential-sync] [--verbose]
          --rounds N     measured rounds per scenario and binding (default 7; one warm-up round is added)
          --entries N    entries of the put/get/scan scenarios (default 1000000)
          --commits N    transactions of the sync-commit scenario (default 10000)
          --only S       run only the scenarios whose name contains S
          --check [L]    exit 1 when a ratio exceeds L (default 1.10)
          --sequential-sync
                         run the sync-commit scenario as two back-to-back batches (as the benchmark
                         suite does) instead of alternating the bindings commit by commit
          --verbose      print every measurement
        """

    init(arguments: [String]) {
        var iterator = arguments.makeIterator()
        func number(_ flag: String) -> Int {
            guard let text = iterator.next(), let value = Int(text), value > 0 else {
                Options.fail("\(flag) needs a positive integer")
            }
            return value
        }
        while let argument = iterator.next() {
            switch argument {
            case "--rounds": rounds = number(argument)
            case "--entries": entries = number(argument)
            case "--commits": commits = number(argument)
            case "--only":
                guard let text = iterator.next() else { Options.fail("--only needs a value") }
                only = text
            case "--check": limit = 1.10
            case "--verbose", "-v": verbose = true
            case "--sequential-sync": sequentialSync = true
            case "--help", "-h":
                say(Options.usage)
                exit(0)
            default:
                if limit != nil, let value = Double(argument), value > 0 {
                    limit = value
                } else {
                    Options.fail("unknown argument \(argument)")
                }
            }
        }
    }

    static func fail(_ message: String) -> Never {
        FileHandle.standardError.write(Data("lmdb-ratios: \(message)\n\(usage)\n".utf8))
        exit(2)
    }
}

/// Writes a line to standard output at once (progress stays visible when piped).
func say(_ text: String = "") {
    FileHandle.standardOutput.write(Data((text + "\n").utf8))
}

/// One timed run; returns its measured wall time in seconds.
func measure(_ body: (Stopwatch) throws -> Void) throws -> Double {
    var start: UInt64 = 0
    var stop: UInt64 = 0
    try withUnsafeMutablePointer(to: &start) { startPointer in
        try withUnsafeMutablePointer(to: &stop) { stopPointer in
            let stopwatch = Stopwatch(
                start: { startPointer.pointee = monotonicNanoseconds() },
                stop: { stopPointer.pointee = monotonicNanoseconds() })
            try body(stopwatch)
        }
    }
    precondition(stop >= start && start > 0, "the stopwatch was not started and stopped")
    return Double(stop - start) / 1e9
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    let middle = sorted.count / 2
    return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

func format(_ seconds: Double) -> String {
    seconds >= 1 ? String(format: "%.3f s", seconds) : String(format: "%.1f ms", seconds * 1000)
}

func pad(_ text: String, _ width: Int, right: Bool = false) -> String {
    let padding = String(repeating: " ", count: max(0, width - text.count))
    return right ? padding + text : text + padding
}

let options = Options(arguments: Array(CommandLine.arguments.dropFirst()))
let scenarios = Scenario.allCases.filter { options.only.map($0.rawValue.contains) ?? true }
let scanClosureName = "scan() closure 1M"
let includeScanClosure = options.only.map(scanClosureName.contains) ?? true
if scenarios.isEmpty && !includeScanClosure { Options.fail("no scenario matches \(options.only ?? "")") }

say("lmdb-ratios: \(options.rounds) rounds (+1 warm-up), \(options.entries) entries, \(options.commits) sync commits")
say("liblmdb \(LMDBInfo.versionString); temporary stores under \(ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp")")

let setupStart = monotonicNanoseconds()
let runner = ScenarioRunner(workload: Workload(entryCount: options.entries, syncCommitCount: min(options.commits, options.entries)))
if scenarios.contains(where: { !$0.writesToEmptyStore }) || includeScanClosure {
    do {
        try runner.prepareReadStore(for: .strata)
        try runner.prepareReadStore(for: .raw)
    } catch {
        Options.fail("preparing the read stores failed: \(error)")
    }
}
say(String(format: "workload and read stores ready in %.1f s", Double(monotonicNanoseconds() - setupStart) / 1e9))

var times: [Scenario: [Binding: [Double]]] = [:]
var scanClosureTimes: [Double] = []
var perRoundRatios: [Scenario: [Double]] = [:]

do {
    for round in 0...options.rounds {
        let warmUp = round == 0
        for scenario in scenarios {
            // Alternate which binding goes first, so neither always runs on a warmer cache.
            let order: [Binding] = round % 2 == 0 ? [.strata, .raw] : [.raw, .strata]
            var roundTimes: [Binding: Double] = [:]
            if scenario == .syncCommits && !options.sequentialSync {
                let (strata, raw) = try runner.runSyncCommitsInterleaved()
                roundTimes = [.strata: strata, .raw: raw]
            } else {
                for binding in order {
                    roundTimes[binding] = try measure { try runner.run(scenario, binding, stopwatch: $0) }
                }
            }
            for binding in order {
                let seconds = roundTimes[binding]!
                if !warmUp { times[scenario, default: [:]][binding, default: []].append(seconds) }
                if options.verbose {
                    say("  round \(round)\(warmUp ? " (warm-up)" : ""): \(scenario.rawValue) via \(binding.rawValue): \(format(seconds))")
                }
            }
            if !warmUp, let strata = roundTimes[.strata], let raw = roundTimes[.raw] {
                perRoundRatios[scenario, default: []].append(strata / raw)
            }
        }
        if includeScanClosure {
            let seconds = try measure { try runner.runStrataScanClosure(stopwatch: $0) }
            if !warmUp { scanClosureTimes.append(seconds) }
            if options.verbose {
                say("  round \(round)\(warmUp ? " (warm-up)" : ""): \(scanClosureName) via StrataLMDB: \(format(seconds))")
            }
        }
        if !options.verbose { say(warmUp ? "warm-up round done" : "round \(round)/\(options.rounds) done") }
    }
} catch {
    FileHandle.standardError.write(Data("lmdb-ratios: a scenario failed: \(error)\n".utf8))
    exit(1)
}
runner.releaseReadStore(for: .strata)
runner.releaseReadStore(for: .raw)

// The table.
let header = ["scenario", "StrataLMDB", "raw C", "ratio", "ns/op Strata", "ns/op raw", "ratio range"]
var rows: [[String]] = []
var worst = 0.0
for scenario in scenarios {
    let strata = median(times[scenario]![.strata]!)
    let raw = median(times[scenario]![.raw]!)
    let ratio = strata / raw
    worst = max(worst, ratio)
    let operations = Double(scenario == .syncCommits ? min(options.commits, options.entries) : options.entries)
    let ratios = perRoundRatios[scenario]!
    rows.append([
        scenario.rawValue, format(strata), format(raw), String(format: "%.3fx", ratio),
        String(format: "%.1f", strata * 1e9 / operations), String(format: "%.1f", raw * 1e9 / operations),
        String(format: "%.3f–%.3f", ratios.min()!, ratios.max()!),
    ])
}
if includeScanClosure, let rawScan = times[.cursorScan]?[.raw] {
    let strata = median(scanClosureTimes)
    let raw = median(rawScan)
    rows.append([
        "(extra) \(scanClosureName)", format(strata), format(raw), String(format: "%.3fx", strata / raw),
        String(format: "%.1f", strata * 1e9 / Double(options.entries)), String(format: "%.1f", raw * 1e9 / Double(options.entries)),
        "vs raw cursor scan",
    ])
}
let widths = header.indices.map { column in max(header[column].count, rows.map { $0[column].count }.max() ?? 0) }
func line(_ cells: [String]) -> String {
    cells.indices.map { pad(cells[$0], widths[$0], right: $0 > 0) }.joined(separator: "  ")
}
say("")
say("median of \(options.rounds) rounds; ratio = StrataLMDB / raw C (lower is better, 1.000 = parity)")
if options.entries != 1_000_000 || options.commits != 10_000 {
    say("(the scenario names say 1M and 10K; this run used \(options.entries) entries and \(min(options.commits, options.entries)) commits)")
}
if scenarios.contains(.syncCommits) {
    say(options.sequentialSync
        ? "sync commits: two back-to-back batches per round"
        : "sync commits: the bindings alternate commit by commit, each commit timed on its own")
}
say(line(header))
say(widths.map { String(repeating: "-", count: $0) }.joined(separator: "  "))
rows.forEach { say(line($0)) }

if let limit = options.limit, worst > limit {
    say(String(format: "\nFAIL: a ratio of %.3fx exceeds the limit of %.2fx", worst, limit))
    exit(1)
}
