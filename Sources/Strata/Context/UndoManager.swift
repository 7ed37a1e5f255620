internal import StrataLocks

/// Records changes as groups of undo actions, and undoes and redoes them a group at a
/// time: Strata's counterpart of Foundation's `UndoManager`, which swift-corelibs-foundation
/// does not have on Linux.
///
/// Give one to a context (``ManagedObjectContext/undoManager``) and every change the
/// context records becomes undoable: each event (a block, or a call of
/// ``ManagedObjectContext/processPendingChanges()``) is one group while
/// ``groupsByEvent`` is true, and ``beginUndoGrouping()``/``endUndoGrouping()`` make
/// groups of your own inside it.
///
/// ```swift
/// try await context.perform { context in
///     context.undoManager = UndoManager()
///     note.title = "Draft"
///     context.undoManager?.setActionName("Rename")
/// }
/// try await context.perform { context in try context.undo() }   // the title is back
/// ```
///
/// The manager is `Sendable` and may be used from any thread, but a context's actions
/// run only where the context's isolation is: ``undo()`` and ``redo()`` apply them on
/// the calling thread when it runs the context (inside its blocks, or on the main actor
/// for a main-queue context), and otherwise throw ``UndoError/notOnContext(_:)``. A
/// manager shared by several contexts therefore suits contexts on one executor (several
/// main-queue contexts and a UI); a private-queue context is best given its own.
///
/// Actions you register yourself (``registerUndo(withTarget:handler:)``) run on the
/// thread that calls ``undo()``; registrations they make go on the redo stack, as
/// Foundation's do. See <doc:UndoAndRedo>.
public final class UndoManager: Sendable {
    private let state = LockedValue(State())

    /// A manager with empty stacks, grouping by event, with no limit on the levels of undo.
    public init() {}

    // MARK: Settings

    /// Whether the changes of each event form a group of their own: a group opens when
    /// the first change of an event is registered with no group open, and closes when the
    /// event ends (``ManagedObjectContext/processPendingChanges()``). True by default.
    /// When false, register inside groups you open: changes a context makes with no group
    /// open are kept and go into the next group opened.
    public var groupsByEvent: Bool {
        get { state.withLock { $0.groupsByEvent } }
        set { state.withLock { $0.groupsByEvent = newValue } }
    }

    /// The most top-level groups kept on each stack; the oldest go first. 0 (the default)
    /// keeps every group; a negative value counts as 0.
    public var levelsOfUndo: Int {
        get { state.withLock { $0.levelsOfUndo } }
        set {
            let dropped = state.withLock { state -> [Group] in
                state.levelsOfUndo = max(0, newValue)
                return state.trimStacks()
            }
            _ = dropped   // released here, outside the lock
        }
    }

    // MARK: Grouping

    /// Opens a group: everything registered until the matching ``endUndoGrouping()`` is
    /// undone in one step. Groups nest. Changes that contexts of the calling thread made
    /// before the call are registered first, in the group that was open.
    public func beginUndoGrouping() {
        checkpoint()
        state.withLock { state in
            state.open.append(Group(name: state.pendingName ?? "", id: state.nextGroupID()))
            state.pendingName = nil
        }
    }

    /// Closes the group the last ``beginUndoGrouping()`` opened. A group with nothing in
    /// it is dropped; a nested group becomes one step of the group around it.
    ///
    /// - Throws: ``UndoError/noOpenGroup`` when no group is open.
    public func endUndoGrouping() throws(UndoError) {
        checkpoint()
        let dropped = try state.withLock { (state) throws(UndoError) -> [Group] in
            guard let group = state.open.popLast() else { throw .noOpenGroup }
            return state.close(group)
        }
        _ = dropped
    }

    /// How many groups are open.
    public var groupingLevel: Int {
        state.withLock { $0.open.count }
    }

    /// Names the group being built (the innermost open one), or, when none is open, the
    /// next group to open. Changes that contexts of the calling thread made before the
    /// call are registered first, so `note.title = "x"; setActionName("Rename")` names the
    /// group holding the rename.
    public func setActionName(_ name: String) {
        checkpoint()
        state.withLock { state in
            if state.open.isEmpty {
                state.pendingName = name
            } else {
                state.open[state.open.count - 1].name = name
            }
        }
    }

