import Foundation

// A parent context settling a child's conflicts under the child's merge policy (rules in
// <doc:MergePolicies>): the same decisions as a root save's write (``RowMerge``), made
// against this context's current state, then every relationship edge they touch made to
// agree on both ends, with the live objects here. Runs in the parent's isolation, inside
// ``ObjectGraph/acceptChildSave(_:)``, after every check passed.
extension ObjectGraph {
    /// Settles the conflicting change `index` of `save` on `object` (this context's):
    /// merged property by property, or dropped when the object is deleted here.
    ///
    /// - Returns: whether the object changed here.
    /// - Throws: what a custom resolver throws; storage errors of relationships that
    ///   cannot be read.
    ///
    /// `toOneChanges` lists the to-one relationship slots the child's save sets, by
    /// object (``childToOneChanges(in:)``).
    func settleChildConflict(
        _ index: Int, object: ManagedObject, save: ChildSave, toOneChanges: [ManagedObjectID: [Int]], into result: inout MergeResult
    ) throws -> Bool {
        let change = save.updated[index]
        let entity = object.entity
        let state = save.objectStates[change.objectID]
            ?? ObjectSnapshot(objectID: change.objectID, entity: entity, version: change.baseVersion ?? 0)
        func stored(_ version: UInt64) -> UInt64 { version & ~ObjectSnapshot.unsavedMark }

        guard !object.isDeleted, object.faultState == .fulfilled else {
            // Deleted here (or its row is gone): the deletion stands (rule 7).
            let merge = RowMerge(entity: entity, object: state, change: change, persisted: state, canonical: canonicalID)
            result.vanished.insert(change.objectID)
            result.settled += 1
            for slot in entity.relationships.indices {
                let candidates = Self.destinations(merge.object.relationships[slot]) + Self.destinations(merge.cached.relationships[slot])
                try makeEdgesAgree(
                    of: object, slot: slot, candidates: candidates, target: [], own: [], toOneChanges: toOneChanges,
                    touched: &result.touched)
            }
            return false
        }
        for (slot, relationship) in entity.relationships.enumerated() where relationship.isToMany {
            if !object.loadRelationshipIfNeeded(slot) { try object.throwIfStorageFailed() }
        }
        var persisted = snapshotForChild(of: object)
        persisted.version = stored(persisted.version)
        let merge = RowMerge(entity: entity, object: state, change: change, persisted: persisted, canonical: canonicalID)
        let merged = try merge.merged(under: save.policy, storedVersion: stored(object.rowVersion))
        result.settled += 1

        var changed = false
        for slot in entity.storedAttributeSlots where merged.attributes[slot] != object.attributeValue(at: slot) {
            object.prepareAttributeChange(slot)
            object.storeAttribute(merged.attributes[slot], at: slot)
            changed = true
        }
        for (slot, relationship) in entity.relationships.enumerated() {
            let ordered = !relationship.isToMany || relationship.isOrdered
            guard !RowMerge.same(merged.relationships[slot], persisted.relationships[slot], ordered: ordered) else { continue }
            switch merged.relationships[slot] {
            case .toOne(let id):
                object.prepareRelationshipChange(slot)
                object.storeRelationship(.toOne(id.map(self.object(for:))), at: slot)
            case .toMany(let ids):
                object.prepareRelationshipChange(slot)
                object.storeRelationship(
                    .toMany(ToManyStorage(isOrdered: relationship.isOrdered, objects: ids.map(self.object(for:)))), at: slot)
            case .notLoaded:
                continue
            }
            changed = true
        }
        if changed { object.markChanged() }
        for slot in entity.relationships.indices {
            let candidates = [merge.object, merge.cached, persisted, merged].flatMap { Self.destinations($0.relationships[slot]) }
            try makeEdgesAgree(
                of: object, slot: slot, candidates: candidates, target: Set(Self.destinations(merged.relationships[slot])),
                own: Set(Self.destinations(persisted.relationships[slot]).map(canonicalID)), toOneChanges: toOneChanges,
                touched: &result.touched)
        }
        result.merged[change.objectID] = merged   // its final state is taken by finishSettling(_:)
        return changed
    }

