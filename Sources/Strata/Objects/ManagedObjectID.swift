import Foundation

/// The identity of a managed object: which entity, and which row of which store.
///
/// A `Sendable` value, so it is what crosses contexts and tasks (managed objects never
/// do). An object inserted but not yet saved has a *temporary* ID; saving assigns a
/// *permanent* one that names the store's UUID and the row's primary key.
///
/// ``uriRepresentation`` turns an ID into a URL you can keep (in a file, a URL, another
/// process), and the coordinator (`managedObjectID(forURIRepresentation:)`) turns it back, returning nil for a URL that
/// is malformed or names another store:
///
/// ```
/// x-strata://6F1E7B0C-…/Note/p42        a permanent ID
/// x-strata:///Note/t3D2C…               a temporary ID
/// ```
public struct ManagedObjectID: Sendable, Hashable, CustomStringConvertible {
    /// The name of the object's entity.
    public let entityName: String
    let identity: Identity

    enum Identity: Sendable, Hashable {
        case temporary(UUID)
        case permanent(store: UUID, primaryKey: UInt64)
    }

    /// The URL scheme of ``uriRepresentation``.
    static let scheme = "x-strata"

    /// Hashes the row's primary key, or the temporary UUID: what tells IDs apart in
    /// practice. The entity name and store UUID are left to `==` (hashing a string per
    /// lookup cost a tenth of a 100,000-object save in the bulk-import benchmark).
    public func hash(into hasher: inout Hasher) {
        switch identity {
        case .temporary(let uuid): hasher.combine(uuid)
        case .permanent(_, let primaryKey): hasher.combine(primaryKey)
        }
    }

    /// A new temporary ID for an object of `entityName`, unique in this process and beyond.
    init(temporaryFor entityName: String) {
        self.entityName = entityName
        identity = .temporary(TemporaryIDs.next())
    }

    /// The permanent ID of row `primaryKey` of `entityName` in the store `store`.
    init(store: UUID, entityName: String, primaryKey: PrimaryKey) {
        self.entityName = entityName
        identity = .permanent(store: store, primaryKey: primaryKey.rawValue)
    }

    /// The permanent ID of row `primaryKey` of `entityName` in the store numbered
    /// `storeNumber` (``StoreNumbers``).
    init(storeNumber: UInt32, entityName: String, primaryKey: UInt64) {
        self.entityName = entityName
        identity = .permanent(store: StoreNumbers.uuid(storeNumber), primaryKey: primaryKey)
    }

    /// The temporary ID `uuid` of an object of `entityName`.
    init(temporary uuid: UUID, entityName: String) {
        self.entityName = entityName
        identity = .temporary(uuid)
    }

    /// Whether the object has not been saved yet (its ID will change when it is).
    public var isTemporaryID: Bool {
        if case .temporary = identity { return true }
        return false
    }

    /// The UUID of the store the object lives in, or nil for a temporary ID.
    public var storeIdentifier: UUID? {
        if case .permanent(let store, _) = identity { return store }
        return nil
    }

    /// The row's primary key, or nil for a temporary ID.
    var primaryKey: PrimaryKey? {
        if case .permanent(_, let key) = identity { return PrimaryKey(key) }
        return nil
    }

    /// A URL naming the object: the store's UUID, the entity and the primary key (or, for
    /// a temporary ID, the entity and the temporary UUID).
    public var uriRepresentation: URL {
        var components = URLComponents()
        components.scheme = Self.scheme
        switch identity {
        case .temporary(let uuid):
            components.host = ""
            components.path = "/\(entityName)/t\(uuid.uuidString)"
        case .permanent(let store, let key):
            components.host = store.uuidString
            components.path = "/\(entityName)/p\(key)"
        }
        // The components are all valid (a UUID host, an identifier and a number or UUID).
        return components.url ?? URL(fileURLWithPath: "/")
    }

