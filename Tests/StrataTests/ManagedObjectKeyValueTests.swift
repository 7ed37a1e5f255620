import Foundation
import Testing
@testable import Strata

/// `value(forKey:)` / `setValue(_:forKey:)` on a dynamic model (no subclass).
@Suite struct ManagedObjectKeyValueTests {
    static let model: ManagedObjectModel = {
        do {
            return try ManagedObjectModel(entities: [
                EntityDescription(name: "Sample", attributes: [
                    AttributeDescription(name: "i16", type: .integer16, defaultValue: .integer(7)),
                    AttributeDescription(name: "i32", type: .integer32),
                    AttributeDescription(name: "i64", type: .integer64),
                    AttributeDescription(name: "double", type: .double),
                    AttributeDescription(name: "float", type: .float),
                    AttributeDescription(name: "flag", type: .boolean),
                    AttributeDescription(name: "text", type: .string),
                    AttributeDescription(name: "date", type: .date),
                    AttributeDescription(name: "data", type: .binaryData),
                    AttributeDescription(name: "uuid", type: .uuid),
                    AttributeDescription(name: "url", type: .uri),
                    AttributeDescription(name: "decimal", type: .decimal),
                    AttributeDescription(name: "colour", type: .transformable(Colour.self)),
                ], relationships: [
                    RelationshipDescription(name: "parent", destinationEntityName: "Sample", inverseName: "children"),
                    RelationshipDescription(name: "children", destinationEntityName: "Sample", inverseName: "parent", isToMany: true),
                    RelationshipDescription(name: "queue", destinationEntityName: "Other", inverseName: "owner", isToMany: true, isOrdered: true),
                ]),
                EntityDescription(name: "Other", relationships: [
                    RelationshipDescription(name: "owner", destinationEntityName: "Sample", inverseName: "queue"),
                ]),
            ])
        } catch {
            preconditionFailure("\(error)")
        }
    }()

    func make(_ name: String = "Sample") -> ManagedObject {
        ManagedObject(entity: Self.model.entitiesByName[name]!)
    }

    @Test func newObjectsHaveDefaultsAndATemporaryID() throws {
        let object = make()
        #expect(object.objectID.isTemporaryID)
        #expect(object.objectID.entityName == "Sample")
        #expect(try object.value(forKey: "i16") as? Int16 == 7)
        #expect(try object.value(forKey: "text") == nil)
        #expect(!object.isFault && !object.isInserted && !object.isUpdated && !object.isDeleted && !object.hasChanges)
    }

    @Test(arguments: [
        ("i16", Int16(-32768) as any Sendable), ("i32", Int32.max), ("i64", Int64.min), ("double", -0.5),
        ("float", Float(1.25)), ("flag", true), ("text", "héllo ✓"), ("date", Date(timeIntervalSince1970: 12)),
        ("data", Data([0, 1, 255])), ("uuid", UUID()), ("url", URL(string: "https://example.com/a?b=c")!),
        ("decimal", Decimal(string: "12.3456")!), ("colour", Colour(red: 0.25, green: 0, blue: 1)),
    ])
    func everyTypeRoundTrips(key: String, value: any Sendable) throws {
        let object = make()
        try object.setValue(value, forKey: key)
        let read = try object.value(forKey: key)
        #expect(String(describing: read.map { $0 }!) == String(describing: value))
        #expect(type(of: read!) == type(of: value))
    }

    @Test func intIsAcceptedForEveryIntegerWidthWhenItFits() throws {
        let object = make()
        try object.setValue(12, forKey: "i16")
        try object.setValue(-5, forKey: "i32")
        try object.setValue(Int.max, forKey: "i64")
        #expect(try object.value(forKey: "i16") as? Int16 == 12)
        #expect(try object.value(forKey: "i32") as? Int32 == -5)
        #expect(try object.value(forKey: "i64") as? Int64 == Int64.max)
    }

