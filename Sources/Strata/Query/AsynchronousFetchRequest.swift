/// A fetch that runs a step at a time, reporting its progress and stopping when its task
/// is cancelled: Core Data's `NSAsynchronousFetchRequest`, for
/// ``ManagedObjectContext/execute(_:_:)``.
///
/// The matching objects are found first (their IDs, in the request's order and window,
/// merged with the context's unsaved changes); then they are read ``batchSize`` at a
/// time, each batch in a block of its own, so the context runs other blocks in between
/// and a cancelled task stops at the next batch. The results go to a completion block
/// that runs on the context.
///
/// ```swift
/// var request = AsynchronousFetchRequest(fetchRequest: FetchRequest<Note>())
/// request.progress = { progress in print("\(progress.completed) of \(progress.total)") }
/// let titles = try await context.execute(request) { context, notes in notes.map(\.title) }
/// ```
public struct AsynchronousFetchRequest<Result>: Sendable {
    /// The fetch that runs: its predicate, order, window and result type, as
    /// ``ManagedObjectContext/fetch(_:)`` would run it.
    public var fetchRequest: FetchRequest<Result>
    /// How many objects each step reads (at least 1). 1,000 by default.
    public var batchSize = 1000
    /// Called after each step, on the context's executor, with how far the fetch is.
    public var progress: (@Sendable (FetchProgress) -> Void)?

    /// An asynchronous fetch of `fetchRequest`, reporting to `progress`.
    public init(fetchRequest: FetchRequest<Result>, progress: (@Sendable (FetchProgress) -> Void)? = nil) {
        self.fetchRequest = fetchRequest
        self.progress = progress
    }
}

/// How far an asynchronous fetch is: objects read of the objects found.
public struct FetchProgress: Sendable, Hashable, CustomStringConvertible {
    /// The objects read so far.
    public var completed: Int
    /// The objects the fetch found (known once they are found; 0 before).
    public var total: Int

    /// `completed` objects read of `total` found.
    public init(completed: Int, total: Int) {
        self.completed = completed
        self.total = total
    }

    /// `completed / total`; 1 when nothing was found.
    public var fractionCompleted: Double {
        total == 0 ? 1 : Double(completed) / Double(total)
    }

    /// `300 of 1000`.
    public var description: String { "\(completed) of \(total)" }
}
