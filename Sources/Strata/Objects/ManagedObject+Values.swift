import Foundation

/// Key-value access and change tracking.
extension ManagedObject {
    /// The version of the stored row the object's committed values were read at: 0 for
    /// an object never saved, and one more after every save that writes its row (any
    /// context's, a batch update's). What an HTTP `ETag` is made of: a client that sends
    /// it back in `If-Match` asks to change the object only if nobody changed it since.
    /// Unsaved changes do not change it; a save of this object makes it the saved row's.
    ///
    /// Fires the fault if the object is one.
    ///
    /// - Throws: ``StrataError/inaccessibleFault(_:)`` when the object's row no longer exists.
    public func storedVersion() throws(StrataError) -> UInt64 {
        guard isInserted || fulfilIfNeeded() else { throw inaccessibleError }
        return rowVersion
    }

    /// The value of the property named `key`: an attribute's Swift value (`Int16`,
    /// `Int32`, `Int64`, `Double`, `Float`, `Bool`, `String`, `Date`, `Data`, `UUID`,
    /// `URL`, `Decimal`, or the transformable type), a to-one relationship's
    /// `ManagedObject`, a to-many's `Set<ManagedObject>` or, when ordered,
    /// `[ManagedObject]`. Nil for a nil attribute or an empty to-one.
    ///
    /// Fires the fault if the object is one.
    ///
    /// - Throws: ``StrataError/unknownKey(key:entity:)`` for a key the entity lacks;
    ///   ``StrataError/inaccessibleFault(_:)`` when the object's row no longer exists.
    public func value(forKey key: String) throws(StrataError) -> Any? {
        if let slot = _entity.attributeSlot(named: key) {
            guard fulfilIfNeeded(property: key) else { throw inaccessibleError }
            return try swiftAttribute(at: slot)
        }
        if let slot = _entity.relationshipSlot(named: key) {
            guard loadRelationshipIfNeeded(slot) else { throw inaccessibleError }
            return swiftValue(relationshipStorage(at: slot), of: _entity.relationships[slot])
        }
        throw StrataError.unknownKey(key: key, entity: _entity.name)
    }

    /// Sets the property named `key` to `value`, of exactly the type ``value(forKey:)``
    /// returns (an `Int` is also accepted for integer attributes when it fits; no other
    /// conversion is made). A relationship also takes any array or set of objects of its
    /// destination entity; setting it updates the inverse side of every object involved.
    ///
    /// Setting a value equal to the current one changes nothing.
    ///
    /// - Throws: ``StrataError/unknownKey(key:entity:)``,
    ///   ``StrataError/typeMismatch(key:entity:expected:actual:)`` for a value of the
    ///   wrong type or out of the attribute's range, or
    ///   ``StrataError/invalidObjectState(_:reason:)`` for a relationship to an object
    ///   of another context; ``StrataError/storage(_:)`` when the object's fault, or a
    ///   relationship or inverse side the change touches, cannot be read. Nothing changes
    ///   when it throws.
    public func setValue(_ value: Any?, forKey key: String) throws(StrataError) {
        if let slot = _entity.attributeSlot(named: key) {
            let attribute = _entity.attributes[slot]
            let converted = try attributeValue(from: value, for: attribute)
            if !fulfilIfNeeded(property: key) { try throwIfStorageFailed() }
            writeAttribute(slot, converted)
            return
        }
        if let slot = _entity.relationshipSlot(named: key) {
            let objects = try destinationObjects(from: value, for: _entity.relationships[slot])
            try setRelationship(slot, to: objects)
            return
        }
        throw StrataError.unknownKey(key: key, entity: _entity.name)
    }

    /// The persistent properties whose values changed since the object was last fetched
    /// or saved, with their new values (nil for a nil value). Transient attributes are
    /// never included. For an object never saved, every persistent property that is not
    /// nil or empty.
    public func changedValues() -> [String: Any?] {
        if holdsUnreadChanges { fulfilIfNeeded() }
        guard faultState == .fulfilled else { return [:] }
        if isSaved && committedCopy == nil { return [:] }  // nothing changed since it was read
        var changes: [String: Any?] = [:]
        for (slot, attribute) in _entity.attributes.enumerated() where !attribute.isTransient {
            let current = attributeValue(at: slot)
            if current != committedAttribute(at: slot) {
                changes[attribute.name] = current.flatMap { try? swiftValue($0, of: attribute) }
            }
        }
        for (slot, relationship) in _entity.relationships.enumerated() where relationshipChanged(slot) {
            changes[relationship.name] = swiftValue(relationshipStorage(at: slot), of: relationship)
        }
        return changes
    }

