import Foundation
@testable import Strata
import Testing

// The NSPredicate format parser: every construct of the language, parsed to the exact node.
// Arguments and variables: PredicateParserArgumentTests.swift; errors and hostile input:
// PredicateParserErrorTests.swift; printing: PredicateParserFormatTests.swift.

/// Helpers shared by the PredicateParser*Tests files.
enum PF {
    static func parse(_ format: String, _ arguments: any Sendable...) throws(Strata.FetchPredicateError) -> PredicateNode {
        try PredicateParser.parse(format, arguments: arguments)
    }

    /// `a.b.@count` as a key path expression (SELF for "").
    static func key(_ path: String) -> Strata.PredicateExpression {
        .keyPath(path.isEmpty ? [] : path.split(separator: ".", omittingEmptySubsequences: false).map(String.init))
    }

    static func value(_ value: PredicateValue) -> Strata.PredicateExpression {
        .constant(value)
    }

    static func compare(
        _ left: Strata.PredicateExpression, _ op: PredicateComparison.Operator, _ right: Strata.PredicateExpression,
        modifier: PredicateComparison.Modifier = .direct, options: PredicateComparison.Options = []
    ) -> PredicateNode {
        .comparison(PredicateComparison(modifier: modifier, left: left, op: op, options: options, right: right))
    }

    /// `path op integer`.
    static func compare(_ path: String, _ op: PredicateComparison.Operator, _ integer: Int64) -> PredicateNode {
        compare(key(path), op, .constant(.integer(integer)))
    }

    /// The error `format` throws (nil, with an issue recorded, when it parses).
    static func error(
        _ format: String, _ arguments: [any Sendable] = [], sourceLocation: SourceLocation = #_sourceLocation
    ) -> Strata.FetchPredicateError? {
        do {
            let node = try PredicateParser.parse(format, arguments: arguments)
            Issue.record("\(format.debugDescription) parsed as \(node)", sourceLocation: sourceLocation)
            return nil
        } catch {
            return error
        }
    }
}

@Suite("Predicate parser: syntax")
struct PredicateParserTests {
    @Test(arguments: [
        ("a == 1", PredicateComparison.Operator.equal), ("a = 1", .equal), ("a != 1", .notEqual), ("a <> 1", .notEqual),
        ("a < 1", .less), ("a <= 1", .lessOrEqual), ("a =< 1", .lessOrEqual), ("a > 1", .greater),
        ("a >= 1", .greaterOrEqual), ("a => 1", .greaterOrEqual), ("a==1", .equal), ("a=<1", .lessOrEqual),
        ("a BEGINSWITH 1", .beginsWith), ("a endswith 1", .endsWith), ("a Contains 1", .contains), ("a like 1", .like),
        ("a MATCHES 1", .matches), ("a in 1", .in),
    ])
    func comparisonOperators(format: String, op: PredicateComparison.Operator) throws {
        let right: Strata.PredicateExpression = op == .in ? .aggregate([]) : PF.value(.integer(1))
        let source = op == .in ? format.replacingOccurrences(of: " 1", with: " {}") : format
        #expect(try PF.parse(source) == PF.compare(PF.key("a"), op, right))
    }

