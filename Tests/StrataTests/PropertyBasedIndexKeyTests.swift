import Foundation
import PropertyBased
@testable import Strata
import Testing

// Property-based tests (x-sheep/swift-property-based) for the order-preserving index keys.
// To replay a failure, put the `.fixedSeed("…")` trait that the failure message prints on the
// test: `@Test(.fixedSeed("…"))` runs that one case (and never passes: don't commit it).
// Property bodies record errors instead of throwing them: PropertyBased ignores thrown errors.

@Suite("Index key properties")
struct PropertyBasedIndexKeyTests {
    typealias Pair = (AttributeValue?, AttributeValue?)

    /// How LMDB's default comparator orders two keys: `memcmp` over the common length, then
    /// the shorter key first.
    static func keyOrder(_ a: [UInt8], _ b: [UInt8]) -> ComparisonResult {
        let common = min(a.count, b.count)
        let result = common == 0 ? 0 : a.withUnsafeBytes { x in
            b.withUnsafeBytes { y in memcmp(x.baseAddress!, y.baseAddress!, common) }
        }
        if result != 0 { return result < 0 ? .orderedAscending : .orderedDescending }
        return order(a.count, b.count)
    }

    static func order<T: Comparable>(_ a: T, _ b: T) -> ComparisonResult {
        a < b ? .orderedAscending : (b < a ? .orderedDescending : .orderedSame)
    }

    static func order(bytes a: some Sequence<UInt8>, _ b: some Sequence<UInt8>) -> ComparisonResult {
        a.lexicographicallyPrecedes(b) ? .orderedAscending : (b.lexicographicallyPrecedes(a) ? .orderedDescending : .orderedSame)
    }

    /// Numeric order with -0 == 0, and every NaN equal to every other and after +infinity.
    static func order(number a: Double, _ b: Double) -> ComparisonResult {
        switch (a.isNaN, b.isNaN) {
        case (true, true): .orderedSame
        case (true, false): .orderedDescending
        case (false, true): .orderedAscending
        case (false, false): order(a, b)
        }
    }

    /// The natural order of two values as IndexKeyEncoding.swift documents it: nil first;
    /// numbers (doubles and floats alike) and dates numerically; false before true; strings
    /// and URLs (their absolute string) by UTF-8 bytes; data by bytes; UUIDs like their text.
    static func naturalOrder(_ a: AttributeValue?, _ b: AttributeValue?) -> ComparisonResult? {
        switch (a, b) {
        case (nil, nil): return .orderedSame
        case (nil, _): return .orderedAscending
        case (_, nil): return .orderedDescending
        case let (.integer(x)?, .integer(y)?): return order(x, y)
        case let (.double(x)?, .double(y)?): return order(number: x, y)
        case let (.double(x)?, .float(y)?): return order(number: x, Double(y))
        case let (.float(x)?, .double(y)?): return order(number: Double(x), y)
        case let (.float(x)?, .float(y)?): return order(number: Double(x), Double(y))
        case let (.date(x)?, .date(y)?): return order(number: x.timeIntervalSinceReferenceDate, y.timeIntervalSinceReferenceDate)
        case let (.boolean(x)?, .boolean(y)?): return order(x ? 1 : 0, y ? 1 : 0)
        case let (.string(x)?, .string(y)?): return order(bytes: x.utf8, y.utf8)
        case let (.binaryData(x)?, .binaryData(y)?): return order(bytes: x, y)
        case let (.uuid(x)?, .uuid(y)?): return order(x.uuidString, y.uuidString)
        case let (.uri(x)?, .uri(y)?): return order(bytes: x.absoluteString.utf8, y.absoluteString.utf8)
        default: return nil
        }
    }

    /// What decoding an encoded value gives back: the value itself, except that a float
    /// comes back as a double, -0 as +0 and every NaN as `Double.nan`.
    static func decodedForm(_ value: AttributeValue?) -> AttributeValue? {
        func canonical(_ x: Double) -> Double { x.isNaN ? .nan : (x == 0 ? 0.0 : x) }
        return switch value {
        case .double(let x)?: .double(canonical(x))
        case .float(let x)?: .double(canonical(Double(x)))
        case .date(let x)?: .date(Date(timeIntervalSinceReferenceDate: canonical(x.timeIntervalSinceReferenceDate)))
        default: value
        }
    }

