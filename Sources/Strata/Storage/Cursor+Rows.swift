import StrataLMDB

extension Cursor {
    /// Moves to row `key` of an entity's row table (keys are big-endian primary keys)
    /// and returns its record, or nil when there is no such row. From `at`, the key the
    /// cursor stands on, a key up to eight entries on is stepped to; any other is
    /// searched for from the tree's root. `at` becomes the key the cursor stands on, or
    /// nil when that is unknown.
    ///
    /// Rows asked for in key order (a fetch's batch of faults, a save's changed objects)
    /// are mostly the next entry or a few on: a step costs a fraction of a search.
    func moveToRow(_ key: UInt64, from at: inout UInt64?) throws(LMDBError) -> UnsafeRawBufferPointer? {
        if let current = at, key > current, key - current <= 8 {
            var steps = key - current
            while steps > 0, let entry = try next() {
                guard entry.key.count == 8 else { break }
                let next = UInt64(bigEndian: entry.key.loadUnaligned(as: UInt64.self))
                at = next
                if next >= key { return next == key ? entry.value : nil }
                steps -= 1
            }
            // Ran off the end (or met a key that is not a row's): search.
        }
        var encoded = key.bigEndian
        let entry = try withUnsafeBytes(of: &encoded) { keyBytes throws(LMDBError) in try seek(to: keyBytes) }
        at = entry == nil ? nil : key
        return entry?.value
    }
}
