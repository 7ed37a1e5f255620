import Foundation
internal import StrataLocks

/// Admits writes (saves, batch requests, permanent IDs, history deletions) and store
/// openings until the coordinator closes, and counts those in flight so that a close can
/// let them finish (``PersistentStoreCoordinator/close(timeout:)``).
final class WriteGate: Sendable {
    private struct State {
        var closed = false
        var inFlight = 0
    }

    private let state = LockedValue(State())

    /// Whether the coordinator closed (or is closing).
    var isClosed: Bool { state.withLock { $0.closed } }

    /// The writes in flight now.
    var inFlight: Int { state.withLock { $0.inFlight } }

    /// Runs `body` as a write in flight.
    ///
    /// - Throws: ``StrataError/coordinatorClosed`` once the coordinator closed, or what
    ///   `body` throws.
    func admit<Result>(_ body: () throws -> Result) throws -> Result {
        try enter()
        defer { leave() }
        return try body()
    }

    /// Counts a write in flight, which must ``leave()``.
    ///
    /// - Throws: ``StrataError/coordinatorClosed`` once the coordinator closed.
    func enter() throws(StrataError) {
        try state.withLock { (state: inout State) throws(StrataError) in
            guard !state.closed else { throw .coordinatorClosed }
            state.inFlight += 1
        }
    }

    /// Ends a write counted by ``enter()``.
    func leave() {
        state.withLock { $0.inFlight -= 1 }
    }

    /// Closes the gate: no write is admitted from now on. Returns false when it was
    /// closed already.
    func close() -> Bool {
        state.withLock { state in
            defer { state.closed = true }
            return !state.closed
        }
    }

    /// Waits until no admitted write is in flight, `deadline` passes or the task is
    /// cancelled; returns whether none is in flight. Polls every millisecond: a close
    /// waits for saves of milliseconds, and nothing is kept running for it afterwards.
    func drain(until deadline: ContinuousClock.Instant) async -> Bool {
        while inFlight > 0 {
            guard ContinuousClock.now < deadline else { return false }
            do {
                try await Task.sleep(for: .milliseconds(1))
            } catch {
                return inFlight == 0   // cancelled: the environments' close still waits for their transactions
            }
        }
        return true
    }
}
