import Foundation
@testable import Strata
import StrataLocks
import StrataTesting

// The history checker of the concurrency stress test (ConcurrencyStressTests.swift),
// beside its conserved sum. Every context logs, per save, what the context that changed
// each object had read (the row version and the values it based the change on) and what
// it wrote; a root save that succeeds is acknowledged with what it wrote to the store,
// from which row version to which. After the run the log is replayed:
//
// - no two acknowledged saves changed an object from the same row version;
// - no lost update: each acknowledged save's write of an object is the result of its
//   contexts' changes applied, in order, to the state the write replaced. A change of a
//   property was based on the value it replaced (a value read before another save
//   changed it is a lost update), a deletion on the whole object, to-many members
//   included (a delete rule acting on members the deleting context never saw is one),
//   and nothing is written that no change asked for;
// - every acknowledged write is in the final store unless a later acknowledged save
//   overwrote it (the final row version and values are the last acknowledged write's;
//   deleted objects are gone; nothing else is there).
//
// Versions name states: a child reads its parent's state (its unsaved changes included)
// under the row version the parent holds, so a child's change may be based on an older
// version than the one its root's save replaces (the parent saved the child's earlier
// values, say). The replay compares the values a change was based on with the values the
// write replaced, which is exact whatever the chain: a change based on values that were
// current when it was written lost nothing, and one based on values that were not did.

/// An object's persistent state as the history compares it: attributes by name, to-one
/// destinations by name, to-many members by name (only relationships that were loaded).
struct StressObjectState: Sendable, Hashable, CustomStringConvertible {
    var attributes: [String: AttributeValue?] = [:]
    var toOne: [String: ManagedObjectID?] = [:]
    var toMany: [String: Set<ManagedObjectID>] = [:]

    init(_ snapshot: ObjectSnapshot, entity: EntityDescription) {
        for (slot, attribute) in entity.attributes.enumerated() where !attribute.isTransient && slot < snapshot.attributes.count {
            attributes[attribute.name] = snapshot.attributes[slot]
        }
        for (slot, relationship) in entity.relationships.enumerated() where slot < snapshot.relationships.count {
            switch snapshot.relationships[slot] {
            case .toOne(let id): toOne[relationship.name] = .some(id)
            case .toMany(let ids): toMany[relationship.name] = Set(ids)
            case .notLoaded: break
            }
        }
    }

    /// The state with every object ID mapped through `ids` (temporary to permanent).
    func mapped(_ ids: (ManagedObjectID) -> ManagedObjectID) -> StressObjectState {
        var copy = self
        copy.toOne = toOne.mapValues { $0.map(ids) }
        copy.toMany = toMany.mapValues { Set($0.map(ids)) }
        return copy
    }

    var description: String {
        func short(_ id: ManagedObjectID?) -> String { id.map { "\($0.entityName)/\($0.uriRepresentation.lastPathComponent)" } ?? "nil" }
        let values = attributes.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value.map { "\($0)" } ?? "nil")" }
            + toOne.sorted { $0.key < $1.key }.map { "\($0.key)=\(short($0.value))" }
            + toMany.sorted { $0.key < $1.key }.map { "\($0.key)={\($0.value.map(short).sorted().joined(separator: ","))}" }
        return "(" + values.joined(separator: " ") + ")"
    }
}

/// The stress history: what every acknowledged save wrote and which changes it carried.
final class StressHistory: Sendable {
    /// One context's change of one object, as logged when it left that context (a child's
    /// save, or a root's own save).
    struct Change: Sendable {
        enum Kind: String, Sendable { case insert, update, delete }
        var id: ManagedObjectID
        var kind: Kind
        /// The row version the changing context held the object at (nil for an insert).
        var readVersion: UInt64?
        /// The values the change was based on: the context's committed state (nil for an insert).
        var read: StressObjectState?
        /// The values it set (nil for a deletion).
        var written: StressObjectState?
        /// Where it happened, for messages.
        var place: String
    }

    /// One row an acknowledged save wrote.
    struct Write: Sendable {
        var id: ManagedObjectID
        var kind: Change.Kind
        /// The row version replaced (nil for an insert).
        var from: UInt64?
        /// The row version written (nil for a deletion).
        var to: UInt64?
        /// The values written (nil for a deletion).
        var state: StressObjectState?
    }

    /// One acknowledged root save.
    struct Commit: Sendable {
        var place: String
        var writes: [Write]
        var changes: [Change]
        /// Temporary IDs of the objects it inserted, to their permanent IDs.
        var permanentIDs: [ManagedObjectID: ManagedObjectID]
    }

