import Foundation

/// What a root context's save under a merging policy gives its write, so that the write
/// can settle conflicts in the same transaction (<doc:MergePolicies>): the policy and,
/// for each changed row, what the context changed and the values it had read.
struct SaveMerging: Sendable {
    /// The saving context's policy (never ``MergePolicy/error``).
    var policy: MergePolicy
    /// What the context changed in each changed row, by index in the save's rows.
    var changes: [Int: ObjectChange]
}

/// What the write did to settle a save's conflicts, for the saving context.
struct MergeResult: Sendable {
    /// The stored state of each object whose row was merged, at its new version (to-many
    /// relationships not loaded: they are read again).
    var merged: [ManagedObjectID: ObjectSnapshot] = [:]
    /// Changed objects whose rows were deleted elsewhere: their changes were dropped and
    /// they are gone.
    var vanished: Set<ManagedObjectID> = []
    /// Objects the save deleted that stay (the other side's changes won), with their
    /// stored state.
    var undeleted: [ManagedObjectID: ObjectSnapshot] = [:]
    /// Other objects whose stored relationships the merge changed to keep inverses
    /// consistent, or whose stored state now differs from what the context wrote: the
    /// context reads them again.
    var touched: Set<ManagedObjectID> = []
    /// How many conflicts were settled (one per object): what
    /// ``WriteStatistics/resolvedConflicts`` counts. (The records themselves are made only
    /// for a custom policy's resolver, which reads them.)
    var settled = 0
    /// New objects that became other objects (a uniqueness constraint's upsert): the
    /// permanent ID each temporary one took, a stored object's or that of another new
    /// object of the save.
    var adopted: [ManagedObjectID: ManagedObjectID] = [:]
    /// The IDs among ``adopted``'s that name new rows (new objects merged into another new
    /// one): the save inserted them.
    var joinedInserts: Set<ManagedObjectID> = []

    /// Whether no conflict was settled.
    var isEmpty: Bool { settled == 0 }

    /// Adds `other`'s results (another store's).
    mutating func add(_ other: MergeResult) {
        guard !other.isEmpty || !other.touched.isEmpty else { return }
        guard !isEmpty || !touched.isEmpty else {
            self = other   // the first store's results: nothing to merge them with
            return
        }
        merged.merge(other.merged) { $1 }
        vanished.formUnion(other.vanished)
        undeleted.merge(other.undeleted) { $1 }
        touched.formUnion(other.touched)
        settled += other.settled
        adopted.merge(other.adopted) { $1 }
        joinedInserts.formUnion(other.joinedInserts)
    }

    /// The temporary IDs of the new rows of a save replaced by their permanent ones
    /// (`keys`: each row's primary key, as written), wherever the results name them.
    mutating func replaceTemporaryIDs(of rows: EncodedRows, keys: [UInt64], source: some MergeSource) {
        var named = Set(merged.keys.filter(\.isTemporaryID))
        named.formUnion(touched.filter(\.isTemporaryID))
        named.formUnion(adopted.values.filter(\.isTemporaryID))
        for snapshot in merged.values {
            for value in snapshot.relationships {
                switch value {
                case .toOne(let id?) where id.isTemporaryID: named.insert(id)
                case .toMany(let ids): named.formUnion(ids.filter(\.isTemporaryID))
                default: break
                }
            }
        }
        guard !named.isEmpty else { return }
        var permanent: [ManagedObjectID: ManagedObjectID] = [:]
        for (row, key) in zip(rows.rows, keys) {
            guard let id = row.objectID, named.contains(id), let storage = source.entityStorage(numbered: row.entity),
                  let primaryKey = PrimaryKey(key)
            else { continue }
            permanent[id] = source.objectID(entity: storage.name, key: primaryKey)
        }
        func mapped(_ id: ManagedObjectID) -> ManagedObjectID { permanent[id] ?? id }
        var newMerged: [ManagedObjectID: ObjectSnapshot] = [:]
        for (id, snapshot) in merged {
            if id.isTemporaryID { joinedInserts.insert(mapped(id)) }
            newMerged[mapped(id)] = snapshot.replacingIDs(permanent)
        }
        merged = newMerged
        touched = Set(touched.map(mapped))
        adopted = adopted.mapValues(mapped)
    }
}

