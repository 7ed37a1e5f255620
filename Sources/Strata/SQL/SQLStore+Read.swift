import Foundation

/// Reading rows: by ID (faults, batches), and the destinations of to-many relationships.
extension SQLStore {
    /// The largest number of parameters one statement binds (PostgreSQL's limit is 65,535).
    static let maximumBinds = 30_000

    /// The snapshot of a row read with `table.selectList`.
    ///
    /// - Throws: ``StrataError/corruptRecord(entity:primaryKey:reason:)`` for a value that
    ///   does not fit its attribute (a column changed underneath the store).
    func snapshot(of row: [SQLValue], table: SQLTable) throws(StrataError) -> ObjectSnapshot {
        let storage = table.storage
        guard row.count >= 2, let key = row[0].integer, let version = row[1].integer, let primaryKey = PrimaryKey(UInt64(bitPattern: key)) else {
            throw .corruptRecord(entity: storage.name, primaryKey: 0, reason: "a row without a primary key or version")
        }
        var snapshot = ObjectSnapshot(objectID: objectID(entity: storage.name, key: primaryKey), entity: storage.entity, version: UInt64(bitPattern: version))
        var index = 2
        for column in table.columns {
            switch column.kind {
            case .attribute(let slot, let type):
                do {
                    snapshot.attributes[slot] = try SQLColumn.attributeValue(row[index], of: type)
                } catch {
                    throw .corruptRecord(entity: storage.name, primaryKey: primaryKey.rawValue, reason: "\(column.name): \(error.description)")
                }
                index += 1
            case .toOne(let slot, let destination, _):
                let keyValue = row[index]
                index += 1
                var entityNumber: Int64?
                if destination == nil {
                    entityNumber = row[index].integer
                    index += 1
                }
                guard let destinationKey = keyValue.integer, let destinationPrimaryKey = PrimaryKey(UInt64(bitPattern: destinationKey)) else {
                    snapshot.relationships[slot] = .toOne(nil)
                    continue
                }
                let entityName: String? = if let destination { destination } else {
                    entityNumber.flatMap { UInt16(exactly: $0) }.flatMap { entityStorage(numbered: $0)?.name }
                }
                guard let entityName else {
                    throw .corruptRecord(entity: storage.name, primaryKey: primaryKey.rawValue, reason: "\(column.name) names no entity of the store")
                }
                snapshot.relationships[slot] = .toOne(objectID(entity: entityName, key: destinationPrimaryKey))
            }
        }
        return snapshot
    }

    /// `$first, $first+1, ...`: `count` placeholders.
    static func placeholders(from first: Int, count: Int) -> String {
        (first..<(first + count)).map { "$\($0)" }.joined(separator: ", ")
    }

    /// The rows of `ids` that exist (permanent IDs of this store; others are skipped), on
    /// `connection`, in no particular order.
    func snapshots(of ids: [ManagedObjectID], on connection: any SQLConnection) throws -> [ObjectSnapshot] {
        var byTable: [String: [Int64]] = [:]
        for id in ids {
            guard let (table, key) = try? row(of: id) else { continue }
            byTable[table.tableName, default: []].append(key)
        }
        var snapshots: [ObjectSnapshot] = []
        snapshots.reserveCapacity(ids.count)
        for (name, keys) in byTable.sorted(by: { $0.key < $1.key }) {
            guard let table = layout.tables[name] else { continue }
            for chunk in keys.chunks(of: Self.maximumBinds) {
                let sql = "SELECT \(table.selectList) FROM \(table.name) WHERE \(SQLName.quoted(SQLLayout.keyColumn)) IN (\(Self.placeholders(from: 1, count: chunk.count)))"
                for row in try connection.execute(sql, chunk.map { .int64($0) }).rows {
                    snapshots.append(try snapshot(of: row, table: table))
                }
            }
        }
        return snapshots
    }

    /// ``snapshots(of:on:)`` on a connection of the pool, or in `snapshot` (a pinned query
    /// generation's).
    func snapshots(of ids: [ManagedObjectID], in pinned: SQLSnapshot? = nil) throws(StrataError) -> [ObjectSnapshot] {
        try withConnection(in: pinned) { connection in try snapshots(of: ids, on: connection) }
    }

    /// The stored destinations of to-many `relationship` of each of `owners` (permanent IDs
    /// of this store), on `connection`: in order for an ordered relationship.
    func destinations(
        of owners: [ManagedObjectID], relationship name: String, on connection: any SQLConnection
    ) throws -> [ManagedObjectID: [ManagedObjectID]] {
        var byEntity: [String: [Int64]] = [:]
        for owner in owners {
            guard let (table, key) = try? row(of: owner) else { continue }
            byEntity[table.tableName, default: []].append(key)
        }
        var found: [ManagedObjectID: [ManagedObjectID]] = [:]
        for (entityName, keys) in byEntity {
            guard let table = layout.tables[entityName], let slot = table.storage.relationshipSlot(named: name) else {
                throw StrataError.unknownKey(key: name, entity: entityName)
            }
            for owner in keys {
                guard let primaryKey = PrimaryKey(UInt64(bitPattern: owner)) else { continue }
                found[objectID(entity: entityName, key: primaryKey)] = []
            }
            let stored = table.storage.relationships[slot]
            for chunk in keys.chunks(of: Self.maximumBinds) {
                if let link = table.linksBySlot[slot], stored.shape == .manyToMany {
                    try readLinks(link, owners: chunk, ownerEntity: entityName, on: connection, into: &found)
                } else {
                    try readInverse(of: stored, owner: table, owners: chunk, ordering: table.linksBySlot[slot], on: connection, into: &found)
                }
            }
        }
        return found
    }

