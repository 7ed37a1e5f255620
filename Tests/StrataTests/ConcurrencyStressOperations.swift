import Foundation
@testable import Strata
import StrataTesting

/// What the stress contexts do, one step each.
enum StressOperation: String, CaseIterable, Sendable {
    /// Moves money between two accounts.
    case transfer
    /// A new account, funded from an existing one or empty, with or without an owner.
    case insertAccount
    /// A new owner, with no accounts.
    case insertOwner
    /// Moves an account's money to another, then deletes it.
    case deleteAccount
    /// Moves the money of an owner's accounts to others, then deletes the owner (and, by
    /// the cascade rule, its accounts).
    case deleteOwner
    /// A child saves into its parent (and most often the parent then saves); a root saves.
    case save
    /// Discards the unsaved changes of the context that changes objects.
    case rollback
    /// Pins the root context to the newest generation (again, when already pinned).
    case pin
    /// Unpins the root context.
    case unpin
    /// Resets the contexts (a child and then its parent).
    case reset
    /// Gives an account another holder, or none (the disjoint mode: an account the
    /// context keeps).
    case rehome
    /// Sets an account's label (the disjoint mode: an account the context keeps; the
    /// last-writer-wins mode: any account).
    case relabel
}

/// The layout of one of the eight contexts: its queue, its child's, and whether it pins
/// often.
struct StressPlan: Sendable, CustomStringConvertible {
    let type: ManagedObjectContext.ConcurrencyType
    let child: ManagedObjectContext.ConcurrencyType?
    let pinsOften: Bool

    /// Five private-queue and three main-queue root contexts; four have a child (a main
    /// queue child of a private parent among them); four pin often.
    static let contexts: [StressPlan] = [
        StressPlan(type: .privateQueue, child: nil, pinsOften: false),
        StressPlan(type: .mainQueue, child: nil, pinsOften: false),
        StressPlan(type: .privateQueue, child: nil, pinsOften: true),
        StressPlan(type: .mainQueue, child: nil, pinsOften: true),
        StressPlan(type: .privateQueue, child: .privateQueue, pinsOften: false),
        StressPlan(type: .mainQueue, child: .privateQueue, pinsOften: false),
        StressPlan(type: .privateQueue, child: .privateQueue, pinsOften: true),
        StressPlan(type: .privateQueue, child: .mainQueue, pinsOften: true),
    ]

    var description: String {
        func name(_ type: ManagedObjectContext.ConcurrencyType) -> String { type == .mainQueue ? "main" : "private" }
        return name(type) + (child.map { " with a \(name($0)) child" } ?? "") + (pinsOften ? ", pins often" : "")
    }

    /// How often each operation is drawn in `mode`. The merge modes delete nothing (see
    /// ``StressMode``) and insert less (and up to ``StressSettings/mergeModeAccounts``),
    /// so that the accounts stay few enough to collide; the conserved-sum mode draws
    /// exactly what it drew before the merge modes came.
    func weight(of operation: StressOperation, in mode: StressMode) -> Int {
        let merging = mode != .conserved
        switch operation {
        case .transfer: return 30
        case .insertAccount: return merging ? 2 : 8
        case .insertOwner: return merging ? 1 : 3
        case .deleteAccount: return merging ? 0 : 6
        case .deleteOwner: return merging ? 0 : 2
        case .save: return 22
        case .rollback: return 4
        case .pin: return pinsOften ? 12 : 4
        case .unpin: return pinsOften ? 1 : 3
        case .reset: return 2
        case .rehome: return mode == .disjoint ? 5 : 0
        case .relabel: return merging ? 6 : 0
        }
    }

    func pick(in mode: StressMode, using random: inout SeededRandomNumberGenerator) -> StressOperation {
        let total = StressOperation.allCases.reduce(0) { $0 + weight(of: $1, in: mode) }
        var draw = Int.random(in: 0..<total, using: &random)
        for operation in StressOperation.allCases {
            draw -= weight(of: operation, in: mode)
            if draw < 0 { return operation }
        }
        return .transfer
    }

    /// The context that keeps account `number` in the disjoint mode (the only one that
    /// relabels or rehomes it): opening account `n` is kept by context `n % 8`, a new
    /// account by the context that inserted it (context `k` numbers its objects from
    /// `(k + 1) × 1,000,000`).
    static func keeper(ofAccount number: Int) -> Int {
        number >= 1_000_000 ? number / 1_000_000 - 1 : number % contexts.count
    }
}

/// A root save's result.
enum StressRootSave: Sendable {
    case nothing
    /// `merged`: the rows it wrote over a newer version than its context had read (the
    /// conflicts its merge policy settled).
    case saved(inserted: [ManagedObjectID], deleted: Int, merged: Int)
    case conflicted
}

/// A child save's result.
enum StressChildSave: Sendable {
    case nothing
    case saved
    case conflicted
}

/// What a root context's invariant check read: whether its generation was still to be
/// taken (pinned to the newest, lazily), the transaction id of its generation (nil when
/// unpinned), and its view of the accounts when it had no unsaved changes.
struct StressInspection: Sendable {
    var wasLazy: Bool
    var token: QueryGenerationToken?
    var transaction: Int?
    var view: StressView?
}