/// The three states of one conflicting object, in slot space, and the policy's decision
/// (rules 1 to 6 of <doc:MergePolicies>). Pure: no store, no context.
struct RowMerge {
    let entity: EntityDescription
    /// The saving side's state (a to-many relationship it has not loaded is `.notLoaded`).
    let object: ObjectSnapshot
    /// The state the saving side read (its changes' bases).
    let cached: ObjectSnapshot
    /// The other side's state now.
    let persisted: ObjectSnapshot
    /// The attribute slots the saving side changed.
    let changedAttributes: Set<Int>
    /// The relationship slots the saving side changed.
    let changedRelationships: Set<Int>
    /// For each unordered to-many slot the saving side changed: the members it added and removed.
    let members: [Int: (added: [ManagedObjectID], removed: [ManagedObjectID])]

    /// The merge of `change` (what the saving side changed, with the values it read) made
    /// on `object` (its whole state), against `persisted`.
    ///
    /// `canonical` maps the saving side's object IDs to the other side's (a child may name
    /// an object by the temporary ID it had when the child read it).
    init(
        entity: EntityDescription, object: ObjectSnapshot, change: ObjectChange, persisted: ObjectSnapshot,
        canonical: (ManagedObjectID) -> ManagedObjectID = { $0 }
    ) {
        func map(_ value: RelationshipSnapshot) -> RelationshipSnapshot {
            switch value {
            case .toOne(let id): .toOne(id.map(canonical))
            case .toMany(let ids): .toMany(ids.map(canonical))
            case .notLoaded: .notLoaded
            }
        }
        var object = object
        object.relationships = object.relationships.map(map)
        self.entity = entity
        self.object = object
        self.persisted = persisted
        var cached = object
        cached.version = change.baseVersion ?? object.version
        var attributes = Set<Int>()
        for index in 0..<change.attributeCount {
            let attribute = change.attribute(index)
            guard attribute.slot < cached.attributes.count else { continue }
            cached.attributes[attribute.slot] = attribute.base
            attributes.insert(attribute.slot)
        }
        var relationships = Set<Int>()
        for relationship in change.toOne + change.ordered where relationship.slot < cached.relationships.count {
            cached.relationships[relationship.slot] = map(relationship.base)
            relationships.insert(relationship.slot)
        }
        var members: [Int: (added: [ManagedObjectID], removed: [ManagedObjectID])] = [:]
        for change in change.members where change.slot < cached.relationships.count {
            let added = change.added.map(canonical)
            let removed = change.removed.map(canonical)
            if case .toMany(let now) = object.relationships[change.slot] {
                let addedSet = Set(added)
                cached.relationships[change.slot] = .toMany(now.filter { !addedSet.contains($0) } + removed)
            }
            members[change.slot] = (added, removed)
            relationships.insert(change.slot)
        }
        self.cached = cached
        changedAttributes = attributes
        changedRelationships = relationships
        self.members = members
    }

    /// The attribute slots the other side changed since the saving side read the object.
    var storeChangedAttributes: Set<Int> {
        Set(entity.storedAttributeSlots.filter { slot in
            slot < persisted.attributes.count && slot < cached.attributes.count && persisted.attributes[slot] != cached.attributes[slot]
        })
    }

    /// The relationship slots the other side changed (those the saving side had read).
    var storeChangedRelationships: Set<Int> {
        Set(entity.relationships.indices.filter { slot in
            guard slot < persisted.relationships.count, slot < cached.relationships.count else { return false }
            return !Self.same(cached.relationships[slot], persisted.relationships[slot], ordered: isOrderedOrToOne(slot))
        })
    }

