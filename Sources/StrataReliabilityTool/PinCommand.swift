import ArgumentParser
import Foundation
import StrataReliability

/// `strata-reliability pin`: fills the reader table with pinned query generations and
/// holds them until killed (a child of the reader-table tests).
struct PinCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pin",
        abstract: "Pin query generations of distinct states until the reader table is full, then hold them until killed.")

    @Option(help: "The store directory.")
    var store: String

    @Option(help: "The reader slots to ask for, when this process creates the lock file.")
    var maxReaders = 8

    @Option(help: "The most pins to attempt (default: until one fails).")
    var pins: Int?

    func validate() throws {
        guard maxReaders > 0, (pins ?? 1) >= 0 else { throw ValidationError("--max-readers must be positive, --pins not negative") }
    }

    func run() async throws {
        var holder = ReaderHolder(store: URL(fileURLWithPath: store, isDirectory: true))
        holder.maxReaders = maxReaders
        holder.pins = pins ?? .max
        try await holder.run()
    }
}
