/// A context's unsaved changes: which objects its next save inserts, writes, deletes and
/// checks, and what a rollback takes back. The ``ObjectGraph`` orchestrates: it moves the
/// objects through their named transitions and records each here; the identity map
/// (``IdentityMap``) knows which object is which row and holds none of them, while this
/// set holds every object with a change strongly until the save or rollback.
///
/// Bookkeeping only, with no store and no notification: not thread-safe, it lives in its
/// context's isolation, as its objects do.
struct PendingChanges {
    /// Inserted objects, in insertion order.
    private(set) var inserted: [ManagedObject] = []
    /// Deleted objects (saved ones: an inserted object that is deleted simply leaves), in
    /// deletion order.
    private(set) var deleted: [ManagedObject] = []
    /// Objects changed since the last save, deleted ones included, in the order they
    /// first changed: an object is in the set while it carries
    /// ``ObjectBits/pendingChange``, and listed once while it carries
    /// ``ObjectBits/pendingListed`` (an object that left the set keeps its entry until
    /// the list is compacted, so that leaving costs no search). No hashing per change,
    /// and objects changed in key order (a fetch's, a child's save's) stay in it, so
    /// that ``updated`` needs no sort.
    private var changedList: [ManagedObject] = []
    /// How many objects are in the changed set.
    private(set) var changedCount = 0
    /// How many of them are of entities with relationships (none: no save need look
    /// for relationship changes among them).
    private var changedWithRelationshipsCount = 0
    /// Deleted objects whose delete rules have not run yet.
    var pendingDeletes: [ManagedObject] = []
    /// Stores chosen with `assign(_:to:)` for inserted objects.
    private(set) var assignedStores: [ObjectIdentifier: PersistentStore] = [:]
    /// Unchanged objects whose stored rows the next save checks
    /// (``ManagedObjectContext/detectConflicts(for:)``).
    var conflictChecks: [ObjectIdentifier: ManagedObject] = [:]
    /// Deleted objects whose rows were already gone when their faults fired: the next save
    /// or reset discards them without writing or validating anything.
    var vanished: Set<ObjectIdentifier> = []
    /// Edits asked for through setters that cannot throw and that did not happen (a read
    /// they needed failed with a storage error, or a value cannot be stored): the next
    /// save throws the first one's error, until the property is set again, the object is
    /// deleted, or a rollback or reset.
    private(set) var failedEdits: [(object: ManagedObject, key: String, error: StrataError)] = []

    // MARK: Recording

    /// `object` was inserted.
    mutating func recordInsert(_ object: ManagedObject) {
        inserted.append(object)
    }

    /// `object`, inserted since the last save, no longer is (it was deleted).
    mutating func removeInsert(_ object: ManagedObject) {
        inserted.removeAll { $0 === object }
    }

    /// `object` (saved before) was deleted: it is written as a deletion, and its delete
    /// rules run.
    mutating func recordDelete(_ object: ManagedObject) {
        deleted.append(object)
        pendingDeletes.append(object)
        addChange(object)
    }

    /// `object`'s row was gone when its fault fired: it is deleted here, and the next save
    /// or reset discards it without writing anything (no delete rules: it has no values).
    mutating func recordVanished(_ object: ManagedObject) {
        let key = ObjectIdentifier(object)
        vanished.insert(key)
        if !deleted.contains(where: { $0 === object }) { deleted.append(object) }
        addChange(object)
    }

    /// The deletion of `object` is taken back. Returns whether it was a saved object's
    /// deletion (otherwise the object was inserted since the last save).
    mutating func removeDelete(_ object: ManagedObject) -> Bool {
        let wasSaved = deleted.contains { $0 === object }
        deleted.removeAll { $0 === object }
        pendingDeletes.removeAll { $0 === object }
        return wasSaved
    }

    /// `object` changed (held until the save; the same object again is no change).
    mutating func recordChange(_ object: ManagedObject) {
        addChange(object)
    }

