import Foundation
import Testing
@testable import Strata

// Foundation's #Predicate translated into FetchPredicate: each construct against the
// format string that says the same, Foundation's own evaluate against Strata's on
// in-memory objects, the documented differences, and every refusal.

/// A captured value with key paths (folded into constants).
private struct Limits: Codable, Sendable {
    var low: Int16
    var high: Int16
}

/// One attribute of each type, for constants of every kind.
final class FoundationSample: ManagedObject {
    @Attribute var uuid: UUID = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1))
    @Attribute var url: URL = URL(fileURLWithPath: "/tmp/a")
    @Attribute var data: Data = Data([1, 2])
    @Attribute var amount: Decimal = 0
    @Attribute var ratio: Double = 0
    @Attribute var weight: Float = 0
    @Attribute var count: Int64 = 0
    @Attribute var small: Int32 = 0
    @Attribute var flag: Bool = false
    @Attribute var day: Date = Date(timeIntervalSinceReferenceDate: 0)
}

/// A `#Predicate` and the format string it should translate to.
struct FoundationTranslation<Root: ManagedObject>: Sendable, CustomTestStringConvertible {
    let predicate: Predicate<Root>
    let format: String
    let arguments: [any Sendable]
    let line: Int

    init(_ format: String, _ arguments: [any Sendable], line: Int, _ predicate: Predicate<Root>) {
        self.predicate = predicate
        self.format = format
        self.arguments = arguments
        self.line = line
    }

    var testDescription: String { "line \(line): \(format)" }
}

@Suite("Foundation #Predicate translation")
struct FoundationPredicateTests {
    /// Notes with every shape of value: nil body and folder, no tags, empty strings.
    struct Scene {
        let notes: [Note]
        let tags: [Tag]
        let folders: [Folder]

        init() {
            let folders = ["Inbox", "Archive"].map { name in
                let folder = Folder()
                folder.name = name
                return folder
            }
            let tags = ["swift", "linux", "rust", "Café"].map { label in
                let tag = Tag()
                tag.label = label
                return tag
            }
            self.folders = folders
            self.tags = tags
            let allTags = tags
            let rows: [(String, Int16, String?, Double?, Int?, [Int], Bool)] = [
                ("Groceries", 3, "Straße café", 100, 0, [0, 1], true),
                ("", 0, nil, nil, nil, [], false),
                ("a", 5, "", 50, 1, [0], false),
                ("Zebra", 1, "x", 200, 0, [2, 3], false),
                ("Gromit", 2, "none", nil, 1, [1], true),
            ]
            notes = rows.map { title, priority, body, created, folder, tags, selected in
                let note = Note()
                note.title = title
                note.priority = priority
                note.body = body
                note.created = created.map { Date(timeIntervalSinceReferenceDate: $0) }
                note.folder = folder.map { folders[$0] }
                note.tags = Set(tags.map { allTags[$0] })
                note.isSelected = selected
                return note
            }
            notes[0].colour = Colour(red: 1, green: 0, blue: 0)
        }
    }

    static let date = Date(timeIntervalSinceReferenceDate: 150)
    static let red = Colour(red: 1, green: 0, blue: 0)

