import Foundation

// Query generations: Core Data's queryGenerationToken and setQueryGenerationFrom(_:),
// over LMDB read snapshots (DESIGN.md "Query generations", <doc:QueryGenerations>).
extension ManagedObjectContext {
    /// The token of the query generation the context reads, or nil when it is not pinned
    /// (every read sees the newest committed state). Always nil for a child context,
    /// which reads through its parent.
    ///
    /// A context pinned to ``QueryGenerationToken/current`` that has not read yet takes
    /// its snapshot now, so that the token names one state you can share:
    ///
    /// ```swift
    /// try report.setQueryGenerationFrom(.current)
    /// try audit.setQueryGenerationFrom(report.queryGenerationToken)   // the same snapshot
    /// ```
    ///
    /// When no reader slot is free for that snapshot, the token is
    /// ``QueryGenerationToken/current`` and the context stays lazy; its next read reports
    /// the error.
    public var queryGenerationToken: QueryGenerationToken? {
        graph.queryGenerationToken
    }

    /// Pins the context to a query generation, or unpins it.
    ///
    /// - ``QueryGenerationToken/current``: the newest committed state, taken at the
    ///   context's next fetch, count or fault (pinning is lazy), and kept.
    /// - Another context's ``queryGenerationToken``, or a save notification's
    ///   ``ContextNotification/queryGenerationToken``: that very state. Both contexts
    ///   then share one snapshot.
    /// - nil: unpinned; every read sees the newest committed state.
    ///
    /// Every fetch, count and fault of a pinned context reads its generation, so data
    /// saved afterwards by other contexts or processes stays invisible, and objects that
    /// existed in it never become inaccessible faults. The generation advances on the
    /// context's own ``save()`` (to the state it made), on
    /// ``mergeChanges(fromContextDidSave:)-(ContextNotification)``, on ``reset()``, and
    /// here. An advance never refreshes registered objects: ``refreshAllObjects()`` does.
    ///
    /// - Throws: ``StrataError/queryGenerationUnavailable(_:)`` when no context holds the
    ///   token's snapshot any more and its stores have committed since;
    ///   ``StrataError/invalidContextConfiguration(_:)`` for a token on a child context;
    ///   ``StrataError/noCoordinator`` for a token other than `.current` on a context
    ///   without a coordinator yet; ``StrataError/storage(_:)``. The context keeps its
    ///   generation then.
    public func setQueryGenerationFrom(_ token: QueryGenerationToken?) throws {
        try graph.setQueryGeneration(from: token)
    }
}
