import Foundation
import StrataLMDB

/// The writer's part of batch requests (``BatchInsertRequest``, ``BatchUpdateRequest``,
/// ``BatchDeleteRequest``): rows changed in the store with no context to keep the other
/// side of a relationship in step, so the writer does it.
extension StoreWriter {
    // MARK: Relationships

    /// Points the to-one relationship `name` of the stored row `row` at `destination`
    /// (nil: none), writing the row at its next version, and moves the link that mirrors
    /// it when its inverse is to-many.
    ///
    /// - Returns: the destination before, and whether the row changed (false when it
    ///   already pointed there, or is not stored).
    @discardableResult
    mutating func pointToOne(_ row: RowReference, relationship name: String, at destination: RowReference?) throws -> (old: RowReference?, changed: Bool) {
        guard let storage = store.entityStorage(numbered: row.entityNumber), let rows = storage.rows,
              let slot = storage.relationshipSlot(named: name), let field = storage.relationships[slot].field,
              var record = try reader.record(at: row.primaryKey, of: storage)
        else { return (nil, false) }
        let relationship = storage.relationships[slot]
        let old = try foreignKey(record.fields[field], slot: slot, storage: storage, key: row.primaryKey)
        guard old != destination else { return (old, false) }
        guard record.version < .max else {
            throw StrataError.corruptRecord(entity: storage.name, primaryKey: row.primaryKey.rawValue, reason: "its version cannot grow any more")
        }
        record.version += 1
        record.fields[field] = destination.map(AttributeValue.foreignKey)
        try reader.transaction.pointee.put(RecordCodec.encode(record), forKey: row.primaryKey.encoded, in: rows)
        if relationship.shape == .manyToOne {
            try moveInverseLink(of: row, relationship: relationship, from: old, to: destination)
        }
        return (old, true)
    }

    /// After a batch insert wrote the new row `row` with the relationships `values`
    /// (its own foreign keys and links written), makes the other sides agree: a one-to-one
    /// destination points back (and its previous partner lets go), the members of a
    /// one-to-many move to the new row, a many-to-many destination links back. Every
    /// destination must be stored.
    ///
    /// - Returns: the other rows whose relationships changed, each with the name of the
    ///   relationship that changed.
    /// - Throws: ``StrataError/objectNotFound(_:)`` for a destination that is not stored.
    mutating func linkInverses(
        ofNewRow row: RowReference, storage: EntityStorage, values: [RelationshipSnapshot]
    ) throws -> [(row: RowReference, relationship: String)] {
        var touched: [(row: RowReference, relationship: String)] = []
        for (slot, relationship) in storage.relationships.enumerated() where slot < values.count {
            let inverse = relationship.description.inverseName
            switch (relationship.shape, values[slot]) {
            case (.oneToOne, .toOne(let id?)):
                let destination = try storedReference(id, of: relationship, in: storage)
                let (partner, changed) = try pointToOne(destination, relationship: inverse, at: row)
                if changed { touched.append((destination, inverse)) }
                if let partner, partner != row {
                    if try pointToOne(partner, relationship: relationship.description.name, at: nil).changed {
                        touched.append((partner, relationship.description.name))
                    }
                }
            case (.manyToOne, .toOne(let id?)):
                touched.append((try storedReference(id, of: relationship, in: storage), inverse))   // its to-many gained the row
            case (.oneToMany, .toMany(let ids)):
                for id in ids {
                    let member = try storedReference(id, of: relationship, in: storage)
                    let (owner, changed) = try pointToOne(member, relationship: inverse, at: row)
                    if changed { touched.append((member, inverse)) }
                    if let owner, owner != row { touched.append((owner, relationship.description.name)) }   // lost a member
                }
            case (.manyToMany, .toMany(let ids)):
                for id in ids {
                    let destination = try storedReference(id, of: relationship, in: storage)
                    guard let mirror = inverseLinks(of: relationship, at: destination) else { continue }
                    let key = LinkLayout.key(owner: destination, destination: row)
                    let present = try reader.transaction.pointee.withValue(forKey: key, in: mirror.database) { $0 != nil }
                    guard !present else { continue }
                    let position = mirror.isOrdered ? try takeNextPosition(of: destination, in: mirror.database) : nil
                    try reader.transaction.pointee.put(LinkLayout.value(position: position), forKey: key, in: mirror.database)
                    touched.append((destination, inverse))
                }
            default:
                continue
            }
        }
        return touched
    }