// The operations, inside a block of the context they change. Every amount keeps the sum:
// a transfer moves money, a funded account takes it from another, a deleted account's
// money goes to another first. Every choice comes from the step's seeded generator, over
// accounts sorted by number, so a seed replays the same operations. The money a context
// moves is `balance`, except in the disjoint mode: its own column of every account.
extension StressOperation {
    static func accounts(in context: isolated ManagedObjectContext) throws -> [StressAccount] {
        var request = FetchRequest<StressAccount>()
        request.sortDescriptors = [FetchSortDescriptor(key: "number")]
        request.returnsObjectsAsFaults = false
        return try context.fetch(request)
    }

    static func owners(in context: isolated ManagedObjectContext) throws -> [StressOwner] {
        var request = FetchRequest<StressOwner>()
        request.sortDescriptors = [FetchSortDescriptor(key: "number")]
        request.returnsObjectsAsFaults = false
        return try context.fetch(request)
    }

    /// Runs a changing operation (transfer, inserts, deletes, rehome, relabel) in
    /// `context`, the context of worker `teller` (or its child).
    func change(
        _ context: isolated ManagedObjectContext, number: Int, mode: StressMode, teller: Int,
        using random: inout SeededRandomNumberGenerator
    ) throws -> StressOutcome {
        let accounts = try Self.accounts(in: context)
        let money: ReferenceWritableKeyPath<StressAccount, Int> = mode == .disjoint ? \.[share: teller] : \.balance
        let funded = accounts.filter { $0[keyPath: money] > 0 }
        switch self {
        case .transfer:
            guard let source = funded.randomElement(using: &random),
                  let destination = accounts.filter({ $0 !== source }).randomElement(using: &random) else { return .skipped }
            let amount = Int.random(in: 1...min(source[keyPath: money], 100), using: &random)
            source[keyPath: money] -= amount
            destination[keyPath: money] += amount
        case .insertAccount:
            if mode.merges && accounts.count >= StressSettings.mergeModeAccounts { return .skipped }
            let account = StressAccount()
            account.number = number
            try context.insert(account)
            if Bool.random(using: &random), let source = funded.randomElement(using: &random) {
                let amount = Int.random(in: 1...min(source[keyPath: money], 200), using: &random)
                source[keyPath: money] -= amount
                account[keyPath: money] = amount
            }
            // (No holder in the last-writer-wins mode: it changes no relationship.)
            if mode != .lastWriterWins, Bool.random(using: &random),
               let owner = try Self.owners(in: context).randomElement(using: &random) {
                account.holder = owner
            }
        case .insertOwner:
            let owner = StressOwner()
            owner.number = number
            try context.insert(owner)
        case .deleteAccount:
            guard accounts.count > StressSettings.minimumAccounts, let victim = accounts.randomElement(using: &random),
                  let heir = accounts.filter({ $0 !== victim }).randomElement(using: &random) else { return .skipped }
            heir.balance += victim.balance
            victim.balance = 0
            try context.delete(victim)
        case .deleteOwner:
            let owners = try Self.owners(in: context)
            guard owners.count > StressSettings.minimumOwners, let owner = owners.randomElement(using: &random) else { return .skipped }
            let owned = owner.accounts.sorted { $0.number < $1.number }
            let ownedIDs = Set(owned.map(ObjectIdentifier.init))
            let heirs = accounts.filter { !ownedIDs.contains(ObjectIdentifier($0)) }
            guard heirs.count >= StressSettings.minimumAccounts else { return .skipped }
            for account in owned where account.balance != 0 {
                let heir = heirs.randomElement(using: &random)!
                heir.balance += account.balance
                account.balance = 0
            }
            try context.delete(owner)   // its accounts go at the end of the block (cascade)
        case .rehome:
            let kept = accounts.filter { StressPlan.keeper(ofAccount: $0.number) == teller }
            guard let account = kept.randomElement(using: &random) else { return .skipped }
            let holders: [StressOwner?] = try Self.owners(in: context).filter { $0 !== account.holder } + (account.holder == nil ? [] : [nil])
            guard let holder = holders.randomElement(using: &random) else { return .skipped }
            account.holder = holder
        case .relabel:
            let candidates = mode == .disjoint ? accounts.filter { StressPlan.keeper(ofAccount: $0.number) == teller } : accounts
            guard let account = candidates.randomElement(using: &random) else { return .skipped }
            account.label = "c\(teller).\(number)"   // (`number` is new at every step)
        case .save, .rollback, .pin, .unpin, .reset:
            preconditionFailure("\(self) changes no object")
        }
        return .done
    }

