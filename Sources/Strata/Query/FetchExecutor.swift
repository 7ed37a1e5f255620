import StrataLMDB

/// What a fetch produced from one store, in order and windowed by offset and limit.
/// Takes the rows of a fetch inside its read transaction, in their final order (see
/// ``StoreReader/execute(_:sink:)``).
protocol FetchRowSink: AnyObject {
    /// At most how many rows will come (before the first one).
    func reserve(_ count: Int)
    /// Row `key` of `storage`'s entity in `store`: its stored `record`, valid only during
    /// the call.
    func take(_ record: UnsafeRawBufferPointer, key: PrimaryKey, of storage: EntityStorage, in store: StoreFile) throws
    /// Row `key` of `storage`'s entity in `store`, of a fetch of IDs (its record unread).
    func take(key: PrimaryKey, of storage: EntityStorage, in store: StoreFile) throws
}

enum FetchRows: Sendable, Hashable {
    /// The rows' stored records (a store's answer to a fetch of objects).
    case rows(RowBatch)
    /// The rows' values (a parent context's answer to its child's fetch).
    case snapshots([ObjectSnapshot])
    /// The rows' IDs.
    case objectIDs([ManagedObjectID])
    /// How many rows match (within the window).
    case count(Int)
}

extension StoreReader where Transaction: ~Copyable {
    /// Runs `plan` (from ``FetchPlanner``) inside this reader's transaction.
    ///
    /// - Throws: ``StrataError`` for a corrupt row or index entry, a storage failure, an
    ///   unknown entity; ``FetchPredicateError`` for what the evaluator refuses.
    ///
    /// With a `sink`, a fetch of rows that meets its rows in their final order (no
    /// filter, no sort: a scan by primary key) hands each row of its window to the sink
    /// as it reads it, without copying it, and returns no rows; any other fetch returns
    /// its rows as without one.
    func execute(_ plan: FetchPlan, sink: FetchRowSink? = nil) throws -> FetchRows {
        guard !plan.isEmpty else { return FetchExecution<Transaction>.empty(plan.output, store: store) }
        var execution = FetchExecution(plan: plan, loader: RowLoader(store: store, transaction: transaction), sink: sink)
        switch plan.path {
        case .fullScan:
            if !plan.readsRows, plan.output == .count {
                let total = try count(of: plan.entityName, includesSubentities: plan.includesSubentities)
                return .count(FetchExecution<Transaction>.windowed(total, offset: plan.offset, limit: plan.limit))
            }
            if let sink, execution.streamsToSink {
                let total = try count(of: plan.entityName, includesSubentities: plan.includesSubentities)
                sink.reserve(FetchExecution<Transaction>.windowed(total, offset: plan.offset, limit: plan.limit))
            }
            if !plan.readsRows {
                try forEachKey(entity: plan.entityName, includesSubentities: plan.includesSubentities) { storage, key in
                    try execution.accept(storage: storage, key: key, indexValue: nil)
                }
            } else {
                try forEachRecord(entity: plan.entityName, includesSubentities: plan.includesSubentities) { storage, key, record in
                    try execution.offer(storage: storage, key: key, record: record, indexValue: nil)
                }
            }
        case .indexScan(let attribute, _, let reverse):
            for storage in try store.fetchedEntities(plan.entityName, includesSubentities: plan.includesSubentities) {
                guard let rows = storage.rows, let slot = storage.attributeSlot(named: attribute) else { continue }
                execution.startStream()
                try scanIndex(of: storage, slot: slot, in: plan.indexRanges, reverse: reverse) { entry in
                    guard execution.wantsMore(group: entry.group) else { return false }
                    guard plan.readsRows else {
                        return try execution.accept(storage: storage, key: entry.key, indexValue: entry.value)
                    }
                    return try withIndexedRecord(entry.key, of: storage, in: rows, index: attribute) { record in
                        try execution.offer(storage: storage, key: entry.key, record: record, indexValue: entry.value)
                    }
                }
            }
        }
        return try execution.finish()
    }
}

