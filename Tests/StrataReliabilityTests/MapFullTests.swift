import Foundation
@testable import Strata
import StrataLMDB
import StrataReliability
import StrataTesting
import Testing

/// Full maps: saves grow a tiny map or fail with a typed error, and nothing partial is
/// ever stored; while generations are pinned, growth waits for short reads and refuses
/// (DESIGN.md "Store layout": drain or refuse while snapshots are pinned).
@Suite("Map full")
struct MapFullTests {
    static func environment(of coordinator: PersistentStoreCoordinator) throws -> Environment {
        try #require(coordinator.persistentStores.first).file!.environment
    }

    @Test("the ledger on a 64 KiB map: saves grow it up to the maximum, then fail with mapFull; every acknowledged save is stored exactly and nothing of the failed one; a larger maximum goes on")
    func tinyMapGrowsThenFails() async throws {
        let directory = TemporaryDirectory()
        let store = directory.url.appendingPathComponent("tiny.strata")
        let output = open("/dev/null", O_WRONLY)
        defer { close(output) }
        var worker = LedgerWorker(store: store, seed: 7)
        worker.durability = .noSync
        worker.mapSize = 64 << 10
        worker.maximumMapSize = 1 << 20
        worker.output = output
        let first = await worker.run()
        let error = try #require(first.error as? StrataError)
        #expect(error == .storage(.mapFull), "\(error)")
        #expect(first.acknowledged[0] > 20, "the map must have grown past 64 KiB: \(first.acknowledged) saves")

        var auditor = LedgerAuditor(seed: 7)
        var finding = try await auditor.audit(store: store, acknowledged: first.acknowledged)
        #expect(finding.problems.isEmpty, "\(finding.problems)")
        #expect(finding.committed == first.acknowledged, "the failed save must leave nothing")

        worker.maximumMapSize = 4 << 20
        worker.limit = 10
        let second = await worker.run()
        #expect(second.error == nil && second.start == first.acknowledged && second.acknowledged == [10])
        finding = try await auditor.audit(store: store, acknowledged: [first.acknowledged[0] + 10])
        #expect(finding.problems.isEmpty && finding.committed == [first.acknowledged[0] + 10], "\(finding.problems)")
    }

    @Test("four contexts save large batches at once while readers fetch and a fifth context stays pinned: each save commits or fails with mapFull, exactly the committed ones are stored; once the pin goes the map grows")
    func concurrentSavesUnderAPin() async throws {
        let directory = TemporaryDirectory()
        var options = PersistentStore.Options()
        options.durability = .noSync
        options.mapSize = 256 << 10
        options.maximumMapSize = 64 << 20
        let coordinator = PersistentStoreCoordinator(managedObjectModel: LedgerModel.model)
        try await coordinator.addPersistentStore(type: .lmdb, at: directory.url.appendingPathComponent("pinned.strata"), options: options)
        let environment = try Self.environment(of: coordinator)
        let initialMap = environment.info.mapSize

        let pinned = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let pinnedCount = try await pinned.perform { context in
            try context.setQueryGenerationFrom(.current)
            return try context.count(for: FetchRequest<LedgerBatch>())
        }
        #expect(pinnedCount == 0)

        let digest = String(repeating: "d", count: 24_000)
        let outcomes = try await withThrowingTaskGroup(of: [(Int64, StrataError?)].self) { group in
            for writer in 0..<4 {
                group.addTask {
                    let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
                    var outcomes: [(Int64, StrataError?)] = []
                    for index in 0..<12 {
                        let sequence = Int64(writer * 1_000 + index)
                        let failure = await context.perform { context -> StrataError? in
                            let batch = LedgerBatch()
                            batch.sequence = sequence
                            batch.digest = digest
                            do {
                                try context.insert(batch)
                                try context.save()
                                return nil
                            } catch {
                                context.rollback()
                                return error as? StrataError ?? .invalidContextConfiguration("untyped: \(error)")
                            }
                        }
                        outcomes.append((sequence, failure))
                    }
                    return outcomes
                }
            }
            group.addTask {
                // Short reads from other contexts while the writers save: growth waits for them.
                let reader = ManagedObjectContext(.privateQueue, coordinator: coordinator)
                for _ in 0..<40 {
                    _ = try await reader.perform { try $0.count(for: FetchRequest<LedgerBatch>()) }
                }
                return []
            }
            var all: [(Int64, StrataError?)] = []
            for try await outcomes in group { all += outcomes }
            return all
        }
        let failures = outcomes.compactMap(\.1)
        #expect(failures.allSatisfy { $0 == .storage(.mapFull) }, "\(failures)")
        #expect(!failures.isEmpty, "the pinned generation must block growth at some point")
        #expect(environment.mapGrowthCount == 0)
        // The pinned context still sees its generation.
        #expect(try await pinned.perform { try $0.count(for: FetchRequest<LedgerBatch>()) } == 0)

        let committed = Set(outcomes.filter { $0.1 == nil }.map(\.0))
        let reader = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let stored = try await reader.perform { context in
            Set(try context.fetch(FetchRequest<LedgerBatch>()).map(\.sequence))
        }
        #expect(stored == committed)
        #expect(try await coordinator.checkIntegrity().isConsistent)

        // Released: the next save grows the map and commits.
        try await pinned.perform { try $0.setQueryGenerationFrom(nil) }
        try await reader.perform { context in
            for index in 0..<20 {
                let batch = LedgerBatch()
                batch.sequence = Int64(9_000 + index)
                batch.digest = digest
                try context.insert(batch)
            }
            try context.save()
        }
        #expect(environment.mapGrowthCount >= 1)
        #expect(environment.info.mapSize > initialMap)
        #expect(try await reader.perform { try $0.count(for: FetchRequest<LedgerBatch>()) } == committed.count + 20)
        #expect(try await coordinator.checkIntegrity().isConsistent)
    }
}
