import Foundation
@_spi(StorageInternals) @testable import Strata
import StrataTesting
import Testing

/// Typed classes of a second model version: `Tome` was `Volume`, its `heading` was
/// `title`, its `shelf` was `location`.
final class Tome: ManagedObject {
    override class var renamingIdentifier: String? { "Volume" }
    @Attribute(renamingIdentifier: "title") var heading: String = ""
    @Attribute var pages: Int64 = 0
    @Relationship(inverse: "books", renamingIdentifier: "location") var shelf: Stack?
}

final class Stack: ManagedObject {
    @Attribute var label: String = ""
    @Relationship(inverse: "shelf") var books: Set<Tome>
}

/// What a store records of its model (``StoredModel``), and the changes between a stored
/// model and a new one (``SchemaDiff``): the ground a migration stands on.
@Suite("Migration: stored models and schema changes")
struct MigrationSchemaTests {
    /// Version 1 of a small library model, as descriptions.
    static func library(
        version: String = "1", volume: [AttributeDescription]? = nil, volumeName: String = "Volume",
        volumeRenaming: String? = nil, relationships: [RelationshipDescription]? = nil, constraints: [[String]] = [],
        shelfRelationship: RelationshipDescription? = nil, extraStackRelationships: [RelationshipDescription] = [],
        extraEntities: [EntityDescription] = []
    ) throws -> ManagedObjectModel {
        try ManagedObjectModel(entities: [
            EntityDescription(
                name: volumeName,
                attributes: volume ?? [
                    AttributeDescription(name: "title", type: .string, isOptional: false, defaultValue: .string("")),
                    AttributeDescription(name: "pages", type: .integer32, defaultValue: .integer(0), isIndexed: true),
                    AttributeDescription(name: "subtitle", type: .string),
                    AttributeDescription(name: "scratch", type: .string, isTransient: true),
                ],
                relationships: relationships ?? [
                    RelationshipDescription(name: "location", destinationEntityName: "Stack", inverseName: "books"),
                ],
                uniquenessConstraints: constraints, renamingIdentifier: volumeRenaming),
            EntityDescription(
                name: "Stack", attributes: [AttributeDescription(name: "label", type: .string)],
                relationships: [shelfRelationship ?? RelationshipDescription(
                    name: "books", destinationEntityName: volumeName, inverseName: "location", isToMany: true)] + extraStackRelationships),
        ] + extraEntities, versionIdentifier: version)
    }

    @Test("a model's stored description round-trips: types, defaults, optionality, indexes, relationships, constraints, renaming identifiers and the version; equal models give equal bytes; transients are left out")
    func storedModelRoundTrips() throws {
        let model = try Self.library(constraints: [["title", "pages"]])
        let stored = StoredModel(model)
        #expect(stored.versionIdentifier == "1" && stored.versionHash == model.versionHash)
        #expect(stored.entities.map(\.name) == ["Stack", "Volume"])
        #expect(stored.entities[1].attributes.map(\.name) == ["title", "pages", "subtitle"], "no transient")
        let bytes = stored.encoded()
        #expect(bytes == StoredModel(try Self.library(constraints: [["title", "pages"]])).encoded())
        let decoded = try StoredModel(decoding: bytes)
        #expect(decoded == stored)
        let rebuilt = try decoded.makeModel()
        #expect(rebuilt.versionHash == model.versionHash && rebuilt.versionIdentifier == "1")
        let title = try #require(rebuilt.entitiesByName["Volume"]?.attributes.first { $0.name == "title" })
        #expect(title.type == .string && !title.isOptional && title.defaultValue == .string(""))
        #expect(rebuilt.entitiesByName["Volume"]?.uniquenessConstraints == [["title", "pages"]])
        #expect(throws: MetadataDecodingError.self) { try StoredModel(decoding: Array("{\"entities\": 3}".utf8)) }
        var unknown = stored
        unknown.entities[1].attributes[0].type = "quaternion"
        #expect(throws: MetadataDecodingError.self) { try unknown.makeModel() }
    }

