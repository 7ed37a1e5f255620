import Foundation
@testable import Strata
import Testing



@Suite("Managed object model")
struct ManagedObjectModelTests {
    static func notes() -> [EntityDescription] {
        [
            EntityDescription(name: "Item", isAbstract: true, attributes: [
                AttributeDescription(name: "created", type: .date, isOptional: false),
            ]),
            EntityDescription(name: "Folder", superentityName: "Item", attributes: [
                AttributeDescription(name: "name", type: .string, isOptional: false, defaultValue: .string("Untitled"),
                                     validation: AttributeValidation(minimumLength: 1, maximumLength: 100)),
            ], relationships: [
                RelationshipDescription(name: "notes", destinationEntityName: "Note", inverseName: "folder",
                                        isToMany: true, isOrdered: true, deleteRule: .cascade),
            ]),
            EntityDescription(name: "Note", superentityName: "Item", attributes: [
                AttributeDescription(name: "title", type: .string, isIndexed: true),
                AttributeDescription(name: "priority", type: .integer16, defaultValue: .integer(3),
                                     validation: AttributeValidation(minimum: 0, maximum: 9)),
                AttributeDescription(name: "colour", type: .transformable(Colour.self)),
                AttributeDescription(name: "isSelected", type: .boolean, isTransient: true),
            ], relationships: [
                RelationshipDescription(name: "folder", destinationEntityName: "Folder", inverseName: "notes"),
                RelationshipDescription(name: "tags", destinationEntityName: "Tag", inverseName: "notes", isToMany: true),
            ]),
            EntityDescription(name: "Checklist", superentityName: "Note"),
            EntityDescription(name: "Tag", attributes: [
                AttributeDescription(name: "label", type: .string, isOptional: false),
            ], relationships: [
                RelationshipDescription(name: "notes", destinationEntityName: "Note", inverseName: "tags", isToMany: true),
            ]),
        ]
    }

    @Test func buildsAndResolvesInheritance() throws {
        let model = try ManagedObjectModel(entities: Self.notes())
        #expect(model.entities.map(\.name) == ["Checklist", "Folder", "Item", "Note", "Tag"])
        let checklist = try #require(model.entitiesByName["Checklist"])
        #expect(checklist.ancestorNames == ["Note", "Item"])
        #expect(checklist.propertyNames == ["colour", "created", "folder", "isSelected", "priority", "tags", "title"])
        #expect(checklist.storedAttributes.map(\.name) == ["colour", "created", "priority", "title"])
        #expect(checklist.isKind(of: "Item") && !checklist.isKind(of: "Folder"))
        #expect(model.entitiesByName["Note"]?.subentityNames == ["Checklist"])
        #expect(model.entitiesByName["Item"]?.subentityNames == ["Folder", "Note"])
        #expect(model.entityNames(kindOf: "Item") == ["Checklist", "Folder", "Item", "Note"])
        #expect(model.entityNames(kindOf: "Note") == ["Checklist", "Note"])
        #expect(model.entitiesByName["Note"]?.attributesByName["colour"]?.type == .transformable(Colour.self))
        #expect(AttributeType.transformable(Colour.self) != .transformable(String.self))
    }

