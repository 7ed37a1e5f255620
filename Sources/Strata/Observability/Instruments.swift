import CoreMetrics
import Foundation
internal import StrataLocks
import StrataLMDB
import Tracing

/// Where a coordinator's metrics and spans go (swift-metrics and swift-distributed-tracing),
/// and the metric objects it keeps so that a save or a fetch looks nothing up by label.
///
/// With swift-metrics' no-op factory (nothing bootstrapped, none given) ``metrics`` is nil
/// and nothing is counted; with no tracer (``NoOpTracer``) ``tracer`` is nil and no span is
/// started: an application that uses neither pays one nil check per operation.
final class Instruments: Sendable {
    /// The factory metrics are made with, nil when it is swift-metrics' no-op one.
    let metrics: (any MetricsFactory)?
    /// The tracer given to the coordinator, if any; else the active one is used per call.
    private let givenTracer: (any Tracer)?
    /// The metrics of each store, by store identifier.
    private let stores = LockedValue<[UUID: StoreMetrics]>([:])
    /// Query generations open and contexts pinned to them (nil without metrics).
    let generations: GenerationMetrics?

    init(metrics factory: (any MetricsFactory)?, tracer: (any Tracer)?) {
        let factory = factory ?? MetricsSystem.factory
        metrics = factory is NOOPMetricsHandler ? nil : factory
        givenTracer = tracer is NoOpTracer ? nil : tracer
        traced = tracer != nil && !(tracer is NoOpTracer)
        generations = metrics.map(GenerationMetrics.init)
    }

    /// Whether a real tracer was given.
    private let traced: Bool

    /// The coordinator's tracer, or else the calling task's (`withTracer`) or the
    /// bootstrapped one; nil when there is none. Resolved per operation, as the tracing
    /// guide asks of libraries, with the common case first: nothing bootstrapped and no
    /// task-local instrument is one type check, not a search for a tracer.
    var tracer: (any Tracer)? {
        if traced { return givenTracer }
        let instrument = InstrumentationSystem.instrument
        if instrument is NoOpInstrument { return nil }
        let tracer = InstrumentationSystem.tracer
        return tracer is NoOpTracer ? nil : tracer
    }

    /// The metrics of `store`, made at its first use.
    func metrics(of store: PersistentStore) -> StoreMetrics? {
        guard let metrics else { return nil }
        return stores.withLock { stores in
            if let known = stores[store.identifier] { return known }
            let made = StoreMetrics(store: store, factory: metrics)
            stores[store.identifier] = made
            return made
        }
    }

    /// Lets go of `store`'s metrics (it was removed).
    func forget(_ store: PersistentStore) {
        _ = stores.withLock { $0.removeValue(forKey: store.identifier) }
    }

    // MARK: Spans

    /// Runs `body` in a client span `operation entity` with OpenTelemetry's database
    /// attributes (`db.system.name` `lmdb`, `db.operation.name`, `db.collection.name`);
    /// `body` adds the rest through the span it is given (nil when nothing traces).
    /// A thrown error is recorded and sets the span's status to error.
    static func traced<Result, Failure: Error>(
        by tracer: (any Tracer)?, _ operation: String, entity: String?,
        _ body: ((any Tracing.Span)?) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        guard let tracer else { return try body(nil) }
        let span = startSpan(tracer, operation, entity: entity)
        defer { span.end() }
        // The body runs with the span's context bound, so spans it starts are its children.
        let outcome = ServiceContext.withValue(span.context) { () -> Swift.Result<Result, Failure> in
            do throws(Failure) { return .success(try body(span)) } catch { return .failure(error) }
        }
        if case .failure(let error) = outcome { failed(span, error) }
        return try outcome.get()
    }

    /// ``traced(by:_:entity:_:)`` for asynchronous work (opening and migrating a store).
    static func traced<Result, Failure: Error>(
        by tracer: (any Tracer)?, _ operation: String, entity: String?,
        isolation: isolated (any Actor)? = #isolation,
        _ body: ((any Tracing.Span)?) async throws(Failure) -> Result
    ) async throws(Failure) -> Result {
        guard let tracer else { return try await body(nil) }
        let span = startSpan(tracer, operation, entity: entity)
        defer { span.end() }
        let outcome = await ServiceContext.withValue(span.context, isolation: isolation) { () async -> Swift.Result<Result, Failure> in
            do throws(Failure) { return .success(try await body(span)) } catch { return .failure(error) }
        }
        if case .failure(let error) = outcome { failed(span, error) }
        return try outcome.get()
    }

    private static func startSpan(_ tracer: any Tracer, _ operation: String, entity: String?) -> any Tracing.Span {
        let span = tracer.startSpan(entity.map { "\(operation) \($0)" } ?? operation, ofKind: .client)
        span.attributes["db.system.name"] = "lmdb"
        span.attributes["db.operation.name"] = operation
        if let entity { span.attributes["db.collection.name"] = entity }
        return span
    }

