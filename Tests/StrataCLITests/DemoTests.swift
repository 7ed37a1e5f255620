import ArgumentParser
import Foundation
import StrataLMDB
import Synchronization
import StrataTesting
import Testing

@testable import StrataCLI

@Suite("strata demo")
struct DemoTests {
    /// Runs the contexts walkthrough at `path`, returning its outcome and narration.
    func runDemo(at path: String) async throws -> (Demo.Outcome, [String]) {
        let lines = Narration()
        let outcome = try await Demo(path: path, say: { lines.append($0) }).run()
        return (outcome, lines.lines)
    }

    /// Runs the LMDB walkthrough at `path`, returning its outcome and narration.
    func runLMDBDemo(at path: String) throws -> (LMDBDemo.Outcome, [String]) {
        var lines: [String] = []
        let outcome = try LMDBDemo(path: path, say: { lines.append($0) }).run()
        return (outcome, lines)
    }

    @Test("the contexts walkthrough runs twice on the same store and tells the same story")
    func contextsDemoRunsTwice() async throws {
        let directory = TemporaryDirectory()
        let path = directory.appending("Demo.strata")

        let (first, firstLines) = try await runDemo(at: path)
        #expect(first.createdStore)
        #expect(first.clearedObjects == 0)

        let (second, secondLines) = try await runDemo(at: path)
        #expect(!second.createdStore)
        #expect(second.clearedObjects == first.folders + first.notes)

        let highPriority = ["5 Pay rent (Home)", "4 Draft talk (Work)", "3 Buy milk (Home)", "3 Review PR (Work)"]
        for (outcome, lines) in [(first, firstLines), (second, secondLines)] {
            #expect(outcome.savedObjects == 8 && outcome.permanentIDs)
            #expect(outcome.highPriority == highPriority)
            #expect(outcome.blockOrder == [
                "performAndWait { … }", "perform { … } (fire-and-forget)",
                "await perform(schedule: .enqueued) { … }", "await perform { … } on a background context",
            ])
            #expect(outcome.withUnsavedChanges == ["4 Call the plumber (no folder)"] + highPriority.dropFirst())
            #expect(outcome.afterRollback == highPriority)
            #expect(outcome.changesBeforeRollback && !outcome.changesAfterRollback)
            #expect(outcome.cascadeDeleted == 4)
            #expect(outcome.batches == (1...Demo.batches).map { "Batch \($0): \(Demo.notesPerBatch) notes" })
            #expect(outcome.folders == 1 + Demo.batches)
            #expect(outcome.notes == 4 + Demo.batches * Demo.notesPerBatch + 1)
            #expect(outcome.generations == GenerationOutcome(
                pinnedCount: 24, storeCount: 25, countWhilePinned: 24, openGenerations: 1, lag: 1, countAfterAdvance: 25))
            #expect(outcome.childSave == ChildSaveOutcome(
                viewChanges: ["inserted 1", "updated 1"], storedBefore: ["Buy milk"], storedAfter: ["Buy oat milk", "Plan the trip"],
                editorID: "permanent"))
            let databases = Dictionary(uniqueKeysWithValues: (outcome.report?.databases ?? []).map { ($0.name, $0.entries) })
            #expect(databases["rows:Folder"] == outcome.folders && databases["rows:Note"] == outcome.notes)

            let narration = lines.joined(separator: "\n")
            #expect(narration.contains("Strata demo: managed object contexts on a PersistentContainer"))
            #expect(narration.contains("     5 Pay rent (Home)\n     4 Draft talk (Work)\n     3 Buy milk (Home)\n     3 Review PR (Work)"))
            #expect(narration.contains("     1. performAndWait { … }\n     2. perform { … } (fire-and-forget)"))
            #expect(narration.contains("     4 Call the plumber (no folder)\n     4 Draft talk (Work)"))
            #expect(narration.contains("rollback() (hasChanges true -> false)"))
            #expect(narration.contains("4 objects deleted: the folder and its notes Book flights, Draft talk, Review PR."))
            #expect(narration.contains("     Batch 4: 5 notes\n   The store now holds 5 folders and 24 notes."))
            #expect(narration.contains("the store holds\n   25 notes, and the report still counts 24."))
            #expect(narration.contains("setQueryGenerationFrom(.current) advances the report: it counts 25."))
            #expect(narration.contains("rows:Note           25 entries"))
        }
        #expect(firstLines.contains("   Created a new store."))
        #expect(secondLines.contains("   Opened the existing store; deleted the 30 objects an earlier run left, to start afresh."))
        // The demo closed its store: stat can open it.
        let report = try StoreReport.load(path: path)
        #expect(report.databases.first { $0.name == "rows:Note" }?.entries == 25)
    }

    @Test("the LMDB walkthrough (--lmdb) runs twice on the same store; the snapshot keeps the old value")
    func demoRunsTwice() throws {
        let directory = TemporaryDirectory()
        let path = directory.appending("DemoLMDB.strata")

        let (first, firstLines) = try runLMDBDemo(at: path)
        #expect(first.createdStore)
        #expect(first.clearedRecords == 0)

        let (second, secondLines) = try runLMDBDemo(at: path)
        #expect(!second.createdStore)
        #expect(second.clearedRecords == LMDBDemo.records.count)
        #expect(second.snapshotTransactionID > first.freshTransactionID)

        for (outcome, lines) in [(first, firstLines), (second, secondLines)] {
            #expect(outcome.snapshotValue == "red")
            #expect(outcome.freshValue == "green")
            #expect(outcome.freshTransactionID > outcome.snapshotTransactionID)
            #expect(outcome.prefixKeys == ["fruit/apple", "fruit/banana", "fruit/cherry"])
            #expect(outcome.rangeKeys == ["fruit/banana", "fruit/cherry", "veg/carrot"])
            #expect(outcome.report.databases == [.init(name: "demo", entries: 5, pages: 1)])
            let narration = lines.joined(separator: "\n")
            #expect(narration.contains("The snapshot (transaction \(outcome.snapshotTransactionID)) still reads  fruit/apple = red"))
            #expect(narration.contains("A fresh read (transaction \(outcome.freshTransactionID)) reads"))
            #expect(narration.contains("fruit/apple = green"))
            #expect(narration.contains("Reader slots in use while the snapshot is open: 1"))
        }
        // The demo closed its store: stat can open it.
        #expect(try StoreReport.load(path: path).databases.map(\.entries) == [5])
    }

    @Test("both walkthroughs refuse a file or a non-empty directory that is not a store, changing nothing")
    func demoRefusesBadPaths() async throws {
        let directory = TemporaryDirectory()
        let file = directory.appending("file")
        let busy = directory.appending("busy")
        _ = FileManager.default.createFile(atPath: file, contents: Data("x".utf8))
        try FileManager.default.createDirectory(atPath: busy, withIntermediateDirectories: false)
        _ = FileManager.default.createFile(atPath: busy + "/notes.txt", contents: Data("keep".utf8))
        let before = tree(directory.path)

        for mode in [[], ["--lmdb"]] {
            let fileError = await #expect(throws: StoreError.self) { try await runAsyncCommand(["demo"] + mode + [file]) }
            #expect(fileError?.kind == .notADirectory)
            let busyError = await #expect(throws: StoreError.self) { try await runAsyncCommand(["demo"] + mode + [busy]) }
            #expect(busyError?.kind == .directoryNotEmpty)
        }
        #expect(tree(directory.path) == before)
    }

    @Test("an empty existing directory becomes the demo store")
    func demoInAnEmptyDirectory() async throws {
        let lmdbDirectory = TemporaryDirectory()
        let (lmdbOutcome, _) = try runLMDBDemo(at: lmdbDirectory.path)
        #expect(lmdbOutcome.createdStore)
        #expect(FileSystem.exists(lmdbDirectory.appending("data.mdb")))

        let directory = TemporaryDirectory()
        let (outcome, _) = try await runDemo(at: directory.path)
        #expect(outcome.createdStore)
        #expect(FileSystem.exists(directory.appending("data.mdb")))
    }

    @Test("--lmdb chooses the LMDB walkthrough and its own default store")
    func parseLMDBFlag() throws {
        let command = try #require(try StrataCommand.parseAsRoot(["demo", "--lmdb"]) as? DemoCommand)
        #expect(command.lmdb && command.storePath == "DemoLMDB.strata")
        let explicit = try #require(try StrataCommand.parseAsRoot(["demo", "--lmdb", "/tmp/x"]) as? DemoCommand)
        #expect(explicit.storePath == "/tmp/x")
    }
}

/// Collects a walkthrough's narration (it may be told from several tasks).
final class Narration: Sendable {
    private let entries = Mutex<[String]>([])

    /// Adds a line.
    func append(_ line: String) { entries.withLock { $0.append(line) } }

    /// Every line, in order.
    var lines: [String] { entries.withLock { $0 } }
}

/// Parses `arguments` as the `strata` command line and runs the chosen subcommand,
/// awaiting it when it is asynchronous (`demo`).
func runAsyncCommand(_ arguments: [String]) async throws {
    var command = try StrataCommand.parseAsRoot(arguments)
    if var asynchronous = command as? any AsyncParsableCommand {
        try await asynchronous.run()
    } else {
        try command.run()
    }
}
