import Foundation

/// Batched faults, prefetching and staleness: the state ``ObjectGraph`` keeps for them.
struct FaultBatching {
    /// How old a cached row a fault or a refresh may reuse, in seconds; negative for any
    /// age, 0 for none (``ManagedObjectContext/stalenessInterval``).
    var stalenessInterval: TimeInterval = -1
    /// The batch each fault of a batched fetch belongs to (until the batch is read).
    var batches = ObjectKeyTable<FetchBatch>()
    /// The rows a fetch read for the faults it returned (``FetchRequest/returnsObjectsAsFaults``),
    /// with when they were read: a fault fires from its row, so every object of one
    /// fetch has the values of one moment (one LMDB snapshot). A refresh, a merge or the
    /// staleness interval drops a kept row.
    var fetchedRows: [ObjectIdentityKey: (row: FetchedRow, readAt: ContinuousClock.Instant)] = [:]
    /// The objects asynchronous fetches hold between their steps, and the rows their
    /// first step read but did not apply yet, by hold number.
    var holds: [Int: (objects: [ManagedObject], rows: DeferredRows)] = [:]
    var lastHold = 0
}

/// The faults of one batch of a batched fetch: read together when one of them fires.
final class FetchBatch {
    /// The identity keys of the objects of the batch that were faults when the fetch
    /// returned.
    let keys: [ObjectIdentityKey]
    /// The request's ``FetchRequest/relationshipKeyPathsForPrefetching``.
    let prefetching: [String]

    init(keys: [ObjectIdentityKey], prefetching: [String]) {
        self.keys = keys
        self.prefetching = prefetching
    }
}

extension ObjectGraph {
    /// Finishes a managed-object fetch: with a batch size, realises the first batch (in
    /// one read) and leaves every other batch as faults that are read together; then
    /// prefetches the request's relationship key paths for the realised objects.
    ///
    /// `rows` holds the rows the fetch read but did not apply yet (a fetch that merged
    /// pending changes).
    func prepareFetched<Result>(_ objects: [ManagedObject], rows: DeferredRows, for request: FetchRequest<Result>) throws {
        let size = request.fetchBatchSize
        let paths = request.relationshipKeyPathsForPrefetching
        guard size > 0 else {
            if !paths.isEmpty { try prefetch(paths, for: objects) }
            return
        }
        // Faults of earlier fetches that were released never fire: forget their batches.
        if batching.batches.count > 2 * objects.count + 4096 {
            batching.batches.removeAll { key in registeredObject(forKey: key)?.faultState != .fault }
        }
        let first = Array(objects.prefix(size))
        try fulfilFaults(first, rows: rows)
        if !paths.isEmpty { try prefetch(paths, for: first) }
        var start = size
        while start < objects.count {
            var keys: [ObjectIdentityKey] = []
            keys.reserveCapacity(size)
            let inTree = parentContext != nil
            for index in start..<min(start + size, objects.count) {
                let member = objects[index]
                if member.faultState == .fault && (inTree || !member.hasTemporaryID) { keys.append(member.identityKey) }
            }
            if !keys.isEmpty { batching.batches.insert(FetchBatch(keys: keys, prefetching: paths), forEach: keys) }
            start += size
        }
    }

    /// Keeps `rows`, read by a fetch for the faults it returns, until those faults fire.
    func keepFetchedRows(_ rows: DeferredRows, of objects: [ManagedObject]) {
        // Faults of earlier fetches that were released never fire: forget their rows.
        if batching.fetchedRows.count > 2 * objects.count + 4096 {
            batching.fetchedRows = batching.fetchedRows.filter { key, _ in registeredObject(forKey: key)?.faultState == .fault }
        }
        let now = ContinuousClock.now
        batching.fetchedRows.reserveCapacity(batching.fetchedRows.count + objects.count)
        for object in objects {
            guard let row = rows.row(for: object) else { continue }
            batching.fetchedRows[object.identityKey] = (row, now)
        }
    }

    /// The row a fetch read for `object`, a fault, when it is not older than the
    /// staleness interval allows; it is used once.
    func fetchedRow(for object: ManagedObject) -> FetchedRow? {
        guard !batching.fetchedRows.isEmpty, let kept = batching.fetchedRows.removeValue(forKey: object.identityKey) else { return nil }
        let interval = batching.stalenessInterval
        guard interval < 0 || kept.readAt.duration(to: .now) <= .seconds(interval) else { return nil }
        return kept.row
    }

