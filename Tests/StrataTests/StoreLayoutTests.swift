@testable import Strata
import StrataLMDB
import StrataTesting
import Foundation
import Testing

@Suite("Store layout")
struct StoreLayoutTests {
    @Test func primaryKeysRoundTripInNumericByteOrder() throws {
        let values: [UInt64] = [1, 2, 255, 256, 65_535, 1 << 32, .max - 1, .max]
        let keys = values.compactMap(PrimaryKey.init)
        #expect(keys.count == values.count)
        for key in keys {
            let decoded = key.encoded.withUnsafeBytes { PrimaryKey(encoded: $0) }
            #expect(decoded == key)
        }
        // Byte order equals numeric order, which is what LMDB sorts by.
        let encoded = keys.map(\.encoded)
        #expect(encoded == encoded.sorted { $0.lexicographicallyPrecedes($1) })
        #expect(PrimaryKey(.max)?.successor == nil)
        #expect(PrimaryKey(41)?.successor == PrimaryKey(42))
        #expect(PrimaryKey(7)?.description == "p7")
    }

    @Test func malformedKeysDecodeToNil() {
        #expect(PrimaryKey(0) == nil)
        for bytes: [UInt8] in [[], [1], [0, 0, 0, 0, 0, 0, 0, 1, 0], [0, 0, 0, 0, 0, 0, 0, 0]] {
            #expect(bytes.withUnsafeBytes { PrimaryKey(encoded: $0) } == nil)
        }
    }

    @Test func databaseNamesDoNotCollide() {
        let names: Set<String> = [
            StoreLayout.metadataDatabase, StoreLayout.historyDatabase,
            StoreLayout.rowsDatabase(entity: "Note"), StoreLayout.rowsDatabase(entity: "Folder"),
            StoreLayout.indexDatabase(entity: "Note", attribute: "title"),
            StoreLayout.indexDatabase(entity: "Note", attribute: "date"),
        ]
        #expect(names.count == 6)
    }

    @Test func rowsAppendInKeyOrderOnTheRealStore() throws {
        let directory = TemporaryDirectory()
        let env = try Environment(path: directory.appending("store"))
        let rows = try env.openDatabase(named: StoreLayout.rowsDatabase(entity: "Note"), flags: .create)
        try env.write { txn in
            for raw in UInt64(1)...300 {
                try txn.put(Array("row \(raw)".utf8), forKey: PrimaryKey(raw)!.encoded, in: rows, flags: .append)
            }
        }
        let keys = try env.read { txn in
            var keys: [UInt64] = []
            try txn.scan(rows) { key, _ in
                keys.append(PrimaryKey(encoded: key)!.rawValue)
                return .continue
            }
            return keys
        }
        #expect(keys == Array(1...300))
        #expect(StrataRelease.current.description == "Strata 0.1.0 (store format 1)")
    }
}
