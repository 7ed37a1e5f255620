import Foundation

// Merging saves made elsewhere: Core Data's mergeChanges(fromContextDidSave:) and
// mergeChanges(fromRemoteContextSave:into:), with IDs as the currency.
extension ManagedObjectContext {
    /// Posted after a merge brought changes into the context, with the merged IDs in
    /// `userInfo` under ``NotificationKey/insertedObjectIDs``,
    /// ``NotificationKey/updatedObjectIDs`` and ``NotificationKey/deletedObjectIDs``.
    /// `object` is the context.
    public static let didMergeChangesObjectIDsNotification = Notification.Name("NSManagedObjectContextDidMergeChangesObjectIDsNotification")

    /// Brings another context's save into this one: registered objects it updated are
    /// refreshed (their unsaved changes here stay on top), objects it inserted are
    /// registered as faults, registered objects it deleted leave this context as deleted
    /// objects (whatever unsaved changes they had). Posts
    /// ``didChangeObjectsNotification`` (inserted, refreshed, deleted) and then
    /// ``didMergeChangesObjectIDsNotification``.
    ///
    /// A pinned context's query generation advances first, so the merged objects are
    /// read in it: to the state the notification names
    /// (``ContextNotification/queryGenerationToken``) when that is newer and can still be
    /// pinned, else to the newest state. Objects the merge does not touch keep their
    /// values.
    ///
    /// ```swift
    /// for await saved in background.notifications(of: [.didSave]) {
    ///     try await viewContext.perform { try $0.mergeChanges(fromContextDidSave: saved) }
    /// }
    /// ```
    ///
    /// - Throws: a storage error while refreshing.
    public func mergeChanges(fromContextDidSave notification: ContextNotification) throws {
        try mergeChanges(
            inserted: notification.insertedObjectIDs, updated: notification.updatedObjectIDs,
            deleted: notification.deletedObjectIDs, generation: notification.queryGenerationToken)
    }

    /// Brings in a save described by a ``didSaveObjectsNotification`` or
    /// ``didSaveObjectIDsNotification`` posted on a `NotificationCenter`. Only the IDs
    /// (the `…ObjectIDs` keys) and the query generation token are read, never the other
    /// context's objects.
    public func mergeChanges(fromContextDidSave notification: Notification) throws {
        func ids(_ key: NotificationKey) -> Set<ManagedObjectID> {
            notification.userInfo?[key.rawValue] as? Set<ManagedObjectID> ?? []
        }
        try mergeChanges(
            inserted: ids(.insertedObjectIDs), updated: ids(.updatedObjectIDs), deleted: ids(.deletedObjectIDs),
            generation: notification.userInfo?[NotificationKey.queryGeneration.rawValue] as? QueryGenerationToken)
    }

    /// Merges a save made elsewhere (another coordinator, another process) into each of
    /// `contexts`, as ``mergeChanges(fromContextDidSave:)-(ContextNotification)`` does.
    ///
    /// - Parameters:
    ///   - changes: IDs by what happened to them, under `NSInsertedObjectsKey`,
    ///     `NSUpdatedObjectsKey` and `NSDeletedObjectsKey` (or the `…ObjectIDs` keys of
    ///     ``NotificationKey``). Other keys are ignored.
    ///   - contexts: the contexts to merge into, each on its own executor. Pinned ones
    ///     advance to the newest state.
    public static func mergeChanges(
        fromRemoteContextSave changes: [String: [ManagedObjectID]], into contexts: [ManagedObjectContext]
    ) async throws {
        func ids(_ key: NotificationKey, _ idKey: NotificationKey) -> Set<ManagedObjectID> {
            Set((changes[key.rawValue] ?? []) + (changes[idKey.rawValue] ?? []))
        }
        let inserted = ids(.insertedObjects, .insertedObjectIDs)
        let updated = ids(.updatedObjects, .updatedObjectIDs)
        let deleted = ids(.deletedObjects, .deletedObjectIDs)
        for context in contexts {
            try await context.perform { context in
                try context.mergeChanges(inserted: inserted, updated: updated, deleted: deleted, generation: nil)
            }
        }
    }

    /// Advances a pinned context's query generation toward `generation` (the state the
    /// merged save made, when known), merges the three sets, then notifies.
    func mergeChanges(
        inserted: Set<ManagedObjectID>, updated: Set<ManagedObjectID>, deleted: Set<ManagedObjectID>,
        generation: QueryGenerationToken?, registeringInserted: Bool = true
    ) throws {
        graph.advanceGeneration(toward: generation)
        var merged: ChangedObjectIDs
        do {
            defer { postObjectsDidChange() }
            merged = try graph.mergeChanges(inserted: inserted, updated: updated, deleted: deleted, registeringInserted: registeringInserted)
        }
        merged.queryGeneration = graph.heldGenerationToken
        if !merged.isEmpty { post(.didMergeChanges, ObjectChangeSets(), mergedIDs: merged) }
    }
}
