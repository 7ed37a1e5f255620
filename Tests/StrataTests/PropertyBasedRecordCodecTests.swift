import Foundation
import PropertyBased
@_spi(StorageInternals) @testable import Strata
import Testing

// Property-based tests (x-sheep/swift-property-based) for the record codec; generators are in
// Fixtures/Generators.swift.
//
// Reproducing a failure: every run draws fresh random seeds, and a failing property reports
// its (shrunk) input followed by
//     Add `.fixedSeed("<32 bytes in base64>")` to the Test to reproduce this issue.
// Put that trait on the test, `@Test(.fixedSeed("…"))`, and the property runs exactly that
// one case again. (That trait reports an issue even when the case passes: never commit it.)
//
// Caution: PropertyBased 2.0.1 (with Swift 6.2 or later) ignores an error thrown out of a
// property's body; only recorded issues fail it. So the bodies catch every error and record
// it (`try #require` is fine: it records an issue before it throws).

@Suite("Record codec properties")
struct PropertyBasedRecordCodecTests {
    /// Decodes `bytes`, which must either work or throw a ``RecordDecodingError`` pointing
    /// inside the bytes. A record that decodes must re-encode to bytes that decode to the
    /// same record, and re-encoding that one must give the same bytes again. Without URLs
    /// (whose text `URL(string:)` may normalise, e.g. "a b" to "a%20b"), the encoding is
    /// canonical: whatever decodes re-encodes to exactly the same bytes, since the decoder
    /// refuses overlong varints, unordered fields and non-canonical decimals.
    @discardableResult
    static func expectTotalDecode(_ bytes: [UInt8]) -> Record? {
        let record: Record
        do {
            record = try RecordCodec.decode(bytes)
        } catch {
            #expect(error.offset >= 0 && error.offset <= bytes.count, "\(error) for \(bytes.count) bytes")
            return nil
        }
        if !record.fields.values.contains(where: { if case .uri = $0 { true } else { false } }) {
            #expect(RecordCodec.encode(record) == bytes, "\(bytes) decoded to \(record), which encodes differently")
        }
        let reencoded = RecordCodec.encode(record)
        do {
            let again = try RecordCodec.decode(reencoded)
            #expect(Strict.identical(again, record), "\(bytes) decoded to \(record), which re-encoded decodes to \(again)")
            #expect(RecordCodec.encode(again) == reencoded, "re-encoding \(record) is not stable")
        } catch {
            Issue.record("\(bytes) decoded to \(record), whose encoding \(reencoded) does not decode: \(error)")
        }
        return record
    }

    /// Property 1: decode(encode(r)) is r, bit for bit, for every kind of value.
    @Test func encodeThenDecodeIsTheIdentity() async {
        await propertyCheck(count: 500, input: PropertyGen.record) { record in
            let bytes = RecordCodec.encode(record)
            do {
                let decoded = try RecordCodec.decode(bytes)
                #expect(Strict.identical(decoded, record), "decoded \(decoded)")
                #expect(RecordCodec.encode(decoded) == bytes, "the encoding is deterministic")
            } catch {
                Issue.record("the encoding \(bytes) does not decode: \(error)")
            }
        }
    }

    /// Property 1, one value at a time (a focused, quickly shrinking counterexample).
    @Test func everySingleValueRoundTrips() async {
        await propertyCheck(count: 1000, input: PropertyGen.fieldNumber, PropertyGen.attributeValue) { number, value in
            let record = Record(version: 0, fields: [number: value])
            do {
                let decoded = try RecordCodec.decode(RecordCodec.encode(record))
                #expect(Strict.identical(decoded, record), "decoded \(decoded)")
            } catch {
                Issue.record("\(record) does not round-trip: \(error)")
            }
        }
    }

    /// Property 2: any bytes at all (unstructured, after a valid format byte, or shaped like
    /// fields with any tag) decode or throw; never trap.
    @Test func decodingAnyBytesNeverTraps() async {
        let chunk = zip(Gen.uint64(in: 0...40), Gen.uint64(in: 0...15), Gen.uint8(in: 0...24), PropertyGen.bytes(count: 0...20))
            .map { number, tag, length, payload in
                var bytes: [UInt8] = []
                RecordCodec.appendVarint(number << 4 | tag, to: &bytes)
                return bytes + [length] + payload
            }
        let noise = Gen<[UInt8]>.frequency(
            (1, PropertyGen.bytes(count: 0...48)),
            (1, PropertyGen.bytes(count: 0...48).map { [RecordCodec.formatVersion] + $0 }),
            (2, zip(PropertyGen.version, chunk.array(of: 0...5)).map { version, chunks in
                var bytes = [RecordCodec.formatVersion]
                RecordCodec.appendVarint(version, to: &bytes)
                return chunks.reduce(bytes, +)
            })
        )
        await propertyCheck(count: 1000, input: noise) { bytes in
            Self.expectTotalDecode(bytes)
        }
    }