    /// The names of the persistent properties a saved object changed since it was last
    /// fetched or saved (those ``changedValues()`` lists), without making their values:
    /// what a save records in persistent history. Walks only the properties whose
    /// committed values the object keeps (the changed ones), in slot order.
    /// Marks the slots of the properties set since the values were read (changed or set
    /// to the same value): ``changedPropertyNames()`` without comparing values. Returns
    /// false when they are not known without reading the object (a child's change to an
    /// object this context has not read).
    func markTouchedSlots(attributes: inout [Bool], relationships: inout [Bool]) -> Bool {
        guard !holdsUnreadChanges, let committed = side?.committed else { return false }
        committed.forEachAttributeInSlotOrder { slot, _ in
            if slot < attributes.count { attributes[slot] = true }
        }
        for (slot, _) in committed.relationships where slot < relationships.count { relationships[slot] = true }
        return true
    }

    func changedPropertyNames() -> [String] {
        if holdsUnreadChanges { fulfilIfNeeded() }
        guard faultState == .fulfilled, let committed = side?.committed else { return [] }
        var names: [String] = []
        committed.forEachAttributeInSlotOrder { slot, value in
            if attributeValue(at: slot) != value { names.append(_entity.attributes[slot].name) }
        }
        for (slot, _) in committed.relationships where relationshipChanged(slot) {
            names.append(_entity.relationships[slot].name)
        }
        return names
    }

    /// The values of the properties named `keys` (every property when nil) as they were
    /// last fetched or saved, ignoring unsaved changes; empty for an object never saved.
    ///
    /// - Throws: ``StrataError/unknownKey(key:entity:)`` for a key the entity lacks.
    public func committedValues(forKeys keys: [String]?) throws(StrataError) -> [String: Any?] {
        let names = keys ?? _entity.attributes.map(\.name) + _entity.relationships.map(\.name)
        for key in names where _entity.attributeSlot(named: key) == nil && _entity.relationshipSlot(named: key) == nil {
            throw StrataError.unknownKey(key: key, entity: _entity.name)
        }
        guard fulfilIfNeeded() else { throw inaccessibleError }
        var values: [String: Any?] = [:]
        for key in names {
            if let slot = _entity.attributeSlot(named: key) {
                guard isSaved else { continue }
                values[key] = try committedAttribute(at: slot).map { value throws(StrataError) in
                    try swiftValue(value, of: _entity.attributes[slot])
                }
            } else if let slot = _entity.relationshipSlot(named: key) {
                loadRelationshipIfNeeded(slot)
                guard isSaved, let committed = committedRelationship(at: slot) else { continue }
                values[key] = swiftValue(committed, of: _entity.relationships[slot])
            }
        }
        return values
    }

    // MARK: Slots

    /// The value of attribute `slot`, in its stored form.
    func attributeValue(at slot: Int) -> AttributeValue? {
        if _bits & ObjectBits.nilOverrides != 0, side?.nilAttributes.contains(slot) == true { return nil }
        switch _entity.layout.attributes[slot] {
        case .field(let offset, let type): return readField(at: offset, type)
        case .dynamic(let index): return side?.attributes[index] ?? nil
        }
    }

    /// Stores `value` in attribute `slot`, with no change tracking. A nil that the typed
    /// field cannot hold is recorded in the side state, and the field takes the
    /// attribute's default value (what its typed accessor then reads).
    func storeAttribute(_ value: AttributeValue?, at slot: Int) {
        let layout = _entity.layout
        switch layout.attributes[slot] {
        case .field(let offset, let type):
            if writeField(value, at: offset, type) {
                if _bits & ObjectBits.nilOverrides != 0, let side {
                    side.nilAttributes.remove(slot)
                    if side.nilAttributes.isEmpty { setFlag(ObjectBits.nilOverrides, false) }
                }
            } else {
                _ = writeField(layout.defaults[slot], at: offset, type)
                sideState.nilAttributes.insert(slot)
                setFlag(ObjectBits.nilOverrides, true)
            }
        case .dynamic(let index):
            sideState.attributes[index] = value
        }
    }