extension StoreReader where Transaction: ~Copyable {
    /// Calls `body` with the record of row `key` of `storage`'s entity, which an entry of
    /// the index on `index` names.
    ///
    /// - Throws: ``StrataError/corruptRecord(entity:primaryKey:reason:)`` when the row
    ///   does not exist; what `body` throws.
    func withIndexedRecord<R>(
        _ key: PrimaryKey, of storage: EntityStorage, in rows: Database, index: String, _ body: (UnsafeRawBufferPointer) throws -> R
    ) throws -> R {
        var encoded = key.rawValue.bigEndian
        return try withUnsafeBytes(of: &encoded) { keyBytes in
            try transaction.pointee.withValue(forKey: keyBytes, in: rows) { record in
                guard let record else {
                    throw StrataError.corruptRecord(
                        entity: storage.name, primaryKey: key.rawValue, reason: "the index on \(index) names a row that does not exist")
                }
                return try body(record)
            }
        }
    }
}

extension StoreReader where Transaction: ~Copyable {
    /// Calls `body` with every row `plan`'s filter accepts, its stored record read in place
    /// (valid only during the call), in the order of the plan's access path; the plan's
    /// sort and window are not applied. What a dictionary fetch or an aggregate scans:
    /// no row is copied and no object made.
    ///
    /// - Throws: as ``execute(_:sink:)``; what `body` throws.
    func forEachMatch(_ plan: FetchPlan, _ body: (EntityStorage, PrimaryKey, UnsafeRawBufferPointer) throws -> Void) throws {
        guard !plan.isEmpty else { return }
        let loader = RowLoader(store: store, transaction: transaction)
        func matches(_ storage: EntityStorage, _ key: PrimaryKey, _ record: UnsafeRawBufferPointer) throws -> Bool {
            guard let residual = plan.residual else { return true }
            let decoded: Record
            do throws(RecordDecodingError) {
                decoded = try RecordCodec.decode(record)
            } catch {
                throw StrataError.corruptRecord(entity: storage.name, primaryKey: key.rawValue, reason: error.reason)
            }
            return try PredicateEvaluator.evaluate(residual, on: try loader.subject(try loader.store.snapshot(of: decoded, storage: storage, key: key)))
        }
        switch plan.path {
        case .fullScan:
            try forEachRecord(entity: plan.entityName, includesSubentities: plan.includesSubentities) { storage, key, record in
                if try matches(storage, key, record) { try body(storage, key, record) }
                return true
            }
        case .indexScan(let attribute, _, let reverse):
            for storage in try store.fetchedEntities(plan.entityName, includesSubentities: plan.includesSubentities) {
                guard let rows = storage.rows, let slot = storage.attributeSlot(named: attribute) else { continue }
                try scanIndex(of: storage, slot: slot, in: plan.indexRanges, reverse: reverse) { entry in
                    return try withIndexedRecord(entry.key, of: storage, in: rows, index: attribute) { record in
                        if try matches(storage, entry.key, record) { try body(storage, entry.key, record) }
                        return true
                    }
                }
            }
        }
    }
}

/// Where the numeric aggregates of one entity are read from (``StoreReader/accumulate(_:into:)``).
enum AggregateSource {
    /// Every record of the entity's rows database, walked in place.
    case records(Database)
    /// The entries of an index of a number (integer or double) in `ranges`: the number
    /// of stored field `field`.
    case index(Database, isInteger: Bool, field: UInt64, ranges: IndexKeyRanges)
}

extension StoreReader where Transaction: ~Copyable {
    /// Adds every row `plan`'s filter accepts to `aggregates`. With no filter, each
    /// entity's records are walked by one cursor and read in place, the aggregated fields
    /// alone decoded (``NumericAggregates``) — or, when the aggregates read one indexed
    /// number, its index's entries (``indexSources(_:_:aggregates:)``); with a filter, the
    /// rows it accepts (``forEachMatch(_:_:)``).
    ///
    /// - Throws: as ``execute(_:sink:)``.
    func accumulate(_ plan: FetchPlan, into aggregates: inout NumericAggregates) throws {
        guard !plan.isEmpty else { return }
        let maps = try store.fetchedEntities(plan.entityName, includesSubentities: plan.includesSubentities).map { storage in
            (storage: storage, map: aggregates.fieldMap(of: storage))
        }
        let sources: [(storage: EntityStorage, map: FieldMap, source: AggregateSource)]
        if let fromIndex = indexSources(plan, maps, aggregates: aggregates) {
            sources = fromIndex
        } else if plan.residual == nil, case .fullScan = plan.path {
            sources = maps.compactMap { storage, map in storage.rows.map { (storage, map, .records($0)) } }
        } else {
            try aggregates.withAccumulators { accumulators in
                var visited = 0
                try forEachMatch(plan) { storage, key, record in
                    guard let map = maps.first(where: { $0.storage === storage })?.map else { return }
                    visited += 1
                    try map.withManyFields(accumulators) { targets in
                        try NumericAggregates.add(record: record, to: &targets, storage: storage) { key.rawValue }
                    }
                }
                return visited
            }
            return
        }
        // The walks, generic over the targets so that each kind gets a loop of its own.
        func walk<Targets: FieldTargets>(_ source: AggregateSource, _ storage: EntityStorage, _ targets: inout Targets) throws -> Int {
            switch source {
            case .records(let rows): try walkRecords(rows, storage, &targets)
            case .index(let index, let isInteger, let field, let ranges): try walkIndex(index, isInteger, field, ranges, storage, &targets)
            }
        }
        try aggregates.withAccumulators { accumulators in
            try StoreFile.translatingStorageErrors {
                try sources.reduce(0) { visited, source in
                    try visited + source.map.walk(
                        adding: accumulators,
                        one: { try walk(source.source, source.storage, &$0) },
                        many: { try walk(source.source, source.storage, &$0) })
                }
            }
        }
    }

