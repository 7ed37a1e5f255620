import Foundation
import Strata
import StrataReliability
import StrataTesting
import Testing

/// Two real processes saving to one LMDB store: each sees the other's saves merged into
/// a live context within a bounded delay, and the store's persistent history accounts for
/// every save of both.
@Suite("Remote changes across processes")
struct RemoteChangeTests {
    @Test("two processes save to one store; each one's live context merges every save of the other, and history holds every save once")
    func twoProcesses() async throws {
        let directory = TemporaryDirectory()
        let store = directory.url.appendingPathComponent("shared.strata")
        let count = 40
        // Made here first, so that the peers open an existing store.
        do {
            let coordinator = PersistentStoreCoordinator(managedObjectModel: RemotePeerModel.model)
            let opened = try await coordinator.addPersistentStore(type: .lmdb, at: store, options: RemotePeerModel.options)
            try await coordinator.remove(opened)
        }
        let go = directory.appending("go")
        var peers: [ChildProcess] = []
        for (name, other) in [("alpha", "beta"), ("beta", "alpha")] {
            peers.append(try ChildProcess.spawn(
                reliabilityToolPath(),
                ["remote-peer", "--store", store.path, "--name", name, "--other", other, "--count", "\(count)", "--pause-ms", "15",
                 "--go", go, "--timeout", "60"],
                outputPath: directory.appending("\(name).out"), errorPath: directory.appending("\(name).err")))
        }
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, !peers.allSatisfy({ $0.output.contains("ready") }) {
            for peer in peers {
                if let ended = peer.poll() {
                    Issue.record("a peer ended before it was ready (\(ended)): \(peer.errorOutput)")
                    return
                }
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        _ = FileManager.default.createFile(atPath: go, contents: Data())
        var reports: [RemotePeerReport] = []
        for peer in peers {
            _ = await peer.ended(atMost: 120)
            let line = peer.output.split(separator: "\n").first { $0.hasPrefix("report ") }
            guard let line else {
                Issue.record("a peer printed no report: \(peer.output) \(peer.errorOutput)")
                return
            }
            reports.append(try JSONDecoder().decode(RemotePeerReport.self, from: Data(line.dropFirst("report ".count).utf8)))
        }
        for report in reports {
            #expect(report.complete, "\(report.name) saw \(report.seen.count) of \(count): \(report.seen)")
            #expect(report.otherTally == Int64(count), "\(report.name) holds the other's tally at \(report.otherTally)")
            #expect(report.remoteChangeEvents > 0)
            let delays = report.delaysMilliseconds.sorted()
            let p50 = delays.isEmpty ? 0 : delays[delays.count / 2], worst = delays.last ?? 0
            print("Remote changes: \(report.name) saw \(report.seen.count) notes of the other; delay p50 \(Int(p50)) ms, worst \(Int(worst)) ms; \(report.remoteChangeEvents) events")
            // Bounded: a 50 ms look plus the merge, on a loaded two-core machine.
            #expect(worst < 5_000, "\(report.name): a merge took \(worst) ms")
        }

        // The history checker: every note of both is in the store and in history once, by
        // its process and author.
        let coordinator = PersistentStoreCoordinator(managedObjectModel: RemotePeerModel.model)
        _ = try await coordinator.addPersistentStore(type: .lmdb, at: store, options: RemotePeerModel.options)
        let stored = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.fetch(FetchRequest<PeerNote>()).map { ($0.objectID, $0.author, $0.sequence) }
        }
        #expect(stored.count == 2 * count)
        let history = try coordinator.execute(.fetchHistory(after: nil)).transactions
        let pids = Set(reports.map(\.processID))
        #expect(Set(history.map(\.processID)) == pids)
        var inserts: [ManagedObjectID: Int] = [:]
        for transaction in history {
            for change in transaction.changes where change.changeType == .insert && change.changedObjectID.entityName == "PeerNote" {
                inserts[change.changedObjectID, default: 0] += 1
            }
        }
        for (id, author, sequence) in stored {
            #expect(inserts[id] == 1, "note \(author) \(sequence) is in history \(inserts[id] ?? 0) times")
            let transaction = history.first { $0.changes.contains { $0.changedObjectID == id && $0.changeType == .insert } }
            #expect(transaction?.author == author)
        }
        #expect(inserts.count == 2 * count)
    }

    @Test("a batch insert killed at each crash point of its write leaves all of its rows with their one history transaction, or neither", arguments: ["before-write", "mid-write", "before-commit", "after-commit"])
    func batchInsertKilled(at point: String) async throws {
        let directory = TemporaryDirectory()
        let store = directory.url.appendingPathComponent("batch.strata")
        do {
            let coordinator = PersistentStoreCoordinator(managedObjectModel: RemotePeerModel.model)
            let opened = try await coordinator.addPersistentStore(type: .lmdb, at: store, options: RemotePeerModel.options)
            try await coordinator.remove(opened)
        }
        let count = 20_000
        let child = try ChildProcess.spawn(
            reliabilityToolPath(), ["batch-worker", "--store", store.path, "--count", "\(count)"],
            environment: ["STRATA_CRASH_POINT": "\(point)@1"],
            outputPath: directory.appending("batch.out"), errorPath: directory.appending("batch.err"))
        let (ended, _) = await child.ended(atMost: 120)
        #expect(ended == .signalled(SIGKILL), "\(ended): \(child.errorOutput)")
        let coordinator = PersistentStoreCoordinator(managedObjectModel: RemotePeerModel.model)
        _ = try await coordinator.addPersistentStore(type: .lmdb, at: store, options: RemotePeerModel.options)
        let stored = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.count(for: FetchRequest<PeerNote>())
        }
        let history = try coordinator.execute(.fetchHistory(after: nil)).transactions
        let inserts = history.flatMap(\.changes).filter { $0.changeType == .insert }.count
        let expected = point == "after-commit" ? count : 0
        #expect(stored == expected, "\(point): \(stored) rows")
        #expect(inserts == expected && history.count == (expected == 0 ? 0 : 1), "\(point): \(history.count) transactions, \(inserts) inserts")
        #expect(history.first?.author == (expected == 0 ? nil : "batch"))
        #expect(try await coordinator.checkIntegrity().isConsistent)
    }
}
