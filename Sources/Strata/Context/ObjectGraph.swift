import Foundation
internal import StrataLocks

/// The objects of one context and everything it knows about them: registration (one
/// instance per object ID), pending inserts, updates and deletes, assigned stores.
///
/// A plain, non-`Sendable` class owned by its ``ManagedObjectContext`` actor: it lives
/// in the context's isolation region together with the context's objects, so objects
/// call it synchronously (it is their ``ObjectOwner``) with no lock and no hop.
final class ObjectGraph: ObjectOwner {
    // The graph's per-object state opts out of the runtime's exclusivity checks (marked
    // `@exclusivity(unchecked)` below): the graph lives in its context's isolation, every
    // access to it is a short one by the graph's own code, and the checks cost more than
    // the bookkeeping they guard on the insert and save paths (make profile).
    /// Where rows come from and saves go, shared with the context (which may be given a
    /// coordinator or a parent after it is made).
    private let lineageSlot: LockedValue<ContextLineage>
    /// The lineage once known (it is set at most once, so it never changes after).
    @exclusivity(unchecked) private var knownLineage: ContextLineage?
    /// The context's own family, used until it has a parent.
    private let ownFamily: ContextFamily
    /// The family's generation this graph last adopted permanent IDs at.
    @exclusivity(unchecked) private var adoptedGeneration = 0
    /// The context's children (held weakly).
    let children: WeakContexts

    /// The lineage, once the context has a coordinator or a parent.
    private var lineage: ContextLineage {
        if let knownLineage { return knownLineage }
        let lineage = lineageSlot.withLock { $0 }
        if case .unset = lineage { return lineage }
        knownLineage = lineage
        return lineage
    }

    /// The parent context, for a child context's graph.
    var parentContext: ManagedObjectContext? {
        if case .parent(let parent) = lineage { return parent }
        return nil
    }

    /// What the contexts of this graph's parent–child tree share.
    var family: ContextFamily {
        if let knownFamily { return knownFamily }
        switch lineage {
        case .unset:
            return ownFamily   // may still get a parent
        case .coordinator:
            knownFamily = ownFamily
        case .parent(let parent):
            // Walked up once: every ID lookup and temporary `objectID` read asks.
            knownFamily = parent.family
        }
        return knownFamily ?? ownFamily
    }
    /// The family once the lineage is known (it never changes after).
    @exclusivity(unchecked) private var knownFamily: ContextFamily?

    /// The coordinator: the context's own, or its root's.
    ///
    /// - Throws: ``StrataError/noCoordinator`` until the context has one.
    var coordinator: PersistentStoreCoordinator {
        get throws(StrataError) {
            switch lineage {
            case .unset: throw .noCoordinator
            case .coordinator(let coordinator): return coordinator
            case .parent(let parent):
                guard let coordinator = parent.persistentStoreCoordinator else { throw .noCoordinator }
                return coordinator
            }
        }
    }

    /// The coordinator's instruments (metrics and spans), once the context has one.
    var instruments: Instruments? {
        if let knownInstruments { return knownInstruments }
        knownInstruments = try? coordinator.instruments
        return knownInstruments
    }
    @exclusivity(unchecked) private var knownInstruments: Instruments?

    /// The context's name, for the dimensions of its metrics (kept by the context).
    var contextName: String? {
        didSet { if contextName != oldValue { knownMetrics = nil } }
    }

    /// The context's metrics; nil while it has no coordinator or metrics are off.
    var contextMetrics: ContextMetrics? {
        if let knownMetrics { return knownMetrics }
        guard let factory = instruments?.metrics else { return nil }
        let made = ContextMetrics(name: contextName ?? "unnamed", factory: factory)
        knownMetrics = made
        return made
    }
    @exclusivity(unchecked) private var knownMetrics: ContextMetrics?

    /// What the last ``ManagedObjectContext/save()`` wrote (inserted, updated, deleted
    /// objects), nil when it wrote nothing: for its metrics.
    var lastSaveCounts: (inserted: Int, updated: Int, deleted: Int)?

    /// The coordinator's model.
    ///
    /// - Throws: ``StrataError/noCoordinator`` until the context has a coordinator.
    var model: ManagedObjectModel {
        get throws(StrataError) { try coordinator.managedObjectModel }
    }

