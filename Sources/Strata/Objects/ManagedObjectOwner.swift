/// The context side of its managed objects: what an object asks of the context that
/// registered it. A context's object store conforms (it lives in the context's
/// isolation region, as its objects do, so no call here crosses an actor).
protocol ManagedObjectOwner: AnyObject {
    /// The persistent state of `object`, a fault: from the parent context or the store.
    /// Throws ``StrataError/inaccessibleFault(_:)`` when the row no longer exists.
    func snapshotForFault(of object: ManagedObject) throws(StrataError) -> ObjectSnapshot

    /// The object registered for `id`, or a new fault registered for it. No I/O.
    func object(for id: ManagedObjectID) -> ManagedObject

    /// The destination IDs of a to-many relationship that was not loaded yet.
    func destinations(
        of object: ManagedObject, relationship: RelationshipDescription
    ) throws(StrataError) -> [ManagedObjectID]

    /// Called before a property of `object` changes (for change tracking and undo);
    /// `object` still has its old value.
    func objectWillChange(_ object: ManagedObject, key: String)

    /// An edit of `object`'s property `key` did not happen (a read it needed failed with a
    /// storage error, or the value cannot be stored), and it came through a setter that
    /// cannot throw. The owner's next save must fail with `error` rather than save
    /// without the edit.
    func editFailed(_ object: ManagedObject, key: String, error: StrataError)

    /// Fulfilling `object`'s fault failed. Returns true to carry on with the object
    /// marked deleted and its values nil (`shouldDeleteInaccessibleFaults`), false to
    /// leave it inaccessible.
    func handleInaccessibleFault(_ object: ManagedObject, property: String?, error: StrataError) -> Bool
    /// Moves the owner's objects to the permanent IDs their temporary ones became
    /// elsewhere in the context tree, if anything is new since the last call. Cheap when
    /// nothing is.
    func adoptPermanentIDsIfNeeded()
}

extension ManagedObjectOwner {
    /// Does nothing: owners outside a context tree have no IDs to adopt.
    func adoptPermanentIDsIfNeeded() {}
}
