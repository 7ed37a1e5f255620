import Foundation
import Strata
internal import StrataLocks

/// A note a ``RemotePeer`` saves: who saved it, its number, and when.
public final class PeerNote: ManagedObject {
    @Attribute(indexed: true) public var author: String = ""
    @Attribute public var sequence: Int64 = 0
    @Attribute public var savedAt: Date = Date(timeIntervalSince1970: 0)
}

/// One per peer: how many notes it saved, updated with every note.
public final class PeerTally: ManagedObject {
    @Attribute(indexed: true) public var author: String = ""
    @Attribute public var saved: Int64 = 0
}

/// The model of the cross-process runs.
public enum RemotePeerModel {
    public static let model: ManagedObjectModel = {
        do {
            return try ManagedObjectModel(types: [PeerNote.self, PeerTally.self])
        } catch {
            preconditionFailure("the remote-peer model is invalid: \(error)")
        }
    }()

    /// The options every process opens the store with: history tracked, no sync.
    public static var options: PersistentStore.Options {
        var options = PersistentStore.Options()
        options.tracksPersistentHistory = true
        options.durability = .noSync
        return options
    }
}

/// What a ``RemotePeer`` saw, printed as one JSON line after `report `.
public struct RemotePeerReport: Codable, Sendable {
    /// The peer's name.
    public var name: String
    /// Its process.
    public var processID: Int32
    /// The notes it saved.
    public var saved: Int
    /// The numbers of the other peer's notes its live context merged, in the order seen.
    public var seen: [Int64]
    /// For each, the milliseconds from the other's save to the merge being seen here.
    public var delaysMilliseconds: [Double]
    /// The other peer's tally as the live context held it at the end, refreshed by merges
    /// only (never refetched).
    public var otherTally: Int64
    /// The remote-change events `remoteChanges` delivered.
    public var remoteChangeEvents: Int
    /// Whether every one of the other's notes was seen before the deadline.
    public var complete: Bool
}

/// The child side of the cross-process tests: a process that saves notes to a store
/// another process saves to as well, and watches that other process's saves arrive in a
/// live context that merges automatically (through ``PersistentStoreCoordinator/remoteChanges``'s
/// watching and persistent history).
public struct RemotePeer: Sendable {
    public var store: URL
    public var name: String
    public var other: String
    /// Notes this peer saves, and expects of the other.
    public var count = 40
    /// The pause between two saves.
    public var pause: Duration = .milliseconds(20)
    /// Started once this file exists (so that both peers are ready first).
    public var go: String
    /// How long to wait for the other's notes after saving.
    public var timeout: Duration = .seconds(60)
    /// Where the report lines go.
    public var output: Int32 = 1

    public init(store: URL, name: String, other: String, go: String) {
        self.store = store
        self.name = name
        self.other = other
        self.go = go
    }

