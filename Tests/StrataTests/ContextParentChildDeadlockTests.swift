import Foundation
@testable import Strata
import StrataTesting
import Testing

/// The parent–child patterns that deadlock in naive designs, each under a watchdog: a
/// hang fails the test instead of stalling the run.
@Suite("Context parent and child: no deadlocks")
struct ContextParentChildDeadlockTests {
    /// A parent on an in-memory store and a child of each concurrency type asked for.
    static func family(parent: ManagedObjectContext.ConcurrencyType, child: ManagedObjectContext.ConcurrencyType) async throws
        -> (ManagedObjectContext, ManagedObjectContext) {
        let coordinator = try await ContextReference.inMemory()
        let parentContext = ManagedObjectContext(parent, coordinator: coordinator, name: "parent")
        return (parentContext, ManagedObjectContext(child, parent: parentContext, name: "child"))
    }

    static let combinations: [(ManagedObjectContext.ConcurrencyType, ManagedObjectContext.ConcurrencyType)] = [
        (.privateQueue, .privateQueue), (.mainQueue, .privateQueue), (.privateQueue, .mainQueue),
    ]

    @Test("a child saving while its parent is busy in another block waits for that block, then saves", arguments: 0..<3)
    func childSavesWhileParentIsBusy(_ combination: Int) async throws {
        let (parent, child) = try await Self.family(parent: Self.combinations[combination].0, child: Self.combinations[combination].1)
        let parentBusy = TestSignal(), release = TestSignal()
        let busy = TestRun {
            parent.performAndWait { _ in
                parentBusy.signal()
                _ = release.wait(seconds: 30)
            }
        }
        #expect(await signalled(parentBusy, seconds: 30))
        let saving = TestRun {
            child.performAndWait { child in
                let note = Note()
                note.title = "from the child"
                try? child.insert(note)
                try? child.save()
            }
        }
        release.signal()
        #expect(await busy.joined(seconds: 30))
        #expect(await saving.joined(seconds: 30))
        let inserted = await parent.perform { $0.insertedObjects.count }
        #expect(inserted == 1)
    }

    @Test("a parent's block that performAndWaits into its child, which fetches and saves into the parent, runs through (A→B→A on one thread)", arguments: 0..<3)
    func parentPerformAndWaitIntoChild(_ combination: Int) async throws {
        let (parent, child) = try await Self.family(parent: Self.combinations[combination].0, child: Self.combinations[combination].1)
        let done = TestRun {
            parent.performAndWait { parent in
                let mine = Note()
                mine.title = "parent's"
                try? parent.insert(mine)
                let seen = child.performAndWait { child in
                    let note = Note()
                    note.title = "child's"
                    try? child.insert(note)
                    try? child.save()
                    return (try? child.count(for: FetchRequest<Note>())) ?? -1
                }
                #expect(seen == 2)
                #expect(parent.insertedObjects.count == 2)
            }
        }
        #expect(await done.joined(seconds: 30))
    }

    @Test("a parent's block waiting for its child while the child, on another thread, saves into the parent: both finish", arguments: 0..<3)
    func crossedWaitsResolve(_ combination: Int) async throws {
        let (parent, child) = try await Self.family(parent: Self.combinations[combination].0, child: Self.combinations[combination].1)
        let childInBlock = TestSignal(), parentWaiting = TestSignal()
        let childRun = TestRun {
            child.performAndWait { child in
                childInBlock.signal()
                _ = parentWaiting.wait(seconds: 30)
                // Give the parent's thread time to block on this child.
                Thread.sleep(forTimeInterval: 0.05)
                let note = Note()
                note.title = "crossed"
                try? child.insert(note)
                do { try child.save() } catch { Issue.record("the child's save failed: \(error)") }
            }
        }
        #expect(await signalled(childInBlock, seconds: 30))
        let parentRun = TestRun {
            parent.performAndWait { _ in
                parentWaiting.signal()
                child.performAndWait { _ in }
            }
        }
        #expect(await childRun.joined(seconds: 30))
        #expect(await parentRun.joined(seconds: 30))
        let titles = try await parent.perform { try $0.fetch(FetchRequest<Note>()).map(\.title) }
        #expect(titles == ["crossed"])
    }

    @Test("many children of one parent fetch and save from threads and tasks while the parent's own blocks performAndWait into them: everything finishes, nothing is lost")
    func hammering() async throws {
        let coordinator = try await ContextReference.inMemory()
        let parent = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "parent")
        let children = (0..<4).map { ManagedObjectContext($0 == 0 ? .mainQueue : .privateQueue, parent: parent, name: "child \($0)") }
        let runs = children.enumerated().map { index, child in
            TestRun {
                for round in 0..<10 {
                    child.performAndWait { child in
                        let note = Note()
                        note.title = "c\(index)-\(round)"
                        try? child.insert(note)
                        _ = try? child.count(for: FetchRequest<Note>())
                        do { try child.save() } catch { Issue.record("save failed: \(error)") }
                    }
                }
            }
        }
        let parentRun = TestRun {
            for round in 0..<10 {
                parent.performAndWait { _ in
                    children[round % children.count].performAndWait { child in _ = try? child.count(for: FetchRequest<Note>()) }
                }
            }
        }
        for run in runs { #expect(await run.joined(seconds: 60)) }
        #expect(await parentRun.joined(seconds: 60))
        let count = await parent.perform { $0.insertedObjects.count }
        #expect(count == 40)
    }
}
