// swift-tools-version: 6.1
import PackageDescription

// The example server: a package of its own (as Benchmarks/ is), so that Strata's users
// never resolve Hummingbird, SwiftNIO or the Prometheus client. Run from this directory:
//
//   swift run -c release notes-server --port 8080 --store ./Notes.strata
//   swift test
let package = Package(
    name: "NotesServer",
    platforms: [.macOS(.v15)],
    dependencies: [
        // The root package. `name:` pins the identity used by `.product(package:)` below,
        // whatever the directory holding the checkout is called.
        .package(name: "Strata", path: "../.."),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        // Tests only: a real HTTP client against the real server.
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
    ],
    targets: [
        // The application: the model, the routes, the error mapping and building the server.
        .target(
            name: "NotesServerCore",
            dependencies: [
                .product(name: "Strata", package: "Strata"),
                .product(name: "StrataLifecycle", package: "Strata"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Metrics", package: "swift-metrics"),
            ]
        ),
        // `notes-server`: parses its options, bootstraps logging and metrics, runs the services.
        .executableTarget(
            name: "notes-server",
            dependencies: [
                "NotesServerCore",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ]
        ),
        .testTarget(
            name: "NotesServerTests",
            dependencies: [
                "NotesServerCore",
                .product(name: "Strata", package: "Strata"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
