// pg-bench: Strata's PostgreSQL store against plain postgres-nio statements doing the same
// work, in one run, on the cluster of `make pg-start` (127.0.0.1, port STRATA_PG_PORT or
// 54329, user strata, database strata_test). `make pg-bench` runs it.
//
//   swift run -c release pg-bench [--objects N] [--saves S] [--contexts C] [--runs R]
//
// Scenarios (each in a fresh schema, the median of R runs, wall clock):
//   import   N notes, saved 1,000 at a time (plain: one multi-row INSERT per transaction)
//   fetch    all N notes read into objects (plain: SELECT decoded into structs)
//   saves    C contexts at once, S saves in all, each inserting one note (plain: C tasks,
//            each save BEGIN / INSERT / COMMIT on a connection of PostgresClient's pool);
//            again with notifiesOtherInstances (each save also runs pg_notify)
//   merge latency  two instances (two coordinators, each with its own pool and listening
//            connection) of one store that tracks history: a context of A changes a note,
//            M times one after another; a context of B that merges automatically holds it.
//            From the start of A's save to B's didMergeChanges notification, p50 and p99;
//            and from the end of A's save (the notification, the history read and the merge).
import Foundation
import Logging
import PostgresNIO
import Strata
import StrataPostgres

final class BenchNote: ManagedObject {
    override class var entityName: String { "Note" }
    @Attribute var title: String = ""
    @Attribute var priority: Int64 = 0
    @Attribute var body: String?
    @Attribute var created: Date = Date(timeIntervalSince1970: 0)
}

struct Options {
    var objects = 10_000
    var saves = 2_000
    var contexts = 8
    var runs = 3
    var merges = 500
    var pins = 200

    init(_ arguments: [String]) {
        var iterator = arguments.dropFirst().makeIterator()
        while let argument = iterator.next() {
            let value = iterator.next().flatMap(Int.init)
            switch (argument, value) {
            case ("--objects", let n?): objects = n
            case ("--saves", let n?): saves = n
            case ("--contexts", let n?): contexts = n
            case ("--runs", let n?): runs = n
            case ("--merges", let n?): merges = n
            case ("--pins", let n?): pins = n
            default:
                FileHandle.standardError.write(Data("usage: pg-bench [--objects N] [--saves S] [--contexts C] [--runs R] [--merges M] [--pins P]\n".utf8))
                exit(2)
            }
        }
    }
}

let options = Options(CommandLine.arguments)
let port = ProcessInfo.processInfo.environment["STRATA_PG_PORT"].flatMap(Int.init) ?? 54329
let model = try ManagedObjectModel(types: [BenchNote.self])
let epoch = Date(timeIntervalSince1970: 1_700_000_000)

func strataConfiguration(_ schema: String) -> PostgresStoreConfiguration {
    var configuration = PostgresStoreConfiguration(host: "127.0.0.1", port: port, username: "strata", database: "strata_test", schema: schema)
    configuration.maximumConnections = max(8, options.contexts)
    return configuration
}

func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

var clientConfiguration = PostgresClient.Configuration(host: "127.0.0.1", port: port, username: "strata", password: nil, database: "strata_test", tls: .disable)
clientConfiguration.options.maximumConnections = max(8, options.contexts)
let client = PostgresClient(configuration: clientConfiguration)
let logger = Logger(label: "pg-bench")

/// A fresh schema for one run; the plain runs get a table shaped like Strata's.
func freshSchema(_ name: String, plain: Bool) async throws {
    try await client.query(PostgresQuery(unsafeSQL: "DROP SCHEMA IF EXISTS \"\(name)\" CASCADE"))
    guard plain else { return }
    try await client.query(PostgresQuery(unsafeSQL: "CREATE SCHEMA \"\(name)\""))
    try await client.query(PostgresQuery(unsafeSQL: """
        CREATE TABLE "\(name)".notes (id bigint PRIMARY KEY, version bigint NOT NULL, title text, priority bigint, body text, created timestamptz)
        """))
}

// MARK: Strata

