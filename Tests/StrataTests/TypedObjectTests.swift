import Foundation
import Testing
@testable import Strata

@Suite struct TypedObjectTests {
    @Test func entityIsDerivedFromTheSubclass() throws {
        let note = Note.entity()
        #expect(note.name == "Note")
        #expect(note.attributes.map(\.name) == ["title", "priority", "body", "created", "isSelected", "colour"])
        #expect(note.relationships.map(\.name) == ["folder", "tags"])
        let title = try #require(note.attribute(named: "title"))
        #expect(title.type == .string && title.isIndexed && !title.isOptional && title.defaultValue == .string(""))
        let priority = try #require(note.attribute(named: "priority"))
        #expect(priority.type == .integer16 && priority.validation.maximum == 5)
        #expect(note.attribute(named: "body")?.isOptional == true)
        #expect(note.attribute(named: "isSelected")?.isTransient == true)
        #expect(note.attribute(named: "colour")?.type == .transformable(Colour.self))
        let folder = try #require(note.relationship(named: "folder"))
        #expect(folder.destinationEntityName == "Folder" && folder.inverseName == "notes" && !folder.isToMany)
        let tags = try #require(note.relationship(named: "tags"))
        #expect(tags.isToMany && !tags.isOrdered)
        #expect(Playlist.entity().relationship(named: "tracks")?.isOrdered == true)
        #expect(Playlist.entity().relationship(named: "tracks")?.maxCount == 3)
        #expect(note.managedObjectClass == Note.self)
    }

    @Test func inheritanceIsDerivedFromSuperclasses() throws {
        let model = NotesModel.model
        let item = try #require(model.entitiesByName["Item"])
        #expect(item.isAbstract)
        #expect(item.subentityNames == ["Book", "Film"])
        let book = try #require(model.entitiesByName["Book"])
        #expect(book.superentityName == "Item")
        #expect(!book.isAbstract)  // inherits isAbstractEntity, but only Item turns it true
        #expect(book.attributes.map(\.name) == ["title", "pages"])
        #expect(model.entityNames(kindOf: "Item") == ["Book", "Film", "Item"])
        #expect(Book.entity().attributes.map(\.name) == ["title", "pages"])
    }

    @Test func modelFromTypesReachesDestinationsAndChecksInverses() throws {
        let model = try ManagedObjectModel(types: [Note.self])
        #expect(Set(model.entitiesByName.keys) == ["Folder", "Note", "Tag"])
        #expect(throws: ModelError.self) { try ManagedObjectModel(types: [Orphan.self]) }
        do {
            _ = try ManagedObjectModel(types: [Orphan.self])
        } catch {
            #expect(error.problems.contains(.missingInverse(entity: "Orphan", relationship: "friend", inverse: "nobody")))
        }
    }

    @Test func typedAccessorsReadAndWriteValues() {
        let note = Note()
        #expect(note.title == "")
        #expect(note.body == nil)
        note.title = "Groceries"
        note.priority = 3
        note.body = "milk"
        note.colour = Colour(red: 1, green: 0.5, blue: 0)
        #expect(note.title == "Groceries")
        #expect(note.priority == 3)
        #expect(note.body == "milk")
        #expect(note.colour == Colour(red: 1, green: 0.5, blue: 0))
        #expect(note.attributeValues[0] == .string("Groceries"))
        note.body = nil
        #expect(note.body == nil)
        #expect(!note.isFault)
    }

    @Test func typedAndKeyValueAccessAgree() throws {
        let note = Note()
        note.title = "A"
        #expect(try note.value(forKey: "title") as? String == "A")
        try note.setValue(Int16(4), forKey: "priority")
        #expect(note.priority == 4)
        try note.setValue(Colour(red: 0, green: 0, blue: 1), forKey: "colour")
        #expect(note.colour?.blue == 1)
        #expect(try note.value(forKey: "colour") as? Colour == Colour(red: 0, green: 0, blue: 1))
    }

    @Test func objectsFromTwoSitesOnOneLineAreDistinct() {
        let pair = TwoOnALine()
        pair.a = 1
        pair.b = 2
        #expect(pair.a == 1 && pair.b == 2)
    }

    @Test func typedRelationshipsMaintainInverses() {
        let folder = Folder()
        let note = Note()
        note.folder = folder
        #expect(folder.notes == [note])
        let other = Folder()
        other.$notes.insert(note)
        #expect(note.folder === other)
        #expect(folder.notes.isEmpty)
        #expect(other.$notes.count == 1)
        #expect(other.$notes.contains(note))
        other.$notes.remove(note)
        #expect(note.folder == nil)
    }
}

final class Orphan: ManagedObject {
    @Relationship(inverse: "nobody") var friend: Orphan?
}

final class TwoOnALine: ManagedObject {
    @Attribute var a: Int = 0; @Attribute var b: Int = 0
}
