import Foundation
@_spi(StorageInternals) @testable import Strata
import StrataLMDB
import StrataTesting
import Testing

@Suite("Store file")
struct StoreFileTests {
    // MARK: Opening

    @Test func createsAndReopensWithTheSameIdentityAndSchema() throws {
        let directory = TemporaryDirectory()
        let identifier: UUID, schema: StoreSchema, createdAt: Date
        do {
            let store = try StoreFixtures.open(directory)
            identifier = store.identifier
            schema = store.schema
            createdAt = store.metadata.createdAt
            #expect(store.metadata.formatVersion == StoreLayout.formatVersion)
            #expect(store.metadata.modelVersionHash == store.model.versionHash)
            #expect(schema == StoreSchema(assigningNumbersFor: store.model))
            let names = Set(try store.environment.databaseNames())
            for expected in [
                "strata.metadata", "strata.history", "rows:Folder", "rows:Note", "rows:Checklist",
                "index:Note.title", "index:Checklist.title", "index:Folder.created", "index:Note.created",
                "links:Folder.notes", "links:Note.tags", "links:Checklist.tags", "links:Playlist.tracks",
            ] {
                #expect(names.contains(expected), "missing \(expected)")
            }
            // An abstract entity has no rows, indexes or links of its own.
            #expect(!names.contains("rows:Item") && !names.contains("index:Item.created"))
            #expect(names.count == StoreFile.databaseCount(for: store.model))
        }
        let reopened = try StoreFixtures.open(directory)
        #expect(reopened.identifier == identifier)
        #expect(reopened.schema == schema)
        #expect(reopened.metadata.createdAt == createdAt)
    }

