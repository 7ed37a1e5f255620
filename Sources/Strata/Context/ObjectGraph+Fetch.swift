import Foundation

extension ObjectGraph {
    /// The objects `request` matches: the stores' rows merged with this context's
    /// unsaved changes (unless `includesPendingChanges` is false):
    ///
    /// - inserted objects that match are included;
    /// - changed objects are matched on their in-memory values, and left out when those
    ///   no longer match, even if the stored ones do;
    /// - deleted objects are left out;
    /// - registered objects come back as the same instances, their unsaved values
    ///   untouched.
    ///
    /// The order and the window (`fetchOffset`, `fetchLimit`) apply to the merged result.
    func fetchObjects<Result>(_ request: FetchRequest<Result>) throws -> [ManagedObject] {
        var rows = DeferredRows()
        return try fetchObjects(request, deferringRows: false, readingRows: false, rows: &rows)
    }

    /// ``fetchObjects(_:)``; with `deferringRows`, fetched rows are not applied to the
    /// objects (new ones stay faults) but handed back in `rows` when they were read;
    /// `readingRows` reads them even when the objects are to be faults.
    func fetchObjects<Result>(
        _ request: FetchRequest<Result>, deferringRows: Bool, readingRows: Bool, rows deferredRows: inout DeferredRows
    ) throws -> [ManagedObject] {
        _ = try request.validate(in: model)
        try requireStores(for: request.entityName)
        let pending = request.includesPendingChanges ? pendingObjects(of: request) : []
        let merging = try !pending.isEmpty || upstreamSourceCount(for: request) > 1
        var storeRequest = request
        storeRequest.resultType = merging || readingRows || !(request.returnsObjectsAsFaults || deferringRows) ? .managedObject : .managedObjectID
        if merging {
            storeRequest.fetchOffset = 0
            // Enough rows for the window after merging; saturating, as a huge offset or
            // limit must not overflow, and a negative offset counts as 0.
            let (rows, overflow) = max(0, request.fetchOffset).addingReportingOverflow(request.fetchLimit)
            let (needed, overflowAgain) = rows.addingReportingOverflow(pending.count)
            storeRequest.fetchLimit = request.fetchLimit > 0 ? (overflow || overflowAgain ? Int.max : needed) : 0
        }
        // A root context's fetch of objects from one store takes rows that come in their
        // final order as they are read: realised objects decoded straight from the store's
        // pages, faults made from the rows' keys (no ID is made for either).
        let streamed = StreamedFetch(graph: self)
        let streamable = storeRequest.resultType == .managedObject || storeRequest.resultType == .managedObjectID
        // (Rows a fetch defers are kept, not decoded: they do not stream. A fetch of faults
        // reads no rows, so its keys stream whether or not it defers.)
        let keepsRows = deferringRows && storeRequest.resultType == .managedObject
        let sink: FetchRowSink? = merging || keepsRows || parentContext != nil || !streamable ? nil : streamed
        var objects: [ManagedObject] = []
        defer { streamed.awakeFilled() }
        for rows in try upstreamFetch(storeRequest, sink: sink) {
            switch rows {
            case .rows(let batch) where deferringRows:
                let records = FetchedRecords(batch)
                objects.reserveCapacity(objects.count + batch.count)
                try forEachFetchedObject(in: batch) { object, index in
                    if object.faultState == .fault { deferredRows.add(.record(records, index), for: object) }
                    objects.append(object)
                }
            case .rows(let batch):
                objects.reserveCapacity(objects.count + batch.count)
                try forEachFetchedObject(in: batch) { object, index throws(StrataError) in
                    if object.faultState == .fault {
                        try batch.withRecord(of: index) { record throws(StrataError) in
                            try object.apply(record: record, of: batch.storage(of: index)!, key: PrimaryKey(batch.rows[index].key)!, in: batch.store)
                        }
                        object.awakeFromFetch()
                    }
                    objects.append(object)
                }
            case .snapshots(let snapshots) where deferringRows:
                for snapshot in snapshots {
                    let object = self.object(for: snapshot.objectID)
                    if object.faultState == .fault { deferredRows.add(.snapshot(snapshot), for: object) }
                    objects.append(object)
                }
            case .snapshots(let snapshots):
                objects.reserveCapacity(objects.count + snapshots.count)
                reserveRegistrations(snapshots.count)
                let entities = (try? model)?.entitiesByName ?? [:]
                var last: EntityDescription?  // rows mostly share one entity: look it up once
                for snapshot in snapshots {
                    let name = snapshot.objectID.entityName
                    let entity: EntityDescription
                    if let last, last.name == name {
                        entity = last
                    } else {
                        entity = entities[name] ?? EntityDescription(name: name)
                        last = entity
                    }
                    objects.append(registerFetched(snapshot, entity: entity))
                }
            case .objectIDs(let ids):
                for id in ids { objects.append(object(for: id)) }
            case .count:
                break
            }
        }
        if !streamed.objects.isEmpty { objects = objects.isEmpty ? streamed.objects : streamed.objects + objects }
        guard merging else { return objects }
        // The stores' rows, seen through this context's changes.
        let predicate = request.predicate
        var seen = Set<ObjectIdentifier>()
        var merged: [ManagedObject] = []
        for object in objects where !object.isDeleted {
            if object.hasChanges, let predicate, try !predicate.evaluate(with: object) { continue }
            if seen.insert(ObjectIdentifier(object)).inserted { merged.append(object) }
        }
        for object in pending where !object.isDeleted && !seen.contains(ObjectIdentifier(object)) {
            if let predicate, try !predicate.evaluate(with: object) { continue }
            seen.insert(ObjectIdentifier(object))
            merged.append(object)
        }
        var failure: (any Error)?
        let descriptors = request.sortDescriptors
        let deferred = try deferredRows.snapshotsByObject()
        merged.sort { a, b in
            do {
                if !deferred.isEmpty {
                    return try FetchSorting.precedes(
                        MergedSubject(a, rows: deferred, graph: self), MergedSubject(b, rows: deferred, graph: self), by: descriptors)
                }
                return try FetchSorting.precedes(ObjectSubject(object: a), ObjectSubject(object: b), by: descriptors)
            } catch {
                failure = failure ?? error
                return false
            }
        }
        if let failure { throw failure }
        let window = merged.dropFirst(max(0, request.fetchOffset))
        return Array(request.fetchLimit > 0 ? window.prefix(request.fetchLimit) : window)
    }

