import Foundation
import Testing
@testable import Strata

/// The evaluator's semantics, one row per rule, on in-memory objects.
@Suite struct PredicateEvaluatorTests {
    /// A note in a folder with three tags, and a second, empty folder.
    struct Scene {
        let note = Note()
        let folder = Folder()
        let tags = ["swift", "linux", "Café"].map { label in
            let tag = Tag()
            tag.label = label
            return tag
        }

        init() {
            note.title = "Groceries"
            note.priority = 3
            note.body = "Straße café"
            note.created = Date(timeIntervalSinceReferenceDate: 100)
            folder.name = "Inbox"
            note.folder = folder
            note.tags = Set(tags)
            for (index, title) in ["a", "b"].enumerated() {
                let other = Note()
                other.title = title
                other.priority = Int16(index)
                other.folder = folder
            }
        }
    }

    static let table: [(String, [any Sendable], Bool)] = [
        // Equality and numeric promotion between integers, doubles and decimals.
        ("priority == 3", [], true), ("priority = 3.0", [], true), ("priority == %@", [Decimal(3)], true),
        ("priority != 3", [], false), ("priority <> 4", [], true), ("priority == %@", [true], false),
        ("priority > 2.5", [], true), ("priority < 3", [], false), ("priority <= 3", [], true), ("priority >= %d", [4], false),
        ("priority BETWEEN {3, 5}", [], true), ("priority BETWEEN {4, 5}", [], false), ("priority IN {1, 2, 3}", [], true),
        ("3 < priority", [], false), ("3 IN {3}", [], true),
        // nil: equal only to nil; ordering with nil is false.
        ("body != nil", [], true), ("colour == nil", [], true), ("colour == NULL", [], true), ("colour > 1", [], false),
        ("colour < 1", [], false), ("nil == nil", [], true), ("folder != nil", [], true),
        // Strings: literal by default; [c], [d], [cd].
        ("title == 'groceries'", [], false), ("title ==[c] 'groceries'", [], true),
        ("body CONTAINS 'CAFE'", [], false), ("body CONTAINS[cd] 'CAFE'", [], true), ("body CONTAINS[c] 'CAFE'", [], false),
        ("title BEGINSWITH 'Groc'", [], true), ("title BEGINSWITH[c] 'groc'", [], true), ("title ENDSWITH 'ies'", [], true),
        ("title LIKE 'G*r?es'", [], true), ("title LIKE 'G*x'", [], false), ("title LIKE[c] 'g*'", [], true),
        ("title MATCHES 'G[a-z]+'", [], true), ("title MATCHES 'roc'", [], false), ("title MATCHES[c] 'g[A-Z]+'", [], true),
        ("title < 'H'", [], true), ("title > 'Gr'", [], true), ("title IN 'My Groceries list'", [], true),
        ("title == %@", ["Groceries"], true), ("%K == %@", ["title", "Groceries"], true),
        // Dates compare by time.
        ("created > %@", [Date(timeIntervalSinceReferenceDate: 99)], true),
        ("created == %@", [Date(timeIntervalSinceReferenceDate: 100)], true),
        ("created < %@", [Date(timeIntervalSinceReferenceDate: 100)], false),
        // Key paths through relationships, aggregates and collection operators.
        ("folder.name == 'Inbox'", [], true), ("folder.notes.@count == 3", [], true), ("tags.@count > 2", [], true),
        ("ANY tags.label == 'linux'", [], true), ("SOME tags.label == 'rust'", [], false),
        ("ALL tags.label != 'rust'", [], true), ("NONE tags.label BEGINSWITH 'sw'", [], false),
        ("ANY tags.label ==[cd] 'cafe'", [], true), ("ANY tags.label IN {'x', 'swift'}", [], true),
        ("folder.notes.@max.priority == 3", [], true), ("folder.notes.@min.priority == 0", [], true),
        ("folder.notes.@sum.priority == 4", [], true), ("folder.notes.@avg.priority > 1.3", [], true),
        ("folder.notes.@avg.priority < 1.34", [], true), ("tags.label CONTAINS 'linux'", [], true),
        // Logic.
        ("priority == 3 AND title BEGINSWITH 'G'", [], true), ("priority == 4 OR title BEGINSWITH 'G'", [], true),
        ("NOT priority == 3", [], false), ("!(priority == 4) && TRUEPREDICATE", [], true), ("FALSEPREDICATE", [], false),
    ]

    @Test(arguments: Self.table.indices)
    func semantics(_ index: Int) throws {
        let (format, arguments, expected) = Self.table[index]
        let scene = Scene()
        let predicate = try FetchPredicate(format: format, argumentArray: arguments)
        #expect(try predicate.evaluate(with: scene.note) == expected, "\(format)")
    }

    @Test func objectIDsCompareAsObjects() throws {
        let scene = Scene()
        #expect(try FetchPredicate(format: "folder == %@", scene.folder.objectID).evaluate(with: scene.note))
        #expect(try FetchPredicate(format: "SELF == %@", scene.note.objectID).evaluate(with: scene.note))
        #expect(try !FetchPredicate(format: "folder == %@", scene.note.objectID).evaluate(with: scene.note))
        #expect(try FetchPredicate(format: "ANY tags == %@", scene.tags[1].objectID).evaluate(with: scene.note))
    }

    @Test func unknownKeysAndUnsubstitutedVariablesAreErrors() throws {
        let scene = Scene()
        let unknown = try FetchPredicate(format: "colour.red == 1")
        #expect(throws: FetchPredicateError.self) { try unknown.evaluate(with: scene.note) }
        #expect(throws: FetchPredicateError.self) { try FetchPredicate(format: "nope == 1").evaluate(with: scene.note) }
        let variable = try FetchPredicate(format: "priority == $P")
        #expect(throws: FetchPredicateError.self) { try variable.evaluate(with: scene.note) }
        #expect(try variable.substituting(["P": 3]).evaluate(with: scene.note))
    }

    @Test func likeIsLinearOnHostilePatterns() {
        let text = Array(String(repeating: "a", count: 5_000).unicodeScalars)
        let pattern = Array((String(repeating: "*a", count: 200) + "b").unicodeScalars)
        #expect(!PredicateEvaluator.like(text, pattern))
        #expect(PredicateEvaluator.like(Array("abc".unicodeScalars), Array("*".unicodeScalars)))
        #expect(PredicateEvaluator.like(Array("".unicodeScalars), Array("*".unicodeScalars)))
        #expect(!PredicateEvaluator.like(Array("".unicodeScalars), Array("?".unicodeScalars)))
    }
}
