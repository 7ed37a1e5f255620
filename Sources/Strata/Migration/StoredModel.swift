import Foundation

/// A model as a store records it: everything a migration needs to know of the model that
/// wrote the store (entities, stored attributes with their types, optionality, defaults and
/// indexes, relationships, uniqueness constraints, renaming identifiers and the version
/// identifier), so that an app need not keep old model code for a lightweight migration.
///
/// Written in the store's metadata (``StoreMetadata/Key/modelDescription``) as JSON with
/// sorted keys, so that equal models give equal bytes. Transient attributes and validation
/// rules are left out: they never reach the store. A transformable attribute keeps the
/// name of its Swift type; the model ``makeModel()`` rebuilds reads its values as bytes.
struct StoredModel: Codable, Sendable, Hashable {
    /// A stored attribute.
    struct Attribute: Codable, Sendable, Hashable {
        var name: String
        /// ``AttributeType/description``: `integer64`, `string`, `transformable(Module.Type)`, ...
        var type: String
        var isOptional: Bool
        /// The default value, encoded as a one-field record (``RecordCodec``).
        var defaultValue: [UInt8]?
        var isIndexed: Bool
        var renamingIdentifier: String?
    }

    /// A relationship.
    struct Relationship: Codable, Sendable, Hashable {
        var name: String
        var destination: String
        var inverse: String
        var isToMany: Bool
        var isOrdered: Bool
        var isOptional: Bool
        /// `noAction`, `nullify`, `cascade` or `deny`.
        var deleteRule: String
        var minCount: Int
        var maxCount: Int?
        var renamingIdentifier: String?
    }

    /// An entity, with what it declares itself (its superentity's properties are its
    /// superentity's).
    struct Entity: Codable, Sendable, Hashable {
        var name: String
        var superentity: String?
        var isAbstract: Bool
        var renamingIdentifier: String?
        var attributes: [Attribute]
        var relationships: [Relationship]
        var uniquenessConstraints: [[String]]
    }

    /// The model's ``ManagedObjectModel/versionIdentifier``.
    var versionIdentifier: String?
    /// The model's ``ManagedObjectModel/versionHash``.
    var versionHash: String
    /// Every entity, by name.
    var entities: [Entity]

    /// The stored description of `model`.
    init(_ model: ManagedObjectModel) {
        versionIdentifier = model.versionIdentifier
        versionHash = model.versionHash
        entities = model.entities.sorted { $0.name < $1.name }.map { entity in
            Entity(
                name: entity.name, superentity: entity.superentityName, isAbstract: entity.isAbstract,
                renamingIdentifier: entity.renamingIdentifier,
                attributes: entity.declaredAttributes.filter { !$0.isTransient }.map { attribute in
                    Attribute(
                        name: attribute.name, type: attribute.type.description, isOptional: attribute.isOptional,
                        defaultValue: attribute.defaultValue.map { RecordCodec.encode(Record(version: 0, fields: [1: $0])) },
                        isIndexed: attribute.isIndexed, renamingIdentifier: attribute.renamingIdentifier)
                },
                relationships: entity.declaredRelationships.map { relationship in
                    Relationship(
                        name: relationship.name, destination: relationship.destinationEntityName, inverse: relationship.inverseName,
                        isToMany: relationship.isToMany, isOrdered: relationship.isOrdered, isOptional: relationship.isOptional,
                        deleteRule: Self.name(of: relationship.deleteRule), minCount: relationship.minCount,
                        maxCount: relationship.maxCount, renamingIdentifier: relationship.renamingIdentifier)
                },
                uniquenessConstraints: entity.declaredUniquenessConstraints)
        }
    }

    /// The stored attributes and to-one relationships of entity `name`, its ancestors'
    /// included (empty for an entity the model does not have).
    func storedProperties(of name: String) -> (attributes: [Attribute], toOne: [Relationship]) {
        var attributes: [Attribute] = [], toOne: [Relationship] = []
        var next: String? = name
        var seen = Set<String>()
        while let current = next, seen.insert(current).inserted, let entity = entities.first(where: { $0.name == current }) {
            attributes += entity.attributes
            toOne += entity.relationships.filter { !$0.isToMany }
            next = entity.superentity
        }
        return (attributes, toOne)
    }

