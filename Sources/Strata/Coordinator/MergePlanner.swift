import Foundation

/// An ID no object has, for rows that carry none.
let temporaryMergePlaceholder = ManagedObjectID(temporaryFor: "")

/// What settling a save's conflicts reads of the store it writes, inside the save's own
/// transaction: the LMDB writer's reader (``LMDBMergeSource``), or a SQL store's connection
/// with the rows locked (``SQLMergeSource``).
protocol MergeSource {
    /// How `entityName` is stored.
    func entityStorage(named entityName: String) throws(StrataError) -> EntityStorage
    /// The storage of entity `number`, or nil.
    func entityStorage(numbered number: UInt16) -> EntityStorage?
    /// The permanent ID of row `key` of `entityName`.
    func objectID(entity entityName: String, key: PrimaryKey) -> ManagedObjectID
    /// The storage and primary key of the row `id` names.
    func row(of id: ManagedObjectID) throws(StrataError) -> (storage: EntityStorage, key: PrimaryKey)
    /// The stored state of `id` with its to-many relationships, or nil when it has no row.
    func persistedSnapshot(of id: ManagedObjectID) throws -> ObjectSnapshot?
    /// Whether `id` (a permanent ID) has a row.
    func exists(_ id: ManagedObjectID) throws -> Bool
    /// The stored destinations of `id`'s relationship `name`.
    func destinations(of id: ManagedObjectID, relationship name: String) throws -> [ManagedObjectID]
    /// The stored state of `id` (to-many relationships not loaded), or nil.
    func snapshot(of id: ManagedObjectID) throws -> ObjectSnapshot?
}

/// Settles the conflicts of one save under its merging policy (<doc:MergePolicies>), for
/// any store: each conflicting object is decided (``RowMerge``), changes to rows deleted
/// elsewhere are dropped, deletions of rows changed elsewhere kept or dropped by the
/// policy, new objects that claim the same constrained values joined (the joins come from
/// the store, which knows its unique indexes), and every relationship edge the decisions
/// touch made to agree on both ends. ``plan(_:deleting:merging:rowConflicts:deletionConflicts:joins:)``
/// gives the rows and deletions to write (merged rows at their stored versions, fixed-up
/// rows outside the save); the store writes them in the same transaction, then
/// ``finish(_:writtenKeys:)`` says what the merge did.
struct MergePlanner<Source: MergeSource> {
    /// What the store holds, as the save's transaction sees it.
    let source: Source

    /// The ID of a row of a save: the one it carries, or its entity's and key's.
    func rowID(_ row: EncodedRow) -> ManagedObjectID {
        if let id = row.objectID { return id }
        guard let storage = source.entityStorage(numbered: row.entity), let key = PrimaryKey(row.key) else {
            return ManagedObjectID(temporaryFor: "entity \(row.entity)")
        }
        return source.objectID(entity: storage.name, key: key)
    }

    /// The groups of new objects of a save that the merge can make one: objects linked by
    /// claims of the same constrained values (two objects claiming one value of one
    /// constraint and another value of another are one group), each a new object with a
    /// temporary ID, with at most one stored holder among them that the save neither
    /// writes nor deletes. The rest is left to the final check, which fails the save.
    func joins(
        of conflicts: [(claimants: [Int], existing: ManagedObjectID?)], in rows: EncodedRows, deleting deleted: [StoreChanges.Deletion]
    ) -> [MergeJoin] {
        // Union-find over the rows, in arrays (a save of 1,000 upserts has 1,000 conflicts).
        var parent = Array(0..<rows.count)
        func root(_ index: Int) -> Int {
            var index = index
            while parent[index] != index {
                parent[index] = parent[parent[index]]
                index = parent[index]
            }
            return index
        }
        var involved = [Bool](repeating: false, count: rows.count)
        for claimants in conflicts.lazy.map(\.claimants) {
            let first = root(claimants[0])
            involved[claimants[0]] = true
            for claimant in claimants.dropFirst() {
                involved[claimant] = true
                let other = root(claimant)
                if other != first { parent[other] = first }
            }
        }
        // Each group's stored holder, or `conflicted` when it has two.
        var holder = [ManagedObjectID?](repeating: nil, count: rows.count)
        var conflicted = Set<Int>()
        for conflict in conflicts {
            guard let existing = conflict.existing else { continue }
            let group = root(conflict.claimants[0])
            if let held = holder[group], held != existing { conflicted.insert(group) }
            holder[group] = existing
        }
        var position = [Int](repeating: -1, count: rows.count)
        var groups: [[Int]] = []
        for index in rows.rows.indices where involved[index] {
            let group = root(index)
            if position[group] < 0 {
                position[group] = groups.count
                groups.append([])
            }
            groups[position[group]].append(index)
        }
        var taken = Set(deleted.map(\.objectID))
        for row in rows.rows where !row.isInsert { taken.insert(rowID(row)) }
        var joins: [MergeJoin] = []
        for indices in groups {
            let group = root(indices[0])
            guard !conflicted.contains(group),
                  indices.allSatisfy({ rows.rows[$0].isInsert && rows.rows[$0].objectID?.isTemporaryID == true })
            else { continue }
            if let existing = holder[group] {
                guard taken.insert(existing).inserted else { continue }
            } else if indices.count < 2 {
                continue
            }
            joins.append(MergeJoin(rows: indices, existing: holder[group]))
        }
        return joins
    }

