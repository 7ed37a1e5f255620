// Undo: what a context with an undo manager records of each event, and how it undoes it.
//
// The graph keeps, per event, the value each changed property had before its first
// change (told by `objectWillChange`, before the change), and the objects that joined or
// left the context. At the end of the event (`processPendingChanges()`) that becomes one
// step: for each property its value before and after, both sides of every relationship
// (each side was recorded as it changed, so a step restores inverses as they were, with no
// inverse maintenance), and the objects that joined and left. The step stays here, in the
// context's isolation; the undo manager holds a Sendable token for it. Undoing a step
// applies its "before" side and registers its inverse (before and after swapped), which a
// redo applies the same way.
//
// With no undo manager the graph has no recorder: a change costs one nil check.

/// The undo side of a context's graph, while the context has an undo manager.
final class UndoRecorder {
    let manager: UndoManager
    unowned let context: ManagedObjectContext
    unowned let graph: ObjectGraph
    /// Where the manager's dropped tokens are reported.
    let ledger = UndoLedger()
    /// The steps registered with the manager, by number.
    private var steps: [UInt64: UndoStep] = [:]
    private var lastStepID: UInt64 = 0
    /// What changed since the last step was made.
    private var capture = UndoCapture()
    /// True while a step is applied: its changes are not recorded (its inverse is
    /// registered instead).
    private var applying = false

    init(manager: UndoManager, context: ManagedObjectContext, graph: ObjectGraph) {
        self.manager = manager
        self.context = context
        self.graph = graph
    }

    // MARK: Recording

    /// Property `key` of `object` is about to change: its value now is the value before.
    func willChange(_ object: ManagedObject, key: String) {
        guard !applying else { return }
        let entity = object.entity
        if let slot = entity.attributeSlot(named: key) {
            capture.keepAttribute(slot, of: object)
        } else if let slot = entity.relationshipSlot(named: key) {
            capture.keepRelationship(slot, of: object)
        }
    }

    /// A fault takes a child's change without being read: the values before are the
    /// change's bases.
    func willTakeUnreadChange(_ change: ObjectChange, of object: ManagedObject) {
        guard !applying else { return }
        for index in 0..<change.attributeCount {
            let attribute = change.attribute(index)
            guard attribute.slot < object.entity.attributes.count else { continue }
            capture.keepAttribute(attribute.slot, of: object, value: attribute.base)
        }
    }

    /// `object` joined the context (inserted, or its deletion taken back).
    func appeared(_ object: ManagedObject) {
        guard !applying else { return }
        capture.appeared(object)
    }

    /// `object` left the context, or is deleted.
    func disappeared(_ object: ManagedObject) {
        guard !applying else { return }
        capture.disappeared(object)
    }

    /// Makes a step of what changed since the last one and registers it with the manager:
    /// at the end of each event, and at the manager's checkpoints. While registration is
    /// disabled the changes are dropped; while no group can take them (no group open and
    /// the manager does not group by event) they are kept for the next group.
    func flush() {
        dropReleasedSteps()
        guard !applying, !capture.isEmpty else { return }
        guard manager.registrationEnabled else {
            capture = UndoCapture()
            return
        }
        guard manager.acceptsRegistrations else { return }
        let step = capture.step(in: graph)
        capture = UndoCapture()
        if !step.isEmpty { register(step) }
    }

    /// Forgets every change recorded and every step (a rollback or reset of the context).
    func clear() {
        capture = UndoCapture()
        steps = [:]
        manager.removeActions(of: context)
        dropReleasedSteps()
    }

    private func register(_ step: UndoStep) {
        lastStepID += 1
        steps[lastStepID] = step
        let token = ContextUndoStepToken(id: lastStepID, context: context, name: graph.contextName, ledger: ledger)
        // Dropped tokens (registration off meanwhile) report themselves to the ledger.
        _ = manager.register(.step(token))
    }

    /// Drops the steps whose tokens the manager let go of.
    private func dropReleasedSteps() {
        let released = ledger.dropped.withLock { ids -> [UInt64] in
            defer { ids = [] }
            return ids
        }
        for id in released { steps[id] = nil }
    }

    // MARK: Undoing

    /// Reads everything `token`'s step touches that is not in memory (faults, unloaded
    /// relationships), so that applying it cannot fail halfway.
    ///
    /// - Throws: the storage error of an object that cannot be read.
    func prepare(_ token: ContextUndoStepToken) throws(StrataError) {
        guard let step = steps[token.id] else { return }
        for object in step.touchedObjects where object.owner === graph {
            if !object.fulfilIfNeeded() { try object.throwIfStorageFailed() }
        }
        for change in step.relationships where change.object.owner === graph {
            if !change.object.loadRelationshipIfNeeded(change.slot) { try change.object.throwIfStorageFailed() }
        }
    }

