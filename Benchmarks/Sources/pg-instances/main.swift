// pg-instances: two processes ("instances" of a server) working through one PostgreSQL, the
// same work through Strata's PostgreSQL store, plain postgres-nio statements and Fluent, in
// one run, on the cluster of `make pg-start` (127.0.0.1, port STRATA_PG_PORT or 54329).
// `make pg-bench` runs it after pg-bench.
//
//   swift run -c release pg-instances [--seconds S] [--contexts C]
//
// The second process is this program again (`--worker ...`), started by the first; the two
// start their timed part together (the child waits for "go" on its standard input).
//
// Scenario 4, contention: each process runs C workers (4), each updating its own 100 notes
// in turn (score + 1, one note per save) flat out for S seconds (2): saves/s of both
// processes together. Strata: a private-queue context per worker, each note read once and
// kept; plain: `UPDATE ... SET score = score + 1` per save; Fluent: `find` then `save`.
//
// Scenario 5, readers under a writer: the first process runs 2 readers of the 1% query
// (priority = 7 of 10,000 notes, 100 rows, indexed) for S seconds, first idle, then while the
// second process inserts 1,000 notes every 50 ms: queries/s of each, and busy ÷ idle.
import FluentKit
import FluentPostgresDriver
import Foundation
import Logging
import NIOCore
import NIOPosix
import PostgresNIO
import Strata
import StrataPostgres

final class InstanceNote: ManagedObject {
    override class var entityName: String { "Note" }
    @Attribute var title: String = ""
    @Attribute(indexed: true) var priority: Int64 = 0
    @Attribute var score: Int64 = 0
}

/// The same table for plain statements and Fluent: schema `pgbench_plain`, table `notes`.
final class FluentNote: Model, @unchecked Sendable {
    static let schema = "notes"
    static let space: String? = "pgbench_plain"
    @ID(custom: "id", generatedBy: .user) var id: Int64?
    @Field(key: "version") var version: Int64
    @Field(key: "title") var title: String
    @Field(key: "priority") var priority: Int64
    @Field(key: "score") var score: Int64

    init() {}

    init(id: Int64, title: String, priority: Int64) {
        self.id = id
        self.version = 1
        self.title = title
        self.priority = priority
        self.score = 0
    }
}

enum System: String, CaseIterable {
    case strata, plain, fluent
}

let port = ProcessInfo.processInfo.environment["STRATA_PG_PORT"].flatMap(Int.init) ?? 54329
let logger = Logger(label: "pg-instances")
let model = try ManagedObjectModel(types: [InstanceNote.self])
let strataSchema = "pgbench_instances"
let plainSchema = "pgbench_plain"
let objectsPerWorker = 100
let readerCount = 2
let queryObjects = 10_000

func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

/// A line of `handle` (without its newline), read on a thread of its own; nil at its end.
func readLine(from handle: FileHandle) async -> String? {
    await withCheckedContinuation { continuation in
        Thread.detachNewThread {
            var bytes: [UInt8] = []
            while true {
                let data = handle.readData(ofLength: 1)
                guard let byte = data.first else {
                    continuation.resume(returning: bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self))
                    return
                }
                if byte == UInt8(ascii: "\n") {
                    continuation.resume(returning: String(decoding: bytes, as: UTF8.self))
                    return
                }
                bytes.append(byte)
            }
        }
    }
}

func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

// MARK: Connections

func strataCoordinator(contexts: Int) async throws -> PersistentStoreCoordinator {
    var configuration = PostgresStoreConfiguration(host: "127.0.0.1", port: port, username: "strata", database: "strata_test", schema: strataSchema)
    configuration.maximumConnections = max(8, contexts)
    let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
    try await coordinator.addPersistentStore(type: .postgres(configuration))
    return coordinator
}

func plainClient(contexts: Int) -> PostgresClient {
    var configuration = PostgresClient.Configuration(host: "127.0.0.1", port: port, username: "strata", password: nil, database: "strata_test", tls: .disable)
    configuration.options.maximumConnections = max(8, contexts)
    return PostgresClient(configuration: configuration)
}

func fluentDatabases(contexts: Int) -> Databases {
    let databases = Databases(threadPool: NIOThreadPool.singleton, on: MultiThreadedEventLoopGroup.singleton)
    let configuration = SQLPostgresConfiguration(
        hostname: "127.0.0.1", port: port, username: "strata", password: nil, database: "strata_test", tls: .disable)
    databases.use(.postgres(configuration: configuration, maxConnectionsPerEventLoop: max(8, contexts)), as: .psql)
    return databases
}

