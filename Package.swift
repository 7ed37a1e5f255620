// swift-tools-version: 6.1
import PackageDescription

let package = Package(
    name: "Strata",
    products: [
        .library(name: "Strata", targets: ["Strata"]),
        .library(name: "StrataLMDB", targets: ["StrataLMDB"]),
        // A PersistentContainer as a swift-service-lifecycle Service (StrataService): for
        // servers. A separate product, so that plain users do not resolve the lifecycle package.
        .library(name: "StrataLifecycle", targets: ["StrataLifecycle"]),
        // The PostgreSQL store type (`.postgres(configuration)`): a separate product, so that
        // plain users never build SwiftNIO and postgres-nio.
        .library(name: "StrataPostgres", targets: ["StrataPostgres"]),
        // Fixtures for tests of code that uses Strata: a container per test, waits, captures.
        .library(name: "StrataTesting", targets: ["StrataTesting"]),
        .executable(name: "strata", targets: ["StrataCLI"]),
        // The reliability suite's long runs and crash workers (`make reliability`).
        .executable(name: "strata-reliability", targets: ["StrataReliabilityTool"]),
        // Synchronous workloads whose instructions `make profile` counts under callgrind.
        .executable(name: "strata-profile", targets: ["StrataProfile"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        // Property-based tests (Tests/StrataTests/PropertyBased*.swift) only.
        .package(url: "https://github.com/x-sheep/swift-property-based", exact: "2.0.1"),
        // The server ecosystem's logging API (a small API package; the application picks the backend).
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        // The server ecosystem's metrics and tracing APIs (small API packages; the
        // application bootstraps the backends: Prometheus, OpenTelemetry, ...).
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
        // StrataLifecycle only (and the reliability tool's shutdown worker).
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        // StrataPostgres only: the PostgreSQL wire protocol over SwiftNIO.
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
    ],
    targets: [
        // Debian's liblmdb-dev. Only StrataLMDB imports this module.
        .systemLibrary(
            name: "CLMDB",
            pkgConfig: "lmdb",
            providers: [.apt(["liblmdb-dev"])]
        ),
        // The lock vocabulary every module shares: LockedValue and ConditionLock.
        .target(name: "StrataLocks"),
        // Where contexts run: private-queue executors, the main queue, synchronous waits
        // between them, the legacy lock. Knows nothing of Strata's objects or stores.
        .target(name: "StrataExecution", dependencies: ["StrataLocks"]),
        .target(
            name: "StrataLMDB",
            dependencies: ["CLMDB", "StrataLocks"]
        ),
        // One call into the Swift runtime (which validateValue(_:forKey:) a class runs):
        // Sources/CStrataRuntime/include/CStrataRuntime.h.
        .target(name: "CStrataRuntime"),
        .target(
            name: "Strata",
            dependencies: [
                "StrataLocks", "StrataExecution", "StrataLMDB", "CStrataRuntime",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]
        ),
        // What tests of code that uses Strata need: fixtures (a container per test, a
        // Swift Testing trait), waits with deadlines, captured logs, metrics and spans.
        .target(
            name: "StrataTesting",
            dependencies: [
                "StrataLocks", "Strata",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
            ]
        ),
        .target(
            name: "StrataLifecycle",
            dependencies: [
                "Strata",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // A store in PostgreSQL: Strata's SQL store (Sources/Strata/SQL) over postgres-nio's connections.
        .target(
            name: "StrataPostgres",
            dependencies: [
                "Strata", "StrataLocks",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // libFuzzer target for the record decoder: `make fuzz` (replays files when built normally).
        .executableTarget(name: "RecordDecoderFuzzer", dependencies: ["Strata"]),
        // libFuzzer target for the predicate format parser: `make fuzz` (replays files when built normally).
        .executableTarget(name: "PredicateParserFuzzer", dependencies: ["Strata"]),
        // libFuzzer target for the key decoders and object-ID URIs: `make fuzz` (replays files when built normally).
        .executableTarget(name: "KeyDecoderFuzzer", dependencies: ["Strata"]),
        // The reliability suite: a ledger model, crash workers, store audits, fault runs.
        .target(name: "StrataReliability", dependencies: ["Strata", "StrataTesting", "StrataLocks"]),
        .executableTarget(
            name: "StrataReliabilityTool",
            dependencies: [
                "StrataReliability", "Strata", "StrataLifecycle", "StrataLocks",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ]
        ),
        // `make profile`: import and fetch workloads, through Strata and raw liblmdb, counted by callgrind.
        .executableTarget(name: "StrataProfile", dependencies: ["Strata", "CLMDB", "StrataTesting"]),
        .executableTarget(
            name: "StrataCLI",
            dependencies: [
                "Strata", "StrataLMDB", "StrataLocks",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .testTarget(name: "StrataLMDBTests", dependencies: ["StrataLMDB", "StrataTesting"]),
        // The execution layer's state machines, driven without threads.
        .testTarget(name: "StrataExecutionTests", dependencies: ["StrataExecution"]),
        .testTarget(
            name: "StrataTests",
            dependencies: [
                "Strata", "StrataExecution", "StrataLocks", "StrataTesting",
                .product(name: "PropertyBased", package: "swift-property-based"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
            ]
        ),
        .testTarget(
            name: "StrataReliabilityTests",
            dependencies: ["StrataReliability", "Strata", "StrataLMDB", "StrataTesting", "StrataReliabilityTool"]
        ),
        .testTarget(
            name: "StrataLifecycleTests",
            dependencies: [
                "StrataLifecycle", "Strata", "StrataTesting",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "ServiceLifecycleTestKit", package: "swift-service-lifecycle"),
            ]
        ),
        // Needs the PostgreSQL cluster of `make pg-start` (make test starts it).
        .testTarget(
            name: "StrataPostgresTests",
            dependencies: ["StrataPostgres", "Strata", "StrataLocks", "StrataTesting"]
        ),
        .testTarget(
            name: "StrataCLITests",
            dependencies: [
                "StrataCLI", "StrataLMDB", "StrataLocks", "StrataTesting",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
