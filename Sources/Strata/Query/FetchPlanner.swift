/// Turns a request into a ``FetchPlan``: which index to read, what to test row by row,
/// how to order the results and when to stop.
///
/// The rules, in order:
/// 1. A `FALSEPREDICATE` conjunct, or conjuncts on one indexed attribute that leave no
///    value, read nothing.
/// 2. Conjuncts on an indexed attribute of the entity itself (not through a
///    relationship) that compare it with constants give index ranges: equality and `IN`
///    (points), `BETWEEN` and `BEGINSWITH` on strings (two-sided ranges), ordering
///    comparisons (one-sided), `!= nil`. Ranges on one attribute are intersected.
/// 3. Points are read from their index whatever the sort order: they are the most
///    selective access there is.
/// 4. Otherwise, with a fetch limit and a first sort key that is an indexed attribute,
///    that index is read in sort order (restricted by its own conjuncts), so reading
///    stops once offset plus limit matches are found.
/// 5. Otherwise a two-sided or one-sided range is read from its index (the sort key's
///    index preferred between equals).
/// 6. Otherwise every row is read.
/// Conjuncts the index decides exactly are not tested again; the rest are tested on
/// each row read. Results are sorted in memory unless the index yields their order,
/// keeping only offset plus limit rows in a heap when there is a limit.
enum FetchPlanner {
    /// The plan the rules above choose.
    static func plan<Result>(_ request: FetchRequest<Result>, in model: ManagedObjectModel) throws -> FetchPlan {
        try Builder(request, in: model).chosen()
    }

    /// Every plan that could answer the request (a full scan, and an index scan for each
    /// usable index), the chosen one among them. They all return the same results; the
    /// tests run each one against the same data.
    static func alternatives<Result>(_ request: FetchRequest<Result>, in model: ManagedObjectModel) throws -> [FetchPlan] {
        let builder = try Builder(request, in: model)
        var attributes = Set(builder.constraints.keys)
        if let sortAttribute = builder.sortAttribute { attributes.insert(sortAttribute) }
        return [builder.fullScan()] + attributes.sorted().map(builder.indexScan)
    }

    /// What the rules look at, gathered once.
    private struct Builder {
        let entity: EntityDescription
        let includesSubentities: Bool
        let predicate: PredicateNode?
        let conjuncts: [PredicateNode]
        let descriptors: [FetchSortDescriptor]
        let output: FetchPlan.Output
        let offset: Int
        let limit: Int
        /// Rule 2: the constraints, merged by attribute.
        let constraints: [String: Candidate]
        let sortAttribute: String?

        init<Result>(_ request: FetchRequest<Result>, in model: ManagedObjectModel) throws {
            let entity = try request.validate(in: model)
            self.entity = entity
            includesSubentities = request.includesSubentities
            predicate = request.predicate?.node
            output = switch request.resultType {
            case .managedObject, .dictionary: .rows
            case .managedObjectID: .objectIDs
            case .count: .count
            }
            offset = max(0, request.fetchOffset)
            // offset + limit must not overflow (the executor stops after that many rows); a
            // limit past Int.max - offset leaves no row out anyway.
            limit = min(max(0, request.fetchLimit), Int.max - offset)
            let conjuncts = (request.predicate.map { $0.node.conjuncts } ?? []).filter { $0 != .constant(true) }
            self.conjuncts = conjuncts
            let descriptors = request.sortDescriptors
            self.descriptors = descriptors
            var constraints: [String: Candidate] = [:]
            for (position, conjunct) in conjuncts.enumerated() {
                guard let constraint = IndexConstraint(conjunct, entity: entity) else { continue }
                constraints[constraint.attribute, default: Candidate(attribute: constraint.attribute)].add(constraint, at: position)
            }
            self.constraints = constraints
            sortAttribute = descriptors.first.flatMap { FetchPlanner.indexedSortAttribute($0, in: entity) }
        }

        func chosen() -> FetchPlan {
            if conjuncts.contains(.constant(false)) { return fullScan() }  // rule 1
            let best = constraints.values.max { a, b in
                (a.score, a.attribute == sortAttribute ? 1 : 0, b.attribute) < (b.score, b.attribute == sortAttribute ? 1 : 0, a.attribute)
            }
            if let best, best.score >= Candidate.pointScore { return indexScan(best.attribute) }  // rules 1, 3
            if let sortAttribute, limit > 0 { return indexScan(sortAttribute) }                  // rule 4
            if let best, best.score >= Candidate.oneSidedScore { return indexScan(best.attribute) } // rule 5
            return fullScan()                                                                     // rule 6
        }

        func fullScan() -> FetchPlan {
            let ordering: FetchPlan.Ordering = descriptors.isEmpty ? .primaryKey
                : limit > 0 ? .boundedHeap(capacity: offset + limit) : .inMemory
            return make(
                path: .fullScan, ordering: ordering, stopsEarly: descriptors.isEmpty,
                isEmpty: conjuncts.contains(.constant(false)))
        }

        func indexScan(_ attribute: String) -> FetchPlan {
            let candidate = constraints[attribute] ?? Candidate(attribute: attribute)
            let inOrder = attribute == sortAttribute
            let ordering: FetchPlan.Ordering = descriptors.isEmpty ? .primaryKey
                : inOrder ? .index : limit > 0 ? .boundedHeap(capacity: offset + limit) : .inMemory
            let reverse = inOrder && !(descriptors.first?.ascending ?? true)
            return make(
                path: .indexScan(attribute: attribute, kind: entity.attribute(named: attribute)?.type.indexKeyKind, reverse: reverse),
                ranges: candidate.ranges, decided: candidate.exactPositions, ordering: ordering,
                stopsEarly: ordering == .index,
                isEmpty: candidate.ranges.ranges.isEmpty || conjuncts.contains(.constant(false)))
        }