/// Runs `body` with a PostgresClient running.
func withClient<R: Sendable>(contexts: Int, _ body: @Sendable (PostgresClient) async throws -> R) async throws -> R {
    let client = plainClient(contexts: contexts)
    return try await withThrowingTaskGroup(of: R?.self) { group in
        group.addTask {
            await client.run()
            return nil
        }
        let result = try await body(client)
        group.cancelAll()
        return result
    }
}

// MARK: Setup (first process)

func setUp(_ system: System, rows: Int, priorities: Bool) async throws {
    try await withClient(contexts: 1) { client in
        for schema in [strataSchema, plainSchema] {
            try await client.query(PostgresQuery(unsafeSQL: "DROP SCHEMA IF EXISTS \"\(schema)\" CASCADE"))
        }
        guard system != .strata else { return }
        try await client.query(PostgresQuery(unsafeSQL: "CREATE SCHEMA \"\(plainSchema)\""))
        try await client.query(PostgresQuery(unsafeSQL: """
            CREATE TABLE "\(plainSchema)".notes (id bigint PRIMARY KEY, version bigint NOT NULL, title text NOT NULL, priority bigint NOT NULL, score bigint NOT NULL)
            """))
        try await client.query(PostgresQuery(unsafeSQL: "CREATE INDEX ON \"\(plainSchema)\".notes (priority)"))
        var index = 0
        while index < rows {
            let end = min(rows, index + 1_000)
            var bindings = PostgresBindings(capacity: (end - index) * 3)
            var values: [String] = []
            for row in index..<end {
                let base = bindings.count
                bindings.append(Int64(row + 1))
                bindings.append(String(format: "n%06d", row))
                bindings.append(Int64(priorities ? row % 100 : 0))
                values.append("($\(base + 1), 1, $\(base + 2), $\(base + 3), 0)")
            }
            try await client.query(PostgresQuery(
                unsafeSQL: "INSERT INTO \"\(plainSchema)\".notes (id, version, title, priority, score) VALUES \(values.joined(separator: ", "))",
                binds: bindings))
            index = end
        }
    }
    guard system == .strata else { return }
}

func setUpStrata(rows: Int, priorities: Bool) async throws {
    let coordinator = try await strataCoordinator(contexts: 1)
    let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
    try await context.perform { context in
        for row in 0..<rows {
            let note = InstanceNote()
            note.title = String(format: "n%06d", row)
            note.priority = Int64(priorities ? row % 100 : 0)
            try context.insert(note)
            if (row + 1) % 1_000 == 0 {
                try context.save()
                context.reset()
            }
        }
        try context.save()
    }
    try await coordinator.close()
}

// MARK: Scenario 4: contention

/// Saves made by `contexts` workers of process `process` in `duration`, each updating its
/// own notes (titles `n%06d` from `(process * contexts + worker) * 100`).
func contention(_ system: System, process: Int, contexts: Int, duration: Duration, start: @escaping @Sendable () async -> Void) async throws -> Int {
    switch system {
    case .strata:
        let coordinator = try await strataCoordinator(contexts: contexts)
        let ids = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            var request = FetchRequest<InstanceNote>()
            request.sortDescriptors = [FetchSortDescriptor(key: "title", ascending: true)]
            return try context.fetch(request).map(\.objectID)
        }
        var workers: [(ManagedObjectContext, [ManagedObjectID])] = []
        for worker in 0..<contexts {
            let first = (process * contexts + worker) * objectsPerWorker
            let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
            let mine = Array(ids[first..<(first + objectsPerWorker)])
            try await context.perform { context in
                context.retainsRegisteredObjects = true
                for id in mine { _ = try context.existingObject(with: id).objectID }
            }
            workers.append((context, mine))
        }
        await start()
        let saves = try await steps(workers: workers.count, for: duration) { [workers] worker, done in
            let (context, mine) = workers[worker]
            let id = mine[done % mine.count]
            try await context.perform { context in
                (context.registeredObject(for: id) as? InstanceNote)?.score += 1
                try context.save()
            }
        }
        try await coordinator.close()
        return saves
    case .plain:
        return try await withClient(contexts: contexts) { client in
            await start()
            return try await steps(workers: contexts, for: duration) { worker, done in
                let id = Int64((process * contexts + worker) * objectsPerWorker + done % objectsPerWorker + 1)
                try await client.query("UPDATE \(unescaped: "\"\(plainSchema)\"").notes SET score = score + 1, version = version + 1 WHERE id = \(id)")
            }
        }
    case .fluent:
        let databases = fluentDatabases(contexts: contexts)
        let database = databases.database(.psql, logger: logger, on: MultiThreadedEventLoopGroup.singleton.any())!
        await start()
        let saves = try await steps(workers: contexts, for: duration) { worker, done in
            let id = Int64((process * contexts + worker) * objectsPerWorker + done % objectsPerWorker + 1)
            guard let note = try await FluentNote.find(id, on: database) else { throw CancellationError() }
            note.score += 1
            note.version += 1
            try await note.save(on: database)
        }
        await databases.shutdownAsync()
        return saves
    }
}

