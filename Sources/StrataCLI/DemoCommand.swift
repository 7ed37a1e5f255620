import ArgumentParser

/// `strata demo [--lmdb] [PATH]`: a narrated walkthrough of Strata's contexts on a
/// persistent container, or (`--lmdb`) of StrataLMDB alone.
struct DemoCommand: AsyncParsableCommand {
    /// The subcommand's name and abstract.
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Walk through contexts on a PersistentContainer (or, with --lmdb, the LMDB layer) on a demo store.",
        discussion: """
            Re-runnable: it deletes what an earlier run saved first. The contexts walkthrough and the \
            LMDB one use different stores (Demo.strata and DemoLMDB.strata by default). Remove the \
            directory when done.
            """)

    /// Walk through the LMDB layer instead of the contexts.
    @Flag(help: "Walk through StrataLMDB alone: writes, reads, a snapshot and scans.")
    var lmdb = false

    /// The demo store directory.
    @Argument(help: "The demo store directory, created when missing (default: Demo.strata, or DemoLMDB.strata with --lmdb).")
    var path: String?

    /// The store the walkthrough uses: ``path``, or the default of the walkthrough chosen.
    var storePath: String { path ?? (lmdb ? "DemoLMDB.strata" : "Demo.strata") }

    /// Runs the walkthrough, printing its narration.
    func run() async throws {
        if lmdb {
            _ = try LMDBDemo(path: storePath, say: { print($0) }).run()
        } else {
            _ = try await Demo(path: storePath, say: { print($0) }).run()
        }
    }
}
