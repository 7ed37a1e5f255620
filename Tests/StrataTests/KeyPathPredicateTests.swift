import Foundation
import Testing
@testable import Strata

/// A class with the attribute types the notes model lacks (floating point, UUID, URL,
/// data, decimal), for the builder's value conversions.
final class SensorReading: ManagedObject {
    @Attribute var celsius: Double = 0
    @Attribute var ratio: Float = 0
    @Attribute var sensor: UUID?
    @Attribute var source: URL?
    @Attribute var payload: Data?
    @Attribute var cost: Decimal = 0
    @Attribute var sequence: Int64 = 0
}

extension Tag {
    /// A computed property of plain Swift: not usable in a query (it ends at an Int, not
    /// at the String it reads).
    var labelLength: Int { label.count }
}

/// The key-path builder: every operator makes the node its format string parses to,
/// evaluates with the format's rules, and carries a refused key path's error to where the
/// predicate is used.
@Suite struct KeyPathPredicateTests {
    /// A note in a folder with three tags, and two more notes in the folder.
    struct Scene {
        let note = Note()
        let other = Note()
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
            note.colour = Colour(red: 1, green: 0, blue: 0)
            folder.name = "Inbox"
            note.folder = folder
            note.tags = Set(tags)
            other.title = "a"
            other.priority = 1
            other.folder = folder
        }
    }

    /// Checks that `built` equals the predicate `format` parses to, and that its
    /// description parses back to it.
    func expectSame(
        _ built: FetchPredicate, _ format: String, _ arguments: any Sendable...,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let parsed = try FetchPredicate(format: format, argumentArray: arguments)
        #expect(built == parsed, "\(built) is not \(parsed)", sourceLocation: sourceLocation)
        #expect(built.description == parsed.description, sourceLocation: sourceLocation)
        #expect(try FetchPredicate(format: built.description) == built, sourceLocation: sourceLocation)
    }

    // MARK: The same nodes as the format language

    @Test func comparisonsMakeTheParsersNodes() throws {
        try expectSame(\Note.title == "Groceries", "title == 'Groceries'")
        try expectSame(\Note.priority != 3, "priority != 3")
        try expectSame(\Note.priority < 3, "priority < 3")
        try expectSame(\Note.priority <= 3, "priority <= 3")
        try expectSame(\Note.priority > 3, "priority > 3")
        try expectSame(\Note.priority >= -2, "priority >= -2")
        try expectSame(\Note.isSelected == true, "isSelected == TRUE")
        try expectSame(\Note.body == nil, "body == nil")
        try expectSame(\Note.body != nil, "body != nil")
        try expectSame(\Note.body == "x", "body == %@", "x")
        let date = Date(timeIntervalSinceReferenceDate: 99)
        try expectSame(\Note.created > date, "created > %@", date)
        try expectSame(\Note.folder?.name == "Inbox", "folder.name == 'Inbox'")
        try expectSame(\Passport.holder?.passport?.number < "X", "holder.passport.number < 'X'")
    }

    @Test func integerAndFloatingPointLiteralsFitEveryWidth() throws {
        try expectSame(\Book.pages >= 100, "pages >= 100")  // Int32
        try expectSame(\Film.minutes < 90, "minutes < 90")  // Int
        try expectSame(\SensorReading.sequence == Int64.max, "sequence == %d", Int64.max)
        try expectSame(\SensorReading.celsius > 20.5, "celsius > 20.5")
        try expectSame(\SensorReading.celsius > 20, "celsius > 20.0")  // a Double literal
        try expectSame(\SensorReading.ratio == 0.5, "ratio == 0.5")  // a Float, as a Double
    }

    @Test func otherValuesAreTheirArguments() throws {
        let uuid = UUID()
        let url = try #require(URL(string: "https://example.com/a"))
        let decimal = try #require(Decimal(string: "12.25"))
        try expectSame(\SensorReading.sensor == uuid, "sensor == %@", uuid)
        try expectSame(\SensorReading.source == url, "source == %@", url)
        try expectSame(\SensorReading.payload == Data([1, 2]), "payload == %@", Data([1, 2]))
        try expectSame(\SensorReading.cost <= decimal, "cost <= %@", decimal)
        let colour = Colour(red: 1, green: 0, blue: 0)
        let bytes = try #require(colour.attributeValue)
        #expect((\Note.colour == colour) == FetchPredicate(node: .comparison(PredicateComparison(
            left: .keyPath(["colour"]), op: .equal, right: .constant(PredicateValue(bytes))))))
    }

    @Test func objectsCompareByID() throws {
        let scene = Scene()
        try expectSame(\Note.folder == scene.folder, "folder == %@", scene.folder.objectID)
        try expectSame(\Note.folder != scene.folder, "folder != %@", scene.folder.objectID)
        try expectSame(\Note.folder == nil, "folder == nil")
        try expectSame((\Note.folder).in([scene.folder]), "folder IN {%@}", scene.folder.objectID)
        try expectSame(\Note.objectID == scene.note.objectID, "SELF == %@", scene.note.objectID)
        try expectSame(\Note.objectID != scene.note.objectID, "SELF != %@", scene.note.objectID)
        try expectSame(
            (\Note.objectID).in([scene.note.objectID, scene.other.objectID]), "SELF IN {%@, %@}",
            scene.note.objectID, scene.other.objectID)
        try expectSame((\Note.tags).contains(scene.tags[0]), "tags CONTAINS %@", scene.tags[0].objectID)
    }

    @Test func membershipAndRanges() throws {
        try expectSame((\Note.priority).in([1, 2, 3]), "priority IN {1, 2, 3}")
        try expectSame((\Note.priority).in(Set<Int16>()), "priority IN {}")
        try expectSame((\Note.body).in(["a", nil]), "body IN {'a', nil}")
        try expectSame((\Note.priority).between(1...3), "priority BETWEEN {1, 3}")
        let (low, high) = (Date(timeIntervalSinceReferenceDate: 0), Date(timeIntervalSinceReferenceDate: 200))
        try expectSame((\Note.created).between(low...high), "created BETWEEN {%@, %@}", low, high)
    }

    @Test func stringOperationsTakeOptions() throws {
        try expectSame((\Note.title).equals("groceries", options: .caseInsensitive), "title ==[c] 'groceries'")
        try expectSame((\Note.title).beginsWith("Gro"), "title BEGINSWITH 'Gro'")
        try expectSame((\Note.title).beginsWith("gro", options: .caseInsensitive), "title BEGINSWITH[c] 'gro'")
        try expectSame((\Note.title).endsWith("ies", options: .diacriticInsensitive), "title ENDSWITH[d] 'ies'")
        try expectSame(
            (\Note.body).contains("CAFE", options: [.caseInsensitive, .diacriticInsensitive]), "body CONTAINS[cd] 'CAFE'")
        try expectSame((\Note.title).like("G*r?es"), "title LIKE 'G*r?es'")
        try expectSame((\Note.folder?.name).matches("[A-Z].*", options: .caseInsensitive), "folder.name MATCHES[c] '[A-Z].*'")
    }

    @Test func quantifiersAndCounts() throws {
        try expectSame((\Note.tags).any(\.label) == "swift", "ANY tags.label == 'swift'")
        try expectSame((\Note.tags).all(\.label) != "rust", "ALL tags.label != 'rust'")
        try expectSame((\Note.tags).none(\.label).beginsWith("sw"), "NONE tags.label BEGINSWITH 'sw'")
        try expectSame((\Note.tags).any(\.label).equals("cafe", options: [.caseInsensitive, .diacriticInsensitive]),
                       "ANY tags.label ==[cd] 'cafe'")
        try expectSame((\Note.tags).any(\.label).in(["x", "swift"]), "ANY tags.label IN {'x', 'swift'}")
        try expectSame((\Folder.notes).any(\.priority).between(2...4), "ANY notes.priority BETWEEN {2, 4}")
        try expectSame((\Folder.notes).all(\.created).between(Date.distantPast...Date.distantFuture),
                       "ALL notes.created BETWEEN {%@, %@}", Date.distantPast, Date.distantFuture)
        try expectSame((\Folder.notes).any(\.body).like("*x*"), "ANY notes.body LIKE '*x*'")
        try expectSame((\Note.folder?.notes).any(\.priority) > 4, "ANY folder.notes.priority > 4")
        try expectSame((\Playlist.tracks).any(\.title).endsWith("mix"), "ANY tracks.title ENDSWITH 'mix'")
        try expectSame((\Note.tags).any(\.notes.count) >= 2, "ANY tags.notes.@count >= 2")
        try expectSame(\Folder.notes.count > 3, "notes.@count > 3")
        try expectSame(\Note.folder?.notes.count == 2, "folder.notes.@count == 2")
    }

    @Test func logicComposesWithTheBuilderAndTheParser() throws {
        try expectSame(\Note.priority > 3 && \Note.title == "Groceries", "priority > 3 AND title == 'Groceries'")
        try expectSame(
            \Note.priority > 3 && (\Note.title).beginsWith("G") && \Note.folder != nil,
            "priority > 3 AND title BEGINSWITH 'G' AND folder != nil")
        try expectSame(!(\Note.priority > 3) || \Note.body == nil, "NOT priority > 3 OR body == nil")
        try expectSame(
            (\Note.priority < 1 || \Note.priority > 4) && !(\Note.title).like("x*"),
            "(priority < 1 OR priority > 4) AND NOT title LIKE 'x*'")
        let parsed = try FetchPredicate(format: "title == 'a' OR title == 'b'")
        try expectSame(parsed && \Note.priority == 1, "(title == 'a' OR title == 'b') AND priority == 1")
        try expectSame(.true && \Note.priority == 1, "TRUEPREDICATE AND priority == 1")
    }

    // MARK: Evaluation

    @Test func evaluatesAsTheFormatDoes() throws {
        let scene = Scene()
        let cases: [(FetchPredicate, Bool)] = [
            (\Note.priority == 3, true), (\Note.priority > 3, false), (\Note.priority >= 3, true),
            (\Note.body != nil, true), (\Note.colour == Colour(red: 1, green: 0, blue: 0), true),
            (\Note.colour == Colour(red: 0, green: 0, blue: 0), false),
            ((\Note.title).equals("groceries", options: .caseInsensitive), true), (\Note.title == "groceries", false),
            ((\Note.body).contains("CAFE", options: [.caseInsensitive, .diacriticInsensitive]), true),
            ((\Note.body).contains("CAFE", options: .caseInsensitive), false),
            ((\Note.title).like("G*r?es"), true), ((\Note.title).matches("G[a-z]+"), true),
            ((\Note.title).matches("roc"), false), ((\Note.title).matches("(unclosed"), false),
            ((\Note.priority).between(3...5), true), ((\Note.priority).between(4...5), false),
            ((\Note.priority).in([1, 3]), true), ((\Note.created).between(Date.distantPast...Date.distantFuture), true),
            (\Note.folder == scene.folder, true), (\Note.folder == nil, false), (\Note.folder == Folder(), false),
            ((\Note.folder).in([Folder(), scene.folder]), true), (\Note.objectID == scene.note.objectID, true),
            ((\Note.objectID).in([scene.other.objectID]), false),
            ((\Note.tags).contains(scene.tags[1]), true), ((\Note.tags).contains(Tag()), false),
            ((\Note.tags).any(\.label) == "linux", true), ((\Note.tags).all(\.label) != "rust", true),
            ((\Note.tags).none(\.label).beginsWith("sw"), false),
            ((\Note.tags).any(\.label).equals("cafe", options: [.caseInsensitive, .diacriticInsensitive]), true),
            (\Note.folder?.notes.count == 2, true), (\Note.tags.count > 2, true),
            ((\Note.folder?.notes).any(\.priority) < 2, true), ((\Note.folder?.notes).all(\.priority) < 2, false),
            (\Note.priority == 3 && (\Note.title).beginsWith("G"), true), (\Note.priority == 4 || \Note.body == nil, false),
            (!(\Note.priority == 4), true),
        ]
        for (predicate, expected) in cases {
            #expect(try predicate.evaluate(with: scene.note) == expected, "\(predicate)")
            let parsed = try FetchPredicate(format: predicate.description)
            #expect(try parsed.evaluate(with: scene.note) == expected, "\(parsed)")
        }
    }

    @Test func checksAgainstTheModel() throws {
        var request = FetchRequest<Note>()
        request.predicate = (\Note.tags).any(\.label) == "x" && \Note.folder?.notes.count > 2 && \Note.folder?.name != nil
        request.sortDescriptors = [FetchSortDescriptor(\Note.folder?.name), FetchSortDescriptor(\Note.priority, ascending: false)]
        #expect(try request.validate(in: NotesModel.model).name == "Note")
    }

    // MARK: Refused key paths

    @Test func refusedKeyPathsAreErrorsWhereThePredicateIsUsed() throws {
        let scene = Scene()
        let refused: [FetchPredicate] = [
            \Note.summary == "x", \Note.title.count > 3, \Note.hasChanges == true, (\Note.summary).beginsWith("x"),
            (\Note.tags).any(\.labelLength) == 1, (\Note.tags).all(\.labelLength).in([1]), \Note.tags.first == nil,
        ]
        for predicate in refused {
            let error = #expect(throws: FetchPredicateError.self) { try predicate.evaluate(with: scene.note) }
            #expect(error?.kind == .unsupported, "\(predicate)")
            #expect(predicate.description.hasPrefix("<predicate error: "), "\(predicate)")
            #expect(predicate.deferredError == error)
        }
    }

    @Test func theErrorSurvivesLogicAndSubstitution() throws {
        let scene = Scene()
        let refused = \Note.summary == "x"
        let fine = \Note.priority == 3
        let template = try FetchPredicate(format: "priority == $P")
        let composed: [FetchPredicate] = [
            refused && fine, fine && refused, refused || fine, fine || refused, !refused, !(fine && !refused),
            try (template && refused).substituting(["P": 3]), try refused.substituting([:]),
        ]
        for predicate in composed {
            #expect(predicate.deferredError == refused.deferredError, "\(predicate)")
            #expect(throws: FetchPredicateError.self) { try predicate.evaluate(with: scene.note) }
        }
        #expect((refused && fine) == (refused && fine))
        #expect((refused && fine) != (fine && fine))
        #expect(Set([refused, refused, fine]).count == 2)
    }

    @Test func validationThrowsTheErrorBeforeAnythingElse() throws {
        let refused = \Note.summary == "x"
        var request = FetchRequest<Note>()
        request.predicate = \Note.priority > 1 && refused
        let error = #expect(throws: FetchPredicateError.self) { try request.validate(in: NotesModel.model) }
        #expect(error == refused.deferredError)
        // Before the entity check, the unknown keys and the unsubstituted variables.
        var unknown = FetchRequest<ManagedObject>(entityName: "Spaceship")
        unknown.predicate = try FetchPredicate(format: "nope == $X") && refused
        unknown.sortDescriptors = [FetchSortDescriptor(key: "nope")]
        let deferred = try #require(refused.deferredError)
        #expect(throws: deferred) { try unknown.validate(in: NotesModel.model) }
        #expect(request.description.contains("where <predicate error: "))
    }

    // MARK: Sort descriptors

    @Test func sortDescriptorsFromKeyPaths() throws {
        #expect(FetchSortDescriptor(\Note.title) == FetchSortDescriptor(key: "title"))
        #expect(FetchSortDescriptor(\Note.title, ascending: true, comparison: .caseInsensitive)
            == FetchSortDescriptor(key: "title", comparison: .caseInsensitive))
        #expect(FetchSortDescriptor(\Note.folder?.name, ascending: false) == FetchSortDescriptor(key: "folder.name", ascending: false))
        #expect(FetchSortDescriptor(\Passport.holder?.passport?.number).key == "holder.passport.number")
        #expect(FetchSortDescriptor(\Book.pages, comparison: .localized).description == "pages[cd] ASC")
        #expect(FetchSortDescriptor(\Note.created, ascending: false).description == "created DESC")
    }

    @Test func sortDescriptorKeyPathsAreCheckedWhenTheRequestRuns() throws {
        var request = FetchRequest<Note>()
        request.sortDescriptors = [FetchSortDescriptor(\Note.title), FetchSortDescriptor(\Note.summary)]
        let error = #expect(throws: FetchPredicateError.self) { try request.validate(in: NotesModel.model) }
        #expect(error?.kind == .unsupported)
        #expect(request.sortDescriptors[1].key.isEmpty)
        #expect(request.sortDescriptors[1].description.hasPrefix("<predicate error: "))
        // A stored key path the store cannot sort by: the same error as its string.
        request.sortDescriptors = [FetchSortDescriptor(\Note.tags.count)]
        #expect(throws: StrataError.unknownKey(key: "tags", entity: "Note")) { try request.validate(in: NotesModel.model) }
        // Sorting in memory refuses it too.
        let notes = [Note(), Note()].map(ObjectSubject.init)
        #expect(throws: FetchPredicateError.self) {
            try FetchSorting.precedes(notes[0], notes[1], by: [FetchSortDescriptor(\Note.summary)])
        }
    }

    @Test func sortingByKeyPathsThroughToOne() throws {
        let folders = ["Z", "a"].map { name -> Folder in
            let folder = Folder()
            folder.name = name
            return folder
        }
        let notes = (0..<4).map { index -> Note in
            let note = Note()
            note.priority = Int16(index)
            note.folder = folders[index % 2]
            return note
        }
        func order(_ descriptors: [FetchSortDescriptor]) throws -> [Int16] {
            try notes.map(ObjectSubject.init).sorted { try FetchSorting.precedes($0, $1, by: descriptors) }
                .map { ($0.object as? Note)?.priority ?? -1 }
        }
        #expect(try order([FetchSortDescriptor(\Note.folder?.name), FetchSortDescriptor(\Note.priority, ascending: false)])
            == [2, 0, 3, 1])
        #expect(try order([
            FetchSortDescriptor(\Note.folder?.name, comparison: .caseInsensitive), FetchSortDescriptor(\Note.priority),
        ]) == [1, 3, 0, 2])
    }

    // MARK: Sendable

    @Test func buildsConcurrently() async throws {
        let date = Date(timeIntervalSinceReferenceDate: 100)
        @Sendable func build() -> [FetchPredicate] {
            [
                \Note.priority > 3 && \Note.title == "Groceries",
                (\Note.tags).any(\.label).beginsWith("sw", options: .caseInsensitive) || \Note.folder?.notes.count > 2,
                (\Note.priority).between(1...3) && (\Note.created).between(date...date) && \Note.body != nil,
                \Note.summary == "x" && \Note.priority == 0,
            ]
        }
        let reference = build()
        let descriptors = [FetchSortDescriptor(\Note.folder?.name), FetchSortDescriptor(\Note.summary)]
        let results = await withTaskGroup(of: ([FetchPredicate], [FetchSortDescriptor]).self) { group in
            for _ in 0..<16 {
                group.addTask {
                    var last: ([FetchPredicate], [FetchSortDescriptor]) = ([], [])
                    for _ in 0..<20 {
                        last = (build(), [FetchSortDescriptor(\Note.folder?.name), FetchSortDescriptor(\Note.summary)])
                    }
                    return last
                }
            }
            var all: [([FetchPredicate], [FetchSortDescriptor])] = []
            for await result in group { all.append(result) }
            return all
        }
        #expect(results.count == 16)
        for (predicates, sorts) in results {
            #expect(predicates == reference)
            #expect(sorts == descriptors)
        }
        // A predicate built here is usable in another task.
        let shared = reference[0]
        let description = await Task.detached { shared.description }.value
        #expect(description == "priority > 3 AND title == \"Groceries\"")
    }
}
