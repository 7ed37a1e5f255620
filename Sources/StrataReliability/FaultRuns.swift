import Foundation
import Strata

/// The I/O fault runs: a worker saves the ledger with the fault shim
/// (`Tests/FaultShim/strata_faults.c`, `LD_PRELOAD`) failing its Nth write or sync call
/// on the store's files, once or from then on, with `EIO` or `ENOSPC`; for N = 1, 2, ...
/// until a run where the shim injected nothing. Each run checks that the worker neither
/// trapped nor hung, that every error it saw is a typed ``StrataError``, that a failed
/// meta-page write put the store into a reported terminal state that a reopen cleared,
/// and that the store, reopened without the shim, passes ``LedgerAuditor`` (every
/// acknowledged save there exactly, at most one more, nothing partial).
public struct FaultRuns: Sendable {
    /// The calls the shim can fail (`STRATA_FAULT_OPS`).
    public enum Operation: String, Sendable, CaseIterable {
        /// `write(2)`: LMDB uses it only to copy environments.
        case write
        /// `pwrite(2)` and `pwrite64`: LMDB's single-page writes and its meta-page writes.
        case pwrite
        /// `writev(2)`: LMDB's writes of runs of contiguous pages.
        case writev
        /// `pwritev(2)`, `pwritev64`, `pwritev2`: used by LMDB builds with `MDB_USE_PWRITEV`.
        case pwritev
        /// `fsync(2)`: used by LMDB builds that distrust `fdatasync`.
        case fsync
        /// `fdatasync(2)`: LMDB's flush of the data pages before the meta page.
        case fdatasync
        /// `msync(2)`: used by LMDB with `MDB_WRITEMAP`, which Strata does not set.
        case msync
    }

    /// The errors it fails them with (`STRATA_FAULT_ERRNO`).
    public enum FaultErrno: String, Sendable, CaseIterable {
        /// An I/O error: a failing disk.
        case eio = "EIO"
        /// No space left on the device.
        case enospc = "ENOSPC"

        /// The ``LMDBError`` name a save reports for it.
        var lmdbName: String { self == .eio ? "ioError" : "noSpace" }
    }

    /// How long the fault lasts (`STRATA_FAULT_MODE`).
    public enum Mode: String, Sendable, CaseIterable {
        /// Only the Nth call fails.
        case once
        /// The Nth call and every later one fail.
        case forever
        /// The Nth call writes half its bytes and reports that (a sync call fails).
        case short
    }

    /// Which values of N a combination tries.
    public enum Steps: String, Sendable {
        /// 1, 2, 3, ... up to the first run without a fault.
        case every
        /// 1, 2, 3, 5, 8, 13, ... (Fibonacci) up to the first run without a fault.
        case sparse
    }

    /// One operation, errno and mode.
    public struct Combination: Sendable, Hashable, CustomStringConvertible {
        /// The call that fails.
        public var operation: Operation
        /// What it fails with.
        public var errno: FaultErrno
        /// For how long.
        public var mode: Mode

        /// `operation` failing with `errno`, as `mode` says.
        public init(operation: Operation, errno: FaultErrno, mode: Mode) {
            self.operation = operation
            self.errno = errno
            self.mode = mode
        }

        /// The ``LMDBError`` names a failed save may report: the errno, and `ioError` for
        /// a short write (LMDB's choice; a shortened sync call fails with the errno).
        var expectedErrors: [String] { mode == .short ? [errno.lmdbName, "ioError"] : [errno.lmdbName] }

        /// `pwrite EIO once`.
        public var description: String { "\(operation.rawValue) \(errno.rawValue) \(mode.rawValue)" }
    }

    /// The figures of one combination.
    public struct Figures: Sendable {
        /// The values of N tried, in order.
        public var tried: [Int] = []
        /// The operations the shim counted in the run without a fault (the last one).
        public var operations = 0
        /// Faults the shim injected, over every run.
        public var faults = 0
        /// Saves acknowledged, over every run.
        public var acknowledged = 0
        /// Saves that failed (the worker's `error` lines), over every run.
        public var failedSaves = 0
        /// Runs where the store reported a terminal state (and was reopened).
        public var terminalRuns = 0
        /// Runs whose store passed the audit.
        public var cleanAudits = 0
        /// Acknowledged saves missing from a store, over every run (must be 0).
        public var losses = 0
        /// Runs where a save whose commit failed was found in the store.
        public var unacknowledgedCommits = 0
    }

