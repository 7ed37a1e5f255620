import Foundation
import Logging
import Metrics
import NotesServerCore
import Prometheus

// notes-server [--host ADDRESS] [--port N] [--store PATH | --in-memory] [--log-level LEVEL]
//
// Bootstraps logging and Prometheus metrics (here only: tests pass a factory to the
// container instead), loads the store, then runs the HTTP server and the container in
// one ServiceGroup that shuts down gracefully on SIGTERM and SIGINT.

struct Options {
    var host = "127.0.0.1"
    var port = 8080
    var store: NotesStore = .directory(URL(fileURLWithPath: "Notes.strata"))
    var logLevel: Logger.Level = .info

    static let usage = "usage: notes-server [--host ADDRESS] [--port N] [--store PATH | --in-memory] [--log-level trace|debug|info|notice|warning|error|critical]"

    init(_ arguments: [String]) throws(UsageError) {
        var rest = arguments[...]
        func value(_ option: String) throws(UsageError) -> String {
            guard let value = rest.popFirst() else { throw UsageError("\(option) needs a value") }
            return value
        }
        while let argument = rest.popFirst() {
            switch argument {
            case "--host": host = try value(argument)
            case "--port":
                let text = try value(argument)
                guard let number = Int(text), (0...65_535).contains(number) else { throw UsageError("bad port '\(text)'") }
                port = number
            case "--store": store = .directory(URL(fileURLWithPath: try value(argument)))
            case "--in-memory": store = .inMemory
            case "--log-level":
                let text = try value(argument)
                guard let level = Logger.Level(rawValue: text) else { throw UsageError("bad log level '\(text)'") }
                logLevel = level
            case "--help", "-h": throw UsageError(nil)
            default: throw UsageError("unknown option '\(argument)'")
            }
        }
    }
}

struct UsageError: Error {
    let message: String?
    init(_ message: String?) { self.message = message }
}

let options: Options
do {
    options = try Options(Array(CommandLine.arguments.dropFirst()))
} catch {
    if let message = error.message { FileHandle.standardError.write(Data("notes-server: \(message)\n".utf8)) }
    FileHandle.standardError.write(Data("\(Options.usage)\n".utf8))
    exit(error.message == nil ? 0 : 64)
}

let level = options.logLevel
LoggingSystem.bootstrap { label in
    var handler = StreamLogHandler.standardError(label: label)
    handler.logLevel = level
    return handler
}
let registry = PrometheusCollectorRegistry()
MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
let logger = Logger(label: "notes-server")

do {
    let container = try NotesServer.makeContainer(store: options.store, logger: logger)
    // Loaded before the server listens, so that no request finds the store missing;
    // StrataService then has nothing left to load and closes the container at shutdown.
    try await container.loadPersistentStores()
    let application = NotesServer.makeApplication(
        container: container, registry: registry,
        configuration: NotesServerConfiguration(host: options.host, port: options.port),
        logger: logger,
        onServerRunning: { port in
            // Unbuffered, so scripts waiting for the line (Scripts/load.sh) see it at once.
            FileHandle.standardOutput.write(Data("notes-server listening on http://\(options.host):\(port)\n".utf8))
        }
    )
    try await NotesServer.makeServiceGroup(application: application, container: container, logger: logger).run()
    logger.info("notes-server stopped")
} catch {
    logger.critical("notes-server failed", metadata: ["error": "\(error)"])
    exit(1)
}
