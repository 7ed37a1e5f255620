import Foundation
import Synchronization
internal import StrataLocks

/// The key an object is registered under in its context's identity map: two words, so
/// that a lookup hashes and compares integers (never an ``ManagedObjectID``'s entity name
/// and store UUID).
///
/// A permanent ID becomes its store's number (``StoreNumbers``), its entity name's
/// number (``EntityNames``) and its primary key, with the top bit of `high` set; a
/// temporary ID becomes its UUID with that bit cleared.
struct ObjectIdentityKey: Hashable {
    var high: UInt64
    var low: UInt64

    /// The key of the two words `high` and `low`.
    @inline(__always)
    init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// The key of row `primaryKey` of the entity named by `entity` in store `store`.
    @inline(__always)
    init(store: UInt32, entity: UInt32, primaryKey: UInt64) {
        high = 1 << 63 | UInt64(store) << 32 | UInt64(entity)
        low = primaryKey
    }

    /// The store number of a permanent ID's key.
    var storeNumber: UInt32 { UInt32(truncatingIfNeeded: high >> 32) & 0x7FFF_FFFF }

    /// The key of the temporary ID `uuid`.
    init(temporary uuid: UUID) {
        let (high, low) = withUnsafeBytes(of: uuid.uuid) { bytes in
            (UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: 0, as: UInt64.self)),
             UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self)))
        }
        self.high = high & ~(1 << 63)
        self.low = low
    }

    /// The key of the temporary ID this process made from `serial` (``TemporaryIDs``):
    /// the key of its UUID, made without the UUID.
    init(temporarySerial serial: UInt64) {
        high = TemporaryIDs.prefix & ~(1 << 63)
        low = serial
    }

    /// The key of `id`.
    init(_ id: ManagedObjectID) {
        switch id.identity {
        case .temporary(let uuid):
            self.init(temporary: uuid)
        case .permanent(let store, let key):
            self.init(store: StoreNumbers.number(for: store), entity: EntityNames.number(for: id.entityName), primaryKey: key)
        }
    }

}

/// Small numbers for store UUIDs, so that an object keeps its store in 4 bytes: numbers
/// start at 1 and are never reused in the process. Reading a number's UUID takes no lock.
enum StoreNumbers {
    // @unchecked Sendable because `buffer` is written only with the table's lock held,
    // each slot before its number is handed out, and never freed (see `published`).
    private struct Table: @unchecked Sendable {
        var numbers: [UUID: UInt32] = [:]
        var count = 0
        var capacity = 0
        /// `capacity` UUIDs; index `n - 1` holds number `n`. Never freed: when it fills,
        /// a larger copy is published and the old one stays valid for readers.
        var buffer: UnsafeMutablePointer<UUID>?
    }

    private static let table = LockedValue(Table())
    /// The address of the current buffer, for lock-free reads.
    private static let published = Atomic<UInt>(0)

    /// The number of `store`, made when first asked for.
    static func number(for store: UUID) -> UInt32 {
        table.withLock { table in
            if let known = table.numbers[store] { return known }
            if table.count == table.capacity {
                let capacity = max(64, table.capacity * 2)
                let buffer = UnsafeMutablePointer<UUID>.allocate(capacity: capacity)
                if let old = table.buffer { buffer.initialize(from: old, count: table.count) }
                table.buffer = buffer
                table.capacity = capacity
                published.store(UInt(bitPattern: buffer), ordering: .releasing)
            }
            table.buffer!.advanced(by: table.count).initialize(to: store)
            table.count += 1
            let number = UInt32(table.count)
            table.numbers[store] = number
            return number
        }
    }

    /// The UUID of `number` (made by ``number(for:)``).
    @inline(__always)
    static func uuid(_ number: UInt32) -> UUID {
        let buffer = UnsafePointer<UUID>(bitPattern: published.load(ordering: .acquiring))!
        return buffer[Int(number) - 1]
    }
}

/// Small numbers for entity names, process-wide, so that identity keys hold an entity in
/// 4 bytes whatever model (or none) its description comes from.
enum EntityNames {
    private static let numbers = LockedValue<[String: UInt32]>([:])

    /// The number of `name`, made when first asked for.
    static func number(for name: String) -> UInt32 {
        numbers.withLock { numbers in
            if let known = numbers[name] { return known }
            let number = UInt32(numbers.count + 1)
            numbers[name] = number
            return number
        }
    }
}

/// The UUIDs of temporary IDs: 8 random bytes drawn once per process, then a counter.
///
/// Unique in this process (the counter) and, with overwhelming odds, beyond it (the
/// random half). `UUID()` reads the system's random source on every call, which cost
/// a third of inserting an object in the bulk-import benchmark. An object keeps only its
/// counter value (its serial); its UUID is made when its ID is asked for.
enum TemporaryIDs {
    static let prefix: UInt64 = {
        let random = UUID().uuid
        return withUnsafeBytes(of: random) { UInt64(bigEndian: $0.loadUnaligned(as: UInt64.self)) }
    }()
    private static let counter = Atomic<UInt64>(0)

    /// The next serial (never 0).
    static func nextSerial() -> UInt64 {
        counter.add(1, ordering: .relaxed).newValue
    }

    /// The next temporary UUID.
    static func next() -> UUID {
        uuid(serial: nextSerial())
    }

    /// The UUID of `serial`.
    static func uuid(serial: UInt64) -> UUID {
        var bytes = (prefix.bigEndian, serial.bigEndian)
        return withUnsafeBytes(of: &bytes) { raw in
            UUID(uuid: raw.loadUnaligned(as: uuid_t.self))
        }
    }

    /// The serial a UUID of this process was made from; nil for any other UUID.
    static func serial(of uuid: UUID) -> UInt64? {
        let (high, low) = withUnsafeBytes(of: uuid.uuid) { bytes in
            (UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: 0, as: UInt64.self)),
             UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self)))
        }
        guard high == prefix, low != 0 else { return nil }
        return low
    }
}