    @Test func unknownKeysAreTypedErrors() {
        let object = make()
        #expect(throws: StrataError.unknownKey(key: "nope", entity: "Sample")) { try object.value(forKey: "nope") }
        #expect(throws: StrataError.unknownKey(key: "nope", entity: "Sample")) { try object.setValue(1, forKey: "nope") }
        #expect(throws: StrataError.unknownKey(key: "nope", entity: "Sample")) { try object.committedValues(forKeys: ["text", "nope"]) }
        #expect(throws: StrataError.unknownKey(key: "text", entity: "Sample")) {
            try object.add(make(), toRelationship: "text")
        }
    }

    @Test func wrongTypesAreRefusedAndChangeNothing() throws {
        let object = make()
        try object.setValue("keep", forKey: "text")
        let refused: [(String, Any?)] = [
            ("text", 5), ("i16", 40_000), ("i16", Int32(1)), ("i32", Int64(1)), ("i64", 1.5), ("float", 1.5),
            ("double", Float(1)), ("flag", 1), ("date", "2020-01-01"), ("data", [UInt8]([1])),
            ("uuid", "6F1E7B0C-0000-0000-0000-000000000000"), ("url", "https://example.com"), ("decimal", 1.5),
            ("colour", "red"), ("text", AttributeValue.integer(1)), ("i16", AttributeValue.integer(1 << 20)),
        ]
        for (key, value) in refused {
            #expect(throws: StrataError.self, "\(key) = \(String(describing: value))") { try object.setValue(value, forKey: key) }
        }
        #expect(try object.value(forKey: "text") as? String == "keep")
        #expect(try object.value(forKey: "i16") as? Int16 == 7)
        let error = #expect(throws: StrataError.self) { try object.setValue(40_000, forKey: "i16") }
        guard let error, error.code == .typeMismatch, let key = error.key, let entity = error.entityName,
              let expected = error.expectedType, let actual = error.actualType else {
            Issue.record("expected a type mismatch, got \(String(describing: error))")
            return
        }
        #expect(key == "i16" && entity == "Sample" && expected == "Int16")
        #expect(actual.contains("40000") && actual.contains("out of range"))
    }

    @Test func nilClearsAndOptionalsAreUnwrapped() throws {
        let object = make()
        let text: String? = "x"
        try object.setValue(text, forKey: "text")
        #expect(try object.value(forKey: "text") as? String == "x")
        try object.setValue(nil, forKey: "text")
        #expect(try object.value(forKey: "text") == nil)
        try object.setValue(AttributeValue.string("raw"), forKey: "text")
        #expect(try object.value(forKey: "text") as? String == "raw")
    }

    @Test func relationshipValuesAreCheckedForKindAndShape() throws {
        let parent = make()
        let child = make()
        let other = make("Other")
        #expect(throws: StrataError.self) { try child.setValue(other, forKey: "parent") }
        #expect(throws: StrataError.self) { try parent.setValue(child, forKey: "children") }
        #expect(throws: StrataError.self) { try parent.setValue([other], forKey: "children") }
        #expect(throws: StrataError.self) { try parent.setValue([other, other], forKey: "queue") }
        #expect(throws: StrataError.self) { try parent.setValue(Set([other]), forKey: "queue") }
        #expect(throws: StrataError.self) { try parent.insert(child, at: 0, intoRelationship: "children") }
        try parent.setValue([child], forKey: "children")
        #expect(try parent.value(forKey: "children") as? Set<ManagedObject> == [child])
        #expect(try child.value(forKey: "parent") as? ManagedObject === parent)
        try parent.setValue([other], forKey: "queue")
        #expect(try parent.value(forKey: "queue") as? [ManagedObject] == [other])
    }

    @Test func relationshipsAcrossContextsAreRefused() throws {
        let first = FakeOwner(model: Self.model)
        let second = FakeOwner(model: Self.model)
        let parent = make()
        let child = make()
        first.insert(parent)
        second.insert(child)
        #expect(throws: StrataError.self) { try child.setValue(parent, forKey: "parent") }
        #expect(parent.relationshipValues[1].objects.isEmpty)
    }
}
