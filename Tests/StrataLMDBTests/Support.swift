import Foundation
import StrataLMDB
import StrataTesting
import Testing

/// An 8-byte big-endian key: byte order equals numeric order.
func key(_ n: UInt64) -> [UInt8] { withUnsafeBytes(of: n.bigEndian) { Array($0) } }

func bytes(_ string: String) -> [UInt8] { Array(string.utf8) }

func string(_ buffer: UnsafeRawBufferPointer) -> String { String(decoding: buffer, as: UTF8.self) }

extension ReadableTransaction where Self: ~Copyable {
    func string<Key: ContiguousBytes>(forKey key: Key, in database: Database) throws -> String? {
        try value(forKey: key, in: database).map { String(decoding: $0, as: UTF8.self) }
    }
}

/// Opens an environment in `directory/name` with a small default map for tests.
func openEnvironment(
    _ directory: borrowing TemporaryDirectory, _ name: String = "store",
    configure: (inout Environment.Configuration) -> Void = { _ in }
) throws -> Environment {
    var configuration = Environment.Configuration()
    configuration.mapSize = 4 << 20
    configure(&configuration)
    return try Environment(path: directory.appending(name), configuration: configuration)
}

/// Runs `body` on a new thread; `join()` waits for it.
final class TestThread: @unchecked Sendable {
    // @unchecked Sendable because `done` is a semaphore and `body` runs once.
    private let done = DispatchSemaphore(value: 0)

    init(_ body: @escaping @Sendable () -> Void) {
        let thread = Thread { [done] in
            body()
            done.signal()
        }
        thread.start()
    }

    /// Waits for the thread's body; returns false after `seconds`.
    @discardableResult
    func join(seconds: Double = 10) -> Bool {
        done.wait(timeout: .now() + seconds) == .success
    }
}

/// A value written on one thread and read on another after a semaphore handshake.
final class Box<Value>: @unchecked Sendable {
    // @unchecked Sendable because tests order every access with semaphores or joins.
    var value: Value
    init(_ value: Value) { self.value = value }
}