    /// Whether every registered object is held strongly (otherwise only objects with
    /// changes are, and the rest go when nothing else holds them).
    var retainsRegisteredObjects = false {
        didSet {
            guard retainsRegisteredObjects != oldValue else { return }
            retained = retainsRegisteredObjects ? Dictionary(identities.objects.map { (ObjectIdentifier($0), $0) }) { first, _ in first } : [:]
        }
    }
    /// Whether an object whose row is gone becomes a deleted object (true) or stays
    /// inaccessible and throws at the access point (false).
    var shouldDeleteInaccessibleFaults = true
    /// Consulted before an inaccessible fault is handled: return false to leave the
    /// object inaccessible whatever ``shouldDeleteInaccessibleFaults`` says.
    var inaccessibleFaultHandler: ((ManagedObject, ManagedObjectID, String?) -> Bool)?
    /// Whether deletes propagate (delete rules) at the end of each block
    /// (``processPendingChanges()``) rather than only at save.
    var propagatesDeletesAtEndOfEvent = true
    /// What undo records, while the context has an undo manager (nil otherwise: a change
    /// then costs one nil check).
    var undoRecorder: UndoRecorder?

    /// See ``identityKey(of:)``.
    @exclusivity(unchecked) private var lastKeyStore: (uuid: UUID, number: UInt32)?
    @exclusivity(unchecked) private var lastKeyEntity: (name: String, number: UInt32)?
    /// The model's entity of the last ID an object was made for (``object(for:)``).
    @exclusivity(unchecked) private var lastIDEntity: EntityDescription?
    /// The entity an object of the last insert came with, and the model's description of
    /// it (objects made with `Note()` carry their class's description).
    @exclusivity(unchecked) private var lastInsertedEntity: (given: EntityDescription, model: EntityDescription)?
    /// Registered objects by identity (held unowned: see ``IdentityMap``).
    @exclusivity(unchecked) private var identities = IdentityMap()
    /// Every registered object, while ``retainsRegisteredObjects`` holds them.
    @exclusivity(unchecked) private var retained: [ObjectIdentifier: ManagedObject] = [:]
    /// The unsaved changes: the objects inserted, changed and deleted since the last save
    /// (held until then), the delete rules still to run, failed edits, conflict checks.
    @exclusivity(unchecked) var unsaved = PendingChanges()
    /// What changed since the last ``takeChangeEvent()`` (ObjectsDidChange).
    @exclusivity(unchecked) private var event = ChangeEvent()
    /// Batched faults and the staleness interval (ObjectGraph+Batching.swift).
    var batching = FaultBatching()
    /// The query generation a root context reads (ObjectGraph+Generation.swift). When it
    /// changes, rows kept for faults were read in another state: they go, and faults
    /// read the new one.
    var generationPin = GenerationPin.unpinned {
        didSet { batching.fetchedRows = [:] }
    }
    /// Generations that outlived the age policy since the context last announced them.
    var expiredGenerations: [ExpiredGeneration] = []

    init(lineage: LockedValue<ContextLineage>, family: ContextFamily, children: WeakContexts) {
        lineageSlot = lineage
        ownFamily = family
        self.children = children
    }

    deinit {
        // Objects that outlive their context keep no owner (and do not call back).
        for object in identities.objects + identities.displacedObjects { object.outlive(self) }
        for object in unsaved.inserted + unsaved.deleted { object.outlive(self) }
        for object in unsaved.changed { object.outlive(self) }
        // Nor the marks of this graph's changed set.
        unsaved.clear()
    }

    /// A graph on `coordinator` alone (no context around it).
    convenience init(coordinator: PersistentStoreCoordinator) {
        self.init(lineage: LockedValue(.coordinator(coordinator)), family: ContextFamily(), children: WeakContexts())
    }

    /// Whether the context has a parent or children: only then do other contexts need
    /// to learn the permanent IDs its objects get.
    var isInTree: Bool {
        parentContext != nil || !children.alive.isEmpty
    }

    // MARK: Registration

    /// The registered object for `id`, if any.
    func registeredObject(for id: ManagedObjectID) -> ManagedObject? {
        let key = identityKey(of: id)
        if let object = identities[key] { return object }
        // Nothing was ever recorded in the family: no ID has another name.
        guard family.generation != 0 else { return nil }
        adoptPermanentIDsIfNeeded()
        if let object = identities[key] { return object }
        // An ID this context knows by its other name: the permanent ID of an object it
        // still has under its temporary one (adopted above unless it was not registered
        // then), or the temporary ID of an object that has its permanent one by now.
        if id.isTemporaryID {
            if let permanent = family.permanentID(for: id), let object = identities[ObjectIdentityKey(permanent)] { return object }
        } else if let temporary = family.temporaryID(for: id), let object = identities[ObjectIdentityKey(temporary)] {
            reregister(object, as: id)
            return object
        }
        return nil
    }

