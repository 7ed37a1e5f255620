import ArgumentParser

/// `strata-reliability`: the reliability suite's runs (`make reliability`) and the worker
/// processes they crash. See the DocC article "Reliability".
@main
struct ReliabilityCommand: AsyncParsableCommand {
    /// The command's name, abstract and subcommands.
    static let configuration = CommandConfiguration(
        commandName: "strata-reliability",
        abstract: "Crash, fault and audit Strata stores: the reliability suite's long runs.",
        subcommands: [
            KillCyclesCommand.self, WorkerCommand.self, PinCommand.self, FaultsCommand.self, OpenProbeCommand.self,
            MigrationCyclesCommand.self, MigrateWorkerCommand.self, RemotePeerCommand.self, BatchWorkerCommand.self,
            ServiceWorkerCommand.self,
        ])
}
