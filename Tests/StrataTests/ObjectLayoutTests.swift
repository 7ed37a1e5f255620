import Foundation
import Testing
@testable import Strata

/// Where objects keep their values (``ObjectLayout``): the field offsets the runtime's
/// field metadata reports (the `_forEachField` SPI) checked against the fields' real
/// addresses, typed fields of every native type and their optionals, dynamic storage for
/// what a class does not declare, nil in non-optional fields, and the identity map.
@Suite struct ObjectLayoutTests {
    /// A class with a wrapper of every native type, their optionals, a transformable, a
    /// plain stored property in between, and relationships.
    final class Everything: ManagedObject {
        @Attribute var int16: Int16 = 1
        @Attribute var int32: Int32 = 2
        var plain = "not an attribute"
        @Attribute var int64: Int64 = 3
        @Attribute var int: Int = 4
        @Attribute var double: Double = 5
        @Attribute var float: Float = 6
        @Attribute var bool: Bool = true
        @Attribute var string: String = "seven"
        @Attribute var date: Date = Date(timeIntervalSinceReferenceDate: 8)
        @Attribute var data: Data = Data([9])
        @Attribute var uuid: UUID = UUID(uuidString: "00000000-0000-0000-0000-00000000000A")!
        @Attribute var url: URL = URL(string: "https://example.com/11")!
        @Attribute var decimal: Decimal = Decimal(string: "12.5")!
        @Attribute var optionalInt16: Int16?
        @Attribute var optionalString: String?
        @Attribute var optionalDate: Date?
        @Attribute var optionalDecimal: Decimal?
        @Attribute var colour: Colour = Colour(red: 0.1, green: 0.2, blue: 0.3)
        @Attribute var optionalColour: Colour?
        @Relationship(inverse: "everything") var parts: Set<Part>
        @Relationship(inverse: "ordered") var orderedParts: [Part]
    }

    final class Part: ManagedObject {
        @Relationship(inverse: "parts") var everything: Everything?
        @Relationship(inverse: "orderedParts") var ordered: Everything?
    }

    /// A subclass adds its own fields after its superclass's.
    class Base: ManagedObject {
        @Attribute var name: String = ""
    }

    final class Derived: Base {
        @Attribute var extra: Int64 = 0
    }

    static let model: ManagedObjectModel = {
        do {
            return try ManagedObjectModel(types: [Everything.self, Part.self, Base.self, Derived.self])
        } catch {
            preconditionFailure("\(error)")
        }
    }()

    @Test func fieldOffsetsFromTheFieldMetadataAreTheFieldsRealAddresses() throws {
        let object = Everything()
        let fields = ClassFields.of(Everything.self)
        #expect(fields.count == 21)
        #expect(fields.attribute(named: "plain") == nil)
        let real = object.realOffsets()
        for name in ["int16", "int32", "int64", "int", "double", "float", "bool", "string", "date", "data", "uuid", "url",
                     "decimal", "optionalInt16", "optionalString", "optionalDate", "optionalDecimal", "colour", "optionalColour"] {
            #expect(fields.attribute(named: name)?.offset == real[name], "\(name)")
        }
        #expect(fields.relationship(named: "parts")?.offset == real["parts"])
        #expect(fields.relationship(named: "orderedParts")?.offset == real["orderedParts"])
        #expect(fields.relationship(named: "orderedParts")?.isOrdered == true)

        let base = ClassFields.of(Base.self), derived = ClassFields.of(Derived.self)
        #expect(derived.fields.map(\.name) == ["name", "extra"])
        #expect(derived.attribute(named: "name")?.offset == base.attribute(named: "name")?.offset)
        #expect(derived.attribute(named: "extra")?.offset == Derived().extraOffset())
        #expect(ClassFields.of(ManagedObject.self).count == 0)
    }

