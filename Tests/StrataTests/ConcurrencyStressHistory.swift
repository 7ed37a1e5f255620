import Foundation
@testable import Strata
import StrataLocks
import StrataTesting

// The history checker of the concurrency stress test (ConcurrencyStressTests.swift),
// beside its conserved sum. Every context logs, per save, what the context that changed
// each object had read (the row version and the values it based the change on) and what
// it wrote; a root save that succeeds is acknowledged with what it wrote to the store,
// from which row version to which (a write makes the version after the one it replaces;
// under a merge policy that may be newer than the one its context read), with the root's
// own view of its changes (what its policy merges from) and its policy. Readers log every
// row they read (version and values). After the run the log is replayed:
//
// - no two acknowledged saves changed an object from the same row version, and every
//   version a save replaced or a reader read was written by an acknowledged save (a
//   save lost whole shows here); under `.error` a save replaced the version it read;
// - each write is exactly its root's changes applied, under its merge policy, to the
//   state it replaced: that state with every property the root changed set to the
//   root's value (`mergeByPropertyObjectTrump`, and `.error`, where nothing was merged),
//   or the root's whole state (`overwrite`, on an object in conflict: one with a property
//   changed on both sides). A committed value lost, in part or whole,
//   or mixed with another object's shows here: what last-writer-wins promises;
// - every read of a row version agrees with every other read of it and with what the
//   save that wrote it stored, and a reader whose generations only move forward never
//   reads an object at an older version than before;
// - no lost update (but in the last-writer-wins mode, where updates are lost by
//   design): each acknowledged save's write of an object is the result of its
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

    /// The state of `snapshot`; without its to-many relationships unless `toMany`.
    init(_ snapshot: ObjectSnapshot, entity: EntityDescription, toMany: Bool = true) {
        for (slot, attribute) in entity.attributes.enumerated() where !attribute.isTransient && slot < snapshot.attributes.count {
            attributes[attribute.name] = snapshot.attributes[slot]
        }
        for (slot, relationship) in entity.relationships.enumerated() where slot < snapshot.relationships.count {
            switch snapshot.relationships[slot] {
            case .toOne(let id): toOne[relationship.name] = .some(id)
            case .toMany(let ids) where toMany: self.toMany[relationship.name] = Set(ids)
            case .toMany, .notLoaded: break
            }
        }
    }

    /// The state without its to-many relationships: what a row version fixes (an owner's
    /// accounts follow the accounts' foreign keys, not its own row).
    var withoutToMany: StressObjectState {
        var copy = self
        copy.toMany = [:]
        return copy
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
        /// The row version the saving context had read (nil for an insert).
        var read: UInt64?
        /// The row version replaced (nil for an insert): for an update, the one before
        /// `to` (newer than `read` when a merge policy settled a conflict); for a
        /// deletion, the one read.
        var from: UInt64?
        /// The row version written (nil for a deletion).
        var to: UInt64?
        /// The values written (nil for a deletion): the saving context's state of the
        /// object after the save, which is the stored state, merged or not.
        var state: StressObjectState?

        /// Whether the write replaced a newer version than its context had read: a
        /// conflict its merge policy settled.
        var isMerged: Bool { kind == .update && read != from }
    }

    /// One acknowledged root save.
    struct Commit: Sendable {
        var place: String
        var writes: [Write]
        var changes: [Change]
        /// The saving root's own changes: each object's committed state (what it read or
        /// last saved) and its state at the save. What the write merges from.
        var root: [Change]
        /// The root's merge policy.
        var policy: MergePolicy
        /// Temporary IDs of the objects it inserted, to their permanent IDs.
        var permanentIDs: [ManagedObjectID: ManagedObjectID]
    }

    /// The first read of an object version, and where it happened.
    struct Read: Sendable {
        var read: StressRead
        var place: String
    }

    private struct State {
        /// Changes a child saved into its parent (by worker), not yet saved by the root.
        var pending: [Int: [Change]] = [:]
        var commits: [Commit] = []
        /// The first read of each object version (to-many relationships left out).
        var reads: [ManagedObjectID: [UInt64: Read]] = [:]
        /// The newest version of each object each reader (whose reads never go back) read, and where.
        var newestRead: [String: [ManagedObjectID: (version: UInt64, place: String)]] = [:]
        /// What the reads contradicted as they came in.
        var readViolations: [String] = []
        var readCount = 0
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
    /// child); a root with a child carries the changes its child saved into it. `root` is
    /// the root's view of what it changed (its own changes or its child's), `policy` its
    /// merge policy.
    func acknowledged(
        worker: Int?, place: String, writes: [Write], own: [Change], root: [Change], policy: MergePolicy,
        permanentIDs: [ManagedObjectID: ManagedObjectID]
    ) {
        state.withLock { state in
            let carried = worker.flatMap { state.pending.removeValue(forKey: $0) } ?? []
            state.commits.append(Commit(
                place: place, writes: writes, changes: carried + own, root: root, policy: policy, permanentIDs: permanentIDs))
        }
    }

    var commitCount: Int { state.withLock { $0.commits.count } }

    /// A reader read the accounts of `view` (saved ones, with their row versions) at
    /// `place`. Two reads of one object version must agree, here and with what the save
    /// that wrote the version stored (checked after the run). `reader` names a reader
    /// whose reads never go back (a context unpinned or pinned to ever newer generations,
    /// the newest generation read by new contexts): none of its reads may find an object
    /// at an older version than one it read before. Nil for a reader of an older token.
    func read(_ view: StressView, by reader: String?, at place: String) {
        guard !view.rows.isEmpty else { return }
        state.withLock { state in
            state.readCount += view.rows.count
            for (id, row) in view.rows {
                if let first = state.reads[id]?[row.version] {
                    if first.read.snapshot != row.snapshot {
                        state.readViolations.append(
                            "\(id) read at version \(row.version) as \(row.state) (\(place)), but as \(first.read.state) before (\(first.place))")
                    }
                } else {
                    state.reads[id, default: [:]][row.version] = Read(read: row, place: place)
                }
                guard let reader else { continue }
                if let newest = state.newestRead[reader]?[id], newest.version > row.version {
                    state.readViolations.append(
                        "VERSION WENT BACK: \(reader) read \(id) at version \(row.version) (\(place)) after version \(newest.version) (\(newest.place))")
                } else {
                    state.newestRead[reader, default: [:]][id] = (row.version, place)
                }
            }
        }
    }

    /// What the replay found.
    struct Report {
        var violations: [String] = []
        /// Writes that replaced a newer version than their contexts had read (conflicts
        /// settled by merge policies).
        var merged = 0
        /// Properties both a merged save and the saves it was merged over changed, decided
        /// for the saving context (last writer wins).
        var decided = 0
        /// Properties a save under `overwrite` set back to the value its context had read,
        /// over another save's change.
        var reverted = 0
        /// Object reads checked against the history.
        var reads = 0
    }

    // MARK: The replay

    /// The violations of the history against `final`, the store's rows after the run
    /// (row version and values of every object); none when it holds. In `mode`:
    ///
    /// - every mode: each update of a row replaces the version before the one it writes,
    ///   which one acknowledged save wrote; no two saves replace one version; a save
    ///   under `.error` replaces the version its context read; each write is exactly the
    ///   state it replaced with the properties its root changed set to the root's values
    ///   (under `overwrite`, on an object in conflict: the root's whole state), so no committed value is lost,
    ///   partly or whole, or mixed with another object's; every read of a version is what
    ///   the save that wrote it stored; the final store holds the last writes;
    /// - ``StressMode/conserved`` and ``StressMode/disjoint``: no lost update either (the
    ///   replay of the changes each save carried, below); not in
    ///   ``StressMode/lastWriterWins``, where updates are lost by design.
    func check(final: [ManagedObjectID: (version: UInt64, state: StressObjectState)], mode: StressMode) -> Report {
        let (commits, reads, readViolations, readCount) = state.withLock { ($0.commits, $0.reads, $0.readViolations, $0.readCount) }
        var permanent: [ManagedObjectID: ManagedObjectID] = [:]
        for commit in commits { permanent.merge(commit.permanentIDs) { first, _ in first } }
        func canonical(_ id: ManagedObjectID) -> ManagedObjectID { permanent[id] ?? id }
        var report = Report()
        var violations: [String] = []

        // Every state an acknowledged save wrote, by object and version, and which save;
        // who replaced each version.
        var states: [ManagedObjectID: [UInt64: StressObjectState]] = [:]
        var writers: [ManagedObjectID: [UInt64: String]] = [:]
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
                if write.isMerged {
                    report.merged += 1
                    if !commit.policy.merges {
                        violations.append("LOST UPDATE: \(commit.place) wrote \(write.id) over version \(write.from ?? 0) under \(commit.policy), but its context had read version \(write.read ?? 0)")
                    }
                }
                if let to = write.to, let state = write.state {
                    states[write.id, default: [:]][to] = state.mapped(canonical)
                    writers[write.id, default: [:]][to] = commit.place
                }
                let newest = last[write.id].map { ($0.to ?? .max) <= (write.to ?? .max) } ?? true
                if newest { last[write.id] = write }
            }
        }

        for commit in commits {
            let exact = checkWrites(of: commit, over: states, canonical: canonical)
            violations += exact.violations
            report.decided += exact.decided
            report.reverted += exact.reverted
            guard mode != .lastWriterWins else { continue }
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

        // Every read: a version an acknowledged save wrote, with its values.
        violations += readViolations
        report.reads = readCount
        for (id, versions) in reads {
            for (version, first) in versions {
                let read = first.read.state
                guard let written = states[id]?[version] else {
                    violations.append("\(id) was read at version \(version) as \(read) (\(first.place)), which no acknowledged save wrote")
                    continue
                }
                if !Self.agree(read, written.withoutToMany) {
                    violations.append("\(id) was read at version \(version) as \(read) (\(first.place)), but \(writers[id]?[version] ?? "?") stored \(written.withoutToMany)")
                }
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
        report.violations = violations
        return report
    }

    /// Checks that each write of `commit` is exactly what its root's changes make of the
    /// state it replaced, under the root's merge policy: that state with every property
    /// the root changed (its value differs from the committed one) set to the root's
    /// value, under `mergeByPropertyObjectTrump` (and `.error`, where the state replaced
    /// is the one read); the root's whole state under `overwrite` when the object is in
    /// conflict (a property changed on both sides), else as object trump. To-many relationships
    /// are left out (an owner's accounts follow its accounts' rows, not its own).
    ///
    /// - Returns: the violations, naming the save, the object and the properties; the
    ///   properties decided for the saving context although the saves it was merged over
    ///   changed them too; the properties an `overwrite` set back over another's change.
    private func checkWrites(
        of commit: Commit, over states: [ManagedObjectID: [UInt64: StressObjectState]],
        canonical: (ManagedObjectID) -> ManagedObjectID
    ) -> (violations: [String], decided: Int, reverted: Int) {
        var violations: [String] = []
        var decided = 0, reverted = 0
        var changes: [ManagedObjectID: Change] = [:]
        for change in commit.root { changes[canonical(change.id)] = change }
        let overwrites = if case .overwrite = commit.policy { true } else { false }
        for write in commit.writes {
            let change = changes[write.id]
            switch write.kind {
            case .insert:
                guard let change, change.kind == .insert, let written = change.written?.mapped(canonical).withoutToMany else {
                    violations.append("\(commit.place) inserted \(write.id), which its context did not insert")
                    continue
                }
                if let stored = write.state?.mapped(canonical).withoutToMany, stored != written {
                    violations.append("\(commit.place) inserted \(write.id) as \(stored), but its context inserted \(written)")
                }
            case .delete:
                if change?.kind != .delete {
                    violations.append("\(commit.place) deleted \(write.id), which its context did not delete")
                }
            case .update:
                guard let from = write.from, let to = write.to, let stored = write.state?.mapped(canonical).withoutToMany else { continue }
                guard let base = states[write.id]?[from]?.withoutToMany else {
                    violations.append("\(commit.place) replaced version \(from) of \(write.id), which no acknowledged save wrote (a save lost, or a write no save made)")
                    continue
                }
                guard let change, change.kind == .update, let read = change.read?.mapped(canonical),
                      let written = change.written?.mapped(canonical) else {
                    violations.append("\(commit.place) wrote \(write.id) at version \(to), which its context did not change (an unexplained write)")
                    continue
                }
                var expected = base
                // `overwrite` forces the whole state only on an object in conflict: one with a
                // property changed on both sides to different values (rule 1 of MergePolicies).
                let inConflict = written.attributes.contains { name, value in
                    read.attributes[name] != value && base.attributes[name] != read.attributes[name] && base.attributes[name] != value
                } || written.toOne.contains { name, value in
                    read.toOne[name] != value && base.toOne[name] != read.toOne[name] && base.toOne[name] != value
                }
                let forces = overwrites && inConflict
                for (name, value) in written.attributes {
                    let mine = read.attributes[name] != value, theirs = base.attributes[name] != read.attributes[name]
                    if mine || forces { expected.attributes[name] = value }
                    if mine && theirs { decided += 1 } else if forces && theirs { reverted += 1 }
                }
                for (name, value) in written.toOne {
                    let mine = read.toOne[name] != value, theirs = base.toOne[name] != read.toOne[name]
                    if mine || forces { expected.toOne[name] = value }
                    if mine && theirs { decided += 1 } else if forces && theirs { reverted += 1 }
                }
                // Every attribute; the to-one relationships known on both sides (one is not
                // when a later save came before the object was read again: see stateWritten).
                let attributes = Set(stored.attributes.keys).union(expected.attributes.keys).sorted()
                    .filter { stored.attributes[$0] != expected.attributes[$0] }
                    .map { "\($0) = \(Self.text(stored.attributes[$0] ?? nil)), expected \(Self.text(expected.attributes[$0] ?? nil))" }
                let toOne = Set(stored.toOne.keys).intersection(expected.toOne.keys).sorted()
                    .filter { stored.toOne[$0] != expected.toOne[$0] }
                    .map { "\($0) = \(String(describing: stored.toOne[$0] ?? nil)), expected \(String(describing: expected.toOne[$0] ?? nil))" }
                guard !attributes.isEmpty || !toOne.isEmpty else { continue }
                violations.append(
                    "LAST WRITE NOT KEPT: \(commit.place) (\(commit.policy)) stored \(write.id) at version \(to) with "
                        + (attributes + toOne).joined(separator: "; ")
                        + "; its root changed \(Self.changedNames(read, written)) (read at version \(write.read ?? 0)) over version \(from) \(base)")
            }
        }
        return (violations, decided, reverted)
    }

    /// The properties `written` changed from `read`, for messages.
    private static func changedNames(_ read: StressObjectState, _ written: StressObjectState) -> String {
        let names = written.attributes.keys.filter { read.attributes[$0] != written.attributes[$0] }
            + written.toOne.keys.filter { read.toOne[$0] != written.toOne[$0] }
        return names.isEmpty ? "nothing" : names.sorted().joined(separator: ", ")
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

    /// Every acknowledged save that wrote or carried a change of an object named in
    /// `violations` (or of an object their states link to), in the order they were
    /// acknowledged: what each wrote (version read, replaced, written; values) and the
    /// changes behind it. Printed after a failed replay, to find the interleaving.
    func timeline(for violations: [String]) -> String {
        let commits = state.withLock { $0.commits }
        var permanent: [ManagedObjectID: ManagedObjectID] = [:]
        for commit in commits { permanent.merge(commit.permanentIDs) { first, _ in first } }
        func canonical(_ id: ManagedObjectID) -> ManagedObjectID { permanent[id] ?? id }
        func named(_ id: ManagedObjectID) -> Bool {
            let text = "\(id)"
            return violations.contains { violation in
                [" ", ")", ",", ";", "."].contains { violation.contains(text + $0) } || violation.hasSuffix(text)
            }
        }
        func short(_ id: ManagedObjectID) -> String { "\(id.entityName)/\(id.uriRepresentation.lastPathComponent)" }
        var suspects = Set<ManagedObjectID>()
        for commit in commits {
            for write in commit.writes where named(write.id) { suspects.insert(write.id) }
        }
        // The objects their states link to (an account's holder, an owner's accounts).
        var linked = suspects
        for commit in commits {
            for write in commit.writes where suspects.contains(write.id) {
                guard let state = write.state?.mapped(canonical) else { continue }
                for case let id?? in state.toOne.values { linked.insert(id) }
            }
        }
        var lines: [String] = ["timeline of \(linked.map(short).sorted().joined(separator: ", ")):"]
        for (number, commit) in commits.enumerated() {
            let writes = commit.writes.filter { linked.contains($0.id) }
            let changes = (commit.changes + commit.root).filter { linked.contains(canonical($0.id)) }
            guard !writes.isEmpty || !changes.isEmpty else { continue }
            lines.append("  #\(number) \(commit.place)")
            for write in writes {
                lines.append("    wrote \(short(write.id)) \(write.kind.rawValue) read v\(write.read.map(String.init) ?? "-") from v\(write.from.map(String.init) ?? "-") to v\(write.to.map(String.init) ?? "-") \(write.state?.mapped(canonical).description ?? "")")
            }
            for change in commit.changes where linked.contains(canonical(change.id)) {
                lines.append("    carried \(short(canonical(change.id))) \(change.kind.rawValue) by \(change.place) read v\(change.readVersion.map(String.init) ?? "-") \(change.read?.mapped(canonical).description ?? "") -> \(change.written?.mapped(canonical).description ?? "")")
            }
            for change in commit.root where linked.contains(canonical(change.id)) {
                lines.append("    root \(short(canonical(change.id))) \(change.kind.rawValue) read v\(change.readVersion.map(String.init) ?? "-") \(change.read?.mapped(canonical).description ?? "") -> \(change.written?.mapped(canonical).description ?? "")")
            }
        }
        return lines.joined(separator: "\n")
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

    /// What a root context is about to write: each object, the row version it read and
    /// its state (to-many relationships left out).
    struct PendingWrites {
        var inserted: [(temporary: ManagedObjectID, object: ManagedObject, state: StressObjectState)]
        var updated: [(object: ManagedObject, from: UInt64, state: StressObjectState)]
        var deleted: [(id: ManagedObjectID, from: UInt64)]
    }

    static func pendingWrites(in context: isolated ManagedObjectContext) -> PendingWrites {
        let graph = context.graph
        func state(_ object: ManagedObject) -> StressObjectState {
            StressObjectState(object.makeSnapshot(), entity: object.entity, toMany: false)
        }
        return PendingWrites(
            inserted: graph.inserted.map { ($0.objectID, $0, state($0)) },
            updated: graph.updated.map { ($0, $0.rowVersion, state($0)) },
            deleted: graph.deleted.filter { !graph.vanished.contains(ObjectIdentifier($0)) }.map { ($0.objectID, $0.rowVersion) })
    }

    /// The state `object` was written with by a save that just succeeded, at its version.
    /// A merged object holds the stored state; so does one written as it came, unless the
    /// merge of another object of the save made it a fault, to be read again (it is at an
    /// end of a merged object's relationship, whose stored side the merge may have
    /// changed). Then it is read now: when its row is still at the version the save wrote,
    /// that is the stored state; otherwise (another save came since) the attributes it was
    /// written with are, and its to-one relationships are left out, unknown.
    private static func stateWritten(by object: ManagedObject, before: StressObjectState) -> StressObjectState {
        guard object.faultState != .fulfilled else { return StressObjectState(object.makeSnapshot(), entity: object.entity) }
        let version = object.rowVersion
        if object.fulfilIfNeeded(), object.rowVersion == version {
            return StressObjectState(object.makeSnapshot(), entity: object.entity)
        }
        var state = before
        state.toOne = [:]
        return state
    }

    /// The writes of a root save that just succeeded (`pending` taken before it), with the
    /// permanent IDs its inserted objects got. A merged save's objects hold the stored
    /// state at the version it wrote.
    static func writes(
        in context: isolated ManagedObjectContext, pending: PendingWrites
    ) -> (writes: [Write], permanentIDs: [ManagedObjectID: ManagedObjectID]) {
        var writes: [Write] = []
        var permanentIDs: [ManagedObjectID: ManagedObjectID] = [:]
        for (temporary, object, before) in pending.inserted {
            permanentIDs[temporary] = object.objectID
            let version = object.rowVersion
            writes.append(Write(id: object.objectID, kind: .insert, read: nil, from: nil, to: version,
                                state: stateWritten(by: object, before: before)))
        }
        for (object, read, before) in pending.updated {
            // Every write of a row makes the version after the one it replaces (merged or not).
            let version = object.rowVersion
            writes.append(Write(id: object.objectID, kind: .update, read: read, from: max(version, 1) - 1, to: version,
                                state: stateWritten(by: object, before: before)))
        }
        for (id, read) in pending.deleted {
            writes.append(Write(id: id, kind: .delete, read: read, from: read, to: nil, state: nil))
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
