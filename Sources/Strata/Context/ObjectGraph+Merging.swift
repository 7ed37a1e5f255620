import Foundation

extension ObjectGraph {
    /// Brings another context's saved changes into this one (Core Data's
    /// `mergeChanges(fromContextDidSave:)`): registered objects that were updated are
    /// refreshed from the store (never a cached row) with their unsaved changes kept on
    /// top; inserted objects are registered
    /// as faults; registered objects that were deleted leave the context as deleted
    /// objects. IDs of objects this context never saw cost nothing beyond the lookup.
    ///
    /// With `registeringInserted` false, inserted IDs are only reported (a batch insert's,
    /// which may be millions): the context's next fetch finds them.
    ///
    /// - Returns: the IDs actually merged (for the didMergeChanges notification).
    func mergeChanges(
        inserted: Set<ManagedObjectID>, updated: Set<ManagedObjectID>, deleted: Set<ManagedObjectID>, registeringInserted: Bool = true
    ) throws -> ChangedObjectIDs {
        var merged = ChangedObjectIDs()
        if !batching.fetchedRows.isEmpty {
            for id in updated.union(deleted) { batching.fetchedRows[ObjectIdentityKey(id)] = nil }
        }
        for id in deleted {
            guard let object = registeredObject(for: id) else { continue }
            forgetMergedDeletion(object)
            merged.deleted.insert(id)
        }
        // These rows are known to have changed: read them from the store, never from a
        // cached row (the save may come from another coordinator or process).
        let staleness = batching.stalenessInterval
        batching.stalenessInterval = 0
        defer { batching.stalenessInterval = staleness }
        for id in updated where !deleted.contains(id) {
            guard let object = registeredObject(for: id) else { continue }
            try refresh(object, mergeChanges: true)
            merged.updated.insert(id)
        }
        for id in inserted where !deleted.contains(id) {
            if registeringInserted && registeredObject(for: id) == nil {
                let object = self.object(for: id)
                recordEvent(object, in: .inserted)
            }
            merged.inserted.insert(id)
        }
        return merged
    }
}