    @Test func reportsEveryProblemAtOnce() {
        let entities = [
            EntityDescription(name: "Note", superentityName: "Missing", attributes: [
                AttributeDescription(name: "title", type: .string, defaultValue: .integer(1)),
                AttributeDescription(name: "title", type: .string),
                AttributeDescription(name: "small", type: .integer16, defaultValue: .integer(40_000)),
                AttributeDescription(name: "blob", type: .transformable(Colour.self), isIndexed: true),
                AttributeDescription(name: "code", type: .string, validation: AttributeValidation(minimum: 1, pattern: "([a-z")),
                AttributeDescription(name: "2bad", type: .string),
            ], relationships: [
                RelationshipDescription(name: "folder", destinationEntityName: "Folder", inverseName: "items"),
                RelationshipDescription(name: "owner", destinationEntityName: "Nobody", inverseName: "notes"),
                RelationshipDescription(name: "tags", destinationEntityName: "Tag", inverseName: "wrong", isOrdered: true),
            ]),
            EntityDescription(name: "Folder", relationships: [
                RelationshipDescription(name: "notes", destinationEntityName: "Note", inverseName: "folder", isToMany: true),
            ]),
            EntityDescription(name: "Tag", relationships: [
                RelationshipDescription(name: "wrong", destinationEntityName: "Folder", inverseName: "notes", isToMany: true,
                                        minCount: 3, maxCount: 2),
            ]),
            EntityDescription(name: "Tag"),
            EntityDescription(name: "A", superentityName: "B"),
            EntityDescription(name: "B", superentityName: "A"),
        ]
        do {
            _ = try ManagedObjectModel(entities: entities)
            Issue.record("the model should not build")
        } catch {
            let problems = error.problems
            let expected: [ModelError.Problem] = [
                .duplicateEntity("Tag"),
                .unknownSuperentity(entity: "Note", superentity: "Missing"),
                .inheritanceCycle(entity: "A"),
                .inheritanceCycle(entity: "B"),
                .invalidName(entity: "Note", name: "2bad"),
                .duplicateProperty(entity: "Note", name: "title"),
                .defaultValueTypeMismatch(entity: "Note", attribute: "title", type: "string"),
                .defaultValueTypeMismatch(entity: "Note", attribute: "small", type: "integer16"),
                .unindexableAttribute(entity: "Note", attribute: "blob", type: AttributeType.transformable(Colour.self).description),
                .invalidValidationRule(entity: "Note", attribute: "code", reason: "a minimum or maximum needs a numeric attribute"),
                .invalidValidationRule(entity: "Note", attribute: "code", reason: "the pattern '([a-z' is not a valid regular expression"),
                .missingInverse(entity: "Note", relationship: "folder", inverse: "items"),
                .unknownDestination(entity: "Note", relationship: "owner", destination: "Nobody"),
                .invalidRelationship(entity: "Note", relationship: "tags", reason: "only a to-many relationship can be ordered"),
                .mismatchedInverse(entity: "Note", relationship: "tags", inverse: "wrong"),
                .mismatchedInverse(entity: "Folder", relationship: "notes", inverse: "folder"),
                .invalidRelationship(entity: "Tag", relationship: "wrong", reason: "the maximum count 2 is below the minimum count 3"),
                .mismatchedInverse(entity: "Tag", relationship: "wrong", inverse: "notes"),
            ]
            for problem in expected {
                #expect(problems.contains(problem), "missing: \(problem)")
            }
            #expect(Set(problems).count == Set(expected).count, "unexpected: \(Set(problems).subtracting(expected))")
            #expect(error.description.contains("destination entity 'Nobody' does not exist"))
        }
    }

    @Test func versionHashCoversStorageOnly() throws {
        let base = try ManagedObjectModel(entities: Self.notes())
        #expect(base.versionHash.count == 16)
        #expect(try ManagedObjectModel(entities: Self.notes().reversed()).versionHash == base.versionHash, "order-independent")

        func variant(_ change: (inout [AttributeDescription]) -> Void) throws -> String {
            var entities = Self.notes()
            let note = entities[2]
            var attributes = note.declaredAttributes
            change(&attributes)
            entities[2] = EntityDescription(name: note.name, superentityName: note.superentityName, isAbstract: note.isAbstract,
                                            attributes: attributes, relationships: note.declaredRelationships)
            return try ManagedObjectModel(entities: entities).versionHash
        }
        // Not storage: defaults, validation, optionality, transients.
        #expect(try variant { $0[1].defaultValue = .integer(5) } == base.versionHash)
        #expect(try variant { $0[1].validation.maximum = 5 } == base.versionHash)
        #expect(try variant { $0[0].isOptional = false } == base.versionHash)
        #expect(try variant { $0.append(AttributeDescription(name: "scratch", type: .string, isTransient: true)) } == base.versionHash)
        // Storage: a new attribute, a type, an index.
        #expect(try variant { $0.append(AttributeDescription(name: "body", type: .string)) } != base.versionHash)
        #expect(try variant { $0[1].type = .integer32 } != base.versionHash)
        #expect(try variant { $0[0].isIndexed = false } != base.versionHash)
    }

    @Test func attributeTypesAcceptOnlyTheirValues() {
        #expect(AttributeType.integer16.accepts(.integer(Int64(Int16.max))))
        #expect(!AttributeType.integer16.accepts(.integer(Int64(Int16.max) + 1)))
        #expect(AttributeType.integer32.accepts(.integer(Int64(Int32.min))))
        #expect(!AttributeType.integer32.accepts(.integer(Int64(Int32.min) - 1)))
        #expect(AttributeType.integer64.accepts(.integer(.min)))
        #expect(!AttributeType.double.accepts(.float(1)), "no silent coercion between float and double")
        #expect(!AttributeType.string.accepts(.uri(URL(string: "https://a.b")!)))
        #expect(AttributeType.decimal.accepts(.decimal(Decimal(string: "1.25")!)))
    }
}
