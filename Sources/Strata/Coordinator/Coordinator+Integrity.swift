import Foundation

/// What ``PersistentStoreCoordinator/checkIntegrity()`` found: how much it read and every
/// inconsistency, in words.
///
/// A store written only by Strata is always consistent, even after a crash or `kill -9`
/// mid-save (each save is one LMDB transaction). Problems mean the files were changed
/// behind Strata's back, or damaged. See <doc:Reliability>.
public struct IntegrityReport: Sendable, Hashable, CustomStringConvertible {
    /// The most problems listed; the rest are only counted in ``problemsOmitted``.
    public static let problemLimit = 100

    /// The stores checked.
    public var stores = 0
    /// The rows read (every one decoded).
    public var rows = 0
    /// The index entries counted.
    public var indexEntries = 0
    /// The relationship links read.
    public var links = 0
    /// Each inconsistency found, at most ``problemLimit``.
    public var problems: [String] = []
    /// Problems found beyond ``problemLimit``.
    public var problemsOmitted = 0

    /// An empty report.
    public init() {}

    /// Whether no problem was found.
    public var isConsistent: Bool { problems.isEmpty && problemsOmitted == 0 }

    /// `consistent: 3 stores, 1,200 rows, 2,400 index entries, 800 links`, or the problems.
    public var description: String {
        let summary = "\(stores) store(s), \(rows) rows, \(indexEntries) index entries, \(links) links"
        guard !isConsistent else { return "consistent: \(summary)" }
        let omitted = problemsOmitted > 0 ? "\n- … and \(problemsOmitted) more" : ""
        return "\(problems.count + problemsOmitted) problem(s) in \(summary):\n"
            + problems.map { "- \($0)" }.joined(separator: "\n") + omitted
    }
}

extension PersistentStoreCoordinator {
    /// Reads every store of the coordinator and checks that it is consistent: every page
    /// LMDB can reach is shaped as LMDB writes it (read without LMDB, so damage is
    /// reported instead of crashing the process), every row
    /// decodes, every index has exactly one entry per row, every relationship link joins
    /// two existing rows and agrees with the other side's foreign key or links, and
    /// primary-key sequences are ahead of every key. Like SQLite's `PRAGMA
    /// integrity_check`, for after a crash or a restore from backup.
    ///
    /// Reads each store in one read transaction (a snapshot: saves go on meanwhile), in
    /// time proportional to the store's size. Changes nothing.
    ///
    /// ```swift
    /// let report = try await coordinator.checkIntegrity()
    /// if !report.isConsistent { logger.error("\(report)") }
    /// ```
    ///
    /// - Throws: ``StrataError/storage(_:)`` when a store cannot be read (a full reader
    ///   table, a terminal environment); inconsistencies are in the report, not thrown.
    public nonisolated func checkIntegrity() async throws(StrataError) -> IntegrityReport {
        var report = IntegrityReport()
        // A server store's consistency is its server's: only LMDB stores are checked here.
        for store in persistentStores {
            guard let file = store.file else { continue }
            report.stores += 1
            do {
                try file.checkIntegrity(into: &report)
            } catch let error as StrataError {
                throw error
            } catch {
                throw .incompatibleStore(store: store.url?.path ?? "(in memory)", reason: "its integrity cannot be checked: \(error)")
            }
        }
        return report
    }
}
