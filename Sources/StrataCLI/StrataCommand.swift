import ArgumentParser

/// The `strata` command: inspect, copy and try out Strata's LMDB stores.
///
/// Run without a subcommand it prints its help.
@main
struct StrataCommand: AsyncParsableCommand {
    /// The command's name, abstract and subcommands.
    static let configuration = CommandConfiguration(
        commandName: "strata",
        abstract: "Inspect, copy, migrate and try out Strata stores (LMDB environments).",
        discussion: "A store is a directory holding LMDB's data.mdb and lock.mdb.",
        subcommands: [StatCommand.self, CopyCommand.self, MigrateCommand.self, HistoryCommand.self, DemoCommand.self])
}
