import Foundation
import Testing
@testable import Strata

/// isInserted / isUpdated / hasChanges, changedValues() and committedValues(forKeys:).
@Suite struct ManagedObjectChangeTrackingTests {
    @Test func fetchedObjectsTrackChangesAgainstCommittedValues() throws {
        let owner = FakeOwner(model: NotesModel.model)
        let id = owner.addRow("Note", ["title": .string("Old"), "priority": .integer(1)])
        let note = try #require(owner.object(for: id) as? Note)
        #expect(note.isFault)
        #expect(!note.hasChanges && !note.hasPersistentChangedValues)
        #expect(note.changedValues().isEmpty)

        note.title = "New"
        #expect(note.isUpdated && note.hasChanges && note.hasPersistentChangedValues)
        #expect(note.changedValues().keys.sorted() == ["title"])
        #expect(note.changedValues()["title"] as? String == "New")
        #expect(try note.committedValues(forKeys: ["title"])["title"] as? String == "Old")
        #expect(owner.willChange.map(\.1) == ["title"])

        // Setting the committed value back: no persistent change, though still updated.
        note.title = "Old"
        #expect(note.changedValues().isEmpty)
        #expect(!note.hasPersistentChangedValues)
        #expect(note.isUpdated)
    }

    @Test func transientChangesAreNotPersistentChanges() throws {
        let owner = FakeOwner(model: NotesModel.model)
        let id = owner.addRow("Note", ["title": .string("T")])
        let note = try #require(owner.object(for: id) as? Note)
        note.isSelected = true
        #expect(note.isUpdated)
        #expect(!note.hasPersistentChangedValues)
        #expect(note.changedValues().isEmpty)
    }

    @Test func settingAnEqualValueIsNoChange() throws {
        let owner = FakeOwner(model: NotesModel.model)
        let id = owner.addRow("Note", ["title": .string("Same")])
        let note = try #require(owner.object(for: id) as? Note)
        note.title = "Same"
        #expect(!note.isUpdated)
        #expect(owner.willChange.isEmpty)
    }

    @Test func insertedObjectsReportEverySetValue() throws {
        let owner = FakeOwner(model: NotesModel.model)
        let note = Note()
        owner.insert(note)
        #expect(note.isInserted && note.hasChanges && !note.isUpdated)
        note.title = "Fresh"
        let changes = note.changedValues()
        #expect(changes["title"] as? String == "Fresh")
        #expect(changes["priority"] as? Int16 == 0)
        #expect(changes["body"] == nil)
        #expect(changes["isSelected"] == nil)
        #expect(try note.committedValues(forKeys: nil).isEmpty)
    }

    @Test func relationshipChangesAreTrackedOnBothSides() throws {
        let owner = FakeOwner(model: NotesModel.model)
        let folderID = owner.addRow("Folder", ["name": .string("Inbox")])
        let noteID = owner.addRow("Note", ["title": .string("N")])
        let folder = try #require(owner.object(for: folderID) as? Folder)
        let note = try #require(owner.object(for: noteID) as? Note)
        note.folder = folder
        #expect(note.changedValues()["folder"] as? ManagedObject === folder)
        #expect(folder.changedValues()["notes"] as? Set<ManagedObject> == [note])
        #expect(try folder.committedValues(forKeys: ["notes"])["notes"] as? Set<ManagedObject> == [])
        #expect(folder.isUpdated && note.isUpdated)
    }

    @Test func commitAndRevert() throws {
        let owner = FakeOwner(model: NotesModel.model)
        let id = owner.addRow("Note", ["title": .string("A")])
        let note = try #require(owner.object(for: id) as? Note)
        note.title = "B"
        note.revertToCommitted()
        #expect(note.title == "A" && !note.isUpdated)
        note.title = "C"
        note.didCommit(permanentID: nil, version: 2)
        #expect(!note.isUpdated && note.changedValues().isEmpty && note.rowVersion == 2)
        #expect(try note.committedValues(forKeys: ["title"])["title"] as? String == "C")
        let snapshot = note.makeSnapshot()
        #expect(snapshot.version == 2)
        #expect(snapshot.attributes[Note.entity().attributeSlots["title"]!] == .string("C"))
        #expect(snapshot.attributes[Note.entity().attributeSlots["isSelected"]!] == nil)
    }

    @Test func insertedObjectBecomesCommittedWithItsPermanentID() {
        let owner = FakeOwner(model: NotesModel.model)
        let note = Note()
        owner.insert(note)
        note.title = "saved"
        let permanent = owner.makeID("Note")
        note.didCommit(permanentID: permanent, version: 1)
        #expect(note.objectID == permanent && !note.objectID.isTemporaryID)
        #expect(!note.isInserted && !note.hasChanges)
        #expect(note.changedValues().isEmpty)
    }
}
