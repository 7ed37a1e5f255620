import Foundation
import Logging
import StrataLMDB
import Tracing

extension PersistentStoreCoordinator {
    /// Runs a batch request (``BatchInsertRequest``, ``BatchUpdateRequest``,
    /// ``BatchDeleteRequest``) in the store, below every context: one write transaction
    /// per store it writes, taken on the coordinator's write queue like a save (saves
    /// that arrive meanwhile wait, and group-commit together after it). The history it
    /// records has no author; run it from a context to record its
    /// ``ManagedObjectContext/transactionAuthor``.
    ///
    /// Contexts that merge automatically (``ManagedObjectContext/automaticallyMergesChangesFromParent``)
    /// merge what it updated and deleted; others catch up with
    /// ``ManagedObjectContext/mergeChanges(fromRemoteContextSave:into:)`` and the result's
    /// ``PersistentStoreResult/changes``, or from persistent history. See <doc:BatchRequests>.
    ///
    /// A handler of a ``BatchInsertRequest`` runs on the calling thread inside the write:
    /// it must not save or run requests through this coordinator (that would wait for
    /// the write it is part of).
    ///
    /// - Throws: ``StrataError/unknownEntity(_:)``, ``StrataError/unknownKey(key:entity:)``,
    ///   ``StrataError/typeMismatch(key:entity:expected:actual:)``, ``StrataError/validation(_:)``,
    ///   ``StrataError/constraintConflicts(_:)``, ``StrataError/objectNotFound(_:)`` (a
    ///   relationship to an object not stored), ``StrataError/readOnlyStore(_:)``,
    ///   ``StrataError/noStore(entity:)``, ``FetchPredicateError`` for a predicate the
    ///   entity cannot answer, and storage errors. A request that throws has written nothing (in a store whose write failed).
    public nonisolated func execute(_ request: some PersistentStoreRequest) throws -> PersistentStoreResult {
        try executeBatch(request.storeRequest, author: nil, contextName: nil)
    }

    /// Runs `request`, recording `author` and `contextName` in persistent history.
    nonisolated func executeBatch(_ request: StoreRequest, author: String?, contextName: String?) throws -> PersistentStoreResult {
        try writeGate.enter()
        defer { writeGate.leave() }
        let history = BatchHistory(author: author, contextName: contextName)
        let logger = Logger.boundCurrent ?? self.logger
        let (kind, entity) = request.logDescription
        var metadata: Logger.Metadata = ["strata.request": "\(kind)", "strata.entity": "\(entity)"]
        if let contextName { metadata["strata.context"] = "\(contextName)" }
        if let author { metadata["strata.author"] = "\(author)" }
        do {
            let result = try Instruments.traced(by: instruments.tracer, kind.replacingOccurrences(of: " ", with: "_"), entity: entity) { span in
                if let contextName { span?.attributes["strata.context"] = contextName }
                let result = try StoreFile.translatingStorageErrors {
                    switch request.kind {
                    case .insert(let insert): try batchInsert(insert, history: history)
                    case .update(let update): try batchUpdate(update, history: history)
                    case .delete(let delete): try batchDelete(delete, history: history)
                    }
                }
                if let span, let rows = result.count ?? result.objectIDs?.count {
                    span.attributes["db.operation.batch.size"] = rows
                }
                return result
            }
            logger.debug("batch request written", metadata: metadata)
            return result
        } catch {
            metadata["strata.error"] = "\((error as? StrataError)?.code.description ?? "\(type(of: error))")"
            metadata["strata.error.description"] = "\(error)"
            logger.debug("batch request failed", metadata: metadata)
            throw error
        }
    }

    // MARK: Insert