    /// The number of objects ``fetchObjects(_:)`` would return.
    func count<Result>(for request: FetchRequest<Result>) throws -> Int {
        _ = try request.validate(in: model)
        try requireStores(for: request.entityName)
        let pending = request.includesPendingChanges ? pendingObjects(of: request) : []
        let sources = try upstreamSourceCount(for: request)
        if pending.isEmpty && sources <= 1 {
            var countRequest = request
            countRequest.resultType = .count
            return try upstreamFetch(countRequest).reduce(0) { total, rows in
                if case .count(let count) = rows { return total + count }
                return total
            }
        }
        var objectRequest = request
        objectRequest.resultType = .managedObject
        objectRequest.returnsObjectsAsFaults = true
        return try fetchObjects(objectRequest).count
    }

    /// A coordinator without any store cannot answer a fetch: it says so rather than
    /// returning nothing. (With stores, an entity none of them holds fetches nothing.)
    func requireStores(for entityName: String) throws {
        if try coordinator.persistentStores.isEmpty { throw StrataError.noStore(entity: entityName) }
    }

    /// The request's results in its result type.
    func fetch<Result>(_ request: FetchRequest<Result>) throws -> [Result] {
        func cast<T>(_ values: [T]) throws -> [Result] {
            guard let results = values as? [Result] else {
                throw StrataError.typeMismatch(
                    key: "resultType", entity: request.entityName, expected: "\(Result.self)", actual: "\(T.self)")
            }
            return results
        }
        switch request.resultType {
        case .managedObject where !request.includesPropertyValues:
            // IDs only: the objects are faults, read on first access.
            var idRequest = request
            idRequest.returnsObjectsAsFaults = true
            idRequest.fetchBatchSize = 0
            let objects = try fetchObjects(idRequest)
            if !request.relationshipKeyPathsForPrefetching.isEmpty { try prepareFetched(objects, rows: DeferredRows(), for: request) }
            return try typed(objects, request)
        case .managedObject where request.shouldRefreshRefetchedObjects:
            // Objects registered before the fetch take the values of the rows it read.
            let before = Set(registeredObjects.lazy.filter { $0.faultState == .fulfilled && !$0.isInserted }.map(ObjectIdentifier.init))
            var plain = request
            plain.shouldRefreshRefetchedObjects = false
            let objects = try fetch(plain)
            let refetched = objects.compactMap { $0 as? ManagedObject }.filter { before.contains(ObjectIdentifier($0)) && $0.owner === self }
            if !refetched.isEmpty {
                let stored = try upstreamSnapshots(of: refetched.map(\.objectID))
                for object in refetched {
                    guard let row = stored[object.objectID] else { continue }
                    try refresh(object, mergeChanges: true, stored: row)
                }
            }
            return objects
        case .managedObject:
            var rows = DeferredRows()
            // Faults without a batch size keep the rows the fetch read, so they fire with
            // the values of the fetch's moment (Core Data's row cache), not of their own.
            let faulting = request.fetchBatchSize == 0 && request.returnsObjectsAsFaults
            let objects = try fetchObjects(request, deferringRows: request.fetchBatchSize > 0 || faulting, readingRows: faulting, rows: &rows)
            if faulting && request.relationshipKeyPathsForPrefetching.isEmpty {
                keepFetchedRows(rows, of: objects)
            } else if faulting {
                try fulfilFaults(objects, rows: rows)   // prefetching realises them anyway
                try prepareFetched(objects, rows: DeferredRows(), for: request)
            } else {
                try prepareFetched(objects, rows: rows, for: request)
            }
            return try typed(objects, request)
        case .managedObjectID:
            return try cast(try fetchObjects(request).map(\.objectID))
        case .count:
            return try cast([try count(for: request)])
        case .dictionary:
            return try cast(try fetchDictionaries(request))
        }
    }

