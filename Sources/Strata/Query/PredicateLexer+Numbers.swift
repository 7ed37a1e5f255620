import Foundation

// Numeric literals and `%` placeholders.
extension PredicateLexer {
    /// `42`, `-7`, `0x1F`, `0o17`, `0b101`, `1.5`, `-2.5e-3`. Integers beyond Int64 become
    /// decimals (up to 38 digits); floating-point literals doubles.
    mutating func lexNumber() throws(FetchPredicateError) -> PredicateValue {
        let start = offset
        let negative = scalar(offset) == "-"
        if negative { offset += 1 }
        let radix: Int? = if scalar(offset) == "0" {
            switch scalar(offset + 1) {
            case "x", "X": 16
            case "o", "O": 8
            case "b", "B": 2
            default: nil
            }
        } else { nil }
        if let radix {
            offset += 2
            let digitsStart = offset
            while let scalar = scalar(offset), scalar.isASCII, let digit = Character(scalar).hexDigitValue, digit < radix {
                offset += 1
            }
            try checkNumberEnd(start)
            let digits = String(String.UnicodeScalarView(scalars[digitsStart..<offset]))
            guard !digits.isEmpty else { throw error("invalid number '\(numberText(start))'", at: start) }
            guard let magnitude = UInt64(digits, radix: radix) else {
                throw error("the number '\(numberText(start))' does not fit in 64 bits", at: start)
            }
            return Self.integer(magnitude: magnitude, negative: negative)
        }
        let digitsStart = offset
        skipDigits()
        var isFloat = false
        if scalar(offset) == ".", let next = scalar(offset + 1), ("0"..."9").contains(next) {
            isFloat = true
            offset += 1
            skipDigits()
        }
        if scalar(offset) == "e" || scalar(offset) == "E" {
            isFloat = true
            offset += 1
            if scalar(offset) == "+" || scalar(offset) == "-" { offset += 1 }
            guard let digit = scalar(offset), ("0"..."9").contains(digit) else {
                throw error("invalid number '\(numberText(start))'", at: start)
            }
            skipDigits()
        }
        try checkNumberEnd(start)
        let text = numberText(start)
        if isFloat {
            // Checked above to be a decimal floating-point literal, which Double always parses.
            return .double(Double(text) ?? .nan)
        }
        if let value = Int64(text) { return .integer(value) }
        let significant = scalars[digitsStart..<offset].drop { $0 == "0" }
        guard significant.count <= 38, let decimal = Decimal(string: text, locale: Locale(identifier: "en_US_POSIX")) else {
            throw error("the integer '\(numberText(start))' has more than 38 digits", at: start)
        }
        return .decimal(decimal)
    }

    static func integer(magnitude: UInt64, negative: Bool) -> PredicateValue {
        if negative {
            if magnitude <= UInt64(Int64.max) { return .integer(-Int64(magnitude)) }
            if magnitude == UInt64(Int64.max) + 1 { return .integer(.min) }
            return .decimal(-Decimal(magnitude))
        }
        return magnitude <= UInt64(Int64.max) ? .integer(Int64(magnitude)) : .decimal(Decimal(magnitude))
    }

    private mutating func skipDigits() {
        while let scalar = scalar(offset), ("0"..."9").contains(scalar) { offset += 1 }
    }

    /// A number must not run into a letter or digit: `5abc`, `0x1G`, `0b102`.
    private mutating func checkNumberEnd(_ start: Int) throws(FetchPredicateError) {
        guard let next = scalar(offset), Self.isIdentifierContinue(next) else { return }
        while let next = scalar(offset), Self.isIdentifierContinue(next) { offset += 1 }
        throw error("invalid number '\(numberText(start))'", at: start)
    }

    private func numberText(_ start: Int) -> String {
        let end = min(offset, start + 40)
        return String(String.UnicodeScalarView(scalars[start..<end])) + (end < offset ? "…" : "")
    }

    // MARK: Placeholders

    /// `%@`, `%K`, `%d` `%i` `%u` `%x` `%o` and `%f` `%e` `%g` (with length modifiers
    /// `h`, `hh`, `l`, `ll`, `q`, `L`, `z`, `t`, `j`).
    mutating func lexPlaceholder() throws(FetchPredicateError) -> PredicatePlaceholder {
        let start = offset
        offset += 1
        guard let first = scalar(offset) else { throw error("'%' at the end of the format", at: start) }
        if first == "@" { offset += 1; return .object }
        if first == "K" { offset += 1; return .keyPath }
        while let scalar = scalar(offset), "hlqLztj".unicodeScalars.contains(scalar), offset - start <= 2 { offset += 1 }
        guard let conversion = scalar(offset) else { throw error("'%' at the end of the format", at: start) }
        offset += 1
        let text = String(String.UnicodeScalarView(scalars[start..<offset]))
        switch conversion {
        case "d", "i", "u", "x", "X", "o": return .integer(text)
        case "f", "F", "e", "E", "g", "G": return .float(text)
        default:
            let prefix = String(String.UnicodeScalarView(scalars[start..<offset - 1]))
            let shown = conversion.value >= 0x21 && conversion.value < 0x7F
                ? "'\(text)'" : "'\(prefix)' followed by \(Self.describe(conversion))"
            throw error("unknown placeholder \(shown) (use %@, %K, %d or %f)", at: start)
        }
    }
}