/// Runs `workers` tasks at once, each calling `step(worker, done)` (`done`: the steps that
/// worker finished so far) again and again until `duration` from now has passed, and returns
/// the steps finished in all: how every scenario here counts its work.
func steps(
    workers: Int, for duration: Duration, _ step: @escaping @Sendable (_ worker: Int, _ done: Int) async throws -> Void
) async throws -> Int {
    let deadline = ContinuousClock.now + duration
    return try await withThrowingTaskGroup(of: Int.self) { group in
        for worker in 0..<workers {
            group.addTask {
                var done = 0
                while ContinuousClock.now < deadline {
                    try await step(worker, done)
                    done += 1
                }
                return done
            }
        }
        return try await group.reduce(0, +)
    }
}

// MARK: Scenario 5: readers under a writer

/// Queries of the 1% query made by `readerCount` readers in `duration`.
func readers(_ system: System, duration: Duration) async throws -> Int {
    switch system {
    case .strata:
        let coordinator = try await strataCoordinator(contexts: readerCount)
        // The request is made once, as an application keeps it.
        var request = FetchRequest<InstanceNote>()
        request.predicate = try FetchPredicate(format: "priority == 7", argumentArray: [])
        request.returnsObjectsAsFaults = false
        let contexts = (0..<readerCount).map { _ in ManagedObjectContext(.privateQueue, coordinator: coordinator) }
        let queries = try await steps(workers: readerCount, for: duration) { [request] reader, _ in
            let found = try await contexts[reader].perform { context in
                let count = try context.fetch(request).reduce(0) { $0 + ($1.score >= 0 ? 1 : 0) }
                context.reset()
                return count
            }
            precondition(found >= 100)
        }
        try await coordinator.close()
        return queries
    case .plain:
        return try await withClient(contexts: readerCount) { client in
            try await steps(workers: readerCount, for: duration) { _, _ in
                var found = 0
                let rows = try await client.query(
                    "SELECT id, version, title, priority, score FROM \(unescaped: "\"\(plainSchema)\"").notes WHERE priority = 7")
                for try await (id, _, title, _, score) in rows.decode((Int64, Int64, String, Int64, Int64).self) where id > 0 && !title.isEmpty && score >= 0 {
                    found += 1
                }
                precondition(found >= 100)
            }
        }
    case .fluent:
        let databases = fluentDatabases(contexts: readerCount)
        let database = databases.database(.psql, logger: logger, on: MultiThreadedEventLoopGroup.singleton.any())!
        let queries = try await steps(workers: readerCount, for: duration) { _, _ in
            let found = try await FluentNote.query(on: database).filter(\.$priority == 7).all()
            precondition(found.count >= 100)
        }
        await databases.shutdownAsync()
        return queries
    }
}