    /// A planned merge: what to write, and what is needed to report it.
    struct Plan {
        /// The save's rows as the merge read them (references to joined objects replaced).
        var rows: EncodedRows
        /// The rows to write: as they came, merged, then fixed-up stored rows.
        var written: EncodedRows
        /// Where each row of ``rows`` went in ``written``; nil when it was dropped.
        var position: [Int?]
        /// The deletions to write.
        var keptDeletions: [StoreChanges.Deletion]
        /// The merge's working state.
        var work: MergeWork
        /// How each object came out.
        var decided: [(id: ManagedObjectID, state: DecidedState)]
        /// Whether new objects were joined (their temporary IDs are replaced in the result).
        var joined: Bool
        /// What the merge did, before the keys are known.
        var result: MergeResult
    }

    /// Plans the merge of one save: ``Plan/written`` and ``Plan/keptDeletions`` are what the
    /// store writes, with the version checks of a normal write (each merged or fixed-up row
    /// at the version read).
    ///
    /// - Throws: ``StoreWriteError/conflict(_:)`` for a conflicting row the policy has no
    ///   change record for; what a custom policy throws; the source's errors.
    func plan(
        _ rows: EncodedRows, deleting deleted: [StoreChanges.Deletion], merging: SaveMerging,
        rowConflicts: [(index: Int, stored: UInt64?)], deletionConflicts: [(index: Int, stored: UInt64?)], joins: [MergeJoin]
    ) throws -> Plan {
        var result = MergeResult()
        var decided: [(id: ManagedObjectID, state: DecidedState)] = []
        // 0. New objects claiming the same constrained values become one object (an upsert,
        //    rule 10): the stored object that holds them, or else the first of them; each of
        //    the others is upserted onto it in the save's order.
        var joined = rows
        var referencing: Set<ManagedObjectID> = []
        if !joins.isEmpty {
            var ids: [ManagedObjectID: ManagedObjectID] = [:]
            for join in joins {
                for index in join.rows {
                    guard let temporary = rows.rows[index].objectID, temporary != join.target(in: rows) else { continue }
                    ids[temporary] = join.target(in: rows)
                }
            }
            for index in joined.rows.indices {
                guard let relationships = joined.rows[index].relationships else { continue }
                let id = joined.rows[index].objectID ?? temporaryMergePlaceholder
                let replaced = ObjectSnapshot(objectID: id, version: 0, attributes: [], relationships: relationships).replacingIDs(ids).relationships
                if replaced != relationships, ids[id] == nil { referencing.insert(rowID(joined.rows[index])) }
                joined.rows[index].relationships = replaced
            }
        }
        var work = MergeWork(rows: joined)
        work.changes = merging.changes
        work.rowIndex.reserveCapacity(joined.count)
        for (index, row) in joined.rows.enumerated() {
            if let id = row.objectID {
                work.rowIndex[id] = index
            }
        }
        work.touched = referencing   // their views of the objects that became one are read again
        for join in joins {
            let survivor = join.rows[0]
            let row = joined.rows[survivor]
            let target = join.target(in: joined)
            guard let storage = source.entityStorage(numbered: row.entity) else { continue }
            var base: ObjectSnapshot
            var stored: ObjectSnapshot?
            if let existing = join.existing {
                guard let persisted = try source.persistedSnapshot(of: existing), let key = existing.primaryKey else { continue }
                base = persisted
                stored = persisted
                work.adoptedKeys[survivor] = key.rawValue
            } else {
                base = try rowSnapshot(row, in: joined, storage: storage, id: target)
            }
            for index in join.rows where index != survivor || join.existing != nil {
                let object = try rowSnapshot(joined.rows[index], in: joined, storage: storage, id: target)
                var merged = try RowMerge.upsert(entity: storage.entity, object: object, persisted: base, policy: merging.policy)
                merged.version = base.version
                result.settled += 1
                decided.append((target, .adopted(survivor, object: object, persisted: base)))
                base = merged
            }
            for index in join.rows {
                guard let temporary = joined.rows[index].objectID else { continue }
                work.rowIndex[temporary] = nil
                if temporary != target { result.adopted[temporary] = target }
                if index != survivor {
                    work.droppedRows.insert(index)
                    work.sameRow[index] = survivor
                }
            }
            work.rowIndex[target] = survivor
            if let stored, storage.constraints.allSatisfy({ $0.slots.allSatisfy { stored.attributes[$0] == base.attributes[$0] } }) {
                work.keepsItsKeys.insert(survivor)   // the stored row's unique entries stay as they are
            }
            work.resolved[survivor] = base
        }
        let rows = joined

        // 1. Each conflicting row, decided on its own.
        for (index, stored) in rowConflicts {
            let row = rows.rows[index]
            guard let storage = source.entityStorage(numbered: row.entity), let key = PrimaryKey(row.key) else { continue }
            let id = source.objectID(entity: storage.name, key: key)
            work.rowIndex[id] = index
            let object = try rowSnapshot(row, in: rows, storage: storage, id: id)
            guard let change = merging.changes[index] else {
                throw StoreWriteError.conflict([StoreConflict(objectID: id, expectedVersion: row.baseVersion, storedVersion: stored)])
            }
            guard stored != nil, let persisted = try source.persistedSnapshot(of: id) else {
                // Deleted elsewhere: the deletion stands (rule 7); the changes are dropped.
                let merge = RowMerge(entity: storage.entity, object: object, change: change, persisted: object)
                work.droppedRows.insert(index)
                work.existence[id] = false
                result.vanished.insert(id)
                result.settled += 1
                decided.append((id, .vanished(object: object, cached: merge.cached)))
                continue
            }
            let merge = RowMerge(entity: storage.entity, object: object, change: change, persisted: persisted)
            var merged = try merge.merged(under: merging.policy, storedVersion: persisted.version)
            merged.version = persisted.version
            work.resolved[index] = merged
            work.merges[index] = merge
            result.settled += 1
            decided.append((id, .merged(index)))
        }

        // Deletions of rows changed elsewhere: kept under the object-trumping policies,
        // dropped (the object stays as stored) under the others (rule 8).
        var keptDeletions: [StoreChanges.Deletion] = []
        var dropped = Set<Int>()
        for (index, stored) in deletionConflicts {
            let deletion = deleted[index]
            guard stored != nil, let persisted = try source.persistedSnapshot(of: deletion.objectID) else {
                dropped.insert(index)   // already gone: nothing to delete
                continue
            }
            result.settled += 1
            switch merging.policy {
            case .mergeByPropertyObjectTrump, .overwrite, .custom:
                decided.append((deletion.objectID, .deleted(persisted: persisted)))
                work.existence[deletion.objectID] = false
                keptDeletions.append(StoreChanges.Deletion(objectID: deletion.objectID, expectedVersion: nil))
                dropped.insert(index)
            case .mergeByPropertyStoreTrump, .rollback, .error:
                var kept = persisted
                kept.relationships = kept.relationships.map { _ in .notLoaded }
                work.fixups[deletion.objectID] = kept
                work.existence[deletion.objectID] = true
                decided.append((deletion.objectID, .undeleted(persisted: persisted)))
                dropped.insert(index)
            }
        }
        for (index, deletion) in deleted.enumerated() where !dropped.contains(index) {
            work.existence[deletion.objectID] = false
            keptDeletions.append(deletion)
        }

        // 2. Every edge a decision touched, made to agree on both ends.
        for (id, state) in decided {
            try makeEdgesAgree(of: id, state, in: &work)
        }

        // 3. The rows: as they came, merged, or dropped; then the fixed-up stored rows.
        var written = EncodedRows()
        var position = [Int?](repeating: nil, count: rows.count)
        for (index, row) in rows.rows.enumerated() where !work.droppedRows.contains(index) {
            guard let storage = source.entityStorage(numbered: row.entity) else { throw StrataError.unknownEntity("number \(row.entity)") }
            if let merged = work.resolved[index] {
                try RowEncoder.append(
                    merged, storage: storage, key: work.adoptedKeys[index] ?? row.key, baseVersion: merged.version, carriesID: true,
                    to: &written)
            } else {
                let start = written.bytes.count
                written.bytes.append(contentsOf: rows.bytes[row.record.lowerBound..<row.indexValues.upperBound])
                var copy = row
                copy.record = start..<(start + row.record.count)
                copy.indexValues = copy.record.upperBound..<(copy.record.upperBound + row.indexValues.count)
                if let relationships = work.rowRelationships[index] { copy.relationships = relationships }
                written.rows.append(copy)
            }
            position[index] = written.count - 1
        }
        for (id, snapshot) in work.fixups.sorted(by: { $0.key.description < $1.key.description }) {
            guard snapshot.relationships.contains(where: { if case .notLoaded = $0 { false } else { true } }) else { continue }
            let (storage, key) = try source.row(of: id)
            try RowEncoder.append(snapshot, storage: storage, key: key.rawValue, baseVersion: snapshot.version, carriesID: true, to: &written)
            work.touched.insert(id)
        }
        return Plan(rows: rows, written: written, position: position, keptDeletions: keptDeletions, work: work, decided: decided, joined: !joins.isEmpty, result: result)
    }

