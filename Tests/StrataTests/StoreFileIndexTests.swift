import Foundation
@testable import Strata
import StrataLMDB
import StrataTesting
import Testing

@Suite("Store file indexes")
struct StoreFileIndexTests {
    /// The IDs `range` finds in the index of `entity.attribute`.
    static func lookup(
        _ store: StoreFile, _ range: IndexRange, entity: String = "Note", attribute: String = "priority",
        includesSubentities: Bool = false
    ) throws -> [ManagedObjectID]? {
        try store.read { reader in
            try reader.primaryKeys(entity: entity, attribute: attribute, in: range, includesSubentities: includesSubentities)
        }
    }

    @Test func entriesFollowInsertsUpdatesAndDeletes() throws {
        let directory = TemporaryDirectory()
        let store = try StoreFixtures.open(directory)
        let five = try store.insert("Note", ["priority": .integer(5)])
        let one = try store.insert("Note", ["priority": .integer(1)])
        let none = try store.insert("Note")
        let three = try store.insert("Note", ["priority": .integer(3)])

        var keys = try store.rawKeys(of: "index:Note.priority")
        #expect(keys.count == 4)
        #expect(keys.first == [0x00] + PrimaryKey(3)!.encoded)  // nil is indexed, and sorts first
        #expect(try Self.lookup(store, .all) == [none, one, three, five])
        #expect(try Self.lookup(store, .equal(to: .integer(3))) == [three])
        #expect(try Self.lookup(store, .equal(to: nil)) == [none])
        #expect(try Self.lookup(store, IndexRange(lower: .excluding(nil), upper: nil)) == [one, three, five])
        #expect(try Self.lookup(store, IndexRange(lower: .excluding(.integer(1)), upper: .excluding(.integer(5)))) == [three])
        #expect(try Self.lookup(store, IndexRange(lower: .init(.integer(1)), upper: .init(.integer(3)))) == [one, three])
        #expect(try Self.lookup(store, IndexRange(lower: nil, upper: .excluding(.integer(3)))) == [none, one])

        try store.write { try $0.update(store.snapshot(five, version: 1, ["priority": .integer(2)])) }
        keys = try store.rawKeys(of: "index:Note.priority")
        #expect(keys.count == 4)
        #expect(try Self.lookup(store, .equal(to: .integer(5))) == [])
        #expect(try Self.lookup(store, .all) == [none, one, five, three])

        try store.write { try $0.delete(three, expectedVersion: 1) }
        #expect(try store.rawKeys(of: "index:Note.priority").count == 3)
        #expect(try Self.lookup(store, .equal(to: .integer(3))) == [])
        // Unchanged values keep their entries; every indexed attribute has one per row.
        #expect(try store.rawKeys(of: "index:Note.title").count == 3)
        #expect(try store.rawKeys(of: "index:Note.created").count == 3)
    }

    @Test func subEntitiesHaveTheirOwnIndexesMergedOnRequest() throws {
        let directory = TemporaryDirectory()
        let store = try StoreFixtures.open(directory)
        let note = try store.insert("Note", ["title": .string("b")])
        let checklist = try store.insert("Checklist", ["title": .string("a")])
        let later = try store.insert("Note", ["title": .string("c")])
        #expect(try store.rawKeys(of: "index:Checklist.title").count == 1)
        #expect(try Self.lookup(store, .all, attribute: "title") == [note, later])
        #expect(try Self.lookup(store, .all, attribute: "title", includesSubentities: true) == [checklist, note, later])
        #expect(try Self.lookup(store, .equal(to: .string("a")), entity: "Checklist", attribute: "title") == [checklist])
        // An index inherited from an abstract entity lives in each concrete entity.
        let folder = try store.insert("Folder", ["created": .date(Date(timeIntervalSinceReferenceDate: 5))])
        #expect(try Self.lookup(store, IndexRange(lower: .excluding(nil), upper: nil), entity: "Item", attribute: "created", includesSubentities: true) == [folder])
    }

    @Test func lookupsRefuseWhatTheyCannotAnswer() throws {
        let directory = TemporaryDirectory()
        let store = try StoreFixtures.open(directory)
        #expect(try Self.lookup(store, .all, attribute: "rating") == nil)  // not indexed: scan instead
        #expect(throws: StrataError.unknownKey(key: "nope", entity: "Note")) { try Self.lookup(store, .all, attribute: "nope") }
        let error = #expect(throws: StrataError.self) { try Self.lookup(store, .equal(to: .string("high")), attribute: "priority") }
        guard let error, error.code == .typeMismatch, error.key == "priority", error.entityName == "Note" else {
            Issue.record("a bound of the wrong type must be refused, got \(String(describing: error))")
            return
        }
    }

    @Test func valuesLongerThanAKeyAreFoundAndOrderedExactly() throws {
        let directory = TemporaryDirectory()
        let store = try StoreFixtures.open(directory)
        let long = String(repeating: "x", count: 600)
        // Inserted out of order; every long value shares its first 503 encoded bytes.
        let b = try store.insert("Note", ["title": .string(long + "b")])
        let a = try store.insert("Note", ["title": .string(long + "a")])
        let c = try store.insert("Note", ["title": .string(long + "c")])
        let short = try store.insert("Note", ["title": .string("short")])
        let bare = try store.insert("Note", ["title": .string(long)])

        let keys = try store.rawKeys(of: "index:Note.title")
        #expect(keys.count == 5 && keys.allSatisfy { $0.count <= IndexLayout.maximumKeyLength })
        #expect(try Self.lookup(store, .all, attribute: "title") == [short, bare, a, b, c])
        #expect(try Self.lookup(store, .equal(to: .string(long + "b")), attribute: "title") == [b])
        #expect(try Self.lookup(store, .equal(to: .string(long)), attribute: "title") == [bare])
        #expect(try Self.lookup(store, IndexRange(lower: .excluding(.string(long + "a")), upper: .excluding(.string(long + "c"))), attribute: "title") == [b])
        #expect(try Self.lookup(store, IndexRange(lower: .init(.string(long + "a")), upper: nil), attribute: "title") == [a, b, c])
        #expect(try Self.lookup(store, IndexRange(lower: nil, upper: .init(.string(long + "a"))), attribute: "title") == [short, bare, a])

        try store.write { try $0.update(store.snapshot(b, version: 1, ["title": .string("zzz")])) }
        #expect(try Self.lookup(store, .equal(to: .string(long + "b")), attribute: "title") == [])
        #expect(try Self.lookup(store, .all, attribute: "title") == [short, bare, a, c, b])
        try store.write { try $0.delete(a, expectedVersion: 1) }
        #expect(try store.rawKeys(of: "index:Note.title").count == 4)
    }
}
