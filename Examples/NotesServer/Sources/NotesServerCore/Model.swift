import Foundation
import Strata

/// A folder of notes: a unique, non-empty name.
///
/// Deleting a folder *nullifies* its notes' `folder` rather than cascading: an HTTP
/// `DELETE /folders/:id` removes one resource and never silently deletes others the
/// client did not name (the notes stay, in no folder). See the README's design notes.
public final class Folder: ManagedObject {
    /// The folder's name, unique among folders (``uniquenessConstraints``).
    @Attribute(indexed: true, validation: AttributeValidation(minimumLength: 1, maximumLength: 100))
    public var name: String = ""

    /// The notes in the folder (the inverse of ``Note/folder``).
    @Relationship(inverse: "folder", deleteRule: .nullify) public var notes: Set<Note>

    /// Folder names are unique: a second folder with a taken name fails its save with
    /// `StrataError.constraintConflicts`, which the API answers with `409 Conflict`.
    override public class var uniquenessConstraints: [[String]] { [["name"]] }
}

/// A note: a title, a body, a priority from 0 to 5, creation and update times, and an
/// optional folder.
public final class Note: ManagedObject {
    /// The title (1 to 200 characters), indexed for sorting and prefix searches.
    @Attribute(indexed: true, validation: AttributeValidation(minimumLength: 1, maximumLength: 200))
    public var title: String = ""

    /// The text of the note.
    @Attribute public var body: String = ""

    /// The priority, 0 (none) to 5 (urgent); indexed for sorting by it.
    @Attribute(indexed: true, validation: AttributeValidation(minimum: 0, maximum: 5))
    public var priority: Int16 = 0

    /// When the note was created (set once, by ``awakeFromInsert()``).
    @Attribute(indexed: true) public var created: Date = Date(timeIntervalSince1970: 0)

    /// When the note was last changed through the API.
    @Attribute(indexed: true) public var updated: Date = Date(timeIntervalSince1970: 0)

    /// The folder holding the note, if any.
    @Relationship(inverse: "notes") public var folder: Folder?

    /// Stamps ``created`` and ``updated`` when the note is first inserted.
    override public func awakeFromInsert() {
        super.awakeFromInsert()
        let now = Date()
        created = now
        updated = now
    }
}

/// The server's managed-object model.
public enum NotesModel {
    /// The entity classes, in the order the model lists them.
    public static let types: [ManagedObject.Type] = [Folder.self, Note.self]
}