    private nonisolated func batchInsert(_ request: BatchInsertRequest, history: BatchHistory) throws -> PersistentStoreResult {
        let store = try defaultStore(for: request.entityName)
        if let sql = store.sql { return try serverBatchInsert(request, in: store, sql: sql, history: history) }
        let file = try store.requireLMDB("batch requests (insert, update, delete) are not available on \(store.type.rawValue) stores yet")
        let storage = try file.entityStorage(named: request.entityName)
        guard storage.rows != nil else {
            throw StrataError.invalidObjectState(
                ManagedObjectID(temporaryFor: request.entityName), reason: "entity \(request.entityName) is abstract: it has no instances of its own")
        }
        var producer = try BatchRowProducer(request: request, storage: storage)
        var retained: [RetainedRows] = []
        let merging = request.mergePolicy.merges ? SaveMerging(policy: request.mergePolicy, changes: [:]) : nil
        // Upserts that take a stored row over wholesale are rewritten where the row stands,
        // without the general merge (an entity without relationships; see upsertRows).
        let upsertRule: StoreWriter.UpsertRule? = switch request.mergePolicy {
        case .mergeByPropertyObjectTrump: storage.hasRelationships ? nil : .objectTrump
        case .overwrite: storage.hasRelationships ? nil : .overwrite
        default: nil
        }
        let collectsIDs = request.resultType == .objectIDs || !mergingContexts.alive.isEmpty || liveResults.hasObservers
        let tracksHistory = store.options.tracksPersistentHistory
        let storedNames = storage.entity.attributes.filter { !$0.isTransient }.map(\.name)
        let outcome = try writeBatch(to: store) { writer in
            // Runs again from the start after a map growth: everything below is its own.
            var outcome = BatchOutcome()
            var seen = Set<UInt64>()   // rows already counted, when objects may merge into one
            // Rows whose relationships the new rows changed, gathered over the whole request
            // and recorded once each (many new notes of one folder update the folder once).
            var touched: [(row: RowReference, relationship: String)] = []
            var inserted = Set<RowReference>()
            func write(_ chunk: EncodedRows) throws {
                var rows = chunk
                let keys: [UInt64]
                var merge: MergeResult?
                do {
                    if let upsertRule, !storage.constraints.isEmpty, let upserts = try writer.upsertRows(chunk, storage: storage, rule: upsertRule) {
                        rows = upserts.rows
                        keys = try writer.writeChecked(rows, deleting: [], unique: upserts.unique)
                    } else {
                        (keys, merge) = try writer.apply(rows, deleting: [], checking: [], merging: merging)
                    }
                } catch let StoreWriteError.constraintConflict(conflicts) {
                    throw StrataError.constraintConflicts(conflicts)
                }
                for index in rows.rows.indices {
                    guard index < keys.count, let key = PrimaryKey(keys[index]) else { continue }
                    // Field by field: a copy of the whole row costs more than the rest of this.
                    let upserted = !rows.rows[index].isInsert
                        || (merge != nil && rows.rows[index].objectID.flatMap { merge?.adopted[$0] } != nil)
                    if merging != nil && !seen.insert(keys[index]).inserted {
                        if collectsIDs { outcome.objectIDs.append(file.objectID(entity: storage.name, key: key)) }
                        continue   // an earlier object of the request, merged into this one
                    }
                    outcome.count += 1
                    if collectsIDs {
                        let id = file.objectID(entity: storage.name, key: key)
                        outcome.objectIDs.append(id)
                        if upserted { outcome.changes.updated.append(id) } else { outcome.changes.inserted.append(id) }
                    }
                    if tracksHistory {
                        outcome.history.append(HistoryRecord.Change(
                            kind: upserted ? .update : .insert, entity: rows.rows[index].entity, primaryKey: key.rawValue,
                            updatedProperties: upserted ? storedNames : []))
                    }
                    if let relationships = rows.rows[index].relationships {
                        let row = RowReference(entityNumber: rows.rows[index].entity, primaryKey: key)
                        if !upserted { inserted.insert(row) }
                        touched += try writer.linkInverses(ofNewRow: row, storage: storage, values: relationships)
                    }
                }
            }
            for chunk in retained { try write(chunk.rows) }
            while let rows = try producer.nextChunk() {
                retained.append(RetainedRows(rows))
                try write(rows)
            }
            outcome.touch(touched.filter { !inserted.contains($0.row) }, in: file, collectingIDs: collectsIDs, history: tracksHistory)
            outcome.historyToken = try recordBatchHistory(outcome.history, history: history, store: store, writer: writer)
            return outcome
        }
        mergeIntoContexts(outcome.changes)
        return PersistentStoreResult(
            resultType: request.resultType, count: outcome.count, objectIDs: outcome.objectIDs, changes: outcome.changes,
            historyToken: outcome.historyToken)
    }

