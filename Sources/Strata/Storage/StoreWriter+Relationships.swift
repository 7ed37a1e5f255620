import StrataLMDB

/// How a ``StoreWriter`` keeps the links databases in step with the rows (the rules are
/// on ``StoreFile``, "Relationships").
extension StoreWriter {
    /// Writes the links of a stored object after its row changed from `old` (nil: a new
    /// row) to `new`.
    mutating func writeRelationships(_ snapshot: ObjectSnapshot, storage: EntityStorage, key: PrimaryKey, old: Record?, new: Record) throws {
        let owner = RowReference(entityNumber: storage.number, primaryKey: key)
        for (slot, relationship) in storage.relationships.enumerated() {
            switch relationship.shape {
            case .oneToOne:
                continue  // the foreign key in the row is all there is
            case .manyToOne:
                guard let field = relationship.field else { continue }
                let before = try old.flatMap { try foreignKey($0.fields[field], slot: slot, storage: storage, key: key) }
                let after = try foreignKey(new.fields[field], slot: slot, storage: storage, key: key)
                try moveInverseLink(of: owner, relationship: relationship, from: before, to: after)
            case .oneToMany:
                // Ordered once every foreign key of the transaction is written, so the
                // order does not depend on whether the members were written first.
                guard relationship.description.isOrdered, case .toMany = snapshot.relationships[slot] else { continue }
                pendingOrders[snapshot.objectID] = snapshot
            case .manyToMany:
                guard let links = relationship.links, case .toMany(let ids) = snapshot.relationships[slot] else { continue }
                try replaceLinks(of: owner, in: links, with: ids, relationship: relationship, storage: storage)
            }
        }
    }

    /// Orders the ordered one-to-many links of `snapshot`'s object, once every foreign
    /// key of the transaction is written (``finish()``).
    mutating func orderOneToManyLinks(of snapshot: ObjectSnapshot) throws {
        let (storage, key) = try store.row(of: snapshot.objectID)
        let owner = RowReference(entityNumber: storage.number, primaryKey: key)
        for (slot, relationship) in storage.relationships.enumerated() where relationship.shape == .oneToMany {
            guard relationship.description.isOrdered, let links = relationship.links,
                  case .toMany(let ids) = snapshot.relationships[slot] else { continue }
            try orderLinks(of: owner, in: links, as: ids, relationship: relationship, storage: storage)
        }
    }

    /// Removes the links of a deleted object, and the links to it that its foreign keys
    /// and its many-to-many links account for.
    mutating func deleteRelationships(storage: EntityStorage, key: PrimaryKey, stored: Record) throws {
        let owner = RowReference(entityNumber: storage.number, primaryKey: key)
        let txn = reader.transaction
        for (slot, relationship) in storage.relationships.enumerated() {
            switch relationship.shape {
            case .oneToOne:
                continue
            case .manyToOne:
                guard let field = relationship.field else { continue }
                let destination = try foreignKey(stored.fields[field], slot: slot, storage: storage, key: key)
                try moveInverseLink(of: owner, relationship: relationship, from: destination, to: nil)
            case .oneToMany, .manyToMany:
                guard let links = relationship.links else { continue }
                for link in try reader.links(of: owner, in: links, ownerEntity: storage.name) {
                    try txn.pointee.delete(forKey: LinkLayout.key(owner: owner, destination: link.destination), in: links)
                    if relationship.shape == .manyToMany,
                       let mirror = inverseLinks(of: relationship, at: link.destination) {
                        try txn.pointee.delete(forKey: LinkLayout.key(owner: link.destination, destination: owner), in: mirror.database)
                    }
                }
                nextPositions[LinkOwner(database: links, owner: owner)] = nil
            }
        }
    }

    // MARK: Pieces

    /// The reference a foreign-key field holds (nil: none).
    ///
    /// - Throws: ``StrataError/corruptRecord(entity:primaryKey:reason:)`` for a value
    ///   that is not a reference to the relationship's destination.
    func foreignKey(_ value: AttributeValue?, slot: Int, storage: EntityStorage, key: PrimaryKey) throws -> RowReference? {
        guard let value else { return nil }
        let id = try store.destinationID(value, of: slot, storage: storage, key: key)
        return try store.reference(to: id)
    }

    /// The links database of `relationship`'s inverse on the object `destination`
    /// (whose entity may be a sub-entity of the relationship's destination), and
    /// whether that inverse is ordered.
    func inverseLinks(of relationship: StoredRelationship, at destination: RowReference) -> (database: Database, isOrdered: Bool)? {
        guard let storage = store.entityStorage(numbered: destination.entityNumber),
              let slot = storage.relationshipSlot(named: relationship.description.inverseName),
              let database = storage.relationships[slot].links
        else { return nil }
        return (database, storage.relationships[slot].description.isOrdered)
    }

