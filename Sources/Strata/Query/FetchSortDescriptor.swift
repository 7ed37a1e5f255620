import Foundation

/// One key a fetch sorts by: an attribute, or a key path through to-one relationships
/// (`folder.name`), ascending or descending.
///
/// Objects with equal keys keep a stable order: by their primary key. Strings compare
/// by their UTF-8 bytes unless a ``Comparison`` says otherwise; nil sorts before every
/// value when ascending.
public struct FetchSortDescriptor: Sendable, Hashable, CustomStringConvertible {
    /// How strings are compared.
    public enum Comparison: Sendable, Hashable {
        /// By UTF-8 bytes (the order of an index on the attribute).
        case literal
        /// Ignoring case.
        case caseInsensitive
        /// Ignoring case and diacritics, as people expect in a list of names.
        case localized
    }

    /// The key path, components separated by dots.
    public let key: String
    /// Whether smaller values come first.
    public let ascending: Bool
    /// How strings compare.
    public let comparison: Comparison

    /// Sorts by `key` (an attribute, or a key path through to-one relationships).
    public init(key: String, ascending: Bool = true, comparison: Comparison = .literal) {
        self.key = key
        self.ascending = ascending
        self.comparison = comparison
    }

    /// The key path's components.
    var components: [String] { key.split(separator: ".", omittingEmptySubsequences: false).map(String.init) }

    /// `title ASC`.
    public var description: String {
        let options: String = switch comparison {
        case .literal: ""
        case .caseInsensitive: "[c]"
        case .localized: "[cd]"
        }
        return "\(key)\(options) \(ascending ? "ASC" : "DESC")"
    }
}