    /// Settles the conflicting deletion `index` of `save` of `object` (changed here since
    /// the child read it): under the object-trumping policies (and a custom one) it is
    /// deleted here, after the relationships the child never saw are cut (so that this
    /// context's delete rules act only on what the child saw); under the others it stays
    /// as it is here, and the relationships the child's save took from it are restored
    /// where that moves no object (rule 8).
    func settleChildDeletion(
        _ index: Int, object: ManagedObject, save: ChildSave, toOneChanges: [ManagedObjectID: [Int]], into result: inout MergeResult,
        deleted: inout [ManagedObject]
    ) throws {
        let id = save.deleted[index]
        guard !object.isDeleted, object.faultState == .fulfilled else { return }   // gone here already
        let entity = object.entity
        for (slot, relationship) in entity.relationships.enumerated() where relationship.isToMany {
            if !object.loadRelationshipIfNeeded(slot) { try object.throwIfStorageFailed() }
        }
        var persisted = snapshotForChild(of: object)
        persisted.version &= ~ObjectSnapshot.unsavedMark
        let base = save.bases[id]
        result.settled += 1
        switch save.policy {
        case .mergeByPropertyObjectTrump, .overwrite, .custom:
            for slot in entity.relationships.indices {
                let seen = Set(base.map { Self.destinations($0.relationships[slot]).map(canonicalID) } ?? [])
                let unseen = Self.destinations(persisted.relationships[slot]).filter { !seen.contains($0) }
                guard !unseen.isEmpty else { continue }
                let kept = Set(Self.destinations(persisted.relationships[slot])).subtracting(unseen)
                try makeEdgesAgree(
                    of: object, slot: slot, candidates: unseen, target: kept, own: Set(kept.map(canonicalID)), toOneChanges: toOneChanges,
                    touched: &result.touched)
                try cut(unseen, from: object, slot: slot)
            }
            try delete(object)
            deleted.append(object)
        case .mergeByPropertyStoreTrump, .rollback, .error:
            for slot in entity.relationships.indices {
                let held = Self.destinations(persisted.relationships[slot])
                try makeEdgesAgree(
                    of: object, slot: slot, candidates: held, target: Set(held), own: Set(held.map(canonicalID)), toOneChanges: toOneChanges,
                    touched: &result.touched)
            }
            result.undeleted[id] = persisted   // its final state is taken by finishSettling(_:)
        }
    }

    /// The final states of the objects settled, for the child: each merged or kept
    /// object's state here once every edge agrees (to-many relationships not loaded: the
    /// child reads them again). Objects merged or kept are not also touched.
    func finishSettling(_ result: inout MergeResult) {
        func final(_ id: ManagedObjectID) -> ObjectSnapshot? {
            guard let object = registeredObject(for: canonicalID(id)), object.owner === self, !object.isDeleted else { return nil }
            var snapshot = snapshotForChild(of: object)
            snapshot.objectID = id
            snapshot.relationships = snapshot.relationships.map { value in
                if case .toMany = value { .notLoaded } else { value }
            }
            return snapshot
        }
        for id in Array(result.merged.keys) { result.merged[id] = final(id) }
        for id in Array(result.undeleted.keys) { result.undeleted[id] = final(id) }
        result.touched.subtract(result.merged.keys.map(canonicalID))
        result.touched.subtract(result.undeleted.keys.map(canonicalID))
    }

    /// The destinations of a relationship value.
    private static func destinations(_ value: RelationshipSnapshot) -> [ManagedObjectID] {
        switch value {
        case .toOne(let id): id.map { [$0] } ?? []
        case .toMany(let ids): ids
        case .notLoaded: []
        }
    }

    /// The to-one relationship slots `save` sets, by object (canonical IDs).
    func childToOneChanges(in save: ChildSave) -> [ManagedObjectID: [Int]] {
        var changes: [ManagedObjectID: [Int]] = [:]
        for change in save.updated where !change.toOne.isEmpty {
            changes[canonicalID(change.objectID), default: []] += change.toOne.map(\.slot)
        }
        return changes
    }