    private static func failed(_ span: any Tracing.Span, _ error: any Error) {
        span.recordError(error)
        span.setStatus(SpanStatus(code: .error, message: "\(error)"))
        if let error = error as? StrataError { span.attributes["error.type"] = error.code.description }
    }
}

/// The metric names Strata reports, for dashboards and tests. Every name is prefixed
/// `strata_`; durations are timers (nanoseconds, shown as seconds by most backends).
public enum StrataMetricName {
    /// Timer: how long a context's `save()` took, dimensioned by `context`.
    public static let saveDuration = "strata_save_duration_seconds"
    /// Counter: saves that wrote something, by `context`.
    public static let saves = "strata_saves_total"
    /// Counter: saves that failed, by `context` and `error` (the ``StrataError/Code``).
    public static let saveFailures = "strata_save_failures_total"
    /// Counter: objects saved, by `context` and `change` (`inserted`, `updated`, `deleted`).
    public static let savedObjects = "strata_saved_objects_total"
    /// Counter: conflicts a merge policy settled in a store's writes, by `store`.
    public static let conflictsResolved = "strata_conflicts_resolved_total"
    /// Counter: write transactions committed (a group commit, a batch request), by `store`.
    public static let commits = "strata_commits_total"
    /// Recorder: saves per commit (group commit's group sizes), by `store`.
    public static let commitGroupSize = "strata_commit_group_size"
    /// Timer: how long a commit's write took on the write queue, by `store`.
    public static let commitDuration = "strata_commit_duration_seconds"
    /// Timer: how long a fetch or count took, by `context`, `entity` and `operation`
    /// (`fetch`, `count`).
    public static let fetchDuration = "strata_fetch_duration_seconds"
    /// Counter: objects (or IDs, or dictionaries) fetches returned, by `context` and `entity`.
    public static let fetchedRows = "strata_fetched_rows_total"
    /// Counter: faults fired (an object's values read on first access), by `context`.
    public static let faultsFired = "strata_faults_fired_total"
    /// Gauge: query generations open on the coordinator.
    public static let openGenerations = "strata_query_generations_open"
    /// Gauge: contexts pinned to an open query generation.
    public static let pinnedContexts = "strata_query_generations_pinned_contexts"
    /// Gauge: how many commits behind the newest the oldest reader of a store is, by `store`.
    public static let readerLag = "strata_reader_lag_transactions"
    /// Gauge: reader slots holding a transaction now (every process), by `store`.
    public static let readersInUse = "strata_readers_in_use"
    /// Gauge: the size of a store's memory map, in bytes, by `store`.
    public static let mapSize = "strata_map_size_bytes"
    /// Gauge: the bytes of a store's map in use (its last page), by `store`.
    public static let mapUsed = "strata_map_used_bytes"
}

/// A store's metrics: its commits and the state gauges refreshed after them.
final class StoreMetrics: Sendable {
    let commits: Counter
    let groupSize: Recorder
    let commitDuration: CoreMetrics.Timer
    let conflictsResolved: Counter
    private let readerLag: Meter
    private let readersInUse: Meter
    private let mapSize: Meter
    private let mapUsed: Meter
    /// When the gauges were last refreshed (uptime nanoseconds), to refresh at most once a second.
    private let refreshed = LockedValue<UInt64?>(nil)

    init(store: PersistentStore, factory: any MetricsFactory) {
        let dimensions = [("store", store.metricsLabel)]
        commits = Counter(label: StrataMetricName.commits, dimensions: dimensions, factory: factory)
        groupSize = Recorder(label: StrataMetricName.commitGroupSize, dimensions: dimensions, factory: factory)
        commitDuration = CoreMetrics.Timer(label: StrataMetricName.commitDuration, dimensions: dimensions, factory: factory)
        conflictsResolved = Counter(label: StrataMetricName.conflictsResolved, dimensions: dimensions, factory: factory)
        readerLag = Meter(label: StrataMetricName.readerLag, dimensions: dimensions, factory: factory)
        readersInUse = Meter(label: StrataMetricName.readersInUse, dimensions: dimensions, factory: factory)
        mapSize = Meter(label: StrataMetricName.mapSize, dimensions: dimensions, factory: factory)
        mapUsed = Meter(label: StrataMetricName.mapUsed, dimensions: dimensions, factory: factory)
    }

