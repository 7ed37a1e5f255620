/// Relationship edits with in-memory inverse maintenance.
///
/// Every edit goes through three primitives (`linkToOne`, `insertMember`,
/// `removeMember`) that change one side and record the change; the public entry
/// points apply them to both sides, so after any edit each relationship and its
/// inverse agree.
///
/// An edit first reads everything it touches (the object, the relationship when it is
/// to-many, each destination added or removed and its inverse side, and for a to-one
/// inverse the destination's previous source), and changes nothing when a read fails
/// with a storage error: it throws that error (a setter that cannot throw records it,
/// and the context's next save fails with it). Without this, an edit whose inverse side
/// could not be read changed one side only: the store would keep a destination's
/// foreign key to an object whose relationship no longer lists it, or the reverse. A
/// row that is gone reads as empty, as delete rules treat it.
extension ManagedObject {
    /// Adds `object` to the to-many relationship `key` (at the end of an ordered one),
    /// updating the inverse side. Adding an object already there changes nothing.
    ///
    /// - Throws: ``StrataError/unknownKey(key:entity:)`` when `key` is not a to-many
    ///   relationship; ``StrataError/typeMismatch(key:entity:expected:actual:)`` for an
    ///   object of the wrong entity.
    public func add(_ object: ManagedObject, toRelationship key: String) throws(StrataError) {
        let slot = try toManySlot(key)
        _ = try destinationObjects(from: [object], for: entity.relationships[slot])
        try addDestination(object, slot: slot, at: nil)
    }

    /// Inserts `object` at `index` (clamped to the bounds) of the ordered to-many
    /// relationship `key`, moving it there when it is already a member.
    ///
    /// - Throws: as ``add(_:toRelationship:)``, and a type mismatch when the relationship
    ///   is not ordered.
    public func insert(_ object: ManagedObject, at index: Int, intoRelationship key: String) throws(StrataError) {
        let slot = try toManySlot(key)
        let relationship = entity.relationships[slot]
        guard relationship.isOrdered else {
            throw StrataError.typeMismatch(
                key: key, entity: entity.name, expected: "an ordered relationship", actual: "an unordered one")
        }
        _ = try destinationObjects(from: [object], for: relationship)
        try addDestination(object, slot: slot, at: index)
    }

    /// Removes `object` from the to-many relationship `key`, updating the inverse side.
    /// Removing an object that is not there changes nothing.
    ///
    /// - Throws: ``StrataError/unknownKey(key:entity:)`` when `key` is not a to-many
    ///   relationship.
    public func remove(_ object: ManagedObject, fromRelationship key: String) throws(StrataError) {
        let slot = try toManySlot(key)
        try removeDestination(object, slot: slot)
    }

    private func toManySlot(_ key: String) throws(StrataError) -> Int {
        guard let slot = entity.relationshipSlot(named: key), entity.relationships[slot].isToMany else {
            throw StrataError.unknownKey(key: key, entity: entity.name)
        }
        return slot
    }

    // MARK: Both sides

    /// Replaces the destinations of relationship `slot` with `objects` (already checked),
    /// keeping every inverse in step.
    ///
    /// - Throws: the storage error of a read the change needs; nothing changed then.
    func setRelationship(_ slot: Int, to objects: [ManagedObject]) throws(StrataError) {
        let relationship = entity.relationships[slot]
        guard relationship.isToMany else {
            try setToOne(slot, to: objects.first)
            return
        }
        try readForEdit(slot)
        let current = relationshipStorage(at: slot).objects
        let incoming = ToManyStorage(isOrdered: false, objects: objects)
        let leaving = current.filter { !incoming.contains($0) }
        try readDestinationsForEdit(of: relationship, joining: objects, leaving: leaving)
        for old in leaving {
            removeDestinationRead(old, slot: slot)
        }
        for (index, object) in objects.enumerated() {
            addDestinationRead(object, slot: slot, at: relationship.isOrdered ? index : nil)
        }
    }

    /// Sets to-one relationship `slot` to `object`, updating the old and new inverses.
    ///
    /// - Throws: the storage error of a read the change needs; nothing changed then.
    func setToOne(_ slot: Int, to object: ManagedObject?) throws(StrataError) {
        try readForEdit(slot)
        guard case .toOne(let old) = relationshipStorage(at: slot), old !== object else { return }
        let relationship = entity.relationships[slot]
        try readDestinationsForEdit(of: relationship, joining: object.map { [$0] } ?? [], leaving: old.map { [$0] } ?? [])
        if let old { old.unlinkInverse(of: relationship, from: self) }
        linkToOne(slot, object)
        if let object { object.linkInverse(of: relationship, to: self, at: nil) }
    }

    /// Adds `object` to to-many `slot` (at `index` when ordered) and links its inverse.
    ///
    /// - Throws: the storage error of a read the change needs; nothing changed then.
    func addDestination(_ object: ManagedObject, slot: Int, at index: Int?) throws(StrataError) {
        try readForEdit(slot)
        try readDestinationsForEdit(of: entity.relationships[slot], joining: [object], leaving: [])
        addDestinationRead(object, slot: slot, at: index)
    }

    /// Removes `object` from to-many `slot` and unlinks its inverse.
    ///
    /// - Throws: the storage error of a read the change needs; nothing changed then.
    func removeDestination(_ object: ManagedObject, slot: Int) throws(StrataError) {
        try readForEdit(slot)
        try readDestinationsForEdit(of: entity.relationships[slot], joining: [], leaving: [object])
        removeDestinationRead(object, slot: slot)
    }

