import Foundation
import Logging
@testable import Strata
@testable import StrataPostgres
import Testing

// The model of the PostgreSQL store's tests: every attribute type, one-to-many
// (folder ↔ notes), many-to-many (notes ↔ tags), an ordered to-many (playlist → tracks),
// a uniqueness constraint (tag labels), and an abstract entity with two sub-entities.

final class PGFolder: ManagedObject {
    override class var entityName: String { "Folder" }
    @Attribute var name: String = ""
    @Relationship(inverse: "folder", deleteRule: .cascade) var notes: Set<PGNote>
}

final class PGNote: ManagedObject {
    override class var entityName: String { "Note" }
    @Attribute(indexed: true) var title: String = ""
    @Attribute var priority: Int16 = 0
    @Attribute var views: Int32 = 0
    @Attribute var size: Int64 = 0
    @Attribute var body: String?
    @Attribute var created: Date?
    @Attribute var score: Double = 0
    @Attribute var ratio: Float = 0
    @Attribute var pinned: Bool = false
    @Attribute var payload: Data?
    @Attribute var token: UUID?
    @Attribute var link: URL?
    @Attribute var amount: Decimal?
    @Relationship(inverse: "notes") var folder: PGFolder?
    @Relationship(inverse: "notes") var tags: Set<PGTag>
}

final class PGTag: ManagedObject {
    override class var entityName: String { "Tag" }
    override class var uniquenessConstraints: [[String]] { [["label"]] }
    @Attribute var label: String = ""
    @Relationship(inverse: "tags") var notes: Set<PGNote>
}

final class PGPlaylist: ManagedObject {
    override class var entityName: String { "Playlist" }
    @Attribute var name: String = ""
    @Relationship(inverse: "playlist") var tracks: [PGTrack]
}

final class PGTrack: ManagedObject {
    override class var entityName: String { "Track" }
    @Attribute var title: String = ""
    @Relationship(inverse: "tracks") var playlist: PGPlaylist?
}

class PGItem: ManagedObject {
    override class var entityName: String { "Item" }
    override class var isAbstractEntity: Bool { true }
    @Attribute var title: String = ""
}

final class PGBook: PGItem {
    override class var entityName: String { "Book" }
    @Attribute var pages: Int32 = 0
}

final class PGFilm: PGItem {
    override class var entityName: String { "Film" }
    @Attribute var minutes: Int64 = 0
}

enum PGModel {
    static let model: ManagedObjectModel = {
        do {
            return try ManagedObjectModel(types: [PGFolder.self, PGNote.self, PGTag.self, PGPlaylist.self, PGTrack.self, PGBook.self, PGFilm.self])
        } catch {
            preconditionFailure("the test model is invalid: \(error)")
        }
    }()
}

/// The cluster `make pg-start` runs (make test starts it): 127.0.0.1, port
/// `STRATA_PG_PORT` (54329), user `strata`, database `strata_test`.
enum PostgresServer {
    static var port: Int { ProcessInfo.processInfo.environment["STRATA_PG_PORT"].flatMap(Int.init) ?? 54329 }

    static func configuration(schema: String) -> PostgresStoreConfiguration {
        PostgresStoreConfiguration(host: "127.0.0.1", port: port, username: "strata", database: "strata_test", schema: schema)
    }
}

/// A store of its own for one test: a fresh schema, dropped when the test ends.
final class PostgresTestStore: Sendable {
    let schema = "t_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
    let model: ManagedObjectModel

    init(model: ManagedObjectModel = PGModel.model) {
        self.model = model
    }

    var configuration: PostgresStoreConfiguration { PostgresServer.configuration(schema: schema) }

    /// A new coordinator (a new "instance") with the store added.
    func coordinator() async throws -> PersistentStoreCoordinator {
        try await coordinator(configuration: configuration)
    }

    /// A new coordinator with the store added, opened with `configuration`.
    func coordinator(configuration: PostgresStoreConfiguration) async throws -> PersistentStoreCoordinator {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        var failure: StrataError?
        do {
            try await coordinator.addPersistentStore(type: .postgres(configuration))
        } catch {
            failure = error
        }
        if let failure {
            if failure.code == .database {
                Issue.record("PostgreSQL is not reachable on 127.0.0.1:\(PostgresServer.port): run `make pg-start` (make test does). \(failure)")
            }
            throw failure
        }
        return coordinator
    }

    /// Runs `sql` on a connection of its own (outside Strata): for tests that change the
    /// database underneath a store.
    func execute(_ sql: String, _ binds: [SQLValue] = []) throws -> SQLResult {
        let driver = try PostgresDriver(configuration: configuration, logger: Logger(label: "test"))
        defer { driver.close() }
        return try driver.withConnection { try $0.execute(sql, binds) }
    }

    deinit {
        let sql = "DROP SCHEMA IF EXISTS \"\(schema)\" CASCADE"
        _ = try? execute(sql)
    }
}
