import Foundation
import Hummingbird
import CoreMetrics
import Logging
import Prometheus
import ServiceLifecycle
import Strata
import StrataLifecycle
import UnixSignals

/// Where the server keeps its notes.
public enum NotesStore: Sendable, Equatable {
    /// An embedded LMDB store in this directory (created when missing).
    case directory(URL)
    /// An in-memory store, gone when the process ends.
    case inMemory
}

/// The server's settings.
public struct NotesServerConfiguration: Sendable {
    /// The address to listen on.
    public var host: String
    /// The port to listen on; 0 picks a free one (see `onServerRunning`).
    public var port: Int
    /// How often a live feed writes a keep-alive comment (and so notices a client gone).
    public var liveHeartbeat: Duration
    /// The level of the one log line each request gets.
    public var requestLogLevel: Logger.Level
    /// Makes each request's context: `PersistentContainer.newBackgroundContext()` unless
    /// set. Tests set it to hand a request a context in a chosen state (one holding a
    /// stale object, one whose queue is busy) and so script races deterministically.
    public var makeContext: @Sendable (PersistentContainer) -> ManagedObjectContext

    /// Settings with defaults: loopback, port 8080, a keep-alive every 15 s.
    public init(
        host: String = "127.0.0.1", port: Int = 8080, liveHeartbeat: Duration = .seconds(15),
        requestLogLevel: Logger.Level = .info,
        makeContext: @escaping @Sendable (PersistentContainer) -> ManagedObjectContext = { $0.newBackgroundContext() }
    ) {
        self.host = host
        self.port = port
        self.liveHeartbeat = liveHeartbeat
        self.requestLogLevel = requestLogLevel
        self.makeContext = makeContext
    }
}

/// Builds the server's parts: the container, the HTTP application and the service group
/// that runs them.
public enum NotesServer {
    /// The application type: Hummingbird's router with its basic request context.
    public typealias App = Application<RouterResponder<BasicRequestContext>>

    /// A container for the notes model on `store`, not loaded yet. Its coordinator logs
    /// to `logger` (and to each request's logger while serving it) and reports `strata_*`
    /// metrics to `metricsFactory` (nil: the one `MetricsSystem.bootstrap` installed).
    public static func makeContainer(
        store: NotesStore, logger: Logger, metricsFactory: (any MetricsFactory)? = nil
    ) throws -> PersistentContainer {
        let model = try ManagedObjectModel(types: NotesModel.types)
        let container = PersistentContainer(name: "Notes", managedObjectModel: model, logger: logger, metricsFactory: metricsFactory)
        switch store {
        case .directory(let url): container.persistentStoreDescriptions = [PersistentStoreDescription(url: url)]
        case .inMemory: container.persistentStoreDescriptions = [.inMemory()]
        }
        return container
    }

    /// The HTTP application serving `container`, with `/metrics` emitting `registry`.
    ///
    /// Routes: `GET/POST /folders`, `GET/PATCH/DELETE /folders/:id`, `GET/POST /notes`,
    /// `GET/PATCH/DELETE /notes/:id`, `PUT /notes/:id/priority`, `GET /notes/live`
    /// (server-sent events), `GET /metrics`. See the README for each.
    public static func makeApplication(
        container: PersistentContainer, registry: PrometheusCollectorRegistry,
        configuration: NotesServerConfiguration = NotesServerConfiguration(), logger: Logger,
        onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }
    ) -> App {
        let router = Router()
        router.add(middleware: LogRequestsMiddleware(configuration.requestLogLevel))
        router.add(middleware: MetricsMiddleware())
        let service = NotesService(container: container, makeContext: configuration.makeContext)
        // The live feed's constant route is registered before `/notes/:id`; the trie
        // router prefers constant segments anyway.
        LiveFeed(service: service, heartbeat: configuration.liveHeartbeat,
                 openStreams: registry.makeGauge(descriptor: MetricNameDescriptor(
                    namespace: "notes", metricName: "live", unitName: "streams", helpText: "Open GET /notes/live streams")))
            .register(on: router)
        NoteRoutes(service: service).register(on: router)
        FolderRoutes(service: service).register(on: router)
        router.get("/metrics") { _, _ in
            Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                     body: .init(byteBuffer: ByteBuffer(bytes: registry.emitToBuffer())))
        }
        return Application(
            router: router,
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "notes-server"),
            onServerRunning: { channel in await onServerRunning(channel.localAddress?.port ?? configuration.port) },
            logger: logger
        )
    }

    /// The services in the order they start: ``StrataService``, then the HTTP server.
    ///
    /// A `ServiceGroup` shuts its services down one at a time in *reverse* order, waiting
    /// for each `run()` to return before signalling the next (swift-service-lifecycle,
    /// ServiceGroup.swift: "We have to shutdown the services in reverse"). The server is
    /// listed last so that it goes first: it stops accepting connections and finishes the
    /// requests in flight, their saves included; only then does the container close. With
    /// the order reversed the container closed under a request in flight, which got `503`
    /// (`gracefulShutdownFinishesRequestsInFlight` in the tests caught it).
    public static func makeServiceGroup(
        application: App, container: PersistentContainer, logger: Logger,
        gracefulShutdownSignals: [UnixSignal] = [.sigterm, .sigint], shutdownTimeout: Duration = .seconds(30)
    ) -> ServiceGroup {
        ServiceGroup(configuration: .init(
            services: [
                .init(service: StrataService(container: container, shutdownTimeout: shutdownTimeout)),
                .init(service: application),
            ],
            gracefulShutdownSignals: gracefulShutdownSignals,
            logger: logger
        ))
    }
}
