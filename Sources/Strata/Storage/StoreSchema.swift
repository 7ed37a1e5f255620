/// The stable numbers a store gives its entities and stored fields, assigned when the
/// store is created and kept in its metadata (DESIGN.md, "Store layout").
///
/// - Every entity (abstract ones included) has an **entity number**, a `UInt16` ≥ 1. It
///   is the first half of a row reference (``RowReference``), so a foreign key or a link
///   names the destination's entity without spelling it.
/// - Every stored (non-transient) attribute and every to-one relationship has a **field
///   number**, a `UInt32` ≥ 1, under which a row's ``Record`` keeps its value. A
///   property gets one number where it is declared, and every sub-entity that inherits
///   it uses the same number. Numbers are unique across the whole schema, so they are
///   also unique within each entity.
///
/// Numbers are assigned once, in a deterministic order (entities by name; fields in
/// inheritance order, then declaration order), and never recomputed for an existing
/// store: the persisted schema is the truth, which is what lets a future migration add
/// properties without renumbering the stored ones.
struct StoreSchema: Sendable, Hashable {
    /// The numbers of one entity.
    struct Entity: Sendable, Hashable {
        /// The entity's number, ≥ 1.
        var number: UInt16
        /// Field numbers by property name: stored attributes and to-one relationships,
        /// inherited ones included.
        var fields: [String: UInt32]
    }

    /// Every entity's numbers, by entity name.
    private(set) var entities: [String: Entity]
    /// Entity names by entity number.
    private(set) var entityNames: [UInt16: String]

    /// A schema from already assigned numbers; the caller guarantees they are valid.
    init(entities: [String: Entity]) {
        self.entities = entities
        entityNames = Dictionary(entities.map { ($0.value.number, $0.key) }) { first, _ in first }
    }

    /// Assigns numbers to every entity and stored field of `model`.
    init(assigningNumbersFor model: ManagedObjectModel) {
        let sorted = model.entities
        var entities: [String: Entity] = [:]
        var nextField: UInt32 = 1
        // Roots first (fewest ancestors), so a sub-entity copies its parent's numbers.
        for entity in sorted.sorted(by: { ($0.ancestorNames.count, $0.name) < ($1.ancestorNames.count, $1.name) }) {
            var fields = entity.superentityName.flatMap { entities[$0]?.fields } ?? [:]
            for attribute in entity.declaredAttributes where !attribute.isTransient && fields[attribute.name] == nil {
                fields[attribute.name] = nextField
                nextField += 1
            }
            for relationship in entity.declaredRelationships where !relationship.isToMany && fields[relationship.name] == nil {
                fields[relationship.name] = nextField
                nextField += 1
            }
            entities[entity.name] = Entity(number: 0, fields: fields)
        }
        for (index, entity) in sorted.enumerated() {
            // A model with more than 65,535 entities is refused by `check(covers:)`.
            entities[entity.name]?.number = UInt16(truncatingIfNeeded: index + 1)
        }
        self.init(entities: entities)
    }

    /// The number of `entityName`, or nil when the schema does not know it.
    func entityNumber(of entityName: String) -> UInt16? { entities[entityName]?.number }

    /// The field number of `property` of `entityName`, or nil.
    func fieldNumber(entity entityName: String, property: String) -> UInt32? {
        entities[entityName]?.fields[property]
    }

    /// Why the schema cannot store `model`, or nil when it numbers every entity and every
    /// stored field of it.
    func problem(storing model: ManagedObjectModel) -> String? {
        for entity in model.entities {
            guard let numbers = entities[entity.name], entityNames[numbers.number] == entity.name else {
                return "the schema has no number of its own for entity \(entity.name)"
            }
            let stored = entity.attributes.filter { !$0.isTransient }.map(\.name)
                + entity.relationships.filter { !$0.isToMany }.map(\.name)
            if let missing = stored.first(where: { numbers.fields[$0] == nil }) {
                return "the schema has no field number for \(entity.name).\(missing)"
            }
        }
        return nil
    }
}

// MARK: - Migration