    /// The reference to `id`, a destination of `relationship`, once it is known to be stored.
    private func storedReference(_ id: ManagedObjectID, of relationship: StoredRelationship, in storage: EntityStorage) throws -> RowReference {
        let reference = try destinationReference(id, of: relationship, in: storage)
        guard let destination = store.entityStorage(numbered: reference.entityNumber),
              try reader.version(at: reference.primaryKey, of: destination) != nil
        else { throw StrataError.objectNotFound(id) }
        return reference
    }

    // MARK: Update

    /// One attribute a batch update sets.
    struct BatchAssignment {
        let slot: Int
        let field: UInt32
        let attribute: AttributeDescription
        let expression: UpdateExpression
    }

    /// Sets `assignments` in every row of `keys` (of `storage`), each computed from the
    /// row's values before the update; rows whose values do not change are left alone.
    /// Indexes and unique indexes follow. Every conflict and every validation failure is
    /// gathered before throwing (the transaction is then aborted by the caller).
    ///
    /// - Returns: the keys of the rows that changed, in `keys`' order.
    /// - Throws: ``StrataError/constraintConflicts(_:)``, ``StrataError/validation(_:)``,
    ///   ``StrataError/typeMismatch(key:entity:expected:actual:)`` for a value the
    ///   attribute cannot hold.
    mutating func batchUpdate(_ keys: [PrimaryKey], of storage: EntityStorage, assignments: [BatchAssignment]) throws -> [PrimaryKey] {
        guard let rows = storage.rows else { return [] }
        let assignedSlots = Set(assignments.map(\.slot))
        let constraints = storage.constraints.filter { !assignedSlots.isDisjoint(with: $0.slots) }
        let fieldsByName: [String: UInt32] = Dictionary(
            storage.attributes.compactMap { attribute in attribute.field.map { (attribute.description.name, $0) } }, uniquingKeysWith: { a, _ in a })
        var changed: [PrimaryKey] = []
        var failures: [ValidationFailure] = []
        var conflicts: [ConstraintConflict] = []
        let txn = reader.transaction
        for key in keys {
            guard var record = try reader.record(at: key, of: storage) else { continue }
            let old = record
            for assignment in assignments {
                let value: AttributeValue?
                do {
                    value = try assignment.expression.evaluate(for: assignment.attribute, entityName: storage.name) { name in
                        fieldsByName[name].flatMap { old.fields[$0] }
                    }
                } catch let error as UpdateExpression.EvaluationError {
                    throw StrataError.typeMismatch(
                        key: assignment.attribute.name, entity: storage.name, expected: assignment.attribute.type.swiftTypeName,
                        actual: "\(assignment.expression) for \(store.objectID(entity: storage.name, key: key)): \(error.message)")
                }
                var stored: AttributeValue?
                if let value {
                    guard let converted = UpdateExpression.stored(value, as: assignment.attribute.type) else {
                        throw StrataError.typeMismatch(
                            key: assignment.attribute.name, entity: storage.name, expected: assignment.attribute.type.swiftTypeName,
                            actual: "\(value.kindName) \(value) from \(assignment.expression) for \(store.objectID(entity: storage.name, key: key))")
                    }
                    stored = converted
                }
                ManagedObject.check(stored, against: assignment.attribute) { reason in
                    failures.append(ValidationFailure(objectID: store.objectID(entity: storage.name, key: key), key: assignment.attribute.name, reason: reason))
                }
                record.fields[assignment.field] = stored
            }
            guard record.fields != old.fields else { continue }
            guard record.version < .max else {
                throw StrataError.corruptRecord(entity: storage.name, primaryKey: key.rawValue, reason: "its version cannot grow any more")
            }
            record.version += 1
            changed.append(key)
            guard failures.isEmpty else { continue }   // keep checking, write nothing more
            try txn.pointee.put(RecordCodec.encode(record), forKey: key.encoded, in: rows)
            try updateIndexes(storage: storage, key: key, old: old, new: record)
            let reference = RowReference(entityNumber: storage.number, primaryKey: key).encoded
            for constraint in constraints {
                let oldEntry = constraint.key(of: old), newEntry = constraint.key(of: record)
                guard oldEntry != newEntry else { continue }
                if let newEntry {
                    let holder = try txn.pointee.withValue(forKey: newEntry, in: constraint.database) { $0.map(Array.init) }
                    if let holder, holder != reference {
                        var values: [String: AttributeValue] = [:]
                        for (name, field) in zip(constraint.attributes, constraint.fields) { values[name] = record.fields[field] }
                        let existing = holder.withUnsafeBytes { RowReference(encoded: $0) }.flatMap { ref in
                            store.entityStorage(numbered: ref.entityNumber).map { store.objectID(entity: $0.name, key: ref.primaryKey) }
                        }
                        conflicts.append(ConstraintConflict(
                            entityName: constraint.owner, constraint: constraint.attributes, values: values,
                            objectIDs: [store.objectID(entity: storage.name, key: key)], existingObjectID: existing))
                        continue
                    }
                    try txn.pointee.put(reference, forKey: newEntry, in: constraint.database)
                }
                if let oldEntry {
                    let holder = try txn.pointee.withValue(forKey: oldEntry, in: constraint.database) { $0.map(Array.init) }
                    if holder == reference { try txn.pointee.delete(forKey: oldEntry, in: constraint.database) }
                }
            }
        }
        if !failures.isEmpty { throw StrataError.validation(failures) }
        if !conflicts.isEmpty { throw StrataError.constraintConflicts(conflicts) }
        return changed
    }