    /// Whether a relationship's value is a whole value (to-one, ordered to-many) rather
    /// than a set of members.
    func isOrderedOrToOne(_ slot: Int) -> Bool {
        let relationship = entity.relationships[slot]
        return !relationship.isToMany || relationship.isOrdered
    }

    /// Whether two relationship values are the same (unknown ones are).
    static func same(_ a: RelationshipSnapshot, _ b: RelationshipSnapshot, ordered: Bool) -> Bool {
        switch (a, b) {
        case (.notLoaded, _), (_, .notLoaded): true
        case (.toOne(let x), .toOne(let y)): x == y
        case (.toMany(let x), .toMany(let y)): ordered ? x == y : Set(x) == Set(y)
        default: false
        }
    }

    /// The conflict record of this merge.
    func conflict(storedVersion: UInt64?) -> MergeConflict {
        let names = changedAttributes.map { entity.attributes[$0].name } + changedRelationships.map { entity.relationships[$0].name }
        let theirs = storeChangedAttributes.map { entity.attributes[$0].name } + storeChangedRelationships.map { entity.relationships[$0].name }
        return MergeConflict(
            objectID: object.objectID, objectSnapshot: PropertySnapshot(object, entity: entity),
            cachedSnapshot: PropertySnapshot(cached, entity: entity), persistedSnapshot: PropertySnapshot(persisted, entity: entity),
            oldVersion: cached.version, newVersion: storedVersion, changedKeysInMemory: Set(names), changedKeysInStore: Set(theirs))
    }

    /// The properties changed on both sides to different values: the ones a policy
    /// decides. The object is in conflict only when there is one (rule 2).
    var conflictingSlots: (attributes: Set<Int>, relationships: Set<Int>) {
        let attributes = changedAttributes.intersection(storeChangedAttributes).filter { slot in
            slot < object.attributes.count && object.attributes[slot] != persisted.attributes[slot]
        }
        let relationships = changedRelationships.intersection(storeChangedRelationships).filter { slot in
            slot < object.relationships.count
                && !Self.same(object.relationships[slot], persisted.relationships[slot], ordered: isOrderedOrToOne(slot))
        }
        return (attributes, relationships)
    }

    /// Whether some property changed on both sides to different values.
    var isInConflict: Bool {
        let slots = conflictingSlots
        return !slots.attributes.isEmpty || !slots.relationships.isEmpty
    }