    @Test("typed classes carry renaming identifiers: the entity's class var, @Attribute's and @Relationship's")
    func typedRenamingIdentifiers() throws {
        let model = try ManagedObjectModel(types: [Tome.self, Stack.self], versionIdentifier: "2")
        let book = try #require(model.entitiesByName["Tome"])
        #expect(model.versionIdentifier == "2" && book.renamingIdentifier == "Volume")
        #expect(book.attributes.first { $0.name == "heading" }?.renamingIdentifier == "title")
        #expect(book.relationships.first { $0.name == "shelf" }?.renamingIdentifier == "location")
        #expect(model.entitiesByName["Stack"]?.renamingIdentifier == nil)
    }

    @Test("a new store records its model; the description is read back when it opens again")
    func storesRecordTheirModel() async throws {
        let directory = TemporaryDirectory()
        let model = try Self.library(version: "7")
        /// Opens the store with `model` and reads what it recorded; removes it after.
        func recorded() async throws -> StoredModel? {
            let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
            let store = try await coordinator.addPersistentStore(type: .lmdb, at: directory.url, options: CoordinatorStoreTests.options)
            let stored = store.file!.metadata.storedModel
            try await coordinator.remove(store)
            return stored
        }
        #expect(try await recorded() == StoredModel(model))
        #expect(try await recorded()?.versionIdentifier == "7", "read back when it opens again")
    }

