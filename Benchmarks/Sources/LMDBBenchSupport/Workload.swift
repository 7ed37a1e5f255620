import Foundation
import StrataTesting

/// The four scenarios, measured identically through StrataLMDB and through LMDB's C API.
public enum Scenario: String, CaseIterable, Sendable {
    /// 1,000,000 puts in random key order, no flags, in one write transaction.
    case putRandom = "put 1M random order"
    /// 1,000,000 puts in increasing key order with the append flag, in one write transaction.
    case putAppend = "put 1M append"
    /// 1,000,000 gets of random existing keys in one read transaction.
    case getRandom = "get 1M random"
    /// A cursor walk over all 1,000,000 entries, first to last.
    case cursorScan = "cursor scan 1M"
    /// 10,000 write transactions of one put each, every commit synced.
    case syncCommits = "10K sync commits"

    /// The short name the benchmark suite uses.
    public var benchmarkName: String { rawValue }

    /// Whether every run needs an empty store (writes) rather than the shared populated one.
    public var writesToEmptyStore: Bool {
        switch self {
        case .putRandom, .putAppend, .syncCommits: true
        case .getRandom, .cursorScan: false
        }
    }
}

/// The two ways a scenario is run.
public enum Binding: String, CaseIterable, Sendable {
    case strata = "StrataLMDB"
    case raw = "raw C"
}

/// The keys and the value every scenario uses: built once, shared by both bindings so
/// they do exactly the same work.
///
/// Keys are 8-byte big-endian `UInt64`s (so LMDB's default byte order is numeric order);
/// each buffer element already holds the big-endian bytes.
public final class Workload: @unchecked Sendable {
    // @unchecked Sendable because every buffer is written once in init and only read after.

    /// The number of entries of the put, get and scan scenarios.
    public let entryCount: Int
    /// The number of write transactions of the sync-commit scenario.
    public let syncCommitCount: Int
    /// Keys 0..<entryCount in increasing order (big-endian bytes).
    public let ordered: UnsafeBufferPointer<UInt64>
    /// The same keys in a random order.
    public let shuffled: UnsafeBufferPointer<UInt64>
    /// `entryCount` lookups: the keys again, in another random order.
    public let lookups: UnsafeBufferPointer<UInt64>
    /// The 64-byte value stored under every key.
    public let value: UnsafeRawBufferPointer

    public static let valueSize = 64
    public static let keySize = MemoryLayout<UInt64>.size

    public init(entryCount: Int = 1_000_000, syncCommitCount: Int = 10_000, seed: UInt64 = 0x5EED_57A7A) {
        precondition(syncCommitCount <= entryCount)
        self.entryCount = entryCount
        self.syncCommitCount = syncCommitCount
        var generator = SeededRandomNumberGenerator(seed: seed)
        let ordered = (0..<UInt64(entryCount)).map { $0.bigEndian }
        var shuffled = ordered
        shuffled.shuffle(using: &generator)
        var lookups = ordered
        lookups.shuffle(using: &generator)
        self.ordered = Workload.copy(ordered)
        self.shuffled = Workload.copy(shuffled)
        self.lookups = Workload.copy(lookups)
        let value = UnsafeMutableRawBufferPointer.allocate(byteCount: Workload.valueSize, alignment: 8)
        for index in 0..<Workload.valueSize { value[index] = UInt8(truncatingIfNeeded: index &* 37 &+ 11) }
        self.value = UnsafeRawBufferPointer(value)
    }

    deinit {
        ordered.deallocate()
        shuffled.deallocate()
        lookups.deallocate()
        value.deallocate()
    }

    private static func copy(_ array: [UInt64]) -> UnsafeBufferPointer<UInt64> {
        let buffer = UnsafeMutableBufferPointer<UInt64>.allocate(capacity: array.count)
        _ = buffer.initialize(from: array)
        return UnsafeBufferPointer(buffer)
    }

    /// The checksum a get scenario must produce: for each lookup, the value's size plus its
    /// first byte.
    public var expectedGetChecksum: Int {
        entryCount * (Workload.valueSize + Int(value[0]))
    }

    /// The checksum a scan must produce: for each entry, the value's size plus the key's
    /// last (least significant) byte.
    public var expectedScanChecksum: Int {
        var sum = entryCount * Workload.valueSize
        for key in 0..<entryCount { sum += key & 0xFF }
        return sum
    }
}

/// A fresh directory under `$TMPDIR` (default `/tmp`), removed by ``remove()``.
public final class TemporaryDirectory: @unchecked Sendable {
    // @unchecked Sendable because `path` is immutable and `remove()` is idempotent per use.
    public let path: String

    public init(prefix: String = "strata-bench") throws {
        var base = ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp"
        if base.isEmpty { base = "/tmp" }
        while base.count > 1 && base.hasSuffix("/") { base.removeLast() }
        var template = Array("\(base)/\(prefix)-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        guard made != nil else {
            throw BenchmarkFailure("mkdtemp under \(base) failed: errno \(errno)")
        }
        path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }

    public func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}

/// A failed check in a scenario (a wrong checksum, an LMDB error of the raw path).
public struct BenchmarkFailure: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Starts and stops the measured part of a run; the rest (opening the environment,
/// removing the directory) is not measured.
public struct Stopwatch {
    public var start: () -> Void
    public var stop: () -> Void
    public init(start: @escaping () -> Void, stop: @escaping () -> Void) {
        self.start = start
        self.stop = stop
    }
}

/// The monotonic clock in nanoseconds.
@inline(__always)
public func monotonicNanoseconds() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
}

/// The environment settings shared by both bindings.
public enum StoreSettings {
    /// 1 GiB: the 1M-entry stores (about 60–130 MB) never grow the map.
    public static let mapSize = 1 << 30
    /// StrataLMDB's defaults, which the raw path copies.
    public static let maxReaders: UInt32 = 126
    public static let maxDatabases: UInt32 = 64
    public static let fileMode: mode_t = 0o644
}