    /// The merged state under `policy` (never ``MergePolicy/error``), at the persisted
    /// version: what the write stores (at the next version).
    ///
    /// A property changed on one side only keeps that side's value under every policy;
    /// unordered to-many relationships changed on this side merge member by member
    /// (the other side's members, with this side's additions and removals). When some
    /// property changed on both sides, the object is in conflict and the policy decides:
    /// the property trumps and a custom resolver property by property,
    /// ``MergePolicy/overwrite`` with this side's whole state, ``MergePolicy/rollback``
    /// with the other side's.
    ///
    /// - Throws: what a custom resolver throws; ``StrataError/typeMismatch(key:entity:expected:actual:)``
    ///   when it gives a value of the wrong kind.
    func merged(under policy: MergePolicy, storedVersion: UInt64?) throws -> ObjectSnapshot {
        var result = persisted
        // The record a custom resolver reads, made once, and only for it.
        lazy var conflict = self.conflict(storedVersion: storedVersion)
        let conflicting = conflictingSlots
        let inConflict = !conflicting.attributes.isEmpty || !conflicting.relationships.isEmpty
        if inConflict {
            switch policy {
            case .error, .rollback:
                return result
            case .overwrite:
                for slot in entity.storedAttributeSlots where slot < object.attributes.count { result.attributes[slot] = object.attributes[slot] }
                for slot in entity.relationships.indices where slot < object.relationships.count {
                    if case .notLoaded = object.relationships[slot] { continue }
                    result.relationships[slot] = object.relationships[slot]
                }
                return result
            case .mergeByPropertyObjectTrump, .mergeByPropertyStoreTrump, .custom:
                break
            }
        }
        for slot in changedAttributes where slot < object.attributes.count {
            let mine = object.attributes[slot]
            guard conflicting.attributes.contains(slot) else {
                result.attributes[slot] = mine   // changed here only (or both to the same value)
                continue
            }
            switch policy {
            case .mergeByPropertyObjectTrump: result.attributes[slot] = mine
            case .custom(let resolver):
                result.attributes[slot] = try Self.decide(slot, of: entity, by: resolver, in: conflict, mine: mine, theirs: result.attributes[slot])
            default: break   // the other side's value
            }
        }
        for slot in changedRelationships where slot < object.relationships.count {
            let relationship = entity.relationships[slot]
            let mine: RelationshipSnapshot
            if !isOrderedOrToOne(slot), case .toMany(let stored) = persisted.relationships[slot], let change = members[slot] {
                // Members merge: the other side's set with this side's additions and removals.
                let removed = Set(change.removed)
                var seen = Set<ManagedObjectID>()
                mine = .toMany((stored.filter { !removed.contains($0) } + change.added).filter { seen.insert($0).inserted })
            } else {
                mine = object.relationships[slot]
            }
            guard conflicting.relationships.contains(slot) else {
                result.relationships[slot] = mine
                continue
            }
            switch policy {
            case .mergeByPropertyObjectTrump:
                result.relationships[slot] = mine
            case .mergeByPropertyStoreTrump:
                // Members still merge (a set has no conflicting values); a whole value is the other side's.
                if !isOrderedOrToOne(slot) { result.relationships[slot] = mine }
            case .custom(let resolver):
                switch try resolver.decide(conflict, relationship.name) {
                case .object: result.relationships[slot] = mine
                case .store: break
                case .value(.toOne(let id)) where !relationship.isToMany: result.relationships[slot] = .toOne(id)
                case .value(.toMany(let ids)) where relationship.isToMany: result.relationships[slot] = .toMany(ids)
                case .value(let other):
                    throw StrataError.typeMismatch(
                        key: relationship.name, entity: entity.name,
                        expected: relationship.isToMany ? "[\(relationship.destinationEntityName)]" : "\(relationship.destinationEntityName)?",
                        actual: "\(other)")
                }
            default:
                break
            }
        }
        return result
    }
}

extension RowMerge {
    /// The upsert of a new object (`object`) whose constrained values a stored object
    /// (`persisted`) holds, under `policy` (never ``MergePolicy/error``; rule 10): the
    /// stored object's new state, and the conflict record.
    ///
    /// Property trumps take the new object's non-nil values (object trump) or only those
    /// the stored object lacks (store trump); to-many members join either way.
    /// ``MergePolicy/overwrite`` takes the new object's whole state, ``MergePolicy/rollback``
    /// keeps the stored one; a custom resolver decides each attribute both hold, differently.
    static func upsert(
        entity: EntityDescription, object: ObjectSnapshot, persisted: ObjectSnapshot, policy: MergePolicy
    ) throws -> ObjectSnapshot {
        var merged = persisted
        // The record a custom resolver reads, made once, and only for it.
        lazy var conflict: MergeConflict = {
            var mine = Set<String>()
            for slot in entity.storedAttributeSlots where slot < object.attributes.count && object.attributes[slot] != nil {
                mine.insert(entity.attributes[slot].name)
            }
            for (slot, relationship) in entity.relationships.enumerated() where slot < object.relationships.count {
                if !Self.destinationsOf(object.relationships[slot]).isEmpty { mine.insert(relationship.name) }
            }
            return MergeConflict(
                objectID: persisted.objectID, objectSnapshot: PropertySnapshot(object, entity: entity), cachedSnapshot: nil,
                persistedSnapshot: PropertySnapshot(persisted, entity: entity), oldVersion: 0, newVersion: persisted.version,
                changedKeysInMemory: mine, changedKeysInStore: [])
        }()
        switch policy {
        case .error, .rollback:
            return merged
        case .overwrite:
            for slot in entity.storedAttributeSlots where slot < object.attributes.count { merged.attributes[slot] = object.attributes[slot] }
            for slot in entity.relationships.indices where slot < object.relationships.count {
                if case .notLoaded = object.relationships[slot] { continue }
                merged.relationships[slot] = object.relationships[slot]
            }
            return merged
        case .mergeByPropertyObjectTrump, .mergeByPropertyStoreTrump, .custom:
            break
        }
        for slot in entity.storedAttributeSlots where slot < object.attributes.count {
            guard let value = object.attributes[slot] else { continue }
            let stored = persisted.attributes[slot]
            switch policy {
            case .mergeByPropertyObjectTrump:
                merged.attributes[slot] = value
            case .mergeByPropertyStoreTrump:
                if stored == nil { merged.attributes[slot] = value }
            case .custom(let resolver):
                guard let stored, stored != value else {
                    merged.attributes[slot] = value
                    continue
                }
                merged.attributes[slot] = try decide(slot, of: entity, by: resolver, in: conflict, mine: value, theirs: stored)
            default:
                break
            }
        }
        for (slot, relationship) in entity.relationships.enumerated() where slot < object.relationships.count {
            switch (object.relationships[slot], persisted.relationships[slot]) {
            case (.toOne(let id?), .toOne(let stored)):
                if case .mergeByPropertyStoreTrump = policy, stored != nil { continue }
                merged.relationships[slot] = .toOne(id)
            case (.toMany(let ids), .toMany(let stored)) where relationship.isToMany:
                var seen = Set<ManagedObjectID>()
                merged.relationships[slot] = .toMany((stored + ids).filter { seen.insert($0).inserted })
            default:
                continue
            }
        }
        return merged
    }