    /// The primary key of each row of the save (a dropped row keeps its own; a joined one
    /// its survivor's) and what the merge did, once the store wrote ``Plan/written`` with
    /// `writtenKeys`.
    func finish(_ plan: Plan, writtenKeys: [UInt64]) -> (keys: [UInt64], result: MergeResult) {
        let rows = plan.rows
        let position = plan.position
        let work = plan.work
        let decided = plan.decided
        var result = plan.result
        func key(of index: Int) -> UInt64 {
            position[index].map { writtenKeys[$0] } ?? work.adoptedKeys[index] ?? rows.rows[index].key
        }
        let keys = rows.rows.indices.map { index in key(of: work.sameRow[index] ?? index) }

        for merged in work.resolved.values {
            var stored = merged
            stored.version += 1
            stored.relationships = stored.relationships.map { value in
                if case .toMany = value { .notLoaded } else { value }
            }
            result.merged[stored.objectID] = stored
        }
        for (id, state) in decided {
            guard case .undeleted(let persisted) = state else { continue }
            var stored = persisted
            if work.touched.contains(id) { stored.version += 1 }
            stored.relationships = stored.relationships.map { value in
                if case .toMany = value { .notLoaded } else { value }
            }
            result.undeleted[id] = stored
        }
        result.touched = work.touched.subtracting(result.merged.keys).subtracting(result.undeleted.keys).subtracting(result.vanished)
        if plan.joined { result.replaceTemporaryIDs(of: rows, keys: keys, source: source) }
        return (keys, result)
    }