    @Test func aDifferentModelIsRefusedAndTheStoreIsLeftUntouched() throws {
        let directory = TemporaryDirectory()
        let model = try StoreFixtures.model()
        do {
            let store = try StoreFixtures.open(directory, model: model)
            try store.insert("Note", ["title": .string("kept")])
        }
        let path = directory.appending("store")
        let dataFile = URL(fileURLWithPath: path + "/data.mdb")
        let bytesBefore = try Data(contentsOf: dataFile)
        let namesBefore = try Self.databaseNames(at: path)

        let changed = try StoreFixtures.changedModel()
        #expect(changed.versionHash != model.versionHash)
        let error = #expect(throws: StrataError.self) { try StoreFixtures.open(directory, model: changed) }
        #expect(error == .modelMismatch(
            store: path, storeHash: model.versionHash, modelHash: changed.versionHash, changes: ["add attribute Note.extra"]))
        #expect(error?.modelChanges == ["add attribute Note.extra"])
        #expect(error?.description.contains(model.versionHash) == true && error?.description.contains(changed.versionHash) == true)
        #expect(error?.description.hasSuffix("what differs:\n- add attribute Note.extra") == true)

        #expect(try Data(contentsOf: dataFile) == bytesBefore)
        #expect(try Self.databaseNames(at: path) == namesBefore)
        // Still a good store for its own model.
        #expect(try StoreFixtures.open(directory, model: model).read { try $0.count(of: "Note", includesSubentities: false) } == 1)
    }

    @Test func anLMDBEnvironmentWithoutStrataMetadataIsIncompatible() throws {
        let directory = TemporaryDirectory()
        let path = directory.appending("store")
        do {
            let env = try Environment(path: path, configuration: StoreFixtures.configuration)
            let other = try env.openDatabase(named: "someone-else", flags: .create)
            try env.write { txn throws in try txn.put([1], forKey: [1], in: other) }
        }
        let error = #expect(throws: StrataError.self) { try StoreFixtures.open(directory) }
        guard let error, error.code == .incompatibleStore, let store = error.storeName, let reason = error.reason else {
            Issue.record("expected incompatibleStore, got \(String(describing: error))")
            return
        }
        #expect(store == path && reason.contains("no Strata metadata") && reason.contains("someone-else"))
        #expect(try Self.databaseNames(at: path) == ["someone-else"])
    }

    @Test func aDamagedModelDescriptionIsRefusedAndTheStoreIsLeftUntouched() throws {
        let directory = TemporaryDirectory()
        let path = directory.appending("store")
        do { _ = try StoreFixtures.open(directory) }
        do {
            let env = try Environment(path: path, configuration: StoreFixtures.configuration)
            let metadata = try env.openDatabase(named: "strata.metadata")
            try env.write { txn throws in try txn.put(Array("{\"entities\": 3}".utf8), forKey: Array("modelDescription".utf8), in: metadata) }
        }
        let dataFile = URL(fileURLWithPath: path + "/data.mdb")
        let bytesBefore = try Data(contentsOf: dataFile)
        let error = #expect(throws: StrataError.self) { try StoreFixtures.open(directory) }
        #expect(error?.code == .incompatibleStore && error?.storeName == path)
        #expect(error?.reason?.contains("its metadata is damaged: the stored model description does not decode") == true, "\(String(describing: error))")
        #expect(try Data(contentsOf: dataFile) == bytesBefore)
    }

    @Test func anEmptyLMDBEnvironmentBecomesAStore() throws {
        let directory = TemporaryDirectory()
        do { _ = try Environment(path: directory.appending("store"), configuration: StoreFixtures.configuration) }
        let store = try StoreFixtures.open(directory)
        #expect(try store.read { try $0.count(of: "Note", includesSubentities: true) } == 0)
    }

    @Test(arguments: [
        ("schema", [9, 9, 9] as [UInt8], "damaged"),
        ("uuid", [1, 2, 3], "damaged"),
        ("created", [1], "damaged"),
        ("model", [0xFF, 0xFE], "damaged"),
        ("format", [0, 0, 0, 99], "newer"),
        ("format", [0, 0, 0, 0], "damaged"),
    ])
    func corruptMetadataIsATypedError(key: String, value: [UInt8], reason: String) throws {
        let directory = TemporaryDirectory()
        let path = directory.appending("store")
        do { _ = try StoreFixtures.open(directory) }
        do {
            let env = try Environment(path: path, configuration: StoreFixtures.configuration)
            let metadata = try env.openDatabase(named: StoreLayout.metadataDatabase)
            try env.write { txn throws in try txn.put(value, forKey: Array(key.utf8), in: metadata) }
        }
        let error = #expect(throws: StrataError.self) { try StoreFixtures.open(directory) }
        guard let error, error.code == .incompatibleStore, let store = error.storeName, let message = error.reason else {
            Issue.record("expected incompatibleStore, got \(String(describing: error))")
            return
        }
        #expect(store == path && message.contains(reason), "\(message)")
    }

    @Test func aCorruptPrimaryKeySequenceIsATypedError() throws {
        let directory = TemporaryDirectory()
        let path = directory.appending("store")
        do { _ = try StoreFixtures.open(directory) }
        do {
            let env = try Environment(path: path, configuration: StoreFixtures.configuration)
            let metadata = try env.openDatabase(named: StoreLayout.metadataDatabase)
            try env.write { txn throws in try txn.put([1, 2], forKey: Array("seq:Note".utf8), in: metadata) }
        }
        let store = try StoreFixtures.open(directory)
        let error = #expect(throws: StrataError.self) { try store.insert("Note") }
        guard let error, error.code == .incompatibleStore, let reason = error.reason else {
            Issue.record("expected incompatibleStore, got \(String(describing: error))")
            return
        }
        #expect(reason.contains("sequence of Note"))
    }

    @Test func readOnlyStoresReadButNeverWrite() throws {
        let directory = TemporaryDirectory()
        #expect(throws: StrataError.self) { try StoreFixtures.open(directory, "missing", readOnly: true) }
        #expect(!FileManager.default.fileExists(atPath: directory.appending("missing")))

        let id: ManagedObjectID
        do { id = try StoreFixtures.open(directory).insert("Note", ["title": .string("read me")]) }
        let store = try StoreFixtures.open(directory, readOnly: true)
        #expect(store.isReadOnly)
        #expect(try store.value("title", of: id) == .string("read me"))
        #expect(throws: StrataError.storage(.readOnly)) { try store.insert("Note") }
    }

    // MARK: Rows

    static func everyAttribute() throws -> [String: AttributeValue?] {
        [
            "created": .date(Date(timeIntervalSinceReferenceDate: 12.5)),
            "title": .string("Groceries ✓ \u{0}with a NUL"),
            "priority": .integer(-3),
            "count32": .integer(Int64(Int32.max)),
            "rating": .double(-0.25),
            "score": .float(1.5),
            "done": .boolean(true),
            "due": .date(Date(timeIntervalSinceReferenceDate: -86_400)),
            "payload": .binaryData(Data([0, 1, 255])),
            "token": .uuid(UUID()),
            "link": .uri(URL(string: "https://example.com/a?b=c")!),
            "amount": .decimal(Decimal(string: "12.345")!),
            "colour": .transformable(try JSONEncoder().encode(StoreTestColour(red: 1, green: 0.5, blue: 0))),
        ]
    }

    @Test func everyAttributeTypeRoundTripsIncludingNil() throws {
        let directory = TemporaryDirectory()
        let store = try StoreFixtures.open(directory)
        let values = try Self.everyAttribute()
        var withTransient = values
        withTransient["scratch"] = .string("never stored")
        let full = try store.insert("Note", withTransient)
        let empty = try store.insert("Note")

        let expected = store.snapshot(full, version: 1, values)
        #expect(try store.stored(full) == expected)
        #expect(try store.stored(empty) == store.snapshot(empty, version: 1))

        // Everything to nil, then back: nil is stored as the absence of the field.
        let cleared = try store.write { writer in try writer.update(store.snapshot(full, version: 1)) }
        #expect(cleared == 2)
        #expect(try store.stored(full) == store.snapshot(full, version: 2))
        try store.write { writer in try writer.update(store.snapshot(full, version: 2, values)) }
        #expect(try store.stored(full) == store.snapshot(full, version: 3, values))

        // A missing row is nil, not an error.
        let missing = ManagedObjectID(store: store.identifier, entityName: "Note", primaryKey: PrimaryKey(999)!)
        #expect(try store.stored(missing) == nil)
    }

    @Test func versionsBumpAndStaleWritesConflict() throws {
        let directory = TemporaryDirectory()
        let store = try StoreFixtures.open(directory)
        let id = try store.insert("Note", ["title": .string("a")])
        #expect(try store.stored(id)?.version == 1)
        #expect(try store.write { try $0.update(store.snapshot(id, version: 1, ["title": .string("b")])) } == 2)

        #expect(throws: StoreWriteError.conflict([StoreConflict(objectID: id, expectedVersion: 1, storedVersion: 2)])) {
            try store.write { try $0.update(store.snapshot(id, version: 1, ["title": .string("stale")])) }
        }
        #expect(throws: StoreWriteError.conflict([StoreConflict(objectID: id, expectedVersion: 1, storedVersion: 2)])) {
            try store.write { try $0.delete(id, expectedVersion: 1) }
        }
        #expect(try store.value("title", of: id) == .string("b"))

        #expect(try store.write { try $0.delete(id, expectedVersion: 2) })
        #expect(throws: StoreWriteError.conflict([StoreConflict(objectID: id, expectedVersion: 2, storedVersion: nil)])) {
            try store.write { try $0.update(store.snapshot(id, version: 2, ["title": .string("gone")])) }
        }
        #expect(try store.write { try $0.delete(id, expectedVersion: nil) } == false)
    }

    @Test func aBatchReportsEveryConflictAndWritesNothing() throws {
        let directory = TemporaryDirectory()
        let store = try StoreFixtures.open(directory)
        let first = try store.insert("Note", ["title": .string("one")])
        let second = try store.insert("Note", ["title": .string("two")])
        let third = try store.insert("Tag", ["label": .string("three")])
        try store.write { writer in
            for id in [first, second, third] { try writer.update(store.snapshot(id, version: 1)) }
        }
        let error = #expect(throws: StoreWriteError.self) {
            try store.write { writer in
                var changes = StoreChanges()
                changes.inserted = [store.snapshot(try writer.makePermanentID(for: "Note"), ["title": .string("new")])]
                changes.updated = [store.snapshot(first, version: 1), store.snapshot(second, version: 2)]
                changes.deleted = [.init(objectID: third, expectedVersion: 1)]
                return try writer.apply(changes)
            }
        }
        #expect(error == .conflict([
            StoreConflict(objectID: first, expectedVersion: 1, storedVersion: 2),
            StoreConflict(objectID: third, expectedVersion: 1, storedVersion: 2),
        ]))
        #expect(try store.read { try $0.count(of: "Note", includesSubentities: true) } == 2)
        #expect(try store.stored(third)?.version == 2)

        let versions = try store.write { writer in
            var changes = StoreChanges()
            let new = try writer.makePermanentID(for: "Note")
            changes.inserted = [store.snapshot(new, ["title": .string("new")])]
            changes.updated = [store.snapshot(second, version: 2, ["title": .string("two!")])]
            changes.deleted = [.init(objectID: third, expectedVersion: 2)]
            return (new, try writer.apply(changes))
        }
        #expect(versions.1 == [versions.0: 1, second: 3])
        #expect(try store.stored(third) == nil)
    }

    @Test func badInputIsATypedErrorAndWritesNothing() throws {
        let directory = TemporaryDirectory()
        let store = try StoreFixtures.open(directory)
        let tag = try store.insert("Tag")
        func attempt(_ body: (inout StoreWriter) throws -> Void) -> StrataError? {
            #expect(throws: StrataError.self) { try store.write(body) }
        }
        let temporary = ManagedObjectID(temporaryFor: "Note")
        guard let temporaryError = attempt({ try $0.insert(store.snapshot(temporary)) }), temporaryError.code == .invalidObjectState,
              temporaryError.objectID == temporary else {
            Issue.record("a temporary ID must be refused")
            return
        }
        let foreign = ManagedObjectID(store: UUID(), entityName: "Note", primaryKey: PrimaryKey(1)!)
        guard let foreignError = attempt({ try $0.insert(store.snapshot(foreign)) }), foreignError.code == .invalidObjectState,
              foreignError.objectID == foreign, let reason = foreignError.reason else {
            Issue.record("an ID of another store must be refused")
            return
        }
        #expect(reason.contains(store.identifier.uuidString))
        guard let twiceError = attempt({ try $0.insert(store.snapshot(tag)) }), twiceError.code == .invalidObjectState,
              twiceError.objectID == tag else {
            Issue.record("inserting a stored row twice must be refused")
            return
        }
        guard let titleError = attempt({ writer in
            try writer.insert(store.snapshot(try writer.makePermanentID(for: "Note"), ["title": .integer(1)]))
        }), titleError.code == .typeMismatch, titleError.key == "title", titleError.entityName == "Note", titleError.expectedType == "string" else {
            Issue.record("a value of the wrong type must be refused")
            return
        }
        guard let priorityError = attempt({ writer in
            try writer.insert(store.snapshot(try writer.makePermanentID(for: "Note"), ["priority": .integer(100_000)]))
        }), priorityError.code == .typeMismatch, priorityError.key == "priority", priorityError.entityName == "Note" else {
            Issue.record("an integer16 out of range must be refused")
            return
        }
        guard let folderError = attempt({ writer in
            try writer.insert(store.snapshot(try writer.makePermanentID(for: "Note"), relationships: ["folder": .toOne(tag)]))
        }), folderError.code == .typeMismatch, folderError.key == "folder", folderError.entityName == "Note", folderError.expectedType == "Folder",
              folderError.actualType == "Tag" else {
            Issue.record("a destination of the wrong entity must be refused")
            return
        }
        guard attempt({ _ = try $0.makePermanentID(for: "Item") })?.code == .invalidObjectState else {
            Issue.record("an abstract entity has no IDs")
            return
        }
        #expect(attempt { _ = try $0.makePermanentID(for: "Nope") } == .unknownEntity("Nope"))
        #expect(throws: StrataError.unknownEntity("Nope")) {
            try store.read { try $0.snapshot(of: ManagedObjectID(store: store.identifier, entityName: "Nope", primaryKey: PrimaryKey(1)!)) }
        }
        #expect(try store.read { try $0.count(of: "Note", includesSubentities: true) } == 0)
    }

    @Test func primaryKeysAreNeverReused() throws {
        let directory = TemporaryDirectory()
        var keys: [UInt64] = []
        do {
            let store = try StoreFixtures.open(directory)
            let ids = try (0..<3).map { _ in try store.insert("Note") }
            keys += ids.compactMap { $0.primaryKey?.rawValue }
            try store.write { try $0.delete(ids[2], expectedVersion: nil) }
            keys.append(try store.insert("Note").primaryKey!.rawValue)
            #expect(try store.insert("Tag").primaryKey?.rawValue == 1)  // one sequence per entity
        }
        do {
            let store = try StoreFixtures.open(directory)
            try store.write { writer in
                for key in keys { try writer.delete(store.objectID(entity: "Note", key: PrimaryKey(key)!), expectedVersion: nil) }
            }
        }
        let store = try StoreFixtures.open(directory)
        keys.append(try store.insert("Note").primaryKey!.rawValue)
        #expect(keys == [1, 2, 3, 4, 5])
        // A key stored under an ID made elsewhere moves the sequence past it.
        try store.write { try $0.insert(store.snapshot(store.objectID(entity: "Note", key: PrimaryKey(10)!))) }
        #expect(try store.insert("Note").primaryKey?.rawValue == 11)
    }

    @Test func aThrowInsideWriteLeavesNothing() throws {
        struct Boom: Error {}
        let directory = TemporaryDirectory()
        let store = try StoreFixtures.open(directory)
        let folder = try store.insert("Folder", ["name": .string("Inbox")])
        #expect(throws: Boom.self) {
            try store.write { writer in
                let note = try writer.makePermanentID(for: "Note")
                try writer.insert(store.snapshot(note, ["title": .string("lost")], relationships: ["folder": .toOne(folder)]))
                try writer.update(store.snapshot(folder, version: 1, ["name": .string("Renamed")]))
                try writer.delete(folder, expectedVersion: nil)
                throw Boom()
            }
        }
        #expect(try store.read { try $0.count(of: "Note", includesSubentities: true) } == 0)
        #expect(try store.rawKeys(of: "index:Note.title").isEmpty)
        #expect(try store.rawKeys(of: "links:Folder.notes").isEmpty)
        #expect(try store.stored(folder) == store.snapshot(folder, version: 1, ["name": .string("Inbox")]))
        #expect(try store.insert("Note").primaryKey?.rawValue == 1)  // the aborted key was never recorded
    }
}

