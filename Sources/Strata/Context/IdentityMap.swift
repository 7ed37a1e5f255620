/// The registered objects of one context, one per object ID, by ``ObjectIdentityKey``.
///
/// An open-addressing hash table (linear probing, at most three quarters full, deletion
/// by backward shift) of 24-byte entries: the two key words and an unowned reference.
/// The map never holds an object alive: an object leaving memory removes its own entry
/// (``ManagedObject``'s `deinit` tells its owner), so there are no weak references
/// (whose side tables cost an allocation per object) and no sweeps of dead entries.
/// The context holds the objects that must stay (those with changes, or all of them
/// with ``ObjectGraph/retainsRegisteredObjects``).
///
/// Not thread-safe: it lives in its context's isolation, as its objects do.
struct IdentityMap {
    private struct Entry {
        var high: UInt64
        var low: UInt64
        /// Nil for an empty entry.
        var object: Unmanaged<ManagedObject>?
    }

    private var entries: [Entry] = []
    /// `entries.count - 1` (a power of two minus one), or 0 when there are no entries.
    private var mask = 0
    /// The number of objects.
    private(set) var count = 0
    /// Objects another one replaced under their key (rare: two objects of one ID in a
    /// context tree before their IDs were reconciled), still owned by the context: kept
    /// here, unowned, so that the context can let go of them (``displacedObjects``).
    private var displaced: [Unmanaged<ManagedObject>] = []

    /// The object registered under `key`.
    subscript(key: ObjectIdentityKey) -> ManagedObject? {
        guard count > 0, let index = index(of: key) else { return nil }
        return entries[index].object?.takeUnretainedValue()
    }

    /// Registers `object` under `key`, replacing what was there.
    mutating func insert(_ object: ManagedObject, for key: ObjectIdentityKey) {
        if (count + 1) * 4 > entries.count * 3 { grow(to: max(16, entries.count * 2)) }
        var index = home(key.high, key.low)
        while let existing = entries[index].object {
            if entries[index].high == key.high && entries[index].low == key.low {
                if existing.toOpaque() != Unmanaged.passUnretained(object).toOpaque() {
                    displaced.append(existing)
                    entries[index].object = .passUnretained(object)
                }
                return
            }
            index = (index + 1) & mask
        }
        entries[index] = Entry(high: key.high, low: key.low, object: .passUnretained(object))
        count += 1
    }

    /// Removes the entry of `key`; with `object`, only when it is that object's.
    /// Returns whether an entry went.
    @discardableResult
    mutating func remove(_ key: ObjectIdentityKey, ifObject object: ObjectIdentifier? = nil) -> Bool {
        if let object, !displaced.isEmpty, let at = displaced.firstIndex(where: { Int(bitPattern: $0.toOpaque()) == Int(bitPattern: object) }) {
            displaced.remove(at: at)
        }
        guard count > 0, var index = index(of: key) else { return false }
        // Compared by address: the object may be in its `deinit`, where it must not be retained.
        if let object, entries[index].object.map({ Int(bitPattern: $0.toOpaque()) }) != Int(bitPattern: object) { return false }
        entries[index].object = nil
        count -= 1
        // Backward shift: pull later entries of the probe run into the hole.
        var next = (index + 1) & mask
        while let moved = entries[next].object {
            let home = home(entries[next].high, entries[next].low)
            // Move it when its home is not in (index, next] (cyclically).
            let between = index <= next ? (home > index && home <= next) : (home > index || home <= next)
            if !between {
                entries[index] = Entry(high: entries[next].high, low: entries[next].low, object: moved)
                entries[next].object = nil
                index = next
            }
            next = (next + 1) & mask
        }
        return true
    }

    /// Makes room for `additional` more objects without growing.
    mutating func reserveCapacity(_ additional: Int) {
        var capacity = max(16, entries.count)
        while (count + additional) * 4 > capacity * 3 { capacity *= 2 }
        if capacity > entries.count { grow(to: capacity) }
    }

    /// Every object, in no particular order (strong references: the array keeps them).
    var objects: [ManagedObject] {
        var result: [ManagedObject] = []
        result.reserveCapacity(count)
        for entry in entries { if let object = entry.object { result.append(object.takeUnretainedValue()) } }
        return result
    }

    /// The objects another one replaced under their key since the last ``removeAll()``
    /// that have not left memory (strong references: the array keeps them).
    var displacedObjects: [ManagedObject] {
        displaced.map { $0.takeUnretainedValue() }
    }

    /// The objects registered under temporary keys.
    var temporaryObjects: [ManagedObject] {
        var result: [ManagedObject] = []
        for entry in entries where entry.high >> 63 == 0 { if let object = entry.object { result.append(object.takeUnretainedValue()) } }
        return result
    }

    /// Forgets every entry.
    mutating func removeAll() {
        displaced = []
        entries = []
        mask = 0
        count = 0
    }

    /// The entry a key hashes to.
    @inline(__always)
    private func home(_ high: UInt64, _ low: UInt64) -> Int {
        let mixed = (low &* 0x9E37_79B9_7F4A_7C15) ^ (high &* 0xC2B2_AE3D_27D4_EB4F)
        return Int(truncatingIfNeeded: mixed ^ (mixed >> 29)) & mask
    }

    private func index(of key: ObjectIdentityKey) -> Int? {
        var index = home(key.high, key.low)
        while entries[index].object != nil {
            if entries[index].high == key.high && entries[index].low == key.low { return index }
            index = (index + 1) & mask
        }
        return nil
    }

    private mutating func grow(to capacity: Int) {
        let old = entries
        entries = Array(repeating: Entry(high: 0, low: 0, object: nil), count: capacity)
        mask = capacity - 1
        count = 0
        for entry in old {
            guard let object = entry.object else { continue }
            var index = home(entry.high, entry.low)
            while entries[index].object != nil { index = (index + 1) & mask }
            entries[index] = Entry(high: entry.high, low: entry.low, object: object)
            count += 1
        }
    }
}
