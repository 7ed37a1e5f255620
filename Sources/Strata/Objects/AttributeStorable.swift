import Foundation

/// A Swift type an ``Attribute`` property can have: it names its ``AttributeType`` and
/// converts to and from ``AttributeValue``.
///
/// Strata provides the conformances of `Int16`, `Int32`, `Int64`, `Int` (stored as
/// integer64), `Double`, `Float`, `Bool`, `String`, `Date`, `Data`, `UUID`, `URL`,
/// `Decimal` and `Optional` of each. For any other `Codable` value, conform it to
/// ``TransformableAttribute``.
public protocol AttributeStorable {
    /// The attribute type a property of this Swift type has.
    static var attributeType: AttributeType { get }
    /// Whether the type allows nil (an `Optional`): the attribute is then optional.
    static var isOptionalAttribute: Bool { get }
    /// The Swift value of a stored value; nil when the stored value is missing (for a
    /// non-optional type) or of another type.
    init?(attributeValue: AttributeValue?)
    /// The stored form of the value (nil for `Optional.none`).
    var attributeValue: AttributeValue? { get }
}

extension AttributeStorable {
    /// Not optional, unless the type is an `Optional`.
    public static var isOptionalAttribute: Bool { false }

    /// Whether the type is stored as a transformable encoding, which a write must check
    /// (it must decode back): such writes take the typed setter's slow path. Constant
    /// once the setter is specialised for a type.
    @inlinable
    static var _isTransformable: Bool {
        if case .transformable = attributeType { return true }
        return false
    }
}

extension Optional: AttributeStorable where Wrapped: AttributeStorable {
    /// The wrapped type's attribute type.
    @inlinable
    public static var attributeType: AttributeType { Wrapped.attributeType }
    /// An optional attribute.
    public static var isOptionalAttribute: Bool { true }

    /// `.none` for a missing value, the wrapped value otherwise; nil for a value of
    /// another type.
    public init?(attributeValue: AttributeValue?) {
        guard let attributeValue else {
            self = .none
            return
        }
        guard let wrapped = Wrapped(attributeValue: attributeValue) else { return nil }
        self = .some(wrapped)
    }

    /// The wrapped value's stored form, or nil.
    public var attributeValue: AttributeValue? { self.flatMap(\.attributeValue) }
}

extension Int16: AttributeStorable {
    /// integer16.
    @inlinable
    public static var attributeType: AttributeType { .integer16 }
    /// The stored integer, when it fits.
    public init?(attributeValue: AttributeValue?) {
        guard case .integer(let n)? = attributeValue, let value = Int16(exactly: n) else { return nil }
        self = value
    }
    /// `.integer`.
    public var attributeValue: AttributeValue? { .integer(Int64(self)) }
}

extension Int32: AttributeStorable {
    /// integer32.
    @inlinable
    public static var attributeType: AttributeType { .integer32 }
    /// The stored integer, when it fits.
    public init?(attributeValue: AttributeValue?) {
        guard case .integer(let n)? = attributeValue, let value = Int32(exactly: n) else { return nil }
        self = value
    }
    /// `.integer`.
    public var attributeValue: AttributeValue? { .integer(Int64(self)) }
}

extension Int64: AttributeStorable {
    /// integer64.
    @inlinable
    public static var attributeType: AttributeType { .integer64 }
    /// The stored integer.
    public init?(attributeValue: AttributeValue?) {
        guard case .integer(let n)? = attributeValue else { return nil }
        self = n
    }
    /// `.integer`.
    public var attributeValue: AttributeValue? { .integer(self) }
}

extension Int: AttributeStorable {
    /// integer64.
    @inlinable
    public static var attributeType: AttributeType { .integer64 }
    /// The stored integer, when it fits.
    public init?(attributeValue: AttributeValue?) {
        guard case .integer(let n)? = attributeValue, let value = Int(exactly: n) else { return nil }
        self = value
    }
    /// `.integer`.
    public var attributeValue: AttributeValue? { .integer(Int64(self)) }
}

extension Double: AttributeStorable {
    /// double.
    @inlinable
    public static var attributeType: AttributeType { .double }
    /// The stored double.
    public init?(attributeValue: AttributeValue?) {
        guard case .double(let value)? = attributeValue else { return nil }
        self = value
    }
    /// `.double`.
    public var attributeValue: AttributeValue? { .double(self) }
}

