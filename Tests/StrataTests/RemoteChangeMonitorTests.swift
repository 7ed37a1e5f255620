import Foundation
@testable import Strata
import StrataLocks
import StrataTesting
import Testing

/// The watch for other processes' commits, within one process: it runs only while someone
/// listens, and this process's own commits never raise a remote change. (Two real
/// processes: StrataReliabilityTests' RemoteChangeTests.)
@Suite("Remote changes: the watch")
struct RemoteChangeMonitorTests {
    static func coordinator(in directory: borrowing TemporaryDirectory) async throws -> PersistentStoreCoordinator {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: NotesModel.model)
        var options = CoordinatorStoreTests.options
        options.tracksPersistentHistory = true
        try await coordinator.addPersistentStore(type: .lmdb, at: directory.url, options: options)
        coordinator.remoteChangePollingInterval = .milliseconds(5)
        return coordinator
    }

    static func eventually(_ condition: () -> Bool) async throws -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(5)
        while clock.now < deadline {
            if condition() { return true }
            try await Task.sleep(for: .milliseconds(5))
        }
        return condition()
    }

    @Test("this process's own saves and batch requests, from several contexts at once, raise no remote change")
    func ownCommitsAreNotRemote() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await Self.coordinator(in: directory)
        let events = LockedCounter()
        let listener = Task {
            for await _ in coordinator.remoteChanges { events.increment() }
        }
        #expect(try await Self.eventually { coordinator.remoteChangeMonitor.isWatching })
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<3 {
                group.addTask {
                    let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
                    for round in 0..<30 {
                        try await context.perform { context in
                            let note = Note()
                            note.title = "w\(worker) r\(round)"
                            try context.insert(note)
                            try context.save()
                        }
                    }
                }
            }
            group.addTask {
                for round in 0..<10 {
                    _ = try coordinator.execute(BatchInsertRequest(entityName: "Note", objects: [["title": "batch \(round)"]]))
                }
            }
            try await group.waitForAll()
        }
        let looks = coordinator.remoteChangeMonitor.looks
        #expect(try await Self.eventually { coordinator.remoteChangeMonitor.looks > looks + 5 })
        listener.cancel()
        #expect(events.value == 0)
        _ = directory.url
    }

    @Test("the watch runs while an iterator listens or a root context merges automatically, and stops when none does")
    func watchFollowsListeners() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await Self.coordinator(in: directory)
        let monitor = coordinator.remoteChangeMonitor
        #expect(!monitor.isWatching)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        await context.perform { $0.automaticallyMergesChangesFromParent = true }
        #expect(monitor.isWatching)   // started before the setter returned
        await context.perform { $0.automaticallyMergesChangesFromParent = false }
        #expect(try await Self.eventually { !monitor.isWatching })
        let listener = Task { for await _ in coordinator.remoteChanges {} }
        #expect(try await Self.eventually { monitor.isWatching })
        listener.cancel()
        #expect(try await Self.eventually { !monitor.isWatching })
        // Idle: looks keep coming while watched, at about the interval.
        coordinator.remoteChangePollingInterval = .milliseconds(10)
        let again = Task { for await _ in coordinator.remoteChanges {} }
        #expect(try await Self.eventually { monitor.isWatching })
        let start = monitor.looks
        // 100 looks due in a second, but a loaded two-core machine delivered only 3 in a
        // second once (CI, the whole suite at once): the check says looks keep coming, with
        // the deadline of `eventually`, not how fast.
        #expect(try await Self.eventually { monitor.looks > start + 5 })
        again.cancel()
        _ = directory.url
    }
}

/// A counter shared with a task.
final class LockedCounter: Sendable {
    private let count = LockedValue(0)
    func increment() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}