    /// Reads the values of every fault among `objects` in one read transaction per store
    /// (rows in `rows` are applied without reading), under the staleness interval.
    /// A fault whose row is missing stays a fault: it is handled when it fires.
    func fulfilFaults(_ objects: [ManagedObject], rows: DeferredRows = DeferredRows()) throws {
        var toRead: [ManagedObject] = []
        for object in objects where object.faultState == .fault && object.owner === self {
            if let row = rows.row(for: object) {
                try row.apply(to: object)
            } else if mayReadUpstream(object.objectID) {
                toRead.append(object)
            }
        }
        guard !toRead.isEmpty else { return }
        try applyRows(of: toRead)
    }

    /// Reads the rows of `objects` (faults) in one read per store and applies each to
    /// its object; a missing row leaves its object a fault.
    private func applyRows(of objects: [ManagedObject]) throws {
        // A root context with nothing cached to reuse reads its stores by primary key: no
        // ID is made. Otherwise rows come by ID (from the parent, or the row cache).
        if parentContext == nil, readGenerationIsUnpinned, (try? coordinator.rowCache.count) == 0 || batching.stalenessInterval == 0 {
            try applyRowsByKey(of: objects)
            return
        }
        for row in try upstreamRows(of: objects.map(\.objectID)) {
            let object: ManagedObject?
            switch row {
            case .record(let records, let index):
                let batch = records.batch
                guard let storage = batch.storage(of: index) else { continue }
                object = registeredObject(store: StoreNumbers.number(for: batch.store.identifier), entity: storage.entity, primaryKey: batch.rows[index].key)
            case .snapshot(let snapshot):
                object = registeredObject(for: snapshot.objectID)
            }
            guard let object, object.faultState == .fault, object.owner === self else { continue }
            try row.apply(to: object)
        }
    }

    /// ``applyRows(of:)`` for a root context reading its stores' latest state: each
    /// store's rows in one read by primary key, decoded straight from the store's pages
    /// into the objects in the order they come; the objects awake from fetch after the
    /// read, outside its transaction.
    private func applyRowsByKey(of objects: [ManagedObject]) throws {
        let stores = try coordinator.persistentStores
        // Mostly one store: grouped without hashing then.
        let permanent = objects.filter { !$0.hasTemporaryID }
        guard let first = permanent.first else { return }
        var byStore: [(number: UInt32, objects: [ManagedObject])]
        if permanent.allSatisfy({ $0.storeNumber == first.storeNumber }) {
            byStore = [(first.storeNumber, permanent)]
        } else {
            byStore = Dictionary(grouping: permanent, by: \.storeNumber).map { ($0.key, $0.value) }
        }
        var filled: [ManagedObject] = []
        filled.reserveCapacity(permanent.count)
        defer { for object in filled { object.awakeFromFetch() } }
        for (number, members) in byStore {
            guard let store = stores.first(where: { StoreNumbers.number(for: $0.identifier) == number }) else { continue }
            switch store.backend {
            case .lmdb(let file):
                try coordinator.forEachRecord(of: members, in: store) { object, storage, key, record in
                    guard object.faultState == .fault, object.owner === self else { return }
                    try object.apply(record: record, of: storage, key: key, in: file)
                    filled.append(object)
                }
            case .sql(let sql):
                // A server store's rows come as snapshots, one query per table.
                try coordinator.countRead()
                for snapshot in try sql.snapshots(of: members.map(\.objectID)) {
                    guard let object = registeredObject(for: snapshot.objectID), object.faultState == .fault, object.owner === self else { continue }
                    object.apply(snapshot)
                    filled.append(object)
                }
            }
        }
    }

