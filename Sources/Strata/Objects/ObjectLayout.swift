internal import StrataLocks

// `_forEachField(of:options:body:)` is the standard library's reflection SPI behind
// `Mirror`: it lists a type's stored fields with their byte offsets and static types
// without an instance. It is what lets a typed subclass keep its values in its own
// property-wrapper storage (one field load per read) while key-value access, faulting
// and saving still reach every value by slot: see `ClassFields`, and the test that
// checks every offset it reports against the real address of the field
// (`ObjectLayoutTests`).
@_spi(Reflection) import Swift
import Foundation

/// How the objects of one entity hold its properties: each attribute and relationship slot
/// lives either in a typed field of the entity's class (the storage of its `@Attribute` or
/// `@Relationship` wrapper) or in the object's dynamic storage (entities used through
/// ``ManagedObject/value(forKey:)``, and properties a hand-built entity has and its class
/// does not declare). Computed once per entity description, when it is made.
final class ObjectLayout: Sendable {
    /// Where one attribute slot's value lives.
    enum AttributePlace: Sendable {
        /// In the typed field at this byte offset of the object.
        case field(Int, FieldType)
        /// At this index of the object's dynamic attribute values.
        case dynamic(Int)
    }

    /// Where one relationship slot's value lives.
    enum RelationshipPlace: Sendable {
        /// In the field at this byte offset of the object (a `Relationship` wrapper's
        /// storage, a ``RelationshipStorage``).
        case field(Int)
        /// At this index of the object's dynamic relationship values.
        case dynamic(Int)
    }

    /// By attribute slot.
    let attributes: [AttributePlace]
    /// By relationship slot.
    let relationships: [RelationshipPlace]
    /// The number of attribute slots kept in dynamic storage.
    let dynamicAttributeCount: Int
    /// The number of relationship slots kept in dynamic storage.
    let dynamicRelationshipCount: Int
    /// The slot each typed field of the class holds, by the field's byte offset; a field
    /// this entity has no slot for is missing.
    let fieldSlots: [Int: PropertySlot]
    /// Whether every wrapper field of the class holds a slot of its own type: only then
    /// may the typed accessors read and write fields without asking the layout.
    let typedFieldsAreExact: Bool
    /// Whether a new object takes the entity's default values into its fields: for a
    /// hand-built entity of a typed class, whose defaults may differ from the class's
    /// initial values. (An entity derived from the class has the class's own defaults,
    /// and each object keeps the initial values its property declarations give it.)
    let writesDefaultsAtInit: Bool
    /// The entity's default value per attribute slot.
    let defaults: [AttributeValue?]
    /// Per attribute slot, whether the attribute is transient (never stored).
    let isTransient: [Bool]
    /// Per relationship slot, whether the relationship is to-many, and ordered.
    let isToMany: [Bool]
    let isOrdered: [Bool]
    /// Per attribute slot, how the model's rules check a value without converting it: for
    /// an attribute with no rules whose values have one Swift type (nil otherwise).
    let quickChecks: [QuickCheck?]
    /// Whether the model's rules cannot fail for an object of this layout whose values are
    /// read and whose fields hold no nil they cannot hold (``ObjectBits/nilOverrides``):
    /// every attribute has no rules and a typed field of its type (not optional when the
    /// attribute is required), and every relationship is optional without count limits.
    let modelRulesCannotFail: Bool

    /// A check of an attribute with no rules: a value of exactly `type` passes, nil passes
    /// when the attribute is optional.
    struct QuickCheck: Sendable {
        let type: Any.Type
        let isOptional: Bool
    }

