import Foundation
import Strata
import StrataTesting

/// The kill -9 durability run: start a worker that saves, kill it at a random moment
/// (or let an armed crash point kill it inside a save), reopen the store, audit it.
public struct KillCycles: Sendable {
    /// How each cycle's worker dies.
    public enum Mode: String, Sendable, CaseIterable {
        /// The parent sends SIGKILL after a random delay.
        case kill
        /// `STRATA_CRASH_POINT` makes the worker kill itself inside a save.
        case crashPoints = "crash-points"
    }

    /// The number of cycles.
    public var cycles = 200
    /// How the workers die.
    public var mode = Mode.kill
    /// The seed of the run: kill delays, durabilities, crash points and save plans.
    public var seed: UInt64 = 1
    /// The longest delay before the kill, in milliseconds (the worker starts in about 30).
    public var maximumDelay = 250
    /// A fresh store every this many cycles, so audits stay quick.
    public var cyclesPerStore = 25
    /// The most writers a worker runs at once (each cycle picks 1 to this many), so that
    /// kills also land inside group commits.
    public var maximumWriters = 3
    /// Where the stores go (removed at the end unless a problem was found).
    public var directory: URL
    /// The `strata-reliability` executable the workers run.
    public var tool = reliabilityToolPath()

    /// A run over stores in `directory`.
    public init(directory: URL) { self.directory = directory }

    /// What a run found.
    public struct Report: Sendable, CustomStringConvertible {
        /// Cycles run.
        public var cycles = 0
        /// Saves the workers acknowledged (each one must survive).
        public var acknowledgedSaves = 0
        /// Saves found committed by the audits (acknowledged ones, plus saves that
        /// committed but died before their acknowledgement).
        public var committedSaves = 0
        /// Cycles where a save committed whose acknowledgement the kill cut off.
        public var unacknowledgedCommits = 0
        /// Cycles whose worker died before it opened the store.
        public var killedBeforeStart = 0
        /// Cycles ended by a crash point (``Mode/crashPoints``), by point name.
        public var crashPointHits: [String: Int] = [:]
        /// Cycles by durability.
        public var durabilities: [String: Int] = [:]
        /// Cycles by the number of writers saving at once.
        public var writerCounts: [Int: Int] = [:]
        /// Lost or phantom saves, partial saves, index or relationship damage, worker
        /// errors: each with its cycle. Empty when the run passed.
        public var problems: [String] = []
        /// The wall-clock time of the run, in seconds.
        public var seconds = 0.0

        /// One line per figure, for the log and the Reliability article.
        public var description: String {
            let hits = crashPointHits.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
            let modes = durabilities.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
            let writers = writerCounts.sorted { $0.key < $1.key }.map { "\($0.key) writer(s) \($0.value)" }.joined(separator: ", ")
            return """
                cycles: \(cycles) (\(modes); \(writers)) in \(String(format: "%.1f", seconds)) s
                acknowledged saves: \(acknowledgedSaves); committed: \(committedSaves); committed but unacknowledged at the kill: \(unacknowledgedCommits) (cycles)
                killed before opening the store: \(killedBeforeStart)
                \(hits.isEmpty ? "" : "crash points hit: \(hits) (total \(crashPointHits.values.reduce(0, +)))\n")problems: \(problems.count)\(problems.prefix(20).map { "\n  - \($0)" }.joined())
                """
        }
    }

    private static let durabilities: [(name: String, value: PersistentStore.Options.Durability)] = [
        ("sync", .sync), ("noMetaSync", .noMetaSync), ("noSync", .noSync),
    ]

