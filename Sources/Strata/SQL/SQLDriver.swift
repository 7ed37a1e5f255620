import Foundation
import Logging

/// What a server store type carries (``PersistentStore/StoreType/server(named:opener:)``):
/// the configuration, and how to open a driver for it.
package protocol SQLStoreOpener: Sendable {
    /// Where the database is, for descriptions and errors (never with a password).
    var location: String { get }
    /// A string equal for equal configurations (``PersistentStore/StoreType``'s equality).
    var identity: String { get }
    /// Opens a driver (its pool connects lazily or at once, as the driver chooses) whose
    /// every connection starts with `settings` (run-time parameters, such as the model
    /// guard's `strata.model`).
    ///
    /// - Throws: ``StrataError/database(store:failure:)`` when the server cannot be reached.
    func makeDriver(logger: Logger, settings: [(name: String, value: String)]) throws(StrataError) -> any SQLDriver
    /// The same server and database, with the store in schema `schema` (a migration with
    /// custom stages works on copies of the store in schemas of their own).
    func inSchema(_ schema: String) -> any SQLStoreOpener
}

/// What a database server driver gives Strata's SQL store (``SQLStore``): connections
/// from a pool, each running statements synchronously with bound parameters.
///
/// Synchronous by design: a context's fetches, faults and saves are synchronous calls
/// (`performAndWait`, a fault fired by reading a property), so the driver blocks its
/// caller until the server answers. A driver must therefore never need a thread of
/// Swift's cooperative pool to make progress (the caller may be one of its threads):
/// StrataPostgres runs its connections on SwiftNIO event loops of its own and waits on
/// their futures.
///
/// Errors are ``DatabaseFailure`` values; the store wraps them in
/// ``StrataError/database(store:failure:)``.
package protocol SQLDriver: AnyObject, Sendable {
    /// Where the database is, for errors and descriptions:
    /// `postgres://strata@127.0.0.1:54329/strata_test?schema=notes`.
    var location: String { get }
    /// The database schema (namespace) every table of the store lives in.
    var schema: String { get }
    /// Whether a save without history still notifies the other instances of its commit.
    var notifiesOnCommit: Bool { get }
    /// Runs `body` with a connection of the pool (waiting for one when every connection
    /// is busy, opening one when the pool has room), then gives it back: to the pool
    /// when it is still usable, else closes it.
    func withConnection<R>(_ body: (any SQLConnection) throws -> R) throws -> R
    /// Closes every connection (listening ones too); later calls fail with a
    /// ``DatabaseFailure/Kind/connectionFailed``.
    func close()
    /// Opens a connection of its own, outside the pool and not counted in its size, for
    /// a long-lived session (a pinned query generation's `REPEATABLE READ` transaction);
    /// `name` tells it apart in the server's activity view. Its owner serialises its
    /// statements and closes it; the driver's ``close()`` closes it too.
    func openSession(name: String) throws -> any SQLSession
    /// Listens for the notifications of `channel` on a connection of its own (outside the
    /// pool) and returns once the server delivers them: `notification` runs with each one's
    /// payload, `lost` once if the connection goes without being cancelled. Neither may
    /// block: they run on the driver's own threads.
    func listen(
        channel: String, notification: @escaping @Sendable (String) -> Void, lost: @escaping @Sendable () -> Void
    ) throws -> any SQLListener
}

/// A connection of its own, outside the pool, held by one owner for a long time: the
/// transaction of a pinned query generation (``SQLDriver/openSession(name:)``).
package protocol SQLSession: SQLConnection, Sendable {
    /// Ends the session without waiting: its transaction is rolled back and the driver may
    /// give its connection to a later session (so that a pin does not cost a connect).
    /// No statement may follow.
    func end()
    /// Closes the connection without waiting for it (the server rolls back a transaction
    /// left open). Statements after it fail with ``DatabaseFailure/Kind/connectionLost``.
    func close()
}

/// A connection listening for notifications (``SQLDriver/listen(channel:notification:lost:)``).
package protocol SQLListener: AnyObject, Sendable {
    /// Stops listening and closes the connection (no `lost` call follows).
    func cancel()
}

/// One connection of an ``SQLDriver``: used by one caller at a time.
package protocol SQLConnection: AnyObject {
    /// Runs `sql` (one statement, its parameters written `$1`, `$2`, ... and bound from
    /// `binds`, never spliced into the text) and returns its rows and the number of rows
    /// it affected.
    func execute(_ sql: String, _ binds: [SQLValue]) throws -> SQLResult
}

/// A value bound to a statement or read from a row.
package enum SQLValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case int16(Int16)
    case int32(Int32)
    case int64(Int64)
    case float(Float)
    case double(Double)
    case text(String)
    case bytes([UInt8])
    /// A `timestamptz`, to the microsecond.
    case timestamp(Date)
    case uuid(UUID)
    /// A `numeric`, in its exact decimal text.
    case numeric(String)

    /// The value as a 64-bit integer, when it is an integer of any width.
    var integer: Int64? {
        switch self {
        case .int16(let n): Int64(n)
        case .int32(let n): Int64(n)
        case .int64(let n): n
        default: nil
        }
    }
}

/// What a statement returned.
package struct SQLResult: Sendable {
    /// The rows, each with a value per column in the select list's order.
    package var rows: [[SQLValue]]
    /// The number of rows the statement inserted, updated, deleted or returned.
    package var affectedRows: Int

    /// A result.
    package init(rows: [[SQLValue]], affectedRows: Int) {
        self.rows = rows
        self.affectedRows = affectedRows
    }
}

extension SQLConnection {
    /// Runs `body` in a transaction: `BEGIN` (with `mode`, such as `ISOLATION LEVEL
    /// REPEATABLE READ, READ ONLY`), then `COMMIT`, or `ROLLBACK` when `body` throws (the
    /// body's error is rethrown; a failing rollback is not reported over it).
    func transaction<R>(_ mode: String = "", _ body: () throws -> R) throws -> R {
        _ = try execute(mode.isEmpty ? "BEGIN" : "BEGIN \(mode)", [])
        let result: R
        do {
            result = try body()
        } catch {
            _ = try? execute("ROLLBACK", [])
            throw error
        }
        do {
            _ = try execute("COMMIT", [])
        } catch let failure as DatabaseFailure where failure.kind == .connectionLost {
            throw DatabaseFailure(kind: failure.kind, sqlState: failure.sqlState, message: failure.message, commitOutcomeUnknown: true)
        }
        return result
    }
}

/// Quoting of SQL identifiers (names of tables, columns, indexes).
enum SQLName {
    /// `name` in double quotes, inner quotes doubled: safe for any model name.
    static func quoted(_ name: String) -> String {
        // Names rarely hold a quote: skip Foundation's search (a save quotes every column).
        guard name.utf8.contains(UInt8(ascii: "\"")) else { return "\"" + name + "\"" }
        return "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    /// PostgreSQL's longest identifier, in bytes (longer ones are cut silently, so two
    /// could become one: the store refuses them instead).
    static let maximumLength = 63
}
