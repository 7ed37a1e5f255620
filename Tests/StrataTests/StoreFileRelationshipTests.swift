import Foundation
@testable import Strata
import StrataLMDB
import StrataTesting
import Testing

@Suite("Store file relationships")
struct StoreFileRelationshipTests {
    @Test func oneToManyFollowsTheForeignKeys() throws {
        let directory = TemporaryDirectory()
        let store = try StoreFixtures.open(directory)
        let inbox = try store.insert("Folder", ["name": .string("Inbox")])
        let archive = try store.insert("Folder", ["name": .string("Archive")])
        let notes = try (1...3).map { n in
            try store.insert("Note", ["title": .string("n\(n)")], relationships: ["folder": .toOne(inbox)])
        }
        #expect(try store.destination("folder", of: notes[0]) == inbox)
        #expect(try store.destinations("notes", of: inbox) == notes)  // ordered: appended in save order
        #expect(try store.destinations("folder", of: notes[1]) == [inbox])
        #expect(try store.stored(inbox)?.relationships == [.notLoaded])

        // Re-parenting moves the link; the old folder's order closes up.
        try store.write { try $0.update(store.snapshot(notes[1], version: 1, relationships: ["folder": .toOne(archive)])) }
        #expect(try store.destinations("notes", of: inbox) == [notes[0], notes[2]])
        #expect(try store.destinations("notes", of: archive) == [notes[1]])
        #expect(try store.rawKeys(of: "links:Folder.notes").count == 3)

        // `.notLoaded` keeps the stored foreign key.
        try store.write { try $0.update(store.snapshot(notes[1], version: 2, ["title": .string("moved")], relationships: ["folder": .notLoaded])) }
        #expect(try store.destination("folder", of: notes[1]) == archive)

        // A nil foreign key removes the link.
        try store.write { try $0.update(store.snapshot(notes[2], version: 1)) }
        #expect(try store.destinations("notes", of: inbox) == [notes[0]])
        #expect(try store.destination("folder", of: notes[2]) == nil)
    }

    @Test func theToManySideOnlyOrdersItsLinks() throws {
        let directory = TemporaryDirectory()
        let store = try StoreFixtures.open(directory)
        let folder = try store.insert("Folder")
        let notes = try (1...3).map { _ in try store.insert("Note", relationships: ["folder": .toOne(folder)]) }
        let stranger = try store.insert("Note")

        try store.write { try $0.update(store.snapshot(folder, version: 1, relationships: ["notes": .toMany([notes[2], notes[0], notes[1]])])) }
        #expect(try store.destinations("notes", of: folder) == [notes[2], notes[0], notes[1]])
        // Destinations without a foreign key to the folder are not linked; unnamed links keep their order, last.
        try store.write { try $0.update(store.snapshot(folder, version: 2, relationships: ["notes": .toMany([notes[1], stranger])])) }
        #expect(try store.destinations("notes", of: folder) == [notes[1], notes[2], notes[0]])
        #expect(try store.destination("folder", of: stranger) == nil)
        // A child added later goes last.
        let added = try store.insert("Note", relationships: ["folder": .toOne(folder)])
        #expect(try store.destinations("notes", of: folder) == [notes[1], notes[2], notes[0], added])
    }

    @Test func aBatchOrdersAfterTheForeignKeysMoved() throws {
        let directory = TemporaryDirectory()
        let store = try StoreFixtures.open(directory)
        let (folder, notes) = try store.write { writer in
            let folder = try writer.makePermanentID(for: "Folder")
            let notes = try (0..<3).map { _ in try writer.makePermanentID(for: "Note") }
            var changes = StoreChanges()
            // The owner comes first in the batch, naming children not inserted yet.
            changes.inserted = [store.snapshot(folder, relationships: ["notes": .toMany([notes[2], notes[0], notes[1]])])]
                + notes.map { store.snapshot($0, relationships: ["folder": .toOne(folder)]) }
            _ = try writer.apply(changes)
            return (folder, notes)
        }
        #expect(try store.destinations("notes", of: folder) == [notes[2], notes[0], notes[1]])
    }

    @Test func deletingAnOwnerOrAChildRemovesItsLinks() throws {
        let directory = TemporaryDirectory()
        let store = try StoreFixtures.open(directory)
        let folder = try store.insert("Folder")
        let notes = try (1...3).map { _ in try store.insert("Note", relationships: ["folder": .toOne(folder)]) }
        try store.write { try $0.delete(notes[1], expectedVersion: 1) }
        #expect(try store.destinations("notes", of: folder) == [notes[0], notes[2]])

        try store.write { try $0.delete(folder, expectedVersion: 1) }
        #expect(try store.rawKeys(of: "links:Folder.notes").isEmpty)
        #expect(try store.destinations("notes", of: folder).isEmpty)
        // The children keep their foreign key until the context nullifies it in the same save.
        #expect(try store.destination("folder", of: notes[0]) == folder)
        try store.write { try $0.update(store.snapshot(notes[0], version: 1)) }
        #expect(try store.destination("folder", of: notes[0]) == nil)
    }

    @Test func unorderedOneToManyIgnoresTheToManySnapshot() throws {
        let directory = TemporaryDirectory()
        let store = try StoreFixtures.open(directory)
        let person = try store.insert("Person")
        let pets = try (1...2).map { _ in try store.insert("Pet", relationships: ["owner": .toOne(person)]) }
        #expect(Set(try store.destinations("pets", of: person)) == Set(pets))
        try store.write { try $0.update(store.snapshot(person, version: 1, relationships: ["pets": .toMany([])])) }
        #expect(Set(try store.destinations("pets", of: person)) == Set(pets))
        let keys = try store.rawKeys(of: "links:Person.pets")
        #expect(keys.count == 2 && keys.allSatisfy { $0.count == 20 })
    }

