import AsyncHTTPClient
import Foundation
import Hummingbird
import InMemoryLogging
import Logging

import NotesServerCore
import Prometheus
import ServiceLifecycle
import Strata
import Testing

/// The real server on 127.0.0.1 and a free port, with its own store, metrics registry
/// and captured logs, driven over real HTTP with AsyncHTTPClient. Each test starts one
/// and shuts it down gracefully (the same ServiceGroup `notes-server` runs).
struct TestServer: Sendable {
    let container: PersistentContainer
    let registry: PrometheusCollectorRegistry
    let logs: InMemoryLogHandler
    let port: Int
    let group: ServiceGroup

    /// A response, its body collected.
    struct Reply: Sendable {
        var status: Int
        var headers: [(name: String, value: String)]
        var body: Data

        /// The first value of header `name` (case-insensitive).
        func header(_ name: String) -> String? {
            headers.first { $0.name.lowercased() == name.lowercased() }?.value
        }

        /// The body as a JSON object.
        var json: [String: Any] {
            (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] ?? [:]
        }

        /// The `ETag` header.
        var etag: String? { header("ETag") }

        /// The body as text.
        var text: String { String(decoding: body, as: UTF8.self) }
    }

    /// Runs `body` against a server on `store` (in memory by default), then shuts it
    /// down gracefully and checks the group ended without an error.
    static func run<T: Sendable>(
        store: NotesStore = .inMemory,
        configure: (inout NotesServerConfiguration) -> Void = { _ in },
        _ body: (TestServer) async throws -> T
    ) async throws -> T {
        let logs = InMemoryLogHandler()
        var logger = Logger(label: "notes-server-test", factory: { _ in logs })
        logger.logLevel = .debug
        let registry = PrometheusCollectorRegistry()
        let container = try NotesServer.makeContainer(
            store: store, logger: logger, metricsFactory: PrometheusMetricsFactory(registry: registry))
        try await container.loadPersistentStores()
        var configuration = NotesServerConfiguration(port: 0, liveHeartbeat: .milliseconds(100), requestLogLevel: .debug)
        configure(&configuration)
        let (ports, portContinuation) = AsyncStream<Int>.makeStream()
        let application = NotesServer.makeApplication(
            container: container, registry: registry, configuration: configuration, logger: logger,
            onServerRunning: { port in portContinuation.yield(port) })
        let group = NotesServer.makeServiceGroup(
            application: application, container: container, logger: logger, gracefulShutdownSignals: [])
        let running = Task { try await group.run() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else { throw TestFailure("the server did not start") }
        let server = TestServer(container: container, registry: registry, logs: logs, port: port, group: group)
        let result: T
        do {
            result = try await body(server)
        } catch {
            await group.triggerGracefulShutdown()
            _ = try? await running.value
            throw error
        }
        await group.triggerGracefulShutdown()
        try await running.value
        return result
    }

    /// Sends `method path` with an optional JSON body and headers.
    func send(
        _ method: Method, _ path: String, json: String? = nil, headers: [(String, String)] = []
    ) async throws -> Reply {
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)\(path)")
        request.method = .init(rawValue: method.rawValue)
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let json {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: json))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let body = try await response.body.collect(upTo: 8 << 20)
        return Reply(status: Int(response.status.code), headers: response.headers.map { ($0.name, $0.value) }, body: Data(body.readableBytesView))
    }

    /// `POST /folders` → the folder's key.
    func createFolder(_ name: String) async throws -> String {
        let reply = try await send(.POST, "/folders", json: #"{"name": \#(quoted(name))}"#)
        try #require(reply.status == 201, "POST /folders: \(reply.status) \(reply.text)")
        return try #require(reply.json["id"] as? String)
    }

    /// `POST /notes` → the note's key.
    func createNote(_ title: String, body: String = "", priority: Int = 0, folder: String? = nil) async throws -> String {
        var members = [#""title": \#(quoted(title))"#, #""body": \#(quoted(body))"#, #""priority": \#(priority)"#]
        if let folder { members.append(#""folder": "\#(folder)""#) }
        let reply = try await send(.POST, "/notes", json: "{\(members.joined(separator: ", "))}")
        try #require(reply.status == 201, "POST /notes: \(reply.status) \(reply.text)")
        return try #require(reply.json["id"] as? String)
    }

    /// The object ID a key names (for tests that work on the container directly).
    func objectID(_ key: String) throws -> ManagedObjectID {
        var base64 = key.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.utf8.count % 4 != 0 { base64 += "=" }
        let data = try #require(Data(base64Encoded: base64))
        let url = try #require(URL(string: String(decoding: data, as: UTF8.self)))
        return try #require(container.persistentStoreCoordinator.managedObjectID(forURIRepresentation: url))
    }
}

/// The HTTP methods the tests use.
enum Method: String, Sendable {
    case GET, POST, PATCH, PUT, DELETE
}

/// A JSON string literal of `text`.
func quoted(_ text: String) -> String {
    String(decoding: (try? JSONEncoder().encode(text)) ?? Data("\"\"".utf8), as: UTF8.self)
}

/// A failure of the harness itself.
struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Hands the next requests chosen contexts, then the container's usual ones: how tests
/// give a request a context in a known state (holding a stale object, a busy queue).
final class ContextQueue: @unchecked Sendable {
    // @unchecked Sendable because `contexts` and `handedOut` are only touched with `lock` held.
    private let lock = NSLock()
    private var contexts: [ManagedObjectContext] = []
    private let handedOut: AsyncStream<Void>.Continuation
    /// One element each time a queued context is handed to a request.
    let handOuts: AsyncStream<Void>

    init() {
        (handOuts, handedOut) = AsyncStream<Void>.makeStream()
    }

    /// Queues `context` for the next request.
    func enqueue(_ context: ManagedObjectContext) {
        lock.withLock { contexts.append(context) }
    }

    /// The next queued context, or a new background context.
    func next(_ container: PersistentContainer) -> ManagedObjectContext {
        let queued: ManagedObjectContext? = lock.withLock { contexts.isEmpty ? nil : contexts.removeFirst() }
        guard let queued else { return container.newBackgroundContext() }
        handedOut.yield()
        return queued
    }
}
