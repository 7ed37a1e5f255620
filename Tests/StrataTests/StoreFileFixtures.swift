import Foundation
@testable import Strata
import StrataLMDB
import StrataTesting

/// A transformable value for the store tests.
struct StoreTestColour: Codable, Sendable, Hashable {
    var red, green, blue: Double
}

/// The model and helpers the store tests share. Built from programmatic
/// ``EntityDescription``s (not typed classes), so it exercises every shape:
///
/// ```
/// Item (abstract: created, indexed)
/// ├── Folder  name (indexed)  position   notes ⇄ Note.folder   (one-to-many, ordered)
/// └── Note    every attribute type, title and priority indexed, scratch transient
///     │       folder → Folder   tags ⇄ Tag.notes (many-to-many)   attachment ↔ Attachment.note (one-to-one)
///     └── Checklist  steps
/// Tag         label (indexed)   notes ⇄ Note.tags
/// Attachment  fileName          note ↔ Note.attachment
/// Person      name              pets ⇄ Pet.owner (one-to-many, unordered)
/// Pet         name              owner → Person
/// Playlist    name              tracks ⇄ Track.playlists (many-to-many, ordered on this side)
/// Track       title             playlists ⇄ Playlist.tracks
/// ```
enum StoreFixtures {
    static func entities(extraNoteAttribute: AttributeDescription? = nil) -> [EntityDescription] {
        [
            EntityDescription(name: "Item", isAbstract: true, attributes: [
                AttributeDescription(name: "created", type: .date, isIndexed: true),
            ]),
            EntityDescription(name: "Folder", superentityName: "Item", attributes: [
                AttributeDescription(name: "name", type: .string, isIndexed: true),
                AttributeDescription(name: "position", type: .integer64),
            ], relationships: [
                RelationshipDescription(name: "notes", destinationEntityName: "Note", inverseName: "folder", isToMany: true, isOrdered: true),
            ]),
            EntityDescription(name: "Note", superentityName: "Item", attributes: [
                AttributeDescription(name: "title", type: .string, isIndexed: true),
                AttributeDescription(name: "priority", type: .integer16, isIndexed: true),
                AttributeDescription(name: "count32", type: .integer32),
                AttributeDescription(name: "rating", type: .double),
                AttributeDescription(name: "score", type: .float),
                AttributeDescription(name: "done", type: .boolean),
                AttributeDescription(name: "due", type: .date),
                AttributeDescription(name: "payload", type: .binaryData),
                AttributeDescription(name: "token", type: .uuid),
                AttributeDescription(name: "link", type: .uri),
                AttributeDescription(name: "amount", type: .decimal),
                AttributeDescription(name: "colour", type: .transformable(StoreTestColour.self)),
                AttributeDescription(name: "scratch", type: .string, isTransient: true),
            ] + (extraNoteAttribute.map { [$0] } ?? []), relationships: [
                RelationshipDescription(name: "folder", destinationEntityName: "Folder", inverseName: "notes"),
                RelationshipDescription(name: "tags", destinationEntityName: "Tag", inverseName: "notes", isToMany: true),
                RelationshipDescription(name: "attachment", destinationEntityName: "Attachment", inverseName: "note"),
            ]),
            EntityDescription(name: "Checklist", superentityName: "Note", attributes: [
                AttributeDescription(name: "steps", type: .integer32),
            ]),
            EntityDescription(name: "Tag", attributes: [
                AttributeDescription(name: "label", type: .string, isIndexed: true),
            ], relationships: [
                RelationshipDescription(name: "notes", destinationEntityName: "Note", inverseName: "tags", isToMany: true),
            ]),
            EntityDescription(name: "Attachment", attributes: [
                AttributeDescription(name: "fileName", type: .string),
            ], relationships: [
                RelationshipDescription(name: "note", destinationEntityName: "Note", inverseName: "attachment"),
            ]),
            EntityDescription(name: "Person", attributes: [
                AttributeDescription(name: "name", type: .string),
            ], relationships: [
                RelationshipDescription(name: "pets", destinationEntityName: "Pet", inverseName: "owner", isToMany: true),
            ]),
            EntityDescription(name: "Pet", attributes: [
                AttributeDescription(name: "name", type: .string),
            ], relationships: [
                RelationshipDescription(name: "owner", destinationEntityName: "Person", inverseName: "pets"),
            ]),
            EntityDescription(name: "Playlist", attributes: [
                AttributeDescription(name: "name", type: .string),
            ], relationships: [
                RelationshipDescription(name: "tracks", destinationEntityName: "Track", inverseName: "playlists", isToMany: true, isOrdered: true),
            ]),
            EntityDescription(name: "Track", attributes: [
                AttributeDescription(name: "title", type: .string),
            ], relationships: [
                RelationshipDescription(name: "playlists", destinationEntityName: "Playlist", inverseName: "tracks", isToMany: true),
            ]),
        ]
    }