    /// Where each entity's aggregates are read from when an index answers them: every
    /// aggregate of an attribute reads the same numeric attribute, indexed in every
    /// entity searched, and the plan has no filter or one that index answers alone (its
    /// ranges). An index holds one entry per row, nil values included, so counts of
    /// `self` count entries. Nil otherwise.
    func indexSources(
        _ plan: FetchPlan, _ maps: [(storage: EntityStorage, map: FieldMap)], aggregates: NumericAggregates
    ) -> [(storage: EntityStorage, map: FieldMap, source: AggregateSource)]? {
        guard plan.residual == nil, let attribute = aggregates.onlyAttribute else { return nil }
        let ranges: IndexKeyRanges
        switch plan.path {
        case .fullScan: ranges = .all
        case .indexScan(let scanned, _, _):
            guard scanned == attribute else { return nil }
            ranges = plan.indexRanges
        }
        var sources: [(storage: EntityStorage, map: FieldMap, source: AggregateSource)] = []
        for (storage, map) in maps where storage.rows != nil {
            guard let slot = storage.attributeSlot(named: attribute), let index = storage.attributes[slot].index,
                  let kind = storage.attributes[slot].indexKind, kind == .integer || kind == .double,
                  let field = storage.attributes[slot].field
            else { return nil }
            sources.append((storage, map, .index(index, isInteger: kind == .integer, field: UInt64(field), ranges: ranges)))
        }
        return sources
    }

    /// Adds every record of `rows` to `targets`; the number of rows. The cursor loop is
    /// written out so that the walk of each record inlines into it (a scan's body is a
    /// call per row).
    private func walkRecords<Targets: FieldTargets>(_ rows: Database, _ storage: EntityStorage, _ targets: inout Targets) throws -> Int {
        try transaction.pointee.withCursor(on: rows) { cursor in
            var count = 0
            var entry = try cursor.first()
            while let (key, record) = entry {
                count &+= 1
                // (The key is decoded only to name a corrupt record.)
                try NumericAggregates.add(record: record, to: &targets, storage: storage) {
                    PrimaryKey(encoded: key)?.rawValue ?? 0
                }
                entry = try cursor.next()
            }
            return count
        }
    }

    /// Adds the numbers of the entries of `index` in `ranges` to `targets`, as values of
    /// field `field`; the number of entries. Each is read in place: a presence byte and 8
    /// bytes of an ordered number (``IndexKeyEncoding``), or the presence byte of nil
    /// alone, then the primary key's 8.
    ///
    /// - Throws: `corruptRecord` for an entry that is not a number's.
    private func walkIndex<Targets: FieldTargets>(
        _ index: Database, _ isInteger: Bool, _ field: UInt64, _ ranges: IndexKeyRanges, _ storage: EntityStorage, _ targets: inout Targets
    ) throws -> Int {
        var count = 0
        for range in ranges.ranges {
            let keys = range.keyRange
            try transaction.pointee.withCursor(on: index) { cursor in
                var entry = try keys.lower.map { lower in try lower.withUnsafeBytes { try cursor.seek(atOrAfter: $0) } } ?? cursor.first()
                while let (key, _) = entry {
                    if let upper = keys.upper, upper.withUnsafeBytes({ cursor.compare(key, $0) }) > 0 { break }
                    guard key.count > 8 else { throw Self.corruptEntry(storage, index) }
                    let value = UnsafeRawBufferPointer(rebasing: key[..<(key.count - 8)])
                    if range.contains(encoded: value) {
                        count &+= 1
                        switch (value[0], value.count) {
                        case (0x00, 1):
                            break
                        case (0x01, 9):
                            let bits = UInt64(bigEndian: value.loadUnaligned(fromByteOffset: 1, as: UInt64.self))
                            if isInteger {
                                targets.add(integer: Int64(bitPattern: bits ^ (1 << 63)), field: field)
                            } else {
                                targets.add(double: IndexKeyEncoding.double(orderedBits: bits), field: field)
                            }
                        default:
                            throw Self.corruptEntry(storage, index)
                        }
                    }
                    entry = try cursor.next()
                }
            }
        }
        return count
    }

