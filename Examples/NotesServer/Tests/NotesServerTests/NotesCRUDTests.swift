import Foundation
import NotesServerCore
import Testing

/// Create, read, update and delete over HTTP, and the typed 4xx answers to bad input.
@Suite struct NotesCRUDTests {
    @Test func folderAndNoteRoundTrip() async throws {
        try await TestServer.run { server in
            let folder = try await server.createFolder("Inbox")
            let created = try await server.send(.POST, "/notes", json: #"{"title": "Groceries", "body": "milk", "priority": 2, "folder": "\#(folder)"}"#)
            #expect(created.status == 201)
            #expect(created.etag == "\"1\"")
            let id = try #require(created.json["id"] as? String)
            #expect(created.header("Location") == "/notes/\(id)")
            #expect(id.allSatisfy { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" })

            let read = try await server.send(.GET, "/notes/\(id)")
            #expect(read.status == 200)
            #expect(read.json["title"] as? String == "Groceries")
            #expect(read.json["body"] as? String == "milk")
            #expect(read.json["priority"] as? Int == 2)
            #expect(read.json["folder"] as? String == folder)
            #expect(read.json["created"] as? String != nil)
            #expect(read.etag == "\"1\"")
            #expect(try await server.send(.GET, "/notes/\(id)", headers: [("If-None-Match", "\"1\"")]).status == 304)

            let patched = try await server.send(.PATCH, "/notes/\(id)", json: #"{"title": "Shopping", "folder": null}"#)
            #expect(patched.status == 200)
            #expect(patched.etag == "\"2\"")
            #expect(patched.json["title"] as? String == "Shopping")
            #expect(patched.json["body"] as? String == "milk")
            #expect(patched.json["folder"] == nil)

            let folderReply = try await server.send(.GET, "/folders/\(folder)")
            #expect(folderReply.json["name"] as? String == "Inbox")
            #expect(folderReply.json["noteCount"] as? Int == 0)
            let renamed = try await server.send(.PATCH, "/folders/\(folder)", json: #"{"name": "Archive"}"#)
            #expect(renamed.status == 200)
            #expect(renamed.json["name"] as? String == "Archive")
            let folders = try await server.send(.GET, "/folders")
            #expect((folders.json["folders"] as? [[String: Any]])?.count == 1)

            #expect(try await server.send(.DELETE, "/notes/\(id)").status == 204)
            let gone = try await server.send(.GET, "/notes/\(id)")
            #expect(gone.status == 404)
            #expect(gone.json["error"] as? String == "not_found")
            #expect(try await server.send(.DELETE, "/notes/\(id)").status == 404)
        }
    }

    /// Deleting a folder nullifies its notes' folder: they stay.
    @Test func deletingAFolderKeepsItsNotes() async throws {
        try await TestServer.run { server in
            let folder = try await server.createFolder("Work")
            let note = try await server.createNote("Report", folder: folder)
            #expect(try await server.send(.GET, "/folders/\(folder)").json["noteCount"] as? Int == 1)
            #expect(try await server.send(.DELETE, "/folders/\(folder)").status == 204)
            let reply = try await server.send(.GET, "/notes/\(note)")
            #expect(reply.status == 200)
            #expect(reply.json["folder"] == nil)
        }
    }

    @Test func badInputGetsTypedErrors() async throws {
        try await TestServer.run { server in
            let note = try await server.createNote("A")
            let cases: [(Method, String, String?, Int, String)] = [
                (.GET, "/notes/not-a-key!", nil, 400, "invalid_id"),
                (.GET, "/notes/eC1zdHJhdGE6Ly8", nil, 404, "not_found"),
                (.POST, "/notes", "{", 400, "invalid_json"),
                (.POST, "/notes", #"{"body": "no title"}"#, 400, "invalid_json"),
                (.POST, "/notes", #"{"title": "x", "priority": 70000}"#, 400, "invalid_json"),
                (.POST, "/notes", #"{"title": "x", "priority": 9}"#, 422, "validation_failed"),
                (.POST, "/notes", #"{"title": ""}"#, 422, "validation_failed"),
                (.POST, "/notes", #"{"title": "x", "folder": "bogus"}"#, 422, "invalid_reference"),
                (.PATCH, "/notes/\(note)", #"{"priority": -1}"#, 422, "validation_failed"),
                (.POST, "/folders", #"{"name": ""}"#, 422, "validation_failed"),
                (.PUT, "/notes/\(note)/priority", #"{"priority": "high"}"#, 400, "invalid_json"),
            ]
            for (method, path, body, status, code) in cases {
                let reply = try await server.send(method, path, json: body)
                #expect(reply.status == status, "\(method) \(path) \(body ?? ""): \(reply.text)")
                #expect(reply.json["error"] as? String == code, "\(method) \(path) \(body ?? ""): \(reply.text)")
            }
            let validation = try await server.send(.POST, "/notes", json: #"{"title": "x", "priority": 9}"#)
            let failures = try #require(validation.json["failures"] as? [[String: Any]])
            #expect(failures.first?["key"] as? String == "priority")

            // A note key where a folder key is expected is not a folder.
            #expect(try await server.send(.GET, "/folders/\(note)").status == 404)
        }
    }

    @Test func takenFolderNameIsAConflict() async throws {
        try await TestServer.run { server in
            _ = try await server.createFolder("Inbox")
            let other = try await server.createFolder("Other")
            let duplicate = try await server.send(.POST, "/folders", json: #"{"name": "Inbox"}"#)
            #expect(duplicate.status == 409)
            #expect(duplicate.json["error"] as? String == "constraint_conflict")
            let conflicts = try #require(duplicate.json["conflicts"] as? [[String: Any]])
            #expect(conflicts.first?["keys"] as? [String] == ["name"])
            let rename = try await server.send(.PATCH, "/folders/\(other)", json: #"{"name": "Inbox"}"#)
            #expect(rename.status == 409)
            #expect(rename.json["error"] as? String == "constraint_conflict")
        }
    }

    /// Strata's log entries about a request carry the request's ID: the request's logger
    /// is the task-local logger while its context works.
    @Test func strataLogsCarryTheRequestID() async throws {
        try await TestServer.run { server in
            _ = try await server.createFolder("Inbox")
            server.logs.clear()
            #expect(try await server.send(.POST, "/folders", json: #"{"name": "Inbox"}"#).status == 409)
            let strataEntries = server.logs.entries.filter { entry in entry.metadata.keys.contains { $0.hasPrefix("strata.") } }
            #expect(!strataEntries.isEmpty, "no Strata entries in \(server.logs.entries)")
            #expect(strataEntries.allSatisfy { $0.metadata["hb.request.id"] != nil })
        }
    }
}