    /// Property 2: a strict prefix of an encoding throws, or (cut between fields) decodes
    /// to the record's first fields, unchanged.
    @Test func truncatedEncodingsKeepOnlyWholeLeadingFields() async {
        await propertyCheck(count: 500, input: PropertyGen.record, Gen.double(in: 0...1)) { record, fraction in
            let full = RecordCodec.encode(record)
            let cut = Array(full.prefix(Int(Double(full.count - 1) * fraction)))
            guard let decoded = Self.expectTotalDecode(cut) else { return }
            let numbers = record.fields.keys.sorted()
            #expect(decoded.version == record.version)
            #expect(decoded.fields.count < numbers.count, "\(cut.count) of \(full.count) bytes decoded to the whole record")
            #expect(decoded.fields.keys.sorted() == Array(numbers.prefix(decoded.fields.count)))
            #expect(decoded.fields.allSatisfy { number, value in record.fields[number].map { Strict.identical(value, $0) } ?? false })
        }
    }

    /// A record's encoding split into its start (format byte and version) and its fields.
    static func parts(of record: Record) -> (start: [UInt8], fields: [[UInt8]]) {
        let start = RecordCodec.encode(Record(version: record.version, fields: [:]))
        var previous = start, fields: [[UInt8]] = [], partial: [UInt32: AttributeValue] = [:]
        for number in record.fields.keys.sorted() {
            partial[number] = record.fields[number]
            let next = RecordCodec.encode(Record(version: record.version, fields: partial))
            fields.append(Array(next[previous.count...]))
            previous = next
        }
        return (start, fields)
    }

    /// The same varint with one more, redundant, byte: its last byte continued, then 0x00.
    static func overlong(_ varint: some BidirectionalCollection<UInt8>) -> [UInt8] {
        Array(varint.dropLast()) + [varint.last! | 0x80, 0x00]
    }

    /// Property 2: the decoder refuses the non-canonical forms it documents, an overlong
    /// varint (the version or a field's head), a repeated field, fields out of order.
    @Test func nonCanonicalEncodingsAreRefused() async {
        await propertyCheck(count: 500, input: PropertyGen.record, Gen.int(in: 0...3), Gen.double(in: 0..<1)) { record, how, position in
            let (start, fields) = Self.parts(of: record)
            #expect(start + fields.joined() == RecordCodec.encode(record), "the encoding is the fields' encodings in order")
            let i = Int(Double(fields.count) * position)
            let bytes: [UInt8]
            switch (how, fields.count) {
            case (1, 1...):
                let headLength = (fields[i].firstIndex { $0 & 0x80 == 0 } ?? fields[i].count - 1) + 1
                var edited = fields
                edited[i] = Self.overlong(fields[i].prefix(headLength)) + fields[i].dropFirst(headLength)
                bytes = start + edited.joined()
            case (2, 1...):
                bytes = start + fields.joined() + fields[i]
            case (3, 2...):
                var edited = fields
                edited.swapAt(i, i == fields.count - 1 ? i - 1 : i + 1)
                bytes = start + edited.joined()
            default:
                bytes = [start[0]] + Self.overlong(start.dropFirst()) + fields.joined()
            }
            let decoded: Record
            do throws(RecordDecodingError) {
                decoded = try RecordCodec.decode(bytes)
            } catch {
                #expect(error.offset >= 0 && error.offset < bytes.count, "\(error)")
                return
            }
            Issue.record("\(bytes) decoded to \(decoded)")
        }
    }

    /// Property 2: flipping bits of one byte of an encoding gives bytes that decode or throw.
    @Test func mutatedEncodingsDecodeOrThrow() async {
        await propertyCheck(count: 1000, input: PropertyGen.record, Gen.double(in: 0..<1), Gen.uint8(in: 1...255)) { record, position, flip in
            var bytes = RecordCodec.encode(record)
            let index = min(Int(Double(bytes.count) * position), bytes.count - 1)
            bytes[index] ^= flip
            Self.expectTotalDecode(bytes)
        }
    }
}
