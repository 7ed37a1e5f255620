import Foundation
import Strata
import StrataTesting

/// A fresh directory under `$TMPDIR` (default `/tmp`) for one store, removed with
/// everything in it when the value goes away (StrataTesting's ``TemporaryDirectory``,
/// held by reference so that scenarios can pass it around).
public final class StoreDirectory {
    private let directory: TemporaryDirectory
    public let path: String

    public init(_ name: String) {
        directory = TemporaryDirectory("strata-bench-\(name)")
        path = directory.path
    }

    /// A path inside the directory (nothing is created).
    public func appending(_ component: String) -> String { directory.appending(component) }
}

/// One store of `dataset` per binding, filled through each binding's own bulk import
/// (not measured), with sync off: what the read scenarios (2, 3, 5, 6) read.
public final class PopulatedStores {
    public let dataset: Dataset
    public let strata: StrataStore
    public let raw: RawStore
    public let grdb: GRDBStore
    // Declared after the stores: the stores close before their directories go.
    private let directories: [StoreDirectory]

    /// The store directories, for a child process to open the same stores.
    public let strataPath: String, rawPath: String, grdbPath: String

    public init(dataset: Dataset, log: (String) -> Void) throws {
        self.dataset = dataset
        let strataDirectory = StoreDirectory("read-strata"), rawDirectory = StoreDirectory("read-raw")
        let grdbDirectory = StoreDirectory("read-grdb")
        directories = [strataDirectory, rawDirectory, grdbDirectory]
        strataPath = strataDirectory.appending("store")
        rawPath = rawDirectory.path
        grdbPath = grdbDirectory.path

        let strataPath = strataPath
        var start = now()
        strata = try waitFor { try await StrataStore.open(at: strataPath, durability: .noSync) }
        let context = strata.makeContext(name: "populate")
        try context.performAndWait { context in try StrataWork.importRecords(dataset.records, in: context) }
        try expect(try context.performAndWait { try StrataWork.count(in: $0) }, dataset.count, "Strata populated store count")
        log("  Strata store of \(dataset.count) objects filled in \(formatSeconds(seconds(since: start)))")

        start = now()
        raw = try RawStore(path: rawPath, sync: false)
        try raw.insert(dataset.records)
        let counts = try raw.counts()
        try expect(counts.rows, dataset.count, "raw populated store rows")
        try expect(counts.index, dataset.count, "raw populated store index entries")
        log("  raw LMDB store filled in \(formatSeconds(seconds(since: start)))")

        start = now()
        grdb = try GRDBStore(directory: grdbPath, sync: false)
        try grdb.insert(dataset.records)
        try expect(try grdb.count(), dataset.count, "GRDB populated store count")
        log("  GRDB database filled in \(formatSeconds(seconds(since: start)))")
    }
}
