import Foundation

// A parent context's side of its children: it answers their reads with its current state
// (unsaved changes included, then its own parent store) and takes in their saves. Runs
// in the parent's isolation; everything that goes back to a child is a Sendable value.
extension ObjectGraph {
    /// Where the row of an ID a child asks for comes from.
    private enum LocalRow {
        /// This context's current state of the object.
        case row(ObjectSnapshot)
        /// The object is deleted here (or its row is gone): the child sees no row.
        case gone
        /// This context has no state of its own for it: its parent store's row, under
        /// this ID.
        case upstream(ManagedObjectID)
    }

    /// What this context has for `id`.
    private func localRow(_ id: ManagedObjectID) throws(StrataError) -> LocalRow {
        guard let object = registeredObject(for: id) else {
            return .upstream(id.isTemporaryID ? family.permanentID(for: id) ?? id : id)
        }
        if object.isDeleted { return .gone }
        // Changes taken from another child before the object was read: read it now, so
        // that this child sees them.
        if object.holdsUnreadChanges, !object.fulfilIfNeeded() { try object.throwIfStorageFailed() }
        switch object.faultState {
        case .fulfilled: return .row(snapshotForChild(of: object))
        case .inaccessible: return .gone
        case .fault: return .upstream(object.objectID)
        }
    }

    /// `object`'s current persistent state for a child: deleted destinations left out
    /// (they are gone for the child even before this context's delete rules ran).
    func snapshotForChild(of object: ManagedObject) -> ObjectSnapshot {
        var snapshot = object.makeSnapshot()
        // Unsaved values are not the stored row of the object's version.
        if object.hasChanges { snapshot.version |= ObjectSnapshot.unsavedMark }
        for slot in object.entity.relationships.indices {
            switch object.relationshipStorage(at: slot) {
            case .toOne(let destination?) where destination.isDeleted:
                snapshot.relationships[slot] = .toOne(nil)
            case .toMany(let destinations) where destinations.objects.contains(where: \.isDeleted):
                snapshot.relationships[slot] = .toMany(destinations.objects.filter { !$0.isDeleted }.map(\.objectID))
            default:
                break
            }
        }
        return snapshot
    }

    /// The rows of `ids` as a child sees them, keyed by the IDs asked for.
    func rowsForChild(_ ids: [ManagedObjectID]) throws -> [ManagedObjectID: ObjectSnapshot] {
        var found: [ManagedObjectID: ObjectSnapshot] = [:]
        var upstream: [(asked: ManagedObjectID, id: ManagedObjectID)] = []
        for id in ids {
            switch try localRow(id) {
            case .row(let snapshot): found[id] = snapshot
            case .gone: continue
            case .upstream(let upstreamID) where mayReadUpstream(upstreamID): upstream.append((id, upstreamID))
            case .upstream: continue
            }
        }
        guard !upstream.isEmpty else { return found }
        let rows = try upstreamSnapshots(of: upstream.map(\.id))
        for (asked, id) in upstream { found[asked] = rows[id] }
        return found
    }

    /// The destinations of `relationship` of each of `owners` as a child sees them.
    func destinationsForChild(of owners: [ManagedObjectID], relationship: String) throws -> [ManagedObjectID: [ManagedObjectID]] {
        var found: [ManagedObjectID: [ManagedObjectID]] = [:]
        var upstream: [(asked: ManagedObjectID, id: ManagedObjectID)] = []
        for id in owners {
            let object = registeredObject(for: id)
            if let object, object.isDeleted { found[id] = []; continue }
            if let object, object.faultState == .fulfilled, let slot = object.entity.relationshipSlot(named: relationship) {
                switch object.relationshipStorage(at: slot) {
                case .toMany(let storage):
                    found[id] = storage.objects.filter { !$0.isDeleted }.map(\.objectID)
                    continue
                case .toOne(let destination):
                    found[id] = destination.flatMap { $0.isDeleted ? nil : [$0.objectID] } ?? []
                    continue
                case .notLoaded:
                    break
                }
            }
            let upstreamID = object?.objectID ?? id
            if mayReadUpstream(upstreamID) { upstream.append((id, upstreamID)) }
        }
        guard !upstream.isEmpty else { return found }
        let links = try upstreamDestinations(of: upstream.map(\.id), relationship: relationship)
        for (asked, id) in upstream {
            // Destinations deleted here are gone for the child.
            found[asked] = (links[id] ?? []).filter { registeredObject(for: $0)?.isDeleted != true }
        }
        return found
    }