    static let translations: [FoundationTranslation<Note>] = {
        let limits = Limits(low: 1, high: 4)
        let closed: ClosedRange<Int16> = 1...3
        let upTo: PartialRangeThrough<Int16> = ...2
        let from: PartialRangeFrom<Int16> = 3...
        let date = Self.date
        let red = Self.red
        let nothing: String? = nil
        var all: [FoundationTranslation<Note>] = []
        func add(_ format: String, with arguments: [any Sendable] = [], line: Int = #line, _ predicate: Predicate<Note>) {
            all.append(FoundationTranslation(format, arguments, line: line, predicate))
        }
        // Comparisons, constants on either side.
        add("title == \"Groceries\"", #Predicate<Note> { $0.title == "Groceries" })
        add("title != \"a\"", #Predicate<Note> { $0.title != "a" })
        add("priority > 2", #Predicate<Note> { $0.priority > 2 })
        add("priority >= 2", #Predicate<Note> { $0.priority >= 2 })
        add("priority < 2", #Predicate<Note> { $0.priority < 2 })
        add("priority <= 2", #Predicate<Note> { $0.priority <= 2 })
        add("3 < priority", #Predicate<Note> { 3 < $0.priority })
        add("priority > -1", #Predicate<Note> { $0.priority > -1 })
        add("priority < 4", #Predicate<Note> { $0.priority < limits.high })
        add("title > \"G\"", #Predicate<Note> { $0.title > "G" })
        add("created > %@", with: [date], #Predicate<Note> { $0.created! > date })
        add("colour == %@", with: [Colour.encoded(red)], #Predicate<Note> { $0.colour == red })
        add("body == nil", #Predicate<Note> { $0.body == nothing })
        // Logic.
        add("priority >= 2 AND priority <= 4", #Predicate<Note> { $0.priority >= 2 && $0.priority <= 4 })
        add("priority == 0 OR title == \"a\" OR isSelected == TRUE",
            #Predicate<Note> { $0.priority == 0 || $0.title == "a" || $0.isSelected })
        add("(priority == 0 OR priority == 5) AND title != \"\"",
            #Predicate<Note> { ($0.priority == 0 || $0.priority == 5) && $0.title != "" })
        add("NOT priority == 3", #Predicate<Note> { !($0.priority == 3) })
        add("isSelected == TRUE", #Predicate<Note> { $0.isSelected })
        add("NOT isSelected == TRUE", #Predicate<Note> { !$0.isSelected })
        add("isSelected == FALSE", #Predicate<Note> { $0.isSelected == false })
        add("TRUEPREDICATE", #Predicate<Note> { _ in true })
        add("FALSEPREDICATE", #Predicate<Note> { _ in false })
        add("priority > 1", #Predicate<Note> { $0.priority > 1 && true })
        add("SELF == SELF", #Predicate<Note> { $0 == $0 })
        add("SELF == SELF", #Predicate<Note> { $0.objectID == $0.objectID })
        // nil, optional chaining, forced unwrap, nil-coalescing.
        add("body == nil", #Predicate<Note> { $0.body == nil })
        add("body != nil", #Predicate<Note> { $0.body != nil })
        add("folder == nil", #Predicate<Note> { $0.folder == nil })
        add("folder.name == \"Inbox\"", #Predicate<Note> { $0.folder?.name == "Inbox" })
        add("folder.name != \"Inbox\"", #Predicate<Note> { $0.folder?.name != "Inbox" })
        add("folder.name == \"Inbox\"", #Predicate<Note> { $0.folder!.name == "Inbox" })
        add("folder.notes.@count == 2", #Predicate<Note> { $0.folder?.notes.count == 2 })
        add("body == \"x\"", #Predicate<Note> { ($0.body ?? "") == "x" })
        add("body == \"\" OR body == nil", #Predicate<Note> { ($0.body ?? "") == "" })
        add("(body != nil AND body != \"x\") OR body == nil", #Predicate<Note> { ($0.body ?? "none") != "x" })
        add("body BEGINSWITH \"S\"", #Predicate<Note> { ($0.body ?? "").starts(with: "S") })
        add("(body != nil AND body == title) OR (body == nil AND \"\" == title)",
            #Predicate<Note> { ($0.body ?? "") == $0.title })
        add("folder.name == \"none\" OR folder.name == nil", #Predicate<Note> { ($0.folder?.name ?? "none") == "none" })
        // Collections: counts, emptiness, membership.
        add("tags.@count > 1", #Predicate<Note> { $0.tags.count > 1 })
        add("tags.@count == 0", #Predicate<Note> { $0.tags.isEmpty })
        add("NOT tags.@count == 0", #Predicate<Note> { !$0.tags.isEmpty })
        add("title == \"\"", #Predicate<Note> { $0.title.isEmpty })
        add("priority IN {1, 2, 3}", #Predicate<Note> { [1, 2, 3].contains($0.priority) })
        add("title IN {\"a\", \"Zebra\"}", #Predicate<Note> { ["a", "Zebra"].contains($0.title) })
        add("priority BETWEEN {1, 3}", #Predicate<Note> { (1...3).contains($0.priority) })
        add("priority >= 1 AND priority < 3", #Predicate<Note> { (1..<3).contains($0.priority) })
        add("priority BETWEEN {1, 3}", #Predicate<Note> { closed.contains($0.priority) })
        add("priority <= 2", #Predicate<Note> { upTo.contains($0.priority) })
        add("priority >= 3", #Predicate<Note> { from.contains($0.priority) })
        add("priority BETWEEN {1, 4}", #Predicate<Note> { (limits.low...limits.high).contains($0.priority) })
        // Strings.
        add("title CONTAINS \"roc\"", #Predicate<Note> { $0.title.contains("roc") })
        add("title BEGINSWITH \"Gro\"", #Predicate<Note> { $0.title.starts(with: "Gro") })
        add("\"Groceries list\" CONTAINS title", #Predicate<Note> { "Groceries list".contains($0.title) })
        add("title CONTAINS \"\"", #Predicate<Note> { $0.title.contains("") })
        // Quantifiers over to-many relationships.
        add("ANY tags.label == \"swift\"", #Predicate<Note> { $0.tags.contains { $0.label == "swift" } })
        add("NONE tags.label == \"swift\"", #Predicate<Note> { !$0.tags.contains { $0.label == "swift" } })
        add("ALL tags.label != \"rust\"", #Predicate<Note> { $0.tags.allSatisfy { $0.label != "rust" } })
        add("NOT ALL tags.label != \"rust\"", #Predicate<Note> { !$0.tags.allSatisfy { $0.label != "rust" } })
        add("ANY tags.label == \"swift\" OR ANY tags.label BEGINSWITH \"li\"",
            #Predicate<Note> { $0.tags.contains { $0.label == "swift" || $0.label.starts(with: "li") } })
        add("ALL tags.label != \"swift\" AND ALL tags.label != \"rust\"",
            #Predicate<Note> { $0.tags.allSatisfy { $0.label != "swift" && $0.label != "rust" } })
        add("NOT ALL tags.label == \"swift\"", #Predicate<Note> { $0.tags.contains { !($0.label == "swift") } })
        add("ANY tags.label == title", #Predicate<Note> { note in note.tags.contains { $0.label == note.title } })
        add("ANY tags.label == \"swift\"", #Predicate<Note> { $0.tags.contains { "swift" == $0.label } })
        add("ANY tags.label IN \"a swift b\"", #Predicate<Note> { $0.tags.contains { "a swift b".contains($0.label) } })
        add("priority > 2 AND ANY tags.label == \"swift\"",
            #Predicate<Note> { note in note.tags.contains { $0.label == "swift" && note.priority > 2 } })
        add("ANY tags.label IN {\"rust\", \"linux\"}", #Predicate<Note> { $0.tags.contains { ["rust", "linux"].contains($0.label) } })
        add("tags.@count > 0", #Predicate<Note> { $0.tags.contains { _ in true } })
        add("tags.@count == 0", #Predicate<Note> { $0.tags.allSatisfy { _ in false } })
        add("ANY tags.notes.title == \"a\"",
            #Predicate<Note> { $0.tags.contains { tag in tag.notes.contains { $0.title == "a" } } })
        add("ALL tags.notes.priority > 0",
            #Predicate<Note> { $0.tags.allSatisfy { tag in tag.notes.allSatisfy { $0.priority > 0 } } })
        return all
    }()

    @Test(arguments: Self.translations)
    func translatesToTheFormat(_ translation: FoundationTranslation<Note>) throws {
        let expected = try FetchPredicate(format: translation.format, argumentArray: translation.arguments)
        let translated = try FetchPredicate(translation.predicate)
        #expect(translated.description == expected.description, "line \(translation.line)")
    }

    @Test("every translated key path exists in the model")
    func translationsValidate() throws {
        for translation in Self.translations {
            var request = FetchRequest<Note>(entityName: "Note")
            request.predicate = try FetchPredicate(translation.predicate)
            #expect(throws: Never.self, "line \(translation.line)") { _ = try request.validate(in: NotesModel.model) }
        }
    }

    @Test(arguments: Self.translations)
    func agreesWithFoundation(_ translation: FoundationTranslation<Note>) throws {
        let scene = Scene()
        let translated = try FetchPredicate(translation.predicate)
        var compared = 0
        for note in scene.notes {
            // Foundation throws on a forced unwrap of nil: nothing to agree with there.
            guard let expected = try? translation.predicate.evaluate(note) else { continue }
            compared += 1
            #expect(try translated.evaluate(with: note) == expected, "line \(translation.line), note \(note.title.debugDescription)")
        }
        #expect(compared > 0, "line \(translation.line)")
    }
}

extension FoundationPredicateTests {
    static let sampleTranslations: [FoundationTranslation<FoundationSample>] = {
        let id = UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F") ?? UUID()
        let other = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1))
        let url = URL(fileURLWithPath: "/tmp/b")
        let bytes = Data([1, 2, 3])
        let amount = Decimal(string: "2.5") ?? 0
        let start = Date(timeIntervalSinceReferenceDate: 0)
        let end = Date(timeIntervalSinceReferenceDate: 86_400)
        var all: [FoundationTranslation<FoundationSample>] = []
        func add(_ format: String, with arguments: [any Sendable] = [], line: Int = #line, _ predicate: Predicate<FoundationSample>) {
            all.append(FoundationTranslation(format, arguments, line: line, predicate))
        }
        add("uuid == %@", with: [id], #Predicate<FoundationSample> { $0.uuid == id })
        add("uuid IN {%@, %@}", with: [id, other], #Predicate<FoundationSample> { [id, other].contains($0.uuid) })
        add("url == %@", with: [url], #Predicate<FoundationSample> { $0.url == url })
        add("data == %@", with: [bytes], #Predicate<FoundationSample> { $0.data == bytes })
        add("amount > %@", with: [amount], #Predicate<FoundationSample> { $0.amount > amount })
        add("amount == %@", with: [Decimal(-3)], #Predicate<FoundationSample> { $0.amount == -3 })
        add("ratio < 0.5", #Predicate<FoundationSample> { $0.ratio < 0.5 })
        add("ratio == -0.25", #Predicate<FoundationSample> { $0.ratio == -0.25 })
        add("weight >= 1.5", #Predicate<FoundationSample> { $0.weight >= 1.5 })
        add("count == 7", #Predicate<FoundationSample> { $0.count == 7 })
        add("small IN {1, 2}", #Predicate<FoundationSample> { [1, 2].contains($0.small) })
        add("flag == TRUE", #Predicate<FoundationSample> { $0.flag })
        add("day BETWEEN {%@, %@}", with: [start, end], #Predicate<FoundationSample> { (start...end).contains($0.day) })
        add("day >= %@ AND day < %@", with: [start, end], #Predicate<FoundationSample> { (start..<end).contains($0.day) })
        return all
    }()

    /// Samples on both sides of every constant above.
    static func samples() -> [FoundationSample] {
        (0..<4).map { index in
            let sample = FoundationSample()
            if index == 3 {
                sample.uuid = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2))
            }
            if index == 1 {
                sample.uuid = UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F") ?? UUID()
                sample.url = URL(fileURLWithPath: "/tmp/b")
                sample.data = Data([1, 2, 3])
                sample.flag = true
            }
            sample.amount = [Decimal(-3), Decimal(2.5), Decimal(3), Decimal(0)][index]
            sample.ratio = [-0.25, 0.5, 0.1, 2][index]
            sample.weight = [1.5, 0.5, 2, 1.4][index]
            sample.count = Int64([7, 0, -7, 8][index])
            sample.small = Int32(index)
            sample.day = Date(timeIntervalSinceReferenceDate: [0, 86_400, 86_399.5, -1][index])
            return sample
        }
    }

    @Test(arguments: Self.sampleTranslations)
    func constantsOfEveryType(_ translation: FoundationTranslation<FoundationSample>) throws {
        let expected = try FetchPredicate(format: translation.format, argumentArray: translation.arguments)
        let translated = try FetchPredicate(translation.predicate)
        #expect(translated.description == expected.description, "line \(translation.line)")
        var matches = 0
        for sample in Self.samples() {
            let foundation = try translation.predicate.evaluate(sample)
            if foundation { matches += 1 }
            #expect(try translated.evaluate(with: sample) == foundation, "line \(translation.line)")
        }
        #expect(matches > 0 && matches < 4, "line \(translation.line): the samples should fall on both sides")
    }

    @Test("other roots: a subclass with inherited attributes, a to-many membership test")
    func otherRoots() throws {
        let long = #Predicate<Book> { $0.title.starts(with: "The") && $0.pages > 100 }
        #expect(try FetchPredicate(long).description == FetchPredicate(format: "title BEGINSWITH 'The' AND pages > 100").description)
        let book = Book()
        book.title = "The Road"
        book.pages = 300
        #expect(try FetchPredicate(long).evaluate(with: book))

        // A tag whose notes list it back: `ANY notes.tags == SELF`.
        let backed = #Predicate<Tag> { tag in tag.notes.contains { note in note.tags.contains(tag) } }
        #expect(try FetchPredicate(backed).description == FetchPredicate(format: "ANY notes.tags == SELF").description)
        let scene = Scene()
        for tag in scene.tags {
            #expect(try FetchPredicate(backed).evaluate(with: tag) == backed.evaluate(tag))
        }
    }

    @Test("a captured object ID compares with an object or a to-one relationship")
    func objectIDs() throws {
        let folder = Folder()
        let note = Note()
        note.folder = folder
        let other = Note()
        let id = folder.objectID
        let inFolder = #Predicate<Note> { $0.folder?.objectID == id }
        #expect(try FetchPredicate(inFolder).description == FetchPredicate(format: "folder == %@", id).description)
        #expect(try FetchPredicate(inFolder).evaluate(with: note))
        #expect(try !FetchPredicate(inFolder).evaluate(with: other))
        #expect(try inFolder.evaluate(note) && !inFolder.evaluate(other))
        let noteID = note.objectID
        let itself = #Predicate<Note> { $0.objectID == noteID }
        #expect(try FetchPredicate(itself).evaluate(with: note))
        #expect(try !FetchPredicate(itself).evaluate(with: other))
        // The ID round-trips through Codable as its URI.
        let data = try JSONEncoder().encode(id)
        #expect(try JSONDecoder().decode(ManagedObjectID.self, from: data) == id)
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(ManagedObjectID.self, from: Data(#""x-strata:nope""#.utf8)) }
    }

    @Test("a constant predicate is TRUEPREDICATE or FALSEPREDICATE")
    func constants() throws {
        #expect(try FetchPredicate(#Predicate<Note> { _ in true }) == .true)
        #expect(try FetchPredicate(#Predicate<Note> { _ in false }) == .false)
        #expect(try FetchPredicate(#Predicate<Note> { _ in 1 < 2 }) == .true)
        #expect(try FetchPredicate(#Predicate<Note> { _ in !("a" == "a") }) == .false)
    }

    // Documented differences: where Foundation's `evaluate` and a fetch cannot agree.

    @Test("strings compare by their bytes, not by canonical equivalence")
    func stringsCompareByBytes() throws {
        let note = Note()
        note.title = "cafe\u{301}"  // "café" with a combining accent
        let equal = #Predicate<Note> { $0.title == "caf\u{E9}" }  // "café" precomposed
        #expect(try equal.evaluate(note))
        #expect(try !FetchPredicate(equal).evaluate(with: note))
        // "é" is one Character, so the title holds no Character "e": CONTAINS agrees.
        let containsE = #Predicate<Note> { $0.title.contains("e") }
        #expect(try !containsE.evaluate(note))
        #expect(try !FetchPredicate(containsE).evaluate(with: note))
        // BEGINSWITH compares bytes (the order of an index), starts(with:) Characters.
        let prefix = #Predicate<Note> { $0.title.starts(with: "cafe") }
        #expect(try !prefix.evaluate(note))
        #expect(try FetchPredicate(prefix).evaluate(with: note))
    }

    @Test("a forced unwrap of nil compares nil where Foundation throws")
    func forcedUnwrapOfNil() throws {
        let note = Note()  // no creation date, no folder
        let date = Self.date
        let later = #Predicate<Note> { $0.created! > date }
        #expect(throws: (any Error).self) { try later.evaluate(note) }
        #expect(try !FetchPredicate(later).evaluate(with: note))
        let elsewhere = #Predicate<Note> { $0.folder!.name != "Inbox" }
        #expect(throws: (any Error).self) { try elsewhere.evaluate(note) }
        #expect(try FetchPredicate(elsewhere).evaluate(with: note))  // nil != "Inbox"
    }

    @Test("tasks translate the same predicates at once")
    func concurrentTranslation() async throws {
        let predicates = Self.translations.map(\.predicate)
        let serial = try predicates.map { predicate throws(FetchPredicateError) in try FetchPredicate(predicate) }
        try await withThrowingTaskGroup(of: [FetchPredicate].self) { group in
            for _ in 0..<8 {
                group.addTask {
                    try predicates.map { predicate throws(FetchPredicateError) in try FetchPredicate(predicate) }
                }
            }
            for try await translated in group {
                #expect(translated == serial)
            }
        }
    }
}

/// A `#Predicate` that cannot be translated, and words its refusal must contain.
struct FoundationRefusal: Sendable, CustomTestStringConvertible {
    let predicate: Predicate<Note>
    let words: String
    let line: Int

    var testDescription: String { "line \(line): \(words)" }
}

@Suite("Foundation #Predicate refusals")
struct FoundationPredicateRefusalTests {
    static let refusals: [FoundationRefusal] = {
        let table = ["a": 1]
        let missing: Int16? = nil
        var all: [FoundationRefusal] = []
        func add(_ words: String, line: Int = #line, _ predicate: Predicate<Note>) {
            all.append(FoundationRefusal(predicate: predicate, words: words, line: line))
        }
        add("arithmetic (+, -, *) (PredicateExpressions.Arithmetic)", #Predicate<Note> { $0.priority + 1 > 2 })
        add("division (/)", #Predicate<Note> { $0.priority / 2 == 1 })
        add("a remainder (%)", #Predicate<Note> { $0.priority % 2 == 0 })
        add("a negated value (unary -)", #Predicate<Note> { -$0.priority < 0 })
        add("a conditional (?: or if)", #Predicate<Note> { ($0.priority > 2 ? $0.title : "none") == "x" })
        add("a dictionary lookup", #Predicate<Note> { table[$0.title] == 1 })
        add("a regular expression match", #Predicate<Note> { $0.title.contains(/G.+s/) })
        add("filter", #Predicate<Note> { $0.tags.filter { $0.label == "swift" }.count > 1 })
        add("the length of a string (String.count)", #Predicate<Note> { $0.title.count > 3 })
        add("the length of a string (String.count)", #Predicate<Note> { $0.body?.count == 3 })
        add("outside one chain of properties", #Predicate<Note> { $0.summary == "x" })
        add("a forced unwrap (!) of a captured nil", #Predicate<Note> { $0.priority == missing! })
        add("joins 2 tests of the element with &&, which needs a subquery",
            #Predicate<Note> { $0.tags.contains { $0.label != "swift" && $0.label != "rust" } })
        add("joins 2 tests of the element with ||, which needs a subquery",
            #Predicate<Note> { $0.tags.allSatisfy { $0.label == "swift" || $0.label.starts(with: "r") } })
        add("reads the element too", #Predicate<Note> { $0.tags.contains { $0.label == $0.label } })
        add("tests @count of each element's to-many relationship",
            #Predicate<Note> { $0.tags.contains { $0.notes.count > 2 } })
        add("tests @count of each element's to-many relationship",
            #Predicate<Note> { $0.tags.contains { tag in tag.notes.contains { _ in true } } })
        add("quantified the other way (ALL)",
            #Predicate<Note> { $0.tags.contains { tag in tag.notes.allSatisfy { $0.priority > 1 } } })
        add("works only on a to-many relationship",
            #Predicate<Note> { note in ["a", "b"].contains { $0 == note.title } })
        add("optional chaining (?.) on body must end at a property", #Predicate<Note> { $0.body?.isEmpty == true })
        add("only strings have a prefix test", #Predicate<Note> { _ in [1, 2].starts(with: [1]) })
        add("the to-many relationship tags is compared as a whole", #Predicate<Note> { $0.tags == $0.tags })

        return all
    }()

    @Test("casts and type checks are refused")
    func casts() {
        let cast = #expect(throws: FetchPredicateError.self) {
            try FetchPredicate(#Predicate<Item> { ($0 as? Book)?.pages == 300 })
        }
        #expect(cast?.message.contains("a conditional cast (as?)") == true)
        let check = #expect(throws: FetchPredicateError.self) { try FetchPredicate(#Predicate<Item> { $0 is Book }) }
        #expect(check?.message.contains("a type check (is)") == true)
    }

    @Test(arguments: Self.refusals)
    func refuses(_ refusal: FoundationRefusal) {
        let error = #expect(throws: FetchPredicateError.self, "line \(refusal.line)") {
            try FetchPredicate(refusal.predicate)
        }
        #expect(error?.kind == .unsupported, "line \(refusal.line)")
        #expect(error?.message.contains(refusal.words) == true, "line \(refusal.line): \(error?.message ?? "")")
    }
}

extension Colour {
    /// The constant a transformable value is compared as.
    static func encoded(_ colour: Colour) -> PredicateValue {
        PredicateValue(colour.attributeValue)
    }
}