    /// The identity key of `id`, its store's and entity name's numbers remembered from the
    /// last ID asked for (IDs come in runs of one store and one entity: a fetch, a batch).
    func identityKey(of id: ManagedObjectID) -> ObjectIdentityKey {
        guard case .permanent(let store, let primaryKey) = id.identity else { return ObjectIdentityKey(id) }
        let storeNumber: UInt32
        if let last = lastKeyStore, last.uuid == store {
            storeNumber = last.number
        } else {
            storeNumber = StoreNumbers.number(for: store)
            lastKeyStore = (store, storeNumber)
        }
        let entityNumber: UInt32
        if let last = lastKeyEntity, last.name == id.entityName {
            entityNumber = last.number
        } else {
            entityNumber = EntityNames.number(for: id.entityName)
            lastKeyEntity = (id.entityName, entityNumber)
        }
        return ObjectIdentityKey(store: storeNumber, entity: entityNumber, primaryKey: primaryKey)
    }

    /// The object registered for the row `primaryKey` of `entity` in the store numbered
    /// `store`: the fetch path's lookup, with no ID made.
    func registeredObject(store: UInt32, entity: EntityDescription, primaryKey: UInt64) -> ManagedObject? {
        identities[ObjectIdentityKey(store: store, entity: entity.nameNumber, primaryKey: primaryKey)]
    }

    /// The object registered under `key`, if any.
    func registeredObject(forKey key: ObjectIdentityKey) -> ManagedObject? {
        identities[key]
    }

    /// Moves registered objects with temporary IDs to the permanent IDs the family
    /// learnt since the last call (a root save, `obtainPermanentIDs` elsewhere in the
    /// tree). One atomic load when nothing is new.
    override func adoptPermanentIDsIfNeeded() {
        let generation = family.generation
        guard generation != adoptedGeneration else { return }
        adoptedGeneration = generation
        let temporaries = identities.temporaryObjects
        guard !temporaries.isEmpty else { return }
        let ids = temporaries.map(\.storedObjectID)
        for (temporary, permanent) in family.permanentIDs(for: ids) {
            guard let object = identities[ObjectIdentityKey(temporary)], identities[ObjectIdentityKey(permanent)] == nil else { continue }
            reregister(object, as: permanent)
        }
    }

    /// Every registered object.
    var registeredObjects: [ManagedObject] { identities.objects }

    /// How many objects are registered (for tests).
    var registrationCount: Int { identities.count }

    /// Registers `object` (its owner is this graph) under its ID.
    private func register(_ object: ManagedObject) {
        register(object, as: object.identityKey)
    }

    /// ``register(_:)`` with the object's identity key, when the caller has it.
    private func register(_ object: ManagedObject, as key: ObjectIdentityKey) {
        identities.insert(object, for: key)
        if retainsRegisteredObjects { retained[ObjectIdentifier(object)] = object }
    }

    /// Removes `object` from the registration table.
    func unregister(_ object: ManagedObject) {
        identities.remove(object.identityKey, ifObject: ObjectIdentifier(object))
        if !retained.isEmpty { retained[ObjectIdentifier(object)] = nil }
    }

    /// Moves `object` to its new ID (a permanent one after a save or `obtainPermanentIDs`).
    func reregister(_ object: ManagedObject, as id: ManagedObjectID) {
        identities.remove(object.identityKey, ifObject: ObjectIdentifier(object))
        object.assignID(id)
        identities.insert(object, for: object.identityKey)
    }

    /// Moves `object` to the row `primaryKey` of the store numbered `store` (its
    /// permanent ID, made by a save).
    func reregister(_ object: ManagedObject, store: UInt32, primaryKey: UInt64) {
        identities.remove(object.identityKey, ifObject: ObjectIdentifier(object))
        object.assignPermanentKey(store: store, primaryKey: primaryKey)
        identities.insert(object, for: object.identityKey)
    }

    /// Makes room for `count` more registrations (before a fetch registers its rows).
    func reserveRegistrations(_ count: Int) {
        identities.reserveCapacity(count)
    }

    override func objectWillDeinit(key: ObjectIdentityKey, object: ObjectIdentifier) {
        identities.remove(key, ifObject: object)
    }