    @Test("with automatic migration off, opening a store with another model fails listing what differs: the lightweight changes, then what needs a custom stage")
    func mismatchListsTheChanges() async throws {
        let directory = TemporaryDirectory()
        do {
            let coordinator = PersistentStoreCoordinator(managedObjectModel: try Self.library())
            let store = try await coordinator.addPersistentStore(type: .lmdb, at: directory.url, options: CoordinatorStoreTests.options)
            try await coordinator.remove(store)
        }
        let new = try Self.library(version: "2", volume: [
            AttributeDescription(name: "title", type: .integer64, isOptional: false, defaultValue: .integer(0)),
            AttributeDescription(name: "pages", type: .integer64, defaultValue: .integer(0), isIndexed: true),
        ])
        let coordinator = PersistentStoreCoordinator(managedObjectModel: new)
        var options = CoordinatorStoreTests.options
        options.shouldMigrateStoreAutomatically = false
        let error = await #expect(throws: StrataError.self) {
            try await coordinator.addPersistentStore(type: .lmdb, at: directory.url, options: options)
        }
        #expect(error?.code == .modelMismatch)
        #expect(error?.modelChanges == [
            "change Volume.pages from integer32 to integer64 (widening)",
            "remove attribute Volume.subtitle",
            "needs a custom stage: attribute Volume.title changes from string to integer64: no lightweight conversion",
        ])
    }

    @Test("the typed version 2 against the stored version 1: renamed entity, attribute and relationship, a widened type, a removed attribute, a dropped index")
    func typedSecondVersion() throws {
        let old = StoredModel(try Self.library())
        let diff = SchemaDiff(from: old, to: try ManagedObjectModel(types: [Tome.self, Stack.self], versionIdentifier: "2"))
        #expect(diff.problems == [])
        #expect(Set(diff.changes) == [
            .renameEntity(from: "Volume", to: "Tome"),
            .renameAttribute(entity: "Tome", from: "title", to: "heading"),
            .changeType(entity: "Tome", attribute: "pages", from: "integer32", to: "integer64", widening: true),
            .removeIndex(entity: "Tome", attribute: "pages"),
            .removeAttribute(entity: "Tome", attribute: "subtitle"),
            .renameRelationship(entity: "Tome", from: "location", to: "shelf"),
            // Non-optional Swift types: required, with their defaults to fill.
            .makeRequired(entity: "Tome", attribute: "pages"),
            .makeRequired(entity: "Stack", attribute: "label"),
        ])
    }

    @Test("each lightweight change alone", arguments: [
        "add attribute", "remove attribute", "optional to required", "required to optional", "add index", "add constraint",
        "remove constraint", "add entity", "remove entity", "add relationship", "to-one to to-many", "narrowing",
    ])
    func lightweightChanges(kind: String) throws {
        let base: [AttributeDescription] = [
            AttributeDescription(name: "title", type: .string, isOptional: false, defaultValue: .string("")),
            AttributeDescription(name: "pages", type: .integer32, defaultValue: .integer(0), isIndexed: true),
        ]
        let old = StoredModel(try Self.library(volume: base))
        var attributes = base
        var constraints: [[String]] = []
        var expected: SchemaChange
        var new: ManagedObjectModel?
        switch kind {
        case "add attribute":
            attributes.append(AttributeDescription(name: "isbn", type: .string))
            expected = .addAttribute(entity: "Volume", attribute: "isbn")
        case "remove attribute":
            attributes.removeLast()
            expected = .removeAttribute(entity: "Volume", attribute: "pages")
            new = try Self.library(volume: attributes)
            #expect(SchemaDiff(from: old, to: new!).changes == [expected])
            return
        case "optional to required":
            attributes[1].isOptional = false
            expected = .makeRequired(entity: "Volume", attribute: "pages")
        case "required to optional":
            attributes[0].isOptional = true
            expected = .makeOptional(entity: "Volume", attribute: "title")
        case "add index":
            attributes[0].isIndexed = true
            expected = .addIndex(entity: "Volume", attribute: "title")
        case "add constraint":
            constraints = [["title"]]
            expected = .addUniquenessConstraint(entity: "Volume", constraint: ["title"])
        case "remove constraint":
            let constrained = StoredModel(try Self.library(volume: base, constraints: [["title"]]))
            #expect(SchemaDiff(from: constrained, to: try Self.library(volume: base)).changes
                == [.removeUniquenessConstraint(entity: "Volume", constraint: ["title"])])
            return
        case "add entity":
            new = try ManagedObjectModel(entities: try Self.library(volume: base).entities + [
                EntityDescription(name: "Author", attributes: [AttributeDescription(name: "name", type: .string)]),
            ])
            expected = .addEntity("Author")
        case "remove entity":
            let withAuthor = try ManagedObjectModel(entities: try Self.library(volume: base).entities + [
                EntityDescription(name: "Author", attributes: [AttributeDescription(name: "name", type: .string)]),
            ])
            #expect(SchemaDiff(from: StoredModel(withAuthor), to: try Self.library(volume: base)).changes == [.removeEntity("Author")])
            return
        case "add relationship":
            new = try ManagedObjectModel(entities: [
                EntityDescription(name: "Volume", attributes: base, relationships: [
                    RelationshipDescription(name: "location", destinationEntityName: "Stack", inverseName: "books"),
                    RelationshipDescription(name: "favouriteOf", destinationEntityName: "Stack", inverseName: "favourite"),
                ]),
                EntityDescription(name: "Stack", attributes: [AttributeDescription(name: "label", type: .string)], relationships: [
                    RelationshipDescription(name: "books", destinationEntityName: "Volume", inverseName: "location", isToMany: true),
                    RelationshipDescription(name: "favourite", destinationEntityName: "Volume", inverseName: "favouriteOf"),
                ]),
            ])
            let diff = SchemaDiff(from: old, to: new!)
            #expect(Set(diff.changes) == [
                .addRelationship(entity: "Volume", relationship: "favouriteOf"), .addRelationship(entity: "Stack", relationship: "favourite"),
            ])
            return
        case "to-one to to-many":
            new = try Self.library(
                volume: base,
                relationships: [RelationshipDescription(name: "location", destinationEntityName: "Stack", inverseName: "books", isToMany: true)],
                shelfRelationship: RelationshipDescription(name: "books", destinationEntityName: "Volume", inverseName: "location", isToMany: true))
            expected = .makeToMany(entity: "Volume", relationship: "location")
        default:   // narrowing: each value checked
            attributes[1].type = .integer16
            expected = .changeType(entity: "Volume", attribute: "pages", from: "integer32", to: "integer16", widening: false)
        }
        let diff = SchemaDiff(from: old, to: try new ?? Self.library(volume: attributes, constraints: constraints))
        #expect(diff.problems == [])
        #expect(diff.changes == [expected])
    }

    @Test("what no lightweight migration does is listed all at once: an incompatible type, a new required attribute without a default, required without a default, new destinations, to-many to to-one")
    func problemsAllAtOnce() throws {
        let old = StoredModel(try Self.library())
        let new = try ManagedObjectModel(entities: [
            EntityDescription(
                name: "Volume",
                attributes: [
                    AttributeDescription(name: "title", type: .integer64, isOptional: false, defaultValue: .integer(0)),
                    AttributeDescription(name: "pages", type: .integer32, isOptional: false, isIndexed: true),
                    AttributeDescription(name: "subtitle", type: .string),
                    AttributeDescription(name: "isbn", type: .string, isOptional: false),
                ],
                relationships: [RelationshipDescription(name: "location", destinationEntityName: "Room", inverseName: "volumes")]),
            EntityDescription(
                name: "Stack", attributes: [AttributeDescription(name: "label", type: .string)],
                relationships: [RelationshipDescription(name: "books", destinationEntityName: "Room", inverseName: "shelf")]),
            EntityDescription(name: "Room", relationships: [
                RelationshipDescription(name: "volumes", destinationEntityName: "Volume", inverseName: "location", isToMany: true),
                RelationshipDescription(name: "shelf", destinationEntityName: "Stack", inverseName: "books"),
            ]),
        ])
        let diff = SchemaDiff(from: old, to: new)
        #expect(!diff.isLightweight)
        #expect(diff.problems.count == 6, "\(diff.problems)")
        for fragment in ["Volume.title changes from string to integer64", "Volume.isbn is new and required", "Volume.pages becomes required",
                         "Volume.location points to Room", "Stack.books points to Room", "Stack.books becomes to-one"] {
            #expect(diff.problems.contains { $0.contains(fragment) }, "\(fragment)")
        }
        #expect(diff.changes.contains(.addEntity("Room")))
    }

    @Test("the same model: no change")
    func sameModel() throws {
        #expect(SchemaDiff(from: StoredModel(try Self.library()), to: try Self.library()).isEmpty)
    }

    @Test("a migrated schema keeps the numbers of what the new model keeps (renamed entities, attributes and to-one relationships included) and numbers new things above every old number; a property of another kind under an old name gets a new number")
    func migratedSchemaNumbers() throws {
        let oldModel = try Self.library()
        let old = StoreSchema(assigningNumbersFor: oldModel)
        let new = try ManagedObjectModel(types: [Tome.self, Stack.self], versionIdentifier: "2")
        let migrated = old.migrated(to: new, from: StoredModel(oldModel))
        #expect(migrated.problem(storing: new) == nil)
        #expect(migrated.entityNumber(of: "Tome") == old.entityNumber(of: "Volume"))
        #expect(migrated.entityNumber(of: "Stack") == old.entityNumber(of: "Stack"))
        #expect(migrated.fieldNumber(entity: "Tome", property: "heading") == old.fieldNumber(entity: "Volume", property: "title"))
        #expect(migrated.fieldNumber(entity: "Tome", property: "pages") == old.fieldNumber(entity: "Volume", property: "pages"))
        #expect(migrated.fieldNumber(entity: "Tome", property: "shelf") == old.fieldNumber(entity: "Volume", property: "location"))
        #expect(migrated.fieldNumber(entity: "Stack", property: "label") == old.fieldNumber(entity: "Stack", property: "label"))

        // A new entity and a new attribute: numbers above every old one. An old attribute's
        // name reused by a to-one relationship: a new number (rows hold a value there, not a key).
        let highestField = [("Volume", ["title", "pages", "subtitle", "location"]), ("Stack", ["label"])]
            .flatMap { entity, names in names.compactMap { old.fieldNumber(entity: entity, property: $0) } }.max() ?? 0
        let third = try ManagedObjectModel(entities: [
            EntityDescription(name: "Volume", attributes: [
                AttributeDescription(name: "title", type: .string, isOptional: false, defaultValue: .string("")),
                AttributeDescription(name: "isbn", type: .string),
            ], relationships: [
                RelationshipDescription(name: "location", destinationEntityName: "Stack", inverseName: "books"),
                RelationshipDescription(name: "subtitle", destinationEntityName: "Author", inverseName: "volumes"),
            ]),
            EntityDescription(name: "Stack", attributes: [AttributeDescription(name: "label", type: .string)], relationships: [
                RelationshipDescription(name: "books", destinationEntityName: "Volume", inverseName: "location", isToMany: true),
            ]),
            EntityDescription(name: "Author", relationships: [
                RelationshipDescription(name: "volumes", destinationEntityName: "Volume", inverseName: "subtitle", isToMany: true),
            ]),
        ])
        let later = old.migrated(to: third, from: StoredModel(oldModel))
        #expect(later.problem(storing: third) == nil)
        #expect(later.fieldNumber(entity: "Volume", property: "title") == old.fieldNumber(entity: "Volume", property: "title"))
        let isbn = try #require(later.fieldNumber(entity: "Volume", property: "isbn"))
        let subtitle = try #require(later.fieldNumber(entity: "Volume", property: "subtitle"))
        #expect(isbn > highestField && subtitle > highestField && isbn != subtitle)
        #expect(try #require(later.entityNumber(of: "Author")) > max(old.entityNumber(of: "Volume") ?? 0, old.entityNumber(of: "Stack") ?? 0))
    }

    @Test("a record rewrite keeps renamed and widened fields where they are, drops removed ones, fills defaults where a new or newly required attribute holds nothing, and keeps the row version")
    func recordRewrite() throws {
        let oldModel = try Self.library()
        let old = StoreSchema(assigningNumbersFor: oldModel)
        let model = try ManagedObjectModel(types: [Tome.self, Stack.self], versionIdentifier: "2")
        let new = old.migrated(to: model, from: StoredModel(oldModel))
        let plan = try #require(RecordRewrite.plan(entity: "Tome", from: old, stored: StoredModel(oldModel), to: new, model: model))
        func number(_ schema: StoreSchema, _ entity: String, _ name: String) throws -> UInt32 {
            try #require(schema.fieldNumber(entity: entity, property: name))
        }
        let title = try number(old, "Volume", "title"), pages = try number(old, "Volume", "pages")
        let subtitle = try number(old, "Volume", "subtitle"), location = try number(old, "Volume", "location")
        let reference = AttributeValue.binaryData(Data(repeating: 7, count: 10))
        let before = RecordCodec.encode(Record(version: 5, fields: [title: .string("A"), subtitle: .string("s"), location: reference]))
        let after = try RecordCodec.decode(try before.withUnsafeBytes { try plan.rewrite($0) })
        #expect(after == Record(version: 5, fields: [
            try number(new, "Tome", "heading"): .string("A"), try number(new, "Tome", "pages"): .integer(0),
            try number(new, "Tome", "shelf"): reference,
        ]))
        #expect(try number(new, "Tome", "pages") == pages, "a widened integer keeps its field")
        #expect(plan.kept[pages] == .keep)
        // Stack's label became required (a String property): filled where nil.
        let stack = try #require(RecordRewrite.plan(entity: "Stack", from: old, stored: StoredModel(oldModel), to: new, model: model))
        #expect(stack.fills == [try number(new, "Stack", "label"): .string("")])
        // The same model: nothing to rewrite.
        #expect(RecordRewrite.plan(entity: "Volume", from: old, stored: StoredModel(oldModel), to: old, model: oldModel) == nil)
    }

    @Test("conversions are exact or fail naming the attribute and value: narrowing, integers to floating point and back, double to float")
    func exactConversions() throws {
        #expect(RecordRewrite.convert(.integer(70_000), to: .integer(32)) == .integer(70_000))
        #expect(RecordRewrite.convert(.integer(70_000), to: .integer(16)) == nil)
        #expect(RecordRewrite.convert(.integer(1 << 53), to: .double) == .double(9_007_199_254_740_992))
        #expect(RecordRewrite.convert(.integer((1 << 53) + 1), to: .double) == nil)
        #expect(RecordRewrite.convert(.double(3), to: .integer(64)) == .integer(3))
        #expect(RecordRewrite.convert(.double(2.5), to: .integer(64)) == nil)
        #expect(RecordRewrite.convert(.double(0.5), to: .float) == .float(0.5))
        #expect(RecordRewrite.convert(.double(0.1), to: .float) == nil)
        #expect(RecordRewrite.convert(.float(0.1), to: .double) == .double(Double(Float(0.1))))
        #expect(RecordRewrite.convert(.string("3"), to: .integer(64)) == nil)
        let rewrite = RecordRewrite(kept: [1: .convert(.integer(16))], fills: [:], names: [1: "Volume.pages"])
        let bytes = RecordCodec.encode(Record(version: 1, fields: [1: .integer(70_000)]))
        let failure = #expect(throws: RecordRewrite.Failure.self) { try bytes.withUnsafeBytes { try rewrite.rewrite($0) } }
        #expect(failure?.reason == "Volume.pages holds 70000, which does not convert exactly to integer16")
        #expect(throws: RecordRewrite.Failure.self) { try [UInt8]([9, 9]).withUnsafeBytes { try rewrite.rewrite($0) } }
    }
}
