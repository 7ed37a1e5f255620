import Foundation
import NotesServerCore
import Strata
import Testing

/// Optimistic concurrency over HTTP: ETag/If-Match (412), true save races (409), merge
/// policies per route, and many clients at once.
@Suite struct NotesConcurrencyTests {
    /// Two clients read the same ETag; the first PATCH wins, the second gets 412 with the
    /// current ETag.
    @Test func staleIfMatchIs412() async throws {
        try await TestServer.run { server in
            let id = try await server.createNote("Plan")
            let tagA = try #require(try await server.send(.GET, "/notes/\(id)").etag)
            let tagB = try #require(try await server.send(.GET, "/notes/\(id)").etag)
            #expect(tagA == "\"1\"" && tagB == tagA)

            let first = try await server.send(.PATCH, "/notes/\(id)", json: #"{"title": "Plan A"}"#, headers: [("If-Match", tagA)])
            #expect(first.status == 200)
            #expect(first.etag == "\"2\"")
            let second = try await server.send(.PATCH, "/notes/\(id)", json: #"{"title": "Plan B"}"#, headers: [("If-Match", tagB)])
            #expect(second.status == 412)
            #expect(second.json["error"] as? String == "precondition_failed")
            #expect(second.etag == "\"2\"")
            #expect(try await server.send(.DELETE, "/notes/\(id)", headers: [("If-Match", tagB)]).status == 412)
            #expect(try await server.send(.GET, "/notes/\(id)").json["title"] as? String == "Plan A")
            #expect(try await server.send(.DELETE, "/notes/\(id)", headers: [("If-Match", "\"2\"")]).status == 204)
        }
    }

    /// A save that meets a change saved since its context read the note fails with 409
    /// and both sides' keys. The race is scripted, not hoped for:
    ///
    ///     stale context S      request 1 (own context)      request 2 (given S)
    ///     read note @v1
    ///                          PATCH title → saved @v2
    ///                                                       If-Match "1" passes (S read v1)
    ///                                                       PATCH body → save: conflict → 409
    @Test func concurrentSaveIs409() async throws {
        let contexts = ContextQueue()
        try await TestServer.run(configure: { $0.makeContext = { contexts.next($0) } }) { server in
            let key = try await server.createNote("Draft", body: "v1")
            let id = try server.objectID(key)
            let stale = server.container.newBackgroundContext()
            try await stale.perform { context in
                context.retainsRegisteredObjects = true
                _ = try (context.existingObject(with: id) as? Note)?.title
            }
            #expect(try await server.send(.PATCH, "/notes/\(key)", json: #"{"title": "Final"}"#).status == 200)

            contexts.enqueue(stale)
            let reply = try await server.send(.PATCH, "/notes/\(key)", json: #"{"body": "mine"}"#, headers: [("If-Match", "\"1\"")])
            #expect(reply.status == 409, "\(reply.text)")
            #expect(reply.json["error"] as? String == "conflict")
            #expect(reply.etag == "\"2\"")
            let conflict = try #require((reply.json["conflicts"] as? [[String: Any]])?.first)
            #expect(conflict["object"] as? String == key)
            #expect((conflict["changedElsewhere"] as? [String])?.contains("title") == true)
            #expect((conflict["changedInRequest"] as? [String])?.contains("body") == true)
            #expect(conflict["readVersion"] as? Int == 1)
            #expect(conflict["storedVersion"] as? Int == 2)
            let current = try await server.send(.GET, "/notes/\(key)")
            #expect(current.json["title"] as? String == "Final")
            #expect(current.json["body"] as? String == "v1")
        }
    }

    /// `PUT /notes/:id/priority` merges by property (the request's priority wins, the
    /// other save's title stays): the same race answers 200.
    @Test func priorityMergesByProperty() async throws {
        let contexts = ContextQueue()
        try await TestServer.run(configure: { $0.makeContext = { contexts.next($0) } }) { server in
            let key = try await server.createNote("Draft")
            let id = try server.objectID(key)
            let stale = server.container.newBackgroundContext()
            try await stale.perform { context in
                context.retainsRegisteredObjects = true
                _ = try (context.existingObject(with: id) as? Note)?.title
            }
            #expect(try await server.send(.PATCH, "/notes/\(key)", json: #"{"title": "Final"}"#).status == 200)
            contexts.enqueue(stale)
            let reply = try await server.send(.PUT, "/notes/\(key)/priority", json: #"{"priority": 4}"#)
            #expect(reply.status == 200, "\(reply.text)")
            let current = try await server.send(.GET, "/notes/\(key)")
            #expect(current.json["title"] as? String == "Final")
            #expect(current.json["priority"] as? Int == 4)
            #expect(current.etag == "\"3\"")
        }
    }

    /// 8 clients × 25 notes at once: all 200 there afterwards, none lost.
    @Test func concurrentClients() async throws {
        try await TestServer.run { server in
            let folder = try await server.createFolder("Load")
            try await withThrowingTaskGroup(of: Void.self) { group in
                for client in 0..<8 {
                    group.addTask {
                        for index in 0..<25 {
                            _ = try await server.createNote("c\(client)-n\(index)", priority: index % 6, folder: folder)
                        }
                    }
                }
                try await group.waitForAll()
            }
            let all = try await server.send(.GET, "/notes?folder=\(folder)&limit=500&sort=title")
            #expect(all.json["total"] as? Int == 200)
            let titles = Set((all.json["notes"] as? [[String: Any]] ?? []).compactMap { $0["title"] as? String })
            #expect(titles.count == 200)
            #expect(try await server.send(.GET, "/folders/\(folder)").json["noteCount"] as? Int == 200)
        }
    }
}