/// The second process's writer: 1,000 new notes every 50 ms until `stop` ends.
func writer(_ system: System, start: @escaping @Sendable () async -> Void, stop: @escaping @Sendable () async -> Void) async throws -> Int {
    let flag = StopFlag()
    // Watches for "stop" once "go" was read (both come on the same standard input).
    func watchForStop() {
        Task {
            await stop()
            flag.set()
        }
    }
    var inserted = 0
    var next = 1_000_000
    switch system {
    case .strata:
        let coordinator = try await strataCoordinator(contexts: 1)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        await start()
        watchForStop()
        while !flag.isSet {
            let began = ContinuousClock.now
            let first = next
            try await context.perform { context in
                for row in first..<(first + 1_000) {
                    let note = InstanceNote()
                    note.title = String(format: "w%07d", row)
                    note.priority = Int64(row % 100)
                    try context.insert(note)
                }
                try context.save()
                context.reset()
            }
            next += 1_000
            inserted += 1_000
            try await Task.sleep(until: began + .milliseconds(50), clock: .continuous)
        }
        try await coordinator.close()
    case .plain, .fluent:
        let databases = fluentDatabases(contexts: 1)
        let database = databases.database(.psql, logger: logger, on: MultiThreadedEventLoopGroup.singleton.any())!
        let client = plainClient(contexts: 1)
        let running = Task { await client.run() }
        await start()
        watchForStop()
        while !flag.isSet {
            let began = ContinuousClock.now
            if system == .fluent {
                let notes = (next..<(next + 1_000)).map { FluentNote(id: Int64($0), title: String(format: "w%07d", $0), priority: Int64($0 % 100)) }
                try await notes.create(on: database)
            } else {
                var bindings = PostgresBindings(capacity: 3_000)
                var values: [String] = []
                for row in next..<(next + 1_000) {
                    let base = bindings.count
                    bindings.append(Int64(row))
                    bindings.append(String(format: "w%07d", row))
                    bindings.append(Int64(row % 100))
                    values.append("($\(base + 1), 1, $\(base + 2), $\(base + 3), 0)")
                }
                try await client.query(PostgresQuery(
                    unsafeSQL: "INSERT INTO \"\(plainSchema)\".notes (id, version, title, priority, score) VALUES \(values.joined(separator: ", "))",
                    binds: bindings))
            }
            next += 1_000
            inserted += 1_000
            try await Task.sleep(until: began + .milliseconds(50), clock: .continuous)
        }
        running.cancel()
        await databases.shutdownAsync()
    }
    return inserted
}

/// A flag set once, read from any task.
final class StopFlag: @unchecked Sendable {
    // @unchecked: the one field is only touched under `lock`.
    private let lock = NSLock()
    private var value = false
    var isSet: Bool { lock.withLock { value } }
    func set() { lock.withLock { value = true } }
}

// MARK: The second process

let arguments = CommandLine.arguments
if arguments.count >= 4, arguments[1] == "--worker", let system = System(rawValue: arguments[3]) {
    // pg-instances --worker contention SYSTEM CONTEXTS SECONDS | --worker writer SYSTEM
    let waitForGo: @Sendable () async -> Void = {
        say("ready")
        _ = await readLine(from: .standardInput)
    }
    switch arguments[2] {
    case "contention":
        let contexts = Int(arguments[4]) ?? 4
        let duration = Duration.milliseconds(Int(arguments[5]) ?? 2_000)
        let saves = try await contention(system, process: 1, contexts: contexts, duration: duration, start: waitForGo)
        say("saves \(saves)")
    default:
        let inserted = try await writer(system, start: waitForGo, stop: { _ = await readLine(from: .standardInput) })
        say("inserted \(inserted)")
    }
    exit(0)
}

// MARK: The first process

var duration = Duration.seconds(2)
var contexts = 4
var runs = 3
var iterator = arguments.dropFirst().makeIterator()
while let argument = iterator.next() {
    let value = iterator.next().flatMap(Int.init)
    switch (argument, value) {
    case ("--seconds", let n?): duration = .seconds(n)
    case ("--contexts", let n?): contexts = n
    case ("--runs", let n?): runs = max(1, n)
    default:
        FileHandle.standardError.write(Data("usage: pg-instances [--seconds S] [--contexts C] [--runs R]\n".utf8))
        exit(2)
    }
}
let milliseconds = Int(duration.components.seconds) * 1_000

/// The second process, started with `arguments`; its standard input and output.
/// `@unchecked Sendable`: its fields are set once, and Pipe and Process are thread-safe for
/// the reads and writes made here (one reader, one writer).
final class Peer: @unchecked Sendable {
    let process = Process()
    let input = Pipe()
    let output = Pipe()

    init(_ arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        process.arguments = arguments
        process.standardInput = input
        process.standardOutput = output
        try process.run()
    }

    func expect(_ prefix: String) async throws -> String {
        guard let line = await readLine(from: output.fileHandleForReading), line.hasPrefix(prefix) else {
            throw CocoaError(.fileReadUnknown, userInfo: [NSLocalizedDescriptionKey: "the second process did not say \(prefix)"])
        }
        return String(line.dropFirst(prefix.count)).trimmingCharacters(in: .whitespaces)
    }

    func send(_ line: String) {
        input.fileHandleForWriting.write(Data((line + "\n").utf8))
    }
}

