import Foundation
import StrataLMDB

extension ObjectGraph {
    /// Saves every pending change to the stores, all or nothing.
    ///
    /// In order: delete rules run; new objects reached from changed ones come in;
    /// ``ManagedObject/willSave()`` is called on each object to save; every object is
    /// validated (`validateForInsert`, `validateForUpdate`, `validateForDelete`) and
    /// every failure is thrown together; the changes are written in one write job
    /// (permanent IDs assigned, row versions checked and bumped); then objects take their
    /// permanent IDs and committed values, deleted objects leave, and
    /// ``ManagedObject/didSave()`` is called on each.
    ///
    /// - Throws: the storage error of an edit that could not happen (a setter whose reads
    ///   failed); ``StrataError/validation(_:)`` with every failure;
    ///   ``StrataError/mergeConflicts(_:)`` when rows changed underneath;
    ///   ``StrataError/noStore(entity:)``, ``StrataError/invalidObjectState(_:reason:)``
    ///   for a relationship between stores; storage errors. Nothing is written then, and
    ///   the context keeps its changes.
    ///
    /// - Parameters:
    ///   - announce: called once the save is known to have work, before any
    ///     ``ManagedObject/willSave()`` (the WillSave notification).
    ///   - processChanges: called after the objects' `willSave()`, which may change
    ///     more (an ObjectsDidChange notification for those changes).
    /// - Returns: the objects saved, with their permanent IDs; empty when there was
    ///   nothing to save.
    @discardableResult
    func save(announce: () -> Void = {}, processChanges: () -> Void = {}) throws -> ObjectChangeSets {
        try throwIfEditsFailed()
        try propagateDeletes()
        try adoptNewDestinations()
        guard hasChanges else { return ObjectChangeSets() }
        announce()
        let inserted = self.inserted, updated = self.updated, deleted = self.deleted.filter { !vanished.contains(ObjectIdentifier($0)) }
        let changedBefore = changedCount
        for object in inserted + updated + deleted { object.willSave() }
        // willSave may change or insert more.
        try propagateDeletes()
        try adoptNewDestinations()
        processChanges()
        // Changed objects only join the changed set during a save: the same count is the
        // same set (whose members may have been deleted since).
        let toInsert = self.inserted, toUpdate = changedCount == changedBefore ? updated.filter(\.isUpdated) : self.updated
        // Objects whose rows were gone when their faults fired are discarded, unwritten.
        let toDiscard = self.deleted.filter { vanished.contains(ObjectIdentifier($0)) }
        let toDelete = self.deleted.filter { !vanished.contains(ObjectIdentifier($0)) }

        var failures: [ValidationFailure] = []
        func collect(_ check: () throws -> Void) throws {
            do { try check() } catch StrataError.validation(let found) { failures += found }
        }
        for object in toInsert { try collect(object.validateForInsert) }
        for object in toUpdate { try collect(object.validateForUpdate) }
        for object in toDelete { try collect(object.validateForDelete) }
        guard failures.isEmpty else { throw StrataError.validation(failures) }

        if let parent = parentContext {
            try saveIntoParent(parent, inserting: toInsert, updating: toUpdate, deleting: toDelete)
            for object in toInsert + toUpdate { object.didCommit(permanentID: nil, version: object.rowVersion) }
            for object in toDelete + toDiscard { forget(object) }
            clearChanges()
            for object in toInsert + toUpdate + toDelete { object.didSave() }
            return ObjectChangeSets(inserted: toInsert, updated: toUpdate, deleted: toDelete)
        }

        var plan = SavePlan()
        for object in toInsert {
            let store = try store(forNew: object, plan: &plan)
            try plan.add(object, to: store, key: object.hasTemporaryID ? 0 : object.rowKey, baseVersion: 0)
        }
        for object in toUpdate {
            try plan.add(object, to: try plan.store(of: object, coordinator: coordinator), key: object.rowKey, baseVersion: object.rowVersion)
        }
        for object in toDelete {
            let store = try plan.store(of: object, coordinator: coordinator)
            plan.saves[plan.index(of: store)].deleted.append(StoreChanges.Deletion(objectID: object.objectID, expectedVersion: object.rowVersion))
        }
        for object in conflictChecks.values where object.owner === self && !object.hasChanges && !object.objectID.isTemporaryID {
            let store = try plan.store(of: object, coordinator: coordinator)
            plan.saves[plan.index(of: store)].checked.append(StoreChanges.Deletion(objectID: object.objectID, expectedVersion: object.rowVersion))
        }
        try checkStores(plan.related, plan.storeOfRelated)

        let outcome = try saveToStores(plan.saves)
        advanceGeneration(afterSavingTo: outcome.generation)

        var madePermanent: [ManagedObjectID: ManagedObjectID] = [:]
        let recordsIDs = isInTree
        for (index, save) in plan.saves.enumerated() {
            let storeNumber = StoreNumbers.number(for: save.store.identifier)
            let keys = index < outcome.keys.count ? outcome.keys[index] : []
            for (row, (object, key)) in zip(save.rows.rows, zip(plan.objects[index], keys)) {
                guard row.isInsert else {
                    object.didCommit(permanentID: nil, version: row.baseVersion + 1)
                    continue
                }
                if object.hasTemporaryID {
                    let temporary = recordsIDs ? object.storedObjectID : nil
                    reregister(object, store: storeNumber, primaryKey: key)
                    if let temporary { madePermanent[temporary] = object.storedObjectID }
                }
                object.didCommit(permanentID: nil, version: 1)
            }
        }
        // Descendants may have these objects under their temporary IDs.
        if recordsIDs && !madePermanent.isEmpty { family.record(madePermanent) }
        for object in toDelete + toDiscard {
            forget(object)
        }
        clearChanges()
        for object in toInsert + toUpdate + toDelete { object.didSave() }
        var saved = ObjectChangeSets(inserted: toInsert, updated: toUpdate, deleted: toDelete)
        saved.queryGeneration = outcome.token
        return saved
    }

