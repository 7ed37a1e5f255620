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
        let baseline = try runs.prepareBaseline()
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
        let baseline = try runs.prepareBaseline()
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
}