    /// Runs the cycles; `progress` is called after each with the report so far.
    public func run(progress: (Report) -> Void = { _ in }) async -> Report {
        var report = Report()
        let began = Date()
        var random = SeededRandomNumberGenerator(seed: seed)
        var auditor = LedgerAuditor(seed: seed, writers: maximumWriters)
        var acknowledged = Array(repeating: 0, count: maximumWriters)
        var store = directory.appendingPathComponent("ledger-0.strata")
        try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        for cycle in 0..<cycles {
            if cycle % cyclesPerStore == 0 {
                try? FileManager.default.removeItem(at: store)
                store = directory.appendingPathComponent("ledger-\(cycle / cyclesPerStore).strata")
                auditor = LedgerAuditor(seed: seed, writers: maximumWriters)
                acknowledged = Array(repeating: 0, count: maximumWriters)
            }
            let durability = Self.durabilities[Int(random.next() % 3)]
            report.durabilities[durability.name, default: 0] += 1
            let writers = 1 + Int(random.next() % UInt64(maximumWriters))
            report.writerCounts[writers, default: 0] += 1
            var environment: [String: String] = ["STRATA_CRASH_POINT": ""]
            var armed: String?
            if mode == .crashPoints {
                let point = ["before-write", "mid-write", "before-commit", "after-commit"][Int(random.next() % 4)]
                armed = point
                environment["STRATA_CRASH_POINT"] = "\(point)@\(1 + random.next() % 4)"
            }
            let output = directory.appendingPathComponent("worker.out").path
            let errors = directory.appendingPathComponent("worker.err").path
            let arguments = [
                "worker", "--store", store.path, "--seed", String(seed), "--durability", durability.name, "--writers", String(writers),
            ]
            let child: ChildProcess
            do {
                child = try ChildProcess.spawn(tool, arguments, environment: environment, outputPath: output, errorPath: errors)
            } catch {
                report.problems.append("cycle \(cycle): \(error)")
                break
            }
            let termination = await mode.end(
                child, maximumDelay: maximumDelay, random: &random, armed: environment["STRATA_CRASH_POINT"] ?? "", cycle: cycle,
                problems: &report.problems)
            let lines = child.output.split(separator: "\n")
            if !lines.contains(where: { $0.hasPrefix("start ") }) { report.killedBeforeStart += 1 }
            for line in lines where line.hasPrefix("error ") {
                report.problems.append("cycle \(cycle): the worker failed: \(line.dropFirst(6))")
            }
            if termination != .signalled(SIGKILL) {
                report.problems.append("cycle \(cycle): the worker ended with \(termination), not SIGKILL: \(child.errorOutput.suffix(500))")
            }
            if let armed, child.errorOutput.contains("crash point \(armed)") {
                report.crashPointHits[armed, default: 0] += 1
            }
            for line in lines where line.hasPrefix("ack ") {
                guard let (writer, sequence) = LedgerWorker.save(in: line, kind: "ack"), writer < maximumWriters else {
                    report.problems.append("cycle \(cycle): a malformed acknowledgement: \(line)")
                    continue
                }
                report.acknowledgedSaves += 1
                acknowledged[writer] = max(acknowledged[writer], sequence + 1)
            }
            do {
                let before = auditor.committed.reduce(0, +)
                let finding = try await auditor.audit(store: store, acknowledged: acknowledged)
                report.committedSaves += max(0, finding.committed.reduce(0, +) - before)
                if zip(finding.committed, acknowledged).contains(where: { $0 > $1 }) { report.unacknowledgedCommits += 1 }
                acknowledged = zip(acknowledged, finding.committed).map { max($0, $1) }
                report.problems += finding.problems.map { "cycle \(cycle) (seed \(seed), \(durability.name)): \($0)" }
            } catch {
                report.problems.append("cycle \(cycle) (seed \(seed)): the store cannot be reopened: \(error)")
            }
            report.cycles += 1
            report.seconds = Date().timeIntervalSince(began)
            progress(report)
            if report.problems.count > 50 { break }
        }
        if report.problems.isEmpty { try? FileManager.default.removeItem(at: directory) }
        return report
    }
}

extension KillCycles.Mode {
    /// Waits for `child` to die as this mode makes it: SIGKILL after a random delay of up
    /// to `maximumDelay` ms, or its own crash point `armed` (a problem of `cycle` when it
    /// is not reached within 60 s). Returns how it ended.
    func end(
        _ child: ChildProcess, maximumDelay: Int, random: inout SeededRandomNumberGenerator, armed: String, cycle: Int,
        problems: inout [String]
    ) async -> ChildProcess.Termination {
        switch self {
        case .kill:
            try? await Task.sleep(nanoseconds: (random.next() % UInt64(maximumDelay + 1)) * 1_000_000)
            child.kill()
            return child.wait()
        case .crashPoints:
            let (ended, killed) = await child.ended(atMost: 60)
            if killed { problems.append("cycle \(cycle): the crash point \(armed) was not reached in 60 s") }
            return ended
        }
    }
}