    /// Saves a root context; on a merge conflict (expected under `.error`: other contexts
    /// saved the same accounts) rolls back. Tells `ledger` what a successful save inserted
    /// and deleted, and which deletions are under way before the save starts; logs an
    /// acknowledged save in `history` with what it wrote, the changes it carried
    /// (`worker`'s child's, or, for a root without a child, its own), the root's own view
    /// of what it changed (what its merge policy merges from) and the policy.
    static func saveRoot(
        _ context: isolated ManagedObjectContext, ledger: StressLedger, history: StressHistory, worker: Int, hasChild: Bool,
        label: String
    ) throws -> StressRootSave {
        try context.processPendingChanges()   // the cascade runs: its deletions are listed below
        // Objects that hold a child's changes without their values are read, as the save
        // would read them first: the log holds their whole state (what `overwrite` forces).
        context.graph.readUnreadChanges()
        guard context.hasChanges else {
            history.discardPending(worker: worker)   // what the child saved changed nothing here
            return .nothing
        }
        let inserted = Array(context.insertedObjects)
        let deleted = context.deletedObjects.map(\.objectID)
        let pending = StressHistory.pendingWrites(in: context)
        let root = StressHistory.changes(in: context, place: label)
        let own = hasChild ? [] : root
        ledger.deleting(deleted)
        do {
            try context.save()
        } catch StrataError.Code.mergeConflicts {
            ledger.abandon(deleted)
            context.rollback()
            history.discardPending(worker: worker)
            return .conflicted
        } catch {
            ledger.abandon(deleted)
            throw error
        }
        let (writes, permanentIDs) = StressHistory.writes(in: context, pending: pending)
        history.acknowledged(
            worker: hasChild ? worker : nil, place: label, writes: writes, own: own, root: root, policy: context.mergePolicy,
            permanentIDs: permanentIDs)
        let ids = inserted.map(\.objectID)
        ledger.saved(inserted: ids, deleted: deleted, by: label)
        return .saved(inserted: ids, deleted: deleted.count, merged: writes.filter(\.isMerged).count)
    }

    /// Saves a child into its parent; on a merge conflict (an object it changed is gone
    /// there, or changed since the child read it) rolls back. Logs the changes it saved
    /// into the parent in `history`.
    static func saveChild(_ context: isolated ManagedObjectContext, history: StressHistory, worker: Int, label: String) throws -> StressChildSave {
        try context.processPendingChanges()
        guard context.hasChanges else { return .nothing }
        let changes = StressHistory.changes(in: context, place: label + " (child)")
        do {
            try context.save()
            history.childSaved(worker: worker, changes)
            return .saved
        } catch StrataError.Code.mergeConflicts {
            context.rollback()
            return .conflicted
        }
    }

    /// The accounts as `context` sees them now (each one's row too, when `rows`).
    static func view(of context: isolated ManagedObjectContext, transaction: Int?, rows: Bool = true) throws -> StressView {
        var view = StressView(balances: [:], transaction: transaction, columns: Array(repeating: 0, count: StressAccount.columns))
        for account in try accounts(in: context) {
            let shares = account.shares
            view.balances[account.objectID] = shares.reduce(account.balance) { $0 + ($1 ?? 0) }
            for (column, share) in shares.enumerated() { view.columns[column] += share ?? 0 }
            if rows, !account.objectID.isTemporaryID {
                view.rows[account.objectID] = StressRead(account)
            }
        }
        return view
    }

    /// A root context's generation, and when it has no unsaved changes, its view of the
    /// accounts read afresh: a pinned context's registered objects are refreshed from its
    /// generation, an unpinned one is reset.
    static func inspect(_ context: isolated ManagedObjectContext, store: PersistentStore) throws -> StressInspection {
        let wasLazy = context.graph.heldGenerationToken?.isCurrent == true
        let token = context.queryGenerationToken
        let transaction = token?.transactionID(in: store)
        guard !context.hasChanges else { return StressInspection(wasLazy: wasLazy, token: token, transaction: transaction, view: nil) }
        if transaction != nil {
            try context.refreshAllObjects()
        } else {
            context.reset()
        }
        let view = try view(of: context, transaction: transaction)
        return StressInspection(wasLazy: wasLazy, token: token, transaction: transaction, view: view)
    }

    /// A child's view of the accounts (through its parent), read afresh; nil when it has
    /// unsaved changes.
    static func inspectChild(_ context: isolated ManagedObjectContext) throws -> StressView? {
        guard !context.hasChanges else { return nil }
        context.reset()
        return try view(of: context, transaction: nil, rows: false)
    }

    /// Every object in the store as a new context sees it (pinned to `token`, or to the
    /// newest generation), and the transaction id read; nil when `token`'s generation is
    /// gone.
    static func storeContents(
        _ context: isolated ManagedObjectContext, token: QueryGenerationToken, store: PersistentStore
    ) throws -> (view: StressView, owners: Set<ManagedObjectID>)? {
        do {
            try context.setQueryGenerationFrom(token)
        } catch StrataError.Code.queryGenerationUnavailable {
            return nil
        }
        let transaction = context.queryGenerationToken?.transactionID(in: store)
        let view = try view(of: context, transaction: transaction)
        var request = FetchRequest<ManagedObjectID>(entityName: StressOwner.entityName)
        request.resultType = .managedObjectID
        return (view, Set(try context.fetch(request)))
    }
}