    /// The layout of `entity`'s attributes and relationships over `fields` (the typed
    /// fields of its class).
    init(attributes: [AttributeDescription], relationships: [RelationshipDescription], fields: ClassFields, derivedFromClass: Bool) {
        var fieldSlots: [Int: PropertySlot] = [:]
        var attributePlaces: [AttributePlace] = []
        var dynamicAttributes = 0
        var exact = true
        for (slot, attribute) in attributes.enumerated() {
            if let field = fields.attribute(named: attribute.name), field.type.attributeType == attribute.type {
                attributePlaces.append(.field(field.offset, field.type))
                fieldSlots[field.offset] = .attribute(slot)
            } else {
                attributePlaces.append(.dynamic(dynamicAttributes))
                dynamicAttributes += 1
                if fields.attribute(named: attribute.name) != nil { exact = false }
            }
        }
        var relationshipPlaces: [RelationshipPlace] = []
        var dynamicRelationships = 0
        for (slot, relationship) in relationships.enumerated() {
            if let field = fields.relationship(named: relationship.name),
               field.isToMany == relationship.isToMany, field.isOrdered == relationship.isOrdered {
                relationshipPlaces.append(.field(field.offset))
                fieldSlots[field.offset] = .relationship(slot)
            } else {
                relationshipPlaces.append(.dynamic(dynamicRelationships))
                dynamicRelationships += 1
                if fields.relationship(named: relationship.name) != nil { exact = false }
            }
        }
        // A wrapper field of the class that holds no slot (a property the entity lacks)
        // must go through the slow path, which ignores it as the entity does.
        if fieldSlots.count != fields.count { exact = false }
        self.attributes = attributePlaces
        self.relationships = relationshipPlaces
        dynamicAttributeCount = dynamicAttributes
        dynamicRelationshipCount = dynamicRelationships
        self.fieldSlots = fieldSlots
        typedFieldsAreExact = exact
        writesDefaultsAtInit = !derivedFromClass && !fieldSlots.isEmpty
        defaults = attributes.map(\.defaultValue)
        isTransient = attributes.map(\.isTransient)
        isToMany = relationships.map(\.isToMany)
        isOrdered = relationships.map(\.isOrdered)
        quickChecks = attributes.map { attribute in
            guard attribute.validation.isEmpty, let type = attribute.type.exactSwiftType else { return nil }
            return QuickCheck(type: type, isOptional: attribute.isOptional)
        }
        let checks = quickChecks
        modelRulesCannotFail = attributes.indices.allSatisfy { slot in
            guard checks[slot] != nil, case .field(_, let type) = attributePlaces[slot] else { return false }
            if case .optional = type { return attributes[slot].isOptional }
            return true
        } && relationships.allSatisfy { $0.isOptional && $0.minCount == 0 && $0.maxCount == nil }
    }

    /// Whether the layout has any dynamic storage (every object then has a side allocation).
    var usesDynamicStorage: Bool { dynamicAttributeCount > 0 || dynamicRelationshipCount > 0 }

    /// Whether objects of `other` hold every slot in the same place as this layout (an
    /// object can then move between the two entity descriptions without moving values).
    func holdsSlotsLike(_ other: ObjectLayout) -> Bool {
        guard attributes.count == other.attributes.count, relationships.count == other.relationships.count,
              !usesDynamicStorage, !other.usesDynamicStorage, typedFieldsAreExact == other.typedFieldsAreExact
        else { return false }
        for (mine, theirs) in zip(attributes, other.attributes) {
            guard case .field(let a, _) = mine, case .field(let b, _) = theirs, a == b else { return false }
        }
        for (mine, theirs) in zip(relationships, other.relationships) {
            guard case .field(let a) = mine, case .field(let b) = theirs, a == b else { return false }
        }
        return true
    }
}

// MARK: Typed fields

/// The Swift type of an attribute's typed field, as a code: reading and writing a field is
/// a switch over it, with no generic or existential call (``ManagedObject/attributeValue(at:)``).
/// Types other than Strata's own (a transformable attribute's `Codable` type) go through
/// a ``CustomFieldAccess``.
enum FieldType: Sendable {
    /// The field holds `Attribute<T>` of the base type.
    case plain(FieldBase)
    /// The field holds `Attribute<T?>` of the base type.
    case optional(FieldBase)
    /// Any other type.
    case custom(CustomFieldAccess)

    /// The attribute type the field's Swift type stores as.
    var attributeType: AttributeType {
        switch self {
        case .plain(let base), .optional(let base): base.attributeType
        case .custom(let access): access.attributeType
        }
    }

    /// The code of `Value`, the type of an `Attribute<Value>`.
    static func of<Value: AttributeStorable>(_: Value.Type) -> FieldType {
        for base in FieldBase.allCases {
            if Value.self == base.swiftType { return .plain(base) }
            if Value.self == base.optionalSwiftType { return .optional(base) }
        }
        return .custom(TypedFieldAccess<Value>())
    }
}

/// The Swift types Strata stores natively (``AttributeStorable``'s own conformances).
enum FieldBase: UInt8, Sendable, CaseIterable {
    case int16, int32, int64, int, double, float, bool, string, date, data, uuid, url, decimal

    var swiftType: Any.Type {
        switch self {
        case .int16: Int16.self
        case .int32: Int32.self
        case .int64: Int64.self
        case .int: Int.self
        case .double: Double.self
        case .float: Float.self
        case .bool: Bool.self
        case .string: String.self
        case .date: Date.self
        case .data: Data.self
        case .uuid: UUID.self
        case .url: URL.self
        case .decimal: Decimal.self
        }
    }

