import ArgumentParser
import Foundation
import StrataReliability

/// `strata-reliability remote-peer`: one of two processes saving to one store, each
/// watching the other's saves arrive in a live context (a child of the cross-process
/// tests).
struct RemotePeerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remote-peer",
        abstract: "Save notes to a store another peer saves to, and report the other's notes as a live context merges them.")

    @Option(help: "The store directory (created with the remote-peer model beforehand).")
    var store: String

    @Option(help: "This peer's name (the author of its notes).")
    var name: String

    @Option(help: "The other peer's name.")
    var other: String

    @Option(help: "The notes to save, and to expect from the other peer.")
    var count = 40

    @Option(help: "Milliseconds between two saves.")
    var pauseMs = 20

    @Option(help: "Start once this file exists.")
    var go: String

    @Option(help: "Seconds to wait for the other peer's notes after saving.")
    var timeout = 60

    func validate() throws {
        guard count > 0, pauseMs >= 0, timeout > 0 else { throw ValidationError("--count and --timeout must be positive, --pause-ms not negative") }
    }

    func run() async throws {
        var peer = RemotePeer(store: URL(fileURLWithPath: store, isDirectory: true), name: name, other: other, go: go)
        peer.count = count
        peer.pause = .milliseconds(pauseMs)
        peer.timeout = .seconds(timeout)
        try await peer.run()
    }
}
