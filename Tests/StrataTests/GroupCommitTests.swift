import Foundation
@testable import Strata
import StrataLocks
import StrataTesting
import Testing

/// Holds a coordinator's write queue with a job of its own until released, so that
/// saves pile up behind it and the next write job finds them all waiting.
final class WriteQueueGate: Sendable {
    private let entered = TestSignal()
    private let released = TestSignal()
    private let coordinator: PersistentStoreCoordinator

    /// Closes the gate: returns once the blocking job runs.
    init(_ coordinator: PersistentStoreCoordinator) async {
        self.coordinator = coordinator
        let (entered, released) = (entered, released)
        coordinator.writeQueue.async {
            entered.signal()
            released.wait()
        }
        _ = await signalled(entered)
    }

    /// Whether `count` saves wait for the write queue within 60 s.
    func waits(for count: Int) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(60)
        while coordinator.writeGroups.waitingCount < count {
            guard ContinuousClock.now < deadline else { return false }
            try? await Task.sleep(for: .milliseconds(2))
        }
        return true
    }

    /// Lets the write queue go on.
    func open() { released.signal() }
}

/// Group commit (issue 8): saves that arrive while a write runs share one LMDB commit,
/// each still atomic, conflict-checked on its own and acknowledged after the commit.
@Suite("Group commit")
struct GroupCommitTests {
    /// Inserts notes titled `titles` in a new context and saves; their IDs. Throws what the save throws.
    static func saveNotes(_ titles: [String], on coordinator: PersistentStoreCoordinator, name: String) -> Task<[ManagedObjectID], any Error> {
        Task {
            try await ManagedObjectContext(.privateQueue, coordinator: coordinator, name: name).perform { context in
                let notes = try titles.map { title in
                    let note = Note()
                    note.title = title
                    try context.insert(note)
                    return note
                }
                try context.save()
                return notes.map(\.objectID)
            }
        }
    }

