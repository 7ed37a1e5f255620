import Foundation

/// Turns a ``BatchInsertRequest``'s objects into encoded rows, a chunk at a time, so that a
/// handler's objects never sit in memory together: the chunk is written before the
/// handler is called for the next one.
struct BatchRowProducer {
    /// The most rows one chunk holds.
    static let chunkSize = 16_384

    let storage: EntityStorage
    private let source: BatchInsertRequest.Source
    /// The attribute slots checked per row: those with rules, or required.
    private let checkedSlots: [Int]
    /// The slots checked per object a managed-object handler filled, when none of its
    /// fields stands in for a nil: a required attribute kept in a typed field always has
    /// a value, so only rules and attributes kept elsewhere need a look.
    private let objectCheckedSlots: [Int]
    /// The attribute values an object starts with, by slot.
    private let defaults: [AttributeValue?]
    /// The same, as a managed-object handler's object takes them back before each call.
    private let fieldDefaults: [ManagedObject.FieldDefault]
    /// A relationship value per slot for an object given none (empty).
    private let emptyRelationships: [RelationshipSnapshot]
    /// The object a managed-object handler fills (made before the first call).
    private var object: ManagedObject?
    /// The next object of an array source.
    private var nextIndex = 0
    /// The dictionary a dictionary handler fills.
    private var dictionary: [String: any Sendable] = [:]
    /// Whether the source has no more objects.
    private(set) var isFinished = false

    /// A producer of the rows of `request`, of the entity `storage` stores.
    ///
    /// - Throws: ``StrataError/typeMismatch(key:entity:expected:actual:)`` when a typed
    ///   handler's class is not the model's class for the entity.
    init(request: BatchInsertRequest, storage: EntityStorage) throws(StrataError) {
        self.storage = storage
        source = request.source
        let entity = storage.entity
        checkedSlots = storage.attributes.indices.filter { slot in
            let attribute = storage.attributes[slot].description
            return attribute.field(in: storage) && (!attribute.isOptional || !attribute.validation.isEmpty)
        }
        let layout = entity.layout
        objectCheckedSlots = checkedSlots.filter { slot in
            guard case .field = layout.attributes[slot] else { return true }
            return !storage.attributes[slot].description.validation.isEmpty
        }
        defaults = entity.attributes.map(\.defaultValue)
        fieldDefaults = ManagedObject.fieldDefaults(of: entity)
        emptyRelationships = entity.relationships.map { $0.isToMany ? .toMany([]) : .toOne(nil) }
        if case .managedObjects(let accepts, let className, _) = source {
            let made = entity.managedObjectClass.init(entity: entity)
            if let accepts, !accepts(made) {
                throw .typeMismatch(
                    key: "managedObjectHandler", entity: entity.name, expected: className,
                    actual: "\(entity.managedObjectClass), the model's class for \(entity.name)")
            }
            object = made
        }
    }

    /// The next chunk of rows; nil when the source has no more.
    ///
    /// - Throws: ``StrataError/unknownKey(key:entity:)``,
    ///   ``StrataError/typeMismatch(key:entity:expected:actual:)``,
    ///   ``StrataError/validation(_:)`` (every failure of the chunk).
    mutating func nextChunk() throws(StrataError) -> EncodedRows? {
        guard !isFinished else { return nil }
        var rows = EncodedRows()
        rows.rows.reserveCapacity(Self.chunkSize)
        var failures: [ValidationFailure] = []
        while rows.count < Self.chunkSize {
            switch source {
            case .objects(let objects):
                guard nextIndex < objects.count else {
                    isFinished = true
                    break
                }
                nextIndex += 1
                try appendRow(from: objects[nextIndex - 1], to: &rows, failures: &failures)
            case .dictionaries(let handler):
                dictionary.removeAll(keepingCapacity: true)
                if handler(&dictionary) {
                    isFinished = true
                    break
                }
                try appendRow(from: dictionary, to: &rows, failures: &failures)
            case .managedObjects(_, _, let fill):
                guard let object else {
                    isFinished = true
                    break
                }
                object.reset(to: fieldDefaults)
                if fill(object) {
                    isFinished = true
                    break
                }
                try appendRow(from: object, to: &rows, failures: &failures)
            }
            if isFinished { break }
        }
        if !failures.isEmpty { throw .validation(failures) }
        return rows.isEmpty ? nil : rows
    }

