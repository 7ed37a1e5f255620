import Foundation
internal import StrataLocks

// Notifications: Core Data's, posted on a NotificationCenter, and the same events as
// Sendable values on AsyncStreams (Linux Foundation has no `notifications(named:)`).
extension ManagedObjectContext {
    /// The context's notifications as they happen, from now until the stream is dropped
    /// or its task cancelled.
    ///
    /// Each event is delivered to every stream subscribed when it is posted, in the
    /// order the context posts them. A stream made before a block runs sees that
    /// block's events:
    ///
    /// ```swift
    /// let saves = context.notifications(of: [.didSave])
    /// try await context.perform { context in … try context.save() }
    /// for await saved in saves { … }
    /// ```
    ///
    /// - Parameters:
    ///   - kinds: the notifications wanted; all by default.
    ///   - bufferingPolicy: how many undelivered events the stream keeps for a slow
    ///     reader; unbounded by default.
    public nonisolated func notifications(
        of kinds: Set<ContextNotification.Kind> = Set(ContextNotification.Kind.allCases),
        bufferingPolicy: AsyncStream<ContextNotification>.Continuation.BufferingPolicy = .unbounded
    ) -> AsyncStream<ContextNotification> {
        notifier.subscribe(to: kinds, bufferingPolicy: bufferingPolicy)
    }

    /// Posts an ObjectsDidChange notification for what changed since the last one, if
    /// anything did.
    /// Then announces query generations that expired in the meantime.
    func postObjectsDidChange() {
        let sets = graph.takeChangeEvent()
        if !sets.isEmpty { post(.objectsDidChange, sets) }
        for expiry in graph.takeExpiredGenerations() {
            var ids = ChangedObjectIDs()
            ids.queryGeneration = expiry.current
            ids.expiredQueryGeneration = expiry.expired
            post(.didExpireQueryGeneration, ObjectChangeSets(), mergedIDs: ids)
        }
    }

    /// Posts `kind` on the notification center and to the streams that want it. Nothing
    /// is built for a receiver that is not there.
    /// `sets` holds the objects; a merge (``ContextNotification/Kind/didMergeChanges``)
    /// has only IDs, in `mergedIDs`.
    func post(_ kind: ContextNotification.Kind, _ sets: ObjectChangeSets, mergedIDs: ChangedObjectIDs? = nil) {
        let center = notificationCenter
        let streamed = notifier.wants(kind)
        guard center != nil || streamed else { return }
        let ids = mergedIDs ?? ChangedObjectIDs(sets)
        if let center {
            switch kind {
            case .objectsDidChange:
                center.post(name: Self.didChangeObjectsNotification, object: self, userInfo: Self.userInfo(ids, objects: sets))
            case .willSave:
                center.post(name: Self.willSaveObjectsNotification, object: self, userInfo: nil)
            case .didSave:
                center.post(name: Self.didSaveObjectsNotification, object: self, userInfo: Self.userInfo(ids, objects: sets))
                center.post(name: Self.didSaveObjectIDsNotification, object: self, userInfo: Self.userInfo(ids))
            case .didMergeChanges:
                center.post(name: Self.didMergeChangesObjectIDsNotification, object: self, userInfo: Self.userInfo(ids))
            case .didExpireQueryGeneration:
                center.post(name: Self.didExpireQueryGenerationNotification, object: self, userInfo: Self.userInfo(ids))
            }
        }
        if streamed {
            notifier.yield(ContextNotification(kind: kind, context: self, contextName: name, ids: ids))
        }
    }

