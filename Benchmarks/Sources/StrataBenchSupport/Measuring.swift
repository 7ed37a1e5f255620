import Dispatch
import Foundation
import Synchronization

/// A failed check in a scenario: a wrong count or checksum, an error of a baseline's C
/// API. The runner stops on it: a benchmark that measured nothing must not print a time.
public struct BenchFailure: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Throws unless `actual == expected`.
public func expect<T: Equatable>(_ actual: T, _ expected: T, _ what: @autoclosure () -> String) throws {
    if actual != expected { throw BenchFailure("\(what()): got \(actual), expected \(expected)") }
}

/// The monotonic clock in nanoseconds.
@inline(__always)
public func now() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
}

/// CPU seconds the calling thread has used.
public func threadCPUSeconds() -> Double {
    var time = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
    return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}

/// Seconds since `start` (a ``now()`` reading).
@inline(__always)
public func seconds(since start: UInt64) -> Double { Double(now() &- start) / 1e9 }

/// Runs `body` and returns how long it took, in seconds.
@inline(__always)
public func timed(_ body: () throws -> Void) rethrows -> Double {
    let start = now()
    try body()
    return seconds(since: start)
}

/// The median of `values` (the mean of the middle two for an even count).
public func median(_ values: [Double]) -> Double {
    precondition(!values.isEmpty, "median of nothing")
    let sorted = values.sorted()
    let middle = sorted.count / 2
    return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

/// The `p`-th percentile (0...1, nearest rank) of `sorted`, which must be sorted.
public func percentile(_ sorted: [UInt64], _ p: Double) -> UInt64 {
    guard !sorted.isEmpty else { return 0 }
    let rank = Int((p * Double(sorted.count)).rounded(.up)) - 1
    return sorted[min(max(rank, 0), sorted.count - 1)]
}

/// The peak resident set size of this process so far, in KiB (`ru_maxrss`).
///
/// On Linux it includes the peak of the process that spawned this one when that process
/// used `vfork` (as `posix_spawn`, and so Foundation's `Process`, do): the kernel carries
/// the parent's high-water mark over at `execve`. A child measured with it must be started
/// by a `fork` (see the runner's `runChild`).
public func peakResidentKiB() -> Int {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    return usage.ru_maxrss
}

/// This process's resident-set high-water mark since its `execve`, in KiB (`VmHWM` in
/// `/proc/self/status`); nil when it cannot be read. A cross-check of ``peakResidentKiB()``.
public func highWaterMarkKiB() -> Int? {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
    for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
        return Int(line.dropFirst(6).trimmingCharacters(in: .whitespaces).split(separator: " ").first ?? "")
    }
    return nil
}

/// Runs `body` on the cooperative pool and waits for it on the calling thread: the bridge
/// from the runner's synchronous code to Strata's few async-only calls (adding a store).
/// Never call it from the cooperative pool itself.
public func waitFor<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
    let box = ResultBox<T>()
    let done = DispatchSemaphore(value: 0)
    Task {
        do { box.result = .success(try await body()) } catch { box.result = .failure(error) }
        done.signal()
    }
    done.wait()
    return try box.result!.get()
}

/// A result handed from a task to a waiting thread.
// @unchecked Sendable because the semaphore of `waitFor` orders the write before the read.
private final class ResultBox<T>: @unchecked Sendable {
    var result: Result<T, any Error>?
}

/// Runs `count` bodies on their own OS threads (not tasks: LMDB writers, GRDB writers and
/// `performAndWait` block their thread), started together, and waits for all of them.
/// Returns each thread's result in order, or rethrows the first error.
public func onThreads<T: Sendable>(_ count: Int, _ body: @escaping @Sendable (_ index: Int) throws -> T) throws -> [T] {
    let results = ThreadResults<T>(count: count)
    let start = DispatchSemaphore(value: 0)
    let done = DispatchSemaphore(value: 0)
    for index in 0..<count {
        let thread = Thread {
            start.wait()
            let result = Result { try body(index) }
            results.set(index, result)
            done.signal()
        }
        thread.stackSize = 8 << 20
        thread.start()
    }
    for _ in 0..<count { start.signal() }
    for _ in 0..<count { done.wait() }
    return try results.values()
}

/// Per-thread results of ``onThreads(_:_:)``.
// @unchecked Sendable because every slot is written by one thread under the lock and read
// after all threads signalled.
private final class ThreadResults<T>: @unchecked Sendable {
    private var slots: [Result<T, any Error>?]
    private let lock = NSLock()

    init(count: Int) { slots = Array(repeating: nil, count: count) }

    func set(_ index: Int, _ result: Result<T, any Error>) {
        lock.withLock { slots[index] = result }
    }

    func values() throws -> [T] {
        try lock.withLock { try slots.map { try $0!.get() } }
    }
}

/// A flag threads poll to stop (a writer running while readers are measured).
public final class StopFlag: Sendable {
    private let flag = Atomic(false)
    public init() {}
    public var isSet: Bool { flag.load(ordering: .relaxed) }
    public func set() { flag.store(true, ordering: .relaxed) }
}
