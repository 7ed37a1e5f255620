/// Who is waiting in a synchronous wait, which decides whether what it holds may be lent
/// while it waits.
package enum SynchronousWaitKind: Sendable, Hashable, CustomStringConvertible {
    /// `performAndWait`: the caller's block is paused at a call that may, by the API's
    /// contract, run other blocks of the contexts it holds (reentrancy), so what it holds
    /// may be lent to a thread it waits for.
    case user
    /// A request made for the framework's own work (a child context's fetch or save in
    /// its parent): the code that waits is paused in the middle of an operation, so what
    /// it holds is never lent.
    case `internal`

    /// How messages name it.
    package var description: String {
        switch self {
        case .user: "performAndWait"
        case .internal: "internal request"
        }
    }
}

/// A thread, as the wait graph knows it: equal for the same thread.
package struct ThreadKey: Sendable, Hashable {
    /// The thread's identifier (a `pthread_t` on Linux).
    package let raw: UInt

    /// The thread `raw` names.
    package init(_ raw: UInt) {
        self.raw = raw
    }
}

/// The wait-for graph of every blocking wait between executors, and the rules for how
/// each wait gets its turn: a pure state machine.
///
/// It holds no lock, starts no thread, runs no job. Each transition is called by the
/// driver (``SynchronousWaits``) with the driver's lock held, updates the graph, and
/// returns what the driver must do next (wake these waiters, run this block here, send a
/// gate, give up). The driver does those things, the slow ones with its lock released,
/// and reports back with the next transition. So every rule lives here, and every rule
/// can be tested without a thread (WaitGraphTests).
///
/// ## A wait's life
/// ```
///             begin
///               │
///   ┌────────► waiting ──(gate, private X)──► granted ──► running ──► left
///   │           │  │  └─(gate, main)──► delegated ──► finished ──► left
///   │           │  ├─(borrow / relay)──► running ──► left
///   │           │  ├─(rescue asked)──► delegated ──► finished ──► left
///   │           │  └─(deadlock, internal only)──► left
///   ├── lent ◄──┤  (a waiter it waits for runs on what it holds)
///   └─ rescuing ◄┘ (it runs another waiter's main-queue block)
/// ```
/// A wait is removed from the graph when its thread leaves (``finishRunning(_:)``,
/// ``nextStep(for:)`` returning ``Step/leave`` or ``Step/giveUp(_:)``).
///
/// ## How a wait for executor X gets its turn
/// 1. **Private X, normal path**: a gate job goes to the back of X's queue. At its head
///    it claims X's admission for the waiting thread, then ``privateGateArrived(_:)``
///    marks the wait granted; the waiting thread runs its block itself, with X held.
/// 2. **Main X, normal path**: a gate block goes to the main queue;
///    ``mainGateArrived(_:)`` lets it run the caller's block there, lending it the
///    caller's holdings, as `DispatchQueue.main.sync` did.
/// 3. **Borrow (private X)**: X is held by a `.user` waiter W that is blocked,
///    transitively, by this wait. This thread runs its block on X right away; W is lent
///    until then, so nothing else borrows from it and it takes no turn of its own.
///    Safe: W cannot move before this thread lets go of what W waits for. It is the
///    cross-thread form of the reentrancy `performAndWait` already has on one thread.
/// 4. **Rescue (main X)**: main-actor code only runs on a thread that drains the main
///    queue. When the main queue is held by a `.user` waiter that drains it and is
///    blocked by this wait, that waiter runs this wait's block, then waits again.
/// 5. **Relay (main X)**: when the main queue is held by a `.user` waiter through a
///    main-queue lock's relay (a thread off the main queue holding `lock()`), the block
///    goes through that relay.
/// 6. **No way out**: when every thread involved is blocked in a wait nobody can
///    resolve, an `.internal` wait gives up with a description of the cycle (the caller
///    throws `wouldDeadlock`). A `performAndWait` cannot throw, so it keeps waiting; a
///    cycle with a `performAndWait` in it is always resolved by 3–5, since the waiter
///    before it in the cycle can borrow from it or be rescued by it.
///
/// Wake-ups are targeted: a grant or a finished block wakes its waiter only; a new wait,
/// and a waiter back to waiting, wake the waits connected to it (what it waits for and
/// what waits for it, transitively): only those can find a new borrow, rescue or
/// deadlock. A wait that ends wakes nobody.
package struct WaitGraph {
    /// Names one wait for as long as it is in the graph.
    package struct WaitID: Sendable, Hashable, CustomStringConvertible {
        /// Unique within its graph.
        package let raw: Int

        /// The ID numbered `raw`.
        package init(raw: Int) {
            self.raw = raw
        }

        /// For messages: `#3`.
        package var description: String { "#\(raw)" }
    }

    /// Where a wait stands.
    package enum State: Sendable, Hashable {
        /// Blocked: nothing runs for it. The only state in which it acts, lends, or is
        /// granted its executor.
        case waiting
        /// Its private queue's gate took the executor for it: its thread is about to run
        /// the block.
        case granted
        /// Its block runs: on its thread (granted, or on an executor borrowed from a
        /// waiter), or through a main-queue lock's relay while its thread waits for it.
        case running
        /// Another thread runs its block for it (the main queue's gate, a rescuer), with
        /// its holdings lent to that thread.
        case delegated
        /// Still blocked, and a thread it waits for uses one of its holdings.
        case lent
        /// Still blocked, and its thread runs another waiter's main-queue block.
        case rescuing
        /// Its block ran: the waiting thread leaves.
        case finished
    }

    /// One thread blocked in a wait, as the graph sees it.
    package struct Wait: Sendable {
        /// Its name.
        package let id: WaitID
        /// The waiting thread.
        package let thread: ThreadKey
        /// The executor it waits for.
        package let target: ExecutorIdentity
        /// Whether its holdings may be lent.
        package let kind: SynchronousWaitKind
        /// Whether the waiting thread drains the main queue: main-actor code can run on
        /// it, so it can run another waiter's main-queue block while it waits.
        package let drainsMainQueue: Bool
        /// What the thread holds (its ownership stack and the queue it drains), plus the
        /// target once its block runs.
        package var holdings: [ExecutorHolding]
        /// Where the wait stands.
        package var state: State = .waiting
        /// Whether a gate must (again) be sent to the target: set at first, and when a
        /// gate came while the waiter could not take its turn (lent, or rescuing).
        package var needsGate = true
        /// For a rescuer: the waiter whose main-queue block it is to run.
        package var rescued: WaitID?
        /// For a wait running on an executor borrowed from a waiter (or through its
        /// relay): that waiter, lent meanwhile.
        package var lender: WaitID?

        /// Whether it holds `identity`.
        package func holds(_ identity: ExecutorIdentity) -> Bool {
            holdings.contains { $0.identity === identity }
        }

        /// Whether it cannot go on by itself: nothing it waits for runs yet.
        package var isBlocked: Bool {
            state == .waiting || state == .lent || state == .rescuing
        }

        /// For messages: "a thread holding 'a', 'b' waits for 'c' (performAndWait)".
        package var summary: String {
            var held: [String] = []
            for holding in holdings where !held.contains(holding.identity.label) {
                held.append(holding.identity.label)
            }
            let holding = held.isEmpty ? "nothing" : held.map { "'\($0)'" }.joined(separator: ", ")
            return "a thread holding \(holding) waits for '\(target.label)' (\(kind))"
        }
    }

    /// What the waiting thread does next (``nextStep(for:)``).
    package enum Step: Sendable {
        /// Its block ran elsewhere (the main queue's gate, a rescuer): it was removed
        /// from the graph; return.
        case leave
        /// Its gate granted it the private executor: run the block here holding the
        /// target, give the admission back, then ``finishRunning(_:)``.
        case runGranted
        /// Run the block here on the private target borrowed from `lender` (lent
        /// meanwhile), then ``finishRunning(_:)``.
        case borrow(lender: WaitID)
        /// Run the block through `relay` (the parked job of the main-queue lock `lender`
        /// holds), lending it `holdings`, then ``finishRunning(_:)``.
        case relay(MainQueueRelay, lender: WaitID, holdings: [ExecutorHolding])
        /// `rescuer` (which drains the main queue) was asked to run this wait's block:
        /// wake it, then take the next step.
        case askRescue(rescuer: WaitID)
        /// Run `rescued`'s main-queue block here, lending it `holdings`, then
        /// ``rescueFinished(_:)``.
        case rescue(WaitID, holdings: [ExecutorHolding])
        /// The wait would never end and may not keep waiting (an `.internal` wait): it
        /// was removed from the graph; report the description.
        case giveUp(String)
        /// Send a gate to the target's queue (private: ``privateGateArrived(_:)``; main:
        /// ``mainGateArrived(_:)``), then take the next step.
        case sendGate
        /// Nothing to do: sleep until woken, then take the next step.
        case sleep
    }

    /// What a gate that reached the head of a private queue does
    /// (``privateGateArrived(_:)``).
    package enum PrivateGateAction: Sendable, Hashable {
        /// Keep the admission for the waiter, and wake it: it runs its block.
        case grant(wake: WaitID)
        /// Give the admission back: the waiter is gone, took its turn another way, or
        /// cannot take it now (it will send a new gate).
        case giveBack
    }

    /// What the main queue's gate does (``mainGateArrived(_:)``).
    package enum MainGateAction: Sendable {
        /// Run the waiter's block here, lending it `holdings` (the waiter's and the main
        /// queue), then ``mainGateFinished(_:)``.
        case run(holdings: [ExecutorHolding])
        /// Nothing: the waiter took its turn another way, or will send a new gate.
        case skip
    }

    /// The main queue's identity.
    package let mainQueue: ExecutorIdentity
    /// The waits in progress, in the order they began: a thread's nested waits come
    /// after its outer ones.
    package private(set) var waits: [Wait] = []
    /// The last ID handed out.
    private var lastID = 0

    /// An empty graph; `mainQueue` is the identity of the queue only threads that drain
    /// it can run blocks of.
    package init(mainQueue: ExecutorIdentity) {
        self.mainQueue = mainQueue
    }

    /// The wait named `id`, if it is still in the graph.
    package func wait(_ id: WaitID) -> Wait? {
        waits.first { $0.id == id }
    }

    /// The index of `id`, which must be in the graph.
    private func index(of id: WaitID) -> Int {
        guard let index = waits.firstIndex(where: { $0.id == id }) else {
            preconditionFailure("wait \(id) is not in the graph")
        }
        return index
    }

    // MARK: Transitions

    /// A thread begins a wait. Returns its ID and the waits to wake: those connected to
    /// it, which may now find a borrow, a rescue or a deadlock.
    package mutating func begin(
        thread: ThreadKey, target: ExecutorIdentity, kind: SynchronousWaitKind,
        drainsMainQueue: Bool, holdings: [ExecutorHolding]
    ) -> (id: WaitID, wake: [WaitID]) {
        lastID += 1
        let id = WaitID(raw: lastID)
        waits.append(Wait(id: id, thread: thread, target: target, kind: kind, drainsMainQueue: drainsMainQueue, holdings: holdings))
        let wake = connectedWaits(of: id).filter { $0 != id }
        checkInvariants()
        return (id, wake)
    }

    /// The waiting thread of `id` looks at its wait (when it begins, and each time it is
    /// woken): what it does next. Checks, in this order: its block done elsewhere, its
    /// grant, a rescue to run, a borrow, relay or rescue it can make, a deadlock it must
    /// report, a gate to send.
    package mutating func nextStep(for id: WaitID) -> Step {
        defer { checkInvariants() }
        let at = index(of: id)
        switch waits[at].state {
        case .finished:
            waits.remove(at: at)
            return .leave
        case .granted:
            waits[at].state = .running
            waits[at].holdings.append(ExecutorHolding(waits[at].target))
            return .runGranted
        case .rescuing:
            guard let rescued = waits[at].rescued else {
                preconditionFailure("a rescuing wait has no one to rescue")
            }
            return .rescue(rescued, holdings: waits[index(of: rescued)].holdings)
        case .delegated, .lent, .running:
            return .sleep
        case .waiting:
            break
        }
        let record = waits[at]
        let active = activeWaits
        if let resolution = resolution(for: record, among: active) {
            switch resolution {
            case .borrow(let lender):
                waits[index(of: lender)].state = .lent
                waits[at].state = .running
                waits[at].lender = lender
                waits[at].holdings.append(ExecutorHolding(record.target))
                return .borrow(lender: lender)
            case .relay(let lender, let relay):
                waits[index(of: lender)].state = .lent
                // Counted as running, holding the main queue: the relay's thread runs the
                // block without a wait of its own, so this is what tells the deadlock
                // check that the main queue is used by a thread that moves, not by the
                // lent waiter.
                waits[at].state = .running
                waits[at].lender = lender
                waits[at].holdings.append(ExecutorHolding(record.target))
                return .relay(relay, lender: lender, holdings: record.holdings)
            case .rescue(let rescuer):
                let rescuerAt = index(of: rescuer)
                waits[rescuerAt].state = .rescuing
                waits[rescuerAt].rescued = id
                waits[at].state = .delegated
                return .askRescue(rescuer: rescuer)
            }
        }
        if record.kind == .internal, let deadlock = deadlock(of: record, among: active) {
            waits.remove(at: at)
            return .giveUp(deadlock)
        }
        if record.needsGate {
            waits[at].needsGate = false
            return .sendGate
        }
        return .sleep
    }

    /// The block of `id` ran on its thread (granted, borrowed, or through a relay): the
    /// wait is removed. Returns the waits to wake: for a borrow or relay, the lender
    /// (back to waiting) and the waits connected to it.
    package mutating func finishRunning(_ id: WaitID) -> [WaitID] {
        defer { checkInvariants() }
        let at = index(of: id)
        precondition(waits[at].state == .running, "wait \(id) finished a block it was not running")
        let lender = waits[at].lender
        waits.remove(at: at)
        guard let lender else { return [] }
        waits[index(of: lender)].state = .waiting
        return connectedWaits(of: lender)
    }

    /// The rescuer `id` ran its rescued waiter's block: that waiter is finished, the
    /// rescuer waits again. Returns the waits to wake: the rescued one, and those
    /// connected to the rescuer.
    package mutating func rescueFinished(_ id: WaitID) -> [WaitID] {
        defer { checkInvariants() }
        let at = index(of: id)
        precondition(waits[at].state == .rescuing, "wait \(id) finished a rescue it was not making")
        var wake: [WaitID] = []
        if let rescued = waits[at].rescued {
            waits[index(of: rescued)].state = .finished
            wake.append(rescued)
        }
        waits[at].rescued = nil
        waits[at].state = .waiting
        return wake + connectedWaits(of: id).filter { $0 != id }
    }

    /// A gate reached the head of `id`'s private target, with the admission claimed for
    /// the waiting thread: grant it when it still waits.
    package mutating func privateGateArrived(_ id: WaitID) -> PrivateGateAction {
        defer { checkInvariants() }
        guard gateArrived(id, takingTurnAs: .granted) != nil else { return .giveBack }
        return .grant(wake: id)
    }

    /// The main queue's gate for `id` runs: it takes the waiter's block when the waiter
    /// still waits.
    package mutating func mainGateArrived(_ id: WaitID) -> MainGateAction {
        defer { checkInvariants() }
        guard let at = gateArrived(id, takingTurnAs: .delegated) else { return .skip }
        return .run(holdings: waits[at].holdings + [ExecutorHolding(mainQueue)])
    }

    /// The one rule for a gate, private or main: a waiter that still waits takes its turn
    /// (its state becomes `state`; returns its index); one that lends or rescues cannot
    /// take it now (a thread it lent to may need that executor), and sends a new gate once
    /// it waits again; any other (gone, or past waiting) ignores it.
    private mutating func gateArrived(_ id: WaitID, takingTurnAs state: State) -> Int? {
        guard let at = waits.firstIndex(where: { $0.id == id }) else { return nil }
        switch waits[at].state {
        case .waiting:
            waits[at].state = state
            return at
        case .lent, .rescuing:
            waits[at].needsGate = true
            return nil
        case .granted, .running, .delegated, .finished:
            return nil
        }
    }

    /// The main queue's gate ran `id`'s block: the waiter is finished. Returns the wait
    /// to wake.
    package mutating func mainGateFinished(_ id: WaitID) -> WaitID {
        defer { checkInvariants() }
        let at = index(of: id)
        precondition(waits[at].state == .delegated, "wait \(id) was not delegated to the main queue")
        waits[at].state = .finished
        return id
    }

    // MARK: Queries

    /// The number of waits in progress for `target` (by a thread holding `held`, when
    /// given), whatever their state.
    package func waitCount(for target: ExecutorIdentity, holding held: ExecutorIdentity? = nil) -> Int {
        waits.count { $0.target === target && (held.map($0.holds) ?? true) }
    }

    // MARK: The wait-for graph

    /// A way for a waiter to take its turn now.
    private enum Resolution {
        /// Run on a private executor held by this waiter.
        case borrow(WaitID)
        /// Have this waiter, which drains the main queue, run the block.
        case rescue(WaitID)
        /// Run through the relay of the main-queue lock this waiter holds.
        case relay(WaitID, MainQueueRelay)
    }

    /// `id` and every wait connected to it: those it waits for (the holders of its
    /// target, the holders of theirs, and so on) and those that wait for it (whose target
    /// it holds, and so on).
    private func connectedWaits(of id: WaitID) -> [WaitID] {
        let origin = index(of: id)
        /// The indices reached from `origin` through `isEdge(from:to:)`.
        func closure(_ isEdge: (Wait, Wait) -> Bool) -> [Int] {
            var reached = [origin]
            var next = 0
            while next < reached.count {
                let current = waits[reached[next]]
                next += 1
                for (index, other) in waits.enumerated() where isEdge(current, other) && !reached.contains(index) {
                    reached.append(index)
                }
            }
            return reached
        }
        let waitedFor = closure { waiter, holder in holder.holds(waiter.target) }
        let waiting = closure { holder, waiter in holder.holds(waiter.target) }
        var found: [WaitID] = []
        for index in waitedFor + waiting.dropFirst() where !found.contains(waits[index].id) {
            found.append(waits[index].id)
        }
        return found
    }

    /// The waits whose holdings are in use by their own thread: the innermost wait of
    /// each thread, unless another thread runs its block (its holdings are then lent to
    /// that thread, whose own waits list them).
    private var activeWaits: [Wait] {
        var threads: Set<ThreadKey> = []
        var active: [Wait] = []
        for record in waits.reversed() where threads.insert(record.thread).inserted {
            if record.state != .delegated { active.append(record) }
        }
        return active
    }

    /// The blocked waits that wait, transitively, for `record`: their target is held by
    /// `record`, or by a wait already found.
    private func waits(blockedBy record: Wait, among active: [Wait]) -> [Wait] {
        var chain = [record]
        var next = 0
        while next < chain.count {
            let holder = chain[next]
            next += 1
            for other in active where other.isBlocked && holder.holds(other.target) {
                if !chain.contains(where: { $0.id == other.id }) { chain.append(other) }
            }
        }
        return Array(chain.dropFirst())
    }

    /// How `record` (waiting) can take its turn now: a `.user` waiter that holds its
    /// target and waits, transitively, for `record`.
    private func resolution(for record: Wait, among active: [Wait]) -> Resolution? {
        let target = record.target
        let isMainQueue = target === mainQueue
        for lender in waits(blockedBy: record, among: active)
        where lender.state == .waiting && lender.kind == .user && lender.holds(target) {
            if !isMainQueue { return .borrow(lender.id) }
            if lender.drainsMainQueue { return .rescue(lender.id) }
            if let relay = lender.holdings.first(where: { $0.identity === target && $0.relay != nil })?.relay {
                return .relay(lender.id, relay)
            }
        }
        return nil
    }

    /// A description of the deadlock `record` is part of, or nil when its wait may still
    /// end.
    ///
    /// Follows what `record` waits for: the waits that hold its target, what those wait
    /// for, and so on. The wait may end when some executor on the way is held by none of
    /// these waits (a running job, a thread the graph does not see, or nobody), when a
    /// holder is running or rescuing, or when one of the waits found can resolve its own
    /// wait. Otherwise nobody involved can ever move. Then `record` gives up if it is on
    /// a cycle of that graph, or if no other `.internal` wait on a cycle would give up
    /// instead (the first one to look does, and the others then wait for its thread,
    /// which runs again).
    private func deadlock(of record: Wait, among active: [Wait]) -> String? {
        var found = [record]
        var edges: [[Int]] = []
        var next = 0
        while next < found.count {
            let waiter = found[next]
            next += 1
            let holders = active.filter { $0.id != waiter.id && $0.holds(waiter.target) }
            guard !holders.isEmpty else { return nil }
            var targets: [Int] = []
            for holder in holders {
                guard holder.state == .waiting || holder.state == .lent else { return nil }
                if let known = found.firstIndex(where: { $0.id == holder.id }) {
                    targets.append(known)
                } else {
                    targets.append(found.count)
                    found.append(holder)
                }
            }
            edges.append(targets)
        }
        for waiter in found where waiter.state == .waiting {
            if resolution(for: waiter, among: active) != nil { return nil }
        }
        /// Whether the wait at `start` reaches itself.
        func isOnCycle(_ start: Int) -> Bool {
            var seen = Set<Int>()
            var pending = edges[start]
            while let next = pending.popLast() {
                if next == start { return true }
                if seen.insert(next).inserted { pending += edges[next] }
            }
            return false
        }
        if !isOnCycle(0) {
            let another = found.indices.dropFirst().contains { found[$0].kind == .internal && isOnCycle($0) }
            if another { return nil }
        }
        return "a synchronous request for '\(record.target.label)' would never end: "
            + found.map(\.summary).joined(separator: "; ")
            + "; internal requests never lend the contexts they hold"
    }

    // MARK: Invariants

    /// Checks the graph's invariants after each transition in debug builds (tests);
    /// nothing in release builds.
    @inline(__always)
    private func checkInvariants() {
        #if DEBUG
        _checkInvariants()
        #endif
    }

    /// Traps when the graph breaks one of its invariants:
    /// - IDs are unique;
    /// - on each thread, every wait but the innermost runs a block or a rescue (a thread
    ///   blocked in a wait cannot begin another);
    /// - a granted wait waits for a private executor; a delegated one for the main queue;
    /// - a running wait holds its target;
    /// - a lent wait is the lender of exactly one running wait, and every running wait's
    ///   lender is lent;
    /// - a rescuing wait is a `.user` wait that drains the main queue and rescues a
    ///   delegated (or finished) wait for the main queue; a delegated wait is rescued by
    ///   at most one rescuer.
    package func _checkInvariants() {
        var ids: Set<WaitID> = []
        for record in waits { precondition(ids.insert(record.id).inserted, "wait \(record.id) is in the graph twice") }
        var innermost: Set<ThreadKey> = []
        for record in waits.reversed() {
            if !innermost.insert(record.thread).inserted {
                precondition(
                    record.state == .running || record.state == .rescuing,
                    "wait \(record.id) is not its thread's innermost and is \(record.state)")
            }
            switch record.state {
            case .granted:
                precondition(record.target !== mainQueue, "wait \(record.id) was granted the main queue")
            case .delegated:
                precondition(record.target === mainQueue, "wait \(record.id) was delegated but waits for a private queue")
            case .running:
                precondition(record.holds(record.target), "wait \(record.id) runs without holding its target")
            case .lent:
                let borrowers = waits.count { $0.lender == record.id }
                precondition(borrowers == 1, "lent wait \(record.id) has \(borrowers) borrowers")
            case .rescuing:
                precondition(record.kind == .user && record.drainsMainQueue, "wait \(record.id) cannot rescue")
                guard let rescued = record.rescued, let other = wait(rescued) else {
                    preconditionFailure("rescuing wait \(record.id) rescues nobody")
                }
                precondition(
                    other.target === mainQueue && (other.state == .delegated || other.state == .finished),
                    "wait \(record.id) rescues \(rescued), which is \(other.state)")
            case .waiting, .finished:
                break
            }
            if let lender = record.lender {
                precondition(record.state == .running, "wait \(record.id) has a lender but is \(record.state)")
                precondition(wait(lender)?.state == .lent, "the lender of wait \(record.id) is not lent")
            }
            if record.state != .rescuing { precondition(record.rescued == nil, "wait \(record.id) keeps a rescue") }
        }
        for record in waits where record.state == .delegated {
            precondition(waits.count { $0.rescued == record.id } <= 1, "wait \(record.id) is rescued twice")
        }
    }
}
