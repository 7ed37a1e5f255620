import Logging
import ServiceLifecycle
import Strata

/// A ``Strata/PersistentContainer`` run as a swift-service-lifecycle `Service`: in a
/// `ServiceGroup` beside an HTTP server, its stores load (and migrate) when the group
/// starts and close gracefully when it shuts down.
///
/// ```swift
/// let container = try PersistentContainer(name: "Notes", types: [Folder.self, Note.self])
/// try await container.loadPersistentStores()   // before serving: requests need the stores
/// let group = ServiceGroup(configuration: .init(
///     services: [.init(service: StrataService(container: container)), .init(service: server)],
///     gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
/// try await group.run()
/// ```
///
/// - ``run()`` loads every store description not loaded yet
///   (``Strata/PersistentContainer/loadPersistentStores()``; none when the application
///   loaded them first, as above), then waits.
/// - At a graceful shutdown (a signal the group listens for) or a cancellation, it closes
///   the container (``Strata/PersistentContainer/close(timeout:)``): new saves are refused
///   with ``Strata/StrataError/coordinatorClosed``, saves in flight finish and are on
///   disk, pinned query generations are released and the stores' environments close.
///   Nothing acknowledged is lost.
///
/// A `ServiceGroup` shuts its services down in reverse order, the last listed first: list
/// this service **before** the ones that save through the container (the HTTP server), so
/// that they stop taking requests (and finish those in flight) before the container
/// closes. Saves still running when it closes finish all the same; a request that comes
/// after gets ``Strata/StrataError/coordinatorClosed``.
public struct StrataService: Service, CustomStringConvertible {
    /// The container the service runs.
    public let container: PersistentContainer
    /// How long the shutdown waits for saves and reads in flight.
    public var shutdownTimeout: Duration

    /// A service running `container`, whose shutdown waits up to `shutdownTimeout` for
    /// saves and reads in flight.
    public init(container: PersistentContainer, shutdownTimeout: Duration = .seconds(30)) {
        self.container = container
        self.shutdownTimeout = shutdownTimeout
    }

    /// Loads the stores not loaded yet, waits for a graceful shutdown or cancellation,
    /// then closes the container.
    ///
    /// - Throws: ``Strata/PersistentContainerError`` when a store fails to load (the
    ///   group then shuts down, as for any failing service); ``Strata/StrataError`` from
    ///   the close (`LMDBError.closeTimedOut` when a read or write outlived
    ///   ``shutdownTimeout``).
    public func run() async throws {
        do {
            try await container.loadPersistentStores()
        } catch {
            // Whatever did open is closed again before the group hears of the failure.
            try? await container.close(timeout: shutdownTimeout)
            throw error
        }
        // Returns at a graceful shutdown; throws CancellationError when the task is
        // cancelled. Either way the container closes.
        try? await gracefulShutdown()
        try await container.close(timeout: shutdownTimeout)
    }

    /// `StrataService(Notes)`.
    public var description: String { "StrataService(\(container.name))" }
}