    /// `objects` as the request's element type.
    func typed<Result>(_ objects: [ManagedObject], _ request: FetchRequest<Result>) throws -> [Result] {
        if Result.self == ManagedObject.self, let objects = objects as? [Result] { return objects }
        // Objects all of one class, which is a `Result`, are the array as it is (a
        // cast of each object to a generic type is slow): class references have
        // the same layout whatever their static class.
        if Result.self is AnyClass, let first = objects.first, first is Result {
            let firstClass = ObjectIdentifier(type(of: first))
            if objects.allSatisfy({ ObjectIdentifier(type(of: $0)) == firstClass }) {
                return unsafeBitCast(objects, to: [Result].self)
            }
        }
        let typed = objects.compactMap { $0 as? Result }
        guard typed.count == objects.count else {
            let stray = objects.first { !($0 is Result) }.map { "\(type(of: $0))" } ?? "?"
            throw StrataError.typeMismatch(key: "resultType", entity: request.entityName, expected: "\(Result.self)", actual: stray)
        }
        return typed
    }

    /// Calls `body` with the object of each row of `batch` (the registered one, or a new
    /// fault registered for the row) and the row's index. Touches no store.
    private func forEachFetchedObject(in batch: RowBatch, _ body: (ManagedObject, Int) throws(StrataError) -> Void) throws(StrataError) {
        reserveRegistrations(batch.count)
        let store = StoreNumbers.number(for: batch.store.identifier)
        let inTree = isInTree
        var last: EntityStorage?  // rows mostly share one entity
        for (index, row) in batch.rows.enumerated() {
            let storage: EntityStorage
            if let last, last.number == row.entity {
                storage = last
            } else {
                guard let found = batch.store.entityStorage(numbered: row.entity) else {
                    throw .corruptRecord(entity: "number \(row.entity)", primaryKey: row.key, reason: "the entity is not in the store")
                }
                storage = found
                last = found
            }
            try body(object(forRow: row.key, of: storage.entity, store: store, inTree: inTree), index)
        }
    }

    /// The object of a fetched row: the registered one (its values untouched, a fault
    /// filled in), or a new one with the row's values.
    private func registerFetched(_ snapshot: ObjectSnapshot, entity: EntityDescription) -> ManagedObject {
        let object = self.object(forFetched: snapshot.objectID, entity: entity)
        if object.faultState == .fault {
            object.apply(snapshot)
            object.awakeFromFetch()
        }
        return object
    }

    /// Unsaved objects of the request's entity (inserted, changed, deleted).
    func pendingObjects<Result>(of request: FetchRequest<Result>) -> [ManagedObject] {
        func matches(_ object: ManagedObject) -> Bool {
            request.includesSubentities ? object.entity.isKind(of: request.entityName) : object.entity.name == request.entityName
        }
        var pending = (inserted + updated + deleted).filter(matches)
        if let affected = request.affectedStores {
            // Only objects in (or, new, going to) the stores searched.
            pending = pending.filter { object in
                let store = object.objectID.isTemporaryID ? try? store(forNew: object) : try? coordinator.store(of: object.objectID)
                return store.map { store in affected.contains { $0 === store } } ?? false
            }
        }
        // Changed objects are matched on their values: those not read yet (changes taken
        // from a child) are read together, not one by one as the predicate reaches them.
        if pending.contains(where: \.holdsUnreadChanges) { try? fulfilFaults(pending.filter(\.holdsUnreadChanges)) }
        return pending
    }
}

extension AttributeValue {
    /// The value as the Swift value a caller expects (`Int64`, `String`, `Date`, …).
    var sendableValue: any Sendable {
        switch self {
        case .integer(let n): n
        case .double(let d): d
        case .float(let f): f
        case .boolean(let b): b
        case .string(let s): s
        case .date(let d): d
        case .binaryData(let d): d
        case .uuid(let u): u
        case .uri(let u): u
        case .decimal(let d): d
        case .transformable(let d): d
        }
    }
}

/// Rows a fetch read for objects and did not apply to them yet (they stay faults until
/// they fire, or a batch realises them), by object.
struct DeferredRows {
    private(set) var rows: [ObjectIdentifier: FetchedRow] = [:]

