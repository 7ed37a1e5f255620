import Dispatch
internal import StrataLocks
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
// @unchecked Sendable because `phase` and `request` are read and written with `lock`
// held only.
package final class MainQueueRelay: @unchecked Sendable {
    /// A block sent to the relay, with the holdings of the thread that waits for it.
    ///
    /// The thread that sends the block blocks until the relay has run it (see
    /// `run(lending:_:)`), so the two threads never touch what it captures at once.
    private struct Request {
        let block: () -> Void
        let holdings: [ExecutorHolding]
    }

    /// Where the relay stands.
    private enum Phase {
        /// Sent to the main queue, not running yet.
        case parking
        /// Running on the main queue, with no request.
        case idle
        /// A request waits to be run (``request``), or runs.
        case requested
        /// The last request ran: its sender may go on.
        case served
        /// Told to let the main queue go.
        case finishing
    }

    /// Guards `phase` and `request`; the relay and its holder sleep on its condition
    /// (only one of them waits at a time).
    private let lock = ConditionLock()
    /// Where the relay stands. Guarded by `lock`.
    private var phase = Phase.parking
    /// The request to run. Guarded by `lock`.
    private var request: Request?

    /// A relay not parked yet; ``park()`` makes and parks one.
    private init() {}

    /// A relay that is never parked, for tests of the wait graph, which only pass relays
    /// around: running a block through it would wait forever.
    package static func unparked() -> MainQueueRelay {
        MainQueueRelay()
    }

    /// Parks a relay on the main queue and waits until it is running there: from then on
    /// nothing else runs on the main queue until ``finish()``.
    ///
    /// Blocks the calling thread; must not be called on the main queue (it would wait
    /// for itself).
    package static func park() -> MainQueueRelay {
        let relay = MainQueueRelay()
        DispatchQueue.main.async { relay.serve() }
        relay.lock.withLock { while relay.phase == .parking { relay.lock.wait() } }
        return relay
    }

    /// Runs `block` on the main queue, through the parked job, and waits for it. The
    /// caller's `holdings` are lent to the main queue's thread for the duration.
    package func run<T, E: Error>(lending holdings: [ExecutorHolding], _ block: () throws(E) -> T) throws(E) -> T {
        var outcome: Result<T, E>?
        withoutActuallyEscaping({ outcome = Result { () throws(E) -> T in try block() } }) { escapable in
            lock.withLock {
                request = Request(block: escapable, holdings: holdings)
                phase = .requested
                lock.signal()
                while phase != .served { lock.wait() }
                phase = .idle
            }
        }
        // The relay wrote `outcome` before it marked the request served.
        return try outcome!.get()
    }

    /// Lets the main queue go: the parked job returns.
    package func finish() {
        lock.withLock {
            phase = .finishing
            lock.signal()
        }
    }

    /// The parked job: serves requests until ``finish()``.
    private func serve() {
        lock.withLock {
            phase = .idle
            lock.signal()
        }
        while serveRequest() {
            lock.withLock {
                phase = .served
                lock.signal()
            }
        }
    }

    /// Waits for the next request and runs it; false when told to finish. A function of
    /// its own so that every reference to the block is gone when it returns, before the
    /// sender may go on: the sender checks that the block did not escape its
    /// `withoutActuallyEscaping` scope.
    private func serveRequest() -> Bool {
        let next: Request? = lock.withLock {
            while phase != .requested && phase != .finishing { lock.wait() }
            guard phase == .requested else { return nil }
            defer { request = nil }
            return request
        }
        guard let next else { return false }
        ExecutorOwnership.lend(next.holdings, next.block)
        return true
    }
}
