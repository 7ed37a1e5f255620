import Foundation

extension PersistentContainer {
    /// Adds a store for every description in ``persistentStoreDescriptions`` to the
    /// coordinator, creating missing LMDB store directories.
    ///
    /// - Calling it again adds only what is not loaded yet: descriptions added since, and
    ///   those that failed before (a description whose store was removed from the
    ///   coordinator counts as not loaded). Concurrent calls run one after the other.
    /// - A failing description does not stop the others: as Core Data reports each store
    ///   on its own, every description is tried, the stores that opened stay added, and
    ///   the error lists the descriptions that failed.
    /// - Once a store is loaded, ``viewContext`` and the background contexts made so far
    ///   get the coordinator; before, their fetches and saves throw
    ///   ``StrataError/noCoordinator``.
    ///
    /// - Throws: ``PersistentContainerError`` naming each description that failed, with
    ///   its ``StrataError``: a location that is a file or cannot be created
    ///   (``StrataError/incompatibleStore(store:reason:)``), an unknown configuration,
    ///   a store written with another model, a store already open in this process.
    public func loadPersistentStores() async throws(PersistentContainerError) {
        let load = state.withLock { state in
            let previous = state.lastLoad
            let load = Task { [self] in
                _ = await previous?.value
                return await loadMissingStores()
            }
            state.lastLoad = load
            return load
        }
        let failures = await load.value
        // The task captured the container: drop it once done, so nothing keeps it alive.
        state.withLock { state in
            if state.lastLoad == load { state.lastLoad = nil }
        }
        guard failures.isEmpty else { throw PersistentContainerError(containerName: name, failures: failures) }
    }

    /// Adds the stores of descriptions not loaded yet; returns the failures. Runs alone
    /// (``loadPersistentStores()`` chains the calls).
    private func loadMissingStores() async -> [PersistentContainerError.Failure] {
        let coordinator = persistentStoreCoordinator
        let (descriptions, loaded) = state.withLock { ($0.descriptions, $0.loaded) }
        let added = Set(coordinator.persistentStores)
        var unmatched = loaded.filter { added.contains($0.store) }
        var stillLoaded: [(description: PersistentStoreDescription, store: PersistentStore)] = []
        var failures: [PersistentContainerError.Failure] = []
        for description in descriptions {
            if let index = unmatched.firstIndex(where: { $0.description == description }) {
                stillLoaded.append(unmatched.remove(at: index))
                continue
            }
            do throws(StrataError) {
                try StoreLocation.prepare(description)
                let store = try await coordinator.addPersistentStore(
                    type: description.type, configuration: description.configuration, at: description.url,
                    options: description.options)
                stillLoaded.append((description, store))
            } catch {
                failures.append(.init(storeDescription: description, error: error))
            }
        }
        // Stores of descriptions removed from the list stay added; keep them known, so
        // that putting the description back does not open the store twice.
        stillLoaded += unmatched
        let attach = failures.isEmpty || !coordinator.persistentStores.isEmpty
        state.withLock { state in
            state.loaded = stillLoaded
            guard attach, !state.attached else { return }
            state.attached = true
            for waiting in state.waiting {
                // Throws only when the context was given another coordinator by hand:
                // it keeps that one.
                try? waiting.context?.setPersistentStoreCoordinator(coordinator)
            }
            state.waiting = []
        }
        return failures
    }
}

extension PersistentContainer {
    /// Shuts the container down gracefully: its coordinator takes no new save, lets the
    /// saves in flight finish, and closes every store (see
    /// ``PersistentStoreCoordinator/close(timeout:)``). The contexts stay usable in
    /// memory; a save fails with ``StrataError/coordinatorClosed``.
    ///
    /// - Throws: ``StrataError/storage(_:)`` of `LMDBError.closeTimedOut` when a read or
    ///   write was still running at the deadline.
    public func close(timeout: Duration = .seconds(30)) async throws(StrataError) {
        try await persistentStoreCoordinator.close(timeout: timeout)
    }
}