    @Test func everyNativeTypeRoundTripsThroughItsTypedField() throws {
        let entity = try #require(Self.model.entitiesByName["Everything"])
        #expect(entity.layout.typedFieldsAreExact && !entity.layout.usesDynamicStorage)
        let object = Everything(entity: entity)
        let values: [String: AttributeValue?] = [
            "int16": .integer(-16), "int32": .integer(-32), "int64": .integer(.min), "int": .integer(.max),
            "double": .double(-0.5), "float": .float(1.5), "bool": .boolean(false), "string": .string("ünïcødé"),
            "date": .date(Date(timeIntervalSinceReferenceDate: -1)), "data": .binaryData(Data([1, 2, 3])),
            "uuid": .uuid(UUID(uuidString: "01234567-89AB-CDEF-0123-456789ABCDEF")!),
            "url": .uri(URL(string: "file:///tmp/x")!), "decimal": .decimal(Decimal(string: "-0.001")!),
            "optionalInt16": .integer(7), "optionalString": nil, "optionalDate": .date(Date(timeIntervalSince1970: 0)),
            "optionalDecimal": .decimal(1),
        ]
        for (name, value) in values {
            let slot = try #require(entity.attributeSlot(named: name))
            object.storeAttribute(value, at: slot)
            #expect(object.attributeValue(at: slot) == value, "\(name)")
        }
        #expect(object.int16 == -16 && object.int == .max && object.string == "ünïcødé" && object.optionalInt16 == 7)
        #expect(object.optionalString == nil && object.decimal == Decimal(string: "-0.001"))
        object.optionalColour = Colour(red: 1, green: 1, blue: 1)
        let colourSlot = try #require(entity.attributeSlot(named: "optionalColour"))
        #expect(object.attributeValue(at: colourSlot) == Colour(red: 1, green: 1, blue: 1).attributeValue)
        object.storeAttribute(nil, at: colourSlot)
        #expect(object.optionalColour == nil)
    }

    @Test func anIntegerOutOfAFieldsRangeIsRefusedByTheFieldNotTruncated() throws {
        let object = Everything()
        let slot = try #require(object.entity.attributeSlot(named: "int16"))
        guard case .field(let offset, let type) = object.entity.layout.attributes[slot] else {
            Issue.record("int16 is not a field")
            return
        }
        #expect(!object.writeField(.integer(Int64(Int16.max) + 1), at: offset, type))
        #expect(!object.writeField(.string("sixteen"), at: offset, type))
        #expect(object.int16 == 1)
    }

    @Test func nilInANonOptionalFieldReadsNilThroughKeyValueAccessAndTheDefaultThroughTheTypedAccessor() throws {
        let object = Everything()
        try object.setValue(nil, forKey: "string")
        #expect(try object.value(forKey: "string") == nil)
        #expect(object.string == "seven")
        #expect(throws: StrataError.self) { try object.validateForInsert() }
        object.string = "set again"
        #expect(try object.value(forKey: "string") as? String == "set again")
        try object.validateForInsert()
    }

