import Dispatch
internal import StrataLocks

/// A job parked on the main queue while a thread off the main queue holds a main-queue
/// context's ``ContextLock``: it keeps every other main-queue job out, and runs on the
/// main queue the blocks its holder sends it.
///
/// Why a relay: a main-queue context's actor executor is `MainActor`'s, whose isolation
/// check is libdispatch's own "is this thread draining the main queue" test. A thread
/// that merely parked the main queue does not pass it, so `assumeIsolated` cannot work
/// on that thread; blocks for the main queue are run by the parked job instead, on the
/// main queue, while the holder waits (lending it its holdings).
final class MainQueueRelay: Sendable {
    /// A block sent to the relay, with the holdings of the thread that waits for it.
    ///
    /// The thread that sends the block blocks until the relay has run it (see
    /// `run(lending:_:)`), so the two threads never touch what it captures at once.
    // @unchecked Sendable because the block is handed over, never shared (see above).
    private struct Request: @unchecked Sendable {
        let block: () -> Void
        let holdings: [ExecutorHolding]
    }

    /// Signalled once the parked job runs on the main queue.
    private let started = DispatchSemaphore(value: 0)
    /// Signalled for each request, and for "finish".
    private let wake = DispatchSemaphore(value: 0)
    /// Signalled after each request ran.
    private let done = DispatchSemaphore(value: 0)
    /// The next request; nil with `wake` signalled means "finish".
    private let request = LockedValue<Request?>(nil)

    /// A relay not parked yet; ``park()`` makes and parks one.
    private init() {}

    /// Parks a relay on the main queue and waits until it is running there: from then on
    /// nothing else runs on the main queue until ``finish()``.
    ///
    /// Blocks the calling thread; must not be called on the main queue (it would wait
    /// for itself).
    static func park() -> MainQueueRelay {
        let relay = MainQueueRelay()
        DispatchQueue.main.async { relay.serve() }
        relay.started.wait()
        return relay
    }

    /// Runs `block` on the main queue, through the parked job, and waits for it. The
    /// caller's `holdings` are lent to the main queue's thread for the duration.
    func run<T, E: Error>(lending holdings: [ExecutorHolding], _ block: () throws(E) -> T) throws(E) -> T {
        var outcome: Result<T, E>?
        withoutActuallyEscaping({ outcome = Result { () throws(E) -> T in try block() } }) { escapable in
            request.withLock { $0 = Request(block: escapable, holdings: holdings) }
            wake.signal()
            done.wait()
        }
        // `done` was signalled after the relay wrote `outcome`.
        return try outcome!.get()
    }

    /// Lets the main queue go: the parked job returns.
    func finish() {
        request.withLock { $0 = nil }
        wake.signal()
    }

    /// The parked job: serves requests until ``finish()``.
    private func serve() {
        started.signal()
        while true {
            wake.wait()
            guard serveRequest() else { return }
            done.signal()
        }
    }

    /// Runs the pending request; false when it was "finish". A function of its own so
    /// that every reference to the block is gone when it returns, before the sender may
    /// go on: the sender checks that the block did not escape its
    /// `withoutActuallyEscaping` scope.
    private func serveRequest() -> Bool {
        guard let next = request.withLock({ $0.take() }) else { return false }
        ExecutorOwnership.lend(next.holdings, next.block)
        return true
    }
}
