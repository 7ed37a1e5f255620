/// The named transitions of an object's life in a context: what joining, being deleted,
/// being restored and leaving do to its owner and its state bits. The object graph moves
/// objects through these, not by setting their fields.
extension ManagedObject {
    /// Joins `owner` as a new object: inserted, not deleted.
    func enterInserted(into owner: ObjectOwner) {
        self.owner = owner
        insertedFlag = true
        deletedFlag = false
    }

    /// Is deleted in its context: a new object stops being inserted.
    func enterDeleted() {
        insertedFlag = false
        deletedFlag = true
    }

    /// Its deletion is taken back; an object never saved (`reinserting`) is inserted again.
    func restoreFromDeletion(reinserting: Bool) {
        deletedFlag = false
        if reinserting { insertedFlag = true }
    }

    /// An object whose deletion was saved comes back as a new object under its ID (an
    /// undo of the deletion): inserted in `owner`, with the values it had, no committed
    /// state and no row version; the next save stores its row again.
    func reenterInsertedAfterDeletion(into owner: ObjectOwner) {
        self.owner = owner
        faultState = .fulfilled
        dropCommittedCopy()
        rowVersion = 0
        isModified = false
        setFlag(ObjectBits.saved, false)
        insertedFlag = true
        deletedFlag = false
    }

    /// A new object that leaves its context unsaved (rolled back, or deleted before any
    /// save): no owner, neither inserted nor deleted; its values stay.
    func discardUnsaved() {
        owner = nil
        insertedFlag = false
        deletedFlag = false
    }

    /// Its context lets go of it because the context goes away: it keeps its state, and
    /// calls back to no one.
    func outlive(_ owner: ObjectOwner) {
        if self.owner === owner { self.owner = nil }
    }

    /// Leaves its context for good (the context's `reset()`): no owner, inaccessible,
    /// neither inserted nor deleted.
    func invalidate() {
        owner = nil
        faultState = .inaccessible
        insertedFlag = false
        deletedFlag = false
    }

    /// Leaves its context as deleted (its deletion was saved, or its row was gone when
    /// the context rolled back): no owner, inaccessible.
    func leaveContextDeleted() {
        owner = nil
        faultState = .inaccessible
    }

    /// A deletion merged from elsewhere: it leaves its context deleted, unchanged,
    /// inaccessible.
    func leaveContextDeletedElsewhere() {
        owner = nil
        deletedFlag = true
        isModified = false
        faultState = .inaccessible
    }

    /// Its row was gone when it fired: it reads as deleted, with nil and zero values, and
    /// is no longer a fault.
    func vanish() {
        clearValues(toMany: nil)
        faultState = .fulfilled
    }

    /// Its values were changed from elsewhere (a child's save applied, a refresh that keeps
    /// its unsaved changes): it has changes to save.
    func markChanged() {
        isModified = true
    }

    /// A fault nobody read takes a child's change made at `version` of its row, which its
    /// context checked is the row's stored version (so the values the change was based on
    /// are the stored ones): the changed attributes hold the child's values, with the
    /// values the child read as their committed ones, and the object is changed. It stays
    /// a fault: its other values are read when it fires, under the changes
    /// (``holdsUnreadChanges``).
    func takeUnreadChange(_ change: ObjectChange, version: UInt64) {
        var committed = CommittedState()
        let count = _entity.attributes.count
        for index in 0..<change.attributeCount {
            let attribute = change.attribute(index)
            guard attribute.slot < count else { continue }
            committed.keepAttribute(attribute.slot, attribute.base)
            storeAttribute(attribute.value, at: attribute.slot)
        }
        sideState.committed = committed
        rowVersion = version
        _bits = ObjectBits.settled(_bits | ObjectBits.modified | ObjectBits.saved)
    }

    /// Becomes a key-path recorder's prototype: owned by `recorder`, every property read
    /// recorded (see ``ObjectOwner``).
    func enterRecording(for recorder: ObjectOwner) {
        owner = recorder
        setFlag(ObjectBits.recording, true)
    }

    /// Made for an ID no context can read: it reads nil and default values.
    func becomeInaccessible() {
        faultState = .inaccessible
    }
}
