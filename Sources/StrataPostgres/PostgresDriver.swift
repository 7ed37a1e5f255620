import Foundation
import Logging
import NIOCore
import NIOPosix
import PostgresNIO
import Strata
import StrataLocks

/// Strata's SQL store driver over postgres-nio: a pool of `PostgresConnection`s on an
/// event loop of the driver's own, driven synchronously.
///
/// Why not postgres-nio's `PostgresClient`: its API is `async` only, and Strata's store
/// calls are synchronous (a fault fires inside a property read; `performAndWait` is
/// synchronous). Waiting for a task from a thread of Swift's cooperative pool can starve
/// the pool (two threads on this machine: DESIGN.md, "Never block the cooperative thread
/// pool"), while waiting for an `EventLoopFuture` of an event loop that runs nothing but
/// these connections never needs a pool thread. The pool lives as long as its store:
/// the coordinator's `close(timeout:)` closes it (so a `StrataService` in a ServiceGroup
/// closes it at shutdown).
///
/// `@unchecked Sendable` because its mutable state (`idle`, `open`, `closed`, `nextID`)
/// is only read and written while `pool` is locked.
final class PostgresDriver: SQLDriver, @unchecked Sendable {
    let location: String
    let schema: String
    let notifiesOnCommit: Bool
    private let configuration: PostgresConnection.Configuration
    private let maximumConnections: Int
    private let connectTimeout: Duration
    /// How long a caller waits for a statement's answer before it closes the connection
    /// and fails (nil: no bound): the statement timeout plus the connect timeout, so that
    /// the server's own cancellation (a typed `timedOut`) always comes first.
    private let answerLimit: Duration?
    private let logger: Logger
    /// One event loop, running only this driver's connections: a caller waiting for one of
    /// its futures is never the thread that must complete it.
    private let group: MultiThreadedEventLoopGroup
    private let pool = ConditionLock()
    /// Guarded by `pool`.
    private var idle: [PostgresConnection] = []
    /// Connections open or being opened; guarded by `pool`.
    private var open = 0
    /// Guarded by `pool`.
    private var closed = false
    /// Guarded by `pool`.
    private var nextID = 1
    /// Connections listening for notifications, outside the pool; guarded by `pool`.
    private var listeners: [ObjectIdentifier: PostgresListener] = [:]
    /// Sessions (pinned query generations' connections), outside the pool; guarded by `pool`.
    private var sessions: [ObjectIdentifier: PostgresSession] = [:]
    /// Connections of ended sessions, kept for the next one (at most `maximumConnections`);
    /// guarded by `pool`.
    private var idleSessions: [PostgresConnection] = []

    /// A driver for `configuration`; its first connection opens at once, so that a server
    /// that cannot be reached fails the store's opening. Every connection starts with
    /// `settings` (startup parameters: no round trip).
    ///
    /// - Throws: ``DatabaseFailure`` of ``DatabaseFailure/Kind/connectionFailed``.
    init(configuration store: PostgresStoreConfiguration, logger: Logger, settings: [(name: String, value: String)] = []) throws {
        location = store.location
        schema = store.schema
        notifiesOnCommit = store.notifiesOtherInstances
        let tls: PostgresConnection.Configuration.TLS
        switch store.tls {
        case .disable:
            tls = .disable
        case .require:
            do {
                tls = .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
            } catch {
                throw DatabaseFailure(kind: .connectionFailed, message: "TLS could not be set up: \(error)")
            }
        }
        var configuration = PostgresConnection.Configuration(
            host: store.host, port: store.port, username: store.username, password: store.password, database: store.database, tls: tls)
        configuration.options.connectTimeout = .nanoseconds(Int64(Self.nanoseconds(store.connectTimeout)))
        if let timeout = store.statementTimeout {
            configuration.options.additionalStartupParameters.append(("statement_timeout", "\(max(1, Self.nanoseconds(timeout) / 1_000_000))"))
        }
        configuration.options.additionalStartupParameters.append(("application_name", "strata"))
        for setting in settings { configuration.options.additionalStartupParameters.append((setting.name, setting.value)) }
        self.configuration = configuration
        maximumConnections = max(1, store.maximumConnections)
        connectTimeout = store.connectTimeout
        answerLimit = store.statementTimeout.map { $0 + store.connectTimeout }
        self.logger = logger
        group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        do {
            let first = try connect()
            pool.withLock {
                open += 1
                idle.append(first)
            }
        } catch {
            try? group.syncShutdownGracefully()
            throw error
        }
    }

