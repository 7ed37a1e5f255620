import Foundation
import PropertyBased
@_spi(StorageInternals) @testable import Strata

/// Generators for the property-based tests (`PropertyBased*.swift`), built from
/// PropertyBased's `Gen` so that a failing input shrinks.
///
/// Each generator mixes values drawn from the whole domain with a fixed list of edge
/// cases (0, the extremes, -0, NaN, subnormals, empty, NUL bytes, non-ASCII text…), so the
/// edges come up in every run and not only when the random draw happens to hit them.
enum PropertyGen {
    /// One of a fixed list of edge cases.
    static func edge<T: Sendable>(_ values: [T]) -> Generator<T, Shrink.None<T?>> {
        Gen<T?>.element(of: values).map { $0! }
    }

    // MARK: Numbers

    /// Every Int64: uniform, small, near the varint length boundaries, and the extremes.
    static let int64 = Gen<Int64>.frequency(
        (4, Gen.int64()),
        (2, Gen.int64(in: -300...300)),
        (1, zip(Gen.int(in: 0...62), Gen.int64(in: -1...1), Gen.bool).map { shift, delta, negative in
            let value = (Int64(1) << shift) + delta
            return negative ? -value : value
        }),
        (1, edge([Int64.min, .min + 1, -1, 0, 1, .max - 1, .max]))
    )

    static let specialDoubles: [Double] = [
        0, -0.0, 1, -1, 0.1, .pi, .ulpOfOne, .infinity, -.infinity,
        .nan, -.nan, .signalingNaN, Double(bitPattern: 0x7FF8_0000_DEAD_BEEF), Double(bitPattern: 0xFFF0_0000_0000_0001),
        .leastNonzeroMagnitude, -.leastNonzeroMagnitude, .leastNormalMagnitude, -.leastNormalMagnitude,
        Double.leastNormalMagnitude.nextDown, .greatestFiniteMagnitude, -.greatestFiniteMagnitude,
    ]

    /// Every Double: any bit pattern (every exponent, NaN payloads), ordinary values,
    /// subnormals of either sign and the special values.
    static let double = Gen<Double>.frequency(
        (3, Gen.uint64().map { Double(bitPattern: $0) }),
        (2, Gen.double(in: -1e6...1e6)),
        (1, zip(Gen.uint64(in: 1...(1 << 52) - 1), Gen.bool).map { bits, negative in
            Double(bitPattern: bits | (negative ? 1 << 63 : 0))
        }),
        (2, edge(specialDoubles))
    )

    static let specialFloats: [Float] = [
        0, -0.0, 1, -1.5, 0.1, .infinity, -.infinity, .nan, -.nan, .signalingNaN, Float(bitPattern: 0x7FC0_BEEF),
        .leastNonzeroMagnitude, -.leastNonzeroMagnitude, .leastNormalMagnitude, Float.leastNormalMagnitude.nextDown,
        .greatestFiniteMagnitude, -.greatestFiniteMagnitude,
    ]

    /// Every Float, like ``double``.
    static let float = Gen<Float>.frequency(
        (3, Gen.uint32().map { Float(bitPattern: $0) }),
        (2, Gen.float(in: -1e6...1e6)),
        (1, zip(Gen.uint32(in: 1...(1 << 23) - 1), Gen.bool).map { bits, negative in
            Float(bitPattern: bits | (negative ? 1 << 31 : 0))
        }),
        (2, edge(specialFloats))
    )

    /// Finite decimals: up to 38 significant digits, either sign, exponents -128...127.
    static let decimal = Gen<Decimal>.frequency(
        (4, zip(Gen.number.string(of: 1...38), Gen.int(in: -128...127), Gen.bool).compactMap { digits, exponent, negative in
            guard let significand = Decimal(string: digits, locale: Locale(identifier: "en_US_POSIX")) else { return nil }
            let value = Decimal(sign: negative ? .minus : .plus, exponent: exponent, significand: significand)
            return value.isNaN ? nil : value
        }),
        (1, edge([
            Decimal(0), Decimal(-1), Decimal(string: "0.1")!, Decimal(string: "-123.456")!, Decimal(UInt64.max),
            .greatestFiniteMagnitude, .leastFiniteMagnitude, .leastNonzeroMagnitude,
        ]))
    )

    // MARK: Text and bytes

    static let interestingScalars: [Unicode.Scalar] = [
        "\0", "a", "b", "z", "A", " ", "~", "\u{7F}", "\u{80}", "é", "e", "\u{301}", "ß", "Ж", "ا", "日", "本",
        "😀", "\u{1F1EB}", "\u{1F1F7}", "\u{200D}", "\u{FEFF}", "\u{FFFD}", "\u{FFFF}", "\u{10FFFF}", "\r", "\n",
    ]

    /// Any Unicode scalar, often NUL, ASCII, combining marks, emoji or other multi-byte ones.
    static let scalar = Gen<Unicode.Scalar>.frequency(
        (4, edge(interestingScalars)),
        (2, Gen.uint32(in: 0...0x7F).map { Unicode.Scalar($0)! }),
        (1, Gen.uint32(in: 0...0x10FFFF).compactMap { Unicode.Scalar($0) })  // skips surrogates
    )

