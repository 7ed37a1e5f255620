import Foundation

/// How far a migration has come, reported while it runs through
/// ``PersistentStore/Options/migrationProgress``.
public struct MigrationProgress: Sendable, Hashable, CustomStringConvertible {
    /// The store being migrated (its directory).
    public let store: String
    /// The stage running, from 1.
    public let stage: Int
    /// How many stages the migration runs.
    public let stageCount: Int
    /// The entity whose rows are being read, or nil between entities.
    public let entityName: String?
    /// The rows read so far, across every stage.
    public let completedRows: Int
    /// The rows the migration reads in all.
    public let totalRows: Int
    /// Whether the migration has committed: the last report of a migration that succeeded.
    public let isFinished: Bool

    /// The part done, from 0 to 1.
    public var fractionCompleted: Double {
        isFinished ? 1 : totalRows == 0 ? 0 : min(1, Double(completedRows) / Double(totalRows))
    }

    /// `stage 1 of 2, Note: 65536 of 1000000 rows`.
    public var description: String {
        if isFinished { return "migration of \(store) finished: \(completedRows) rows in \(stageCount) stage(s)" }
        return "stage \(stage) of \(stageCount)\(entityName.map { ", \($0)" } ?? ""): \(completedRows) of \(totalRows) rows"
    }
}

/// Where a migration reports its ``MigrationProgress``: a closure, or an `AsyncStream`'s
/// continuation.
///
/// ```swift
/// let (progress, continuation) = AsyncStream.makeStream(of: MigrationProgress.self)
/// options.migrationProgress = MigrationProgressHandler(continuation)
/// Task { for await step in progress { logger.info("\(step)") } }
/// ```
///
/// Reports arrive on the thread that opens the store, every 65,536 rows and at the end of
/// each entity; the closure must be quick. Two handlers are equal only when one is a copy
/// of the other.
public struct MigrationProgressHandler: Sendable, Hashable {
    private final class Box: Sendable {
        let report: @Sendable (MigrationProgress) -> Void
        let finish: @Sendable () -> Void
        init(_ report: @escaping @Sendable (MigrationProgress) -> Void, finish: @escaping @Sendable () -> Void) {
            self.report = report
            self.finish = finish
        }
    }

    private let box: Box

    /// A handler calling `report` with each progress value.
    public init(_ report: @escaping @Sendable (MigrationProgress) -> Void) {
        box = Box(report, finish: {})
    }

    /// A handler yielding each progress value to `continuation`, and finishing it when the
    /// store's open ends, migrated or not (so a `for await` over the stream ends too).
    public init(_ continuation: AsyncStream<MigrationProgress>.Continuation) {
        box = Box({ continuation.yield($0) }, finish: { continuation.finish() })
    }

    /// Reports `progress`.
    func report(_ progress: MigrationProgress) { box.report(progress) }

    /// Says that no more progress will come.
    func finish() { box.finish() }

    /// Handlers are equal when they are copies of one another.
    public static func == (lhs: MigrationProgressHandler, rhs: MigrationProgressHandler) -> Bool { lhs.box === rhs.box }

    /// Hashes the handler's identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(box)) }
}