    /// Makes each `candidates` object's inverse of relationship `slot` of `object` hold
    /// `object` exactly when `target` holds the candidate. A candidate that is deleted,
    /// gone, or whose to-one inverse holds another object (which is not displaced) is
    /// taken out of `object`'s relationship instead. When `object`'s side is a to-many one,
    /// a candidate whose to-one inverse does not hold `object`, and which the child's save
    /// does not set (`toOneChanges`), keeps that to-one: the to-one end decides (rule 11),
    /// and this context's views of the two ends may come from different moments (a to-many
    /// loaded after another save moved the object out, or before it moved in). The
    /// candidate is left as this context had it when it was among `object`'s own members
    /// before the decision (`own`), else taken out. Every candidate is `touched` (the child
    /// reads it again).
    private func makeEdgesAgree(
        of object: ManagedObject, slot: Int, candidates: [ManagedObjectID], target: Set<ManagedObjectID>,
        own: Set<ManagedObjectID>, toOneChanges: [ManagedObjectID: [Int]], touched: inout Set<ManagedObjectID>
    ) throws {
        let inverseName = object.entity.relationships[slot].inverseName
        var seen = Set<ManagedObjectID>()
        for candidate in candidates.map(canonicalID) where seen.insert(candidate).inserted {
            touched.insert(candidate)
            let present = target.contains(candidate) && !object.isDeleted
            let end = self.object(for: candidate)
            guard !end.isDeleted, end.fulfilIfNeeded(), let inverse = end.entity.relationshipSlot(named: inverseName) else {
                if present { try cut([candidate], from: object, slot: slot) }
                continue
            }
            if end.entity.relationships[inverse].isToMany, !end.loadRelationshipIfNeeded(inverse) {
                try end.throwIfStorageFailed()
                continue
            }
            let storage = end.relationshipStorage(at: inverse)
            guard storage.contains(object) != present else { continue }
            switch storage {
            case .toOne(let held):
                if present, object.entity.relationships[slot].isToMany, toOneChanges[candidate]?.contains(inverse) != true {
                    // A to-many side never sets the other end's to-one, unless the child set
                    // it (a deletion undone gives back what its nullify took): that end
                    // decides (rule 11), and this context may have read it before or after
                    // another save moved it. A member this context held itself stays as it
                    // was (nothing changes that the decision did not change); another one
                    // is taken out.
                    if !own.contains(candidate) { try cut([candidate], from: object, slot: slot) }
                    continue
                }
                if present, let held, held !== object {
                    try cut([candidate], from: object, slot: slot)   // it stays with the object it holds
                    continue
                }
                if !present, held === object, object.entity.relationships[slot].isToMany {
                    // A to-many side never clears the other end's to-one: that end decides
                    // (its own change, or none), so the object keeps it as a member, when it
                    // was one here. One this context's members did not hold (they were read
                    // after another save moved it out, its to-one before) is not added.
                    if own.contains(candidate) { try keep(end, in: object, slot: slot) }
                    continue
                }
                end.prepareRelationshipChange(inverse)
                end.storeRelationship(.toOne(present ? object : nil), at: inverse)
            case .toMany(var members):
                end.prepareRelationshipChange(inverse)
                end.storeRelationship(.notLoaded, at: inverse)   // so the change below does not copy
                if present { _ = members.insert(object) } else { _ = members.remove(object) }
                end.storeRelationship(.toMany(members), at: inverse)
            case .notLoaded:
                continue
            }
            end.markChanged()
        }
    }

    /// Puts `member` back into to-many relationship `slot` of `object` (its side only).
    private func keep(_ member: ManagedObject, in object: ManagedObject, slot: Int) throws {
        guard !object.isDeleted, case .toMany(var members) = object.relationshipStorage(at: slot), !members.contains(member) else { return }
        object.prepareRelationshipChange(slot)
        object.storeRelationship(.notLoaded, at: slot)
        _ = members.insert(member)
        object.storeRelationship(.toMany(members), at: slot)
        object.markChanged()
    }

    /// Takes `ids` out of relationship `slot` of `object` (its side only).
    private func cut(_ ids: [ManagedObjectID], from object: ManagedObject, slot: Int) throws {
        guard !object.isDeleted else { return }
        let ids = Set(ids)
        switch object.relationshipStorage(at: slot) {
        case .toOne(let held?) where ids.contains(canonicalID(held.objectID)):
            object.prepareRelationshipChange(slot)
            object.storeRelationship(.toOne(nil), at: slot)
        case .toMany(var members):
            let leaving = members.objects.filter { ids.contains(canonicalID($0.objectID)) }
            guard !leaving.isEmpty else { return }
            object.prepareRelationshipChange(slot)
            object.storeRelationship(.notLoaded, at: slot)
            for member in leaving { _ = members.remove(member) }
            object.storeRelationship(.toMany(members), at: slot)
        default:
            return
        }
        object.markChanged()
    }
}