    /// The store tests' model.
    static func model() throws -> ManagedObjectModel {
        try ManagedObjectModel(entities: entities())
    }

    /// The same model plus one stored attribute: another version hash.
    static func changedModel() throws -> ManagedObjectModel {
        try ManagedObjectModel(entities: entities(extraNoteAttribute: AttributeDescription(name: "extra", type: .string)))
    }

    /// A small, unsynced environment configuration: tests need no durability.
    static var configuration: Environment.Configuration {
        var configuration = Environment.Configuration()
        configuration.mapSize = 64 << 20
        configuration.durability = .noSync
        return configuration
    }

    /// Opens (or creates) the store `name` in `directory`.
    static func open(
        _ directory: borrowing TemporaryDirectory, _ name: String = "store", model: ManagedObjectModel? = nil, readOnly: Bool = false
    ) throws -> StoreFile {
        try StoreFile(
            directory: URL(fileURLWithPath: directory.appending(name)), model: model ?? self.model(),
            readOnly: readOnly, configuration: configuration)
    }
}

extension StoreFile {
    /// A snapshot of `id` with the given attribute and relationship values by name
    /// (unnamed attributes nil, unnamed to-one nil, unnamed to-many not loaded).
    func snapshot(
        _ id: ManagedObjectID, version: UInt64 = 0, _ values: [String: AttributeValue?] = [:],
        relationships: [String: RelationshipSnapshot] = [:]
    ) -> ObjectSnapshot {
        let storage = entities[id.entityName]!
        var snapshot = ObjectSnapshot(objectID: id, entity: storage.entity, version: version)
        for (name, value) in values {
            snapshot.attributes[storage.attributeSlot(named: name)!] = value
        }
        for (name, value) in relationships {
            snapshot.relationships[storage.relationshipSlot(named: name)!] = value
        }
        return snapshot
    }

    /// Inserts a new object of `entityName` and returns its ID.
    @discardableResult
    func insert(
        _ entityName: String, _ values: [String: AttributeValue?] = [:], relationships: [String: RelationshipSnapshot] = [:]
    ) throws -> ManagedObjectID {
        try write { writer in
            let id = try writer.makePermanentID(for: entityName)
            try writer.insert(snapshot(id, values, relationships: relationships))
            return id
        }
    }

    /// The stored snapshot of `id`.
    func stored(_ id: ManagedObjectID) throws -> ObjectSnapshot? {
        try read { reader in try reader.snapshot(of: id) }
    }

    /// The stored value of attribute `name` of `id`.
    func value(_ name: String, of id: ManagedObjectID) throws -> AttributeValue? {
        try stored(id).flatMap { $0.attributes[entities[id.entityName]!.attributeSlot(named: name)!] }
    }

    /// The stored to-one destination of `relationship` of `id`.
    func destination(_ relationship: String, of id: ManagedObjectID) throws -> ManagedObjectID? {
        let slot = entities[id.entityName]!.relationshipSlot(named: relationship)!
        guard case .toOne(let destination)? = try stored(id)?.relationships[slot] else { return nil }
        return destination
    }

    /// The destinations of `relationship` of `id`, read from the store.
    func destinations(_ relationship: String, of id: ManagedObjectID) throws -> [ManagedObjectID] {
        try read { reader in try reader.destinations(of: id, relationship: relationship) }
    }

    /// Every raw key of database `name`.
    func rawKeys(of name: String) throws -> [[UInt8]] {
        let database = try environment.openDatabase(named: name)
        return try environment.read { txn in
            var keys: [[UInt8]] = []
            try txn.scan(database) { key, _ in
                keys.append(Array(key))
                return .continue
            }
            return keys
        }
    }
}

