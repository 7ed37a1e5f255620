import Foundation
import Testing
@testable import Strata

/// Faults: an object that holds only its ID until a property is read.
@Suite struct ManagedObjectFaultingTests {
    @Test func readingTheObjectIDOrEntityDoesNotFireTheFault() throws {
        let owner = FakeOwner(model: NotesModel.model)
        let id = owner.addRow("Note", ["title": .string("Lazy")])
        let note = try #require(owner.object(for: id) as? Note)
        #expect(note.objectID == id)
        #expect(note.entity.name == "Note")
        _ = note.hashValue
        _ = note.description
        #expect(note.isFault)
        #expect(owner.fulfilments.isEmpty)
    }

    @Test func theFirstPropertyAccessFulfilsOnce() throws {
        let owner = FakeOwner(model: AwakeCounter.model)
        let id = owner.addRow("AwakeCounter", ["title": .string("Lazy"), "priority": .integer(2)])
        let note = try #require(owner.object(for: id) as? AwakeCounter)
        #expect(note.title == "Lazy")
        #expect(!note.isFault)
        #expect(note.priority == 2)
        #expect(owner.fulfilments == [id])
        #expect(note.awakenings == 1)
    }

    @Test func keyValueAccessFiresTheFaultToo() throws {
        let owner = FakeOwner(model: NotesModel.model)
        let id = owner.addRow("Note", ["body": .string("text")])
        let note = owner.object(for: id)
        #expect(try note.value(forKey: "body") as? String == "text")
        #expect(!note.isFault)
    }

    @Test func toOneRelationshipsResolveToRegisteredFaults() throws {
        let owner = FakeOwner(model: NotesModel.model)
        let folderID = owner.addRow("Folder", ["name": .string("Inbox")])
        let noteID = owner.addRow("Note", ["title": .string("N")], toOne: ["folder": folderID])
        let note = try #require(owner.object(for: noteID) as? Note)
        let folder = try #require(note.folder)
        #expect(folder.objectID == folderID)
        #expect(folder.isFault)
        #expect(folder === owner.object(for: folderID))
        #expect(folder.name == "Inbox")
    }

    @Test func toManyRelationshipsLoadOnFirstUse() throws {
        let owner = FakeOwner(model: NotesModel.model)
        let folderID = owner.addRow("Folder", ["name": .string("Inbox")])
        let a = owner.addRow("Note", ["title": .string("A")], toOne: ["folder": folderID])
        let b = owner.addRow("Note", ["title": .string("B")], toOne: ["folder": folderID])
        owner.links[folderID] = ["notes": [a, b]]
        let folder = try #require(owner.object(for: folderID) as? Folder)
        #expect(folder.name == "Inbox")
        if case .notLoaded = folder.relationshipValues[0] {} else { Issue.record("loaded too early") }
        #expect(Set(folder.notes.map(\.objectID)) == [a, b])
        #expect(!folder.hasPersistentChangedValues)
        #expect(folder.changedValues().isEmpty)
    }

    @Test func aMissingRowMakesAnInaccessibleFault() throws {
        let owner = FakeOwner(model: NotesModel.model)
        let id = owner.makeID("Note")
        let note = try #require(owner.object(for: id) as? Note)
        #expect(note.title == "")  // the default: typed accessors never trap
        #expect(owner.inaccessible == [id])
        #expect(note.isDeleted)  // the owner asked for inaccessible faults to be deleted
        #expect(throws: StrataError.inaccessibleFault(id)) { try note.value(forKey: "title") }
    }

    @Test func anInaccessibleFaultCanStayUndeleted() throws {
        let owner = FakeOwner(model: NotesModel.model)
        owner.deletesInaccessibleFaults = false
        let id = owner.makeID("Note")
        let note = owner.object(for: id)
        #expect(throws: StrataError.inaccessibleFault(id)) { try note.value(forKey: "title") }
        #expect(!note.isDeleted)
    }

    @Test func turningIntoAFaultReleasesValuesAndReference() throws {
        let owner = FakeOwner(model: NotesModel.model)
        let folderID = owner.addRow("Folder", ["name": .string("Inbox")])
        let noteID = owner.addRow("Note", ["title": .string("N")], toOne: ["folder": folderID])
        let note = try #require(owner.object(for: noteID) as? Note)
        #expect(note.folder != nil)
        note.title = "changed"
        note.turnIntoFault()
        #expect(note.isFault && !note.isUpdated)
        #expect(note.relationshipValues.allSatisfy { $0.objects.isEmpty })
        #expect(note.title == "N")  // read again from the store, the change discarded
        #expect(owner.fulfilments == [noteID, noteID])

        let counterOwner = FakeOwner(model: AwakeCounter.model)
        let counter = try #require(counterOwner.object(for: counterOwner.addRow("AwakeCounter", [:])) as? AwakeCounter)
        counter.turnIntoFault()
        #expect(counter.faultEvents == ["will", "did"])
    }

    @Test func anObjectInNoContextCannotFulfil() {
        let note = Note()
        note.becomeFault(for: note.objectID, owner: FakeOwner(model: NotesModel.model))
        note.owner = nil
        #expect(note.title == "")
        #expect(throws: StrataError.inaccessibleFault(note.objectID)) { try note.value(forKey: "title") }
    }

    @Test func faultsOfManyObjectsAcrossTasks() async {
        // Each task owns its objects (they never cross tasks): the registry of derived
        // entities is shared, and must give every task the same description.
        let entities = await withTaskGroup(of: ObjectIdentifier.self) { group in
            for index in 0..<8 {
                group.addTask {
                    let owner = FakeOwner(model: NotesModel.model)
                    let ids = (0..<200).map { owner.addRow("Note", ["title": .string("\(index)-\($0)")]) }
                    let titles = ids.map { (owner.object(for: $0) as? Note)?.title }
                    precondition(titles == (0..<200).map { "\(index)-\($0)" })
                    return ObjectIdentifier(Note.entity())
                }
            }
            return await group.reduce(into: Set<ObjectIdentifier>()) { $0.insert($1) }
        }
        #expect(entities.count == 1)
    }
}

/// A Note entity class that counts its lifecycle callbacks.
final class AwakeCounter: ManagedObject {
    static let model: ManagedObjectModel = {
        do { return try ManagedObjectModel(types: [AwakeCounter.self]) } catch { preconditionFailure("\(error)") }
    }()
    @Attribute var title: String = ""
    @Attribute var priority: Int16 = 0
    var awakenings = 0
    var faultEvents: [String] = []
    override func awakeFromFetch() { awakenings += 1 }
    override func willTurnIntoFault() { faultEvents.append("will") }
    override func didTurnIntoFault() { faultEvents.append("did") }
}