    /// A child's fetch: this context's own fetch, with its unsaved changes (whatever the
    /// request says: they are the child's parent store), sorted and windowed, as rows.
    func fetchForChild<Result>(_ request: FetchRequest<Result>) throws -> [FetchRows] {
        var request = request
        request.includesPendingChanges = true
        switch request.resultType {
        case .count:
            return [.count(try count(for: request))]
        case .managedObjectID:
            return [.objectIDs(try fetchObjects(request).map(\.objectID))]
        case .managedObject, .dictionary:
            request.resultType = .managedObject
            request.returnsObjectsAsFaults = false
            request.fetchBatchSize = 0
            let objects = try fetchObjects(request)
            try fulfilFaults(objects)
            return [.snapshots(objects.filter { $0.faultState == .fulfilled }.map { snapshotForChild(of: $0) })]
        }
    }

    /// Takes in a child's save: its inserted objects are inserted here, its changes set
    /// on the objects here, its deletions deleted here; all become unsaved changes of
    /// this context. All or nothing: an object the child changed or deleted that is
    /// deleted here (or gone from the store), or that is not here in the state the child
    /// based its change on (see ``holds(_:of:)``), fails the whole save with a conflict
    /// before anything changes.
    ///
    /// Under a merging policy (the child's, ``ChildSave/policy``), conflicting objects are
    /// settled instead, property by property against this context's current state
    /// (``settleChildConflict(_:object:save:into:)``): only a failed
    /// ``ManagedObjectContext/detectConflicts(for:)`` check still fails the save.
    ///
    /// - Returns: the objects inserted, updated and deleted here, for the siblings that
    ///   merge automatically, and what settling conflicts did, for the child.
    func acceptChildSave(_ save: ChildSave) throws -> (changes: ObjectChangeSets, merge: MergeResult) {
        let model = try model
        if model.hasUniquenessConstraints, !save.inserted.isEmpty || !save.updated.isEmpty { try checkUniqueness(of: save) }
        // Check every existing object first, so a failure changes nothing.
        var conflicts: [MergeConflict] = []
        // The indices (in `targets`) of the objects in conflict.
        var conflicting = Set<Int>()
        // Versions as conflicts report them: without the mark of a parent's unsaved state.
        func stored(_ version: UInt64) -> UInt64 { version & ~ObjectSnapshot.unsavedMark }
        let updatedCount = save.updated.count
        // Changes to objects this context has not read, at the row versions stored:
        // taken without reading the objects' values.
        let unread = try unreadChanges(in: save)
        // The IDs of the updated, deleted and checked objects, in that order, by index
        // (not gathered into a list: a million changes would copy a million IDs twice).
        let deletedEnd = updatedCount + save.deleted.count
        func id(_ index: Int) -> ManagedObjectID {
            index < updatedCount ? save.updated[index].objectID
                : index < deletedEnd ? save.deleted[index - updatedCount] : save.checked[index - deletedEnd]
        }
        let count = deletedEnd + save.checked.count
        var targets: [ManagedObject] = []
        targets.reserveCapacity(count)
        for index in 0..<count {
            targets.append(index < unread.count ? unread[index] ?? object(for: id(index)) : object(for: id(index)))
        }
        func isUnread(_ index: Int) -> Bool { index < unread.count && unread[index] != nil }
        // The faults among them read in one transaction per store; one that cannot be
        // read that way is read (and its failure reported) on its own below.
        try? fulfilFaults(unread.isEmpty ? targets : targets.indices.compactMap { isUnread($0) ? nil : targets[$0] })
        // This context's state, for a conflict record.
        func state(of object: ManagedObject) -> PropertySnapshot {
            var snapshot = snapshotForChild(of: object)
            snapshot.version = stored(snapshot.version)
            return PropertySnapshot(snapshot, entity: object.entity)
        }
        for (index, object) in targets.enumerated() where !isUnread(index) {
            let id = id(index)
            if object.isDeleted {
                conflicts.append(MergeConflict(objectID: id, oldVersion: stored(object.rowVersion), newVersion: nil))
                conflicting.insert(index)
            } else if !object.fulfilIfNeeded() {
                try object.throwIfStorageFailed()  // the store could not be read: no conflict is known
                conflicts.append(MergeConflict(objectID: id, oldVersion: stored(object.rowVersion), newVersion: nil))
                conflicting.insert(index)
            } else if index < updatedCount {
                // The change is read in place (no copy of its lists).
                if let version = save.updated[index].baseVersion, try !holds(save.updated[index], of: object) {
                    conflicts.append(MergeConflict(
                        objectID: id, persistedSnapshot: state(of: object), oldVersion: stored(version), newVersion: stored(object.rowVersion)))
                    conflicting.insert(index)
                } else if save.policy.merges, !save.updated[index].members.isEmpty,
                          try membersChangedHere(save.updated[index], state: save.objectStates[id], of: object) {
                    // Both sides changed the members of a relationship: the policy decides
                    // (under .error members merge as always).
                    conflicts.append(MergeConflict(
                        objectID: id, persistedSnapshot: state(of: object), oldVersion: stored(save.updated[index].baseVersion ?? 0),
                        newVersion: stored(object.rowVersion)))
                    conflicting.insert(index)
                }
            } else if let base = save.bases[id], try !holds(base, of: object) {
                conflicts.append(MergeConflict(
                    objectID: id, persistedSnapshot: state(of: object), oldVersion: stored(base.version), newVersion: stored(object.rowVersion)))
                conflicting.insert(index)
            }
        }
        // A failed conflict check fails the save whatever the policy (rule 9).
        let settles = save.policy.merges && !conflicting.contains { $0 >= deletedEnd }
        guard conflicts.isEmpty || settles else { throw StrataError.mergeConflicts(conflicts) }
        // The to-many relationships the child changed are read now, so that a store that
        // cannot be read fails the save before anything changes (not drop the changes).
        for index in save.updated.indices where !save.updated[index].members.isEmpty && !conflicting.contains(index) {
            let object = targets[index]
            for members in save.updated[index].members where members.slot < object.entity.relationships.count {
                if !object.loadRelationshipIfNeeded(members.slot) { try object.throwIfStorageFailed() }
            }
        }
        var entities: [String: EntityDescription] = [:]
        for snapshot in save.inserted {
            guard let entity = model.entitiesByName[snapshot.objectID.entityName], !entity.isAbstract else {
                throw StrataError.unknownEntity(snapshot.objectID.entityName)
            }
            entities[entity.name] = entity
        }

        var merged = ObjectChangeSets()
        var newObjects: [(ManagedObject, ObjectSnapshot)] = []
        for snapshot in save.inserted {
            if let registered = registeredObject(for: snapshot.objectID), registered.owner === self {
                // Saved up before (a second save of the same child after a failed one).
                newObjects.append((registered, snapshot))
                continue
            }
            guard let entity = entities[snapshot.objectID.entityName] else { continue }
            let object = entity.managedObjectClass.init(entity: entity)
            object.objectID = snapshot.objectID
            registerInsertFromChild(object, store: save.stores[snapshot.objectID])
            newObjects.append((object, snapshot))
            merged.inserted.append(object)
        }
        // Values after every new object exists, so relationships among them resolve.
        for (object, snapshot) in newObjects {
            for (slot, attribute) in object.entity.attributes.enumerated() where !attribute.isTransient {
                object.storeAttribute(slot < snapshot.attributes.count ? snapshot.attributes[slot] : nil, at: slot)
            }
            for (slot, relationship) in object.entity.relationships.enumerated() {
                let value = slot < snapshot.relationships.count ? snapshot.relationships[slot] : .notLoaded
                switch value {
                case .toOne(let id): object.storeRelationship(.toOne(id.map(self.object(for:))), at: slot)
                case .toMany(let ids):
                    object.storeRelationship(
                        .toMany(ToManyStorage(isOrdered: relationship.isOrdered, objects: ids.map(self.object(for:)))), at: slot)
                case .notLoaded:
                    object.storeRelationship(.toMany(ToManyStorage(isOrdered: relationship.isOrdered)), at: slot)
                }
            }
            object.markChanged()
        }
        merged.updated.reserveCapacity(updatedCount)
        var settled = MergeResult()
        for index in save.updated.indices {
            let object = targets[index]
            if conflicting.contains(index) { continue }   // settled below, once the other changes are in
            if isUnread(index) {
                if let undoRecorder { undoRecorder.willTakeUnreadChange(save.updated[index], of: object) }
                object.takeUnreadChange(save.updated[index], version: save.updated[index].baseVersion!)
                let slot = save.updated[index].attribute(0).slot
                objectWillChange(object, key: slot < object.entity.attributes.count ? object.entity.attributes[slot].name : "")
            } else {
                apply(save.updated[index], to: object)
            }
            merged.updated.append(object)
        }
        let toOneChanges = conflicting.isEmpty ? [:] : childToOneChanges(in: save)
        for index in conflicting.sorted() where index < updatedCount {
            if try settleChildConflict(index, object: targets[index], save: save, toOneChanges: toOneChanges, into: &settled) {
                merged.updated.append(targets[index])
            }
        }
        for index in updatedCount..<deletedEnd where conflicting.contains(index) {
            try settleChildDeletion(
                index - updatedCount, object: targets[index], save: save, toOneChanges: toOneChanges, into: &settled,
                deleted: &merged.deleted)
        }
        for (index, object) in targets[updatedCount..<deletedEnd].enumerated()
        where !object.isDeleted && !conflicting.contains(updatedCount + index) {
            try delete(object)
            merged.deleted.append(object)
        }
        for object in targets[deletedEnd...] where !object.isInserted {
            unsaved.conflictChecks[ObjectIdentifier(object)] = object
        }
        if !settled.isEmpty { finishSettling(&settled) }
        return (merged, settled)
    }