    /// The name of the group ``undo()`` would undo ("" when it has none, or nothing can
    /// be undone).
    public var undoActionName: String {
        state.withLock { $0.undoStack.last?.name ?? "" }
    }

    /// The name of the group ``redo()`` would redo ("" when it has none).
    public var redoActionName: String {
        state.withLock { $0.redoStack.last?.name ?? "" }
    }

    // MARK: State

    /// Whether there is something to undo. Changes that contexts of the calling thread
    /// made and have not registered yet are registered first, so a change made in the
    /// current block counts.
    public var canUndo: Bool {
        checkpoint()
        return state.withLock { state in
            !state.undoStack.isEmpty || (state.open.count == 1 && state.open[0].automatic && !state.open[0].items.isEmpty)
        }
    }

    /// Whether there is something to redo.
    public var canRedo: Bool {
        state.withLock { !$0.redoStack.isEmpty }
    }

    /// Whether ``undo()`` is running.
    public var isUndoing: Bool {
        state.withLock { $0.mode == .undoing }
    }

    /// Whether ``redo()`` is running.
    public var isRedoing: Bool {
        state.withLock { $0.mode == .redoing }
    }

    /// Whether registrations are recorded (not between ``disableUndoRegistration()`` and
    /// the matching ``enableUndoRegistration()``).
    public var isUndoRegistrationEnabled: Bool {
        state.withLock { $0.disabled == 0 }
    }

    /// Stops recording registrations until the matching ``enableUndoRegistration()``
    /// (calls nest): changes made meanwhile cannot be undone. Changes that contexts of the
    /// calling thread made before the call are registered first.
    public func disableUndoRegistration() {
        checkpoint()
        state.withLock { $0.disabled += 1 }
    }

    /// Takes back one ``disableUndoRegistration()``; recording resumes when every one is
    /// taken back. Changes made while disabled are dropped first. With nothing disabled,
    /// does nothing.
    public func enableUndoRegistration() {
        checkpoint()
        state.withLock { $0.disabled = max(0, $0.disabled - 1) }
    }

    /// Empties both stacks and drops the open groups; registration is enabled again.
    public func removeAllActions() {
        let dropped = state.withLock { state -> [Group] in
            let dropped = state.undoStack + state.redoStack + state.open
            state.undoStack = []
            state.redoStack = []
            state.open = []
            state.disabled = 0
            state.pendingName = nil
            return dropped
        }
        _ = dropped
    }

    /// Removes the actions registered with `target` from both stacks and the open groups
    /// (a group left empty goes too).
    public func removeAllActions(withTarget target: AnyObject) {
        let id = ObjectIdentifier(target)
        removeItems { item in
            if case .action(let action) = item { return action.target == id }
            return false
        }
    }

    // MARK: Registering

    /// Registers `handler` to run with `target` when the group being built is undone
    /// (or redone, when it runs during an undo). The manager holds `target` weakly: an
    /// action whose target is gone does nothing. Registering outside undo and redo empties
    /// the redo stack. Dropped while registration is disabled.
    ///
    /// With ``groupsByEvent`` and no group open, a group opens for it; it closes at the
    /// end of the current event of a context using this manager, or at the next
    /// ``undo()``.
    ///
    /// - Throws: ``UndoError/noOpenGroup`` when no group is open and ``groupsByEvent``
    ///   is false.
    public func registerUndo<Target: AnyObject & Sendable>(
        withTarget target: Target, handler: @escaping @Sendable (Target) -> Void
    ) throws(UndoError) {
        let action = UserAction(target: ObjectIdentifier(target)) { [weak target] in
            if let target { handler(target) }
        }
        guard register(.action(action)) else { throw .noOpenGroup }
    }

    // MARK: Undoing

