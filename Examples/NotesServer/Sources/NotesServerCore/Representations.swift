import Foundation
import Strata

/// A note as the API shows it: `Sendable`, so it leaves the context that read it.
public struct NoteRepresentation: Codable, Sendable, Hashable {
    /// The note's key (``ObjectKey``).
    public var id: String
    /// The title.
    public var title: String
    /// The text.
    public var body: String
    /// 0 to 5.
    public var priority: Int16
    /// When it was created.
    public var created: Date
    /// When it was last changed.
    public var updated: Date
    /// The key of its folder, or nil.
    public var folder: String?
    /// The stored row version: the `ETag` of the note's own URL.
    public var version: UInt64

    /// The representation of `note`, read in its context.
    init(_ note: Note) throws {
        id = ObjectKey.encode(note.objectID)
        title = note.title
        body = note.body
        priority = note.priority
        created = note.created
        updated = note.updated
        folder = note.folder.map { ObjectKey.encode($0.objectID) }
        version = try note.storedVersion()
    }
}

/// A folder as the API shows it.
public struct FolderRepresentation: Codable, Sendable, Hashable {
    /// The folder's key.
    public var id: String
    /// Its unique name.
    public var name: String
    /// How many notes it holds.
    public var noteCount: Int
    /// The stored row version: the `ETag` of the folder's URL.
    public var version: UInt64

    /// The representation of `folder`, read in its context.
    init(_ folder: Folder) throws {
        id = ObjectKey.encode(folder.objectID)
        name = folder.name
        noteCount = folder.notes.count
        version = try folder.storedVersion()
    }
}

/// One page of `GET /notes`.
public struct NotePage: Codable, Sendable {
    /// The notes of the page, in the requested order.
    public var notes: [NoteRepresentation]
    /// How many notes match, over all pages.
    public var total: Int
    /// The page size asked for.
    public var limit: Int
    /// The index of the page's first note among all matches.
    public var offset: Int
}

/// The body of `POST /notes`.
struct NoteCreation: Decodable {
    var title: String
    var body: String?
    var priority: Int16?
    var folder: String?
}

/// The body of `PATCH /notes/:id`: members left out stay as they are; `"folder": null`
/// takes the note out of its folder.
struct NotePatch: Decodable {
    var title: String?
    var body: String?
    var priority: Int16?
    /// nil: leave the folder; `.some(nil)`: no folder; `.some(key)`: that folder.
    var folder: String??

    enum CodingKeys: String, CodingKey { case title, body, priority, folder }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        title = try container.decodeIfPresent(String.self, forKey: .title)
        body = try container.decodeIfPresent(String.self, forKey: .body)
        priority = try container.decodeIfPresent(Int16.self, forKey: .priority)
        if container.contains(.folder) {
            folder = .some(try container.decodeNil(forKey: .folder) ? nil : container.decode(String.self, forKey: .folder))
        }
    }
}

/// The body of `PUT /notes/:id/priority`.
struct PriorityChange: Decodable {
    var priority: Int16
}

/// The body of `POST /folders` and `PATCH /folders/:id`.
struct FolderBody: Decodable {
    var name: String
}
