import Foundation
@testable import Strata
import StrataTesting
import Testing

@Suite("Managed object IDs")
struct ManagedObjectIDTests {
    static let store = UUID(uuidString: "6F1E7B0C-1D2A-4E3B-9C8D-112233445566")!

    @Test func permanentIDsRoundTripThroughTheirURI() throws {
        for (entity, raw) in [("Note", UInt64(1)), ("Folder", 42), ("Café", .max), ("_private9", 1_000_000)] {
            let id = ManagedObjectID(store: Self.store, entityName: entity, primaryKey: PrimaryKey(raw)!)
            #expect(!id.isTemporaryID)
            #expect(id.storeIdentifier == Self.store)
            let uri = id.uriRepresentation
            #expect(uri.scheme == "x-strata")
            let back = try #require(ManagedObjectID(uriRepresentation: uri))
            #expect(back == id)
            #expect(back.primaryKey?.rawValue == raw)
            #expect(back.entityName == entity)
            // The text form parses too (what an app stores).
            #expect(URL(string: uri.absoluteString).flatMap(ManagedObjectID.init(uriRepresentation:)) == id)
        }
        let id = ManagedObjectID(store: Self.store, entityName: "Note", primaryKey: PrimaryKey(42)!)
        #expect(id.description == "x-strata://6F1E7B0C-1D2A-4E3B-9C8D-112233445566/Note/p42")
    }

    @Test func temporaryIDsAreUniqueAndRoundTrip() throws {
        let a = ManagedObjectID(temporaryFor: "Note"), b = ManagedObjectID(temporaryFor: "Note")
        #expect(a != b)
        #expect(a.isTemporaryID && a.storeIdentifier == nil && a.primaryKey == nil)
        #expect(a.uriRepresentation.absoluteString.hasPrefix("x-strata:///Note/t"))
        #expect(ManagedObjectID(uriRepresentation: a.uriRepresentation) == a)
        #expect(Set([a, b, a]).count == 2)
    }

    @Test(arguments: [
        "", "x-strata", "x-strata://", "x-strata:///", "https://6F1E7B0C-1D2A-4E3B-9C8D-112233445566/Note/p1",
        "x-coredata://6F1E7B0C-1D2A-4E3B-9C8D-112233445566/Note/p1",
        "x-strata://not-a-uuid/Note/p1", "x-strata:///Note/p1",
        "x-strata://6F1E7B0C-1D2A-4E3B-9C8D-112233445566/Note/p0",
        "x-strata://6F1E7B0C-1D2A-4E3B-9C8D-112233445566/Note/p01",
        "x-strata://6F1E7B0C-1D2A-4E3B-9C8D-112233445566/Note/p-1",
        "x-strata://6F1E7B0C-1D2A-4E3B-9C8D-112233445566/Note/p+1",
        "x-strata://6F1E7B0C-1D2A-4E3B-9C8D-112233445566/Note/p18446744073709551616",
        "x-strata://6F1E7B0C-1D2A-4E3B-9C8D-112233445566/Note/p",
        "x-strata://6F1E7B0C-1D2A-4E3B-9C8D-112233445566/Note/q1",
        "x-strata://6F1E7B0C-1D2A-4E3B-9C8D-112233445566/Note/p1/extra",
        "x-strata://6F1E7B0C-1D2A-4E3B-9C8D-112233445566/Note",
        "x-strata://6F1E7B0C-1D2A-4E3B-9C8D-112233445566//p1",
        "x-strata://6F1E7B0C-1D2A-4E3B-9C8D-112233445566/9Note/p1",
        "x-strata://6F1E7B0C-1D2A-4E3B-9C8D-112233445566/No%2Fte/p1",
        "x-strata://6F1E7B0C-1D2A-4E3B-9C8D-112233445566/Note/p1?x=1",
        "x-strata://6F1E7B0C-1D2A-4E3B-9C8D-112233445566/Note/p1#f",
        "x-strata://6F1E7B0C-1D2A-4E3B-9C8D-112233445566:80/Note/p1",
        "x-strata://user@6F1E7B0C-1D2A-4E3B-9C8D-112233445566/Note/p1",
        "x-strata://6F1E7B0C-1D2A-4E3B-9C8D-112233445566/Note/t3D2C0000-0000-0000-0000-000000000000",
        "x-strata:///Note/tnot-a-uuid", "x-strata:///Note/t", "x-strata:///Note/p1",
        "x-strata://6F1E7B0C-1D2A-4E3B-9C8D-112233445566/Note/p１",
    ])
    func malformedURIsAreRejectedWithoutTrapping(_ text: String) {
        if let url = URL(string: text) {
            #expect(ManagedObjectID(uriRepresentation: url) == nil, "\(text) should not parse")
        }
    }

    @Test func randomPrimaryKeysRoundTrip() {
        var random = SeededRandomNumberGenerator(seed: 0x1D5)
        for _ in 0..<500 {
            let raw = UInt64.random(in: 1 ... .max, using: &random)
            let id = ManagedObjectID(store: UUID(), entityName: "Row", primaryKey: PrimaryKey(raw)!)
            #expect(ManagedObjectID(uriRepresentation: id.uriRepresentation) == id)
        }
    }
}

@Suite struct ManagedObjectIDCoordinatorCheckTests {
    let store = UUID()

    @Test func acceptsOwnStoresAndEntities() throws {
        let id = ManagedObjectID(store: store, entityName: "Note", primaryKey: PrimaryKey(7)!)
        #expect(ManagedObjectID(uriRepresentation: id.uriRepresentation, stores: [store], model: NotesModel.model) == id)
        let temporary = ManagedObjectID(temporaryFor: "Folder")
        #expect(ManagedObjectID(uriRepresentation: temporary.uriRepresentation, stores: [store], model: NotesModel.model) == temporary)
    }

    @Test func rejectsForeignStoresUnknownAndAbstractEntities() {
        let foreign = ManagedObjectID(store: UUID(), entityName: "Note", primaryKey: PrimaryKey(7)!)
        #expect(ManagedObjectID(uriRepresentation: foreign.uriRepresentation, stores: [store], model: NotesModel.model) == nil)
        let unknown = ManagedObjectID(store: store, entityName: "Spaceship", primaryKey: PrimaryKey(1)!)
        #expect(ManagedObjectID(uriRepresentation: unknown.uriRepresentation, stores: [store], model: NotesModel.model) == nil)
        let abstract = ManagedObjectID(store: store, entityName: "Item", primaryKey: PrimaryKey(1)!)
        #expect(ManagedObjectID(uriRepresentation: abstract.uriRepresentation, stores: [store], model: NotesModel.model) == nil)
        #expect(ManagedObjectID(uriRepresentation: URL(string: "x-strata://nope")!, stores: [store], model: NotesModel.model) == nil)
        #expect(ManagedObjectID(uriRepresentation: URL(fileURLWithPath: "/tmp"), stores: [store], model: NotesModel.model) == nil)
    }
}
