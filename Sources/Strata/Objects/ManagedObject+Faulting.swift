import Foundation

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
            try owner.fireFault(of: self)
            awakeFromFetch()
            return true
        } catch {
            guard error.code == .inaccessibleFault else {
                // The store could not be read: that says nothing about the row, so the
                // object stays a fault (the next access reads again) and reports why.
                faultFailure = error
                return false
            }
            if holdsUnreadChanges {
                // Its row went after the context took a child's change to it: the change
                // stays a change (the save that writes it finds the row gone, a conflict,
                // as when the context had read the object first), over default values.
                let held = setHeldChangesAside()
                let layout = _entity.layout
                for slot in layout.attributes.indices { storeAttribute(layout.defaults[slot], at: slot) }
                clearRelationships()
                faultState = .fulfilled
                restore(held)
                faultFailure = nil
                return true
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
        guard !holdsUnreadChanges else {
            let held = setHeldChangesAside()
            defer { restore(held) }
            return apply(snapshot)
        }
        let wasFault = faultState != .fulfilled
        let layout = _entity.layout
        for slot in layout.attributes.indices {
            if layout.isTransient[slot] {
                if wasFault { storeAttribute(layout.defaults[slot], at: slot) }
            } else {
                storeAttribute(slot < snapshot.attributes.count ? snapshot.attributes[slot] : nil, at: slot)
            }
        }
        for slot in layout.relationships.indices {
            let value = slot < snapshot.relationships.count ? snapshot.relationships[slot] : .notLoaded
            storeRelationship(resolve(value, ordered: layout.isOrdered[slot]), at: slot)
        }
        rowVersion = snapshot.version
        dropCommittedCopy()
        faultFailure = nil
        _bits = ObjectBits.settled(_bits & ~(ObjectBits.faultMask | ObjectBits.modified) | ObjectBits.saved)
    }

    /// ``apply(_:)`` from a stored record: row `key` of `storage`'s entity in `store`,
    /// decoded straight into the object's slots (no snapshot is made). Attributes the
    /// record does not hold are nil; to-one relationships resolve through the owner;
    /// to-many ones are not loaded.
    ///
    /// - Throws: ``StrataError/corruptRecord(entity:primaryKey:reason:)`` for a record that
    ///   does not decode, or holds a value of another type than its attribute's; the
    ///   object is unchanged then only if the first field fails (it stays a fault).
    func apply(record bytes: UnsafeRawBufferPointer, of storage: EntityStorage, key: PrimaryKey, in store: StoreFile) throws(StrataError) {
        guard !holdsUnreadChanges else {
            let held = setHeldChangesAside()
            defer { restore(held) }
            return try apply(record: bytes, of: storage, key: key, in: store)
        }
        let wasFault = faultState != .fulfilled
        let layout = _entity.layout
        var seen = SlotMarks(attributes: entity.attributes.count, relationships: entity.relationships.count)
        var reader = RecordCodec.Reader(bytes)
        func corrupt(_ error: RecordDecodingError) -> StrataError {
            .corruptRecord(entity: storage.name, primaryKey: key.rawValue, reason: error.reason)
        }
        let version: UInt64
        do {
            version = try reader.header()
            while let (number, tag) = try reader.nextField() {
                switch storage.field(numbered: number) {
                case nil:
                    _ = try reader.value(tag)  // a field this model does not know: ignored
                case .attribute(let slot):
                    seen.markAttribute(slot)
                    // The common cases go straight into the typed field.
                    if case .field(let offset, .plain(let base)) = layout.attributes[slot] {
                        switch (base, tag) {
                        case (.int64, .integer):
                            fieldPointer(at: offset, as: Int64.self).pointee = try reader.integer()
                            continue
                        case (.int, .integer):
                            fieldPointer(at: offset, as: Int.self).pointee = Int(try reader.integer())
                            continue
                        case (.double, .double):
                            fieldPointer(at: offset, as: Double.self).pointee = try reader.double()
                            continue
                        case (.date, .date):
                            fieldPointer(at: offset, as: Date.self).pointee = Date(timeIntervalSinceReferenceDate: try reader.double())
                            continue
                        case (.string, .string):
                            fieldPointer(at: offset, as: String.self).pointee = try reader.string()
                            continue
                        case (.bool, .falseValue), (.bool, .trueValue):
                            fieldPointer(at: offset, as: Bool.self).pointee = tag == .trueValue
                            continue
                        default:
                            break
                        }
                    }
                    let value = try reader.value(tag)
                    guard storage.attributes[slot].type.accepts(value) else {
                        let attribute = storage.attributes[slot].description
                        throw StrataError.corruptRecord(
                            entity: storage.name, primaryKey: key.rawValue,
                            reason: "field \(number) (\(attribute.name)) holds a \(value.kindName) value, not a \(attribute.type)")
                    }
                    storeAttribute(value, at: slot)
                case .relationship(let slot):
                    seen.markRelationship(slot)
                    let id = try store.destinationID(try reader.value(tag), of: slot, storage: storage, key: key)
                    storeRelationship(owner.map { .toOne($0.object(for: id)) } ?? .toOne(nil), at: slot)
                }
            }
        } catch let error as RecordDecodingError {
            throw corrupt(error)
        } catch let error as StrataError {
            throw error
        } catch {
            throw corrupt(RecordDecodingError(reason: "\(error)", offset: reader.offset))
        }
        if _bits & ObjectBits.nilOverrides != 0 {
            // Values the record holds replace nils that fields could not hold.
            for slot in side?.nilAttributes ?? [] where seen.hasAttribute(slot) { side?.nilAttributes.remove(slot) }
            if side?.nilAttributes.isEmpty != false { setFlag(ObjectBits.nilOverrides, false) }
        }
        for slot in layout.attributes.indices where !seen.hasAttribute(slot) {
            if layout.isTransient[slot] {
                if wasFault { storeAttribute(layout.defaults[slot], at: slot) }
            } else {
                storeAttribute(nil, at: slot)
            }
        }
        for slot in layout.relationships.indices where !seen.hasRelationship(slot) {
            storeRelationship(layout.isToMany[slot] ? .notLoaded : .toOne(nil), at: slot)
        }
        rowVersion = version
        if let side {
            side.committed = nil
            if side.faultFailure != nil { side.faultFailure = nil }
        }
        _bits = ObjectBits.settled(_bits & ~(ObjectBits.faultMask | ObjectBits.modified) | ObjectBits.saved)
    }

    /// Whether the object is a fault that holds changes: a child's save set some of its
    /// attributes before this context read it (``takeUnreadChange(_:version:)``). Its
    /// other values are read when it fires, and the changes stay on top of them.
    var holdsUnreadChanges: Bool {
        _bits & (ObjectBits.faultMask | ObjectBits.modified) == ObjectBits.fault | ObjectBits.modified
    }

    /// The changes a fault holds, set aside while its row is applied under them.
    struct HeldChanges {
        var committed: CommittedState?
        var attributes: [(slot: Int, value: AttributeValue?)]
        var relationships: [(slot: Int, value: RelationshipStorage)]
        var version: UInt64
    }

    /// Takes the changes of a fault that holds them out of it (it becomes a plain fault),
    /// for ``restore(_:)`` once its row is applied.
    private func setHeldChangesAside() -> HeldChanges {
        let committed = side?.committed
        var held = HeldChanges(committed: committed, attributes: [], relationships: [], version: rowVersion)
        committed?.forEachAttributeInSlotOrder { slot, _ in held.attributes.append((slot, attributeValue(at: slot))) }
        for (slot, _) in committed?.relationships ?? [] { held.relationships.append((slot, relationshipStorage(at: slot))) }
        dropCommittedCopy()
        isModified = false
        return held
    }

    /// Puts changes set aside back on top of the values just applied: they keep the
    /// values the change was based on as their committed ones, and the object keeps the
    /// row version the change was based on, so the save that writes it still finds a row
    /// changed since (optimistic locking), as it would have had the object been read
    /// when the change came. Also after a failed read: the object is the fault that holds
    /// the changes again.
    private func restore(_ held: HeldChanges) {
        for (slot, value) in held.attributes { storeAttribute(value, at: slot) }
        for (slot, value) in held.relationships { storeRelationship(value, at: slot) }
        if let committed = held.committed { sideState.committed = committed }
        rowVersion = held.version
        _bits = ObjectBits.settled(_bits | ObjectBits.modified | ObjectBits.saved)
    }

    /// The object's current persistent state, for a save. Transient attributes are nil.
    func makeSnapshot() -> ObjectSnapshot {
        let entity = _entity
        let layout = entity.layout
        var attributes: [AttributeValue?] = []
        attributes.reserveCapacity(layout.attributes.count)
        for slot in layout.attributes.indices {
            attributes.append(layout.isTransient[slot] ? nil : attributeValue(at: slot))
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

    /// Empties every relationship: to-one ones nil, to-many ones empty.
    private func clearRelationships() {
        for (slot, relationship) in _entity.relationships.enumerated() {
            storeRelationship(relationship.isToMany ? .empty(for: relationship) : .toOne(nil), at: slot)
        }
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

    /// Makes a new object (just made with `init(entity:)`) the fault of row `primaryKey`
    /// of the store numbered `store`, in `owner`'s context.
    func becomeNewFault(store: UInt32, primaryKey: UInt64, owner: ObjectOwner) {
        assignPermanentKey(store: store, primaryKey: primaryKey)
        _owner = owner
        _bits = ObjectBits.settled(_bits & ~ObjectBits.faultMask | ObjectBits.fault | ObjectBits.owned)
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
            for (slot, value) in committed.attributes { storeAttribute(value, at: slot) }
            for (slot, value) in committed.relationships { storeRelationship(value, at: slot) }
            dropCommittedCopy()
        }
        // A fault that held changes is a plain fault again: nothing of it is read.
        _bits = ObjectBits.settled(_bits & ~(ObjectBits.modified | (faultState == .fault ? ObjectBits.saved : 0)))
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
            if error.code == .inaccessibleFault {
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
        side?.committed?.replaceRelationship(slot, with: .toMany(storage))
    }
}

/// Which slots a record set (``ManagedObject/apply(record:of:key:in:)``): bits in one word
/// for the first 64 attribute and relationship slots, a set beyond.
struct SlotMarks {
    private var attributeBits: UInt64 = 0
    private var relationshipBits: UInt64 = 0
    private var more: Set<Int>?

    init(attributes: Int, relationships: Int) {
        if attributes > 64 || relationships > 64 { more = [] }
    }

    mutating func markAttribute(_ slot: Int) {
        if slot < 64 { attributeBits |= 1 << UInt64(slot) } else { more?.insert(slot) }
    }

    mutating func markRelationship(_ slot: Int) {
        if slot < 64 { relationshipBits |= 1 << UInt64(slot) } else { more?.insert(-1 - slot) }
    }

    func hasAttribute(_ slot: Int) -> Bool {
        slot < 64 ? attributeBits & (1 << UInt64(slot)) != 0 : more?.contains(slot) == true
    }

    func hasRelationship(_ slot: Int) -> Bool {
        slot < 64 ? relationshipBits & (1 << UInt64(slot)) != 0 : more?.contains(-1 - slot) == true
    }
}
