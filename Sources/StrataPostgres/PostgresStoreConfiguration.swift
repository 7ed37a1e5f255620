import Foundation
import Logging
import Strata

/// Where a PostgreSQL store lives and how Strata connects to it: the argument of
/// `PersistentStore.StoreType.postgres(_:)`.
///
/// ```swift
/// import Strata
/// import StrataPostgres
///
/// var configuration = PostgresStoreConfiguration(host: "db.internal", username: "notes", password: secret, database: "notes")
/// configuration.schema = "notes"
/// try await coordinator.addPersistentStore(type: .postgres(configuration))
/// ```
///
/// Every process that adds a store with the same server, database and schema shares one
/// store: the same object IDs, the same rows. The store's tables live in ``schema``
/// (created when missing); see the Strata documentation's "Running on PostgreSQL" article for what maps to what.
public struct PostgresStoreConfiguration: Sendable, Hashable {
    /// Whether connections use TLS.
    public enum TLSMode: Sendable, Hashable {
        /// Plain TCP (a server on loopback or a private network).
        case disable
        /// TLS, with the system's trust roots and the host name checked.
        case require
    }

    /// The server's host name or address.
    public var host: String
    /// The server's port; 5432 by default.
    public var port: Int
    /// The role to log in as.
    public var username: String
    /// The role's password, when the server asks for one.
    public var password: String?
    /// The database; the role's name when nil (PostgreSQL's default).
    public var database: String?
    /// The schema (namespace) holding the store's tables; `public` by default. Several
    /// stores can share a database, each in a schema of its own.
    public var schema: String
    /// Whether connections use TLS; ``TLSMode/disable`` by default.
    public var tls: TLSMode
    /// The most connections the store keeps open (each serves one fetch, fault or save
    /// at a time; callers beyond it wait for a free one); 8 by default.
    public var maximumConnections: Int
    /// How long opening a connection may take, and how long a caller waits for a free
    /// connection, before it fails with `DatabaseFailure.Kind.connectionFailed`;
    /// 10 seconds by default.
    public var connectTimeout: Duration
    /// How long one statement may run before the server cancels it
    /// (`DatabaseFailure.Kind.timedOut`; PostgreSQL's `statement_timeout`); nil
    /// for the server's setting. 30 seconds by default.
    ///
    /// When set, a caller also stops waiting for an answer once this plus
    /// ``connectTimeout`` has passed (a server or network that no longer answers): the
    /// connection is closed and the statement fails with
    /// `DatabaseFailure.Kind.connectionLost`, its effect unknown.
    public var statementTimeout: Duration?
    /// Whether a save of a store that does not track persistent history tells the other
    /// instances that it committed (`pg_notify` on the store's channel, delivered at the
    /// commit), so that their `PersistentStoreCoordinator.remoteChanges` raise an
    /// event (without a token) and their cached rows are dropped at once; false by default,
    /// as Core Data posts remote-change notifications only when asked.
    ///
    /// A store that tracks persistent history always notifies, in the same statement as its
    /// history row, at no cost: that is what merging other instances' saves into contexts
    /// needs. Without history it is one more statement per save, and PostgreSQL's
    /// notification queue at each commit: 8 contexts saving one object each saved at 1.51×
    /// the time of plain postgres-nio without it and 1.92× with it (`make pg-bench` at
    /// 95f0098, Strata's "Running on PostgreSQL" article).
    public var notifiesOtherInstances: Bool

    /// A configuration of the store in `schema` of `database` on `host`.
    public init(
        host: String, port: Int = 5432, username: String, password: String? = nil, database: String? = nil,
        schema: String = "public", tls: TLSMode = .disable
    ) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
        self.database = database
        self.schema = schema
        self.tls = tls
        maximumConnections = 8
        connectTimeout = .seconds(10)
        statementTimeout = .seconds(30)
        notifiesOtherInstances = false
    }

    /// `postgres://user@host:port/database?schema=name`: the location, without the password.
    public var location: String {
        "postgres://\(username)@\(host):\(port)/\(database ?? username)?schema=\(schema)"
    }
}

extension PersistentStore.StoreType {
    /// A store in a PostgreSQL database (StrataPostgres): the same contexts, objects,
    /// fetches and saves as an LMDB store, shared by every process that adds it.
    ///
    /// ```swift
    /// try await coordinator.addPersistentStore(type: .postgres(configuration))
    /// ```
    public static func postgres(_ configuration: PostgresStoreConfiguration) -> PersistentStore.StoreType {
        .server(named: "postgres", opener: PostgresStoreOpener(configuration: configuration))
    }
}

/// Opens ``PostgresDriver``s for a configuration.
struct PostgresStoreOpener: SQLStoreOpener {
    let configuration: PostgresStoreConfiguration

    func inSchema(_ schema: String) -> any SQLStoreOpener {
        var configuration = configuration
        configuration.schema = schema
        return PostgresStoreOpener(configuration: configuration)
    }

    var location: String { configuration.location }

    var identity: String {
        "\(configuration.location)|\(configuration.password ?? "")|\(configuration.tls)|\(configuration.maximumConnections)"
            + "|\(configuration.connectTimeout)|\(configuration.statementTimeout.map { "\($0)" } ?? "-")|\(configuration.notifiesOtherInstances)"
    }

    func makeDriver(logger: Logger, settings: [(name: String, value: String)]) throws(StrataError) -> any SQLDriver {
        do {
            return try PostgresDriver(configuration: configuration, logger: logger, settings: settings)
        } catch let failure as DatabaseFailure {
            throw .database(store: configuration.location, failure: failure)
        } catch {
            throw .database(store: configuration.location, failure: DatabaseFailure(kind: .connectionFailed, message: "\(error)"))
        }
    }
}
