import Foundation
@testable import Strata
import StrataTesting
import Testing

/// An account whose balance moves between accounts: the total is conserved.
final class Account: ManagedObject {
    @Attribute(indexed: true) var number: Int = 0
    @Attribute var balance: Int = 0
}

/// A record written with a transfer (several per save, sharing the save's serial).
final class Receipt: ManagedObject {
    @Attribute var worker: Int = 0
    @Attribute var serial: Int = 0
}

/// Contexts on one coordinator used at once: many writers, a main-queue context,
/// cancellation, scheduling order, reentrancy chains, and fetches racing saves. Every
/// test checks invariants after (or during) the run, never timings.
@Suite("Context concurrency")
struct ContextConcurrencyTests {
    static let model: ManagedObjectModel = {
        do {
            return try ManagedObjectModel(types: [Account.self, Receipt.self])
        } catch {
            preconditionFailure("the test model is invalid: \(error)")
        }
    }()

    static let accounts = 12
    static let opening = 100

    /// A coordinator on a real LMDB store with the opening accounts saved.
    static func bank(in directory: URL) async throws -> PersistentStoreCoordinator {
        let coordinator = try await ContextReference.lmdb(in: directory, model: model)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            for number in 0..<accounts {
                let account = Account()
                account.number = number
                account.balance = opening
                try context.insert(account)
            }
            try context.save()
        }
        return coordinator
    }

    /// Inside a block: moves `amount` from account `from` to `to` and records `receipts`
    /// receipts, then saves; on a merge conflict starts again from fresh rows. The
    /// number of attempts.
    static func transfer(
        in context: isolated ManagedObjectContext, from: Int, to: Int, amount: Int,
        worker: Int, serial: Int, receipts: Int = 1
    ) throws -> Int {
        for attempt in 1...500 {
            context.reset()   // read fresh rows: registered objects never change under a fetch
            var request = FetchRequest<Account>()
            request.predicate = try FetchPredicate(format: "number == %@ OR number == %@", from, to)
            let found = try context.fetch(request)
            guard let source = found.first(where: { $0.number == from }),
                  let destination = found.first(where: { $0.number == to }) else {
                throw StrataError.invalidContextConfiguration("accounts \(from) and \(to) not found")
            }
            source.balance -= amount
            destination.balance += amount
            for _ in 0..<receipts {
                let receipt = Receipt()
                receipt.worker = worker
                receipt.serial = serial
                try context.insert(receipt)
            }
            do {
                try context.save()
                return attempt
            } catch StrataError.Code.mergeConflicts {
                context.rollback()
            }
        }
        throw StrataError.invalidContextConfiguration("no transfer after 500 attempts")
    }

    /// Inside a block: the sum of the balances as one fetch sees them. The objects come
    /// back with their values (`returnsObjectsAsFaults` false): faults would each read
    /// the store when they fire, later, possibly after other saves.
    static func total(in context: isolated ManagedObjectContext) throws -> (sum: Int, accounts: Int) {
        context.reset()
        var request = FetchRequest<Account>()
        request.returnsObjectsAsFaults = false
        let accounts = try context.fetch(request)
        return (accounts.reduce(0) { $0 + $1.balance }, accounts.count)
    }

    @Test("eight private contexts and a main-queue one transfer, insert and fetch at once; with retries on merge conflicts the total is conserved and every saved receipt is there")
    func manyContextsKeepTheInvariants() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await Self.bank(in: directory.url)
        let rounds = 12
        let workers = 9   // 0..<8 private, 8 on the main queue
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<workers {
                group.addTask {
                    let type: ManagedObjectContext.ConcurrencyType = worker == 8 ? .mainQueue : .privateQueue
                    let context = ManagedObjectContext(type, coordinator: coordinator, name: "worker \(worker)")
                    var random = SeededRandomNumberGenerator(seed: UInt64(worker + 1))
                    for serial in 0..<rounds {
                        let from = Int.random(in: 0..<Self.accounts, using: &random)
                        let to = (from + Int.random(in: 1..<Self.accounts, using: &random)) % Self.accounts
                        let amount = Int.random(in: 1...20, using: &random)
                        try await context.perform { context in
                            _ = try Self.transfer(in: context, from: from, to: to, amount: amount, worker: worker, serial: serial)
                            let (sum, count) = try Self.total(in: context)
                            #expect(sum == Self.accounts * Self.opening && count == Self.accounts)
                            var mine = FetchRequest<Receipt>()
                            mine.predicate = try FetchPredicate(format: "worker == %@", worker)
                            let receipts = try context.count(for: mine)
                            #expect(receipts == serial + 1)
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        let check = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let (sum, receipts) = try await check.perform { context in
            let accounts = try context.fetch(FetchRequest<Account>())
            let receipts = try context.fetch(FetchRequest<Receipt>()).map { "\($0.worker)-\($0.serial)" }
            return (accounts.reduce(0) { $0 + $1.balance }, receipts)
        }
        #expect(sum == Self.accounts * Self.opening)
        #expect(receipts.count == workers * rounds)
        #expect(Set(receipts) == Set((0..<workers).flatMap { w in (0..<rounds).map { "\(w)-\($0)" } }))
    }

    @Test("a fetch racing a save in another context sees the whole save or none of it")
    func fetchesSeeWholeSaves() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await Self.bank(in: directory.url)
        let saves = 40
        let receiptsPerSave = 5
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                let writer = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "writer")
                for serial in 0..<saves {
                    try await writer.perform { context in
                        _ = try Self.transfer(
                            in: context, from: serial % Self.accounts, to: (serial + 5) % Self.accounts,
                            amount: 7, worker: 0, serial: serial, receipts: receiptsPerSave)
                    }
                }
            }
            for reader in 0..<2 {
                group.addTask {
                    let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "reader \(reader)")
                    for _ in 0..<60 {
                        try await context.perform { context in
                            let (sum, count) = try Self.total(in: context)
                            #expect(sum == Self.accounts * Self.opening && count == Self.accounts)
                            var receipts = FetchRequest<Receipt>()
                            receipts.returnsObjectsAsFaults = false
                            let serials = try context.fetch(receipts).map(\.serial)
                            let perSave = Dictionary(grouping: serials) { $0 }.values.map(\.count)
                            #expect(perSave.allSatisfy { $0 == receiptsPerSave })
                            let counted = try context.count(for: FetchRequest<Receipt>())
                            #expect(counted % receiptsPerSave == 0)
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        let check = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let count = try await check.perform { context in try context.count(for: FetchRequest<Receipt>()) }
        #expect(count == saves * receiptsPerSave)
    }

    @Test("a task cancelled while its perform waits still runs the block exactly once; the block sees the cancellation, its rollback leaves nothing written, and the context stays usable")
    func cancelledPerformRunsOnce() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await Self.bank(in: directory.url)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let blocking = TestSignal()
        let release = TestSignal()
        context.enqueueBlock { _ in
            blocking.signal()
            release.wait()
        }
        #expect(await signalled(blocking))
        let started = TestSignal()
        let runs = TestBox(0)
        let task = Task {
            started.signal()
            return try await context.perform { context in
                runs.value += 1
                for serial in 0..<3 {
                    let receipt = Receipt()
                    receipt.serial = serial
                    try context.insert(receipt)
                }
                guard !Task.isCancelled else {
                    context.rollback()
                    return false
                }
                try context.save()
                return true
            }
        }
        #expect(await signalled(started))
        task.cancel()
        release.signal()
        #expect(await finishes { _ = try? await task.value })
        let saved = try await task.value
        #expect(!saved)
        let (ran, stored, changes) = try await context.perform(schedule: .enqueued) { context in
            (runs.value, try context.count(for: FetchRequest<Receipt>()), context.hasChanges)
        }
        #expect(ran == 1 && stored == 0 && !changes)
        // Still usable.
        let after = try await context.perform { context in
            try context.insert(Receipt())
            try context.save()
            return try context.count(for: FetchRequest<Receipt>())
        }
        #expect(after == 1)
    }

    @Test("tasks cancelled at arbitrary points while saving batches: every batch is either fully saved or not at all, and every context stays usable")
    func cancelledSavesAreAllOrNothing() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await Self.bank(in: directory.url)
        let batch = 4
        let progress = TestSignal()
        let tasks = (0..<6).map { worker in
            Task {
                let context = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "cancellable \(worker)")
                for serial in 0..<200 {
                    // A cancelled perform still runs its block; the block saves a whole batch or nothing.
                    let saved = try await context.perform { context in
                        _ = try Self.transfer(in: context, from: worker, to: worker + 6, amount: 1, worker: worker, serial: serial, receipts: batch)
                        return true
                    }
                    if saved && serial == 2 { progress.signal() }
                    if Task.isCancelled { break }
                }
                return context
            }
        }
        for _ in tasks { #expect(await signalled(progress)) }
        for task in tasks { task.cancel() }
        var contexts: [ManagedObjectContext] = []
        for task in tasks { contexts.append(try await task.value) }
        let check = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let (sum, groups) = try await check.perform { context in
            let accounts = try context.fetch(FetchRequest<Account>())
            let receipts = try context.fetch(FetchRequest<Receipt>())
            let groups = Dictionary(grouping: receipts) { "\($0.worker)-\($0.serial)" }.values.map(\.count)
            return (accounts.reduce(0) { $0 + $1.balance }, groups)
        }
        #expect(sum == Self.accounts * Self.opening)
        #expect(groups.count >= 18 && groups.allSatisfy { $0 == batch })
        for context in contexts {
            let usable = try await context.perform { context in try context.count(for: FetchRequest<Account>()) }
            #expect(usable == Self.accounts)
        }
    }

    @MainActor
    @Test("a main-queue context is used synchronously from @MainActor code: assumeIsolated, performAndWait and an .immediate perform run inline; .enqueued waits for queued blocks")
    func mainQueueContextFromMainActor() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await Self.bank(in: directory.url)
        let context = ManagedObjectContext(.mainQueue, coordinator: coordinator)
        let log = TestBox<[String]>([])
        // Direct, synchronous use: main-actor code is on the context's queue.
        let balance = try Self.moveTenDirectly(in: context)
        #expect(balance == Self.accounts * Self.opening)
        context.enqueueBlock { _ in log.value.append("queued") }
        await context.perform { _ in log.value.append("immediate") }
        let inline = context.performAndWait { context in
            log.value.append("performAndWait")
            return context.hasChanges
        }
        #expect(!inline)
        await context.perform(schedule: .enqueued) { _ in log.value.append("enqueued") }
        #expect(log.value == ["immediate", "performAndWait", "queued", "enqueued"])
        // A private context sees the main-queue context's save.
        let reader = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let first = try await reader.perform { context in
            var request = FetchRequest<Account>()
            request.predicate = try FetchPredicate(format: "number == 0")
            return try context.fetch(request).first?.balance
        }
        #expect(first == Self.opening - 10)
    }

    /// Synchronous main-actor code using a main-queue context directly (no block).
    @MainActor
    static func moveTenDirectly(in context: ManagedObjectContext) throws -> Int {
        try context.assumeIsolated { context in
            var request = FetchRequest<Account>()
            request.sortDescriptors = [FetchSortDescriptor(key: "number")]
            let accounts = try context.fetch(request)
            accounts[0].balance -= 10
            accounts[1].balance += 10
            try context.save()
            return accounts.reduce(0) { $0 + $1.balance }
        }
    }

    @Test(".immediate runs inline inside a context's own code; .enqueued runs after every block already scheduled, and sees their changes")
    func enqueuedAfterImmediate() async throws {
        let coordinator = try await ContextReference.inMemory(model: Self.model)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        let (log, seen) = await context.schedulingScenario()
        #expect(log == [1, 2, 3, 4])
        #expect(seen == 1)   // the .enqueued block saw the insert of the block queued before it
        // From outside: .enqueued runs after fire-and-forget blocks given before it.
        for serial in 0..<20 {
            context.enqueueBlock { context in
                let receipt = Receipt()
                receipt.serial = serial
                try? context.insert(receipt)
            }
        }
        let serials = await context.perform(schedule: .enqueued) { context in
            context.insertedObjects.compactMap { ($0 as? Receipt)?.serial }.sorted()
        }
        #expect(serials == [0] + Array(0..<20))
    }

    @Test("performAndWait chains A → B → A → B from several plain threads at once finish without deadlock, every insert in place")
    func reentrantChainsFromThreads() async throws {
        let coordinator = try await ContextReference.inMemory(model: Self.model)
        let a = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "A")
        let b = ManagedObjectContext(.privateQueue, coordinator: coordinator, name: "B")
        let threads = 4
        let iterations = 25
        let runs = (0..<threads).map { worker in
            TestRun {
                for serial in 0..<iterations {
                    a.performAndWait { a in
                        try? a.insert(Receipt())
                        b.performAndWait { b in
                            try? b.insert(Receipt())
                            a.performAndWait { a in
                                try? a.insert(Receipt())
                                b.performAndWait { b in
                                    let receipt = Receipt()
                                    receipt.worker = worker
                                    receipt.serial = serial
                                    try? b.insert(receipt)
                                }
                            }
                        }
                    }
                }
            }
        }
        for run in runs { #expect(await run.joined(seconds: 60)) }
        let inA = try await a.perform { context in
            let count = context.insertedObjects.count
            try context.save()
            return count
        }
        let inB = try await b.perform { context in
            let count = context.insertedObjects.count
            try context.save()
            return count
        }
        #expect(inA == threads * iterations * 2 && inB == threads * iterations * 2)
        let stored = try await a.perform { context in try context.count(for: FetchRequest<Receipt>()) }
        #expect(stored == threads * iterations * 4)
    }
}

extension ManagedObjectContext {
    /// Inside the context: a block queued for later, an `.immediate` perform (inline,
    /// before it) and an `.enqueued` one (after it). The order, and how many objects
    /// the `.enqueued` block found inserted.
    fileprivate func schedulingScenario() async -> ([Int], Int) {
        var log: [Int] = []
        let queued = TestBox<[Int]>([])
        enqueueBlock { context in
            queued.value.append(3)
            try? context.insert(Receipt())
        }
        log.append(1)
        await perform { _ in log.append(2) }
        let seen = await perform(schedule: .enqueued) { context in
            log += queued.value
            log.append(4)
            return context.insertedObjects.count
        }
        return (log, seen)
    }
}
