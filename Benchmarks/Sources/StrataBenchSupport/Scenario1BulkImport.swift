import Foundation
import Strata

extension BenchRun {
    /// Scenario 1: insert and save n objects into an empty store, sync off.
    ///
    /// - Strata: one private-queue context inserts an ``Item`` per record, then one
    ///   `save()`; its `notificationCenter` is nil (the documented bulk-import setting).
    /// - raw LMDB: one write transaction putting every row and index entry.
    /// - GRDB: one `write` of Codable `insert`s.
    ///
    /// Each run gets an empty store in a fresh directory; opening it is not measured.
    ///
    /// Strata also imports with an undo manager on its context (issue 27), measured in the
    /// same rounds: the figure beside the default (no manager) shows what recording the
    /// inserts for undo costs.
    func runBulkImport() throws {
        for size in config.importSizes {
            log("Scenario 1: bulk import of \(size) objects...")
            let dataset = Dataset(count: size)
            let runs = Binding.allCases.map(ImportRun.binding) + [.strataWithUndo]
            let runTimes = try medians("bulk import \(size)", runs) { run, _ in
                try withDirectory("import") { directory in
                    switch run {
                    case .binding(let binding): try importOnce(dataset, binding, directory)
                    case .strataWithUndo: try importOnce(dataset, .strata, directory, undo: true)
                    }
                }
            }
            var times: [Binding: Double] = [:]
            for binding in Binding.allCases { times[binding] = runTimes[.binding(binding)] }
            let strata = times[.strata]!, raw = times[.raw]!, grdb = times[.grdb]!
            let perObject = { (seconds: Double) in String(format: "%.2f", seconds * 1e6 / Double(size)) }
            report.add(ReportRow(
                "1 · bulk import \(formatCount(Double(size))) objects, one save (sync off)",
                [.strata: .time(strata), .raw: .time(raw), .grdb: .time(grdb)],
                target: Target(
                    String(format: "Strata ≤ 2.0× raw (%.2f×) and ≥ 5× faster than GRDB Codable (%.1f×)", strata / raw, grdb / strata),
                    met: strata / raw <= 2.0 && grdb / strata >= 5),
                note: "µs/object: Strata \(perObject(strata)), raw \(perObject(raw)), GRDB \(perObject(grdb))"))
            let withUndo = runTimes[.strataWithUndo]!
            report.add(ReportRow(
                "1 · the same import with an undo manager on the context (Strata only)",
                [.strata: .time(withUndo)],
                note: String(format: "with / without an undo manager: %.2f×; µs/object %@", withUndo / strata, perObject(withUndo))))
        }
    }

    /// What one round of scenario 1 runs.
    private enum ImportRun: Hashable {
        case binding(Binding)
        /// Strata with an undo manager on the importing context.
        case strataWithUndo
    }

    /// One import of `dataset` through `binding` into an empty store in `directory`;
    /// returns its measured seconds, after checking what was stored.
    private func importOnce(_ dataset: Dataset, _ binding: Binding, _ directory: StoreDirectory, undo: Bool = false) throws -> Double {
        let records = dataset.records
        switch binding {
        case .strata:
            let path = directory.appending("store")
            let store = try waitFor { try await StrataStore.open(at: path, durability: .noSync) }
            let context = store.makeContext(name: "import")
            if undo { context.performAndWait { context in context.undoManager = UndoManager() } }
            let seconds = try timed {
                try context.performAndWait { context in try StrataWork.importRecords(records, in: context) }
            }
            let check = store.makeContext(name: "check")
            try expect(try check.performAndWait { try StrataWork.count(in: $0) }, dataset.count, "Strata imported count")
            return seconds
        case .raw:
            let store = try RawStore(path: directory.path, sync: false)
            let seconds = try timed { try store.insert(records) }
            let counts = try store.counts()
            try expect(counts.rows, dataset.count, "raw imported rows")
            try expect(counts.index, dataset.count, "raw imported index entries")
            return seconds
        case .grdb:
            let store = try GRDBStore(directory: directory.path, sync: false)
            let seconds = try timed { try store.insert(records) }
            try expect(try store.count(), dataset.count, "GRDB imported count")
            return seconds
        }
    }
}
