import Foundation
@testable import Strata
import StrataPostgres
import Testing

/// Items whose titles are unique across the whole hierarchy: the constraint is declared by
/// the abstract `Item`, whose books and films live in tables of their own on PostgreSQL.
class UniqueItem: ManagedObject {
    override class var entityName: String { "UniqueItem" }
    override class var isAbstractEntity: Bool { true }
    override class var uniquenessConstraints: [[String]] { [["title"]] }
    @Attribute var title: String = ""
}

final class UniqueBook: UniqueItem {
    override class var entityName: String { "UniqueBook" }
    @Attribute var pages: Int32 = 0
}

final class UniqueFilm: UniqueItem {
    override class var entityName: String { "UniqueFilm" }
    @Attribute var minutes: Int32 = 0
}

@Suite("Uniqueness constraints of an entity hierarchy on both stores")
struct BothStoresUniquenessTests {
    static let model: ManagedObjectModel = {
        do {
            return try ManagedObjectModel(types: [UniqueBook.self, UniqueFilm.self])
        } catch {
            preconditionFailure("the uniqueness model is invalid: \(error)")
        }
    }()

    /// Saves one book (or film) titled `title` in a new context of `coordinator`; the error, if any.
    static func save(book: Bool, _ title: String, in coordinator: PersistentStoreCoordinator, policy: MergePolicy = .error) async -> StrataError? {
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        context.mergePolicy = policy
        return await context.perform { context -> StrataError? in
            do {
                let item: UniqueItem = book ? UniqueBook() : UniqueFilm()
                item.title = title
                try context.insert(item)
                try context.save()
                return nil
            } catch {
                return error as? StrataError
            }
        }
    }

    /// Every item's entity and title, sorted.
    static func items(in coordinator: PersistentStoreCoordinator) async throws -> [String] {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.fetch(FetchRequest<UniqueItem>()).map { "\($0.entity.name) \($0.title)" }.sorted()
        }
    }

    @Test("a title a book holds cannot be a film's: the constraint holds across the sub-entities' tables, its conflict naming the entity that declares it and the stored holder",
          arguments: StoreKind.allCases)
    func acrossSubentities(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let coordinator = try await store.instance(model: Self.model)
        #expect(await Self.save(book: true, "x", in: coordinator) == nil)
        let error = await Self.save(book: false, "x", in: coordinator)
        #expect(error?.code == .constraintConflicts, "\(String(describing: error))")
        let conflict = error?.constraintConflicts.first
        #expect(conflict?.entityName == "UniqueItem" && conflict?.existingObjectID?.entityName == "UniqueBook", "\(String(describing: conflict))")
        #expect(await Self.save(book: false, "y", in: coordinator) == nil)
        #expect(try await Self.items(in: coordinator) == ["UniqueBook x", "UniqueFilm y"])
    }

    @Test("contexts of several instances claiming one title at once, in different sub-entities: exactly one wins, every other save fails with a conflict",
          arguments: StoreKind.allCases)
    func racingClaims(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let coordinators = [try await store.instance(model: Self.model), try await store.instance(model: Self.model)]
        for round in 0..<5 {
            let errors = await withTaskGroup(of: StrataError?.self) { group in
                for worker in 0..<6 {
                    group.addTask {
                        await Self.save(book: worker % 2 == 0, "t\(round)", in: coordinators[worker % 2])
                    }
                }
                return await group.reduce(into: [StrataError?]()) { $0.append($1) }
            }
            #expect(errors.filter { $0 == nil }.count == 1, "round \(round): \(errors)")
            #expect(errors.compactMap { $0 }.allSatisfy { $0.code == .constraintConflicts }, "round \(round): \(errors)")
        }
        #expect(try await Self.items(in: coordinators[0]).count == 5)
    }

    @Test("a batch update that gives a film a book's title fails with the conflict, writing nothing", arguments: StoreKind.allCases)
    func batchUpdateAcrossSubentities(kind: StoreKind) async throws {
        let store = BothStoresTestStore(kind)
        let coordinator = try await store.instance(model: Self.model)
        #expect(await Self.save(book: true, "x", in: coordinator) == nil)
        #expect(await Self.save(book: false, "y", in: coordinator) == nil)
        var rename = BatchUpdateRequest(entityName: "UniqueFilm")
        rename.propertiesToUpdate = ["title": .constant("x")]
        let error = #expect(throws: StrataError.self) { _ = try coordinator.execute(rename) }
        #expect(error?.code == .constraintConflicts && error?.constraintConflicts.first?.existingObjectID?.entityName == "UniqueBook",
                "\(String(describing: error))")
        #expect(try await Self.items(in: coordinator) == ["UniqueBook x", "UniqueFilm y"])
    }
}
