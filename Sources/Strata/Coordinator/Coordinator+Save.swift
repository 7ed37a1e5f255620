import Foundation
import Logging

/// What one save asks of one store.
struct StoreSave: Sendable {
    /// The store written.
    var store: PersistentStore
    /// New and changed rows (new ones without a key get permanent IDs in the write
    /// transaction), encoded by the saving context.
    var rows = EncodedRows()
    /// Deleted objects, each with the row version it was based on (nil: no check).
    var deleted: [StoreChanges.Deletion] = []
    /// Objects not written whose row versions must still be these.
    var checked: [StoreChanges.Deletion] = []
    /// How conflicts are settled in the write; nil to fail the save on any.
    var merging: SaveMerging?
    /// What the save records in persistent history; nil when the store tracks none.
    var history: SaveHistory?

    /// An empty save of `store`.
    init(store: PersistentStore) {
        self.store = store
    }

    /// A save of whole snapshots (new objects in `inserted`, with temporary or permanent
    /// IDs; changed ones in `updated`, at the version they were read): for tools and
    /// tests. Every row carries its ID, so the outcome maps temporary IDs to permanent ones.
    ///
    /// - Throws: ``StrataError/unknownEntity(_:)``, and a type mismatch for a value of the
    ///   wrong type.
    init(store: PersistentStore, inserted: [ObjectSnapshot] = [], updated: [ObjectSnapshot] = []) throws(StrataError) {
        self.store = store
        for snapshot in inserted {
            let storage = try store.entityStorage(named: snapshot.objectID.entityName)
            try RowEncoder.append(
                snapshot, storage: storage, key: snapshot.objectID.primaryKey?.rawValue ?? 0, baseVersion: 0, carriesID: true, to: &rows)
        }
        for snapshot in updated {
            let storage = try store.entityStorage(named: snapshot.objectID.entityName)
            try RowEncoder.append(
                snapshot, storage: storage, key: snapshot.objectID.primaryKey?.rawValue ?? 0, baseVersion: max(1, snapshot.version),
                carriesID: true, to: &rows)
        }
    }
}

/// What a committed save did.
struct SaveOutcome: Sendable {
    /// The primary key of each row of each store's save (in the order of the saves, and
    /// of their rows).
    var keys: [[UInt64]] = []
    /// The permanent ID of every new row that carried its temporary ID (rows of entities
    /// with relationships, and rows encoded from snapshots).
    var permanentIDs: [ManagedObjectID: ManagedObjectID] = [:]
    /// The new row version of every row that carried its ID, by permanent ID.
    var versions: [ManagedObjectID: UInt64] = [:]
    /// The state right after the commit (every store's last transaction id then).
    var token = QueryGenerationToken.current
    /// A generation of that state, taken right after the commit for a pinned saver; nil
    /// when not asked for, or when no reader slot was free.
    var generation: QueryGeneration?
    /// What settling the save's conflicts did (empty when there were none).
    var merge = MergeResult()
}