    /// Every stored note's title, sorted.
    static func storedTitles(on coordinator: PersistentStoreCoordinator) async throws -> [String] {
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.fetch(ContextReference.notes()).map(\.title)
        }
    }

    /// Store options with a 1 MiB map, which a few hundred 2 KB notes fill.
    static var smallMap: PersistentStore.Options {
        var options = CoordinatorStoreTests.options
        options.mapSize = 1 << 20
        return options
    }

    /// `savers` contexts each inserting 150 notes of about 2 KB (titled "saver-index") and saving.
    static func saveLargeNotes(savers: Int, on coordinator: PersistentStoreCoordinator) -> [Task<Void, any Error>] {
        let body = String(repeating: "x", count: 2_000)
        return (0..<savers).map { saver in
            Task {
                try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
                    for index in 0..<150 {
                        let note = Note()
                        note.title = "\(saver)-\(index)"
                        note.body = body
                        try context.insert(note)
                    }
                    try context.save()
                }
            }
        }
    }

    @Test("saves that arrive during a write share one commit; each returns after it with its own permanent IDs")
    func savesShareOneCommit() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        #expect(coordinator.isGroupCommitEnabled)
        let before = coordinator.writeStatistics
        let gate = await WriteQueueGate(coordinator)
        let saves = (0..<4).map { saver in Self.saveNotes(["\(saver)a", "\(saver)b"], on: coordinator, name: "saver \(saver)") }
        #expect(await gate.waits(for: 4))
        gate.open()
        var ids: [ManagedObjectID] = []
        for save in saves { ids += try await save.value }

        #expect(ids.count == 8 && Set(ids).count == 8 && ids.allSatisfy { !$0.isTemporaryID })
        let after = coordinator.writeStatistics
        #expect(after.saves - before.saves == 4)
        #expect(after.commits - before.commits == 1)
        #expect(after.largestGroup == 4 && after.failedSaves == 0)
        #expect(try await Self.storedTitles(on: coordinator) == ["0a", "0b", "1a", "1b", "2a", "2b", "3a", "3b"])
    }

    @Test("a save of a group that conflicts fails alone, writing nothing; a later save sees an earlier one's writes")
    func conflictFailsAlone() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let noteID = try #require(try await ContextReference.saveNotes([("shared", 1)], on: coordinator).first)
        // Two contexts change the same note from the same row version.
        let first = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "first")
        let second = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "second")
        for context in [first, second] {
            try await context.perform { context in
                context.retainsRegisteredObjects = true  // the note stays registered between blocks
                _ = try context.existingObject(with: noteID)
            }
        }
        let before = coordinator.writeStatistics
        let gate = await WriteQueueGate(coordinator)
        let firstSave = Task {
            try await first.perform { context in
                try #require(context.registeredObject(for: noteID) as? Note).title = "first"
                try context.save()
            }
        }
        #expect(await gate.waits(for: 1))
        let secondSave = Task {
            try await second.perform { context in
                try #require(context.registeredObject(for: noteID) as? Note).title = "second"
                let extra = Note()
                extra.title = "second's new note"
                try context.insert(extra)
                try context.save()
            }
        }
        #expect(await gate.waits(for: 2))
        let third = Self.saveNotes(["third"], on: coordinator, name: "third")
        #expect(await gate.waits(for: 3))
        gate.open()

        try await firstSave.value
        let error = await #expect(throws: StrataError.self) { try await secondSave.value }
        guard let error, error.code == .mergeConflicts else {
            Issue.record("expected merge conflicts, got \(String(describing: error))")
            return
        }
        let conflicts = error.conflicts
        #expect(conflicts.map(\.objectID) == [noteID])
        #expect(conflicts.first?.oldVersion == 1 && conflicts.first?.newVersion == 2)
        _ = try await third.value

        let after = coordinator.writeStatistics
        #expect(after.commits - before.commits == 1)
        #expect(after.saves - before.saves == 2 && after.failedSaves - before.failedSaves == 1)
        #expect(try await Self.storedTitles(on: coordinator) == ["first", "third"])
        // The failed saver keeps its changes, as after any failed save.
        let pending = await second.perform { context in context.hasChanges }
        #expect(pending)
    }

    @Test("with group commit off, each save commits on its own")
    func groupCommitOff() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        coordinator.isGroupCommitEnabled = false
        #expect(!coordinator.isGroupCommitEnabled)
        let before = coordinator.writeStatistics
        let gate = await WriteQueueGate(coordinator)
        let saves = (0..<4).map { saver in Self.saveNotes(["\(saver)"], on: coordinator, name: "saver \(saver)") }
        #expect(coordinator.writeGroups.waitingCount == 0)
        try await Task.sleep(for: .milliseconds(50))
        gate.open()
        for save in saves { _ = try await save.value }
        let after = coordinator.writeStatistics
        #expect(after.saves - before.saves == 4 && after.commits - before.commits == 4)
        #expect(after.largestGroup == 1)
        #expect(try await Self.storedTitles(on: coordinator) == ["0", "1", "2", "3"])
    }

    @Test("a group that fills the map grows it, runs again and writes every save exactly once")
    func groupGrowsTheMap() async throws {
        let directory = TemporaryDirectory()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        let options = Self.smallMap
        let store = try await coordinator.addPersistentStore(at: directory.url.appendingPathComponent("Small.strata"), options: options)
        let gate = await WriteQueueGate(coordinator)
        let saves = Self.saveLargeNotes(savers: 4, on: coordinator)
        #expect(await gate.waits(for: 4))
        gate.open()
        for save in saves { try await save.value }
        #expect(store.file!.environment.info.mapSize > 1 << 20)
        let titles = try await Self.storedTitles(on: coordinator)
        #expect(titles.count == 600 && Set(titles).count == 600)
        let statistics = coordinator.writeStatistics
        #expect(statistics.commits == 1 && statistics.saves == 4)
    }

    @Test("when a group cannot grow the map (a pinned generation), each save is written alone and gets its own verdict")
    func storageFailureSplitsTheGroup() async throws {
        let directory = TemporaryDirectory()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        let options = Self.smallMap
        try await coordinator.addPersistentStore(at: directory.url.appendingPathComponent("Small.strata"), options: options)
        let pinned = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "pinned")
        try await pinned.perform { try $0.setQueryGenerationFrom(.current) }
        #expect(try await QueryGenerationTests.noteCount(in: pinned) == 0)  // the snapshot is open: no growth

        let gate = await WriteQueueGate(coordinator)
        let saves = Self.saveLargeNotes(savers: 4, on: coordinator)
        #expect(await gate.waits(for: 4))
        gate.open()
        var succeeded = 0
        for save in saves {
            do {
                try await save.value
                succeeded += 1
            } catch let error as StrataError where error.code == .storage {
                #expect(error.storageError == .mapFull)
            }
        }
        #expect(succeeded >= 1 && succeeded < 4)
        // Each save is all there or not at all.
        let titles = try await Self.storedTitles(on: coordinator)
        #expect(titles.count == 150 * succeeded)
        #expect(Set(titles.map { $0.prefix { $0 != "-" } }).count == succeeded)
        let statistics = coordinator.writeStatistics
        #expect(statistics.saves == succeeded && statistics.commits == succeeded && statistics.failedSaves == 4 - succeeded)
        #expect(try await QueryGenerationTests.noteCount(in: pinned) == 0)
    }

    @Test("a save over two stores is written on its own; the saves of one store share a commit")
    func multiStoreSaveWrittenAlone() async throws {
        let directory = TemporaryDirectory()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: try CoordinatorStoreTests.configuredModel())
        try await coordinator.addPersistentStore(
            configuration: "Notes", at: directory.url.appendingPathComponent("Notes.strata"), options: CoordinatorStoreTests.options)
        try await coordinator.addPersistentStore(
            configuration: "Media", at: directory.url.appendingPathComponent("Media.strata"), options: CoordinatorStoreTests.options)
        let gate = await WriteQueueGate(coordinator)
        let both = Task {
            try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
                let folder = Folder()
                folder.name = "both"
                try context.insert(folder)
                let playlist = Playlist()
                playlist.name = "both"
                try context.insert(playlist)
                try context.save()
                return [folder.objectID, playlist.objectID]
            }
        }
        #expect(await gate.waits(for: 1))
        let notes = (0..<3).map { saver in Self.saveNotes(["\(saver)"], on: coordinator, name: "saver \(saver)") }
        #expect(await gate.waits(for: 4))
        gate.open()
        let ids = try await both.value
        #expect(Set(ids.compactMap(\.storeIdentifier)).count == 2)
        for save in notes { _ = try await save.value }
        let statistics = coordinator.writeStatistics
        #expect(statistics.saves == 4 && statistics.commits == 2 && statistics.largestGroup == 3)
        #expect(try await Self.storedTitles(on: coordinator) == ["0", "1", "2"])
    }

    @Test("a pinned context saving in a group advances to the state after the shared commit, which its didSave names")
    func pinnedSaverInAGroup() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let pinned = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "pinned")
        try await pinned.perform { try $0.setQueryGenerationFrom(.current) }
        #expect(try await QueryGenerationTests.noteCount(in: pinned) == 0)
        let gate = await WriteQueueGate(coordinator)
        let others = (0..<2).map { saver in Self.saveNotes(["other \(saver)"], on: coordinator, name: "other \(saver)") }
        #expect(await gate.waits(for: 2))
        let pinnedSave = Task { try await QueryGenerationTests.saveNote("mine", in: pinned) }
        #expect(await gate.waits(for: 3))
        gate.open()
        let notification = try await pinnedSave.value
        for save in others { _ = try await save.value }

        let token = await pinned.perform { context in context.queryGenerationToken }
        #expect(token != nil && notification.queryGenerationToken == token)
        #expect(token == coordinator.newestToken())
        #expect(try await QueryGenerationTests.noteCount(in: pinned) == 3)
        #expect(coordinator.writeStatistics.commits == 1)
    }

    @Test("eight contexts saving as fast as they can: every save committed exactly once, in fewer commits")
    func manyContextsAtOnce() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let perContext = 25
        try await withThrowingTaskGroup(of: Void.self) { group in
            for saver in 0..<8 {
                group.addTask {
                    let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "saver \(saver)")
                    for index in 0..<perContext {
                        try await context.perform { context in
                            let note = Note()
                            note.title = "\(saver)-\(index)"
                            try context.insert(note)
                            try context.save()
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        let titles = try await Self.storedTitles(on: coordinator)
        #expect(titles.count == 8 * perContext && Set(titles).count == 8 * perContext)
        let statistics = coordinator.writeStatistics
        #expect(statistics.saves == 8 * perContext && statistics.failedSaves == 0)
        #expect(statistics.commits <= statistics.saves && statistics.commits >= 1)
        #expect(statistics.description.contains("\(8 * perContext) saves in \(statistics.commits) commits"))
    }

    @Test("saves between threads: each blocked saver returns its own outcome from a shared commit")
    func coordinatorLevelGroup() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await ContextReference.lmdb(in: directory.url)
        let store = try #require(coordinator.persistentStores.first)
        let gate = await WriteQueueGate(coordinator)
        let outcomes = LockedValue<[Int: Result<SaveOutcome, any Error>]>([:])
        let runs = (0..<3).map { saver in
            TestRun {
                let snapshot = CoordinatorStoreTests.newObject("Note", ["title": .string("t\(saver)")], in: NotesModel.model)
                // Saver 1 also updates a row that does not exist: a conflict, for it alone.
                var updated: [ObjectSnapshot] = []
                if saver == 1 {
                    var missing = CoordinatorStoreTests.newObject("Note", ["title": .string("gone")], in: NotesModel.model)
                    missing.objectID = store.file!.objectID(entity: "Note", key: PrimaryKey(999)!)
                    missing.version = 3
                    updated = [missing]
                }
                let result = Result { try coordinator.save([try StoreSave(store: store, inserted: [snapshot], updated: updated)]) }
                outcomes.withLock { $0[saver] = result }
            }
        }
        #expect(await gate.waits(for: 3))
        gate.open()
        for run in runs { #expect(await run.joined()) }
        let results = outcomes.withLock { $0 }
        let saved = try [0, 2].map { try #require(results[$0]).get() }
        #expect(saved.allSatisfy { $0.permanentIDs.count == 1 })
        #expect(Set(saved.flatMap(\.permanentIDs.values)).count == 2)
        #expect(saved[0].token == saved[1].token)
        #expect(throws: StrataError.self) { try results[1]?.get() }
        #expect(try await Self.storedTitles(on: coordinator) == ["t0", "t2"])
        #expect(coordinator.writeStatistics.commits == 1)
    }
}