    /// The object for a row a fetch read (its ID is permanent): the registered one, or a
    /// new fault of `entity`'s class. Touches no store.
    func object(forFetched id: ManagedObjectID, entity: EntityDescription) -> ManagedObject {
        if let registered = identities[ObjectIdentityKey(id)] ?? registeredObject(for: id) { return registered }
        let object = entity.managedObjectClass.init(entity: entity)
        object.becomeFault(for: id, owner: self)
        register(object)
        return object
    }

    /// The object for row `key` of `entity` in the store numbered `store`: the registered
    /// one, or a new fault of the entity's class (the fetch path's lookup: no ID is made
    /// unless the context is in a tree, `inTree` (``isInTree``), where the row may be
    /// known by a temporary ID).
    func object(forRow key: UInt64, of entity: EntityDescription, store: UInt32, inTree: Bool) -> ManagedObject {
        let identityKey = ObjectIdentityKey(store: store, entity: entity.nameNumber, primaryKey: key)
        if let registered = identities[identityKey] { return registered }
        if inTree, let registered = registeredObject(for: ManagedObjectID(storeNumber: store, entityName: entity.name, primaryKey: key)) {
            return registered
        }
        let object = entity.managedObjectClass.init(entity: entity)
        object.becomeNewFault(store: store, primaryKey: key, owner: self)
        register(object, as: identityKey)
        return object
    }

    /// A new fault for the permanent `id`, when no object is registered for it (nil when
    /// one is): ``object(for:)`` for a caller that must know which, with one lookup.
    func newFault(forUnregistered id: ManagedObjectID) -> ManagedObject? {
        guard case .permanent = id.identity else { return nil }
        let key = identityKey(of: id)
        guard identities[key] == nil, family.generation == 0 || registeredObject(for: id) == nil else { return nil }
        let entity = entity(named: id.entityName)
        let object = entity.managedObjectClass.init(entity: entity)
        object.becomeNewFault(store: key.storeNumber, primaryKey: key.low, owner: self)
        register(object, as: key)
        return object
    }

    /// The model's entity `name` (the last one asked for is kept), or an entity of that
    /// name alone when the model has none.
    private func entity(named name: String) -> EntityDescription {
        if let last = lastIDEntity, last.name == name { return last }
        let entity = (try? model)?.entitiesByName[name] ?? EntityDescription(name: name)
        lastIDEntity = entity
        return entity
    }

    /// The object for `id`: the registered one, or a new fault of the entity's class.
    /// Touches no store.
    override func object(for id: ManagedObjectID) -> ManagedObject {
        if let registered = registeredObject(for: id) { return registered }
        let id = id.isTemporaryID ? family.permanentID(for: id) ?? id : id
        let entity = entity(named: id.entityName)
        let object = entity.managedObjectClass.init(entity: entity)
        if case .permanent = id.identity {
            let key = identityKey(of: id)
            object.becomeNewFault(store: key.storeNumber, primaryKey: key.low, owner: self)
        } else {
            object.becomeFault(for: id, owner: self)
        }
        register(object)
        return object
    }

    /// The object for `id` with its values read (from memory, or else the store).
    ///
    /// - Throws: ``StrataError/objectNotFound(_:)`` when the object is neither
    ///   registered (as an accessible object) nor stored; a storage error.
    func existingObject(for id: ManagedObjectID) throws -> ManagedObject {
        if let registered = registeredObject(for: id) {
            if registered.isDeleted && !registered.isInserted && registered.faultState == .inaccessible {
                throw StrataError.objectNotFound(id)
            }
            if registered.faultState != .fault { return registered }
            if registered.holdsUnreadChanges {
                // A child's change it took unread: read under the change (also when the
                // row went since: the change stays a change).
                if !registered.fulfilIfNeeded() { try registered.throwIfStorageFailed() }
                return registered
            }
            guard let snapshot = try read(id) else { throw StrataError.objectNotFound(id) }
            registered.apply(snapshot)
            registered.awakeFromFetch()
            return registered
        }
        guard mayReadUpstream(id), let snapshot = try read(id) else { throw StrataError.objectNotFound(id) }
        let object = self.object(for: id)
        object.apply(snapshot)
        object.awakeFromFetch()
        return object
    }

    /// The stored row of `id`; nil when it does not exist or its store is not added.
    func read(_ id: ManagedObjectID) throws -> ObjectSnapshot? {
        try upstreamSnapshot(of: id)
    }

    // MARK: Invariants

    /// Traps when the graph breaks one of its invariants: every object in a change set
    /// is owned by this graph; deleted ⊆ changed (see
    /// ``PendingChanges/_checkInvariants(owner:)``). Called before every save and rollback
    /// in debug builds.
    func _checkInvariants() {
        unsaved._checkInvariants(owner: self)
    }

