import ArgumentParser
import Foundation
import StrataReliability

/// `strata-reliability batch-worker`: one batch insert into a store, for the crash tests
/// of batch requests (killed at a crash point by `STRATA_CRASH_POINT`).
struct BatchWorkerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "batch-worker",
        abstract: "Batch-insert notes into a store of the remote-peer model, then print done.")

    @Option(help: "The store directory (created with the remote-peer model beforehand).")
    var store: String

    @Option(help: "The notes to insert.")
    var count = 20_000

    func validate() throws {
        guard count > 0 else { throw ValidationError("--count must be positive") }
    }

    func run() async throws {
        try await BatchWorker(store: URL(fileURLWithPath: store, isDirectory: true), count: count).run()
    }
}