    static func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        return UInt64(max(0, seconds)) * 1_000_000_000 + UInt64(max(0, attoseconds) / 1_000_000_000)
    }

    /// Opens a connection, waiting for it; `applicationName` replaces `strata` as its
    /// `application_name` (what `pg_stat_activity` shows).
    private func connect(applicationName: String? = nil) throws -> PostgresConnection {
        let id = pool.withLock { () -> Int in
            defer { nextID += 1 }
            return nextID
        }
        do {
            var configuration = configuration
            if let applicationName {
                configuration.options.additionalStartupParameters.removeAll { $0.0 == "application_name" }
                configuration.options.additionalStartupParameters.append(("application_name", applicationName))
            }
            return try PostgresConnection.connect(on: group.next(), configuration: configuration, id: id, logger: logger).wait()
        } catch {
            throw Self.failure(error, connecting: true)
        }
    }

    func withConnection<R>(_ body: (any SQLConnection) throws -> R) throws -> R {
        let connection = try acquire()
        let wrapper = PostgresSQLConnection(connection: connection, answerLimit: answerLimit, logger: logger)
        do {
            let result = try body(wrapper)
            release(connection, healthy: !wrapper.broken)
            return result
        } catch {
            release(connection, healthy: !wrapper.broken)
            throw error
        }
    }

    /// A connection of the pool: an idle one, a new one when the pool has room, or the
    /// next one given back (waiting at most the connect timeout).
    private func acquire() throws -> PostgresConnection {
        let deadline = ConditionLock.now() + Self.nanoseconds(connectTimeout)
        pool.lock()
        while true {
            if closed {
                pool.unlock()
                throw DatabaseFailure(kind: .connectionFailed, message: "the store's connection pool is closed")
            }
            if let connection = idle.popLast() {
                if connection.isClosed {
                    open -= 1
                    continue
                }
                pool.unlock()
                return connection
            }
            if open < maximumConnections {
                open += 1
                pool.unlock()
                do {
                    return try connect()
                } catch {
                    pool.withLock {
                        open -= 1
                        pool.broadcast()
                    }
                    throw error
                }
            }
            guard pool.wait(untilNanoseconds: deadline) else {
                pool.unlock()
                throw DatabaseFailure(
                    kind: .connectionFailed, message: "no connection of the pool (\(maximumConnections)) came free within \(connectTimeout)")
            }
        }
    }

    /// Gives `connection` back: to the idle ones when it is still usable, else closed
    /// (waiting for the close: a connection must be closed before it goes).
    private func release(_ connection: PostgresConnection, healthy: Bool) {
        let keep = pool.withLock { () -> Bool in
            defer { pool.broadcast() }
            guard healthy, !closed, !connection.isClosed else {
                open -= 1
                return false
            }
            idle.append(connection)
            return true
        }
        if !keep { try? connection.close().wait() }
    }

    /// Closes the pool: new callers fail at once, connections in use are waited for (at
    /// most 30 seconds) and closed as they come back, then the event loop stops.
    func close() {
        pool.lock()
        guard !closed else {
            pool.unlock()
            return
        }
        closed = true
        pool.broadcast()
        let deadline = ConditionLock.now() + 30_000_000_000
        while open > idle.count, pool.wait(untilNanoseconds: deadline) {}
        let connections = idle
        idle = []
        open -= connections.count
        let inUse = open
        let listening = Array(listeners.values)
        listeners = [:]
        let held = Array(sessions.values)
        sessions = [:]
        let parked = idleSessions
        idleSessions = []
        pool.unlock()
        for listener in listening { listener.cancel() }
        for session in held { session.close() }
        for connection in parked { try? connection.close().wait() }
        for connection in connections { try? connection.close().wait() }
        if inUse == 0 {
            try? group.syncShutdownGracefully()
        } else {
            // A caller kept a connection past the deadline: its loop stays up until it is done.
            logger.debug("PostgreSQL connections still in use at close", metadata: ["strata.connections": "\(inUse)"])
        }
    }

    deinit {
        // Not closed by its coordinator (a coordinator let go without close()): nothing is in
        // use (a caller holds the driver), so the idle connections close, and the loop stops,
        // on a thread of their own — never on the thread letting go, which could be anywhere.
        guard !closed else { return }
        let connections = idle
        let listening = Array(listeners.values)
        let held = Array(sessions.values)
        let parked = idleSessions
        let group = group
        Thread.detachNewThread {
            for listener in listening { listener.cancel() }
            for session in held { session.close() }
            for connection in parked { try? connection.close().wait() }
            for connection in connections { try? connection.close().wait() }
            try? group.syncShutdownGracefully()
        }
    }

    // MARK: Sessions

    func openSession(name: String) throws -> any SQLSession {
        if pool.withLock({ closed }) {
            throw DatabaseFailure(kind: .connectionFailed, message: "the store's connection pool is closed")
        }
        // The connection of an ended session when one is parked (a pin costs no connect then).
        let parked = pool.withLock { () -> PostgresConnection? in
            while let connection = idleSessions.popLast() {
                if !connection.isClosed { return connection }
            }
            return nil
        }
        let connection = try parked ?? connect(applicationName: String("\(name) \(schema)".utf8.prefix(63)) ?? name)
        let session = PostgresSession(
            connection: PostgresSQLConnection(connection: connection, answerLimit: answerLimit, logger: logger), driver: self)
        let registered = pool.withLock { () -> Bool in
            guard !closed else { return false }
            sessions[ObjectIdentifier(session)] = session
            return true
        }
        guard registered else {
            session.close()
            throw DatabaseFailure(kind: .connectionFailed, message: "the store's connection pool is closed")
        }
        if parked == nil {
            connection.closeFuture.whenComplete { [weak self] _ in
                guard let self else { return }
                pool.withLock {
                    sessions = sessions.filter { $0.value.connection !== connection }
                    idleSessions.removeAll { $0 === connection }
                }
            }
        }
        return session
    }

    /// Takes back the connection of an ended session whose transaction was rolled back:
    /// parked for the next session, or closed when the driver is closed or enough are parked.
    fileprivate func recycle(_ connection: PostgresConnection, of session: PostgresSession) {
        let keep = pool.withLock { () -> Bool in
            sessions.removeValue(forKey: ObjectIdentifier(session))
            guard !closed, !connection.isClosed, idleSessions.count < maximumConnections else { return false }
            idleSessions.append(connection)
            return true
        }
        if !keep { connection.close().whenComplete { _ in } }
    }

    /// Forgets an ended session whose connection closed.
    fileprivate func forget(_ session: PostgresSession) {
        _ = pool.withLock { sessions.removeValue(forKey: ObjectIdentifier(session)) }
    }

    // MARK: Listening

    func listen(
        channel: String, notification: @escaping @Sendable (String) -> Void, lost: @escaping @Sendable () -> Void
    ) throws -> any SQLListener {
        if pool.withLock({ closed }) {
            throw DatabaseFailure(kind: .connectionFailed, message: "the store's connection pool is closed")
        }
        // `strata listen <schema>`: an administrator (or a test) can tell it from the pool's.
        let connection = try connect(applicationName: String("strata listen \(schema)".utf8.prefix(63)) ?? "strata listen")
        let listener = PostgresListener(connection: connection)
        connection.addListener(channel: channel) { _, response in notification(response.payload) }
        do {
            // Statements run in order: once this answers, the LISTEN before it is in force.
            _ = try PostgresSQLConnection(connection: connection, answerLimit: answerLimit ?? .seconds(30), logger: logger).execute("SELECT 1", [])
        } catch {
            try? connection.close().wait()
            throw error
        }
        let registered = pool.withLock { () -> Bool in
            guard !closed else { return false }
            listeners[ObjectIdentifier(listener)] = listener
            return true
        }
        guard registered else {
            try? connection.close().wait()
            throw DatabaseFailure(kind: .connectionFailed, message: "the store's connection pool is closed")
        }
        connection.closeFuture.whenComplete { [weak self] _ in
            _ = self?.pool.withLock { self?.listeners.removeValue(forKey: ObjectIdentifier(listener)) }
            if listener.markClosed() { lost() }
        }
        return listener
    }

    /// A ``DatabaseFailure`` for an error of postgres-nio.
    static func failure(_ error: any Error, connecting: Bool) -> DatabaseFailure {
        if let failure = error as? DatabaseFailure { return failure }
        guard let error = error as? PSQLError else {
            return DatabaseFailure(kind: connecting ? .connectionFailed : .connectionLost, message: "\(error)")
        }
        if let info = error.serverInfo {
            let state = info[.sqlState]
            let message = [info[.message], info[.detail]].compactMap { $0 }.joined(separator: ": ")
            let kind: DatabaseFailure.Kind
            switch state {
            case "57014"?: kind = .timedOut   // query_canceled: statement_timeout
            case "42P01"?, "42703"?, "42804"?, "3F000"?, "42883"?: kind = .schemaChanged
            // 25P03/25P04: the server ended the session (idle in a transaction too long, a
            // transaction timeout): the connection is gone, as after an administrator's end.
            case let code? where code.hasPrefix("08") || code == "57P01" || code == "57P02" || code == "57P03"
                || code == "25P03" || code == "25P04":
                kind = connecting ? .connectionFailed : .connectionLost
            case let code? where code.hasPrefix("28") || code == "3D000":
                kind = .connectionFailed
            default: kind = connecting ? .connectionFailed : .serverError
            }
            return DatabaseFailure(kind: kind, sqlState: state, message: message.isEmpty ? "\(error.code)" : message)
        }
        let kind: DatabaseFailure.Kind = connecting ? .connectionFailed : .connectionLost
        let underlying = error.underlying.map { ": \($0)" } ?? ""
        return DatabaseFailure(kind: kind, message: "\(error.code)\(underlying)")
    }
}

