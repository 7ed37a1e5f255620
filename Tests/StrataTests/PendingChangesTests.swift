import Foundation
@testable import Strata
import StrataTesting
import Testing

/// The changed set of a context (``PendingChanges``): kept as a list in the order objects
/// first changed, with membership in the objects' state bits, so that an object leaving
/// the set costs no search and the list is compacted when most of it is stale.
@Suite("Pending changes")
struct PendingChangesTests {
    /// A graph holding `count` saved notes (the notes are returned, so they stay alive).
    static func savedNotes(_ count: Int) async throws -> (ObjectGraph, [Note]) {
        let graph = try await ObjectGraphTests.graph()
        let notes = try (0..<count).map { try ObjectGraphTests.note("n\($0)", in: graph) }
        try graph.save()
        return (graph, notes)
    }

    /// Whether `object` carries the changed set's bits.
    static func bits(of object: ManagedObject) -> (inSet: Bool, listed: Bool) {
        (object._bits & ObjectBits.pendingChange != 0, object._bits & ObjectBits.pendingListed != 0)
    }

    @Test("each changed object is in the set once, whatever how often it changes, left and changed again")
    func onceEach() async throws {
        let (graph, notes) = try await Self.savedNotes(5)
        notes[3].priority = 2
        notes[1].priority = 2
        notes[3].priority = 3
        #expect(graph.unsaved.changed.map(ObjectIdentifier.init) == [ObjectIdentifier(notes[3]), ObjectIdentifier(notes[1])])
        #expect(graph.changedCount == 2)
        try graph.refresh(notes[3], mergeChanges: false)
        #expect(graph.unsaved.changed.map(ObjectIdentifier.init) == [ObjectIdentifier(notes[1])])
        #expect(graph.changedCount == 1)
        #expect(Self.bits(of: notes[3]) == (false, true))  // left, its entry stale
        notes[3].priority = 4
        #expect(Set(graph.unsaved.changed.map(ObjectIdentifier.init)) == [ObjectIdentifier(notes[1]), ObjectIdentifier(notes[3])])
        #expect(graph.unsaved.changed.count == 2 && graph.changedCount == 2)
        #expect(graph.updated.map(\.objectID) == [notes[1].objectID, notes[3].objectID])
    }

    @Test("a list mostly stale is compacted: objects that left lose their entries, and changing them again lists them once")
    func compaction() async throws {
        let (graph, notes) = try await Self.savedNotes(100)
        for note in notes { note.priority = 5 }
        for note in notes.dropFirst(10) { try graph.refresh(note, mergeChanges: false) }
        #expect(graph.changedCount == 10)
        #expect(graph.unsaved.changed.map(ObjectIdentifier.init) == notes.prefix(10).map(ObjectIdentifier.init))
        // Compacted when 58 had left (100 > 2 × 42 + 16): those lost their entries.
        let unlisted = notes.dropFirst(10).filter { !Self.bits(of: $0).listed }
        #expect(unlisted.count >= 58)
        #expect(notes.dropFirst(10).allSatisfy { !Self.bits(of: $0).inSet })
        for note in notes { note.priority = 4 }
        let changed = graph.unsaved.changed
        #expect(changed.count == 100 && graph.changedCount == 100)
        #expect(Set(changed.map(ObjectIdentifier.init)).count == 100)
        try graph.save()
        #expect(notes.allSatisfy { Self.bits(of: $0) == (false, false) })
        // Saved, every one of them.
        let other = ObjectGraph(coordinator: try graph.coordinator)
        for note in notes {
            let read = try #require(try other.existingObject(for: note.objectID) as? Note)
            #expect(read.priority == 4)
        }
    }

    @Test("objects changed out of key order are saved in ID order; in key order they are taken as they are")
    func idOrder() async throws {
        let (graph, notes) = try await Self.savedNotes(20)
        for note in notes.reversed() { note.priority = 3 }
        #expect(graph.updated.map(\.objectID) == notes.map(\.objectID))
        try graph.save()
        for note in notes { note.priority = 4 }
        #expect(graph.updated.map(\.objectID) == notes.map(\.objectID))
        // Deleted and changed objects together: the deletions are not in `updated`.
        notes[5].priority = 1
        try graph.delete(notes[2])
        #expect(!graph.updated.contains { $0 === notes[2] })
        #expect(graph.updated.count == 20 - 1)
    }

    @Test("a graph that goes away with changes leaves no marks on its objects")
    func deinitClears() async throws {
        var (graph, notes): (ObjectGraph?, [Note]) = try await Self.savedNotes(4)
        for note in notes { note.priority = 2 }
        try graph?.refresh(notes[0], mergeChanges: false)  // a stale entry, too
        #expect(Self.bits(of: notes[0]) == (false, true))
        weak let gone = graph
        graph = nil
        #expect(gone == nil)
        #expect(notes.allSatisfy { Self.bits(of: $0) == (false, false) && $0.owner == nil })
    }

    @Test("a rollback empties the set and clears every object's bits")
    func rollbackClears() async throws {
        let (graph, notes) = try await Self.savedNotes(8)
        for note in notes { note.priority = 2 }
        graph.rollback()
        #expect(graph.changedCount == 0 && graph.unsaved.changed.isEmpty && !graph.hasChanges)
        #expect(notes.allSatisfy { Self.bits(of: $0) == (false, false) && $0.priority == 1 })
        notes[0].priority = 4
        #expect(graph.unsaved.changed.map(ObjectIdentifier.init) == [ObjectIdentifier(notes[0])])
    }
}
