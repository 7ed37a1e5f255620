import Foundation
import PropertyBased
@testable import Strata
import Testing

// Property-based tests (x-sheep/swift-property-based) for primary keys.
// To replay a failure, put the `.fixedSeed("…")` trait that the failure message prints on the
// test: `@Test(.fixedSeed("…"))` runs that one case (and never passes: don't commit it).
// Property bodies record errors instead of throwing them: PropertyBased ignores thrown errors
// (`try #require` is fine, it records an issue first).

@Suite("Primary key properties")
struct PropertyBasedPrimaryKeyTests {
    /// Property 5: LMDB's order of encoded keys (memcmp) is the keys' numeric order, and an
    /// encoded key decodes back to itself.
    @Test func encodedOrderIsNumericOrder() async {
        let pairs = Gen<(PrimaryKey, PrimaryKey)>.frequency(
            (3, zip(PropertyGen.primaryKey, PropertyGen.primaryKey)),
            (1, PropertyGen.primaryKey.map { ($0, $0) }),
            (2, zip(PropertyGen.primaryKey, Gen.uint64(in: 1...300)).map { key, distance in
                (key, PrimaryKey(key.rawValue &+ distance) ?? key)  // a close key, or (past .max) a small one
            })
        )
        await propertyCheck(count: 1000, input: pairs) { a, b in
            #expect(a.encoded.count == 8 && b.encoded.count == 8)
            #expect(PropertyBasedIndexKeyTests.keyOrder(a.encoded, b.encoded) == PropertyBasedIndexKeyTests.order(a.rawValue, b.rawValue),
                    "\(a.encoded) vs \(b.encoded)")
            #expect((a < b) == a.encoded.lexicographicallyPrecedes(b.encoded))
            for key in [a, b] {
                #expect(key.encoded.withUnsafeBytes { PrimaryKey(encoded: $0) } == key)
                if let next = key.successor {
                    #expect(next.rawValue == key.rawValue + 1)
                    #expect(PropertyBasedIndexKeyTests.keyOrder(key.encoded, next.encoded) == .orderedAscending)
                } else {
                    #expect(key.rawValue == .max)
                }
            }
        }
    }

    /// Decoding is total: exactly the 8-byte strings other than all zeros are keys, and
    /// they re-encode to themselves.
    @Test func onlyNonZeroEightByteStringsDecode() async {
        let bytes = Gen<[UInt8]>.frequency(
            (2, PropertyGen.bytes(count: 0...12)),
            (2, PropertyGen.bytes(count: 8...8)),
            (1, PropertyGen.edge([[UInt8](repeating: 0, count: 8), [0, 0, 0, 0, 0, 0, 0, 1], [UInt8](repeating: 0xFF, count: 8)]))
        )
        await propertyCheck(count: 1000, input: bytes) { bytes in
            let key = bytes.withUnsafeBytes { PrimaryKey(encoded: $0) }
            #expect((key != nil) == (bytes.count == 8 && bytes.contains { $0 != 0 }), "\(bytes) gave \(String(describing: key))")
            if let key {
                #expect(key.encoded == bytes)
            }
        }
    }
}
