import Foundation
import StrataLMDB

/// The `strata demo --lmdb` walkthrough: a small tour of StrataLMDB on an embedded store.
///
/// It creates (or reuses) the store at ``path``, empties its `demo` database, then writes,
/// reads, snapshots and scans, narrating each step through ``say``. Running it again on
/// the same store gives the same story.
struct LMDBDemo {
    /// The store directory (created when missing).
    let path: String
    /// Receives the narration, one line at a time.
    let say: (String) -> Void

    /// The records the demo writes, in key order.
    static let records: [(key: String, value: String)] = [
        ("fruit/apple", "red"), ("fruit/banana", "yellow"), ("fruit/cherry", "dark red"),
        ("veg/carrot", "orange"), ("veg/kale", "green"),
    ]
    /// The key the snapshot step changes, and its new value.
    static let changedKey = "fruit/apple", changedValue = "green"

    /// What the walkthrough observed, for callers that check it.
    struct Outcome: Equatable, Sendable {
        /// Whether the store was created by this run.
        var createdStore: Bool
        /// Records of an earlier run that were cleared first.
        var clearedRecords: Int
        /// The transaction id the snapshot sees, and the value it read.
        var snapshotTransactionID: Int, snapshotValue: String
        /// The transaction id a fresh read saw after the change, and the value it read.
        var freshTransactionID: Int, freshValue: String
        /// The keys of the prefix scan and of the cursor range walk.
        var prefixKeys: [String], rangeKeys: [String]
        /// The store summary at the end.
        var report: StoreReport
    }

    /// Runs the walkthrough.
    ///
    /// - Throws: a ``StoreError`` when ``path`` cannot hold the demo store, or what LMDB throws.
    func run() throws -> Outcome {
        let created = try checkPath()
        let environment: Environment
        do { environment = try Environment(path: path) } catch { throw StoreError.opening(path, error) }
        let version = Environment.libraryVersion
        say("Strata demo (--lmdb): an embedded LMDB store (liblmdb \(version.major).\(version.minor).\(version.patch))")
        say("")
        say("1. Open the environment at \(path)")
        say(created ? "   Created a new store (data.mdb and lock.mdb)."
                    : "   Opened the existing store; its last transaction is \(environment.info.lastTransactionID).")
        let (database, cleared) = try openDatabase(environment)
        try writeAndReadBack(environment, database)
        let isolation = try showSnapshotIsolation(environment, database)
        let scans = try showScans(environment, database)
        say("")
        say("7. Store summary (what `strata stat \(path)` prints)")
        let report = try StoreReport(environment: environment)
        for line in report.text().split(separator: "\n", omittingEmptySubsequences: false) { say("   " + line) }
        say("")
        say("Done. Run the demo again to start afresh, or remove \(path) to clean up.")
        return Outcome(
            createdStore: created, clearedRecords: cleared,
            snapshotTransactionID: isolation.snapshotID, snapshotValue: isolation.old,
            freshTransactionID: isolation.freshID, freshValue: isolation.new,
            prefixKeys: scans.prefix, rangeKeys: scans.range, report: report)
    }

    /// Refuses a file or a non-empty directory that is not a store; returns whether the store is new.
    private func checkPath() throws(StoreError) -> Bool {
        try FileSystem.checkDemoStorePath(path)
    }

    private func openDatabase(_ environment: Environment) throws -> (Database, cleared: Int) {
        say("")
        say("2. Open the named database \"demo\", creating it if needed")
        let database = try environment.openDatabase(named: "demo", flags: .create)
        let cleared = try environment.write { txn in
            let count = try txn.count(in: database)
            try txn.removeAll(in: database)
            return count
        }
        say(cleared == 0 ? "   It is empty." : "   Cleared \(cleared) records left by an earlier run, so the demo starts afresh.")
        return (database, cleared)
    }

    private func writeAndReadBack(_ environment: Environment, _ database: Database) throws {
        let commit = try environment.write { txn in
            for record in LMDBDemo.records {
                try txn.put(Array(record.value.utf8), forKey: Array(record.key.utf8), in: database)
            }
            return txn.id
        }
        say("")
        say("3. Write \(LMDBDemo.records.count) records in one write transaction: committed as transaction \(commit)")
        let width = LMDBDemo.records.map(\.key.count).max() ?? 0
        for record in LMDBDemo.records { say("     \(LMDBDemo.pad(record.key, width)) = \(record.value)") }
        let (readID, values) = try environment.read { txn in
            (txn.id, try LMDBDemo.records.map { try txn.value(forKey: Array($0.key.utf8), in: database) })
        }
        say("")
        say("4. Read them back in a read transaction (it sees transaction \(readID))")
        for (record, value) in zip(LMDBDemo.records, values) { say("     \(LMDBDemo.pad(record.key, width)) -> \(LMDBDemo.text(value))") }
    }