    /// The changes of `save` (indices in `save.updated`) this context takes without
    /// reading the objects' values: changes of attributes only, to objects it has not
    /// registered, whose stored rows are still at the version the child read them at.
    /// Reading a row's version is a step of a cursor and the record's first bytes; the
    /// child read its values through this context, which had none of its own, so the
    /// values it read are the stored ones, and the change holds (see
    /// ``holds(_:of:)``). The objects become faults that hold the changes
    /// (``ManagedObject/takeUnreadChange(_:version:)``) and are read when something reads
    /// them, or when this context saves.
    ///
    /// Only a root context reading its stores' newest state (a pinned one reads its
    /// snapshot, a child its parent). The store's version is the newest one: a cached row
    /// is never newer, so a change based on an older one is not taken here (it goes the
    /// way of any other change, and the root's save checks its version).
    ///
    /// - Returns: the object of each change taken so, by index in `save.updated` (nil
    ///   for the others); empty when none is.
    private func unreadChanges(in save: ChildSave) throws -> [ManagedObject?] {
        guard parentContext == nil, readGenerationIsUnpinned, !save.updated.isEmpty else { return [] }
        var candidates: [(index: Int, object: ManagedObject, version: UInt64)] = []
        // (The changes are read in place: a copy of one costs more than the checks.)
        for index in save.updated.indices {
            guard let version = save.updated[index].baseVersion, save.updated[index].attributeCount > 0,
                  save.updated[index].changesAttributesOnly,
                  let object = newFault(forUnregistered: save.updated[index].objectID)
            else { continue }
            candidates.append((index, object, version))
        }
        guard !candidates.isEmpty else { return [] }
        let stores = try coordinator.persistentStores
        var unread: [ManagedObject?] = Array(repeating: nil, count: save.updated.count)
        var found = false
        // Mostly one store: grouped without hashing then.
        let first = candidates[0].object.storeNumber
        let groups = candidates.allSatisfy { $0.object.storeNumber == first }
            ? [candidates] : Array(Dictionary(grouping: candidates, by: { $0.object.storeNumber }).values)
        for group in groups {
            let number = group[0].object.storeNumber
            // A server store's changes are taken the ordinary way: the object is read.
            guard let store = stores.first(where: { StoreNumbers.number(for: $0.identifier) == number }), store.file != nil else { continue }
            var position = 0
            // Rows come in the order asked for, those missing skipped.
            try coordinator.forEachRecord(of: group.map(\.object), in: store) { object, _, _, record in
                while group[position].object !== object { position += 1 }
                var reader = RecordCodec.Reader(record)
                if let version = try? reader.header(), version == group[position].version {
                    unread[group[position].index] = object
                    found = true
                }
            }
        }
        return found ? unread : []
    }