    // MARK: ObjectOwner

    override func fireFault(of object: ManagedObject) throws(StrataError) {
        contextMetrics?.faults.increment()
        do {
            if let row = fetchedRow(for: object) { return try row.applyValues(to: object) }
            // A batched fetch's fault fulfils its whole batch, itself included unless its
            // row is gone.
            if try fireBatch(of: object), object.faultState != .fault { return }
            guard let snapshot = try read(object.objectID) else { throw StrataError.inaccessibleFault(object.objectID) }
            object.apply(snapshot)
        } catch let error as StrataError {
            throw error
        } catch {
            throw .inaccessibleFault(object.objectID)
        }
    }

    override func destinations(of object: ManagedObject, relationship: RelationshipDescription) throws(StrataError) -> [ManagedObjectID] {
        guard mayReadUpstream(object.objectID) else { return [] }
        do {
            return try upstreamDestinations(of: object.objectID, relationship: relationship.name)
        } catch let error as StrataError {
            throw error
        } catch {
            throw .inaccessibleFault(object.objectID)
        }
    }

    override func objectWillChange(_ object: ManagedObject, key: String) {
        if let undoRecorder { undoRecorder.willChange(object, key: key) }
        unsaved.removeFailedEdit(object, key: key)
        event.record(object, in: .updated)
        // An inserted object is held and saved whole already.
        guard !object.isInserted else { return }
        unsaved.recordChange(object)
    }

    override func editFailed(_ object: ManagedObject, key: String, error: StrataError) {
        unsaved.recordFailedEdit(object, key: key, error: error)
    }

    /// Throws the error of the first edit that could not happen (see
    /// ``editFailed(_:key:error:)``): a save must not go on without it.
    func throwIfEditsFailed() throws(StrataError) {
        if let failed = unsaved.failedEdits.first { throw failed.error }
    }

    override func handleInaccessibleFault(_ object: ManagedObject, property: String?, error: StrataError) -> Bool {
        if let handler = inaccessibleFaultHandler, !handler(object, object.objectID, property) { return false }
        // Only a row that is gone makes a deleted object; a storage failure leaves the
        // object inaccessible, so the access reports it.
        guard shouldDeleteInaccessibleFaults, error.code == .inaccessibleFault else { return false }
        // The row is gone: the object reads as deleted, with nil and zero values, and is
        // in deletedObjects until the next save or reset discards it (no store write:
        // there is no row, and no validation).
        object.vanish()
        unsaved.recordVanished(object)
        event.record(object, in: .deleted)
        return true
    }

    // MARK: Inserting and deleting

    /// Adds a new object: it gets its context, a temporary ID if it has none, and
    /// ``ManagedObject/awakeFromInsert()``.
    ///
    /// - Throws: ``StrataError/unknownEntity(_:)`` when the model has no such entity (or
    ///   it is abstract); ``StrataError/invalidObjectState(_:reason:)`` when the object
    ///   belongs to another context or was saved already.
    func insert(_ object: ManagedObject) throws {
        if let owner = object.owner {
            guard owner === self else {
                throw StrataError.invalidObjectState(object.objectID, reason: "it belongs to another context")
            }
            // Inserting a deleted object takes the deletion back.
            if object.isDeleted { takeBackDeletion(of: object) }
            return
        }
        guard object.hasTemporaryID else {
            throw StrataError.invalidObjectState(object.objectID, reason: "it was saved already; fetch it in this context instead")
        }
        let entity: EntityDescription
        if let last = lastInsertedEntity, last.given === object.entity {
            entity = last.model
        } else {
            guard let found = try model.entitiesByName[object.entity.name], !found.isAbstract else {
                throw StrataError.unknownEntity(object.entity.name)
            }
            entity = found
            lastInsertedEntity = (object.entity, found)
        }
        if entity !== object.entity { object.adopt(entity) }
        object.enterInserted(into: self)
        let failed = object.pendingFailedEdits
        if !failed.isEmpty {
            // Edits that failed before the object had a context fail its first save.
            for (key, error) in failed { editFailed(object, key: key, error: error) }
            object.pendingFailedEdits = []
        }
        unsaved.recordInsert(object)
        register(object)
        event.record(object, in: .inserted)
        if let undoRecorder { undoRecorder.appeared(object) }
        object.awakeFromInsert()
        // Objects it already points to (a graph built before inserting) come along.
        for slot in entity.relationships.indices {
            for destination in object.relationshipStorage(at: slot).objects where destination.owner == nil {
                try insert(destination)
            }
        }
    }