    /// The store a new object will be saved to, the last one found for its entity reused.
    private func store(forNew object: ManagedObject, plan: inout SavePlan) throws -> PersistentStore {
        if !assignedStoresAreEmpty, let store = assignedStore(of: object) { return store }
        if let last = plan.lastNew, last.entity === object.entity { return last.store }
        let store = try coordinator.defaultStore(for: object.entity.name)
        plan.lastNew = (object.entity, store)
        return store
    }

    /// Writes `saves` through the coordinator. A pinned context asks for the state its
    /// save makes. When the map must grow and cannot because snapshots are open, and
    /// this context's own generation may be one of them, the context lets it go and
    /// tries once more (its generation advances at a save anyway); if that fails too, it
    /// takes its generation back when it can, else it reads the newest state next.
    private func saveToStores(_ saves: [StoreSave]) throws -> SaveOutcome {
        let coordinator = try coordinator
        let pinning = parentContext == nil && generationPin.isPinned
        do {
            return try coordinator.save(saves, pinning: pinning)
        } catch let error as StrataError {
            guard case .storage(let storageError) = error, storageError == .mapFull, let token = pinnedToken else { throw error }
            generationPin = .newest   // the lease goes: its snapshot closes unless shared
            do {
                return try coordinator.save(saves, pinning: true)
            } catch {
                if let generation = try? coordinator.generation(for: token) { generationPin = .pinned(GenerationLease(generation)) }
                throw error
            }
        }
    }

    /// The token of the generation the context holds, if it holds one (read without
    /// keeping a reference to its lease).
    private var pinnedToken: QueryGenerationToken? {
        if case .pinned(let lease) = generationPin { return lease.generation.token }
        return nil
    }

    /// A child's save: its changes, as values, applied to the parent's objects in the
    /// parent's isolation (where they become the parent's unsaved changes). Nothing
    /// reaches a store.
    private func saveIntoParent(
        _ parent: ManagedObjectContext, inserting toInsert: [ManagedObject], updating toUpdate: [ManagedObject],
        deleting toDelete: [ManagedObject]
    ) throws {
        var save = ChildSave()
        for object in toInsert {
            save.inserted.append(object.makeSnapshot())
            if let store = assignedStore(of: object) { save.stores[object.objectID] = store }
        }
        save.updated = toUpdate.map(ObjectChange.init(of:))
        save.deleted = toDelete.map(\.objectID)
        let checked = conflictChecks.values.filter { $0.owner === self && !$0.hasChanges && !$0.isInserted }
        save.checked = checked.map(\.objectID)
        for object in toDelete + checked {
            if let base = object.makeCommittedSnapshot() { save.bases[object.objectID] = base }
        }
        guard !save.isEmpty, let child = context else { return }
        try parent.acceptChildSave(save, from: child)
    }

