import Foundation
@testable import Strata
import StrataLMDB
import StrataTesting
import Testing

@Suite("Order-preserving index keys")
struct IndexKeyEncodingTests {
    static let seed: UInt64 = 0x5747_A7A5

    static func encoded(_ value: AttributeValue?, _ kind: IndexKeyKind) -> [UInt8] {
        IndexKeyEncoding.encode(value, as: kind)!
    }

    static func decoded(_ bytes: [UInt8], _ kind: IndexKeyKind) throws -> AttributeValue? {
        try bytes.withUnsafeBytes { buffer in
            var offset = 0
            let value = try IndexKeyEncoding.decode(buffer, as: kind, at: &offset)
            #expect(offset == buffer.count, "decoding consumes exactly the encoding")
            return value
        }
    }

    /// Checks, for every pair, that byte order equals `areInIncreasingOrder` order.
    static func expectOrderPreserved<T>(
        _ values: [T], kind: IndexKeyKind, value: (T) -> AttributeValue,
        by areInIncreasingOrder: (T, T) -> Bool, equal: (T, T) -> Bool
    ) {
        let keys = values.map { encoded(value($0), kind) }
        for i in values.indices {
            for j in values.indices where i < j {
                let (a, b) = (values[i], values[j])
                let byteOrder = keys[i].lexicographicallyPrecedes(keys[j])
                if equal(a, b) {
                    #expect(keys[i] == keys[j], "equal values \(a), \(b) encode equally")
                } else if areInIncreasingOrder(a, b) != byteOrder {
                    Issue.record("order of \(a) and \(b) differs from their encodings' (seed \(seed))")
                }
            }
        }
    }

    @Test func nilSortsFirstForEveryKind() {
        for kind in IndexKeyKind.allCases {
            #expect(Self.encoded(nil, kind) == [0x00])
        }
        #expect(Self.encoded(nil, .integer).lexicographicallyPrecedes(Self.encoded(.integer(.min), .integer)))
        #expect(IndexKeyEncoding.encode(.string("x"), as: .integer) == nil, "a value of another kind is refused")
    }