    /// Encodes the object `values` describes.
    private func appendRow(from values: [String: any Sendable], to rows: inout EncodedRows, failures: inout [ValidationFailure]) throws(StrataError) {
        var row = BatchRow(entityName: storage.name, attributes: defaults, relationships: emptyRelationships)
        for (key, value) in values {
            if let slot = storage.attributeSlot(named: key) {
                let attribute = storage.attributes[slot].description
                guard !attribute.isTransient else { continue }   // never stored
                row.attributes[slot] = try ManagedObject.attributeValue(from: value, for: attribute, entityName: storage.name)
            } else if let slot = storage.relationshipSlot(named: key) {
                row.relationships[slot] = try Self.relationshipValue(value, of: storage.relationships[slot].description, entity: storage.name)
            } else {
                throw .unknownKey(key: key, entity: storage.name)
            }
        }
        check(row, slots: checkedSlots, failures: &failures)
        try RowEncoder.append(row, storage: storage, key: 0, baseVersion: 0, to: &rows)
    }

    /// Encodes the object a handler filled.
    private func appendRow(from object: ManagedObject, to rows: inout EncodedRows, failures: inout [ValidationFailure]) throws(StrataError) {
        let row = BatchObjectRow(object: object, entityName: storage.name)
        check(row, slots: object._bits & ObjectBits.nilOverrides == 0 ? objectCheckedSlots : checkedSlots, failures: &failures)
        try RowEncoder.append(row, storage: storage, key: 0, baseVersion: 0, to: &rows)
    }

    /// Checks the model's rules on a row's values: attributes `slots`, and relationships.
    private func check(_ row: some RowSource, slots: [Int], failures: inout [ValidationFailure]) {
        var failed: [(key: String, reason: ValidationFailure.Reason)] = []
        for slot in slots {
            let attribute = storage.attributes[slot].description
            ManagedObject.check(row.rowAttribute(slot), against: attribute) { failed.append((attribute.name, $0)) }
        }
        if let batchRow = row as? BatchRow {
            for (slot, relationship) in storage.entity.relationships.enumerated() {
                let count: Int = switch batchRow.relationships[slot] {
                case .toOne(let id): id == nil ? 0 : 1
                case .toMany(let ids): ids.count
                case .notLoaded: 0
                }
                if count == 0 {
                    if !relationship.isOptional { failed.append((relationship.name, .missingValue)) }
                } else if relationship.isToMany {
                    if count < relationship.minCount { failed.append((relationship.name, .tooFewObjects(minimum: relationship.minCount, actual: count))) }
                    if let maximum = relationship.maxCount, count > maximum {
                        failed.append((relationship.name, .tooManyObjects(maximum: maximum, actual: count)))
                    }
                }
            }
        }
        if !(row is BatchRow) {
            // A managed-object handler sets no relationship: a required one is missing.
            for relationship in storage.entity.relationships where !relationship.isOptional {
                failed.append((relationship.name, .missingValue))
            }
        }
        guard !failed.isEmpty else { return }
        let id = ManagedObjectID(temporaryFor: storage.name)
        failures += failed.map { ValidationFailure(objectID: id, key: $0.key, reason: $0.reason) }
    }

    /// A relationship's value in a dictionary: an ID or nil for a to-one; an array or
    /// set of IDs for a to-many.
    private static func relationshipValue(_ value: Any, of relationship: RelationshipDescription, entity: String) throws(StrataError) -> RelationshipSnapshot {
        let flattened = ManagedObject.flattened(value)
        if !relationship.isToMany {
            switch flattened {
            case nil: return .toOne(nil)
            case let id as ManagedObjectID: return .toOne(id)
            default: break
            }
        } else {
            switch flattened {
            case nil: return .toMany([])
            case let ids as [ManagedObjectID]: return .toMany(ids)
            case let ids as Set<ManagedObjectID>: return .toMany(ids.sorted { $0.description < $1.description })
            default: break
            }
        }
        let expected = relationship.isToMany ? "[ManagedObjectID] or Set<ManagedObjectID>" : "ManagedObjectID?"
        throw .typeMismatch(key: relationship.name, entity: entity, expected: expected, actual: "\(type(of: value))")
    }
}

/// One object of a dictionary source, as a row source.
private struct BatchRow: RowSource {
    let entityName: String
    var attributes: [AttributeValue?]
    var relationships: [RelationshipSnapshot]

    func rowAttribute(_ slot: Int) -> AttributeValue? { attributes[slot] }
    func rowRelationships() -> [RelationshipSnapshot] { relationships }
    /// A new temporary ID per row: asked for once, for a constrained entity or one with
    /// relationships (a constraint conflict or a merge names the row by it).
    var rowObjectID: ManagedObjectID { ManagedObjectID(temporaryFor: entityName) }
}

/// The object a handler filled, as a row source: its fields encoded as a save encodes
/// them, with a new temporary ID per row.
private struct BatchObjectRow: RowSource {
    let object: ManagedObject
    let entityName: String

