import Strata
import Synchronization

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

    /// Step 7: several background contexts save at once; the viewContext fetches what
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
        say("7. \(Demo.batches) background contexts save at the same time, each a folder of \(Demo.notesPerBatch) notes")
        say("   (each save is one atomic write; the coordinator runs them one after the other). The viewContext fetches:")
        for batch in batches { say("     " + batch) }
        say("   The store now holds \(folders) folders and \(notes) notes.")
        return (batches, folders, notes)
    }
}

/// The blocks of step 4, in the order they ran (they run on different queues).
final class BlockLog: Sendable {
    private let entries = Mutex<[String]>([])

    /// Records that `line` ran.
    func append(_ line: String) { entries.withLock { $0.append(line) } }

    /// Everything recorded, in order.
    var lines: [String] { entries.withLock { $0 } }
}