extension PersistentStoreCoordinator {
    /// Writes one save and returns once it is committed (durably, with the store's
    /// ``PersistentStore/Options/Durability/sync`` durability).
    ///
    /// Writes run one at a time on the write queue. With group commit
    /// (``isGroupCommitEnabled``, the default), the saves that arrive while a write is
    /// running wait together and are written by the next write job in one LMDB
    /// transaction per store: each in a nested transaction, so each stays atomic and is
    /// conflict-checked on its own (a save that fails leaves the others' writes alone),
    /// and none returns before the shared commit. A save over several stores is written
    /// alone: one LMDB write transaction per store involved, all open before any commits
    /// (they nest), so a conflict or an error in any store writes nothing anywhere.
    /// Commits then happen one after the other, the last store first; only a failing
    /// commit (an I/O error) can leave an earlier store committed and a later one not:
    /// LMDB has no transaction across environments.
    ///
    /// The outcome names the state right after the commit (its query generation token),
    /// read on the write queue before any other save of this process can commit. With
    /// `pinning`, it also holds a generation of that state (for a pinned saver, and so
    /// that observers of the save can pin it).
    ///
    /// - Throws: ``StrataError/mergeConflicts(_:)`` with every conflict of the first
    ///   store that has any; ``StrataError/readOnlyStore(_:)``; the store's errors.
    nonisolated func save(_ saves: [StoreSave], pinning: Bool = false) throws -> SaveOutcome {
        try writeGate.enter()
        defer { writeGate.leave() }
        for save in saves where save.store.options.readOnly {
            throw StrataError.readOnlyStore(save.store.description)
        }
        let registered = Set(persistentStores)
        for save in saves where !registered.contains(save.store) {
            let entity = save.rows.rows.first.flatMap { save.store.entityStorage(numbered: $0.entity)?.name }
            throw StrataError.noStore(entity: entity ?? save.deleted.first?.objectID.entityName ?? "?")
        }
        let request = PendingSave(saves, pinning: pinning, in: writeGroups)
        if !saves.isEmpty, saves.allSatisfy({ $0.store.file == nil }) {
            // A server store's saves run at once, each in a transaction on a connection of
            // its own: the server orders them (row versions), not the write queue. Their
            // bookkeeping after the commit only evicts cached rows, which no order can undo.
            write([request])
            guard let result = request.result else {
                preconditionFailure("a save of a server store was left unwritten")  // write(_:) gives each save a result
            }
            return try result.get()
        }
        switch writeGroups.admit(request) {
        case .alone:
            writeQueue.sync { write([request]) }
        case .lead:
            lead(request)
        case .written:
            break   // another saver's group wrote it: no write job of its own
        }
        guard let result = request.result else {
            preconditionFailure("a save left the write queue unwritten")  // every write job gives each save taken a result
        }
        return try result.get()
    }

    /// Writes `saves` for a context pinned to a query generation (see
    /// ``save(_:pinning:)``; `pin` is the context's). When the map must grow and cannot
    /// because snapshots are open, and the saver's own generation may be one of them,
    /// the saver lets it go and the save is tried once more (the saver's generation
    /// advances at a save anyway); if that fails too, the saver takes its generation
    /// back when it can still be had, else it reads the newest state next. The retry
    /// lives here, with the write path, and not in the context: only the map-full error
    /// of this store tells it apart.
    ///
    /// `pin` must be the only reference to the saver's lease, so that letting it go
    /// closes the snapshot (unless another context shares the generation).
    nonisolated func save(_ saves: [StoreSave], pin: inout GenerationPin) throws -> SaveOutcome {
        do {
            return try save(saves, pinning: pin.isPinned)
        } catch let error as StrataError {
            // Read without keeping a reference to the lease past this line.
            let token: QueryGenerationToken? = if case .pinned(let lease) = pin { lease.generation.token } else { nil }
            guard error.storageError == .mapFull, let token else { throw error }
            pin = .newest   // the lease goes: its snapshot closes unless shared
            do {
                return try save(saves, pinning: true)
            } catch {
                if let generation = try? self.generation(for: token) { pin = .pinned(GenerationLease(generation)) }
                throw error
            }
        }
    }

    /// Writes every waiting save (`request` among them) as one group on the write
    /// queue, after a gather under contention; then hands the lead to the first save
    /// that arrived meanwhile (or lets it go when none did) and wakes the group's other
    /// savers, whose saves are written: they return without a write job of their own.
    private nonisolated func lead(_ request: PendingSave) {
        writeGroups.gather()
        writeQueue.sync {
            writeGroups.writeGroup { group in write(group) }
        }
        writeGroups.handOff()
    }

    // MARK: On the write queue