    private static func corruptEntry(_ storage: EntityStorage, _ index: Database) -> StrataError {
        .corruptRecord(entity: storage.name, primaryKey: 0, reason: "\(index) holds an entry that is not a number's")
    }
}

/// The state of one fetch: filtering, collecting in order, stopping early, windowing.
struct FetchExecution<Transaction: ReadableTransaction & ~Copyable> {
    typealias Match = FetchMatch

    let plan: FetchPlan
    let loader: RowLoader<Transaction>
    /// The records of the rows kept (a fetch of rows).
    private var records: RowBatch
    private var matches: [Match] = []
    private var heap: BoundedHeap<Match>?
    /// Matches found in the current stream (one entity's index).
    private var streamMatches = 0
    private var lastGroup: [UInt8]?

    /// The key paths of the sort descriptors whose values each match keeps (``Match/keys``).
    private let keyPaths: [[String]]
    /// Where streamed rows go (see ``StoreReader/execute(_:sink:)``).
    private let sink: FetchRowSink?

    init(plan: FetchPlan, loader: RowLoader<Transaction>, sink: FetchRowSink? = nil) {
        self.plan = plan
        self.loader = loader
        self.sink = sink
        records = RowBatch(store: loader.store)
        // The index orders by the first descriptor; the rest need the rows' values.
        let keyed = plan.ordering == .index ? Array(plan.sortDescriptors.dropFirst()) : plan.sortDescriptors
        keyPaths = keyed.map(\.components)
        // A count needs no order, and rows are not read for one that needs no test.
        if case .boundedHeap(let capacity) = plan.ordering, plan.output != .count {
            let descriptors = plan.sortDescriptors
            heap = BoundedHeap(capacity: capacity) { FetchMatch.precedes($0, $1, descriptors) }
        }
    }

    private var needed: Int? { plan.limit > 0 ? plan.offset + plan.limit : nil }

    /// A new ordered stream begins (the index of another entity).
    mutating func startStream() {
        streamMatches = 0
        lastGroup = nil
    }

    /// Whether reading the stream should go on to an entry of `group`: it stops once
    /// enough matches are found, at a change of indexed value, so that rows equal by
    /// the sort key are all seen.
    mutating func wantsMore(group: [UInt8]) -> Bool {
        defer { lastGroup = group }
        guard plan.stopsEarly, let needed, streamMatches >= needed else { return true }
        return group == lastGroup
    }

    /// Tests row `key` of `storage`'s entity (its stored `record`) and keeps it when it
    /// matches; returns whether to read on. A row is decoded only when the filter or the
    /// sort needs its values; a fetch of rows keeps its record as it is stored.
    mutating func offer(storage: EntityStorage, key: PrimaryKey, record: UnsafeRawBufferPointer, indexValue: [UInt8]?) throws -> Bool {
        var keys: [PredicateValue] = []
        if plan.residual != nil || !keyPaths.isEmpty {
            let decoded: Record
            do throws(RecordDecodingError) {
                decoded = try RecordCodec.decode(record)
            } catch {
                throw StrataError.corruptRecord(entity: storage.name, primaryKey: key.rawValue, reason: error.reason)
            }
            let subject = try loader.subject(try loader.store.snapshot(of: decoded, storage: storage, key: key))
            if let residual = plan.residual, try !PredicateEvaluator.evaluate(residual, on: subject) { return true }
            keys = try keyPaths.map { try PredicateEvaluator.resolve(.keyPath($0), on: subject).valueForm }
        }
        // Only a fetch of rows keeps the record (an ID fetch of many rows would hold them
        // all until it finishes otherwise).
        var row: Int?
        if let sink, streams {
            // Rows met in their final order go to the sink as they are read, in the window.
            streamMatches += 1
            let needed = self.needed ?? Int.max
            if streamMatches > plan.offset && streamMatches <= needed { try sink.take(record, key: key, of: storage, in: loader.store) }
            return streamMatches < needed || !plan.stopsEarly
        }
        if plan.output == .rows {
            row = records.count
            records.append(entity: storage, key: key, record: record)
            if streams {
                // Rows met in their final order need no match: only how many there are.
                streamMatches += 1
                if let needed, records.count >= needed, case .fullScan = plan.path, plan.stopsEarly { return false }
                return true
            }
        }
        return keep(Match(entityName: storage.name, key: key.rawValue, row: row, keys: keys, indexValue: indexValue))
    }