func strataImport(schema: String) async throws -> (Double, PersistentStoreCoordinator) {
    try await freshSchema(schema, plain: false)
    let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
    try await coordinator.addPersistentStore(type: .postgres(strataConfiguration(schema)))
    let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
    let start = ContinuousClock.now
    try await context.perform { context in
        for index in 0..<options.objects {
            let note = BenchNote()
            note.title = "note \(index)"
            note.priority = Int64(index % 5)
            note.body = index % 2 == 0 ? "body of \(index)" : nil
            note.created = epoch.addingTimeInterval(Double(index))
            try context.insert(note)
            if (index + 1) % 1_000 == 0 {
                try context.save()
                context.reset()
            }
        }
        try context.save()
    }
    return (seconds(ContinuousClock.now - start), coordinator)
}

func strataFetch(_ coordinator: PersistentStoreCoordinator) async throws -> Double {
    let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
    let start = ContinuousClock.now
    let count = try await context.perform { context in
        var request = FetchRequest<BenchNote>()
        request.returnsObjectsAsFaults = false
        return try context.fetch(request).reduce(0) { $0 + Int($1.priority) }
    }
    precondition(count > 0)
    return seconds(ContinuousClock.now - start)
}

/// `options.pins` times: a context pinned to the newest generation (`.current`) reads 20
/// notes in id order, then lets the generation go: a snapshot (a session connection of its
/// own, a `REPEATABLE READ` transaction) taken and ended each time.
func strataPinnedReads(_ coordinator: PersistentStoreCoordinator) async throws -> Double {
    let start = ContinuousClock.now
    for _ in 0..<options.pins {
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let count = try await context.perform { context in
            try context.setQueryGenerationFrom(.current)
            var request = FetchRequest<BenchNote>()
            request.sortDescriptors = [FetchSortDescriptor(key: "title")]
            request.fetchLimit = 20
            request.returnsObjectsAsFaults = false
            let count = try context.fetch(request).count
            try context.setQueryGenerationFrom(nil)
            return count
        }
        precondition(count == 20)
    }
    return seconds(ContinuousClock.now - start)
}

func strataSaves(schema: String, notifying: Bool = false) async throws -> Double {
    try await freshSchema(schema, plain: false)
    let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
    var configuration = strataConfiguration(schema)
    configuration.notifiesOtherInstances = notifying
    try await coordinator.addPersistentStore(type: .postgres(configuration))
    let perContext = options.saves / options.contexts
    let start = ContinuousClock.now
    try await withThrowingTaskGroup(of: Void.self) { group in
        for writer in 0..<options.contexts {
            let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
            group.addTask {
                for step in 0..<perContext {
                    try await context.perform { context in
                        let note = BenchNote()
                        note.title = "w\(writer) s\(step)"
                        note.priority = Int64(step % 5)
                        note.created = epoch
                        try context.insert(note)
                        try context.save()
                        context.reset()
                    }
                }
            }
        }
        try await group.waitForAll()
    }
    let elapsed = seconds(ContinuousClock.now - start)
    try await coordinator.close()
    return elapsed
}

/// The cross-instance merge latencies, in seconds: from the start of each save in A, and
/// from its end, to B's merge.
func mergeLatency(schema: String) async throws -> (total: [Double], afterSave: [Double]) {
    try await freshSchema(schema, plain: false)
    var storeOptions = PersistentStore.Options()
    storeOptions.tracksPersistentHistory = true
    let a = PersistentStoreCoordinator(managedObjectModel: model)
    try await a.addPersistentStore(type: .postgres(strataConfiguration(schema)), options: storeOptions)
    let b = PersistentStoreCoordinator(managedObjectModel: model)
    try await b.addPersistentStore(type: .postgres(strataConfiguration(schema)), options: storeOptions)
    let writer = ManagedObjectContext(.privateQueue, coordinator: a)
    let id = try await writer.perform { context in
        let note = BenchNote()
        note.title = "shared"
        try context.insert(note)
        try context.save()
        return note.objectID
    }
    let merger = ManagedObjectContext(.privateQueue, coordinator: b)
    try await merger.perform { context in
        context.automaticallyMergesChangesFromParent = true
        context.retainsRegisteredObjects = true
        _ = try context.existingObject(with: id).objectID
    }
    var merges = merger.notifications(of: [.didMergeChanges]).makeAsyncIterator()
    var total: [Double] = []
    var afterSave: [Double] = []
    for round in 0..<options.merges {
        let start = ContinuousClock.now
        try await writer.perform { context in
            (try context.existingObject(with: id) as? BenchNote)?.priority = Int64(round + 1)
            try context.save()
        }
        let saved = ContinuousClock.now
        while true {
            guard await merges.next() != nil else { throw CancellationError() }
            let priority = await merger.perform { context in (context.registeredObject(for: id) as? BenchNote)?.priority }
            if priority == Int64(round + 1) { break }
        }
        let end = ContinuousClock.now
        total.append(seconds(end - start))
        afterSave.append(seconds(end - saved))
    }
    try await a.close()
    try await b.close()
    return (total, afterSave)
}