extension StoreSchema {
    /// The name this schema knows `entity` by: its renaming identifier when the schema has
    /// an entity of that name, else its own.
    func storedName(of entity: EntityDescription) -> String {
        entity.renamingIdentifier.flatMap { entities[$0] != nil ? $0 : nil } ?? entity.name
    }

    /// The numbers of a store migrated from this schema (of the model `stored` describes)
    /// to `model`: an entity or stored field the new model keeps (by name, or by its
    /// renaming identifier) keeps its number, so renamed properties need no rewrite and
    /// row references stay valid; new ones get numbers above every number this schema
    /// uses (a number is never given to another property while rows may hold it). Sub-entities
    /// share their ancestors' numbers, as in a new store.
    func migrated(to model: ManagedObjectModel, from stored: StoredModel) -> StoreSchema {
        var nextEntity = (entityNames.keys.max() ?? 0) + 1
        var nextField = (entities.values.flatMap(\.fields.values).max() ?? 0) + 1
        var result: [String: Entity] = [:]
        for entity in model.entities.sorted(by: { ($0.ancestorNames.count, $0.name) < ($1.ancestorNames.count, $1.name) }) {
            let oldName = storedName(of: entity)
            let old = entities[oldName]
            let properties = stored.storedProperties(of: oldName)
            let kinds = (attributes: Set(properties.attributes.map(\.name)), toOne: Set(properties.toOne.map(\.name)))
            var fields = entity.superentityName.flatMap { result[$0]?.fields } ?? [:]
            /// The stored field of `name` (renamed from `renaming`) when the old entity held
            /// one of the same kind (`among`), or a new number.
            func number(for name: String, renaming: String?, among names: Set<String>) -> UInt32 {
                if let renaming, names.contains(renaming), let found = old?.fields[renaming] { return found }
                if names.contains(name), let found = old?.fields[name] { return found }
                defer { nextField += 1 }
                return nextField
            }
            for attribute in entity.declaredAttributes where !attribute.isTransient && fields[attribute.name] == nil {
                fields[attribute.name] = number(for: attribute.name, renaming: attribute.renamingIdentifier, among: kinds.attributes)
            }
            for relationship in entity.declaredRelationships where !relationship.isToMany && fields[relationship.name] == nil {
                fields[relationship.name] = number(for: relationship.name, renaming: relationship.renamingIdentifier, among: kinds.toOne)
            }
            let entityNumber: UInt16
            if let old {
                entityNumber = old.number
            } else {
                entityNumber = nextEntity
                nextEntity += 1
            }
            result[entity.name] = Entity(number: entityNumber, fields: fields)
        }
        return StoreSchema(entities: result)
    }
}

// MARK: - Encoding

extension StoreSchema {
    /// The version byte of the encoding.
    static let encodingVersion: UInt8 = 1

    /// The schema as bytes, stable for equal schemas:
    ///
    /// ```
    /// schema := 0x01 varint(entityCount) entity*          entities sorted by name
    /// entity := text(name) varint(number) varint(fieldCount) field*
    /// field  := text(name) varint(number)                 fields sorted by name
    /// text   := varint(byteCount) UTF-8 bytes
    /// ```
    func encoded() -> [UInt8] {
        var bytes: [UInt8] = [Self.encodingVersion]
        RecordCodec.appendVarint(UInt64(entities.count), to: &bytes)
        for (name, entity) in entities.sorted(by: { $0.key < $1.key }) {
            MetadataBytes.appendText(name, to: &bytes)
            RecordCodec.appendVarint(UInt64(entity.number), to: &bytes)
            RecordCodec.appendVarint(UInt64(entity.fields.count), to: &bytes)
            for (field, number) in entity.fields.sorted(by: { $0.key < $1.key }) {
                MetadataBytes.appendText(field, to: &bytes)
                RecordCodec.appendVarint(UInt64(number), to: &bytes)
            }
        }
        return bytes
    }