    /// `object` joins the changed set (once).
    private mutating func addChange(_ object: ManagedObject) {
        let bits = object._bits
        guard bits & ObjectBits.pendingChange == 0 else { return }
        if bits & ObjectBits.pendingListed == 0 { changedList.append(object) }
        object._bits = bits | ObjectBits.pendingChange | ObjectBits.pendingListed
        changedCount += 1
        if !object._entity.relationships.isEmpty { changedWithRelationshipsCount += 1 }
    }

    /// `object` leaves the changed set. Its entry stays until more than half the list
    /// is stale, then the list is compacted (each removal costs constant time on
    /// average, and the list never holds more than twice the set).
    private mutating func removeChange(_ object: ManagedObject) {
        guard object._bits & ObjectBits.pendingChange != 0 else { return }
        object._bits &= ~ObjectBits.pendingChange
        changedCount -= 1
        if !object._entity.relationships.isEmpty { changedWithRelationshipsCount -= 1 }
        guard changedList.count > 2 * changedCount + 16 else { return }
        changedList.removeAll { entry in
            guard entry._bits & ObjectBits.pendingChange == 0 else { return false }
            entry._bits &= ~ObjectBits.pendingListed
            return true
        }
    }

    /// The objects in the changed set, in the order they first changed.
    var changed: [ManagedObject] {
        changedList.count == changedCount ? changedList : changedList.filter { $0._bits & ObjectBits.pendingChange != 0 }
    }

    /// `object` is saved to `store` (``ObjectGraph/assign(_:to:)``).
    mutating func assign(_ object: ManagedObject, to store: PersistentStore) {
        assignedStores[ObjectIdentifier(object)] = store
    }

    /// An edit of `object`'s `key` that did not happen: the next save fails with `error`.
    mutating func recordFailedEdit(_ object: ManagedObject, key: String, error: StrataError) {
        removeFailedEdit(object, key: key)
        failedEdits.append((object, key, error))
    }

    /// The failed edit of `object`'s `key` no longer matters (the property was set).
    mutating func removeFailedEdit(_ object: ManagedObject, key: String) {
        if !failedEdits.isEmpty { failedEdits.removeAll { $0.object === object && $0.key == key } }
    }

    /// No failed edit of `object` matters any more (it was deleted).
    mutating func removeFailedEdits(of object: ManagedObject) {
        if !failedEdits.isEmpty { failedEdits.removeAll { $0.object === object } }
    }

    /// Whether an edit of `object` failed (see ``recordFailedEdit(_:key:error:)``).
    func hasFailedEdits(of object: ManagedObject) -> Bool {
        !failedEdits.isEmpty && failedEdits.contains { $0.object === object }
    }

    /// `object` (saved before) is deleted by an undo or redo: written as a deletion, with
    /// no delete rules (the undo restores its relationships itself).
    mutating func recordDeleteWithoutRules(_ object: ManagedObject) {
        deleted.append(object)
        addChange(object)
    }

    /// `object` leaves every set: an object inserted and deleted before any save.
    mutating func forgetUnsaved(_ object: ManagedObject) {
        removeChange(object)
        assignedStores[ObjectIdentifier(object)] = nil
    }

    /// `object` leaves every set: deleted in its store by someone else (a merged save).
    mutating func forgetDeletedElsewhere(_ object: ManagedObject) {
        let key = ObjectIdentifier(object)
        removeChange(object)
        conflictChecks[key] = nil
        deleted.removeAll { $0 === object }
        pendingDeletes.removeAll { $0 === object }
    }

    /// `object`'s changes and deletion are discarded (it was refreshed without merging).
    mutating func forgetChanges(of object: ManagedObject) {
        removeChange(object)
        deleted.removeAll { $0 === object }
    }