    /// Pairs of values of `kind` (or nil): independent ones, equal ones, and ones that are
    /// close in the kind's order (neighbouring numbers, shared prefixes…).
    static func pairs(of kind: IndexKeyKind) -> Generator<Pair, AnySequence<Any>> {
        func mixed<S1: SendableSequenceType, S2: SendableSequenceType>(
            _ values: Generator<AttributeValue, S1>, close: Generator<(AttributeValue, AttributeValue), S2>
        ) -> Generator<Pair, AnySequence<Any>> {
            Gen<Pair>.frequency(
                (3, zip(values.optional(valueRate: 0.9), values.optional(valueRate: 0.9)).map { a, b -> Pair in (a, b) }),
                (1, values.map { value -> Pair in (value, value) }),
                (3, close.map { a, b -> Pair in (a, b) })
            ).eraseToAny()
        }
        switch kind {
        case .integer:
            return mixed(PropertyGen.int64.map { .integer($0) }, close: zip(PropertyGen.int64, Gen.int64(in: -2...2)).map {
                (.integer($0), .integer($0 &+ $1))  // wraps: .max and .min are neighbours here
            })
        case .double:
            let number = Gen<AttributeValue>.frequency(
                (3, PropertyGen.double.map { .double($0) }), (1, PropertyGen.float.map { .float($0) })
            )
            return mixed(number, close: zip(PropertyGen.double, Gen.int(in: 0...3)).map { x, how in
                switch how {
                case 0: (.double(x), .double(x.nextUp))
                case 1: (.double(x), .double(x.nextDown))
                case 2: (.double(x), .double(-x))
                default: (.double(x), .float(Float(x)))
                }
            })
        case .date:
            return mixed(PropertyGen.date.map { .date($0) }, close: zip(PropertyGen.date, Gen.bool).map { date, up in
                let t = date.timeIntervalSinceReferenceDate
                return (.date(date), .date(Date(timeIntervalSinceReferenceDate: up ? t.nextUp : -t)))
            })
        case .boolean:
            return mixed(Gen.bool.map { .boolean($0) }, close: zip(Gen.bool, Gen.bool).map { (.boolean($0), .boolean($1)) })
        case .string:
            let piece = PropertyGen.string(length: 0...3)
            // A value and a longer one that starts with it, or with the same text but a NUL.
            let edges: [(String, String)] = [("a", "a\0"), ("", "\0"), ("a\0", "a\u{1}"), ("a\0", "a\0\0"), ("a\0b", "a\u{1}")]
            return mixed(PropertyGen.string().map { .string($0) }, close: Gen<(AttributeValue, AttributeValue)>.frequency(
                (4, zip(PropertyGen.string(length: 0...6), piece, piece).map { (.string($0 + $1), .string($0 + $2)) }),
                (1, PropertyGen.edge(edges).map { (.string($0), .string($1)) })
            ))
        case .binaryData:
            let piece = PropertyGen.bytes(count: 0...3)
            let edges: [([UInt8], [UInt8])] = [([1], [1, 0]), ([], [0]), ([0], [0, 0]), ([0], [0xFF]), ([0, 0xFF], [0, 0])]
            return mixed(PropertyGen.data.map { .binaryData($0) }, close: Gen<(AttributeValue, AttributeValue)>.frequency(
                (4, zip(PropertyGen.bytes(count: 0...6), piece, piece).map { (.binaryData(Data($0 + $1)), .binaryData(Data($0 + $2))) }),
                (1, PropertyGen.edge(edges).map { (.binaryData(Data($0)), .binaryData(Data($1))) })
            ))
        case .uuid:
            return mixed(PropertyGen.uuid.map { .uuid($0) }, close: zip(PropertyGen.uuidBytes, PropertyGen.uuidBytes, Gen.int(in: 0...16)).map {
                a, b, shared in (.uuid(PropertyGen.uuid(a)), .uuid(PropertyGen.uuid(Array(a.prefix(shared) + b.dropFirst(shared)))))
            })
        case .uri:
            return mixed(PropertyGen.url.map { .uri($0) }, close: zip(PropertyGen.url, PropertyGen.edge(["", "a", "/", "%00", "~", "?", "#", "%2F"]))
                .compactMap { url, extra in PropertyGen.roundTrippingURL(url.absoluteString + extra).map { (.uri(url), .uri($0)) } })
        }
    }

