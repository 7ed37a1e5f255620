import Foundation
@testable import Strata
import Testing

/// ``StoreFile/forEachRecord(of:_:)`` (the read of a batch of faults) steps its cursor to
/// keys a few entries on and searches for the others: whatever the order and gaps of the
/// keys asked for, it must find exactly what a search per key finds, in the order asked,
/// each record handed over with its own object.
@Suite("Row reads by key")
struct RowReadOrderTests {
    @Test("keys in order, with gaps, backwards, repeated, missing, deleted and past the end: the same rows as one search per key")
    func cursorStepsMatchSearches() async throws {
        let coordinator = try await ContextReference.inMemory()
        let ids = try await ContextReference.saveNotes((0..<60).map { ("note \($0)", Int16(1)) }, on: coordinator)
        // Some rows deleted, so that stepping meets holes.
        let deleted = Set([ids[10], ids[11], ids[12], ids[30], ids[59]])
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            for id in deleted { try context.delete(try context.existingObject(with: id)) }
            try context.save()
        }
        let keys = ids.compactMap { $0.primaryKey?.rawValue }
        try #require(keys.count == 60 && keys == keys.sorted())
        let store = try #require(coordinator.persistentStores.first?.file)
        let last = keys[59]
        let entity = try #require(coordinator.managedObjectModel.entitiesByName["Note"])

        func read(_ wanted: [UInt64]) throws -> [(UInt64, [UInt8])] {
            let objects = wanted.map { key in
                let object = entity.managedObjectClass.init(entity: entity)
                object.rowKey = key
                return object
            }
            var rows: [(UInt64, [UInt8])] = []
            try store.forEachRecord(of: objects) { object, storage, key, record in
                #expect(object.rowKey == key.rawValue && storage.name == "Note")
                rows.append((key.rawValue, Array(record)))
            }
            return rows
        }
        // The oracle: one run (one search) per key.
        func searched(_ wanted: [UInt64]) throws -> [(UInt64, [UInt8])] {
            try wanted.flatMap { try read([$0]) }
        }
        let patterns: [[UInt64]] = [
            keys,                                                   // every key, in order
            Array(keys[5..<25]),                                    // a run through deleted rows
            stride(from: 0, to: 60, by: 3).map { keys[$0] },        // small gaps
            stride(from: 0, to: 60, by: 13).map { keys[$0] },       // gaps beyond a few steps
            keys.reversed(),                                        // backwards: every key searched
            [keys[3], keys[3], keys[4], keys[4]],                   // repeated keys
            [keys[9], keys[10], keys[11], keys[13]],                // deleted keys asked for
            [keys[57], keys[58], last, last + 1, last + 2, keys[0]],  // past the end, then back
            [0, keys[1], 1_000_000, keys[2]],                       // no such rows (0 is never a key)
            [],
        ]
        for wanted in patterns {
            let stepped = try read(wanted), oracle = try searched(wanted)
            #expect(stepped.map(\.0) == oracle.map(\.0), "keys for \(wanted)")
            #expect(stepped.map(\.1) == oracle.map(\.1), "records for \(wanted)")
            let deletedKeys = Set(deleted.compactMap { $0.primaryKey?.rawValue })
            #expect(stepped.allSatisfy { !deletedKeys.contains($0.0) })
        }
        // Every key asked for that exists is found.
        #expect(try read(keys).count == 55)
    }
}
