import ArgumentParser
import Foundation
import Strata

/// `strata migrate PATH --model FILE... [--model-version X] [--dry-run]`: migrates a store to
/// a model version (or prints what that would do).
struct MigrateCommand: ParsableCommand {
    /// The subcommand's name and abstract.
    static let configuration = CommandConfiguration(
        commandName: "migrate",
        abstract: "Migrate a store to a model version, or print the plan (--dry-run).",
        discussion: """
            Each --model FILE holds a model's description (ManagedObjectModel.jsonRepresentation), \
            oldest version first. The store migrates to --model-version (by default the last model given) \
            through lightweight stages between the listed versions from the one it holds; a store of a \
            version not listed is migrated in one stage inferred from the model it recorded. \
            With --dry-run nothing is written. Custom stages run in the app, not here.
            """)

    /// The store directory.
    @Argument(help: "The store directory (holding data.mdb).")
    var path: String

    /// The model descriptions, oldest first.
    @Option(name: .customLong("model"), help: "A model description (JSON), oldest version first; repeat for each version.")
    var models: [String] = []

    /// The version to migrate to.
    @Option(name: .customLong("model-version"), help: "The version identifier to migrate to (default: the last --model).")
    var modelVersion: String?

    /// Print the plan only.
    @Flag(name: .customLong("dry-run"), help: "Print the plan (stages, entities, rows rewritten, indexes built) and write nothing.")
    var dryRun = false

    /// Checks that models were given.
    func validate() throws {
        if models.isEmpty { throw ValidationError("give the model to migrate to with --model FILE (and earlier versions before it)") }
    }

    /// Plans, and unless `--dry-run`, runs the migration, printing the plan (and progress
    /// to stderr).
    func run() throws {
        print(try perform { progress in FileHandle.standardError.write(Data("  \(progress)\n".utf8)) })
    }

    /// Plans, and unless `--dry-run`, runs the migration, reporting progress to `progress`;
    /// the plan, and a last line saying what the store holds when it was migrated.
    func perform(progress: @escaping @Sendable (MigrationProgress) -> Void = { _ in }) throws -> String {
        let url = URL(fileURLWithPath: path)
        guard FileSystem.isDirectory(path), FileManager.default.fileExists(atPath: url.appendingPathComponent("data.mdb").path) else {
            throw StoreError(kind: .noDataFile, message: "\(path) is not a store (no data.mdb there)")
        }
        var versions: [ManagedObjectModel] = []
        for file in models {
            guard let data = FileManager.default.contents(atPath: file) else {
                throw StoreError(kind: .missing, message: "cannot read the model description \(file)")
            }
            do {
                versions.append(try ManagedObjectModel.decoding(jsonRepresentation: data, source: file))
            } catch {
                throw StoreError(kind: .other, message: error.description)
            }
        }
        let targetIndex: Int
        if let modelVersion {
            guard let found = versions.lastIndex(where: { $0.versionIdentifier == modelVersion }) else {
                let known = versions.map { $0.versionIdentifier ?? "(unnamed)" }.joined(separator: ", ")
                throw StoreError(kind: .other, message: "no --model has version \(modelVersion) (given: \(known))")
            }
            targetIndex = found
        } else {
            targetIndex = versions.count - 1
        }
        let chain = Array(versions[...targetIndex])
        var options = PersistentStore.Options()
        options.migrationPlan = chain.count > 1 ? MigrationPlan(models: chain) : nil
        let coordinator = PersistentStoreCoordinator(managedObjectModel: chain[chain.count - 1])
        do {
            let preview = try coordinator.migrationPreview(forStoreAt: url, options: options)
            guard !dryRun, !preview.stages.isEmpty else { return preview.description }
            options.migrationProgress = MigrationProgressHandler(progress)
            try coordinator.addPersistentStoreSynchronously(at: url, options: options)
            return preview.description + "\nmigrated: \(path) now holds \(MigrationPlan.describe(chain[chain.count - 1]))"
        } catch {
            throw StoreError(kind: .other, message: error.description)
        }
    }
}
