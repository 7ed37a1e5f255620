import Foundation
internal import StrataLocks

/// A pinned query generation's snapshot of a server store: a `REPEATABLE READ, READ ONLY`
/// transaction on a connection of its own (``SQLDriver/openSession(name:)``), whose
/// snapshot every read of the generation runs in (DESIGN.md "Query generations";
/// <doc:RunningOnPostgreSQL>). The transaction's snapshot is exported
/// (`pg_export_snapshot()`), so the server keeps the rows it sees while it is open, as an
/// LMDB reader keeps its pages.
///
/// Contexts sharing the generation share the snapshot: their reads take turns on its
/// connection. The transaction ends (the connection closes) when the generation goes.
final class SQLSnapshot: Sendable {
    /// The server's description of the snapshot (`xmin:xmax:xip,...`): equal texts are the
    /// same committed state.
    let state: String
    /// The first transaction id the snapshot sees as not yet begun (`pg_snapshot_xmax`):
    /// newer snapshots have one as great or greater. What a token orders by.
    let horizon: Int
    /// The exported snapshot's name (`pg_export_snapshot()`), which a transaction of the
    /// same database may import while this one is open.
    let exportedName: String
    private let session: any SQLSession
    private let location: String
    /// Serialises the session's statements; false once it failed or closed.
    private let lock = ConditionLock()
    private let usable = LockedValue(true)

    /// Opens a session of `driver` and takes its snapshot: the first statement of the
    /// transaction. `idleTimeout` (the query generation age policy's maximum age) ends a
    /// transaction left idle that long, so that a generation nobody reads any more does
    /// not hold the server's old rows for ever.
    ///
    /// - Throws: ``StrataError/database(store:failure:)`` when the server fails.
    init(driver: any SQLDriver, location: String, idleTimeout: Duration?) throws(StrataError) {
        self.location = location
        let session = try SQLStore.run(location) { try driver.openSession(name: "strata snapshot") }
        do {
            let taken = try SQLStore.run(location) { () throws -> (String, Int, String) in
                // The timeout is the transaction's own (set_config's `is_local`): a session
                // whose connection is used again starts without it. 0 turns it off.
                let milliseconds = idleTimeout.map { max(1, $0.components.seconds * 1_000 + $0.components.attoseconds / 1_000_000_000_000_000) } ?? 0
                _ = try session.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY", [])
                let row = try session.execute(
                    "SELECT pg_current_snapshot()::text, pg_snapshot_xmax(pg_current_snapshot())::text::bigint, pg_export_snapshot(), "
                        + "set_config('idle_in_transaction_session_timeout', $1, true)", [.text("\(milliseconds)")]
                ).rows.first
                guard let row, row.count == 4, case .text(let state) = row[0], let horizon = row[1].integer, case .text(let name) = row[2] else {
                    throw DatabaseFailure(kind: .serverError, message: "the server did not describe the snapshot it took")
                }
                return (state, Int(horizon), name)
            }
            (state, horizon, exportedName) = taken
        } catch {
            session.close()
            throw error
        }
        self.session = session
    }

    deinit {
        session.end()   // rolled back; the connection may serve a later snapshot
    }

    /// Whether the snapshot can still be read (its connection did not fail or close).
    var isUsable: Bool { usable.withLock { $0 } }

    /// Runs `body` on the snapshot's connection, alone.
    ///
    /// - Throws: what `body` throws; a failure of the connection marks the snapshot
    ///   unusable (the generation is then unavailable).
    func run<R>(_ body: (any SQLConnection) throws -> R) throws -> R {
        try lock.withLock { () throws -> R in
            do {
                return try body(session)
            } catch let failure as DatabaseFailure {
                if failure.kind == .connectionLost || failure.kind == .connectionFailed { usable.withLock { $0 = false } }
                throw failure
            }
        }
    }
}
