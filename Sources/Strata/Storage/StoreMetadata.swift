import Foundation

/// What a store records about itself in its metadata database (`strata.metadata`,
/// DESIGN.md "Store layout"): written once, in one write transaction, when the store is
/// created, and read every time it opens.
///
/// | key           | value                                                          |
/// |---------------|----------------------------------------------------------------|
/// | `uuid`        | the store's UUID, 16 bytes                                     |
/// | `format`      | ``StoreLayout/formatVersion``, 4 bytes big-endian              |
/// | `model`       | the model's ``ManagedObjectModel/versionHash``, UTF-8          |
/// | `schema`      | the ``StoreSchema``, in its own versioned encoding             |
/// | `created`     | the creation date, 8 bytes big-endian (bits of the `Double` seconds since 2001) |
/// | `modelDescription` | the model (``StoredModel``), JSON; absent in stores written before it was kept |
/// | `seq:<Entity>`| the last primary key assigned to the entity, 8 bytes big-endian (absent: none yet) |
struct StoreMetadata: Sendable, Hashable {
    /// The store's UUID: the store identifier of every permanent ``ManagedObjectID`` of it.
    var identifier: UUID
    /// The layout version the store was written with.
    var formatVersion: Int
    /// The version hash of the model the store was created with.
    var modelVersionHash: String
    /// When the store was created.
    var createdAt: Date
    /// The store's entity and field numbers.
    var schema: StoreSchema
    /// The model the store holds, described (nil for a store written before stores kept it).
    var storedModel: StoredModel?

    /// The metadata keys (the table above).
    enum Key {
        /// The store's UUID.
        static let identifier = "uuid"
        /// The store format version.
        static let formatVersion = "format"
        /// The model version hash.
        static let modelVersionHash = "model"
        /// The encoded ``StoreSchema``.
        static let schema = "schema"
        /// The creation date.
        static let createdAt = "created"
        /// The ``StoredModel``.
        static let modelDescription = "modelDescription"

        /// The key of `entityName`'s primary-key sequence.
        static func sequence(entity entityName: String) -> String { "seq:\(entityName)" }
    }

    /// The key/value pairs a new store writes.
    var entries: [(key: String, value: [UInt8])] {
        [
            (Key.identifier, withUnsafeBytes(of: identifier.uuid) { Array($0) }),
            (Key.formatVersion, Array(Self.bigEndian(UInt64(formatVersion)).suffix(4))),
            (Key.modelVersionHash, Array(modelVersionHash.utf8)),
            (Key.schema, schema.encoded()),
            (Key.createdAt, Self.bigEndian(createdAt.timeIntervalSinceReferenceDate.bitPattern)),
        ] + (storedModel.map { [(Key.modelDescription, $0.encoded())] } ?? [])
    }

    /// Decodes the metadata from `value(key)`, the bytes stored under each key.
    ///
    /// Checks the format version first: a store written by a newer format throws
    /// ``MetadataDecodingError`` whose ``MetadataDecodingError/isNewerFormat`` is true,
    /// before anything else is interpreted.
    ///
    /// - Throws: ``MetadataDecodingError`` for a missing or malformed value, or what
    ///   `value` throws.
    static func decode(_ value: (String) throws -> [UInt8]?) throws -> StoreMetadata {
        func required(_ key: String) throws -> [UInt8] {
            guard let bytes = try value(key) else {
                throw MetadataDecodingError(reason: "the metadata has no '\(key)' entry")
            }
            return bytes
        }
        let format = try required(Key.formatVersion)
        guard format.count == 4 else { throw MetadataDecodingError(reason: "the format version is \(format.count) bytes, not 4") }
        let formatVersion = format.reduce(0) { $0 << 8 | Int($1) }
        guard formatVersion <= StoreLayout.formatVersion else {
            throw MetadataDecodingError(
                reason: "it was written in store format \(formatVersion), newer than the format \(StoreLayout.formatVersion) this Strata reads",
                isNewerFormat: true)
        }
        guard formatVersion >= 1 else { throw MetadataDecodingError(reason: "the format version is 0") }

        let uuid = try required(Key.identifier)
        guard uuid.count == 16 else { throw MetadataDecodingError(reason: "the store UUID is \(uuid.count) bytes, not 16") }
        var raw: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &raw) { $0.copyBytes(from: uuid) }

        guard let hash = String(validating: try required(Key.modelVersionHash), as: UTF8.self), !hash.isEmpty else {
            throw MetadataDecodingError(reason: "the model version hash is not text")
        }
        let schema = try required(Key.schema).withUnsafeBytes { bytes throws(MetadataDecodingError) in
            try StoreSchema(decoding: bytes)
        }
        let created = try required(Key.createdAt)
        let seconds = try created.withUnsafeBytes { bytes throws(MetadataDecodingError) in
            Double(bitPattern: try decodeUInt64(bytes, what: "creation date"))
        }
        guard seconds.isFinite else { throw MetadataDecodingError(reason: "the creation date is not a finite number") }
        let storedModel = try value(Key.modelDescription).map { bytes throws(MetadataDecodingError) in try StoredModel(decoding: bytes) }
        return StoreMetadata(
            identifier: UUID(uuid: raw), formatVersion: formatVersion, modelVersionHash: hash,
            createdAt: Date(timeIntervalSinceReferenceDate: seconds), schema: schema, storedModel: storedModel)
    }

    /// The 8 big-endian bytes of `value`.
    static func bigEndian(_ value: UInt64) -> [UInt8] {
        withUnsafeBytes(of: value.bigEndian) { Array($0) }
    }

    /// Decodes 8 big-endian bytes (a sequence, a date).
    static func decodeUInt64(_ bytes: UnsafeRawBufferPointer, what: String) throws(MetadataDecodingError) -> UInt64 {
        guard bytes.count == 8 else { throw MetadataDecodingError(reason: "the \(what) is \(bytes.count) bytes, not 8") }
        return UInt64(bigEndian: bytes.loadUnaligned(as: UInt64.self))
    }
}