    /// The JSON the store keeps.
    func encoded() -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        // Plain values only: encoding cannot fail.
        return (try? Array(encoder.encode(self))) ?? []
    }

    /// Decodes what ``encoded()`` wrote.
    ///
    /// - Throws: ``MetadataDecodingError`` when the bytes are not a stored model.
    init(decoding bytes: [UInt8]) throws(MetadataDecodingError) {
        do {
            self = try JSONDecoder().decode(StoredModel.self, from: Data(bytes))
        } catch {
            throw MetadataDecodingError(reason: "the stored model description does not decode: \(error)")
        }
    }

    /// The model this describes, built from descriptions (no typed classes): what a
    /// migration reads the store's rows with. A transformable attribute becomes binary
    /// data (its bytes).
    ///
    /// - Throws: ``MetadataDecodingError`` when the description names an unknown type or
    ///   delete rule, or is not a valid model (a damaged store, or one a newer Strata wrote).
    func makeModel() throws(MetadataDecodingError) -> ManagedObjectModel {
        var descriptions: [EntityDescription] = []
        for entity in entities {
            var attributes: [AttributeDescription] = []
            for attribute in entity.attributes {
                let type: AttributeType
                if let known = Self.type(named: attribute.type) {
                    type = known
                } else if attribute.type.hasPrefix("transformable(") {
                    type = .binaryData
                } else {
                    throw MetadataDecodingError(reason: "attribute \(entity.name).\(attribute.name) has an unknown type, \(attribute.type)")
                }
                var defaultValue: AttributeValue?
                if let bytes = attribute.defaultValue {
                    guard let value = try? RecordCodec.decode(bytes).fields[1] else {
                        throw MetadataDecodingError(reason: "the default value of \(entity.name).\(attribute.name) does not decode")
                    }
                    // A transformable default is its bytes, as the attribute now is.
                    if case .transformable(let data) = value { defaultValue = .binaryData(data) } else { defaultValue = value }
                }
                attributes.append(AttributeDescription(
                    name: attribute.name, type: type, isOptional: attribute.isOptional, defaultValue: defaultValue,
                    isIndexed: attribute.isIndexed, renamingIdentifier: attribute.renamingIdentifier))
            }
            var relationships: [RelationshipDescription] = []
            for relationship in entity.relationships {
                guard let rule = Self.deleteRule(named: relationship.deleteRule) else {
                    throw MetadataDecodingError(reason: "relationship \(entity.name).\(relationship.name) has an unknown delete rule, \(relationship.deleteRule)")
                }
                relationships.append(RelationshipDescription(
                    name: relationship.name, destinationEntityName: relationship.destination, inverseName: relationship.inverse,
                    isToMany: relationship.isToMany, isOrdered: relationship.isOrdered, isOptional: relationship.isOptional,
                    deleteRule: rule, minCount: relationship.minCount, maxCount: relationship.maxCount,
                    renamingIdentifier: relationship.renamingIdentifier))
            }
            descriptions.append(EntityDescription(
                name: entity.name, superentityName: entity.superentity, isAbstract: entity.isAbstract,
                attributes: attributes, relationships: relationships, uniquenessConstraints: entity.uniquenessConstraints,
                renamingIdentifier: entity.renamingIdentifier))
        }
        do {
            return try ManagedObjectModel(entities: descriptions, versionIdentifier: versionIdentifier)
        } catch {
            throw MetadataDecodingError(reason: "the stored model description is not a valid model: \(error)")
        }
    }

    /// The attribute type `name` (an ``AttributeType/description``) names; nil for a
    /// transformable type or an unknown name.
    static func type(named name: String) -> AttributeType? {
        switch name {
        case "integer16": .integer16
        case "integer32": .integer32
        case "integer64": .integer64
        case "double": .double
        case "float": .float
        case "boolean": .boolean
        case "string": .string
        case "date": .date
        case "binaryData": .binaryData
        case "uuid": .uuid
        case "uri": .uri
        case "decimal": .decimal
        default: nil
        }
    }

    static func name(of rule: DeleteRule) -> String {
        switch rule {
        case .noAction: "noAction"
        case .nullify: "nullify"
        case .cascade: "cascade"
        case .deny: "deny"
        }
    }

    static func deleteRule(named name: String) -> DeleteRule? {
        switch name {
        case "noAction": .noAction
        case "nullify": .nullify
        case "cascade": .cascade
        case "deny": .deny
        default: nil
        }
    }
}

// MARK: - Custom stages

extension StoredModel {
    /// This model without what `repairs` drop: the stored model a custom stage's inferred
    /// part starts from, so that each dropped element's data goes and its new namesake
    /// starts empty. An entity goes with its sub-entities and every relationship to them;
    /// a relationship goes with its inverse.
    func pruned(by repairs: [SchemaDiff.Repair]) -> StoredModel {
        var entities = Set<String>()
        var attributes = Set<[String]>()
        var relationships = Set<[String]>()
        for repair in repairs {
            switch repair {
            case .dropEntity(let name): entities.insert(name)
            case .dropAttribute(let entity, let attribute): attributes.insert([entity, attribute])
            case .dropRelationship(let entity, let relationship): relationships.insert([entity, relationship])
            case .fill: break
            }
        }
        // Sub-entities of a dropped entity go with it.
        var grew = true
        while grew {
            grew = false
            for entity in self.entities where !entities.contains(entity.name) {
                if let parent = entity.superentity, entities.contains(parent) {
                    entities.insert(entity.name)
                    grew = true
                }
            }
        }
        // Relationships to dropped entities, and the inverses of dropped relationships.
        for entity in self.entities {
            for relationship in entity.relationships where entities.contains(relationship.destination) {
                relationships.insert([entity.name, relationship.name])
            }
        }
        for entity in self.entities {
            for relationship in entity.relationships where relationships.contains([entity.name, relationship.name]) {
                relationships.insert([relationship.destination, relationship.inverse])
            }
        }
        var pruned = self
        pruned.entities = self.entities.filter { !entities.contains($0.name) }.map { entity in
            var entity = entity
            entity.attributes.removeAll { attributes.contains([entity.name, $0.name]) }
            entity.relationships.removeAll { relationships.contains([entity.name, $0.name]) }
            let names = Set(entity.attributes.map(\.name))
            entity.uniquenessConstraints.removeAll { !$0.allSatisfy(names.contains) }
            return entity
        }
        return pruned
    }
}
