import Foundation

/// Batched faults, prefetching and staleness: the state ``ObjectGraph`` keeps for them.
struct FaultBatching {
    /// How old a cached row a fault or a refresh may reuse, in seconds; negative for any
    /// age, 0 for none (``ManagedObjectContext/stalenessInterval``).
    var stalenessInterval: TimeInterval = -1
    /// The batch each fault of a batched fetch belongs to (until the batch is read).
    var batches: [ManagedObjectID: FetchBatch] = [:]
    /// The rows a fetch read for the faults it returned (``FetchRequest/returnsObjectsAsFaults``),
    /// with when they were read: a fault fires from its row, so every object of one
    /// fetch has the values of one moment (one LMDB snapshot). A refresh, a merge or the
    /// staleness interval drops a kept row.
    var fetchedRows: [ManagedObjectID: (row: ObjectSnapshot, readAt: ContinuousClock.Instant)] = [:]
}

/// The faults of one batch of a batched fetch: read together when one of them fires.
final class FetchBatch {
    /// The objects of the batch that were faults when the fetch returned.
    let ids: [ManagedObjectID]
    /// The request's ``FetchRequest/relationshipKeyPathsForPrefetching``.
    let prefetching: [String]

    init(ids: [ManagedObjectID], prefetching: [String]) {
        self.ids = ids
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
    func prepareFetched<Result>(_ objects: [ManagedObject], rows: [ManagedObjectID: ObjectSnapshot], for request: FetchRequest<Result>) throws {
        let size = request.fetchBatchSize
        let paths = request.relationshipKeyPathsForPrefetching
        guard size > 0 else {
            if !paths.isEmpty { try prefetch(paths, for: objects) }
            return
        }
        // Faults of earlier fetches that were released never fire: forget their batches.
        if batching.batches.count > 2 * objects.count + 4096 {
            batching.batches = batching.batches.filter { id, _ in registeredObject(for: id)?.faultState == .fault }
        }
        let first = Array(objects.prefix(size))
        try fulfilFaults(first, rows: rows)
        if !paths.isEmpty { try prefetch(paths, for: first) }
        var start = size
        while start < objects.count {
            let ids = objects[start..<min(start + size, objects.count)]
                .filter { $0.faultState == .fault && mayReadUpstream($0.objectID) }.map(\.objectID)
            if !ids.isEmpty {
                let batch = FetchBatch(ids: ids, prefetching: paths)
                for id in ids { batching.batches[id] = batch }
            }
            start += size
        }
    }

    /// Keeps `rows`, read by a fetch for the faults it returns, until those faults fire.
    func keepFetchedRows(_ rows: [ManagedObjectID: ObjectSnapshot], fetched count: Int) {
        // Faults of earlier fetches that were released never fire: forget their rows.
        if batching.fetchedRows.count > 2 * count + 4096 {
            batching.fetchedRows = batching.fetchedRows.filter { id, _ in registeredObject(for: id)?.faultState == .fault }
        }
        let now = ContinuousClock.now
        let kept = rows.mapValues { (row: $0, readAt: now) }   // keeps the hash table: no rehashing
        if batching.fetchedRows.isEmpty {
            batching.fetchedRows = kept
        } else {
            batching.fetchedRows.merge(kept) { $1 }
        }
    }

    /// The row a fetch read for `object`, a fault, when it is not older than the
    /// staleness interval allows; it is used once.
    func fetchedRow(for object: ManagedObject) -> ObjectSnapshot? {
        guard let kept = batching.fetchedRows.removeValue(forKey: object.objectID) else { return nil }
        let interval = batching.stalenessInterval
        guard interval < 0 || kept.readAt.duration(to: .now) <= .seconds(interval) else { return nil }
        return kept.row
    }

    /// Reads the values of every fault among `objects` in one read transaction per store
    /// (rows in `rows` are applied without reading), under the staleness interval.
    /// A fault whose row is missing stays a fault: it is handled when it fires.
    func fulfilFaults(_ objects: [ManagedObject], rows: [ManagedObjectID: ObjectSnapshot] = [:]) throws {
        var toRead: [ManagedObject] = []
        for object in objects where object.faultState == .fault && object.owner === self {
            if let row = rows[object.objectID] {
                object.apply(row)
                object.awakeFromFetch()
            } else if mayReadUpstream(object.objectID) {
                toRead.append(object)
            }
        }
        guard !toRead.isEmpty else { return }
        let found = try upstreamSnapshots(of: toRead.map(\.objectID))
        for object in toRead where object.faultState == .fault {
            guard let row = found[object.objectID] else { continue }
            object.apply(row)
            object.awakeFromFetch()
        }
    }

    /// The row of `object`, a fault of a batched fetch, read together with the rest of
    /// its batch (which is fulfilled and prefetched on the way); nil when `object`
    /// belongs to no batch, or its row is missing.
    func batchedSnapshot(for object: ManagedObject) throws -> ObjectSnapshot? {
        guard let batch = batching.batches[object.objectID] else { return nil }
        for id in batch.ids where batching.batches[id] === batch { batching.batches[id] = nil }
        let others = batch.ids.compactMap { registeredObject(for: $0) }
            .filter { $0 !== object && $0.faultState == .fault && $0.owner === self }
        let found = try upstreamSnapshots(of: others.map(\.objectID) + [object.objectID])
        for other in others where other.faultState == .fault {
            guard let row = found[other.objectID] else { continue }
            other.apply(row)
            other.awakeFromFetch()
        }
        var row = found[object.objectID]
        if !batch.prefetching.isEmpty {
            try prefetch(batch.prefetching, for: others.filter { $0.faultState == .fulfilled }, firing: &row)
        }
        return row
    }

    /// Loads the destinations of each key path (`"folder"`, `"tags"`, `"folder.notes"`)
    /// for every object of `objects` (their own faults fulfilled first, in one read):
    /// level by level, to-many relationships not loaded
    /// yet are read for all objects in one read, and the destinations' faults are
    /// fulfilled in one more. It only fills in faults and unloaded relationships, so it
    /// never changes what a fetch returns nor an object's unsaved values.
    ///
    /// `firing` is the row of an object that is being fulfilled (not in `objects`):
    /// its relationships are prefetched into the row.
    func prefetch(_ paths: [String], for objects: [ManagedObject], firing: inout ObjectSnapshot?) throws {
        // The fetched objects first: their rows hold the to-one destinations.
        try fulfilFaults(objects)
        for path in paths {
            var sources = objects
            var row = firing
            for (level, name) in path.split(separator: ".").map(String.init).enumerated() {
                sources = try prefetchStep(name, from: sources, firing: &row)
                if level == 0 { firing = row }
                row = nil
                if sources.isEmpty { break }
            }
        }
    }

    /// ``prefetch(_:for:firing:)`` with no object being fulfilled.
    func prefetch(_ paths: [String], for objects: [ManagedObject]) throws {
        var none: ObjectSnapshot?
        try prefetch(paths, for: objects, firing: &none)
    }

    /// One level of prefetching: the destinations of `name` of every source, loaded,
    /// their faults fulfilled. Returns the destinations (each once).
    private func prefetchStep(_ name: String, from sources: [ManagedObject], firing row: inout ObjectSnapshot?) throws -> [ManagedObject] {
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
        var rowSlot: Int?
        if let current = row, let entity = try model.entitiesByName[current.objectID.entityName],
           let slot = entity.relationshipSlots[name] {
            switch current.relationships[slot] {
            case .toOne(let id): if let id { collect(object(for: id)) }
            case .toMany(let ids): ids.map(object(for:)).forEach(collect)
            case .notLoaded: rowSlot = slot
            }
        }
        if !unloaded.isEmpty || rowSlot != nil {
            var owners = unloaded.map(\.object.objectID)
            if rowSlot != nil, let id = row?.objectID { owners.append(id) }
            let links = try upstreamDestinations(of: owners, relationship: name)
            for (source, slot) in unloaded {
                guard let ids = links[source.objectID], case .notLoaded = source.relationshipStorage(at: slot) else { continue }
                let relationship = source.entity.relationships[slot]
                let storage = ToManyStorage(isOrdered: relationship.isOrdered, objects: ids.map { object(for: $0) })
                source.setLoadedRelationship(storage, at: slot)
                storage.objects.forEach(collect)
            }
            if let slot = rowSlot, let id = row?.objectID, let ids = links[id] {
                row?.relationships[slot] = .toMany(ids)
                ids.map(object(for:)).forEach(collect)
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

    init(_ object: ManagedObject, rows: [ManagedObjectID: ObjectSnapshot], graph: ObjectGraph) {
        self.object = object
        row = object.faultState == .fault ? rows[object.objectID] : nil
        self.graph = graph
    }

    var predicateEntity: EntityDescription { object.entity }
    var predicateObjectID: ManagedObjectID { object.objectID }

    func predicateAttribute(_ name: String) throws -> AttributeValue? {
        guard let row, let slot = object.entity.attributeSlots[name] else {
            return try ObjectSubject(object: object).predicateAttribute(name)
        }
        return row.attributes[slot]
    }

    func predicateDestinations(_ name: String) throws -> [MergedSubject] {
        if let row, let slot = object.entity.relationshipSlots[name], case .toOne(let id) = row.relationships[slot] {
            return id.map { [MergedSubject(graph.object(for: $0), rows: [:], graph: graph)] } ?? []
        }
        return try ObjectSubject(object: object).predicateDestinations(name).map { MergedSubject($0.object, rows: [:], graph: graph) }
    }
}