    /// Whether the rows (or, for a fetch of IDs, their keys) go to the sink as they are
    /// read.
    var streamsToSink: Bool { sink != nil && (streams || streamsKeys) }

    /// Whether a fetch of IDs meets its rows in their final order, with nothing to test
    /// or sort: a scan by primary key, whose keys can go to a sink as they are read.
    private var streamsKeys: Bool {
        guard plan.output == .objectIDs, plan.residual == nil, plan.sortDescriptors.isEmpty, heap == nil else { return false }
        if case .primaryKey = plan.ordering, case .fullScan = plan.path { return true }
        return false
    }

    /// Whether rows are kept as they are met, with no match to sort or window later: a
    /// fetch of rows with no filter, no sort and no heap, whose rows come in their final
    /// order (primary keys, or one index read in order).
    private var streams: Bool {
        guard plan.output == .rows, plan.residual == nil, plan.sortDescriptors.isEmpty, heap == nil else { return false }
        if case .primaryKey = plan.ordering, case .fullScan = plan.path { return true }
        return false
    }

    /// Keeps a match found without reading its row; returns whether to read on.
    mutating func accept(storage: EntityStorage, key: PrimaryKey, indexValue: [UInt8]?) throws -> Bool {
        if let sink, streamsKeys {
            // Keys met in their final order go to the sink as they are read, in the window.
            streamMatches += 1
            let needed = self.needed ?? Int.max
            if streamMatches > plan.offset && streamMatches <= needed { try sink.take(key: key, of: storage, in: loader.store) }
            return streamMatches < needed || !plan.stopsEarly
        }
        return keep(Match(entityName: storage.name, key: key.rawValue, row: nil, keys: [], indexValue: indexValue))
    }

    private mutating func keep(_ match: Match) -> Bool {
        streamMatches += 1
        if heap != nil {
            heap!.insert(match)
            return true
        }
        matches.append(match)
        // A full scan without sort descriptors meets rows in their final order.
        if case .fullScan = plan.path, plan.stopsEarly, let needed, matches.count >= needed { return false }
        return true
    }

    /// The matches in order, windowed.
    mutating func finish() throws -> FetchRows {
        if sink != nil && streamsKeys { return .objectIDs([]) }   // every key went to the sink
        if plan.output == .count {
            return .count(Self.windowed(matches.count, offset: plan.offset, limit: plan.limit))
        }
        if streams {
            let window = records.rows.indices.dropFirst(plan.offset).prefix(plan.limit > 0 ? plan.limit : Int.max)
            if window.count == records.count { return .rows(records) }
            var result = RowBatch(store: records.store)
            for row in window { result.append(row, of: records) }
            return .rows(result)
        }
        var ordered: [Match]
        if let heap {
            ordered = heap.sorted()
        } else {
            ordered = matches
            let descriptors = plan.sortDescriptors
            switch plan.ordering {
            case .primaryKey:
                if case .indexScan = plan.path { ordered.sort(by: FetchMatch.tieBreak) }
            case .index:
                // The first sort key is decided by the index (its bytes), the rest by the
                // rows' values, then the tie-break. Rows mostly come in that order already
                // (one entity's index, read forwards): then nothing moves.
                let ascending = descriptors.first?.ascending ?? true
                let rest = Array(descriptors.dropFirst())
                let precedes = { (a: Match, b: Match) -> Bool in
                    let order = IndexKeyRange.compare(a.indexValue ?? [], b.indexValue ?? [])
                    return order != 0 ? (order < 0) == ascending : FetchMatch.precedes(a, b, rest)
                }
                if zip(ordered, ordered.dropFirst()).contains(where: { !precedes($0, $1) }) { ordered.sort(by: precedes) }
            case .inMemory, .boundedHeap:
                ordered.sort { FetchMatch.precedes($0, $1, descriptors) }
            }
        }
        let window = ordered.dropFirst(plan.offset).prefix(plan.limit > 0 ? plan.limit : Int.max)
        switch plan.output {
        case .rows:
            // Every row kept, in the order it was read: the batch as it is.
            if window.count == records.count, window.enumerated().allSatisfy({ $0.offset == $0.element.row }) {
                return .rows(records)
            }
            var result = RowBatch(store: records.store)
            for match in window { if let row = match.row { result.append(row, of: records) } }
            return .rows(result)
        case .objectIDs: return .objectIDs(window.map { loader.store.objectID(entity: $0.entityName, key: PrimaryKey($0.key)!) })
        case .count: return .count(window.count)
        }
    }

