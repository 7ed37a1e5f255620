import Foundation
import Strata

/// The `strata demo` walkthrough: Strata's contexts on a ``PersistentContainer`` whose
/// store is at ``path``, narrated through ``say``.
///
/// It saves folders and notes in a background context, fetches them in the viewContext
/// with a predicate and a sort, shows `perform` against `performAndWait`, unsaved
/// changes in fetches, `rollback()`, a cascade delete, parent and child contexts, several
/// background contexts saving at once and a report pinned to a query generation, then
/// summarises the LMDB store underneath. It starts by deleting
/// what an earlier run left, so running it again tells the same story.
/// (`strata demo --lmdb` is the walkthrough of the LMDB layer alone: ``LMDBDemo``.)
struct Demo: Sendable {
    /// The store directory (created when missing).
    let path: String
    /// Receives the narration, one line at a time.
    let say: @Sendable (String) -> Void

    /// What the walkthrough observed, for callers that check it.
    struct Outcome: Equatable, Sendable {
        /// Whether the store was created by this run.
        var createdStore = false
        /// Objects of an earlier run deleted first.
        var clearedObjects = 0
        /// Objects the first background save wrote, and whether they got permanent IDs.
        var savedObjects = 0, permanentIDs = false
        /// The viewContext's fetch of notes with priority >= 3: `"5 Pay rent (Home)"`.
        var highPriority: [String] = []
        /// The order in which the blocks of the perform/performAndWait step ran.
        var blockOrder: [String] = []
        /// The same fetch with an unsaved insert and an unsaved delete, and after rollback.
        var withUnsavedChanges: [String] = [], afterRollback: [String] = []
        /// Whether the context had changes before rollback, and after.
        var changesBeforeRollback = false, changesAfterRollback = true
        /// Objects deleted by deleting the "Work" folder (the folder and its notes).
        var cascadeDeleted = 0
        /// What the parent–child step saw: the viewContext's changes after the editor's
        /// save, the store before and after the viewContext's save, the editor's ID.
        var childSave = ChildSaveOutcome()
        /// Each folder saved by the concurrent background contexts: `"Batch 1: 5 notes"`.
        var batches: [String] = []
        /// What the query-generation step saw.
        var generations = GenerationOutcome()
        /// Folders and notes in the store at the end.
        var folders = 0, notes = 0
        /// The store summary at the end (nil when the container was still in memory).
        var report: StoreReport?
    }

    /// Runs the walkthrough.
    ///
    /// - Throws: a ``StoreError`` when ``path`` cannot hold the demo store,
    ///   ``PersistentContainerError`` when the store cannot be loaded, or what a context
    ///   throws.
    func run() async throws -> Outcome {
        var outcome = Outcome()
        outcome.createdStore = try FileSystem.checkDemoStorePath(path)
        let coordinator = try await walkThrough(into: &outcome)
        say("")
        say("10. The LMDB store underneath (what `strata stat \(path)` prints): one database per entity,")
        say("    one per index and per to-many relationship, metadata and history")
        if coordinator.released {
            let report = try StoreReport.load(path: path)
            for line in report.text().split(separator: "\n", omittingEmptySubsequences: false) { say("    " + line) }
            outcome.report = report
        } else {
            say("    (skipped: the container is still open, and LMDB allows one environment per store per process)")
        }
        say("")
        say("Done. Run the demo again: it starts by deleting what this run saved. Remove \(path) to clean up.")
        return outcome
    }