    /// The state a saved row carries: its attributes (decoded from its record) and, for
    /// an entity with relationships, their values.
    private func rowSnapshot(_ row: EncodedRow, in rows: EncodedRows, storage: EntityStorage, id: ManagedObjectID) throws -> ObjectSnapshot {
        var snapshot = ObjectSnapshot(objectID: id, entity: storage.entity, version: row.baseVersion)
        let fields: [(UInt32, AttributeValue)]? = rows.bytes.withUnsafeBytes { bytes in
            var fields: [(UInt32, AttributeValue)] = []
            let decoded = try? RecordCodec.forEachField(
                UnsafeRawBufferPointer(rebasing: bytes[row.record]), corrupt: { .corruptStore(store: "", reason: $0.reason) }
            ) { number, value throws(StrataError) in fields.append((number, value)) }
            return decoded == nil ? nil : fields
        }
        guard let fields else { throw StrataError.invalidObjectState(id, reason: "its encoded row does not decode") }
        for (number, value) in fields {
            if case .attribute(let slot)? = storage.field(numbered: number) { snapshot.attributes[slot] = value }
        }
        if let relationships = row.relationships { snapshot.relationships = relationships }
        return snapshot
    }

    /// How one object came out of the decisions.
    enum DecidedState {
        /// Its row was merged (the index of its row in the save).
        case merged(Int)
        /// Its row was deleted elsewhere: the save's changes to it were dropped.
        case vanished(object: ObjectSnapshot, cached: ObjectSnapshot)
        /// The save deletes it although it changed elsewhere.
        case deleted(persisted: ObjectSnapshot)
        /// The save meant to delete it, and it stays as stored.
        case undeleted(persisted: ObjectSnapshot)
        /// A new object of the save (row index) became this stored one (an upsert).
        case adopted(Int, object: ObjectSnapshot, persisted: ObjectSnapshot)
    }

