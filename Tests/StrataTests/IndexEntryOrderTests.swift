import Foundation
@testable import Strata
import StrataTesting
import Testing

/// ``IndexEntryOrder`` against a plain comparison sort of the entries' bytes: entries of
/// every length (shorter than a word, between one and two words, longer), many sharing
/// their leading bytes or equal, few and many (below and above the radix threshold).
@Suite("Index entry order")
struct IndexEntryOrderTests {
    @Test("the radix order is the bytewise order, equal entries in their input order", arguments: [(1, 40), (2, 300), (3, 5_000), (4, 20_000)])
    func matchesBytewiseOrder(seed: UInt64, count: Int) {
        var random = SeededRandomNumberGenerator(seed: seed)
        var bytes: [UInt8] = []
        var entries: [IndexEntryOrder.Entry] = []
        // A few shapes: an integer index (tag, 8 value bytes, 8 key bytes) with small
        // values, short and long strings over a tiny alphabet (many shared prefixes, equal
        // and prefix-of pairs), and entries shorter than a word.
        for _ in 0..<count {
            var entry: [UInt8]
            switch random.next() % 4 {
            case 0:
                entry = [3] + withUnsafeBytes(of: (random.next() % 600).bigEndian, Array.init)
                entry += withUnsafeBytes(of: (random.next() % 50).bigEndian, Array.init)
            case 1:
                entry = (0..<Int(random.next() % 24)).map { _ in UInt8(97 + random.next() % 2) }
            case 2:
                entry = (0..<Int(random.next() % 7)).map { _ in UInt8(random.next() % 3) }
            default:
                entry = (0..<(16 + Int(random.next() % 6))).map { index in index < 14 ? 7 : UInt8(random.next() % 2) }
            }
            var prefix: UInt64 = 0
            for offset in 0..<8 { prefix = prefix << 8 | UInt64(offset < entry.count ? entry[offset] : 0) }
            entries.append((prefix, Int32(bytes.count), Int32(entry.count)))
            bytes += entry
        }
        func content(_ entry: IndexEntryOrder.Entry) -> [UInt8] { Array(bytes[Int(entry.start)..<Int(entry.start + entry.count)]) }
        // The oracle: a stable sort by the bytes, a shorter entry first when it is a prefix.
        let expected = entries.enumerated().sorted { a, b in
            let x = content(a.element), y = content(b.element)
            return x.lexicographicallyPrecedes(y) || (x == y && a.offset < b.offset)
        }.map(\.element)
        let ordered = bytes.withUnsafeBytes { IndexEntryOrder.sorted(entries, base: $0.baseAddress!) }
        #expect(ordered.count == expected.count)
        #expect(ordered.map(\.start) == expected.map(\.start))
        // Already in order: returned as they are.
        let again = bytes.withUnsafeBytes { IndexEntryOrder.sorted(ordered, base: $0.baseAddress!) }
        #expect(again.map(\.start) == ordered.map(\.start))
    }
}