    @Test func betweenTakesAnAggregateOfTwo() throws {
        #expect(try PF.parse("age BETWEEN {18, 65}")
            == PF.compare(PF.key("age"), .between, .aggregate([PF.value(.integer(18)), PF.value(.integer(65))])))
        #expect(try PF.parse("date between {$FROM, $TO}")
            == PF.compare(PF.key("date"), .between, .aggregate([.variable("FROM"), .variable("TO")])))
        #expect(try PF.parse("x BETWEEN %@", [1, 5])
            == PF.compare(PF.key("x"), .between, PF.value(.array([.integer(1), .integer(5)]))))
        #expect(try PF.parse("x BETWEEN $range") == PF.compare(PF.key("x"), .between, .variable("range")))
        #expect(PF.error("x BETWEEN {1, 2, 3}")?.kind == .syntax)
        #expect(PF.error("x BETWEEN 4")?.kind == .syntax)
        #expect(PF.error("x BETWEEN y")?.kind == .syntax)
        #expect(PF.error("x BETWEEN %@", [[1, 2, 3]])?.kind == .argumentType)
        #expect(PF.error("x BETWEEN %@", [4])?.kind == .argumentType)
    }

    @Test func inTakesAnAggregateAnArrayAKeyPathOrAString() throws {
        #expect(try PF.parse("name IN {'a', \"b\"}")
            == PF.compare(PF.key("name"), .in, .aggregate([PF.value(.string("a")), PF.value(.string("b"))])))
        #expect(try PF.parse("name IN %@", ["a", "b"]) == PF.compare(PF.key("name"), .in, PF.value(.array([.string("a"), .string("b")]))))
        #expect(try PF.parse("name IN folder.names") == PF.compare(PF.key("name"), .in, PF.key("folder.names")))
        #expect(try PF.parse("'x' IN name") == PF.compare(PF.value(.string("x")), .in, PF.key("name")))
        #expect(try PF.parse("\"x\" IN tags.label") == PF.compare(PF.value(.string("x")), .in, PF.key("tags.label")))
        #expect(try PF.parse("name IN $names") == PF.compare(PF.key("name"), .in, .variable("names")))
        #expect(PF.error("name IN 3")?.kind == .syntax)
        #expect(PF.error("name IN %d", [3])?.kind == .argumentType)
    }

    @Test func optionsFollowTheOperator() throws {
        let value = PF.value(.string("x"))
        #expect(try PF.parse("n ==[c] 'x'") == PF.compare(PF.key("n"), .equal, value, options: .caseInsensitive))
        #expect(try PF.parse("n CONTAINS[d] 'x'") == PF.compare(PF.key("n"), .contains, value, options: .diacriticInsensitive))
        #expect(try PF.parse("n like[cd] 'x'") == PF.compare(PF.key("n"), .like, value, options: [.caseInsensitive, .diacriticInsensitive]))
        #expect(try PF.parse("n BEGINSWITH[DC] 'x'")
            == PF.compare(PF.key("n"), .beginsWith, value, options: [.caseInsensitive, .diacriticInsensitive]))
        #expect(try PF.parse("n endswith [c] 'x'") == PF.compare(PF.key("n"), .endsWith, value, options: .caseInsensitive))
        #expect(try PF.parse("n MATCHES[c] 'x'") == PF.compare(PF.key("n"), .matches, value, options: .caseInsensitive))
        #expect(try PF.parse("n IN[c] {'x'}") == PF.compare(PF.key("n"), .in, .aggregate([value]), options: .caseInsensitive))
        #expect(PF.error("n ==[n] 'x'")?.message == "unknown comparison option 'n' (use c, d or cd)")
        #expect(PF.error("n ==[c 'x'")?.kind == .syntax)
        #expect(PF.error("n ==[] 'x'")?.kind == .syntax)
    }

    @Test func modifiersComeBeforeTheLeftExpression() throws {
        let right = PF.value(.string("x"))
        #expect(try PF.parse("ANY tags.name == 'x'") == PF.compare(PF.key("tags.name"), .equal, right, modifier: .any))
        #expect(try PF.parse("some tags.name == 'x'") == PF.compare(PF.key("tags.name"), .equal, right, modifier: .any))
        #expect(try PF.parse("All tags.name == 'x'") == PF.compare(PF.key("tags.name"), .equal, right, modifier: .all))
        #expect(try PF.parse("NONE tags.name == 'x'") == PF.compare(PF.key("tags.name"), .equal, right, modifier: .none))
        #expect(try PF.parse("NOT ANY tags.name == 'x'") == .not(PF.compare(PF.key("tags.name"), .equal, right, modifier: .any)))
        #expect(PF.error("ANY ALL tags.name == 'x'")?.message == "expected a key path after 'ANY', found 'ALL'")
    }

    @Test func precedenceIsNotThenAndThenOr() throws {
        let a = PF.compare("a", .equal, 1), b = PF.compare("b", .equal, 2), c = PF.compare("c", .equal, 3)
        #expect(try PF.parse("a == 1 OR b == 2 AND NOT c == 3") == .or([a, .and([b, .not(c)])]))
        #expect(try PF.parse("a == 1 AND b == 2 OR c == 3") == .or([.and([a, b]), c]))
        #expect(try PF.parse("NOT a == 1 AND b == 2") == .and([.not(a), b]))
        #expect(try PF.parse("NOT (a == 1 AND b == 2)") == .not(.and([a, b])))
        #expect(try PF.parse("(a == 1 OR b == 2) AND c == 3") == .and([.or([a, b]), c]))
        #expect(try PF.parse("a == 1 && b == 2 || !c == 3") == .or([.and([a, b]), .not(c)]))
        #expect(try PF.parse("a == 1 and b == 2 And c == 3") == .and([a, b, c]))
        #expect(try PF.parse("a == 1 or b == 2 Or c == 3") == .or([a, b, c]))
        #expect(try PF.parse("a == 1 AND (b == 2 AND c == 3)") == .and([a, .and([b, c])]))
        #expect(try PF.parse("((a == 1))") == a)
        #expect(try PF.parse("not not a == 1") == .not(.not(a)))
        #expect(try PF.parse("!(a == 1)") == .not(a))
    }

    @Test func constantPredicates() throws {
        #expect(try PF.parse("TRUEPREDICATE") == .constant(true))
        #expect(try PF.parse("falsepredicate") == .constant(false))
        #expect(try PF.parse("TRUEPREDICATE AND NOT FALSEPREDICATE") == .and([.constant(true), .not(.constant(false))]))
        #expect(PF.error("TRUEPREDICATE == 1")?.message == "unexpected '=='")
    }

    @Test func literals() throws {
        func right(_ literal: String) throws(Strata.FetchPredicateError) -> Strata.PredicateExpression? {
            guard case .comparison(let comparison) = try PF.parse("x == \(literal)") else { return nil }
            return comparison.right
        }
        for word in ["nil", "NULL", "Nil", "null"] { #expect(try right(word) == PF.value(.null)) }
        for word in ["TRUE", "yes", "True", "YES"] { #expect(try right(word) == PF.value(.bool(true))) }
        for word in ["FALSE", "no", "false", "No"] { #expect(try right(word) == PF.value(.bool(false))) }
        #expect(try right("SELF") == .keyPath([]))
        #expect(try right("self.name") == PF.key("name"))
        #expect(try right("$Name_1") == .variable("Name_1"))
        #expect(try right("$AND") == .variable("AND"))
        #expect(try right("{}") == .aggregate([]))
        #expect(try right("{1, 'a', {nil}}") == .aggregate([PF.value(.integer(1)), PF.value(.string("a")), .aggregate([PF.value(.null)])]))
    }

    @Test(arguments: [
        ("0", PredicateValue.integer(0)), ("42", .integer(42)), ("-7", .integer(-7)), ("007", .integer(7)),
        ("0x1F", .integer(31)), ("0XfF", .integer(255)), ("-0x10", .integer(-16)), ("0o17", .integer(15)), ("0O7", .integer(7)),
        ("0b101", .integer(5)), ("-0b1", .integer(-1)), ("9223372036854775807", .integer(.max)),
        ("-9223372036854775808", .integer(.min)), ("0x7FFFFFFFFFFFFFFF", .integer(.max)),
        ("0xFFFFFFFFFFFFFFFF", .decimal(Decimal(UInt64.max))), ("9223372036854775808", .decimal(Decimal(UInt64(1) << 63))),
        ("-9223372036854775809", .decimal(Decimal(string: "-9223372036854775809")!)),
        ("1.5", .double(1.5)), ("-0.25", .double(-0.25)), ("1e3", .double(1000)), ("1E+3", .double(1000)),
        ("2.5e-3", .double(0.0025)), ("-1.0", .double(-1)), ("0.0", .double(0)), ("1e400", .double(.infinity)),
        ("5e-324", .double(.leastNonzeroMagnitude)), ("1.7976931348623157e+308", .double(.greatestFiniteMagnitude)),
    ])
    func numbers(literal: String, value: PredicateValue) throws {
        #expect(try PF.parse("x == \(literal)") == PF.compare(PF.key("x"), .equal, PF.value(value)))
        #expect(try PF.parse("x==\(literal)") == PF.compare(PF.key("x"), .equal, PF.value(value)))
    }

    @Test(arguments: ["0x", "0b2", "0o8", "1e", "1e+", "5abc", "0x1G", "1.5.3", ".5", "1.", "- 1", "--1", "0x1_0",
                      "123456789012345678901234567890123456789", "0x10000000000000000", "+1"])
    func badNumbers(literal: String) {
        #expect(PF.error("x == \(literal)")?.kind == .syntax)
    }

    @Test(arguments: [
        (#"'plain'"#, "plain"), (#""double""#, "double"), (#""it's""#, "it's"), (#"'say "hi"'"#, #"say "hi""#),
        (#""a\nb\tc\rd""#, "a\nb\tc\rd"), (#""back\\slash""#, #"back\slash"#), (#""\"q\"""#, #""q""#), (#"'\''"#, "'"),
        (#""\0""#, "\0"), (#""\a\b\f\v""#, "\u{07}\u{08}\u{0C}\u{0B}"), (#""\u00e9\u0041""#, "éA"), (#""\u65E5\u672C""#, "日本"),
        (#""\uD83D\uDE00""#, "😀"), (#""😀 é e\#u{301}""#, "😀 é e\u{301}"), ("\"\u{301}x\"", "\u{301}x"),
        (#""%@ $x %K""#, "%@ $x %K"), (#""""#, ""), ("\"line\nbreak\"", "line\nbreak"), ("'\u{0}'", "\0"),
    ])
    func strings(literal: String, value: String) throws {
        let node = try PF.parse("x == \(literal)")
        guard case .comparison(let comparison) = node, case .constant(.string(let parsed)) = comparison.right else {
            Issue.record("\(literal) parsed as \(node)")
            return
        }
        #expect(parsed.unicodeScalars.elementsEqual(value.unicodeScalars), "\(literal) gave \(parsed.debugDescription)")
    }

    @Test(arguments: [#""abc"#, #"'abc"#, #""a\""#, #""\q""#, #""\u12""#, #""\u12G4""#, #""\uD800""#, #""\uDC00""#,
                      #""\uD800\u0041""#, #""\"#])
    func badStrings(literal: String) {
        #expect(PF.error("x == \(literal)")?.kind == .syntax)
    }

    @Test func keyPaths() throws {
        #expect(try PF.parse("folder.name == 1") == PF.compare("folder.name", .equal, 1))
        #expect(try PF.parse("a.b.c.d == 1") == PF.compare("a.b.c.d", .equal, 1))
        #expect(try PF.parse("tags.@count > 1") == PF.compare("tags.@count", .greater, 1))
        #expect(try PF.parse("notes.@avg.priority < 1") == PF.compare("notes.@avg.priority", .less, 1))
        #expect(try PF.parse("@sum.items.price < 1") == PF.compare("@sum.items.price", .less, 1))
        #expect(try PF.parse("x.@COUNT == 1 AND x.@Max == 1 AND x.@min == 1")
            == .and([PF.compare("x.@count", .equal, 1), PF.compare("x.@max", .equal, 1), PF.compare("x.@min", .equal, 1)]))
        #expect(try PF.parse("#AND == 1") == PF.compare("AND", .equal, 1))
        #expect(try PF.parse("#size == 1 AND folder.size == 1 AND a.#in == 1")
            == .and([PF.compare("size", .equal, 1), PF.compare("folder.size", .equal, 1), PF.compare("a.in", .equal, 1)]))
        #expect(try PF.parse("_private1 == 1") == PF.compare("_private1", .equal, 1))
        #expect(try PF.parse("café.日本 == 1") == PF.compare("café.日本", .equal, 1))
        #expect(try PF.parse("ıN == 1") == PF.compare("ıN", .equal, 1), "a dotless ı is no I")
        #expect(try PF.parse("nameAND == 1") == PF.compare("nameAND", .equal, 1))
        #expect(try PF.parse("SELF == 1") == PF.compare("", .equal, 1))
        #expect(try PF.parse("SELF.@count == 1") == PF.compare("@count", .equal, 1))
        #expect(PF.error("size == 1")?.message == "'size' is a reserved word: write #size for a key of that name")
        #expect(PF.error("x.@foo == 1")?.message == "unknown collection operator '@foo' (use @count, @sum, @avg, @min or @max)")
        #expect(PF.error("SUBQUERY(x, $y, $y == 1).@count > 0")?.message == "SUBQUERY is not supported")
        #expect(PF.error("x. == 1")?.kind == .syntax)
        #expect(PF.error("x.1 == 1")?.kind == .syntax)
    }

    @Test func constantsOnEitherSide() throws {
        #expect(try PF.parse("3 < priority") == PF.compare(PF.value(.integer(3)), .less, PF.key("priority")))
        #expect(try PF.parse("nil == nil") == PF.compare(PF.value(.null), .equal, PF.value(.null)))
        #expect(try PF.parse("{1, 2} CONTAINS x")
            == PF.compare(.aggregate([PF.value(.integer(1)), PF.value(.integer(2))]), .contains, PF.key("x")))
        #expect(try PF.parse("$a == $b") == PF.compare(.variable("a"), .equal, .variable("b")))
    }

    @Test func whitespaceIsFree() throws {
        let expected = PF.compare(PF.key("a"), .equal, PF.value(.integer(1)), modifier: .any)
        #expect(try PF.parse("\n\tANY\u{A0}a\r\n==\u{2003}1  ") == expected)
        #expect(try PF.parse("(a==1)AND(b==2)") == .and([PF.compare("a", .equal, 1), PF.compare("b", .equal, 2)]))
    }

    @Test func casts() throws {
        func constant(_ format: String) throws(Strata.FetchPredicateError) -> PredicateValue? {
            guard case .comparison(let comparison) = try PF.parse("x == \(format)"),
                  case .constant(let value) = comparison.right
            else { return nil }
            return value
        }
        #expect(try constant(#"CAST(0, "NSDate")"#) == .date(Date(timeIntervalSinceReferenceDate: 0)))
        #expect(try constant(#"cast(-12.5, 'nsdate')"#) == .date(Date(timeIntervalSinceReferenceDate: -12.5)))
        #expect(try constant(#"CAST("inf", "NSDate")"#) == .date(Date(timeIntervalSinceReferenceDate: .infinity)))
        #expect(try constant(#"CAST("-inf", "NSNumber")"#) == .double(-.infinity))
        #expect(try constant(#"CAST("0x10", "NSNumber")"#) == .integer(16))
        #expect(try constant(#"CAST("1.25", "NSDecimalNumber")"#) == .decimal(Decimal(string: "1.25")!))
        #expect(try constant(#"CAST("NaN", "NSDecimalNumber")"#) == .decimal(.nan))
        #expect(try constant(#"CAST(7, "NSDecimalNumber")"#) == .decimal(7))
        #expect(try constant(#"CAST("E621E1F8-C36C-495A-93FC-0C247A3E6E5F", "UUID")"#)
            == .uuid(UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")!))
        #expect(try constant(#"CAST("https://example.com/a?b", "NSURL")"#) == .uri(URL(string: "https://example.com/a?b")!))
        #expect(try constant(#"CAST("AAEC/w==", "NSData")"#) == .data(Data([0, 1, 2, 255])))
        #expect(try constant(#"CAST("AAEC/w==", "Transformable")"#) == .transformable(Data([0, 1, 2, 255])))
        #expect(try constant(#"CAST({1, "a", CAST({}, "NSArray")}, "NSArray")"#) == .array([.integer(1), .string("a"), .array([])]))
        #expect(try constant(#"CAST("text", "NSString")"#) == .string("text"))
        let id = ManagedObjectID(store: UUID(), entityName: "Note", primaryKey: PrimaryKey(7)!)
        #expect(try constant("CAST(\"\(id.uriRepresentation.absoluteString)\", \"ManagedObjectID\")") == .objectID(id))
        #expect(try PF.parse(#"x == CAST(%@, "NSDate")"#, 5)
            == PF.compare(PF.key("x"), .equal, .constant(.date(Date(timeIntervalSinceReferenceDate: 5)))))
        #expect(PF.error(#"x == CAST(%@, "UUID")"#, [5])?.kind == .syntax)
        for bad in [#"CAST("x", "UUID")"#, #"CAST("+0000000-0000-0000-0000-000000000000", "UUID")"#, #"CAST("12abc", "NSDecimalNumber")"#,
                    #"CAST("!!", "NSData")"#, #"CAST(1, "NSColor")"#, #"CAST(a, "NSDate")"#, #"CAST({a}, "NSArray")"#,
                    #"CAST("x", "ManagedObjectID")"#, #"CAST(1, NSDate)"#, #"CAST(1 "NSDate")"#, #"CAST(1, "NSDate""#, "CAST"] {
            #expect(PF.error("x == \(bad)")?.kind == .syntax, "\(bad)")
        }
    }
}
