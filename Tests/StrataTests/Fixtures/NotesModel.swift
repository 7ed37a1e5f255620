import Foundation
import Strata

// Typed classes used by the object tests: folders hold notes (one-to-many, cascade),
// notes and tags are many-to-many, a playlist keeps tracks in order, a person has one
// passport (one-to-one), and an abstract Item has Book and Film sub-entities.

final class Folder: ManagedObject {
    @Attribute(validation: AttributeValidation(minimumLength: 1, maximumLength: 20)) var name: String = "Untitled"
    @Relationship(inverse: "folder", deleteRule: .cascade) var notes: Set<Note>
}

final class Note: ManagedObject {
    @Attribute(indexed: true) var title: String = ""
    @Attribute(validation: AttributeValidation(minimum: 0, maximum: 5)) var priority: Int16 = 0
    @Attribute var body: String?
    @Attribute var created: Date?
    @Attribute(transient: true) var isSelected: Bool = false
    @Attribute var colour: Colour?
    @Relationship(inverse: "notes") var folder: Folder?
    @Relationship(inverse: "notes") var tags: Set<Tag>
}

final class Tag: ManagedObject {
    @Attribute(validation: AttributeValidation(pattern: "[a-z]+")) var label: String = "tag"
    @Relationship(inverse: "tags", deleteRule: .deny) var notes: Set<Note>
}

final class Playlist: ManagedObject {
    @Attribute var name: String = ""
    @Relationship(inverse: "playlist", maxCount: 3) var tracks: [Track]
}

final class Track: ManagedObject {
    @Attribute var title: String = ""
    @Relationship(inverse: "tracks") var playlist: Playlist?
}

final class Person: ManagedObject {
    @Attribute var name: String = ""
    @Relationship(inverse: "holder", isOptional: false) var passport: Passport?
}

final class Passport: ManagedObject {
    @Attribute var number: String = ""
    @Relationship(inverse: "passport") var holder: Person?
}

class Item: ManagedObject {
    override class var isAbstractEntity: Bool { true }
    @Attribute var title: String = ""
}

final class Book: Item {
    @Attribute var pages: Int32 = 0
}

final class Film: Item {
    @Attribute var minutes: Int = 0
}

struct Colour: TransformableAttribute, Hashable {
    var red: Double
    var green: Double
    var blue: Double
}

enum NotesModel {
    static let model: ManagedObjectModel = {
        do {
            return try ManagedObjectModel(types: [Folder.self, Note.self, Playlist.self, Person.self, Book.self, Film.self])
        } catch {
            preconditionFailure("the test model is invalid: \(error)")
        }
    }()
}