    /// Makes every relationship edge of `id` that its decision touched agree on both ends:
    /// each destination it had in any of its states is linked back exactly when the
    /// decided state holds it. An edge the other end cannot take without displacing
    /// another object from a to-one relationship is dropped from `id`'s side instead, so
    /// that no decision moves an object that neither side moved; an edge to an object
    /// that is gone is dropped.
    private func makeEdgesAgree(of id: ManagedObjectID, _ state: DecidedState, in work: inout MergeWork) throws {
        let storage = try source.entityStorage(named: id.entityName)
        for (slot, relationship) in storage.relationships.enumerated() {
            var candidates: [ManagedObjectID] = []
            func add(_ value: RelationshipSnapshot?) {
                switch value {
                case .toOne(let destination?)?: candidates.append(destination)
                case .toMany(let destinations)?: candidates += destinations
                default: break
                }
            }
            let target: Set<ManagedObjectID>?
            switch state {
            case .merged(let index):
                guard let merge = work.merges[index], let merged = work.resolved[index] else { continue }
                add(merge.object.relationships[slot])
                add(merge.cached.relationships[slot])
                add(merge.persisted.relationships[slot])
                add(merged.relationships[slot])
                target = Self.members(of: merged.relationships[slot])
            case .vanished(let object, let cached):
                add(object.relationships[slot])
                add(cached.relationships[slot])
                target = []
            case .deleted(let persisted):
                add(persisted.relationships[slot])
                target = []
            case .undeleted(let persisted):
                add(persisted.relationships[slot])
                target = Self.members(of: persisted.relationships[slot])
            case .adopted(let index, let object, let persisted):
                guard let merged = work.resolved[index] else { continue }
                add(object.relationships[slot])
                add(persisted.relationships[slot])
                add(merged.relationships[slot])
                target = Self.members(of: merged.relationships[slot])
            }
            guard let target else { continue }   // not known on this side: nothing was decided
            var seen = Set<ManagedObjectID>()
            let sourceIsToOne = !relationship.description.isToMany
            for destination in candidates where seen.insert(destination).inserted {
                // The saving context's view of the other end followed its own state: read again.
                work.touched.insert(destination)
                let present = target.contains(destination)
                if try isGone(destination, in: &work) {
                    if present { try removePlanned(destination, from: id, slot: slot, in: &work) }
                    continue
                }
                let agreed = try makeEnd(
                    destination, relationship: relationship.description.inverseName, of: id, sourceIsToOne: sourceIsToOne,
                    present: present, in: &work)
                if !agreed { try removePlanned(destination, from: id, slot: slot, in: &work) }
            }
        }
    }

