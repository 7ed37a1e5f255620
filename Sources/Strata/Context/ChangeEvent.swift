/// The changes of one "event" of a context: what happened to its objects since its last
/// ``ManagedObjectContext/processPendingChanges()``, for the ObjectsDidChange
/// notification.
///
/// Objects are recorded once per set, using a mark on the object (no hashing on the
/// hot path of setting a property); ``ObjectGraph/takeChangeEvent()`` settles what each
/// object's final state means and clears the marks.
struct ChangeEvent {
    /// A bit of ``ManagedObject/eventMarks``, one per set.
    enum Set: UInt8 {
        case inserted = 1, updated = 2, deleted = 4, refreshed = 8, invalidated = 16
    }

    private(set) var inserted: [ManagedObject] = []
    private(set) var updated: [ManagedObject] = []
    private(set) var deleted: [ManagedObject] = []
    private(set) var refreshed: [ManagedObject] = []
    private(set) var invalidated: [ManagedObject] = []
    /// Every object of the context was forgotten (``ManagedObjectContext/reset()``).
    var invalidatedAll = false

    /// Whether nothing was recorded.
    var isEmpty: Bool {
        inserted.isEmpty && updated.isEmpty && deleted.isEmpty && refreshed.isEmpty && invalidated.isEmpty && !invalidatedAll
    }

    /// Whether ``unrecord(_:from:)`` was used (so lists may hold an object twice).
    private var unrecorded = false

    /// Takes `object` out of `set` (a deletion taken back).
    mutating func unrecord(_ object: ManagedObject, from set: Set) {
        object.eventMarks &= ~set.rawValue
        unrecorded = true
    }

    /// Clears the marks of every object recorded (the event is dropped unreported).
    func discard() {
        for list in [inserted, updated, deleted, refreshed, invalidated] {
            for object in list { object.eventMarks = 0 }
        }
    }

    /// Records `object` in `set` (once).
    mutating func record(_ object: ManagedObject, in set: Set) {
        guard object.eventMarks & set.rawValue == 0 else { return }
        object.eventMarks |= set.rawValue
        switch set {
        case .inserted: inserted.append(object)
        case .updated: updated.append(object)
        case .deleted: deleted.append(object)
        case .refreshed: refreshed.append(object)
        case .invalidated: invalidated.append(object)
        }
    }

    /// The sets as the notification reports them, the marks cleared:
    ///
    /// - an object inserted and deleted within the event is in neither;
    /// - inserted objects are not also reported updated; deleted ones are only deleted;
    /// - refreshed objects are those refreshed and not changed in the event;
    /// - invalidated objects are in no other set.
    func settled() -> ObjectChangeSets {
        var sets = ObjectChangeSets()
        func has(_ object: ManagedObject, _ set: Set) -> Bool { object.eventMarks & set.rawValue != 0 }
        for object in inserted where has(object, .inserted) && !has(object, .deleted) && !has(object, .invalidated) {
            sets.inserted.append(object)
        }
        for object in deleted where has(object, .deleted) && !has(object, .inserted) && !has(object, .invalidated) {
            sets.deleted.append(object)
        }
        for object in updated where object.eventMarks == Set.updated.rawValue || object.eventMarks == Set.updated.rawValue | Set.refreshed.rawValue {
            sets.updated.append(object)
        }
        for object in refreshed where object.eventMarks == Set.refreshed.rawValue {
            sets.refreshed.append(object)
        }
        sets.invalidated = invalidated.filter { has($0, .invalidated) }
        // A set taken back and recorded again lists its object twice.
        if unrecorded {
            func unique(_ objects: [ManagedObject]) -> [ManagedObject] {
                var seen = Swift.Set<ObjectIdentifier>()
                return objects.filter { seen.insert(ObjectIdentifier($0)).inserted }
            }
            sets.inserted = unique(sets.inserted)
            sets.updated = unique(sets.updated)
            sets.deleted = unique(sets.deleted)
            sets.refreshed = unique(sets.refreshed)
        }
        sets.invalidatedAll = invalidatedAll
        for list in [inserted, updated, deleted, refreshed, invalidated] {
            for object in list { object.eventMarks = 0 }
        }
        return sets
    }
}

/// Objects by what happened to them: the payload of a context notification, before it is
/// turned into `userInfo` and a ``ContextNotification``.
struct ObjectChangeSets {
    var inserted: [ManagedObject] = []
    var updated: [ManagedObject] = []
    var deleted: [ManagedObject] = []
    var refreshed: [ManagedObject] = []
    var invalidated: [ManagedObject] = []
    var invalidatedAll = false
    /// The query generation a notification names: the state a save made, or the one a
    /// merge moved a pinned context to.
    var queryGeneration: QueryGenerationToken?

    /// Whether there is nothing to report.
    var isEmpty: Bool {
        inserted.isEmpty && updated.isEmpty && deleted.isEmpty && refreshed.isEmpty && invalidated.isEmpty && !invalidatedAll
    }
}