    /// Registers `object`, made for an object a child context inserted and saved into
    /// this one, as inserted here (no `awakeFromInsert()`: its values come from the
    /// child, which called it already). `store` is the child's `assign(_:to:)` choice.
    func registerInsertFromChild(_ object: ManagedObject, store: PersistentStore?) {
        object.enterInserted(into: self)
        unsaved.recordInsert(object)
        if let store { unsaved.assign(object, to: store) }
        register(object)
        event.record(object, in: .inserted)
        if let undoRecorder { undoRecorder.appeared(object) }
    }

    /// Registers `object`, which an undo or redo brings back.
    func registerForUndo(_ object: ManagedObject) {
        register(object)
    }

    /// Takes back the deletion of `object`: a saved object stays (no longer in
    /// ``deleted``); one inserted since the last save is inserted again.
    func takeBackDeletion(of object: ManagedObject) {
        if let undoRecorder { undoRecorder.appeared(object) }
        let wasSaved = unsaved.removeDelete(object)
        object.restoreFromDeletion(reinserting: !wasSaved)
        event.unrecord(object, from: .deleted)
        if !wasSaved {
            unsaved.recordInsert(object)
            event.record(object, in: .inserted)
        }
    }

    /// Deletes `object` at the next save. An object inserted and not yet saved simply
    /// leaves the context. Delete rules run at the end of the block
    /// (``propagatesDeletesAtEndOfEvent``) or at save.
    ///
    /// - Throws: ``StrataError/invalidObjectState(_:reason:)`` for an object of
    ///   another context; ``StrataError/storage(_:)`` when its fault cannot be read.
    func delete(_ object: ManagedObject) throws {
        guard object.owner === self else {
            throw StrataError.invalidObjectState(object.objectID, reason: "it does not belong to this context")
        }
        guard !object.isDeleted else { return }
        // A fault (a fetched object never touched) fires first: the save checks the row
        // version it read, and delete rules, undo and notifications see its values. When
        // the store cannot be read, the delete fails with that (not a conflict at save).
        if !object.fulfilIfNeeded() { try object.throwIfStorageFailed() }
        unsaved.removeFailedEdits(of: object)   // edits of a deleted object no longer matter
        object.prepareForDeletion()
        event.record(object, in: .deleted)
        if let undoRecorder { undoRecorder.disappeared(object) }
        if object.isInserted {
            unsaved.removeInsert(object)
            object.enterDeleted()
            unsaved.pendingDeletes.append(object)
            return
        }
        object.enterDeleted()
        unsaved.recordDelete(object)
    }

    /// Runs the delete rules of objects deleted since the last call: nullify removes
    /// them from their destinations' inverses, cascade deletes the destinations, deny
    /// and no action leave them (deny is checked at save). When a destination cannot be
    /// read (a storage failure), the objects not yet done stay pending for the next
    /// call, and the failure is thrown.
    func propagateDeletes() throws {
        while !unsaved.pendingDeletes.isEmpty {
            let batch = unsaved.pendingDeletes
            unsaved.pendingDeletes = []
            for (index, object) in batch.enumerated() {
                do {
                    try propagateDelete(of: object)
                } catch {
                    unsaved.pendingDeletes = Array(batch[index...]) + unsaved.pendingDeletes
                    throw error
                }
            }
        }
    }

    /// Runs the delete rules of one deleted object (see ``propagateDeletes()``).
    private func propagateDelete(of object: ManagedObject) throws {
        for (slot, relationship) in object.entity.relationships.enumerated() {
            switch relationship.deleteRule {
            case .noAction, .deny:
                continue
            case .nullify:
                guard object.loadRelationshipIfNeeded(slot) else {
                    try object.throwIfStorageFailed()  // unreadable is not empty
                    continue
                }
                try detachDestinations(of: object, slot: slot)
            case .cascade:
                guard object.loadRelationshipIfNeeded(slot) else {
                    try object.throwIfStorageFailed()  // skipping would leave the destinations orphaned
                    continue
                }
                for destination in object.relationshipStorage(at: slot).objects where !destination.isDeleted {
                    try delete(destination)
                }
                try detachDestinations(of: object, slot: slot)
            }
        }
        if !object.isInserted && !unsaved.isDeletion(object) {
            // An inserted-then-deleted object: it leaves the context entirely.
            unregister(object)
            unsaved.forgetUnsaved(object)
            object.discardUnsaved()
        }
    }

