import Dispatch
import Foundation
import Logging
import StrataLMDB
internal import StrataLocks

/// Another process committed to a store this coordinator has open (Core Data's
/// `NSPersistentStoreRemoteChange` notification): an element of
/// ``PersistentStoreCoordinator/remoteChanges``.
///
/// Several processes may open one LMDB store (a web server and a worker, say); each
/// coordinator watches its stores for commits made by the others. See
/// <doc:PersistentHistory>, "Changes from other processes".
public struct RemoteChange: Sendable, Hashable {
    /// The store another process wrote (``PersistentStore/identifier``).
    public let storeIdentifier: UUID
    /// Where that store is.
    public let storeURL: URL?
    /// The newest persistent-history transaction another process recorded: fetch the
    /// history after the last token you processed to see what changed. Nil when the store
    /// does not track history here (``PersistentStore/Options/tracksPersistentHistory``),
    /// or the other process recorded none.
    public let historyToken: PersistentHistoryToken?
    /// How many write transactions other processes committed since the last event of this
    /// store (nil when this process committed too many meanwhile to tell them apart).
    public let commits: Int?
}

/// The remote changes of a coordinator's stores, as an `AsyncSequence`
/// (``PersistentStoreCoordinator/remoteChanges``): each iterator gets every change raised
/// after it was made, in order, until it is dropped or its task is cancelled.
public struct RemoteChanges: AsyncSequence, Sendable {
    /// A remote change.
    public typealias Element = RemoteChange

    let monitor: RemoteChangeMonitor

    /// Starts watching (if nothing watched the stores yet) and returns an iterator of
    /// the changes from now on.
    public func makeAsyncIterator() -> AsyncStream<RemoteChange>.Iterator {
        let (stream, continuation) = AsyncStream<RemoteChange>.makeStream(bufferingPolicy: .unbounded)
        let id = monitor.subscribe(continuation)
        continuation.onTermination = { [monitor] _ in monitor.unsubscribe(id) }
        return stream.makeAsyncIterator()
    }
}

extension PersistentStoreCoordinator {
    /// The commits other processes make to this coordinator's stores, as they are seen
    /// (Core Data's `NSPersistentStoreRemoteChange`).
    ///
    /// Watching costs one look at each LMDB store's last transaction id every
    /// ``remoteChangePollingInterval`` while anything iterates this sequence or a root
    /// context merges automatically (``ManagedObjectContext/automaticallyMergesChangesFromParent``),
    /// and nothing otherwise. A server store (PostgreSQL) is watched through one extra
    /// connection that listens for the other instances' commits, which wake the look at
    /// once; a lost listener is replaced at the next look, which then reads the history
    /// missed meanwhile (<doc:RunningOnPostgreSQL>). A store that tracks persistent history is read after a
    /// remote commit only: its new transactions tell which objects changed, which
    /// automatically merging contexts then merge (refreshing what they hold, without
    /// refetching anything else), and the event carries the newest one's token.
    ///
    /// ```swift
    /// for await change in coordinator.remoteChanges {
    ///     let history = try coordinator.execute(.fetchHistory(after: lastToken))
    ///     …
    /// }
    /// ```
    public nonisolated var remoteChanges: RemoteChanges { RemoteChanges(monitor: remoteChangeMonitor) }

    /// How often the stores are looked at for other processes' commits while
    /// ``remoteChanges`` is iterated or a context merges automatically: 50 milliseconds by
    /// default, at least 1 millisecond. Settable from any thread.
    public nonisolated var remoteChangePollingInterval: Duration {
        get { remoteChangeMonitor.interval }
        set { remoteChangeMonitor.interval = max(newValue, .milliseconds(1)) }
    }
}

/// Watches a coordinator's stores for commits of other processes: a timer on a queue of
/// its own, running while someone listens (an iterator of ``RemoteChanges``, or a root
/// context that merges automatically), looking at each store's last transaction id.
///
/// A commit is another process's when this process did not make it: the environment
/// counts its own commits by transaction id (``Environment/ownCommits(after:through:)``),
/// exactly, so a look after this process's own saves raises nothing. A server store's
/// commits come as notifications carrying the writing instance (``ServerWatch``); its own
/// are ignored.
final class RemoteChangeMonitor: Sendable {
    /// What one store was last seen at.
    struct Watch {
        /// The last transaction id looked at (LMDB stores).
        var transaction: Int
        /// The last history sequence number read (nil: none yet).
        var historySequence: UInt64?
        /// A server store's listening connection; nil while the server cannot be reached.
        var server: ServerWatch?
    }