    // MARK: Update

    private nonisolated func batchUpdate(_ request: BatchUpdateRequest, history: BatchHistory) throws -> PersistentStoreResult {
        guard let entity = managedObjectModel.entitiesByName[request.entityName] else { throw StrataError.unknownEntity(request.entityName) }
        for (name, expression) in request.propertiesToUpdate {
            guard let attribute = entity.attribute(named: name), !attribute.isTransient else {
                throw StrataError.unknownKey(key: name, entity: entity.name)
            }
            for key in expression.keys where entity.attribute(named: key).map({ $0.isTransient }) ?? true {
                throw StrataError.unknownKey(key: key, entity: entity.name)
            }
        }
        var fetch = FetchRequest<ManagedObjectID>(entityName: request.entityName)
        fetch.predicate = request.predicate
        fetch.includesSubentities = request.includesSubentities
        fetch.resultType = .managedObjectID
        let plan = try FetchPlanner.plan(fetch, in: managedObjectModel)
        let names = request.propertiesToUpdate.keys.sorted()
        let collectsIDs = request.resultType == .objectIDs || !mergingContexts.alive.isEmpty || liveResults.hasObservers
        var total = BatchOutcome()
        guard !names.isEmpty else { return total.result(request.resultType) }
        for store in stores(for: request.entityName, includesSubentities: request.includesSubentities) {
            if let sql = store.sql {
                total.add(try serverBatchUpdate(request, names: names, in: store, sql: sql, history: history, collectsIDs: collectsIDs))
                continue
            }
            let file = try store.requireLMDB("batch requests (insert, update, delete) are not available on \(store.type.rawValue) stores yet")
            let tracksHistory = store.options.tracksPersistentHistory
            let outcome = try writeBatch(to: store) { writer in
                var outcome = BatchOutcome()
                guard case .objectIDs(let ids) = try writer.reader.execute(plan) else { return outcome }
                for (entityName, keys) in Self.keysByEntity(ids) {
                    let storage = try file.entityStorage(named: entityName)
                    let assignments = try names.map { name in
                        guard let slot = storage.attributeSlot(named: name), let field = storage.attributes[slot].field,
                              let expression = request.propertiesToUpdate[name]
                        else { throw StrataError.unknownKey(key: name, entity: entityName) }
                        return StoreWriter.BatchAssignment(
                            slot: slot, field: field, attribute: storage.attributes[slot].description, expression: expression)
                    }
                    let changed = try writer.batchUpdate(keys, of: storage, assignments: assignments)
                    outcome.count += changed.count
                    for key in changed {
                        if collectsIDs {
                            let id = file.objectID(entity: entityName, key: key)
                            outcome.objectIDs.append(id)
                            outcome.changes.updated.append(id)
                        }
                        if tracksHistory {
                            outcome.history.append(HistoryRecord.Change(
                                kind: .update, entity: storage.number, primaryKey: key.rawValue, updatedProperties: names))
                        }
                    }
                }
                outcome.historyToken = try recordBatchHistory(outcome.history, history: history, store: store, writer: writer)
                return outcome
            }
            total.add(outcome)
        }
        mergeIntoContexts(total.changes)
        return total.result(request.resultType)
    }

    // MARK: Delete