    /// Empties relationship `slot` of a deleted object, both sides: a to-many loses each
    /// destination, a to-one is set to nil (its destination's inverse drops the object).
    ///
    /// - Throws: the storage error of a destination whose inverse side cannot be read
    ///   (the destinations before it are detached; the delete stays pending).
    private func detachDestinations(of object: ManagedObject, slot: Int) throws {
        if object.entity.relationships[slot].isToMany {
            for destination in object.relationshipStorage(at: slot).objects {
                try object.removeDestination(destination, slot: slot)
            }
        } else {
            try object.setToOne(slot, to: nil)
        }
    }

    // MARK: State

    /// Inserted objects, in insertion order.
    var inserted: [ManagedObject] { unsaved.inserted }

    /// Deleted objects (saved ones), in deletion order.
    var deleted: [ManagedObject] { unsaved.deleted }

    /// Objects changed since the last save, neither inserted nor deleted, in ID order.
    var updated: [ManagedObject] { unsaved.updated }

    /// Deleted objects whose rows were gone when their faults fired (see
    /// ``PendingChanges/vanished``).
    var vanished: Set<ObjectIdentifier> { unsaved.vanished }

    /// Reads the objects that hold changes taken from a child without their values
    /// (``ManagedObject/holdsUnreadChanges``), together: a save validates and writes
    /// whole objects. One whose row cannot be read that way is read, and its failure
    /// reported, when validation reaches it.
    func readUnreadChanges() {
        // In ID order: rows of neighbouring keys are read by the cursor's next steps.
        let unread = unsaved.unreadChanges
        if !unread.isEmpty { try? fulfilFaults(unread) }
    }

    /// ``updated``, only the objects whose entity has relationships.
    var updatedWithRelationships: [ManagedObject] { unsaved.updatedWithRelationships }

    /// How many objects are in the changed set (see ``updated``).
    var changedCount: Int { unsaved.changedCount }

    /// Whether anything is unsaved.
    var hasChanges: Bool { unsaved.hasChanges }

    /// The store `object` goes to.
    func assign(_ object: ManagedObject, to store: PersistentStore) throws {
        guard object.owner === self else {
            throw StrataError.invalidObjectState(object.objectID, reason: "it does not belong to this context")
        }
        guard object.objectID.isTemporaryID else {
            throw StrataError.invalidObjectState(object.objectID, reason: "it is already in \((try? coordinator)?.persistentStore(for: object.objectID)?.description ?? "a store")")
        }
        guard try coordinator.persistentStores.contains(store), store.holds(object.entity.name) else {
            throw StrataError.noStore(entity: object.entity.name)
        }
        unsaved.assign(object, to: store)
    }

    /// Whether no object was assigned a store with `assign(_:to:)`.
    var assignedStoresAreEmpty: Bool { unsaved.assignedStores.isEmpty }

    /// The store chosen for `object` with `assign(_:to:)`, if any.
    func assignedStore(of object: ManagedObject) -> PersistentStore? {
        unsaved.assignedStores[ObjectIdentifier(object)]
    }

    /// The store a new object will be saved to.
    func store(forNew object: ManagedObject) throws -> PersistentStore {
        if let store = unsaved.assignedStores[ObjectIdentifier(object)] { return store }
        return try coordinator.defaultStore(for: object.entity.name)
    }

    /// Gives `objects` permanent IDs now (inserted ones; others keep theirs).
    func obtainPermanentIDs(for objects: [ManagedObject]) throws {
        let pending = objects.filter { $0.objectID.isTemporaryID && $0.owner === self }
        guard !pending.isEmpty else { return }
        let requests = try pending.map { (entityName: $0.entity.name, store: try store(forNew: $0)) }
        let ids = try coordinator.makePermanentIDs(requests)
        var made: [ManagedObjectID: ManagedObjectID] = [:]
        for (object, id) in zip(pending, ids) {
            made[object.objectID] = id
            reregister(object, as: id)
        }
        // The parent may have the object under its temporary ID (it inserted it, or a
        // save of this context did): the whole tree learns the new ID.
        if isInTree { family.record(made) }
    }

    // MARK: Forgetting

    /// Clears the change sets after a save or rollback.
    func clearChanges() {
        unsaved.clear()
    }

    /// Records `object` in the current event (a merge's inserted objects).
    func recordEvent(_ object: ManagedObject, in set: ChangeEvent.Set) {
        event.record(object, in: set)
    }

