import Foundation

/// The reserved words of the predicate format language, matched case-insensitively (ASCII
/// only: `ın` is a key, not `IN`). A key with one of these names is written `#size`.
enum PredicateKeyword: String, CaseIterable, Sendable {
    case and = "AND", or = "OR", not = "NOT", `in` = "IN"
    case any = "ANY", some = "SOME", all = "ALL", none = "NONE"
    case like = "LIKE", matches = "MATCHES", contains = "CONTAINS"
    case beginsWith = "BEGINSWITH", endsWith = "ENDSWITH", between = "BETWEEN"
    case caseInsensitive = "CASEINSENSITIVE", ci = "CI"
    case null = "NULL", nilValue = "NIL", selfValue = "SELF"
    case trueValue = "TRUE", yes = "YES", falseValue = "FALSE", no = "NO"
    case first = "FIRST", last = "LAST", size = "SIZE", anyKey = "ANYKEY"
    case subquery = "SUBQUERY", fetch = "FETCH", cast = "CAST"
    case truePredicate = "TRUEPREDICATE", falsePredicate = "FALSEPREDICATE"

    private static let byName = Dictionary(uniqueKeysWithValues: allCases.map { ($0.rawValue, $0) })

    /// The keyword spelled `word` (in any case), or nil for a key.
    init?(word: String) {
        guard word.utf8.count <= 15, word.unicodeScalars.allSatisfy(\.isASCII),
              let keyword = Self.byName[word.uppercased()]
        else { return nil }
        self = keyword
    }
}

/// `%@`, `%K`, `%d`-like and `%f`-like placeholders.
enum PredicatePlaceholder: Sendable, Equatable {
    /// `%@`: any value a predicate can hold.
    case object
    /// `%K`: a key path, as a string.
    case keyPath
    /// `%d`, `%i`, `%u`, `%ld`, `%lld`…: an integer (the text as written, for messages).
    case integer(String)
    /// `%f`, `%lf`, `%g`, `%e`…: a floating-point number (or an integer, promoted).
    case float(String)
}

/// Punctuation and operators.
enum PredicateSymbol: Sendable, Equatable {
    case leftParen, rightParen, leftBrace, rightBrace, leftBracket, rightBracket, comma, dot
    case equal, notEqual, less, lessOrEqual, greater, greaterOrEqual
    case andAnd, orOr, bang
}

/// One token of a format string, at scalar offsets `start..<end`.
struct PredicateToken: Sendable {
    enum Kind: Sendable, Equatable {
        /// An identifier that is not a reserved word.
        case word(String)
        /// `#word`: a key, even when it is a reserved word.
        case escapedWord(String)
        /// A reserved word (`text` as written).
        case keyword(PredicateKeyword, text: String)
        /// `@count`… (the name without the `@`, as written).
        case collectionOperator(String)
        /// `$NAME`.
        case variable(String)
        /// A quoted string, unescaped.
        case string(String)
        /// A numeric literal: `.integer`, `.double` or `.decimal` (beyond 64 bits). Boxed,
        /// to keep tokens small.
        indirect case number(PredicateValue)
        case placeholder(PredicatePlaceholder)
        case symbol(PredicateSymbol)
        /// The end of the format string.
        case end
    }

    let kind: Kind
    let start: Int
    let end: Int
}

/// Splits a format string into tokens, one at a time (so that the first error in the string
/// is the one reported). Works on Unicode scalars, so that a quote followed by a combining
/// mark is still a quote; positions are converted to Character offsets for errors.
struct PredicateLexer {
    let scalars: [Unicode.Scalar]
    /// The Character offset of each scalar offset (and of the end).
    private let characterOffsets: [Int]
    var offset = 0

    init(_ format: String) {
        scalars = Array(format.unicodeScalars)
        var offsets: [Int] = []
        offsets.reserveCapacity(scalars.count + 1)
        var characterIndex = 0
        for character in format {
            for _ in character.unicodeScalars { offsets.append(characterIndex) }
            characterIndex += 1
        }
        offsets.append(characterIndex)
        characterOffsets = offsets
    }

    /// The Character offset of scalar offset `scalarOffset`.
    func characterOffset(_ scalarOffset: Int) -> Int {
        characterOffsets[min(max(scalarOffset, 0), characterOffsets.count - 1)]
    }

    /// The source text of `token`, shortened for messages.
    func text(of token: PredicateToken) -> String {
        text(from: token.start, to: token.end)
    }

