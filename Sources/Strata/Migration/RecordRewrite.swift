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
    let kept: [UInt32: Field]
    /// Defaults written where a record holds no value, by field number.
    let fills: [UInt32: AttributeValue]
    /// Names for messages, by field number.
    let names: [UInt32: String]
    /// ``fills`` as encoded fields, in field number order.
    private let encodedFills: [EncodedFill]
    /// The bytes of every encoded fill.
    private let fillBytes: Int

    /// A rewrite keeping `kept`, filling `fills`, naming fields by `names` in messages.
    init(kept: [UInt32: Field], fills: [UInt32: AttributeValue], names: [UInt32: String]) {
        self.kept = kept
        self.fills = fills
        self.names = names
        encodedFills = fills.sorted { $0.key < $1.key }.map { number, value in
            var bytes: [UInt8] = []
            RecordCodec.appendField(number, value, to: &bytes)
            return EncodedFill(number: number, bytes: bytes)
        }
        fillBytes = encodedFills.reduce(0) { $0 + $1.bytes.count }
    }

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
        var kept: [UInt32: Field] = [:], fills: [UInt32: AttributeValue] = [:], names: [UInt32: String] = [:]
        var changes = false
        for attribute in entity.attributes where !attribute.isTransient {
            guard let number = numbers.fields[attribute.name] else { continue }
            names[number] = "\(entityName).\(attribute.name)"
            if let previous = oldAttributes[number] {
                if previous.type == attribute.type.description || Self.isIntegerWidening(from: previous.type, to: attribute.type) {
                    kept[number] = .keep   // an integer is stored the same whatever its width
                } else {
                    kept[number] = .convert(attribute.type.kind)
                    changes = true
                }
                if previous.isOptional && !attribute.isOptional, let value = attribute.defaultValue {
                    fills[number] = value
                    changes = true
                }
            } else if let value = attribute.defaultValue {
                fills[number] = value   // a new attribute: existing objects take its default
                changes = true
            }
        }
        for relationship in entity.relationships where !relationship.isToMany {
            if let number = numbers.fields[relationship.name], oldFields.values.contains(number) { kept[number] = .keep }
        }
        // A stored field the new model does not keep is dropped: a rewrite too.
        if Set(oldFields.values).subtracting(kept.keys).isEmpty == false { changes = true }
        return changes ? RecordRewrite(kept: kept, fills: fills, names: names) : nil
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

    /// The rewritten record (same version), made from the stored bytes without decoding
    /// what it keeps: a kept field's bytes are copied as they are, a dropped one is
    /// stepped over, a converted one is decoded, converted and encoded, and each default
    /// is spliced in at its field number's place where the record holds nothing.
    ///
    /// - Throws: ``Failure`` when the record does not decode or a value does not convert
    ///   exactly (naming the attribute and the value).
    func rewrite(_ bytes: UnsafeRawBufferPointer) throws(Failure) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count + fillBytes)
        var failure: Failure?
        do throws(RecordDecodingError) {
            var reader = RecordCodec.Reader(bytes)
            _ = try reader.header()
            output.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[..<reader.offset]))
            var nextFill = 0
            fields: while true {
                let start = reader.offset
                guard let (number, tag) = try reader.nextField() else { break }
                while nextFill < encodedFills.count && encodedFills[nextFill].number < number {
                    output.append(contentsOf: encodedFills[nextFill].bytes)
                    nextFill += 1
                }
                if nextFill < encodedFills.count && encodedFills[nextFill].number == number { nextFill += 1 }   // it holds a value
                switch kept[number] {
                case nil:
                    try reader.skip(tag)
                case .keep:
                    try reader.skip(tag)
                    output.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[start..<reader.offset]))
                case .convert(let kind):
                    let value = try reader.value(tag)
                    guard let converted = Self.convert(value, to: kind) else {
                        failure = Failure(
                            reason: "\(names[number] ?? "field \(number)") holds \(value.messageText), which does not convert exactly to \(kind)")
                        break fields
                    }
                    RecordCodec.appendField(number, converted, to: &output)
                }
            }
            if failure == nil {
                for fill in encodedFills[nextFill...] { output.append(contentsOf: fill.bytes) }
            }
        } catch {
            throw Failure(reason: "the record does not decode: \(error.reason)")
        }
        if let failure { throw failure }
        return output
    }

    /// One default as an encoded field.
    struct EncodedFill: Sendable, Hashable {
        let number: UInt32
        let bytes: [UInt8]
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
