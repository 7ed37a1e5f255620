import Foundation
@testable import Strata
@testable import StrataPostgres
import StrataLocks
import Testing

/// The store types a store-independent test runs against: one source, both stores.
enum StoreKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// An LMDB store in a directory of its own.
    case lmdb
    /// A PostgreSQL store in a schema of its own, on the cluster `make pg-start` runs.
    case postgres

    var testDescription: String { rawValue }
}

/// One store for one test, of either kind: an LMDB directory or a PostgreSQL schema,
/// removed when the test ends. Open it with ``open(model:options:)`` as often as the test
/// needs (each opening is a new coordinator: a new "instance").
final class BothStoresTestStore: Sendable {
    let kind: StoreKind
    /// The LMDB store's directory.
    private let directory: URL
    /// The PostgreSQL store's schema.
    let postgres: PostgresTestStore

    init(_ kind: StoreKind) {
        self.kind = kind
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("strata-both-\(UUID().uuidString)")
        postgres = PostgresTestStore()
    }

    /// The store's type and location for `addPersistentStore`.
    var type: PersistentStore.StoreType {
        switch kind {
        case .lmdb: .lmdb
        case .postgres: .postgres(postgres.configuration)
        }
    }

    /// Adds the store to a new coordinator of `model`.
    func open(
        model: ManagedObjectModel, options: PersistentStore.Options = .init()
    ) async throws -> (coordinator: PersistentStoreCoordinator, store: PersistentStore) {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        let store = try await coordinator.addPersistentStore(type: type, at: kind == .lmdb ? directory : nil, options: options)
        return (coordinator, store)
    }

    /// The LMDB store's one coordinator (one environment per store per process).
    private let shared = LockedValue<PersistentStoreCoordinator?>(nil)

    /// A coordinator with the store added, of the PostgreSQL tests' model: for PostgreSQL
    /// a new one each time (a new "instance"); for LMDB the process's one coordinator of
    /// the store, whose contexts meet the same conflicts, generations and merges as
    /// contexts of two instances.
    func instance(model: ManagedObjectModel = PGModel.model) async throws -> PersistentStoreCoordinator {
        switch kind {
        case .postgres:
            return try await open(model: model).coordinator
        case .lmdb:
            if let coordinator = shared.withLock({ $0 }) { return coordinator }
            let coordinator = try await open(model: model).coordinator
            shared.withLock { $0 = coordinator }
            return coordinator
        }
    }

    /// The store's description, for a ``PersistentContainer``; give the container's
    /// coordinator to ``adopt(_:)`` before calling ``instance(model:)``.
    var storeDescription: PersistentStoreDescription {
        PersistentStoreDescription(type: type, url: kind == .lmdb ? directory : nil)
    }

    /// Makes `coordinator` (a container's, with the store added) the LMDB store's one
    /// coordinator; nothing for PostgreSQL.
    func adopt(_ coordinator: PersistentStoreCoordinator) {
        if kind == .lmdb { shared.withLock { $0 = coordinator } }
    }

    /// How many objects of `entity` (sub-entities included) the store holds, asked of a
    /// fresh context.
    func count(_ entity: String) async throws -> Int {
        try await ManagedObjectContext(.privateQueue, coordinator: try await instance()).perform { context in
            try context.count(for: FetchRequest<ManagedObject>(entityName: entity))
        }
    }

    /// What the store holds, byte for byte (LMDB: its data file) or as the server
    /// describes it (PostgreSQL: every column and its type, every index, the metadata and
    /// every row of every table): equal before and after means nothing was written.
    func fingerprint() throws -> [String] {
        switch kind {
        case .lmdb:
            let data = try Data(contentsOf: directory.appendingPathComponent("data.mdb"))
            return [data.base64EncodedString()]
        case .postgres:
            let schema = postgres.schema
            var lines: [String] = []
            let columns = try postgres.execute(
                "SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = $1 "
                    + "ORDER BY table_name, column_name", [.text(schema)]).rows
            lines += columns.map { "\($0)" }
            lines += try postgres.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY indexname", [.text(schema)]).rows.map { "\($0)" }
            let tables = Set(columns.compactMap { row -> String? in if case .text(let name) = row[0] { name } else { nil } })
            for table in tables.sorted() {
                lines += try postgres.execute("SELECT * FROM \"\(schema)\".\"\(table)\" ORDER BY 1").rows.map { "\(table): \($0)" }
            }
            return lines
        }
    }

    /// The tables of a PostgreSQL store (nil for LMDB).
    func tables() throws -> Set<String>? {
        guard kind == .postgres else { return nil }
        let rows = try postgres.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", [.text(postgres.schema)]).rows
        return Set(rows.compactMap { row -> String? in if case .text(let name) = row[0] { name } else { nil } })
    }

    deinit {
        try? FileManager.default.removeItem(at: directory)
    }
}
