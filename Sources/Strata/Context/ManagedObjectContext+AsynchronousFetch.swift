// Asynchronous fetches (Core Data's NSAsynchronousFetchRequest), as a sequence of blocks.
extension ManagedObjectContext {
    /// Runs `request` a step at a time and calls `completion` on the context with the
    /// results; returns what `completion` returns.
    ///
    /// The matching objects are found in one step (as ``fetch(_:)`` would, unsaved
    /// changes included); a fetch of objects then reads them
    /// ``AsynchronousFetchRequest/batchSize`` at a time, each batch in a block of its own,
    /// reporting ``AsynchronousFetchRequest/progress`` after each. Other blocks of the
    /// context run between the steps. The objects read are held until `completion` runs.
    /// A fetch of IDs, dictionaries or a count runs in one step.
    ///
    /// Cancelling the calling task stops the fetch at the next step: it throws
    /// `CancellationError`, and the objects it held are let go.
    ///
    /// - Throws: `CancellationError`; what ``fetch(_:)`` throws; what `completion` throws.
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
        // Step 1: the matching objects, as IDs (no row read for them).
        let (hold, ids) = try await perform { context in
            var idRequest = fetch
            idRequest.returnsObjectsAsFaults = true
            idRequest.fetchBatchSize = 0
            idRequest.relationshipKeyPathsForPrefetching = []
            let objects = try context.graph.fetchObjects(idRequest)
            return (context.graph.hold(objects), objects.map(\.objectID))
        }
        do {
            report?(FetchProgress(completed: 0, total: ids.count))
            // Steps 2…: a batch of objects read in each.
            let batch = max(1, request.batchSize)
            var start = 0
            while start < ids.count {
                try Task.checkCancellation()
                let end = min(ids.count, start + batch)
                try await perform { context in
                    try context.graph.readHeld(hold, range: start..<end)
                }
                start = end
                report?(FetchProgress(completed: end, total: ids.count))
            }
            try Task.checkCancellation()
            return try await perform { context in
                defer { context.graph.release(hold) }
                let objects = context.graph.held(hold)
                if !fetch.relationshipKeyPathsForPrefetching.isEmpty {
                    try context.graph.prepareFetched(objects, rows: DeferredRows(), for: fetch)
                }
                let typed = objects.compactMap { $0 as? Result }
                guard typed.count == objects.count else {
                    throw StrataError.typeMismatch(
                        key: "resultType", entity: fetch.entityName, expected: "\(Result.self)",
                        actual: objects.first { !($0 is Result) }.map { "\(type(of: $0))" } ?? "?")
                }
                return try completion.call(context, typed)
            }
        } catch {
            await perform { context in context.graph.release(hold) }
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
    /// Holds `objects` (strongly) for an asynchronous fetch until ``release(_:)``; returns
    /// the hold's number.
    func hold(_ objects: [ManagedObject]) -> Int {
        batching.lastHold += 1
        batching.holds[batching.lastHold] = objects
        return batching.lastHold
    }

    /// The objects of hold `number`.
    func held(_ number: Int) -> [ManagedObject] {
        batching.holds[number] ?? []
    }

    /// Reads the faults among the objects of hold `number` in `range`, together.
    func readHeld(_ number: Int, range: Range<Int>) throws {
        guard let objects = batching.holds[number], range.upperBound <= objects.count else { return }
        let faults = objects[range].filter { $0.faultState == .fault }
        if !faults.isEmpty { try fulfilFaults(Array(faults)) }
    }

    /// Lets go of hold `number`.
    func release(_ number: Int) {
        batching.holds[number] = nil
    }
}
