import Foundation
import StrataLMDB

/// The persistent history of a store as text, for `strata history`: read from the store's
/// files alone (read-only, no model needed: entity names come from the store's schema).
package enum HistoryTranscript {
    /// One block per transaction after sequence `after` (all for nil), at most `limit`:
    ///
    /// ```
    /// history 2  2026-11-26T10:02:11Z  author importer  context background  pid 4242
    ///   update Note p1: title, priority
    ///   delete Account p7 (tombstone: email "ada@example.com")
    /// ```
    ///
    /// - Throws: ``StrataError/incompatibleStore(store:reason:)`` when `path` holds no
    ///   store; ``StrataError/corruptRecord(entity:primaryKey:reason:)`` for a transaction
    ///   that does not decode; ``StrataError/storage(_:)``.
    package static func lines(storeAt path: String, after: UInt64? = nil, limit: Int? = nil) throws(StrataError) -> [String] {
        var configuration = Environment.Configuration()
        configuration.readOnly = true
        configuration.createIfMissing = false
        configuration.maxDatabases = 512
        let environment: Environment
        do {
            environment = try StoreFile.storage { try Environment(path: path, configuration: configuration) }
        } catch let error where error.storageError.map({ [.noSuchFile, .notADirectory].contains($0) }) ?? false {
            throw .incompatibleStore(store: path, reason: "there is no store there")
        }
        guard let metadata = try StoreFile.existingMetadata(in: environment, path: path) else {
            throw .incompatibleStore(store: path, reason: "it holds no Strata store")
        }
        let records = try StoreFile.storage { () throws -> [(sequence: UInt64, record: HistoryRecord)] in
            let history: Database
            do {
                history = try environment.openDatabase(named: StoreLayout.historyDatabase)
            } catch LMDBError.notFound {
                return []
            }
            return try environment.read { txn in try HistoryLog.records(after: after, limit: limit, in: txn, history: history) }
        }
        let dates = ISO8601DateFormatter()
        var lines: [String] = []
        for (sequence, record) in records {
            var head = "history \(sequence)  \(dates.string(from: record.timestamp))"
            if let author = record.author { head += "  author \(author)" }
            if let context = record.contextName { head += "  context \(context)" }
            lines.append(head + "  pid \(record.processID)")
            for change in record.changes {
                let entity = metadata.schema.entityNames[change.entity] ?? "entity #\(change.entity)"
                var line = "  \(change.kind) \(entity) p\(change.primaryKey)"
                if change.kind == .update && !change.updatedProperties.isEmpty { line += ": " + change.updatedProperties.joined(separator: ", ") }
                if change.kind == .delete && !change.tombstone.isEmpty {
                    line += " (tombstone: " + change.tombstone.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value.messageText)" }.joined(separator: ", ") + ")"
                }
                lines.append(line)
            }
        }
        return lines
    }
}
