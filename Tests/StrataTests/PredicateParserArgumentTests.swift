import Foundation
@testable import Strata
import Testing

// Placeholders (%@, %d, %f, %K), their argument types and counts, and $VARIABLE substitution.

@Suite("Predicate parser: arguments and variables")
struct PredicateParserArgumentTests {
    /// The right side of `x == <placeholder>` with `argument`.
    static func right(_ placeholder: String, _ argument: any Sendable) throws(Strata.FetchPredicateError) -> Strata.PredicateExpression? {
        let node = try PredicateParser.parse("x == \(placeholder)", arguments: [argument])
        guard case .comparison(let comparison) = node else { return nil }
        return comparison.right
    }

    @Test func objectPlaceholderTakesEverySupportedValue() throws {
        let date = Date(timeIntervalSinceReferenceDate: 12.5)
        let uuid = UUID()
        let url = URL(string: "https://example.com/x")!
        let id = ManagedObjectID(store: UUID(), entityName: "Note", primaryKey: PrimaryKey(3)!)
        let cases: [(any Sendable, PredicateValue)] = [
            ("text", .string("text")), (Substring("sub"), .string("sub")), (Character("c"), .string("c")),
            (true, .bool(true)), (false, .bool(false)),
            (Int(-1), .integer(-1)), (Int8(-8), .integer(-8)), (Int16(16), .integer(16)), (Int32(32), .integer(32)),
            (Int64.min, .integer(.min)), (UInt(7), .integer(7)), (UInt8(255), .integer(255)), (UInt16(16), .integer(16)),
            (UInt32.max, .integer(Int64(UInt32.max))), (UInt64(9), .integer(9)), (UInt64.max, .decimal(Decimal(UInt64.max))),
            (Int128(-5), .integer(-5)), (Int128(Int64.max) + 1, .decimal(Decimal(UInt64(1) << 63))),
            (1.5, .double(1.5)), (Float(0.5), .double(0.5)), (CGFloat(2.5), .double(2.5)), (Decimal(string: "1.1")!, .decimal(Decimal(string: "1.1")!)),
            (date, .date(date)), (Data([1, 2]), .data(Data([1, 2]))), (uuid, .uuid(uuid)), (url, .uri(url)), (id, .objectID(id)),
            (String?.none, .null), (Int??.none, .null), (Optional(Optional(5)), .integer(5)),
            ([1, 2], .array([.integer(1), .integer(2)])), ([String](), .array([])),
            (["a", nil] as [String?], .array([.string("a"), .null])),
            ([[1], [2, 3]], .array([.array([.integer(1)]), .array([.integer(2), .integer(3)])])),
            (Set([4]), .array([.integer(4)])), (PredicateValue.transformable(Data([9])), .transformable(Data([9]))),
            ([1, 2][...], .array([.integer(1), .integer(2)])),
        ]
        for (argument, value) in cases {
            #expect(try Self.right("%@", argument) == .constant(value), "\(argument)")
        }
        let relative = URL(string: "b/c", relativeTo: URL(string: "https://example.com/a/")!)!
        #expect(try Self.right("%@", relative) == .constant(.uri(URL(string: "https://example.com/a/b/c")!)))
    }

    @Test func objectPlaceholderRefusesOtherTypes() {
        struct Custom: Sendable {}
        for argument in [Custom(), ["a": 1], [Custom()], (1, 2)] as [any Sendable] {
            let error = PF.error("x == %@", [argument])
            #expect(error?.kind == .argumentType, "\(argument)")
            #expect(error?.position == 5)
        }
        #expect(PF.error("x == %@", [["a": 1]])?.message.hasSuffix(", not Dictionary<String, Int>") == true)
        var nested: any Sendable = 1
        for _ in 0..<PredicateArguments.maximumNesting { nested = [nested] }
        #expect((try? PF.parse("x == %@", nested)) != nil)
        #expect(PF.error("x == %@", [[nested]])?.kind == .argumentType, "arrays nested too deep")
    }