/// One connection lent to the store: statements run synchronously.
final class PostgresSQLConnection: SQLConnection {
    let connection: PostgresConnection
    let logger: Logger
    /// Whether the connection failed in a way that leaves it unusable (lost, or in an
    /// unknown protocol state): it is closed instead of going back to the pool.
    private(set) var broken = false
    /// How long to wait for an answer before the connection is closed (nil: no bound).
    let answerLimit: Duration?

    init(connection: PostgresConnection, answerLimit: Duration?, logger: Logger) {
        self.connection = connection
        self.answerLimit = answerLimit
        self.logger = logger
    }

    /// The value of `future`, the answer to a statement just written: failed with
    /// `connectionLost` when the connection had closed before the statement reached it
    /// (postgres-nio then never completes the future: a `ROLLBACK` after a terminated
    /// backend hung a save so, once in a few test runs), and waited for at most
    /// `answerLimit`, past which the connection is closed, so that a server or network that
    /// stops answering never holds a caller forever.
    private func answer<T: Sendable>(_ future: EventLoopFuture<T>) throws -> T {
        let promise = future.eventLoop.makePromise(of: T.self)
        future.cascade(to: promise)
        let connection = connection
        // The loop runs its tasks in order: this runs after the statement's write. A channel
        // closed after that write fails the statement itself; one closed before, only here.
        future.eventLoop.execute {
            if connection.isClosed {
                promise.fail(DatabaseFailure(kind: .connectionLost, message: "the connection closed before the statement was sent"))
            }
        }
        let timer = answerLimit.map { limit in
            future.eventLoop.scheduleTask(in: .nanoseconds(Int64(PostgresDriver.nanoseconds(limit)))) {
                promise.fail(DatabaseFailure(kind: .connectionLost, message: "the server did not answer within \(limit); the connection was closed"))
                connection.close().whenComplete { _ in }
            }
        }
        defer { timer?.cancel() }
        return try promise.futureResult.wait()
    }

