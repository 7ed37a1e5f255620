import Foundation

/// The kinds of value an index can hold, each with an order-preserving encoding.
enum IndexKeyKind: UInt8, Sendable, CaseIterable {
    case integer = 1, double, boolean, string, date, uuid, binaryData, uri
}

/// Why bytes could not be decoded as an index key.
struct IndexKeyDecodingError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What was wrong.
    let reason: String
    /// Where, as a byte offset into the key.
    let offset: Int

    var description: String { "invalid index key at byte \(offset): \(reason)" }
}

/// An order-preserving encoding of attribute values: for two values of one kind, the
/// byte-wise (memcmp) order of their encodings equals the values' natural order, so an
/// LMDB range scan over an index returns values in order.
///
/// Layout: one presence byte (`0x00` for nil, which sorts first; `0x01` for a value),
/// then the value:
/// - integers: the sign bit flipped, 8 bytes big-endian;
/// - doubles (and floats, dates as seconds since 2001): IEEE-754 bits, positive values
///   with the sign bit flipped, negative values with every bit inverted; `-0.0` is stored
///   as `0.0` (they compare equal) and every NaN as one NaN that sorts after `+infinity`;
/// - booleans: one byte, false before true;
/// - UUIDs: their 16 bytes;
/// - strings (UTF-8 bytes), URLs (their absolute string) and data: each `0x00` escaped as
///   `0x00 0xFF`, then the terminator `0x00 0x00`, so a value never compares past its end
///   into whatever follows it in the key (the primary key of the row).
///
/// Decoding is total: any byte string either decodes or throws
/// ``IndexKeyDecodingError``; it never traps or reads past the buffer.
enum IndexKeyEncoding {
    /// Appends the encoding of `value` (which must be of `kind`) to `bytes`.
    /// Returns false, appending nothing, when the value is not of that kind.
    @discardableResult
    static func append(_ value: AttributeValue?, as kind: IndexKeyKind, to bytes: inout [UInt8]) -> Bool {
        guard let value else {
            bytes.append(0x00)
            return true
        }
        switch (kind, value) {
        case (.integer, .integer(let integer)):
            bytes.append(0x01)
            appendBigEndian(UInt64(bitPattern: integer) ^ (1 << 63), to: &bytes)
        case (.double, .double(let double)):
            bytes.append(0x01)
            appendBigEndian(orderedBits(double), to: &bytes)
        case (.double, .float(let float)):
            bytes.append(0x01)
            appendBigEndian(orderedBits(Double(float)), to: &bytes)
        case (.date, .date(let date)):
            bytes.append(0x01)
            appendBigEndian(orderedBits(date.timeIntervalSinceReferenceDate), to: &bytes)
        case (.boolean, .boolean(let boolean)):
            bytes.append(0x01)
            bytes.append(boolean ? 1 : 0)
        case (.uuid, .uuid(let uuid)):
            bytes.append(0x01)
            withUnsafeBytes(of: uuid.uuid) { bytes.append(contentsOf: $0) }
        case (.string, .string(let string)):
            bytes.append(0x01)
            appendEscaped(string.utf8, to: &bytes)
        case (.uri, .uri(let url)):
            bytes.append(0x01)
            appendEscaped(url.absoluteString.utf8, to: &bytes)
        case (.binaryData, .binaryData(let data)):
            bytes.append(0x01)
            appendEscaped(data, to: &bytes)
        default:
            return false
        }
        return true
    }

    /// The encoding of one value on its own.
    static func encode(_ value: AttributeValue?, as kind: IndexKeyKind) -> [UInt8]? {
        var bytes: [UInt8] = []
        return append(value, as: kind, to: &bytes) ? bytes : nil
    }

