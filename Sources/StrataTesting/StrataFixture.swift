import Foundation
import InMemoryLogging
import InMemoryTracing
import Logging
import MetricsTestKit
import Strata
import Testing
import Tracing

/// A container of its own for one test: an in-memory store (same format and semantics as
/// an LMDB store on disk, gone with the test), with its logs, metrics and spans captured.
///
/// ```swift
/// @Test(.strataStore(types: [Folder.self, Note.self]))
/// func savesANote() async throws {
///     let store = StrataFixture.current!
///     try await store.container.performBackgroundTask { context in
///         let note = Note()
///         note.title = "a"
///         try context.insert(note)
///         try context.save()
///     }
///     #expect(store.metrics.counterTotal(label: StrataMetricName.saves) == 1)
/// }
/// ```
///
/// Or made directly, for a test that wants several: `try await StrataFixture(types: ...)`.
/// Nothing is global: the logger, metrics factory and tracer are the container's own, so
/// tests run in parallel without sharing a bootstrapped backend.
public final class StrataFixture: Sendable {
    /// The fixture of the running test, set by the ``StrataStoreTrait`` (`.strataStore(...)`).
    @TaskLocal public static var current: StrataFixture?

    /// The container, its store loaded.
    public let container: PersistentContainer
    /// What the container logged (every level).
    public let logs: InMemoryLogHandler
    /// The container's metrics (swift-metrics' `TestMetrics`).
    public let metrics: TestMetrics
    /// The container's spans.
    public let tracer: InMemoryTracer

    /// A container named `name` for `model` on an in-memory store with `options`, loaded.
    ///
    /// - Throws: ``Strata/PersistentContainerError`` when the store cannot be made.
    public init(
        name: String = "Test", model: ManagedObjectModel, options: PersistentStore.Options = StrataFixture.defaultOptions
    ) async throws {
        var handler = InMemoryLogHandler()
        handler.logLevel = .trace
        let logs = handler
        let logger = Logger(label: "strata-test") { _ in logs }
        let metrics = TestMetrics()
        let tracer = InMemoryTracer()
        container = PersistentContainer(name: name, managedObjectModel: model, logger: logger, metricsFactory: metrics, tracer: tracer)
        container.persistentStoreDescriptions = [.inMemory(options: options)]
        self.logs = logs
        self.metrics = metrics
        self.tracer = tracer
        try await container.loadPersistentStores()
    }

    /// A container whose model is built from `types`: see ``init(name:model:options:)``.
    ///
    /// - Throws: ``Strata/ModelError`` for an invalid model; what the other initialiser throws.
    public convenience init(
        name: String = "Test", types: [ManagedObject.Type], options: PersistentStore.Options = StrataFixture.defaultOptions
    ) async throws {
        try await self.init(name: name, model: ManagedObjectModel(types: types), options: options)
    }

    /// The options of a test store: commits not flushed (nothing outlives the test).
    public static var defaultOptions: PersistentStore.Options {
        var options = PersistentStore.Options()
        options.durability = .noSync
        return options
    }

    /// Closes the container (its coordinator takes no more saves; the store goes).
    public func close() async throws {
        try await container.close()
    }

    /// Waits until `context` posts its next `didSave` notification, with a deadline, and
    /// returns it: for code under test that saves on its own (a background job, a request
    /// handler). Subscribe before triggering the save: call it in a child task, or start
    /// the wait first with ``saves(of:)``.
    ///
    /// - Throws: ``AsyncRecorder/Timeout`` after `timeout`.
    public func nextSave(of context: ManagedObjectContext, timeout: Duration = .seconds(60)) async throws -> ContextNotification {
        let recorder = saves(of: context)
        defer { Task { await recorder.cancel() } }
        return try await recorder.wait(forCount: 1, timeout: timeout)[0]
    }

    /// Records `context`'s `didSave` notifications from now on (wait for them with
    /// ``AsyncRecorder/wait(forCount:timeout:)``).
    public func saves(of context: ManagedObjectContext) -> AsyncRecorder<ContextNotification> {
        AsyncRecorder(context.notifications(of: [.didSave]))
    }
}

/// The trait that gives each test (or each test of a suite) a ``StrataFixture`` of its
/// own, as ``StrataFixture/current``: `@Test(.strataStore(types: [Note.self]))`. The
/// container closes when the test ends.
public struct StrataStoreTrait: TestTrait, SuiteTrait, TestScoping {
    let model: @Sendable () throws -> ManagedObjectModel
    let options: PersistentStore.Options

    /// A fixture per test case, even when the trait is on a suite.
    public var isRecursive: Bool { true }

    /// Runs `function` with a new fixture bound to ``StrataFixture/current``.
    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        guard testCase != nil else { return try await function() }   // the suite itself: its tests get theirs
        let fixture = try await StrataFixture(name: "Test", model: model(), options: options)
        do {
            try await StrataFixture.$current.withValue(fixture) { try await function() }
        } catch {
            try? await fixture.close()
            throw error
        }
        try await fixture.close()
    }
}

extension Trait where Self == StrataStoreTrait {
    /// Each test gets a ``StrataFixture`` of a model built from `types`.
    public static func strataStore(types: [ManagedObject.Type], options: PersistentStore.Options = StrataFixture.defaultOptions) -> Self {
        StrataStoreTrait(model: { try ManagedObjectModel(types: types) }, options: options)
    }

    /// Each test gets a ``StrataFixture`` of `model`.
    public static func strataStore(model: ManagedObjectModel, options: PersistentStore.Options = StrataFixture.defaultOptions) -> Self {
        StrataStoreTrait(model: { model }, options: options)
    }
}
