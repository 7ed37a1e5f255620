/// The context side of its managed objects: what an object asks of the context that
/// registered it (a context's ``ObjectGraph``, or a ``KeyPathRecorder`` for recording
/// prototypes). It lives in the context's isolation region, as its objects do, so no
/// call here crosses an actor.
///
/// A class rather than a protocol so that an object's reference to its owner is one
/// word. Objects hold their owner unowned (`unowned(unsafe)`): an owner must set the
/// owner of every object it still owns to nil before it goes (in its `deinit`), and set
/// it to nil whenever it lets go of an object. The implementations here are those of an owner that has no store: a fault
/// cannot be read, and nothing is recorded.
class ObjectOwner {
    /// The persistent state of `object`, a fault: from the parent context or the store.
    /// Throws ``StrataError/inaccessibleFault(_:)`` when the row no longer exists.
    func snapshotForFault(of object: ManagedObject) throws(StrataError) -> ObjectSnapshot {
        throw .inaccessibleFault(object.objectID)
    }

    /// Reads `object`'s values (it is a fault) and applies them to it, without calling
    /// its `awakeFromFetch()`. Throws ``StrataError/inaccessibleFault(_:)`` when the row
    /// no longer exists. By default, applies ``snapshotForFault(of:)``.
    func fireFault(of object: ManagedObject) throws(StrataError) {
        object.apply(try snapshotForFault(of: object))
    }

    /// The object registered for `id`, or a new fault registered for it. No I/O.
    func object(for id: ManagedObjectID) -> ManagedObject {
        let object = ManagedObject(entity: EntityDescription(name: id.entityName))
        object.assignID(id)
        object.becomeInaccessible()
        return object
    }

    /// The destination IDs of a to-many relationship that was not loaded yet.
    func destinations(of object: ManagedObject, relationship: RelationshipDescription) throws(StrataError) -> [ManagedObjectID] {
        throw .inaccessibleFault(object.objectID)
    }

    /// Called before a property of `object` changes (for change tracking and undo);
    /// `object` still has its old value.
    func objectWillChange(_ object: ManagedObject, key: String) {}

    /// An edit of `object`'s property `key` did not happen (a read it needed failed with a
    /// storage error, or the value cannot be stored), and it came through a setter that
    /// cannot throw. The owner's next save must fail with `error` rather than save
    /// without the edit.
    func editFailed(_ object: ManagedObject, key: String, error: StrataError) {}

    /// Fulfilling `object`'s fault failed. Returns true to carry on with the object
    /// marked deleted and its values nil (`shouldDeleteInaccessibleFaults`), false to
    /// leave it inaccessible.
    func handleInaccessibleFault(_ object: ManagedObject, property: String?, error: StrataError) -> Bool { false }

    /// Moves the owner's objects to the permanent IDs their temporary ones became
    /// elsewhere in the context tree, if anything is new since the last call. Cheap when
    /// nothing is.
    func adoptPermanentIDsIfNeeded() {}

    /// `object`, registered under `key`, is going away: the owner forgets it. Called from
    /// the object's `deinit`, in the owner's isolation (objects never leave it); `object`
    /// only tells which entry is the object's.
    func objectWillDeinit(key: ObjectIdentityKey, object: ObjectIdentifier) {}

    /// A typed accessor of `object`, a recording prototype (``ObjectBits/recording``),
    /// was read: `property` is its slot (nil when the entity does not have it), of Swift
    /// type `valueType`. Returns the prototype a to-one relationship leads to.
    func recordRead(of object: ManagedObject, property: PropertySlot?, valueType: Any.Type, destination: ManagedObject.Type?) -> ManagedObject? {
        nil
    }

    /// What the typed accessor of the last attribute recorded returned.
    func recordReturned(_ value: AttributeValue?) {}
}