    var optionalSwiftType: Any.Type {
        switch self {
        case .int16: Int16?.self
        case .int32: Int32?.self
        case .int64: Int64?.self
        case .int: Int?.self
        case .double: Double?.self
        case .float: Float?.self
        case .bool: Bool?.self
        case .string: String?.self
        case .date: Date?.self
        case .data: Data?.self
        case .uuid: UUID?.self
        case .url: URL?.self
        case .decimal: Decimal?.self
        }
    }

    var attributeType: AttributeType {
        switch self {
        case .int16: .integer16
        case .int32: .integer32
        case .int64, .int: .integer64
        case .double: .double
        case .float: .float
        case .bool: .boolean
        case .string: .string
        case .date: .date
        case .data: .binaryData
        case .uuid: .uuid
        case .url: .uri
        case .decimal: .decimal
        }
    }
}

/// Reads and writes the typed field of an attribute of a type Strata does not store
/// natively (a transformable `Codable` type), through its ``AttributeStorable``
/// conversions. A class so that a ``FieldType`` holding one is copied with a retain.
// @unchecked Sendable because it has no stored state: subclasses only add code.
class CustomFieldAccess: @unchecked Sendable {

    /// The attribute type of the field's Swift type.
    var attributeType: AttributeType { .binaryData }

    /// The value of the field at `offset` of `object`, in stored form.
    func read(_ object: ManagedObject, at offset: Int) -> AttributeValue? { nil }

    /// Stores `value` in the field; false when the field's type cannot hold it.
    func write(_ value: AttributeValue?, into object: ManagedObject, at offset: Int) -> Bool { false }

    /// The field's Swift value (nil for an optional that holds none).
    func readAny(_ object: ManagedObject, at offset: Int) -> Any? { nil }
}

/// The ``CustomFieldAccess`` of an `Attribute<Value>` field.
// @unchecked Sendable because it has no stored state.
final class TypedFieldAccess<Value: AttributeStorable>: CustomFieldAccess, @unchecked Sendable {

    override var attributeType: AttributeType { Value.attributeType }

    override func read(_ object: ManagedObject, at offset: Int) -> AttributeValue? {
        object.fieldPointer(at: offset, as: Attribute<Value>.self).pointee.storage.attributeValue
    }

    override func write(_ value: AttributeValue?, into object: ManagedObject, at offset: Int) -> Bool {
        guard let typed = Value(attributeValue: value) else { return false }
        object.fieldPointer(at: offset, as: Attribute<Value>.self).pointee.storage = typed
        return true
    }

    override func readAny(_ object: ManagedObject, at offset: Int) -> Any? {
        ManagedObject.flattened(object.fieldPointer(at: offset, as: Attribute<Value>.self).pointee.storage)
    }
}

extension ManagedObject {
    /// The address of the field at `offset` in this object, as `T`.
    ///
    /// The field's memory is initialised and bound to `T` for the object's lifetime (it is
    /// a stored property of type `T`, or `T` is the single stored property of the
    /// wrapper the field holds), and the object lives in one isolation domain, so nothing
    /// else accesses the field while the pointer is in use.
    @inline(__always)
    func fieldPointer<T>(at offset: Int, as _: T.Type) -> UnsafeMutablePointer<T> {
        (UnsafeMutableRawPointer(Unmanaged.passUnretained(self).toOpaque()) + offset).assumingMemoryBound(to: T.self)
    }

