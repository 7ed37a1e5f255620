import Foundation

/// One stored row: its version (bumped on every write, for optimistic locking) and its
/// non-nil field values by field number.
///
/// Field numbers are stable per attribute (the store assigns them and records them in its
/// metadata), so a field the current model does not know, written by a newer or older
/// model, is kept and ignored instead of breaking the decode.
@_spi(StorageInternals)
public struct Record: Sendable, Hashable {
    /// The row version.
    public var version: UInt64
    /// The non-nil values, by field number. A missing field is nil.
    public var fields: [UInt32: AttributeValue]

    /// A record.
    public init(version: UInt64, fields: [UInt32: AttributeValue]) {
        self.version = version
        self.fields = fields
    }
}

/// Why bytes could not be decoded as a record.
@_spi(StorageInternals)
public struct RecordDecodingError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What was wrong.
    public let reason: String
    /// Where, as a byte offset into the record.
    public let offset: Int

    /// `invalid record at byte N: reason`.
    public var description: String { "invalid record at byte \(offset): \(reason)" }
}

/// The binary record format, version 1.
///
/// ```
/// record  := 0x01 varint(version) field*
/// field   := varint(number << 4 | tag) payload        fields in increasing number order
/// payload := integer: zigzag varint        double: 8 bytes LE     float: 4 bytes LE
///            false/true: nothing           date: 8-byte LE double (seconds since 2001)
///            uuid: 16 bytes                string, data, uri, decimal, transformable:
///                                          varint(length) bytes (decimal as its text)
/// ```
///
/// Decoding is total: any byte string gives a ``Record`` or a ``RecordDecodingError``;
/// it never traps, never reads past the buffer, and rejects duplicate or unordered field
/// numbers, unknown tags, overlong varints, invalid UTF-8, URLs and decimals.
@_spi(StorageInternals)
public enum RecordCodec {
    /// The format version byte.
    public static let formatVersion: UInt8 = 1
    /// The largest field number.
    public static let maximumFieldNumber: UInt32 = (1 << 28) - 1

    enum Tag: UInt8, Sendable {
        case integer = 1, double, float, falseValue, trueValue, string, date, binaryData, uuid, uri, decimal, transformable
    }

