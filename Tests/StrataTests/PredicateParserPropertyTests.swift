import Foundation
import PropertyBased
@testable import Strata
import Testing

// Property-based tests (x-sheep/swift-property-based) of the predicate printer and parser:
// every node the parser can make prints as text that parses back to an equal node, and
// edits of such text never trap. Generators of values come from Fixtures/Generators.swift.
//
// To replay a failure, put the `.fixedSeed("…")` trait the failure prints on the test (and
// never commit it). PropertyBased ignores errors thrown out of a body, so bodies catch and
// record them.

/// Generators of predicate nodes of the shapes the parser makes (AND and OR of 2 or more
/// operands, BETWEEN with 2 bounds, IN with a collection), nesting a few levels deep.
enum PredicateGen {
    typealias Erased<T> = Generator<T, AnySequence<Any>>

    static let reservedKeys = ["AND", "or", "size", "SELF", "self", "nil", "Yes", "in", "TRUEPREDICATE", "cast", "First", "some"]

    /// Keys: identifiers of letters (ASCII or not, combining marks), digits and `_`, and reserved words.
    static let identifier = Gen<String>.frequency(
        (4, PropertyGen.entityName),
        (2, PropertyGen.edge(["a", "name", "café", "cafe\u{301}", "日本", "_", "a1", "ıN", "\u{345}x", "x\u{200D}y"] + reservedKeys))
    ).filter { PredicateLexer.isIdentifier($0) }

    static let keyComponent = Gen<String>.frequency(
        (5, identifier.eraseToAny()),
        (1, PropertyGen.edge(CollectionOperator.allCases.map(\.rawValue)).eraseToAny())
    )

    static let keyPath = keyComponent.array(of: 0...3)

    /// Every kind of value (no NaN: NaN is never equal to itself; `nanPrintsAndParsesBack`
    /// checks those), with arrays nested `depth` levels.
    static func value(depth: Int) -> Erased<PredicateValue> {
        var generators: [(weight: Double, gen: Erased<PredicateValue>)] = [
            (1, Gen.always(PredicateValue.null).eraseToAny()),
            (1, Gen.bool.map { PredicateValue.bool($0) }.eraseToAny()),
            (3, PropertyGen.int64.map { PredicateValue.integer($0) }.eraseToAny()),
            (3, PropertyGen.double.filter { !$0.isNaN }.map { PredicateValue.double($0) }.eraseToAny()),
            (2, PropertyGen.decimal.map { PredicateValue.decimal($0) }.eraseToAny()),
            (4, PropertyGen.string().map { PredicateValue.string($0) }.eraseToAny()),
            (2, PropertyGen.date.filter { !$0.timeIntervalSinceReferenceDate.isNaN }.map { PredicateValue.date($0) }.eraseToAny()),
            (1, PropertyGen.data.map { PredicateValue.data($0) }.eraseToAny()),
            (1, PropertyGen.uuid.map { PredicateValue.uuid($0) }.eraseToAny()),
            (1, PropertyGen.url.map { PredicateValue.uri($0) }.eraseToAny()),
            (1, PropertyBasedManagedObjectIDTests.ids.map { PredicateValue.objectID($0) }.eraseToAny()),
            (1, PropertyGen.data.map { PredicateValue.transformable($0) }.eraseToAny()),
        ]
        if depth > 0 {
            generators.append((1, value(depth: depth - 1).array(of: 0...3).map { PredicateValue.array($0) }.eraseToAny()))
        }
        return Gen<PredicateValue>.frequency(generators).eraseToAny()
    }

    static func expression(depth: Int) -> Erased<Strata.PredicateExpression> {
        var generators: [(weight: Double, gen: Erased<Strata.PredicateExpression>)] = [
            (3, keyPath.map { Strata.PredicateExpression.keyPath($0) }.eraseToAny()),
            (4, value(depth: 1).map { Strata.PredicateExpression.constant($0) }.eraseToAny()),
            (1, identifier.map { Strata.PredicateExpression.variable($0) }.eraseToAny()),
        ]
        if depth > 0 {
            generators.append((1, expression(depth: depth - 1).array(of: 0...3).map { Strata.PredicateExpression.aggregate($0) }.eraseToAny()))
        }
        return Gen<Strata.PredicateExpression>.frequency(generators).eraseToAny()
    }

    static let comparison = zip(
        PropertyGen.edge([PredicateComparison.Modifier.direct, .direct, .any, .all, .none]),
        expression(depth: 1),
        Gen<PredicateComparison.Operator>.case,
        Gen.uint8(in: 0...3),
        expression(depth: 1)
    ).map { modifier, left, op, options, right in
        // The right sides the parser refuses for BETWEEN and IN, made into ones it takes.
        var right = right
        if PredicateFormatParser.checkRightOperand(right, of: op) != nil {
            right = op == .between ? .aggregate([right, right]) : .aggregate([right])
        }
        return PredicateComparison(
            modifier: modifier, left: left, op: op, options: PredicateComparison.Options(rawValue: options), right: right)
    }

