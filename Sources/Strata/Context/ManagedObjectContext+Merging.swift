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
            deleted: notification.deletedObjectIDs)
    }

    /// Brings in a save described by a ``didSaveObjectsNotification`` or
    /// ``didSaveObjectIDsNotification`` posted on a `NotificationCenter`. Only the IDs
    /// (the `…ObjectIDs` keys) are read, never the other context's objects.
    public func mergeChanges(fromContextDidSave notification: Notification) throws {
        func ids(_ key: NotificationKey) -> Set<ManagedObjectID> {
            notification.userInfo?[key.rawValue] as? Set<ManagedObjectID> ?? []
        }
        try mergeChanges(inserted: ids(.insertedObjectIDs), updated: ids(.updatedObjectIDs), deleted: ids(.deletedObjectIDs))
    }

    /// Merges a save made elsewhere (another coordinator, another process) into each of
    /// `contexts`, as ``mergeChanges(fromContextDidSave:)-(ContextNotification)`` does.
    ///
    /// - Parameters:
    ///   - changes: IDs by what happened to them, under `NSInsertedObjectsKey`,
    ///     `NSUpdatedObjectsKey` and `NSDeletedObjectsKey` (or the `…ObjectIDs` keys of
    ///     ``NotificationKey``). Other keys are ignored.
    ///   - contexts: the contexts to merge into, each on its own executor.
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
                try context.mergeChanges(inserted: inserted, updated: updated, deleted: deleted)
            }
        }
    }

    /// Merges the three sets, then notifies.
    func mergeChanges(inserted: Set<ManagedObjectID>, updated: Set<ManagedObjectID>, deleted: Set<ManagedObjectID>) throws {
        let merged: ChangedObjectIDs
        do {
            defer { postObjectsDidChange() }
            merged = try graph.mergeChanges(inserted: inserted, updated: updated, deleted: deleted)
        }
        if !merged.isEmpty { post(.didMergeChanges, ObjectChangeSets(), mergedIDs: merged) }
    }
}