    /// Steps 1 to 9, on a container that is gone when this returns; returns a weak
    /// reference to its coordinator to check that.
    private func walkThrough(into outcome: inout Outcome) async throws -> WeakCoordinator {
        let container = try PersistentContainer(name: "Demo", types: [Folder.self, Note.self])
        container.persistentStoreDescriptions = [PersistentStoreDescription(url: URL(fileURLWithPath: path, isDirectory: true))]
        say("Strata demo: managed object contexts on a PersistentContainer")
        say("")
        say("1. Load the container's store at \(path) (entities Folder and Note; deleting a folder deletes its notes)")
        try await container.loadPersistentStores()
        outcome.clearedObjects = try await clear(container)
        say(outcome.createdStore ? "   Created a new store."
            : "   Opened the existing store; deleted the \(outcome.clearedObjects) objects an earlier run left, to start afresh.")
        (outcome.savedObjects, outcome.permanentIDs) = try await insertAndSave(container)
        outcome.highPriority = try await fetchInViewContext(container)
        outcome.blockOrder = try await showPerformAndWait(container)
        try await showUnsavedChanges(container, into: &outcome)
        outcome.cascadeDeleted = try await showCascadeDelete(container)
        outcome.childSave = try await showChildContexts(container)
        (outcome.batches, outcome.folders, outcome.notes) = try await saveConcurrently(container)
        outcome.generations = try await showQueryGenerations(container)
        outcome.notes = outcome.generations.countAfterAdvance
        return WeakCoordinator(coordinator: container.persistentStoreCoordinator)
    }

    /// Deletes every folder and note; returns how many objects there were.
    private func clear(_ container: PersistentContainer) async throws -> Int {
        try await container.performBackgroundTask { context in
            let folders = try context.fetch(FetchRequest<Folder>())
            let notes = try context.fetch(FetchRequest<Note>())
            for object in folders as [ManagedObject] + notes { try context.delete(object) }
            try context.save()
            return folders.count + notes.count
        }
    }

    // MARK: Steps

    private func insertAndSave(_ container: PersistentContainer) async throws -> (Int, Bool) {
        let (count, permanent, example) = try await container.performBackgroundTask { context in
            var objects: [ManagedObject] = []
            for (name, notes) in Demo.seed {
                let folder = Folder()
                folder.name = name
                objects.append(folder)
                for (title, priority) in notes {
                    let note = Note()
                    note.title = title
                    note.priority = priority
                    note.folder = folder
                    objects.append(note)
                }
                try context.insert(folder)  // its notes come along
            }
            let inserted = context.insertedObjects.count
            try context.save()
            return (inserted, objects.allSatisfy { !$0.objectID.isTemporaryID }, objects[1].objectID.uriRepresentation.absoluteString)
        }
        let folders = Demo.seed.count, notes = Demo.seed.map(\.notes.count).reduce(0, +)
        say("")
        say("2. Insert \(folders) folders and \(notes) notes in a background context (performBackgroundTask) and save")
        say("   One save, one LMDB write transaction: \(count) objects. Their temporary IDs became permanent, e.g.")
        say("   \(example)")
        return (count, permanent)
    }

    /// The notes with priority >= 3, most urgent first, then by title.
    static var highPriorityRequest: FetchRequest<Note> {
        var request = FetchRequest<Note>()
        request.predicate = \Note.priority >= 3
        request.sortDescriptors = [FetchSortDescriptor(\Note.priority, ascending: false), FetchSortDescriptor(\Note.title)]
        return request
    }

    /// `5  Pay rent  (Home)` for each note of the high-priority fetch, in `context`.
    static func highPriorityNotes(in context: isolated ManagedObjectContext) throws -> [String] {
        try context.fetch(highPriorityRequest).map { "\($0.priority) \($0.title) (\($0.folder?.name ?? "no folder"))" }
    }

    private func fetchInViewContext(_ container: PersistentContainer) async throws -> [String] {
        let notes = try await container.viewContext.perform { context in try Demo.highPriorityNotes(in: context) }
        say("")
        say("3. Fetch in the viewContext (main queue): priority >= 3, by priority (descending) then title")
        say("   FetchRequest<Note>, predicate \\Note.priority >= 3, sort [priority DESC, title ASC]: \(notes.count) notes")
        for note in notes { say("     " + note) }
        return notes
    }
}

/// A coordinator the demo no longer holds: nil once it is gone.
struct WeakCoordinator {
    weak var coordinator: PersistentStoreCoordinator?
    /// Whether the coordinator (and its stores) are gone.
    var released: Bool { coordinator == nil }
}
