import Foundation
import Logging
import StrataLMDB

// A graceful shutdown (issue 25): the coordinator stops
// taking writes, lets those in flight finish, and closes every store's environment,
// releasing pinned query generations.
extension PersistentStoreCoordinator {
    /// Whether ``close(timeout:)`` has begun: saves, batch requests and new stores are
    /// refused with ``StrataError/coordinatorClosed`` from then on.
    public nonisolated var isClosed: Bool { writeGate.isClosed }

    /// Shuts the coordinator down gracefully, for a server's shutdown (a
    /// swift-service-lifecycle graceful shutdown, say: see `StrataService` in the
    /// `StrataLifecycle` product):
    ///
    /// 1. From the moment it is called, every new save that reaches the coordinator
    ///    (a root context's, or a child's chain reaching its root), batch request,
    ///    deletion of history and ``addPersistentStore(type:configuration:at:options:)``
    ///    fails with ``StrataError/coordinatorClosed``; the saving context keeps its
    ///    changes.
    /// 2. Saves and requests already admitted finish: each is committed (and its caller
    ///    told so) or fails as it would have anyway. Nothing acknowledged is lost, and
    ///    nothing is half-written (each is one LMDB transaction).
    /// 3. Every store's environment closes: pinned query generations are released (every
    ///    later read, a pinned context's too, fails with ``StrataError/coordinatorClosed``),
    ///    reads in flight finish first, commits are
    ///    flushed (a store opened with ``PersistentStore/Options/Durability/noSync`` too),
    ///    and the directories can be opened again at once, by this process or another.
    ///    The cross-process change feed (``remoteChanges``) ends.
    ///
    /// Contexts and their objects stay usable in memory: registered values can be read,
    /// but nothing is fetched or faulted from the stores any more. Calling it again
    /// waits for nothing and returns.
    ///
    /// It runs on the coordinator's own queue (closing an environment blocks its
    /// thread while reads in flight end), never on Swift's cooperative pool.
    ///
    /// - Parameter timeout: how long to wait, in all, for writes and reads in flight.
    /// - Throws: ``StrataError/storage(_:)`` of `LMDBError.closeTimedOut` when a read or
    ///   a write of a store was still running at the deadline (a read kept open by a
    ///   long `perform` block, say): that store takes no new work, and closes when its
    ///   last reference goes (or when this is called again); the other stores are closed.
    public func close(timeout: Duration = .seconds(30)) async throws(StrataError) {
        let deadline = ContinuousClock.now + timeout
        let first = writeGate.close()
        if first {
            logger.debug("coordinator closing", metadata: ["strata.writes.in_flight": "\(writeGate.inFlight)"])
            remoteChangeMonitor.stop()
        }
        let drained = await writeGate.drain(until: deadline)
        var failure: StrataError?
        for store in persistentStores {
            guard let environment = store.file?.environment else {
                store.sql?.close()   // a server store: its connections close (the writes admitted have finished)
                rowCache.removeRows(ofStore: store.identifier)
                continue
            }
            let remaining = max(deadline - ContinuousClock.now, .zero)
            do {
                try environment.close(timeout: remaining)
            } catch {
                failure = failure ?? .storage(error)
                // The caller gets the first such error; each store's is logged.
                logger.debug("store did not close in time", metadata: store.logMetadata.merging([
                    "strata.error": "\(error.name)", "strata.error.description": "\(error.message)",
                ]) { $1 })
            }
            rowCache.removeRows(ofStore: store.identifier)
        }
        if first {
            logger.debug("coordinator closed", metadata: ["strata.writes.drained": "\(drained)"])
        }
        if let failure { throw failure }
    }
}