    /// Encodes a record. Field numbers above ``maximumFieldNumber`` are a programming error.
    public static func encode(_ record: Record) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(16 + record.fields.count * 12)
        appendHeader(version: record.version, to: &bytes)
        for number in record.fields.keys.sorted() {
            appendField(number, record.fields[number]!, to: &bytes)
        }
        return bytes
    }

    /// Appends the format byte and `version`: what a record starts with.
    static func appendHeader(version: UInt64, to bytes: inout [UInt8]) {
        bytes.append(formatVersion)
        appendVarint(version, to: &bytes)
    }

    /// Appends field `number` holding `value`. Fields must be appended in increasing
    /// number order; a number above ``maximumFieldNumber`` is a programming error.
    static func appendField(_ number: UInt32, _ value: AttributeValue, to bytes: inout [UInt8]) {
        precondition(number <= maximumFieldNumber, "field number \(number) is out of range")
        @inline(__always) func head(_ tag: Tag) { appendVarint(UInt64(number) << 4 | UInt64(tag.rawValue), to: &bytes) }
        switch value {
        case .integer(let n):
            appendInteger(number, n, to: &bytes)
        case .double(let d):
            appendDouble(number, d, to: &bytes)
        case .float(let f):
            head(.float)
            withUnsafeBytes(of: f.bitPattern.littleEndian) { bytes.append(contentsOf: $0) }
        case .boolean(let b):
            head(b ? .trueValue : .falseValue)
        case .string(let s):
            appendString(number, s, to: &bytes)
        case .date(let date):
            appendDate(number, date, to: &bytes)
        case .binaryData(let data):
            head(.binaryData)
            appendLengthPrefixed(data, to: &bytes)
        case .uuid(let uuid):
            head(.uuid)
            withUnsafeBytes(of: uuid.uuid) { bytes.append(contentsOf: $0) }
        case .uri(let url):
            head(.uri)
            appendLengthPrefixed(url.absoluteString.utf8, to: &bytes)
        case .decimal(let decimal):
            head(.decimal)
            appendLengthPrefixed(decimal.description.utf8, to: &bytes)
        case .transformable(let data):
            head(.transformable)
            appendLengthPrefixed(data, to: &bytes)
        }
    }

    /// Appends an `integer` field (zigzag varint): what ``appendField(_:_:to:)`` writes for
    /// ``AttributeValue/integer(_:)``, for encoders that hold the value unboxed.
    @inline(__always)
    static func appendInteger(_ number: UInt32, _ n: Int64, to bytes: inout [UInt8]) {
        appendVarint(UInt64(number) << 4 | UInt64(Tag.integer.rawValue), to: &bytes)
        appendVarint(UInt64(bitPattern: (n << 1) ^ (n >> 63)), to: &bytes)
    }

    /// Appends a `double` field (8 bytes, little-endian).
    @inline(__always)
    static func appendDouble(_ number: UInt32, _ d: Double, to bytes: inout [UInt8]) {
        appendVarint(UInt64(number) << 4 | UInt64(Tag.double.rawValue), to: &bytes)
        withUnsafeBytes(of: d.bitPattern.littleEndian) { bytes.append(contentsOf: $0) }
    }

    /// Appends a `date` field (its seconds since 2001 as a double).
    @inline(__always)
    static func appendDate(_ number: UInt32, _ date: Date, to bytes: inout [UInt8]) {
        appendVarint(UInt64(number) << 4 | UInt64(Tag.date.rawValue), to: &bytes)
        withUnsafeBytes(of: date.timeIntervalSinceReferenceDate.bitPattern.littleEndian) { bytes.append(contentsOf: $0) }
    }

    /// Appends a `string` field (length-prefixed UTF-8).
    @inline(__always)
    static func appendString(_ number: UInt32, _ string: String, to bytes: inout [UInt8]) {
        appendVarint(UInt64(number) << 4 | UInt64(Tag.string.rawValue), to: &bytes)
        var string = string
        // Native strings hand out their UTF-8 bytes contiguously: one copy.
        string.withUTF8 { appendLengthPrefixed(UnsafeRawBufferPointer($0), to: &bytes) }
    }

    /// Decodes a record from any bytes.
    public static func decode(_ bytes: UnsafeRawBufferPointer) throws(RecordDecodingError) -> Record {
        var reader = Reader(bytes)
        let version = try reader.header()
        var fields: [UInt32: AttributeValue] = [:]
        while let (number, tag) = try reader.nextField() {
            fields[number] = try reader.value(tag)
        }
        return Record(version: version, fields: fields)
    }

    /// Decodes a record field by field: calls `body` with each field's number and value,
    /// in order, and returns the record's version. The same checks as ``decode(_:)-(UnsafeRawBufferPointer)``;
    /// a failing one throws what `corrupt` makes of it.
    static func forEachField(
        _ bytes: UnsafeRawBufferPointer, corrupt: (RecordDecodingError) -> StrataError,
        _ body: (UInt32, AttributeValue) throws(StrataError) -> Void
    ) throws(StrataError) -> UInt64 {
        var reader = Reader(bytes)
        let version: UInt64
        do {
            version = try reader.header()
        } catch {
            throw corrupt(error)
        }
        while true {
            let value: AttributeValue
            let number: UInt32
            do {
                guard let (field, tag) = try reader.nextField() else { return version }
                number = field
                value = try reader.value(tag)
            } catch {
                throw corrupt(error)
            }
            try body(number, value)
        }
    }

    /// Reads a record: its header, then each field's number and tag, then its value
    /// (as an ``AttributeValue``, or as the Swift value a typed field holds). The same
    /// checks as ``decode(_:)-(UnsafeRawBufferPointer)``; a value must be read before
    /// the next field.
    struct Reader {
        let bytes: UnsafeRawBufferPointer
        private(set) var offset = 0
        private var previous: Int64 = -1

        init(_ bytes: UnsafeRawBufferPointer) {
            self.bytes = bytes
        }

        /// The record's version.
        mutating func header() throws(RecordDecodingError) -> UInt64 {
            guard let first = bytes.first else { throw RecordDecodingError(reason: "the record is empty", offset: 0) }
            guard first == formatVersion else {
                throw RecordDecodingError(reason: "unknown format version \(first)", offset: 0)
            }
            offset = 1
            return try readVarint(bytes, at: &offset)
        }

        /// The next field's number and tag; nil at the end of the record.
        @inline(__always)
        mutating func nextField() throws(RecordDecodingError) -> (UInt32, Tag)? {
            guard offset < bytes.count else { return nil }
            let start = offset
            let head = try readVarint(bytes, at: &offset)
            guard head >> 4 <= UInt64(maximumFieldNumber) else {
                throw RecordDecodingError(reason: "field number \(head >> 4) is out of range", offset: start)
            }
            let number = UInt32(head >> 4)
            guard Int64(number) > previous else {
                throw RecordDecodingError(reason: "field \(number) is repeated or out of order", offset: start)
            }
            previous = Int64(number)
            guard let tag = Tag(rawValue: UInt8(head & 0xF)) else {
                throw RecordDecodingError(reason: "unknown value tag \(head & 0xF)", offset: start)
            }
            return (number, tag)
        }

        /// The value of a field with `tag`.
        mutating func value(_ tag: Tag) throws(RecordDecodingError) -> AttributeValue {
            try readValue(tag, bytes, at: &offset)
        }

        /// Steps over the value of a field with `tag` without decoding it (its bytes are
        /// checked to be there, not checked for content).
        mutating func skip(_ tag: Tag) throws(RecordDecodingError) {
            switch tag {
            case .integer: _ = try readVarint(bytes, at: &offset)
            case .double, .date: _ = try readFixed(bytes, at: &offset, as: UInt64.self)
            case .float: _ = try readFixed(bytes, at: &offset, as: UInt32.self)
            case .falseValue, .trueValue: break
            case .uuid:
                guard bytes.count - offset >= 16 else { throw RecordDecodingError(reason: "a UUID needs 16 bytes", offset: offset) }
                offset += 16
            case .string, .uri, .decimal, .binaryData, .transformable: _ = try readLengthPrefixed(bytes, at: &offset)
            }
        }

        /// The value of an `integer` field.
        mutating func integer() throws(RecordDecodingError) -> Int64 {
            let raw = try readVarint(bytes, at: &offset)
            return Int64(bitPattern: raw >> 1) ^ -Int64(bitPattern: raw & 1)
        }

        /// The value of a `double` or `date` field (a date as its seconds since 2001).
        mutating func double() throws(RecordDecodingError) -> Double {
            Double(bitPattern: try readFixed(bytes, at: &offset, as: UInt64.self))
        }

        /// The value of a `string` field.
        mutating func string() throws(RecordDecodingError) -> String {
            try readText(bytes, at: &offset, what: "string")
        }
    }

    /// The version in a record's header, without decoding its fields.
    static func version(of bytes: UnsafeRawBufferPointer) throws(RecordDecodingError) -> UInt64 {
        guard let first = bytes.first else { throw RecordDecodingError(reason: "the record is empty", offset: 0) }
        guard first == formatVersion else {
            throw RecordDecodingError(reason: "unknown format version \(first)", offset: 0)
        }
        var offset = 1
        return try readVarint(bytes, at: &offset)
    }

    /// Decodes a record from an array of bytes.
    public static func decode(_ bytes: [UInt8]) throws(RecordDecodingError) -> Record {
        do {
            return try bytes.withUnsafeBytes { buffer in try decode(buffer) }
        } catch let error as RecordDecodingError {
            throw error
        } catch {
            throw RecordDecodingError(reason: "\(error)", offset: 0)
        }
    }

    // MARK: Values

    fileprivate static func readValue(_ tag: Tag, _ bytes: UnsafeRawBufferPointer, at offset: inout Int) throws(RecordDecodingError) -> AttributeValue {
        switch tag {
        case .integer:
            let raw = try readVarint(bytes, at: &offset)
            return .integer(Int64(bitPattern: raw >> 1) ^ -Int64(bitPattern: raw & 1))
        case .double:
            return .double(Double(bitPattern: try readFixed(bytes, at: &offset, as: UInt64.self)))
        case .float:
            return .float(Float(bitPattern: try readFixed(bytes, at: &offset, as: UInt32.self)))
        case .falseValue:
            return .boolean(false)
        case .trueValue:
            return .boolean(true)
        case .date:
            return .date(Date(timeIntervalSinceReferenceDate: Double(bitPattern: try readFixed(bytes, at: &offset, as: UInt64.self))))
        case .uuid:
            let start = offset
            guard bytes.count - offset >= 16 else { throw RecordDecodingError(reason: "a UUID needs 16 bytes", offset: start) }
            var raw: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            withUnsafeMutableBytes(of: &raw) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[start..<start + 16])) }
            offset += 16
            return .uuid(UUID(uuid: raw))
        case .string:
            return .string(try readText(bytes, at: &offset, what: "string"))
        case .uri:
            let start = offset
            let text = try readText(bytes, at: &offset, what: "URL")
            guard let url = URL(string: text) else { throw RecordDecodingError(reason: "the URL is not valid", offset: start) }
            return .uri(url)
        case .decimal:
            let start = offset
            let text = try readText(bytes, at: &offset, what: "decimal")
            if text == "NaN" { return .decimal(.nan) }
            guard let decimal = Decimal(string: text, locale: Locale(identifier: "en_US_POSIX")), decimal.description == text else {
                throw RecordDecodingError(reason: "'\(text.prefix(40))' is not a decimal number", offset: start)
            }
            return .decimal(decimal)
        case .binaryData:
            return .binaryData(Data(try readLengthPrefixed(bytes, at: &offset)))
        case .transformable:
            return .transformable(Data(try readLengthPrefixed(bytes, at: &offset)))
        }
    }

    fileprivate static func readText(_ bytes: UnsafeRawBufferPointer, at offset: inout Int, what: String) throws(RecordDecodingError) -> String {
        let start = offset
        let raw = try readLengthPrefixed(bytes, at: &offset)
        guard let text = validatedString(raw) else {
            throw RecordDecodingError(reason: "the \(what) is not valid UTF-8", offset: start)
        }
        return text
    }

    /// `bytes` as a string when they are valid UTF-8, else nil. ASCII, the common case,
    /// is checked a word at a time and decoded without validation; other text is decoded
    /// with repair and accepted only when nothing was repaired. (`String(validating:as:)`
    /// is generic and cost several times the whole decode of a small record.)
    static func validatedString(_ bytes: UnsafeRawBufferPointer) -> String? {
        var index = 0
        var high: UInt64 = 0
        while index + 8 <= bytes.count {
            high |= bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            index += 8
        }
        while index < bytes.count {
            high |= UInt64(bytes[index])
            index += 1
        }
        let text = String(decoding: bytes, as: UTF8.self)
        if high & 0x8080_8080_8080_8080 == 0 { return text }
        // Repaired bytes (U+FFFD) change the encoding: invalid input never round-trips.
        var copy = text
        let valid = copy.withUTF8 { $0.count == bytes.count && memcmp($0.baseAddress!, bytes.baseAddress!, bytes.count) == 0 }
        return valid ? text : nil
    }

    fileprivate static func readFixed<T: FixedWidthInteger>(_ bytes: UnsafeRawBufferPointer, at offset: inout Int, as: T.Type) throws(RecordDecodingError) -> T {
        guard bytes.count - offset >= MemoryLayout<T>.size else {
            throw RecordDecodingError(reason: "a \(MemoryLayout<T>.size)-byte value is cut short", offset: offset)
        }
        let value = T(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: T.self))
        offset += MemoryLayout<T>.size
        return value
    }

    fileprivate static func readLengthPrefixed(_ bytes: UnsafeRawBufferPointer, at offset: inout Int) throws(RecordDecodingError) -> UnsafeRawBufferPointer {
        let start = offset
        let length = try readVarint(bytes, at: &offset)
        guard length <= UInt64(bytes.count - offset) else {
            throw RecordDecodingError(reason: "a length of \(length) runs past the end", offset: start)
        }
        let slice = UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + Int(length)])
        offset += Int(length)
        return slice
    }

    // MARK: Varints (LEB128, at most 10 bytes, no overlong forms)

    static func appendVarint(_ value: UInt64, to bytes: inout [UInt8]) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }

    @inline(__always)
    static func readVarint(_ bytes: UnsafeRawBufferPointer, at offset: inout Int) throws(RecordDecodingError) -> UInt64 {
        // One byte (values below 128: field heads, small numbers, short lengths) inline.
        if _fastPath(offset < bytes.count) {
            let byte = bytes[offset]
            if byte < 0x80 {
                offset += 1
                return UInt64(byte)
            }
        }
        return try readLongVarint(bytes, at: &offset)
    }

    /// ``readVarint(_:at:)`` of a number of more than one byte (or cut short).
    @inline(never)
    private static func readLongVarint(_ bytes: UnsafeRawBufferPointer, at offset: inout Int) throws(RecordDecodingError) -> UInt64 {
        let start = offset
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            guard offset < bytes.count else { throw RecordDecodingError(reason: "a number is cut short", offset: start) }
            let byte = bytes[offset]
            offset += 1
            if shift == 63 && byte > 1 { throw RecordDecodingError(reason: "a number exceeds 64 bits", offset: start) }
            value |= UInt64(byte & 0x7F) << shift
            if byte & 0x80 == 0 {
                if byte == 0 && shift > 0 { throw RecordDecodingError(reason: "a number has an overlong encoding", offset: start) }
                return value
            }
            shift += 7
        }
    }

    private static func appendLengthPrefixed<Bytes: Collection<UInt8>>(_ source: Bytes, to bytes: inout [UInt8]) {
        appendVarint(UInt64(source.count), to: &bytes)
        bytes.append(contentsOf: source)
    }
}
