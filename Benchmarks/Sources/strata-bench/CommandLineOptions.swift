import Foundation
import StrataBenchSupport

/// The runner's command line. Bad input prints one line to standard error and exits with
/// status 2.
struct CommandLineOptions {
    var config = BenchConfig()
    var markdownOut: String?
    var measuresMemory = true

    static let usage = """
        usage: strata-bench [--quick] [--only SCENARIO]... [--rounds N] [--markdown-out FILE] [options]

        Measures Strata against raw liblmdb and GRDB in one process and prints a markdown
        table to standard output (progress to standard error). Scenarios:
          1 bulk import   2 fetch all   3 indexed query   4 write contention (own objects,
          then the hot spot: --only hot runs the hot spot alone)   5 readers under a writer
          6 parent-child   7 upsert   8 migration   9 batch requests

          --quick               small sizes and short windows (all scenarios in under 2 minutes)
          --only S              run only the scenarios whose number or name contains S
                                (repeatable, or comma-separated: --only 1,contention)
          --rounds N            measured rounds per timing, after one warm-up (default 5; quick 3)
          --markdown-out FILE   also write the table to FILE
          --import-sizes N,...  scenario 1 sizes (default 100000,1000000; quick 10000,50000)
          --store-size N        objects in the store scenarios 2, 3, 5, 6, 11 read (default 1000000; quick 20000)
          --queries N           queries per round, scenarios 3 and 6 (default 20; quick 10)
          --batch-size N        fetchBatchSize, scenario 2 (default 1000)
          --contexts N,...      scenario 4 concurrent contexts (default 1,2,4,8)
          --objects-per-save N,...
                                scenario 4 objects changed per save (default 1,10)
          --objects-per-context N
                                scenario 4 objects each context owns and updates in turn
                                (default 100)
          --seconds S           scenario 4 window per configuration, hot spot too (default 2; quick 0.25)
          --hot-contexts N      scenario 4 hot spot: contexts updating the same objects (default 8, at most 8)
          --hot-objects N       scenario 4 hot spot: the objects they all update (default 16)
          --hot-objects-per-save N
                                scenario 4 hot spot: objects changed per save, picked at random (default 2)
          --readers N           scenario 5 reader contexts (default 2)
          --reader-seconds S    scenario 5 window (default 2; quick 0.5)
          --writer-batch N      scenario 5 objects per writer save (default 1000)
          --writer-interval-ms N
                                scenario 5 writer saves a batch every N ms (default 50)
          --changes N           scenario 6 changes saved up the chain (default 10000; quick 2000)
          --depths N,...        scenario 6 chain depths (default 1,2,3)
          --upserts N           scenario 7 upserts, half colliding with the N*3/4 stored rows
                                (default 100000; quick 10000)
          --upsert-batch N      scenario 7 upserts per save, every binding (default 1000)
          --migration-rows N    scenario 8 rows a migration rewrites (default 1000000)
          --batch-rows N        scenario 9 objects batch-inserted, 10% of them then batch-updated
                                and batch-deleted (default 1000000; quick 50000)
          --no-memory           skip the peak-memory child processes of scenario 2
          --help, -h            this text
        """

    static func fail(_ message: String) -> Never {
        FileHandle.standardError.write(Data("strata-bench: \(message) (see strata-bench --help)\n".utf8))
        exit(2)
    }