    @Test func integersKeepTheirOrderAndRoundTrip() throws {
        var random = SeededRandomNumberGenerator(seed: Self.seed)
        var values: [Int64] = [.min, .min + 1, -256, -1, 0, 1, 255, 256, .max - 1, .max]
        values += (0..<120).map { _ in Int64.random(in: .min ... .max, using: &random) }
        values += (0..<40).map { _ in Int64.random(in: -1000...1000, using: &random) }
        Self.expectOrderPreserved(values, kind: .integer, value: AttributeValue.integer, by: <, equal: ==)
        for value in values { #expect(try Self.decoded(Self.encoded(.integer(value), .integer), .integer) == .integer(value)) }
    }

    @Test func doublesIncludingZeroInfinitiesAndNaN() throws {
        var random = SeededRandomNumberGenerator(seed: Self.seed)
        var values: [Double] = [
            -.infinity, -.greatestFiniteMagnitude, -1e300, -1, -.leastNormalMagnitude,
            -.leastNonzeroMagnitude, -0.0, 0.0, .leastNonzeroMagnitude, .leastNormalMagnitude,
            0.1, 1, 1e300, .greatestFiniteMagnitude, .infinity, .nan, -.nan, .signalingNaN,
        ]
        values += (0..<100).map { _ in Double(bitPattern: random.next()) }
        values += (0..<60).map { _ in Double.random(in: -1e6...1e6, using: &random) }
        // Natural order: numeric, with -0 == 0, and every NaN equal and after +infinity.
        let before: (Double, Double) -> Bool = { a, b in
            if a.isNaN { return false }
            if b.isNaN { return true }
            return a < b
        }
        let same: (Double, Double) -> Bool = { a, b in (a.isNaN && b.isNaN) || a == b }
        Self.expectOrderPreserved(values, kind: .double, value: AttributeValue.double, by: before, equal: same)
        for value in values {
            guard case .double(let back)? = try Self.decoded(Self.encoded(.double(value), .double), .double) else {
                Issue.record("\(value) did not decode as a double")
                continue
            }
            #expect(same(back, value) && back.sign == (value.isNaN || value == 0 ? .plus : value.sign))
        }
        // Floats share the double encoding exactly.
        #expect(Self.encoded(.float(-2.5), .double) == Self.encoded(.double(-2.5), .double))
    }

    @Test func datesUUIDsAndBooleans() throws {
        var random = SeededRandomNumberGenerator(seed: Self.seed)
        let dates = [Date.distantPast, Date(timeIntervalSince1970: 0), Date(timeIntervalSinceReferenceDate: -0.5),
                     Date(timeIntervalSinceReferenceDate: 0), Date.distantFuture]
            + (0..<60).map { _ in Date(timeIntervalSinceReferenceDate: Double.random(in: -1e10...1e10, using: &random)) }
        Self.expectOrderPreserved(dates, kind: .date, value: AttributeValue.date, by: <, equal: ==)
        for date in dates { #expect(try Self.decoded(Self.encoded(.date(date), .date), .date) == .date(date)) }

        let uuids = (0..<60).map { _ in
            var bytes = [UInt8](repeating: 0, count: 16)
            for i in 0..<16 { bytes[i] = UInt8.random(in: 0...255, using: &random) }
            return UUID(uuid: bytes.withUnsafeBytes { $0.loadUnaligned(as: uuid_t.self) })
        }
        // A UUID's natural order is that of its canonical (hex) text.
        Self.expectOrderPreserved(uuids, kind: .uuid, value: AttributeValue.uuid, by: { $0.uuidString < $1.uuidString }, equal: ==)
        for uuid in uuids { #expect(try Self.decoded(Self.encoded(.uuid(uuid), .uuid), .uuid) == .uuid(uuid)) }

        Self.expectOrderPreserved([false, true], kind: .boolean, value: AttributeValue.boolean, by: { !$0 && $1 }, equal: ==)
        #expect(try Self.decoded(Self.encoded(.boolean(true), .boolean), .boolean) == .boolean(true))
    }

    @Test func stringsAndDataInUTF8ByteOrderEvenWithSuffixes() throws {
        var random = SeededRandomNumberGenerator(seed: Self.seed)
        let alphabet: [Character] = ["\0", "a", "b", "z", "A", "é", "ß", "日", "😀", "\u{FFFF}", " ", "~"]
        var strings = ["", "\0", "\0\0", "a", "a\0", "a\0b", "ab", "b", "é", "e\u{301}", "日本", "😀"]
        strings += (0..<80).map { _ in
            String((0..<Int.random(in: 0...6, using: &random)).map { _ in alphabet.randomElement(using: &random)! })
        }
        let utf8Before: (String, String) -> Bool = { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
        let sameBytes: (String, String) -> Bool = { Array($0.utf8) == Array($1.utf8) }
        Self.expectOrderPreserved(strings, kind: .string, value: AttributeValue.string, by: utf8Before, equal: sameBytes)
        for string in strings {
            #expect(try Self.decoded(Self.encoded(.string(string), .string), .string).map { if case .string(let s) = $0 { Array(s.utf8) } else { [] } } == Array(string.utf8))
        }
        // What follows a value in an index key (the row's primary key) never changes the order.
        let suffixes: [[UInt8]] = [[], [0x00], [0xFF, 0xFF], [0, 0, 0, 0, 0, 0, 0, 1]]
        for a in strings.prefix(30) {
            for b in strings.prefix(30) where !sameBytes(a, b) {
                let ka = Self.encoded(.string(a), .string) + suffixes[a.utf8.count % 4]
                let kb = Self.encoded(.string(b), .string) + suffixes[b.utf8.count % 3]
                #expect(ka.lexicographicallyPrecedes(kb) == utf8Before(a, b))
            }
        }
        let blobs = [Data(), Data([0]), Data([0, 0]), Data([0, 1]), Data([1]), Data([0xFF]), Data([0xFF, 0])]
        Self.expectOrderPreserved(blobs, kind: .binaryData, value: AttributeValue.binaryData,
                                  by: { $0.lexicographicallyPrecedes($1) }, equal: ==)
        for blob in blobs { #expect(try Self.decoded(Self.encoded(.binaryData(blob), .binaryData), .binaryData) == .binaryData(blob)) }
        let url = URL(string: "https://example.com/a%20b?q=1")!
        #expect(try Self.decoded(Self.encoded(.uri(url), .uri), .uri) == .uri(url))
    }

    @Test func decodingHostileBytesNeverTraps() {
        var random = SeededRandomNumberGenerator(seed: Self.seed)
        var samples: [[UInt8]] = [[], [0x02], [0x01], [0x01, 0x00], [0x01, 0x00, 0x01], [0x01, 0x00, 0xFF],
                                  [0x01, 0xC3], [0x01, 0xC3, 0x00, 0x00], [0x01, 0x02], [0x01] + Array(repeating: 0, count: 7)]
        samples += (0..<2000).map { _ in (0..<Int.random(in: 0...24, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) } }
        // Truncations of valid keys.
        for kind in IndexKeyKind.allCases {
            let valid: AttributeValue = switch kind {
            case .integer: .integer(-42)
            case .double: .double(3.5)
            case .boolean: .boolean(true)
            case .string: .string("héllo\0")
            case .date: .date(Date(timeIntervalSinceReferenceDate: 12))
            case .uuid: .uuid(UUID())
            case .binaryData: .binaryData(Data([0, 1, 2]))
            case .uri: .uri(URL(string: "file:///tmp")!)
            }
            let full = Self.encoded(valid, kind)
            samples += (0..<full.count).map { Array(full.prefix($0)) }
        }
        var decodedCount = 0, rejected = 0
        for sample in samples {
            for kind in IndexKeyKind.allCases {
                sample.withUnsafeBytes { buffer in
                    var offset = 0
                    do {
                        _ = try IndexKeyEncoding.decode(buffer, as: kind, at: &offset)
                        #expect(offset <= buffer.count)
                        decodedCount += 1
                    } catch let error as IndexKeyDecodingError {
                        #expect(error.offset >= 0 && error.offset <= buffer.count)
                        rejected += 1
                    } catch {
                        Issue.record("untyped error \(error)")
                    }
                }
            }
        }
        #expect(rejected > 0 && decodedCount > 0)
    }

    @Test func anLMDBIndexScanReturnsValuesInNaturalOrder() throws {
        // index key = encoded value + primary key, in a real LMDB database.
        let directory = TemporaryDirectory()
        let env = try Environment(path: directory.appending("store"))
        let index = try env.openDatabase(named: StoreLayout.indexDatabase(entity: "Reading", attribute: "celsius"), flags: .create)
        let readings: [Double?] = [3.5, -40, nil, 0, -0.0, .infinity, 21.25, -.infinity, .nan, 100, -3.5]
        try env.write { txn in
            for (row, value) in readings.enumerated() {
                let key = Self.encoded(value.map(AttributeValue.double), .double) + PrimaryKey(UInt64(row + 1))!.encoded
                try txn.put([UInt8](), forKey: key, in: index)
            }
        }
        let scanned: [Double?] = try env.read { txn in
            var values: [Double?] = []
            try txn.scan(index) { key, _ in
                var offset = 0
                let value = try IndexKeyEncoding.decode(key, as: .double, at: &offset)
                #expect(PrimaryKey(encoded: UnsafeRawBufferPointer(rebasing: key[offset...])) != nil)
                if case .double(let double)? = value { values.append(double) } else { values.append(nil) }
                return .continue
            }
            return values
        }
        let rendered = scanned.map { $0.map { "\($0)" } ?? "nil" }
        #expect(rendered == ["nil", "-inf", "-40.0", "-3.5", "0.0", "0.0", "3.5", "21.25", "100.0", "inf", "nan"])
    }
}
