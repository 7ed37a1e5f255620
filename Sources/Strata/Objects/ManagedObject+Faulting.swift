/// Faulting and snapshots: how an object's values come from, and go to, its context.
extension ManagedObject {
    /// Reads the object's values if it is a fault. Returns false when they cannot be
    /// read (no context, or the row is gone); the object is then inaccessible and reads
    /// give nil or defaults.
    @discardableResult
    func fulfilIfNeeded(property: String? = nil) -> Bool {
        switch faultState {
        case .fulfilled: return true
        case .inaccessible: return false
        case .fault: break
        }
        guard let owner else {
            faultState = .inaccessible
            return false
        }
        do {
            let snapshot = try owner.snapshotForFault(of: self)
            apply(snapshot)
            awakeFromFetch()
            return true
        } catch {
            guard case .inaccessibleFault = error else {
                // The store could not be read: that says nothing about the row, so the
                // object stays a fault (the next access reads again) and reports why.
                faultFailure = error
                return false
            }
            faultState = .inaccessible
            faultFailure = nil
            if owner.handleInaccessibleFault(self, property: property, error: error) {
                deletedFlag = true
            }
            return false
        }
    }

    /// The error a throwing accessor reports for an object whose values cannot be read:
    /// the storage failure that stopped the read, else ``StrataError/inaccessibleFault(_:)``
    /// (the row is gone).
    var inaccessibleError: StrataError { faultFailure ?? .inaccessibleFault(objectID) }

    /// Throws the storage failure that stopped the last read of the object's values or
    /// destinations, if one did: for callers that must not carry on as if the row were
    /// gone (delete rules, validation).
    func throwIfStorageFailed() throws(StrataError) {
        if let faultFailure { throw faultFailure }
    }

    /// Replaces the object's persistent values with `snapshot` and makes them its
    /// committed values. Transient attributes keep their value (or take their default
    /// when the object was a fault). Clears the modified flag.
    func apply(_ snapshot: ObjectSnapshot) {
        let wasFault = faultState != .fulfilled
        for (slot, attribute) in entity.attributes.enumerated() {
            if attribute.isTransient {
                if wasFault { attributeValues[slot] = attribute.defaultValue }
            } else {
                attributeValues[slot] = slot < snapshot.attributes.count ? snapshot.attributes[slot] : nil
            }
        }
        for (slot, relationship) in entity.relationships.enumerated() {
            let value = slot < snapshot.relationships.count ? snapshot.relationships[slot] : .notLoaded
            relationshipValues[slot] = resolve(value, ordered: relationship.isOrdered)
        }
        rowVersion = snapshot.version
        committed = CommittedState(attributes: attributeValues, relationships: relationshipValues)
        faultState = .fulfilled
        faultFailure = nil
        isModified = false
    }

    /// The object's current persistent state, for a save. Transient attributes are nil.
    func makeSnapshot() -> ObjectSnapshot {
        var attributes = attributeValues
        for (slot, attribute) in entity.attributes.enumerated() where attribute.isTransient {
            attributes[slot] = nil
        }
        return ObjectSnapshot(
            objectID: objectID, version: rowVersion, attributes: attributes,
            relationships: relationshipValues.map(\.snapshot))
    }

    /// The object's committed (last fetched or saved) state, or nil if it was never saved.
    func makeCommittedSnapshot() -> ObjectSnapshot? {
        guard let committed else { return nil }
        return ObjectSnapshot(
            objectID: objectID, version: rowVersion, attributes: committed.attributes,
            relationships: committed.relationships.map(\.snapshot))
    }

    /// Turns the object into a fault: its values (and the references they hold, which
    /// breaks relationship cycles) are released until the next access.
    func turnIntoFault() {
        willTurnIntoFault()
        attributeValues = Array(repeating: nil, count: entity.attributes.count)
        relationshipValues = entity.relationships.map { $0.isToMany ? .notLoaded : .toOne(nil) }
        committed = nil
        faultState = .fault
        faultFailure = nil
        isModified = false
        didTurnIntoFault()
    }

    /// Makes the object a fault for `id` in `owner`'s context (a fetched or referenced
    /// row whose values have not been read).
    func becomeFault(for id: ManagedObjectID, owner: any ManagedObjectOwner) {
        objectID = id
        self.owner = owner
        attributeValues = Array(repeating: nil, count: entity.attributes.count)
        relationshipValues = entity.relationships.map { $0.isToMany ? .notLoaded : .toOne(nil) }
        committed = nil
        faultState = .fault
        faultFailure = nil
        isModified = false
    }

    /// Records a save: the current values become the committed ones at `version`, with
    /// the permanent ID the store assigned.
    func didCommit(permanentID: ManagedObjectID?, version: UInt64) {
        if let permanentID { objectID = permanentID }
        rowVersion = version
        committed = CommittedState(attributes: attributeValues, relationships: relationshipValues)
        insertedFlag = false
        isModified = false
    }

    /// Puts the committed values back (a rollback of this object's changes).
    func revertToCommitted() {
        guard let committed else { return }
        attributeValues = committed.attributes
        relationshipValues = committed.relationships
        isModified = false
    }

    /// Converts a snapshot's relationship value to objects through the owner.
    private func resolve(_ value: RelationshipSnapshot, ordered: Bool) -> RelationshipStorage {
        switch value {
        case .toOne(nil): return .toOne(nil)
        case .toOne(let id?): return owner.map { .toOne($0.object(for: id)) } ?? .toOne(nil)
        case .notLoaded: return .notLoaded
        case .toMany(let ids):
            guard let owner else { return .notLoaded }
            return .toMany(ToManyStorage(isOrdered: ordered, objects: ids.map { owner.object(for: $0) }))
        }
    }

    /// Loads a to-many relationship that is not loaded yet. False when it cannot be.
    @discardableResult
    func loadRelationshipIfNeeded(_ slot: Int) -> Bool {
        guard fulfilIfNeeded(property: entity.relationships[slot].name) else { return false }
        guard case .notLoaded = relationshipValues[slot] else { return true }
        let relationship = entity.relationships[slot]
        guard let owner else { return false }
        do {
            let ids = try owner.destinations(of: self, relationship: relationship)
            let storage = RelationshipStorage.toMany(
                ToManyStorage(isOrdered: relationship.isOrdered, objects: ids.map { owner.object(for: $0) }))
            relationshipValues[slot] = storage
            // Loading is not a change: the committed value is what was loaded.
            committed?.relationships[slot] = storage
            faultFailure = nil
            return true
        } catch {
            if case .inaccessibleFault = error {
                _ = owner.handleInaccessibleFault(self, property: relationship.name, error: error)
            } else {
                faultFailure = error  // the store could not be read: the relationship stays not loaded
            }
            return false
        }
    }
}