    @Test func integerPlaceholdersTakeIntegersOnly() throws {
        for placeholder in ["%d", "%i", "%ld", "%lld", "%u", "%lu", "%hd", "%qd", "%zd", "%x", "%lx"] {
            #expect(try Self.right(placeholder, 42) == .constant(.integer(42)), "\(placeholder)")
            #expect(try Self.right(placeholder, Int8(-3)) == .constant(.integer(-3)), "\(placeholder)")
            #expect(try Self.right(placeholder, UInt64.max) == .constant(.decimal(Decimal(UInt64.max))))
            #expect(try Self.right(placeholder, Optional(Int32(5))) == .constant(.integer(5)))
        }
        for argument in [true, "5", 1.5, Float(2), Decimal(1), Int?.none] as [any Sendable] {
            let error = PF.error("x == %d", [argument])
            #expect(error?.kind == .argumentType, "\(argument)")
        }
        #expect(PF.error("x == %d", ["5"])?.message == "%d takes an integer, not String")
        #expect(PF.error("x == %ld", [true])?.message == "%ld takes an integer, not Bool")
        #expect(PF.error("x == %d", [Int?.none])?.message == "%d takes an integer, not nil")
    }

    @Test func floatPlaceholdersTakeFloatingPointAndPromoteIntegers() throws {
        for placeholder in ["%f", "%lf", "%g", "%e", "%Lf", "%F", "%G"] {
            #expect(try Self.right(placeholder, 1.25) == .constant(.double(1.25)), "\(placeholder)")
            #expect(try Self.right(placeholder, Float(0.5)) == .constant(.double(0.5)))
            #expect(try Self.right(placeholder, 3) == .constant(.double(3)))
            #expect(try Self.right(placeholder, UInt64.max) == .constant(.double(Double(UInt64.max))))
        }
        #expect(PF.error("x == %f", [true])?.message == "%f takes a Double, a Float or an integer, not Bool")
        #expect(PF.error("x == %f", ["1.5"])?.kind == .argumentType)
        #expect(PF.error("x == %f", [Decimal(1)])?.kind == .argumentType)
    }

    @Test func keyPathPlaceholder() throws {
        #expect(try PF.parse("%K == %@", "title", "x") == PF.compare(PF.key("title"), .equal, .constant(.string("x"))))
        #expect(try PF.parse("%K like %@", "folder.name", "x") == PF.compare(PF.key("folder.name"), .like, .constant(.string("x"))))
        #expect(try PF.parse("%K > 1", "tags.@count") == PF.compare("tags.@count", .greater, 1))
        #expect(try PF.parse("%K.name == 1", "folder") == PF.compare("folder.name", .equal, 1))
        #expect(try PF.parse("%K == 1", "AND") == PF.compare("AND", .equal, 1), "%K needs no # for reserved words")
        #expect(try PF.parse("ANY %K == 1", Substring("tags")) == PF.compare(PF.key("tags"), .equal, .constant(.integer(1)), modifier: .any))
        #expect(try PF.parse("x IN %K", "list") == PF.compare(PF.key("x"), .in, PF.key("list")))
        #expect(try PF.parse("\"%K\" == 1") == PF.compare(.constant(.string("%K")), .equal, .constant(.integer(1))))
        for bad in ["", "a b", "a..b", ".a", "a.", "1a", "a.@foo", "#a", "a-b"] {
            let error = PF.error("%K == 1", [bad])
            #expect(error?.kind == .argumentType, "\(bad.debugDescription)")
            #expect(error?.position == 0)
        }
        #expect(PF.error("%K == 1", [5])?.message == "%K takes a key path string (keys separated by dots), not Int")
        #expect(PF.error("%K == 1", ["a b"])?.message == #"%K takes a key path string (keys separated by dots), not "a b""#)
    }

    @Test func argumentCountsMustMatch() {
        let missing = PF.error("a == %@ AND b == %d", ["x"])
        #expect(missing?.kind == .missingArgument)
        #expect(missing?.position == 17)
        #expect(missing?.message == "no argument for %d (placeholder 2, 1 argument given)")
        #expect(PF.error("%K == 1", [])?.kind == .missingArgument)
        let extra = PF.error("a == %@", ["x", "y"])
        #expect(extra?.kind == .extraArgument)
        #expect(extra?.position == 7)
        #expect(extra?.message == "2 arguments for 1 placeholder")
        #expect(PF.error("a == 1", [1])?.kind == .extraArgument)
        #expect(PF.error("a == '%@'", ["x"])?.kind == .extraArgument, "a quoted %@ is text")
        // A syntax error before the missing argument wins; one after it loses.
        #expect(PF.error("a == ) %@", [])?.kind == .syntax)
        #expect(PF.error("a == %@ )", [])?.kind == .missingArgument)
    }