    private nonisolated func batchDelete(_ request: BatchDeleteRequest, history: BatchHistory) throws -> PersistentStoreResult {
        let collectsIDs = request.resultType == .objectIDs || !mergingContexts.alive.isEmpty || liveResults.hasObservers
        var total = BatchOutcome()
        // What to delete, by store: the fetch's rows (found in the write), or the IDs given.
        let targets: [(store: PersistentStore, ids: [ManagedObjectID]?)]
        let plan: FetchPlan?
        switch request.target {
        case .fetch(let fetch):
            plan = try FetchPlanner.plan(fetch, in: managedObjectModel)
            targets = stores(for: fetch.entityName, includesSubentities: fetch.includesSubentities).map { ($0, nil) }
        case .objectIDs(let ids):
            plan = nil
            var byStore: [UUID: [ManagedObjectID]] = [:]
            for id in ids {
                guard let storeIdentifier = id.storeIdentifier else {
                    throw StrataError.invalidObjectState(id, reason: "it has a temporary ID: it was never saved")
                }
                byStore[storeIdentifier, default: []].append(id)
            }
            var found: [(PersistentStore, [ManagedObjectID]?)] = []
            for store in persistentStores {
                if let ids = byStore.removeValue(forKey: store.identifier) { found.append((store, ids)) }
            }
            if let (_, ids) = byStore.first, let id = ids.first {
                throw StrataError.invalidObjectState(id, reason: "its store is not one of this coordinator's")
            }
            targets = found
        }
        for (store, ids) in targets {
            if let sql = store.sql {
                let fetch: FetchRequest<ManagedObjectID>? = if case .fetch(let fetch) = request.target { fetch } else { nil }
                total.add(try serverBatchDelete(ids, fetch: fetch, in: store, sql: sql, history: history, collectsIDs: collectsIDs))
                continue
            }
            let file = try store.requireLMDB("batch requests (insert, update, delete) are not available on \(store.type.rawValue) stores yet")
            let tracksHistory = store.options.tracksPersistentHistory
            let outcome = try writeBatch(to: store) { writer in
                var outcome = BatchOutcome()
                let requested: [ManagedObjectID]
                if let ids {
                    requested = ids
                } else if let plan, case .objectIDs(let found) = try writer.reader.execute(plan) {
                    requested = found
                } else {
                    requested = []
                }
                let deletePlan = try writer.planDelete(try requested.map { id throws(StrataError) in try file.reference(to: id) })
                var tombstones: [RowReference: [String: AttributeValue]] = [:]
                if tracksHistory { tombstones = try Self.tombstones(of: deletePlan.rows, in: file, with: writer) }
                let (deleted, rewritten) = try writer.delete(deletePlan)
                outcome.count = deleted.count
                for row in deleted {
                    guard let storage = file.entityStorage(numbered: row.entityNumber) else { continue }
                    if collectsIDs {
                        let id = file.objectID(entity: storage.name, key: row.primaryKey)
                        outcome.objectIDs.append(id)
                        outcome.changes.deleted.append(id)
                    }
                    if tracksHistory {
                        outcome.history.append(HistoryRecord.Change(
                            kind: .delete, entity: row.entityNumber, primaryKey: row.primaryKey.rawValue, tombstone: tombstones[row] ?? [:]))
                    }
                }
                outcome.touch(rewritten + deletePlan.unlinked, in: file, collectingIDs: collectsIDs, history: tracksHistory)
                outcome.historyToken = try recordBatchHistory(outcome.history, history: history, store: store, writer: writer)
                return outcome
            }
            total.add(outcome)
        }
        mergeIntoContexts(total.changes)
        return total.result(request.resultType)
    }

    /// The stored values of the attributes marked
    /// ``AttributeDescription/preservesValueInHistoryOnDeletion`` of each row of `rows`,
    /// read before they are deleted.
    private static func tombstones(
        of rows: [RowReference], in file: StoreFile, with writer: borrowing StoreWriter
    ) throws -> [RowReference: [String: AttributeValue]] {
        var tombstones: [RowReference: [String: AttributeValue]] = [:]
        for row in rows {
            guard let storage = file.entityStorage(numbered: row.entityNumber) else { continue }
            let kept = storage.attributes.filter { $0.description.preservesValueInHistoryOnDeletion && $0.field != nil }
            guard !kept.isEmpty, let record = try writer.reader.record(at: row.primaryKey, of: storage) else { continue }
            var values: [String: AttributeValue] = [:]
            for attribute in kept {
                if let field = attribute.field, let value = record.fields[field] { values[attribute.description.name] = value }
            }
            tombstones[row] = values
        }
        return tombstones
    }

