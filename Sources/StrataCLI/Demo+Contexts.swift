import Strata
internal import StrataLocks

extension Demo {
    /// Step 4: the orders in which `perform` and `performAndWait` blocks run, on the
    /// viewContext from main-actor code. Returns the order observed.
    @MainActor
    func showPerformAndWait(_ container: PersistentContainer) async throws -> [String] {
        let log = BlockLog()
        let view = container.viewContext
        Demo.scheduleWithoutWaiting(on: view) { _ in log.append("perform { … } (fire-and-forget)") }
        let count = try view.performAndWait { context in
            log.append("performAndWait { … }")
            return try context.count(for: Demo.highPriorityRequest)
        }
        await view.perform(schedule: .enqueued) { _ in log.append("await perform(schedule: .enqueued) { … }") }
        let background = container.newBackgroundContext()
        let counted = try await background.perform { context in
            log.append("await perform { … } on a background context")
            return try context.count(for: FetchRequest<Note>())
        }
        let order = log.lines
        say("")
        say("4. perform vs performAndWait, from main-actor code (the viewContext runs on the main actor)")
        say("   Called in this order: perform { … } (fire-and-forget), performAndWait { … }, await perform(schedule: .enqueued) { … }")
        say("   The blocks ran in this order:")
        for (index, line) in order.enumerated() { say("     \(index + 1). \(line)") }
        say("   performAndWait is synchronous: it ran at once, inline, and returned \(count) (high-priority notes)")
        say("   before the fire-and-forget block, which waited on the main queue for the main actor to yield;")
        say("   .enqueued ran after it. A background context's perform hops to its own queue (it counted \(counted) notes).")
        return order
    }

    /// Calls the fire-and-forget `perform(_:)` (synchronous code gets that overload).
    private static func scheduleWithoutWaiting(
        on context: ManagedObjectContext, _ body: @escaping @Sendable (isolated ManagedObjectContext) -> Void
    ) {
        context.perform(body)
    }

    /// Step 5: an unsaved insert and an unsaved delete are seen by fetches; rollback
    /// discards them.
    func showUnsavedChanges(_ container: PersistentContainer, into outcome: inout Outcome) async throws {
        let (pending, changes, afterRollback, changesAfter) = try await container.viewContext.perform { context in
            let plumber = Note()
            plumber.title = "Call the plumber"
            plumber.priority = 4
            try context.insert(plumber)
            var rent = FetchRequest<Note>()
            rent.predicate = \Note.title == "Pay rent"
            for note in try context.fetch(rent) { try context.delete(note) }
            let pending = try Demo.highPriorityNotes(in: context)
            let changes = context.hasChanges
            context.rollback()
            return (pending, changes, try Demo.highPriorityNotes(in: context), context.hasChanges)
        }
        say("")
        say("5. Fetches see unsaved changes (viewContext)")
        say("   Inserted \"Call the plumber\" (priority 4) and deleted \"Pay rent\", without saving. The same fetch:")
        for note in pending { say("     " + note) }
        say("   The unsaved insert is fetched, the unsaved delete is left out. Then rollback() (hasChanges \(changes) -> \(changesAfter)):")
        for note in afterRollback { say("     " + note) }
        (outcome.withUnsavedChanges, outcome.afterRollback) = (pending, afterRollback)
        (outcome.changesBeforeRollback, outcome.changesAfterRollback) = (changes, changesAfter)
    }

    /// Step 6: deleting a folder deletes its notes (delete rule cascade).
    func showCascadeDelete(_ container: PersistentContainer) async throws -> Int {
        let (deleted, notes) = try await container.performBackgroundTask { context in
            var work = FetchRequest<Folder>()
            work.predicate = \Folder.name == "Work"
            let folders = try context.fetch(work)
            let notes = folders.flatMap(\.notes).map(\.title).sorted()
            for folder in folders { try context.delete(folder) }
            try context.processPendingChanges()  // delete rules run (every block ends with it too)
            let deleted = context.deletedObjects.count
            try context.save()
            return (deleted, notes)
        }
        let (folders, remaining) = try await container.viewContext.perform { context in
            (try context.count(for: FetchRequest<Folder>()), try context.count(for: FetchRequest<Note>()))
        }
        say("")
        say("6. Cascade delete: a background context deletes the folder \"Work\" and saves")
        say("   \(deleted) objects deleted: the folder and its notes \(notes.joined(separator: ", ")).")
        say("   The viewContext now counts \(folders) folder(s) and \(remaining) notes.")
        return deleted
    }