    @Test("a row encoded from an object's typed fields is byte for byte the row encoded from its values boxed")
    func rowsEncodedFromFieldsMatchBoxedValues() async throws {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: Self.model)
        let store = try await coordinator.addPersistentStore(type: .inMemory)
        let storage = try store.file!.entityStorage(named: "Everything")
        let entity = try #require(Self.model.entitiesByName["Everything"])
        func encoded(_ source: some RowSource) throws -> [UInt8] {
            var rows = EncodedRows()
            try RowEncoder.append(source, storage: storage, key: 7, baseVersion: 3, to: &rows)
            return rows.bytes
        }
        let cases: [(Everything) throws -> Void] = [
            { _ in },
            { object in
                object.int64 = .min
                object.int = .max
                object.double = -.infinity
                object.string = "Grüße, 世界 " + String(repeating: "x", count: 300)
                object.date = Date(timeIntervalSinceReferenceDate: -1e9)
            },
            { object in
                object.double = .nan
                object.string = ""
            },
            // A nil the typed fields cannot hold goes the general way: no field at all.
            { object in
                try object.setValue(nil, forKey: "int64")
                try object.setValue(nil, forKey: "string")
            },
        ]
        for change in cases {
            let object = Everything(entity: entity)
            try change(object)
            let fromFields = try encoded(object)
            #expect(fromFields == (try encoded(object.makeSnapshot())))
            #expect(!fromFields.isEmpty)
        }
    }

    @Test func aHandBuiltEntityKeepsWhatItsClassDoesNotDeclareInDynamicStorage() throws {
        // Base declares `name` as a String; this entity has it as an integer, and adds
        // `note`. Both live in dynamic storage; the typed accessor reads its default.
        let entity = EntityDescription(name: "Base", managedObjectClass: Base.self, attributes: [
            AttributeDescription(name: "name", type: .integer64, defaultValue: .integer(5)),
            AttributeDescription(name: "note", type: .string, defaultValue: .string("dynamic")),
        ])
        #expect(!entity.layout.typedFieldsAreExact && entity.layout.dynamicAttributeCount == 2)
        let object = Base(entity: entity)
        #expect(try object.value(forKey: "name") as? Int64 == 5)
        #expect(try object.value(forKey: "note") as? String == "dynamic")
        #expect(object.name == "")
        try object.setValue(Int64(6), forKey: "name")
        #expect(try object.value(forKey: "name") as? Int64 == 6)
        object.name = "refused"   // not an integer: refused, and the next save would fail
        #expect(try object.value(forKey: "name") as? Int64 == 6)
        guard let error = object.pendingFailedEdits.first?.error, error.code == .typeMismatch, error.key == "name",
              error.entityName == "Base", error.expectedType == "Int64", error.actualType == "String" else {
            Issue.record("the refused write was not recorded: \(object.pendingFailedEdits)")
            return
        }
    }

    @Test func aHandBuiltEntityOfATypedClassGivesNewObjectsItsOwnDefaults() throws {
        let entity = EntityDescription(name: "Base", managedObjectClass: Base.self, attributes: [
            AttributeDescription(name: "name", type: .string, defaultValue: .string("from the entity")),
        ])
        #expect(entity.layout.typedFieldsAreExact && entity.layout.writesDefaultsAtInit)
        #expect(Base(entity: entity).name == "from the entity")
        #expect(Base().name == "")
    }

    @Test func anObjectMadeFromItsClassMovesToTheModelsEntityWithoutMovingValues() throws {
        let object = Derived()
        object.name = "kept"
        object.extra = 42
        let entity = try #require(Self.model.entitiesByName["Derived"])
        #expect(entity !== object.entity && entity.layout.holdsSlotsLike(object.entity.layout))
        object.adopt(entity)
        #expect(object.entity === entity && object.name == "kept" && object.extra == 42)
    }

    @Test func theIdentityMapFindsInsertsAndRemovesUnderLoad() {
        var map = IdentityMap()
        let objects = (0..<5_000).map { _ in ManagedObject(entity: EntityDescription(name: "Thing")) }
        func key(_ index: Int) -> ObjectIdentityKey { ObjectIdentityKey(store: 1, entity: 7, primaryKey: UInt64(index + 1)) }
        for (index, object) in objects.enumerated() { map.insert(object, for: key(index)) }
        #expect(map.count == 5_000)
        for index in stride(from: 0, to: 5_000, by: 3) {
            let removed = map.remove(key(index))
            #expect(removed)
        }
        for index in 0..<5_000 {
            if index % 3 == 0 {
                #expect(map[key(index)] == nil)
            } else {
                #expect(map[key(index)] === objects[index])
            }
        }
        // Only the object registered under a key takes its entry away.
        let wrongObject = map.remove(key(1), ifObject: ObjectIdentifier(objects[2]))
        let rightObject = map.remove(key(1), ifObject: ObjectIdentifier(objects[1]))
        #expect(!wrongObject && rightObject)
        #expect(map.count == 5_000 - 1_667 - 1)
        map.insert(objects[0], for: ObjectIdentityKey(temporary: UUID()))
        #expect(map.temporaryObjects.map(ObjectIdentifier.init) == [ObjectIdentifier(objects[0])])
    }

    @Test func anObjectLeavingMemoryTakesItsRegistrationWithIt() throws {
        let owner = ObjectGraph(coordinator: PersistentStoreCoordinator(managedObjectModel: Self.model))
        let entity = try #require(Self.model.entitiesByName["Base"])
        let id = ManagedObjectID(store: UUID(), entityName: "Base", primaryKey: PrimaryKey(3)!)
        do {
            let object = owner.object(for: id)
            #expect(owner.registeredObject(for: id) === object && owner.registrationCount == 1)
            #expect(object.entity === entity)
        }
        #expect(owner.registrationCount == 0 && owner.registeredObject(for: id) == nil)
    }

    @Test func temporaryIDsComeFromSerialsAndGoBack() {
        let uuid = TemporaryIDs.next()
        let serial = TemporaryIDs.serial(of: uuid)
        #expect(serial != nil && TemporaryIDs.uuid(serial: serial!) == uuid)
        #expect(TemporaryIDs.serial(of: UUID()) == nil)
        let object = ManagedObject(entity: EntityDescription(name: "Thing"))
        let id = object.objectID
        #expect(id.isTemporaryID && object.objectID == id)
        let foreign = ManagedObjectID(temporary: UUID(), entityName: "Thing")
        object.objectID = foreign
        #expect(object.objectID == foreign)
    }
}

