import Foundation
@testable import StrataLMDB
import StrataTesting
import Testing

/// `Environment.verifyPages()` and the data-file check at open: healthy environments of
/// every database kind pass, damaged ones throw instead of crashing LMDB.
@Suite("Page verification")
struct PageVerificationTests {
    /// An environment with plain, sorted-duplicate and fixed-size-duplicate databases,
    /// values from empty to several overflow pages, after inserts and deletes in many
    /// transactions.
    static func populated(at path: String) throws -> Environment {
        let env = try Environment(path: path)
        let plain = try env.openDatabase(named: "plain", flags: .create)
        let duplicates = try env.openDatabase(named: "duplicates", flags: [.create, .sortedDuplicates])
        let fixed = try env.openDatabase(named: "fixed", flags: [.create, .sortedDuplicates, .fixedSizeDuplicates])
        var random = SeededRandomNumberGenerator(seed: 0x7E57)
        for round in 0..<40 {
            try env.write { txn in
                for _ in 0..<200 {
                    let key = withUnsafeBytes(of: UInt32.random(in: 0..<3000, using: &random).bigEndian) { Array($0) }
                    let size = Bool.random(using: &random) ? Int.random(in: 0..<64, using: &random) : Int.random(in: 0..<9000, using: &random)
                    try txn.put([UInt8](repeating: UInt8(round), count: size), forKey: key, in: plain)
                    try txn.put(Array("v\(Int.random(in: 0..<50, using: &random))".utf8), forKey: key, in: duplicates)
                    try txn.put(withUnsafeBytes(of: UInt64.random(in: 0..<100, using: &random)) { Array($0) }, forKey: key, in: fixed)
                }
                for _ in 0..<120 {
                    let key = withUnsafeBytes(of: UInt32.random(in: 0..<3000, using: &random).bigEndian) { Array($0) }
                    _ = try txn.delete(forKey: key, in: plain)
                    _ = try txn.delete(forKey: key, in: duplicates)
                }
            }
        }
        return env
    }

    @Test("a healthy environment passes, with plain, duplicate and overflow data, after deletes; reopening checks it again")
    func healthyEnvironmentsPass() throws {
        let directory = TemporaryDirectory()
        let path = directory.appending("store")
        do {
            let env = try Self.populated(at: path)
            try env.verifyPages()
            #expect(env.info.lastPageNumber > 100)
        }
        let reopened = try Environment(path: path)
        try reopened.verifyPages()
        // An empty environment passes too.
        let empty = try Environment(path: directory.appending("empty"))
        try empty.verifyPages()
    }

    @Test("a truncated data file is refused at open with corrupted; a damaged page is found by verifyPages")
    func damageIsFound() throws {
        let directory = TemporaryDirectory()
        let path = directory.appending("store")
        let pageSize: Int
        do {
            let env = try Self.populated(at: path)
            pageSize = env.statistics.pageSize
        }
        let data = try Data(contentsOf: URL(fileURLWithPath: path + "/data.mdb"))
        let cut = directory.appending("cut")
        try FileManager.default.createDirectory(atPath: cut, withIntermediateDirectories: true)
        try data.prefix(data.count / 2).write(to: URL(fileURLWithPath: cut + "/data.mdb"))
        let error = #expect(throws: LMDBError.corrupted) { try Environment(path: cut) }
        #expect(error?.message.contains("truncated") == true)

        // Every page's own number, overwritten in turn: verifyPages names the first damaged
        // page it reaches (free pages are not reached, so some changes pass).
        let damaged = directory.appending("damaged")
        var found = 0
        for page in stride(from: 2, to: data.count / pageSize, by: 7) {
            try? FileManager.default.removeItem(atPath: damaged)
            try FileManager.default.createDirectory(atPath: damaged, withIntermediateDirectories: true)
            var copy = data
            copy[page * pageSize] ^= 0x55
            try copy.write(to: URL(fileURLWithPath: damaged + "/data.mdb"))
            let env = try Environment(path: damaged)
            do {
                try env.verifyPages()
            } catch let error as LMDBError {
                #expect(error == .corrupted, "\(error)")
                found += 1
            }
        }
        #expect(found > 0)
    }
}