    /// Strings of any scalars (so also lone combining marks and embedded NULs).
    static func string(length: ClosedRange<Int> = 0...12) -> Generator<String, some SendableSequenceType> {
        scalar.array(of: length).map { String(String.UnicodeScalarView($0)) }
    }

    /// A byte, often 0x00 or 0xFF (the index encoding's escape bytes).
    static let byte = Gen<UInt8>.frequency((3, Gen.uint8()), (2, edge([0x00, 0xFF, 0x01, 0xFE])))

    static func bytes(count: ClosedRange<Int> = 0...24) -> Generator<[UInt8], some SendableSequenceType> {
        byte.array(of: count)
    }

    static let data: Generator<Data, some SendableSequenceType> = bytes().map { Data($0) }

    // MARK: Foundation values

    /// Dates: ordinary ones, any Double as an interval (so ±infinity and NaN too), and
    /// the distant past and future.
    static let date = Gen<Date>.frequency(
        (3, Gen.double(in: -1e10...1e10).map { Date(timeIntervalSinceReferenceDate: $0) }),
        (1, double.map { Date(timeIntervalSinceReferenceDate: $0) }),
        (1, edge([
            Date.distantPast, .distantFuture, Date(timeIntervalSinceReferenceDate: 0), Date(timeIntervalSinceReferenceDate: -0.0),
            Date(timeIntervalSince1970: 0), Date(timeIntervalSinceReferenceDate: -0.001),
        ]))
    )

    static func uuid(_ bytes: [UInt8]) -> UUID {
        var raw: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &raw) { $0.copyBytes(from: bytes.prefix(16)) }
        return UUID(uuid: raw)
    }

    static let uuidBytes = Gen<[UInt8]>.frequency(
        (6, Gen.uint8().array(of: 16)),
        (1, edge([[UInt8](repeating: 0, count: 16), [UInt8](repeating: 0xFF, count: 16)]))
    )

    static let uuid = uuidBytes.map { uuid($0) }

    static let urlSchemes = ["https", "http", "HTTP", "file", "x-strata", "mailto", "urn", "data", "a+b.c-d"]
    static let urlAuthorities = [
        "", "example.com", "EXAMPLE.com", "h", "127.0.0.1", "[::1]", "user@host", "user:pw@host", "host:8080", "xn--9ca.com", "é.com",
    ]
    static let urlSegments = [
        "", "a", "b", "x y", "%20", "%C3%A9", "é", "日本", "..", ".", "~user", "a+b", "a;b=c", "@", ":", "%", "%2F",
        "😀", "A-Z_0.9", "%00",
    ]

    /// A URL that survives `URL(string: url.absoluteString)` unchanged, or nil.
    static func roundTrippingURL(_ text: String) -> URL? {
        guard let url = URL(string: text), let again = URL(string: url.absoluteString),
              again == url, again.absoluteString == url.absoluteString
        else { return nil }
        return url
    }

    static let urlPath = edge(urlSegments).array(of: 0...4).map { $0.joined(separator: "/") }

    /// URLs (hierarchical, opaque, relative and file URLs) that round-trip through
    /// `URL(string:)`, the only ones a store can keep.
    static let url = Gen<URL>.frequency(
        (4, zip(edge(urlSchemes), edge(urlAuthorities), urlPath, edge(["", "?", "?q=1", "?q=é&r=%20", "?a=b;c"]),
                edge(["", "#", "#frag", "#é"]), Gen.int(in: 0...2))
            .compactMap { scheme, authority, path, query, fragment, form in
                let text = switch form {
                case 0: "\(scheme)://\(authority)/\(path)\(query)\(fragment)"
                case 1: "\(scheme):\(path)\(query)\(fragment)"
                default: "\(path)\(query)\(fragment)"
                }
                return roundTrippingURL(text)
            }),
        (1, urlPath.compactMap { path in
            roundTrippingURL(URL(fileURLWithPath: "/" + path, isDirectory: false).absoluteString)
        })
    )

    // MARK: Attribute values and records

    /// Any attribute value, every case equally likely.
    static let attributeValue = Gen<AttributeValue>.oneOf(
        int64.map { AttributeValue.integer($0) },
        double.map { AttributeValue.double($0) },
        float.map { AttributeValue.float($0) },
        Gen.bool.map { AttributeValue.boolean($0) },
        string().map { AttributeValue.string($0) },
        date.map { AttributeValue.date($0) },
        data.map { AttributeValue.binaryData($0) },
        uuid.map { AttributeValue.uuid($0) },
        url.map { AttributeValue.uri($0) },
        decimal.map { AttributeValue.decimal($0) },
        data.map { AttributeValue.transformable($0) }
    )

    /// Field numbers 1...maximumFieldNumber, often small, often on a varint boundary.
    static let fieldNumber = Gen<UInt32>.frequency(
        (3, Gen.uint32(in: 1...40)),
        (2, Gen.uint32(in: 1...RecordCodec.maximumFieldNumber)),
        (1, edge([1, 7, 8, 1023, 1024, RecordCodec.maximumFieldNumber - 1, RecordCodec.maximumFieldNumber]))
    )

    /// Row versions: any UInt64, often small, 0 and UInt64.max included.
    static let version = Gen<UInt64>.frequency(
        (3, Gen.uint64()),
        (2, Gen.uint64(in: 0...300)),
        (1, edge([0, 1, 127, 128, 1 << 63, .max - 1, .max]))
    )

    /// Records of up to 10 fields of any kinds.
    static let record = zip(version, zip(fieldNumber, attributeValue).array(of: 0...10)).map { version, fields in
        Record(version: version, fields: Dictionary(fields, uniquingKeysWith: { first, _ in first }))
    }

    // MARK: Identities

    /// Primary keys 1...UInt64.max, often small or near a byte boundary.
    static let primaryKey = Gen<UInt64>.frequency(
        (3, Gen.uint64(in: 1 ... .max)),
        (2, Gen.uint64(in: 1...1000)),
        (1, edge([1, 2, 255, 256, 1 << 32, (1 << 63) - 1, 1 << 63, .max - 1, .max]))
    ).map { PrimaryKey($0)! }

    /// Alphabetic scalars, including combining marks (U+0345, U+093E) and a "prepend" letter
    /// (U+0D4E), which join the characters around them into one grapheme cluster.
    static let letterScalars: [Unicode.Scalar] = [
        "a", "z", "A", "Z", "é", "ß", "Ж", "ж", "ا", "日", "本", "Ω", "ǅ", "ﬀ", "ª", "ℕ", "𝔸", "ⅷ", "ー", "ก", "한",
        "\u{0345}", "\u{093E}", "\u{0D4E}",
    ]

    /// Letters as `isAlphabetic` defines them, ASCII or not.
    static let letter = Gen<Unicode.Scalar>.frequency(
        (3, edge(letterScalars)),
        (3, Gen.uint32(in: 0x61...0x7A).map { Unicode.Scalar($0)! }),
        (1, Gen.uint32(in: 0x80...0x3FFFF).compactMap { Unicode.Scalar($0) }.filter { $0.properties.isAlphabetic })
    )

    /// Entity names as the model accepts them: a letter or `_`, then letters, ASCII digits and `_`.
    static let entityName = zip(
        Gen<Unicode.Scalar>.frequency((6, letter), (1, edge(["_"]))),
        Gen<Unicode.Scalar>.frequency((6, letter), (2, Gen.uint32(in: 0x30...0x39).map { Unicode.Scalar($0)! }), (1, edge(["_"])))
            .array(of: 0...10)
    ).map { first, rest in String(String.UnicodeScalarView([first] + rest)) }

    /// Whether `/name/` keeps its slashes as characters of their own: not so when the name
    /// starts with a combining mark or ends with a prepend letter (see
    /// PropertyBasedManagedObjectIDTests.swift: such names break `ManagedObjectID`'s URI parser).
    static func slashesStayApart(_ name: String) -> Bool {
        let characters = Array("/\(name)/")
        return characters.first == "/" && characters.last == "/"
    }

    /// ``entityName`` without the names that `slashesStayApart` refuses.
    static let uriSafeEntityName = entityName.filter { slashesStayApart($0) }
}