    /// Fulfils `object`, a fault of a batched fetch, together with the rest of its batch
    /// (in one read, prefetched on the way). Returns false when `object` belongs to no
    /// batch; it may still be a fault then if its row is missing.
    func fireBatch(of object: ManagedObject) throws -> Bool {
        guard !batching.batches.isEmpty, let batch = batching.batches[object.identityKey] else { return false }
        var members: [ManagedObject] = []
        members.reserveCapacity(batch.keys.count)
        var includesObject = false
        for key in batch.keys {
            batching.batches.removeValue(forKey: key)
            guard let member = registeredObject(forKey: key), member.faultState == .fault, member.owner === self else { continue }
            members.append(member)
            if member === object { includesObject = true }
        }
        try applyRows(of: includesObject ? members : members + [object])
        if !batch.prefetching.isEmpty {
            try prefetch(batch.prefetching, for: members.filter { $0.faultState == .fulfilled })
        }
        return true
    }

    /// Loads the destinations of each key path (`"folder"`, `"tags"`, `"folder.notes"`)
    /// for every object of `objects` (their own faults fulfilled first, in one read):
    /// level by level, to-many relationships not loaded
    /// yet are read for all objects in one read, and the destinations' faults are
    /// fulfilled in one more. It only fills in faults and unloaded relationships, so it
    /// never changes what a fetch returns nor an object's unsaved values.
    func prefetch(_ paths: [String], for objects: [ManagedObject]) throws {
        // The fetched objects first: their rows hold the to-one destinations.
        try fulfilFaults(objects)
        for path in paths {
            var sources = objects
            for name in path.split(separator: ".").map(String.init) {
                sources = try prefetchStep(name, from: sources)
                if sources.isEmpty { break }
            }
        }
    }

    /// One level of prefetching: the destinations of `name` of every source, loaded,
    /// their faults fulfilled. Returns the destinations (each once).
    private func prefetchStep(_ name: String, from sources: [ManagedObject]) throws -> [ManagedObject] {
        var destinations: [ManagedObject] = []
        var seen = Set<ObjectIdentifier>()
        func collect(_ object: ManagedObject) {
            if seen.insert(ObjectIdentifier(object)).inserted { destinations.append(object) }
        }
        // To-many relationships not loaded yet: their links, all in one read.
        var unloaded: [(object: ManagedObject, slot: Int)] = []
        for source in sources where source.faultState == .fulfilled {
            guard let slot = source.entity.relationshipSlot(named: name) else { continue }
            if case .notLoaded = source.relationshipStorage(at: slot) {
                if mayReadUpstream(source.objectID) { unloaded.append((source, slot)) }
            } else {
                source.relationshipStorage(at: slot).objects.forEach(collect)
            }
        }
        if !unloaded.isEmpty {
            let links = try upstreamDestinations(of: unloaded.map(\.object.objectID), relationship: name)
            for (source, slot) in unloaded {
                guard let ids = links[source.objectID], case .notLoaded = source.relationshipStorage(at: slot) else { continue }
                let relationship = source.entity.relationships[slot]
                let storage = ToManyStorage(isOrdered: relationship.isOrdered, objects: ids.map { object(for: $0) })
                source.setLoadedRelationship(storage, at: slot)
                storage.objects.forEach(collect)
            }
        }
        try fulfilFaults(destinations)
        return destinations
    }
}

/// An object of a merged fetch as a sort subject: a fault is sorted by the row the
/// fetch read (so that it need not be realised), a realised object by its in-memory
/// values.
struct MergedSubject: PredicateSubject {
    let object: ManagedObject
    let row: ObjectSnapshot?
    let graph: ObjectGraph

    init(_ object: ManagedObject, rows: [ObjectIdentifier: ObjectSnapshot], graph: ObjectGraph) {
        self.object = object
        row = object.faultState == .fault ? rows[ObjectIdentifier(object)] : nil
        self.graph = graph
    }

    var predicateEntity: EntityDescription { object.entity }
    var predicateObjectID: ManagedObjectID { object.objectID }

    func predicateAttribute(_ name: String) throws -> AttributeValue? {
        guard let row, let slot = object.entity.attributeSlot(named: name) else {
            return try ObjectSubject(object: object).predicateAttribute(name)
        }
        return row.attributes[slot]
    }

    func predicateDestinations(_ name: String) throws -> [MergedSubject] {
        if let row, let slot = object.entity.relationshipSlot(named: name), case .toOne(let id) = row.relationships[slot] {
            return id.map { [MergedSubject(graph.object(for: $0), rows: [:], graph: graph)] } ?? []
        }
        return try ObjectSubject(object: object).predicateDestinations(name).map { MergedSubject($0.object, rows: [:], graph: graph) }
    }
}