    /// A server store's connection listening for other instances' commits, and what it
    /// heard since the last look. (A look never waits for it: its notifications only
    /// count and schedule a look.)
    final class ServerWatch: Sendable {
        /// Commits of other instances heard since the last look, and whether the
        /// connection went (commits may have been missed since).
        private struct Heard {
            var commits = 0
            var lost = false
        }

        private let heard = LockedValue(Heard())
        /// The listening connection (set once, right after it opens).
        private let listener = LockedValue<(any SQLListener)?>(nil)

        /// Listens to `store` for `monitor`; nil when the server cannot be reached (the
        /// next look tries again).
        static func start(_ store: PersistentStore, sql: SQLStore, monitor: RemoteChangeMonitor, logger: Logger) -> ServerWatch? {
            let watch = ServerWatch()
            do {
                let listener = try sql.listen(
                    notified: { [weak monitor, weak watch] in
                        watch?.heard.withLock { $0.commits += 1 }
                        monitor?.lookSoon()
                    },
                    lost: { [weak monitor, weak watch] in
                        watch?.heard.withLock { $0.lost = true }
                        monitor?.lookSoon()
                    })
                watch.listener.withLock { $0 = listener }
                return watch
            } catch {
                logger.debug("listening for other instances' commits failed; the next look tries again", metadata: store.logMetadata.merging([
                    "strata.error": "\(error.code)", "strata.error.description": "\(error)",
                ]) { $1 })
                return nil
            }
        }

        /// The commits heard since the last call; nil when the connection went (the
        /// number is unknown: listen again, and read what was missed).
        func take() -> Int? {
            heard.withLock { heard in
                defer { heard.commits = 0 }
                return heard.lost ? nil : heard.commits
            }
        }

        /// Stops listening.
        func cancel() {
            let listener = listener.withLock { listener in
                defer { listener = nil }
                return listener
            }
            listener?.cancel()
        }
    }

    private struct State {
        weak var coordinator: PersistentStoreCoordinator?
        var subscribers: [UInt64: AsyncStream<RemoteChange>.Continuation] = [:]
        var nextSubscriber: UInt64 = 0
        var watches: [UUID: Watch] = [:]
        var timer: DispatchSourceTimer?
        var interval: Duration = .milliseconds(50)
        /// How many looks the timer made (for tests and the idle-cost measure).
        var looks = 0
        /// Whether the coordinator closed: nothing is watched from then on.
        var stopped = false
    }

    private let state = LockedValue(State())
    /// Where the looks run, one at a time.
    private let queue = DispatchQueue(label: "strata.coordinator.remote-changes")

    /// A monitor with no coordinator yet (``attach(_:)``).
    init() {}

    deinit {
        // A resumed timer lives until it is cancelled.
        state.withLock { $0.timer?.cancel() }
    }

    /// Watches `coordinator`'s stores (held weakly: the coordinator owns the monitor).
    func attach(_ coordinator: PersistentStoreCoordinator) {
        state.withLock { $0.coordinator = coordinator }
    }

    /// The time between looks.
    var interval: Duration {
        get { state.withLock { $0.interval } }
        set {
            state.withLock { state in
                state.interval = newValue
                state.timer?.schedule(deadline: .now() + Self.dispatchInterval(newValue), repeating: Self.dispatchInterval(newValue))
            }
        }
    }

    /// How many looks were made so far.
    var looks: Int { state.withLock { $0.looks } }

    /// Whether the timer runs.
    var isWatching: Bool { state.withLock { $0.timer != nil } }

    /// Adds a listener, and starts watching before returning when nothing watched yet,
    /// so that a commit made after this returns is seen.
    func subscribe(_ continuation: AsyncStream<RemoteChange>.Continuation) -> UInt64 {
        let id = state.withLock { state -> UInt64? in
            guard !state.stopped else { return nil }
            let id = state.nextSubscriber
            state.nextSubscriber += 1
            state.subscribers[id] = continuation
            return id
        }
        guard let id else {
            continuation.finish()   // closed: the sequence ends at once
            return UInt64.max
        }
        queue.sync { reconcile() }
        return id
    }

