import ArgumentParser
import Foundation
import Strata

/// `strata history PATH [--after N] [--limit N]`: a store's persistent history.
struct HistoryCommand: ParsableCommand {
    /// The subcommand's name and abstract.
    static let configuration = CommandConfiguration(
        commandName: "history",
        abstract: "Print a store's persistent history: each transaction with its author, context, process and changes.",
        discussion: "The store is opened read-only. Stores record history when opened with tracksPersistentHistory (a container's default).")

    /// The store directory.
    @Argument(help: "The store directory (holding data.mdb).")
    var path: String

    /// Only the transactions after this sequence number.
    @Option(help: "Print only the transactions after this sequence number (a token's sequence).")
    var after: UInt64?

    /// At most this many transactions.
    @Option(help: "Print at most this many transactions.")
    var limit: Int?

    /// Checks the limit.
    func validate() throws {
        if let limit, limit < 1 { throw ValidationError("--limit must be at least 1") }
    }

    /// Prints the transactions.
    func run() throws {
        print(try transcript())
    }

    /// The transactions as text; one line saying there are none when there are none.
    func transcript() throws -> String {
        guard FileSystem.isDirectory(path), FileManager.default.fileExists(atPath: path + "/data.mdb") else {
            throw StoreError(kind: .noDataFile, message: "\(path) is not a store (no data.mdb there)")
        }
        do {
            let lines = try HistoryTranscript.lines(storeAt: path, after: after, limit: limit)
            return lines.isEmpty ? "\(path) has no history\(after.map { " after \($0)" } ?? "")" : lines.joined(separator: "\n")
        } catch {
            throw StoreError(kind: .other, message: error.description)
        }
    }
}