    /// Whether this context holds `object` in the state a child's change was based on:
    /// each attribute, to-one and ordered to-many relationship the change sets must hold
    /// the value the child read; properties it does not set may differ (they keep this
    /// context's value), and unordered to-many relationships take the members it added
    /// and removed, whatever the other members are. The compare part of the child save's
    /// compare-and-set: without it, the values the child computed from an older state
    /// would overwrite a newer one (a lost update).
    ///
    /// Compared with this context's current state (its unsaved changes included, which
    /// the child sees when it reads through it), whatever the row versions: equal values
    /// at another row version are accepted (this context saved the child's own values
    /// since, or read the row again and found what the child read). Relationships this
    /// context has not loaded are loaded here.
    ///
    /// - Throws: the storage error when a relationship cannot be read.
    private func holds(_ change: ObjectChange, of object: ManagedObject) throws -> Bool {
        let entity = object.entity
        for index in 0..<change.attributeCount {
            let attribute = change.attribute(index)
            guard attribute.slot < entity.attributes.count else { continue }
            if attribute.base != object.attributeValue(at: attribute.slot) { return false }
        }
        for relationship in change.toOne + change.ordered where relationship.slot < entity.relationships.count {
            if try !holds(relationship.base, slot: relationship.slot, of: object) { return false }
        }
        return true
    }