    /// Decodes ``encoded()``. Total: any bytes give a schema or an error, never a trap.
    ///
    /// - Throws: ``MetadataDecodingError`` for an unknown version, a truncated or
    ///   over-long encoding, a number of 0 or out of range, or a repeated name or number.
    init(decoding raw: UnsafeRawBufferPointer) throws(MetadataDecodingError) {
        var reader = MetadataBytes(raw, what: "schema")
        let version = try reader.byte()
        guard version == Self.encodingVersion else {
            throw MetadataDecodingError(reason: "unknown schema encoding version \(version)")
        }
        var entities: [String: Entity] = [:]
        var numbers: Set<UInt16> = []
        for _ in 0..<(try reader.count()) {
            let name = try reader.text()
            let number = try reader.number(max: UInt64(UInt16.max))
            guard entities[name] == nil, numbers.insert(UInt16(number)).inserted else {
                throw MetadataDecodingError(reason: "entity \(name) or number \(number) appears twice in the schema")
            }
            var fields: [String: UInt32] = [:]
            var fieldNumbers: Set<UInt32> = []
            for _ in 0..<(try reader.count()) {
                let field = try reader.text()
                let fieldNumber = UInt32(try reader.number(max: UInt64(RecordCodec.maximumFieldNumber)))
                guard fields[field] == nil, fieldNumbers.insert(fieldNumber).inserted else {
                    throw MetadataDecodingError(reason: "field \(name).\(field) or number \(fieldNumber) appears twice in the schema")
                }
                fields[field] = fieldNumber
            }
            entities[name] = Entity(number: UInt16(number), fields: fields)
        }
        guard reader.isAtEnd else { throw MetadataDecodingError(reason: "the schema has trailing bytes") }
        self.init(entities: entities)
    }
}

/// Why a metadata value (the schema, the format version, ...) could not be decoded.
struct MetadataDecodingError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What was wrong.
    let reason: String
    /// Whether the store was written by a newer format (not damaged, just too new).
    var isNewerFormat = false

    var description: String { reason }
}

/// A bounds-checked reader of metadata bytes: every read throws instead of trapping.
struct MetadataBytes {
    private let bytes: UnsafeRawBufferPointer
    private let what: String
    private var offset = 0

    /// A reader of `bytes`, which hold a `what` (for error messages).
    init(_ bytes: UnsafeRawBufferPointer, what: String) {
        self.bytes = bytes
        self.what = what
    }

    /// Whether every byte was read.
    var isAtEnd: Bool { offset == bytes.count }

    /// Reads one byte.
    mutating func byte() throws(MetadataDecodingError) -> UInt8 {
        guard offset < bytes.count else { throw cutShort() }
        defer { offset += 1 }
        return bytes[offset]
    }

    /// Reads a varint.
    mutating func varint() throws(MetadataDecodingError) -> UInt64 {
        do throws(RecordDecodingError) {
            return try RecordCodec.readVarint(bytes, at: &offset)
        } catch {
            throw MetadataDecodingError(reason: "the \(what) is malformed: \(error.reason)")
        }
    }

    /// Reads a varint in `1...max`.
    mutating func number(max: UInt64) throws(MetadataDecodingError) -> UInt64 {
        let value = try varint()
        guard value >= 1, value <= max else {
            throw MetadataDecodingError(reason: "the \(what) holds the number \(value), outside 1...\(max)")
        }
        return value
    }

    /// Reads a count, no larger than the bytes left (each counted item takes at least one byte).
    mutating func count() throws(MetadataDecodingError) -> Int {
        let value = try varint()
        guard value <= UInt64(bytes.count - offset) else { throw cutShort() }
        return Int(value)
    }

    /// Reads length-prefixed UTF-8 text.
    mutating func text() throws(MetadataDecodingError) -> String {
        let length = try count()
        let slice = UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + length])
        offset += length
        guard let text = String(validating: slice, as: UTF8.self) else {
            throw MetadataDecodingError(reason: "the \(what) holds text that is not UTF-8")
        }
        return text
    }

    /// Appends length-prefixed UTF-8 text.
    static func appendText(_ text: String, to bytes: inout [UInt8]) {
        RecordCodec.appendVarint(UInt64(text.utf8.count), to: &bytes)
        bytes.append(contentsOf: text.utf8)
    }

    private func cutShort() -> MetadataDecodingError {
        MetadataDecodingError(reason: "the \(what) is cut short at byte \(offset)")
    }
}
