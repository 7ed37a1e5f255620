import Foundation
@testable import Strata

/// A stand-in for a context's object store: rows in a dictionary, one object per ID,
/// and a log of what objects asked of it. Lets the object tests drive faulting and
/// change tracking before contexts exist.
final class FakeOwner: ObjectOwner {
    let model: ManagedObjectModel
    let store = UUID()
    var rows: [ManagedObjectID: ObjectSnapshot] = [:]
    var links: [ManagedObjectID: [String: [ManagedObjectID]]] = [:]
    var registered: [ManagedObjectID: ManagedObject] = [:]
    var fulfilments: [ManagedObjectID] = []
    var willChange: [(ManagedObjectID, String)] = []
    var deletesInaccessibleFaults = true
    var inaccessible: [ManagedObjectID] = []
    /// Rows whose reads fail as a full reader table would (a storage failure).
    var unreadable: Set<ManagedObjectID> = []
    /// Edits that did not happen, with the failure each would have made the next save throw.
    var failedEdits: [(ManagedObjectID, String, StrataError)] = []
    private var nextKey: UInt64 = 1

    init(model: ManagedObjectModel) {
        self.model = model
    }

    deinit {
        // Objects hold their owner unowned: an owner lets go of its objects before it goes.
        for object in registered.values where object.owner === self { object.owner = nil }
    }

    /// A permanent ID for a new row of `entity`.
    func makeID(_ entity: String) -> ManagedObjectID {
        defer { nextKey += 1 }
        return ManagedObjectID(store: store, entityName: entity, primaryKey: PrimaryKey(nextKey)!)
    }

    /// Stores a row with the given attribute values (by name), returning its ID.
    func addRow(_ entityName: String, _ values: [String: AttributeValue], toOne: [String: ManagedObjectID] = [:]) -> ManagedObjectID {
        let entity = model.entitiesByName[entityName]!
        let id = makeID(entityName)
        var snapshot = ObjectSnapshot(objectID: id, entity: entity, version: 1)
        for (name, value) in values { snapshot.attributes[entity.attributeSlots[name]!] = value }
        for (name, target) in toOne { snapshot.relationships[entity.relationshipSlots[name]!] = .toOne(target) }
        rows[id] = snapshot
        return id
    }

    override func snapshotForFault(of object: ManagedObject) throws(StrataError) -> ObjectSnapshot {
        fulfilments.append(object.objectID)
        if unreadable.contains(object.objectID) { throw .storage(.readersFull) }
        guard let row = rows[object.objectID] else { throw .inaccessibleFault(object.objectID) }
        return row
    }

    override func object(for id: ManagedObjectID) -> ManagedObject {
        if let known = registered[id] { return known }
        let entity = model.entitiesByName[id.entityName]!
        let object = entity.managedObjectClass.init(entity: entity)
        object.becomeFault(for: id, owner: self)
        registered[id] = object
        return object
    }

    override func destinations(of object: ManagedObject, relationship: RelationshipDescription) throws(StrataError) -> [ManagedObjectID] {
        if unreadable.contains(object.objectID) { throw .storage(.readersFull) }
        return links[object.objectID]?[relationship.name] ?? []
    }

    override func objectWillChange(_ object: ManagedObject, key: String) {
        willChange.append((object.objectID, key))
    }

    override func editFailed(_ object: ManagedObject, key: String, error: StrataError) {
        failedEdits.append((object.objectID, key, error))
    }

    override func handleInaccessibleFault(_ object: ManagedObject, property: String?, error: StrataError) -> Bool {
        inaccessible.append(object.objectID)
        return deletesInaccessibleFaults
    }

    /// Registers a new object as if inserted into a context.
    func insert(_ object: ManagedObject) {
        object.owner = self
        object.insertedFlag = true
        registered[object.objectID] = object
        object.awakeFromInsert()
    }
}