    static func parse(_ arguments: [String]) -> CommandLineOptions {
        var options = CommandLineOptions()
        if arguments.contains("--help") || arguments.contains("-h") {
            print(usage)
            exit(0)
        }
        if arguments.contains("--quick") { options.config = .quick }
        var iterator = arguments.makeIterator()
        func value(_ flag: String) -> String {
            guard let text = iterator.next(), !text.hasPrefix("--") else { fail("\(flag) needs a value") }
            return text
        }
        func integer(_ flag: String, in range: ClosedRange<Int>) -> Int {
            let text = value(flag)
            guard let number = Int(text.replacingOccurrences(of: "_", with: "")), range.contains(number) else {
                fail("\(flag): '\(text)' is not a whole number in \(range.lowerBound)...\(range.upperBound)")
            }
            return number
        }
        func integers(_ flag: String, in range: ClosedRange<Int>) -> [Int] {
            let text = value(flag)
            let numbers = text.split(separator: ",").map { Int($0.replacingOccurrences(of: "_", with: "")) }
            guard !numbers.isEmpty, numbers.allSatisfy({ $0.map(range.contains) ?? false }) else {
                fail("\(flag): '\(text)' is not a comma-separated list of whole numbers in \(range.lowerBound)...\(range.upperBound)")
            }
            return numbers.map { $0! }
        }
        func duration(_ flag: String, in range: ClosedRange<Double>) -> Double {
            let text = value(flag)
            guard let number = Double(text), range.contains(number) else {
                fail("\(flag): '\(text)' is not a number of seconds in \(range.lowerBound)...\(range.upperBound)")
            }
            return number
        }
        while let argument = iterator.next() {
            switch argument {
            case "--quick": break
            case "--only":
                let filters = value(argument).split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
                for filter in filters where !filter.isEmpty {
                    var probe = BenchConfig()
                    probe.only = [filter]
                    guard BenchConfig.scenarios.contains(where: { probe.runs($0.number) }) else {
                        fail("--only: no scenario matches '\(filter)'")
                    }
                    options.config.only.append(filter)
                }
            case "--rounds": options.config.rounds = integer(argument, in: 1...1000)
            case "--markdown-out":
                let path = value(argument)
                let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
                guard FileManager.default.isWritableFile(atPath: directory) else {
                    fail("--markdown-out: cannot write into \(directory)")
                }
                options.markdownOut = path
            case "--import-sizes": options.config.importSizes = integers(argument, in: 1...100_000_000)
            case "--store-size": options.config.storeSize = integer(argument, in: 100...100_000_000)
            case "--queries": options.config.queries = integer(argument, in: 1...1_000_000)
            case "--batch-size": options.config.batchSize = integer(argument, in: 1...10_000_000)
            case "--contexts": options.config.contexts = integers(argument, in: 1...64)
            case "--objects-per-save": options.config.objectsPerSave = integers(argument, in: 1...100_000)
            case "--objects-per-context": options.config.objectsPerContext = integer(argument, in: 1...1_000_000)
            case "--seconds": options.config.contentionSeconds = duration(argument, in: 0.01...3600)
            case "--hot-contexts": options.config.hotSpotContexts = integer(argument, in: 1...HotSpot.maxWriters)
            case "--hot-objects": options.config.hotSpotObjects = integer(argument, in: 1...1_000_000)
            case "--hot-objects-per-save": options.config.hotSpotObjectsPerSave = integer(argument, in: 1...1_000_000)
            case "--readers": options.config.readers = integer(argument, in: 1...64)
            case "--reader-seconds": options.config.readerSeconds = duration(argument, in: 0.01...3600)
            case "--writer-batch": options.config.writerBatch = integer(argument, in: 1...1_000_000)
            case "--writer-interval-ms": options.config.writerInterval = Double(integer(argument, in: 1...60_000)) / 1000
            case "--changes": options.config.parentChildChanges = integer(argument, in: 1...100_000_000)
            case "--depths": options.config.depths = integers(argument, in: 1...20)
            case "--upserts": options.config.upserts = integer(argument, in: 4...100_000_000)
            case "--batch-rows": options.config.batchRows = integer(argument, in: 10...100_000_000)
            case "--upsert-batch": options.config.upsertBatch = integer(argument, in: 1...100_000_000)
            case "--migration-rows": options.config.migrationRows = integer(argument, in: 1...100_000_000)
            case "--no-memory": options.measuresMemory = false
            default: fail("unknown option '\(argument)'")
            }
        }
        let config = options.config
        if config.parentChildChanges * 2 > config.storeSize {
            fail("--changes (\(config.parentChildChanges)) must be at most half of --store-size (\(config.storeSize))")
        }
        if config.objectsPerSave.contains(where: { $0 > config.objectsPerContext }) {
            fail("--objects-per-save must be at most \(config.objectsPerContext), the objects each context owns")
        }
        if config.hotSpotObjectsPerSave > config.hotSpotObjects {
            fail("--hot-objects-per-save must be at most \(config.hotSpotObjects), the hot objects")
        }
        return options
    }
}
