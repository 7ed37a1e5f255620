import Foundation

// A parent context checking the uniqueness constraints of a child's new objects before it
// takes the child's save, so that an editor child gets the conflict before the root does.
extension ObjectGraph {
    /// One claim of a constraint's values.
    private struct Claim: Hashable {
        let owner: String
        let constraint: [String]
        let values: [AttributeValue]
    }

    /// Checks the uniqueness constraints of the values `save` claims, under
    /// ``MergePolicy/error``: its new objects' values and the values its changes set (the
    /// rest of a compound constraint's values as this context holds them), against each
    /// other, against this context's new and changed objects, and against the stored
    /// objects this context and the save do not delete or change away from those values.
    /// Under a merging policy the root's save settles these conflicts (new objects claiming
    /// the same values become one there, rule 10 of <doc:MergePolicies>) and reports what
    /// it cannot settle.
    ///
    /// - Throws: ``StrataError/constraintConflicts(_:)`` with every conflict; nothing has
    ///   changed then. Storage errors of the unique indexes' reads.
    func checkUniqueness(of save: ChildSave) throws {
        guard case .error = save.policy else { return }
        let model = try model
        var claims: [Claim: [ManagedObjectID]] = [:]
        var order: [Claim] = []
        /// The objects of the save that change their values of a constraint, by its owner and
        /// attributes.
        var moving: [[String]: Set<ManagedObjectID>] = [:]
        func claim(_ constraint: [String], owner: String, of id: ManagedObjectID, values: [AttributeValue?]) {
            let present = values.compactMap { $0 }
            guard present.count == constraint.count else { return }   // a nil: not constrained
            let claim = Claim(owner: owner, constraint: constraint, values: present)
            if claims[claim] == nil { order.append(claim) }
            claims[claim, default: []].append(id)
        }
        for snapshot in save.inserted {
            guard let entity = model.entitiesByName[snapshot.objectID.entityName], !entity.uniquenessConstraints.isEmpty else { continue }
            for (constraint, owner) in zip(entity.uniquenessConstraints, entity.uniquenessConstraintOwners) {
                claim(constraint, owner: owner, of: snapshot.objectID, values: constraint.map { name in
                    entity.attributeSlot(named: name).flatMap { $0 < snapshot.attributes.count ? snapshot.attributes[$0] : nil }
                })
            }
        }
        for change in save.updated {
            guard let entity = model.entitiesByName[change.objectID.entityName], !entity.uniquenessConstraints.isEmpty else { continue }
            // The change's attributes are few (most changes set one or two): looked up in place.
            func set(_ slot: Int) -> AttributeValue?? {
                for index in 0..<change.attributeCount where change.attribute(index).slot == slot { return .some(change.attribute(index).value) }
                return nil
            }
            var object: ManagedObject?
            for (constraint, owner) in zip(entity.uniquenessConstraints, entity.uniquenessConstraintOwners) {
                let slots = constraint.compactMap { entity.attributeSlot(named: $0) }
                guard slots.count == constraint.count, slots.contains(where: { set($0) != nil }) else { continue }
                moving[[owner] + constraint, default: []].insert(change.objectID)
                // The values the change does not set, as this context holds them.
                if object == nil, slots.contains(where: { set($0) == nil }) {
                    let found = self.object(for: change.objectID)
                    if found.faultState == .fault { try? fireFault(of: found) }
                    object = found.faultState == .fault ? nil : found
                }
                var values: [AttributeValue?] = []
                for slot in slots {
                    if let value = set(slot) { values.append(value) } else { values.append(object?.attributeValue(at: slot)) }
                }
                claim(constraint, owner: owner, of: change.objectID, values: values)
            }
        }
        guard !claims.isEmpty else { return }
        // This context's own new and changed objects, by the values they claim (unless the
        // save moves them off those values).
        var here: [Claim: ManagedObjectID] = [:]
        var changedHere: [ManagedObjectID: ManagedObject] = [:]
        for object in inserted + updated where !object.isDeleted {
            changedHere[object.objectID] = object
            let entity = object.entity
            for (constraint, owner) in zip(entity.uniquenessConstraints, entity.uniquenessConstraintOwners) {
                if moving[[owner] + constraint]?.contains(object.objectID) == true { continue }
                let values = constraint.compactMap { name in entity.attributeSlot(named: name).flatMap { object.attributeValue(at: $0) } }
                guard values.count == constraint.count else { continue }
                here[Claim(owner: owner, constraint: constraint, values: values)] = object.objectID
            }
        }
        var conflicts: [ConstraintConflict] = []
        for claim in order {
            guard let claimants = claims[claim] else { continue }
            var existing = here[claim].flatMap { claimants.contains($0) ? nil : $0 }
            if existing == nil, let first = claimants.first, let entity = model.entitiesByName[first.entityName] {
                let store = try coordinator.defaultStore(for: first.entityName)
                // A server store checks its constraints when it writes the save.
                guard let file = store.file else { continue }
                let holder = try file.holder(
                    ofValues: { slot in
                        guard let name = entity.attributes.indices.contains(slot) ? entity.attributes[slot].name : nil,
                              let index = claim.constraint.firstIndex(of: name) else { return nil }
                        return claim.values[index]
                    },
                    constraint: claim.constraint, entity: first.entityName)
                if let holder, !claimants.contains(holder), moving[[claim.owner] + claim.constraint]?.contains(holder) != true {
                    // Unless this context deletes it, or changed it away from these values.
                    let object = registeredObject(for: holder)
                    let gone = object?.isDeleted == true
                    let movedAway = changedHere[holder] != nil   // its current values are in `here` when it still claims them
                    if !gone && !movedAway { existing = holder }
                }
            }
            guard claimants.count > 1 || existing != nil else { continue }
            conflicts.append(ConstraintConflict(
                entityName: claim.owner, constraint: claim.constraint,
                values: Dictionary(uniqueKeysWithValues: zip(claim.constraint, claim.values)), objectIDs: claimants,
                existingObjectID: existing))
        }
        guard conflicts.isEmpty else { throw StrataError.constraintConflicts(conflicts) }
    }
}
