import Foundation
import StrataLMDB
import StrataTesting
import Testing

@testable import StrataCLI

@Suite("strata demo")
struct DemoTests {
    /// Runs the demo at `path`, returning its outcome and narration.
    func runDemo(at path: String) throws -> (Demo.Outcome, [String]) {
        var lines: [String] = []
        let outcome = try Demo(path: path, say: { lines.append($0) }).run()
        return (outcome, lines)
    }

    @Test("runs twice on the same store; the snapshot keeps the old value")
    func demoRunsTwice() throws {
        let directory = TemporaryDirectory()
        let path = directory.appending("Demo.strata")

        let (first, firstLines) = try runDemo(at: path)
        #expect(first.createdStore)
        #expect(first.clearedRecords == 0)

        let (second, secondLines) = try runDemo(at: path)
        #expect(!second.createdStore)
        #expect(second.clearedRecords == Demo.records.count)
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

    @Test("refuses a file or a non-empty directory that is not a store, changing nothing")
    func demoRefusesBadPaths() throws {
        let directory = TemporaryDirectory()
        let file = directory.appending("file")
        let busy = directory.appending("busy")
        _ = FileManager.default.createFile(atPath: file, contents: Data("x".utf8))
        try FileManager.default.createDirectory(atPath: busy, withIntermediateDirectories: false)
        _ = FileManager.default.createFile(atPath: busy + "/notes.txt", contents: Data("keep".utf8))
        let before = tree(directory.path)

        let fileError = #expect(throws: StoreError.self) { try runCommand(["demo", file]) }
        #expect(fileError?.kind == .notADirectory)
        let busyError = #expect(throws: StoreError.self) { try runCommand(["demo", busy]) }
        #expect(busyError?.kind == .directoryNotEmpty)
        #expect(tree(directory.path) == before)
    }

    @Test("an empty existing directory becomes the demo store")
    func demoInAnEmptyDirectory() throws {
        let directory = TemporaryDirectory()
        let (outcome, _) = try runDemo(at: directory.path)
        #expect(outcome.createdStore)
        #expect(FileSystem.exists(directory.appending("data.mdb")))
    }
}