    /// `ids` grouped by entity, each group's keys ascending (rows are then met in key
    /// order), the groups by entity name.
    private static func keysByEntity(_ ids: [ManagedObjectID]) -> [(String, [PrimaryKey])] {
        var groups: [String: [PrimaryKey]] = [:]
        for id in ids {
            guard let key = id.primaryKey else { continue }
            groups[id.entityName, default: []].append(key)
        }
        return groups.sorted { $0.key < $1.key }.map { ($0.key, $0.value.sorted { $0.rawValue < $1.rawValue }) }
    }

    // MARK: Server stores

    /// A batch insert into a server store (``SQLStore/batchInsert(_:into:merging:history:retention:)``):
    /// one transaction, on the server.
    private nonisolated func serverBatchInsert(
        _ request: BatchInsertRequest, in store: PersistentStore, sql: SQLStore, history: BatchHistory
    ) throws -> PersistentStoreResult {
        let storage = try sql.entityStorage(named: request.entityName)
        guard sql.layout.tables[request.entityName] != nil else {
            throw StrataError.invalidObjectState(
                ManagedObjectID(temporaryFor: request.entityName), reason: "entity \(request.entityName) is abstract: it has no instances of its own")
        }
        var producer = try BatchRowProducer(request: request, storage: storage)
        let merging = request.mergePolicy.merges ? SaveMerging(policy: request.mergePolicy, changes: [:]) : nil
        let collectsIDs = request.resultType == .objectIDs || !mergingContexts.alive.isEmpty || liveResults.hasObservers
        let write = try serverBatch(to: store) {
            try sql.batchInsert(
                { () throws -> EncodedRows? in try producer.nextChunk() }, into: store, merging: merging,
                history: store.options.tracksPersistentHistory ? (history.author, history.contextName) : nil,
                retention: store.options.historyRetention)
        }
        var outcome = BatchOutcome()
        outcome.count = write.rows.count
        if collectsIDs {
            outcome.objectIDs = write.ids
            for row in write.rows {
                if row.upserted { outcome.changes.updated.append(row.objectID) } else { outcome.changes.inserted.append(row.objectID) }
            }
            var seen = Set(outcome.changes.updated)
            for (id, _) in write.touched where seen.insert(id).inserted { outcome.changes.updated.append(id) }
        }
        outcome.historyToken = write.historySequence.map { PersistentHistoryToken(storeIdentifier: store.identifier, sequence: UInt64($0)) }
        mergeIntoContexts(outcome.changes)
        return outcome.result(request.resultType)
    }

    /// A batch update of a server store (``SQLStore/batchUpdate(_:settings:names:history:retention:)``):
    /// one transaction, on the server.
    private nonisolated func serverBatchUpdate(
        _ request: BatchUpdateRequest, names: [String], in store: PersistentStore, sql: SQLStore, history: BatchHistory, collectsIDs: Bool
    ) throws -> BatchOutcome {
        var fetch = FetchRequest<ManagedObjectID>(entityName: request.entityName)
        fetch.predicate = request.predicate
        fetch.includesSubentities = request.includesSubentities
        let write = try serverBatch(to: store) {
            try sql.batchUpdate(
                fetch,
                settings: { table in
                    try names.map { name in
                        guard let slot = table.storage.attributeSlot(named: name), let column = table.attributeColumns[slot],
                              let expression = request.propertiesToUpdate[name]
                        else { throw StrataError.unknownKey(key: name, entity: table.tableName) }
                        return SQLStore.BatchSetting(column: column, attribute: table.storage.attributes[slot].description, expression: expression)
                    }
                },
                names: names, history: store.options.tracksPersistentHistory ? (history.author, history.contextName) : nil,
                retention: store.options.historyRetention)
        }
        var outcome = BatchOutcome()
        outcome.count = write.rows.count
        if collectsIDs {
            outcome.objectIDs = write.rows
            outcome.changes.updated = write.rows
        }
        outcome.historyToken = write.historySequence.map { PersistentHistoryToken(storeIdentifier: store.identifier, sequence: UInt64($0)) }
        return outcome
    }

