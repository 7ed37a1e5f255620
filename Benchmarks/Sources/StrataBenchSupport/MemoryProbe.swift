import Foundation

/// Peak memory of one fetch, measured in a child process of its own so that no scenario
/// inherits another's peak: the runner re-executes itself with `--child`, the child opens
/// the store, runs the fetch once, checks it, and prints one line with its
/// `getrusage(RUSAGE_SELF).ru_maxrss` before and after (and `VmHWM` as a cross-check).
public enum MemoryProbe {
    /// The fetches measured.
    public enum Variant: String, CaseIterable, Sendable {
        /// Every object fully realised and held (Strata `returnsObjectsAsFaults = false`).
        case realised = "fetch-realised"
        /// Every object as a batched fault (`fetchBatchSize`), walked; the baselines' cursors.
        case batched = "fetch-batched"
        /// Strata's `fetchedResults(for:)`, one batch held at a time.
        case fetchedResults = "fetched-results"
    }

    /// Who runs the fetch.
    public enum Side: String, CaseIterable, Sendable {
        case strata
        case raw
        /// GRDB with Codable records.
        case grdbCodable = "grdb-codable"
        /// GRDB with hand-written records (and its cursor for the batched variant).
        case grdbRows = "grdb-rows"
    }

    /// What a child is asked to do.
    public struct Request: Sendable {
        public var variant: Variant
        public var side: Side
        /// The store's directory.
        public var path: String
        public var count: Int
        public var checksum: Int64
        public var batchSize: Int

        public init(variant: Variant, side: Side, path: String, count: Int, checksum: Int64, batchSize: Int) {
            self.variant = variant
            self.side = side
            self.path = path
            self.count = count
            self.checksum = checksum
            self.batchSize = batchSize
        }

        /// The arguments after `--child`.
        public var arguments: [String] {
            [variant.rawValue, side.rawValue, path, String(count), String(checksum), String(batchSize)]
        }

        /// Parses ``arguments``; nil when they are not six valid fields.
        public init?(arguments: [String]) {
            guard arguments.count == 6, let variant = Variant(rawValue: arguments[0]),
                let side = Side(rawValue: arguments[1]), let count = Int(arguments[3]),
                let checksum = Int64(arguments[4]), let batchSize = Int(arguments[5]), batchSize > 0
            else { return nil }
            self.init(variant: variant, side: side, path: arguments[2], count: count, checksum: checksum, batchSize: batchSize)
        }
    }

    /// What a child measured.
    public struct Outcome: Sendable {
        /// Peak RSS after opening the store, before the fetch (KiB).
        public var startKiB: Int
        /// Peak RSS at the end (KiB).
        public var peakKiB: Int
        /// The fetch's time in this cold process.
        public var seconds: Double
        /// `VmHWM` at the end (KiB), the kernel's high-water mark since `execve`: a
        /// cross-check of ``peakKiB``; nil when unreadable.
        public var highWaterKiB: Int?

        /// The peak's growth over the process before the fetch.
        public var growthKiB: Int { peakKiB - startKiB }

        /// The line the child prints.
        public var line: String {
            "strata-bench-child start-kib=\(startKiB) peak-kib=\(peakKiB) seconds=\(seconds) hwm-kib=\(highWaterKiB ?? -1)"
        }

        public init(startKiB: Int, peakKiB: Int, seconds: Double, highWaterKiB: Int?) {
            self.startKiB = startKiB
            self.peakKiB = peakKiB
            self.seconds = seconds
            self.highWaterKiB = highWaterKiB
        }

        /// Finds the child's line in its output; nil when there is none.
        public init?(output: String) {
            guard let line = output.split(separator: "\n").last(where: { $0.hasPrefix("strata-bench-child ") }) else { return nil }
            var fields: [String: String] = [:]
            for field in line.split(separator: " ").dropFirst() {
                let parts = field.split(separator: "=", maxSplits: 1)
                if parts.count == 2 { fields[String(parts[0])] = String(parts[1]) }
            }
            guard let start = fields["start-kib"].flatMap(Int.init), let peak = fields["peak-kib"].flatMap(Int.init),
                let seconds = fields["seconds"].flatMap(Double.init)
            else { return nil }
            let highWater = fields["hwm-kib"].flatMap(Int.init)
            self.init(startKiB: start, peakKiB: peak, seconds: seconds, highWaterKiB: highWater.flatMap { $0 < 0 ? nil : $0 })
        }
    }

    /// Runs `request` in this process (the child's side) and returns what it measured.
    /// Throws when the fetch does not return the expected count and checksum.
    public static func run(_ request: Request) throws -> Outcome {
        let result: (count: Int, checksum: Int64)
        let start: Int
        let begin: UInt64
        switch request.side {
        case .strata:
            let path = request.path
            let store = try waitFor { try await StrataStore.open(at: path, durability: .noSync) }
            let context = store.makeContext(name: "probe")
            start = peakResidentKiB()
            begin = now()
            result = try context.performAndWait { context in
                switch request.variant {
                case .realised: try StrataWork.fetchAllRealised(in: context)
                case .batched: try StrataWork.fetchAllBatched(batchSize: request.batchSize, in: context)
                case .fetchedResults: try StrataWork.walkFetchedResults(batchSize: request.batchSize, in: context)
                }
            }
        case .raw:
            let store = try RawStore(path: request.path, sync: false)
            start = peakResidentKiB()
            begin = now()
            result = request.variant == .realised ? try store.fetchAll() : try store.walkAll()
        case .grdbCodable, .grdbRows:
            let store = try GRDBStore(directory: request.path, sync: false)
            start = peakResidentKiB()
            begin = now()
            switch (request.variant, request.side) {
            case (.realised, .grdbCodable): result = try store.fetchAllCodable()
            case (.realised, _): result = try store.fetchAllRows()
            default: result = try store.walkAll()
            }
        }
        let elapsed = seconds(since: begin)
        try expect(result.count, request.count, "child \(request.variant.rawValue) \(request.side.rawValue) count")
        try expect(result.checksum, request.checksum, "child \(request.variant.rawValue) \(request.side.rawValue) checksum")
        return Outcome(startKiB: start, peakKiB: peakResidentKiB(), seconds: elapsed, highWaterKiB: highWaterMarkKiB())
    }
}
