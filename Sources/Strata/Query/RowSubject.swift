import StrataLMDB

/// Reads rows for the evaluator during one fetch, inside one transaction, caching the
/// rows that relationships lead to (a folder shared by many notes is read once).
final class RowLoader<Transaction: ReadableTransaction & ~Copyable> {
    let store: StoreFile
    // Unsafe pointer because the transaction is lent to the closure running the fetch:
    // a loader lives only inside that closure (FetchExecutor creates it there and drops
    // it before returning), exactly like the StoreReader it rebuilds from the pointer.
    private let transaction: UnsafePointer<Transaction>
    private var rows: [ManagedObjectID: ObjectSnapshot?] = [:]
    private var toMany: [RelationshipKey: [ManagedObjectID]] = [:]

    private struct RelationshipKey: Hashable {
        var id: ManagedObjectID
        var name: String
    }

    init(store: StoreFile, transaction: UnsafePointer<Transaction>) {
        self.store = store
        self.transaction = transaction
    }

    /// A subject for a row already read.
    func subject(_ snapshot: ObjectSnapshot) throws -> RowSubject<Transaction> {
        guard let entity = store.model.entitiesByName[snapshot.objectID.entityName] else {
            throw StrataError.unknownEntity(snapshot.objectID.entityName)
        }
        return RowSubject(loader: self, snapshot: snapshot, entity: entity)
    }

    /// The row of `id`, nil when it does not exist.
    func snapshot(of id: ManagedObjectID) throws -> ObjectSnapshot? {
        if let known = rows[id] { return known }
        let snapshot = try StoreReader(store: store, transaction: transaction).snapshot(of: id)
        rows[id] = snapshot
        return snapshot
    }

    /// The destinations of a to-many relationship of `id`.
    func destinations(of id: ManagedObjectID, relationship name: String) throws -> [ManagedObjectID] {
        let key = RelationshipKey(id: id, name: name)
        if let known = toMany[key] { return known }
        let ids = try StoreReader(store: store, transaction: transaction).destinations(of: id, relationship: name)
        toMany[key] = ids
        return ids
    }
}

extension RowLoader: StoredRowLoader where Transaction: ~Copyable {}

/// Where a ``StoredRowSubject`` reads the rows its relationships lead to: an LMDB fetch's
/// transaction (``RowLoader``) or a server store's connection (``SQLRowLoader``).
protocol StoredRowLoader: AnyObject {
    /// The row of `id`, nil when it does not exist.
    func snapshot(of id: ManagedObjectID) throws -> ObjectSnapshot?
    /// The destinations of to-many relationship `name` of `id`.
    func destinations(of id: ManagedObjectID, relationship name: String) throws -> [ManagedObjectID]
    /// A subject for a row already read.
    func subject(_ snapshot: ObjectSnapshot) throws -> StoredRowSubject<Self>
}

/// A row of an LMDB fetch's transaction as a subject.
typealias RowSubject<Transaction: ReadableTransaction & ~Copyable> = StoredRowSubject<RowLoader<Transaction>>

/// A stored row as a ``PredicateSubject``: filtering during a scan, with the same
/// evaluator and the same rules as objects in memory. Relationships are followed
/// through the loader (the fetch's transaction or connection); a destination whose row
/// is missing is skipped.
struct StoredRowSubject<Loader: StoredRowLoader>: PredicateSubject {
    let loader: Loader
    let snapshot: ObjectSnapshot
    let entity: EntityDescription

    var predicateEntity: EntityDescription { entity }
    var predicateObjectID: ManagedObjectID { snapshot.objectID }

    func predicateAttribute(_ name: String) throws -> AttributeValue? {
        guard let slot = entity.attributeSlots[name] else {
            throw FetchPredicateError(kind: .unknownKey, message: "entity '\(entity.name)' has no attribute named '\(name)'")
        }
        return snapshot.attributes[slot]
    }

    func predicateDestinations(_ name: String) throws -> [StoredRowSubject] {
        guard let slot = entity.relationshipSlots[name] else {
            throw FetchPredicateError(kind: .unknownKey, message: "entity '\(entity.name)' has no relationship named '\(name)'")
        }
        let ids: [ManagedObjectID]
        switch snapshot.relationships[slot] {
        case .toOne(let id): ids = id.map { [$0] } ?? []
        case .toMany(let many): ids = many
        case .notLoaded: ids = try loader.destinations(of: snapshot.objectID, relationship: name)
        }
        return try ids.compactMap { id in try loader.snapshot(of: id).map { try loader.subject($0) } }
    }
}
