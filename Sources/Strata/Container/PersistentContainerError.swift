/// Why ``PersistentContainer/loadPersistentStores()`` could not add every store: one
/// ``Failure`` per description that failed, each naming the description and carrying
/// the ``StrataError`` that stopped it.
///
/// Stores of the other descriptions were added all the same (Core Data reports each
/// store on its own), and a later call tries the failed ones again:
///
/// ```swift
/// do {
///     try await container.loadPersistentStores()
/// } catch {
///     for failure in error.failures {
///         print("\(failure.storeDescription): \(failure.error)")
///     }
/// }
/// ```
public struct PersistentContainerError: Error, Sendable, Hashable, CustomStringConvertible {
    /// One description whose store could not be added.
    public struct Failure: Sendable, Hashable, CustomStringConvertible {
        /// The description that failed.
        public let storeDescription: PersistentStoreDescription
        /// Why: ``StrataError/incompatibleStore(store:reason:)`` for a location that is
        /// a file or cannot be created, ``StrataError/unknownConfiguration(_:)``,
        /// ``StrataError/modelMismatch(store:storeHash:modelHash:changes:)``,
        /// ``StrataError/migrationFailed(store:reason:conflicts:)``, ``StrataError/storage(_:)``, …
        public let error: StrataError

        /// A failure of `storeDescription`.
        public init(storeDescription: PersistentStoreDescription, error: StrataError) {
            self.storeDescription = storeDescription
            self.error = error
        }

        /// `lmdb store at /srv/Notes.strata: the store at … cannot be opened: …`.
        public var description: String { "\(storeDescription): \(error)" }
    }

    /// The name of the container.
    public let containerName: String
    /// Every description that failed, in the order of the container's descriptions.
    public let failures: [Failure]

    /// An error for `failures` of the container named `containerName`.
    public init(containerName: String, failures: [Failure]) {
        self.containerName = containerName
        self.failures = failures
    }

    /// A sentence per failed store.
    public var description: String {
        "container '\(containerName)' could not load \(failures.count) store(s):\n"
            + failures.map { "- \($0)" }.joined(separator: "\n")
    }
}