    /// The value of relationship `slot`.
    func relationshipStorage(at slot: Int) -> RelationshipStorage {
        switch _entity.layout.relationships[slot] {
        case .field(let offset): return relationshipField(at: offset).pointee
        case .dynamic(let index): return side?.relationships[index] ?? .notLoaded
        }
    }

    /// Stores `value` in relationship `slot`, with no change tracking.
    func storeRelationship(_ value: RelationshipStorage, at slot: Int) {
        switch _entity.layout.relationships[slot] {
        case .field(let offset): relationshipField(at: offset).pointee = value
        case .dynamic(let index): sideState.relationships[index] = value
        }
    }

    /// The committed values of the properties changed since the object was last fetched
    /// or saved (nil when none changed).
    var committedCopy: CommittedState? { side?.committed }

    /// The value attribute `slot` had when the object was last fetched or saved; nil for
    /// an object never saved.
    func committedAttribute(at slot: Int) -> AttributeValue? {
        if let copy = side?.committed, let value = copy.attribute(slot) { return value }
        return isSaved ? attributeValue(at: slot) : nil
    }

    /// The value relationship `slot` had when the object was last fetched or saved; nil
    /// for an object never saved.
    func committedRelationship(at slot: Int) -> RelationshipStorage? {
        if let copy = side?.committed, let value = copy.relationship(slot) { return value }
        return isSaved ? relationshipStorage(at: slot) : nil
    }

    /// Called before attribute `slot` of a saved object changes: it keeps the value it
    /// was read or saved with (until then that is its current value).
    func keepCommittedAttribute(_ slot: Int) {
        guard _bits & ObjectBits.saved != 0 else { return }
        let side = sideState
        if side.committed == nil { side.committed = CommittedState() }
        if side.committed!.attribute(slot) == nil { side.committed!.keepAttribute(slot, attributeValue(at: slot)) }
    }

    /// Called before relationship `slot` of a saved object changes (see
    /// ``keepCommittedAttribute(_:)``).
    func keepCommittedRelationship(_ slot: Int) {
        guard _bits & ObjectBits.saved != 0 else { return }
        let side = sideState
        if side.committed == nil { side.committed = CommittedState() }
        if side.committed!.relationship(slot) == nil { side.committed!.keepRelationship(slot, relationshipStorage(at: slot)) }
    }

    /// Keeps the committed value of every property (before several change at once).
    func keepCommittedValues() {
        guard _bits & ObjectBits.saved != 0 else { return }
        for slot in _entity.attributes.indices { keepCommittedAttribute(slot) }
        for slot in _entity.relationships.indices { keepCommittedRelationship(slot) }
    }

    /// Drops the committed values kept (the current ones are committed now).
    func dropCommittedCopy() {
        side?.committed = nil
    }

    /// Tells the owner that attribute `slot` is about to change (the object still has its
    /// old value), keeping its committed value first.
    func prepareAttributeChange(_ slot: Int) {
        keepCommittedAttribute(slot)
        _owner?.objectWillChange(self, key: _entity.attributes[slot].name)
    }

    /// Tells the owner that relationship `slot` is about to change (see
    /// ``prepareAttributeChange(_:)``).
    func prepareRelationshipChange(_ slot: Int) {
        keepCommittedRelationship(slot)
        _owner?.objectWillChange(self, key: _entity.relationships[slot].name)
    }

    // MARK: Primitive writes

    /// Runs `edit`, which a setter that cannot throw asked for: when it fails (a read it
    /// needs failed with a storage error, a value cannot be stored), nothing changes and
    /// the failure is recorded with the owner, whose next save then fails with it.
    ///
    /// An object in no context keeps the failure itself; the context it is inserted into
    /// takes it over (``ObjectGraph/insert(_:)``).
    func editRecordingFailure(key: String, _ edit: () throws(StrataError) -> Void) {
        do {
            try edit()
        } catch {
            if let owner {
                owner.editFailed(self, key: key, error: error)
            } else {
                var edits = pendingFailedEdits
                edits.removeAll { $0.key == key }
                edits.append((key, error))
                pendingFailedEdits = edits
            }
        }
    }