    /// Applies the "before" side of `token`'s step, and registers its inverse.
    func apply(_ token: ContextUndoStepToken) {
        guard let step = steps.removeValue(forKey: token.id) else { return }
        applying = true
        defer { applying = false }
        // Objects that left come back first, so that their values are set in the context;
        // objects that joined leave last, once their relationships are as they were.
        for object in step.disappeared { graph.undoReappear(object) }
        for change in step.attributes where change.object.owner === graph && change.object.faultState == .fulfilled {
            let object = change.object
            object.prepareAttributeChange(change.slot)
            object.storeAttribute(change.before, at: change.slot)
            object.markChanged()
        }
        for change in step.relationships where change.object.owner === graph && change.object.faultState == .fulfilled {
            let object = change.object
            object.prepareRelationshipChange(change.slot)
            object.storeRelationship(change.before.storage(in: graph), at: change.slot)
            object.markChanged()
        }
        for object in step.appeared { graph.undoDisappear(object) }
        // Objects back at their saved values have no changes left.
        for object in step.touchedObjects where object.owner === graph { graph.settleUndone(object) }
        applying = false
        register(step.inverted())
    }
}

/// What changed in one event of a context, with the values before (see
/// ``UndoRecorder``).
struct UndoCapture {
    /// The changed objects' positions in `objects`.
    private var positions: [ObjectIdentifier: Int] = [:]
    private var objects: [CapturedObject] = []
    /// The objects that joined and left, in order (an object may be listed again after
    /// it went back: the sets say which are still in).
    private var joined: [ManagedObject] = []
    private var left: [ManagedObject] = []
    private var joinedSet = Set<ObjectIdentifier>()
    private var leftSet = Set<ObjectIdentifier>()

    /// One object's values before its first change in the event, by slot.
    struct CapturedObject {
        let object: ManagedObject
        var attributes: [(slot: Int, value: AttributeValue?)] = []
        var relationships: [(slot: Int, value: RelationshipStorage)] = []
    }

    var isEmpty: Bool { objects.isEmpty && joinedSet.isEmpty && leftSet.isEmpty }

    private mutating func position(of object: ManagedObject) -> Int {
        let key = ObjectIdentifier(object)
        if let position = positions[key] { return position }
        objects.append(CapturedObject(object: object))
        positions[key] = objects.count - 1
        return objects.count - 1
    }

    mutating func keepAttribute(_ slot: Int, of object: ManagedObject, value: AttributeValue?? = .none) {
        let position = position(of: object)
        guard !objects[position].attributes.contains(where: { $0.slot == slot }) else { return }
        objects[position].attributes.append((slot, value ?? object.attributeValue(at: slot)))
    }

    mutating func keepRelationship(_ slot: Int, of object: ManagedObject) {
        let position = position(of: object)
        guard !objects[position].relationships.contains(where: { $0.slot == slot }) else { return }
        objects[position].relationships.append((slot, object.relationshipStorage(at: slot)))
    }

    mutating func appeared(_ object: ManagedObject) {
        let key = ObjectIdentifier(object)
        if leftSet.remove(key) == nil, joinedSet.insert(key).inserted { joined.append(object) }
    }

    mutating func disappeared(_ object: ManagedObject) {
        let key = ObjectIdentifier(object)
        if joinedSet.remove(key) == nil, leftSet.insert(key).inserted { left.append(object) }
    }

    /// The objects of `list` still in `set`, once each, in order.
    private static func members(of list: [ManagedObject], in set: Set<ObjectIdentifier>) -> [ManagedObject] {
        guard !set.isEmpty else { return [] }
        var seen = Set<ObjectIdentifier>()
        return list.filter { set.contains(ObjectIdentifier($0)) && seen.insert(ObjectIdentifier($0)).inserted }
    }

    /// The step the event makes: each kept value with the object's value now, those that
    /// came back to what they were left out.
    func step(in graph: ObjectGraph) -> UndoStep {
        var step = UndoStep(appeared: Self.members(of: joined, in: joinedSet), disappeared: Self.members(of: left, in: leftSet))
        let leftObjects = leftSet
        for captured in objects {
            let object = captured.object
            // Values of an object no longer in the context (one that left is kept for when
            // it comes back), or that was turned back into a fault (its changes dropped),
            // are not the event's to restore.
            let inContext = object.owner === graph || leftObjects.contains(ObjectIdentifier(object))
            guard inContext, object.faultState == .fulfilled || object.holdsUnreadChanges else { continue }
            for (slot, before) in captured.attributes {
                let after = object.attributeValue(at: slot)
                if after != before { step.attributes.append(UndoStep.AttributeChange(object: object, slot: slot, before: before, after: after)) }
            }
            for (slot, before) in captured.relationships {
                let before = UndoStep.Relationship(before)
                let after = UndoStep.Relationship(object.relationshipStorage(at: slot))
                if after != before { step.relationships.append(UndoStep.RelationshipChange(object: object, slot: slot, before: before, after: after)) }
            }
        }
        return step
    }
}

/// One undoable step of a context: values before and after, and the objects that joined
/// and left. Applying it sets the "before" side; its inverse swaps the sides.
struct UndoStep {
    struct AttributeChange {
        let object: ManagedObject
        let slot: Int
        var before: AttributeValue?
        var after: AttributeValue?
    }

