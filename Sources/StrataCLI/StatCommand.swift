import ArgumentParser

/// `strata stat PATH [--json]`: environment info, named databases and readers of a store.
struct StatCommand: ParsableCommand {
    /// The subcommand's name and abstract.
    static let configuration = CommandConfiguration(
        commandName: "stat",
        abstract: "Show a store's environment info, named databases and readers.",
        discussion: "The store is opened read-only: nothing is written, and nothing is created when PATH is not a store.")

    /// The store directory.
    @Argument(help: "The store directory (holding data.mdb).")
    var path: String

    /// Print JSON instead of text.
    @Flag(help: "Print the report as JSON.")
    var json = false

    /// Prints the report.
    func run() throws {
        let report = try StoreReport.load(path: path)
        print(json ? try report.json() : report.text())
    }
}