    /// Whether this context changed the members of an unordered to-many relationship that
    /// `change` changes too, since the child read them: its members here are not the ones
    /// the child had before its change (`state` is the child's whole state).
    ///
    /// - Throws: the storage error when a relationship cannot be read.
    private func membersChangedHere(_ change: ObjectChange, state: ObjectSnapshot?, of object: ManagedObject) throws -> Bool {
        guard let state else { return false }
        for members in change.members where members.slot < object.entity.relationships.count && members.slot < state.relationships.count {
            guard case .toMany(let now) = state.relationships[members.slot] else { continue }
            let added = Set(members.added.map(canonicalID))
            let read = Set(now.map(canonicalID)).subtracting(added).union(members.removed.map(canonicalID))
            if !object.loadRelationshipIfNeeded(members.slot) {
                try object.throwIfStorageFailed()
                return true
            }
            let here = Set(object.relationshipStorage(at: members.slot).objects.filter { !$0.isDeleted }.map { canonicalID($0.objectID) })
            if here != read { return true }
        }
        return false
    }

    /// Whether this context holds `object` in the state `base` a child's deletion or
    /// conflict check was based on: every property, including the members of every
    /// to-many relationship the child had loaded (its delete rules acted on those
    /// members, and this context's rules act on its own). See ``holds(_:of:)``.
    ///
    /// - Throws: the storage error when a relationship cannot be read.
    private func holds(_ base: ObjectSnapshot, of object: ManagedObject) throws -> Bool {
        let entity = object.entity
        for slot in entity.storedAttributeSlots {
            guard slot < base.attributes.count else { return false }
            if base.attributes[slot] != object.attributeValue(at: slot) { return false }
        }
        for slot in entity.relationships.indices {
            guard slot < base.relationships.count else { return false }
            if try !holds(base.relationships[slot], slot: slot, of: object) { return false }
        }
        return true
    }

