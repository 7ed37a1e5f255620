import Foundation
@testable import Strata
import Testing

// Printing nodes back in the format language (`PredicateNode.formatted`, which is
// `FetchPredicate.description`): the exact text, and that it parses back to the same node.
// PredicateParserPropertyTests.swift checks the round trip on random nodes.

@Suite("Predicate parser: printing")
struct PredicateParserFormatTests {
    /// The text `format` parses to prints as `printed`, which parses to the same node.
    @Test(arguments: [
        ("a = 1", "a == 1"), ("a <> 1", "a != 1"), ("a =< 1", "a <= 1"), ("a => 1", "a >= 1"),
        ("a beginswith[C] 'x'", #"a BEGINSWITH[c] "x""#), ("a endswith[dc] 'x'", #"a ENDSWITH[cd] "x""#),
        ("a like[d] 'x'", #"a LIKE[d] "x""#), ("some a.b contains 'x'", #"ANY a.b CONTAINS "x""#),
        ("all a < 1 && none b > 2", "ALL a < 1 AND NONE b > 2"), ("a == 1 || b == 2 && !c == 3", "a == 1 OR b == 2 AND NOT c == 3"),
        ("(a == 1 OR b == 2) AND c == 3", "(a == 1 OR b == 2) AND c == 3"),
        ("a == 1 AND (b == 2 AND c == 3)", "a == 1 AND (b == 2 AND c == 3)"),
        ("a == 1 OR (b == 2 OR c == 3)", "a == 1 OR (b == 2 OR c == 3)"),
        ("NOT (a == 1 AND b == 2)", "NOT (a == 1 AND b == 2)"), ("!!(a == 1)", "NOT NOT a == 1"),
        ("(((truepredicate)))", "TRUEPREDICATE"), ("x between {1,2}", "x BETWEEN {1, 2}"),
        ("x IN {}", "x IN {}"), ("self == nil", "SELF == nil"), ("self.a == null", "a == nil"), ("a == yes", "a == TRUE"),
        ("a == No", "a == FALSE"), ("a == 0x10", "a == 16"), ("a == -0b11", "a == -3"), ("a == 1.50", "a == 1.5"),
        ("a == 2e0", "a == 2.0"), ("a == 1e-5", "a == 1e-05"), ("a == -0.0", "a == -0.0"),
        ("a == 1e400", #"a == CAST("inf", "NSNumber")"#),
        ("a == 99999999999999999999", #"a == CAST("99999999999999999999", "NSDecimalNumber")"#),
        (#"a == 'it\'s "q" \\ \n\t\r \u0001 \u00e9 \u2028'"#, #"a == "it's \"q\" \\ \n\t\r \u0001 é \u2028""#),
        ("a == '\u{301}x'", #"a == "\u0301x""#), ("a == '\u{1D165}x'", #"a == "\uD834\uDD65x""#),
        ("#and == 1 AND #size.#SELF == 2 AND a.in == 3", "#and == 1 AND #size.#SELF == 2 AND a.#in == 3"),
        ("tags.@COUNT > 1", "tags.@count > 1"), ("$v == 1", "$v == 1"), ("a == cast(0, 'nsdate')", #"a == CAST(0.0, "NSDate")"#),
        ("a == CAST('e621e1f8-c36c-495a-93fc-0c247a3e6e5f', 'nsuuid')", #"a == CAST("E621E1F8-C36C-495A-93FC-0C247A3E6E5F", "UUID")"#),
        ("a IN cast({1, 'x', nil}, 'array')", #"a IN CAST({1, "x", nil}, "NSArray")"#),
    ])
    func printing(format: String, printed: String) throws {
        let node = try PF.parse(format)
        #expect(node.formatted == printed)
        #expect(try PF.parse(printed) == node)
    }

    @Test func everyValueKindPrintsAsACastOrALiteral() throws {
        let id = ManagedObjectID(store: UUID(uuidString: "6F1E7B0C-1D2A-4E3B-9C8D-112233445566")!, entityName: "Note", primaryKey: PrimaryKey(42)!)
        let values: [(PredicateValue, String)] = [
            (.null, "nil"), (.bool(true), "TRUE"), (.integer(.min), "-9223372036854775808"), (.double(.pi), "3.141592653589793"),
            (.double(-.infinity), #"CAST("-inf", "NSNumber")"#), (.decimal(Decimal(string: "-1.25")!), #"CAST("-1.25", "NSDecimalNumber")"#),
            (.string("x"), #""x""#), (.date(Date(timeIntervalSinceReferenceDate: 86400.5)), #"CAST(86400.5, "NSDate")"#),
            (.date(.distantFuture), #"CAST(63113904000.0, "NSDate")"#),
            (.date(Date(timeIntervalSinceReferenceDate: -.infinity)), #"CAST("-inf", "NSDate")"#),
            (.data(Data([0, 1, 254, 255])), #"CAST("AAH+/w==", "NSData")"#), (.data(Data()), #"CAST("", "NSData")"#),
            (.uuid(UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")!), #"CAST("E621E1F8-C36C-495A-93FC-0C247A3E6E5F", "UUID")"#),
            (.uri(URL(string: "https://example.com/a%20b?q=1#f")!), #"CAST("https://example.com/a%20b?q=1#f", "NSURL")"#),
            (.objectID(id), #"CAST("x-strata://6F1E7B0C-1D2A-4E3B-9C8D-112233445566/Note/p42", "ManagedObjectID")"#),
            (.transformable(Data([7])), #"CAST("Bw==", "Transformable")"#),
            (.array([.integer(1), .array([]), .string("a")]), #"CAST({1, CAST({}, "NSArray"), "a"}, "NSArray")"#),
        ]
        for (value, printed) in values {
            let node = PF.compare(PF.key("x"), .equal, .constant(value))
            #expect(node.formatted == "x == \(printed)")
            #expect(try PF.parse(node.formatted) == node, "\(printed)")
        }
    }

    /// AND and OR nodes with fewer than 2 operands (which no parse makes) print as what
    /// they mean.
    @Test func degenerateCompoundsPrintAsWhatTheyMean() {
        let a = PF.compare("a", .equal, 1)
        #expect(PredicateNode.and([]).formatted == "TRUEPREDICATE")
        #expect(PredicateNode.or([]).formatted == "FALSEPREDICATE")
        #expect(PredicateNode.and([a]).formatted == "a == 1")
        #expect(PredicateNode.not(.or([.and([a, a])])).formatted == "NOT (a == 1 AND a == 1)")
        #expect(PredicateNode.and([.or([a]), .and([a, .or([a, a])])]).formatted == "a == 1 AND (a == 1 AND (a == 1 OR a == 1))")
    }

    @Test func fetchPredicateCombinatorsPrintAndParseBack() throws {
        let a = try FetchPredicate(format: "a == 1 OR b == 2"), b = try FetchPredicate(format: "c == 3")
        let both = a && b && !b
        #expect(both.description == "(a == 1 OR b == 2) AND c == 3 AND NOT c == 3")
        #expect(try FetchPredicate(format: both.description) == both)
        let either = (a || b) || FetchPredicate.true
        #expect(either.description == "a == 1 OR b == 2 OR c == 3 OR TRUEPREDICATE")
        #expect(try FetchPredicate(format: either.description) == either)
    }
}
