import Foundation

/// Persistent history and changes from other instances on a SQL store.
///
/// A save of a store that tracks history appends one row to `strata_history` in its own
/// transaction: the ``HistoryRecord`` an LMDB store keeps (the same bytes), the instance
/// that wrote it and when. Its sequence number comes from `strata_history_sequence` while
/// the save holds a transaction-scoped advisory lock, held until it commits, so that
/// sequence order is commit order: a reader that has seen transaction *n* has seen every
/// transaction before it, and "the history after my last token" never skips one that
/// committed late.
///
/// Every save that records history also sends a notification on the store's channel
/// (``notificationChannel``), in the same statement, and so does every other save unless
/// the driver was told not to (``SQLDriver/notifiesOnCommit``), carrying the writing instance's ``instance``; PostgreSQL
/// delivers it at the commit, and never for a rolled-back save. Other instances listen
/// (``listen(_:)``), count the commits that were not theirs and read the history after
/// their last sequence: the payload alone is never trusted for what changed.
extension SQLStore {
    /// The history table.
    static let historyTable = "strata_history"
    /// The sequence numbering history transactions.
    static let historySequence = "strata_history_sequence"
    /// The metadata key of the last sequence number deleted (the current token survives
    /// the history's deletion, as on LMDB).
    static let historyDeletedKey = "historyDeletedThrough"

    /// The statements that create the history table and its sequence when missing (run at
    /// every open, under the creation lock: stores made before history existed get them).
    static func historyCreationStatements(schema: String) -> [String] {
        let table = schema + "." + SQLName.quoted(historyTable)
        return [
            "CREATE TABLE IF NOT EXISTS \(table) (sequence bigint PRIMARY KEY, instance uuid NOT NULL, committed timestamptz NOT NULL, record bytea NOT NULL)",
            "CREATE INDEX IF NOT EXISTS \(SQLName.quoted(historyTable + ".committed")) ON \(table) (committed)",
            "CREATE SEQUENCE IF NOT EXISTS \(schema).\(SQLName.quoted(historySequence)) START WITH 1",
        ]
    }

    /// The channel of the store's notifications: one per store (its UUID), so that stores
    /// in other schemas of the database wake nobody here.
    var notificationChannel: String { "strata_" + identifier.uuidString.lowercased() }

    /// The advisory lock key that orders history appends (per store).
    private var historyLockKey: String { "strata-history:" + identifier.uuidString }

    // MARK: Writing

    /// The stored values of the attributes kept in history when `deletion`'s rows go
    /// (``AttributeDescription/preservesValueInHistoryOnDeletion``), read in the save's
    /// transaction before the rows are deleted.
    func tombstones(of deleted: [StoreChanges.Deletion], on connection: any SQLConnection) throws -> [ManagedObjectID: [String: AttributeValue]] {
        var tombstones: [ManagedObjectID: [String: AttributeValue]] = [:]
        for deletion in deleted {
            guard let (table, key) = try? row(of: deletion.objectID) else { continue }
            let kept = table.storage.attributes.enumerated().filter { $0.element.description.preservesValueInHistoryOnDeletion }
            guard !kept.isEmpty,
                  let stored = try connection.execute("SELECT \(table.selectList) FROM \(table.name) WHERE \(SQLName.quoted(SQLLayout.keyColumn)) = $1", [.int64(key)]).rows.first
            else { continue }
            let snapshot = try snapshot(of: stored, table: table)
            var values: [String: AttributeValue] = [:]
            for (slot, attribute) in kept where slot < snapshot.attributes.count {
                if let value = snapshot.attributes[slot] { values[attribute.description.name] = value }
            }
            tombstones[deletion.objectID] = values
        }
        return tombstones
    }

    /// Appends the history record of `save` (written with `keys`, settled as `merge` says),
    /// trims what the store's retention no longer keeps, and sends the commit's
    /// notification: the last statements of the save's transaction (the ordering lock is
    /// held from here to the commit).
    func recordHistory(
        of save: StoreSave, keys: [UInt64], merge: MergeResult? = nil, tombstones: [ManagedObjectID: [String: AttributeValue]],
        on connection: any SQLConnection
    ) throws {
        guard let history = save.history else {
            if driver.notifiesOnCommit { try notify(on: connection) }
            return
        }
        let changes = history.changes(of: save, keys: keys, merge: merge, tombstones: tombstones)
        _ = try appendHistory(
            changes, author: history.author, contextName: history.contextName, recording: true, retention: save.store.options.historyRetention,
            on: connection)
    }

