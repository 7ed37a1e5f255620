import Foundation
@testable import Strata
import StrataTesting
import Synchronization
import Testing

// Errors: their kinds, messages and positions (in Characters), and hostile input that must
// give a node or a typed error, never a trap or a hang.

@Suite("Predicate parser: errors and hostile input")
struct PredicateParserErrorTests {
    @Test(arguments: [
        ("", 0, "the predicate is empty"),
        ("   ", 3, "the predicate is empty"),
        ("a ==", 4, "expected a value after '==', found the end"),
        ("title == ", 9, "expected a value after '==', found the end"),
        ("a == 1 AND", 10, "expected a predicate after 'AND', found the end"),
        ("a == 1)", 6, "unexpected ')'"),
        (")", 0, "unexpected ')'"),
        ("(a == 1", 7, "expected ')' to close the '(' at 0, found the end"),
        ("a == 'abc", 5, "unterminated string"),
        ("a == \"x\\qy\"", 7, "unknown escape '\\q'"),
        ("a 1", 2, "expected a comparison operator after 'a', found '1'"),
        ("a", 1, "expected a comparison operator after 'a', found the end"),
        ("a NOT IN {1}", 2, "expected a comparison operator after 'a', found 'NOT' (write NOT (a IN b) to negate a comparison)"),
        ("a == 1 b == 2", 7, "unexpected 'b'"),
        ("a & b", 2, "'&' is not an operator: use '&&' or AND"),
        ("a == ?", 5, "unexpected character '?'"),
        ("a == 5abc", 5, "invalid number '5abc'"),
        ("a == {1, 2", 10, "expected ',' or '}' in the aggregate at 5, found the end"),
        ("a == {1,}", 8, "expected a value after ',', found '}'"),
        ("a - 1", 2, "unexpected '-' (arithmetic is not supported; a negative number is written -5)"),
        ("$ == 1", 0, "expected a variable name after '$'"),
        ("# == 1", 0, "expected a key after '#'"),
        ("a == CAST(\"zz\", \"UUID\")", 10, "CAST(…, \"UUID\"): \"zz\" is not a UUID (8-4-4-4-12 hexadecimal digits)"),
        ("a == CAST(1, \"Color\")", 13, #"CAST to "Color" is not supported (use "NSDate", "NSNumber", "NSDecimalNumber", "# +
            #""NSString", "UUID", "NSURL", "NSData", "ManagedObjectID", "Transformable", "NSArray")"#),
    ])
    func syntaxErrors(format: String, position: Int, message: String) {
        let error = PF.error(format)
        #expect(error?.kind == .syntax)
        #expect(error?.message == message)
        #expect(error?.position == position)
    }

    /// Positions count Characters, not scalars or bytes: "é" and "e\u{301}" are one each,
    /// and so is a flag of two regional indicators.
    @Test func positionsCountCharacters() {
        #expect(PF.error("café == 1 )")?.position == 10)
        #expect(PF.error("cafe\u{301} == 1 )")?.position == 10)
        #expect(PF.error("x == '🇫🇷🇫🇷' )")?.position == 10)
        #expect(PF.error("x == '\r\n' )")?.position == 9, "\\r\\n is one Character")
        #expect(PF.error("日本 == 1 ==")?.position == 8)
        #expect(PF.error("x == 1 AND y == 'e\u{301}")?.position == 16)
    }

    @Test func errorDescriptionsNameThePosition() {
        #expect(PF.error("a ==")?.description == "predicate error at 4: expected a value after '==', found the end")
        #expect(Strata.FetchPredicateError(kind: .missingVariable, message: "m").description == "predicate error: m")
    }

    /// 10,000 levels of parentheses (or of NOT, braces or casts) are refused at level 201,
    /// quickly, with a syntax error rather than a stack overflow.
    @Test func deepNestingIsRefused() {
        let depth = 10_000
        let clock = ContinuousClock()
        let started = clock.now
        let formats = [
            String(repeating: "(", count: depth) + "a == 1" + String(repeating: ")", count: depth),
            String(repeating: "NOT ", count: depth) + "a == 1",
            String(repeating: "!", count: depth) + "a == 1",
            "a IN " + String(repeating: "{", count: depth) + String(repeating: "}", count: depth),
            "a == " + String(repeating: "CAST(", count: depth) + "1",
            String(repeating: "(", count: depth),
        ]
        for format in formats {
            let error = PF.error(format)
            #expect(error?.kind == .syntax)
            #expect(error?.message == "nesting deeper than 200 levels")
        }
        #expect((try? PF.parse(String(repeating: "(", count: 200) + "a == 1" + String(repeating: ")", count: 200))) != nil)
        #expect(started.duration(to: clock.now) < .seconds(5))
    }

    /// The deepest nesting accepted parses, prints, compares and substitutes on a thread with
    /// a 512 KB stack (a secondary thread's size on some platforms), even in a debug build.
    @Test func maximumNestingFitsInASmallStack() {
        let depth = PredicateParser.maximumDepth
        let formats = [
            String(repeating: "(", count: depth) + "a == 1" + String(repeating: ")", count: depth),
            String(repeating: "(a == 1 AND (b == 1 OR ", count: depth / 2) + "a == 1" + String(repeating: "))", count: depth / 2),
            String(repeating: "NOT ", count: depth) + "a == 1",
            "a IN " + String(repeating: "{", count: depth) + String(repeating: "}", count: depth),
            "a IN " + String(repeating: "CAST({", count: depth / 2) + String(repeating: #"}, "NSArray")"#, count: depth / 2),
        ]
        let results = Mutex<[String]>([])
        let finished = DispatchSemaphore(value: 0)
        let thread = Thread {
            for format in formats {
                do {
                    let node = try PredicateParser.parse(format, arguments: [])
                    let again = try PredicateParser.parse(node.formatted, arguments: [])
                    let substituted = try again.substituting([:])
                    results.withLock { $0.append(substituted == node ? "ok" : "differs: \(format.prefix(30))") }
                } catch {
                    results.withLock { $0.append("\(format.prefix(30)): \(error)") }
                }
            }
            finished.signal()
        }
        thread.stackSize = 512 * 1024
        thread.start()
        finished.wait()
        #expect(results.withLock { $0 } == Array(repeating: "ok", count: formats.count))
    }

    /// Long but flat input is fine: 20,000 ORed comparisons parse into one node.
    @Test func longFlatInputParses() throws {
        let format = (0..<20_000).map { "a == \($0)" }.joined(separator: " OR ")
        guard case .or(let operands) = try PF.parse(format) else {
            Issue.record("not an OR")
            return
        }
        #expect(operands.count == 20_000)
    }

    static let pieces = [
        "(", ")", "((", "))", " ", " ", " ", "  ", "\n", "\t", "AND", "and", "&&", "&", "OR", "||", "|", "NOT", "not", "!",
        "==", "=", "!=", "<>", "<", "<=", "=<", ">", ">=", "=>", "BETWEEN", "IN", "in", "CONTAINS", "BEGINSWITH",
        "ENDSWITH", "LIKE", "MATCHES", "[c]", "[cd]", "[", "]", "[x]", "{", "}", ",", ".", "ANY", "SOME", "ALL", "NONE",
        "TRUEPREDICATE", "FALSEPREDICATE", "nil", "NULL", "TRUE", "NO", "SELF", "CAST", "\"NSDate\"", "\"UUID\"", "\"NSArray\"",
        "a", "b", "name", "tags", "x.y", ".@count", "@avg", "@", "@foo", "#", "#AND", "$", "$v", "%@", "%d", "%f", "%K",
        "%", "%%", "%lld", "0", "1", "-", "-1", "0x", "0x1F", "0b", "0o7", "1.5", "1e", "1e-5", "99999999999999999999",
        "\"", "'", "\"text\"", "'t'", "\\", "\\u", "\\uD83D", "\\u0041", "\\n", "é", "e\u{301}", "\u{301}", "😀", "🇫🇷",
        "\0", "\u{FEFF}", "\u{2028}", "ı", "?", "*", "+", "^", ";", ":", "size", "SUBQUERY", "#size",
    ]

    static let arguments: [[any Sendable]] = [[], ["x"], [1, "y"], ["name", 2.5, [1, 2]], ["a.b", "c", 3, nil as String?, Date()]]

    /// Parses `format`, which must give a node (that prints and parses back) or an error at
    /// a position inside the string.
    static func expectNodeOrError(_ format: String, _ arguments: [any Sendable]) {
        do {
            let node = try PredicateParser.parse(format, arguments: arguments)
            let printed = node.formatted
            do {
                let again = try PredicateParser.parse(printed, arguments: [])
                #expect(again == node || again.formatted == printed, "\(format.debugDescription) printed as \(printed)")
            } catch {
                Issue.record("\(format.debugDescription) printed as \(printed), which does not parse: \(error)")
            }
        } catch {
            let length = format.count
            #expect(error.position.map { (0...length).contains($0) } ?? (error.kind == .missingVariable),
                    "\(format.debugDescription): \(error)")
            #expect(!error.message.isEmpty)
        }
    }

    /// 10,000 seeded strings of the language's pieces never trap.
    @Test func randomStringsNeverTrap() {
        var random = SeededRandomNumberGenerator(seed: 0x5EED_F00D)
        for _ in 0..<10_000 {
            let count = Int.random(in: 0...24, using: &random)
            let format = (0..<count).map { _ in Self.pieces.randomElement(using: &random)! }.joined()
            let arguments = Self.arguments.randomElement(using: &random)!
            Self.expectNodeOrError(format, arguments)
        }
    }

    static let validPredicates = [
        "a == 1", "name ==[c] 'x' AND NOT (b < 2 OR c >= 3.5)", "ANY tags.label IN {'a', \"b\"}", "x BETWEEN {1, 2}",
        "notes.@avg.priority > 2 || !(title BEGINSWITH[cd] \"Ab\\n\")", "SELF == $v AND date < CAST(0, \"NSDate\")",
        "#AND CONTAINS 'x' && y LIKE '*a?' OR z MATCHES '[0-9]+'", "ALL a.b != nil AND NONE c.d == TRUE",
        "TRUEPREDICATE OR FALSEPREDICATE", "0x1F < a AND a < -0b11 AND a != 1e-5",
        "id == CAST(\"E621E1F8-C36C-495A-93FC-0C247A3E6E5F\", \"UUID\") AND d IN CAST({1, 2}, \"NSArray\")",
    ]

    /// 10,000 seeded random edits (insert, delete, replace, swap, duplicate, truncate) of
    /// valid predicates never trap.
    @Test func mutationsOfValidPredicatesNeverTrap() {
        var random = SeededRandomNumberGenerator(seed: 0xBAD_5EED)
        for _ in 0..<10_000 {
            var characters = Array(Self.validPredicates.randomElement(using: &random)!)
            for _ in 0..<Int.random(in: 1...4, using: &random) {
                let index = characters.isEmpty ? 0 : Int.random(in: 0..<characters.count, using: &random)
                switch Int.random(in: 0..<6, using: &random) {
                case 0: characters.insert(contentsOf: Self.pieces.randomElement(using: &random)!, at: index)
                case 1: if !characters.isEmpty { characters.remove(at: index) }
                case 2: if !characters.isEmpty { characters.replaceSubrange(index...index, with: Self.pieces.randomElement(using: &random)!) }
                case 3:
                    if characters.count > 1 {
                        characters.swapAt(index, Int.random(in: 0..<characters.count, using: &random))
                    }
                case 4: characters.insert(contentsOf: characters[index..<min(index + 8, characters.count)], at: index)
                default: characters = Array(characters.prefix(index))
                }
            }
            Self.expectNodeOrError(String(characters), Self.arguments.randomElement(using: &random)!)
        }
    }

    /// Every valid predicate parses.
    @Test(arguments: validPredicates)
    func validPredicatesParse(format: String) throws {
        let node = try PF.parse(format)
        #expect(try PF.parse(node.formatted) == node)
    }
}