    /// Stops watching for good (the coordinator closed): the timer stops, and every
    /// iteration of ``PersistentStoreCoordinator/remoteChanges`` ends.
    func stop() {
        let subscribers = state.withLock { state in
            state.stopped = true
            defer { state.subscribers = [:] }
            return Array(state.subscribers.values)
        }
        for subscriber in subscribers { subscriber.finish() }
        queue.sync { reconcile() }
    }

    func unsubscribe(_ id: UInt64) {
        _ = state.withLock { $0.subscribers.removeValue(forKey: id) }
        queue.async { [weak self] in self?.reconcile() }
    }

    /// Starts or stops watching as the coordinator's automatically merging contexts come
    /// and go: a start before returning (so that a commit another process makes after a
    /// context turned merging on is merged), a stop soon after. (Safe to wait for: a look
    /// never waits for a context, it only schedules their merges.)
    func update() {
        let (coordinator, watching) = state.withLock { ($0.coordinator, $0.timer != nil) }
        if !watching, let coordinator, !coordinator.mergingContexts.alive.isEmpty || coordinator.liveResults.hasObservers {
            queue.sync { reconcile() }
        } else {
            queue.async { [weak self] in self?.reconcile() }
        }
    }

    /// On the monitor's queue: starts the timer when someone listens (an iterator, or a
    /// root context that merges automatically) and it does not run, recording where each
    /// store stands; stops it when nobody does.
    private func reconcile() {
        let (coordinator, hasSubscribers, stopped) = state.withLock { ($0.coordinator, !$0.subscribers.isEmpty, $0.stopped) }
        let wanted = !stopped
            && (coordinator.map { hasSubscribers || !$0.mergingContexts.alive.isEmpty || $0.liveResults.hasObservers } ?? false)
        var stopping: [ServerWatch] = []
        let started = state.withLock { state -> Bool in
            if wanted, state.timer == nil {
                let timer = DispatchSource.makeTimerSource(queue: queue)
                let interval = Self.dispatchInterval(state.interval)
                timer.schedule(deadline: .now() + interval, repeating: interval, leeway: .milliseconds(1))
                timer.setEventHandler { [weak self] in self?.look() }
                state.timer = timer
                timer.resume()
                return true
            }
            if !wanted, let timer = state.timer {
                timer.cancel()
                state.timer = nil
                stopping = state.watches.values.compactMap(\.server)
                state.watches = [:]   // a later start begins from the state then
            }
            return false
        }
        for server in stopping { server.cancel() }
        if started { look(startingOnly: true) }
    }

    /// Schedules a look now (a server store heard a commit, or lost its listener).
    func lookSoon() {
        queue.async { [weak self] in self?.look() }
    }

    private static func dispatchInterval(_ duration: Duration) -> DispatchTimeInterval {
        let (seconds, attoseconds) = duration.components
        return .nanoseconds(Int(min(seconds, 3600)) * 1_000_000_000 + Int(attoseconds / 1_000_000_000))
    }