    /// Appends a history transaction of `changes` (when `recording` and there are some),
    /// trims what `retention` no longer keeps, and sends the commit's notification; or
    /// only notifies, when the store notifies other instances of every commit. The last
    /// statements of a transaction (the ordering lock is held from here to the commit).
    ///
    /// - Returns: the transaction's sequence number, when one was appended.
    func appendHistory(
        _ changes: [HistoryRecord.Change], author: String?, contextName: String?, recording: Bool, retention: PersistentHistoryRetention,
        on connection: any SQLConnection
    ) throws -> Int64? {
        guard recording, !changes.isEmpty else {
            if driver.notifiesOnCommit { try notify(on: connection) }
            return nil
        }
        let now = Date()
        let record = HistoryRecord(timestamp: now, author: author, contextName: contextName, processID: getpid(), changes: changes)
        _ = try connection.execute("SELECT pg_advisory_xact_lock(hashtext($1))", [.text(historyLockKey)])
        // One statement: the append, the trim the retention asks for, and the notification.
        var binds: [SQLValue] = [
            .text(layout.qualified(Self.historySequence)), .uuid(instance), .timestamp(now), .bytes(record.encoded()),
            .text(notificationChannel), .text(instance.uuidString),
        ]
        var trims: [String] = []
        if let count = retention.maximumTransactions {
            binds.append(.int64(Int64(count)))
            trims.append("sequence <= (SELECT sequence FROM appended) - $\(binds.count)")
        }
        if let age = retention.maximumAge {
            binds.append(.timestamp(now.addingTimeInterval(-(Double(age.components.seconds) + Double(age.components.attoseconds) / 1e18))))
            trims.append("committed < $\(binds.count)")
        }
        var sql = "WITH appended AS (INSERT INTO \(layout.qualified(Self.historyTable)) (sequence, instance, committed, record) "
            + "VALUES (nextval($1::regclass), $2, $3, $4) RETURNING sequence)"
        if !trims.isEmpty { sql += ", " + deletion(where: trims.joined(separator: " OR ")) }
        sql += " SELECT sequence, pg_notify($5, $6) FROM appended"
        guard let sequence = try connection.execute(sql, binds).rows.first?.first?.integer else {
            throw DatabaseFailure(kind: .schemaChanged, message: "appending to \(Self.historyTable) returned no sequence number")
        }
        return sequence
    }

    /// Tells the other instances of the commit (delivered when it commits).
    private func notify(on connection: any SQLConnection) throws {
        _ = try connection.execute("SELECT pg_notify($1, $2)", [.text(notificationChannel), .text(instance.uuidString)])
    }

    /// The common table expressions `gone` (the history rows matching `condition`,
    /// deleted) and `kept` (the last sequence deleted, recorded so that the current token
    /// survives the deletion).
    private func deletion(where condition: String) -> String {
        let metadata = layout.qualified(SQLLayout.metadataTable)
        return "gone AS (DELETE FROM \(layout.qualified(Self.historyTable)) WHERE \(condition) RETURNING sequence), "
            + "kept AS (INSERT INTO \(metadata) (key, value) SELECT '\(Self.historyDeletedKey)', max(sequence)::text FROM gone HAVING count(*) > 0 "
            + "ON CONFLICT (key) DO UPDATE SET value = GREATEST(\(metadata).value::bigint, EXCLUDED.value::bigint)::text)"
    }

    /// Deletes the history rows matching `condition`; returns how many went.
    private func deleteHistory(where condition: String, _ binds: [SQLValue], on connection: any SQLConnection) throws -> Int {
        let result = try connection.execute("WITH " + deletion(where: condition) + " SELECT count(*) FROM gone", binds)
        return Int(result.rows.first?.first?.integer ?? 0)
    }

    // MARK: Reading