    /// A batch delete of a server store (``SQLStore/batchDelete(_:fetch:history:retention:)``):
    /// one transaction, on the server.
    private nonisolated func serverBatchDelete(
        _ ids: [ManagedObjectID]?, fetch: FetchRequest<ManagedObjectID>?, in store: PersistentStore, sql: SQLStore, history: BatchHistory,
        collectsIDs: Bool
    ) throws -> BatchOutcome {
        let write = try serverBatch(to: store) {
            try sql.batchDelete(
                ids, fetch: fetch, history: store.options.tracksPersistentHistory ? (history.author, history.contextName) : nil,
                retention: store.options.historyRetention)
        }
        var outcome = BatchOutcome()
        outcome.count = write.rows.count
        if collectsIDs {
            outcome.objectIDs = write.rows
            outcome.changes.deleted = write.rows
            let deleted = Set(write.rows)
            var seen = Set<ManagedObjectID>()
            for (id, _) in write.touched where !deleted.contains(id) && seen.insert(id).inserted { outcome.changes.updated.append(id) }
        }
        outcome.historyToken = write.historySequence.map { PersistentHistoryToken(storeIdentifier: store.identifier, sequence: UInt64($0)) }
        return outcome
    }

    /// Runs `body` (a server store's batch transaction), counted in ``writeStatistics`` as
    /// one save; then forgets the store's cached rows (the request changed rows behind
    /// the cache's back).
    private nonisolated func serverBatch<R>(to store: PersistentStore, _ body: () throws -> R) throws -> R {
        if store.options.readOnly { throw StrataError.readOnlyStore(store.description) }
        guard persistentStores.contains(store) else { throw StrataError.noStore(entity: store.entityNames.sorted().first ?? "?") }
        let start = instruments.metrics == nil ? 0 : DispatchTime.now().uptimeNanoseconds
        do {
            let result = try body()
            writeGroups.didCommit(saves: 1, failed: 0)
            if instruments.metrics != nil { recordCommits(of: [store], saves: 1, since: start, resolved: 0) }
            rowCache.removeRows(ofStore: store.identifier)
            return result
        } catch {
            writeGroups.didCommit(saves: 0, failed: 1)
            throw error
        }
    }

    // MARK: The write

    /// Runs `body` in one write transaction of `store`, as one write job on the write
    /// queue, counted in ``writeStatistics`` as one save; then forgets the store's cached
    /// rows (the request changed rows behind the cache's back).
    private nonisolated func writeBatch<R>(to store: PersistentStore, _ body: (inout StoreWriter) throws -> R) throws -> R {
        if store.options.readOnly { throw StrataError.readOnlyStore(store.description) }
        guard persistentStores.contains(store) else { throw StrataError.noStore(entity: store.entityNames.sorted().first ?? "?") }
        let file = try store.requireLMDB("batch requests (insert, update, delete) are not available on \(store.type.rawValue) stores yet")
        return try writeQueue.sync {
            defer { noteState(of: store, logger: Logger.boundCurrent ?? logger) }
            let start = instruments.metrics == nil ? 0 : DispatchTime.now().uptimeNanoseconds
            do {
                let result = try file.write(body)
                writeGroups.didCommit(saves: 1, failed: 0)
                if instruments.metrics != nil { recordCommits(of: [store], saves: 1, since: start, resolved: 0) }
                rowCache.removeRows(ofStore: store.identifier)
                return result
            } catch {
                writeGroups.didCommit(saves: 0, failed: 1)
                throw error
            }
        }
    }