    /// The members of a relationship value, or nil when it is not known.
    private static func members(of value: RelationshipSnapshot) -> Set<ManagedObjectID>? {
        switch value {
        case .toOne(let id): id.map { [$0] } ?? []
        case .toMany(let ids): Set(ids)
        case .notLoaded: nil
        }
    }

    /// Whether `id` has no row once the save is written.
    private func isGone(_ id: ManagedObjectID, in work: inout MergeWork) throws -> Bool {
        if let known = work.existence[id] { return !known }
        if id.isTemporaryID || work.rowIndex[id] != nil { return false }
        let exists = try source.exists(id)
        work.existence[id] = exists
        return !exists
    }

    /// Makes `end`'s relationship `name` (the inverse of one of `source`'s) hold `source`
    /// exactly when `present`. An end derived from `source`'s own foreign key (a to-many
    /// inverse of a to-one) follows that key when the row is written.
    ///
    /// - Returns: false when `present` and `end`'s to-one relationship holds another object.
    private func makeEnd(
        _ end: ManagedObjectID, relationship name: String, of source: ManagedObjectID, sourceIsToOne: Bool, present: Bool,
        in work: inout MergeWork
    ) throws -> Bool {
        let storage = try self.source.entityStorage(named: end.entityName)
        guard let slot = storage.relationshipSlot(named: name) else { return true }
        if storage.relationships[slot].description.isToMany && sourceIsToOne {
            work.touched.insert(end)   // its links follow the source's foreign key
            return true
        }
        switch try planned(end, slot: slot, storage: storage, in: &work) {
        case .toOne(let held):
            if present {
                if held == source { return true }
                if held != nil { return false }
                // A to-many side never sets the foreign key of the other end either (rule
                // 11): a member the saving context holds from a view older than another
                // save's move is not linked back over it. Only a to-one this save cleared
                // itself is put back (a deletion undone, rule 8).
                if !sourceIsToOne && !savesChange(ofToOne: slot, of: end, in: work) { return false }
                try setPlanned(.toOne(source), of: end, slot: slot, storage: storage, in: &work)
            } else {
                guard held == source else { return true }
                // A to-many side never clears the foreign key of the other end: that end's
                // own row (its to-one) decides, and the links follow it (rule 11).
                if !sourceIsToOne { return true }
                try setPlanned(.toOne(nil), of: end, slot: slot, storage: storage, in: &work)
            }
        case .toMany(let ids):
            let holds = ids.contains(source)
            guard holds != present else { return true }
            try setPlanned(.toMany(present ? ids + [source] : ids.filter { $0 != source }), of: end, slot: slot, storage: storage, in: &work)
        case .notLoaded:
            return true   // no row: nothing to agree with
        }
        return true
    }

    /// Whether the save's row of `id` changes its to-one relationship `slot` (the saving
    /// context set it since it read the object).
    private func savesChange(ofToOne slot: Int, of id: ManagedObjectID, in work: MergeWork) -> Bool {
        guard let index = work.rowIndex[id] else { return false }
        if let merge = work.merges[index] { return merge.changedRelationships.contains(slot) }
        return work.changes[index]?.toOne.contains { $0.slot == slot } == true
    }

    /// Takes `destination` out of relationship `slot` of `owner`'s planned state.
    private func removePlanned(_ destination: ManagedObjectID, from owner: ManagedObjectID, slot: Int, in work: inout MergeWork) throws {
        let storage = try source.entityStorage(named: owner.entityName)
        switch try planned(owner, slot: slot, storage: storage, in: &work) {
        case .toOne(let held) where held == destination:
            try setPlanned(.toOne(nil), of: owner, slot: slot, storage: storage, in: &work)
        case .toMany(let ids) where ids.contains(destination):
            try setPlanned(.toMany(ids.filter { $0 != destination }), of: owner, slot: slot, storage: storage, in: &work)
        default:
            break
        }
    }

