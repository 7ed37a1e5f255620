import Foundation

/// `CAST(value, "Type")`: how the format language writes constants that have no literal of
/// their own. The parser folds each into a constant; ``PredicateNode/formatted`` prints them.
///
/// | Form | Value |
/// | --- | --- |
/// | `CAST(694224000.5, "NSDate")` | a date, as seconds since 2001-01-01 UTC (`"inf"`, `"-inf"`, `"nan"` as strings) |
/// | `CAST("nan", "NSNumber")` | a number from a string (`"inf"`, `"-inf"`, or any numeric literal) |
/// | `CAST("1.25", "NSDecimalNumber")` | a decimal (or `"NaN"`) |
/// | `CAST("E621E1F8-C36C-495A-93FC-0C247A3E6E5F", "UUID")` | a UUID |
/// | `CAST("https://example.com/a", "NSURL")` | a URL |
/// | `CAST("AAEC", "NSData")` | bytes, in base64 |
/// | `CAST("x-strata://…/Note/p1", "ManagedObjectID")` | an object ID, by its URI |
/// | `CAST("AAEC", "Transformable")` | a transformable attribute's bytes, in base64 |
/// | `CAST({1, "a"}, "NSArray")` | an array of constants |
/// | `CAST("text", "NSString")` | a string |
enum PredicateCast: String, CaseIterable, Sendable {
    case date = "NSDate"
    case number = "NSNumber"
    case decimal = "NSDecimalNumber"
    case string = "NSString"
    case uuid = "UUID"
    case url = "NSURL"
    case data = "NSData"
    case objectID = "ManagedObjectID"
    case transformable = "Transformable"
    case array = "NSArray"

    /// Why a value cannot be cast.
    struct Failure: Error {
        let message: String
    }

    private static let byName: [String: PredicateCast] = {
        var names = Dictionary(uniqueKeysWithValues: allCases.map { ($0.rawValue.lowercased(), $0) })
        let aliases: [String: PredicateCast] = [
            "date": .date, "nsuuid": .uuid, "url": .url, "data": .data, "nsmanagedobjectid": .objectID, "array": .array,
            "string": .string, "decimal": .decimal,
        ]
        names.merge(aliases) { first, _ in first }
        return names
    }()

    /// The type named `name` (in any case, with or without `NS`), or nil.
    init?(name: String) {
        guard name.unicodeScalars.allSatisfy(\.isASCII), let type = Self.byName[name.lowercased()] else { return nil }
        self = type
    }

    /// The supported type names, for messages.
    static let names = allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")

    /// `source` cast to this type.
    func value(of source: PredicateExpression) throws(Failure) -> PredicateValue {
        if self == .array {
            switch source {
            case .constant(.array(let values)): return .array(values)
            case .aggregate(let elements):
                var values: [PredicateValue] = []
                for element in elements {
                    guard case .constant(let value) = element else {
                        throw Failure(message: "an NSArray holds constants only")
                    }
                    values.append(value)
                }
                return .array(values)
            default: throw Failure(message: "an NSArray is written {value, …}")
            }
        }
        guard case .constant(let value) = source else { throw Failure(message: "the value must be a constant") }
        if let result = cast(value) { return result }
        let shown: String = if case .string(let text) = value {
            PredicateFormatter.quoted(text.count > 40 ? String(text.prefix(40)) + "…" : text)
        } else { "a value of type \(value.kindName)" }
        throw Failure(message: "\(shown) is not \(expectation)")
    }

    private var expectation: String {
        switch self {
        case .date: "a number of seconds since 2001"
        case .number: "a number"
        case .decimal: "a decimal number"
        case .string: "a string"
        case .uuid: "a UUID (8-4-4-4-12 hexadecimal digits)"
        case .url: "a URL"
        case .data, .transformable: "base64"
        case .objectID: "a managed object ID's URI"
        case .array: "an array"
        }
    }

    private func cast(_ value: PredicateValue) -> PredicateValue? {
        switch (self, value) {
        case (.date, .date): value
        case (.date, .integer(let seconds)): .date(Date(timeIntervalSinceReferenceDate: Double(seconds)))
        case (.date, .double(let seconds)): .date(Date(timeIntervalSinceReferenceDate: seconds))
        case (.date, .string(let text)):
            Self.number(text).flatMap { number in
                switch number {
                case .integer(let seconds): .date(Date(timeIntervalSinceReferenceDate: Double(seconds)))
                case .double(let seconds): .date(Date(timeIntervalSinceReferenceDate: seconds))
                default: nil
                }
            }
        case (.number, .integer), (.number, .double): value
        case (.number, .string(let text)): Self.number(text)
        case (.decimal, .decimal): value
        case (.decimal, .integer(let integer)): .decimal(Decimal(integer))
        case (.decimal, .string(let text)): Self.decimal(text).map { .decimal($0) }
        case (.string, .string): value
        case (.uuid, .uuid): value
        case (.uuid, .string(let text)): UUID(strictString: text).map { .uuid($0) }
        case (.url, .uri): value
        case (.url, .string(let text)): URL(string: text).map { .uri($0) }
        case (.data, .data), (.transformable, .transformable): value
        case (.data, .string(let text)): Data(base64Encoded: text).map { .data($0) }
        case (.transformable, .string(let text)): Data(base64Encoded: text).map { .transformable($0) }
        case (.transformable, .data(let bytes)): .transformable(bytes)
        case (.objectID, .objectID): value
        case (.objectID, .uri(let url)): ManagedObjectID(uriRepresentation: url).map { .objectID($0) }
        case (.objectID, .string(let text)):
            URL(string: text).flatMap(ManagedObjectID.init(uriRepresentation:)).map { .objectID($0) }
        default: nil
        }
    }