    /// The operations tried (by default the ones LMDB and Strata use and a few they do not).
    public var operations: [Operation] = [.write, .pwrite, .writev, .pwritev, .fsync, .fdatasync]
    /// The errors tried.
    public var errnos = FaultErrno.allCases
    /// The modes tried.
    public var modes: [Mode] = [.once, .forever]
    /// Which values of N are tried.
    public var steps = Steps.every
    /// Saves committed before the shim is loaded (the acknowledged saves a fault must keep).
    public var baselineSaves = 4
    /// Saves each writer of a faulted worker makes.
    public var saves = 12
    /// Writers per worker, each with its own contexts and part of the ledger: with more
    /// than one, saves meet in group commits, and a fault fails a shared commit.
    public var writers = 1
    /// The save plan's seed.
    public var seed: UInt64 = 1
    /// The workers' durability: `sync`, `noMetaSync` or `noSync` (see ``PersistentStore/Options/Durability``).
    public var durability = "sync"
    /// How long a worker may run before it counts as hung, in seconds.
    public var timeout = 60.0
    /// Where the stores go (removed at the end unless a problem was found).
    public var directory: URL
    /// The `strata-reliability` executable.
    public var tool = reliabilityToolPath()
    /// The fault shim (`libstrata_faults.so`).
    public var shim: String

    /// A run over stores in `directory`, with the shim at `shim`.
    public init(directory: URL, shim: String) {
        self.directory = directory
        self.shim = shim
    }

    /// Where `make faults` puts the shim: `STRATA_FAULT_SHIM`, else
    /// `.build-faults/libstrata_faults.so` in the package whose build folder holds `tool`
    /// (the first folder above it with a `Package.swift`).
    public static func defaultShimPath(tool: String = reliabilityToolPath()) -> String {
        if let path = ProcessInfo.processInfo.environment["STRATA_FAULT_SHIM"], !path.isEmpty { return path }
        var url = URL(fileURLWithPath: tool).deletingLastPathComponent()
        while url.path != "/", !FileManager.default.fileExists(atPath: url.appendingPathComponent("Package.swift").path) {
            url.deleteLastPathComponent()
        }
        return url.appendingPathComponent(".build-faults/libstrata_faults.so").path
    }

    /// What a run found.
    public struct Report: Sendable, CustomStringConvertible {
        /// The combinations, in the order they ran.
        public var combinations: [Combination] = []
        /// Figures by combination.
        public var figures: [Combination: Figures] = [:]
        /// Workers run.
        public var runs = 0
        /// Traps, hangs, untyped errors, missing terminal states, audit failures: each
        /// with its combination and N. Empty when the run passed.
        public var problems: [String] = []
        /// The wall-clock time of the run, in seconds.
        public var seconds = 0.0

        /// A markdown table, then the problems.
        public var description: String {
            var lines = [
                "| operation | errno | mode | N tried | ops counted | faults | saves acked | saves failed | terminal | audits clean | losses | committed unacked |",
                "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for combination in combinations {
                guard let f = figures[combination] else { continue }
                let range = f.tried.isEmpty ? "-" : f.tried.count == f.tried.last! ? "1–\(f.tried.last!)" : "\(f.tried.count) of 1–\(f.tried.last!)"
                lines.append("| \(combination.operation.rawValue) | \(combination.errno.rawValue) | \(combination.mode.rawValue) | \(range) | \(f.operations) | \(f.faults) | \(f.acknowledged) | \(f.failedSaves) | \(f.terminalRuns) | \(f.cleanAudits)/\(f.tried.count) | \(f.losses) | \(f.unacknowledgedCommits) |")
            }
            lines.append("\(runs) runs in \(String(format: "%.1f", seconds)) s; problems: \(problems.count)")
            lines += problems.prefix(30).map { "  - \($0)" }
            return lines.joined(separator: "\n")
        }
    }

    /// Runs every combination; `progress` is called after each with the report so far.
    public func run(progress: (Report) -> Void = { _ in }) async -> Report {
        var report = Report()
        let began = Date()
        let baseline: URL
        do {
            baseline = try await prepareBaseline()
        } catch {
            report.problems.append("\(error)")
            return report
        }
        for operation in operations {
            for errno in errnos {
                for mode in modes {
                    let combination = Combination(operation: operation, errno: errno, mode: mode)
                    report.combinations.append(combination)
                    var figures = Figures()
                    for n in Self.values(steps) {
                        let run = await self.run(combination, n: n, baseline: baseline)
                        report.runs += 1
                        figures.add(run)
                        report.problems += run.problems.map { "\(combination) N=\(n) (seed \(seed)): \($0)" }
                        if run.faults == 0 || report.problems.count > 50 { break }
                    }
                    report.figures[combination] = figures
                    report.seconds = Date().timeIntervalSince(began)
                    progress(report)
                }
            }
        }
        if report.problems.isEmpty { try? FileManager.default.removeItem(at: directory) }
        return report
    }