    /// Empties every set: after a save, a rollback or a reset.
    mutating func clear() {
        inserted = []
        deleted = []
        pendingDeletes = []
        for object in changedList { object._bits &= ~(ObjectBits.pendingChange | ObjectBits.pendingListed) }
        changedList = []
        changedCount = 0
        changedWithRelationshipsCount = 0
        assignedStores = [:]
        conflictChecks = [:]
        vanished = []
        failedEdits = []
    }

    // MARK: Reading

    /// Objects changed since the last save, neither inserted nor deleted, in ID order.
    var updated: [ManagedObject] {
        ManagedObject.inIDOrder(changed.filter { $0.isUpdated })
    }

    /// ``updated``, only the objects whose entity has relationships.
    var updatedWithRelationships: [ManagedObject] {
        guard changedWithRelationshipsCount > 0 else { return [] }
        return ManagedObject.inIDOrder(changed.filter { $0.isUpdated && !$0.entity.relationships.isEmpty })
    }

    /// Changed objects that hold changes taken from a child without their values
    /// (``ManagedObject/holdsUnreadChanges``), in ID order.
    var unreadChanges: [ManagedObject] {
        guard changedList.contains(where: { $0.holdsUnreadChanges && $0._bits & ObjectBits.pendingChange != 0 }) else { return [] }
        return ManagedObject.inIDOrder(changed.filter(\.holdsUnreadChanges))
    }

    /// Whether anything is unsaved.
    var hasChanges: Bool {
        !inserted.isEmpty || !deleted.isEmpty || changedList.contains { $0.isUpdated && $0._bits & ObjectBits.pendingChange != 0 } || !pendingDeletes.isEmpty
    }

    /// Whether `object` is a saved object deleted here.
    func isDeletion(_ object: ManagedObject) -> Bool {
        deleted.contains { $0 === object }
    }
}

// MARK: Invariants

extension PendingChanges {
    /// Traps when the change sets break one of their invariants (swift-collections'
    /// `_checkInvariants()` pattern; the context calls it before every save and rollback
    /// in debug builds, so every test that saves checks it; at the end of every block it
    /// cost a block time proportional to the change set, which in debug builds held the
    /// main queue long enough to fail other tests' watchdogs):
    /// - every object in a set is owned by `owner` (the graph holding the sets);
    /// - deleted ⊆ changed, pending deletes ⊆ deleted, inserted ∩ deleted = ∅;
    /// - the changed list holds each object once, every object carrying
    ///   ``ObjectBits/pendingChange`` is listed, and the counts match the list.
    func _checkInvariants(owner: ObjectOwner) {
        var listed = Set<ObjectIdentifier>()
        var changedObjects = Set<ObjectIdentifier>()
        var withRelationships = 0
        for object in changedList {
            precondition(listed.insert(ObjectIdentifier(object)).inserted, "an object is listed twice in the changed set")
            precondition(object._bits & ObjectBits.pendingListed != 0, "a listed object lacks its listed mark")
            guard object._bits & ObjectBits.pendingChange != 0 else { continue }
            precondition(object._owner === owner, "a changed object is owned by another graph")
            changedObjects.insert(ObjectIdentifier(object))
            if !object._entity.relationships.isEmpty { withRelationships += 1 }
        }
        precondition(changedObjects.count == changedCount, "the changed count is \(changedCount), the set holds \(changedObjects.count)")
        precondition(withRelationships == changedWithRelationshipsCount, "the count of changed objects with relationships is off")
        var deletedObjects = Set<ObjectIdentifier>()
        for object in deleted {
            precondition(object._owner === owner, "a deleted object is owned by another graph")
            precondition(changedObjects.contains(ObjectIdentifier(object)), "a deleted object is not in the changed set")
            deletedObjects.insert(ObjectIdentifier(object))
        }
        for object in pendingDeletes {
            precondition(deletedObjects.contains(ObjectIdentifier(object)), "a pending delete is not deleted")
        }
        for object in inserted {
            precondition(object._owner === owner, "an inserted object is owned by another graph")
            precondition(!deletedObjects.contains(ObjectIdentifier(object)), "an object is both inserted and deleted")
        }
    }
}
