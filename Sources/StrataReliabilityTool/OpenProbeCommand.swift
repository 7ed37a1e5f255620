import ArgumentParser
import Foundation
import Strata
import StrataReliability

/// `strata-reliability open-probe`: opens a ledger store that may be damaged, reads all of
/// it and checks its integrity, in a process of its own, so that a crash in LMDB (which
/// trusts its pages: a page past the end of a truncated file is SIGBUS) ends only the probe.
///
/// Prints one line and exits 0 whatever it finds:
/// - `ok <rows>`: opened, every row read, the integrity check found nothing;
/// - `inconsistent <count> <first problem>`: read, but ``PersistentStoreCoordinator/checkIntegrity()`` found problems;
/// - `error <type> <description>`: a thrown error, `<type>` its type and kind or case (`StrataError.corruptStore`).
///
/// A signal, a non-zero exit or anything else on standard output is a crash.
struct OpenProbeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "open-probe",
        abstract: "Open a (maybe damaged) ledger store, read every row and check its integrity; print ok, inconsistent or error.")

    @Option(help: "The store directory.")
    var store: String

    @Flag(help: "Open with verifiesPagesAtOpen: check every page before LMDB reads it.")
    var verifyPages = false

    @Flag(help: "Also save one new batch after reading (meets damage on the write path).")
    var write = false

    func run() async throws {
        print(await Self.probe(store: URL(fileURLWithPath: store, isDirectory: true), verifyPages: verifyPages, write: write))
    }

    /// The probe's one line for `store`.
    static func probe(store: URL, verifyPages: Bool, write: Bool) async -> String {
        do {
            var options = PersistentStore.Options()
            options.verifiesPagesAtOpen = verifyPages
            let coordinator = PersistentStoreCoordinator(managedObjectModel: LedgerModel.model)
            try await coordinator.addPersistentStore(type: .lmdb, at: store, options: options)
            let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
            let rows = try await context.perform { context in try readEverything(context) }
            if write {
                try await context.perform { context in
                    let batch = LedgerBatch()
                    batch.sequence = -1
                    batch.digest = "probe"
                    try context.insert(batch)
                    try context.save()
                }
            }
            let report = try await coordinator.checkIntegrity()
            guard report.isConsistent else {
                return "inconsistent \(report.problems.count + report.problemsOmitted) \(report.problems.first ?? "")"
            }
            return "ok \(rows)"
        } catch {
            return "error \(caseName(of: error)) \(String(describing: error).replacingOccurrences(of: "\n", with: " "))"
        }
    }

    /// Fetches every ledger object and touches every property (firing every fault); returns
    /// the number of objects.
    private static func readEverything(_ context: isolated ManagedObjectContext) throws -> Int {
        var count = 0
        for batch in try context.fetch(FetchRequest<LedgerBatch>()) {
            _ = (batch.sequence, batch.digest)
            count += 1
        }
        for customer in try context.fetch(FetchRequest<LedgerCustomer>()) {
            _ = (customer.name, customer.tier, customer.accounts.map(\.name))
            count += 1
        }
        for account in try context.fetch(FetchRequest<LedgerAccount>()) {
            _ = (account.name, account.balance, account.customer?.name)
            count += 1
        }
        // The indexes too: a range over each.
        var request = FetchRequest<LedgerAccount>()
        request.predicate = try FetchPredicate(format: "name BEGINSWITH %@", "c")
        _ = try context.count(for: request)
        return count
    }

    /// `StrataError.corruptStore`, `LMDBError`, ...: the error's type and, for a
    /// ``StrataError`` or an enum, its kind or case.
    static func caseName(of error: any Error) -> String {
        let type = String(describing: Swift.type(of: error))
        if let error = error as? StrataError { return "\(type).\(error.code)" }
        let mirror = Mirror(reflecting: error)
        if mirror.displayStyle == .enum {
            let label = mirror.children.first?.label ?? String(describing: error).prefix { $0.isLetter }.description
            return "\(type).\(label)"
        }
        return type
    }
}
