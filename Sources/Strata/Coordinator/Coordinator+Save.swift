import Foundation

/// What one save asks of one store.
struct StoreSave: Sendable {
    /// The store written.
    var store: PersistentStore
    /// New objects; temporary IDs get permanent ones in the write transaction.
    var inserted: [ObjectSnapshot] = []
    /// Changed objects, each with the row version it was based on.
    var updated: [ObjectSnapshot] = []
    /// Deleted objects, each with the row version it was based on (nil: no check).
    var deleted: [StoreChanges.Deletion] = []
    /// Objects not written whose row versions must still be these.
    var checked: [StoreChanges.Deletion] = []
}

/// What a committed save did.
struct SaveOutcome: Sendable {
    /// The permanent ID of every inserted object that had a temporary one.
    var permanentIDs: [ManagedObjectID: ManagedObjectID] = [:]
    /// The new row version of every inserted and updated object (by permanent ID).
    var versions: [ManagedObjectID: UInt64] = [:]
    /// The state right after the commit (every store's last transaction id then).
    var token = QueryGenerationToken.current
    /// A generation of that state, taken right after the commit for a pinned saver; nil
    /// when not asked for, or when no reader slot was free.
    var generation: QueryGeneration?
}

extension PersistentStoreCoordinator {
    /// Writes one save: one LMDB write transaction per store involved, begun and
    /// committed on the write queue in one synchronous job.
    ///
    /// Every store's transaction is open before any commits (they nest), so a conflict
    /// or an error in any store writes nothing anywhere. Commits then happen one after
    /// the other, the last store first; only a failing commit (an I/O error) can leave
    /// an earlier store committed and a later one not: LMDB has no transaction across
    /// environments.
    ///
    /// The outcome names the state right after the commit (its query generation token),
    /// read on the write queue before any other save of this process can commit. With
    /// `pinning`, it also holds a generation of that state (for a pinned saver, and so
    /// that observers of the save can pin it).
    ///
    /// - Throws: ``StrataError/mergeConflicts(_:)`` with every conflict of the first
    ///   store that has any; ``StrataError/readOnlyStore(_:)``; the store's errors.
    nonisolated func save(_ saves: [StoreSave], pinning: Bool = false) throws -> SaveOutcome {
        for save in saves where save.store.options.readOnly {
            throw StrataError.readOnlyStore(save.store.description)
        }
        let registered = Set(persistentStores)
        for save in saves where !registered.contains(save.store) {
            throw StrataError.noStore(entity: (save.inserted.first ?? save.updated.first)?.objectID.entityName ?? "?")
        }
        do {
            let outcome = try writeQueue.sync {
                var outcome = SaveOutcome()
                try write(saves[...], into: &outcome)
                // After the commit, so a full reader table costs the pin, never the save.
                if pinning, let generation = try? newestGeneration() {
                    outcome.generation = generation
                    outcome.token = generation.token
                } else {
                    outcome.token = newestToken()
                }
                return outcome
            }
            cacheSavedRows(saves, outcome: outcome)
            return outcome
        } catch {
            evictRows(of: saves)
            throw error
        }
    }

    private nonisolated func write(_ saves: ArraySlice<StoreSave>, into outcome: inout SaveOutcome) throws {
        guard let save = saves.first else { return }
        var mine = SaveOutcome()
        try save.store.file.write { writer in
            // The body may run again when the map grows: start from scratch each time.
            var local = SaveOutcome()
            for snapshot in save.inserted where snapshot.objectID.isTemporaryID {
                local.permanentIDs[snapshot.objectID] = try writer.makePermanentID(for: snapshot.objectID.entityName)
            }
            var changes = StoreChanges()
            changes.inserted = save.inserted.map { $0.replacingIDs(local.permanentIDs) }
            changes.updated = save.updated.map { $0.replacingIDs(local.permanentIDs) }
            changes.deleted = save.deleted
            changes.checked = save.checked
            do {
                local.versions = try writer.apply(changes)
            } catch let StoreWriteError.conflict(conflicts) {
                throw StrataError.mergeConflicts(conflicts.map {
                    MergeConflict(objectID: $0.objectID, oldVersion: $0.expectedVersion, newVersion: $0.storedVersion)
                })
            }
            var inner = outcome
            try write(saves.dropFirst(), into: &inner)
            inner.permanentIDs.merge(local.permanentIDs) { $1 }
            inner.versions.merge(local.versions) { $1 }
            mine = inner
        }
        outcome = mine
    }
}

extension ObjectSnapshot {
    /// The snapshot with its ID and relationship destinations mapped through `ids`.
    func replacingIDs(_ ids: [ManagedObjectID: ManagedObjectID]) -> ObjectSnapshot {
        guard !ids.isEmpty else { return self }
        var copy = self
        copy.objectID = ids[objectID] ?? objectID
        copy.relationships = relationships.map { relationship in
            switch relationship {
            case .toOne(let id): .toOne(id.map { ids[$0] ?? $0 })
            case .toMany(let many): .toMany(many.map { ids[$0] ?? $0 })
            case .notLoaded: .notLoaded
            }
        }
        return copy
    }
}
