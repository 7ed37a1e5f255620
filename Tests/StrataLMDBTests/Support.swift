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