    /// Parses a URL made by ``uriRepresentation``; nil, never a trap, for anything else.
    ///
    /// This checks the URL's shape only: the coordinator also checks that the
    /// store and the entity are its own.
    init?(uriRepresentation url: URL) {
        guard let components = URLComponents(url: url, resolvingAgainstBaseURL: false),
              components.scheme == Self.scheme, components.port == nil, components.user == nil,
              components.password == nil, components.query == nil, components.fragment == nil
        else { return nil }
        // Split by scalars, not Characters: an entity name may start with a combining
        // mark, which would merge with the "/" before it into one Character.
        let parts = components.path.unicodeScalars.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0].isEmpty else { return nil }
        let entity = String(String.UnicodeScalarView(parts[1]))
        guard Self.isEntityName(entity), let marker = parts[2].first else { return nil }
        let rest = String(String.UnicodeScalarView(parts[2].dropFirst()))
        let host = components.host ?? ""
        switch marker {
        case "t":
            guard host.isEmpty, let uuid = UUID(strictString: rest) else { return nil }
            self.init(entityName: entity, identity: .temporary(uuid))
        case "p":
            // Digits only, no sign, no leading zero, in range, never 0.
            guard let store = UUID(strictString: host), !rest.isEmpty,
                  rest.unicodeScalars.allSatisfy({ ("0"..."9").contains($0) }),
                  rest.first != "0", let raw = UInt64(rest), let key = PrimaryKey(raw)
            else { return nil }
            self.init(store: store, entityName: entity, primaryKey: key)
        default:
            return nil
        }
    }

    /// Parses a URL made by ``uriRepresentation`` and checks it against a coordinator's
    /// stores and model: nil when it is malformed, names a store not in `stores`, or an
    /// entity the model lacks (or an abstract one, which has no rows of its own).
    /// A temporary ID is accepted for any entity of the model.
    init?(uriRepresentation url: URL, stores: Set<UUID>, model: ManagedObjectModel) {
        guard let id = ManagedObjectID(uriRepresentation: url),
              let entity = model.entitiesByName[id.entityName], !entity.isAbstract
        else { return nil }
        if let store = id.storeIdentifier, !stores.contains(store) { return nil }
        self = id
    }

    private init(entityName: String, identity: Identity) {
        self.entityName = entityName
        self.identity = identity
    }

    private static func isEntityName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, !("0"..."9").contains(first) else { return false }
        return name.unicodeScalars.allSatisfy { $0 == "_" || $0.properties.isAlphabetic || ("0"..."9").contains($0) }
    }

    /// The URI representation, as text.
    public var description: String { uriRepresentation.absoluteString }
}

extension UUID {
    /// A UUID written exactly as 8-4-4-4-12 hexadecimal digits, nil otherwise.
    /// `UUID(uuidString:)` on Linux also accepts a sign, spaces or "0x" inside a group
    /// (and reads "-FFFFFFF-…" as another UUID), so the shape is checked first.
    init?(strictString text: String) {
        let scalars = Array(text.unicodeScalars)
        guard scalars.count == 36 else { return nil }
        for (index, scalar) in scalars.enumerated() {
            if [8, 13, 18, 23].contains(index) {
                guard scalar == "-" else { return nil }
            } else {
                guard scalar.properties.isASCIIHexDigit else { return nil }
            }
        }
        self.init(uuidString: text)
    }
}

extension ManagedObjectID: Codable {
    /// Decodes an ID from its ``uriRepresentation`` string.
    ///
    /// - Throws: `DecodingError.dataCorrupted` when the string is not an object-ID URI.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        guard let url = URL(string: text), let id = ManagedObjectID(uriRepresentation: url) else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "'\(text)' is not a Strata object-ID URI")
        }
        self = id
    }

    /// Encodes the ID as its ``uriRepresentation`` string.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(uriRepresentation.absoluteString)
    }
}

extension ManagedObjectID {
    /// Saved objects by entity name, then primary key (the order of a scan of the
    /// store), then unsaved ones by their temporary identity: the order results that
    /// tie on every sort descriptor come in.
    func precedesInStoreOrder(_ other: ManagedObjectID) -> Bool {
        switch (primaryKey, other.primaryKey) {
        case (let x?, let y?):
            entityName != other.entityName ? entityName < other.entityName : x < y
        case (.some, nil): true
        case (nil, .some): false
        case (nil, nil): description < other.description
        }
    }
}
