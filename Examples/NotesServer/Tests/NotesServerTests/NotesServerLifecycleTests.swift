import AsyncHTTPClient
import Foundation
import NotesServerCore
import ServiceLifecycle
import Strata
import Testing

/// The live feed, metrics, a closed store and graceful shutdown.
@Suite struct NotesServerLifecycleTests {
    /// Connect, receive the initial snapshot, create a note, receive a snapshot with the
    /// insertion, disconnect: the stream (and Strata's observer) goes.
    @Test func liveFeedStreamsSnapshots() async throws {
        try await TestServer.run { server in
            let folder = try await server.createFolder("Live")
            _ = try await server.createNote("B existing", folder: folder)
            _ = try await server.createNote("Elsewhere")
            let (events, eventContinuation) = AsyncStream<Data>.makeStream()
            let request = HTTPClientRequest(url: "http://127.0.0.1:\(server.port)/notes/live?folder=\(folder)&sort=title")
            let reader = Task {
                let response = try await HTTPClient.shared.execute(request, timeout: .seconds(60))
                #expect(response.status.code == 200)
                #expect(response.headers.first(name: "Content-Type")?.hasPrefix("text/event-stream") == true)
                var pending = ""
                for try await buffer in response.body {
                    pending += String(buffer: buffer)
                    while let end = pending.range(of: "\n\n") {
                        let block = pending[..<end.lowerBound]
                        pending = String(pending[end.upperBound...])
                        guard block.hasPrefix("event: snapshot"),
                              let data = block.split(separator: "\n").first(where: { $0.hasPrefix("data: ") })
                        else { continue }
                        eventContinuation.yield(Data(data.dropFirst(6).utf8))
                    }
                }
            }
            var iterator = events.makeAsyncIterator()
            func nextEvent() async throws -> [String: Any] {
                let data = try #require(await iterator.next())
                return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
            }
            let initial = try await nextEvent()
            #expect(initial["initial"] as? Bool == true)
            #expect((initial["notes"] as? [[String: Any]])?.map { $0["title"] as? String } == ["B existing"])
            #expect(try await streams(server) == 1)

            _ = try await server.createNote("A new", folder: folder)
            let next = try await nextEvent()
            #expect(next["initial"] as? Bool == false)
            #expect((next["notes"] as? [[String: Any]])?.map { $0["title"] as? String } == ["A new", "B existing"])
            #expect((next["difference"] as? [String: Any])?["inserted"] as? [Int] == [0])

            reader.cancel()
            _ = await reader.result
            // The next keep-alive write fails and ends the stream.
            let deadline = ContinuousClock.now + .seconds(10)
            while try await streams(server) != 0, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(try await streams(server) == 0)
        }
    }

    private func streams(_ server: TestServer) async throws -> Int? {
        let metrics = try await server.send(.GET, "/metrics").text
        let line = metrics.split(separator: "\n").first { $0.hasPrefix("notes_live_streams ") }
        return line.flatMap { Double($0.split(separator: " ").last ?? "").map { Int($0) } }
    }

    @Test func metricsIncludeStrataCounters() async throws {
        try await TestServer.run { server in
            _ = try await server.createNote("Counted")
            let reply = try await server.send(.GET, "/metrics")
            #expect(reply.status == 200)
            #expect(reply.header("Content-Type")?.hasPrefix("text/plain") == true)
            #expect(reply.text.contains(StrataMetricName.saves))
            #expect(reply.text.contains("strata_saves_total"))
        }
    }

    /// A request that finds the container closed gets 503, not a crash.
    @Test func closedStoreIs503() async throws {
        try await TestServer.run { server in
            let key = try await server.createNote("Before")
            try await server.container.close()
            let read = try await server.send(.GET, "/notes/\(key)")
            #expect(read.status == 503, "\(read.text) \(server.logs.entries.filter { $0.level >= .error })")
            #expect(read.json["error"] as? String == "unavailable")
            #expect(try await server.send(.POST, "/notes", json: #"{"title": "After"}"#).status == 503)
        }
    }

    /// A graceful shutdown lets the request in flight finish and save before the
    /// container closes:
    ///
    ///     test                         request (POST)              service group
    ///     block context C's queue
    ///                                  gets C, waits for its queue
    ///     trigger graceful shutdown                                server stops accepting
    ///     unblock C                    saves, answers 201
    ///                                                              server stops, container closes
    ///     reopen the store: the note is there
    @Test func gracefulShutdownFinishesRequestsInFlight() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("notes-server-test-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = directory.appendingPathComponent("Notes.strata")
        let contexts = ContextQueue()
        try await TestServer.run(store: .directory(store), configure: { $0.makeContext = { contexts.next($0) } }) { server in
            let busy = server.container.newBackgroundContext()
            let gate = DispatchSemaphore(value: 0)
            occupy(busy, until: gate)
            contexts.enqueue(busy)
            let inFlight = Task { try await server.send(.POST, "/notes", json: #"{"title": "In flight"}"#) }
            var handOuts = contexts.handOuts.makeAsyncIterator()
            _ = await handOuts.next()          // the request has its (blocked) context

            await server.group.triggerGracefulShutdown()
            try await Task.sleep(for: .milliseconds(300))
            gate.signal()
            let reply = try await inFlight.value
            #expect(reply.status == 201, "\(reply.text)")
        }
        // The group has ended (TestServer.run awaited it); the store holds the note.
        let container = try NotesServer.makeContainer(store: .directory(store), logger: .init(label: "reopen"))
        try await container.loadPersistentStores()
        let titles = try await container.performBackgroundTask { context in
            try context.fetch(FetchRequest<Note>()).map(\.title)
        }
        #expect(titles == ["In flight"])
        try await container.close()
    }

    /// Keeps `context`'s queue busy until `gate` is signalled. Synchronous, so that
    /// `perform` is the fire-and-forget form: the block is queued before this returns.
    private func occupy(_ context: ManagedObjectContext, until gate: DispatchSemaphore) {
        context.perform { _ in gate.wait() }
    }
}
