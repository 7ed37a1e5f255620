import ArgumentParser
import Foundation
import Strata
import StrataReliability

/// `strata-reliability worker`: saves the ledger until killed, acknowledging each save
/// on standard output (`ack N`) only after its root `save()` returned.
struct WorkerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "worker",
        abstract: "Save the ledger until killed, printing 'ack N' after each save returns (a child of the runs).")

    @Option(help: "The store directory.")
    var store: String

    @Option(help: "The seed of the save plan.")
    var seed: UInt64 = 1

    @Option(help: "sync, noMetaSync or noSync.")
    var durability: String = "sync"

    @Option(help: "Stop after this many saves per writer (default: run until killed).")
    var saves: Int?

    @Option(help: "How many writers save at once, each through its own contexts.")
    var writers = 1

    @Option(help: "stop (print the error and exit 3) or continue (save again; reopen a terminal store).")
    var onError: String = "stop"

    func validate() throws {
        guard ["sync", "noMetaSync", "noSync"].contains(durability) else {
            throw ValidationError("--durability must be sync, noMetaSync or noSync, not '\(durability)'")
        }
        if let saves, saves < 0 { throw ValidationError("--saves must not be negative") }
        guard (1...64).contains(writers) else { throw ValidationError("--writers must be 1 to 64") }
        guard LedgerWorker.ErrorPolicy(rawValue: onError) != nil else {
            throw ValidationError("--on-error must be stop or continue, not '\(onError)'")
        }
    }

    func run() async throws {
        var worker = LedgerWorker(store: URL(fileURLWithPath: store, isDirectory: true), seed: seed)
        worker.durability = switch durability {
        case "noMetaSync": .noMetaSync
        case "noSync": .noSync
        default: .sync
        }
        worker.limit = saves
        worker.writers = writers
        worker.onError = LedgerWorker.ErrorPolicy(rawValue: onError) ?? .stop
        let outcome = await worker.run()
        if outcome.error != nil { throw ExitCode(3) }
    }
}
