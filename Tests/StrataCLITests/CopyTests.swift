import Foundation
import StrataLMDB
import StrataTesting
import Testing

@testable import StrataCLI

@Suite("strata copy")
struct CopyTests {
    @Test("the copy opens with the same databases and entries", arguments: [false, true])
    func copyAStore(compacting: Bool) throws {
        let directory = TemporaryDirectory()
        let source = directory.appending("source.strata")
        let destination = directory.appending("copies/copy.strata")
        try makeStore(at: source)

        let report = try CopyReport.copy(from: source, to: destination, compacting: compacting)
        #expect(report.compacted == compacting)
        #expect((report.sourceSize ?? 0) > 0)
        #expect((report.destinationSize ?? 0) > 0)
        #expect(report.destinationSize == FileSystem.dataFileSize(inStore: destination))
        #expect(report.text().contains("destination data.mdb"))

        let copied = try contents(ofStoreAt: destination)
        #expect(copied == (try contents(ofStoreAt: source)))
        #expect(copied.mapValues(\.count) == ["alpha": 3, "beta": 40, "empty": 0])
    }

    @Test("compacting leaves out the free pages of deleted data")
    func compactIsSmaller() throws {
        let directory = TemporaryDirectory()
        let source = directory.appending("source.strata")
        try makeStore(at: source, [("big", 2000)])
        do {
            let environment = try Environment(path: source)
            let big = try environment.openDatabase(named: "big", flags: .create)
            try environment.write { txn in try txn.removeAll(in: big) }
        }
        let plain = try CopyReport.copy(from: source, to: directory.appending("plain"), compacting: false)
        let compact = try CopyReport.copy(from: source, to: directory.appending("compact"), compacting: true)
        #expect((compact.destinationSize ?? .max) < (plain.destinationSize ?? 0))
    }

    @Test("copying onto an existing store fails and changes nothing")
    func copyOntoAStore() throws {
        let directory = TemporaryDirectory()
        let source = directory.appending("source.strata")
        let destination = directory.appending("existing.strata")
        try makeStore(at: source)
        try makeStore(at: destination, [("other", 1)])
        let before = tree(destination)

        let error = #expect(throws: StoreError.self) { try runCommand(["copy", source, destination]) }
        #expect(error?.kind == .destinationExists)
        #expect(error.map { StrataCommand.message(for: $0).contains(destination) } == true)
        #expect(tree(destination) == before)
    }

    @Test("copying from a path that is not a store creates no destination")
    func copyFromABadPath() throws {
        let directory = TemporaryDirectory()
        let destination = directory.appending("copy.strata")
        let error = #expect(throws: StoreError.self) {
            try runCommand(["copy", directory.appending("missing"), destination, "--compact"])
        }
        #expect(error?.kind == .missing)
        #expect(tree(directory.path) == [".": .directory])
    }

    @Test("copying into a file fails")
    func copyIntoAFile() throws {
        let directory = TemporaryDirectory()
        let source = directory.appending("source.strata")
        let file = directory.appending("file")
        try makeStore(at: source)
        _ = FileManager.default.createFile(atPath: file, contents: Data("x".utf8))
        let error = #expect(throws: StoreError.self) { try runCommand(["copy", source, file]) }
        #expect(error?.kind == .notADirectory)
        #expect(FileManager.default.contents(atPath: file) == Data("x".utf8))
    }
}