    /// The value of the attribute field at `offset`, of type `type`, in stored form.
    func readField(at offset: Int, _ type: FieldType) -> AttributeValue? {
        switch type {
        case .plain(let base):
            switch base {
            case .int16: return .integer(Int64(fieldPointer(at: offset, as: Int16.self).pointee))
            case .int32: return .integer(Int64(fieldPointer(at: offset, as: Int32.self).pointee))
            case .int64: return .integer(fieldPointer(at: offset, as: Int64.self).pointee)
            case .int: return .integer(Int64(fieldPointer(at: offset, as: Int.self).pointee))
            case .double: return .double(fieldPointer(at: offset, as: Double.self).pointee)
            case .float: return .float(fieldPointer(at: offset, as: Float.self).pointee)
            case .bool: return .boolean(fieldPointer(at: offset, as: Bool.self).pointee)
            case .string: return .string(fieldPointer(at: offset, as: String.self).pointee)
            case .date: return .date(fieldPointer(at: offset, as: Date.self).pointee)
            case .data: return .binaryData(fieldPointer(at: offset, as: Data.self).pointee)
            case .uuid: return .uuid(fieldPointer(at: offset, as: UUID.self).pointee)
            case .url: return .uri(fieldPointer(at: offset, as: URL.self).pointee)
            case .decimal: return .decimal(fieldPointer(at: offset, as: Decimal.self).pointee)
            }
        case .optional(let base):
            switch base {
            case .int16: return fieldPointer(at: offset, as: Int16?.self).pointee.map { .integer(Int64($0)) }
            case .int32: return fieldPointer(at: offset, as: Int32?.self).pointee.map { .integer(Int64($0)) }
            case .int64: return fieldPointer(at: offset, as: Int64?.self).pointee.map { .integer($0) }
            case .int: return fieldPointer(at: offset, as: Int?.self).pointee.map { .integer(Int64($0)) }
            case .double: return fieldPointer(at: offset, as: Double?.self).pointee.map { .double($0) }
            case .float: return fieldPointer(at: offset, as: Float?.self).pointee.map { .float($0) }
            case .bool: return fieldPointer(at: offset, as: Bool?.self).pointee.map { .boolean($0) }
            case .string: return fieldPointer(at: offset, as: String?.self).pointee.map { .string($0) }
            case .date: return fieldPointer(at: offset, as: Date?.self).pointee.map { .date($0) }
            case .data: return fieldPointer(at: offset, as: Data?.self).pointee.map { .binaryData($0) }
            case .uuid: return fieldPointer(at: offset, as: UUID?.self).pointee.map { .uuid($0) }
            case .url: return fieldPointer(at: offset, as: URL?.self).pointee.map { .uri($0) }
            case .decimal: return fieldPointer(at: offset, as: Decimal?.self).pointee.map { .decimal($0) }
            }
        case .custom(let access):
            return access.read(self, at: offset)
        }
    }

    /// Stores `value` in the attribute field at `offset`, of type `type`; false (nothing
    /// stored) when the field cannot hold it: nil in a plain field, a value of another
    /// kind, an integer out of the field's range.
    func writeField(_ value: AttributeValue?, at offset: Int, _ type: FieldType) -> Bool {
        switch type {
        case .plain(let base):
            guard let value else { return false }
            return writeBase(value, at: offset, base, optional: false)
        case .optional(let base):
            guard let value else {
                clearOptionalField(at: offset, base)
                return true
            }
            return writeBase(value, at: offset, base, optional: true)
        case .custom(let access):
            return access.write(value, into: self, at: offset)
        }
    }

    private func writeBase(_ value: AttributeValue, at offset: Int, _ base: FieldBase, optional: Bool) -> Bool {
        @inline(__always) func put<T>(_ typed: T) {
            if optional { fieldPointer(at: offset, as: T?.self).pointee = typed } else { fieldPointer(at: offset, as: T.self).pointee = typed }
        }
        switch (base, value) {
        case (.int16, .integer(let n)): guard let v = Int16(exactly: n) else { return false }; put(v)
        case (.int32, .integer(let n)): guard let v = Int32(exactly: n) else { return false }; put(v)
        case (.int64, .integer(let n)): put(n)
        case (.int, .integer(let n)): guard let v = Int(exactly: n) else { return false }; put(v)
        case (.double, .double(let v)): put(v)
        case (.float, .float(let v)): put(v)
        case (.bool, .boolean(let v)): put(v)
        case (.string, .string(let v)): put(v)
        case (.date, .date(let v)): put(v)
        case (.data, .binaryData(let v)): put(v)
        case (.uuid, .uuid(let v)): put(v)
        case (.url, .uri(let v)): put(v)
        case (.decimal, .decimal(let v)): put(v)
        default: return false
        }
        return true
    }

    private func clearOptionalField(at offset: Int, _ base: FieldBase) {
        switch base {
        case .int16: fieldPointer(at: offset, as: Int16?.self).pointee = nil
        case .int32: fieldPointer(at: offset, as: Int32?.self).pointee = nil
        case .int64: fieldPointer(at: offset, as: Int64?.self).pointee = nil
        case .int: fieldPointer(at: offset, as: Int?.self).pointee = nil
        case .double: fieldPointer(at: offset, as: Double?.self).pointee = nil
        case .float: fieldPointer(at: offset, as: Float?.self).pointee = nil
        case .bool: fieldPointer(at: offset, as: Bool?.self).pointee = nil
        case .string: fieldPointer(at: offset, as: String?.self).pointee = nil
        case .date: fieldPointer(at: offset, as: Date?.self).pointee = nil
        case .data: fieldPointer(at: offset, as: Data?.self).pointee = nil
        case .uuid: fieldPointer(at: offset, as: UUID?.self).pointee = nil
        case .url: fieldPointer(at: offset, as: URL?.self).pointee = nil
        case .decimal: fieldPointer(at: offset, as: Decimal?.self).pointee = nil
        }
    }

