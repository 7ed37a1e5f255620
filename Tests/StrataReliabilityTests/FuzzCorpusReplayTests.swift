import Foundation
import StrataReliability
import StrataTesting
import Testing

/// The short tier of `make fuzz`: every committed corpus file (Tests/FuzzCorpus) replayed
/// through its fuzz target built normally, which checks each input exactly as the fuzzer
/// does (a trap fails the replay). Keeps the corpora honest between fuzz runs.
@Suite("Fuzz corpus replay")
struct FuzzCorpusReplayTests {
    /// Tests/FuzzCorpus, found from this file.
    static let corpusRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("FuzzCorpus")

    @Test("every corpus file replays cleanly through its fuzz target", arguments: [
        ("RecordDecoderFuzzer", "record-decoder"),
        ("KeyDecoderFuzzer", "key-decoder"),
        ("PredicateParserFuzzer", "predicate-parser"),
    ])
    func replay(target: String, corpus: String) async throws {
        // The fuzz targets are built next to the test bundle (swift build --build-tests builds every product).
        let executable = URL(fileURLWithPath: reliabilityToolPath()).deletingLastPathComponent().appendingPathComponent(target).path
        try #require(FileManager.default.isExecutableFile(atPath: executable), "\(executable) is not built")
        let directory = Self.corpusRoot.appendingPathComponent(corpus)
        let files = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
        #expect(files.count >= 5, "the \(corpus) corpus is nearly empty")
        let scratch = TemporaryDirectory()
        let child = try ChildProcess.spawn(
            executable, files.map { directory.appendingPathComponent($0).path },
            outputPath: scratch.appending("out"), errorPath: scratch.appending("err"))
        let (termination, killed) = await child.ended(atMost: 120)
        #expect(!killed && termination == .exited(0), "\(target) on \(files.count) files: \(termination)\n\(child.errorOutput.suffix(2000))")
    }
}