    /// Writes `batch` and gives each save its result: saves over one store together,
    /// one commit per store; saves over several stores alone. Then reads the state
    /// after the commits once, for every outcome. On the write queue, except for a save
    /// of server stores alone, which runs on its caller's thread.
    private nonisolated func write(_ batch: [PendingSave]) {
        var byStore: [ObjectIdentifier: [PendingSave]] = [:]
        var storeOrder: [PersistentStore] = []
        for request in batch {
            // A server store's saves are written one transaction each (no nested transactions yet).
            guard request.saves.count == 1, batch.count > 1, request.saves[0].store.file != nil else {
                writeAlone(request)
                continue
            }
            let store = request.saves[0].store
            if byStore[ObjectIdentifier(store)] == nil { storeOrder.append(store) }
            byStore[ObjectIdentifier(store), default: []].append(request)
        }
        for store in storeOrder {
            guard let requests = byStore[ObjectIdentifier(store)] else { continue }
            if requests.count == 1 {
                writeAlone(requests[0])
            } else {
                writeTogether(requests, to: store)
            }
        }
        // After the commits, so a full reader table costs the pin, never the save.
        let generation = batch.contains { $0.pinning && $0.succeeded } ? try? newestGeneration() : nil
        let token = generation?.token ?? newestToken()
        for request in batch {
            request.finish(token: token, generation: request.pinning ? generation : nil)
        }
        // The row cache learns the commits here, in commit order, before the next write
        // job starts: a saver updating it after leaving the write queue could land after
        // a later save of the same rows and put an older row back (issue 19).
        var noted = Set<ObjectIdentifier>()
        for request in batch {
            for save in request.saves where noted.insert(ObjectIdentifier(save.store)).inserted {
                noteState(of: save.store, logger: request.saverLogger ?? logger)
            }
            switch request.result {
            case .success(let outcome)?:
                cacheSavedRows(request.saves, outcome: outcome)
                if outcome.merge.settled > 0 {
                    (request.saverLogger ?? logger).debug("save settled conflicts", metadata: Self.logMetadata(of: request.saves).merging([
                        "strata.conflicts": "\(outcome.merge.settled)",
                    ]) { $1 })
                }
            case .failure(let error)?:
                evictRows(of: request.saves)
                (request.saverLogger ?? logger).debug("save failed", metadata: Self.logMetadata(of: request.saves, error: error))
            case nil:
                evictRows(of: request.saves)
            }
        }
    }

    /// Writes one save in write transactions of its own.
    private nonisolated func writeAlone(_ request: PendingSave) {
        let start = instruments.metrics == nil ? 0 : DispatchTime.now().uptimeNanoseconds
        do {
            var outcome = SaveOutcome()
            try write(request.saves[...], into: &outcome)
            request.result = .success(outcome)
            writeGroups.didCommit(saves: 1, failed: 0, resolvedConflicts: outcome.merge.settled)
            if instruments.metrics != nil {
                recordCommits(of: request.saves.map(\.store), saves: 1, since: start, resolved: outcome.merge.settled)
            }
        } catch {
            request.result = .failure(error)
            writeGroups.didCommit(saves: 0, failed: 1)
        }
    }

    /// Writes several saves of one store in one write transaction, each in a nested
    /// transaction of its own. A save's own failure (a conflict, an invalid object) is
    /// its result alone; a storage failure (a full map the store cannot grow, a full
    /// disk, an I/O error) aborts the shared transaction, and each save is then written
    /// alone, so that each gets its own verdict.
    private nonisolated func writeTogether(_ requests: [PendingSave], to store: PersistentStore) {
        let start = instruments.metrics == nil ? 0 : DispatchTime.now().uptimeNanoseconds
        let results: [Result<SaveOutcome, any Error>]
        guard let file = store.file else {
            for request in requests { writeAlone(request) }   // unreachable: server stores write alone
            return
        }
        do {
            results = try file.writeGroup { transaction in
                // The body runs again from scratch when the map grows: results are its own.
                var results: [Result<SaveOutcome, any Error>] = []
                for request in requests {
                    do {
                        let outcome = try file.write(nestedIn: transaction) { writer in
                            try apply(request.saves[0], with: &writer)
                        }
                        results.append(.success(outcome))
                    } catch let error as StrataError where error.code == .storage {
                        throw error
                    } catch {
                        results.append(.failure(error))
                    }
                }
                return results
            }
        } catch {
            // Each save gets its own verdict (its caller learns of its failure): debug.
            (requests[0].saverLogger ?? logger).debug("group commit failed, writing its saves alone", metadata: store.logMetadata.merging([
                "strata.group.size": "\(requests.count)",
                "strata.error": "\((error as? StrataError)?.code.description ?? "\(type(of: error))")",
                "strata.error.description": "\(error)",
            ]) { $1 })
            for request in requests { writeAlone(request) }
            return
        }
        var saved = 0
        var resolved = 0
        for (request, result) in zip(requests, results) {
            request.result = result
            if case .success(let outcome) = result {
                saved += 1
                resolved += outcome.merge.settled
            }
        }
        writeGroups.didCommit(saves: saved, failed: requests.count - saved, resolvedConflicts: resolved)
        if instruments.metrics != nil { recordCommits(of: [store], saves: saved, since: start, resolved: resolved) }
    }