    /// Whether no row is kept.
    var isEmpty: Bool { rows.isEmpty }

    /// Keeps `row` for `object`.
    mutating func add(_ row: FetchedRow, for object: ManagedObject) {
        rows[ObjectIdentifier(object)] = row
    }

    /// The row kept for `object`, if any.
    func row(for object: ManagedObject) -> FetchedRow? {
        rows.isEmpty ? nil : rows[ObjectIdentifier(object)]
    }

    /// The rows as snapshots (for sorting merged results by a fault's stored values).
    func snapshotsByObject() throws(StrataError) -> [ObjectIdentifier: ObjectSnapshot] {
        var snapshots: [ObjectIdentifier: ObjectSnapshot] = [:]
        for (object, row) in rows { snapshots[object] = try row.snapshot() }
        return snapshots
    }
}

/// A fetch whose rows stream in (``FetchRowSink``): it makes the object of each row
/// (the registered one, or a new one), fills it in when it is a fault, and keeps it. The
/// objects filled in awake from fetch after the read, outside the store's transaction.
/// Used by one fetch, on its context's executor only.
final class StreamedFetch: FetchRowSink {
    private unowned let graph: ObjectGraph
    private let inTree: Bool
    /// The fetched objects, in order.
    @exclusivity(unchecked) private(set) var objects: [ManagedObject] = []
    /// The positions in `objects` of the objects that were faults and were filled in
    /// from their rows, as runs (a cold context's fetch fills them all: one run, where
    /// an array of the objects cost a retain and a release each).
    @exclusivity(unchecked) private var filled: [Range<Int>] = []
    /// The store of the last row, and its number.
    @exclusivity(unchecked) private var file: StoreFile?
    @exclusivity(unchecked) private var storeNumber: UInt32 = 0

    init(graph: ObjectGraph) {
        self.graph = graph
        inTree = graph.isInTree
    }

    func reserve(_ count: Int) {
        objects.reserveCapacity(count)
        graph.reserveRegistrations(count)
    }

    func take(_ record: UnsafeRawBufferPointer, key: PrimaryKey, of storage: EntityStorage, in store: StoreFile) throws {
        if store !== file {
            file = store
            storeNumber = StoreNumbers.number(for: store.identifier)
        }
        let object = graph.object(forRow: key.rawValue, of: storage.entity, store: storeNumber, inTree: inTree)
        if object.faultState == .fault {
            try object.apply(record: record, of: storage, key: key, in: store)
            let position = objects.count
            if let last = filled.last, last.upperBound == position {
                filled[filled.count - 1] = last.lowerBound..<position + 1
            } else {
                filled.append(position..<position + 1)
            }
        }
        objects.append(object)
    }

    /// Calls `awakeFromFetch()` on the objects filled in, in fetch order.
    func awakeFilled() {
        for run in filled {
            for position in run { objects[position].awakeFromFetch() }
        }
    }

    func take(key: PrimaryKey, of storage: EntityStorage, in store: StoreFile) throws {
        if store !== file {
            file = store
            storeNumber = StoreNumbers.number(for: store.identifier)
        }
        objects.append(graph.object(forRow: key.rawValue, of: storage.entity, store: storeNumber, inTree: inTree))
    }
}

/// The records of one fetch, shared by the faults they are kept for.
final class FetchedRecords {
    let batch: RowBatch

    init(_ batch: RowBatch) {
        self.batch = batch
    }
}

/// A row read for an object: a stored record (of a fetch's batch), or a snapshot (from a
/// parent context, or the row cache).
enum FetchedRow {
    case record(FetchedRecords, Int)
    case snapshot(ObjectSnapshot)

    /// The row as a snapshot.
    func snapshot() throws(StrataError) -> ObjectSnapshot {
        switch self {
        case .record(let records, let index): try records.batch.snapshot(of: index)
        case .snapshot(let snapshot): snapshot
        }
    }

    /// Applies the row to `object` (a fault of it) and calls its `awakeFromFetch()`.
    func apply(to object: ManagedObject) throws(StrataError) {
        try applyValues(to: object)
        object.awakeFromFetch()
    }

    /// Applies the row's values to `object` (a fault of it).
    func applyValues(to object: ManagedObject) throws(StrataError) {
        switch self {
        case .record(let records, let index):
            let batch = records.batch
            guard let storage = batch.storage(of: index), let key = PrimaryKey(batch.rows[index].key) else {
                throw .corruptRecord(entity: "number \(batch.rows[index].entity)", primaryKey: batch.rows[index].key, reason: "the entity is not in the store")
            }
            try batch.withRecord(of: index) { bytes throws(StrataError) in try object.apply(record: bytes, of: storage, key: key, in: batch.store) }
        case .snapshot(let snapshot):
            object.apply(snapshot)
        }
    }
}