    /// Objects reached through relationships of inserted or changed objects that are in
    /// no context yet are inserted too (a graph built before it was inserted).
    private func adoptNewDestinations() throws {
        for object in inserted + updatedWithRelationships {
            for slot in object.entity.relationships.indices {
                let storage = object.relationshipStorage(at: slot)
                if case .notLoaded = storage { continue }
                for destination in storage.objects where destination.owner == nil && destination.objectID.isTemporaryID {
                    try insert(destination)
                }
            }
        }
    }

    /// Relationships cannot cross stores: each object's destinations must be saved to
    /// (or live in) the same store.
    private func checkStores(_ objects: [ManagedObject], _ stores: [ObjectIdentifier: PersistentStore]) throws {
        for object in objects {
            guard let store = stores[ObjectIdentifier(object)] else { continue }
            for slot in object.entity.relationships.indices {
                for destination in object.relationshipStorage(at: slot).objects where !destination.isDeleted {
                    if destination.owner !== self {
                        throw StrataError.invalidObjectState(
                            destination.objectID, reason: "\(object.entity.name).\(object.entity.relationships[slot].name) refers to it, but it is in another context (or none)")
                    }
                    let other = try stores[ObjectIdentifier(destination)]
                        ?? (destination.objectID.isTemporaryID ? self.store(forNew: destination) : coordinator.store(of: destination.objectID))
                    if other !== store {
                        throw StrataError.invalidObjectState(
                            object.objectID, reason: "\(object.entity.name).\(object.entity.relationships[slot].name) leads to an object in another store; relationships cannot cross stores")
                    }
                }
            }
        }
    }

    /// Makes the next save fail with a conflict if `object`'s stored row changed (or went)
    /// since the context read it, even when `object` itself has no changes: optimistic
    /// locking of an object the save depends on. Changed and deleted objects are always
    /// checked. A fault is read now, so the check is against the row as it is now.
    func detectConflicts(for object: ManagedObject) throws {
        guard object.owner === self else {
            throw StrataError.invalidObjectState(object.objectID, reason: "it does not belong to this context")
        }
        guard !object.objectID.isTemporaryID, !object.isInserted else { return }
        guard object.fulfilIfNeeded() else { throw object.inaccessibleError }
        conflictChecks[ObjectIdentifier(object)] = object
    }

    /// A saved deletion: the object leaves the context.
    private func forget(_ object: ManagedObject) {
        unregister(object)
        object.owner = nil
        object.faultState = .inaccessible
    }
}

/// A root save being prepared: per store, the encoded rows and the objects they come
/// from, in the same order.
private struct SavePlan {
    var saves: [StoreSave] = []
    /// The objects of each save's rows.
    var objects: [[ManagedObject]] = []
    /// Objects with relationships and the store each goes to, for the check that
    /// relationships stay inside one store.
    var related: [ManagedObject] = []
    var storeOfRelated: [ObjectIdentifier: PersistentStore] = [:]
    /// The store the last new object went to, by entity.
    var lastNew: (entity: EntityDescription, store: PersistentStore)?
    /// The store of the last saved object, by store number.
    private var lastStore: (number: UInt32, store: PersistentStore)?
    /// The entity storage the last row was encoded with.
    private var lastStorage: (entity: EntityDescription, store: PersistentStore, storage: EntityStorage)?

    /// The index of `store`'s save, made when needed.
    mutating func index(of store: PersistentStore) -> Int {
        if let index = saves.firstIndex(where: { $0.store === store }) { return index }
        saves.append(StoreSave(store: store))
        objects.append([])
        return saves.count - 1
    }

    /// The store a saved object (permanent ID) lives in.
    mutating func store(of object: ManagedObject, coordinator: PersistentStoreCoordinator) throws -> PersistentStore {
        if let lastStore, lastStore.number == object.storeNumber { return lastStore.store }
        let store = try coordinator.store(of: object.objectID)
        lastStore = (object.storeNumber, store)
        return store
    }

    /// Encodes `object`'s row into `store`'s save.
    mutating func add(_ object: ManagedObject, to store: PersistentStore, key: UInt64, baseVersion: UInt64) throws {
        let storage: EntityStorage
        if let last = lastStorage, last.entity === object.entity, last.store === store {
            storage = last.storage
        } else {
            storage = try store.file.entityStorage(named: object.entity.name)
            lastStorage = (object.entity, store, storage)
        }
        let index = index(of: store)
        try RowEncoder.append(object, storage: storage, key: key, baseVersion: baseVersion, to: &saves[index].rows)
        objects[index].append(object)
        if storage.hasRelationships {
            related.append(object)
            storeOfRelated[ObjectIdentifier(object)] = store
        }
    }
}
