import Strata

// The typed entities of the `strata demo` walkthrough: folders hold notes (one-to-many,
// cascade delete), as in the README.

/// A folder of notes; deleting it deletes its notes (delete rule cascade).
final class Folder: ManagedObject {
    /// The folder's name.
    @Attribute var name: String = "Inbox"
    /// The notes in the folder.
    @Relationship(inverse: "folder", deleteRule: .cascade) var notes: Set<Note>
}

/// A note with a priority from 0 to 5, in at most one folder.
final class Note: ManagedObject {
    /// The note's title (indexed).
    @Attribute(indexed: true) var title: String = ""
    /// How urgent it is, 0 to 5.
    @Attribute(validation: AttributeValidation(minimum: 0, maximum: 5)) var priority: Int16 = 0
    /// The folder holding the note.
    @Relationship(inverse: "notes") var folder: Folder?
}

extension Demo {
    /// The folders and notes the walkthrough saves first: (folder, [(title, priority)]).
    static let seed: [(folder: String, notes: [(title: String, priority: Int16)])] = [
        ("Home", [("Pay rent", 5), ("Buy milk", 3), ("Water plants", 1)]),
        ("Work", [("Draft talk", 4), ("Review PR", 3), ("Book flights", 2)]),
    ]
    /// How many background contexts save at once, and how many notes each saves.
    static let batches = 4, notesPerBatch = 5
}
