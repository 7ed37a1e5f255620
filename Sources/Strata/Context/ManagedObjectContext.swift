import Foundation
internal import StrataLocks
internal import StrataExecution

/// A scratch pad of managed objects: where you fetch, create, change and delete objects,
/// and save them, all together, to the stores of its coordinator.
///
/// A context is an actor. A `.privateQueue` context runs on its own serial queue; a
/// `.mainQueue` context runs on the main actor, so `@MainActor` code (a UI, say) uses it
/// directly. Its objects are confined to it by the compiler: ``ManagedObject`` is not
/// `Sendable`, so an object cannot leave a block; its ``ManagedObjectID`` can.
///
/// ```swift
/// let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
/// let id = try await context.perform { context in
///     let note = Note()
///     note.title = "Groceries"
///     try context.insert(note)
///     try context.save()
///     return note.objectID
/// }
/// ```
///
/// Every block ends with ``processPendingChanges()``. See <doc:ContextsAndConcurrency>.
public actor ManagedObjectContext {
    /// How a context runs its blocks.
    public enum ConcurrencyType: Sendable, Hashable {
        /// On a serial queue of its own.
        case privateQueue
        /// On the main actor (the main queue).
        case mainQueue
    }

    /// When a block given to ``perform(schedule:_:)`` runs.
    public enum ScheduledTaskType: Sendable, Hashable {
        /// As soon as the context is free; at once when the caller already runs on it.
        case immediate
        /// After every block already scheduled on the context, even when the caller
        /// runs on it.
        case enqueued
    }

    /// How the context runs its blocks.
    public nonisolated let concurrencyType: ConcurrencyType
    /// The coordinator whose stores the context reads and saves to: its own, or, for a
    /// child context, its root's. Nil until it is given one
    /// (``setPersistentStoreCoordinator(_:)``, or a parent that has one). Several
    /// contexts may share one.
    public nonisolated var persistentStoreCoordinator: PersistentStoreCoordinator? {
        switch lineage.withLock({ $0 }) {
        case .unset: nil
        case .coordinator(let coordinator): coordinator
        case .parent(let parent): parent.persistentStoreCoordinator
        }
    }
    /// The parent context, for a child context (``init(_:parent:name:)``): the context it
    /// reads through and saves into. Nil for a root context, whose parent store is its
    /// coordinator. See <doc:ParentAndChildContexts>.
    public nonisolated var parent: ManagedObjectContext? {
        if case .parent(let parent) = lineage.withLock({ $0 }) { return parent }
        return nil
    }
    /// Where the context's rows come from and its saves go, shared with the object graph.
    nonisolated let lineage: LockedValue<ContextLineage>
    /// What the contexts of one parent–child tree share (the temporary IDs that became
    /// permanent); this context's own until it is given a parent.
    nonisolated let ownFamily = ContextFamily()
    /// The context's children that are still alive, for automatic merging and
    /// permanent IDs (held weakly: a child holds its parent, never the reverse).
    nonisolated let children = WeakContexts()
    /// The context's name, for logs, notifications and the `context` dimension of its
    /// metrics (`unnamed` when nil).
    public var name: String? {
        didSet { graph.contextName = name }
    }
    /// Whatever you want to keep with the context.
    public var userInfo: [String: any Sendable] = [:]
    /// Where the context posts its notifications (``didChangeObjectsNotification`` and
    /// the others): `NotificationCenter.default` unless you give it another, or nil to
    /// post none there (a bulk import saves building the object sets; the streams of
    /// ``notifications(of:bufferingPolicy:)`` are unaffected).
    public var notificationCenter: NotificationCenter? = .default
    /// Whether the context brings in, by itself, the changes saved into its parent
    /// store: for a child, the saves of its siblings into the parent and the parent's
    /// own saves; for a root context, the saves of the other contexts of its
    /// coordinator. Registered objects that were updated are refreshed (their unsaved
    /// changes stay on top), inserted objects are registered as faults, deleted ones
    /// leave the context: as ``mergeChanges(fromContextDidSave:)-(ContextNotification)``
    /// does, in a block of this context scheduled right after the save. False by default.
    public var automaticallyMergesChangesFromParent = false {
        didSet {
            guard automaticallyMergesChangesFromParent != oldValue, parent == nil else { return }
            persistentStoreCoordinator?.mergingContexts.update(self, included: automaticallyMergesChangesFromParent)
            persistentStoreCoordinator?.remoteChangeMonitor.update()
        }
    }
    /// The streams of ``notifications(of:bufferingPolicy:)``.
    nonisolated let notifier = ContextNotifier()
    /// How the context's saves settle conflicts with changes made elsewhere since it
    /// read its objects: ``MergePolicy/error`` (the default) fails the save listing every
    /// conflict; the others make it go through by their rules (<doc:MergePolicies>).
    /// Settable from any thread, as Core Data's setters on queue-based contexts are; a
    /// save uses the policy set when it begins.
    public nonisolated var mergePolicy: MergePolicy {
        get { mergePolicyValue.withLock { $0 } }
        set { mergePolicyValue.withLock { $0 = newValue } }
    }
    /// ``mergePolicy``'s value.
    private nonisolated let mergePolicyValue = LockedValue(MergePolicy.error)

    /// Who the context's saves are made by, recorded with each in persistent history
    /// (``PersistentHistoryTransaction/author``): an app name, a job, a request. Nil by
    /// default; settable from any thread; a save uses the author set when it begins.
    public nonisolated var transactionAuthor: String? {
        get { transactionAuthorValue.withLock { $0 } }
        set { transactionAuthorValue.withLock { $0 = newValue } }
    }
    /// ``transactionAuthor``'s value.
    private nonisolated let transactionAuthorValue = LockedValue<String?>(nil)

    nonisolated let contextExecutor: ContextExecutor

    /// The context's executor: its private queue, or the main actor's.
    public nonisolated var unownedExecutor: UnownedSerialExecutor { contextExecutor.unownedExecutor }
    /// The legacy lock (``lock()``).
    private nonisolated let contextLock: ContextLock
    /// The objects (confined to this actor's isolation, like the objects themselves).
    let graph: ObjectGraph

    /// A context of `type` on `coordinator`'s stores.
    ///
    /// - Parameters:
    ///   - type: a private queue of its own, or the main queue.
    ///   - coordinator: the coordinator whose stores the context reads and saves to.
    ///   - name: the context's name; a private queue is labelled with it.
    public init(_ type: ConcurrencyType, coordinator: PersistentStoreCoordinator, name: String? = nil) {
        self.init(type, lineage: .coordinator(coordinator), name: name)
    }

    /// A child context of `parent`: it reads through the parent (seeing the parent's
    /// unsaved changes, then the store) and ``save()`` pushes its changes into the
    /// parent, not to the store. Any concurrency type works with any parent's; chains may
    /// be as deep as you like. See <doc:ParentAndChildContexts>.
    ///
    /// - Parameters:
    ///   - type: a private queue of its own, or the main queue.
    ///   - parent: the context it reads through and saves into.
    ///   - name: the context's name; a private queue is labelled with it.
    public init(_ type: ConcurrencyType, parent: ManagedObjectContext, name: String? = nil) {
        self.init(type, lineage: .parent(parent), name: name)
        parent.children.add(self)
    }

    /// A context of `type` with no coordinator yet: give it one with
    /// ``setPersistentStoreCoordinator(_:)`` (or a parent with ``setParent(_:)``) before
    /// it fetches or saves (until then those throw ``StrataError/noCoordinator``). `name`
    /// is the context's name.
    public init(_ type: ConcurrencyType, name: String? = nil) {
        self.init(type, lineage: .unset, name: name)
    }

    private init(_ type: ConcurrencyType, lineage: ContextLineage, name: String?) {
        concurrencyType = type
        self.lineage = LockedValue(lineage)
        self.name = name
        contextExecutor = switch type {
        case .privateQueue: .privateQueue(named: name)
        case .mainQueue: .mainQueue
        }
        contextLock = ContextLock(executor: contextExecutor)
        graph = ObjectGraph(lineage: self.lineage, family: ownFamily, children: children)
        graph.contextName = name
    }

    /// Gives a context made with ``init(_:name:)`` its coordinator. Safe from any thread, as
    /// Core Data's setters on queue-based contexts are.
    ///
    /// - Throws: ``StrataError/invalidContextConfiguration(_:)`` when the context already
    ///   has another coordinator (a context keeps the one it first reads and saves
    ///   through), or has a parent (a child's coordinator is its root's). Giving it the
    ///   same coordinator again does nothing.
    public nonisolated func setPersistentStoreCoordinator(_ coordinator: PersistentStoreCoordinator) throws(StrataError) {
        try lineage.withLock { (lineage) throws(StrataError) in
            switch lineage {
            case .unset:
                lineage = .coordinator(coordinator)
            case .coordinator(let current) where current === coordinator:
                return
            case .coordinator:
                throw .invalidContextConfiguration("it already has a persistent store coordinator")
            case .parent:
                throw .invalidContextConfiguration("it has a parent context; a child context uses its root's coordinator")
            }
        }
    }

    /// Gives a context made with ``init(_:name:)`` its parent, making it a child context
    /// (Core Data's settable `parent`). Once only, and before the context is used: like
    /// ``setPersistentStoreCoordinator(_:)``, a context keeps the parent store it first
    /// reads and saves through.
    ///
    /// - Throws: ``StrataError/invalidContextConfiguration(_:)`` when the context already
    ///   has a coordinator or another parent, or when `parent` is the context itself or
    ///   one of its descendants (a cycle). Giving it the same parent again does nothing.
    public nonisolated func setParent(_ parent: ManagedObjectContext) throws(StrataError) {
        var ancestor: ManagedObjectContext? = parent
        while let context = ancestor {
            if context === self { throw .invalidContextConfiguration("its parent would be itself or one of its descendants") }
            ancestor = context.parent
        }
        try lineage.withLock { (lineage) throws(StrataError) in
            switch lineage {
            case .unset:
                lineage = .parent(parent)
            case .parent(let current) where current === parent:
                return
            case .parent:
                throw .invalidContextConfiguration("it already has a parent context")
            case .coordinator:
                throw .invalidContextConfiguration("it already has a persistent store coordinator; a root context cannot become a child")
            }
        }
        parent.children.add(self)
    }

    /// What this context's parent–child tree shares: the root's.
    nonisolated var family: ContextFamily {
        parent?.family ?? ownFamily
    }

    // MARK: Blocks

    /// Runs `body` on the context and returns its result.
    ///
    /// With ``ScheduledTaskType/immediate`` (the default) the block runs as soon as the
    /// context is free, at once when the caller already runs on the context; with
    /// ``ScheduledTaskType/enqueued`` it runs after every block already scheduled. The
    /// block always runs exactly once, even when the calling task is cancelled (check
    /// `Task.isCancelled` inside it). It ends with ``processPendingChanges()``.
    nonisolated(nonsending)
    public func perform<T: Sendable>(
        schedule: ScheduledTaskType = .immediate, _ body: (isolated ManagedObjectContext) throws -> T
    ) async rethrows -> T {
        try await performBlock(schedule: schedule == .immediate ? .immediate : .enqueued, body)
    }

    /// Schedules `body` on the context and returns at once; blocks scheduled this way
    /// run in the order they were given.
    public nonisolated func perform(_ body: @escaping @Sendable (isolated ManagedObjectContext) -> Void) {
        enqueueBlock(body)
    }

    /// Runs `body` on the context and waits for it, from synchronous code.
    ///
    /// Reentrant: inside a block of the same context it runs at once, and chains across
    /// contexts (A → B → A) do not deadlock. It blocks the calling thread, so do not
    /// call it from Swift's cooperative pool (an `async` function): use
    /// ``perform(schedule:_:)`` there.
    public nonisolated func performAndWait<T: Sendable>(_ body: (isolated ManagedObjectContext) throws -> T) rethrows -> T {
        try performBlockAndWait(body)
    }

    /// Ends every block: ``processPendingChanges()``. A failure there (an object of
    /// another context met by a cascade) is reported by the next ``save()``.
    func blockDidFinish(_ block: PerformedBlock) {
        try? processPendingChanges()
    }

    // MARK: Legacy locking

    /// Waits until the calling thread has exclusive use of the context, as if it ran one
    /// of its blocks: until ``unlock()``, no block of the context runs elsewhere and
    /// ``performAndWait(_:)`` runs at once on this thread. Recursive. From the 2009
    /// reference; prefer ``perform(schedule:_:)``.
    @available(*, noasync, message: "lock() blocks the thread; use perform(schedule:_:) in async code")
    public nonisolated func lock() { contextLock.lock() }

    /// Takes the lock when no other thread holds it and the context is idle; never waits.
    @available(*, noasync, message: "use perform(schedule:_:) in async code")
    public nonisolated func tryLock() -> Bool { contextLock.tryLock() }

    /// Gives back one ``lock()``.
    ///
    /// - Throws: ``ContextLockError`` when the calling thread does not hold the lock.
    @available(*, noasync, message: "use perform(schedule:_:) in async code")
    public nonisolated func unlock() throws(ContextLockError) { try contextLock.unlock() }
}
