/// How a Strata store lays its data out in LMDB (DESIGN.md, "Store layout").
///
/// One environment per store; one named database per entity holding its rows keyed by
/// big-endian primary key; one per index; one per to-many relationship (its links); a
/// metadata database (store UUID, model version hash, primary-key sequences, format
/// version) and a history database.
/// Database names are prefixed so they cannot collide: entity and attribute names are
/// Swift identifiers, which never contain the separator.
enum StoreLayout {
    /// The version of this layout, recorded in the metadata database.
    static let formatVersion = 1

    /// The metadata database.
    static let metadataDatabase = "strata.metadata"
    /// The persistent-history database: one entry per committed save.
    static let historyDatabase = "strata.history"

    /// The database holding `entity`'s rows.
    static func rowsDatabase(entity: String) -> String { "rows:\(entity)" }

    /// The database holding the index of `entity` on `attribute`.
    static func indexDatabase(entity: String, attribute: String) -> String { "index:\(entity).\(attribute)" }

    /// The database holding the links of `entity`'s to-many relationship `relationship`:
    /// one entry per (owner, destination) pair (see ``StoreFile``).
    static func linksDatabase(entity: String, relationship: String) -> String { "links:\(entity).\(relationship)" }
}

/// A row's primary key: a store-assigned, never-reused positive integer.
///
/// Encoded as 8 big-endian bytes, so LMDB's byte order is numeric order and rows are
/// appended in key order.
struct PrimaryKey: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The numeric value; 0 is never assigned.
    let rawValue: UInt64

    init?(_ rawValue: UInt64) {
        guard rawValue != 0 else { return nil }
        self.rawValue = rawValue
    }

    /// Decodes an encoded key; nil unless it is exactly 8 bytes holding a non-zero value.
    init?(encoded bytes: UnsafeRawBufferPointer) {
        guard bytes.count == 8 else { return nil }
        self.init(UInt64(bigEndian: bytes.loadUnaligned(as: UInt64.self)))
    }

    /// The 8 big-endian bytes stored as the LMDB key.
    var encoded: [UInt8] { withUnsafeBytes(of: rawValue.bigEndian) { Array($0) } }

    /// The key after this one, or nil when the key space is exhausted.
    var successor: PrimaryKey? { rawValue == .max ? nil : PrimaryKey(rawValue + 1) }

    static func < (lhs: PrimaryKey, rhs: PrimaryKey) -> Bool { lhs.rawValue < rhs.rawValue }

    var description: String { "p\(rawValue)" }
}