    /// Appends the history transaction of a batch request to `store`'s history, in the
    /// writer's transaction; nil when the store tracks none or nothing changed.
    private nonisolated func recordBatchHistory(
        _ changes: [HistoryRecord.Change], history: BatchHistory, store: PersistentStore, writer: borrowing StoreWriter
    ) throws -> PersistentHistoryToken? {
        guard store.options.tracksPersistentHistory, !changes.isEmpty else { return nil }
        let record = HistoryRecord(
            timestamp: Date(), author: history.author, contextName: history.contextName, processID: getpid(), changes: changes)
        let file = try store.requireLMDB("batch requests (insert, update, delete) are not available on \(store.type.rawValue) stores yet")
        let sequence = try HistoryLog.append(
            record, in: writer.reader.transaction.pointee, history: file.historyDatabase, metadata: file.metadataDatabase,
            retention: store.options.historyRetention)
        return PersistentHistoryToken(storeIdentifier: store.identifier, sequence: sequence)
    }

    /// Schedules, in every root context that merges automatically, a merge of what a batch
    /// request (or another process) updated and deleted; inserted objects are reported in
    /// its didMergeChanges notification, not registered (a batch may insert millions).
    nonisolated func mergeIntoContexts(_ changes: BatchChanges) {
        guard !changes.isEmpty else { return }
        liveResults.publish(LiveChange(changes))
        let contexts = mergingContexts.alive
        guard !contexts.isEmpty else { return }
        let inserted = Set(changes.inserted), updated = Set(changes.updated), deleted = Set(changes.deleted)
        for context in contexts {
            context.perform { context in
                guard context.automaticallyMergesChangesFromParent else { return }
                try? context.mergeChanges(
                    inserted: inserted, updated: updated, deleted: deleted, generation: nil, registeringInserted: false)
            }
        }
    }
}

extension ManagedObjectContext {
    /// Runs a batch request in the store, below every context (Core Data's
    /// `execute(_:)`): this context's objects do not change. The history it records
    /// names this context's ``transactionAuthor`` and ``name``. See
    /// ``PersistentStoreCoordinator/execute(_:)-(PersistentStoreRequest)`` and <doc:BatchRequests>.
    ///
    /// - Throws: ``StrataError/noCoordinator`` for a context without one; the
    ///   coordinator's errors.
    public func execute(_ request: some PersistentStoreRequest) throws -> PersistentStoreResult {
        guard let coordinator = persistentStoreCoordinator else { throw StrataError.noCoordinator }
        return try coordinator.executeBatch(request.storeRequest, author: transactionAuthor, contextName: name)
    }
}

/// Who a batch request's history names.
struct BatchHistory {
    var author: String?
    var contextName: String?
}

/// What a batch request did in one store.
struct BatchOutcome {
    var count = 0
    var objectIDs: [ManagedObjectID] = []
    var changes = BatchChanges()
    var history: [HistoryRecord.Change] = []
    var historyToken: PersistentHistoryToken?

    /// Records rows whose relationships the request changed to keep inverses
    /// consistent, as updates of the named relationship (once per row and relationship).
    mutating func touch(_ rows: [(row: RowReference, relationship: String)], in file: StoreFile, collectingIDs: Bool, history: Bool) {
        var seenIDs = Set(changes.updated)
        let deleted = Set(changes.deleted)
        var names: [RowReference: [String]] = [:]
        var order: [RowReference] = []
        for (row, relationship) in rows {
            if names[row] == nil { order.append(row) }
            if names[row]?.contains(relationship) != true { names[row, default: []].append(relationship) }
        }
        for row in order {
            guard let storage = file.entityStorage(numbered: row.entityNumber) else { continue }
            let id = file.objectID(entity: storage.name, key: row.primaryKey)
            if collectingIDs, !deleted.contains(id), seenIDs.insert(id).inserted { changes.updated.append(id) }
            if history {
                self.history.append(HistoryRecord.Change(
                    kind: .update, entity: row.entityNumber, primaryKey: row.primaryKey.rawValue, updatedProperties: names[row] ?? []))
            }
        }
    }

    mutating func add(_ other: BatchOutcome) {
        count += other.count
        objectIDs += other.objectIDs
        changes.add(other.changes)
        if other.historyToken != nil { historyToken = other.historyToken }
    }

    func result(_ type: BatchRequestResultType) -> PersistentStoreResult {
        PersistentStoreResult(resultType: type, count: count, objectIDs: objectIDs, changes: changes, historyToken: historyToken)
    }
}