    private struct State {
        /// Changes a child saved into its parent (by worker), not yet saved by the root.
        var pending: [Int: [Change]] = [:]
        var commits: [Commit] = []
    }

    private let state = LockedValue(State())

    /// A child's save reached its parent: its changes wait for the root's save.
    func childSaved(worker: Int, _ changes: [Change]) {
        state.withLock { $0.pending[worker, default: []] += changes }
    }

    /// The root discarded the changes its child saved into it (a rollback, a reset).
    func discardPending(worker: Int) {
        state.withLock { $0.pending[worker] = nil }
    }

    /// A root save was acknowledged. `own` are the root's own changes (a root without a
    /// child); a root with a child carries the changes its child saved into it.
    func acknowledged(worker: Int?, place: String, writes: [Write], own: [Change], permanentIDs: [ManagedObjectID: ManagedObjectID]) {
        state.withLock { state in
            let carried = worker.flatMap { state.pending.removeValue(forKey: $0) } ?? []
            state.commits.append(Commit(place: place, writes: writes, changes: carried + own, permanentIDs: permanentIDs))
        }
    }

    var commitCount: Int { state.withLock { $0.commits.count } }

    // MARK: The replay

    /// The violations of the history against `final`, the store's rows after the run
    /// (row version and values of every object); empty when it holds.
    func check(final: [ManagedObjectID: (version: UInt64, state: StressObjectState)]) -> [String] {
        let commits = state.withLock { $0.commits }
        var permanent: [ManagedObjectID: ManagedObjectID] = [:]
        for commit in commits { permanent.merge(commit.permanentIDs) { first, _ in first } }
        func canonical(_ id: ManagedObjectID) -> ManagedObjectID { permanent[id] ?? id }
        var violations: [String] = []

        // Every state an acknowledged save wrote, by object and version; and who replaced each version.
        var states: [ManagedObjectID: [UInt64: StressObjectState]] = [:]
        var replacedBy: [ManagedObjectID: [UInt64: String]] = [:]
        var last: [ManagedObjectID: Write] = [:]
        for commit in commits {
            for write in commit.writes {
                if let from = write.from {
                    if let earlier = replacedBy[write.id]?[from] {
                        violations.append("two acknowledged saves changed \(write.id) from version \(from): \(earlier) and \(commit.place)")
                    }
                    replacedBy[write.id, default: [:]][from] = commit.place
                }
                if let to = write.to, let state = write.state {
                    states[write.id, default: [:]][to] = state.mapped(canonical)
                }
                let newest = last[write.id].map { ($0.to ?? .max) <= (write.to ?? .max) } ?? true
                if newest { last[write.id] = write }
            }
        }

        for commit in commits {
            var changes: [ManagedObjectID: [Change]] = [:]
            var order: [ManagedObjectID] = []
            for change in commit.changes {
                let id = canonical(change.id)
                if changes[id] == nil { order.append(id) }
                changes[id, default: []].append(change)
            }
            let writes = Dictionary(commit.writes.map { ($0.id, $0) }) { first, _ in first }
            let deletedHere = Set(commit.writes.filter { $0.kind == .delete }.map(\.id))
            for id in order + commit.writes.map(\.id).filter({ changes[$0] == nil }) {
                let write = writes[id]
                let base: StressObjectState?
                if let from = write?.from {
                    guard let known = states[id]?[from] else {
                        violations.append("\(commit.place) replaced version \(from) of \(id), which no acknowledged save wrote")
                        continue
                    }
                    base = known
                } else if write == nil {
                    base = changes[id]?.first?.read.map { $0.mapped(canonical) }   // decided, not written: no net change
                } else {
                    base = nil   // inserted by this save
                }
                violations += replay(
                    changes[id] ?? [], of: id, over: base, writing: write, deletedHere: deletedHere, in: commit.place, canonical: canonical)
            }
        }

        // The final store: the last acknowledged write of every object, and nothing else.
        for (id, write) in last {
            let stored = final[id]
            switch (write.kind, stored) {
            case (.delete, nil):
                continue
            case (.delete, let stored?):
                violations.append("\(id) is in the final store at version \(stored.version), but the last acknowledged save deleted it")
            case (_, nil):
                violations.append("\(id) is missing from the final store; the last acknowledged save wrote version \(write.to ?? 0)")
            case (_, let stored?):
                let expected = write.state?.mapped(canonical)
                if stored.version != write.to || !Self.agree(expected, stored.state) {
                    violations.append("\(id) is at version \(stored.version) \(stored.state) in the final store; the last acknowledged save wrote version \(write.to ?? 0) \(expected.map(\.description) ?? "?")")
                }
            }
        }
        for id in final.keys where last[id] == nil {
            violations.append("\(id) is in the final store, but no acknowledged save wrote it")
        }
        return violations
    }