    @Test func subEntityDestinationsAreLinkedUnderTheirOwnEntity() throws {
        let directory = TemporaryDirectory()
        let store = try StoreFixtures.open(directory)
        let folder = try store.insert("Folder")
        let note = try store.insert("Note", relationships: ["folder": .toOne(folder)])
        let checklist = try store.insert("Checklist", relationships: ["folder": .toOne(folder)])
        #expect(try store.destinations("notes", of: folder) == [note, checklist])
        #expect(try store.destinations("notes", of: folder).map(\.entityName) == ["Note", "Checklist"])
        #expect(try store.destination("folder", of: checklist) == folder)
    }

    @Test func oneToOneKeepsAForeignKeyOnEachSide() throws {
        let directory = TemporaryDirectory()
        let store = try StoreFixtures.open(directory)
        let (note, attachment) = try store.write { writer in
            let note = try writer.makePermanentID(for: "Note")
            let attachment = try writer.makePermanentID(for: "Attachment")
            try writer.insert(store.snapshot(note, relationships: ["attachment": .toOne(attachment)]))
            try writer.insert(store.snapshot(attachment, ["fileName": .string("a.pdf")], relationships: ["note": .toOne(note)]))
            return (note, attachment)
        }
        #expect(try store.destination("attachment", of: note) == attachment)
        #expect(try store.destination("note", of: attachment) == note)
        #expect(try store.destinations("note", of: attachment) == [note])
        // Each side is written from its own snapshot.
        try store.write { try $0.update(store.snapshot(note, version: 1)) }
        #expect(try store.destination("attachment", of: note) == nil)
        #expect(try store.destination("note", of: attachment) == note)
    }

    @Test func manyToManyWritesEachSideFromItsOwnSnapshot() throws {
        let directory = TemporaryDirectory()
        let store = try StoreFixtures.open(directory)
        let tags = try (1...3).map { n in try store.insert("Tag", ["label": .string("t\(n)")]) }
        let note = try store.insert("Note", relationships: ["tags": .toMany([tags[0], tags[1]])])
        #expect(Set(try store.destinations("tags", of: note)) == [tags[0], tags[1]])
        #expect(try store.destinations("notes", of: tags[0]).isEmpty)  // not written from the note's side
        try store.write { try $0.update(store.snapshot(tags[0], version: 1, relationships: ["notes": .toMany([note])])) }
        #expect(try store.destinations("notes", of: tags[0]) == [note])

        // A diff: t1 removed, t3 added, t2 untouched; `.notLoaded` changes nothing.
        try store.write { try $0.update(store.snapshot(note, version: 1, relationships: ["tags": .toMany([tags[1], tags[2], tags[1]])])) }
        #expect(Set(try store.destinations("tags", of: note)) == [tags[1], tags[2]])
        try store.write { try $0.update(store.snapshot(note, version: 2, relationships: ["tags": .notLoaded])) }
        #expect(Set(try store.destinations("tags", of: note)) == [tags[1], tags[2]])

        // Deleting one side removes its links and the other side's links to it.
        try store.write { try $0.update(store.snapshot(tags[1], version: 1, relationships: ["notes": .toMany([note])])) }
        try store.write { try $0.delete(tags[1], expectedVersion: 2) }
        #expect(try store.destinations("tags", of: note) == [tags[2]])
        // The context keeps the sides in step: t1 drops the note it no longer has; t3 gains it.
        try store.write { writer in
            try writer.update(store.snapshot(tags[0], version: 2, relationships: ["notes": .toMany([])]))
            try writer.update(store.snapshot(tags[2], version: 1, relationships: ["notes": .toMany([note])]))
        }
        #expect(try store.destinations("notes", of: tags[2]) == [note])
        try store.write { try $0.delete(note, expectedVersion: 3) }
        #expect(try store.destinations("notes", of: tags[2]).isEmpty)
        #expect(try store.rawKeys(of: "links:Note.tags").isEmpty)
        #expect(try store.rawKeys(of: "links:Tag.notes").isEmpty)
    }

    @Test func orderedManyToManyKeepsTheSnapshotOrder() throws {
        let directory = TemporaryDirectory()
        let store = try StoreFixtures.open(directory)
        let tracks = try (1...4).map { n in try store.insert("Track", ["title": .string("track \(n)")]) }
        let playlist = try store.insert("Playlist", relationships: ["tracks": .toMany([tracks[2], tracks[0], tracks[1]])])
        #expect(try store.destinations("tracks", of: playlist) == [tracks[2], tracks[0], tracks[1]])
        try store.write { try $0.update(store.snapshot(playlist, version: 1, relationships: ["tracks": .toMany([tracks[1], tracks[3], tracks[2]])])) }
        #expect(try store.destinations("tracks", of: playlist) == [tracks[1], tracks[3], tracks[2]])
        // Positions are 8 big-endian bytes, renumbered from 0.
        let links = try store.environment.openDatabase(named: "links:Playlist.tracks")
        let positions = try store.environment.read { txn in
            var positions: [UInt64] = []
            try txn.scan(links) { _, value in
                positions.append(value.count == 8 ? UInt64(bigEndian: value.loadUnaligned(as: UInt64.self)) : .max)
                return .continue
            }
            return positions.sorted()
        }
        #expect(positions == [0, 1, 2])
    }
}
