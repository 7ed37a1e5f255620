import Foundation
import Strata
import StrataReliability
import StrataTesting
import Testing

/// The short tier of the I/O fault runs (`make reliability-faults` tries every N): a
/// worker saves the ledger while the fault shim (`make faults`, LD_PRELOAD) fails its Nth
/// write or sync call with EIO or ENOSPC, once or from then on. Every run must end without
/// a trap or a hang, report only typed errors, keep every acknowledged save, and report a
/// terminal state after LMDB panics, until the store is added again.
@Suite("I/O faults", .serialized)
struct IOFaultTests {
    /// The runs' shim, or nil (with an issue recorded) when `make faults` has not built it.
    static func shim() -> String? {
        let path = FaultRuns.defaultShimPath()
        guard FileManager.default.fileExists(atPath: path) else {
            Issue.record("no fault shim at \(path): run `make faults` (make test does)")
            return nil
        }
        return path
    }

    /// Fault runs over a new temporary directory.
    static func runs(in directory: borrowing TemporaryDirectory) -> FaultRuns? {
        shim().map { FaultRuns(directory: directory.url.appendingPathComponent("faults"), shim: $0) }
    }

    @Test("Every operation x EIO/ENOSPC x once/forever, N = 1, 2, 3, 5, 8, ... up to a run without a fault: no trap, typed errors, nothing acknowledged lost")
    func everyOperationErrnoAndMode() async throws {
        let directory = TemporaryDirectory()
        guard var runs = Self.runs(in: directory) else { return }
        runs.steps = .sparse
        let report = await runs.run()
        #expect(report.problems.isEmpty, "\(report)")
        #expect(report.combinations.count == 24)
        // LMDB writes pages with pwrite and writev and syncs with fdatasync: those must
        // have been faulted, and saves must have failed and been acknowledged around them.
        for operation in [FaultRuns.Operation.pwrite, .writev, .fdatasync] {
            for errno in FaultRuns.FaultErrno.allCases {
                for mode in [FaultRuns.Mode.once, .forever] {
                    let figures = try #require(report.figures[.init(operation: operation, errno: errno, mode: mode)])
                    #expect(figures.faults > 0 && figures.failedSaves > 0 && figures.acknowledged > 0, "\(operation) \(errno) \(mode): \(report)")
                    #expect(figures.losses == 0 && figures.cleanAudits == figures.tried.count)
                }
            }
        }
        let terminal = report.figures.filter { $0.key.operation == .pwrite }.values.map(\.terminalRuns)
        #expect(terminal.allSatisfy { $0 > 0 }, "failed meta-page writes must have panicked LMDB: \(report)")
    }

    @Test("Three writers whose saves meet in group commits: pwrite, writev and fdatasync fail with EIO once or for good; each shared commit that fails is retried save by save, and nothing acknowledged is lost")
    func groupCommitsUnderFaults() async throws {
        let directory = TemporaryDirectory()
        guard var runs = Self.runs(in: directory) else { return }
        runs.steps = .sparse
        runs.writers = 3
        runs.operations = [.pwrite, .writev, .fdatasync]
        runs.errnos = [.eio]
        let report = await runs.run()
        #expect(report.problems.isEmpty, "\(report)")
        #expect(report.figures.values.allSatisfy { $0.faults > 0 && $0.losses == 0 }, "\(report)")
    }

    @Test("Short writes (half the bytes) of pwrite and writev: LMDB reports EIO, nothing acknowledged is lost")
    func shortWrites() async throws {
        let directory = TemporaryDirectory()
        guard var runs = Self.runs(in: directory) else { return }
        runs.steps = .sparse
        runs.operations = [.pwrite, .writev]
        runs.errnos = [.eio]
        runs.modes = [.short]
        let report = await runs.run()
        #expect(report.problems.isEmpty, "\(report)")
        #expect(report.figures.values.allSatisfy { $0.faults > 0 && $0.losses == 0 }, "\(report)")
    }

    /// The number of the first meta-page write (a pwrite of less than a page) of a worker
    /// run without faults.
    static func firstMetaPageWrite(_ runs: FaultRuns, baseline: URL) async throws -> Int {
        let counting = await runs.run(.init(operation: .pwrite, errno: .eio, mode: .once), n: 0, baseline: baseline)
        #expect(counting.problems.isEmpty, "\(counting.problems)")
        return try #require(counting.operations.first { $0.isMetaPageWrite }?.index)
    }

    @Test("A failed meta-page write panics LMDB: the save gets ioError and the store is terminal at once, before anything else reads it")
    func terminalAtTheFailedCommit() async throws {
        let directory = TemporaryDirectory()
        guard let runs = Self.runs(in: directory) else { return }
        let baseline = try await runs.prepareBaseline()
        let n = try await Self.firstMetaPageWrite(runs, baseline: baseline)
        let run = await runs.run(.init(operation: .pwrite, errno: .eio, mode: .once), n: n, baseline: baseline)
        #expect(run.problems.isEmpty, "\(run.problems)")
        let errors = run.transcript.errors
        #expect(errors.count == 1 && errors.first?.contains("LMDBError.ioError") == true, "\(errors)")
        #expect(errors.first?.contains("the environment is now unusable") == true, "\(errors)")
        #expect(run.transcript.terminal, "the store must report its terminal state right after the failed save")
        #expect(run.transcript.reopenings == 1)
        #expect(run.termination == .exited(0))
        #expect(run.transcript.acknowledged.count == runs.saves, "the reopened store takes every later save")
        #expect(run.committed == [runs.baselineSaves + runs.saves], "the audit finds every save, the failed one retried")
    }

    @Test("A terminal store refuses saves, fetches and faults of cached rows with environmentUnusable until it is removed and added again")
    func terminalRefusesEverything() async throws {
        let directory = TemporaryDirectory()
        guard let runs = Self.runs(in: directory) else { return }
        let baseline = try await runs.prepareBaseline()
        let n = try await Self.firstMetaPageWrite(runs, baseline: baseline)
        let run = await runs.run(.init(operation: .pwrite, errno: .enospc, mode: .once), n: n, baseline: baseline)
        #expect(run.problems.isEmpty, "\(run.problems)")
        let refusals = run.transcript.refusals
        for probe in ["save", "fetch", "fault"] {
            let refusal = refusals.first { $0.hasPrefix("refused \(probe) ") }
            #expect(refusal?.contains("StrataError storage error: LMDBError.environmentUnusable") == true, "\(probe): \(refusals)")
        }
        #expect(run.transcript.errors.first?.contains("LMDBError.noSpace") == true, "\(run.transcript.errors)")
        #expect(run.transcript.reopenings == 1)
        #expect(run.committed == [runs.baselineSaves + runs.saves])
    }

    @Test("Meta-page writes that keep failing: every reopened store panics again, the worker stops with a typed error, the store keeps every acknowledged save")
    func terminalAgainAndAgain() async throws {
        let directory = TemporaryDirectory()
        guard let runs = Self.runs(in: directory) else { return }
        let baseline = try await runs.prepareBaseline()
        let n = try await Self.firstMetaPageWrite(runs, baseline: baseline)
        let run = await runs.run(.init(operation: .pwrite, errno: .eio, mode: .forever), n: n, baseline: baseline)
        #expect(run.problems.isEmpty, "\(run.problems)")
        #expect(run.termination == .exited(3))
        #expect(run.transcript.reopenings >= 2, "each attempt panics the reopened store again")
        #expect(run.committed == run.acknowledged)
    }
}