    /// Relationship `slot` of `id` as the save will leave it: its merged state, its row in
    /// the save, or the store's (read when the save does not say).
    private func planned(_ id: ManagedObjectID, slot: Int, storage: EntityStorage, in work: inout MergeWork) throws -> RelationshipSnapshot {
        var value = RelationshipSnapshot.notLoaded
        if let index = work.rowIndex[id] {
            if work.droppedRows.contains(index) { return .notLoaded }
            if let merged = work.resolved[index] {
                value = merged.relationships[slot]
            } else if let relationships = work.rowRelationships[index] ?? work.rows.rows[index].relationships, slot < relationships.count {
                value = relationships[slot]
            }
        } else if let fixup = work.fixups[id] {
            value = fixup.relationships[slot]
        }
        if case .notLoaded = value, !id.isTemporaryID {
            let relationship = storage.relationships[slot].description
            let destinations = try source.destinations(of: id, relationship: relationship.name)
            if relationship.isToMany {
                value = .toMany(destinations)
            } else {
                // A to-one of a row that does not exist is no value at all.
                if try !source.exists(id) { return .notLoaded }
                value = .toOne(destinations.first)
            }
        }
        return value
    }

    /// Sets relationship `slot` of `id`'s planned state.
    private func setPlanned(
        _ value: RelationshipSnapshot, of id: ManagedObjectID, slot: Int, storage: EntityStorage, in work: inout MergeWork
    ) throws {
        if let index = work.rowIndex[id] {
            if work.resolved[index] != nil {
                work.resolved[index]!.relationships[slot] = value
            } else {
                var relationships = work.rowRelationships[index] ?? work.rows.rows[index].relationships
                    ?? storage.entity.relationships.map { _ in .notLoaded }
                relationships[slot] = value
                work.rowRelationships[index] = relationships
                work.touched.insert(id)
            }
            return
        }
        if work.fixups[id] == nil {
            guard let stored = try source.snapshot(of: id) else { return }
            var fixup = stored
            fixup.relationships = fixup.relationships.map { _ in .notLoaded }
            work.fixups[id] = fixup
        }
        work.fixups[id]!.relationships[slot] = value
        work.touched.insert(id)
    }
}

/// The state of a merge in progress.
struct MergeWork {
    /// The save's rows, as they came (references to new objects that became existing
    /// ones made to the existing ones).
    let rows: EncodedRows
    /// The row of each object in the save that carries its ID, by that ID.
    var rowIndex: [ManagedObjectID: Int] = [:]
    /// The merged state of each conflicting row, by row index (at the stored version).
    var resolved: [Int: ObjectSnapshot] = [:]
    /// The decisions, by row index (for the edges they touch).
    var merges: [Int: RowMerge] = [:]
    /// What the saving context changed in each changed row, by row index.
    var changes: [Int: ObjectChange] = [:]
    /// Rows not written: their objects were deleted elsewhere.
    var droppedRows: Set<Int> = []
    /// New relationship values of rows of the save that are written otherwise as they came.
    var rowRelationships: [Int: [RelationshipSnapshot]] = [:]
    /// Stored rows outside the save whose relationships change (to-many ones not
    /// loaded and to-one ones `.notLoaded` keep their stored values), by ID.
    var fixups: [ManagedObjectID: ObjectSnapshot] = [:]
    /// Objects gone once the save is written, or known to exist, by ID.
    var existence: [ManagedObjectID: Bool] = [:]
    /// Objects whose stored state the merge changed beyond what the save carried.
    var touched: Set<ManagedObjectID> = []
    /// The primary key of each new row that became an existing one, by row index.
    var adoptedKeys: [Int: UInt64] = [:]
    /// New rows merged into another new or existing row of the save (not written), by
    /// row index: that row's index.
    var sameRow: [Int: Int] = [:]
    /// Rows that became a stored row whose constrained values they keep: the unique
    /// indexes need nothing for them.
    var keepsItsKeys: Set<Int> = []
}

/// New objects of one save that become one object (<doc:MergePolicies>, rule 10).
struct MergeJoin {
    /// Their rows, in the save's order.
    var rows: [Int]
    /// The stored object they become; nil when they become the first row's object.
    var existing: ManagedObjectID?

    /// The ID of the object they become (the first row's, temporary, when new).
    func target(in rows: EncodedRows) -> ManagedObjectID {
        existing ?? rows.rows[self.rows[0]].objectID ?? temporaryMergePlaceholder
    }
}
