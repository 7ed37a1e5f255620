import Foundation
import Strata

/// Scenario 8's models: the benchmark entity ``Item`` (version 1) and version 2, which
/// adds a required `edition` (integer 64, default 1) that every stored row must take.
public enum MigrationModels {
    /// Version 2: ``StrataStore/model``'s `Item` plus `edition`, as descriptions (an app
    /// that migrates needs no class of its old version).
    public static let version2: ManagedObjectModel = {
        do {
            let item = StrataStore.model.entitiesByName["Item"]!
            return try ManagedObjectModel(entities: [
                EntityDescription(
                    name: "Item",
                    attributes: item.attributes + [
                        AttributeDescription(name: "edition", type: .integer64, isOptional: false, defaultValue: .integer(1)),
                    ]),
            ], versionIdentifier: "2")
        } catch {
            preconditionFailure("the migration benchmark's model is invalid: \(error)")
        }
    }()
}

extension BenchRun {
    /// How a run of scenario 8 touches every row.
    enum MigrationRunner: Hashable, CaseIterable {
        /// Strata: the version 1 store opened with version 2 (an inferred lightweight
        /// stage rewriting every row in one write transaction).
        case strata
        /// Raw LMDB: every row copied into a new database, 8 bytes longer, in one write
        /// transaction.
        case raw
    }

    /// Scenario 8 (issue 23): a lightweight migration that touches every row — a required
    /// attribute with a default added to ``BenchConfig/migrationRows`` objects
    /// (1,000,000) — beside a raw LMDB copy of the same rows, sync off. Each run migrates
    /// (or copies) a fresh file copy of a store filled once, outside the clock; the time is
    /// the store's open (Strata) or the copy's write transaction (raw). Checks after each:
    /// every row holds the default (Strata, counted by a fetch) or was copied (raw).
    func runMigration() throws {
        let rows = config.migrationRows
        log("Scenario 8: migrating \(formatCount(Double(rows))) rows (add a required attribute with a default)...")
        let template = StoreDirectory("migration-template")
        let strataTemplate = template.appending("strata"), rawTemplate = template.appending("raw")
        try FileManager.default.createDirectory(atPath: strataTemplate, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: rawTemplate, withIntermediateDirectories: true)
        let dataset = Dataset(count: rows)
        do {
            let store = try waitFor { try await StrataStore.open(at: strataTemplate, durability: .noSync) }
            for start in stride(from: 0, to: rows, by: 100_000) {
                let slice = dataset.records[start..<min(start + 100_000, rows)]
                try store.makeContext(name: "fill").performAndWait { context in try StrataWork.importRecords(slice, in: context) }
            }
            let raw = try RawStore(path: rawTemplate, sync: false)
            try raw.insert(dataset.records)
        }
        let times = try medians("migration", MigrationRunner.allCases) { runner, _ in
            try withDirectory("migration") { directory in
                let source = runner == .strata ? strataTemplate : rawTemplate
                try FileManager.default.copyItem(
                    atPath: source + "/data.mdb", toPath: directory.path + "/data.mdb")
                switch runner {
                case .strata:
                    let coordinator = PersistentStoreCoordinator(managedObjectModel: MigrationModels.version2)
                    var options = PersistentStore.Options()
                    options.mapSize = StoreSettings.mapSize
                    options.durability = .noSync
                    let url = URL(fileURLWithPath: directory.path, isDirectory: true)
                    let chosen = options
                    let seconds = try timed {
                        _ = try waitFor { try await coordinator.addPersistentStore(at: url, options: chosen) }
                    }
                    let migrated = try waitFor {
                        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
                            var request = FetchRequest<ManagedObject>(entityName: "Item")
                            request.predicate = try FetchPredicate(format: "edition == 1")
                            return try context.count(for: request)
                        }
                    }
                    try expect(migrated, rows, "Strata: rows holding the new attribute's default")
                    return seconds
                case .raw:
                    let store = try RawStore(path: directory.path, sync: false)
                    var copied = 0
                    let seconds = try timed { copied = try store.copyRows() }
                    try expect(copied, rows, "raw: rows copied")
                    return seconds
                }
            }
        }
        let strata = times[.strata]!, raw = times[.raw]!
        report.add(ReportRow(
            "8 · migrate: add a required attribute with a default to \(formatCount(Double(rows))) objects (sync off): rows/s "
                + "(raw: copy every row into a new database)",
            [.strata: .rate(Double(rows) / strata, "/s"), .raw: .rate(Double(rows) / raw, "/s")],
            target: Target(String(format: "Strata ≤ 3× the raw copy (%.2f×)", strata / raw), met: strata <= 3 * raw),
            note: String(format: "run: Strata %@, raw %@; µs/row: Strata %.2f, raw %.2f",
                formatSeconds(strata), formatSeconds(raw), strata * 1e6 / Double(rows), raw * 1e6 / Double(rows))))
        report.notes.append(
            "Migration (scenario 8): a store of \(formatCount(Double(rows))) `Item`s written with version 1 is opened with "
                + "version 2, which adds `edition` (integer 64, required, default 1): Strata infers the stage from the model the "
                + "store recorded and rewrites every row in one write transaction (the time is the whole `addPersistentStore`: "
                + "planning, rewriting, committing). Raw LMDB copies every row, 8 bytes longer, into a new database in one write "
                + "transaction with `MDB_APPEND`. Each run works on a fresh file copy of a store filled once.")
    }
}