    /// Whether relationship `slot` of `object` holds what the child read (`read`).
    private func holds(_ read: RelationshipSnapshot, slot: Int, of object: ManagedObject) throws -> Bool {
        let ids: [ManagedObjectID]
        switch read {
        case .notLoaded: return true   // the child did not read it: its change did not come from it
        case .toOne(let id): ids = id.map { [$0] } ?? []
        case .toMany(let members): ids = members
        }
        if !object.loadRelationshipIfNeeded(slot) {
            try object.throwIfStorageFailed()
            return false   // the row is gone
        }
        // Members deleted here are gone for the child (it reads without them).
        let held = object.relationshipStorage(at: slot).objects.filter { !$0.isDeleted }.map(\.objectID)
        let relationship = object.entity.relationships[slot]
        let ordered = !relationship.isToMany || relationship.isOrdered
        return ordered ? ids.map(canonicalID) == held.map(canonicalID) : Set(ids.map(canonicalID)) == Set(held.map(canonicalID))
    }

    /// `id`, or the permanent ID the tree recorded for it (a child may still name an
    /// object by the temporary ID it had when the child read it).
    func canonicalID(_ id: ManagedObjectID) -> ManagedObjectID {
        id.isTemporaryID ? family.permanentID(for: id) ?? id : id
    }

    /// Sets a child's changed properties on `object` (marking it changed here). Both
    /// sides of a relationship come in the save (the child kept its inverses), so each
    /// side is set as it is, without inverse maintenance.
    private func apply(_ change: ObjectChange, to object: ManagedObject) {
        let entity = object.entity
        for index in 0..<change.attributeCount {
            let attribute = change.attribute(index)
            guard attribute.slot < entity.attributes.count else { continue }
            object.prepareAttributeChange(attribute.slot)
            object.storeAttribute(attribute.value, at: attribute.slot)
        }
        for relationship in change.toOne where relationship.slot < entity.relationships.count {
            object.prepareRelationshipChange(relationship.slot)
            object.storeRelationship(.toOne(relationship.destinations.first.map(self.object(for:))), at: relationship.slot)
        }
        for relationship in change.ordered where relationship.slot < entity.relationships.count {
            object.prepareRelationshipChange(relationship.slot)
            object.storeRelationship(
                .toMany(ToManyStorage(isOrdered: true, objects: relationship.destinations.map(self.object(for:)))), at: relationship.slot)
        }
        for members in change.members where members.slot < entity.relationships.count {
            guard object.loadRelationshipIfNeeded(members.slot), case .toMany(var storage) = object.relationshipStorage(at: members.slot)
            else { continue }
            object.prepareRelationshipChange(members.slot)
            object.storeRelationship(.notLoaded, at: members.slot)  // so the changes below do not copy
            for id in members.removed { _ = storage.remove(self.object(for: id)) }
            for id in members.added { _ = storage.insert(self.object(for: id)) }
            object.storeRelationship(.toMany(storage), at: members.slot)
        }
        object.markChanged()
    }
}