    /// The `userInfo` of a notification: each non-empty set of IDs, and with `objects`
    /// the objects themselves.
    private static func userInfo(_ ids: ChangedObjectIDs, objects: ObjectChangeSets? = nil) -> [AnyHashable: Any] {
        var info: [AnyHashable: Any] = [:]
        func put(_ set: Set<ManagedObjectID>, _ idKey: NotificationKey, _ list: [ManagedObject]?, _ key: NotificationKey) {
            guard !set.isEmpty else { return }
            info[idKey.rawValue] = set
            if let list { info[key.rawValue] = Set(list) }
        }
        put(ids.inserted, .insertedObjectIDs, objects?.inserted, .insertedObjects)
        put(ids.updated, .updatedObjectIDs, objects?.updated, .updatedObjects)
        put(ids.deleted, .deletedObjectIDs, objects?.deleted, .deletedObjects)
        put(ids.refreshed, .refreshedObjectIDs, objects?.refreshed, .refreshedObjects)
        put(ids.invalidated, .invalidatedObjectIDs, objects?.invalidated, .invalidatedObjects)
        if ids.invalidatedAll { info[NotificationKey.invalidatedAllObjects.rawValue] = ids.invalidated }
        if let token = ids.queryGeneration { info[NotificationKey.queryGeneration.rawValue] = token }
        if let token = ids.expiredQueryGeneration { info[NotificationKey.expiredQueryGeneration.rawValue] = token }
        return info
    }
}

/// The streams of one context's notifications.
final class ContextNotifier: Sendable {
    private struct Subscriber: Sendable {
        let kinds: Set<ContextNotification.Kind>
        let receiver: Receiver
    }

    /// Where a subscriber's notifications go: a stream, or a handler called on the
    /// posting context's thread (live results: it only marks its observer stale).
    private enum Receiver: Sendable {
        case stream(AsyncStream<ContextNotification>.Continuation)
        case handler(@Sendable (ContextNotification) -> Void)

        func deliver(_ notification: ContextNotification) {
            switch self {
            case .stream(let continuation): continuation.yield(notification)
            case .handler(let handler): handler(notification)
            }
        }

        func finish() {
            if case .stream(let continuation) = self { continuation.finish() }
        }
    }

    private struct State: Sendable {
        var subscribers: [UInt64: Subscriber] = [:]
        var nextToken: UInt64 = 0
    }

    private let state = LockedValue(State())

    /// A new stream of `kinds`, removed when it terminates.
    func subscribe(
        to kinds: Set<ContextNotification.Kind>,
        bufferingPolicy: AsyncStream<ContextNotification>.Continuation.BufferingPolicy
    ) -> AsyncStream<ContextNotification> {
        let (stream, continuation) = AsyncStream.makeStream(of: ContextNotification.self, bufferingPolicy: bufferingPolicy)
        let token = state.withLock { state in
            state.nextToken += 1
            state.subscribers[state.nextToken] = Subscriber(kinds: kinds, receiver: .stream(continuation))
            return state.nextToken
        }
        continuation.onTermination = { [weak self] _ in
            self?.state.withLock { state in state.subscribers[token] = nil }
        }
        return stream
    }

    /// Calls `handler` with every notification of `kinds` until ``unsubscribe(_:)`` with
    /// the token returned.
    func subscribe(to kinds: Set<ContextNotification.Kind>, handler: @escaping @Sendable (ContextNotification) -> Void) -> UInt64 {
        state.withLock { state in
            state.nextToken += 1
            state.subscribers[state.nextToken] = Subscriber(kinds: kinds, receiver: .handler(handler))
            return state.nextToken
        }
    }

    /// Removes the handler subscribed with `token`.
    func unsubscribe(_ token: UInt64) {
        _ = state.withLock { state in state.subscribers.removeValue(forKey: token) }
    }

    /// Whether a stream wants `kind`.
    func wants(_ kind: ContextNotification.Kind) -> Bool {
        state.withLock { state in state.subscribers.values.contains { $0.kinds.contains(kind) } }
    }

    /// Delivers `notification` to every stream that wants it.
    func yield(_ notification: ContextNotification) {
        let receivers = state.withLock { state in
            state.subscribers.values.filter { $0.kinds.contains(notification.kind) }.map(\.receiver)
        }
        for receiver in receivers { receiver.deliver(notification) }
    }

    /// Ends every stream (the context is going away).
    func finish() {
        let receivers = state.withLock { state in
            defer { state.subscribers = [:] }
            return state.subscribers.values.map(\.receiver)
        }
        for receiver in receivers { receiver.finish() }
    }

    deinit { finish() }
}
