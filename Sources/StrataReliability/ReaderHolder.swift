import Foundation
import Strata

/// The child side of the reader-table runs: pins query generations of distinct states
/// until the reader table is full, reports the typed error of the one pin too many, then
/// holds its slots until it is killed.
public struct ReaderHolder: Sendable {
    /// The store directory.
    public var store: URL
    /// The reader slots to ask for when this process creates the lock file.
    public var maxReaders = 8
    /// Pins to attempt (default: until one fails).
    public var pins = Int.max
    /// Where the report lines go.
    public var output: Int32 = 1

    /// A holder for `store`.
    public init(store: URL) { self.store = store }

    /// Writes `slots N` (the table's size), `pinned I` per pin, `error <description>` for
    /// the pin that found no slot, then `holding`, and sleeps until killed.
    public func run() async throws -> Never {
        var options = PersistentStore.Options()
        options.maxReaders = maxReaders
        options.durability = .noSync
        let coordinator = PersistentStoreCoordinator(managedObjectModel: LedgerModel.model)
        _ = try await coordinator.addPersistentStore(type: .lmdb, at: store, options: options)
        let slots = coordinator.queryGenerationStatistics.stores.first?.maxReaders ?? 0
        emit("slots \(slots)")
        var held: [ManagedObjectContext] = []
        let writer = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        var index = 0
        while index < pins {
            try await writer.perform { context in
                let batch = LedgerBatch()
                batch.sequence = Int64(index)
                try context.insert(batch)
                try context.save()
            }
            let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
            do {
                let counted = try await context.perform { context in
                    try context.setQueryGenerationFrom(.current)
                    return try context.count(for: FetchRequest<LedgerBatch>())
                }
                held.append(context)
                emit("pinned \(index) sees \(counted)")
            } catch {
                emit("error \(error)")
                break
            }
            index += 1
        }
        emit("holding \(held.count)")
        while true {
            try? await Task.sleep(for: .seconds(3_600))
            withExtendedLifetime(held) {}
        }
    }

    private func emit(_ line: String) {
        let text = line.replacingOccurrences(of: "\n", with: " ") + "\n"
        text.withCString { _ = write(output, $0, strlen($0)) }
    }
}