    /// ``destinations(of:relationship:on:)`` on a connection of the pool, or in `snapshot`
    /// (a pinned query generation's).
    func destinations(
        of owners: [ManagedObjectID], relationship name: String, in pinned: SQLSnapshot? = nil
    ) throws(StrataError) -> [ManagedObjectID: [ManagedObjectID]] {
        try withConnection(in: pinned) { connection in try destinations(of: owners, relationship: name, on: connection) }
    }

    /// Members of a many-to-many relationship, from its join table, in position order.
    private func readLinks(
        _ link: SQLLink, owners: ArraySlice<Int64>, ownerEntity: String, on connection: any SQLConnection,
        into found: inout [ManagedObjectID: [ManagedObjectID]]
    ) throws {
        let sql = "SELECT owner, destination, destination_entity FROM \(link.name) WHERE owner IN (\(Self.placeholders(from: 1, count: owners.count))) ORDER BY owner, position"
        for row in try connection.execute(sql, owners.map { .int64($0) }).rows {
            guard let owner = row[0].integer.flatMap({ PrimaryKey(UInt64(bitPattern: $0)) }),
                  let destination = row[1].integer.flatMap({ PrimaryKey(UInt64(bitPattern: $0)) }),
                  let number = row[2].integer.flatMap({ UInt16(exactly: $0) }), let storage = entityStorage(numbered: number)
            else { continue }
            found[objectID(entity: ownerEntity, key: owner), default: []].append(objectID(entity: storage.name, key: destination))
        }
    }

    /// Members of a to-many relationship whose inverse is to-one: the rows whose inverse
    /// column names the owner, in every table of the destination entity; ordered by the
    /// `ordering` join table's positions for an ordered relationship (members it does not
    /// list last), else by entity and primary key.
    private func readInverse(
        of stored: StoredRelationship, owner: SQLTable, owners: ArraySlice<Int64>, ordering: SQLLink?, on connection: any SQLConnection,
        into found: inout [ManagedObjectID: [ManagedObjectID]]
    ) throws {
        let relationship = stored.description
        struct Member {
            var owner: Int64
            var position: Int64
            var entity: String
            var key: PrimaryKey
        }
        var members: [Member] = []
        for table in layout.tables(for: relationship.destinationEntityName, includesSubentities: true, in: model) {
            guard let inverseSlot = table.storage.relationshipSlot(named: relationship.inverseName),
                  let column = table.toOneColumns[inverseSlot]
            else { continue }
            let inverse = "d." + SQLName.quoted(column.name)
            var binds: [SQLValue] = owners.map { .int64($0) }
            var condition = "\(inverse) IN (\(Self.placeholders(from: 1, count: owners.count)))"
            if case .toOne(_, nil, _) = column.kind {
                binds.append(.int16(Int16(bitPattern: owner.storage.number)))
                condition += " AND d.\(SQLName.quoted(column.name + "._entity")) = $\(binds.count)"
            }
            let sql: String
            if let ordering {
                binds.append(.int16(Int16(bitPattern: table.storage.number)))
                sql = "SELECT \(inverse), d.\(SQLName.quoted(SQLLayout.keyColumn)), l.position FROM \(table.name) d LEFT JOIN \(ordering.name) l "
                    + "ON l.owner = \(inverse) AND l.destination = d.\(SQLName.quoted(SQLLayout.keyColumn)) AND l.destination_entity = $\(binds.count) "
                    + "WHERE \(condition)"
            } else {
                sql = "SELECT \(inverse), d.\(SQLName.quoted(SQLLayout.keyColumn)), NULL::integer FROM \(table.name) d WHERE \(condition)"
            }
            for row in try connection.execute(sql, binds).rows {
                guard let ownerKey = row[0].integer, let key = row[1].integer.flatMap({ PrimaryKey(UInt64(bitPattern: $0)) }) else { continue }
                members.append(Member(owner: ownerKey, position: row[2].integer ?? Int64.max, entity: table.storage.name, key: key))
            }
        }
        members.sort { ($0.owner, $0.position, $0.entity, $0.key.rawValue) < ($1.owner, $1.position, $1.entity, $1.key.rawValue) }
        for member in members {
            guard let ownerKey = PrimaryKey(UInt64(bitPattern: member.owner)) else { continue }
            found[objectID(entity: owner.storage.name, key: ownerKey), default: []].append(objectID(entity: member.entity, key: member.key))
        }
    }
}

extension Array {
    /// The array in consecutive slices of at most `size` elements.
    func chunks(of size: Int) -> [ArraySlice<Element>] {
        stride(from: 0, to: count, by: Swift.max(1, size)).map { self[$0..<Swift.min($0 + size, count)] }
    }
}