    /// ``addDestination(_:slot:at:)`` once everything it touches was read.
    private func addDestinationRead(_ object: ManagedObject, slot: Int, at index: Int?) {
        let relationship = entity.relationships[slot]
        if case .toMany(let storage) = relationshipStorage(at: slot), storage.contains(object) {
            // Already a member: only an ordered move can change anything.
            guard let index, relationship.isOrdered, storage.objects.firstIndex(where: { $0 === object }) != index else { return }
            removeMember(slot, object)
            insertMember(slot, object, at: index)
            return
        }
        insertMember(slot, object, at: index)
        object.linkInverse(of: relationship, to: self, at: nil)
    }

    /// ``removeDestination(_:slot:)`` once everything it touches was read.
    private func removeDestinationRead(_ object: ManagedObject, slot: Int) {
        guard case .toMany(let storage) = relationshipStorage(at: slot), storage.contains(object) else { return }
        removeMember(slot, object)
        object.unlinkInverse(of: entity.relationships[slot], from: self)
    }

    // MARK: Reading before an edit

    /// Reads this object's values, and relationship `slot` when it is to-many, for an
    /// edit. A row that is gone reads as empty (the edit goes on); a store that cannot be
    /// read throws, before anything changed.
    func readForEdit(_ slot: Int?) throws(StrataError) {
        let name = slot.map { entity.relationships[$0].name }
        if !fulfilIfNeeded(property: name) { try throwIfStorageFailed() }
        if let slot, entity.relationships[slot].isToMany, !loadRelationshipIfNeeded(slot) { try throwIfStorageFailed() }
    }

    /// Reads what `relationship` of this object touches on the other side when
    /// `joining` become destinations and `leaving` stop being ones: each of them and its
    /// inverse side, and for a to-one inverse, the previous source a joining destination
    /// leaves (and its side of `relationship`).
    private func readDestinationsForEdit(
        of relationship: RelationshipDescription, joining: [ManagedObject], leaving: [ManagedObject]
    ) throws(StrataError) {
        for destination in leaving {
            try destination.readForEdit(destination.entity.relationshipSlot(named: relationship.inverseName))
        }
        for destination in joining {
            let inverse = destination.entity.relationshipSlot(named: relationship.inverseName)
            try destination.readForEdit(inverse)
            guard let inverse, !destination.entity.relationships[inverse].isToMany,
                  case .toOne(let previous?) = destination.relationshipStorage(at: inverse), previous !== self
            else { continue }
            try previous.readForEdit(previous.entity.relationshipSlot(named: relationship.name))
        }
    }

    /// This object is now a destination of `source`'s `relationship`: point the inverse
    /// back at `source`. For a to-one inverse, the object leaves its previous source.
    private func linkInverse(of relationship: RelationshipDescription, to source: ManagedObject, at index: Int?) {
        guard let slot = entity.relationshipSlot(named: relationship.inverseName) else { return }
        fulfilIfNeeded(property: relationship.inverseName)
        if entity.relationships[slot].isToMany {
            loadRelationshipIfNeeded(slot)
            insertMember(slot, source, at: index)
        } else {
            guard case .toOne(let previous) = relationshipStorage(at: slot), previous !== source else { return }
            // One-to-one or many-to-one: the previous source loses this object.
            if let previous { previous.dropForward(relationship, to: self) }
            linkToOne(slot, source)
        }
    }

    /// This object stopped being a destination of `source`'s `relationship`.
    private func unlinkInverse(of relationship: RelationshipDescription, from source: ManagedObject) {
        guard let slot = entity.relationshipSlot(named: relationship.inverseName) else { return }
        fulfilIfNeeded(property: relationship.inverseName)
        if entity.relationships[slot].isToMany {
            loadRelationshipIfNeeded(slot)
            removeMember(slot, source)
        } else if case .toOne(let current) = relationshipStorage(at: slot), current === source {
            linkToOne(slot, nil)
        }
    }

    /// `self`'s `relationship` no longer holds `object` (which moved to another source).
    private func dropForward(_ relationship: RelationshipDescription, to object: ManagedObject) {
        guard let slot = entity.relationshipSlot(named: relationship.name) else { return }
        fulfilIfNeeded(property: relationship.name)
        if relationship.isToMany {
            loadRelationshipIfNeeded(slot)
            removeMember(slot, object)
        } else if case .toOne(let current) = relationshipStorage(at: slot), current === object {
            linkToOne(slot, nil)
        }
    }

    // MARK: One side

    private func linkToOne(_ slot: Int, _ object: ManagedObject?) {
        if case .toOne(let current) = relationshipStorage(at: slot), current === object { return }
        prepareRelationshipChange(slot)
        storeRelationship(.toOne(object), at: slot)
        isModified = true
    }

    private func insertMember(_ slot: Int, _ object: ManagedObject, at index: Int?) {
        guard case .toMany(var storage) = relationshipStorage(at: slot), !storage.contains(object) else { return }
        prepareRelationshipChange(slot)
        storeRelationship(.notLoaded, at: slot)  // drop the reference so the insert does not copy
        storage.insert(object, at: index)
        storeRelationship(.toMany(storage), at: slot)
        isModified = true
    }

    private func removeMember(_ slot: Int, _ object: ManagedObject) {
        guard case .toMany(var storage) = relationshipStorage(at: slot), storage.contains(object) else { return }
        prepareRelationshipChange(slot)
        storeRelationship(.notLoaded, at: slot)
        storage.remove(object)
        storeRelationship(.toMany(storage), at: slot)
        isModified = true
    }
}
