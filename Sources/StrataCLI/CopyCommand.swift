import ArgumentParser

/// `strata copy PATH DEST [--compact]`: a consistent copy of a store.
struct CopyCommand: ParsableCommand {
    /// The subcommand's name and abstract.
    static let configuration = CommandConfiguration(
        commandName: "copy",
        abstract: "Copy a store into a new or empty directory.",
        discussion: "The copy is a consistent snapshot, even while another process writes to the store.")

    /// The store to copy.
    @Argument(help: "The store directory to copy.")
    var path: String

    /// Where to copy it.
    @Argument(help: "The destination directory (created when missing; must not hold a data.mdb).")
    var destination: String

    /// Leave out free pages.
    @Flag(help: "Leave out free pages and renumber the rest: smaller, but slower to make.")
    var compact = false

    /// Copies the store and prints both sizes.
    func run() throws {
        print(try CopyReport.copy(from: path, to: destination, compacting: compact).text())
    }
}