    // MARK: Delete

    /// What deleting a set of rows does to the rows they relate to.
    struct DeletePlan {
        /// Every row deleted, the requested ones first, then what cascades reach.
        var rows: [RowReference] = []
        /// The rows left in place whose relationship (named) must stop pointing at a
        /// deleted row: one-to-one partners and one-to-many members under nullify.
        var nullified: [(row: RowReference, relationship: String, from: RowReference)] = []
        /// The rows left in place whose to-many relationship (named) loses a link (no
        /// write to their records: the links go with the deleted rows).
        var unlinked: [(row: RowReference, relationship: String)] = []
    }

    /// Plans deleting `requested`: follows cascades to their end, checks deny rules
    /// against everything deleted, and lists what nullify leaves to do. Rows no longer
    /// stored are skipped.
    ///
    /// - Throws: ``StrataError/validation(_:)`` with a
    ///   ``ValidationFailure/Reason/deleteDenied(count:)`` for every denying relationship
    ///   whose destinations are not all deleted too.
    func planDelete(_ requested: [RowReference]) throws -> DeletePlan {
        var plan = DeletePlan()
        var deleted = Set<RowReference>()
        var denied: [(row: RowReference, relationship: String, destinations: [RowReference])] = []
        var pending: [(row: RowReference, relationship: StoredRelationship, destinations: [RowReference])] = []
        var queue = requested[...]
        var extra: [RowReference] = []
        while true {
            let row: RowReference
            if let next = queue.popFirst() {
                row = next
            } else if !extra.isEmpty {
                queue = extra[...]
                extra = []
                continue
            } else {
                break
            }
            guard !deleted.contains(row), let storage = store.entityStorage(numbered: row.entityNumber) else { continue }
            guard storage.hasRelationships else {
                guard try reader.version(at: row.primaryKey, of: storage) != nil else { continue }
                deleted.insert(row)
                plan.rows.append(row)
                continue
            }
            guard let record = try reader.record(at: row.primaryKey, of: storage) else { continue }
            deleted.insert(row)
            plan.rows.append(row)
            for (slot, relationship) in storage.relationships.enumerated() {
                var destinations: [RowReference] = []
                if let field = relationship.field {
                    if let destination = try foreignKey(record.fields[field], slot: slot, storage: storage, key: row.primaryKey) {
                        destinations.append(destination)
                    }
                } else if let links = relationship.links {
                    destinations = try reader.links(of: row, in: links, ownerEntity: storage.name).map(\.destination)
                }
                guard !destinations.isEmpty else { continue }
                switch relationship.description.deleteRule {
                case .cascade:
                    extra += destinations.filter { !deleted.contains($0) }
                    pending.append((row, relationship, destinations))
                case .deny:
                    denied.append((row, relationship.description.name, destinations))
                    pending.append((row, relationship, destinations))
                case .nullify, .noAction:
                    pending.append((row, relationship, destinations))
                }
            }
        }
        var failures: [ValidationFailure] = []
        for (row, name, destinations) in denied {
            let left = destinations.filter { !deleted.contains($0) }.count
            guard left > 0, let storage = store.entityStorage(numbered: row.entityNumber) else { continue }
            failures.append(ValidationFailure(
                objectID: store.objectID(entity: storage.name, key: row.primaryKey), key: name, reason: .deleteDenied(count: left)))
        }
        if !failures.isEmpty { throw StrataError.validation(failures) }
        var unlinked = Set<UnlinkedKey>()
        for (row, relationship, destinations) in pending {
            for destination in destinations where !deleted.contains(destination) {
                switch relationship.shape {
                case .oneToOne, .oneToMany:
                    // The destination holds a foreign key to the row.
                    if relationship.description.deleteRule == .nullify {
                        plan.nullified.append((destination, relationship.description.inverseName, row))
                    }
                case .manyToOne, .manyToMany:
                    // Its links to the row go with the row (the store has no dangling links).
                    let inverse = relationship.description.inverseName
                    if unlinked.insert(UnlinkedKey(row: destination, relationship: inverse)).inserted {
                        plan.unlinked.append((destination, inverse))
                    }
                }
            }
        }
        return plan
    }

