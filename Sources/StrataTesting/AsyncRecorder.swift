import Foundation
internal import StrataLocks

/// Records what an `AsyncSequence` yields, iterating it in a task of its own, so that a
/// test can wait for the next elements with a deadline: live results
/// (`context.results(for:)`), a context's notifications, the cross-process change feed.
///
/// ```swift
/// let recorder = AsyncRecorder(context.results(for: request))
/// defer { recorder.cancel() }
/// try await recorder.wait(forCount: 1)          // the first snapshot
/// try await save(note)
/// let latest = try await recorder.wait(forCount: 2).last
/// ```
///
/// ``cancel()`` cancels the iterating task (and so ends the iteration: a live results
/// observer goes with it); the recorder cancels it when it goes, too.
public final class AsyncRecorder<Element: Sendable>: Sendable {
    /// A wait that ran past its deadline.
    public struct Timeout: Error, CustomStringConvertible {
        /// What was waited for and what had arrived.
        public let description: String
    }

    private struct State {
        var elements: [Element] = []
        var finished = false
        var failure: (any Error)?
    }

    private let state = LockedValue(State())
    private let task: LockedValue<Task<Void, Never>?> = LockedValue(nil)

    /// Starts iterating `sequence` at once.
    public init<Sequence: AsyncSequence & Sendable>(_ sequence: Sequence) where Sequence.Element == Element {
        let state = self.state
        let iteration = Task {
            do {
                for try await element in sequence {
                    state.withLock { $0.elements.append(element) }
                }
            } catch {
                state.withLock { $0.failure = error }
            }
            state.withLock { $0.finished = true }
        }
        task.withLock { $0 = iteration }
    }

    deinit {
        task.withLock { $0?.cancel() }
    }

    /// Everything recorded so far, in order.
    public var elements: [Element] { state.withLock { $0.elements } }

    /// Whether the sequence ended (or threw, or the recorder was cancelled and it ended).
    public var isFinished: Bool { state.withLock { $0.finished } }

    /// The error the sequence threw, if it did.
    public var failure: (any Error)? { state.withLock { $0.failure } }

    /// Waits until at least `count` elements were recorded, and returns them all.
    ///
    /// The default deadline is generous (60 s): a wait that succeeds returns as soon as
    /// the elements arrive, and a test suite on a loaded machine (every test of `swift test`
    /// starts at once on a cooperative pool of a thread per core) may leave an iterating task
    /// without a thread for seconds.
    ///
    /// - Throws: ``Timeout`` after `timeout`; the sequence's error if it threw first.
    @discardableResult
    public func wait(forCount count: Int, timeout: Duration = .seconds(60)) async throws -> [Element] {
        try await wait(timeout: timeout, "\(count) element(s)") { $0.count >= count }
    }

    /// Waits until `condition` holds for the elements recorded, and returns them.
    ///
    /// - Throws: ``Timeout`` after `timeout`; the sequence's error if it threw first.
    @discardableResult
    public func wait(
        timeout: Duration = .seconds(60), _ what: String = "a condition", until condition: ([Element]) -> Bool
    ) async throws -> [Element] {
        let deadline = ContinuousClock.now + timeout
        while true {
            let (elements, finished, failure) = state.withLock { ($0.elements, $0.finished, $0.failure) }
            if condition(elements) { return elements }
            if let failure { throw failure }
            if finished || ContinuousClock.now >= deadline {
                throw Timeout(description: "waited \(timeout) for \(what); \(elements.count) recorded\(finished ? ", and the sequence ended" : "")")
            }
            try await Task.sleep(for: .milliseconds(2))
        }
    }

    /// Cancels the iterating task and waits for it to end.
    public func cancel() async {
        let iteration = task.withLock { $0 }
        iteration?.cancel()
        await iteration?.value
    }
}

/// Waits until `condition` is true, checking every few milliseconds; returns whether it
/// became true before `timeout` (60 s by default: see ``AsyncRecorder/wait(forCount:timeout:)``).
public func eventually(timeout: Duration = .seconds(60), _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while true {
        if try await condition() { return true }
        guard ContinuousClock.now < deadline else { return false }
        try? await Task.sleep(for: .milliseconds(2))
    }
}