    /// N = 1, 2, 3, ... or 1, 2, 3, 5, 8, ...
    static func values(_ steps: Steps) -> UnfoldSequence<Int, (Int, Int)> {
        sequence(state: (0, 1)) { state in
            switch steps {
            case .every:
                state.0 += 1
                return state.0
            case .sparse:
                let next = state.0 + state.1
                state = (state.1, next)
                return next
            }
        }
    }

    /// Makes the baseline store in ``directory`` (``baselineSaves`` saves, no shim) and
    /// checks that the shim exists. Each run starts from a copy of it, so that the Nth
    /// operation is the same one whatever ran before.
    public func prepareBaseline() async throws -> URL {
        let files = FileManager.default
        guard files.fileExists(atPath: shim) else {
            throw ChildProcess.SpawnError(description: "no fault shim at \(shim): run `make faults`")
        }
        try files.createDirectory(at: directory, withIntermediateDirectories: true)
        let store = directory.appendingPathComponent("baseline.strata")
        try? files.removeItem(at: store)
        let output = directory.appendingPathComponent("baseline.out").path
        let child = try ChildProcess.spawn(
            tool, ["worker", "--store", store.path, "--seed", String(seed), "--saves", String(baselineSaves), "--writers", String(writers)],
            environment: ["STRATA_CRASH_POINT": ""], outputPath: output, errorPath: output + ".err")
        let (termination, _) = await child.ended(atMost: timeout)
        guard termination == .exited(0), child.output.contains("ack 0 \(baselineSaves - 1)") else {
            throw ChildProcess.SpawnError(description: "the baseline worker ended with \(termination): \(child.output) \(child.errorOutput)")
        }
        return store
    }

    /// One operation the shim counted: `op <n> <kind> <bytes> ok|fault|short <target>`.
    public struct ShimOperation: Sendable {
        /// Its number among the counted operations (1-based).
        public var index: Int
        /// `pwrite`, `writev`, `fdatasync`, ...
        public var kind: String
        /// The bytes it was asked to write.
        public var bytes: Int
        /// Whether the shim failed (or shortened) it.
        public var faulted: Bool

        /// LMDB writes a meta page with one `pwrite` of less than a page; when that fails
        /// LMDB panics (mdb.c, `mdb_env_write_meta`: `MDB_FATAL_ERROR`).
        public var isMetaPageWrite: Bool { kind == "pwrite" && bytes < 4096 }
    }

    /// What one faulted worker did and what its store held.
    public struct Run: Sendable {
        /// The fault.
        public var combination: Combination
        /// The operation that failed first (0: none).
        public var n: Int
        /// How the worker ended.
        public var termination: ChildProcess.Termination
        /// The operations the shim counted, in order.
        public var operations: [ShimOperation]
        /// The worker's output, read.
        public var transcript: WorkerTranscript
        /// The saves the audit found, by writer (nil when the store could not be opened).
        public var committed: [Int]?
        /// The saves acknowledged, the baseline's included, by writer.
        public var acknowledged: [Int]
        /// Everything wrong; empty when the run passed.
        public var problems: [String]

        /// The faults the shim injected.
        public var faults: Int { operations.filter(\.faulted).count }
    }

