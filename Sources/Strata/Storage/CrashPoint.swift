import Foundation
import Synchronization

/// Named places inside a save where the reliability suite can make the process die with
/// SIGKILL, as a power cut or `kill -9` would, to prove that a crash at that exact point
/// loses no acknowledged save and leaves nothing partial (the DocC article "Reliability").
///
/// Armed only by the environment variable `STRATA_CRASH_POINT=NAME@N`: the process kills
/// itself the Nth time (1 by default) it reaches point `NAME`. Read once, at the first
/// save or migration; unset (the normal case) every point costs one load of a constant.
///
/// | name            | where                                                        |
/// |-----------------|--------------------------------------------------------------|
/// | `before-write`  | the write transaction is open, nothing written yet           |
/// | `mid-write`     | the first row of the save is written, the rest are not       |
/// | `before-commit` | every row, index entry and link is written, not committed    |
/// | `after-commit`  | committed (durable), before the saving context hears of it   |
/// | `migration-stage` | a migration's write transaction is open, at the start of each stage |
/// | `mid-migration` | a migration has rewritten an entity's rows, or 65,536 of them, and goes on |
/// | `before-migration-commit` | every stage of a migration is written, not committed |
/// | `after-migration-commit` | the migration committed, before the store finishes opening |
/// | `before-migration-switch` | a staged migration's copy is complete and flushed, not yet renamed over the store |
/// | `after-migration-switch` | the copy replaced the store, its directory not yet removed |
enum CrashPoint: String, CaseIterable, Sendable {
    case beforeWrite = "before-write"
    case midWrite = "mid-write"
    case beforeCommit = "before-commit"
    case afterCommit = "after-commit"
    case migrationStage = "migration-stage"
    case midMigration = "mid-migration"
    case beforeMigrationCommit = "before-migration-commit"
    case afterMigrationCommit = "after-migration-commit"
    case beforeMigrationSwitch = "before-migration-switch"
    case afterMigrationSwitch = "after-migration-switch"

    /// The armed point and the visit that kills, from `STRATA_CRASH_POINT`; nil when unset.
    static let armed: (point: CrashPoint, visit: Int)? = {
        guard let raw = ProcessInfo.processInfo.environment["STRATA_CRASH_POINT"], !raw.isEmpty else { return nil }
        let parts = raw.split(separator: "@", maxSplits: 1).map(String.init)
        guard let point = CrashPoint(rawValue: parts[0]) else {
            FileHandle.standardError.write(Data("strata: STRATA_CRASH_POINT=\(raw) names no crash point (\(allCases.map(\.rawValue).joined(separator: ", "))); ignored\n".utf8))
            return nil
        }
        let visit = parts.count > 1 ? Int(parts[1]) ?? 1 : 1
        return (point, max(visit, 1))
    }()

    /// Visits of the armed point so far.
    private static let visits = Atomic<Int>(0)

    /// Kills the process with SIGKILL when this is the armed point's fatal visit.
    @inline(__always)
    func reach() {
        guard let armed = CrashPoint.armed, armed.point == self else { return }
        CrashPoint.crashIfDue(self, visit: armed.visit)
    }

    private static func crashIfDue(_ point: CrashPoint, visit: Int) {
        let reached = visits.add(1, ordering: .relaxed).newValue
        guard reached == visit else { return }
        let message = "strata: crash point \(point.rawValue)@\(visit) reached; killing the process\n"
        message.withCString { _ = write(2, $0, strlen($0)) }
        kill(getpid(), SIGKILL)
    }
}
