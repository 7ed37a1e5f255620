import Foundation
import Logging
import Strata
import StrataTesting
import Testing

/// StrataTesting's fixtures, as users' own tests use them: a container per test from a
/// trait, captured logs, metrics and spans, waits with deadlines.
@Suite("StrataFixture", .strataStore(types: [Folder.self, Note.self]))
struct StrataFixtureTests {
    @Test("each test gets a loaded in-memory container of its own, with its metrics and spans captured")
    func ownContainer() async throws {
        let fixture = try #require(StrataFixture.current)
        try await fixture.container.performBackgroundTask { context in
            let note = Note()
            note.title = "one"
            try context.insert(note)
            try context.save()
        }
        let count = try await fixture.container.performBackgroundTask { try $0.count(for: FetchRequest<Note>()) }
        #expect(count == 1)
        #expect(fixture.metrics.counterTotal(label: StrataMetricName.saves) == 1)
        #expect(fixture.tracer.finishedSpans.contains { $0.operationName == "save" })
        #expect(fixture.logs.entries.contains { $0.message == "store opened" })
    }

    @Test("another test sees none of the first one's objects", arguments: [1, 2])
    func isolation(round: Int) async throws {
        let fixture = try #require(StrataFixture.current)
        let count = try await fixture.container.performBackgroundTask { try $0.count(for: FetchRequest<Note>()) }
        #expect(count == 0)
        try await fixture.container.performBackgroundTask { context in
            let note = Note()
            note.title = "round \(round)"
            try context.insert(note)
            try context.save()
        }
    }

    @Test("nextSave waits for a save made elsewhere, with a deadline; a wait that nothing satisfies times out")
    func waits() async throws {
        let fixture = try #require(StrataFixture.current)
        let context = fixture.container.newBackgroundContext()
        let saves = fixture.saves(of: context)
        Task {
            try await context.perform { context in
                let note = Note()
                note.title = "later"
                try context.insert(note)
                try context.save()
            }
        }
        let saved = try await saves.wait(forCount: 1)
        #expect(saved[0].insertedObjectIDs.count == 1)
        await #expect(throws: AsyncRecorder<ContextNotification>.Timeout.self) {
            try await saves.wait(forCount: 2, timeout: .milliseconds(50))
        }
        await saves.cancel()
        #expect(await eventually(timeout: .seconds(1)) { true })
    }
}

@Test("a fixture made directly, closed at the end: saves are refused after")
func directFixture() async throws {
    let fixture = try await StrataFixture(types: [Folder.self, Note.self])
    try await fixture.close()
    await #expect(throws: StrataError.coordinatorClosed) {
        try await fixture.container.performBackgroundTask { context in
            try context.insert(Note())
            try context.save()
        }
    }
}

@Test("storedVersion: 0 before the first save, one more after every save of the row, whoever saves it", .strataStore(types: [Folder.self, Note.self]))
func storedVersions() async throws {
    let container = try #require(StrataFixture.current).container
    let (id, first) = try await container.performBackgroundTask { context -> (ManagedObjectID, [UInt64]) in
        let note = Note()
        try context.insert(note)
        var versions = [try note.storedVersion()]
        try context.save()
        versions.append(try note.storedVersion())
        note.title = "changed"
        versions.append(try note.storedVersion())   // unsaved changes do not count
        try context.save()
        versions.append(try note.storedVersion())
        return (note.objectID, versions)
    }
    #expect(first == [0, 1, 1, 2])
    var update = BatchUpdateRequest(entityName: "Note")
    update.propertiesToUpdate = ["priority": .constant(3)]
    _ = try container.persistentStoreCoordinator.execute(update)
    let fresh = try await container.performBackgroundTask { context in
        try (context.existingObject(with: id) as! Note).storedVersion()
    }
    #expect(fresh == 3)
}