    /// The source text from scalar offset `start` to `end`, shortened for messages.
    func text(from start: Int, to end: Int) -> String {
        let start = min(max(start, 0), scalars.count)
        let end = min(max(end, start), scalars.count)
        let shortEnd = min(end, start + 24)
        let text = String(String.UnicodeScalarView(scalars[start..<shortEnd]))
        return shortEnd < end ? text + "…" : text
    }

    func error(_ message: String, at scalarOffset: Int) -> FetchPredicateError {
        FetchPredicateError(kind: .syntax, message: message, position: characterOffset(scalarOffset))
    }

    func scalar(_ index: Int) -> Unicode.Scalar? {
        index < scalars.count ? scalars[index] : nil
    }

    // MARK: Character classes

    static func isIdentifierStart(_ scalar: Unicode.Scalar) -> Bool {
        scalar == "_" || scalar.properties.isAlphabetic
    }

    static func isIdentifierContinue(_ scalar: Unicode.Scalar) -> Bool {
        if scalar == "_" || scalar.properties.isAlphabetic || scalar.properties.isJoinControl { return true }
        switch scalar.properties.generalCategory {
        case .decimalNumber, .nonspacingMark, .spacingMark, .enclosingMark: return true
        default: return false
        }
    }

    /// Whether `text` can be written as a bare key (or, with `#`, as an escaped one).
    static func isIdentifier(_ text: String) -> Bool {
        guard let first = text.unicodeScalars.first, isIdentifierStart(first) else { return false }
        return text.unicodeScalars.dropFirst().allSatisfy(isIdentifierContinue)
    }

    /// `'x'` for printable ASCII, `U+0007` otherwise.
    static func describe(_ scalar: Unicode.Scalar) -> String {
        if scalar.value >= 0x21 && scalar.value < 0x7F { return "'\(Character(scalar))'" }
        let hex = String(scalar.value, radix: 16, uppercase: true)
        return "U+" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
    }

    // MARK: Tokens

    /// The next token. (Out of line: inlined, it would swell the frames of the parser's
    /// recursion.)
    @inline(never)
    mutating func next() throws(FetchPredicateError) -> PredicateToken {
        while let scalar = scalar(offset), scalar.properties.isWhitespace { offset += 1 }
        let start = offset
        guard let scalar = scalar(offset) else { return PredicateToken(kind: .end, start: start, end: start) }
        let kind = try lexToken(startingWith: scalar)
        return PredicateToken(kind: kind, start: start, end: offset)
    }

    private mutating func lexToken(startingWith scalar: Unicode.Scalar) throws(FetchPredicateError) -> PredicateToken.Kind {
        let start = offset
        func symbol(_ symbol: PredicateSymbol, length: Int = 1) -> PredicateToken.Kind {
            offset += length
            return .symbol(symbol)
        }
        let following = self.scalar(offset + 1)
        switch scalar {
        case "(": return symbol(.leftParen)
        case ")": return symbol(.rightParen)
        case "{": return symbol(.leftBrace)
        case "}": return symbol(.rightBrace)
        case "[": return symbol(.leftBracket)
        case "]": return symbol(.rightBracket)
        case ",": return symbol(.comma)
        case ".": return symbol(.dot)
        case "=":
            switch following {
            case "=": return symbol(.equal, length: 2)
            case "<": return symbol(.lessOrEqual, length: 2)
            case ">": return symbol(.greaterOrEqual, length: 2)
            default: return symbol(.equal)
            }
        case "!": return following == "=" ? symbol(.notEqual, length: 2) : symbol(.bang)
        case "<":
            switch following {
            case "=": return symbol(.lessOrEqual, length: 2)
            case ">": return symbol(.notEqual, length: 2)
            default: return symbol(.less)
            }
        case ">": return following == "=" ? symbol(.greaterOrEqual, length: 2) : symbol(.greater)
        case "&":
            guard following == "&" else { throw error("'&' is not an operator: use '&&' or AND", at: start) }
            return symbol(.andAnd, length: 2)
        case "|":
            guard following == "|" else { throw error("'|' is not an operator: use '||' or OR", at: start) }
            return symbol(.orOr, length: 2)
        case "\"", "'":
            return .string(try lexString(quote: scalar))
        case "0"..."9":
            return .number(try lexNumber())
        case "-":
            guard let following, ("0"..."9").contains(following) else {
                throw error("unexpected '-' (arithmetic is not supported; a negative number is written -5)", at: start)
            }
            return .number(try lexNumber())
        case "%":
            return .placeholder(try lexPlaceholder())
        case "$":
            offset += 1
            guard let name = lexIdentifier() else { throw error("expected a variable name after '$'", at: start) }
            return .variable(name)
        case "#":
            offset += 1
            guard let name = lexIdentifier() else { throw error("expected a key after '#'", at: start) }
            return .escapedWord(name)
        case "@":
            offset += 1
            guard let name = lexIdentifier() else {
                throw error("expected a collection operator (@count, @sum, @avg, @min, @max) after '@'", at: start)
            }
            return .collectionOperator(name)
        default:
            guard let word = lexIdentifier() else {
                throw error("unexpected character \(Self.describe(scalar))", at: start)
            }
            if let keyword = PredicateKeyword(word: word) { return .keyword(keyword, text: word) }
            return .word(word)
        }
    }