    /// Carries out `plan`: deletes its rows (with their index entries, unique entries and
    /// links), then nullifies.
    ///
    /// - Returns: the rows whose records the nullify rewrote, each with the relationship
    ///   it emptied.
    mutating func delete(_ plan: DeletePlan) throws -> [(row: RowReference, relationship: String)] {
        for row in plan.rows {
            guard let storage = store.entityStorage(numbered: row.entityNumber) else { continue }
            _ = try delete(store.objectID(entity: storage.name, key: row.primaryKey), expectedVersion: nil)
        }
        var rewritten: [(row: RowReference, relationship: String)] = []
        for (row, relationship, from) in plan.nullified {
            // Only when it still points at the deleted row (it may have been given another).
            guard let storage = store.entityStorage(numbered: row.entityNumber),
                  let slot = storage.relationshipSlot(named: relationship), let field = storage.relationships[slot].field,
                  let record = try reader.record(at: row.primaryKey, of: storage),
                  try foreignKey(record.fields[field], slot: slot, storage: storage, key: row.primaryKey) == from
            else { continue }
            if try pointToOne(row, relationship: relationship, at: nil).changed { rewritten.append((row, relationship)) }
        }
        return rewritten
    }
}

/// A row and one of its relationships, as a set element.
private struct UnlinkedKey: Hashable {
    let row: RowReference
    let relationship: String
}
