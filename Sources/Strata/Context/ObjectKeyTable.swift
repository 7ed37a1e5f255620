/// A hash table from ``ObjectIdentityKey`` to `Value` for a context's per-object
/// bookkeeping (its identity map, the batch of each fault of a batched fetch): open
/// addressing with linear
/// probing, at most three quarters full, deletion by backward shift, and the cheap
/// mixing hash of ``IdentityMap`` instead of `Dictionary`'s SipHash, which cost more
/// than the rest of a fault's bookkeeping. The keys are row keys and IDs a context made:
/// no input chosen to collide reaches it.
///
/// Not thread-safe: it lives in its context's isolation.
struct ObjectKeyTable<Value> {
    private struct Entry {
        var key: ObjectIdentityKey
        /// Nil for an empty entry.
        var value: Value?
    }

    private var entries: [Entry] = []
    /// `entries.count - 1` (a power of two minus one), or 0 when there are no entries.
    private var mask = 0
    /// The number of keys.
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    /// The value of `key`; setting nil removes it.
    subscript(key: ObjectIdentityKey) -> Value? {
        get {
            guard count > 0, let index = index(of: key) else { return nil }
            return entries[index].value
        }
        set {
            if let newValue { insert(newValue, for: key) } else { removeValue(forKey: key) }
        }
    }

    /// Sets `value` for `key`, replacing what was there; returns the value replaced.
    @discardableResult
    mutating func insert(_ value: Value, for key: ObjectIdentityKey) -> Value? {
        if (count + 1) * 4 > entries.count * 3 { grow(to: max(16, entries.count * 2)) }
        var index = home(key)
        while let existing = entries[index].value {
            if entries[index].key == key {
                entries[index].value = value
                return existing
            }
            index = (index + 1) & mask
        }
        entries[index] = Entry(key: key, value: value)
        count += 1
        return nil
    }

    /// Removes `key`'s value, when `isRemoved` accepts it, and returns it.
    @discardableResult
    mutating func removeValue(forKey key: ObjectIdentityKey, where isRemoved: (Value) -> Bool = { _ in true }) -> Value? {
        guard count > 0, var index = index(of: key), let found = entries[index].value, isRemoved(found) else { return nil }
        let removed: Value? = found
        entries[index].value = nil
        count -= 1
        // Backward shift: pull later entries of the probe run into the hole.
        var next = (index + 1) & mask
        while entries[next].value != nil {
            let home = home(entries[next].key)
            // Move it when its home is not in (index, next] (cyclically).
            let between = index <= next ? (home > index && home <= next) : (home > index || home <= next)
            if !between {
                entries[index] = entries[next]
                entries[next].value = nil
                index = next
            }
            next = (next + 1) & mask
        }
        return removed
    }

    /// Makes room for `additional` more keys without growing.
    mutating func reserveCapacity(_ additional: Int) {
        var capacity = max(16, entries.count)
        while (count + additional) * 4 > capacity * 3 { capacity *= 2 }
        if capacity > entries.count { grow(to: capacity) }
    }

    /// Removes the keys `isRemoved` accepts.
    mutating func removeAll(where isRemoved: (ObjectIdentityKey) -> Bool) {
        let old = entries
        entries = []
        mask = 0
        count = 0
        for entry in old {
            guard let value = entry.value else { continue }
            if !isRemoved(entry.key) { insert(value, for: entry.key) }
        }
    }

    /// Calls `body` with each key and value, in no particular order.
    func forEach(_ body: (ObjectIdentityKey, Value) throws -> Void) rethrows {
        for entry in entries { if let value = entry.value { try body(entry.key, value) } }
    }

    /// Forgets every key.
    mutating func removeAll() {
        entries = []
        mask = 0
        count = 0
    }

    /// The entry a key hashes to (the mixing of ``IdentityMap``).
    @inline(__always)
    private func home(_ key: ObjectIdentityKey) -> Int {
        let mixed = (key.low &* 0x9E37_79B9_7F4A_7C15) ^ (key.high &* 0xC2B2_AE3D_27D4_EB4F)
        return Int(truncatingIfNeeded: mixed ^ (mixed >> 29)) & mask
    }

    private func index(of key: ObjectIdentityKey) -> Int? {
        var index = home(key)
        while entries[index].value != nil {
            if entries[index].key == key { return index }
            index = (index + 1) & mask
        }
        return nil
    }

    private mutating func grow(to capacity: Int) {
        let old = entries
        entries = Array(repeating: Entry(key: ObjectIdentityKey(store: 0, entity: 0, primaryKey: 0), value: nil), count: capacity)
        mask = capacity - 1
        count = 0
        for entry in old {
            guard entry.value != nil else { continue }
            var index = home(entry.key)
            while entries[index].value != nil { index = (index + 1) & mask }
            entries[index] = entry
            count += 1
        }
    }
}
