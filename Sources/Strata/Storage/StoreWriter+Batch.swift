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

    // MARK: Upserts

    /// How a batch insert's object that collides with a stored one takes it over.
    enum UpsertRule {
        /// Its non-nil values replace the stored ones; a nil keeps the stored value
        /// (``MergePolicy/mergeByPropertyObjectTrump``).
        case objectTrump
        /// Its state replaces the stored one, nils included (``MergePolicy/overwrite``).
        case overwrite
    }

    /// Turns each new row of `rows` (a batch insert's chunk, of `storage`, an entity
    /// without relationships) whose constrained values a stored row of the same entity
    /// holds into a rewrite of that row by `rule`, at its next version: an upsert written
    /// where the row stands, without the general merge. Every constrained value is looked
    /// up here, so the chunk's unique-index changes come with it: the chunk is written by
    /// ``writeChecked(_:deleting:unique:)`` with no second check (the stored versions were
    /// read in this transaction). Nil, to leave the chunk to the general path, when two
    /// rows of the chunk share a constrained value, or a value is held by a row of another
    /// entity, or two constraints name different rows.
    func upsertRows(_ rows: EncodedRows, storage: EntityStorage, rule: UpsertRule) throws -> (rows: EncodedRows, unique: UniqueChanges)? {
        guard !storage.constraints.isEmpty, !storage.hasRelationships else { return nil }
        var unique = UniqueChanges()
        var result = EncodedRows()
        result.bytes.reserveCapacity(rows.bytes.count)
        result.rows.reserveCapacity(rows.count)
        var claimed: [Set<[UInt8]>] = Array(repeating: [], count: storage.constraints.count)
        let txn = reader.transaction
        return try rows.bytes.withUnsafeBytes { bytes -> (rows: EncodedRows, unique: UniqueChanges)? in
            for index in rows.rows.indices {
                let record = UnsafeRawBufferPointer(rebasing: bytes[rows.rows[index].record])
                let indexValues = UnsafeRawBufferPointer(rebasing: bytes[rows.rows[index].indexValues])
                var holderKey: PrimaryKey?
                var entries: [[UInt8]?] = []
                entries.reserveCapacity(storage.constraints.count)
                for (position, constraint) in storage.constraints.enumerated() {
                    let entry: [UInt8]?
                    do {
                        entry = try constraint.key(ofRecord: record)
                    } catch {
                        return nil   // the general path reports it
                    }
                    entries.append(entry)
                    guard let entry else { continue }
                    guard claimed[position].insert(entry).inserted else { return nil }
                    let holder = try txn.pointee.withValue(forKey: entry, in: constraint.database) { value in
                        value.flatMap { RowReference(encoded: $0) }
                    }
                    guard let holder else { continue }
                    guard holder.entityNumber == storage.number, holderKey == nil || holderKey == holder.primaryKey else { return nil }
                    holderKey = holder.primaryKey
                }
                var row = rows.rows[index]
                let start = result.bytes.count
                if let holderKey, let table = storage.rows {
                    // The stored row, read in place; the new record written at its next version.
                    let storedRecord = try txn.pointee.withValue(forKey: holderKey.encoded, in: table) { $0.map(Array.init) }
                    guard let storedRecord else { return nil }   // an entry naming no row: the general path reports it
                    let version: UInt64
                    do {
                        version = try storedRecord.withUnsafeBytes { stored in try RecordCodec.version(of: stored) }
                    } catch let error as RecordDecodingError {
                        throw StrataError.corruptRecord(entity: storage.name, primaryKey: holderKey.rawValue, reason: error.reason)
                    }
                    guard version < .max else {
                        throw StrataError.corruptRecord(entity: storage.name, primaryKey: holderKey.rawValue, reason: "its version cannot grow any more")
                    }
                    row.key = holderKey.rawValue
                    row.baseVersion = version
                    RecordCodec.appendHeader(version: version + 1, to: &result.bytes)
                    switch rule {
                    case .overwrite:
                        try Self.appendFields(of: record, to: &result.bytes, entity: storage.name, key: holderKey)
                    case .objectTrump:
                        try storedRecord.withUnsafeBytes { stored in
                            try Self.appendFields(of: record, over: stored, to: &result.bytes, entity: storage.name, key: holderKey)
                        }
                    }
                    // A value a constraint held by this row that the rewrite changes (a
                    // second constraint): its entry moves, unless another row holds the new one.
                    if storage.constraints.count > 1 {
                        let rewritten = Array(result.bytes[start...])
                        for constraint in storage.constraints {
                            let old: [UInt8]?, new: [UInt8]?
                            do {
                                old = try storedRecord.withUnsafeBytes { try constraint.key(ofRecord: $0) }
                                new = try rewritten.withUnsafeBytes { try constraint.key(ofRecord: $0) }
                            } catch {
                                return nil
                            }
                            guard old != new else { continue }
                            if let new {
                                let holder = try txn.pointee.withValue(forKey: new, in: constraint.database) { $0.flatMap { RowReference(encoded: $0) } }
                                if let holder, holder != RowReference(entityNumber: storage.number, primaryKey: holderKey) { return nil }
                                unique.additions.append((constraint.database, new, result.rows.count))
                            }
                            if let old { unique.removals.append((constraint.database, old, result.rows.count)) }
                        }
                    }
                } else {
                    result.bytes.append(contentsOf: record)
                    for (constraint, entry) in zip(storage.constraints, entries) {
                        if let entry { unique.additions.append((constraint.database, entry, result.rows.count)) }
                    }
                }
                let recordEnd = result.bytes.count
                if holderKey != nil, case .objectTrump = rule, !storage.indexedSlots.isEmpty {
                    // The merged record may keep stored values the new one lacked: its index
                    // values are the merged record's.
                    let merged = Array(result.bytes[start..<recordEnd])
                    try merged.withUnsafeBytes { bytes in try Self.appendIndexValues(of: bytes, storage: storage, to: &result.bytes) }
                } else {
                    result.bytes.append(contentsOf: indexValues)
                }
                row.record = start..<recordEnd
                row.indexValues = recordEnd..<result.bytes.count
                result.rows.append(row)
            }
            return (result, unique)
        }
    }

    /// Appends the index value parts of `record` (of `storage`) as ``RowEncoder`` writes
    /// them: one per indexed attribute, each after its length.
    private static func appendIndexValues(of record: UnsafeRawBufferPointer, storage: EntityStorage, to bytes: inout [UInt8]) throws {
        var values = [AttributeValue?](repeating: nil, count: storage.attributes.count)
        var reader = RecordCodec.Reader(record)
        do {
            _ = try reader.header()
            while let (number, tag) = try reader.nextField() {
                if case .attribute(let slot)? = storage.fields[number], storage.attributes[slot].index != nil {
                    values[slot] = try reader.value(tag)
                } else {
                    try reader.skip(tag)
                }
            }
        } catch {
            throw StrataError.corruptRecord(entity: storage.name, primaryKey: 0, reason: error.reason)
        }
        for slot in storage.indexedSlots {
            guard let kind = storage.attributes[slot].indexKind else { continue }
            let part = IndexLayout.valuePart(values[slot], kind: kind) ?? []
            if part.count >= 0x80 {
                bytes.append(UInt8(truncatingIfNeeded: part.count) | 0x80)
                bytes.append(UInt8(part.count >> 7))
            } else {
                bytes.append(UInt8(part.count))
            }
            bytes.append(contentsOf: part)
        }
    }

    /// Appends the fields of `record` (after its header), for row `key` of `entity`.
    private static func appendFields(of record: UnsafeRawBufferPointer, to bytes: inout [UInt8], entity: String, key: PrimaryKey) throws {
        var reader = RecordCodec.Reader(record)
        do {
            _ = try reader.header()
        } catch {
            throw StrataError.corruptRecord(entity: entity, primaryKey: key.rawValue, reason: error.reason)
        }
        bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: record[reader.offset...]))
    }

    /// Appends the fields of `record` and those of `stored` that `record` lacks, in field
    /// number order: the stored fields under `record`'s.
    private static func appendFields(
        of record: UnsafeRawBufferPointer, over stored: UnsafeRawBufferPointer, to bytes: inout [UInt8], entity: String, key: PrimaryKey
    ) throws {
        do {
            try mergeFields(of: record, over: stored, to: &bytes)
        } catch {
            throw StrataError.corruptRecord(entity: entity, primaryKey: key.rawValue, reason: error.reason)
        }
    }

    private static func mergeFields(
        of record: UnsafeRawBufferPointer, over stored: UnsafeRawBufferPointer, to bytes: inout [UInt8]
    ) throws(RecordDecodingError) {
        var new = RecordCodec.Reader(record), old = RecordCodec.Reader(stored)
        _ = try new.header()
        _ = try old.header()
        /// The next field of `reader`: its number and bytes.
        func next(_ reader: inout RecordCodec.Reader, in buffer: UnsafeRawBufferPointer) throws(RecordDecodingError) -> (UInt32, UnsafeRawBufferPointer)? {
            let start = reader.offset
            guard let (number, tag) = try reader.nextField() else { return nil }
            try reader.skip(tag)
            return (number, UnsafeRawBufferPointer(rebasing: buffer[start..<reader.offset]))
        }
        var newField = try next(&new, in: record), oldField = try next(&old, in: stored)
        while newField != nil || oldField != nil {
            if let (newNumber, newBytes) = newField, oldField.map({ newNumber <= $0.0 }) ?? true {
                bytes.append(contentsOf: newBytes)
                if oldField?.0 == newNumber { oldField = try next(&old, in: stored) }
                newField = try next(&new, in: record)
            } else if let (_, oldBytes) = oldField {
                bytes.append(contentsOf: oldBytes)
                oldField = try next(&old, in: stored)
            }
        }
    }

    // MARK: Update

    /// One attribute a batch update sets.
    struct BatchAssignment {
        let slot: Int
        let field: UInt32
        let attribute: AttributeDescription
        let expression: UpdateExpression
    }

    /// Sets `assignments` in every row of `keys` (of `storage`, ascending), each computed
    /// from the row's values before the update; rows whose values do not change are left
    /// alone. Rows are met through one cursor and rewritten where they stand: a record's
    /// other fields (those this model does not know included) are copied as bytes, only
    /// the fields read or set are decoded. Indexes and unique indexes follow. Every
    /// conflict and every validation failure is gathered before throwing (the
    /// transaction is then aborted by the caller).
    ///
    /// - Returns: the keys of the rows that changed, in `keys`' order.
    /// - Throws: ``StrataError/constraintConflicts(_:)``, ``StrataError/validation(_:)``,
    ///   ``StrataError/typeMismatch(key:entity:expected:actual:)`` for a value the
    ///   attribute cannot hold.
    mutating func batchUpdate(_ keys: [PrimaryKey], of storage: EntityStorage, assignments: [BatchAssignment]) throws -> [PrimaryKey] {
        guard let rows = storage.rows, !keys.isEmpty, !assignments.isEmpty else { return [] }
        let plan = try BatchUpdatePlan(storage: storage, assignments: assignments)
        var changed: [PrimaryKey] = []
        var failures: [ValidationFailure] = []
        var conflicts: [ConstraintConflict] = []
        var old = [AttributeValue?](repeating: nil, count: plan.readFields.count)
        var new = [AttributeValue?](repeating: nil, count: assignments.count)
        var ranges: [(number: UInt32, range: Range<Int>)] = []
        var buffer: [UInt8] = []
        buffer.reserveCapacity(256)
        let txn = reader.transaction
        let store = self.store
        try txn.pointee.withCursor(on: rows) { cursor in
            var at: UInt64?
            for key in keys {
                guard let stored = try cursor.moveToRow(key.rawValue, from: &at) else { continue }
                // The old values read, and where every field is.
                for index in old.indices { old[index] = nil }
                ranges.removeAll(keepingCapacity: true)
                var fields = RecordCodec.Reader(stored)
                var version: UInt64 = 0
                do throws(RecordDecodingError) {
                    version = try fields.header()
                    while true {
                        let start = fields.offset
                        guard let (number, tag) = try fields.nextField() else { break }
                        if let position = plan.position(ofField: number) {
                            old[position] = try fields.value(tag)
                        } else {
                            try fields.skip(tag)
                        }
                        ranges.append((number, start..<fields.offset))
                    }
                } catch {
                    throw StrataError.corruptRecord(entity: storage.name, primaryKey: key.rawValue, reason: error.reason)
                }
                var differs = false
                for (index, assignment) in assignments.enumerated() {
                    let value = try plan.value(of: index, for: key, oldValues: old, store: store)
                    ManagedObject.check(value, against: assignment.attribute) { reason in
                        failures.append(ValidationFailure(objectID: store.objectID(entity: storage.name, key: key), key: assignment.attribute.name, reason: reason))
                    }
                    new[index] = value
                    if value != old[plan.assignedPositions[index]] { differs = true }
                }
                guard differs else { continue }
                guard version < .max else {
                    throw StrataError.corruptRecord(entity: storage.name, primaryKey: key.rawValue, reason: "its version cannot grow any more")
                }
                changed.append(key)
                guard failures.isEmpty else { continue }   // keep checking, write nothing more
                // The new record: the header, then every field in number order, the set
                // ones encoded, the others copied.
                buffer.removeAll(keepingCapacity: true)
                RecordCodec.appendHeader(version: version + 1, to: &buffer)
                var next = 0
                for (number, range) in ranges {
                    while next < plan.fieldOrder.count, assignments[plan.fieldOrder[next]].field <= number {
                        let index = plan.fieldOrder[next]
                        if let value = new[index] { RecordCodec.appendField(assignments[index].field, value, to: &buffer) }
                        next += 1
                    }
                    if next == 0 || assignments[plan.fieldOrder[next - 1]].field != number {
                        buffer.append(contentsOf: UnsafeRawBufferPointer(rebasing: stored[range]))   // not set: copied
                    }
                }
                for order in next..<plan.fieldOrder.count {
                    let index = plan.fieldOrder[order]
                    if let value = new[index] { RecordCodec.appendField(assignments[index].field, value, to: &buffer) }
                }
                var keyBytes = key.rawValue.bigEndian
                try withUnsafeBytes(of: &keyBytes) { encodedKey in
                    try buffer.withUnsafeBytes { record in try cursor.replaceCurrent(key: encodedKey, with: record) }
                }
                // Index entries of the set attributes that changed.
                for (index, database, kind) in plan.indexes {
                    let oldPart = IndexLayout.valuePart(old[plan.assignedPositions[index]], kind: kind)
                    let newPart = IndexLayout.valuePart(new[index], kind: kind)
                    guard oldPart != newPart else { continue }
                    if let oldPart { try txn.pointee.delete(forKey: oldPart + key.encoded, in: database) }
                    if let newPart { try txn.pointee.put([UInt8](), forKey: newPart + key.encoded, in: database) }
                }
                // Unique entries of the constraints on set attributes.
                guard !plan.constraints.isEmpty else { continue }
                let reference = RowReference(entityNumber: storage.number, primaryKey: key).encoded
                for constraint in plan.constraints {
                    let oldEntry = constraint.key { slot in plan.position(ofSlot: slot).flatMap { old[$0] } }
                    let newEntry = constraint.key { slot in
                        if let index = plan.assignmentIndex(ofSlot: slot) { return new[index] }
                        return plan.position(ofSlot: slot).flatMap { old[$0] }
                    }
                    guard oldEntry != newEntry else { continue }
                    if let newEntry {
                        let holder = try txn.pointee.withValue(forKey: newEntry, in: constraint.database) { $0.map(Array.init) }
                        if let holder, holder != reference {
                            var values: [String: AttributeValue] = [:]
                            for (name, slot) in zip(constraint.attributes, constraint.slots) {
                                values[name] = plan.assignmentIndex(ofSlot: slot).map { new[$0] } ?? plan.position(ofSlot: slot).flatMap { old[$0] }
                            }
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
        }
        if !failures.isEmpty { throw StrataError.validation(failures) }
        if !conflicts.isEmpty { throw StrataError.constraintConflicts(conflicts) }
        return changed
    }

    // MARK: Delete

    /// What deleting a set of rows does to the rows they relate to.
    struct DeletePlan {
        /// Every row to delete, the requested ones first, then what cascades reach (a
        /// row of an entity without relationships may turn out not to be stored).
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
                // Nothing to follow: whether it is stored is found when it is deleted.
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
    /// links), then nullifies. Rows of an entity without relationships are deleted a
    /// run at a time through one cursor, in key order, decoding only their indexed and
    /// constrained fields.
    ///
    /// - Returns: the rows deleted (those found), and the rows whose records the nullify
    ///   rewrote, each with the relationship it emptied.
    mutating func delete(_ plan: DeletePlan) throws -> (deleted: [RowReference], rewritten: [(row: RowReference, relationship: String)]) {
        var deleted: [RowReference] = []
        var plain: [UInt16: [PrimaryKey]] = [:]
        for row in plan.rows {
            guard let storage = store.entityStorage(numbered: row.entityNumber) else { continue }
            if storage.hasRelationships {
                if try delete(store.objectID(entity: storage.name, key: row.primaryKey), expectedVersion: nil) { deleted.append(row) }
            } else {
                plain[row.entityNumber, default: []].append(row.primaryKey)
            }
        }
        for (entity, keys) in plain.sorted(by: { $0.key < $1.key }) {
            guard let storage = store.entityStorage(numbered: entity) else { continue }
            for key in try deleteRows(keys.sorted { $0.rawValue < $1.rawValue }, of: storage) {
                deleted.append(RowReference(entityNumber: entity, primaryKey: key))
            }
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
        return (deleted, rewritten)
    }

    /// Deletes the stored rows of `keys` (ascending) of an entity without relationships,
    /// through one cursor, with their index and unique entries.
    ///
    /// - Returns: the keys of the rows that were stored.
    private mutating func deleteRows(_ keys: [PrimaryKey], of storage: EntityStorage) throws -> [PrimaryKey] {
        guard let rows = storage.rows else { return [] }
        // The fields to decode: indexed attributes and constrained ones.
        var wanted = [Int](repeating: -1, count: Int(storage.fields.keys.max() ?? 0) + 1)   // by field number
        var slotsRead: [Int] = []
        for slot in storage.indexedSlots + storage.constraints.flatMap(\.slots) {
            guard let field = storage.attributes[slot].field, wanted[Int(field)] < 0 else { continue }
            wanted[Int(field)] = slotsRead.count
            slotsRead.append(slot)
        }
        func position(_ field: UInt32?) -> Int? {
            guard let field, Int(field) < wanted.count, wanted[Int(field)] >= 0 else { return nil }
            return wanted[Int(field)]
        }
        var values = [AttributeValue?](repeating: nil, count: slotsRead.count)
        var deleted: [PrimaryKey] = []
        deleted.reserveCapacity(keys.count)
        let txn = reader.transaction
        try txn.pointee.withCursor(on: rows) { cursor in
            var at: UInt64?
            for key in keys {
                guard let stored = try cursor.moveToRow(key.rawValue, from: &at) else { continue }
                for index in values.indices { values[index] = nil }
                if !slotsRead.isEmpty {
                    var fields = RecordCodec.Reader(stored)
                    do throws(RecordDecodingError) {
                        _ = try fields.header()
                        while let (number, tag) = try fields.nextField() {
                            if let position = position(number) { values[position] = try fields.value(tag) } else { try fields.skip(tag) }
                        }
                    } catch {
                        throw StrataError.corruptRecord(entity: storage.name, primaryKey: key.rawValue, reason: error.reason)
                    }
                }
                try cursor.deleteCurrent()
                // The cursor stays where the row was: its next step reaches the row after it
                // (LMDB's cursor_del leaves the cursor so that MDB_NEXT returns that row).
                deleted.append(key)
                for slot in storage.indexedSlots {
                    guard let index = storage.attributes[slot].index, let kind = storage.attributes[slot].indexKind,
                          let field = storage.attributes[slot].field,
                          let entry = IndexLayout.key(position(field).flatMap { values[$0] }, kind: kind, primaryKey: key)
                    else { continue }
                    try txn.pointee.delete(forKey: entry, in: index)
                }
                guard !storage.constraints.isEmpty else { continue }
                let reference = RowReference(entityNumber: storage.number, primaryKey: key).encoded
                for constraint in storage.constraints {
                    guard let entry = constraint.key({ slot in position(storage.attributes[slot].field).flatMap { values[$0] } })
                    else { continue }
                    let holder = try txn.pointee.withValue(forKey: entry, in: constraint.database) { $0.map(Array.init) }
                    if holder == reference { try txn.pointee.delete(forKey: entry, in: constraint.database) }
                }
            }
        }
        return deleted
    }
}

/// A row and one of its relationships, as a set element.
private struct UnlinkedKey: Hashable {
    let row: RowReference
    let relationship: String
}

/// What a batch update of one entity reads and writes, worked out once for all its rows.
/// A class: every row reads it, and a struct would be copied into the closures that do.
private final class BatchUpdatePlan {
    let storage: EntityStorage
    let assignments: [StoreWriter.BatchAssignment]
    /// The fields whose old values are decoded: the set ones, those the expressions read
    /// and the other attributes of constraints on set ones.
    private(set) var readFields: [UInt32] = []
    /// By field number: the position in ``readFields``, or -1.
    private var positions: [Int] = []
    /// For each assignment, the position of its field's old value.
    private(set) var assignedPositions: [Int] = []
    /// The assignments in field number order (indices into `assignments`).
    let fieldOrder: [Int]
    /// Each assignment's expression, compiled against the read values' positions.
    private(set) var compiled: [UpdateExpression.Compiled] = []
    /// Whether an assignment's value is the same for every row (converted once).
    private(set) var isConstant: [Bool] = []
    /// The indexed set attributes: assignment, index database, key kind.
    private(set) var indexes: [(Int, Database, IndexKeyKind)] = []
    /// The uniqueness constraints with a set attribute.
    let constraints: [StoredConstraint]
    /// By attribute slot: the assignment that sets it, or -1.
    private let assignmentBySlot: [Int]

    init(storage: EntityStorage, assignments: [StoreWriter.BatchAssignment]) throws {
        self.storage = storage
        self.assignments = assignments
        fieldOrder = assignments.indices.sorted { assignments[$0].field < assignments[$1].field }
        let setSlots = Set(assignments.map(\.slot))
        constraints = storage.constraints.filter { !setSlots.isDisjoint(with: $0.slots) }
        var bySlot = Array(repeating: -1, count: storage.attributes.count)
        for (index, assignment) in assignments.enumerated() { bySlot[assignment.slot] = index }
        assignmentBySlot = bySlot
        positions = Array(repeating: -1, count: Int(storage.fields.keys.max() ?? 0) + 1)
        for assignment in assignments { assignedPositions.append(read(assignment.field)) }
        for (index, assignment) in assignments.enumerated() {
            let compiled = try assignment.expression.compiled(for: assignment.attribute, entityName: storage.name) { name in
                guard let slot = storage.attributeSlot(named: name), let field = storage.attributes[slot].field else { return nil }
                return read(field)
            }
            if case .value(let value) = compiled {
                self.compiled.append(.value(try Self.stored(value, for: assignment, in: storage, row: nil)))
                isConstant.append(true)
            } else {
                self.compiled.append(compiled)
                isConstant.append(false)
            }
            if let database = storage.attributes[assignment.slot].index, let kind = storage.attributes[assignment.slot].indexKind {
                indexes.append((index, database, kind))
            }
        }
        for constraint in constraints {
            for slot in constraint.slots {
                if let field = storage.attributes[slot].field { _ = read(field) }
            }
        }
    }

    /// Adds `field` to the fields read; its position.
    private func read(_ field: UInt32) -> Int {
        if Int(field) < positions.count, positions[Int(field)] >= 0 { return positions[Int(field)] }
        if Int(field) >= positions.count { positions += Array(repeating: -1, count: Int(field) + 1 - positions.count) }
        positions[Int(field)] = readFields.count
        readFields.append(field)
        return readFields.count - 1
    }

    /// The position of field `number`'s old value, if it is read.
    func position(ofField number: UInt32) -> Int? {
        Int(number) < positions.count && positions[Int(number)] >= 0 ? positions[Int(number)] : nil
    }

    /// The position of attribute `slot`'s old value, if it is read.
    func position(ofSlot slot: Int) -> Int? {
        storage.attributes[slot].field.flatMap(position(ofField:))
    }

    /// The assignment that sets attribute `slot`, if one does.
    func assignmentIndex(ofSlot slot: Int) -> Int? {
        assignmentBySlot[slot] >= 0 ? assignmentBySlot[slot] : nil
    }

    /// Assignment `index`'s new value for row `key`, whose read values are `oldValues`,
    /// stored in the attribute's type.
    func value(of index: Int, for key: PrimaryKey, oldValues: [AttributeValue?], store: StoreFile) throws -> AttributeValue? {
        if isConstant[index], case .value(let value) = compiled[index] { return value }
        let assignment = assignments[index]
        return try assignment.expression.value(
            of: compiled[index], on: oldValues, for: assignment.attribute, entityName: storage.name, row: store.objectID(entity: storage.name, key: key))
    }

    /// `value` in `assignment`'s attribute type.
    private static func stored(
        _ value: AttributeValue?, for assignment: StoreWriter.BatchAssignment, in storage: EntityStorage, row: ManagedObjectID?
    ) throws -> AttributeValue? {
        try assignment.expression.converted(value, for: assignment.attribute, entityName: storage.name, row: row)
    }
}
