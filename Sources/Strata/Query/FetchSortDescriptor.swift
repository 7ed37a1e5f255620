import Foundation

/// One key a fetch sorts by: an attribute, or a key path through to-one relationships
/// (`folder.name`), ascending or descending.
///
/// Objects with equal keys keep a stable order: by their primary key. Strings compare
/// by their UTF-8 bytes unless a ``Comparison`` says otherwise; nil sorts before every
/// value when ascending.
///
/// Name the key with a string, or with a key path of a typed subclass:
///
/// ```swift
/// request.sortDescriptors = [
///     FetchSortDescriptor(\Note.folder?.name, comparison: .localized),
///     FetchSortDescriptor(\Note.priority, ascending: false),
///     FetchSortDescriptor(key: "title"),
/// ]
/// ```
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

    /// The key path, components separated by dots (empty for a descriptor made from a
    /// key path that names no stored property).
    public let key: String
    /// Whether smaller values come first.
    public let ascending: Bool
    /// How strings compare.
    public let comparison: Comparison

    /// Why the descriptor cannot be used: its key path names no stored property. Thrown
    /// when a request using it runs.
    let deferredError: FetchPredicateError?
    /// The key path's components (``key`` split at its dots).
    let components: [String]

    /// Sorts by `key` (an attribute, or a key path through to-one relationships).
    public init(key: String, ascending: Bool = true, comparison: Comparison = .literal) {
        self.key = key
        self.ascending = ascending
        self.comparison = comparison
        deferredError = nil
        components = Self.components(of: key)
    }

    /// Sorts by the attribute `keyPath` reads: one of `Root`'s, or one reached through
    /// to-one relationships (`\Note.folder?.name`).
    ///
    /// ```swift
    /// FetchSortDescriptor(\Note.title, comparison: .caseInsensitive)   // key "title"
    /// FetchSortDescriptor(\Note.folder?.name, ascending: false)        // key "folder.name"
    /// ```
    ///
    /// A key path that reads no `@Attribute` (a computed property of plain Swift, say)
    /// cannot be refused here: the descriptor carries a ``FetchPredicateError`` of kind
    /// ``FetchPredicateError/Kind/unsupported``, thrown when a request using it runs. A
    /// key path through a to-many relationship (`\Note.tags.count`) throws
    /// ``StrataError/unknownKey(key:entity:)`` then, as the same key as a string does.
    public init<Root: ManagedObject, Value: AttributeStorable>(
        _ keyPath: KeyPath<Root, Value>, ascending: Bool = true, comparison: Comparison = .literal
    ) {
        self.ascending = ascending
        self.comparison = comparison
        do throws(FetchPredicateError) {
            let names = try KeyPathNames.components(of: keyPath)
            key = names.joined(separator: ".")
            components = Self.components(of: key)
            deferredError = nil
        } catch {
            key = ""
            components = [""]
            deferredError = error
        }
    }

    /// `key` split at its dots.
    private static func components(of key: String) -> [String] {
        key.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
    }

    /// `title ASC`; `<predicate error: …> ASC` for a descriptor carrying an error.
    public var description: String {
        if let deferredError { return "<\(deferredError)> \(ascending ? "ASC" : "DESC")" }
        let options: String = switch comparison {
        case .literal: ""
        case .caseInsensitive: "[c]"
        case .localized: "[cd]"
        }
        return "\(key)\(options) \(ascending ? "ASC" : "DESC")"
    }
}
