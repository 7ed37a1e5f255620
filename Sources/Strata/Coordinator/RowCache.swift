import Dispatch
import Foundation
internal import StrataLocks

/// The coordinator's cache of stored rows: what ``ManagedObjectContext/stalenessInterval``
/// lets a fault or a refresh reuse instead of reading the store.
///
/// Core Data keeps the same cache at its coordinator ("cached row" in a merge conflict's
/// terms). Every save through the coordinator writes its rows here after the commit, on
/// the write queue and in commit order (written rows replace their entries, deleted rows
/// leave), so contexts of one coordinator always see each other's saves; a row another
/// process (another coordinator on the same directory) changed is only read again once
/// the entry is older than the reader's staleness interval.
///
/// An entry never goes back to an older row version: neither a read that started before
/// a save (``fill(_:readAt:epoch:)``) nor a save recorded late (``didSave(written:deleted:)``)
/// replaces a newer row.
///
/// Thread-safe: contexts call it synchronously from their own executors. Bounded: past
/// ``capacity`` entries the oldest inserted go first.
final class RowCache: Sendable {
    /// One cached row and when it was read (or written).
    private struct Entry {
        var snapshot: ObjectSnapshot
        /// `DispatchTime.now().uptimeNanoseconds` when the row was known to be current.
        var stamp: UInt64
        /// The insertion number, to find this entry's place in the eviction queue.
        var serial: UInt64
    }

    private struct State {
        var entries: [ManagedObjectID: Entry] = [:]
        /// Insertion order for eviction; an element is stale when its entry's serial differs.
        var queue: [(id: ManagedObjectID, serial: UInt64)] = []
        var queueStart = 0
        var nextSerial: UInt64 = 0
        /// Bumped by every save, so that a row read before a save does not overwrite
        /// what the save wrote.
        var epoch: UInt64 = 0
    }

    /// The most rows kept.
    let capacity: Int
    private let state = LockedValue(State())

    /// A cache of at most `capacity` rows.
    init(capacity: Int = 16_384) {
        self.capacity = max(0, capacity)
    }

    /// The current time on the clock entries are stamped with.
    static var now: UInt64 { DispatchTime.now().uptimeNanoseconds }

    /// The save epoch: take it before reading rows and pass it to ``fill(_:readAt:epoch:)``.
    var epoch: UInt64 { state.withLock { $0.epoch } }

    /// The number of rows cached.
    var count: Int { state.withLock { $0.entries.count } }

    /// The cached row of `id` if it is no older than `staleness` seconds (any age when
    /// negative; never with 0).
    func snapshot(of id: ManagedObjectID, staleness: Double) -> ObjectSnapshot? {
        guard staleness != 0 else { return nil }
        let now = Self.now
        return state.withLock { state in
            guard let entry = state.entries[id] else { return nil }
            if staleness > 0, Double(now &- entry.stamp) / 1e9 > staleness { return nil }
            return entry.snapshot
        }
    }

    /// Caches rows read from the store at `stamp`, when no save happened since `epoch`
    /// (a save may have written newer versions: those stay) and unless a newer version
    /// of a row is cached already.
    func fill(_ snapshots: some Sequence<ObjectSnapshot>, readAt stamp: UInt64, epoch: UInt64) {
        guard capacity > 0 else { return }
        state.withLock { state in
            guard state.epoch == epoch else { return }
            for snapshot in snapshots {
                if let existing = state.entries[snapshot.objectID], existing.snapshot.version > snapshot.version { continue }
                Self.put(snapshot, stamp: stamp, into: &state, capacity: capacity)
            }
        }
    }

    /// Records a committed save: `written` rows replace their entries unless a newer
    /// version is cached, `deleted` ones leave.
    func didSave(written: [ObjectSnapshot], deleted: [ManagedObjectID]) {
        let stamp = Self.now
        state.withLock { state in
            state.epoch &+= 1
            for id in deleted { state.entries[id] = nil }
            guard capacity > 0 else { return }
            for snapshot in written {
                if let existing = state.entries[snapshot.objectID], existing.snapshot.version > snapshot.version { continue }
                Self.put(snapshot, stamp: stamp, into: &state, capacity: capacity)
            }
        }
    }

    /// Forgets every row of `storeIdentifier`'s store (it was removed from the coordinator).
    func removeRows(ofStore storeIdentifier: UUID) {
        state.withLock { state in
            state.epoch &+= 1
            state.entries = state.entries.filter { $0.key.storeIdentifier != storeIdentifier }
        }
    }

    private static func put(_ snapshot: ObjectSnapshot, stamp: UInt64, into state: inout State, capacity: Int) {
        let serial = state.nextSerial
        state.nextSerial &+= 1
        state.entries[snapshot.objectID] = Entry(snapshot: snapshot, stamp: stamp, serial: serial)
        state.queue.append((snapshot.objectID, serial))
        while state.entries.count > capacity, state.queueStart < state.queue.count {
            let oldest = state.queue[state.queueStart]
            state.queueStart += 1
            if state.entries[oldest.id]?.serial == oldest.serial { state.entries[oldest.id] = nil }
        }
        // Drop the consumed head of the queue once it is most of it.
        if state.queueStart > 1024 && state.queueStart * 2 > state.queue.count {
            state.queue.removeFirst(state.queueStart)
            state.queueStart = 0
        }
        // Entries replaced in place leave stale queue elements: rebuild when they pile up.
        if state.queue.count - state.queueStart > 4 * max(capacity, 256) {
            state.queue = state.entries.map { ($0.key, $0.value.serial) }.sorted { $0.serial < $1.serial }
            state.queueStart = 0
        }
    }
}