// MARK: - Scans and damaged rows

extension StoreFileTests {
    @Test func scansAndCountsCoverSubEntitiesOnRequest() throws {
        let directory = TemporaryDirectory()
        let store = try StoreFixtures.open(directory)
        let notes = try (1...3).map { n in try store.insert("Note", ["priority": .integer(Int64(n))]) }
        let checklist = try store.insert("Checklist", ["steps": .integer(4)])
        let folder = try store.insert("Folder")
        try store.read { reader throws in
            #expect(try reader.count(of: "Note", includesSubentities: false) == 3)
            #expect(try reader.count(of: "Note", includesSubentities: true) == 4)
            #expect(try reader.count(of: "Item", includesSubentities: true) == 5)
            #expect(try reader.count(of: "Item", includesSubentities: false) == 0)
            var seen: [ManagedObjectID] = []
            try reader.forEachRow(entity: "Item", includesSubentities: true) { snapshot in
                seen.append(snapshot.objectID)
                return true
            }
            #expect(seen == [checklist, folder] + notes)  // entity by entity, in name order
            seen = []
            try reader.forEachRow(entity: "Note", includesSubentities: false) { snapshot in
                seen.append(snapshot.objectID)
                return seen.count < 2
            }
            #expect(seen == Array(notes.prefix(2)))
        }
    }