    /// Records one commit of `saves` saves that took `nanoseconds`, with `resolved`
    /// conflicts settled, then refreshes the gauges when a second has passed.
    func didCommit(saves: Int, nanoseconds: UInt64, resolved: Int, of store: PersistentStore) {
        commits.increment()
        groupSize.record(saves)
        commitDuration.recordNanoseconds(Int64(clamping: nanoseconds))
        if resolved > 0 { conflictsResolved.increment(by: resolved) }
        refreshGauges(of: store)
    }

    /// Refreshes the map and reader gauges from the environment (`mdb_env_info` and the
    /// reader table), at most once a second unless `force`.
    func refreshGauges(of store: PersistentStore, force: Bool = false) {
        let now = DispatchTime.now().uptimeNanoseconds
        let due = refreshed.withLock { last -> Bool in
            guard force || last.map({ now &- $0 >= 1_000_000_000 }) ?? true else { return false }
            last = now
            return true
        }
        guard due, let environment = store.file?.environment else { return }
        let info = environment.info
        let readers = environment.readers().compactMap(\.transactionID)
        mapSize.set(info.mapSize)
        mapUsed.set((info.lastPageNumber + 1) * environment.statistics.pageSize)
        readersInUse.set(readers.count)
        readerLag.set(readers.min().map { max(0, info.lastTransactionID - $0) } ?? 0)
    }
}

/// The coordinator-wide gauges of query generations.
final class GenerationMetrics: Sendable {
    private let open: Meter
    private let pinned: Meter

    init(factory: any MetricsFactory) {
        open = Meter(label: StrataMetricName.openGenerations, dimensions: [], factory: factory)
        pinned = Meter(label: StrataMetricName.pinnedContexts, dimensions: [], factory: factory)
    }

    /// Sets the gauges.
    func set(open: Int, pinned: Int) {
        self.open.set(open)
        self.pinned.set(pinned)
    }
}

/// A context's metrics, kept by its object graph (in the context's isolation) and made
/// again when the context's name changes.
final class ContextMetrics {
    /// The context name the dimensions carry.
    let name: String
    private let factory: any MetricsFactory
    let saveDuration: CoreMetrics.Timer
    let saves: Counter
    let inserted: Counter
    let updated: Counter
    let deleted: Counter
    let faults: Counter
    private var failures: [StrataError.Code: Counter] = [:]
    private var otherFailures: Counter?
    private var reads: [ReadKey: (duration: CoreMetrics.Timer, rows: Counter)] = [:]

    private struct ReadKey: Hashable {
        let entity: String
        let operation: String
    }

    init(name: String, factory: any MetricsFactory) {
        self.name = name
        self.factory = factory
        let context = ("context", name)
        saveDuration = CoreMetrics.Timer(label: StrataMetricName.saveDuration, dimensions: [context], factory: factory)
        saves = Counter(label: StrataMetricName.saves, dimensions: [context], factory: factory)
        inserted = Counter(label: StrataMetricName.savedObjects, dimensions: [context, ("change", "inserted")], factory: factory)
        updated = Counter(label: StrataMetricName.savedObjects, dimensions: [context, ("change", "updated")], factory: factory)
        deleted = Counter(label: StrataMetricName.savedObjects, dimensions: [context, ("change", "deleted")], factory: factory)
        faults = Counter(label: StrataMetricName.faultsFired, dimensions: [context], factory: factory)
    }

    /// Counts a failed save.
    func saveFailed(_ error: any Error) {
        let code = (error as? StrataError)?.code
        if let code {
            if let counter = failures[code] { return counter.increment() }
            let counter = Counter(
                label: StrataMetricName.saveFailures, dimensions: [("context", name), ("error", code.description)], factory: factory)
            failures[code] = counter
            counter.increment()
        } else {
            let counter = otherFailures ?? Counter(
                label: StrataMetricName.saveFailures, dimensions: [("context", name), ("error", "other")], factory: factory)
            otherFailures = counter
            counter.increment()
        }
    }

    /// Records a fetch or count of `entity`.
    func didRead(_ operation: String, entity: String, nanoseconds: UInt64, rows: Int?) {
        let key = ReadKey(entity: entity, operation: operation)
        let metrics = reads[key] ?? {
            let made = (
                duration: CoreMetrics.Timer(label: StrataMetricName.fetchDuration,
                                dimensions: [("context", name), ("entity", entity), ("operation", operation)], factory: factory),
                rows: Counter(label: StrataMetricName.fetchedRows, dimensions: [("context", name), ("entity", entity)], factory: factory))
            reads[key] = made
            return made
        }()
        metrics.duration.recordNanoseconds(Int64(clamping: nanoseconds))
        if let rows { metrics.rows.increment(by: rows) }
    }
}

extension PersistentStore {
    /// The `store` dimension of its metrics: the directory's path, or `in-memory:` and
    /// the identifier.
    var metricsLabel: String { url?.path ?? "in-memory:\(identifier)" }
}
