import Foundation
@_spi(StorageInternals) @testable import Strata
import StrataTesting
import Testing

@Suite("Record codec")
struct RecordCodecTests {
    static let seed: UInt64 = 0xC0DEC

    static func roundTrip(_ record: Record) throws -> Record {
        try RecordCodec.decode(RecordCodec.encode(record))
    }

    /// Equality that treats NaN payloads as equal (NaN != NaN for Double).
    static func same(_ a: Record, _ b: Record) -> Bool {
        guard a.version == b.version, a.fields.keys.sorted() == b.fields.keys.sorted() else { return false }
        return a.fields.allSatisfy { number, value in
            switch (value, b.fields[number]!) {
            case (.double(let x), .double(let y)): x.bitPattern == y.bitPattern
            case (.float(let x), .float(let y)): x.bitPattern == y.bitPattern
            case (.date(let x), .date(let y)): x.timeIntervalSinceReferenceDate.bitPattern == y.timeIntervalSinceReferenceDate.bitPattern
            case (.decimal(let x), .decimal(let y)): x.isNaN ? y.isNaN : x == y
            case (let x, let y): x == y
            }
        }
    }

    static let extremes: [AttributeValue] = [
        .integer(0), .integer(-1), .integer(.min), .integer(.max), .integer(63), .integer(-64),
        .double(0), .double(-0.0), .double(.infinity), .double(-.infinity), .double(.nan), .double(.leastNonzeroMagnitude),
        .double(.greatestFiniteMagnitude), .float(-1.5), .float(.nan), .float(.infinity),
        .boolean(true), .boolean(false),
        .string(""), .string("plain"), .string("héllo wörld 日本語 😀"), .string("\0nul\0"), .string(String(repeating: "x", count: 70_000)),
        .date(.distantPast), .date(.distantFuture), .date(Date(timeIntervalSinceReferenceDate: -0.001)),
        .binaryData(Data()), .binaryData(Data([0, 255, 0])), .binaryData(Data(repeating: 7, count: 300)),
        .uuid(UUID()), .uuid(UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))),
        .uri(URL(string: "https://example.com/a%20b?q=é#frag")!), .uri(URL(fileURLWithPath: "/tmp/x y")),
        .decimal(Decimal(string: "0")!), .decimal(Decimal(string: "-123.456")!), .decimal(Decimal.greatestFiniteMagnitude),
        .decimal(Decimal.leastNonzeroMagnitude), .decimal(.nan),
        .transformable(Data()), .transformable(Data("{\"red\":1}".utf8)),
    ]

    @Test func everyValueKindRoundTrips() throws {
        for (index, value) in Self.extremes.enumerated() {
            let record = Record(version: UInt64(index), fields: [7: value])
            #expect(Self.same(try Self.roundTrip(record), record), "\(value)")
        }
        let all = Record(version: .max, fields: Dictionary(uniqueKeysWithValues: Self.extremes.enumerated().map { (UInt32($0.offset * 3), $0.element) }))
        #expect(Self.same(try Self.roundTrip(all), all))
        #expect(try Self.roundTrip(Record(version: 0, fields: [:])) == Record(version: 0, fields: [:]))
        #expect(Self.same(try Self.roundTrip(Record(version: 1, fields: [RecordCodec.maximumFieldNumber: .integer(1)])),
                          Record(version: 1, fields: [RecordCodec.maximumFieldNumber: .integer(1)])))
    }

    @Test func isCompact() {
        let record = Record(version: 3, fields: [0: .integer(5), 1: .boolean(true), 2: .string("ab")])
        // version byte, version, [head, 5→zigzag 10], [head], [head, len, a, b]
        #expect(RecordCodec.encode(record) == [1, 3, 0x01, 10, 0x15, 0x26, 2, 0x61, 0x62])
    }

    @Test func randomRecordsRoundTrip() throws {
        var random = SeededRandomNumberGenerator(seed: Self.seed)
        for _ in 0..<400 {
            var fields: [UInt32: AttributeValue] = [:]
            for _ in 0..<Int.random(in: 0...12, using: &random) {
                let number = UInt32.random(in: 0...2000, using: &random)
                fields[number] = switch Int.random(in: 0...6, using: &random) {
                case 0: .integer(Int64(bitPattern: random.next()))
                case 1: .double(Double(bitPattern: random.next()))
                case 2: .string(String((0..<Int.random(in: 0...20, using: &random)).map { _ in
                    Character(UnicodeScalar(UInt8.random(in: 32...126, using: &random))) }))
                case 3: .binaryData(Data((0..<Int.random(in: 0...40, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }))
                case 4: .date(Date(timeIntervalSinceReferenceDate: Double.random(in: -1e9...1e9, using: &random)))
                case 5: .boolean(Bool.random(using: &random))
                default: .float(Float(bitPattern: UInt32.random(in: 0 ... .max, using: &random)))
                }
            }
            let record = Record(version: random.next(), fields: fields)
            #expect(Self.same(try Self.roundTrip(record), record), "seed \(Self.seed)")
        }
    }

    @Test func unknownFieldsAreKept() throws {
        // A newer model wrote field 9, which this model does not know: the decode still works.
        let newer = Record(version: 2, fields: [0: .string("title"), 9: .integer(42)])
        let decoded = try Self.roundTrip(newer)
        #expect(decoded.fields[0] == .string("title"))
        #expect(decoded.fields[9] == .integer(42))
    }

    @Test(arguments: [
        ([], "empty"), ([2], "unknown format version 2"), ([1], "cut short"), ([1, 0x80], "cut short"),
        ([1, 0, 0x0F], "unknown value tag 15"), ([1, 0, 0x00], "unknown value tag 0"),
        ([1, 0, 0x01], "cut short"), ([1, 0, 0x02, 1, 2, 3], "cut short"), ([1, 0, 0x06, 5, 0x61], "runs past the end"),
        ([1, 0, 0x06, 2, 0xC3, 0x28], "not valid UTF-8"), ([1, 0, 0x16, 0, 0x14], "repeated or out of order"),
        ([1, 0, 0x14, 0x14], "repeated or out of order"), ([1, 0x80, 0x00], "overlong"),
        ([1] + Array(repeating: 0xFF, count: 9) + [0x02], "exceeds 64 bits"),
        ([1, 0, 0x0B, 3, 0x61, 0x62, 0x63], "is not a decimal number"), ([1, 0, 0x0A, 0], "URL is not valid"),
        ([1, 0, 0x09, 1, 2, 3], "UUID needs 16 bytes"),
    ] as [([UInt8], String)])
    func malformedRecordsGiveTypedErrors(bytes: [UInt8], reason: String) {
        do {
            let record = try RecordCodec.decode(bytes)
            Issue.record("decoded \(record) from \(bytes)")
        } catch {
            #expect(error.description.contains(reason), "\(error)")
            #expect(error.offset >= 0 && error.offset <= bytes.count)
        }
    }

    @Test func truncatedMutatedAndRandomBytesNeverTrap() {
        var random = SeededRandomNumberGenerator(seed: Self.seed)
        let valid = RecordCodec.encode(Record(version: 77, fields: Dictionary(uniqueKeysWithValues:
            Self.extremes.filter { if case .string(let s) = $0 { s.count < 100 } else { true } }
                .enumerated().map { (UInt32($0.offset), $0.element) })))
        var samples: [[UInt8]] = (0..<valid.count).map { Array(valid.prefix($0)) }
        for _ in 0..<3000 {
            var mutated = valid
            for _ in 0..<Int.random(in: 1...4, using: &random) {
                mutated[Int.random(in: 0..<mutated.count, using: &random)] = UInt8.random(in: 0...255, using: &random)
            }
            samples.append(mutated)
        }
        samples += (0..<3000).map { _ in [1] + (0..<Int.random(in: 0...40, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) } }
        var decoded = 0, rejected = 0
        for sample in samples {
            do {
                let record = try RecordCodec.decode(sample)
                decoded += 1
                // Whatever decodes re-encodes to something that decodes to the same record.
                #expect(Self.same(try Self.roundTrip(record), record))
            } catch {
                rejected += 1
            }
        }
        #expect(decoded > 0 && rejected > 0)
    }
}