// MARK: Strict comparisons

/// Equality without the leniencies of `==`: floating-point values by bit pattern (so NaN
/// equals itself and -0 differs from 0), strings by their UTF-8 bytes (not canonical
/// equivalence), URLs by their text too, decimals by value and by text.
enum Strict {
    static func identical(_ a: AttributeValue, _ b: AttributeValue) -> Bool {
        switch (a, b) {
        case let (.integer(x), .integer(y)): x == y
        case let (.double(x), .double(y)): x.bitPattern == y.bitPattern
        case let (.float(x), .float(y)): x.bitPattern == y.bitPattern
        case let (.boolean(x), .boolean(y)): x == y
        case let (.string(x), .string(y)): x.utf8.elementsEqual(y.utf8)
        case let (.date(x), .date(y)): x.timeIntervalSinceReferenceDate.bitPattern == y.timeIntervalSinceReferenceDate.bitPattern
        case let (.binaryData(x), .binaryData(y)): x == y
        case let (.uuid(x), .uuid(y)): x == y
        case let (.uri(x), .uri(y)): x == y && x.absoluteString == y.absoluteString
        case let (.decimal(x), .decimal(y)): x.description == y.description && (x.isNaN ? y.isNaN : x == y)
        case let (.transformable(x), .transformable(y)): x == y
        default: false
        }
    }

    static func identical(_ a: AttributeValue?, _ b: AttributeValue?) -> Bool {
        switch (a, b) {
        case (nil, nil): true
        case let (x?, y?): identical(x, y)
        default: false
        }
    }

    static func identical(_ a: Record, _ b: Record) -> Bool {
        a.version == b.version && a.fields.count == b.fields.count
            && a.fields.allSatisfy { number, value in b.fields[number].map { identical(value, $0) } ?? false }
    }
}