extension Float: AttributeStorable {
    /// float.
    @inlinable
    public static var attributeType: AttributeType { .float }
    /// The stored float.
    public init?(attributeValue: AttributeValue?) {
        guard case .float(let value)? = attributeValue else { return nil }
        self = value
    }
    /// `.float`.
    public var attributeValue: AttributeValue? { .float(self) }
}

extension Bool: AttributeStorable {
    /// boolean.
    @inlinable
    public static var attributeType: AttributeType { .boolean }
    /// The stored boolean.
    public init?(attributeValue: AttributeValue?) {
        guard case .boolean(let value)? = attributeValue else { return nil }
        self = value
    }
    /// `.boolean`.
    public var attributeValue: AttributeValue? { .boolean(self) }
}

extension String: AttributeStorable {
    /// string.
    @inlinable
    public static var attributeType: AttributeType { .string }
    /// The stored string.
    public init?(attributeValue: AttributeValue?) {
        guard case .string(let value)? = attributeValue else { return nil }
        self = value
    }
    /// `.string`.
    public var attributeValue: AttributeValue? { .string(self) }
}

extension Date: AttributeStorable {
    /// date.
    @inlinable
    public static var attributeType: AttributeType { .date }
    /// The stored date.
    public init?(attributeValue: AttributeValue?) {
        guard case .date(let value)? = attributeValue else { return nil }
        self = value
    }
    /// `.date`.
    public var attributeValue: AttributeValue? { .date(self) }
}

extension Data: AttributeStorable {
    /// binaryData.
    @inlinable
    public static var attributeType: AttributeType { .binaryData }
    /// The stored bytes.
    public init?(attributeValue: AttributeValue?) {
        guard case .binaryData(let value)? = attributeValue else { return nil }
        self = value
    }
    /// `.binaryData`.
    public var attributeValue: AttributeValue? { .binaryData(self) }
}

extension UUID: AttributeStorable {
    /// uuid.
    @inlinable
    public static var attributeType: AttributeType { .uuid }
    /// The stored UUID.
    public init?(attributeValue: AttributeValue?) {
        guard case .uuid(let value)? = attributeValue else { return nil }
        self = value
    }
    /// `.uuid`.
    public var attributeValue: AttributeValue? { .uuid(self) }
}

extension URL: AttributeStorable {
    /// uri.
    @inlinable
    public static var attributeType: AttributeType { .uri }
    /// The stored URL.
    public init?(attributeValue: AttributeValue?) {
        guard case .uri(let value)? = attributeValue else { return nil }
        self = value
    }
    /// `.uri`.
    public var attributeValue: AttributeValue? { .uri(self) }
}

extension Decimal: AttributeStorable {
    /// decimal.
    @inlinable
    public static var attributeType: AttributeType { .decimal }
    /// The stored decimal.
    public init?(attributeValue: AttributeValue?) {
        guard case .decimal(let value)? = attributeValue else { return nil }
        self = value
    }
    /// `.decimal`.
    public var attributeValue: AttributeValue? { .decimal(self) }
}

/// A `Codable` value stored in a transformable attribute, as JSON with sorted keys.
///
/// ```swift
/// struct Colour: TransformableAttribute { var red, green, blue: Double }
///
/// final class Label: ManagedObject {
///     @Attribute var colour: Colour = Colour(red: 1, green: 0, blue: 0)
/// }
/// ```
public protocol TransformableAttribute: AttributeStorable, Codable, Sendable {}

extension TransformableAttribute {
    /// `transformable(Self)`.
    @inlinable
    public static var attributeType: AttributeType { .transformable(Self.self) }

    /// The decoded value; nil when the bytes are not a `Self`.
    public init?(attributeValue: AttributeValue?) {
        guard case .transformable(let data)? = attributeValue,
              let value = try? JSONDecoder().decode(Self.self, from: data)
        else { return nil }
        self = value
    }

    /// The value's JSON bytes.
    public var attributeValue: AttributeValue? {
        TransformableCoding.encode(self, as: Self.self).map(AttributeValue.transformable)
    }
}