    /// Sets an attribute slot, recording the change; no-op when the value is unchanged.
    func writeAttribute(_ slot: Int, _ value: AttributeValue?) {
        guard attributeValue(at: slot) != value else { return }
        let name = _entity.attributes[slot].name
        if owner == nil, _bits & ObjectBits.failedEdits != 0 {
            pendingFailedEdits = pendingFailedEdits.filter { $0.key != name }   // set again: the failed edit no longer matters
        }
        prepareAttributeChange(slot)
        storeAttribute(value, at: slot)
        isModified = true
    }

    /// Whether relationship `slot` differs from its committed value.
    func relationshipChanged(_ slot: Int) -> Bool {
        let current = relationshipStorage(at: slot)
        let old = committedRelationship(at: slot)
        switch (current, old) {
        case (.notLoaded, _): return false
        case (.toOne(let object), nil): return object != nil
        case (.toOne(let object), .toOne(let oldObject)?): return object !== oldObject
        case (.toMany(let storage), nil), (.toMany(let storage), .notLoaded?): return old == nil ? storage.count > 0 : true
        case (.toMany(let storage), .toMany(let oldStorage)?):
            guard storage.count == oldStorage.count else { return true }
            if storage.isOrdered { return !zip(storage.objects, oldStorage.objects).allSatisfy { $0 === $1 } }
            return !oldStorage.objects.allSatisfy(storage.contains)
        default: return true
        }
    }

    // MARK: Conversions

    /// The Swift value of attribute `slot` (see ``value(forKey:)``), boxed straight from
    /// its typed field when it has one.
    func swiftAttribute(at slot: Int) throws(StrataError) -> Any? {
        if _bits & ObjectBits.nilOverrides != 0, side?.nilAttributes.contains(slot) == true { return nil }
        guard case .field(let offset, let type) = _entity.layout.attributes[slot] else {
            return try attributeValue(at: slot).map { value throws(StrataError) in try swiftValue(value, of: _entity.attributes[slot]) }
        }
        switch type {
        case .plain(.int), .optional(.int):
            // An `Int` property of an integer64 attribute reads as `Int64`, as from a record.
            guard case .integer(let n)? = readField(at: offset, type) else { return nil }
            return n
        case .plain(let base):
            return boxField(at: offset, base)
        case .optional:
            return try attributeValue(at: slot).map { value throws(StrataError) in try swiftValue(value, of: _entity.attributes[slot]) }
        case .custom(let access):
            return access.readAny(self, at: offset)
        }
    }

    /// The value of a plain field of a base type, boxed as its own type.
    private func boxField(at offset: Int, _ base: FieldBase) -> Any {
        switch base {
        case .int16: fieldPointer(at: offset, as: Int16.self).pointee
        case .int32: fieldPointer(at: offset, as: Int32.self).pointee
        case .int64: fieldPointer(at: offset, as: Int64.self).pointee
        case .int: Int64(fieldPointer(at: offset, as: Int.self).pointee)
        case .double: fieldPointer(at: offset, as: Double.self).pointee
        case .float: fieldPointer(at: offset, as: Float.self).pointee
        case .bool: fieldPointer(at: offset, as: Bool.self).pointee
        case .string: fieldPointer(at: offset, as: String.self).pointee
        case .date: fieldPointer(at: offset, as: Date.self).pointee
        case .data: fieldPointer(at: offset, as: Data.self).pointee
        case .uuid: fieldPointer(at: offset, as: UUID.self).pointee
        case .url: fieldPointer(at: offset, as: URL.self).pointee
        case .decimal: fieldPointer(at: offset, as: Decimal.self).pointee
        }
    }

    /// The Swift value of a stored attribute value.
    func swiftValue(_ value: AttributeValue, of attribute: AttributeDescription) throws(StrataError) -> Any {
        switch (attribute.type, value) {
        case (.integer16, .integer(let n)): return Int16(truncatingIfNeeded: n)
        case (.integer32, .integer(let n)): return Int32(truncatingIfNeeded: n)
        case (.integer64, .integer(let n)): return n
        case (.double, .double(let d)): return d
        case (.float, .float(let f)): return f
        case (.boolean, .boolean(let b)): return b
        case (.string, .string(let s)): return s
        case (.date, .date(let d)): return d
        case (.binaryData, .binaryData(let d)): return d
        case (.uuid, .uuid(let u)): return u
        case (.uri, .uri(let u)): return u
        case (.decimal, .decimal(let d)): return d
        case (.transformable(let type), .transformable(let data)):
            do {
                return try TransformableCoding.decode(type, from: data)
            } catch {
                throw StrataError.corruptRecord(
                    entity: entity.name, primaryKey: hasTemporaryID ? 0 : rowKey,
                    reason: "\(attribute.name) does not decode as \(attribute.type): \(error)")
            }
        default:
            throw StrataError.corruptRecord(
                entity: entity.name, primaryKey: hasTemporaryID ? 0 : rowKey,
                reason: "\(attribute.name) holds \(value), not a \(attribute.type)")
        }
    }

