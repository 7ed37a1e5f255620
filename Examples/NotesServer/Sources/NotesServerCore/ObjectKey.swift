import Foundation
import Strata

/// How object IDs appear in URLs and JSON: the base64url encoding (RFC 4648 §5, no
/// padding) of the ID's URI representation.
///
/// `x-strata://6F1E7B0C-…/Note/p42` becomes `eC1zdHJhdGE6Ly82RjFF…L05vdGUvcDQy`: only
/// `A–Z a–z 0–9 - _`, so it needs no escaping in a path segment or a query parameter,
/// and it round-trips exactly. The server turns it back with the coordinator's
/// `managedObjectID(forURIRepresentation:)`, which refuses URIs of other stores and
/// entities the model lacks; the route then checks the entity is the one it serves.
public enum ObjectKey {
    /// The URL-safe key of `id`.
    public static func encode(_ id: ManagedObjectID) -> String {
        let bytes = Data(id.uriRepresentation.absoluteString.utf8)
        return bytes.base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// The URI text a key encodes, or nil when `key` is not base64url text of UTF-8.
    static func uriText(_ key: some StringProtocol) -> String? {
        // Object-ID URIs are short; refuse anything long before decoding it.
        guard !key.isEmpty, key.utf8.count <= 512,
              key.unicodeScalars.allSatisfy({ $0.properties.isASCIIHexDigit || ("g"..."z").contains($0)
                  || ("G"..."Z").contains($0) || $0 == "-" || $0 == "_" })
        else { return nil }
        var base64 = key.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        let remainder = base64.utf8.count % 4
        guard remainder != 1 else { return nil }
        if remainder > 0 { base64 += String(repeating: "=", count: 4 - remainder) }
        guard let data = Data(base64Encoded: base64) else { return nil }
        return String(data: data, encoding: .utf8)
    }

    /// The permanent object ID of entity `entityName` that `key` names in `coordinator`'s
    /// stores.
    ///
    /// - Throws: ``APIError`` `400 invalid_id` when `key` is not a key at all; `404
    ///   not_found` when it names another entity, another store or an unsaved object.
    static func decode(
        _ key: some StringProtocol, entityName: String, in coordinator: PersistentStoreCoordinator
    ) throws(APIError) -> ManagedObjectID {
        guard let text = uriText(key), let url = URL(string: text) else {
            throw APIError(.badRequest, code: "invalid_id", message: "'\(key)' is not an object key")
        }
        guard let id = coordinator.managedObjectID(forURIRepresentation: url),
              id.entityName == entityName, !id.isTemporaryID
        else {
            throw APIError(.notFound, code: "not_found", message: "no \(entityName.lowercased()) '\(key)'")
        }
        return id
    }
}