    /// Undoes the last group: its actions run in the reverse order of their
    /// registration, and what they register (a context registers the inverse of each
    /// change) becomes one group on the redo stack, with the same name. An event group
    /// still open (see ``groupsByEvent``) is closed first; changes that contexts of the
    /// calling thread made and have not registered yet are registered first. Does nothing
    /// when there is nothing to undo.
    ///
    /// - Throws: ``UndoError/groupOpen(level:)`` when a group you opened is still open;
    ///   ``UndoError/notOnContext(_:)`` when the group holds changes of a context the
    ///   calling thread does not run; ``UndoError/reentrant`` inside an undo or redo; a
    ///   ``StrataError`` when a context cannot read an object the group changes. The group
    ///   stays on the stack then, and nothing changed.
    public func undo() throws {
        try run(.undoing)
    }

    /// Redoes the last group undone (see ``undo()``): what it registers becomes one
    /// group on the undo stack, and the redo stack keeps its other groups.
    ///
    /// - Throws: as ``undo()``.
    public func redo() throws {
        try run(.redoing)
    }

    // MARK: Internals

    /// Registers `item`: in the group an undo or redo is building, else in the innermost
    /// open group (opening an event group when none is open and ``groupsByEvent``).
    ///
    /// - Returns: false when there is no group to take it (no group open and
    ///   ``groupsByEvent`` false); true otherwise, also when registration is disabled (the
    ///   item is dropped).
    func register(_ item: Item) -> Bool {
        var dropped: [Group] = []
        defer { _ = dropped }
        return state.withLock { state in
            guard state.disabled == 0 else { return true }
            if state.collecting != nil {
                state.collecting!.items.append(item)
                return true
            }
            if state.open.isEmpty {
                guard state.groupsByEvent else { return false }
                state.open.append(Group(name: state.pendingName ?? "", id: state.nextGroupID(), automatic: true))
                state.pendingName = nil
            }
            state.open[state.open.count - 1].items.append(item)
            dropped = state.redoStack
            state.redoStack = []
            return true
        }
    }

    /// Ends an event: closes the event group when it is the only group open.
    func endEvent() {
        let dropped = state.withLock { state -> [Group] in
            guard state.open.count == 1, state.open[0].automatic else { return [] }
            return state.close(state.open.removeLast())
        }
        _ = dropped
    }

    /// Whether registrations are taken right now: enabled, and some group takes them.
    var acceptsRegistrations: Bool {
        state.withLock { state in state.disabled == 0 && (state.collecting != nil || !state.open.isEmpty || state.groupsByEvent) }
    }

    /// Whether registration is enabled.
    var registrationEnabled: Bool {
        state.withLock { $0.disabled == 0 }
    }

    /// Starts following `context`: its unregistered changes are registered at each
    /// checkpoint the calling thread makes while running it.
    func attach(_ context: ManagedObjectContext) {
        state.withLock { state in
            state.contexts.removeAll { $0.context == nil || $0.context === context }
            state.contexts.append(WeakContext(context: context))
        }
    }

    /// Stops following `context` (whose recorder removed its actions already).
    func detach(_ context: ManagedObjectContext) {
        state.withLock { state in state.contexts.removeAll { $0.context == nil || $0.context === context } }
    }

    /// Removes every change `context` registered (its rollback and reset).
    func removeActions(of context: ManagedObjectContext) {
        let id = ObjectIdentifier(context)
        removeItems { item in
            if case .step(let step) = item { return step.contextID == id }
            return false
        }
    }

    /// Removes the items `matches` picks, everywhere; groups left empty go too.
    private func removeItems(_ matches: (Item) -> Bool) {
        var dropped: [Item] = []
        state.withLock { state in
            func filter(_ groups: inout [Group], keepEmpty: Bool) {
                for index in groups.indices { groups[index].remove(where: matches, into: &dropped) }
                if !keepEmpty { groups.removeAll { $0.items.isEmpty } }
            }
            filter(&state.undoStack, keepEmpty: false)
            filter(&state.redoStack, keepEmpty: false)
            filter(&state.open, keepEmpty: true)
        }
        _ = dropped
    }

    /// Registers what the contexts the calling thread runs have not registered yet: the
    /// moment Foundation's checkpoint notification marks.
    func checkpoint() {
        let contexts = state.withLock { state in state.contexts.compactMap(\.context) }
        for context in contexts where context.contextExecutor.isHeldByCurrentThread {
            context.assumeIsolated { context in context.graph.undoRecorder?.flush() }
        }
    }