    /// Step 7: an editor, a child of the viewContext, saves into it (nothing reaches the
    /// store until the viewContext saves); a second editor is thrown away.
    func showChildContexts(_ container: PersistentContainer) async throws -> ChildSaveOutcome {
        var outcome = ChildSaveOutcome()
        let view = container.viewContext
        let editor = ManagedObjectContext(.privateQueue, parent: view, name: "editor")
        let temporary = try await editor.perform { editor in
            var milk = FetchRequest<Note>()
            milk.predicate = \Note.title == "Buy milk"
            for note in try editor.fetch(milk) { note.title = "Buy oat milk" }
            let trip = Note()
            trip.title = "Plan the trip"
            trip.priority = 2
            try editor.insert(trip)
            try editor.save()
            return trip.objectID
        }
        func storedTitles() async throws -> [String] {
            try await container.performBackgroundTask { context in
                var request = FetchRequest<Note>()
                request.predicate = try FetchPredicate(format: "title IN %@", ["Buy milk", "Buy oat milk", "Plan the trip"])
                request.sortDescriptors = [FetchSortDescriptor(\Note.title)]
                return try context.fetch(request).map(\.title)
            }
        }
        outcome.viewChanges = await view.perform { view in
            ["inserted \(view.insertedObjects.count)", "updated \(view.updatedObjects.count)"]
        }
        outcome.storedBefore = try await storedTitles()
        // A discarded editor: its edits never reach the viewContext.
        var scratch: ManagedObjectContext? = ManagedObjectContext(.privateQueue, parent: view, name: "scratch")
        try await scratch?.perform { scratch in
            for note in try scratch.fetch(FetchRequest<Note>()) { note.title = "scribble" }
        }
        scratch = nil
        try await view.perform { try $0.save() }
        outcome.storedAfter = try await storedTitles()
        outcome.editorID = await editor.perform { editor in
            let trip = editor.object(with: temporary)
            return trip.objectID.isTemporaryID ? "temporary" : "permanent"
        }
        say("")
        say("7. Parent and child contexts: an editor (a private child of the viewContext) renames \"Buy milk\"")
        say("   and adds \"Plan the trip\", then saves. The save goes one store up, into the viewContext, which now has")
        say("   \(outcome.viewChanges.joined(separator: ", ")) unsaved object(s); the store still holds \(outcome.storedBefore).")
        say("   A second editor renames every note and is thrown away: the viewContext never sees it.")
        say("   The viewContext saves: the store holds \(outcome.storedAfter), and the editor's new note")
        say("   now has its \(outcome.editorID) ID there too (one identity across the chain).")
        return outcome
    }

    /// Step 8: several background contexts save at once; the viewContext fetches what
    /// they saved. Returns each batch folder, and the folder and note counts.
    func saveConcurrently(_ container: PersistentContainer) async throws -> ([String], Int, Int) {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for batch in 1...Demo.batches {
                group.addTask {
                    try await container.performBackgroundTask { context in
                        let folder = Folder()
                        folder.name = "Batch \(batch)"
                        for index in 1...Demo.notesPerBatch {
                            let note = Note()
                            note.title = "Batch \(batch) note \(index)"
                            note.priority = Int16(index % 6)
                            note.folder = folder
                        }
                        try context.insert(folder)
                        try context.save()
                    }
                }
            }
            try await group.waitForAll()
        }
        let (batches, folders, notes) = try await container.viewContext.perform { context in
            var request = FetchRequest<Folder>()
            request.predicate = try FetchPredicate(format: "name BEGINSWITH %@", "Batch ")
            request.sortDescriptors = [FetchSortDescriptor(\Folder.name)]
            let batches = try context.fetch(request).map { "\($0.name): \($0.notes.count) notes" }
            return (batches, try context.count(for: FetchRequest<Folder>()), try context.count(for: FetchRequest<Note>()))
        }
        say("")
        say("8. \(Demo.batches) background contexts save at the same time, each a folder of \(Demo.notesPerBatch) notes")
        say("   (each save is one atomic write; the coordinator runs them one after the other). The viewContext fetches:")
        for batch in batches { say("     " + batch) }
        say("   The store now holds \(folders) folders and \(notes) notes.")
        return (batches, folders, notes)
    }
}

/// The blocks of step 4, in the order they ran (they run on different queues).
final class BlockLog: Sendable {
    private let entries = LockedValue<[String]>([])  // what ran, in order

    /// Records that `line` ran.
    func append(_ line: String) { entries.withLock { $0.append(line) } }

    /// Everything recorded, in order.
    var lines: [String] { entries.withLock { $0 } }
}

/// What step 7 (parent and child contexts) saw.
struct ChildSaveOutcome: Equatable, Sendable {
    /// The viewContext's unsaved inserted and updated counts after the editor's save.
    var viewChanges: [String] = []
    /// The demo notes in the store before and after the viewContext's save.
    var storedBefore: [String] = [], storedAfter: [String] = []
    /// Whether the editor's new note has its temporary or permanent ID after that save.
    var editorID = ""
}
