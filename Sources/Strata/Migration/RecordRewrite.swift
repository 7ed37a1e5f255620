import Foundation

/// How a migration rewrites the records of one entity, field by field: a field the new
/// model keeps stays under its number (``StoreSchema/migrated(to:from:)`` keeps numbers),
/// converted when its type changed; a field it dropped goes; a field it adds, or makes
/// required, takes its default where the record holds nothing. Pure: bytes in, bytes out.
struct RecordRewrite: Sendable, Hashable {
    /// What happens to one stored field.
    enum Field: Sendable, Hashable {
        /// Kept as it is.
        case keep
        /// Converted to the new attribute type; a value that does not convert exactly
        /// fails the rewrite.
        case convert(AttributeType.Kind)
    }

    /// The fields kept, by number; every other field of a record is dropped.
    var kept: [UInt32: Field]
    /// Defaults written where a record holds no value, by field number.
    var fills: [UInt32: AttributeValue]
    /// Names for messages, by field number.
    var names: [UInt32: String]

    /// The rewrite of `entityName`'s records from `old` numbers (the model `stored`) to
    /// `new` numbers (`model`); nil when its records need no change.
    static func plan(
        entity entityName: String, from old: StoreSchema, stored: StoredModel, to new: StoreSchema, model: ManagedObjectModel
    ) -> RecordRewrite? {
        guard let entity = model.entitiesByName[entityName], let numbers = new.entities[entityName] else { return nil }
        let oldName = old.storedName(of: entity)
        let oldFields = old.entities[oldName]?.fields ?? [:]
        // The old types and optionality, by field number (ancestors' attributes included).
        var oldAttributes: [UInt32: StoredModel.Attribute] = [:]
        for attribute in stored.storedProperties(of: oldName).attributes {
            if let number = oldFields[attribute.name] { oldAttributes[number] = attribute }
        }
        var rewrite = RecordRewrite(kept: [:], fills: [:], names: [:])
        var changes = false
        for attribute in entity.attributes where !attribute.isTransient {
            guard let number = numbers.fields[attribute.name] else { continue }
            rewrite.names[number] = "\(entityName).\(attribute.name)"
            if let previous = oldAttributes[number] {
                if previous.type == attribute.type.description || Self.isIntegerWidening(from: previous.type, to: attribute.type) {
                    rewrite.kept[number] = .keep   // an integer is stored the same whatever its width
                } else {
                    rewrite.kept[number] = .convert(attribute.type.kind)
                    changes = true
                }
                if previous.isOptional && !attribute.isOptional, let value = attribute.defaultValue {
                    rewrite.fills[number] = value
                    changes = true
                }
            } else if let value = attribute.defaultValue {
                rewrite.fills[number] = value   // a new attribute: existing objects take its default
                changes = true
            }
        }
        for relationship in entity.relationships where !relationship.isToMany {
            if let number = numbers.fields[relationship.name], oldFields.values.contains(number) { rewrite.kept[number] = .keep }
        }
        // A stored field the new model does not keep is dropped: a rewrite too.
        if Set(oldFields.values).subtracting(rewrite.kept.keys).isEmpty == false { changes = true }
        return changes ? rewrite : nil
    }

    /// Whether `old` (a type name) and `new` are integer types and `new` is at least as wide.
    static func isIntegerWidening(from old: String, to new: AttributeType) -> Bool {
        guard case .integer(let bits) = new.kind, case .integer(let oldBits)? = StoredModel.type(named: old)?.kind else { return false }
        return bits >= oldBits
    }

    /// Why a record could not be rewritten.
    struct Failure: Error, Sendable, Hashable, CustomStringConvertible {
        let reason: String
        var description: String { reason }
    }

    /// The rewritten record (same version).
    ///
    /// - Throws: ``Failure`` when the record does not decode or a value does not convert
    ///   exactly (naming the attribute and the value).
    func rewrite(_ bytes: UnsafeRawBufferPointer) throws(Failure) -> [UInt8] {
        let record: Record
        do throws(RecordDecodingError) {
            record = try RecordCodec.decode(bytes)
        } catch {
            throw Failure(reason: "the record does not decode: \(error.reason)")
        }
        var fields: [UInt32: AttributeValue] = [:]
        for (number, value) in record.fields {
            switch kept[number] {
            case nil:
                continue
            case .keep:
                fields[number] = value
            case .convert(let kind):
                guard let converted = Self.convert(value, to: kind) else {
                    throw Failure(reason: "\(names[number] ?? "field \(number)") holds \(value.messageText), which does not convert exactly to \(kind)")
                }
                fields[number] = converted
            }
        }
        for (number, value) in fills where fields[number] == nil { fields[number] = value }
        return RecordCodec.encode(Record(version: record.version, fields: fields))
    }

    /// `value` as a value of `kind`, when it converts exactly.
    static func convert(_ value: AttributeValue, to kind: AttributeType.Kind) -> AttributeValue? {
        switch (value, kind) {
        case (.integer(let n), .integer(let bits)):
            let range = bits == 16 ? Int64(Int16.min)...Int64(Int16.max) : bits == 32 ? Int64(Int32.min)...Int64(Int32.max) : Int64.min...Int64.max
            return range.contains(n) ? value : nil
        case (.integer(let n), .double):
            let converted = Double(n)
            return converted.isFinite && Int64(exactly: converted) == n ? .double(converted) : nil
        case (.integer(let n), .float):
            let converted = Float(n)
            return converted.isFinite && Int64(exactly: converted) == n ? .float(converted) : nil
        case (.double(let d), .integer(let bits)):
            guard let n = Int64(exactly: d) else { return nil }
            return convert(.integer(n), to: .integer(bits))
        case (.float(let f), .integer(let bits)):
            guard let n = Int64(exactly: f) else { return nil }
            return convert(.integer(n), to: .integer(bits))
        case (.double(let d), .float):
            let converted = Float(d)
            return Double(converted) == d || (d.isNaN && converted.isNaN) ? .float(converted) : nil
        case (.float(let f), .double):
            return .double(Double(f))
        case (.double, .double), (.float, .float):
            return value
        default:
            return nil
        }
    }
}

extension AttributeType {
    /// The numeric kinds a migration converts between (``RecordRewrite``).
    enum Kind: Sendable, Hashable, CustomStringConvertible {
        /// An integer of so many bits.
        case integer(Int)
        case double
        case float
        /// Any other type (no conversion into it).
        case other

        var description: String {
            switch self {
            case .integer(let bits): "integer\(bits)"
            case .double: "double"
            case .float: "float"
            case .other: "value of another type"
            }
        }
    }

    /// The type's numeric kind.
    var kind: Kind {
        switch self {
        case .integer16: .integer(16)
        case .integer32: .integer(32)
        case .integer64: .integer(64)
        case .double: .double
        case .float: .float
        default: .other
        }
    }
}

extension AttributeValue {
    /// The value as a message shows it: numbers and dates plainly, text quoted, bytes counted.
    var messageText: String {
        switch self {
        case .integer(let n): "\(n)"
        case .double(let d): "\(d)"
        case .float(let f): "\(f)"
        case .boolean(let b): "\(b)"
        case .string(let s): "\"\(s)\""
        case .date(let d): "\(d)"
        case .uuid(let u): u.uuidString
        case .uri(let u): u.absoluteString
        case .decimal(let d): "\(d)"
        case .binaryData(let data), .transformable(let data): "\(data.count) bytes"
        }
    }
}
