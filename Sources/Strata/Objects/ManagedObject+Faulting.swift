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
        let entity = _entity
        for (slot, attribute) in entity.attributes.enumerated() {
            if attribute.isTransient {
                if wasFault { storeAttribute(attribute.defaultValue, at: slot) }
            } else {
                storeAttribute(slot < snapshot.attributes.count ? snapshot.attributes[slot] : nil, at: slot)
            }
        }
        for (slot, relationship) in entity.relationships.enumerated() {
            let value = slot < snapshot.relationships.count ? snapshot.relationships[slot] : .notLoaded
            storeRelationship(resolve(value, ordered: relationship.isOrdered), at: slot)
        }
        rowVersion = snapshot.version
        dropCommittedCopy()
        faultFailure = nil
        _bits = ObjectBits.settled(_bits & ~(ObjectBits.faultMask | ObjectBits.modified) | ObjectBits.saved)
    }

    /// The object's current persistent state, for a save. Transient attributes are nil.
    func makeSnapshot() -> ObjectSnapshot {
        let entity = _entity
        var attributes: [AttributeValue?] = []
        attributes.reserveCapacity(entity.attributes.count)
        for (slot, attribute) in entity.attributes.enumerated() {
            attributes.append(attribute.isTransient ? nil : attributeValue(at: slot))
        }
        return ObjectSnapshot(
            objectID: objectID, version: rowVersion, attributes: attributes,
            relationships: entity.relationships.indices.map { relationshipStorage(at: $0).snapshot })
    }

    /// The object's committed (last fetched or saved) state, or nil if it was never saved.
    func makeCommittedSnapshot() -> ObjectSnapshot? {
        guard isSaved else { return nil }
        let entity = _entity
        return ObjectSnapshot(
            objectID: objectID, version: rowVersion,
            attributes: entity.attributes.indices.map { committedAttribute(at: $0) },
            relationships: entity.relationships.indices.map { (committedRelationship(at: $0) ?? .notLoaded).snapshot })
    }

    /// Turns the object into a fault: its values (and the references they hold, which
    /// breaks relationship cycles) are released until the next access.
    func turnIntoFault() {
        willTurnIntoFault()
        clearValues(toMany: .notLoaded)
        dropCommittedCopy()
        faultFailure = nil
        _bits = ObjectBits.settled(_bits & ~(ObjectBits.faultMask | ObjectBits.modified | ObjectBits.saved) | ObjectBits.fault)
        didTurnIntoFault()
    }

    /// Empties every value: attributes nil (their fields take their defaults), to-one
    /// relationships nil, to-many ones `toMany` (not loaded, or empty).
    func clearValues(toMany: RelationshipStorage?) {
        let entity = _entity
        for slot in entity.attributes.indices { storeAttribute(nil, at: slot) }
        for (slot, relationship) in entity.relationships.enumerated() {
            storeRelationship(relationship.isToMany ? toMany ?? .empty(for: relationship) : .toOne(nil), at: slot)
        }
    }

    /// Makes the object a fault for `id` in `owner`'s context (a fetched or referenced
    /// row whose values have not been read).
    func becomeFault(for id: ManagedObjectID, owner: ObjectOwner) {
        assignID(id)
        self.owner = owner
        if _entity.layout.usesDynamicStorage || !_entity.relationships.isEmpty { clearValues(toMany: .notLoaded) }
        dropCommittedCopy()
        faultFailure = nil
        _bits = ObjectBits.settled(_bits & ~(ObjectBits.faultMask | ObjectBits.modified | ObjectBits.saved) | ObjectBits.fault)
    }

    /// Records a save: the current values become the committed ones at `version`, with
    /// the permanent ID the store assigned.
    func didCommit(permanentID: ManagedObjectID?, version: UInt64) {
        if let permanentID { assignID(permanentID) }
        rowVersion = version
        dropCommittedCopy()
        _bits = ObjectBits.settled(_bits & ~(ObjectBits.inserted | ObjectBits.modified) | ObjectBits.saved)
    }

    /// Puts the committed values back (a rollback of this object's changes).
    func revertToCommitted() {
        guard isSaved else { return }
        if let committed = committedCopy {
            for (slot, value) in committed.attributes.enumerated() { storeAttribute(value, at: slot) }
            for (slot, value) in committed.relationships.enumerated() { storeRelationship(value, at: slot) }
            dropCommittedCopy()
        }
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
        guard fulfilIfNeeded(property: _entity.relationships[slot].name) else { return false }
        guard case .notLoaded = relationshipStorage(at: slot) else { return true }
        let relationship = _entity.relationships[slot]
        guard let owner else { return false }
        do {
            let ids = try owner.destinations(of: self, relationship: relationship)
            setLoadedRelationship(ToManyStorage(isOrdered: relationship.isOrdered, objects: ids.map { owner.object(for: $0) }), at: slot)
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

    /// Stores the destinations just read of to-many `slot`, which was not loaded. Loading
    /// is not a change: the committed value is what was loaded.
    func setLoadedRelationship(_ storage: ToManyStorage, at slot: Int) {
        storeRelationship(.toMany(storage), at: slot)
        side?.committed?.relationships[slot] = .toMany(storage)
    }
}