    static func node(depth: Int) -> Erased<PredicateNode> {
        let leaf = Gen<PredicateNode>.frequency([
            (weight: 6, gen: comparison.map { PredicateNode.comparison($0) }.eraseToAny()),
            (weight: 1, gen: Gen.bool.map { PredicateNode.constant($0) }.eraseToAny()),
        ]).eraseToAny()
        guard depth > 0 else { return leaf }
        let operand = node(depth: depth - 1)
        return Gen<PredicateNode>.frequency([
            (weight: 3, gen: leaf),
            (weight: 1, gen: operand.map { PredicateNode.not($0) }.eraseToAny()),
            (weight: 1, gen: operand.array(of: 2...4).map { PredicateNode.and($0) }.eraseToAny()),
            (weight: 1, gen: operand.array(of: 2...4).map { PredicateNode.or($0) }.eraseToAny()),
        ]).eraseToAny()
    }
}

@Suite("Predicate parser properties")
struct PredicateParserPropertyTests {
    /// Prints `node`, parses the text, and expects an equal node that prints as the same text.
    static func expectRoundTrip(_ node: PredicateNode) {
        let printed = node.formatted
        do {
            let parsed = try PredicateParser.parse(printed, arguments: [])
            #expect(parsed == node, "\(printed) parsed as \(parsed.formatted)")
            #expect(parsed.formatted.unicodeScalars.elementsEqual(printed.unicodeScalars), "\(printed) reprinted differently")
        } catch {
            Issue.record("\(node) printed as \(printed), which does not parse: \(error)")
        }
    }

    /// Every printed predicate parses back to an equal node.
    @Test func printedPredicatesParseBackEqual() async {
        await propertyCheck(count: 1000, input: PredicateGen.node(depth: 3)) { node in
            Self.expectRoundTrip(node)
        }
    }

    /// The same for single comparisons, which exercise every value and operator more often.
    @Test func printedComparisonsParseBackEqual() async {
        await propertyCheck(count: 2000, input: PredicateGen.comparison) { comparison in
            Self.expectRoundTrip(.comparison(comparison))
        }
    }

    /// A value given as `%@` equals the same value printed as a literal and parsed.
    @Test func argumentsEqualTheirPrintedLiterals() async {
        await propertyCheck(count: 1000, input: PredicateGen.value(depth: 2)) { value in
            do {
                let viaArgument = try PredicateParser.parse("x == %@", arguments: [value])
                let printed = viaArgument.formatted
                let viaText = try PredicateParser.parse(printed, arguments: [])
                #expect(viaArgument == viaText, "\(printed)")
            } catch {
                Issue.record("\(value): \(error)")
            }
        }
    }

    /// Substituting a value for every variable leaves none, and gives the node that the
    /// values written as `%@` give.
    @Test func substitutionReplacesEveryVariable() async {
        await propertyCheck(count: 500, input: PredicateGen.node(depth: 2), PredicateGen.value(depth: 0)) { node, value in
            let names = node.variableNames
            do throws(Strata.FetchPredicateError) {
                let substituted = try node.substituting(Dictionary(uniqueKeysWithValues: names.map { ($0, value as any Sendable) }))
                #expect(substituted.variableNames.isEmpty)
                Self.expectRoundTrip(substituted)
            } catch {
                // Only a BETWEEN or IN right side may refuse the value.
                #expect(error.kind == .argumentType, "\(node.formatted): \(error)")
            }
            if let missing = names.first {
                let error = #expect(throws: Strata.FetchPredicateError.self) {
                    try node.substituting(Dictionary(uniqueKeysWithValues: names.subtracting([missing]).map { ($0, value as any Sendable) }))
                }
                #expect(error?.kind == .missingVariable || error?.kind == .argumentType)
            }
        }
    }

    /// Random edits of printed predicates give a node or an error inside the string.
    @Test func editsOfPrintedPredicatesNeverTrap() async {
        let edits = zip(Gen.double(in: 0..<1), PropertyGen.edge(PredicateParserErrorTests.pieces), Gen.int(in: 0...3)).array(of: 1...4)
        await propertyCheck(count: 1000, input: PredicateGen.node(depth: 2), edits) { node, edits in
            var characters = Array(node.formatted)
            for (at, piece, kind) in edits {
                let index = min(Int(Double(characters.count) * at), characters.count)
                switch kind {
                case 0: characters.insert(contentsOf: piece, at: index)
                case 1: if index < characters.count { characters.remove(at: index) }
                case 2: if index < characters.count { characters.replaceSubrange(index...index, with: piece) }
                default: characters = Array(characters.prefix(index))
                }
            }
            PredicateParserErrorTests.expectNodeOrError(String(characters), [])
        }
    }

    @Test func nanPrintsAndParsesBack() throws {
        let node = PF.compare(PF.key("x"), .in, .aggregate([
            .constant(.double(.nan)), .constant(.date(Date(timeIntervalSinceReferenceDate: .nan))), .constant(.decimal(.nan)),
        ]))
        #expect(node.formatted == #"x IN {CAST("nan", "NSNumber"), CAST("nan", "NSDate"), CAST("NaN", "NSDecimalNumber")}"#)
        guard case .comparison(let parsed) = try PF.parse(node.formatted), case .aggregate(let elements) = parsed.right,
              elements.count == 3, case .constant(.double(let double)) = elements[0], case .constant(.date(let date)) = elements[1],
              case .constant(.decimal(let decimal)) = elements[2]
        else {
            Issue.record("\(node.formatted) parsed differently")
            return
        }
        #expect(double.isNaN && date.timeIntervalSinceReferenceDate.isNaN && decimal.isNaN)
    }
}
