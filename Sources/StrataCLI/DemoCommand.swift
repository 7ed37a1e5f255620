import ArgumentParser

/// `strata demo [PATH]`: a narrated walkthrough of StrataLMDB on an embedded store.
struct DemoCommand: ParsableCommand {
    /// The subcommand's name and abstract.
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Walk through writes, reads, snapshots and scans on a demo store.",
        discussion: "Re-runnable: it empties its \"demo\" database first. Remove the directory when done.")

    /// The demo store directory.
    @Argument(help: "The demo store directory, created when missing.")
    var path = "Demo.strata"

    /// Runs the walkthrough, printing its narration.
    func run() throws {
        _ = try Demo(path: path, say: { print($0) }).run()
    }
}
