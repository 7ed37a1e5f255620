import Foundation

/// The results of a fetch, materialised one batch at a time: Core Data's batched
/// result array, for results too large to hold as objects all at once.
///
/// Made by ``ManagedObjectContext/fetchedResults(for:)``. It keeps the matching object
/// IDs (found, ordered and windowed exactly as ``ManagedObjectContext/fetch(_:)`` finds
/// them, merged with the context's unsaved changes) and turns them into objects a batch
/// of ``fetchBatchSize`` at a time: reaching an element of another batch reads that
/// whole batch in one read transaction (and prefetches the request's
/// ``FetchRequest/relationshipKeyPathsForPrefetching`` for it). Only the current batch
/// is held; objects without changes are not retained by the context (unless
/// ``ManagedObjectContext/retainsRegisteredObjects``), so earlier batches go once you
/// let go of them, and memory stays bounded by the batch size however many objects
/// match.
///
/// ```swift
/// try await context.perform { context in
///     var request = FetchRequest<Note>()
///     request.sortDescriptors = [FetchSortDescriptor(key: "title")]
///     request.fetchBatchSize = 500
///     var words = 0
///     for note in try context.fetchedResults(for: request) {
///         words += note.body?.split(separator: " ").count ?? 0
///     }
///     return words
/// }
/// ```
///
/// Like Core Data's array, its membership and order are fixed when it is made: objects
/// inserted, deleted or changed afterwards do not move in or out (an element deleted
/// since reads as deleted). Its objects are the context's own instances, so it is
/// confined to the context like them: it is not `Sendable`. A row that cannot be read
/// when its batch is materialised leaves its object a fault, handled when it fires
/// (see ``ManagedObjectContext/shouldDeleteInaccessibleFaults``).
public final class FetchedResults<Result: ManagedObject>: RandomAccessCollection {
    /// Positions run from 0 up to the number of objects.
    public typealias Index = Int

    /// How many objects are materialised together: the request's
    /// ``FetchRequest/fetchBatchSize``, or ``defaultBatchSize`` when that was 0.
    public let fetchBatchSize: Int
    /// The batch size used when the request asks for none: 100.
    public static var defaultBatchSize: Int { 100 }

    /// The IDs of the results, in order.
    public let objectIDs: [ManagedObjectID]

    private let graph: ObjectGraph
    /// Results not saved yet (temporary IDs), held for the collection's life.
    private let unsaved: [Int: Result]
    private let prefetching: [String]
    /// The batch materialised last, held strongly.
    private var current: (number: Int, objects: [Result])?

    init(objectIDs: [ManagedObjectID], unsaved: [Int: Result], batchSize: Int, prefetching: [String], graph: ObjectGraph) {
        self.objectIDs = objectIDs
        self.unsaved = unsaved
        fetchBatchSize = batchSize > 0 ? batchSize : Self.defaultBatchSize
        self.prefetching = prefetching
        self.graph = graph
    }

    /// 0.
    public var startIndex: Int { 0 }
    /// The number of results.
    public var endIndex: Int { objectIDs.count }

    /// The result at `position`, materialising its batch when it is not the current one.
    ///
    /// - Precondition: `position` is a valid index, as for an `Array`.
    public subscript(position: Int) -> Result {
        precondition(position >= 0 && position < objectIDs.count, "FetchedResults index \(position) out of range 0..<\(objectIDs.count)")
        let number = position / fetchBatchSize
        if let current, current.number == number {
            return current.objects[position - number * fetchBatchSize]
        }
        let objects = materialise(batch: number)
        current = (number, objects)
        return objects[position - number * fetchBatchSize]
    }

    /// The objects of batch `number`, their faults fulfilled in one read.
    private func materialise(batch number: Int) -> [Result] {
        let range = number * fetchBatchSize..<Swift.min((number + 1) * fetchBatchSize, objectIDs.count)
        // The previous batch goes first, so that its objects can be released.
        current = nil
        let objects = range.map { index -> Result in
            if let object = unsaved[index] { return object }
            // The context makes objects of the ID's entity's class, checked against
            // `Result` when the results were made; only an object inserted with another
            // class than its entity's can fail here.
            guard let object = graph.object(for: objectIDs[index]) as? Result else {
                preconditionFailure("the object \(objectIDs[index]) is not a \(Result.self)")
            }
            return object
        }
        let plain = objects.map { $0 as ManagedObject }
        // A failed read leaves faults, which report the failure when they fire.
        try? graph.fulfilFaults(plain)
        if !prefetching.isEmpty { try? graph.prefetch(prefetching, for: plain) }
        return objects
    }
}

/// Confined to its context, as its objects are.
@available(*, unavailable)
extension FetchedResults: Sendable {}

extension ObjectGraph {
    /// The results of `request` as a ``FetchedResults``: its IDs, found as
    /// ``fetchObjects(_:)`` finds the objects (without making objects when nothing
    /// unsaved needs merging).
    ///
    /// - Throws: what a fetch throws; ``StrataError/typeMismatch(key:entity:expected:actual:)``
    ///   when an entity the request covers is not of class `Result`.
    func fetchedResults<Result: ManagedObject>(for request: FetchRequest<Result>) throws -> FetchedResults<Result> {
        let model = try model
        _ = try request.validate(in: model)
        let entities = request.includesSubentities ? model.entityNames(kindOf: request.entityName) : [request.entityName]
        for name in entities {
            guard let entity = model.entitiesByName[name], !entity.isAbstract else { continue }
            guard entity.managedObjectClass is Result.Type else {
                throw StrataError.typeMismatch(
                    key: "resultType", entity: name, expected: "\(Result.self)", actual: "\(entity.managedObjectClass)")
            }
        }
        var request = request
        request.resultType = .managedObject
        let pending = request.includesPendingChanges && hasPendingObjects(of: request)
        let sources = try upstreamSourceCount(for: request)
        if !pending && sources <= 1 {
            var idRequest = request
            idRequest.resultType = .managedObjectID
            var ids: [ManagedObjectID] = []
            for rows in try upstreamFetch(idRequest) {
                if case .objectIDs(let found) = rows { ids += found }
            }
            return FetchedResults(
                objectIDs: ids, unsaved: [:], batchSize: request.fetchBatchSize,
                prefetching: request.relationshipKeyPathsForPrefetching, graph: self)
        }
        var rows = DeferredRows()
        let objects = try fetchObjects(request, deferringRows: true, readingRows: false, rows: &rows)
        var unsaved: [Int: Result] = [:]
        for (index, object) in objects.enumerated() where object.isInserted {
            guard let typed = object as? Result else {
                throw StrataError.typeMismatch(
                    key: "resultType", entity: request.entityName, expected: "\(Result.self)", actual: "\(type(of: object))")
            }
            unsaved[index] = typed
        }
        return FetchedResults(
            objectIDs: objects.map(\.objectID), unsaved: unsaved, batchSize: request.fetchBatchSize,
            prefetching: request.relationshipKeyPathsForPrefetching, graph: self)
    }

    /// Whether the context has unsaved objects of the request's entity.
    private func hasPendingObjects<Result>(of request: FetchRequest<Result>) -> Bool {
        (inserted + updated + deleted).contains { object in
            request.includesSubentities ? object.entity.isKind(of: request.entityName) : object.entity.name == request.entityName
        }
    }
}