    /// Moves the link that mirrors a many-to-one foreign key of `child` from the old
    /// destination's to-many inverse to the new one's (appended last when ordered).
    mutating func moveInverseLink(of child: RowReference, relationship: StoredRelationship, from old: RowReference?, to new: RowReference?) throws {
        guard old != new else { return }
        let txn = reader.transaction
        if let old, let inverse = inverseLinks(of: relationship, at: old) {
            try txn.pointee.delete(forKey: LinkLayout.key(owner: old, destination: child), in: inverse.database)
        }
        if let new, let inverse = inverseLinks(of: relationship, at: new) {
            let position = inverse.isOrdered ? try takeNextPosition(of: new, in: inverse.database) : nil
            try txn.pointee.put(
                LinkLayout.value(position: position), forKey: LinkLayout.key(owner: new, destination: child), in: inverse.database)
        }
    }

    /// Takes the position after the last link of `owner` in `links`.
    mutating func takeNextPosition(of owner: RowReference, in links: Database) throws -> UInt64 {
        let slot = LinkOwner(database: links, owner: owner)
        let next: UInt64
        if let cached = nextPositions[slot] {
            next = cached
        } else {
            let ownerEntity = store.entityStorage(numbered: owner.entityNumber)?.name ?? "entity \(owner.entityNumber)"
            let last = try reader.links(of: owner, in: links, ownerEntity: ownerEntity).compactMap(\.position).max()
            guard last ?? 0 < .max else {
                throw StrataError.corruptRecord(entity: ownerEntity, primaryKey: owner.primaryKey.rawValue, reason: "a link position cannot grow any more")
            }
            next = last.map { $0 + 1 } ?? 0
        }
        nextPositions[slot] = next + 1
        return next
    }

    /// Renumbers the existing links of `owner` (0, 1, 2, …) in the order of `ids`; links
    /// `ids` does not name follow, in their previous order. Destinations without a link
    /// are ignored: a one-to-many link is made by the destination's foreign key.
    private mutating func orderLinks(
        of owner: RowReference, in links: Database, as ids: [ManagedObjectID], relationship: StoredRelationship, storage: EntityStorage
    ) throws {
        var rank: [RowReference: Int] = [:]
        for (index, id) in ids.enumerated() {
            let destination = try destinationReference(id, of: relationship, in: storage)
            if rank[destination] == nil { rank[destination] = index }
        }
        let existing = try reader.links(of: owner, in: links, ownerEntity: storage.name)
        let ordered = existing.enumerated().sorted {
            (rank[$0.element.destination] ?? Int.max, $0.offset) < (rank[$1.element.destination] ?? Int.max, $1.offset)
        }.map(\.element)
        try writePositions(of: owner, in: links, ordered.map(\.destination), existing: existing)
    }

    /// Makes the links of `owner` exactly the destinations `ids` (a many-to-many side
    /// written from its own snapshot), in their order when the relationship is ordered.
    private mutating func replaceLinks(
        of owner: RowReference, in links: Database, with ids: [ManagedObjectID], relationship: StoredRelationship, storage: EntityStorage
    ) throws {
        var wanted: [RowReference] = []
        var seen: Set<RowReference> = []
        for id in ids {
            let destination = try destinationReference(id, of: relationship, in: storage)
            if seen.insert(destination).inserted { wanted.append(destination) }
        }
        let existing = try reader.links(of: owner, in: links, ownerEntity: storage.name)
        let txn = reader.transaction
        for link in existing where !seen.contains(link.destination) {
            try txn.pointee.delete(forKey: LinkLayout.key(owner: owner, destination: link.destination), in: links)
        }
        if relationship.description.isOrdered {
            try writePositions(of: owner, in: links, wanted, existing: existing)
        } else {
            let present = Set(existing.map(\.destination))
            for destination in wanted where !present.contains(destination) {
                try txn.pointee.put([UInt8](), forKey: LinkLayout.key(owner: owner, destination: destination), in: links)
            }
        }
    }

    /// Gives `destinations` positions 0, 1, 2, … under `owner`, writing only the links
    /// whose position changes (or that are new).
    private mutating func writePositions(
        of owner: RowReference, in links: Database, _ destinations: [RowReference], existing: [StoreReader<WriteTransaction>.Link]
    ) throws {
        var positions: [RowReference: UInt64] = [:]
        for link in existing { positions[link.destination] = link.position }
        let txn = reader.transaction
        for (index, destination) in destinations.enumerated() where positions[destination] != UInt64(index) {
            try txn.pointee.put(
                LinkLayout.value(position: UInt64(index)), forKey: LinkLayout.key(owner: owner, destination: destination), in: links)
        }
        nextPositions[LinkOwner(database: links, owner: owner)] = UInt64(destinations.count)
    }
}
