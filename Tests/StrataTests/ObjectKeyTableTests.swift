@testable import Strata
import StrataTesting
import Testing

/// ``ObjectKeyTable`` against `Dictionary` as the oracle: random inserts, replacements,
/// removals and lookups, then the filtering and clearing operations. Keys crowded into
/// few pages (neighbouring primary keys share one, so pages fill, empty, are freed and
/// reused), and keys far apart (a page each, so that the group table's probe runs and
/// the backward shift of deletion are exercised).
@Suite("Object key table")
struct ObjectKeyTableTests {
    @Test("random operations give what a Dictionary gives", arguments: [(1, false), (2, false), (3, false), (4, true), (5, true)])
    func matchesDictionary(seed: UInt64, farApart: Bool) {
        var random = SeededRandomNumberGenerator(seed: seed)
        var table = ObjectKeyTable<Int>()
        var oracle: [ObjectIdentityKey: Int] = [:]
        // Few distinct keys, many operations: long probe runs and frequent deletions.
        let primaryKeys = (0..<300).map { index in farApart ? random.next() >> 20 : UInt64(index) }
        func randomKey() -> ObjectIdentityKey {
            ObjectIdentityKey(
                store: UInt32(random.next() % 2), entity: UInt32(random.next() % 3),
                primaryKey: primaryKeys[Int(random.next() % UInt64(primaryKeys.count))])
        }
        for step in 0..<20_000 {
            let key = randomKey()
            switch random.next() % 4 {
            case 0, 1:
                #expect(table.insert(step, for: key) == oracle.updateValue(step, forKey: key))
            case 2 where step % 2 == 0:
                #expect(table.removeValue(forKey: key) == oracle.removeValue(forKey: key))
            case 2:
                // Removed only when the value is odd.
                let removed = table.removeValue(forKey: key) { $0 % 2 == 1 }
                let expected = oracle[key].flatMap { $0 % 2 == 1 ? oracle.removeValue(forKey: key) : nil }
                #expect(removed == expected)
            default:
                #expect(table[key] == oracle[key])
            }
            #expect(table.count == oracle.count)
        }
        for key in oracle.keys { #expect(table[key] == oracle[key]) }
        var seen: [ObjectIdentityKey: Int] = [:]
        table.forEach { key, value in seen[key] = value }
        #expect(seen == oracle)
        table.removeAll { $0.low % 2 == 0 }
        oracle = oracle.filter { $0.key.low % 2 != 0 }
        #expect(table.count == oracle.count)
        for key in oracle.keys { #expect(table[key] == oracle[key]) }
        table[randomKey()] = nil
        table.removeAll()
        #expect(table.isEmpty && table[randomKey()] == nil)
    }
}
