import Foundation
import Hummingbird
import Strata

/// The query parameters of `GET /notes` and `GET /notes/live`, checked:
/// `folder=<key>&q=<text>&sort=<keys>&limit=<n>&offset=<n>`.
///
/// - `folder`: only the notes of that folder (`none`: notes in no folder).
/// - `q`: notes whose title or body contains the text (case- and diacritic-insensitive).
/// - `sort`: comma-separated keys among `title`, `created`, `updated`, `priority`, each
///   optionally prefixed with `-` for descending; default `-created`. Ties keep the
///   store's order (by object ID), so pages never overlap or skip.
/// - `limit`: 1 to 500 (default 50); `offset`: 0 or more (default 0).
///
/// Anything else, a repeated parameter or a bad value is a `400 invalid_parameter`.
/// User text only ever reaches the predicate as a bound `%@` argument: the format string
/// is assembled from constant fragments.
struct NoteQuery {
    /// Sort keys a client may use.
    static let sortableKeys: Set<String> = ["title", "created", "updated", "priority"]
    /// The largest page.
    static let maximumLimit = 500

    /// The folder filter: nil none; `.some(nil)` notes in no folder.
    var folder: ManagedObjectID??
    /// The search text.
    var text: String?
    /// The order.
    var sortDescriptors: [FetchSortDescriptor] = [FetchSortDescriptor(key: "created", ascending: false)]
    /// The page size.
    var limit = 50
    /// The page start.
    var offset = 0

    /// Parses the query of `request`; `allowsPaging` false refuses `limit` and `offset`.
    init(_ request: Request, coordinator: PersistentStoreCoordinator, allowsPaging: Bool = true) throws(APIError) {
        var seen: Set<String> = []
        for (rawName, rawValue) in request.uri.queryParameters {
            let name = String(rawName), value = String(rawValue)
            guard seen.insert(name).inserted else { throw Self.invalid(name, "is repeated") }
            switch name {
            case "folder":
                folder = value == "none"
                    ? .some(nil) : .some(try ObjectKey.decode(value, entityName: "Folder", in: coordinator))
            case "q":
                guard !value.isEmpty, value.count <= 200 else { throw Self.invalid(name, "must be 1 to 200 characters") }
                text = value
            case "sort":
                sortDescriptors = try Self.sortDescriptors(value)
            case "limit" where allowsPaging:
                guard let number = Int(value), (1...Self.maximumLimit).contains(number) else {
                    throw Self.invalid(name, "must be an integer from 1 to \(Self.maximumLimit)")
                }
                limit = number
            case "offset" where allowsPaging:
                guard let number = Int(value), number >= 0 else { throw Self.invalid(name, "must be an integer ≥ 0") }
                offset = number
            default:
                throw Self.invalid(name, "is not a parameter of this route")
            }
        }
    }

    /// `title,-created` as sort descriptors.
    static func sortDescriptors(_ value: String) throws(APIError) -> [FetchSortDescriptor] {
        var keys: Set<String> = []
        var descriptors: [FetchSortDescriptor] = []
        for item in value.split(separator: ",", omittingEmptySubsequences: false) {
            let descending = item.hasPrefix("-")
            let key = String(descending ? item.dropFirst() : item)
            guard sortableKeys.contains(key) else {
                throw invalid("sort", "'\(item)' is not one of title, created, updated, priority (prefix - for descending)")
            }
            guard keys.insert(key).inserted else { throw invalid("sort", "'\(key)' is listed twice") }
            descriptors.append(FetchSortDescriptor(key: key, ascending: !descending))
        }
        return descriptors
    }

    /// The predicate: constant fragments joined with AND, every user value bound as an
    /// argument.
    func predicate() throws -> FetchPredicate? {
        var clauses: [String] = []
        var arguments: [any Sendable] = []
        switch folder {
        case .some(.some(let id)): clauses.append("folder == %@"); arguments.append(id)
        case .some(.none): clauses.append("folder == nil")
        case .none: break
        }
        if let text {
            clauses.append("(title CONTAINS[cd] %@ OR body CONTAINS[cd] %@)")
            arguments.append(text)
            arguments.append(text)
        }
        guard !clauses.isEmpty else { return nil }
        return try FetchPredicate(format: clauses.joined(separator: " AND "), argumentArray: arguments)
    }

    /// The request for the matching notes, without paging.
    func fetchRequest() throws -> FetchRequest<Note> {
        var request = FetchRequest<Note>()
        request.predicate = try predicate()
        request.sortDescriptors = sortDescriptors
        return request
    }

    private static func invalid(_ name: String, _ problem: String) -> APIError {
        APIError(.badRequest, code: "invalid_parameter", message: "query parameter '\(name)' \(problem)")
    }
}