    private func showSnapshotIsolation(
        _ environment: Environment, _ database: Database
    ) throws -> (snapshotID: Int, old: String, freshID: Int, new: String) {
        let key = Array(LMDBDemo.changedKey.utf8)
        say("")
        say("5. Snapshot isolation (LMDB's MVCC)")
        let snapshot = try environment.makeSnapshot()
        say("   Took a ReadSnapshot: it sees transaction \(snapshot.transactionID).")
        let commit = try environment.write { txn in
            try txn.put(Array(LMDBDemo.changedValue.utf8), forKey: key, in: database)
            return txn.id
        }
        say("   Committed transaction \(commit): \(LMDBDemo.changedKey) = \(LMDBDemo.changedValue)")
        let old = LMDBDemo.text(try snapshot.read { txn in try txn.value(forKey: key, in: database) })
        let (freshID, new) = try environment.read { txn in (txn.id, LMDBDemo.text(try txn.value(forKey: key, in: database))) }
        let labels = ["The snapshot (transaction \(snapshot.transactionID)) still reads", "A fresh read (transaction \(freshID)) reads"]
        let width = labels.map(\.count).max() ?? 0
        say("   \(LMDBDemo.pad(labels[0], width))  \(LMDBDemo.changedKey) = \(old)")
        say("   \(LMDBDemo.pad(labels[1], width))  \(LMDBDemo.changedKey) = \(new)")
        let slots = environment.readers().map { "pid \($0.processID) at transaction \($0.transactionID.map(String.init) ?? "-")" }
        say("   Reader slots in use while the snapshot is open: \(slots.count) (\(slots.joined(separator: ", ")))")
        say("   Releasing the snapshot frees its reader slot and lets LMDB reuse the old pages.")
        return (snapshot.transactionID, old, freshID, new)
    }

    private func showScans(_ environment: Environment, _ database: Database) throws -> (prefix: [String], range: [String]) {
        typealias Entry = (key: String, value: String)
        let prefix = "fruit/", lower = "fruit/banana", upper = "veg/kale"
        let (prefixEntries, rangeEntries) = try environment.read { txn -> ([Entry], [Entry]) in
            var prefixEntries: [Entry] = []
            try txn.scan(database, range: .prefix(Array(prefix.utf8))) { key, value in
                prefixEntries.append((LMDBDemo.text(key), LMDBDemo.text(value)))
                return .continue
            }
            let rangeEntries = try txn.withCursor(on: database) { cursor -> [Entry] in
                var found: [Entry] = []
                var entry = try cursor.seek(atOrAfter: Array(lower.utf8))
                while let (key, value) = entry, Array(upper.utf8).withUnsafeBytes({ cursor.compare(key, $0) }) < 0 {
                    found.append((LMDBDemo.text(key), LMDBDemo.text(value)))
                    entry = try cursor.next()
                }
                return found
            }
            return (prefixEntries, rangeEntries)
        }
        say("")
        say("6. Scans with a cursor, in key order")
        say("   Prefix \"\(prefix)\" (txn.scan with KeyRange.prefix): \(prefixEntries.count) entries")
        for entry in prefixEntries { say("     \(entry.key) = \(entry.value)") }
        say("   From \"\(lower)\" up to \"\(upper)\", excluded (cursor.seek(atOrAfter:), then next()): \(rangeEntries.count) entries")
        for entry in rangeEntries { say("     \(entry.key) = \(entry.value)") }
        return (prefixEntries.map(\.key), rangeEntries.map(\.key))
    }

    private static func text(_ bytes: [UInt8]?) -> String {
        bytes.map { String(decoding: $0, as: UTF8.self) } ?? "(absent)"
    }

    private static func text(_ buffer: UnsafeRawBufferPointer) -> String {
        String(decoding: buffer, as: UTF8.self)
    }

    private static func pad(_ text: String, _ width: Int) -> String {
        text.padding(toLength: width, withPad: " ", startingAt: 0)
    }
}
