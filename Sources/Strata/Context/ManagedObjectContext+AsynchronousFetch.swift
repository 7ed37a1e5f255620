// Asynchronous fetches (Core Data's NSAsynchronousFetchRequest), as a sequence of blocks.
extension ManagedObjectContext {
    /// Runs `request` a step at a time and calls `completion` on the context with the
    /// results; returns what `completion` returns.
    ///
    /// The matching objects are found in one step (as ``fetch(_:)`` would, unsaved
    /// changes included); a fetch of objects then reads them
    /// ``AsynchronousFetchRequest/batchSize`` at a time, each batch (and what it
    /// prefetches) in a block of its own, reporting ``AsynchronousFetchRequest/progress``
    /// on the context after each. Each step is queued behind the blocks already waiting,
    /// so other blocks of the context run between the steps, also when the caller is on
    /// the context's queue. The objects read are held until `completion` runs. A fetch of
    /// IDs, dictionaries or a count, or with `includesPropertyValues` false, runs in one
    /// step.
    ///
    /// Cancelling the calling task stops the fetch at the next step: it throws
    /// `CancellationError`, and the objects it held are let go.
    ///
    /// - Throws: `CancellationError`; what ``fetch(_:)`` throws (a `typeMismatch` when an
    ///   object is not a `Result`); ``StrataError/invalidObjectState(_:reason:)`` when the
    ///   context was reset while the fetch ran; what `completion` throws.
    nonisolated(nonsending)
    public func execute<Result, T: Sendable>(
        _ request: AsynchronousFetchRequest<Result>,
        _ completion: (isolated ManagedObjectContext, [Result]) throws -> T
    ) async throws -> T {
        /// Runs the fetch with the completion made escapable, to be carried to the context.
        nonisolated(nonsending) func hop(_ completion: @escaping (isolated ManagedObjectContext, [Result]) throws -> T) async throws -> T {
            try await run(request, IsolatedCompletion(call: completion))
        }
        return try await withoutActuallyEscaping(completion, do: hop)
    }

    /// ``execute(_:_:)`` with its completion carried to the context.
    nonisolated(nonsending)
    private func run<Result, T: Sendable>(
        _ request: AsynchronousFetchRequest<Result>, _ completion: IsolatedCompletion<Result, T>
    ) async throws -> T {
        let fetch = request.fetchRequest
        let report = request.progress
        try Task.checkCancellation()
        guard fetch.resultType == .managedObject, fetch.includesPropertyValues else {
            return try await perform { context in
                let results = try context.fetch(fetch)
                report?(FetchProgress(completed: results.count, total: results.count))
                return try completion.call(context, results)
            }
        }
        // Step 1: the matching objects, as faults. A fetch that merges unsaved changes
        // reads rows; they are kept for the batches, not applied here.
        let (hold, total) = try await perform { context in
            var idRequest = fetch
            idRequest.returnsObjectsAsFaults = true
            idRequest.fetchBatchSize = 0
            idRequest.relationshipKeyPathsForPrefetching = []
            var rows = DeferredRows()
            let objects = try context.graph.fetchObjects(idRequest, deferringRows: true, readingRows: false, rows: &rows)
            report?(FetchProgress(completed: 0, total: objects.count))
            return (context.graph.hold(objects, rows: rows), objects.count)
        }
        do {
            // Steps 2…: a batch of objects read in each (and what it prefetches), queued
            // behind the blocks already waiting, so that they run in between — on the
            // context's own queue too.
            let batch = max(1, request.batchSize)
            var start = 0
            while start < total {
                try Task.checkCancellation()
                let end = min(total, start + batch)
                try await perform(schedule: .enqueued) { context in
                    try context.graph.readHeld(hold, range: start..<end, prefetching: fetch.relationshipKeyPathsForPrefetching)
                    report?(FetchProgress(completed: end, total: total))
                }
                start = end
            }
            try Task.checkCancellation()
            return try await perform(schedule: .enqueued) { context in
                let objects = try context.graph.releaseHeld(hold)
                return try completion.call(context, try context.graph.typed(objects, fetch))
            }
        } catch {
            // (Whatever step failed; letting go of a hold already let go does nothing.)
            await perform { context in _ = try? context.graph.releaseHeld(hold) }
            throw error
        }
    }
}

/// An asynchronous fetch's completion, carried to its context.
///
/// Its first parameter is `isolated ManagedObjectContext`: at the call site the compiler
/// already rejected capturing any non-Sendable value the caller keeps using (as for
/// `perform`'s block). It is called at most once, on the context's executor, while the
/// caller waits, and never outlives the `withoutActuallyEscaping` scope that made it
/// escapable.
// @unchecked Sendable because the completion is isolated to the context and runs there (see above).
private struct IsolatedCompletion<Result, T>: @unchecked Sendable {
    let call: (isolated ManagedObjectContext, [Result]) throws -> T
}

extension ObjectGraph {
    /// Holds `objects` (strongly) for an asynchronous fetch, with the rows its first
    /// step read for them, until ``releaseHeld(_:)``; returns the hold's number.
    func hold(_ objects: [ManagedObject], rows: DeferredRows) -> Int {
        batching.lastHold += 1
        batching.holds[batching.lastHold] = (objects, rows)
        return batching.lastHold
    }

    /// Reads the faults among the objects of hold `number` in `range` together (from the
    /// rows the first step kept, or the store), then prefetches `paths` for them.
    func readHeld(_ number: Int, range: Range<Int>, prefetching paths: [String]) throws {
        guard let (objects, rows) = batching.holds[number], range.upperBound <= objects.count else { return }
        let slice = Array(objects[range])
        try fulfilFaults(slice, rows: rows)
        if !paths.isEmpty { try prefetch(paths, for: slice) }
    }

    /// Lets go of hold `number` and returns its objects.
    ///
    /// - Throws: `invalidObjectState` when the context was reset while the fetch ran (its
    ///   objects no longer belong to it).
    func releaseHeld(_ number: Int) throws -> [ManagedObject] {
        let objects = batching.holds.removeValue(forKey: number)?.objects ?? []
        if let stray = objects.first(where: { $0.owner !== self }) {
            throw StrataError.invalidObjectState(stray.objectID, reason: "the context was reset while an asynchronous fetch of it ran")
        }
        return objects
    }
}
