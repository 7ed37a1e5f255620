import ArgumentParser
import Testing

@testable import StrataCLI

@Suite("strata command line")
struct CommandLineTests {
    @Test("no subcommand prints the help, listing the subcommands")
    func noSubcommandPrintsHelp() throws {
        let command = try StrataCommand.parseAsRoot([])
        #expect(command is StrataCommand)
        let error = #expect(throws: (any Error).self) { try runCommand([]) }
        let help = error.map { StrataCommand.fullMessage(for: $0) } ?? ""
        #expect(help.contains("USAGE: strata <subcommand>"))
        for name in ["stat", "copy", "migrate", "history", "demo"] { #expect(help.contains(name)) }
        #expect(error.map { StrataCommand.exitCode(for: $0) } == .success)
    }

    @Test("stat takes a path and --json")
    func parseStat() throws {
        let stat = try #require(try StrataCommand.parseAsRoot(["stat", "store.strata", "--json"]) as? StatCommand)
        #expect(stat.path == "store.strata")
        #expect(stat.json)
        #expect(try (StrataCommand.parseAsRoot(["stat", "s"]) as? StatCommand)?.json == false)
        #expect(throws: (any Error).self) { try StrataCommand.parseAsRoot(["stat"]) }
    }

    @Test("copy takes a source, a destination and --compact")
    func parseCopy() throws {
        let copy = try #require(try StrataCommand.parseAsRoot(["copy", "a", "b", "--compact"]) as? CopyCommand)
        #expect(copy.path == "a")
        #expect(copy.destination == "b")
        #expect(copy.compact)
        #expect(throws: (any Error).self) { try StrataCommand.parseAsRoot(["copy", "a"]) }
    }

    @Test("demo defaults to ./Demo.strata")
    func parseDemo() throws {
        #expect(try (StrataCommand.parseAsRoot(["demo"]) as? DemoCommand)?.storePath == "Demo.strata")
        #expect(try (StrataCommand.parseAsRoot(["demo", "/tmp/d.strata"]) as? DemoCommand)?.storePath == "/tmp/d.strata")
    }
}
