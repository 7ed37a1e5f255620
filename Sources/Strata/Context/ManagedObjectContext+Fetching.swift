import Foundation

// Batched results and staleness: how much a context reads, and how fresh it must be.
extension ManagedObjectContext {
    /// The results of `request`, materialised one batch at a time (see
    /// ``FetchedResults``): for results too large to hold as objects all at once.
    ///
    /// The IDs are found as ``fetch(_:)`` finds its objects: ordered, windowed and
    /// merged with this context's unsaved changes. Objects are then made and read a
    /// batch of ``FetchRequest/fetchBatchSize`` (or ``FetchedResults/defaultBatchSize``)
    /// at a time, each batch in one read transaction, and only the current batch is
    /// held. See <doc:Queries#Batched-fetches>.
    ///
    /// ```swift
    /// var request = FetchRequest<Note>()
    /// request.fetchBatchSize = 500
    /// for note in try context.fetchedResults(for: request) { total += Int(note.priority) }
    /// ```
    ///
    /// - Throws: what ``fetch(_:)`` throws, and
    ///   ``StrataError/typeMismatch(key:entity:expected:actual:)`` when an entity the
    ///   request covers is not of class `Result`.
    public func fetchedResults<Result: ManagedObject>(for request: FetchRequest<Result>) throws -> FetchedResults<Result> {
        try instrumentedRead("fetch", of: request.entityName) { span in
            let results = try graph.fetchedResults(for: request)
            span?.attributes["db.response.returned_rows"] = results.count
            return (results, results.count)
        }
    }

    /// How long, in seconds, a cached row may be reused when a fault fires or an object
    /// is refreshed, instead of reading the store. Negative (the default, -1) for no
    /// limit; 0 to read the store every time.
    ///
    /// The coordinator keeps a cache of rows (Core Data's row cache): rows read to fulfil
    /// faults, batches and prefetches, and rows saved through the coordinator. Every save
    /// through the coordinator updates it (written rows replace their entries, deleted
    /// rows leave), so a context always sees the saves of the other contexts of its
    /// coordinator when it refreshes an object, whatever the interval. Rows changed by
    /// another process, or by another coordinator on the same store, are only read again
    /// once the cached row is older than the interval, counted from when the row was read.
    ///
    /// It never updates objects by itself: it applies when a fault fires
    /// (``refresh(_:mergeChanges:)`` with `false` makes one) and when
    /// ``refresh(_:mergeChanges:)`` with `true` re-reads the stored values. Fetches always
    /// read the store and do not fill the cache (so that bulk fetches stay as fast as the
    /// store). NaN counts as no limit. See <doc:Queries#Staleness>.
    ///
    /// ```swift
    /// context.stalenessInterval = 0          // another process writes the store too
    /// try context.refresh(note, mergeChanges: false)
    /// print(note.title)                      // read from the store
    /// ```
    public var stalenessInterval: TimeInterval {
        get { graph.batching.stalenessInterval }
        set { graph.batching.stalenessInterval = newValue.isNaN ? -1 : newValue }
    }
}
