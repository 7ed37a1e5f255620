/// How a fetch reads the store: the access path the planner chose for a request, how
/// the results get their order, and what is tested row by row.
///
/// Every plan returns the same objects in the same order as testing every row against
/// the predicate and sorting them; plans differ only in how much they read.
///
/// ```swift
/// var request = FetchRequest<Note>()
/// request.predicate = try FetchPredicate(format: "title BEGINSWITH %@ AND priority > 2", "Gro")
/// request.fetchLimit = 20
/// print(try request.explain(in: model))
/// // SEARCH Note USING INDEX title (BEGINSWITH "Gro") FILTER priority > 2; ORDER BY PRIMARY KEY
/// ```
public struct FetchPlan: Sendable, Hashable, CustomStringConvertible {
    /// Where candidate rows come from.
    public enum Access: Sendable, Hashable {
        /// Every row of the entity (and of its sub-entities), in primary-key order.
        case fullScan
        /// The entries of the index on `attribute` whose values lie in `ranges` (each
        /// described in the predicate language), in value order, or in reverse.
        case indexScan(attribute: String, ranges: [String], reverse: Bool)
    }

    /// How results get their order.
    public enum Ordering: Sendable, Hashable {
        /// No sort descriptors: by entity, then primary key.
        case primaryKey
        /// The index scan yields the order of the first sort descriptor; rows equal by
        /// it are sorted by the rest.
        case index
        /// Every match is sorted in memory.
        case inMemory
        /// Only the first `capacity` matches (offset plus limit) are kept, in a heap.
        case boundedHeap(capacity: Int)
    }

    /// The fetched entity.
    public let entityName: String
    /// Whether rows of sub-entities are included.
    public let includesSubentities: Bool
    /// Where candidate rows come from.
    public var access: Access {
        switch path {
        case .fullScan: .fullScan
        case .indexScan(let attribute, let kind, let reverse):
            .indexScan(attribute: attribute, ranges: indexRanges.describe(kind: kind), reverse: reverse)
        }
    }
    /// What each candidate is tested against: the conjuncts the access path does not
    /// decide on its own; nil when it decides them all.
    public let filter: FetchPredicate?
    /// How results get their order.
    public let ordering: Ordering
    /// Whether reading stops once offset plus limit matches are found in order.
    public let stopsEarly: Bool
    /// Whether rows are read at all (a count or an ID fetch that an index answers on
    /// its own reads none).
    public let readsRows: Bool

    // What the executor needs beyond the description.
    /// ``access`` without the ranges in words (made only when asked for).
    let path: Path
    let predicate: PredicateNode?
    let residual: PredicateNode?
    let indexRanges: IndexKeyRanges
    let sortDescriptors: [FetchSortDescriptor]
    let offset: Int
    let limit: Int
    let output: Output
    let isEmpty: Bool

    /// Where candidate rows come from (``access``).
    enum Path: Hashable {
        case fullScan
        /// The index on `attribute`, whose values are of `kind` (nil: not indexable).
        case indexScan(attribute: String, kind: IndexKeyKind?, reverse: Bool)
    }

    /// What the fetch produces.
    enum Output: Hashable {
        /// The rows' records.
        case rows
        case objectIDs
        case count
    }

    /// `SEARCH Note USING INDEX title (== "x") FILTER priority > 2; ORDER BY INDEX; STOP AFTER 20`.
    public var description: String {
        var parts: [String] = []
        let entities = entityName + (includesSubentities ? "" : " (no sub-entities)")
        switch access {
        case .fullScan:
            parts.append("SCAN \(entities)")
        case .indexScan(let attribute, let ranges, let reverse):
            let scope = ranges == ["ALL"] ? "" : " (\(ranges.joined(separator: " OR ")))"
            parts.append("SEARCH \(entities) USING INDEX \(attribute)\(scope)\(reverse ? " REVERSE" : "")")
        }
        if isEmpty { parts[0] = "NOTHING (the predicate matches no row)" }
        if let filter { parts[0] += " FILTER \(filter)" }
        if !readsRows { parts[0] += " WITHOUT READING ROWS" }
        switch ordering {
        case .primaryKey: parts.append("ORDER BY PRIMARY KEY")
        case .index: parts.append("ORDER BY INDEX")
        case .inMemory: parts.append("SORT IN MEMORY")
        case .boundedHeap(let capacity): parts.append("SORT IN MEMORY KEEPING \(capacity)")
        }
        if !sortDescriptors.isEmpty { parts[parts.count - 1] += " (" + sortDescriptors.map(\.description).joined(separator: ", ") + ")" }
        if stopsEarly { parts.append("STOP AFTER \(offset + limit)") }
        if output == .count { parts.append("COUNT") }
        return parts.joined(separator: "; ")
    }
}

extension FetchRequest {
    /// The plan this request runs with against a store of `model`: which index (if
    /// any) it reads, what it tests row by row, and how it orders the results.
    ///
    /// - Throws: what running the request would throw for an unknown entity or key
    ///   (``StrataError``) or an unsubstituted variable (``FetchPredicateError``).
    public func explain(in model: ManagedObjectModel) throws -> FetchPlan {
        try FetchPlanner.plan(self, in: model)
    }
}
