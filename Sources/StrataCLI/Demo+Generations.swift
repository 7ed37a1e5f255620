import Foundation
import Strata

extension Demo {
    /// Step 9: a report context pinned to a query generation keeps reading one state of
    /// the store while another context saves; advancing it shows the new state.
    func showQueryGenerations(_ container: PersistentContainer) async throws -> GenerationOutcome {
        var outcome = GenerationOutcome()
        let coordinator = container.persistentStoreCoordinator
        let report = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "report")
        outcome.pinnedCount = try await report.perform { report in
            try report.setQueryGenerationFrom(.current)   // taken at the first read: this count
            return try report.count(for: FetchRequest<Note>())
        }
        try await container.performBackgroundTask { context in
            let note = Note()
            note.title = "Water the plants"
            note.priority = 1
            try context.insert(note)
            try context.save()
        }
        outcome.storeCount = try await container.performBackgroundTask { try $0.count(for: FetchRequest<Note>()) }
        outcome.countWhilePinned = try await report.perform { try $0.count(for: FetchRequest<Note>()) }
        let statistics = coordinator.queryGenerationStatistics
        outcome.openGenerations = statistics.openGenerations
        outcome.lag = statistics.stores.first?.oldestReaderLag ?? 0
        outcome.countAfterAdvance = try await report.perform { report in
            try report.setQueryGenerationFrom(.current)
            return try report.count(for: FetchRequest<Note>())
        }
        try await report.perform { try $0.setQueryGenerationFrom(nil) }   // gives the snapshot back
        say("")
        say("9. Query generations: a report context pins the store's state (setQueryGenerationFrom(.current), taken at")
        say("   its first read) and counts \(outcome.pinnedCount) notes. Another context saves \"Water the plants\": the store holds")
        say("   \(outcome.storeCount) notes, and the report still counts \(outcome.countWhilePinned). The coordinator reports \(outcome.openGenerations) open generation(s),")
        say("   the oldest \(outcome.lag) commit(s) behind: LMDB cannot reuse the pages freed since, so keep pins short.")
        say("   setQueryGenerationFrom(.current) advances the report: it counts \(outcome.countAfterAdvance).")
        return outcome
    }
}

/// What the query-generation step saw.
struct GenerationOutcome: Equatable, Sendable {
    /// Notes the report counted when it pinned, the store after the other save, and the
    /// report again while pinned.
    var pinnedCount = 0, storeCount = 0, countWhilePinned = 0
    /// The coordinator's open generations while the report was pinned, and how many
    /// commits behind its snapshot was.
    var openGenerations = 0, lag = 0
    /// Notes the report counted after advancing.
    var countAfterAdvance = 0
}