    /// Decodes one value of `kind` at the start of `key`, returning it and where it ended,
    /// or records an issue and returns nil.
    static func decode(_ key: [UInt8], as kind: IndexKeyKind) -> (AttributeValue?, end: Int)? {
        key.withUnsafeBytes { buffer in
            var offset = 0
            do {
                let value = try IndexKeyEncoding.decode(buffer, as: kind, at: &offset)
                return (value, offset)
            } catch {
                Issue.record("\(key) does not decode as \(kind): \(error)")
                return nil
            }
        }
    }

    /// Property 3: for two values of one kind, key order is the values' natural order,
    /// also with the rows' primary keys appended (as in an index database), and each key
    /// decodes back to its value and ends where the primary key begins.
    @Test(arguments: IndexKeyKind.allCases)
    func keyOrderIsNaturalOrderAndKeysDecode(kind: IndexKeyKind) async {
        await propertyCheck(count: 500, input: Self.pairs(of: kind), PropertyGen.primaryKey, PropertyGen.primaryKey) { pair, rowA, rowB in
            let (a, b) = pair
            guard let expected = Self.naturalOrder(a, b),
                  let keyA = IndexKeyEncoding.encode(a, as: kind), let keyB = IndexKeyEncoding.encode(b, as: kind)
            else {
                Issue.record("the generator made \(String(describing: a)) and \(String(describing: b)) for \(kind)")
                return
            }
            #expect(Self.keyOrder(keyA, keyB) == expected, "keys \(keyA) and \(keyB)")
            if expected == .orderedSame {
                #expect(keyA == keyB, "equal values encode equally")
            }
            // In an index, the row's primary key follows the value.
            let fullA = keyA + rowA.encoded, fullB = keyB + rowB.encoded
            let expectedFull = expected == .orderedSame ? Self.order(rowA.rawValue, rowB.rawValue) : expected
            #expect(Self.keyOrder(fullA, fullB) == expectedFull, "index keys \(fullA) and \(fullB)")

            for (value, key, full, row) in [(a, keyA, fullA, rowA), (b, keyB, fullB, rowB)] {
                guard let (decoded, end) = Self.decode(full, as: kind) else { continue }
                #expect(end == key.count, "decoding \(full) stops at \(end), not at \(key.count)")
                #expect(Strict.identical(decoded, Self.decodedForm(value)), "\(full) decoded to \(String(describing: decoded))")
                #expect(full.withUnsafeBytes { PrimaryKey(encoded: UnsafeRawBufferPointer(rebasing: $0[end...])) } == row)
            }
        }
    }

    /// The encoder takes exactly the values of its kind (floats count as doubles).
    @Test func valuesOfAnotherKindAreRefused() async {
        await propertyCheck(count: 500, input: PropertyGen.attributeValue, Gen<IndexKeyKind>.case) { value, kind in
            let matches = switch (kind, value) {
            case (.integer, .integer), (.double, .double), (.double, .float), (.date, .date), (.boolean, .boolean),
                 (.string, .string), (.binaryData, .binaryData), (.uuid, .uuid), (.uri, .uri): true
            default: false
            }
            var bytes: [UInt8] = [0xAB]
            #expect(IndexKeyEncoding.append(value, as: kind, to: &bytes) == matches)
            #expect(matches ? bytes.count > 2 : bytes == [0xAB], "refusing appends nothing")
        }
    }
}
