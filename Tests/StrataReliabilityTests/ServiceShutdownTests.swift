import Foundation
import Strata
import StrataReliability
import StrataTesting
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A graceful shutdown with saves in flight, for real: a child process runs a
/// `ServiceGroup` with a `StrataService` and writers saving without pause; the test sends
/// it SIGTERM. The group closes the container while the writers still save: every save a
/// writer saw return is in the store, and the process exits cleanly.
@Suite("Graceful shutdown by signal")
struct ServiceShutdownTests {
    @Test("SIGTERM while four writers save: exit 0, every acknowledged save stored, nothing else", arguments: [1, 2, 3])
    func sigterm(round: Int) async throws {
        let directory = TemporaryDirectory()
        let store = directory.url.appendingPathComponent("service.strata")
        let worker = try ChildProcess.spawn(
            reliabilityToolPath(), ["service-worker", "--store", store.path, "--writers", "4"],
            outputPath: directory.appending("worker.out"), errorPath: directory.appending("worker.err"))
        // Wait until it saves, then a little more, so that saves are in flight at the signal.
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, worker.output.split(separator: "\n").filter({ $0.hasPrefix("ack ") }).count < 50 * round {
            if let ended = worker.poll() {
                Issue.record("the worker ended before it saved (\(ended)): \(worker.errorOutput)")
                return
            }
            try await Task.sleep(for: .milliseconds(5))
        }
        worker.kill(SIGTERM)
        let (termination, killed) = await worker.ended(atMost: 60)
        #expect(!killed && termination == .exited(0), "\(termination): \(worker.errorOutput)")
        let lines = worker.output.split(separator: "\n")
        let acknowledged = Set(lines.filter { $0.hasPrefix("ack ") }.map { String($0.dropFirst(4)) })
        let done = try #require(lines.last { $0.hasPrefix("done ") }, "no summary: \(worker.output.suffix(500)) \(worker.errorOutput)")
        #expect(done == "done acked=\(acknowledged.count) refused=4", "every writer stops at a refused save")

        // The directory opens at once (the worker closed it); the store holds exactly what was acknowledged.
        let coordinator = PersistentStoreCoordinator(managedObjectModel: RemotePeerModel.model)
        try await coordinator.addPersistentStore(type: .lmdb, at: store, options: RemotePeerModel.options)
        let stored = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            Set(try context.fetch(FetchRequest<PeerNote>()).map { "\($0.author) \($0.sequence)" })
        }
        #expect(stored == acknowledged, "stored \(stored.count), acknowledged \(acknowledged.count); missing \(acknowledged.subtracting(stored).sorted().prefix(5))")
        let integrity = try await coordinator.checkIntegrity()
        #expect(integrity.isConsistent, "\(integrity)")
        try await coordinator.close()
        print("Graceful shutdown by SIGTERM, round \(round): \(acknowledged.count) saves acknowledged, all stored; 4 writers refused after the close")
    }
}
