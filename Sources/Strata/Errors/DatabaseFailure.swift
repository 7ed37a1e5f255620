/// How a database server store failed: what ``StrataError/database(store:failure:)``
/// carries.
///
/// A ``Kind`` to act on (retry after ``Kind/connectionLost`` or ``Kind/timedOut``; fix the
/// deployment after ``Kind/connectionFailed``; migrate after ``Kind/schemaChanged``), the
/// server's SQLSTATE when it sent one, and its message.
public struct DatabaseFailure: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong.
    public struct Kind: Sendable, Hashable, CustomStringConvertible {
        private let name: String

        private init(_ name: String) { self.name = name }

        /// The server could not be reached or refused the login (wrong host, port,
        /// credentials or database, or the server is down).
        public static let connectionFailed = Kind("connectionFailed")
        /// The connection broke while a statement ran. A save that fails this way wrote
        /// nothing when it failed before its commit; when the commit itself was in flight,
        /// the server decided, and ``DatabaseFailure/commitOutcomeUnknown`` is true.
        public static let connectionLost = Kind("connectionLost")
        /// A statement ran longer than the store's statement timeout and was cancelled by
        /// the server; its transaction was rolled back.
        public static let timedOut = Kind("timedOut")
        /// A table or column the model needs is missing or of another type: the schema
        /// was changed underneath the store.
        public static let schemaChanged = Kind("schemaChanged")
        /// The server refused a statement for another reason (see the SQLSTATE).
        public static let serverError = Kind("serverError")

        /// The kind's name: `connectionLost`.
        public var description: String { name }
    }

    /// What went wrong.
    public let kind: Kind
    /// The server's SQLSTATE code (`57014` for a cancelled statement, ...); nil when the
    /// server sent none (a connection failure).
    public let sqlState: String?
    /// The server's or the driver's message.
    public let message: String
    /// True when the connection broke while a commit was in flight, so that the save may
    /// or may not have been written: read the objects again before retrying it.
    public let commitOutcomeUnknown: Bool

    /// A failure.
    public init(kind: Kind, sqlState: String? = nil, message: String, commitOutcomeUnknown: Bool = false) {
        self.kind = kind
        self.sqlState = sqlState
        self.message = message
        self.commitOutcomeUnknown = commitOutcomeUnknown
    }

    /// `connectionLost (SQLSTATE 08006): server closed the connection`.
    public var description: String {
        "\(kind)" + (sqlState.map { " (SQLSTATE \($0))" } ?? "") + ": \(message)"
            + (commitOutcomeUnknown ? " (the commit was in flight: it may or may not have been written)" : "")
    }
}
