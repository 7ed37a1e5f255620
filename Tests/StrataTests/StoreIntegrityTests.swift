import Foundation
@_spi(StorageInternals) @testable import Strata
import StrataLMDB
import StrataTesting
import Testing

/// `checkIntegrity()`: a store written by Strata is consistent; each kind of damage made
/// behind Strata's back is found and named.
@Suite("Store integrity")
struct StoreIntegrityTests {
    /// A store holding a folder with three notes (one-to-many), tags on the notes
    /// (many-to-many) and a person with a passport (one-to-one).
    static func populated(in directory: URL) async throws -> (PersistentStoreCoordinator, StoreFile, [String: ManagedObjectID]) {
        let coordinator = try await ContextReference.lmdb(in: directory)
        let ids = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let folder = Folder()
            folder.name = "Home"
            try context.insert(folder)
            let tag = Tag()
            tag.label = "urgent"
            try context.insert(tag)
            var ids: [String: ManagedObjectID] = [:]
            for title in ["rent", "milk", "plants"] {
                let note = Note()
                note.title = title
                try context.insert(note)
                note.folder = folder
                note.tags = [tag]
            }
            let person = Person()
            person.name = "Ada"
            let passport = Passport()
            passport.number = "X1"
            try context.insert(person)
            try context.insert(passport)
            person.passport = passport
            try context.save()
            for object in context.registeredObjects {
                let key = (object as? Note)?.title ?? String(describing: type(of: object))
                ids[key] = object.objectID
            }
            return ids
        }
        return (coordinator, try #require(coordinator.persistentStores.first?.file), ids)
    }

    @Test("a store written by Strata is consistent; the report counts rows, index entries and links")
    func consistentStore() async throws {
        let directory = TemporaryDirectory()
        let (coordinator, _, _) = try await Self.populated(in: directory.url)
        let report = try await coordinator.checkIntegrity()
        #expect(report.isConsistent, "\(report)")
        #expect(report.stores == 1)
        #expect(report.rows == 7)   // folder, tag, 3 notes, person, passport
        #expect(report.indexEntries == 3)   // Note.title
        #expect(report.links == 9)   // Folder.notes 3, Note.tags 3, Tag.notes 3
        #expect(report.description.hasPrefix("consistent: 1 store(s), 7 rows"))
    }

    enum Damage: String, CaseIterable, Sendable {
        case missingIndexEntry, strayIndexEntry, undecodableRow, rowDeletedUnderItsLinks
        case missingMirrorLink, foreignKeyWithoutLink, oneToOneNotPointingBack, sequenceBehindKeys
    }

    @Test("each kind of damage is found and named", arguments: Damage.allCases)
    func damageIsFound(_ damage: Damage) async throws {
        let directory = TemporaryDirectory()
        let (coordinator, file, ids) = try await Self.populated(in: directory.url)
        let rent = try #require(ids["rent"]?.primaryKey)
        let note = try #require(file.entities["Note"])
        let titleIndex = try #require(note.attributes[note.attributeSlot(named: "title")!].index)
        let noteNumber = note.number
        let environment = file.environment
        let expected: String
        switch damage {
        case .missingIndexEntry:
            let key = try #require(IndexLayout.key(.string("rent"), kind: .string, primaryKey: rent))
            try environment.write { txn throws in _ = try txn.delete(forKey: key, in: titleIndex) }
            expected = "has no entry in the index of title"
        case .strayIndexEntry:
            let key = try #require(IndexLayout.key(.string("ghost"), kind: .string, primaryKey: PrimaryKey(999)!))
            try environment.write { txn throws in try txn.put([UInt8](), forKey: key, in: titleIndex) }
            expected = "entries without a row"
        case .undecodableRow:
            try environment.write { txn throws in try txn.put([0xDE, 0xAD], forKey: rent.encoded, in: note.rows!) }
            expected = "does not decode"
        case .rowDeletedUnderItsLinks:
            try environment.write { txn throws in _ = try txn.delete(forKey: rent.encoded, in: note.rows!) }
            expected = "which does not exist"
        case .missingMirrorLink:
            let tag = try #require(file.entities["Tag"])
            let tagKey = try #require(ids["Tag"]?.primaryKey)
            let link = LinkLayout.key(
                owner: RowReference(entityNumber: tag.number, primaryKey: tagKey),
                destination: RowReference(entityNumber: noteNumber, primaryKey: rent))
            try environment.write { txn throws in _ = try txn.delete(forKey: link, in: tag.links(named: "notes")!) }
            expected = "which does not link back"
        case .foreignKeyWithoutLink:
            let folder = try #require(file.entities["Folder"])
            let folderKey = try #require(ids["Folder"]?.primaryKey)
            let link = LinkLayout.key(
                owner: RowReference(entityNumber: folder.number, primaryKey: folderKey),
                destination: RowReference(entityNumber: noteNumber, primaryKey: rent))
            try environment.write { txn throws in _ = try txn.delete(forKey: link, in: folder.links(named: "notes")!) }
            expected = "does not list it in notes"
        case .oneToOneNotPointingBack:
            let passport = try #require(file.entities["Passport"])
            let passportKey = try #require(ids["Passport"]?.primaryKey)
            let holderField = try #require(file.schema.fieldNumber(entity: "Passport", property: "holder"))
            let record = Record(version: 9, fields: [holderField: .foreignKey(RowReference(entityNumber: file.entities["Person"]!.number, primaryKey: PrimaryKey(77)!))])
            try environment.write { txn throws in try txn.put(RecordCodec.encode(record), forKey: passportKey.encoded, in: passport.rows!) }
            expected = "points back at"
        case .sequenceBehindKeys:
            try environment.write { txn throws in
                try txn.put(StoreMetadata.bigEndian(1), forKey: Array(StoreMetadata.Key.sequence(entity: "Note").utf8), in: file.metadataDatabase)
            }
            expected = "could reuse a key"
        }
        let report = try await coordinator.checkIntegrity()
        #expect(!report.isConsistent)
        #expect(report.problems.contains { $0.contains(expected) }, "\(damage): \(report)")
        #expect(report.description.contains("problem(s)"))
    }

    @Test("checks run while several contexts save: each reads one snapshot, and every report is consistent")
    func checksWhileSaving() async throws {
        let directory = TemporaryDirectory()
        let (coordinator, _, _) = try await Self.populated(in: directory.url)
        try await withThrowingTaskGroup(of: [IntegrityReport].self) { group in
            for writer in 0..<3 {
                group.addTask {
                    let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
                    for round in 0..<15 {
                        try await context.perform { context in
                            let note = Note()
                            note.title = "w\(writer)-\(round)"
                            try context.insert(note)
                            try context.save()
                        }
                    }
                    return []
                }
            }
            group.addTask {
                var reports: [IntegrityReport] = []
                for _ in 0..<10 { reports.append(try await coordinator.checkIntegrity()) }
                return reports
            }
            for try await reports in group {
                for report in reports { #expect(report.isConsistent, "\(report)") }
            }
        }
        let final = try await coordinator.checkIntegrity()
        #expect(final.isConsistent)
        #expect(final.indexEntries == 3 + 45)
    }
}
