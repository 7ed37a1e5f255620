import Foundation

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
public actor ManagedObjectContext: BlockPerformingActor {
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
    /// The coordinator whose stores the context reads and saves to; nil until it is
    /// given one (``setPersistentStoreCoordinator(_:)``). Several contexts may share one.
    public nonisolated var persistentStoreCoordinator: PersistentStoreCoordinator? {
        coordinatorSlot.withLock { $0 }
    }
    /// The coordinator, shared with the object graph.
    private nonisolated let coordinatorSlot: LockedValue<PersistentStoreCoordinator?>
    /// The context's name, for logs and notifications.
    public var name: String?
    /// Whatever you want to keep with the context.
    public var userInfo: [String: any Sendable] = [:]
    /// Where the context posts its notifications (``didChangeObjectsNotification`` and
    /// the others): `NotificationCenter.default` unless you give it another, or nil to
    /// post none there (a bulk import saves building the object sets; the streams of
    /// ``notifications(of:bufferingPolicy:)`` are unaffected).
    public var notificationCenter: NotificationCenter? = .default
    /// The streams of ``notifications(of:bufferingPolicy:)``.
    nonisolated let notifier = ContextNotifier()

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
        self.init(type, coordinatorSlot: LockedValue(coordinator), name: name)
    }

    /// A context of `type` with no coordinator yet: give it one with
    /// ``setPersistentStoreCoordinator(_:)`` before it fetches or saves (until then
    /// those throw ``StrataError/noCoordinator``). `name` is the context's name.
    public init(_ type: ConcurrencyType, name: String? = nil) {
        self.init(type, coordinatorSlot: LockedValue(nil), name: name)
    }

    private init(_ type: ConcurrencyType, coordinatorSlot: LockedValue<PersistentStoreCoordinator?>, name: String?) {
        concurrencyType = type
        self.coordinatorSlot = coordinatorSlot
        self.name = name
        contextExecutor = switch type {
        case .privateQueue: .privateQueue(named: name)
        case .mainQueue: .mainQueue
        }
        contextLock = ContextLock(executor: contextExecutor)
        graph = ObjectGraph(coordinator: coordinatorSlot)
    }

    /// Gives a context made with ``init(_:name:)`` its coordinator. Safe from any thread, as
    /// Core Data's setters on queue-based contexts are.
    ///
    /// - Throws: ``StrataError/invalidContextConfiguration(_:)`` when the context already
    ///   has another coordinator (a context keeps the one it first reads and saves
    ///   through). Giving it the same one again does nothing.
    public nonisolated func setPersistentStoreCoordinator(_ coordinator: PersistentStoreCoordinator) throws(StrataError) {
        try coordinatorSlot.withLock { (slot) throws(StrataError) in
            if let current = slot, current !== coordinator {
                throw .invalidContextConfiguration("it already has a persistent store coordinator")
            }
            slot = coordinator
        }
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
