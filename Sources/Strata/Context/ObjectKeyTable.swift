/// A hash table from ``ObjectIdentityKey`` to `Value` for a context's per-object
/// bookkeeping (its identity map, the batch of each fault of a batched fetch).
///
/// Two levels, so that the keys a fetch meets in row order touch memory in order: keys
/// are grouped by their store, entity and primary key divided by ``pageSize``; a small
/// open-addressing table (linear probing, at most three quarters full, deletion by
/// backward shift, a multiplicative mixing of the key's two words instead of
/// `Dictionary`'s SipHash) maps each group to a page of ``pageSize`` value slots in one flat array,
/// and the primary key's low bits pick the slot. A million objects fetched in key order
/// then probe a 3 MB group table (one probe per sixteen objects mostly hits the cache)
/// and fill pages one after another, where one entry per object in a 48 MB table missed
/// the cache and the TLB at every lookup: a fetch of 1,000,000 objects spent a third of
/// its time there. Keys far apart cost a page each (128 bytes of an identity map).
///
/// The keys are row keys and IDs a context made: no input chosen to collide reaches it.
/// Not thread-safe: it lives in its context's isolation.
struct ObjectKeyTable<Value> {
    /// Value slots per page (a power of two).
    static var pageSize: Int { 16 }

    private struct Group {
        /// The key of the group's first slot (primary key rounded down to a page).
        var key: ObjectIdentityKey
        /// The group's page in `slots` (its first slot divided by the page size).
        var page: Int32
        /// Filled slots of the page; 0 for an empty entry of the group table.
        var filled: Int32
    }

    /// The group table (a power of two long, or empty).
    private var groups: [Group] = []
    /// `groups.count - 1`, or 0 when there are no entries.
    private var mask = 0
    /// The number of groups.
    private var groupCount = 0
    /// The group-table entry an insert or removal last used: the next key is mostly of
    /// the same group (keys come in row order), and an entry that still holds that
    /// group's key is that group's, so the hint needs no invalidation.
    private var lastGroup = 0
    /// The pages, one after another.
    private var slots: [Value?] = []
    /// Pages of `slots` no group uses.
    private var freePages: [Int32] = []
    /// The number of keys.
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    /// The value of `key`; setting nil removes it.
    subscript(key: ObjectIdentityKey) -> Value? {
        get {
            guard count > 0, let group = index(ofGroup: Self.groupKey(key)) else { return nil }
            return slots[Self.slot(of: key, page: groups[group].page)]
        }
        set {
            if let newValue { insert(newValue, for: key) } else { removeValue(forKey: key) }
        }
    }

    /// Sets `value` for `key`, replacing what was there; returns the value replaced.
    @discardableResult
    mutating func insert(_ value: Value, for key: ObjectIdentityKey) -> Value? {
        let groupKey = Self.groupKey(key)
        if let group = index(ofGroup: groupKey) {
            lastGroup = group
            let slot = Self.slot(of: key, page: groups[group].page)
            let replaced = slots[slot]
            slots[slot] = value
            if replaced == nil {
                groups[group].filled += 1
                count += 1
            }
            return replaced
        }
        if (groupCount + 1) * 4 > groups.count * 3 { grow(to: max(16, groups.count * 2)) }
        let page = newPage()
        var index = home(groupKey)
        while groups[index].filled != 0 { index = (index + 1) & mask }
        groups[index] = Group(key: groupKey, page: page, filled: 1)
        groupCount += 1
        lastGroup = index
        slots[Self.slot(of: key, page: page)] = value
        count += 1
        return nil
    }

    /// Removes `key`'s value, when `isRemoved` accepts it, and returns it.
    @discardableResult
    mutating func removeValue(forKey key: ObjectIdentityKey, where isRemoved: (Value) -> Bool = { _ in true }) -> Value? {
        guard count > 0, let group = index(ofGroup: Self.groupKey(key)) else { return nil }
        lastGroup = group
        let slot = Self.slot(of: key, page: groups[group].page)
        guard let found = slots[slot], isRemoved(found) else { return nil }
        slots[slot] = nil
        count -= 1
        groups[group].filled -= 1
        if groups[group].filled == 0 { removeGroup(at: group) }
        return found
    }

    /// Makes room for `additional` more keys (of consecutive primary keys) without growing.
    mutating func reserveCapacity(_ additional: Int) {
        let pages = (count + additional + Self.pageSize - 1) / Self.pageSize + 1
        var capacity = max(16, groups.count)
        while pages * 4 > capacity * 3 { capacity *= 2 }
        if capacity > groups.count { grow(to: capacity) }
        // Geometric growth: reserving exactly what a batch needs, batch after batch,
        // would copy the slots each time.
        if pages * Self.pageSize > slots.capacity { slots.reserveCapacity(max(pages * Self.pageSize, 2 * slots.capacity)) }
    }

