import Foundation
import NotesServerCore
import Testing

/// `GET /notes`: predicates, sorts, paging and bad parameters.
@Suite struct NotesListTests {
    @Test func filtersSortsAndPages() async throws {
        try await TestServer.run { server in
            let work = try await server.createFolder("Work")
            let home = try await server.createFolder("Home")
            for index in 0..<12 {
                _ = try await server.createNote(
                    String(format: "Task %02d", index), body: index % 3 == 0 ? "urgent call" : "later",
                    priority: index % 6, folder: index % 2 == 0 ? work : home)
            }
            _ = try await server.createNote("Loose café note")

            // Folder and sort by title, in pages of 4.
            var titles: [String] = []
            for offset in stride(from: 0, to: 8, by: 4) {
                let page = try await server.send(.GET, "/notes?folder=\(work)&sort=title&limit=4&offset=\(offset)")
                #expect(page.status == 200)
                #expect(page.json["total"] as? Int == 6)
                titles += (page.json["notes"] as? [[String: Any]] ?? []).compactMap { $0["title"] as? String }
            }
            #expect(titles == ["Task 00", "Task 02", "Task 04", "Task 06", "Task 08", "Task 10"])

            // Search in title or body, case- and diacritic-insensitive, bound as an argument.
            let urgent = try await server.send(.GET, "/notes?q=URGENT&sort=-priority,title")
            let urgentNotes = urgent.json["notes"] as? [[String: Any]] ?? []
            #expect(urgentNotes.compactMap { $0["title"] as? String } == ["Task 03", "Task 09", "Task 00", "Task 06"])
            let cafe = try await server.send(.GET, "/notes?q=cafe")
            #expect(cafe.json["total"] as? Int == 1)
            let injection = try await server.send(.GET, "/notes?q=%22%20OR%20TRUEPREDICATE%20OR%20title%20%3D%3D%20%22")
            #expect(injection.status == 200)
            #expect(injection.json["total"] as? Int == 0)

            let loose = try await server.send(.GET, "/notes?folder=none")
            #expect(loose.json["total"] as? Int == 1)
            let newest = try await server.send(.GET, "/notes?limit=1")
            #expect((newest.json["notes"] as? [[String: Any]])?.first?["title"] as? String == "Loose café note")

            // A page's weak ETag answers If-None-Match until something on it changes.
            let page = try await server.send(.GET, "/notes?sort=title&limit=5")
            let tag = try #require(page.etag)
            #expect(tag.hasPrefix("W/"))
            #expect(try await server.send(.GET, "/notes?sort=title&limit=5", headers: [("If-None-Match", tag)]).status == 304)
            let first = try #require((page.json["notes"] as? [[String: Any]])?.first?["id"] as? String)
            #expect(try await server.send(.PATCH, "/notes/\(first)", json: #"{"body": "changed"}"#).status == 200)
            #expect(try await server.send(.GET, "/notes?sort=title&limit=5", headers: [("If-None-Match", tag)]).status == 200)
        }
    }

    @Test(arguments: [
        "sort=bogus", "sort=title,title", "sort=", "limit=0", "limit=501", "limit=ten", "offset=-1",
        "folder=%21%21", "unknown=1", "q=", "limit=1&limit=2",
    ])
    func badParameterIs400(_ query: String) async throws {
        try await TestServer.run { server in
            let reply = try await server.send(.GET, "/notes?\(query)")
            #expect(reply.status == 400, "\(query): \(reply.text)")
            #expect(["invalid_parameter", "invalid_id"].contains(reply.json["error"] as? String ?? ""), "\(query): \(reply.text)")
        }
    }
}
