import Foundation
import Strata
import StrataReliability
import StrataTesting
import Testing

/// The bad-input contract in one place: every way a user can hand Strata something
/// wrong (a store location, a store's files, a URI, a name, a value) ends in a typed
/// error, writes nothing, and leaves the context usable. Library code never traps on it.
///
/// Damaged store files are opened in a child process (`strata-reliability open-probe`):
/// LMDB trusts its pages, so a crash there must end only the probe, and the test fails on
/// any signal. See `BadInputTests+Damage.swift`.
@Suite("Bad input")
struct BadInputTests {
    /// A coordinator of the ledger model with a store at `url` holding one customer with two
    /// accounts and one batch; returns the coordinator and a root context.
    static func ledger(at url: URL) async throws -> (PersistentStoreCoordinator, ManagedObjectContext) {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: LedgerModel.model)
        try await coordinator.addPersistentStore(type: .lmdb, at: url, options: quickOptions)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let customer = LedgerCustomer()
            customer.name = "c1"
            try context.insert(customer)
            for name in ["c1.a0", "c1.a1"] {
                let account = LedgerAccount()
                account.name = name
                account.balance = 100
                account.customer = customer
                try context.insert(account)
            }
            let batch = LedgerBatch()
            batch.sequence = 0
            batch.digest = "first"
            try context.insert(batch)
            try context.save()
        }
        return (coordinator, context)
    }

    static var quickOptions: PersistentStore.Options {
        var options = PersistentStore.Options()
        options.durability = .noSync
        return options
    }

    /// Whether `error` is a `StrataError` of the kind `name` (`incompatibleStore`, ...).
    static func isCase(_ error: (any Error)?, _ name: String) -> Bool {
        guard let error = error as? StrataError else { return false }
        return error.code.description == name
    }

    // MARK: Store locations

    @Test("a store location that is a file: a typed error from the coordinator and from a container; the file is untouched")
    func locationIsAFile() async throws {
        let directory = TemporaryDirectory()
        let file = directory.appending("Ledger.strata")
        #expect(FileManager.default.createFile(atPath: file, contents: Data("not a store".utf8)))
        let url = URL(fileURLWithPath: file)

        let coordinator = PersistentStoreCoordinator(managedObjectModel: LedgerModel.model)
        let direct = await #expect(throws: StrataError.self) { try await coordinator.addPersistentStore(type: .lmdb, at: url) }
        #expect(Self.isCase(direct, "incompatibleStore"), "\(String(describing: direct))")
        #expect(coordinator.persistentStores.isEmpty)

        let container = PersistentContainer(name: "Ledger", managedObjectModel: LedgerModel.model)
        container.persistentStoreDescriptions = [PersistentStoreDescription(url: url)]
        let loading = await #expect(throws: PersistentContainerError.self) { try await container.loadPersistentStores() }
        #expect(loading?.failures.count == 1)
        #expect(Self.isCase(loading?.failures.first?.error, "incompatibleStore"))
        #expect(FileManager.default.contents(atPath: file) == Data("not a store".utf8))
    }

    @Test("a store directory that cannot be created (under a file, under /proc): a typed error, nothing created")
    func locationCannotBeCreated() async throws {
        let directory = TemporaryDirectory()
        let file = directory.appending("plain")
        #expect(FileManager.default.createFile(atPath: file, contents: Data()))
        for url in [
            URL(fileURLWithPath: file).appendingPathComponent("stores/Ledger.strata", isDirectory: true),
            URL(fileURLWithPath: "/proc/strata-cannot-exist/Ledger.strata", isDirectory: true),
        ] {
            let coordinator = PersistentStoreCoordinator(managedObjectModel: LedgerModel.model)
            let error = await #expect(throws: StrataError.self) { try await coordinator.addPersistentStore(type: .lmdb, at: url) }
            #expect(Self.isCase(error, "incompatibleStore"), "\(url.path): \(String(describing: error))")
            #expect(coordinator.persistentStores.isEmpty)
            let container = PersistentContainer(name: "Ledger", managedObjectModel: LedgerModel.model)
            container.persistentStoreDescriptions = [PersistentStoreDescription(url: url)]
            let loading = await #expect(throws: PersistentContainerError.self) { try await container.loadPersistentStores() }
            #expect(Self.isCase(loading?.failures.first?.error, "incompatibleStore"), "\(url.path)")
        }
        #expect(FileManager.default.contents(atPath: file) == Data())
    }

    @Test("a location that is not a file URL, or no location, or a read-only store that does not exist: a typed error")
    func notAFileURL() async throws {
        let directory = TemporaryDirectory()
        var readOnly = PersistentStore.Options()
        readOnly.readOnly = true
        let cases: [(URL?, PersistentStore.Options)] = [
            (URL(string: "https://example.com/Ledger.strata"), .init()),
            (URL(string: "x-strata://6F1E7B0C-2A9D-4E51-9C3B-0D8F7A6E5B41/LedgerBatch/p1"), .init()),
            (nil, .init()),
            (directory.url.appendingPathComponent("missing.strata"), readOnly),
        ]
        for (url, options) in cases {
            let coordinator = PersistentStoreCoordinator(managedObjectModel: LedgerModel.model)
            let error = await #expect(throws: StrataError.self) {
                try await coordinator.addPersistentStore(type: .lmdb, at: url, options: options)
            }
            #expect(Self.isCase(error, "incompatibleStore"), "\(String(describing: url)): \(String(describing: error))")
            let container = PersistentContainer(name: "Ledger", managedObjectModel: LedgerModel.model)
            container.persistentStoreDescriptions = [PersistentStoreDescription(url: url, options: options)]
            await #expect(throws: PersistentContainerError.self) { try await container.loadPersistentStores() }
        }
        #expect(!FileManager.default.fileExists(atPath: directory.appending("missing.strata")))
    }

    @Test("with automatic migration off, a store of another model version is refused, writable or read-only, through a coordinator or a container, and stays byte for byte as it was")
    func anotherModelVersion() async throws {
        let directory = TemporaryDirectory()
        let url = directory.url.appendingPathComponent("Ledger.strata", isDirectory: true)
        do {
            _ = try await Self.ledger(at: url)
        }
        let data = url.appendingPathComponent("data.mdb")
        let before = try Data(contentsOf: data)

        final class Other: ManagedObject {
            @Attribute var name: String = ""
        }
        let other = try ManagedObjectModel(types: [LedgerCustomer.self, LedgerAccount.self, LedgerBatch.self, Other.self])
        for readOnly in [false, true] {
            var options = PersistentStore.Options()
            options.readOnly = readOnly
            options.shouldMigrateStoreAutomatically = false
            let coordinator = PersistentStoreCoordinator(managedObjectModel: other)
            let error = await #expect(throws: StrataError.self) { try await coordinator.addPersistentStore(type: .lmdb, at: url, options: options) }
            guard let error, error.code == .modelMismatch, let store = error.storeName, let storeHash = error.storeHash,
                  let modelHash = error.modelHash else {
                Issue.record("expected modelMismatch, got \(String(describing: error))")
                continue
            }
            #expect(store == url.path && storeHash == LedgerModel.model.versionHash && modelHash == other.versionHash)
            let container = PersistentContainer(name: "Ledger", managedObjectModel: other)
            container.persistentStoreDescriptions = [PersistentStoreDescription(url: url, options: options)]
            let loading = await #expect(throws: PersistentContainerError.self) { try await container.loadPersistentStores() }
            #expect(Self.isCase(loading?.failures.first?.error, "modelMismatch"))
        }
        #expect(try Data(contentsOf: data) == before, "the refused store changed")
        // The right model still opens it.
        let coordinator = PersistentStoreCoordinator(managedObjectModel: LedgerModel.model)
        try await coordinator.addPersistentStore(type: .lmdb, at: url)
        #expect(try await coordinator.checkIntegrity().isConsistent)
    }

    // MARK: Object-ID URIs

    @Test("malformed object-ID URIs resolve to nil: garbage, wrong scheme, another store, unknown or abstract entity, bad keys, extra parts")
    func malformedURIs() async throws {
        let directory = TemporaryDirectory()
        let (coordinator, context) = try await Self.ledger(at: directory.url.appendingPathComponent("Ledger.strata"))
        let id = try await context.perform { context in try context.fetch(FetchRequest<LedgerBatch>())[0].objectID }
        let store = try #require(id.storeIdentifier).uuidString
        #expect(coordinator.managedObjectID(forURIRepresentation: id.uriRepresentation) == id)
        let temporary = "x-strata:///LedgerBatch/t\(UUID().uuidString)"
        #expect(coordinator.managedObjectID(forURIRepresentation: URL(string: temporary)!)?.isTemporaryID == true)

        let refused = [
            "garbage", "", "/", "x-strata:", "x-strata://", "x-strata:///", "mailto:someone@example.com",
            "https://\(store)/LedgerBatch/p1", "x-strata-other://\(store)/LedgerBatch/p1", "file:///\(store)/LedgerBatch/p1",
            "x-strata://\(UUID().uuidString)/LedgerBatch/p1",  // another store
            "x-strata://not-a-uuid/LedgerBatch/p1", "x-strata://\(store.dropLast())/LedgerBatch/p1",
            "x-strata://\(store)/Nothing/p1", "x-strata://\(store)/ManagedObject/p1", "x-strata://\(store)//p1",
            "x-strata://\(store)/1Batch/p1", "x-strata://\(store)/Ledger%20Batch/p1",
            "x-strata://\(store)/LedgerBatch/p0", "x-strata://\(store)/LedgerBatch/p", "x-strata://\(store)/LedgerBatch/pabc",
            "x-strata://\(store)/LedgerBatch/p-1", "x-strata://\(store)/LedgerBatch/p+1", "x-strata://\(store)/LedgerBatch/p01",
            "x-strata://\(store)/LedgerBatch/p1.5", "x-strata://\(store)/LedgerBatch/p18446744073709551616",
            "x-strata://\(store)/LedgerBatch/p1/extra", "x-strata://\(store)/LedgerBatch", "x-strata://\(store)/p1",
            "x-strata://\(store)/LedgerBatch/q1", "x-strata://\(store)/LedgerBatch/p1?x=1", "x-strata://\(store)/LedgerBatch/p1#f",
            "x-strata://user@\(store)/LedgerBatch/p1", "x-strata://\(store):80/LedgerBatch/p1",
            "x-strata://\(store)/LedgerBatch/t\(UUID().uuidString)",  // a temporary ID names no store
            "x-strata:///LedgerBatch/tnot-a-uuid", "x-strata:///LedgerBatch/p1",
        ]
        for text in refused {
            guard let url = URL(string: text) else { continue }
            #expect(coordinator.managedObjectID(forURIRepresentation: url) == nil, "\(text) resolved")
        }
        for bytes in [[UInt8](repeating: 0xFF, count: 40), Array("x-strata://\u{0}/A/p1".utf8)] {
            if let url = URL(string: String(decoding: bytes, as: UTF8.self)) {
                #expect(coordinator.managedObjectID(forURIRepresentation: url) == nil)
            }
        }
    }

    @Test("decoding a ManagedObjectID from garbage JSON throws a DecodingError")
    func objectIDFromGarbageJSON() throws {
        let store = UUID().uuidString
        let good = try JSONDecoder().decode(ManagedObjectID.self, from: Data("\"x-strata://\(store)/LedgerBatch/p7\"".utf8))
        #expect(good.entityName == "LedgerBatch" && good.storeIdentifier?.uuidString == store)
        let garbage = [
            "", "null", "42", "true", "{}", "[]", "[\"x-strata://\(store)/LedgerBatch/p7\"]", "\"\"", "\"garbage\"",
            "\"x-strata://\(store)/LedgerBatch/p0\"", "\"https://\(store)/LedgerBatch/p7\"", "{\"uri\": \"x\"}",
            "\"x-strata://\(store)/LedgerBatch/p7", "\u{FF}\u{FE}", "\"\\ud800\"",
        ]
        for text in garbage {
            #expect(throws: DecodingError.self, "\(text)") { try JSONDecoder().decode(ManagedObjectID.self, from: Data(text.utf8)) }
        }
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(ManagedObjectID.self, from: Data([0xC3, 0x28, 0x00, 0xFF])) }
    }

    // MARK: Unknown names

    @Test("unknown entities and keys in requests, predicates, sort descriptors and key-value calls: typed errors, nothing written, the context still usable")
    func unknownNames() async throws {
        let directory = TemporaryDirectory()
        let (coordinator, context) = try await Self.ledger(at: directory.url.appendingPathComponent("Ledger.strata"))
        // A predicate is parsed without a model: unknown keys parse, and fail at fetch time.
        let unknownKey = try FetchPredicate(format: "nope == %@", 1)
        let throughAttribute = try FetchPredicate(format: "name.length == 1")
        let throughRelationship = try FetchPredicate(format: "customer.nope == 1")
        let throughToMany = try FetchPredicate(format: "ANY accounts.nope == 1")

        try await context.perform { context in
            func expectError(_ expected: StrataError, _ what: String, _ body: () throws -> Void) {
                do {
                    try body()
                    Issue.record("\(what): no error")
                } catch let error as StrataError {
                    #expect(error == expected, "\(what)")
                } catch {
                    Issue.record("\(what): \(type(of: error)) \(error), not a StrataError")
                }
            }
            let accounts = FetchRequest<LedgerAccount>()
            var request = FetchRequest<ManagedObject>(entityName: "Nothing")
            expectError(.unknownEntity("Nothing"), "fetch of an unknown entity") { _ = try context.fetch(request) }
            expectError(.unknownEntity("Nothing"), "count of an unknown entity") { _ = try context.count(for: request) }
            request.entityName = ""
            expectError(.unknownEntity(""), "fetch of an empty entity name") { _ = try context.fetch(request) }

            var bad = accounts
            bad.predicate = unknownKey
            expectError(.unknownKey(key: "nope", entity: "LedgerAccount"), "predicate on an unknown key") { _ = try context.fetch(bad) }
            expectError(.unknownKey(key: "nope", entity: "LedgerAccount"), "count with an unknown key") { _ = try context.count(for: bad) }
            bad.predicate = throughRelationship
            expectError(.unknownKey(key: "nope", entity: "LedgerCustomer"), "through a to-one") { _ = try context.fetch(bad) }
            bad.predicate = throughAttribute
            do {
                _ = try context.fetch(bad)
                Issue.record("a key path through an attribute fetched")
            } catch {
                #expect(Self.isCase(error, "unknownKey"), "\(error)")
            }
            var customers = FetchRequest<LedgerCustomer>()
            customers.predicate = throughToMany
            expectError(.unknownKey(key: "nope", entity: "LedgerAccount"), "through a to-many") { _ = try context.fetch(customers) }

            bad = accounts
            bad.sortDescriptors = [FetchSortDescriptor(key: "nope")]
            expectError(.unknownKey(key: "nope", entity: "LedgerAccount"), "sort on an unknown key") { _ = try context.fetch(bad) }
            bad.sortDescriptors = [FetchSortDescriptor(key: "customer.accounts")]
            expectError(.unknownKey(key: "accounts", entity: "LedgerCustomer"), "sort through a to-many") { _ = try context.fetch(bad) }
            bad.sortDescriptors = []
            bad.propertiesToFetch = ["name", "nope"]
            bad.resultType = .dictionary
            expectError(.unknownKey(key: "nope", entity: "LedgerAccount"), "propertiesToFetch") { _ = try context.fetch(bad) }
            bad = accounts
            bad.relationshipKeyPathsForPrefetching = ["customer.nope"]
            expectError(.unknownKey(key: "nope", entity: "LedgerCustomer"), "prefetching") { _ = try context.fetch(bad) }

            // A typed request renamed to another entity: a type mismatch, never a trap.
            var renamed = FetchRequest<LedgerAccount>()
            renamed.entityName = "LedgerBatch"
            do {
                _ = try context.fetch(renamed)
                Issue.record("a LedgerAccount request fetched LedgerBatch objects")
            } catch {
                #expect(Self.isCase(error, "typeMismatch"), "\(error)")
            }
            renamed.fetchBatchSize = 1
            do {
                _ = try context.fetchedResults(for: renamed)
                Issue.record("batched results of the wrong type")
            } catch {
                #expect(Self.isCase(error, "typeMismatch"), "\(error)")
            }

            let account = try context.fetch(accounts)[0]
            expectError(.unknownKey(key: "nope", entity: "LedgerAccount"), "value(forKey:)") { _ = try account.value(forKey: "nope") }
            expectError(.unknownKey(key: "nope", entity: "LedgerAccount"), "setValue") { try account.setValue(1, forKey: "nope") }
            expectError(.unknownKey(key: "", entity: "LedgerAccount"), "setValue, empty key") { try account.setValue(1, forKey: "") }
            expectError(.unknownKey(key: "customer.name", entity: "LedgerAccount"), "a key path is not a key") {
                _ = try account.value(forKey: "customer.name")
            }

            // An object of an entity the model lacks cannot be inserted.
            final class Stranger: ManagedObject {
                @Attribute var name: String = ""
            }
            do {
                try context.insert(Stranger())
                Issue.record("an object of another model was inserted")
            } catch {
                #expect(Self.isCase(error, "unknownEntity"), "\(error)")
            }

            let changed = context.hasChanges
            #expect(!changed, "a refused call left changes")
            try context.save()
            #expect(try context.count(for: accounts) == 2, "the context is still usable")
        }
        #expect(try await coordinator.checkIntegrity().isConsistent)
    }

    // MARK: Values of the wrong type

    /// A colour, for a transformable attribute.
    struct Colour: Codable, Sendable, Hashable {
        var red: Double
    }

    /// One entity with an attribute of every type, and relationships to itself and to `Tag`.
    static let everyTypeModel: ManagedObjectModel = {
        do {
            return try ManagedObjectModel(entities: [
                EntityDescription(name: "Sample", attributes: [
                    AttributeDescription(name: "i16", type: .integer16, isIndexed: true),
                    AttributeDescription(name: "i32", type: .integer32),
                    AttributeDescription(name: "i64", type: .integer64, isIndexed: true),
                    AttributeDescription(name: "double", type: .double, isIndexed: true),
                    AttributeDescription(name: "float", type: .float),
                    AttributeDescription(name: "flag", type: .boolean, isIndexed: true),
                    AttributeDescription(name: "text", type: .string, isIndexed: true),
                    AttributeDescription(name: "date", type: .date, isIndexed: true),
                    AttributeDescription(name: "data", type: .binaryData),
                    AttributeDescription(name: "uuid", type: .uuid, isIndexed: true),
                    AttributeDescription(name: "url", type: .uri),
                    AttributeDescription(name: "decimal", type: .decimal),
                    AttributeDescription(name: "colour", type: .transformable(Colour.self)),
                ], relationships: [
                    RelationshipDescription(name: "parent", destinationEntityName: "Sample", inverseName: "children"),
                    RelationshipDescription(name: "children", destinationEntityName: "Sample", inverseName: "parent", isToMany: true),
                    RelationshipDescription(name: "tags", destinationEntityName: "Tag", inverseName: "samples", isToMany: true, isOrdered: true),
                ]),
                EntityDescription(name: "Tag", attributes: [AttributeDescription(name: "label", type: .string)], relationships: [
                    RelationshipDescription(name: "samples", destinationEntityName: "Sample", inverseName: "tags", isToMany: true),
                ]),
            ])
        } catch {
            preconditionFailure("the every-type model is invalid: \(error)")
        }
    }()

    @Test("values of the wrong type for every attribute type family and every relationship shape: typeMismatch, nothing changed or written")
    func wrongTypes() async throws {
        let directory = TemporaryDirectory()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: Self.everyTypeModel)
        try await coordinator.addPersistentStore(type: .lmdb, at: directory.url.appendingPathComponent("Samples.strata"), options: Self.quickOptions)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let sample = ManagedObject(entity: Self.everyTypeModel.entitiesByName["Sample"]!)
            let other = ManagedObject(entity: Self.everyTypeModel.entitiesByName["Sample"]!)
            let tag = ManagedObject(entity: Self.everyTypeModel.entitiesByName["Tag"]!)
            for object in [sample, other, tag] { try context.insert(object) }
            try sample.setValue("kept", forKey: "text")
            try sample.setValue(Int16(3), forKey: "i16")
            try context.save()

            let wrong: [(String, Any?)] = [
                ("i16", "3"), ("i16", 3.0), ("i16", Int64(3)), ("i16", 70_000), ("i16", true), ("i16", Decimal(3)),
                ("i32", Int16(3)), ("i32", Int.max), ("i64", Double.nan), ("i64", UInt64.max), ("i64", "9"),
                ("double", Float(1)), ("double", 1), ("double", "1.5"), ("double", Decimal(1.5)),
                ("float", 1.5), ("float", 1), ("flag", 1), ("flag", "true"), ("flag", 0.0),
                ("text", 5), ("text", Character("x")), ("text", Substring("sub")),
                ("text", Data("x".utf8)), ("text", ["a"]), ("date", "2024-01-01"), ("date", 0.0), ("date", Date.timeIntervalSinceReferenceDate),
                ("data", [UInt8]([1, 2])), ("data", "bytes"), ("uuid", UUID().uuidString), ("uuid", Data(count: 16)),
                ("url", "https://example.com"), ("url", URLComponents(string: "https://example.com")!),
                ("decimal", 1.5), ("decimal", "1.5"), ("colour", "red"), ("colour", ["red": 1.0]),
                ("colour", Colour(red: .nan)), ("colour", AttributeValue.transformable(Data("not json".utf8))),
                ("colour", AttributeValue.transformable(Data(#"{"blue":1}"#.utf8))),
                ("text", AttributeValue.integer(1)), ("i16", AttributeValue.integer(1 << 40)), ("double", AttributeValue.float(1)),
                ("parent", tag), ("parent", [other]), ("parent", Set([other])), ("parent", "other"), ("parent", other.objectID),
                ("children", other), ("children", [tag]), ("children", [other, other]), ("children", ["a", "b"]),
                ("children", Set(["a"])), ("children", [other.objectID]), ("children", [1: other]),
                ("tags", Set([tag])), ("tags", [other]), ("tags", tag), ("tags", [tag, tag]),
            ]
            for (key, value) in wrong {
                do {
                    try sample.setValue(value, forKey: key)
                    Issue.record("\(key) = \(String(describing: value)) (\(type(of: value))) was accepted")
                } catch let error as StrataError where error.code == .typeMismatch {
                    #expect(error.key == key && error.entityName == "Sample")
                } catch {
                    Issue.record("\(key) = \(String(describing: value)): \(error), not typeMismatch")
                }
            }
            let changed = context.hasChanges
            #expect(!changed, "a refused value left a change")
            #expect(try sample.value(forKey: "text") as? String == "kept")
            #expect(try sample.value(forKey: "i16") as? Int16 == 3)
            #expect(try sample.value(forKey: "children") as? Set<ManagedObject> == [])
            #expect(try sample.value(forKey: "parent") == nil)
            try context.save()
        }
        // A fresh context reads what the first one saved, nothing else.
        let fresh = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await fresh.perform { context in
            var request = FetchRequest<ManagedObject>(entityName: "Sample")
            request.predicate = try FetchPredicate(format: "text == %@", "kept")
            let samples = try context.fetch(request)
            #expect(samples.count == 1)
            #expect(try samples.first?.value(forKey: "i16") as? Int16 == 3)
        }
        #expect(try await coordinator.checkIntegrity().isConsistent)
    }

    @Test("predicate arguments of the wrong type for an attribute: no error, no coercion; they match what the evaluator matches (nothing, or numbers by value), indexed or not")
    func predicateArgumentsOfTheWrongType() async throws {
        let directory = TemporaryDirectory()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: Self.everyTypeModel)
        try await coordinator.addPersistentStore(type: .lmdb, at: directory.url.appendingPathComponent("Samples.strata"), options: Self.quickOptions)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            for n in 0..<6 {
                let sample = ManagedObject(entity: Self.everyTypeModel.entitiesByName["Sample"]!)
                try context.insert(sample)
                try sample.setValue(Int16(n), forKey: "i16")
                try sample.setValue(Int64(n), forKey: "i64")
                try sample.setValue(Int32(n), forKey: "i32")
                try sample.setValue(Double(n) / 2, forKey: "double")
                try sample.setValue(n % 2 == 0, forKey: "flag")
                try sample.setValue("s\(n)", forKey: "text")
                try sample.setValue(Date(timeIntervalSinceReferenceDate: Double(n)), forKey: "date")
                try sample.setValue(UUID(), forKey: "uuid")
            }
            try context.save()
            context.reset()
            let huge = 1e300, date = Date(timeIntervalSinceReferenceDate: 2)
            // (format, argument, expected count): what PredicateEvaluator's rules give.
            let cases: [(String, any Sendable, Int)] = [
                ("i64 == %@", "3", 0), ("i64 == %@", date, 0), ("i64 == %@", UUID(), 0), ("i64 == %@", Data([3]), 0),
                ("i64 < %@", 2.5, 3), ("i64 > %@", 2.5, 3), ("i64 == %@", 3.0, 1), ("i64 == %@", 3.5, 0), ("i64 == %@", true, 1),
                ("i64 < %@", huge, 6), ("i64 > %@", -huge, 6), ("i64 > %@", huge, 0), ("i64 == %@", Double.nan, 0),
                ("i64 < %@", Double.infinity, 6), ("i64 < %@", Decimal(string: "2.5")!, 3), ("i64 IN %@", ["1", 2, 3.0, date] as [any Sendable], 2),
                ("i64 BETWEEN %@", ["a", 3] as [any Sendable], 0), ("i16 > %@", Int64.max, 0), ("i16 < %@", Int64.min, 0), ("i32 == %@", Int64(1 << 40), 0),
                ("text == %@", 3, 0), ("text > %@", 3, 0), ("text BEGINSWITH %@", 3, 0), ("text IN %@", [1, "s1", 2.5] as [any Sendable], 1),
                ("text < %@", date, 0), ("text == %@", Data("s1".utf8), 0), ("text CONTAINS %@", UUID(), 0),
                ("double == %@", "1.5", 0), ("double == %@", 1, 2 - 1), ("double > %@", Int64.max, 0), ("double >= %@", Float(1.5), 3),
                ("flag == %@", 1, 3), ("flag == %@", "true", 0), ("flag == %@", 2, 0), ("flag > %@", 0, 3),
                ("date > %@", 1.0, 0), ("date == %@", "2001-01-01", 0), ("date < %@", date, 2),
                ("uuid == %@", "6F1E7B0C-2A9D-4E51-9C3B-0D8F7A6E5B41", 0), ("uuid > %@", 1, 0), ("i64 == %@", String?.none as any Sendable, 0),
                ("url == %@", "https://example.com", 0), ("decimal > %@", "1", 0), ("colour == %@", 1, 0),
            ]
            for (format, argument, expected) in cases {
                var request = FetchRequest<ManagedObject>(entityName: "Sample")
                request.predicate = try FetchPredicate(format: format, argument)
                do {
                    let found = try context.fetch(request)
                    #expect(found.count == expected, "\(format) with \(argument): \(found.count) objects")
                    #expect(try context.count(for: request) == expected, "count: \(format) with \(argument)")
                    // The same predicate evaluated in memory (the objects are registered now) agrees.
                    var all = FetchRequest<ManagedObject>(entityName: "Sample")
                    all.returnsObjectsAsFaults = false
                    let matching = try context.fetch(all).filter { try request.predicate!.evaluate(with: $0) }
                    #expect(matching.count == expected, "in memory: \(format) with \(argument)")
                } catch {
                    Issue.record("\(format) with \(argument): \(error)")
                }
            }
            let changed = context.hasChanges
            #expect(!changed)
        }
    }

    @Test("fetch windows out of range (negative, huge offsets and limits, negative batch sizes) never trap and give the windowed results")
    func fetchWindowsOutOfRange() async throws {
        let directory = TemporaryDirectory()
        let (_, context) = try await Self.ledger(at: directory.url.appendingPathComponent("Ledger.strata"))
        try await context.perform { context in
            // Pending changes make the fetch merge store rows with unsaved objects.
            for pending in [false, true] {
                if pending {
                    let account = LedgerAccount()
                    account.name = "c1.a2"
                    try context.insert(account)
                }
                let total = pending ? 3 : 2
                let windows: [(offset: Int, limit: Int, batch: Int, expected: Int)] = [
                    (-5, 0, 0, total), (-5, 1, 0, 1), (-1, 2, 0, 2), (0, -3, 0, total), (Int.max, 1, 0, 0), (Int.max, Int.max, 0, 0),
                    (1, Int.max, 0, total - 1), (Int.min, Int.max, 0, total), (0, 0, -4, total), (0, Int.max, Int.max, total),
                    (Int.max - 1, 2, 1, 0), (2, Int.max - 1, 0, total - 2),
                ]
                for window in windows {
                    for sorted in [false, true] {
                        var request = FetchRequest<LedgerAccount>()
                        request.fetchOffset = window.offset
                        request.fetchLimit = window.limit
                        request.fetchBatchSize = window.batch
                        if sorted { request.sortDescriptors = [FetchSortDescriptor(key: "name")] }
                        let what = "pending \(pending), sorted \(sorted), \(window)"
                        #expect(try context.fetch(request).count == window.expected, "\(what)")
                        #expect(try context.count(for: request) == window.expected, "count: \(what)")
                        request.predicate = try FetchPredicate(format: "name BEGINSWITH %@", "c1")
                        #expect(try context.fetch(request).count == window.expected, "indexed: \(what)")
                        let results = try context.fetchedResults(for: request)
                        let (count, names) = (results.count, results.map(\.name).count)
                        #expect(count == window.expected && names == window.expected, "results: \(what)")
                    }
                }
            }
            context.rollback()
        }
    }
}