    /// Applies `changes` of `id`, in order, to `base` (the state the write replaced; nil
    /// when the save inserted it) and compares the result with `write`.
    ///
    /// Objects the same save deletes (`deletedHere`) leave the relationships that held
    /// them: the delete rules of the saving context act on its own view, which may hold a
    /// member the deleting context's view did not (a child that read an owner's accounts
    /// before another save added one, then deleted that account: the parent removes it
    /// from the owner). That is the deletion's consequence, checked with the deletion.
    private func replay(
        _ changes: [Change], of id: ManagedObjectID, over base: StressObjectState?, writing write: Write?,
        deletedHere: Set<ManagedObjectID>, in place: String, canonical: (ManagedObjectID) -> ManagedObjectID
    ) -> [String] {
        var violations: [String] = []
        enum Current { case absent, present(StressObjectState), deleted }
        var current: Current = base.map(Current.present) ?? .absent
        for change in changes {
            let read = change.read?.mapped(canonical)
            let written = change.written?.mapped(canonical)
            switch (change.kind, current) {
            case (.insert, .absent):
                current = written.map(Current.present) ?? .absent
            case (.insert, _):
                violations.append("\(place): \(change.place) inserted \(id), which already existed")
            case (_, .absent), (_, .deleted):
                violations.append("\(place): \(change.place) changed \(id) (\(change.kind.rawValue)), which did not exist")
            case (.update, .present(var state)):
                guard let read, let written else { continue }
                for (name, value) in written.attributes where read.attributes[name] != value {
                    if let now = state.attributes[name], now != read.attributes[name] ?? nil {
                        violations.append("LOST UPDATE: \(place) wrote \(id).\(name) = \(Self.text(value)), computed by \(change.place) from \(Self.text(read.attributes[name] ?? nil)) (read at version \(change.readVersion ?? 0)), over \(Self.text(now))")
                    }
                    state.attributes[name] = value
                }
                for (name, value) in written.toOne where read.toOne[name] != value {
                    if let now = state.toOne[name], now != read.toOne[name] ?? nil {
                        violations.append("LOST UPDATE: \(place) wrote \(id).\(name), set by \(change.place) from \(String(describing: read.toOne[name] ?? nil)) (read at version \(change.readVersion ?? 0)), over \(String(describing: now))")
                    }
                    state.toOne[name] = value
                }
                for (name, members) in written.toMany {
                    guard let before = read.toMany[name] else { continue }
                    // Members added and removed: a set operation, whatever the other members.
                    if var now = state.toMany[name] {
                        now.subtract(before.subtracting(members))
                        now.formUnion(members.subtracting(before))
                        state.toMany[name] = now
                    }
                }
                current = .present(state)
            case (.delete, .present(let state)):
                if let read, !Self.agree(read, state) {
                    violations.append("LOST UPDATE: \(place) deleted \(id), deleted by \(change.place) on the state \(read) read at version \(change.readVersion ?? 0), over \(state)")
                }
                current = .deleted
            }
        }
        if case .present(var state) = current, !deletedHere.isEmpty {
            for (name, members) in state.toMany { state.toMany[name] = members.subtracting(deletedHere) }
            for (name, destination) in state.toOne where destination.map(deletedHere.contains) == true { state.toOne[name] = .some(nil) }
            current = .present(state)
        }
        switch (current, write) {
        case (.deleted, let write?) where write.kind == .delete:
            break
        case (.present(let state), let write?) where write.kind != .delete:
            if let written = write.state?.mapped(canonical), !Self.agree(state, written) {
                violations.append("\(place) wrote \(id) as \(written), but its contexts' changes make \(state)" + (changes.isEmpty ? " (no context changed it: an unexplained write)" : ""))
            }
        case (.present(let state), nil):
            if let base, !Self.agree(state, base) {
                violations.append("\(place): changes of \(id) to \(state) were not written")
            }
        case (.absent, nil), (.deleted, nil):
            break
        case (_, let write?):
            violations.append("\(place) \(write.kind == .delete ? "deleted" : "wrote") \(id)" + (changes.isEmpty ? ", which no change of its contexts touched (an unexplained write)" : ", which its contexts' changes do not explain"))
        }
        return violations
    }