    /// The history records after sequence `after` (all for nil) committed at or after
    /// `since`, oldest first, at most `limit`; with `excludingOwn`, the records this
    /// instance wrote are left out (they still count for the last sequence read).
    ///
    /// - Returns: the records, and the last sequence number read (`after` when none).
    /// - Throws: ``StrataError/corruptRecord(entity:primaryKey:reason:)`` for a record that
    ///   does not decode; ``StrataError/database(store:failure:)``.
    func historyRecords(
        after: UInt64?, since: Date? = nil, limit: Int? = nil, excludingOwn: Bool = false
    ) throws(StrataError) -> (records: [(sequence: UInt64, record: HistoryRecord)], last: UInt64?) {
        var binds: [SQLValue] = [.int64(Int64(bitPattern: min(after ?? 0, UInt64(Int64.max))))]
        var sql = "SELECT sequence, instance, record FROM \(layout.qualified(Self.historyTable)) WHERE sequence > $1"
        if let since {
            binds.append(.timestamp(since))
            sql += " AND committed >= $\(binds.count)"
        }
        sql += " ORDER BY sequence"
        if let limit {
            binds.append(.int64(Int64(max(0, limit))))
            sql += " LIMIT $\(binds.count)"
        }
        let rows = try withConnection { connection in try connection.execute(sql, binds).rows }
        var records: [(sequence: UInt64, record: HistoryRecord)] = []
        var last = after
        for row in rows {
            guard row.count == 3, let number = row[0].integer, case .uuid(let writer) = row[1], case .bytes(let bytes) = row[2] else {
                throw .corruptRecord(entity: Self.historyTable, primaryKey: 0, reason: "a row of \(row.count) columns that are not sequence, instance, record")
            }
            let sequence = UInt64(bitPattern: number)
            last = sequence
            if excludingOwn && writer == instance { continue }
            let decoded = bytes.withUnsafeBytes { raw in
                Result { () throws(RecordDecodingError) -> HistoryRecord in try HistoryRecord(decoding: raw) }
            }
            switch decoded {
            case .success(let record): records.append((sequence, record))
            case .failure(let error): throw .corruptRecord(entity: Self.historyTable, primaryKey: sequence, reason: error.description)
            }
        }
        return (records, last)
    }

    /// The sequence number of the last history transaction (kept after it is deleted);
    /// nil when none was recorded.
    func lastHistorySequence() throws(StrataError) -> UInt64? {
        let row = try withConnection { connection in
            try connection.execute(
                "SELECT COALESCE((SELECT max(sequence) FROM \(layout.qualified(Self.historyTable))), "
                    + "(SELECT value::bigint FROM \(layout.qualified(SQLLayout.metadataTable)) WHERE key = '\(Self.historyDeletedKey)'))",
                []
            ).rows.first
        }
        return row?.first?.integer.map { UInt64(bitPattern: $0) }
    }

    /// Deletes the history before sequence `before`; returns how many transactions went.
    func deleteHistory(before sequence: UInt64) throws(StrataError) -> Int {
        try withConnection { connection in
            try deleteHistory(where: "sequence < $1", [.int64(Int64(bitPattern: min(sequence, UInt64(Int64.max))))], on: connection)
        }
    }

    /// Deletes the history committed before `date`; returns how many transactions went.
    func deleteHistory(before date: Date) throws(StrataError) -> Int {
        try withConnection { connection in try deleteHistory(where: "committed < $1", [.timestamp(date)], on: connection) }
    }

    // MARK: Listening

    /// Starts listening for the commits of other instances: `notified` runs (on a thread of
    /// the driver's) for each commit of another instance; `lost` once, when the listening
    /// connection goes (commits may be missed from then on: listen again, and read the
    /// history to catch up).
    ///
    /// - Throws: ``StrataError/database(store:failure:)`` when the server cannot be reached.
    func listen(notified: @escaping @Sendable () -> Void, lost: @escaping @Sendable () -> Void) throws(StrataError) -> any SQLListener {
        let own = instance.uuidString
        let driver = driver
        let channel = notificationChannel
        return try Self.run(location) {
            try driver.listen(channel: channel, notification: { payload in
                if payload != own { notified() }
            }, lost: lost)
        }
    }
}