    /// Prints `ready`, waits for `go`, saves ``count`` notes while watching, then prints
    /// `report <json>`.
    public func run() async throws {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: RemotePeerModel.model)
        _ = try await coordinator.addPersistentStore(type: .lmdb, at: store, options: RemotePeerModel.options)
        let writer = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "\(name).writer")
        writer.transactionAuthor = name
        let name = self.name, other = self.other
        let tallyID = try await writer.perform { context in
            let tally = PeerTally()
            tally.author = name
            try context.insert(tally)
            try context.save()
            return tally.objectID
        }
        // The live context: merges automatically (watching for the other's commits from
        // now on, before this peer says it is ready), holds the other's tally, and reports
        // the other's notes as its merges bring them.
        let live = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "\(name).live")
        await live.perform { context in
            context.automaticallyMergesChangesFromParent = true
            context.retainsRegisteredObjects = true
        }
        // Listening before saying ready, too: the other may save as soon as it is told to go.
        let merges = live.notifications(of: [.didMergeChanges])
        emit("ready")
        while !FileManager.default.fileExists(atPath: go) { try await Task.sleep(for: .milliseconds(5)) }

        let otherTallyID = try await live.perform { context in
            var request = FetchRequest<PeerTally>()
            request.predicate = try FetchPredicate(format: "author == %@", other)
            return try context.fetch(request).first?.objectID
        }
        let seen = SeenNotes()
        let watcher = Task {
            for await merge in merges {
                let arrived = Date()
                let notes = try await live.perform { context in
                    try merge.insertedObjectIDs.compactMap { id -> (Int64, Date)? in
                        guard let note = try context.existingObject(with: id) as? PeerNote, note.author == other else { return nil }
                        return (note.sequence, note.savedAt)
                    }
                }
                for (sequence, savedAt) in notes.sorted(by: { $0.0 < $1.0 }) {
                    seen.add(sequence, delay: arrived.timeIntervalSince(savedAt) * 1000)
                }
            }
        }
        let events = EventCount()
        let listener = Task {
            for await _ in coordinator.remoteChanges { events.increment() }
        }

        for index in 0..<count {
            try await writer.perform { context in
                let note = PeerNote()
                note.author = name
                note.sequence = Int64(index)
                note.savedAt = Date()
                try context.insert(note)
                if let tally = try context.existingObject(with: tallyID) as? PeerTally { tally.saved = Int64(index + 1) }
                try context.save()
            }
            try await Task.sleep(for: pause)
        }

        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        var otherTally: Int64 = 0
        while clock.now < deadline {
            otherTally = await live.perform { context in
                otherTallyID.flatMap { context.registeredObject(for: $0) as? PeerTally }?.saved ?? -1
            }
            if seen.count >= count && otherTally == Int64(count) { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        watcher.cancel()
        listener.cancel()
        let (sequences, delays) = seen.values
        let report = RemotePeerReport(
            name: name, processID: getpid(), saved: count, seen: sequences, delaysMilliseconds: delays, otherTally: otherTally,
            remoteChangeEvents: events.value, complete: Set(sequences) == Set((0..<count).map(Int64.init)))
        let json = String(decoding: try JSONEncoder().encode(report), as: UTF8.self)
        emit("report \(json)")
    }

    private func emit(_ line: String) {
        let text = line.replacingOccurrences(of: "\n", with: " ") + "\n"
        text.withCString { _ = write(output, $0, strlen($0)) }
    }
}

/// The other peer's notes seen so far, from the watcher task.
private final class SeenNotes: Sendable {
    private struct State {
        var sequences: [Int64] = []
        var delays: [Double] = []
        var unique = Set<Int64>()
    }

    private let state = LockedValue(State())

    func add(_ sequence: Int64, delay: Double) {
        state.withLock { state in
            guard state.unique.insert(sequence).inserted else { return }
            state.sequences.append(sequence)
            state.delays.append(delay)
        }
    }

    var count: Int { state.withLock { $0.unique.count } }
    var values: ([Int64], [Double]) { state.withLock { ($0.sequences, $0.delays) } }
}

/// A counter shared with a task.
private final class EventCount: Sendable {
    private let count = LockedValue(0)

    func increment() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}

/// The child side of the batch-request crash tests: one batch insert of `count` notes
/// (author `batch`) into a store of the remote-peer model that tracks history, then
/// `done`. Killed at a crash point (`STRATA_CRASH_POINT`), it leaves the store with all
/// of the notes and their one history transaction, or with neither.
public struct BatchWorker: Sendable {
    public var store: URL
    public var count: Int

    public init(store: URL, count: Int) {
        self.store = store
        self.count = count
    }

    public func run() async throws {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: RemotePeerModel.model)
        _ = try await coordinator.addPersistentStore(type: .lmdb, at: store, options: RemotePeerModel.options)
        var index = 0
        let count = self.count
        let request = BatchInsertRequest(PeerNote.self) { note in
            guard index < count else { return true }
            note.author = "batch"
            note.sequence = Int64(index)
            index += 1
            return false
        }
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        context.transactionAuthor = "batch"
        _ = try await context.perform { context in try context.execute(request) }
        "done\n".withCString { _ = write(1, $0, strlen($0)) }
    }
}