    /// Runs one worker on a copy of `baseline` with `combination`'s fault at operation
    /// `n` (0: none, to list the operations), then audits the store without the shim.
    public func run(_ combination: Combination, n: Int, baseline: URL) async -> Run {
        let files = FileManager.default
        let store = directory.appendingPathComponent("run.strata")
        let reportPath = directory.appendingPathComponent("shim.report").path
        let output = directory.appendingPathComponent("worker.out").path
        var run = Run(
            combination: combination, n: n, termination: .exited(-1), operations: [],
            transcript: WorkerTranscript("", expected: []), committed: nil,
            acknowledged: Array(repeating: baselineSaves, count: writers), problems: [])
        try? files.removeItem(at: store)
        try? files.removeItem(atPath: reportPath)
        do {
            try files.createDirectory(at: store, withIntermediateDirectories: true)
            try files.copyItem(at: baseline.appendingPathComponent("data.mdb"), to: store.appendingPathComponent("data.mdb"))
        } catch {
            run.problems.append("cannot copy the baseline store: \(error)")
            return run
        }
        let environment = [
            "LD_PRELOAD": shim,
            "STRATA_FAULT_OPS": combination.operation.rawValue,
            "STRATA_FAULT_AT": String(n),
            "STRATA_FAULT_ERRNO": combination.errno.rawValue,
            "STRATA_FAULT_MODE": combination.mode.rawValue,
            "STRATA_FAULT_PATH": store.path + "/",
            "STRATA_FAULT_REPORT": reportPath,
            "STRATA_CRASH_POINT": "",
        ]
        let arguments = [
            "worker", "--store", store.path, "--seed", String(seed), "--saves", String(saves), "--on-error", "continue",
            "--durability", durability, "--writers", String(writers),
        ]
        let child: ChildProcess
        do {
            child = try ChildProcess.spawn(tool, arguments, environment: environment, outputPath: output, errorPath: output + ".err")
        } catch {
            run.problems.append("\(error)")
            return run
        }
        let (termination, killed) = await child.ended(atMost: timeout)
        run.termination = termination
        let shimLines = ((try? String(contentsOfFile: reportPath, encoding: .utf8)) ?? "").split(separator: "\n")
        run.operations = shimLines.compactMap { line -> ShimOperation? in
            let fields = line.split(separator: " ", omittingEmptySubsequences: false)
            guard fields.count > 4, fields[0] == "op", let index = Int(fields[1]), let bytes = Int(fields[3]) else { return nil }
            return ShimOperation(index: index, kind: String(fields[2]), bytes: bytes, faulted: fields[4] != "ok")
        }
        let transcript = WorkerTranscript(child.output, expected: combination.expectedErrors)
        run.transcript = transcript
        run.problems += transcript.problems
        if killed {
            run.problems.append("the worker hung: killed after \(timeout) s")
        } else if termination != .exited(0), termination != .exited(3) {
            run.problems.append("the worker ended with \(termination) (a trap or a crash): \(child.errorOutput.suffix(800))")
        }
        if run.faults == 0, !(transcript.errors.isEmpty && termination == .exited(0)) {
            run.problems.append("no fault was injected, yet the worker ended with \(termination) and \(transcript.errors.count) error(s)")
        }
        if combination.mode != .forever, run.faults > 0, !killed {
            if termination != .exited(0) {
                run.problems.append("a fault that did not last stopped the worker (\(termination)): it should have saved again")
            }
            if transcript.acknowledged.count + transcript.committed.count != saves * writers {
                run.problems.append("\(transcript.acknowledged.count) saves acknowledged after a fault that did not last, not \(saves * writers)")
            }
        }
        if run.operations.contains(where: { $0.faulted && $0.isMetaPageWrite }), !transcript.terminal {
            run.problems.append("a failed meta-page write did not put the store into a reported terminal state")
        }

        // The audit, without the shim: every acknowledged save is there, at most one more.
        run.acknowledged = (0..<writers).map { writer in
            transcript.acknowledged.filter { $0.writer == writer }.map(\.sequence).max().map { $0 + 1 } ?? baselineSaves
        }
        var auditor = LedgerAuditor(seed: seed, writers: writers)
        do {
            let finding = try await auditor.audit(store: store, acknowledged: run.acknowledged)
            run.committed = finding.committed
            run.problems += finding.problems.map { "audit: \($0)" }
        } catch {
            run.problems.append("the store cannot be reopened without the shim: \(error)")
        }
        if !run.problems.isEmpty {
            let kept = directory.appendingPathComponent("failed-\(combination.operation.rawValue)-\(combination.errno.rawValue)-\(combination.mode.rawValue)-\(n)")
            try? files.removeItem(at: kept)
            try? files.createDirectory(at: kept, withIntermediateDirectories: true)
            try? files.moveItem(at: store, to: kept.appendingPathComponent("run.strata"))
            try? files.copyItem(atPath: output, toPath: kept.appendingPathComponent("worker.out").path)
            try? files.copyItem(atPath: output + ".err", toPath: kept.appendingPathComponent("worker.err").path)
            try? files.copyItem(atPath: reportPath, toPath: kept.appendingPathComponent("shim.report").path)
        }
        return run
    }
}

