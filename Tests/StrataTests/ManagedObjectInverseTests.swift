import Foundation
import Testing
@testable import Strata

/// Setting one side of a relationship updates the other side in memory at once.
@Suite struct ManagedObjectInverseTests {
    @Test func manyToOne() {
        let inbox = Folder()
        let archive = Folder()
        let a = Note()
        let b = Note()
        a.folder = inbox
        b.folder = inbox
        #expect(inbox.notes == [a, b])
        // Moving a note removes it from its old folder.
        a.folder = archive
        #expect(inbox.notes == [b])
        #expect(archive.notes == [a])
        a.folder = nil
        #expect(archive.notes.isEmpty)
    }

    @Test func oneToManyAssignment() {
        let inbox = Folder()
        let archive = Folder()
        let notes = (0..<4).map { _ in Note() }
        inbox.notes = Set(notes)
        #expect(notes.allSatisfy { $0.folder === inbox })
        // Assigning to another folder's set steals the notes.
        archive.notes = [notes[0], notes[1]]
        #expect(notes[0].folder === archive && notes[1].folder === archive)
        #expect(inbox.notes == [notes[2], notes[3]])
        // Replacing the set releases the notes left out.
        inbox.notes = [notes[3]]
        #expect(notes[2].folder == nil)
        #expect(notes[3].folder === inbox)
    }

    @Test func oneToOneSteals() {
        let alice = Person()
        let bob = Person()
        let passport = Passport()
        alice.passport = passport
        #expect(passport.holder === alice)
        bob.passport = passport
        #expect(passport.holder === bob)
        #expect(alice.passport == nil)
        passport.holder = alice
        #expect(alice.passport === passport && bob.passport == nil)
        let second = Passport()
        alice.passport = second
        #expect(passport.holder == nil && second.holder === alice)
    }

    @Test func manyToMany() {
        let swift = Tag()
        let linux = Tag()
        let a = Note()
        let b = Note()
        a.tags = [swift, linux]
        b.$tags.insert(swift)
        #expect(swift.notes == [a, b])
        #expect(linux.notes == [a])
        swift.$notes.remove(a)
        #expect(a.tags == [linux])
        #expect(swift.notes == [b])
        linux.notes = [b]
        #expect(a.tags.isEmpty)
        #expect(b.tags == [swift, linux])
    }

    @Test func orderedToManyKeepsOrder() {
        let list = Playlist()
        let tracks = (0..<4).map { index in
            let track = Track()
            track.title = "\(index)"
            return track
        }
        list.tracks = [tracks[2], tracks[0], tracks[1]]
        #expect(list.tracks.map(\.title) == ["2", "0", "1"])
        #expect(tracks[2].playlist === list)
        list.$tracks.insert(tracks[3], at: 1)
        #expect(list.tracks.map(\.title) == ["2", "3", "0", "1"])
        // Inserting a member moves it.
        list.$tracks.insert(tracks[1], at: 0)
        #expect(list.tracks.map(\.title) == ["1", "2", "3", "0"])
        list.$tracks.remove(tracks[2])
        #expect(list.tracks.map(\.title) == ["1", "3", "0"])
        #expect(tracks[2].playlist == nil)
        // Setting the to-one side appends to the ordered side.
        tracks[2].playlist = list
        #expect(list.tracks.map(\.title) == ["1", "3", "0", "2"])
        // Reordering by assignment.
        list.tracks = [tracks[0], tracks[1]]
        #expect(list.tracks.map(\.title) == ["0", "1"])
        #expect(tracks[2].playlist == nil && tracks[3].playlist == nil)
        // Clamped indexes.
        list.$tracks.insert(tracks[3], at: 99)
        list.$tracks.insert(tracks[2], at: -5)
        #expect(list.tracks.map(\.title) == ["2", "0", "1", "3"])
    }

    @Test func keyValueEditsMaintainInversesToo() throws {
        let folder = Folder()
        let note = Note()
        try note.setValue(folder, forKey: "folder")
        #expect(folder.notes == [note])
        try folder.remove(note, fromRelationship: "notes")
        #expect(note.folder == nil)
        try folder.add(note, toRelationship: "notes")
        #expect(note.folder === folder)
        let list = Playlist()
        let track = Track()
        try list.insert(track, at: 0, intoRelationship: "tracks")
        #expect(track.playlist === list)
        try list.setValue([Track](), forKey: "tracks")
        #expect(track.playlist == nil)
    }

    @Test func inversesMarkBothSidesChangedThroughTheirOwners() throws {
        let owner = FakeOwner(model: NotesModel.model)
        let folderID = owner.addRow("Folder", ["name": .string("F")])
        let tagID = owner.addRow("Tag", ["label": .string("t")])
        let note = Note()
        owner.insert(note)
        let folder = try #require(owner.object(for: folderID) as? Folder)
        let tag = try #require(owner.object(for: tagID) as? Tag)
        note.folder = folder
        note.tags = [tag]
        // The destinations were faults: editing their inverse fulfilled them first.
        #expect(!folder.isFault && !tag.isFault)
        #expect(folder.isUpdated && tag.isUpdated)
        #expect(Set(owner.willChange.map { "\($0.0.entityName).\($0.1)" }) == ["Note.folder", "Folder.notes", "Note.tags", "Tag.notes"])
    }

    @Test func aToManyNotYetLoadedIsLoadedBeforeAnEdit() throws {
        let owner = FakeOwner(model: NotesModel.model)
        let folderID = owner.addRow("Folder", ["name": .string("F")])
        let oldID = owner.addRow("Note", ["title": .string("old")], toOne: ["folder": folderID])
        owner.links[folderID] = ["notes": [oldID]]
        let folder = try #require(owner.object(for: folderID) as? Folder)
        let note = Note()
        owner.insert(note)
        note.folder = folder
        #expect(Set(folder.notes.map(\.objectID)) == [oldID, note.objectID])
        #expect(folder.changedValues().keys.sorted() == ["notes"])
    }
}
