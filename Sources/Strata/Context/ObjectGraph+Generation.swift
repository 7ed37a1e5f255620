import Foundation
import Logging

/// Which query generation a context reads (DESIGN.md "Query generations").
enum GenerationPin {
    /// Every read sees the newest committed state.
    case unpinned
    /// Pinned to ``QueryGenerationToken/current``: the newest state is taken at the next
    /// read, and kept.
    case newest
    /// Pinned to an open generation.
    case pinned(GenerationLease)

    /// Whether the context is pinned (taken or not yet).
    var isPinned: Bool {
        if case .unpinned = self { return false }
        return true
    }
}

// A root context's query generation: taken lazily, read by every fetch, count and fault,
// and advanced by the context's save, merges, reset and setQueryGenerationFrom. Child
// contexts are never pinned: they read through their parent, which may be.
extension ObjectGraph {
    /// Whether this context's reads see the newest committed state (it is not pinned to
    /// a query generation).
    var readGenerationIsUnpinned: Bool { !generationPin.isPinned }

    /// The generation a root context's reads use, taken now when the context is pinned to
    /// ``QueryGenerationToken/current`` and has not read yet; nil when it reads the newest
    /// state (unpinned, or a child).
    ///
    /// Applies the coordinator's ``PersistentStoreCoordinator/queryGenerationAgePolicy``.
    ///
    /// - Throws: ``StrataError/queryGenerationExpired(_:age:maximumAge:)``;
    ///   ``StrataError/storage(_:)`` (``StrataLMDB/LMDBError/readersFull``) when the
    ///   snapshot cannot be taken.
    func readGeneration() throws(StrataError) -> QueryGeneration? {
        guard parentContext == nil else { return nil }
        switch generationPin {
        case .unpinned:
            return nil
        case .newest:
            let generation = try coordinator.newestGeneration()
            generationPin = .pinned(GenerationLease(generation))
            return generation
        case .pinned(let lease):
            let generation = lease.generation
            let coordinator = try self.coordinator
            let policy = coordinator.queryGenerationAgePolicy
            guard let maximumAge = policy.maximumAge else { return generation }
            let age = generation.age
            guard age > maximumAge else { return generation }
            if case .fail = policy { throw .queryGenerationExpired(generation.token, age: age, maximumAge: maximumAge) }
            let newest = try coordinator.newestGeneration()
            // Nothing is thrown for an advance: the log tells that reads moved on.
            (Logger.boundCurrent ?? coordinator.logger).info("query generation past its maximum age advanced", metadata: [
                "strata.generation": "\(generation.token)", "strata.generation.current": "\(newest.token)",
                "strata.generation.age": "\(age)", "strata.generation.maximum_age": "\(maximumAge)",
            ])
            generationPin = .pinned(GenerationLease(newest))
            expiredGenerations.append(ExpiredGeneration(expired: generation.token, current: newest.token))
            return newest
        }
    }

    /// The token of the generation the context reads, nil when it is not pinned (or is
    /// a child). A context pinned to ``QueryGenerationToken/current`` that has not read
    /// yet takes its snapshot now, so that the token can be shared; if that fails (no
    /// reader slot), it answers ``QueryGenerationToken/current`` and stays lazy.
    var queryGenerationToken: QueryGenerationToken? {
        guard parentContext == nil else { return nil }
        switch generationPin {
        case .unpinned: return nil
        case .newest: return (try? readGeneration())?.token ?? .current
        case .pinned(let lease): return lease.generation.token
        }
    }

    /// The token of the generation the context reads, without taking one:
    /// ``QueryGenerationToken/current`` when it takes the newest at its next read; nil
    /// when it is not pinned (or is a child).
    var heldGenerationToken: QueryGenerationToken? {
        guard parentContext == nil else { return nil }
        switch generationPin {
        case .unpinned: return nil
        case .newest: return .current
        case .pinned(let lease): return lease.generation.token
        }
    }

    /// Pins the context to `token`'s generation (``QueryGenerationToken/current``: lazily,
    /// at the next read), or unpins it (nil). The previous generation is let go.
    ///
    /// - Throws: ``StrataError/invalidContextConfiguration(_:)`` for a child context;
    ///   ``StrataError/queryGenerationUnavailable(_:)``; ``StrataError/noCoordinator`` for
    ///   a token other than `.current` before the context has a coordinator;
    ///   ``StrataError/storage(_:)``. The context keeps its generation then.
    func setQueryGeneration(from token: QueryGenerationToken?) throws(StrataError) {
        guard let token else {
            generationPin = .unpinned
            return
        }
        if parentContext != nil {
            throw .invalidContextConfiguration(
                "a child context reads through its parent and cannot be pinned to a query generation; pin its root context")
        }
        if token.isCurrent {
            generationPin = .newest
        } else {
            generationPin = .pinned(GenerationLease(try coordinator.generation(for: token)))
        }
    }

    /// After a merge (or a reset): a pinned context moves to `token`'s generation when it
    /// is newer than its own and can still be pinned, else to the newest state, taken at
    /// its next read. An unpinned context stays unpinned.
    func advanceGeneration(toward token: QueryGenerationToken?) {
        guard parentContext == nil, case .pinned(let lease) = generationPin else { return }
        if let token, token.isNotNewer(than: lease.generation.token) { return }
        if let token, !token.isCurrent, let generation = try? coordinator.generation(for: token) {
            generationPin = .pinned(GenerationLease(generation))
        } else {
            generationPin = .newest
        }
    }

    /// After a save of a pinned root context: the state its save made (`generation`,
    /// taken right after the commit), or the newest one at its next read when that could
    /// not be taken.
    func advanceGeneration(afterSavingTo generation: QueryGeneration?) {
        guard generationPin.isPinned else { return }
        generationPin = generation.map { .pinned(GenerationLease($0)) } ?? .newest
    }

    /// The expiries (``QueryGenerationAgePolicy/advance(after:)``) since the last call,
    /// for the context to announce.
    func takeExpiredGenerations() -> [ExpiredGeneration] {
        defer { expiredGenerations = [] }
        return expiredGenerations
    }
}

/// A generation that outlived the age policy, and the one the context moved to.
struct ExpiredGeneration {
    /// The generation left.
    let expired: QueryGenerationToken
    /// The generation taken.
    let current: QueryGenerationToken
}
