import Foundation
import Testing
@testable import Strata

/// FetchRequest's fields, key checks against the model, and in-memory sorting.
@Suite struct FetchRequestTests {
    @Test func defaultsMatchCoreData() {
        let request = FetchRequest<Note>()
        #expect(request.entityName == "Note")
        #expect(request.predicate == nil && request.sortDescriptors.isEmpty)
        #expect(request.fetchLimit == 0 && request.fetchOffset == 0 && request.fetchBatchSize == 0)
        #expect(request.resultType == .managedObject)
        #expect(request.returnsObjectsAsFaults && request.includesPendingChanges && request.includesSubentities)
        #expect(request.relationshipKeyPathsForPrefetching.isEmpty && request.propertiesToFetch.isEmpty)
    }

    @Test func describesItself() throws {
        var request = FetchRequest<ManagedObjectID>(entityName: "Note")
        request.predicate = try FetchPredicate(format: "priority >= 3")
        request.sortDescriptors = [FetchSortDescriptor(key: "title"), FetchSortDescriptor(key: "priority", ascending: false)]
        request.fetchLimit = 20
        #expect(request.description.hasPrefix("FetchRequest(Note where "))
        #expect(request.description.hasSuffix("sorted by title ASC, priority DESC limit 20)"))
    }

    @Test func isSendableToAnotherTask() async throws {
        var request = FetchRequest<Note>()
        request.predicate = try FetchPredicate(format: "title == %@", "x")
        let copy = request
        let entity = await Task.detached { copy.entityName }.value
        #expect(entity == "Note")
    }

    @Test func unknownKeysNameTheKeyAndTheEntity() throws {
        let model = NotesModel.model
        var request = FetchRequest<Note>()
        #expect(try request.validate(in: model).name == "Note")
        request.predicate = try FetchPredicate(format: "folder.colour == 1")
        #expect(throws: StrataError.unknownKey(key: "colour", entity: "Folder")) { try request.validate(in: model) }
        request.predicate = try FetchPredicate(format: "ANY tags.label == 'x' AND folder.notes.@count > 2 AND notes.@avg.priority > 1")
        #expect(throws: StrataError.unknownKey(key: "notes", entity: "Note")) { try request.validate(in: model) }
        request.predicate = try FetchPredicate(format: "title.length == 1")
        #expect(throws: StrataError.self) { try request.validate(in: model) }
        request.predicate = try FetchPredicate(format: "priority == $P")
        #expect(throws: FetchPredicateError.self) { try request.validate(in: model) }
        request.predicate = try FetchPredicate(format: "ANY tags.label == 'x' AND folder.notes.@count > 2 AND folder.notes.@avg.priority > 1")
        _ = try request.validate(in: model)

        request.sortDescriptors = [FetchSortDescriptor(key: "folder.name")]
        _ = try request.validate(in: model)
        request.sortDescriptors = [FetchSortDescriptor(key: "tags.label")]
        #expect(throws: StrataError.unknownKey(key: "tags", entity: "Note")) { try request.validate(in: model) }
        request.sortDescriptors = [FetchSortDescriptor(key: "folder")]
        #expect(throws: StrataError.self) { try request.validate(in: model) }
        request.sortDescriptors = []
        request.propertiesToFetch = ["title", "nope"]
        #expect(throws: StrataError.unknownKey(key: "nope", entity: "Note")) { try request.validate(in: model) }
        request.propertiesToFetch = []
        request.relationshipKeyPathsForPrefetching = ["folder.notes", "tags.nope"]
        #expect(throws: StrataError.unknownKey(key: "nope", entity: "Tag")) { try request.validate(in: model) }
        #expect(throws: StrataError.unknownEntity("Spaceship")) { try FetchRequest<ManagedObject>(entityName: "Spaceship").validate(in: model) }
    }

    @Test func sortingIsStableAndHandlesNilAndOptions() throws {
        let notes = ["b", "B", nil, "a", "á", "b"].map { title -> Note in
            let note = Note()
            note.body = title
            return note
        }
        // Give them ascending permanent IDs, so ties follow this order.
        let owner = FakeOwner(model: NotesModel.model)
        for note in notes { note.objectID = owner.makeID("Note") }
        func sorted(_ descriptors: [FetchSortDescriptor]) throws -> [String] {
            try notes.map(ObjectSubject.init).sorted { try FetchSorting.precedes($0, $1, by: descriptors) }
                .map { ($0.object as? Note)?.body ?? "nil" }
        }
        #expect(try sorted([FetchSortDescriptor(key: "body")]) == ["nil", "B", "a", "b", "b", "á"])
        #expect(try sorted([FetchSortDescriptor(key: "body", ascending: false)]) == ["á", "b", "b", "a", "B", "nil"])
        #expect(try sorted([FetchSortDescriptor(key: "body", comparison: .caseInsensitive)]) == ["nil", "a", "b", "B", "b", "á"])
        #expect(try sorted([FetchSortDescriptor(key: "body", comparison: .localized)]) == ["nil", "a", "á", "b", "B", "b"])
    }

    @Test func sortingThroughToOneRelationships() throws {
        let folders = ["Z", "A"].map { name -> Folder in
            let folder = Folder()
            folder.name = name
            return folder
        }
        let notes = (0..<4).map { index -> Note in
            let note = Note()
            note.priority = Int16(index)
            note.folder = folders[index % 2]
            return note
        }
        let order = try notes.map(ObjectSubject.init).sorted {
            try FetchSorting.precedes($0, $1, by: [
                FetchSortDescriptor(key: "folder.name"), FetchSortDescriptor(key: "priority", ascending: false),
            ])
        }.map { ($0.object as? Note)?.priority ?? -1 }
        #expect(order == [3, 1, 2, 0])
    }
}