    struct RelationshipChange {
        let object: ManagedObject
        let slot: Int
        var before: Relationship
        var after: Relationship
    }

    /// A relationship's value as a step keeps it: the destination objects themselves.
    enum Relationship: Equatable {
        case notLoaded
        case toOne(ManagedObject?)
        case toMany([ManagedObject], ordered: Bool)

        init(_ storage: RelationshipStorage) {
            switch storage {
            case .notLoaded: self = .notLoaded
            case .toOne(let object): self = .toOne(object)
            case .toMany(let members): self = .toMany(members.objects, ordered: members.isOrdered)
            }
        }

        /// The value as a relationship slot holds it.
        func storage(in graph: ObjectGraph) -> RelationshipStorage {
            switch self {
            case .notLoaded: .notLoaded
            case .toOne(let object): .toOne(object)
            case .toMany(let objects, let ordered): .toMany(ToManyStorage(isOrdered: ordered, objects: objects))
            }
        }

        static func == (a: Relationship, b: Relationship) -> Bool {
            switch (a, b) {
            case (.notLoaded, .notLoaded): return true
            case (.toOne(let x), .toOne(let y)): return x === y
            case (.toMany(let x, let ordered), .toMany(let y, _)):
                guard x.count == y.count else { return false }
                if ordered { return zip(x, y).allSatisfy { $0 === $1 } }
                let members = Set(x.map(ObjectIdentifier.init))
                return y.allSatisfy { members.contains(ObjectIdentifier($0)) }
            default: return false
            }
        }
    }

    var appeared: [ManagedObject]
    var disappeared: [ManagedObject]
    var attributes: [AttributeChange] = []
    var relationships: [RelationshipChange] = []

    init(appeared: [ManagedObject], disappeared: [ManagedObject]) {
        self.appeared = appeared
        self.disappeared = disappeared
    }

    var isEmpty: Bool { appeared.isEmpty && disappeared.isEmpty && attributes.isEmpty && relationships.isEmpty }

    /// The objects whose values the step sets.
    var touchedObjects: [ManagedObject] {
        var seen = Set<ObjectIdentifier>()
        var objects: [ManagedObject] = []
        for object in attributes.map(\.object) + relationships.map(\.object) where seen.insert(ObjectIdentifier(object)).inserted {
            objects.append(object)
        }
        return objects
    }

    /// The step that takes this one back.
    func inverted() -> UndoStep {
        var inverse = UndoStep(appeared: disappeared, disappeared: appeared)
        inverse.attributes = attributes.map { AttributeChange(object: $0.object, slot: $0.slot, before: $0.after, after: $0.before) }
        inverse.relationships = relationships.map { RelationshipChange(object: $0.object, slot: $0.slot, before: $0.after, after: $0.before) }
        return inverse
    }
}

extension ObjectGraph {
    /// `object` comes back for an undo or redo: an object deleted here is no longer; one
    /// that left unsaved is inserted again (no `awakeFromInsert()`); one whose deletion
    /// was saved is inserted again under its ID, so the next save stores it again.
    func undoReappear(_ object: ManagedObject) {
        if object.owner === self {
            if object.isDeleted { takeBackDeletion(of: object) }
            return
        }
        guard object.owner == nil else { return }   // taken by another context meanwhile
        if !object.hasTemporaryID {
            // Its deletion was saved: only while no object stands for its row here.
            guard registeredObject(for: object.objectID) == nil else { return }
            object.reenterInsertedAfterDeletion(into: self)
        } else {
            object.enterInserted(into: self)
        }
        unsaved.recordInsert(object)
        registerForUndo(object)
        recordEvent(object, in: .inserted)
    }

    /// `object` leaves for an undo or redo: a new object leaves the context unsaved (its
    /// values kept for a redo); a saved one is deleted, without delete rules (the step
    /// restores its relationships and their inverses itself).
    func undoDisappear(_ object: ManagedObject) {
        guard object.owner === self, !object.isDeleted else { return }
        unsaved.removeFailedEdits(of: object)
        recordEvent(object, in: .deleted)
        if object.isInserted {
            unsaved.removeInsert(object)
            unsaved.forgetUnsaved(object)
            unregister(object)
            object.discardUnsaved()
        } else {
            object.enterDeleted()
            unsaved.recordDeleteWithoutRules(object)
        }
    }

    /// After an undo or redo: a saved object whose values are all back at their saved
    /// ones has no changes left (it leaves ``updated``).
    func settleUndone(_ object: ManagedObject) {
        guard object.isSaved, !object.isInserted, !object.isDeleted, object.faultState == .fulfilled,
              !unsaved.hasFailedEdits(of: object) else { return }
        for slot in object.entity.attributes.indices where object.attributeValue(at: slot) != object.committedAttribute(at: slot) { return }
        for slot in object.entity.relationships.indices where object.relationshipChanged(slot) { return }
        unsaved.forgetChanges(of: object)
        object.dropCommittedCopy()
        object.isModified = false
    }
}