func percentile(_ values: [Double], _ fraction: Double) -> Double {
    let sorted = values.sorted()
    return sorted[min(sorted.count - 1, Int((Double(sorted.count) * fraction).rounded(.up)) - 1)]
}

// MARK: Plain postgres-nio

func plainImport(schema: String) async throws -> Double {
    try await freshSchema(schema, plain: true)
    let start = ContinuousClock.now
    var index = 0
    while index < options.objects {
        let end = min(options.objects, index + 1_000)
        try await client.withConnection { connection in
            try await connection.query("BEGIN", logger: logger)
            var bindings = PostgresBindings(capacity: (end - index) * 6)
            var values: [String] = []
            for row in index..<end {
                let base = bindings.count
                bindings.append(Int64(row + 1))
                bindings.append(Int64(1))
                bindings.append("note \(row)")
                bindings.append(Int64(row % 5))
                if row % 2 == 0 { bindings.append("body of \(row)") } else { bindings.appendNull() }
                bindings.append(epoch.addingTimeInterval(Double(row)))
                values.append("($\(base + 1), $\(base + 2), $\(base + 3), $\(base + 4), $\(base + 5), $\(base + 6))")
            }
            try await connection.query(PostgresQuery(
                unsafeSQL: "INSERT INTO \"\(schema)\".notes (id, version, title, priority, body, created) VALUES \(values.joined(separator: ", "))",
                binds: bindings), logger: logger)
            try await connection.query("COMMIT", logger: logger)
        }
        index = end
    }
    return seconds(ContinuousClock.now - start)
}

struct PlainNote {
    var id: Int64
    var version: Int64
    var title: String
    var priority: Int64
    var body: String?
    var created: Date
}

func plainFetch(schema: String) async throws -> Double {
    let start = ContinuousClock.now
    var notes: [PlainNote] = []
    let rows = try await client.query(PostgresQuery(unsafeSQL: "SELECT id, version, title, priority, body, created FROM \"\(schema)\".notes ORDER BY id"))
    for try await (id, version, title, priority, body, created) in rows.decode((Int64, Int64, String, Int64, String?, Date).self) {
        notes.append(PlainNote(id: id, version: version, title: title, priority: priority, body: body, created: created))
    }
    precondition(notes.reduce(0) { $0 + Int($1.priority) } > 0)
    return seconds(ContinuousClock.now - start)
}

/// The plain counterpart of ``strataPinnedReads(_:)``: a `REPEATABLE READ, READ ONLY`
/// transaction on a pooled connection reads the same 20 rows, `options.pins` times.
func plainPinnedReads(schema: String) async throws -> Double {
    let start = ContinuousClock.now
    for _ in 0..<options.pins {
        let count = try await client.withConnection { connection in
            try await connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY", logger: logger)
            var notes: [PlainNote] = []
            let rows = try await connection.query(
                PostgresQuery(unsafeSQL: "SELECT id, version, title, priority, body, created FROM \"\(schema)\".notes ORDER BY title LIMIT 20"),
                logger: logger)
            for try await (id, version, title, priority, body, created) in rows.decode((Int64, Int64, String, Int64, String?, Date).self) {
                notes.append(PlainNote(id: id, version: version, title: title, priority: priority, body: body, created: created))
            }
            try await connection.query("COMMIT", logger: logger)
            return notes.count
        }
        precondition(count == 20)
    }
    return seconds(ContinuousClock.now - start)
}