        private func make(
            path: FetchPlan.Path, ranges: IndexKeyRanges = .all, decided: Set<Int> = [],
            ordering: FetchPlan.Ordering, stopsEarly: Bool, isEmpty: Bool
        ) -> FetchPlan {
            let remaining = conjuncts.enumerated().filter { !decided.contains($0.offset) }.map(\.element)
            let residual: PredicateNode? = remaining.isEmpty ? nil : remaining.count == 1 ? remaining[0] : .and(remaining)
            let sortNeedsRows = descriptors.count > 1 || (!descriptors.isEmpty && ordering != .index)
            let readsRows = !isEmpty && (output == .rows || residual != nil || (output == .objectIDs && sortNeedsRows))
            return FetchPlan(
                entityName: entity.name, includesSubentities: includesSubentities,
                filter: residual.map { FetchPredicate(node: $0) }, ordering: ordering, stopsEarly: stopsEarly && limit > 0,
                readsRows: readsRows, path: path, predicate: predicate, residual: residual, indexRanges: ranges,
                sortDescriptors: descriptors, offset: offset, limit: limit, output: output, isEmpty: isEmpty)
        }
    }

    /// The attribute of a sort descriptor whose index yields its order: an indexed,
    /// stored attribute of the entity itself, compared literally (strings by bytes).
    fileprivate static func indexedSortAttribute(_ descriptor: FetchSortDescriptor, in entity: EntityDescription) -> String? {
        let components = descriptor.components
        guard components.count == 1, let attribute = entity.attribute(named: components[0]), attribute.isIndexed,
              !attribute.isTransient, let kind = attribute.type.indexKeyKind
        else { return nil }
        guard descriptor.comparison == .literal || kind != .string else { return nil }
        return attribute.name
    }

    /// The constraints on one attribute.
    private struct Candidate {
        static let pointScore = 4
        static let oneSidedScore = 2

        let attribute: String
        var ranges = IndexKeyRanges.all
        var exactPositions: Set<Int> = []
        var sources: [IndexConstraint] = []

        mutating func add(_ constraint: IndexConstraint, at position: Int) {
            ranges = ranges.intersection(constraint.ranges)
            if constraint.isExact { exactPositions.insert(position) }
            sources.append(constraint)
        }

        /// 5: nothing; 4: points; 3: two-sided ranges; 2: one-sided; 1: only `!= nil`.
        var score: Int {
            let all = ranges.ranges
            if all.isEmpty { return 5 }
            if all.allSatisfy({ $0.lower != nil && $0.lower == $0.upper }) { return 4 }
            if all.allSatisfy({ $0.lower != nil && $0.upper != nil }) { return 3 }
            if all.count == 1, all[0].lower == [0x00], !all[0].includesLower, all[0].upper == nil { return 1 }
            return 2
        }

    }
}

extension IndexKeyRanges {
    /// The ranges in the predicate language, for ``FetchPlan/access``, of an index of
    /// values of `kind` (nil: none can be described).
    func describe(kind: IndexKeyKind?) -> [String] {
        guard self != .all else { return ["ALL"] }
        guard let kind else { return [] }
        return ranges.map { $0.describe(kind: kind) }
    }
}

extension IndexKeyRange {
    /// `== "x"`, `> 3`, `BETWEEN {1, 5}`, `BEGINSWITH "ab"`, `!= nil`.
    func describe(kind: IndexKeyKind) -> String {
        func value(_ bytes: [UInt8]?) -> String? {
            guard let bytes else { return nil }
            return bytes.withUnsafeBytes { buffer -> String? in
                var offset = 0
                guard let decoded = try? IndexKeyEncoding.decode(buffer, as: kind, at: &offset), offset == buffer.count else { return nil }
                return FetchPredicate(node: .comparison(PredicateComparison(
                    left: .keyPath(["x"]), op: .equal, right: .constant(PredicateValue(decoded))))).description
                    .dropFirst("x == ".count).description
            }
        }
        if lower == [0x00], !includesLower, upper == nil { return "!= nil" }
        if let lower, lower == upper, includesLower, includesUpper { return "== \(value(lower) ?? "?")" }
        // A prefix range: its upper end is the prefix's bytes followed by 0xFF.
        if kind == .string, let upper, upper.last == 0xFF, !includesUpper, let lower,
           Array(lower.dropLast(2)) == Array(upper.dropLast()) {
            return "BEGINSWITH \(value(lower) ?? "?")"
        }
        let low = lower == [0x00] && !includesLower ? nil : value(lower)
        let high = value(upper)
        switch (low, high) {
        case (let l?, let h?) where includesLower && includesUpper: return "BETWEEN {\(l), \(h)}"
        case (let l?, let h?): return "\(includesLower ? ">=" : ">") \(l) AND \(includesUpper ? "<=" : "<") \(h)"
        case (let l?, nil): return "\(includesLower ? ">=" : ">") \(l)"
        case (nil, let h?): return "\(includesUpper ? "<=" : "<") \(h)"
        case (nil, nil): return "ALL"
        }
    }
}