    func execute(_ sql: String, _ binds: [SQLValue]) throws -> SQLResult {
        var bindings = PostgresBindings(capacity: binds.count)
        for value in binds {
            switch value {
            case .null: bindings.appendNull()
            case .bool(let b): bindings.append(b)
            case .int16(let n): bindings.append(n)
            case .int32(let n): bindings.append(n)
            case .int64(let n): bindings.append(n)
            case .float(let f): bindings.append(f)
            case .double(let d): bindings.append(d)
            case .text(let s): bindings.append(s)
            case .bytes(let bytes): bindings.append(ByteBuffer(bytes: bytes))
            case .timestamp(let date): bindings.append(date)
            case .uuid(let uuid): bindings.append(uuid)
            case .numeric(let text):
                guard let decimal = Decimal(string: text, locale: Locale(identifier: "en_US_POSIX")) else {
                    throw DatabaseFailure(kind: .serverError, message: "'\(text)' is not a decimal number")
                }
                try bindings.append(decimal)
            }
        }
        // A lost connection takes no statement: postgres-nio writes a query to a channel that
        // has closed without ever completing its future (a `ROLLBACK` after a terminated
        // backend hung a save so, once in a few test runs).
        guard !broken, !connection.isClosed else {
            broken = true
            throw DatabaseFailure(kind: .connectionLost, message: "the connection is closed")
        }
        let result: PostgresQueryResult
        do {
            result = try answer(connection.query(PostgresQuery(unsafeSQL: sql, binds: bindings), logger: logger))
        } catch {
            let failure = PostgresDriver.failure(error, connecting: false)
            if failure.kind == .connectionLost || connection.isClosed { broken = true }
            throw failure
        }
        var rows: [[SQLValue]] = []
        rows.reserveCapacity(result.rows.count)
        for row in result.rows {
            var values: [SQLValue] = []
            for cell in row {
                values.append(try Self.value(of: cell))
            }
            rows.append(values)
        }
        return SQLResult(rows: rows, affectedRows: result.metadata.rows ?? rows.count)
    }

