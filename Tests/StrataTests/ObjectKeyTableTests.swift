@testable import Strata
import StrataTesting
import Testing

/// ``ObjectKeyTable`` against `Dictionary` as the oracle: random inserts, replacements,
/// removals and lookups (keys crowded into few home slots, so that probe runs and the
/// backward shift of deletion are exercised), then the filtering and clearing operations.
@Suite("Object key table")
struct ObjectKeyTableTests {
    @Test("random operations give what a Dictionary gives", arguments: [1, 2, 3])
    func matchesDictionary(seed: UInt64) {
        var random = SeededRandomNumberGenerator(seed: seed)
        var table = ObjectKeyTable<Int>()
        var oracle: [ObjectIdentityKey: Int] = [:]
        // Few distinct keys, many operations: long probe runs and frequent deletions.
        func randomKey() -> ObjectIdentityKey {
            ObjectIdentityKey(store: UInt32(random.next() % 2), entity: UInt32(random.next() % 3), primaryKey: random.next() % 300)
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
        table.removeAll { $0.low % 2 == 0 }
        oracle = oracle.filter { $0.key.low % 2 != 0 }
        #expect(table.count == oracle.count)
        for key in oracle.keys { #expect(table[key] == oracle[key]) }
        table[randomKey()] = nil
        table.removeAll()
        #expect(table.isEmpty && table[randomKey()] == nil)
    }
}
