import Foundation
import Strata
import StrataLMDB
import StrataReliability
import StrataTesting
import Testing

/// The reader table across processes: pinned query generations past its size are a typed
/// error, and the slots of a process killed with SIGKILL are reclaimed.
@Suite("Reader table")
struct ReaderTableTests {
    /// Starts `strata-reliability pin` on `store` and waits until it holds its slots.
    static func holder(on store: URL, in directory: borrowing TemporaryDirectory, round: Int) async throws -> (ChildProcess, [Substring]) {
        let child = try ChildProcess.spawn(
            reliabilityToolPath(), ["pin", "--store", store.path, "--max-readers", "8"],
            outputPath: directory.appending("pin-\(round).out"), errorPath: directory.appending("pin-\(round).err"))
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, !child.output.contains("holding") {
            if let ended = child.poll() {
                Issue.record("the pinning child ended early (\(ended)): \(child.errorOutput)")
                break
            }
            try? await Task.sleep(nanoseconds: 10_000_000)
        }
        return (child, child.output.split(separator: "\n"))
    }

    static func count(in context: ManagedObjectContext) async -> Result<Int, StrataError> {
        await context.perform { context in
            do {
                return .success(try context.count(for: FetchRequest<LedgerBatch>()))
            } catch let error as StrataError {
                return .failure(error)
            } catch {
                return .failure(.invalidContextConfiguration("an untyped error: \(error)"))
            }
        }
    }

    @Test("a process fills the table with pins and its one pin too many is readersFull; while it lives this process gets readersFull too; once it is killed with SIGKILL, its slots are reclaimed, three times over")
    func slotsOfKilledProcessesAreReclaimed() async throws {
        let directory = TemporaryDirectory()
        let store = directory.url.appendingPathComponent("readers.strata")
        var options = PersistentStore.Options()
        options.maxReaders = 8
        let coordinator = PersistentStoreCoordinator(managedObjectModel: LedgerModel.model)
        try await coordinator.addPersistentStore(type: .lmdb, at: store, options: options)
        let reader = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        for round in 0..<3 {
            let (child, lines) = try await Self.holder(on: store, in: directory, round: round)
            #expect(lines.first == "slots 8", "\(lines)")
            #expect(lines.filter { $0.hasPrefix("pinned ") }.count == 8, "round \(round): \(lines)")
            let refusal = lines.first { $0.hasPrefix("error ") } ?? ""
            #expect(refusal.contains("readersFull") && refusal.contains("all 8 reader slots"), "\(refusal)")

            #expect(await Self.count(in: reader) == .failure(.storage(.readersFull)), "round \(round): the live child holds every slot")

            child.kill()
            #expect(child.wait() == .signalled(SIGKILL))
            // The child saved a batch before each pin, the refused one included.
            let childBatches = 9 * (round + 1)
            #expect(await Self.count(in: reader) == .success(childBatches), "round \(round): the dead child's slots are cleared")

            // Every slot is free again: eight pins of distinct states, then the ninth is refused.
            var pinned: [ManagedObjectContext] = []
            for index in 0..<8 {
                try await reader.perform { context in
                    let batch = LedgerBatch()
                    batch.sequence = Int64(1_000 * (round + 1) + index)
                    try context.insert(batch)
                    try context.save()
                }
                let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
                try await context.perform { try $0.setQueryGenerationFrom(.current) }
                let seen = await Self.count(in: context)
                #expect(seen == .success(childBatches + index + 1), "round \(round), pin \(index)")
                pinned.append(context)
            }
            #expect(coordinator.queryGenerationStatistics.stores.first?.readerSlotsInUse == 8)
            let late = ManagedObjectContext(.privateQueue, coordinator: coordinator)
            try await late.perform { try $0.setQueryGenerationFrom(.current) }
            try await reader.perform { context in
                let batch = LedgerBatch()
                batch.sequence = -Int64(round + 1)
                try context.insert(batch)
                try context.save()
            }
            #expect(await Self.count(in: late) == .failure(.storage(.readersFull)))
            // Unpin, and remove this round's batches so that the next round counts from a known base.
            pinned.removeAll()
            try await reader.perform { context in
                var request = FetchRequest<LedgerBatch>()
                request.predicate = try FetchPredicate(format: "sequence >= %@ OR sequence < 0", Int64(1_000))
                for batch in try context.fetch(request) { try context.delete(batch) }
                try context.save()
            }
        }
    }
}
