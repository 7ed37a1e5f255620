import Dispatch
import Foundation
import CoreMetrics
import Logging
import Tracing
internal import StrataLocks
import StrataLMDB

/// The root of every context chain: it owns the stores, reads them for contexts and
/// writes each save to them in one transaction per store.
///
/// ```swift
/// let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
/// try await coordinator.addPersistentStore(type: .lmdb, at: URL(fileURLWithPath: "Notes.strata"))
/// let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
/// ```
///
/// Reads never wait for writes: fetches and faults open LMDB read transactions directly,
/// from the context that asks (DESIGN.md, "Readers never wait for the writer"). Writes
/// are serialised on the coordinator's write queue, and each runs as one synchronous
/// job: the write transaction begins and commits on one thread, with nothing awaited in
/// between, as LMDB requires.
public actor PersistentStoreCoordinator {
    /// The model of every store.
    public nonisolated let managedObjectModel: ManagedObjectModel
    /// The stores, for synchronous access from contexts.
    private nonisolated let registry = LockedValue<[PersistentStore]>([])
    /// Where writes run, one at a time.
    nonisolated let writeQueue: DispatchQueue
    /// The saves waiting for the write queue (group commit) and what was written.
    nonisolated let writeGroups = WriteGroups()
    private nonisolated let executor: CoordinatorExecutor
    /// Rows read or saved through this coordinator, for faults and refreshes
    /// (``ManagedObjectContext/stalenessInterval``).
    nonisolated let rowCache = RowCache()
    /// How many read transactions the coordinator opened (a statistic for tests).
    nonisolated let readStatistics = LockedValue(0)
    /// The root contexts that merge this coordinator's saves by themselves
    /// (`automaticallyMergesChangesFromParent`), held weakly.
    nonisolated let mergingContexts = WeakContexts()
    /// See ``logger``.
    private nonisolated let loggerValue: LockedValue<Logger>
    /// Watches the stores for other processes' commits (``remoteChanges``).
    nonisolated let remoteChangeMonitor = RemoteChangeMonitor()
    /// The open query generations, shared by the contexts pinned to them.
    nonisolated let generations: QueryGenerationRegistry
    /// Where metrics and spans go.
    nonisolated let instruments: Instruments
    /// Admits writes and store openings until the coordinator closes (``close(timeout:)``).
    nonisolated let writeGate = WriteGate()
    /// The live results observed on this coordinator's contexts.
    nonisolated let liveResults = LiveResultsHub()
    /// What happens to a context whose query generation grew old.
    nonisolated let generationAgePolicy = LockedValue(QueryGenerationAgePolicy.unlimited)

    /// The coordinator's isolated methods (adding and removing stores) run on its own
    /// queue, so that opening a store (file I/O) never blocks Swift's cooperative pool.
    public nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    /// A coordinator of stores of `managedObjectModel`, with no store yet.
    ///
    /// - Parameters:
    ///   - managedObjectModel: the model of every store and context.
    ///   - logger: where it logs (``logger``); by default the task-local `Logger.current`
    ///     of the caller: the application's logger when it bound one with swift-log's
    ///     `withLogger`.
    ///   - metricsFactory: where its metrics go (<doc:UsingStrataInAServer>); nil (the
    ///     default) for the factory the application bootstrapped with
    ///     `MetricsSystem.bootstrap`, read now. With swift-metrics' no-op factory nothing
    ///     is counted and metrics cost nothing.
    ///   - tracer: where its spans go; nil (the default) for the tracer active at each
    ///     operation: the caller's `withTracer` scope, else the one bootstrapped with
    ///     `InstrumentationSystem.bootstrap`. With no tracer, no span is started.
    public init(
        managedObjectModel: ManagedObjectModel, logger: Logger = Logger.current,
        metricsFactory: (any MetricsFactory)? = nil, tracer: (any Tracer)? = nil
    ) {
        self.managedObjectModel = managedObjectModel
        loggerValue = LockedValue(logger)
        instruments = Instruments(metrics: metricsFactory, tracer: tracer)
        generations = QueryGenerationRegistry(metrics: instruments.generations)
        writeQueue = DispatchQueue(label: "strata.coordinator.write")
        executor = CoordinatorExecutor(queue: DispatchQueue(label: "strata.coordinator"))
        remoteChangeMonitor.attach(self)
    }

    // MARK: Stores

    /// Opens (or creates) a store and adds it.
    ///
    /// A store written with another version of the model is migrated first, as
    /// `options` say (<doc:MigratingYourData>): lightweight stages in one write
    /// transaction; a ``MigrationPlan`` with custom stages on a copy of the store, their
    /// code awaited here.
    ///
    /// - Parameters:
    ///   - type: ``PersistentStore/StoreType/lmdb`` (a directory at `url`, created when
    ///     missing) or ``PersistentStore/StoreType/inMemory`` (`url` ignored).
    ///   - configuration: the model configuration whose entities the store holds; nil
    ///     for every entity.
    ///   - url: the store directory.
    ///   - options: map size, readers, durability, read-only, migration.
    /// - Returns: the store.
    /// - Throws: ``StrataError/unknownConfiguration(_:)``; ``StrataError/modelMismatch(store:storeHash:modelHash:changes:)``
    ///   for a store written with another model when automatic migration is off (or the
    ///   store is read-only); ``StrataError/migrationFailed(store:reason:conflicts:)`` for a
    ///   migration that could not be done (the store left as it was); ``StrataError/incompatibleStore(store:reason:)``
    ///   for a missing location, a directory that is not a store, or a store already added
    ///   to this coordinator (the reason says what to do when that store is terminal);
    ///   ``StrataError/storage(_:)`` of `LMDBError.alreadyOpen` for a store still open
    ///   elsewhere in this process (LMDB allows one environment per store per process;
    ///   the message says what to let go of when that store is terminal, see
    ///   ``PersistentStore/terminalError``);
    ///   ``StrataError/corruptStore(store:reason:)`` for a truncated or damaged `data.mdb`
    ///   (an empty one is opened as a new store); ``StrataError/storage(_:)``.
    @discardableResult
    public func addPersistentStore(
        type: PersistentStore.StoreType = .lmdb, configuration: String? = nil, at url: URL? = nil,
        options: PersistentStore.Options = .init()
    ) async throws(StrataError) -> PersistentStore {
        // Traced as `open`, renamed `migrate` when the store was migrated.
        try await Instruments.traced(by: instruments.tracer, "open", entity: nil) { span async throws(StrataError) -> PersistentStore in
            span?.attributes["db.namespace"] = url?.path ?? "(in memory)"
            try writeGate.enter()   // a migration running while the coordinator closes finishes first
            defer { writeGate.leave() }
            // A plan with custom stages runs them first, through contexts, on a copy that
            // replaces the store; lightweight stages run when the store opens.
            var staged = false
            if type == .lmdb, let url, options.migrationPlan?.stages.contains(where: \.isCustom) == true {
                staged = try await StagedMigration.runIfNeeded(at: url, model: managedObjectModel, options: options)
            } else if type.server != nil, options.migrationPlan?.stages.contains(where: \.isCustom) == true {
                staged = try await SQLStagedMigration.runIfNeeded(type: type, model: managedObjectModel, options: options, logger: logger)
            }
            let store = try addPersistentStoreSynchronously(type: type, configuration: configuration, at: url, options: options)
            if let span, staged || store.migration != nil {
                span.operationName = "migrate"
                span.attributes["db.operation.name"] = "migrate"
                if let migration = store.migration {
                    span.attributes["strata.migration.from"] = migration.from
                    span.attributes["strata.migration.to"] = migration.to
                    span.attributes["strata.migration.stages"] = migration.stages.joined(separator: "; ")
                }
            }
            return store
        }
    }

    /// ``addPersistentStore(type:configuration:at:options:)`` on the calling thread, for
    /// synchronous programs of this package (the `strata-profile` harness, which runs
    /// under valgrind, where the hop to the coordinator's queue hangs). It opens the
    /// store's files on the calling thread: never call it from Swift's cooperative pool.
    @discardableResult
    package nonisolated func addPersistentStoreSynchronously(
        type: PersistentStore.StoreType = .lmdb, configuration: String? = nil, at url: URL? = nil,
        options: PersistentStore.Options = .init()
    ) throws(StrataError) -> PersistentStore {
        try writeGate.enter()   // a store opened while the coordinator closes is closed with the rest
        defer { writeGate.leave() }
        if type == .lmdb, let url {
            let path = url.standardizedFileURL.path
            if let added = registry.withLock({ $0.first { $0.url?.standardizedFileURL.path == path } }) {
                if let terminal = added.terminalError?.storageError {
                    throw .incompatibleStore(store: path, reason: "it is already added to this coordinator, in a terminal state: "
                        + StoreFile.stillOpenAfterTerminal(path: path, terminal: terminal))
                }
                throw .incompatibleStore(store: path, reason: "it is already added to this coordinator")
            }
        }
        let store = try PersistentStore(
            type: type, url: url, configurationName: configuration, options: options, model: managedObjectModel, logger: logger)
        let duplicate = registry.withLock { stores -> Bool in
            if stores.contains(where: { $0.identifier == store.identifier }) { return true }
            stores.append(store)
            return false
        }
        if duplicate {
            throw .incompatibleStore(
                store: store.url?.path ?? "(in memory)", reason: "a store with the same UUID (\(store.identifier)) is already added")
        }
        if let migration = store.migration {
            logger.debug("store migrated", metadata: store.logMetadata.merging([
                "strata.migration.from": "\(migration.from)", "strata.migration.to": "\(migration.to)",
                "strata.migration.stages": "\(migration.stages.joined(separator: "; "))",
            ]) { $1 })
        }
        let stale = store.file?.environment.staleReadersClearedAtOpen ?? 0
        if stale > 0 {
            // Recovered, and nobody to tell but the log: dead processes held reader slots.
            logger.info("stale readers of dead processes cleared", metadata: store.logMetadata.merging([
                "strata.readers.cleared": "\(stale)",
            ]) { $1 })
        }
        if let file = store.file { store.loggedState.withLock { $0.mapGrowths = file.environment.mapGrowthCount } }
        logger.debug("store opened", metadata: store.logMetadata.merging([
            "strata.store.type": "\(store.type)", "strata.store.read_only": "\(options.readOnly)",
            "strata.store.history": "\(options.tracksPersistentHistory)",
            "strata.model.version": "\(managedObjectModel.versionIdentifier ?? "")",
        ]) { $1 })
        return store
    }

    /// The stores, in the order they were added.
    public nonisolated var persistentStores: [PersistentStore] { registry.withLock { $0 } }

    /// Where the coordinator logs (swift-log), with `strata.*` metadata (the store's path
    /// and identifier, the saving context and author, the error's code). Settable from
    /// any thread.
    ///
    /// Levels follow swift-log's guidance for libraries: nothing above `info`, and `info`
    /// only for what went wrong that no caller is told of by an error:
    /// - `info`: a store that became unusable (terminal: only the save that hit the
    ///   failure got the error), a pinned query generation past its maximum age that
    ///   advanced (``QueryGenerationAgePolicy/advance(after:)``), stale reader slots of
    ///   dead processes cleared at open, other processes' history that could not be read.
    /// - `debug`: stores opened, migrated as they opened (the versions and stages) and
    ///   removed, map growths, saves and batch requests that failed (their callers got
    ///   the error), a group commit that failed and wrote its saves alone (each caller
    ///   gets its own verdict), conflicts merge policies settled, batch requests written,
    ///   other processes' commits.
    ///
    /// A save or a batch request logs to its caller's task-local `Logger.current` instead
    /// when the caller bound one (`withLogger`, a request's logger with its metadata, say),
    /// even when another saver's thread writes it in a group commit.
    public nonisolated var logger: Logger {
        get { loggerValue.withLock { $0 } }
        set { loggerValue.withLock { $0 = newValue } }
    }

    /// Removes `store`: its objects can no longer be fetched or saved through this
    /// coordinator (contexts that hold them keep them in memory).
    ///
    /// - Throws: ``StrataError/incompatibleStore(store:reason:)`` when it is not a store
    ///   of this coordinator.
    public func remove(_ store: PersistentStore) throws(StrataError) {
        let removed = registry.withLock { stores -> Bool in
            guard let index = stores.firstIndex(of: store) else { return false }
            stores.remove(at: index)
            return true
        }
        if removed {
            rowCache.removeRows(ofStore: store.identifier)
            instruments.forget(store)
            logger.debug("store removed", metadata: store.logMetadata)
        }
        if !removed {
            throw .incompatibleStore(store: store.description, reason: "it is not a store of this coordinator")
        }
    }

    /// The ID a URI from ``ManagedObjectID/uriRepresentation`` names, or nil when the
    /// URI is malformed, names an entity the model lacks (or an abstract one), or a
    /// store that is not added. Temporary IDs are returned as they are.
    public nonisolated func managedObjectID(forURIRepresentation url: URL) -> ManagedObjectID? {
        ManagedObjectID(uriRepresentation: url, stores: Set(persistentStores.map(\.identifier)), model: managedObjectModel)
    }

    /// The store that holds the object `id` (a permanent ID), or nil.
    public nonisolated func persistentStore(for id: ManagedObjectID) -> PersistentStore? {
        guard let identifier = id.storeIdentifier else { return nil }
        return persistentStores.first { $0.identifier == identifier }
    }

    // MARK: For contexts (synchronous, from the context's executor)

    /// The store of a permanent ID.
    ///
    /// - Throws: ``StrataError/invalidObjectState(_:reason:)`` for a temporary ID;
    ///   ``StrataError/noStore(entity:)`` when its store is not added.
    nonisolated func store(of id: ManagedObjectID) throws(StrataError) -> PersistentStore {
        guard id.storeIdentifier != nil else {
            throw .invalidObjectState(id, reason: "it has a temporary ID: it is not in a store yet")
        }
        guard let store = persistentStore(for: id) else { throw .noStore(entity: id.entityName) }
        return store
    }

    /// The stores that hold objects of `entityName` or of its sub-entities (with
    /// `includesSubentities`), in the order they were added.
    nonisolated func stores(for entityName: String, includesSubentities: Bool) -> [PersistentStore] {
        let names = includesSubentities ? Set(managedObjectModel.entityNames(kindOf: entityName)) : [entityName]
        return persistentStores.filter { !$0.entityNames.isDisjoint(with: names) }
    }

    /// The stores `request` searches: those holding its entity, of its
    /// ``FetchRequest/affectedStores`` when it names some.
    nonisolated func stores<Result>(for request: FetchRequest<Result>) -> [PersistentStore] {
        let holding = stores(for: request.entityName, includesSubentities: request.includesSubentities)
        guard let affected = request.affectedStores else { return holding }
        return holding.filter { store in affected.contains { $0 === store } }
    }

    /// Calls `record` with every stored row matching `request`'s predicate in the stores
    /// it searches (an LMDB store's records read in place, inside its read transaction or
    /// `generation`'s snapshot), or `snapshots` with a server store's matching rows; in no
    /// particular order, with no window.
    nonisolated func scanMatches<Result>(
        _ request: FetchRequest<Result>, in generation: QueryGeneration? = nil,
        record: (StoreFile, EntityStorage, PrimaryKey, UnsafeRawBufferPointer) throws -> Void,
        snapshots: ([ObjectSnapshot]) throws -> Void
    ) throws {
        try forEachStoreMatching(request, in: generation, lmdb: { file, reader, plan in
            try reader.forEachMatch(plan) { storage, key, bytes in try record(file, storage, key, bytes) }
        }, sql: snapshots)
    }

    /// Adds every stored row matching `request`'s predicate in the stores it searches to
    /// `aggregates`: an LMDB store's records read in place (``StoreReader/accumulate(_:into:)``),
    /// a server store's rows as it returns them.
    nonisolated func accumulate<Result>(
        _ request: FetchRequest<Result>, into aggregates: inout NumericAggregates, in generation: QueryGeneration? = nil
    ) throws {
        try forEachStoreMatching(request, in: generation, lmdb: { _, reader, plan in
            try reader.accumulate(plan, into: &aggregates)
        }, sql: { rows in
            for row in rows { aggregates.add(snapshot: row, entity: managedObjectModel.entitiesByName[row.objectID.entityName]) }
        })
    }

    /// The stores `request` searches, one after the other, for a scan of the rows its
    /// predicate matches (no order, no window): `lmdb` with an LMDB store's reader (in its
    /// read transaction, or `generation`'s snapshot) and the plan of the scan; `sql` with a
    /// server store's matching rows.
    private nonisolated func forEachStoreMatching<Result>(
        _ request: FetchRequest<Result>, in generation: QueryGeneration?,
        lmdb: (StoreFile, borrowing StoreReader<StrataLMDB.ReadTransaction>, FetchPlan) throws -> Void,
        sql: ([ObjectSnapshot]) throws -> Void
    ) throws {
        var unordered = FetchRequest<ManagedObject>(entityName: request.entityName)
        unordered.predicate = request.predicate
        unordered.includesSubentities = request.includesSubentities
        var plan: FetchPlan?
        for store in stores(for: request) {
            if generation == nil { countRead() }
            switch store.backend {
            case .lmdb(let file):
                let lmdbPlan = try plan ?? FetchPlanner.plan(unordered, in: managedObjectModel)
                plan = lmdbPlan
                try file.read(in: try generation?.snapshot(of: store)) { reader in try lmdb(file, reader, lmdbPlan) }
            case .sql(let server):
                if case .snapshots(let rows) = try server.fetch(unordered, in: try generation.map { try serverSnapshot(of: store, server, in: $0) }) {
                    try sql(rows)
                }
            }
        }
    }

    /// The smallest (or, `largest`, the largest) non-nil value of the indexed attribute
    /// `attribute` among the objects `request` searches (its predicate is not looked at),
    /// read from the ends of the attribute's indexes: one entry per entity, whatever the
    /// number of rows. `.some(nil)` when no object has a value; nil when a store cannot
    /// answer this way (a server store, or an entity without the index).
    nonisolated func indexExtreme<Result>(
        of attribute: String, largest: Bool, for request: FetchRequest<Result>, in generation: QueryGeneration? = nil
    ) throws -> AttributeValue?? {
        var best: AttributeValue?
        for store in stores(for: request) {
            guard case .lmdb(let file) = store.backend else { return nil }
            if generation == nil { countRead() }
            let found: AttributeValue?? = try file.read(in: try generation?.snapshot(of: store)) { reader in
                var extreme: AttributeValue?
                for storage in try reader.store.fetchedEntities(request.entityName, includesSubentities: request.includesSubentities) {
                    guard let slot = storage.attributeSlot(named: attribute), storage.attributes[slot].index != nil,
                          let kind = storage.attributes[slot].indexKind else { return nil }
                    var value: AttributeValue?
                    try reader.scanIndex(of: storage, slot: slot, in: .all, reverse: largest) { entry in
                        let decoded = try entry.value.withUnsafeBytes { bytes in
                            var offset = 0
                            do throws(IndexKeyDecodingError) {
                                return try IndexKeyEncoding.decode(bytes, as: kind, at: &offset)
                            } catch {
                                throw StrataError.corruptStore(store: store.description, reason: "an index entry of \(storage.name).\(attribute): \(error)")
                            }
                        }
                        guard let decoded else { return !largest }   // nil sorts first: read on past it
                        value = decoded
                        return false
                    }
                    if let value, extreme.map({ Self.precedes(value, $0, largest: largest) }) ?? true { extreme = value }
                }
                return .some(extreme)
            }
            guard let found else { return nil }
            if let value = found, best.map({ Self.precedes(value, $0, largest: largest) }) ?? true { best = value }
        }
        return .some(best)
    }

    /// Whether `a` comes before `b` as the smallest (or, `largest`, the largest) value.
    private nonisolated static func precedes(_ a: AttributeValue, _ b: AttributeValue, largest: Bool) -> Bool {
        let order = FetchSorting.compare(PredicateValue(a), PredicateValue(b), .literal)
        return largest ? order == .orderedDescending : order == .orderedAscending
    }

    /// The store a new object of `entityName` goes to when it was not assigned one: the
    /// first store that can hold it.
    nonisolated func defaultStore(for entityName: String) throws(StrataError) -> PersistentStore {
        guard let store = persistentStores.first(where: { $0.holds(entityName) }) else { throw .noStore(entity: entityName) }
        return store
    }

    /// The stored state of `id`; nil when its row does not exist.
    nonisolated func snapshot(of id: ManagedObjectID) throws -> ObjectSnapshot? {
        let store = try store(of: id)
        countRead()
        switch store.backend {
        case .lmdb(let file): return try file.read { reader in try reader.snapshot(of: id) }
        case .sql(let sql): return try sql.snapshots(of: [id]).first
        }
    }

    /// The stored destinations of a to-many relationship of `id`: in a fresh read
    /// transaction, or in `generation`'s snapshot.
    nonisolated func destinations(
        of id: ManagedObjectID, relationship: String, in generation: QueryGeneration? = nil
    ) throws -> [ManagedObjectID] {
        let store = try store(of: id)
        if generation == nil { countRead() }
        switch store.backend {
        case .lmdb(let file):
            return try file.read(in: try generation?.snapshot(of: store)) { reader in try reader.destinations(of: id, relationship: relationship) }
        case .sql(let sql):
            let snapshot = try generation.map { try serverSnapshot(of: store, sql, in: $0) }
            return try sql.destinations(of: [id], relationship: relationship, in: snapshot)[id] ?? []
        }
    }

    /// Runs `request` on every store that holds its entity, each in one read transaction
    /// (or in `generation`'s snapshot of the store).
    ///
    /// With a `sink`, a store whose rows come in their final order hands them to it inside
    /// its read transaction (see ``StoreReader/execute(_:sink:)``) and returns none.
    ///
    /// - Returns: each store's rows, in the request's order within the store.
    nonisolated func fetch<Result>(
        _ request: FetchRequest<Result>, in generation: QueryGeneration? = nil, sink: FetchRowSink? = nil
    ) throws -> [FetchRows] {
        let stores = stores(for: request)
        var plan: FetchPlan?   // planned for the first LMDB store: a server store plans its own SQL
        return try stores.map { store in
            if generation == nil { countRead() }
            switch store.backend {
            case .lmdb(let file):
                let lmdbPlan = try plan ?? FetchPlanner.plan(request, in: managedObjectModel)
                plan = lmdbPlan
                return try file.read(in: try generation?.snapshot(of: store)) { reader in try reader.execute(lmdbPlan, sink: sink) }
            case .sql(let sql): return try sql.fetch(request, in: try generation.map { try serverSnapshot(of: store, sql, in: $0) })
            }
        }
    }

    /// How `request` would run on each store that holds its entity, one store after the
    /// other: an LMDB store's ``FetchPlan`` (its access path, filter and order), a server
    /// store's SQL (per table) and what it leaves to memory (`FILTER IN MEMORY`, `SORT IN
    /// MEMORY`, `WINDOW IN MEMORY`).
    ///
    /// ```swift
    /// print(try coordinator.explain(request))
    /// // SELECT FROM Note WHERE COALESCE("priority" > $1, FALSE) ORDER BY "title" COLLATE "C" ASC NULLS FIRST, "_pk"; FILTER IN MEMORY title CONTAINS[c] "x"
    /// // WINDOW IN MEMORY
    /// ```
    ///
    /// - Throws: ``StrataError`` for an unknown entity or key, ``FetchPredicateError`` for an
    ///   unsubstituted variable: what running the request would throw.
    public nonisolated func explain<Result>(_ request: FetchRequest<Result>) throws -> String {
        _ = try request.validate(in: managedObjectModel)
        return try stores(for: request).map { store in
            switch store.backend {
            case .lmdb: "\(try FetchPlanner.plan(request, in: managedObjectModel))"
            case .sql(let sql): try sql.explain(request)
            }
        }.joined(separator: "\n")
    }

    /// Permanent IDs for new objects of `entityNames` in `stores` (one per entry), made
    /// in one write transaction per store.
    nonisolated func makePermanentIDs(_ requests: [(entityName: String, store: PersistentStore)]) throws -> [ManagedObjectID] {
        var ids = [ManagedObjectID?](repeating: nil, count: requests.count)
        let byStore = Dictionary(grouping: requests.indices) { ObjectIdentifier(requests[$0].store) }
        try writeGate.enter()
        defer { writeGate.leave() }
        try writeQueue.sync {
            for indices in byStore.values {
                let store = requests[indices[0]].store
                guard !store.options.readOnly else { throw StrataError.readOnlyStore(store.description) }
                switch store.backend {
                case .lmdb(let file):
                    try file.write { writer in
                        for index in indices { ids[index] = try writer.makePermanentID(for: requests[index].entityName) }
                    }
                case .sql(let sql):
                    for index in indices { ids[index] = try sql.makePermanentID(for: requests[index].entityName) }
                }
            }
        }
        return ids.map { $0! }
    }
}

/// The coordinator's serial executor: a dispatch queue of its own.
final class CoordinatorExecutor: SerialExecutor {
    let queue: DispatchQueue

    init(queue: DispatchQueue) {
        self.queue = queue
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedSerialExecutor()
        queue.async { job.runSynchronously(on: executor) }
    }

    func asUnownedSerialExecutor() -> UnownedSerialExecutor { UnownedSerialExecutor(ordinary: self) }

    func checkIsolated() {
        dispatchPrecondition(condition: .onQueue(queue))
    }
}