    func rowAttribute(_ slot: Int) -> AttributeValue? { object.rowAttribute(slot) }
    func appendUnboxedField(_ slot: Int, number: UInt32, of type: AttributeType, to bytes: inout [UInt8]) -> Bool {
        object.appendUnboxedField(slot, number: number, of: type, to: &bytes)
    }
    /// Not read from the object: none is set.
    func rowRelationships() -> [RelationshipSnapshot] { Array(repeating: .notLoaded, count: object.entity.relationships.count) }
    var rowObjectID: ManagedObjectID { ManagedObjectID(temporaryFor: entityName) }
}

private extension AttributeDescription {
    /// Whether the attribute is stored (has a field) in `storage`.
    func field(in storage: EntityStorage) -> Bool {
        storage.attributeSlot(named: name).flatMap { storage.attributes[$0].field } != nil
    }
}

/// The rows of a chunk kept until the write commits, so that a run of the write body
/// after a map growth writes them again without asking the source: compactly, as their
/// bytes and two offsets per row, when no row carries an ID or relationships (an
/// entity with neither constraints nor relationships), else as they are.
struct RetainedRows {
    private let bytes: [UInt8]
    private let entity: UInt16
    /// Per row: where its record ends and where its index values end.
    private let ends: [UInt32]
    private let full: EncodedRows?

    init(_ rows: EncodedRows) {
        var compact = rows.bytes.count < Int(UInt32.max)
        for index in rows.rows.indices where compact {
            compact = rows.rows[index].objectID == nil && rows.rows[index].relationships == nil && rows.rows[index].key == 0
                && rows.rows[index].baseVersion == 0 && rows.rows[index].entity == rows.rows[0].entity
        }
        if compact {
            bytes = rows.bytes
            entity = rows.rows.first?.entity ?? 0
            var ends: [UInt32] = []
            ends.reserveCapacity(rows.count * 2)
            for index in rows.rows.indices {
                ends.append(UInt32(rows.rows[index].record.upperBound))
                ends.append(UInt32(rows.rows[index].indexValues.upperBound))
            }
            self.ends = ends
            full = nil
        } else {
            bytes = []
            entity = 0
            ends = []
            full = rows
        }
    }

    /// The rows again.
    var rows: EncodedRows {
        if let full { return full }
        var rows = EncodedRows()
        rows.bytes = bytes
        rows.rows.reserveCapacity(ends.count / 2)
        var start = 0
        for index in stride(from: 0, to: ends.count, by: 2) {
            let recordEnd = Int(ends[index]), indexEnd = Int(ends[index + 1])
            rows.rows.append(EncodedRow(entity: entity, key: 0, baseVersion: 0, record: start..<recordEnd, indexValues: recordEnd..<indexEnd))
            start = indexEnd
        }
        return rows
    }
}

extension ManagedObject {
    /// An attribute's default value and where it goes: straight into a plain typed field,
    /// or through ``storeAttribute(_:at:)``.
    enum FieldDefault {
        case int64(offset: Int, Int64)
        case int(offset: Int, Int)
        case double(offset: Int, Double)
        case date(offset: Int, Date)
        case string(offset: Int, String)
        case slot(Int, AttributeValue?)
    }

    /// The defaults of `entity`'s attributes, by slot.
    static func fieldDefaults(of entity: EntityDescription) -> [FieldDefault] {
        let layout = entity.layout
        return layout.attributes.enumerated().map { slot, place in
            let value = layout.defaults[slot]
            guard case .field(let offset, .plain(let base)) = place, let value else { return .slot(slot, value) }
            switch (base, value) {
            case (.int64, .integer(let n)): return .int64(offset: offset, n)
            case (.int, .integer(let n)): return .int(offset: offset, Int(n))
            case (.double, .double(let d)): return .double(offset: offset, d)
            case (.date, .date(let date)): return .date(offset: offset, date)
            case (.string, .string(let string)): return .string(offset: offset, string)
            default: return .slot(slot, value)
            }
        }
    }

    /// Puts every attribute back to its default (`defaults`, from ``fieldDefaults(of:)``
    /// for this object's entity): how a batch insert hands its handler a fresh object
    /// without making one per call.
    func reset(to defaults: [FieldDefault]) {
        if _bits & ObjectBits.nilOverrides != 0 {
            // A field stands in for a nil: the general path clears that too.
            for (slot, value) in _entity.layout.defaults.enumerated() { storeAttribute(value, at: slot) }
            return
        }
        for field in defaults {
            switch field {
            case .int64(let offset, let value): fieldPointer(at: offset, as: Int64.self).pointee = value
            case .int(let offset, let value): fieldPointer(at: offset, as: Int.self).pointee = value
            case .double(let offset, let value): fieldPointer(at: offset, as: Double.self).pointee = value
            case .date(let offset, let value): fieldPointer(at: offset, as: Date.self).pointee = value
            case .string(let offset, let value): fieldPointer(at: offset, as: String.self).pointee = value
            case .slot(let slot, let value): storeAttribute(value, at: slot)
            }
        }
    }
}