    /// Undoes or redoes the top group of the stack `mode` takes from.
    private func run(_ mode: Mode) throws {
        checkpoint()
        // Settle what may run before taking the group off its stack: a failure leaves it.
        let group = try state.withLock { (state) throws(UndoError) -> Group? in
            guard state.mode == .idle else { throw .reentrant }
            if state.open.count == 1, state.open[0].automatic {
                let dropped = state.close(state.open.removeLast())
                _ = dropped
            }
            guard state.open.isEmpty else { throw .groupOpen(level: state.open.count) }
            return mode == .undoing ? state.undoStack.last : state.redoStack.last
        }
        guard let group else { return }
        var steps: [ContextUndoStepToken] = []
        group.forEachStep { steps.append($0) }
        // Every context step reads what it changes first: nothing changes when one cannot.
        for step in steps {
            guard let context = step.context, context.contextExecutor.isHeldByCurrentThread else {
                throw UndoError.notOnContext(step.contextName)
            }
            try context.assumeIsolated { context in try context.graph.undoRecorder?.prepare(step) }
        }
        let taken = try state.withLock { (state) throws(UndoError) -> Bool in
            guard state.mode == .idle else { throw .reentrant }
            if mode == .undoing {
                guard state.undoStack.last?.id == group.id else { return false }
                state.undoStack.removeLast()
            } else {
                guard state.redoStack.last?.id == group.id else { return false }
                state.redoStack.removeLast()
            }
            state.mode = mode
            state.collecting = Group(name: group.name, id: state.nextGroupID())
            return true
        }
        guard taken else { return try run(mode) }   // the stack changed meanwhile: take the new top
        defer {
            let dropped = state.withLock { state -> [Group] in
                let built = state.collecting!
                state.collecting = nil
                state.mode = .idle
                guard !built.items.isEmpty else { return [] }
                if mode == .undoing { state.redoStack.append(built) } else { state.undoStack.append(built) }
                return state.trimStacks()
            }
            _ = dropped
        }
        group.runBackwards { item in
            switch item {
            case .action(let action):
                action.run()
            case .step(let step):
                step.context?.assumeIsolated { context in context.graph.undoRecorder?.apply(step) }
            case .group:
                break   // runBackwards descends into nested groups
            }
        }
    }

    // MARK: State

    /// What ``undo()`` or ``redo()`` is doing.
    enum Mode {
        case idle, undoing, redoing
    }

    /// One registration.
    enum Item: Sendable {
        /// An action registered with ``registerUndo(withTarget:handler:)``.
        case action(UserAction)
        /// The changes of one event of a context.
        case step(ContextUndoStepToken)
        /// A nested group, undone as one.
        case group(Group)
    }

    /// An action registered with ``registerUndo(withTarget:handler:)``.
    struct UserAction: Sendable {
        let target: ObjectIdentifier
        let run: @Sendable () -> Void
    }

    /// A group of registrations, undone together.
    struct Group: Sendable {
        var items: [Item] = []
        var name: String
        /// Identifies the group on its stack.
        let id: UInt64
        /// Opened by a registration with no group open (``groupsByEvent``).
        var automatic = false

        init(name: String, id: UInt64, automatic: Bool = false) {
            self.name = name
            self.id = id
            self.automatic = automatic
        }

        /// Calls `body` with every context step, nested groups included.
        func forEachStep(_ body: (ContextUndoStepToken) -> Void) {
            for item in items {
                switch item {
                case .step(let step): body(step)
                case .group(let group): group.forEachStep(body)
                case .action: break
                }
            }
        }

        /// Calls `body` with every item, last registered first, nested groups descended.
        func runBackwards(_ body: (Item) -> Void) {
            for item in items.reversed() {
                if case .group(let group) = item { group.runBackwards(body) } else { body(item) }
            }
        }

        /// Removes the items `matches` picks (nested groups left empty go), into `dropped`.
        mutating func remove(where matches: (Item) -> Bool, into dropped: inout [Item]) {
            var kept: [Item] = []
            for item in items {
                if case .group(var group) = item {
                    group.remove(where: matches, into: &dropped)
                    if !group.items.isEmpty { kept.append(.group(group)) }
                } else if matches(item) {
                    dropped.append(item)
                } else {
                    kept.append(item)
                }
            }
            items = kept
        }
    }

