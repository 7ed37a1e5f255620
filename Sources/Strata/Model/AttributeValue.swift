import Foundation

/// The value of one attribute as Strata stores, indexes and compares it.
///
/// Every ``AttributeType`` maps to one case: the integer types share ``integer(_:)``
/// (range-checked against the attribute's width), and a transformable attribute is kept
/// as the bytes its `Codable` value encodes to. A missing value is `nil` of
/// `AttributeValue?`, never a case.
public enum AttributeValue: Sendable, Hashable {
    /// integer16, integer32 or integer64.
    case integer(Int64)
    /// A 64-bit floating-point number.
    case double(Double)
    /// A 32-bit floating-point number.
    case float(Float)
    /// A boolean.
    case boolean(Bool)
    /// A string.
    case string(String)
    /// A point in time.
    case date(Date)
    /// Arbitrary bytes.
    case binaryData(Data)
    /// A UUID.
    case uuid(UUID)
    /// A URL.
    case uri(URL)
    /// A base-10 decimal number.
    case decimal(Decimal)
    /// The encoded bytes of a transformable (`Codable`) value.
    case transformable(Data)
}

extension AttributeValue {
    /// The name of the value's case, for error messages: `string`, `integer`, ...
    var kindName: String {
        switch self {
        case .integer: "integer"
        case .double: "double"
        case .float: "float"
        case .boolean: "boolean"
        case .string: "string"
        case .date: "date"
        case .binaryData: "binaryData"
        case .uuid: "uuid"
        case .uri: "uri"
        case .decimal: "decimal"
        case .transformable: "transformable"
        }
    }
}