    /// An identifier at `offset`, or nil (and `offset` unchanged) when there is none.
    private mutating func lexIdentifier() -> String? {
        guard let first = scalar(offset), Self.isIdentifierStart(first) else { return nil }
        let start = offset
        offset += 1
        while let scalar = scalar(offset), Self.isIdentifierContinue(scalar) { offset += 1 }
        return String(String.UnicodeScalarView(scalars[start..<offset]))
    }

    // MARK: Strings

    private mutating func lexString(quote: Unicode.Scalar) throws(FetchPredicateError) -> String {
        let start = offset
        offset += 1
        var text = String.UnicodeScalarView()
        while true {
            guard let scalar = scalar(offset) else { throw error("unterminated string", at: start) }
            if scalar == quote {
                offset += 1
                return String(text)
            }
            if scalar != "\\" {
                text.append(scalar)
                offset += 1
                continue
            }
            text.append(try lexEscape(stringStart: start))
        }
    }

    /// The escape at `offset` (a backslash): `\n`, `\t`, `\r`, `\0`, `\a`, `\b`, `\f`, `\v`,
    /// `\\`, `\"`, `\'`, and `\uXXXX` (a UTF-16 surrogate pair as two of them).
    private mutating func lexEscape(stringStart: Int) throws(FetchPredicateError) -> Unicode.Scalar {
        let backslash = offset
        guard let letter = scalar(offset + 1) else { throw error("unterminated string", at: stringStart) }
        offset += 2
        switch letter {
        case "n": return "\n"
        case "t": return "\t"
        case "r": return "\r"
        case "0": return "\0"
        case "a": return "\u{07}"
        case "b": return "\u{08}"
        case "f": return "\u{0C}"
        case "v": return "\u{0B}"
        case "\\", "\"", "'": return letter
        case "u":
            let unit = try lexHexUnit(escapeStart: backslash)
            if (0xDC00...0xDFFF).contains(unit) {
                throw error("unpaired UTF-16 surrogate \\u\(String(unit, radix: 16, uppercase: true))", at: backslash)
            }
            if (0xD800...0xDBFF).contains(unit) {
                let lowStart = offset
                guard scalar(offset) == "\\", scalar(offset + 1) == "u" else {
                    throw error("unpaired UTF-16 surrogate \\u\(String(unit, radix: 16, uppercase: true))", at: backslash)
                }
                offset += 2
                let low = try lexHexUnit(escapeStart: lowStart)
                guard (0xDC00...0xDFFF).contains(low) else {
                    throw error("unpaired UTF-16 surrogate \\u\(String(unit, radix: 16, uppercase: true))", at: backslash)
                }
                // A valid pair always makes a scalar in U+10000...U+10FFFF.
                return Unicode.Scalar(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)) ?? "\u{FFFD}"
            }
            return Unicode.Scalar(unit) ?? "\u{FFFD}"
        default:
            throw error("unknown escape '\\\(letter.properties.isWhitespace ? " " : String(letter))'", at: backslash)
        }
    }

    /// Exactly four hexadecimal digits at `offset`.
    private mutating func lexHexUnit(escapeStart: Int) throws(FetchPredicateError) -> UInt32 {
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let scalar = scalar(offset), scalar.isASCII, let digit = Character(scalar).hexDigitValue else {
                throw error("\\u must be followed by 4 hexadecimal digits", at: escapeStart)
            }
            value = value << 4 | UInt32(digit)
            offset += 1
        }
        return value
    }
}
