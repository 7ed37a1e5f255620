// swift-tools-version: 6.1
import PackageDescription

// The benchmarks: a package of its own, so the root package does not depend on
// ordo-one/benchmark or GRDB. Run from this directory:
//
//   swift package benchmark                  # ordo-one/benchmark suites (StrataLMDB, Strata)
//   swift run -c release lmdb-ratios         # StrataLMDB / raw C ratio table
//   swift run -c release strata-bench        # Strata / raw LMDB / GRDB scenario table
let package = Package(
    name: "StrataBenchmarks",
    dependencies: [
        // The root package. `name:` pins the package's name for the `.product(package:)`
        // references below, whatever the directory holding the checkout is called
        // (SwiftPM otherwise derives a path dependency's identity from the directory name).
        .package(name: "Strata", path: ".."),
        // 1.38.1's default traits include RuntimeInterposer, whose repository is not
        // available here; MallocInterposer alone resolves and needs no jemalloc.
        .package(url: "https://github.com/ordo-one/benchmark", exact: "1.38.1", traits: ["MallocInterposer"]),
        // The peer baseline of strata-bench: SQLite through GRDB (needs libsqlite3-dev).
        .package(url: "https://github.com/groue/GRDB.swift", exact: "7.10.0"),
        // pg-bench's baseline: plain postgres-nio statements (the root package resolves the same version).
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        // pg-instances' second baseline: Fluent (its core, FluentKit, with the Postgres driver;
        // vapor/fluent itself only adds Vapor's integration).
        .package(url: "https://github.com/vapor/fluent-kit", exact: "1.57.0"),
        .package(url: "https://github.com/vapor/fluent-postgres-driver", exact: "2.14.0"),
    ],
    targets: [
        // LMDB's C API for the raw baselines. StrataLMDB's own CLMDB module is internal to
        // the root package (not a product), so this package declares its own.
        .systemLibrary(
            name: "CLMDBRaw",
            pkgConfig: "lmdb",
            providers: [.apt(["liblmdb-dev"])]
        ),
        // The scenarios, each written once through StrataLMDB and once through the C API.
        .target(
            name: "LMDBBenchSupport",
            dependencies: [
                "CLMDBRaw",
                .product(name: "StrataLMDB", package: "Strata"),
                .product(name: "StrataTesting", package: "Strata"),
            ]
        ),
        // `swift package benchmark`
        .executableTarget(
            name: "StrataLMDBBenchmarks",
            dependencies: [
                "LMDBBenchSupport",
                .product(name: "Benchmark", package: "benchmark"),
            ],
            path: "Benchmarks/StrataLMDBBenchmarks",
            plugins: [
                .plugin(name: "BenchmarkPlugin", package: "benchmark"),
            ]
        ),
        // `swift package benchmark`: the Strata scenarios of strata-bench, small, Strata only.
        .executableTarget(
            name: "StrataBenchmarks",
            dependencies: [
                "StrataBenchSupport",
                .product(name: "Strata", package: "Strata"),
                .product(name: "Benchmark", package: "benchmark"),
            ],
            path: "Benchmarks/StrataBenchmarks",
            plugins: [
                .plugin(name: "BenchmarkPlugin", package: "benchmark"),
            ]
        ),
        // The Strata scenarios through Strata, raw liblmdb and GRDB.
        .target(
            name: "StrataBenchSupport",
            dependencies: [
                "CLMDBRaw",
                .product(name: "Strata", package: "Strata"),
                .product(name: "StrataTesting", package: "Strata"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),
        // `swift run -c release strata-bench`
        .executableTarget(
            name: "strata-bench",
            dependencies: ["StrataBenchSupport"]
        ),
        // `swift run -c release pg-bench` (make pg-bench): the PostgreSQL store against plain postgres-nio.
        .executableTarget(
            name: "pg-bench",
            dependencies: [
                .product(name: "Strata", package: "Strata"),
                .product(name: "StrataPostgres", package: "Strata"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ]
        ),
        // `swift run -c release pg-group-commit [saves]`: the experiment behind the PostgreSQL
        // store's saves (one transaction each, not savepoints in a group's transaction).
        .executableTarget(name: "pg-group-commit", dependencies: [.product(name: "PostgresNIO", package: "postgres-nio")]),
        // `swift run -c release pg-instances` (make pg-bench): two processes through one
        // PostgreSQL, Strata against plain postgres-nio and Fluent.
        .executableTarget(
            name: "pg-instances",
            dependencies: [
                .product(name: "Strata", package: "Strata"),
                .product(name: "StrataPostgres", package: "Strata"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "FluentKit", package: "fluent-kit"),
                .product(name: "FluentPostgresDriver", package: "fluent-postgres-driver"),
            ]
        ),
        // `swift run -c release lmdb-ratios`
        .executableTarget(
            name: "lmdb-ratios",
            dependencies: ["LMDBBenchSupport"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