    /// The Swift value of a relationship: an object or nil, a set, or an array.
    func swiftValue(_ storage: RelationshipStorage, of relationship: RelationshipDescription) -> Any? {
        switch storage {
        case .toOne(let object): return object
        case .toMany(let many): return relationship.isOrdered ? many.objects : Set(many.objects)
        case .notLoaded: return relationship.isOrdered ? [ManagedObject]() : Set<ManagedObject>()
        }
    }

    /// Converts a Swift value for an attribute, refusing every silent coercion.
    func attributeValue(from value: Any?, for attribute: AttributeDescription) throws(StrataError) -> AttributeValue? {
        try Self.attributeValue(from: value, for: attribute, entityName: _entity.name)
    }

    /// Converts a Swift value for `attribute` of entity `entityName` (named in errors),
    /// refusing every silent coercion: what ``setValue(_:forKey:)`` and batch requests
    /// accept.
    static func attributeValue(from value: Any?, for attribute: AttributeDescription, entityName: String) throws(StrataError) -> AttributeValue? {
        guard let value = flattened(value) else { return nil }
        func mismatch(_ detail: String = "") -> StrataError {
            .typeMismatch(
                key: attribute.name, entity: entityName, expected: attribute.type.swiftTypeName,
                actual: "\(type(of: value))\(detail)")
        }
        if let stored = value as? AttributeValue {
            guard attribute.type.accepts(stored) else { throw mismatch(" \(stored)") }
            if case .transformable(let type) = attribute.type, case .transformable(let data) = stored,
               !TransformableCoding.decodes(type, from: data) {
                throw mismatch(" whose bytes do not decode as \(String(reflecting: type))")
            }
            return stored
        }
        switch attribute.type {
        case .integer16, .integer32, .integer64:
            let n: Int64
            switch value {
            case let v as Int: n = Int64(v)
            case let v as Int16 where attribute.type == .integer16: n = Int64(v)
            case let v as Int32 where attribute.type == .integer32: n = Int64(v)
            case let v as Int64 where attribute.type == .integer64: n = v
            default: throw mismatch()
            }
            guard attribute.type.accepts(.integer(n)) else { throw mismatch(" \(n), out of range") }
            return .integer(n)
        case .double: if let v = value as? Double { return .double(v) }
        case .float: if let v = value as? Float { return .float(v) }
        case .boolean: if let v = value as? Bool { return .boolean(v) }
        case .string: if let v = value as? String { return .string(v) }
        case .date: if let v = value as? Date { return .date(v) }
        case .binaryData: if let v = value as? Data { return .binaryData(v) }
        case .uuid: if let v = value as? UUID { return .uuid(v) }
        case .uri: if let v = value as? URL { return .uri(v) }
        case .decimal: if let v = value as? Decimal { return .decimal(v) }
        case .transformable(let type):
            return try TransformableCoding.checkedValue(value, as: type) { detail throws(StrataError) in throw mismatch(detail) }
        }
        throw mismatch()
    }

