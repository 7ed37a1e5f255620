import Foundation
import PostgresNIO
import Logging

// Group commit by savepoints against one transaction per save, in plain postgres-nio
// statements (no Strata): 8 workers, each saving (updating its own row) `saves` times,
// first each save its own transaction on a pooled connection, then saves gathered by a
// leader into one transaction with a SAVEPOINT each (the design issue 26 proposed). Run
// against the cluster of `make pg-start` (fsync off) and one with fsync on; see the
// "Saves" section of the Running on PostgreSQL article.
//
//   cd Benchmarks && STRATA_PG_PORT=54329 swift run -c release pg-group-commit 250
let port = Int(ProcessInfo.processInfo.environment["STRATA_PG_PORT"] ?? "54329") ?? 54329
let schema = "group_commit_\(getpid())"
var configuration = PostgresClient.Configuration(host: "127.0.0.1", port: port, username: "strata", password: nil, database: "strata_test", tls: .disable)
configuration.options.maximumConnections = 8
let client = PostgresClient(configuration: configuration)
let workers = 8
let saves = Int(CommandLine.arguments.dropFirst().first ?? "250") ?? 250

actor Group {
    var pending: [(Int, CheckedContinuation<Void, Error>)] = []
    var running = false
    func submit(_ row: Int, client: PostgresClient) async throws {
        try await withCheckedThrowingContinuation { continuation in
            pending.append((row, continuation))
            if !running {
                running = true
                Task { await self.drain(client: client) }
            }
        }
    }
    func take() -> [(Int, CheckedContinuation<Void, Error>)] {
        let taken = pending
        pending = []
        if taken.isEmpty { running = false }
        return taken
    }
    func drain(client: PostgresClient) async {
        while true {
            let batch = take()
            if batch.isEmpty { return }
            do {
                try await client.withConnection { connection in
                    _ = try await connection.query("BEGIN", logger: Logger(label: "p"))
                    for (row, _) in batch {
                        _ = try await connection.query("SAVEPOINT s", logger: Logger(label: "p"))
                        _ = try await connection.query("UPDATE \(unescaped: schema).items SET version = version + 1 WHERE id = \(row)", logger: Logger(label: "p"))
                        _ = try await connection.query("RELEASE SAVEPOINT s", logger: Logger(label: "p"))
                    }
                    _ = try await connection.query("COMMIT", logger: Logger(label: "p"))
                }
                for (_, continuation) in batch { continuation.resume() }
            } catch {
                for (_, continuation) in batch { continuation.resume(throwing: error) }
            }
        }
    }
}

try await withThrowingTaskGroup(of: Void.self) { group in
    group.addTask { await client.run() }
    try await Task.detached {
        let logger = Logger(label: "p")
        try await client.query("CREATE SCHEMA \(unescaped: schema)", logger: logger)
        try await client.query("CREATE TABLE \(unescaped: schema).items (id bigint PRIMARY KEY, version bigint NOT NULL)", logger: logger)
        try await client.query("INSERT INTO \(unescaped: schema).items SELECT g, 0 FROM generate_series(0, 7) g", logger: logger)
        for round in 0..<3 {
            var start = DispatchTime.now().uptimeNanoseconds
            try await withThrowingTaskGroup(of: Void.self) { workersGroup in
                for worker in 0..<workers {
                    workersGroup.addTask {
                        for _ in 0..<saves {
                            try await client.withConnection { connection in
                                _ = try await connection.query("BEGIN", logger: logger)
                                _ = try await connection.query("UPDATE \(unescaped: schema).items SET version = version + 1 WHERE id = \(worker)", logger: logger)
                                _ = try await connection.query("COMMIT", logger: logger)
                            }
                        }
                    }
                }
                try await workersGroup.waitForAll()
            }
            let separate = Double(workers * saves) / (Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9)
            let grouper = Group()
            start = DispatchTime.now().uptimeNanoseconds
            try await withThrowingTaskGroup(of: Void.self) { workersGroup in
                for worker in 0..<workers {
                    workersGroup.addTask {
                        for _ in 0..<saves { try await grouper.submit(worker, client: client) }
                    }
                }
                try await workersGroup.waitForAll()
            }
            let grouped = Double(workers * saves) / (Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9)
            print("round \(round): one transaction per save \(Int(separate)) saves/s; savepoints in one transaction per group \(Int(grouped)) saves/s")
        }
        try await client.query("DROP SCHEMA \(unescaped: schema) CASCADE", logger: logger)
    }.value
    group.cancelAll()
}