func plainSaves(schema: String) async throws -> Double {
    try await freshSchema(schema, plain: true)
    let perContext = options.saves / options.contexts
    let start = ContinuousClock.now
    try await withThrowingTaskGroup(of: Void.self) { group in
        for writer in 0..<options.contexts {
            group.addTask {
                for step in 0..<perContext {
                    try await client.withConnection { connection in
                        try await connection.query("BEGIN", logger: logger)
                        let id = Int64(writer * perContext + step + 1)
                        try await connection.query(PostgresQuery(
                            unsafeSQL: "INSERT INTO \"\(schema)\".notes (id, version, title, priority, body, created) VALUES ($1, 1, $2, $3, NULL, $4)",
                            binds: {
                                var bindings = PostgresBindings()
                                bindings.append(id)
                                bindings.append("w\(writer) s\(step)")
                                bindings.append(Int64(step % 5))
                                bindings.append(epoch)
                                return bindings
                            }()), logger: logger)
                        try await connection.query("COMMIT", logger: logger)
                    }
                }
            }
        }
        try await group.waitForAll()
    }
    return seconds(ContinuousClock.now - start)
}

// MARK: Run

try await withThrowingDiscardingTaskGroup { group in
    group.addTask { await client.run() }
    var rows: [(String, [Double], [Double])] = [
        ("import", [], []), ("fetch", [], []), ("pinned reads", [], []), ("saves", [], []), ("saves, notifying", [], []),
    ]
    for run in 0..<options.runs {
        let (imported, coordinator) = try await strataImport(schema: "pgbench_strata")
        rows[0].1.append(imported)
        rows[1].1.append(try await strataFetch(coordinator))
        rows[2].1.append(try await strataPinnedReads(coordinator))
        try await coordinator.close()
        rows[0].2.append(try await plainImport(schema: "pgbench_plain"))
        rows[1].2.append(try await plainFetch(schema: "pgbench_plain"))
        rows[2].2.append(try await plainPinnedReads(schema: "pgbench_plain"))
        rows[3].1.append(try await strataSaves(schema: "pgbench_strata"))
        rows[3].2.append(try await plainSaves(schema: "pgbench_plain"))
        rows[4].1.append(try await strataSaves(schema: "pgbench_strata", notifying: true))
        rows[4].2.append(rows[3].2.last!)
        FileHandle.standardError.write(Data("run \(run + 1) of \(options.runs) done\n".utf8))
    }
    print("pg-bench: \(options.objects) objects, \(options.saves) saves over \(options.contexts) contexts, median of \(options.runs) runs")
    print("")
    print("| scenario | Strata | plain postgres-nio | Strata ÷ plain |")
    print("| --- | --- | --- | --- |")
    for (name, strata, plain) in rows {
        let s = median(strata), p = median(plain)
        func text(_ value: Double) -> String {
            if name.hasPrefix("saves") { return "\(Int(Double(options.saves) / value)) saves/s" }
            if name == "pinned reads" { return String(format: "%.2f ms per pin", value * 1000 / Double(options.pins)) }
            return String(format: "%.1f ms", value * 1000)
        }
        let unit = text(s), plainUnit = text(p)
        print("| \(name) | \(unit) | \(plainUnit) | \(String(format: "%.2f×", s / p)) |")
    }
    if options.merges > 0 {
        let (total, afterSave) = try await mergeLatency(schema: "pgbench_merge")
        print("")
        print("Cross-instance merge latency (\(options.merges) saves in A, each merged by an automatically merging context of B):")
        print("")
        print("| measured | p50 | p99 |")
        print("| --- | --- | --- |")
        print(String(format: "| start of A's save → B merged | %.2f ms | %.2f ms |", percentile(total, 0.5) * 1000, percentile(total, 0.99) * 1000))
        print(String(format: "| end of A's save → B merged | %.2f ms | %.2f ms |", percentile(afterSave, 0.5) * 1000, percentile(afterSave, 0.99) * 1000))
    }
    for schema in ["pgbench_strata", "pgbench_plain", "pgbench_merge"] {
        try await client.query(PostgresQuery(unsafeSQL: "DROP SCHEMA IF EXISTS \"\(schema)\" CASCADE"))
    }
    group.cancelAll()
}
