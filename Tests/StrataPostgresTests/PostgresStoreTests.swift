import Foundation
@testable import Strata
import StrataPostgres
import Testing

@Suite("PostgreSQL store: opening, saving and reading")
struct PostgresStoreTests {
    @Test("a store opens, creates its tables once, and is the same store (same UUID) for every coordinator")
    func opensOnce() async throws {
        let store = PostgresTestStore()
        let first = try await store.coordinator()
        let second = try await store.coordinator()
        let a = try #require(first.persistentStores.first)
        let b = try #require(second.persistentStores.first)
        #expect(a.identifier == b.identifier)
        #expect(a.type == .postgres(store.configuration) && a.type.isServerStore && a.url == nil)
        #expect(a.type.rawValue == "postgres")
        #expect("\(a)".contains("postgres://strata@127.0.0.1"))
        let tables = try store.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name", [.text(store.schema)]
        ).rows.compactMap { row -> String? in if case .text(let name) = row[0] { name } else { nil } }
        #expect(tables == ["Book", "Film", "Folder", "Note", "Note.tags", "Playlist", "Playlist.tracks", "Tag", "Tag.notes", "Track", "strata_history", "strata_metadata"])
    }

    @Test("every attribute type round-trips through its natural column type, nil included")
    func attributeTypes() async throws {
        let store = PostgresTestStore()
        let writer = ManagedObjectContext(.privateQueue, coordinator: try await store.coordinator())
        let token = UUID()
        let created = Date(timeIntervalSince1970: 1_700_000_000.123456)
        let id = try await writer.perform { context in
            let note = PGNote()
            note.title = "Ünïcødé ✓ 'quoted' \"double\""
            note.priority = -3
            note.views = 70_000
            note.size = Int64.max
            note.body = nil
            note.created = created
            note.score = 2.5e-300
            note.ratio = 0.1
            note.pinned = true
            note.payload = Data([0, 1, 2, 255])
            note.token = token
            note.link = URL(string: "https://example.com/a?b=c")
            note.amount = Decimal(string: "12345.6789")
            try context.insert(note)
            try context.save()
            return note.objectID
        }
        #expect(!id.isTemporaryID)
        // Another coordinator: nothing cached, every value read from the server.
        let reader = ManagedObjectContext(.privateQueue, coordinator: try await store.coordinator())
        let values = try await reader.perform { context in
            let note = try #require(try context.existingObject(with: id) as? PGNote)
            return (note.title, note.priority, note.views, note.size, note.body, note.created, note.score, note.ratio, note.pinned,
                    note.payload, note.token, note.link, note.amount)
        }
        #expect(values.0 == "Ünïcødé ✓ 'quoted' \"double\"")
        #expect(values.1 == -3 && values.2 == 70_000 && values.3 == Int64.max && values.4 == nil)
        #expect(values.5.map { abs($0.timeIntervalSince(created)) < 0.000_001 } == true)   // timestamptz keeps microseconds
        #expect(values.6 == 2.5e-300 && values.7 == Float(0.1) && values.8)
        #expect(values.9 == Data([0, 1, 2, 255]) && values.10 == token)
        #expect(values.11 == URL(string: "https://example.com/a?b=c") && values.12 == Decimal(string: "12345.6789"))
    }

    @Test("relationships: to-one and its to-many inverse, many-to-many, ordered to-many, across coordinators")
    func relationships() async throws {
        let store = PostgresTestStore()
        let writer = ManagedObjectContext(.privateQueue, coordinator: try await store.coordinator())
        let (folderID, playlistID) = try await writer.perform { context in
            let folder = PGFolder()
            folder.name = "Inbox"
            let swift = PGTag()
            swift.label = "swift"
            let server = PGTag()
            server.label = "server"
            for title in ["a", "b", "c"] {
                let note = PGNote()
                note.title = title
                note.folder = folder
                note.tags = title == "b" ? [swift] : [swift, server]
                try context.insert(note)
            }
            let playlist = PGPlaylist()
            playlist.name = "mix"
            for title in ["z", "x", "y"] {
                let track = PGTrack()
                track.title = title
                try context.insert(track)
                playlist.tracks.append(track)
            }
            for object in [folder, swift, server, playlist] as [ManagedObject] { try context.insert(object) }
            try context.save()
            return (folder.objectID, playlist.objectID)
        }
        let reader = ManagedObjectContext(.privateQueue, coordinator: try await store.coordinator())
        let state = try await reader.perform { context in
            let folder = try #require(try context.existingObject(with: folderID) as? PGFolder)
            let titles = folder.notes.map(\.title).sorted()
            let tagged = folder.notes.first { $0.title == "a" }.map { $0.tags.map(\.label).sorted() }
            let swiftNotes = folder.notes.first { $0.title == "b" }?.tags.first?.notes.map(\.title).sorted()
            let playlist = try #require(try context.existingObject(with: playlistID) as? PGPlaylist)
            return (titles, tagged, swiftNotes, playlist.tracks.map(\.title), playlist.tracks.first?.playlist?.name)
        }
        #expect(state.0 == ["a", "b", "c"])
        #expect(state.1 == ["server", "swift"])
        #expect(state.2 == ["a", "b", "c"])
        #expect(state.3 == ["z", "x", "y"])   // the order saved
        #expect(state.4 == "mix")
        // Reordering and removing, then deleting with the cascade rule.
        try await writer.perform { context in
            let playlist = try #require(try context.existingObject(with: playlistID) as? PGPlaylist)
            playlist.tracks = [playlist.tracks[2], playlist.tracks[0]]
            try context.delete(try context.existingObject(with: folderID))
            try context.save()
        }
        let after = ManagedObjectContext(.privateQueue, coordinator: try await store.coordinator())
        let counts = try await after.perform { context in
            let playlist = try #require(try context.existingObject(with: playlistID) as? PGPlaylist)
            return (playlist.tracks.map(\.title), try context.count(for: FetchRequest<PGNote>()), try context.count(for: FetchRequest<PGFolder>()),
                    try context.count(for: FetchRequest<PGTrack>()))
        }
        #expect(counts.0 == ["y", "z"])
        #expect(counts.1 == 0 && counts.2 == 0 && counts.3 == 3)
        let links = try store.execute("SELECT count(*) FROM \"\(store.schema)\".\"Note.tags\"").rows.first?.first?.integer
        #expect(links == 0)
    }
}