    static func empty(_ output: FetchPlan.Output, store: StoreFile) -> FetchRows {
        switch output {
        case .rows: .rows(RowBatch(store: store))
        case .objectIDs: .objectIDs([])
        case .count: .count(0)
        }
    }

    /// How many of `total` matches fall in the window.
    static func windowed(_ total: Int, offset: Int, limit: Int) -> Int {
        let after = max(0, total - offset)
        return limit > 0 ? min(after, limit) : after
    }
}

/// One match of a fetch (``FetchExecution``).
struct FetchMatch {
    /// The row's entity.
    var entityName: String
    /// The row's primary key.
    var key: UInt64
    /// The row's index in ``FetchExecution/records`` (a fetch of rows).
    var row: Int?
    /// The values of the sort descriptors' key paths that the access path does not
    /// order by (all of them, or all but the first with ``FetchPlan/Ordering/index``).
    var keys: [PredicateValue]
    /// The encoded value from the index read, when an index was read.
    var indexValue: [UInt8]?

    /// Sort order by precomputed keys, then the tie-break.
    static func precedes(_ a: FetchMatch, _ b: FetchMatch, _ descriptors: [FetchSortDescriptor]) -> Bool {
        for (index, descriptor) in descriptors.enumerated() {
            let order = FetchSorting.compare(a.keys[index], b.keys[index], descriptor.comparison)
            if order != .orderedSame { return (order == .orderedAscending) == descriptor.ascending }
        }
        return tieBreak(a, b)
    }

    /// ``FetchSorting/tieBreak(_:_:)`` of two rows of one store: entity name, then
    /// primary key.
    static func tieBreak(_ a: FetchMatch, _ b: FetchMatch) -> Bool {
        a.entityName != b.entityName ? a.entityName < b.entityName : a.key < b.key
    }
}

/// The first `capacity` elements of a stream under an order, kept in a max-heap whose
/// root is the last of them: O(log capacity) per element.
struct BoundedHeap<Element> {
    let capacity: Int
    let areInIncreasingOrder: (Element, Element) -> Bool
    private var elements: [Element] = []

    init(capacity: Int, by areInIncreasingOrder: @escaping (Element, Element) -> Bool) {
        self.capacity = capacity
        self.areInIncreasingOrder = areInIncreasingOrder
    }

    mutating func insert(_ element: Element) {
        guard capacity > 0 else { return }
        if elements.count < capacity {
            elements.append(element)
            siftUp(elements.count - 1)
        } else if areInIncreasingOrder(element, elements[0]) {
            elements[0] = element
            siftDown(0)
        }
    }

    /// The kept elements in order.
    func sorted() -> [Element] { elements.sorted(by: areInIncreasingOrder) }

    private mutating func siftUp(_ index: Int) {
        var child = index
        while child > 0 {
            let parent = (child - 1) / 2
            guard areInIncreasingOrder(elements[parent], elements[child]) else { return }
            elements.swapAt(parent, child)
            child = parent
        }
    }

    private mutating func siftDown(_ index: Int) {
        var parent = index
        while true {
            let left = 2 * parent + 1, right = left + 1
            var largest = parent
            if left < elements.count, areInIncreasingOrder(elements[largest], elements[left]) { largest = left }
            if right < elements.count, areInIncreasingOrder(elements[largest], elements[right]) { largest = right }
            guard largest != parent else { return }
            elements.swapAt(parent, largest)
            parent = largest
        }
    }
}
