import Foundation

extension PredicateNode {
    /// The predicate in the format language. Parsing it gives an equal node, for every node
    /// the parser makes (and for AND and OR nodes of 2 or more operands in general: an empty
    /// AND prints as `TRUEPREDICATE`, an empty OR as `FALSEPREDICATE`, a one-operand AND or
    /// OR as its operand). Keys print as written, with `#` before reserved words; a key that
    /// is no identifier at all (which no parse makes) does not parse back.
    var formatted: String {
        var output = ""
        PredicateFormatter.write(self, into: &output)
        return output
    }
}

extension PredicateExpression {
    /// The expression in the format language.
    var formatted: String {
        PredicateFormatter.format(self)
    }
}

/// Prints nodes in the format language (``PredicateNode/formatted``).
enum PredicateFormatter {
    /// Where a node is printed: operands of AND need parentheses around OR and AND nodes
    /// (an AND inside an AND is a node of its own), operands of OR around OR nodes, and
    /// operands of NOT around both.
    private enum Context {
        case top, orOperand, andOperand, notOperand
    }

    static func write(_ node: PredicateNode, into output: inout String) {
        write(node, context: .top, into: &output)
    }

    private static func write(_ node: PredicateNode, context: Context, into output: inout String) {
        let node = printable(node)
        let needsParentheses = switch (node, context) {
        case (.or, .orOperand), (.or, .andOperand), (.or, .notOperand), (.and, .andOperand), (.and, .notOperand): true
        default: false
        }
        if needsParentheses { output += "(" }
        switch node {
        case .constant(let value):
            output += value ? "TRUEPREDICATE" : "FALSEPREDICATE"
        case .not(let operand):
            output += "NOT "
            write(operand, context: .notOperand, into: &output)
        case .and(let operands):
            for (index, operand) in operands.enumerated() {
                if index > 0 { output += " AND " }
                write(operand, context: .andOperand, into: &output)
            }
        case .or(let operands):
            for (index, operand) in operands.enumerated() {
                if index > 0 { output += " OR " }
                write(operand, context: .orOperand, into: &output)
            }
        case .comparison(let comparison):
            write(comparison, into: &output)
        }
        if needsParentheses { output += ")" }
    }

    /// AND and OR nodes of fewer than 2 operands as what they mean.
    private static func printable(_ node: PredicateNode) -> PredicateNode {
        switch node {
        case .and(let operands) where operands.count < 2: operands.first.map(printable) ?? .constant(true)
        case .or(let operands) where operands.count < 2: operands.first.map(printable) ?? .constant(false)
        default: node
        }
    }

    private static func write(_ comparison: PredicateComparison, into output: inout String) {
        if comparison.modifier != .direct { output += comparison.modifier.rawValue + " " }
        output += format(comparison.left)
        output += " " + comparison.op.rawValue
        switch (comparison.options.contains(.caseInsensitive), comparison.options.contains(.diacriticInsensitive)) {
        case (true, true): output += "[cd]"
        case (true, false): output += "[c]"
        case (false, true): output += "[d]"
        case (false, false): break
        }
        output += " " + format(comparison.right)
    }

    static func format(_ expression: PredicateExpression) -> String {
        switch expression {
        case .keyPath(let components):
            components.isEmpty ? "SELF" : components.map(formatKey).joined(separator: ".")
        case .constant(let value):
            format(value)
        case .variable(let name):
            "$" + name
        case .aggregate(let elements):
            "{" + elements.map(format).joined(separator: ", ") + "}"
        }
    }

    /// A key as written in a key path: `#` before a reserved word.
    private static func formatKey(_ key: String) -> String {
        if key.hasPrefix("@"), PredicateArguments.collectionOperator(String(key.dropFirst()))?.rawValue == key { return key }
        return PredicateKeyword(word: key) == nil ? key : "#" + key
    }

    static func format(_ value: PredicateValue) -> String {
        if let cast = PredicateCast.format(value) { return cast }
        switch value {
        case .null: return "nil"
        case .bool(let flag): return flag ? "TRUE" : "FALSE"
        case .integer(let integer): return String(integer)
        case .double(let number): return "\(number)"  // finite here: "1.0", "1e-05", "-0.0"
        case .string(let text): return quoted(text)
        default: return "nil"  // every other value has a CAST form
        }
    }

    /// `text` in double quotes, with `\\`, `\"`, `\n`, `\r`, `\t` and `\uXXXX` escapes for
    /// other control characters, line separators, byte-order marks and a combining mark
    /// that would join the opening quote.
    static func quoted(_ text: String) -> String {
        var output = "\""
        for (index, scalar) in text.unicodeScalars.enumerated() {
            switch scalar {
            case "\\": output += "\\\\"
            case "\"": output += "\\\""
            case "\n": output += "\\n"
            case "\r": output += "\\r"
            case "\t": output += "\\t"
            default:
                if scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || scalar == "\u{2028}" || scalar == "\u{2029}"
                    || scalar == "\u{FEFF}" || (index == 0 && isMark(scalar)) {
                    for unit in String(scalar).utf16 {
                        let hex = String(unit, radix: 16, uppercase: true)
                        output += "\\u" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
                    }
                } else {
                    output.unicodeScalars.append(scalar)
                }
            }
        }
        return output + "\""
    }

    private static func isMark(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.properties.generalCategory {
        case .nonspacingMark, .spacingMark, .enclosingMark: true
        default: false
        }
    }
}