    /// The value of a cell, by its column's type.
    static func value(of cell: PostgresCell) throws -> SQLValue {
        guard cell.bytes != nil else { return .null }
        do {
            switch cell.dataType {
            case .bool: return .bool(try cell.decode(Bool.self))
            case .int2: return .int16(try cell.decode(Int16.self))
            case .int4: return .int32(try cell.decode(Int32.self))
            case .int8, .oid: return .int64(try cell.decode(Int64.self))
            case .float4: return .float(try cell.decode(Float.self))
            case .float8: return .double(try cell.decode(Double.self))
            case .bytea:
                var buffer = try cell.decode(ByteBuffer.self)
                return .bytes(buffer.readBytes(length: buffer.readableBytes) ?? [])
            case .timestamptz, .timestamp: return .timestamp(try cell.decode(Date.self))
            case .uuid: return .uuid(try cell.decode(UUID.self))
            case .numeric: return .numeric("\(try cell.decode(Decimal.self))")
            default: return .text(try cell.decode(String.self))
            }
        } catch {
            throw DatabaseFailure(
                kind: .schemaChanged, message: "column \(cell.columnName) (type \(cell.dataType)) could not be read: \(error)")
        }
    }
}

/// A connection that listens for notifications (``PostgresDriver/listen(channel:notification:lost:)``),
/// outside the pool.
///
/// `@unchecked Sendable` because its one mutable field, `state`, is a `LockedValue`.
final class PostgresListener: SQLListener, @unchecked Sendable {
    private let connection: PostgresConnection
    /// Whether it was cancelled, and whether its connection closed.
    private let state = LockedValue((cancelled: false, closed: false))

    init(connection: PostgresConnection) {
        self.connection = connection
    }

    func cancel() {
        let close = state.withLock { state -> Bool in
            defer { state.cancelled = true }
            return !state.cancelled && !state.closed
        }
        if close { try? connection.close().wait() }
    }

    /// Records that the connection closed; true when nobody cancelled it (it was lost).
    func markClosed() -> Bool {
        state.withLock { state in
            defer { state.closed = true }
            return !state.cancelled && !state.closed
        }
    }
}

/// A connection of its own for a long-lived session (``PostgresDriver/openSession(name:)``),
/// outside the pool.
///
/// `@unchecked Sendable` because its statements are serialised by its one owner (a pinned
/// query generation's snapshot, under its lock), `ended` is a `LockedValue`, and `end()` and
/// `close()` only start work on the NIO channel, which is safe from any thread.
final class PostgresSession: SQLSession, @unchecked Sendable {
    private let wrapped: PostgresSQLConnection
    private weak var driver: PostgresDriver?
    private let ended = LockedValue(false)

    init(connection: PostgresSQLConnection, driver: PostgresDriver) {
        wrapped = connection
        self.driver = driver
    }

    var connection: PostgresConnection { wrapped.connection }

    func execute(_ sql: String, _ binds: [SQLValue]) throws -> SQLResult {
        try wrapped.execute(sql, binds)
    }

    /// Rolls the session's transaction back without waiting, then parks the connection for
    /// the next session (or closes it when that fails or the driver is gone).
    func end() {
        guard !ended.withLock({ (ended: inout Bool) -> Bool in defer { ended = true }; return ended }) else { return }
        let connection = wrapped.connection
        // A closed channel (the driver's close, a lost connection) takes no statement: its
        // future would never complete.
        guard !wrapped.broken, !connection.isClosed, let driver else {
            driver?.forget(self)
            if !connection.isClosed { connection.close().whenComplete { _ in } }
            return
        }
        connection.query(PostgresQuery(unsafeSQL: "ROLLBACK"), logger: wrapped.logger).whenComplete { [weak driver] result in
            switch result {
            case .success: driver?.recycle(connection, of: self)
            case .failure:
                driver?.forget(self)
                connection.close().whenComplete { _ in }
            }
        }
    }

    func close() {
        ended.withLock { $0 = true }
        // Once closed (by the driver's close, whose event loop may be gone since), nothing
        // more is asked of the connection.
        guard !wrapped.connection.isClosed else { return }
        wrapped.connection.close().whenComplete { _ in }
    }
}