    /// Records a commit to each of `stores` (a save over several commits to each).
    nonisolated func recordCommits(of stores: [PersistentStore], saves: Int, since start: UInt64, resolved: Int) {
        let elapsed = DispatchTime.now().uptimeNanoseconds &- start
        for store in stores {
            instruments.metrics(of: store)?.didCommit(saves: saves, nanoseconds: elapsed, resolved: resolved, of: store)
        }
    }

    /// Writes `saves`, each store's in a write transaction nested in the closure of the
    /// one before, so that all commit or none is written.
    private nonisolated func write(_ saves: ArraySlice<StoreSave>, into outcome: inout SaveOutcome) throws {
        guard let save = saves.first else { return }
        var mine = SaveOutcome()
        let file: StoreFile
        switch save.store.backend {
        case .lmdb(let lmdb):
            file = lmdb
        case .sql(let sql):
            guard saves.count == 1 && outcome.keys.isEmpty else {
                throw StrataError.unsupportedByStore(
                    store: save.store.location,
                    feature: "one save over a \(save.store.type.rawValue) store and another store (the stores cannot commit together): save each store's objects from a context of its own")
            }
            outcome = try apply(save, to: sql)
            return
        }
        try file.write { writer in
            // The body may run again when the map grows: start from scratch each time.
            let local = try apply(save, with: &writer)
            var inner = outcome
            try write(saves.dropFirst(), into: &inner)
            inner.keys.insert(contentsOf: local.keys, at: 0)
            inner.permanentIDs.merge(local.permanentIDs) { $1 }
            inner.versions.merge(local.versions) { $1 }
            inner.merge.add(local.merge)
            mine = inner
        }
        outcome = mine
    }

    /// Writes one save of a server store, in one transaction of the server.
    private nonisolated func apply(_ save: StoreSave, to store: SQLStore) throws -> SaveOutcome {
        var local = SaveOutcome()
        let written = try store.write(save)
        local.keys = [written.keys]
        if let merge = written.merge { local.merge = merge }
        for (row, key) in zip(save.rows.rows, written.keys) {
            guard let id = row.objectID, let entity = store.entityStorage(numbered: row.entity), let primaryKey = PrimaryKey(key) else { continue }
            let permanent = store.objectID(entity: entity.name, key: primaryKey)
            if id.isTemporaryID { local.permanentIDs[id] = permanent }
            local.versions[permanent] = local.merge.merged[permanent]?.version ?? row.baseVersion + 1
        }
        return local
    }

    /// Applies one store's part of a save, conflict-checked first (and its conflicts
    /// settled by the save's merge policy, in the same transaction).
    private nonisolated func apply(_ save: StoreSave, with writer: inout StoreWriter) throws -> SaveOutcome {
        var local = SaveOutcome()
        let keys: [UInt64]
        let merge: MergeResult?
        let tombstones = save.history == nil || save.deleted.isEmpty ? [:] : try tombstones(of: save, with: writer)
        do {
            (keys, merge) = try writer.apply(save.rows, deleting: save.deleted, checking: save.checked, merging: save.merging)
        } catch let StoreWriteError.constraintConflict(conflicts) {
            throw StrataError.constraintConflicts(conflicts)
        } catch let StoreWriteError.conflict(conflicts) {
            throw StrataError.mergeConflicts(conflicts.map { conflict in
                MergeConflict(
                    objectID: conflict.objectID,
                    persistedSnapshot: conflict.persisted.flatMap { persisted in
                        (try? save.store.entityStorage(named: conflict.objectID.entityName)).map { PropertySnapshot(persisted, entity: $0.entity) }
                    },
                    oldVersion: conflict.expectedVersion, newVersion: conflict.storedVersion)
            })
        }
        if let history = save.history {
            try recordHistory(history, of: save, keys: keys, merge: merge, tombstones: tombstones, with: writer)
        }
        local.keys = [keys]
        if let merge { local.merge = merge }
        for (row, key) in zip(save.rows.rows, keys) {
            guard let id = row.objectID, let entity = save.store.entityStorage(numbered: row.entity),
                  let primaryKey = PrimaryKey(key) else { continue }
            let permanent = save.store.objectID(entity: entity.name, key: primaryKey)
            if id.isTemporaryID { local.permanentIDs[id] = permanent }
            local.versions[permanent] = local.merge.merged[permanent]?.version ?? row.baseVersion + 1
        }
        return local
    }
}

