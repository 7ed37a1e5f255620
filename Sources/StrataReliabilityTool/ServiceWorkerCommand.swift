import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle
import Strata
import StrataLifecycle
import StrataLocks
import StrataReliability
#if canImport(Glibc)
import Glibc
#endif

/// `strata-reliability service-worker`: a `ServiceGroup` running a ``StrataService`` and
/// writers that save without pause, until a SIGTERM shuts the group down gracefully
/// (a child of the graceful-shutdown test). Prints `ready` once the store is loaded,
/// `ack <author> <sequence>` after every save that returned, and at the end
/// `done acked=N refused=M`: a writer stops at its first save refused by the closed
/// container.
struct ServiceWorkerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "service-worker",
        abstract: "Save from several writers in a ServiceGroup with a StrataService until SIGTERM shuts it down gracefully.")

    @Option(help: "The store directory (created when missing, with the remote-peer model).")
    var store: String

    @Option(help: "Writers saving at once, each in a context of its own.")
    var writers = 4

    func validate() throws {
        guard writers > 0 else { throw ValidationError("--writers must be positive") }
    }

    func run() async throws {
        let container = PersistentContainer(name: "ServiceWorker", managedObjectModel: RemotePeerModel.model)
        container.persistentStoreDescriptions = [
            PersistentStoreDescription(url: URL(fileURLWithPath: store, isDirectory: true), options: RemotePeerModel.options),
        ]
        try await container.loadPersistentStores()
        let output = Output()
        output.line("ready")
        let saving = Writers(container: container, count: writers, output: output)
        var logger = Logger(label: "strata-reliability.service-worker")
        logger.logLevel = .notice
        // Shut down in reverse order: the container first, while the writers still save.
        let group = ServiceGroup(configuration: ServiceGroupConfiguration(
            services: [
                .init(service: saving, successTerminationBehavior: .ignore),
                .init(service: StrataService(container: container)),
            ],
            gracefulShutdownSignals: [.sigterm], logger: logger))
        try await group.run()
        output.line("done acked=\(saving.acked.withLock { $0 }) refused=\(saving.refused.withLock { $0 })")
    }
}

/// Lines to standard output, each written whole and at once (the parent reads the file).
private final class Output: Sendable {
    private let lock = LockedValue(())

    func line(_ text: String) {
        let bytes = Array((text + "\n").utf8)
        lock.withLock { _ in
            bytes.withUnsafeBytes { buffer in
                guard let base = buffer.baseAddress else { return }
                var offset = 0
                while offset < buffer.count {
                    let written = write(1, base + offset, buffer.count - offset)
                    if written <= 0 { return }
                    offset += written
                }
            }
        }
    }
}

/// Writers saving one note at a time each, acknowledging every save that returned;
/// each stops at its first save refused because the container closed, and the service
/// ends at its turn in the group's graceful shutdown.
private struct Writers: Service {
    let container: PersistentContainer
    let count: Int
    let output: Output
    let acked = LockedValue(0)
    let refused = LockedValue(0)

    func run() async throws {
        await saveUntilRefused()
        // A service ends at its own turn in the group's shutdown (the container's came
        // first): ending before it would fail the group.
        try? await gracefulShutdown()
    }

    private func saveUntilRefused() async {
        await withTaskGroup(of: Void.self) { group in
            for writer in 0..<count {
                group.addTask {
                    let context = container.newBackgroundContext()
                    let author = "w\(writer)"
                    for sequence in Int64(0)... {
                        let saved = await context.perform { context -> Bool in
                            let note = PeerNote()
                            note.author = author
                            note.sequence = sequence
                            note.savedAt = Date()
                            do {
                                try context.insert(note)
                                try context.save()
                                return true
                            } catch {
                                context.rollback()
                                return false
                            }
                        }
                        guard saved else {
                            refused.withLock { $0 += 1 }
                            return
                        }
                        output.line("ack \(author) \(sequence)")
                        acked.withLock { $0 += 1 }
                    }
                }
            }
        }
    }
}