    /// Sets `value` for each of `keys`.
    mutating func insert(_ value: Value, forEach keys: some Collection<ObjectIdentityKey>) {
        reserveCapacity(keys.count)
        for key in keys { insert(value, for: key) }
    }

    /// Removes the keys `isRemoved` accepts.
    mutating func removeAll(where isRemoved: (ObjectIdentityKey) -> Bool) {
        var kept: [(ObjectIdentityKey, Value)] = []
        forEach { key, value in if !isRemoved(key) { kept.append((key, value)) } }
        removeAll()
        for (key, value) in kept { insert(value, for: key) }
    }

    /// Calls `body` with each key and value, in no particular order.
    func forEach(_ body: (ObjectIdentityKey, Value) throws -> Void) rethrows {
        for group in groups where group.filled != 0 {
            let first = Int(group.page) * Self.pageSize
            for offset in 0..<Self.pageSize {
                if let value = slots[first + offset] {
                    try body(ObjectIdentityKey(high: group.key.high, low: group.key.low | UInt64(offset)), value)
                }
            }
        }
    }

    /// Forgets every key.
    mutating func removeAll() {
        groups = []
        mask = 0
        groupCount = 0
        lastGroup = 0
        slots = []
        freePages = []
        count = 0
    }

    // MARK: Groups and pages

    /// The key of `key`'s group: its primary key rounded down to a page.
    @inline(__always)
    private static func groupKey(_ key: ObjectIdentityKey) -> ObjectIdentityKey {
        ObjectIdentityKey(high: key.high, low: key.low & ~UInt64(pageSize - 1))
    }

    /// `key`'s slot in page `page`.
    @inline(__always)
    private static func slot(of key: ObjectIdentityKey, page: Int32) -> Int {
        Int(page) * pageSize + Int(truncatingIfNeeded: key.low) & (pageSize - 1)
    }

    /// The group-table entry a group key hashes to: its two words multiplied by odd
    /// constants and folded.
    @inline(__always)
    private func home(_ key: ObjectIdentityKey) -> Int {
        let mixed = (key.low &* 0x9E37_79B9_7F4A_7C15) ^ (key.high &* 0xC2B2_AE3D_27D4_EB4F)
        return Int(truncatingIfNeeded: mixed ^ (mixed >> 29)) & mask
    }

    private func index(ofGroup key: ObjectIdentityKey) -> Int? {
        guard groupCount > 0 else { return nil }
        if groups[lastGroup].key == key && groups[lastGroup].filled != 0 { return lastGroup }
        var index = home(key)
        while groups[index].filled != 0 {
            if groups[index].key == key { return index }
            index = (index + 1) & mask
        }
        return nil
    }

    /// A page of empty slots: a freed one, or a new one at the end of `slots`.
    private mutating func newPage() -> Int32 {
        if let page = freePages.popLast() { return page }
        let page = Int32(slots.count / Self.pageSize)
        slots.append(contentsOf: repeatElement(nil, count: Self.pageSize))
        // Room to free every page without growing the list in an object's deinit.
        if freePages.capacity <= Int(page) { freePages.reserveCapacity(max(64, 2 * freePages.capacity)) }
        return page
    }

    /// Removes the (empty) group at `index` and frees its page.
    private mutating func removeGroup(at index: Int) {
        freePages.append(groups[index].page)
        groups[index].filled = 0
        groupCount -= 1
        var index = index
        // Backward shift: pull later entries of the probe run into the hole.
        var next = (index + 1) & mask
        while groups[next].filled != 0 {
            let home = home(groups[next].key)
            // Move it when its home is not in (index, next] (cyclically).
            let between = index <= next ? (home > index && home <= next) : (home > index || home <= next)
            if !between {
                groups[index] = groups[next]
                groups[next].filled = 0
                index = next
            }
            next = (next + 1) & mask
        }
        if groupCount == 0 {
            // Nothing left: let the pages go.
            slots = []
            freePages = []
        }
    }

    private mutating func grow(to capacity: Int) {
        let old = groups
        groups = Array(repeating: Group(key: ObjectIdentityKey(high: 0, low: 0), page: 0, filled: 0), count: capacity)
        mask = capacity - 1
        lastGroup = 0
        for group in old where group.filled != 0 {
            var index = home(group.key)
            while groups[index].filled != 0 { index = (index + 1) & mask }
            groups[index] = group
        }
    }
}