    /// Decodes one value of `kind` starting at `offset`, and moves `offset` past it.
    static func decode(
        _ bytes: UnsafeRawBufferPointer, as kind: IndexKeyKind, at offset: inout Int
    ) throws(IndexKeyDecodingError) -> AttributeValue? {
        guard offset >= 0, offset < bytes.count else {
            throw IndexKeyDecodingError(reason: "the key ends before the value", offset: offset)
        }
        let presence = bytes[offset]
        switch presence {
        case 0x00:
            offset += 1
            return nil
        case 0x01:
            offset += 1
        default:
            throw IndexKeyDecodingError(reason: "presence byte \(presence) is neither 0 nor 1", offset: offset)
        }
        switch kind {
        case .integer:
            let bits = try readBigEndian(bytes, at: &offset)
            return .integer(Int64(bitPattern: bits ^ (1 << 63)))
        case .double:
            return .double(try readOrderedDouble(bytes, at: &offset))
        case .date:
            return .date(Date(timeIntervalSinceReferenceDate: try readOrderedDouble(bytes, at: &offset)))
        case .boolean:
            guard offset < bytes.count else {
                throw IndexKeyDecodingError(reason: "a boolean needs 1 byte", offset: offset)
            }
            let byte = bytes[offset]
            guard byte <= 1 else { throw IndexKeyDecodingError(reason: "boolean byte \(byte)", offset: offset) }
            offset += 1
            return .boolean(byte == 1)
        case .uuid:
            guard bytes.count - offset >= 16 else {
                throw IndexKeyDecodingError(reason: "a UUID needs 16 bytes", offset: offset)
            }
            var raw: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            withUnsafeMutableBytes(of: &raw) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + 16])) }
            offset += 16
            return .uuid(UUID(uuid: raw))
        case .string:
            let start = offset
            let raw = try readEscaped(bytes, at: &offset)
            guard let string = raw.withUnsafeBytes({ RecordCodec.validatedString($0) }) else {
                throw IndexKeyDecodingError(reason: "the string is not valid UTF-8", offset: start)
            }
            return .string(string)
        case .uri:
            let start = offset
            let raw = try readEscaped(bytes, at: &offset)
            guard let string = raw.withUnsafeBytes({ RecordCodec.validatedString($0) }), let url = URL(string: string) else {
                throw IndexKeyDecodingError(reason: "the URL is not valid", offset: start)
            }
            return .uri(url)
        case .binaryData:
            return .binaryData(Data(try readEscaped(bytes, at: &offset)))
        }
    }

    // MARK: Pieces

    /// IEEE-754 bits rearranged so that unsigned order is numeric order.
    static func orderedBits(_ value: Double) -> UInt64 {
        let canonical = value.isNaN ? Double.nan : (value == 0 ? 0.0 : value)
        let bits = canonical.bitPattern
        return bits & (1 << 63) == 0 ? bits | (1 << 63) : ~bits
    }

    private static func readOrderedDouble(_ bytes: UnsafeRawBufferPointer, at offset: inout Int) throws(IndexKeyDecodingError) -> Double {
        double(orderedBits: try readBigEndian(bytes, at: &offset))
    }

    /// The double whose ``orderedBits(_:)`` are `ordered`.
    @inline(__always)
    static func double(orderedBits ordered: UInt64) -> Double {
        Double(bitPattern: ordered & (1 << 63) != 0 ? ordered & ~(1 << 63) : ~ordered)
    }

    private static func appendBigEndian(_ value: UInt64, to bytes: inout [UInt8]) {
        withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) }
    }

    private static func readBigEndian(_ bytes: UnsafeRawBufferPointer, at offset: inout Int) throws(IndexKeyDecodingError) -> UInt64 {
        guard bytes.count - offset >= 8 else {
            throw IndexKeyDecodingError(reason: "an 8-byte number is cut short", offset: offset)
        }
        let value = UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
        offset += 8
        return value
    }

    private static func appendEscaped<Bytes: Sequence<UInt8>>(_ source: Bytes, to bytes: inout [UInt8]) {
        for byte in source {
            bytes.append(byte)
            if byte == 0x00 { bytes.append(0xFF) }
        }
        bytes.append(0x00)
        bytes.append(0x00)
    }

    private static func readEscaped(_ bytes: UnsafeRawBufferPointer, at offset: inout Int) throws(IndexKeyDecodingError) -> [UInt8] {
        var result: [UInt8] = []
        var index = offset
        while index < bytes.count {
            let byte = bytes[index]
            if byte != 0x00 {
                result.append(byte)
                index += 1
                continue
            }
            guard index + 1 < bytes.count else { break }
            switch bytes[index + 1] {
            case 0x00:
                offset = index + 2
                return result
            case 0xFF:
                result.append(0x00)
                index += 2
            default:
                throw IndexKeyDecodingError(reason: "0x00 followed by \(bytes[index + 1]) is not an escape", offset: index)
            }
        }
        throw IndexKeyDecodingError(reason: "the value has no terminator", offset: offset)
    }
}