    /// Whether two states agree on every property both know.
    static func agree(_ a: StressObjectState?, _ b: StressObjectState?) -> Bool {
        guard let a, let b else { return a == nil && b == nil }
        for (name, value) in a.attributes { if let other = b.attributes[name], other != value { return false } }
        for (name, value) in a.toOne { if let other = b.toOne[name], other != value { return false } }
        for (name, value) in a.toMany { if let other = b.toMany[name], other != value { return false } }
        return true
    }

    private static func text(_ value: AttributeValue?) -> String {
        guard let value else { return "nil" }
        if case .integer(let number) = value { return "\(number)" }
        return "\(value)"
    }
}

// The log entries, made inside the changing contexts' blocks.
extension StressHistory {
    /// The changes `context` is about to save (its inserted, updated and deleted objects;
    /// objects whose rows were gone when their faults fired are left out, as the save
    /// discards them), labelled `place`.
    static func changes(in context: isolated ManagedObjectContext, place: String) -> [Change] {
        let graph = context.graph
        var changes: [Change] = []
        func state(_ snapshot: ObjectSnapshot?, of object: ManagedObject) -> StressObjectState? {
            snapshot.map { StressObjectState($0, entity: object.entity) }
        }
        for object in graph.inserted {
            changes.append(Change(id: object.objectID, kind: .insert, readVersion: nil, read: nil,
                                  written: state(object.makeSnapshot(), of: object), place: place))
        }
        for object in graph.updated {
            changes.append(Change(id: object.objectID, kind: .update, readVersion: object.rowVersion,
                                  read: state(object.makeCommittedSnapshot(), of: object),
                                  written: state(object.makeSnapshot(), of: object), place: place))
        }
        for object in graph.deleted where !graph.vanished.contains(ObjectIdentifier(object)) {
            changes.append(Change(id: object.objectID, kind: .delete, readVersion: object.rowVersion,
                                  read: state(object.makeCommittedSnapshot(), of: object), written: nil, place: place))
        }
        return changes
    }

    /// What a root context is about to write: each object and the row version it replaces.
    struct PendingWrites {
        var inserted: [(temporary: ManagedObjectID, object: ManagedObject)]
        var updated: [(object: ManagedObject, from: UInt64)]
        var deleted: [(id: ManagedObjectID, from: UInt64)]
    }

    static func pendingWrites(in context: isolated ManagedObjectContext) -> PendingWrites {
        let graph = context.graph
        return PendingWrites(
            inserted: graph.inserted.map { ($0.objectID, $0) },
            updated: graph.updated.map { ($0, $0.rowVersion) },
            deleted: graph.deleted.filter { !graph.vanished.contains(ObjectIdentifier($0)) }.map { ($0.objectID, $0.rowVersion) })
    }

    /// The writes of a root save that just succeeded (`pending` taken before it), with the
    /// permanent IDs its inserted objects got.
    static func writes(
        in context: isolated ManagedObjectContext, pending: PendingWrites
    ) -> (writes: [Write], permanentIDs: [ManagedObjectID: ManagedObjectID]) {
        var writes: [Write] = []
        var permanentIDs: [ManagedObjectID: ManagedObjectID] = [:]
        for (temporary, object) in pending.inserted {
            permanentIDs[temporary] = object.objectID
            writes.append(Write(id: object.objectID, kind: .insert, from: nil, to: object.rowVersion,
                                state: StressObjectState(object.makeSnapshot(), entity: object.entity)))
        }
        for (object, from) in pending.updated {
            writes.append(Write(id: object.objectID, kind: .update, from: from, to: object.rowVersion,
                                state: StressObjectState(object.makeSnapshot(), entity: object.entity)))
        }
        for (id, from) in pending.deleted {
            writes.append(Write(id: id, kind: .delete, from: from, to: nil, state: nil))
        }
        return (writes, permanentIDs)
    }

    /// Every object in the store, as a new context reads it: row version and values
    /// (to-many relationships loaded).
    static func finalRows(in context: isolated ManagedObjectContext) throws -> [ManagedObjectID: (version: UInt64, state: StressObjectState)] {
        var rows: [ManagedObjectID: (version: UInt64, state: StressObjectState)] = [:]
        let objects: [ManagedObject] = try StressOperation.accounts(in: context) + StressOperation.owners(in: context)
        for object in objects {
            for slot in object.entity.relationships.indices { object.loadRelationshipIfNeeded(slot) }
            rows[object.objectID] = (object.rowVersion, StressObjectState(object.makeSnapshot(), entity: object.entity))
        }
        return rows
    }
}
