import Foundation

/// The type of an attribute: how its values are checked, stored and compared.
public enum AttributeType: Sendable, Hashable, CustomStringConvertible {
    /// A 16-bit signed integer.
    case integer16
    /// A 32-bit signed integer.
    case integer32
    /// A 64-bit signed integer.
    case integer64
    /// A 64-bit floating-point number.
    case double
    /// A 32-bit floating-point number.
    case float
    /// A boolean.
    case boolean
    /// A string.
    case string
    /// A date.
    case date
    /// Arbitrary bytes.
    case binaryData
    /// A UUID.
    case uuid
    /// A URL.
    case uri
    /// A base-10 decimal number.
    case decimal
    /// Any `Codable` value, stored as its encoded bytes.
    case transformable(any (Codable & Sendable).Type)

    /// The type's name, e.g. `integer32` or `transformable(MyApp.Colour)`.
    public var description: String {
        switch self {
        case .integer16: "integer16"
        case .integer32: "integer32"
        case .integer64: "integer64"
        case .double: "double"
        case .float: "float"
        case .boolean: "boolean"
        case .string: "string"
        case .date: "date"
        case .binaryData: "binaryData"
        case .uuid: "uuid"
        case .uri: "uri"
        case .decimal: "decimal"
        case .transformable(let type): "transformable(\(String(reflecting: type)))"
        }
    }

    /// Types are equal when their descriptions are: a transformable type by its value type.
    public static func == (lhs: AttributeType, rhs: AttributeType) -> Bool {
        switch (lhs, rhs) {
        case (.transformable(let a), .transformable(let b)): ObjectIdentifier(a) == ObjectIdentifier(b)
        default: lhs.description == rhs.description
        }
    }

    /// Hashes the type's description.
    public func hash(into hasher: inout Hasher) { hasher.combine(description) }

    /// Whether `value` is a valid value of this type (integers also within its width).
    public func accepts(_ value: AttributeValue) -> Bool {
        switch (self, value) {
        case (.integer16, .integer(let n)): Int64(Int16.min)...Int64(Int16.max) ~= n
        case (.integer32, .integer(let n)): Int64(Int32.min)...Int64(Int32.max) ~= n
        case (.integer64, .integer): true
        case (.double, .double), (.float, .float), (.boolean, .boolean), (.string, .string),
             (.date, .date), (.binaryData, .binaryData), (.uuid, .uuid), (.uri, .uri),
             (.decimal, .decimal), (.transformable, .transformable):
            true
        default: false
        }
    }

    /// The kind of index key the type's values encode to, or nil when the type cannot be indexed.
    var indexKeyKind: IndexKeyKind? {
        switch self {
        case .integer16, .integer32, .integer64: .integer
        case .double, .float: .double
        case .boolean: .boolean
        case .string: .string
        case .date: .date
        case .uuid: .uuid
        case .binaryData: .binaryData
        case .uri: .uri
        case .decimal, .transformable: nil
        }
    }
}

/// What happens to a relationship's destination objects when its source is deleted.
public enum DeleteRule: Sendable, Hashable {
    /// Nothing: the destination keeps a dangling reference that you must fix.
    case noAction
    /// The destination's inverse reference to the deleted object is removed.
    case nullify
    /// The destination objects are deleted too.
    case cascade
    /// The delete fails validation while the relationship has destination objects.
    case deny
}
