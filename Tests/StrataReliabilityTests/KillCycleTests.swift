import Foundation
import Strata
import StrataReliability
import StrataTesting
import Testing

/// The short tier of the kill -9 durability runs (`make reliability` runs 10,000 cycles):
/// a worker process saves the ledger through contexts and is killed at a random moment,
/// or kills itself at a crash point inside a save; the store is reopened and audited.
@Suite("Kill -9 durability", .serialized)
struct KillCycleTests {
    /// The run's seed: `STRATA_RELIABILITY_SEED`, else a new one (printed on failure).
    static let seed: UInt64 = ProcessInfo.processInfo.environment["STRATA_RELIABILITY_SEED"].flatMap { UInt64($0) }
        ?? UInt64.random(in: 1...UInt64(UInt32.max))

    @Test("200 workers (1 to 3 writers each, so kills land in group commits too) killed with SIGKILL at random moments: every acknowledged save is present exactly, nothing partial or phantom, indexes and links agree")
    func killedAtRandomMoments() async throws {
        let directory = TemporaryDirectory()
        var run = KillCycles(directory: directory.url.appendingPathComponent("kill"))
        run.cycles = 200
        run.seed = Self.seed
        let report = await run.run()
        #expect(report.problems.isEmpty, "seed \(Self.seed):\n\(report)")
        #expect(report.cycles == 200)
        #expect(report.acknowledgedSaves > 200, "the workers must get saves done before the kills: \(report)")
        #expect(report.committedSaves >= report.acknowledgedSaves)
        #expect(report.writerCounts.keys.sorted() == [1, 2, 3])
    }

    @Test("120 workers killed by STRATA_CRASH_POINT inside save (before the write, mid-write, before and after the commit): at least 100 hits, nothing lost or partial")
    func killedAtCrashPoints() async throws {
        let directory = TemporaryDirectory()
        var run = KillCycles(directory: directory.url.appendingPathComponent("points"))
        run.cycles = 120
        run.mode = .crashPoints
        run.seed = Self.seed
        let report = await run.run()
        #expect(report.problems.isEmpty, "seed \(Self.seed):\n\(report)")
        let hits = report.crashPointHits.values.reduce(0, +)
        #expect(hits >= 100, "\(report)")
        #expect(Set(report.crashPointHits.keys) == ["before-write", "mid-write", "before-commit", "after-commit"])
        // A crash after the commit keeps a save its context never heard of: the audit accepts exactly one.
        #expect(report.unacknowledgedCommits >= (report.crashPointHits["after-commit"] ?? 0))
    }
}