    /// Checks a Swift value for a relationship: nil or an object for a to-one, a set or
    /// array of objects for a to-many, every one of the destination entity and not of
    /// another context.
    func destinationObjects(from value: Any?, for relationship: RelationshipDescription) throws(StrataError) -> [ManagedObject] {
        let objects: [ManagedObject]
        func mismatch(_ actual: String) -> StrataError {
            let expected = !relationship.isToMany ? "\(relationship.destinationEntityName)?"
                : relationship.isOrdered ? "[\(relationship.destinationEntityName)]" : "Set<\(relationship.destinationEntityName)>"
            return .typeMismatch(key: relationship.name, entity: entity.name, expected: expected, actual: actual)
        }
        switch Self.flattened(value) {
        case nil:
            objects = []
        case let object as ManagedObject where !relationship.isToMany:
            objects = [object]
        case let array as [ManagedObject] where relationship.isToMany:
            guard Set(array.map(ObjectIdentifier.init)).count == array.count else {
                throw mismatch("an array with duplicates")
            }
            objects = array
        case let set as Set<ManagedObject> where relationship.isToMany && !relationship.isOrdered:
            objects = Array(set)
        case let other?:
            throw mismatch("\(type(of: other))")
        }
        for object in objects {
            guard object.entity.isKind(of: relationship.destinationEntityName) else {
                throw mismatch("an object of entity \(object.entity.name)")
            }
            if let mine = owner, let theirs = object.owner, mine !== theirs {
                throw StrataError.invalidObjectState(
                    objectID, reason: "\(relationship.name) cannot refer to \(object.objectID), an object of another context")
            }
        }
        return objects
    }

    /// Unwraps an `Optional` hidden inside `Any`.
    static func flattened(_ value: Any?) -> Any? {
        guard let value else { return nil }
        if let optional = value as? any OptionalBox { return flattened(optional.wrappedAny) }
        return value
    }
}

/// Lets `flattened` see through an `Optional` stored in an `Any`.
private protocol OptionalBox {
    var wrappedAny: Any? { get }
}

extension Optional: OptionalBox {
    fileprivate var wrappedAny: Any? { self.map { $0 as Any } }
}

extension AttributeType {
    /// The Swift type `value(forKey:)` returns for the attribute.
    var swiftTypeName: String {
        switch self {
        case .integer16: "Int16"
        case .integer32: "Int32"
        case .integer64: "Int64"
        case .double: "Double"
        case .float: "Float"
        case .boolean: "Bool"
        case .string: "String"
        case .date: "Date"
        case .binaryData: "Data"
        case .uuid: "UUID"
        case .uri: "URL"
        case .decimal: "Decimal"
        case .transformable(let type): String(reflecting: type)
        }
    }
}

/// How transformable values become bytes: JSON with sorted keys, so equal values store
/// equal bytes (and an unchanged value is not a change).
enum TransformableCoding {
    static func encode(_ value: Any, as type: any (Codable & Sendable).Type) -> Data? {
        func open<T: Codable & Sendable>(_: T.Type) -> Data? {
            guard let typed = value as? T else { return nil }
            return try? makeEncoder().encode(typed)
        }
        return open(type)
    }

    /// A JSON encoder with sorted keys.
    private static func makeEncoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }

    static func decode(_ type: any (Codable & Sendable).Type, from data: Data) throws -> Any {
        func open<T: Codable & Sendable>(_: T.Type) throws -> Any { try JSONDecoder().decode(T.self, from: data) }
        return try open(type)
    }

    /// Whether `data` decodes as `type`.
    static func decodes(_ type: any (Codable & Sendable).Type, from data: Data) -> Bool {
        (try? decode(type, from: data)) != nil
    }

    /// The stored form of `value`, a `type`, checked to decode back: a value whose
    /// encoding its own `init(from:)` refuses would be saved and never read again.
    /// `refuse` makes the error from a detail (", which cannot be encoded").
    static func checkedValue(
        _ value: Any, as type: any (Codable & Sendable).Type, refuse: (String) throws(StrataError) -> Never
    ) throws(StrataError) -> AttributeValue {
        func open<T: Codable & Sendable>(_: T.Type) throws(StrataError) -> AttributeValue {
            guard let typed = value as? T else { try refuse("") }
            let data: Data
            do {
                data = try makeEncoder().encode(typed)
            } catch {
                try refuse(", which cannot be encoded: \(error)")
            }
            do {
                _ = try JSONDecoder().decode(T.self, from: data)
            } catch {
                try refuse(", which does not decode from its own encoding: \(error)")
            }
            return .transformable(data)
        }
        return try open(type)
    }
}

extension ManagedObject {
    /// Every attribute value by slot, in stored form: a copy, for tests and diagnostics
    /// (the library reads one slot at a time, ``attributeValue(at:)``).
    var attributeValues: [AttributeValue?] { _entity.attributes.indices.map(attributeValue(at:)) }

    /// Every relationship value by slot: a copy, for tests and diagnostics.
    var relationshipValues: [RelationshipStorage] { _entity.relationships.indices.map(relationshipStorage(at:)) }
}
