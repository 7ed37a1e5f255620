/// The registered objects of one context, one per object ID, by ``ObjectIdentityKey``.
///
/// An ``ObjectKeyTable`` of unowned references: pages of neighbouring primary keys, so
/// that a fetch in key order registers, and its objects leaving memory unregister, in
/// memory order.
/// The map never holds an object alive: an object leaving memory removes its own entry
/// (``ManagedObject``'s `deinit` tells its owner), so there are no weak references
/// (whose side tables cost an allocation per object) and no sweeps of dead entries.
/// The context holds the objects that must stay (those with changes, or all of them
/// with ``ObjectGraph/retainsRegisteredObjects``).
///
/// Not thread-safe: it lives in its context's isolation, as its objects do.
struct IdentityMap {
    /// The objects by key, unowned.
    private var table = ObjectKeyTable<Unmanaged<ManagedObject>>()
    /// Objects another one replaced under their key (rare: two objects of one ID in a
    /// context tree before their IDs were reconciled), still owned by the context: kept
    /// here, unowned, so that the context can let go of them (``displacedObjects``).
    private var displaced: [Unmanaged<ManagedObject>] = []

    /// The number of objects.
    var count: Int { table.count }

    /// The object registered under `key`.
    subscript(key: ObjectIdentityKey) -> ManagedObject? {
        table[key]?.takeUnretainedValue()
    }

    /// Registers `object` under `key`, replacing what was there.
    mutating func insert(_ object: ManagedObject, for key: ObjectIdentityKey) {
        let new = Unmanaged.passUnretained(object)
        if let replaced = table.insert(new, for: key), replaced.toOpaque() != new.toOpaque() { displaced.append(replaced) }
    }

    /// Removes the entry of `key`; with `object`, only when it is that object's.
    /// Returns whether an entry went.
    @discardableResult
    mutating func remove(_ key: ObjectIdentityKey, ifObject object: ObjectIdentifier? = nil) -> Bool {
        if let object, !displaced.isEmpty, let at = displaced.firstIndex(where: { Int(bitPattern: $0.toOpaque()) == Int(bitPattern: object) }) {
            displaced.remove(at: at)
        }
        // Compared by address: the object may be in its `deinit`, where it must not be retained.
        return table.removeValue(forKey: key) { registered in
            object.map { Int(bitPattern: registered.toOpaque()) == Int(bitPattern: $0) } ?? true
        } != nil
    }

    /// Makes room for `additional` more objects without growing.
    mutating func reserveCapacity(_ additional: Int) {
        table.reserveCapacity(additional)
    }

    /// Every object, in no particular order (strong references: the array keeps them).
    var objects: [ManagedObject] {
        var result: [ManagedObject] = []
        result.reserveCapacity(count)
        table.forEach { _, object in result.append(object.takeUnretainedValue()) }
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
        table.forEach { key, object in if key.high >> 63 == 0 { result.append(object.takeUnretainedValue()) } }
        return result
    }

    /// Forgets every entry.
    mutating func removeAll() {
        displaced = []
        table.removeAll()
    }
}