    /// An object deleted in its store by someone else (a merged save): it leaves the
    /// context as a deleted object, whatever unsaved changes it had.
    func forgetMergedDeletion(_ object: ManagedObject) {
        unsaved.forgetDeletedElsewhere(object)
        event.unrecord(object, from: .updated)
        event.record(object, in: .deleted)
        unregister(object)
        object.leaveContextDeletedElsewhere()
    }

    /// The changes since the last call, settled, for an ObjectsDidChange notification.
    func takeChangeEvent() -> ObjectChangeSets {
        guard !event.isEmpty else { return ObjectChangeSets() }
        let sets = event.settled()
        event = ChangeEvent()
        return sets
    }

    /// Forgets every object: they leave the context, inaccessible.
    func reset() {
        undoRecorder?.clear()
        event.discard()
        event = ChangeEvent()
        event.invalidatedAll = true
        for object in identities.displacedObjects { object.outlive(self) }
        for object in registeredObjects + unsaved.inserted + unsaved.deleted {
            event.record(object, in: .invalidated)
            object.invalidate()
        }
        identities.removeAll()
        retained = [:]
        batching.batches.removeAll()
        batching.fetchedRows = [:]
        clearChanges()
    }

    /// Puts every object back as it was at the last save or fetch: inserted objects
    /// leave, deleted ones come back, changed ones get their committed values.
    func rollback() {
        undoRecorder?.clear()
        for object in unsaved.inserted {
            unregister(object)
            object.discardUnsaved()
            event.record(object, in: .invalidated)
        }
        for object in unsaved.deleted where unsaved.vanished.contains(ObjectIdentifier(object)) {
            // Its row is gone: nothing to go back to.
            unregister(object)
            object.leaveContextDeleted()
        }
        for object in unsaved.changed where !object.isInserted && object.owner === self {
            object.restoreFromDeletion(reinserting: false)
            object.revertToCommitted()
            event.unrecord(object, from: .updated)
            event.unrecord(object, from: .deleted)
            event.record(object, in: .refreshed)
        }
        for object in unsaved.pendingDeletes where object.owner === self { object.restoreFromDeletion(reinserting: false) }
        clearChanges()
    }

    /// Refreshes `object`: with `mergeChanges`, re-reads its stored values and keeps its
    /// unsaved changes on top; without, discards its changes and turns it into a fault.
    func refresh(_ object: ManagedObject, mergeChanges: Bool) throws {
        try refresh(object, mergeChanges: mergeChanges, stored: nil)
    }

    /// ``refresh(_:mergeChanges:)``, with the object's stored row when the caller read it
    /// already (`stored`; read here when nil).
    func refresh(_ object: ManagedObject, mergeChanges: Bool, stored known: ObjectSnapshot?) throws {
        guard object.owner === self, !object.isInserted else { return }
        batching.fetchedRows[object.identityKey] = nil
        event.record(object, in: .refreshed)
        guard mergeChanges else {
            event.unrecord(object, from: .updated)
            event.unrecord(object, from: .deleted)
            unsaved.forgetChanges(of: object)
            object.restoreFromDeletion(reinserting: false)
            object.turnIntoFault()
            return
        }
        // Changes taken from a child before the object was read: read it (under them)
        // first, so that they are kept over the stored values like any other changes.
        if object.holdsUnreadChanges, !object.fulfilIfNeeded() { try object.throwIfStorageFailed() }
        guard object.faultState == .fulfilled else { return }
        let local = object.hasPersistentChangedValues ? object.makeSnapshot() : nil
        let committed = object.makeCommittedSnapshot()
        guard let stored = try known ?? read(object.objectID) else { return }
        object.apply(stored)
        guard let local, let committed else { return }
        // Local changes win over the stored values, property by property.
        // Transient attributes are not in the snapshots (nil there): they keep their value.
        for (slot, attribute) in object.entity.attributes.enumerated()
        where !attribute.isTransient && local.attributes[slot] != committed.attributes[slot] {
            object.keepCommittedValues()
            object.storeAttribute(local.attributes[slot], at: slot)
            object.markChanged()
        }
        for slot in object.entity.relationships.indices where local.relationships[slot] != committed.relationships[slot] {
            if case .toOne(let id) = local.relationships[slot] {
                object.keepCommittedValues()
                object.storeRelationship(.toOne(id.map(self.object(for:))), at: slot)
                object.markChanged()
            } else if case .toMany(let ids) = local.relationships[slot] {
                object.keepCommittedValues()
                object.storeRelationship(
                    .toMany(ToManyStorage(isOrdered: object.entity.relationships[slot].isOrdered, objects: ids.map(self.object(for:)))), at: slot)
                object.markChanged()
            }
        }
    }
}