extension ObjectSnapshot {
    /// The snapshot with its ID and relationship destinations mapped through `ids`.
    func replacingIDs(_ ids: [ManagedObjectID: ManagedObjectID]) -> ObjectSnapshot {
        guard !ids.isEmpty else { return self }
        var copy = self
        copy.objectID = ids[objectID] ?? objectID
        copy.relationships = relationships.map { relationship in
            switch relationship {
            case .toOne(let id): .toOne(id.map { ids[$0] ?? $0 })
            case .toMany(let many): .toMany(Self.mapped(many, through: ids))
            case .notLoaded: .notLoaded
            }
        }
        return copy
    }

    /// `members` mapped through `ids`, without repeats: two members may have become one
    /// (new objects merged by a uniqueness constraint).
    private static func mapped(_ members: [ManagedObjectID], through ids: [ManagedObjectID: ManagedObjectID]) -> [ManagedObjectID] {
        var replaced = false
        let mapped = members.map { member in
            guard let new = ids[member] else { return member }
            replaced = true
            return new
        }
        guard replaced else { return mapped }
        var seen = Set<ManagedObjectID>()
        return mapped.filter { seen.insert($0).inserted }
    }
}

extension PersistentStoreCoordinator {
    /// Log metadata of a save: its stores, the saving context and author when the save
    /// records history, and the error it failed with.
    static func logMetadata(of saves: [StoreSave], error: (any Error)? = nil) -> Logger.Metadata {
        var metadata: Logger.Metadata = [:]
        if let store = saves.first?.store { metadata = store.logMetadata }
        if saves.count > 1 { metadata["strata.stores"] = "\(saves.count)" }
        if let history = saves.first?.history {
            if let name = history.contextName { metadata["strata.context"] = "\(name)" }
            if let author = history.author { metadata["strata.author"] = "\(author)" }
        }
        if let error {
            metadata["strata.error"] = "\((error as? StrataError)?.code.description ?? "\(type(of: error))")"
            metadata["strata.error.description"] = "\(error)"
        }
        return metadata
    }
}

extension PersistentStoreCoordinator {
    /// Logs what a write changed in `store`'s state, once each: a map growth (debug:
    /// the file grew, as designed) and the store turning terminal (info: every later
    /// save and read of it fails, while only the save that hit the failure was told).
    nonisolated func noteState(of store: PersistentStore, logger: Logger) {
        guard let environment = store.file?.environment else { return }
        let growths = environment.mapGrowthCount
        let terminal = environment.terminalError
        let (grew, turned) = store.loggedState.withLock { state -> (Bool, Bool) in
            let grew = growths > state.mapGrowths
            let turned = terminal != nil && !state.terminal
            state.mapGrowths = max(state.mapGrowths, growths)
            state.terminal = state.terminal || terminal != nil
            return (grew, turned)
        }
        if grew {
            logger.debug("store map grew", metadata: store.logMetadata.merging([
                "strata.map.size": "\(environment.info.mapSize)", "strata.map.growths": "\(growths)",
            ]) { $1 })
        }
        if turned, let terminal {
            logger.info("store became unusable", metadata: store.logMetadata.merging([
                "strata.error": "\(terminal.name)", "strata.error.description": "\(terminal.message)",
            ]) { $1 })
        }
    }
}

extension Logger {
    /// The task-local `Logger.current` when the running task bound one with `withLogger`;
    /// nil when it is swift-log's unbound default (whose label is empty, by design).
    static var boundCurrent: Logger? {
        let current = Logger.current
        return current.label.isEmpty ? nil : current
    }
}
