import Foundation
import StrataTesting

/// One object of the benchmark entity, as plain Swift: what every binding stores and
/// what its reads decode into.
///
/// `id` is the row's primary key, 1...n in import order (Strata assigns the same keys
/// itself: its per-entity sequence starts at 1).
public struct BenchRecord: Sendable, Hashable {
    public var id: Int64
    /// Indexed; a seeded permutation of 0..<n, so `rank in lo..<lo + n/100` selects 1%.
    public var rank: Int64
    /// 16 to 24 ASCII letters.
    public var name: String
    public var score: Double
    public var created: Date

    public init(id: Int64, rank: Int64, name: String, score: Double, created: Date) {
        self.id = id
        self.rank = rank
        self.name = name
        self.score = score
        self.created = created
    }

    /// What a read adds to its checksum for this object: every attribute touched, so a
    /// binding cannot skip decoding one of them. Order-independent (a wrapping sum).
    @inline(__always)
    public static func checksum(rank: Int64, name: String, score: Double, created: Date) -> Int64 {
        rank &+ Int64(name.utf8.count) &* 1_000_003
            &+ Int64(bitPattern: score.bitPattern >> 11)
            &+ Int64(created.timeIntervalSince1970 * 1000)
    }

    @inline(__always)
    public var checksum: Int64 { Self.checksum(rank: rank, name: name, score: score, created: created) }
}

/// The objects of a run: `count` records made from a seed, the same for every binding.
public struct Dataset: Sendable {
    public let records: [BenchRecord]
    /// The checksum a read of every record must produce.
    public let checksum: Int64
    public var count: Int { records.count }

    /// `count` records: ids 1...count, ranks a seeded permutation of 0..<count.
    public init(count: Int, seed: UInt64 = 0x57A7A_BE4C) {
        var random = SeededRandomNumberGenerator(seed: seed)
        var ranks = Array(Int64(0)..<Int64(count))
        ranks.shuffle(using: &random)
        var records: [BenchRecord] = []
        records.reserveCapacity(count)
        var checksum: Int64 = 0
        for index in 0..<count {
            let record = BenchRecord(
                id: Int64(index + 1), rank: ranks[index], name: Dataset.name(using: &random),
                score: Double.random(in: 0..<1_000_000, using: &random),
                // Whole milliseconds, so every binding's date encoding round-trips exactly.
                created: Date(timeIntervalSince1970: Double(1_600_000_000_000 + Int64.random(in: 0..<100_000_000_000, using: &random)) / 1000))
            checksum &+= record.checksum
            records.append(record)
        }
        self.records = records
        self.checksum = checksum
    }

    /// Records `count` records for ids `firstID...`, with ranks from `firstRank` upward
    /// (beyond the permutation: a writer's new objects never fall in a reader's range).
    public static func appended(count: Int, firstID: Int64, firstRank: Int64, seed: UInt64) -> [BenchRecord] {
        var random = SeededRandomNumberGenerator(seed: seed)
        return (0..<count).map { index in
            BenchRecord(
                id: firstID + Int64(index), rank: firstRank + Int64(index), name: name(using: &random),
                score: Double.random(in: 0..<1_000_000, using: &random),
                created: Date(timeIntervalSince1970: 1_700_000_000 + Double(index)))
        }
    }

    private static let letters = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8)

    private static func name(using random: inout SeededRandomNumberGenerator) -> String {
        let length = Int.random(in: 16...24, using: &random)
        let bytes = (0..<length).map { _ in letters[Int.random(in: 0..<letters.count, using: &random)] }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// The queries of the indexed-fetch scenarios: ranges of 1% of the ranks.
public struct RangeQueries: Sendable {
    /// Each query's lower bound; the range is `lower..<lower + width`.
    public let lowers: [Int64]
    /// n/100 (at least 1).
    public let width: Int64

    public init(storeCount: Int, queries: Int, seed: UInt64 = 0xC0FFEE) {
        var random = SeededRandomNumberGenerator(seed: seed)
        width = Int64(max(1, storeCount / 100))
        let span = Int64(storeCount) - width
        lowers = (0..<queries).map { _ in span > 0 ? Int64.random(in: 0...span, using: &random) : 0 }
    }

    /// The sum of the ranks a range query starting at `lower` returns, with `limit` (0 =
    /// none): every query result is checked against it.
    public func expectedRankSum(lower: Int64, limit: Int = 0) -> Int64 {
        let count = limit > 0 ? min(Int64(limit), width) : width
        // lower + (lower+1) + ... + (lower+count-1)
        return count * lower + count * (count - 1) / 2
    }

    /// The number of objects a query returns.
    public func expectedCount(limit: Int = 0) -> Int {
        limit > 0 ? min(limit, Int(width)) : Int(width)
    }
}
