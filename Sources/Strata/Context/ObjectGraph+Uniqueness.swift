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

    /// Checks the uniqueness constraints of the objects `save` inserts: against each
    /// other, against this context's new and changed objects, and (under
    /// ``MergePolicy/error``; a merging policy upserts at the root's save) against the
    /// stored objects this context does not delete or change away from those values.
    ///
    /// - Throws: ``StrataError/constraintConflicts(_:)`` with every conflict; nothing has
    ///   changed then. Storage errors of the unique indexes' reads.
    func checkUniqueness(of save: ChildSave) throws {
        let model = try model
        var claims: [Claim: [ManagedObjectID]] = [:]
        var order: [Claim] = []
        for snapshot in save.inserted {
            guard let entity = model.entitiesByName[snapshot.objectID.entityName], !entity.uniquenessConstraints.isEmpty else { continue }
            for (constraint, owner) in zip(entity.uniquenessConstraints, entity.uniquenessConstraintOwners) {
                var values: [AttributeValue] = []
                for name in constraint {
                    guard let slot = entity.attributeSlot(named: name), slot < snapshot.attributes.count,
                          let value = snapshot.attributes[slot] else { break }
                    values.append(value)
                }
                guard values.count == constraint.count else { continue }   // a nil: not constrained
                let claim = Claim(owner: owner, constraint: constraint, values: values)
                if claims[claim] == nil { order.append(claim) }
                claims[claim, default: []].append(snapshot.objectID)
            }
        }
        guard !claims.isEmpty else { return }
        // This context's own new and changed objects, by the values they claim.
        var here: [Claim: ManagedObjectID] = [:]
        var changedHere: [ManagedObjectID: ManagedObject] = [:]
        for object in inserted + updated where !object.isDeleted {
            changedHere[object.objectID] = object
            let entity = object.entity
            for (constraint, owner) in zip(entity.uniquenessConstraints, entity.uniquenessConstraintOwners) {
                let values = constraint.compactMap { name in entity.attributeSlot(named: name).flatMap { object.attributeValue(at: $0) } }
                guard values.count == constraint.count else { continue }
                here[Claim(owner: owner, constraint: constraint, values: values)] = object.objectID
            }
        }
        var conflicts: [ConstraintConflict] = []
        for claim in order {
            guard let claimants = claims[claim] else { continue }
            var existing = here[claim]
            if existing == nil, case .error = save.policy, let first = claimants.first,
               let entity = model.entitiesByName[first.entityName] {
                let store = try coordinator.defaultStore(for: first.entityName)
                let holder = try store.file.holder(
                    ofValues: { slot in
                        guard let name = entity.attributes.indices.contains(slot) ? entity.attributes[slot].name : nil,
                              let index = claim.constraint.firstIndex(of: name) else { return nil }
                        return claim.values[index]
                    },
                    constraint: claim.constraint, entity: first.entityName)
                if let holder {
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