    /// A numeric literal of the format language (`42`, `-1.5e3`, `0x1F`), or `nan`, `inf`,
    /// `-inf`, `infinity`.
    static func number(_ text: String) -> PredicateValue? {
        switch text.lowercased() {
        case "nan": return .double(.nan)
        case "inf", "+inf", "infinity", "+infinity": return .double(.infinity)
        case "-inf", "-infinity": return .double(-.infinity)
        default: break
        }
        guard text.unicodeScalars.count <= 400 else { return nil }
        var lexer = PredicateLexer(text)
        guard let token = try? lexer.next(), case .number(let value) = token.kind,
              let end = try? lexer.next(), case .end = end.kind
        else { return nil }
        return value
    }

    /// `-12.5`, `1e-40`, `340282366920938463463374607431768211455`, `NaN`: a decimal, with
    /// nothing else around it (`Decimal(string:)` alone reads "12abc" as 12).
    static func decimal(_ text: String) -> Decimal? {
        if text == "NaN" || text == "nan" { return .nan }
        let scalars = Array(text.unicodeScalars)
        guard scalars.count <= 400 else { return nil }
        var index = 0
        func digits() -> Int {
            let start = index
            while index < scalars.count, ("0"..."9").contains(scalars[index]) { index += 1 }
            return index - start
        }
        if index < scalars.count, scalars[index] == "-" || scalars[index] == "+" { index += 1 }
        guard digits() > 0 else { return nil }
        if index < scalars.count, scalars[index] == "." {
            index += 1
            guard digits() > 0 else { return nil }
        }
        if index < scalars.count, scalars[index] == "e" || scalars[index] == "E" {
            index += 1
            if index < scalars.count, scalars[index] == "-" || scalars[index] == "+" { index += 1 }
            guard digits() > 0 else { return nil }
        }
        guard index == scalars.count,
              let decimal = Decimal(string: text, locale: Locale(identifier: "en_US_POSIX")), !decimal.isNaN
        else { return nil }
        return decimal
    }

    /// The CAST form of a value that has no literal (nil for one that has).
    static func format(_ value: PredicateValue) -> String? {
        func cast(_ source: String, _ type: PredicateCast) -> String { "CAST(\(source), \"\(type.rawValue)\")" }
        switch value {
        case .double(let number) where !number.isFinite:
            return cast(PredicateFormatter.quoted(nonFinite(number)), .number)
        case .date(let date):
            let seconds = date.timeIntervalSinceReferenceDate
            return cast(seconds.isFinite ? "\(seconds)" : PredicateFormatter.quoted(nonFinite(seconds)), .date)
        case .decimal(let decimal):
            return cast(PredicateFormatter.quoted(decimal.isNaN ? "NaN" : decimal.description), .decimal)
        case .data(let bytes):
            return cast(PredicateFormatter.quoted(bytes.base64EncodedString()), .data)
        case .transformable(let bytes):
            return cast(PredicateFormatter.quoted(bytes.base64EncodedString()), .transformable)
        case .uuid(let uuid):
            return cast(PredicateFormatter.quoted(uuid.uuidString), .uuid)
        case .uri(let url):
            return cast(PredicateFormatter.quoted(url.absoluteString), .url)
        case .objectID(let id):
            return cast(PredicateFormatter.quoted(id.uriRepresentation.absoluteString), .objectID)
        case .array(let values):
            return cast("{" + values.map(PredicateFormatter.format).joined(separator: ", ") + "}", .array)
        default:
            return nil
        }
    }

    private static func nonFinite(_ number: Double) -> String {
        number.isNaN ? "nan" : number < 0 ? "-inf" : "inf"
    }
}

extension PredicateValue {
    /// The kind of value, for messages: `String`, `integer`, `nil`.
    var kindName: String {
        switch self {
        case .null: "nil"
        case .bool: "Bool"
        case .integer: "integer"
        case .double: "Double"
        case .decimal: "Decimal"
        case .string: "String"
        case .date: "Date"
        case .data: "Data"
        case .uuid: "UUID"
        case .uri: "URL"
        case .objectID: "ManagedObjectID"
        case .transformable: "transformable"
        case .array: "array"
        }
    }
}