    @Test func damagedRowsAreTypedErrorsAndUnknownFieldsAreIgnored() throws {
        let directory = TemporaryDirectory()
        let store = try StoreFixtures.open(directory)
        let note = try store.insert("Note", ["title": .string("fine")])
        let rows = try #require(store.entities["Note"]?.rows)
        let titleField = try #require(store.schema.fieldNumber(entity: "Note", property: "title"))
        let folderField = try #require(store.schema.fieldNumber(entity: "Note", property: "folder"))
        func storeRaw(_ bytes: [UInt8]) throws {
            try store.environment.write { txn throws in try txn.put(bytes, forKey: note.primaryKey!.encoded, in: rows) }
        }

        // A field this model does not know is ignored.
        try storeRaw(RecordCodec.encode(Record(version: 1, fields: [titleField: .string("fine"), 9_999: .integer(1)])))
        #expect(try store.stored(note) == store.snapshot(note, version: 1, ["title": .string("fine")]))

        for (damage, fields) in [
            ("title", [titleField: AttributeValue.integer(1)]),
            ("folder", [folderField: .binaryData(Data([1, 2, 3]))]),
            ("folder", [folderField: .foreignKey(RowReference(entityNumber: store.schema.entityNumber(of: "Tag")!, primaryKey: PrimaryKey(1)!))]),
        ] {
            try storeRaw(RecordCodec.encode(Record(version: 1, fields: fields)))
            let error = #expect(throws: StrataError.self) { try store.stored(note) }
            guard let error, error.code == .corruptRecord, error.entityName == "Note", error.primaryKey == 1,
                  let reason = error.reason else {
                Issue.record("expected corruptRecord, got \(String(describing: error))")
                continue
            }
            #expect(reason.contains(damage), "\(reason)")
        }
        try storeRaw([0xDE, 0xAD])
        #expect(throws: StrataError.self) { try store.stored(note) }
        #expect(throws: StrataError.self) {
            try store.read { try $0.forEachRow(entity: "Note", includesSubentities: false) { _ in true } }
        }
        // Deleting a damaged row is refused too (its index entries and links are unknown).
        #expect(throws: StrataError.self) { try store.write { try $0.delete(note, expectedVersion: nil) } }
    }
}

extension StoreFileTests {
    /// The named databases of the environment at `path`, opened read-only.
    static func databaseNames(at path: String) throws -> [String] {
        var configuration = StoreFixtures.configuration
        configuration.readOnly = true
        return try Environment(path: path, configuration: configuration).databaseNames()
    }
}
