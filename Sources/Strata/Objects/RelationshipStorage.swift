/// How a managed object holds one relationship in memory.
enum RelationshipStorage {
    /// A to-one relationship's destination.
    case toOne(ManagedObject?)
    /// A to-many relationship's destinations.
    case toMany(ToManyStorage)
    /// A to-many relationship not read from the store yet (a relationship fault).
    case notLoaded

    /// The destinations, in order for an ordered relationship; empty when not loaded.
    var objects: [ManagedObject] {
        switch self {
        case .toOne(let object): object.map { [$0] } ?? []
        case .toMany(let storage): storage.objects
        case .notLoaded: []
        }
    }

    /// The number of destinations; 0 when not loaded.
    var count: Int {
        switch self {
        case .toOne(let object): object == nil ? 0 : 1
        case .toMany(let storage): storage.count
        case .notLoaded: 0
        }
    }

    /// The first destination (a to-one relationship's one).
    var first: ManagedObject? {
        switch self {
        case .toOne(let object): object
        case .toMany(let storage): storage.objects.first
        case .notLoaded: nil
        }
    }

    /// Whether `object` is a destination.
    func contains(_ object: ManagedObject) -> Bool {
        switch self {
        case .toOne(let destination): destination === object
        case .toMany(let storage): storage.contains(object)
        case .notLoaded: false
        }
    }

    /// An empty value for `relationship`: nil, or no destinations (loaded).
    static func empty(for relationship: RelationshipDescription) -> RelationshipStorage {
        relationship.isToMany ? .toMany(ToManyStorage(isOrdered: relationship.isOrdered)) : .toOne(nil)
    }

    /// The snapshot form: object IDs instead of objects.
    var snapshot: RelationshipSnapshot {
        switch self {
        case .toOne(let object): .toOne(object?.objectID)
        case .toMany(let storage): .toMany(storage.objects.map(\.objectID))
        case .notLoaded: .notLoaded
        }
    }
}

/// The destinations of a to-many relationship: an array kept in order (for ordered
/// relationships, the user's order; otherwise insertion order) with O(1) membership.
struct ToManyStorage {
    private(set) var objects: [ManagedObject] = []
    private var positions: [ObjectIdentifier: Int] = [:]
    let isOrdered: Bool

    init(isOrdered: Bool) {
        self.isOrdered = isOrdered
    }

    init(isOrdered: Bool, objects: [ManagedObject]) {
        self.isOrdered = isOrdered
        for object in objects { insert(object) }
    }

    var count: Int { objects.count }

    func contains(_ object: ManagedObject) -> Bool { positions[ObjectIdentifier(object)] != nil }

    /// Appends `object` (or inserts it at `index`, clamped); false when already present.
    @discardableResult
    mutating func insert(_ object: ManagedObject, at index: Int? = nil) -> Bool {
        let id = ObjectIdentifier(object)
        guard positions[id] == nil else { return false }
        let at = min(max(index ?? objects.count, 0), objects.count)
        objects.insert(object, at: at)
        if at == objects.count - 1 {
            positions[id] = at
        } else {
            reindex(from: at)
        }
        return true
    }

    /// Removes `object`; false when absent. Unordered storage swaps with the last
    /// element, so removal is O(1); ordered storage keeps the order.
    @discardableResult
    mutating func remove(_ object: ManagedObject) -> Bool {
        guard let index = positions.removeValue(forKey: ObjectIdentifier(object)) else { return false }
        if isOrdered {
            objects.remove(at: index)
            reindex(from: index)
        } else {
            let last = objects.removeLast()
            if index < objects.count {
                objects[index] = last
                positions[ObjectIdentifier(last)] = index
            }
        }
        return true
    }

    private mutating func reindex(from start: Int) {
        for index in start..<objects.count { positions[ObjectIdentifier(objects[index])] = index }
    }
}