    @Test func argumentsAreUsedInOrder() throws {
        let node = try PF.parse("%K == %@ AND %K BETWEEN %@ OR %K IN %@", "a", 1, "b", [2, 3], "c", Set(["z"]))
        #expect(node == .or([
            .and([PF.compare(PF.key("a"), .equal, .constant(.integer(1))),
                  PF.compare(PF.key("b"), .between, .constant(.array([.integer(2), .integer(3)])))]),
            PF.compare(PF.key("c"), .in, .constant(.array([.string("z")]))),
        ]))
    }

    @Test func unknownPlaceholdersAreSyntaxErrors() {
        for format in ["x == %", "x == %%", "x == %s", "x == %c", "x == %k", "x == %ll", "x == %lll", "x == %@@"] {
            #expect(PF.error(format, [1])?.kind == .syntax, "\(format)")
        }
        #expect(PF.error("x == %s", ["a"])?.message == "unknown placeholder '%s' (use %@, %K, %d or %f)")
        #expect(PF.error("x == %s", ["a"])?.position == 5)
    }

    @Test func variablesAreSubstituted() throws {
        let node = try PF.parse("name == $NAME AND date BETWEEN {$FROM, $TO} AND tag IN $TAGS AND $NAME != nil")
        #expect(node.variableNames == ["NAME", "FROM", "TO", "TAGS"])
        let from = Date(timeIntervalSinceReferenceDate: 0), to = Date(timeIntervalSinceReferenceDate: 100)
        let substituted = try node.substituting(["NAME": "x", "FROM": from, "TO": to, "TAGS": ["a", "b"], "unused": 1])
        #expect(substituted == .and([
            PF.compare(PF.key("name"), .equal, .constant(.string("x"))),
            PF.compare(PF.key("date"), .between, .aggregate([.constant(.date(from)), .constant(.date(to))])),
            PF.compare(PF.key("tag"), .in, .constant(.array([.string("a"), .string("b")]))),
            PF.compare(.constant(.string("x")), .notEqual, .constant(.null)),
        ]))
        #expect(substituted.variableNames.isEmpty)
        #expect(try PF.parse("a == $x").substituting(["x": String?.none]) == PF.compare(PF.key("a"), .equal, .constant(.null)))
        #expect(try PF.parse("TRUEPREDICATE").substituting([:]) == .constant(true))
        #expect(try PF.parse("NOT (a == $x OR b == 1)").substituting(["x": 2]) == .not(.or([PF.compare("a", .equal, 2), PF.compare("b", .equal, 1)])))
    }

    @Test func substitutionErrors() {
        let node = try? PF.parse("a == $x AND b BETWEEN $range AND c IN $set")
        let missing = #expect(throws: Strata.FetchPredicateError.self) { try node?.substituting(["x": 1, "range": [1, 2]]) }
        #expect(missing?.kind == .missingVariable)
        #expect(missing?.message == "no value for the variable $set")
        #expect(missing?.position == nil)
        let badType = #expect(throws: Strata.FetchPredicateError.self) {
            try node?.substituting(["x": ["k": 1], "range": [1, 2], "set": [1]])
        }
        #expect(badType?.kind == .argumentType)
        let badRange = #expect(throws: Strata.FetchPredicateError.self) { try node?.substituting(["x": 1, "range": [1, 2, 3], "set": [1]]) }
        #expect(badRange?.kind == .argumentType)
        #expect(badRange?.message == "$range: BETWEEN takes 2 bounds {low, high}, not an array of 3")
        let badSet = #expect(throws: Strata.FetchPredicateError.self) { try node?.substituting(["x": 1, "range": [1, 2], "set": 5]) }
        #expect(badSet?.kind == .argumentType)
        let ok = try? node?.substituting(["x": 1, "range": [1, 2], "set": "abc"])
        #expect(ok != nil, "IN takes a string too")
    }

    @Test func fetchPredicateUsesTheParser() throws {
        let predicate = try FetchPredicate(format: "priority >= %d AND folder.name ==[c] %@", 3, "inbox")
        #expect(predicate.node == .and([
            PF.compare("priority", .greaterOrEqual, 3),
            PF.compare(PF.key("folder.name"), .equal, .constant(.string("inbox")), options: .caseInsensitive),
        ]))
        #expect(predicate.description == #"priority >= 3 AND folder.name ==[c] "inbox""#)
        let tagged = try FetchPredicate(format: "ANY tags.label IN %@", ["swift", "linux"])
        #expect(tagged.description == #"ANY tags.label IN CAST({"swift", "linux"}, "NSArray")"#)
        #expect(try FetchPredicate(format: tagged.description) == tagged)
        let variable = try FetchPredicate(format: "name == $N")
        #expect(variable.variableNames == ["N"])
        #expect(try variable.substituting(["N": "x"]) == FetchPredicate(format: "name == 'x'"))
    }
}