    /// The relationship field at `offset` (a `Relationship` wrapper, whose single stored
    /// property is a ``RelationshipStorage``).
    func relationshipField(at offset: Int) -> UnsafeMutablePointer<RelationshipStorage> {
        fieldPointer(at: offset, as: RelationshipStorage.self)
    }
}

/// The storage type of a property wrapper whose fields ``ClassFields`` finds.
protocol WrapperField {
    /// The property's kind.
    static var fieldKind: ClassFields.Kind { get }
}

extension Attribute: WrapperField {
    static var fieldKind: ClassFields.Kind { .attribute(FieldType.of(Value.self)) }
}

extension Relationship: WrapperField {
    static var fieldKind: ClassFields.Kind {
        .relationship(isToMany: Value.isToMany, isOrdered: Value.isOrdered, destination: Value.Destination.self)
    }
}

/// The wrapper fields of a managed-object class (its own and its superclasses'), found
/// once per class from the runtime's field metadata.
struct ClassFields: Sendable {
    /// What a wrapper field holds.
    enum Kind: Sendable {
        /// An attribute of this Swift type.
        case attribute(FieldType)
        /// A relationship to objects of `destination`.
        case relationship(isToMany: Bool, isOrdered: Bool, destination: ManagedObject.Type)
    }

    /// One wrapper field.
    struct Field: Sendable {
        /// The property's name (the field's, without the wrapper's leading underscore).
        let name: String
        /// The field's byte offset in an object.
        let offset: Int
        /// The wrapper type (`Attribute<Int16>`).
        let wrapperType: ObjectIdentifier
        let kind: Kind
    }

    /// Every wrapper field, superclasses' first, each class's in declaration order.
    let fields: [Field]
    private let attributes: [String: (offset: Int, type: FieldType)]
    private let relationships: [String: (offset: Int, isToMany: Bool, isOrdered: Bool)]

    /// The number of wrapper fields.
    var count: Int { fields.count }

    /// The attribute field of the property `name`.
    func attribute(named name: String) -> (offset: Int, type: FieldType)? { attributes[name] }

    /// The relationship field of the property `name`.
    func relationship(named name: String) -> (offset: Int, isToMany: Bool, isOrdered: Bool)? { relationships[name] }

    private init(fields: [Field]) {
        self.fields = fields
        var attributes: [String: (offset: Int, type: FieldType)] = [:]
        var relationships: [String: (offset: Int, isToMany: Bool, isOrdered: Bool)] = [:]
        for field in fields {
            switch field.kind {
            case .attribute(let type): attributes[field.name] = attributes[field.name] ?? (field.offset, type)
            case .relationship(let toMany, let ordered, _):
                relationships[field.name] = relationships[field.name] ?? (field.offset, toMany, ordered)
            }
        }
        self.attributes = attributes
        self.relationships = relationships
    }

    private static let cache = LockedValue<[ObjectIdentifier: ClassFields]>([:])

    /// The wrapper fields of `type` (none for `ManagedObject` itself).
    static func of(_ type: ManagedObject.Type) -> ClassFields {
        if let known = cache.withLock({ $0[ObjectIdentifier(type)] }) { return known }
        var found: [Field] = []
        // rawValue 1 is `_EachFieldOptions.classType` (a `static var`, which Swift 6
        // refuses to read from concurrent code): the type must be a class, and the
        // fields of its superclasses come first.
        _ = _forEachField(of: type, options: _EachFieldOptions(rawValue: 1)) { name, offset, fieldType, _ in
            guard let wrapper = fieldType as? any WrapperField.Type else { return true }
            var label = String(cString: name)
            if label.hasPrefix("_") { label.removeFirst() }
            found.append(Field(name: label, offset: offset, wrapperType: ObjectIdentifier(fieldType), kind: wrapper.fieldKind))
            return true
        }
        let fields = ClassFields(fields: found)
        return cache.withLock { cache in
            if let raced = cache[ObjectIdentifier(type)] { return raced }
            cache[ObjectIdentifier(type)] = fields
            return fields
        }
    }
}