// The wrappers' storage is private to each class: its key paths are formed here, in the
// classes' own file.
extension ObjectLayoutTests.Everything {
    /// The real offset of each wrapper field: the address a key path projects to.
    func realOffsets() -> [String: Int] {
        [
            "int16": fieldOffset(\ObjectLayoutTests.Everything._int16), "int32": fieldOffset(\ObjectLayoutTests.Everything._int32), "int64": fieldOffset(\ObjectLayoutTests.Everything._int64),
            "int": fieldOffset(\ObjectLayoutTests.Everything._int), "double": fieldOffset(\ObjectLayoutTests.Everything._double), "float": fieldOffset(\ObjectLayoutTests.Everything._float),
            "bool": fieldOffset(\ObjectLayoutTests.Everything._bool), "string": fieldOffset(\ObjectLayoutTests.Everything._string), "date": fieldOffset(\ObjectLayoutTests.Everything._date),
            "data": fieldOffset(\ObjectLayoutTests.Everything._data), "uuid": fieldOffset(\ObjectLayoutTests.Everything._uuid), "url": fieldOffset(\ObjectLayoutTests.Everything._url),
            "decimal": fieldOffset(\ObjectLayoutTests.Everything._decimal), "optionalInt16": fieldOffset(\ObjectLayoutTests.Everything._optionalInt16),
            "optionalString": fieldOffset(\ObjectLayoutTests.Everything._optionalString), "optionalDate": fieldOffset(\ObjectLayoutTests.Everything._optionalDate),
            "optionalDecimal": fieldOffset(\ObjectLayoutTests.Everything._optionalDecimal), "colour": fieldOffset(\ObjectLayoutTests.Everything._colour),
            "optionalColour": fieldOffset(\ObjectLayoutTests.Everything._optionalColour), "parts": fieldOffset(\ObjectLayoutTests.Everything._parts),
            "orderedParts": fieldOffset(\ObjectLayoutTests.Everything._orderedParts),
        ]
    }
}

extension ObjectLayoutTests.Derived {
    func extraOffset() -> Int { fieldOffset(\ObjectLayoutTests.Derived._extra) }
}