var contentionRuns: [System: [Double]] = [:]
var idleRuns: [System: [Double]] = [:]
var busyRuns: [System: [Double]] = [:]
// The systems take turns within each run, so that a slow moment of the machine does not
// fall on one of them only; each cell is the median of the runs.
for run in 0..<runs {
for system in System.allCases {
    // Scenario 4.
    try await setUp(system, rows: 2 * contexts * objectsPerWorker, priorities: false)
    if system == .strata { try await setUpStrata(rows: 2 * contexts * objectsPerWorker, priorities: false) }
    let peer = try Peer(["--worker", "contention", system.rawValue, "\(contexts)", "\(milliseconds)"])
    _ = try await peer.expect("ready")
    let mine = try await contention(system, process: 0, contexts: contexts, duration: duration) { peer.send("go") }
    let theirs = Int(try await peer.expect("saves")) ?? 0
    peer.process.waitUntilExit()
    contentionRuns[system, default: []].append(Double(mine + theirs) / seconds(duration))
    FileHandle.standardError.write(Data("\(system) contention: \(mine) + \(theirs) saves\n".utf8))

    // Scenario 5.
    try await setUp(system, rows: queryObjects, priorities: true)
    if system == .strata { try await setUpStrata(rows: queryObjects, priorities: true) }
    let idle = try await readers(system, duration: duration)
    let writing = try Peer(["--worker", "writer", system.rawValue])
    _ = try await writing.expect("ready")
    writing.send("go")
    let busy = try await readers(system, duration: duration)
    writing.send("stop")
    let inserted = try await writing.expect("inserted")
    writing.process.waitUntilExit()
    idleRuns[system, default: []].append(Double(idle) / seconds(duration))
    busyRuns[system, default: []].append(Double(busy) / seconds(duration))
    FileHandle.standardError.write(Data("run \(run + 1): \(system) readers: \(idle) idle, \(busy) busy, writer inserted \(inserted)\n".utf8))
}
}
func median(_ values: [Double]?) -> Double? {
    guard let values, !values.isEmpty else { return nil }
    return values.sorted()[values.count / 2]
}
var contentionRates: [System: Double] = [:]
var readerRates: [System: (idle: Double, busy: Double)] = [:]
for system in System.allCases {
    contentionRates[system] = median(contentionRuns[system])
    if let idle = median(idleRuns[system]), let busy = median(busyRuns[system]) { readerRates[system] = (idle, busy) }
}
try await withClient(contexts: 1) { client in
    for schema in [strataSchema, plainSchema] {
        try await client.query(PostgresQuery(unsafeSQL: "DROP SCHEMA IF EXISTS \"\(schema)\" CASCADE"))
    }
}

print("pg-instances: two processes, \(contexts) workers each (scenario 4), \(readerCount) readers under a writer in the other process (scenario 5), \(Int(seconds(duration))) s each, median of \(runs) runs")
print("")
print("| scenario | Strata | plain postgres-nio | Fluent | Strata ÷ plain (time) | Strata ÷ Fluent (time) |")
print("| --- | --- | --- | --- | --- | --- |")
func rate(_ value: Double, _ unit: String) -> String { "\(Int(value.rounded())) \(unit)" }
if let s = contentionRates[.strata], let p = contentionRates[.plain], let f = contentionRates[.fluent] {
    print("| 4 · contention, saves/s | \(rate(s, "saves/s")) | \(rate(p, "saves/s")) | \(rate(f, "saves/s")) | \(String(format: "%.2f×", p / s)) | \(String(format: "%.2f×", f / s)) |")
}
for (label, pick) in [("idle", { (r: (idle: Double, busy: Double)) in r.idle }), ("under a writer", { (r: (idle: Double, busy: Double)) in r.busy })] {
    if let s = readerRates[.strata].map(pick), let p = readerRates[.plain].map(pick), let f = readerRates[.fluent].map(pick) {
        print("| 5 · 1% query, \(label), queries/s | \(rate(s, "q/s")) | \(rate(p, "q/s")) | \(rate(f, "q/s")) | \(String(format: "%.2f×", p / s)) | \(String(format: "%.2f×", f / s)) |")
    }
}
if let s = readerRates[.strata], let p = readerRates[.plain], let f = readerRates[.fluent] {
    print("| 5 · busy ÷ idle | \(String(format: "%.2f", s.busy / s.idle)) | \(String(format: "%.2f", p.busy / p.idle)) | \(String(format: "%.2f", f.busy / f.idle)) | | |")
}