    /// A custom resolver's decision on attribute `slot` of `conflict`: `mine` (the saving
    /// side's value), `theirs` (the other side's) or a value of its own, of the attribute's type.
    ///
    /// - Throws: what the resolver throws; ``StrataError/typeMismatch(key:entity:expected:actual:)``
    ///   for a value of another type, or a relationship value.
    static func decide(
        _ slot: Int, of entity: EntityDescription, by resolver: MergeResolver, in conflict: MergeConflict,
        mine: AttributeValue?, theirs: AttributeValue?
    ) throws -> AttributeValue? {
        let attribute = entity.attributes[slot]
        switch try resolver.decide(conflict, attribute.name) {
        case .object: return mine
        case .store: return theirs
        case .value(.attribute(let value)):
            if let value, !attribute.type.accepts(value) {
                throw StrataError.typeMismatch(
                    key: attribute.name, entity: entity.name, expected: attribute.type.description, actual: "\(value.kindName) \(value)")
            }
            return value
        case .value(let other):
            throw StrataError.typeMismatch(
                key: attribute.name, entity: entity.name, expected: attribute.type.description, actual: "a relationship value (\(other))")
        }
    }

    /// The destinations of a relationship value.
    static func destinationsOf(_ value: RelationshipSnapshot) -> [ManagedObjectID] {
        switch value {
        case .toOne(let id): id.map { [$0] } ?? []
        case .toMany(let ids): ids
        case .notLoaded: []
        }
    }
}

extension PropertySnapshot {
    /// `snapshot`'s values by property name (transient attributes and relationships not
    /// loaded left out).
    init(_ snapshot: ObjectSnapshot, entity: EntityDescription) {
        var values: [String: PropertyValue] = [:]
        for (slot, attribute) in entity.attributes.enumerated() where !attribute.isTransient {
            values[attribute.name] = .attribute(slot < snapshot.attributes.count ? snapshot.attributes[slot] : nil)
        }
        for (slot, relationship) in entity.relationships.enumerated() where slot < snapshot.relationships.count {
            switch snapshot.relationships[slot] {
            case .toOne(let id): values[relationship.name] = .toOne(id)
            case .toMany(let ids): values[relationship.name] = .toMany(ids)
            case .notLoaded: break
            }
        }
        self.init(version: snapshot.version, values: values)
    }
}