    /// A context the manager follows, held weakly.
    struct WeakContext {
        weak var context: ManagedObjectContext?
    }

    struct State {
        var undoStack: [Group] = []
        var redoStack: [Group] = []
        /// The open groups, innermost last.
        var open: [Group] = []
        /// What an undo or redo registers meanwhile.
        var collecting: Group?
        var mode = Mode.idle
        var disabled = 0
        var groupsByEvent = true
        var levelsOfUndo = 0
        /// A name for the next group opened.
        var pendingName: String?
        var contexts: [WeakContext] = []
        private var lastGroupID: UInt64 = 0

        mutating func nextGroupID() -> UInt64 {
            lastGroupID += 1
            return lastGroupID
        }

        /// Closes `group` (taken off `open`): into the group around it, or onto a stack.
        /// Returns the groups dropped (to release outside the lock).
        mutating func close(_ group: Group) -> [Group] {
            guard !group.items.isEmpty else { return [group] }
            if !open.isEmpty {
                open[open.count - 1].items.append(.group(group))
                return []
            }
            if collecting != nil {
                collecting!.items.append(.group(group))
                return []
            }
            undoStack.append(group)
            return trimStacks()
        }

        /// Drops the oldest groups beyond ``levelsOfUndo``.
        mutating func trimStacks() -> [Group] {
            guard levelsOfUndo > 0 else { return [] }
            var dropped: [Group] = []
            if undoStack.count > levelsOfUndo {
                dropped += undoStack.prefix(undoStack.count - levelsOfUndo)
                undoStack.removeFirst(undoStack.count - levelsOfUndo)
            }
            if redoStack.count > levelsOfUndo {
                dropped += redoStack.prefix(redoStack.count - levelsOfUndo)
                redoStack.removeFirst(redoStack.count - levelsOfUndo)
            }
            return dropped
        }
    }
}

/// Why an undo manager could not do what it was asked.
public enum UndoError: Error, Sendable, Hashable, CustomStringConvertible {
    /// ``UndoManager/endUndoGrouping()`` with no group open, or a registration with no
    /// group open while ``UndoManager/groupsByEvent`` is false.
    case noOpenGroup
    /// ``UndoManager/undo()`` or ``UndoManager/redo()`` while groups you opened are still
    /// open (`level` of them): close them first.
    case groupOpen(level: Int)
    /// The group holds changes of the context named here (or `unnamed`), and the calling
    /// thread does not run that context: undo inside one of its blocks.
    case notOnContext(String)
    /// ``UndoManager/undo()`` or ``UndoManager/redo()`` from an action of an undo or redo
    /// in progress.
    case reentrant

    /// A sentence describing the error.
    public var description: String {
        switch self {
        case .noOpenGroup: "no undo group is open"
        case .groupOpen(let level): "\(level) undo group(s) are still open: end them before undoing or redoing"
        case .notOnContext(let name): "the undo group holds changes of the context '\(name)', which the calling thread does not run"
        case .reentrant: "an undo or redo is already running"
        }
    }
}

/// The changes one event of a context registered: a token for the step the context's
/// graph keeps (the objects stay in the context's isolation; only this crosses).
final class ContextUndoStepToken: Sendable {
    /// The step's number in its context's ``UndoRecorder``.
    let id: UInt64
    weak let context: ManagedObjectContext?
    let contextID: ObjectIdentifier
    let contextName: String
    /// Where the token reports that it is gone, so the context drops the step.
    let ledger: UndoLedger

    init(id: UInt64, context: ManagedObjectContext, name: String?, ledger: UndoLedger) {
        self.id = id
        self.context = context
        contextID = ObjectIdentifier(context)
        contextName = name ?? "unnamed"
        self.ledger = ledger
    }

    deinit {
        ledger.dropped.withLock { $0.append(id) }
    }
}

/// The steps of one context whose tokens are gone (the manager dropped them, on any
/// thread): the context drops the steps the next time it records or undoes.
final class UndoLedger: Sendable {
    let dropped = LockedValue<[UInt64]>([])
}
