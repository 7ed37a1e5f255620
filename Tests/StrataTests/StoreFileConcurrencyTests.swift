import Foundation
@testable import Strata
import StrataLMDB
import StrataTesting
import Testing

@Suite("Store file concurrency")
struct StoreFileConcurrencyTests {
    @Test func readersSeeWholeCommitsWhileAWriterWrites() throws {
        // Timeline:
        //   pinned:   ReadSnapshot ─────────────────────────────────────────── read (0 notes)
        //   writer:        100 × write { 5 notes at priority r; folder.position = 5r }
        //   readers:       3 threads × 200 × read { count, folder, index agree }
        // Every read transaction must see one whole commit: the note count equals the
        // folder's position, and the newest round's index entries are all there.
        let directory = TemporaryDirectory()
        let store = try StoreFixtures.open(directory)
        let folder = try store.insert("Folder", ["position": .integer(0)])
        let position = try #require(store.entities["Folder"]?.attributeSlot(named: "position"))
        let pinned = try store.environment.makeSnapshot()

        let writerError = TestBox<(any Error)?>(nil)
        let writer = TestThread {
            do {
                for round in 1...100 {
                    try store.write { writer in
                        for _ in 0..<5 {
                            let id = try writer.makePermanentID(for: "Note")
                            try writer.insert(store.snapshot(id, ["priority": .integer(Int64(round))]))
                        }
                        try writer.update(store.snapshot(folder, version: UInt64(round), ["position": .integer(Int64(5 * round))]))
                    }
                }
            } catch {
                writerError.value = error
            }
        }
        let inconsistencies = (0..<3).map { _ in TestBox(0) }
        let readers = inconsistencies.map { mine in
            TestThread {
                for _ in 0..<200 {
                    let consistent = try? store.read { reader throws -> Bool in
                        let count = try reader.count(of: "Note", includesSubentities: true)
                        guard case .integer(let total)? = try reader.snapshot(of: folder)?.attributes[position] else { return false }
                        let round = total / 5
                        let newest = try reader.primaryKeys(entity: "Note", attribute: "priority", in: .equal(to: .integer(round)))
                        return count == total && newest?.count == (round == 0 ? 0 : 5)
                    }
                    if consistent != true { mine.value += 1 }
                }
            }
        }
        #expect(writer.join())
        for reader in readers { #expect(reader.join()) }
        #expect(writerError.value == nil, "\(String(describing: writerError.value))")
        #expect(inconsistencies.map(\.value) == [0, 0, 0])

        #expect(try store.read { try $0.count(of: "Note", includesSubentities: false) } == 500)
        let old = try store.read(in: pinned) { reader throws in
            (try reader.count(of: "Note", includesSubentities: false), try reader.snapshot(of: folder)?.version)
        }
        #expect(old.0 == 0 && old.1 == 1)
    }
}