extension FaultRuns.Figures {
    /// Adds one run's figures.
    mutating func add(_ run: FaultRuns.Run) {
        tried.append(run.n)
        faults += run.faults
        if run.faults == 0 { operations = run.operations.count }
        acknowledged += run.transcript.acknowledged.count
        failedSaves += run.transcript.errors.count
        if run.transcript.terminal { terminalRuns += 1 }
        if let committed = run.committed {
            for (found, acked) in zip(committed, run.acknowledged) {
                losses += max(0, acked - found)
                if found > acked { unacknowledgedCommits += 1 }
            }
        }
        if run.problems.isEmpty { cleanAudits += 1 }
    }
}

/// What a worker run under ``LedgerWorker/ErrorPolicy/continue`` printed, and what is
/// wrong with it.
public struct WorkerTranscript: Sendable {
    /// One save of one writer.
    public struct Save: Sendable, Hashable {
        /// The writer.
        public var writer: Int
        /// Its number among the writer's saves.
        public var sequence: Int
    }

    /// The saves acknowledged (`ack W N`).
    public var acknowledged: [Save] = []
    /// Saves that failed but were found in the store (`committed W N`).
    public var committed: [Save] = []
    /// The failed saves' errors (`error <type> <description>`).
    public var errors: [String] = []
    /// Whether the store reported a terminal state (`terminal <error>`).
    public var terminal = false
    /// How many times the store was removed and added again (`reopened`).
    public var reopenings = 0
    /// What the terminal store refused (`refused save|fetch|fault <error>`).
    public var refusals: [String] = []
    /// Lines that break the rules: an untyped error, a terminal store that let a save or a
    /// read through, an acknowledgement while terminal, a store never reopened.
    public var problems: [String] = []

    /// The errors a faulted save may report: the injected errno, or the terminal state.
    static func isTyped(_ line: Substring, expected: [String]) -> Bool {
        let allowed = expected + ["panic", "environmentUnusable"]
        return allowed.contains { line.hasPrefix("StrataError storage error: LMDBError.\($0) ") }
    }

    /// Reads `output`; `expected` names the ``LMDBError``s the injected fault may give.
    public init(_ output: String, expected: [String]) {
        let lines = output.split(separator: "\n")
        var state = "saving"  // saving → terminal → (refused save, refused fetch) → saving
        var refusals = 0
        for line in lines {
            if let save = Self.save(line, kind: "ack") {
                if state != "saving" { problems.append("a save was acknowledged while the store was terminal: \(line)") }
                acknowledged.append(save)
            } else if let save = Self.save(line, kind: "committed") {
                committed.append(save)
            } else if line.hasPrefix("error ") {
                errors.append(String(line))
                if !Self.isTyped(line.dropFirst(6), expected: expected) { problems.append("an untyped or unexpected error: \(line)") }
            } else if line.hasPrefix("terminal ") {
                terminal = true
                state = "terminal"
                refusals = 0
                if !(line.contains("LMDBError.panic") || line.contains("LMDBError.corrupted")) {
                    problems.append("a terminal state that is not a panic: \(line)")
                }
            } else if line.hasPrefix("refused ") {
                refusals += 1
                self.refusals.append(String(line))
                let error = line.split(separator: " ", maxSplits: 2).last ?? ""
                if !error.hasPrefix("StrataError storage error: LMDBError.environmentUnusable ") {
                    problems.append("a terminal store refused with the wrong error: \(line)")
                }
            } else if line.hasPrefix("unrefused ") {
                problems.append("a terminal store let something through: \(line)")
            } else if line == "reopened" {
                reopenings += 1
                if state != "terminal" { problems.append("reopened without a terminal state") }
                for probe in ["save", "fetch"] where !self.refusals.suffix(refusals).contains(where: { $0.hasPrefix("refused \(probe) ") }) {
                    problems.append("reopened without a refused \(probe) in the terminal state")
                }
                state = "saving"
            }
        }
        if state == "terminal" { problems.append("the store stayed terminal: never reopened") }
        if !output.isEmpty, !lines.contains(where: { $0.hasPrefix("start ") }) { problems.append("the worker never opened the store") }
    }

    /// The save a `<kind> W N` line names.
    private static func save(_ line: Substring, kind: String) -> Save? {
        LedgerWorker.save(in: line, kind: kind).map { Save(writer: $0.writer, sequence: $0.sequence) }
    }
}