    /// One look at every store, on the monitor's queue. With `startingOnly`, only stores
    /// not watched yet are looked at (their current state recorded).
    private func look(startingOnly: Bool = false) {
        guard let coordinator = state.withLock({ state -> PersistentStoreCoordinator? in
            if !startingOnly { state.looks += 1 }
            return state.timer == nil ? nil : state.coordinator
        }) else { return }
        if !startingOnly, state.withLock({ $0.subscribers.isEmpty }), coordinator.mergingContexts.alive.isEmpty,
           !coordinator.liveResults.hasObservers {
            reconcile()   // the last listener went
            return
        }
        let stores = coordinator.persistentStores
        var watches = state.withLock { $0.watches }
        for (id, watch) in watches where !stores.contains(where: { $0.identifier == id }) { watch.server?.cancel() }
        watches = watches.filter { id, _ in stores.contains { $0.identifier == id } }
        var changes: [RemoteChange] = []
        var merged = BatchChanges()
        for store in stores {
            // The commits of others since the last look (nil: some, but how many is unknown).
            let remote: Int?
            var watch: Watch
            switch store.backend {
            case .lmdb(let file):
                let environment = file.environment
                let last = environment.info.lastTransactionID
                guard let seen = watches[store.identifier] else {
                    // First look: from now on.
                    _ = environment.ownCommits(after: last, through: last)
                    watches[store.identifier] = Watch(transaction: last, historySequence: try? HistoryLog.lastSequence(of: file))
                    continue
                }
                guard !startingOnly, last > seen.transaction else { continue }
                watch = seen
                let own = environment.ownCommits(after: watch.transaction, through: last)
                remote = own.map { last - watch.transaction - $0 }
                watch.transaction = last
            case .sql(let sql):
                guard let seen = watches[store.identifier] else {
                    // First look: listen from now on (before the history is read: nothing
                    // committed in between is missed).
                    let server = ServerWatch.start(store, sql: sql, monitor: self, logger: coordinator.logger)
                    let sequence = store.options.tracksPersistentHistory ? try? sql.lastHistorySequence() : nil
                    watches[store.identifier] = Watch(transaction: 0, historySequence: sequence, server: server)
                    continue
                }
                guard !startingOnly else { continue }
                watch = seen
                if let server = watch.server, let heard = server.take() {
                    guard heard > 0 else { continue }
                    remote = heard
                } else {
                    // Never listening, or the connection went: listen again, and look at
                    // the history, since commits may have gone unheard.
                    watch.server?.cancel()
                    watch.server = ServerWatch.start(store, sql: sql, monitor: self, logger: coordinator.logger)
                    guard watch.server != nil else {
                        watches[store.identifier] = watch
                        continue
                    }
                    remote = nil
                }
            }
            defer { watches[store.identifier] = watch }
            if remote == 0 { continue }
            var token: PersistentHistoryToken?
            if store.options.tracksPersistentHistory {
                let found: (transactions: [PersistentHistoryTransaction], sequence: UInt64?)
                do {
                    found = try coordinator.remoteTransactions(of: store, after: watch.historySequence)
                } catch {
                    // Nobody to throw to: the next look tries again from the same sequence.
                    found = ([], watch.historySequence)
                    coordinator.logger.info("reading other processes' history failed", metadata: store.logMetadata.merging([
                        "strata.error": "\((error as? StrataError)?.code.description ?? "\(type(of: error))")",
                        "strata.error.description": "\(error)",
                    ]) { $1 })
                }
                watch.historySequence = found.sequence
                if found.transactions.isEmpty && remote == nil { continue }   // all this process's own after all
                token = found.transactions.last?.token
                for transaction in found.transactions {
                    for change in transaction.changes {
                        switch change.changeType {
                        case .insert: merged.inserted.append(change.changedObjectID)
                        case .update: merged.updated.append(change.changedObjectID)
                        case .delete: merged.deleted.append(change.changedObjectID)
                        }
                    }
                }
            }
            // Cached rows of this store may be older than the other process's commit.
            coordinator.rowCache.removeRows(ofStore: store.identifier)
            changes.append(RemoteChange(
                storeIdentifier: store.identifier, storeURL: store.url, historyToken: token, commits: remote))
        }
        let subscribers = state.withLock { state in
            state.watches = watches
            return Array(state.subscribers.values)
        }
        coordinator.mergeIntoContexts(merged)
        // A store without history names no object: its live results look again.
        if changes.contains(where: { $0.historyToken == nil }) {
            var everything = LiveChange()
            everything.everything = true
            coordinator.liveResults.publish(everything)
        }
        for change in changes {
            if let store = stores.first(where: { $0.identifier == change.storeIdentifier }) {
                coordinator.logger.debug("other processes committed", metadata: store.logMetadata.merging([
                    "strata.commits": "\(change.commits.map(String.init) ?? "unknown")",
                    "strata.history.token": "\(change.historyToken.map { "\($0.sequence)" } ?? "none")",
                ]) { $1 })
            }
            for subscriber in subscribers { subscriber.yield(change) }
        }
    }
}

extension PersistentStoreCoordinator {
    /// The history transactions of `store` after sequence number `after` that another
    /// process recorded, and the last sequence number read.
    nonisolated func remoteTransactions(
        of store: PersistentStore, after: UInt64?
    ) throws -> (transactions: [PersistentHistoryTransaction], sequence: UInt64?) {
        if let sql = store.sql {
            // Another instance is another store opening (this process may hold several).
            let found = try sql.historyRecords(after: after, excludingOwn: true)
            return (Self.transactions(found.records, of: store, matching: .fetchHistory(after: nil)), found.last)
        }
        let file = try store.requireLMDB("other processes' history")
        let records = try file.withReadTransaction(in: nil) { txn in
            try HistoryLog.records(after: after, limit: nil, in: txn, history: file.historyDatabase)
        }
        let pid = getpid()
        let remote = records.filter { $0.record.processID != pid }
        return (Self.transactions(remote, of: store, matching: .fetchHistory(after: nil)), records.last?.sequence ?? after)
    }
}
