import Foundation

// Dictionary fetches: values read straight from stored records (an LMDB store's pages,
// in place) or a parent's and a server store's rows, never through managed objects;
// unsaved objects of the context are merged in from memory when the request includes
// pending changes. Aggregates over plain attributes are accumulated as the rows are
// scanned, so `sum` over a million rows holds nothing but its running total.

/// A value of a dictionary result while it is computed.
enum ResultValue: Hashable {
    case null
    case attribute(AttributeValue)
    case object(ManagedObjectID)
    case objects([ManagedObjectID])

    init(_ value: AttributeValue?) {
        self = value.map(ResultValue.attribute) ?? .null
    }

    /// The value as a result dictionary holds it; nil for `.null`.
    var sendable: (any Sendable)? {
        switch self {
        case .null: nil
        case .attribute(let value): value.sendableValue
        case .object(let id): id
        case .objects(let ids): ids
        }
    }

    /// The value as the evaluator and sorting compare it.
    var predicateValue: PredicateValue {
        switch self {
        case .null: .null
        case .attribute(let value): PredicateValue(value)
        case .object(let id): .objectID(id)
        case .objects(let ids): .array(ids.map(PredicateValue.objectID))
        }
    }
}

extension ObjectGraph {
    /// The results of `request`, a ``FetchRequest/ResultType/dictionary`` fetch.
    func fetchDictionaries<Result>(_ request: FetchRequest<Result>) throws -> [[String: any Sendable]] {
        let model = try model
        let (entity, validatedShape, having) = try request.validated(in: model)
        guard let shape = validatedShape else { throw StrataError.invalidFetchRequest("not a dictionary fetch") }
        try requireStores(for: request.entityName)
        let pending = request.includesPendingChanges ? pendingObjects(of: request) : []
        let columns = DictionaryColumns(shape)

        // The smallest and largest values of indexed attributes: the ends of their indexes.
        if let extremes = try indexOnlyExtremes(request, shape: shape, entity: entity, pending: pending) {
            return try finish([extremes], shape: shape, request: request, having: having)
        }
        // Numeric aggregates, nothing to merge: added up from the records in place.
        if pending.isEmpty, parentContext == nil, var numeric = NumericAggregates(shape) {
            try coordinator.accumulate(request, into: &numeric, in: readGeneration())
            let values = try numeric.values()
            return try finish([values], shape: shape, request: request, having: having)
        }
        // Aggregates of plain attributes, nothing to merge: accumulated while scanning.
        if shape.isAggregating, pending.isEmpty, parentContext == nil, columns.areSingleStep {
            var groups = Groups(shape)
            let paths = columns.paths
            try scanStored(request, columns: columns) { values, _ in
                groups.add { path in paths[path].column.map { values[$0] } ?? DictionaryColumns.present }
            }
            return try finish(try groups.results(), shape: shape, request: request, having: having)
        }

        let windowed = request.fetchLimit > 0 || request.fetchOffset > 0
        let sources = try upstreamSourceCount(for: request)
        let inMemoryOrder = !pending.isEmpty || (parentContext == nil && sources > 1) || (request.returnsDistinctResults && windowed)
        var table = ValueTable(columns: columns.count)
        // Stored rows of objects changed or deleted here: their values come from memory.
        let excluded = Set(pending.filter { !$0.isInserted }.map(\.objectID))
        func isExcluded(_ id: ManagedObjectID) -> Bool { !excluded.isEmpty && excluded.contains(id) }
        if shape.isAggregating || inMemoryOrder || (request.sortDescriptors.isEmpty && !windowed && parentContext == nil) {
            if parentContext == nil {
                try scanStored(request, columns: columns) { values, id in
                    let id = id()
                    if !isExcluded(id) { table.append(values, id: id) }
                }
            } else {
                var upstream = request.objectRequest()
                upstream.fetchLimit = 0
                upstream.fetchOffset = 0
                // Rows are grouped or sorted here; the descriptors may name result keys
                // (an aggregate's name) the parent would not know.
                upstream.sortDescriptors = []
                for rows in try upstreamFetch(upstream) { try add(rows, columns: columns, to: &table, skipping: isExcluded) }
            }
        } else {
            // Rows in their final order and window, from the store or the parent.
            let upstream = request.objectRequest()
            for rows in try upstreamFetch(upstream) { try add(rows, columns: columns, to: &table, skipping: isExcluded) }
        }
        // Unsaved objects, matched on their values.
        for object in pending where !object.isDeleted {
            if let predicate = request.predicate, try !predicate.evaluate(with: object) { continue }
            table.append(try columns.values(of: object), id: object.objectID)
        }
        try resolveDestinations(of: &table, columns: columns)
        let values = try columns.pathValues(of: table, graph: self, includesPendingChanges: request.includesPendingChanges)

        if shape.isAggregating {
            var groups = Groups(shape)
            for row in 0..<table.count { groups.add { path in values[row, path] } }
            return try finish(try groups.results(), shape: shape, request: request, having: having)
        }
        var order = Array(0..<table.count)
        if inMemoryOrder || parentContext == nil && !request.sortDescriptors.isEmpty && table.isFromScan {
            order = try sortedRows(order, values: values, ids: table.ids, shape: shape, request: request)
        }
        var results: [[String: any Sendable]] = []
        var seen = Set<[ResultValue]>()
        for row in order {
            let outputs = shape.outputs.map { values[row, $0.path] }
            if request.returnsDistinctResults, !seen.insert(outputs).inserted { continue }
            results.append(dictionary(shape.outputs.map(\.name), outputs))
        }
        return inMemoryOrder ? Array(window(results, request)) : results
    }

    /// A fetch of only `min` and `max` of indexed attributes, with no predicate, no groups
    /// and nothing unsaved to merge, answered from the ends of the indexes without reading
    /// a row; nil when the fetch is not one of those, or a store cannot answer so.
    private func indexOnlyExtremes<Result>(
        _ request: FetchRequest<Result>, shape: DictionaryShape, entity: EntityDescription, pending: [ManagedObject]
    ) throws -> [ResultValue]? {
        guard request.predicate == nil, shape.groups.isEmpty, shape.outputs.isEmpty, !shape.aggregates.isEmpty,
              pending.isEmpty, parentContext == nil else { return nil }
        var values: [ResultValue] = []
        for (expression, path) in shape.aggregates {
            guard expression.function == .min || expression.function == .max,
                  let step = shape.paths[path].steps.first, shape.paths[path].steps.count == 1,
                  case .attribute(let name, let type) = step, entity.attribute(named: name)?.isIndexed == true,
                  Self.indexHoldsValues(of: type)
            else { return nil }
            guard let extreme = try coordinator.indexExtreme(of: name, largest: expression.function == .max, for: request, in: readGeneration())
            else { return nil }
            values.append(ResultValue(extreme))
        }
        return values   // the result's values: the aggregates, in order
    }

    /// Whether an index entry decodes to a value of `type` exactly as its record holds it.
    private static func indexHoldsValues(of type: AttributeType) -> Bool {
        switch type {
        // Fixed-width values only: an index cuts longer strings and URLs at
        // `IndexLayout.maximumValueLength` bytes, and orders values that share the cut
        // prefix by primary key, so its ends do not hold them.
        case .integer16, .integer32, .integer64, .double, .date, .uuid: true
        default: false
        }
    }

    /// Calls `body` with the column values of every stored row matching `request` (and a
    /// way to make the row's ID), in no particular order: an LMDB store's records decoded
    /// in place, field by field; a server store's rows as they come.
    private func scanStored<Result>(
        _ request: FetchRequest<Result>, columns: DictionaryColumns, _ body: ([ResultValue], () -> ManagedObjectID) throws -> Void
    ) throws {
        var buffer = [ResultValue](repeating: .null, count: columns.count)
        var fields = FieldColumns()
        try coordinator.scanMatches(request, in: readGeneration()) { file, storage, key, record in
            let wanted = fields.columns(of: storage, columns)
            for index in buffer.indices { buffer[index] = .null }
            var reader = RecordCodec.Reader(record)
            var foreignKeys: [(position: Int, slot: Int, value: AttributeValue)] = []
            do throws(RecordDecodingError) {
                _ = try reader.header()
                while let (number, tag) = try reader.nextField() {
                    let position = Int(number) < wanted.count ? wanted[Int(number)] : -1
                    guard position >= 0 else {
                        try reader.skip(tag)
                        continue
                    }
                    let value = try reader.value(tag)
                    if case .relationship(let slot)? = storage.field(numbered: number) {
                        foreignKeys.append((position, slot, value))
                    } else {
                        buffer[position] = .attribute(value)
                    }
                }
            } catch {
                throw StrataError.corruptRecord(entity: storage.name, primaryKey: key.rawValue, reason: error.reason)
            }
            for foreignKey in foreignKeys {
                buffer[foreignKey.position] = .object(try file.destinationID(foreignKey.value, of: foreignKey.slot, storage: storage, key: key))
            }
            try body(buffer, { file.objectID(entity: storage.name, key: key) })
        } snapshots: { snapshots in
            for snapshot in snapshots {
                try body(try columns.values(of: snapshot, in: self.model), { snapshot.objectID })
            }
        }
    }

    /// Adds upstream rows (records or snapshots) to `table`.
    private func add(_ rows: FetchRows, columns: DictionaryColumns, to table: inout ValueTable, skipping: (ManagedObjectID) -> Bool) throws {
        switch rows {
        case .rows(let batch):
            for index in 0..<batch.count {
                guard let storage = batch.storage(of: index), let key = PrimaryKey(batch.rows[index].key) else { continue }
                let snapshot = try batch.withRecord(of: index) { bytes throws(StrataError) in
                    try batch.store.snapshot(ofRecord: bytes, storage: storage, key: key)
                }
                if skipping(snapshot.objectID) { continue }
                table.append(try columns.values(of: snapshot, in: model), id: snapshot.objectID)
            }
        case .snapshots(let snapshots):
            for snapshot in snapshots where !skipping(snapshot.objectID) {
                table.append(try columns.values(of: snapshot, in: model), id: snapshot.objectID)
            }
        case .objectIDs, .count:
            break
        }
        table.isFromScan = false
    }

    /// Fills the to-many columns the rows left unread (stored rows do not carry them).
    private func resolveDestinations(of table: inout ValueTable, columns: DictionaryColumns) throws {
        for (column, property) in columns.properties.enumerated() {
            guard case .toMany(let name) = property else { continue }
            let unread = (0..<table.count).filter { table[$0, column] == .null }
            guard !unread.isEmpty else { continue }
            let links = try upstreamDestinations(of: unread.map { table.ids[$0] }, relationship: name)
            for row in unread { table[row, column] = .objects(links[table.ids[row]] ?? []) }
        }
    }

    /// Sorts rows (their positions) by the request's sort descriptors, ties by ID.
    private func sortedRows<Result>(_ rows: [Int], values: ValueTable, ids: [ManagedObjectID], shape: DictionaryShape, request: FetchRequest<Result>) throws -> [Int] {
        rows.sorted { a, b in
            for (descriptor, path) in zip(request.sortDescriptors, shape.sortPaths) {
                let order = FetchSorting.compare(values[a, path].predicateValue, values[b, path].predicateValue, descriptor.comparison)
                if order != .orderedSame { return (order == .orderedAscending) == descriptor.ascending }
            }
            return FetchSorting.tieBreak(ids[a], ids[b])
        }
    }

    /// The groups' results: having, order, distinct, window.
    private func finish<Result>(_ groups: [[ResultValue]], shape: DictionaryShape, request: FetchRequest<Result>, having: HavingCondition?) throws -> [[String: any Sendable]] {
        let names = shape.resultNames
        var rows: [[ResultValue]] = []
        for values in groups {
            if let having, try !having.holds(Dictionary(uniqueKeysWithValues: zip(names, values))) { continue }
            rows.append(values)
        }
        if !request.sortDescriptors.isEmpty {
            let positions = request.sortDescriptors.map { descriptor in names.firstIndex(of: descriptor.key)! }
            rows.sort { a, b in
                for (descriptor, position) in zip(request.sortDescriptors, positions) {
                    let order = FetchSorting.compare(a[position].predicateValue, b[position].predicateValue, descriptor.comparison)
                    if order != .orderedSame { return (order == .orderedAscending) == descriptor.ascending }
                }
                return false
            }
        }
        if request.returnsDistinctResults {
            var seen = Set<[ResultValue]>()
            rows = rows.filter { seen.insert($0).inserted }
        }
        return window(rows.map { dictionary(names, $0) }, request)
    }

    private func dictionary(_ names: [String], _ values: [ResultValue]) -> [String: any Sendable] {
        var result: [String: any Sendable] = [:]
        for (name, value) in zip(names, values) {
            if let sendable = value.sendable { result[name] = sendable }
        }
        return result
    }

    private func window<T, Result>(_ items: [T], _ request: FetchRequest<Result>) -> [T] {
        let rest = items.dropFirst(max(0, request.fetchOffset))
        return Array(request.fetchLimit > 0 ? rest.prefix(request.fetchLimit) : rest)
    }
}

/// The top-level properties a dictionary fetch reads from each row (the first step of
/// each of its key paths), and how its key paths' values follow from them.
struct DictionaryColumns {
    /// A property read from rows.
    enum Property: Hashable {
        case attribute(String)
        case toOne(String)
        case toMany(String)
    }

    private(set) var properties: [Property] = []
    /// For each key path of the shape: its column (nil for `self`) and the steps after it.
    private(set) var paths: [(column: Int?, rest: [DictionaryShape.Step])] = []

    init(_ shape: DictionaryShape) {
        for path in shape.paths {
            guard let first = path.steps.first else {
                paths.append((nil, []))
                continue
            }
            let property: Property = switch first {
            case .attribute(let name, _): .attribute(name)
            case .toOne(let name, _): .toOne(name)
            case .toMany(let name): .toMany(name)
            }
            if !properties.contains(property) { properties.append(property) }
            paths.append((properties.firstIndex(of: property)!, Array(path.steps.dropFirst())))
        }
    }

    var count: Int { properties.count }

    /// The value of `self` for a count while scanning: any value that is not nil.
    static let present = ResultValue.attribute(.boolean(true))

    /// Whether every key path is one attribute of the row (or `self`): values need no
    /// second read.
    var areSingleStep: Bool {
        paths.allSatisfy { path in
            path.rest.isEmpty && path.column.map { column in if case .attribute = properties[column] { true } else { false } } ?? true
        }
    }

    /// The column values of a row as a snapshot holds them.
    func values(of snapshot: ObjectSnapshot, in model: ManagedObjectModel) throws -> [ResultValue] {
        let entity = model.entitiesByName[snapshot.objectID.entityName] ?? EntityDescription(name: snapshot.objectID.entityName)
        return properties.map { property in
            switch property {
            case .attribute(let name):
                guard let slot = entity.attributeSlot(named: name), slot < snapshot.attributes.count else { return .null }
                return ResultValue(snapshot.attributes[slot])
            case .toOne(let name), .toMany(let name):
                guard let slot = entity.relationshipSlot(named: name), slot < snapshot.relationships.count else { return .null }
                switch snapshot.relationships[slot] {
                case .toOne(let id): return id.map(ResultValue.object) ?? .null
                case .toMany(let ids): return .objects(ids)
                case .notLoaded: return .null   // read later, for all rows at once
                }
            }
        }
    }

    /// The column values of an object in memory (its unsaved values).
    func values(of object: ManagedObject) throws -> [ResultValue] {
        if !object.fulfilIfNeeded() { try object.throwIfStorageFailed() }
        let entity = object.entity
        return try properties.map { property throws -> ResultValue in
            switch property {
            case .attribute(let name):
                guard let slot = entity.attributeSlot(named: name) else { return .null }
                return ResultValue(object.attributeValue(at: slot))
            case .toOne(let name), .toMany(let name):
                guard let slot = entity.relationshipSlot(named: name) else { return .null }
                if !object.loadRelationshipIfNeeded(slot) { try object.throwIfStorageFailed() }
                switch object.relationshipStorage(at: slot) {
                case .toOne(let destination): return destination.map { .object($0.objectID) } ?? .null
                case .toMany(let members): return .objects(members.objects.filter { !$0.isDeleted }.map(\.objectID))
                case .notLoaded: return .objects([])
                }
            }
        }
    }

    /// Every key path's value for every row of `table`: one column, or a walk through
    /// to-one destinations, read together per step (unsaved objects from memory when
    /// `includesPendingChanges`, the others from the parent store).
    func pathValues(of table: ValueTable, graph: ObjectGraph, includesPendingChanges: Bool) throws -> ValueTable {
        var result = ValueTable(columns: paths.count)
        result.reserve(table.count)
        for row in 0..<table.count {
            result.append(paths.map { path in path.column.map { table[row, $0] } ?? .object(table.ids[row]) }, id: table.ids[row])
        }
        for (index, path) in paths.enumerated() where !path.rest.isEmpty {
            for step in path.rest {
                let name: String = switch step {
                case .attribute(let name, _), .toOne(let name, _), .toMany(let name): name
                }
                var ids: [ManagedObjectID] = []
                var seen = Set<ManagedObjectID>()
                for row in 0..<result.count {
                    if case .object(let id) = result[row, index], seen.insert(id).inserted { ids.append(id) }
                }
                let values = try graph.destinationValues(of: ids, property: name, includesPendingChanges: includesPendingChanges)
                for row in 0..<result.count {
                    guard case .object(let id) = result[row, index] else {
                        result[row, index] = .null
                        continue
                    }
                    result[row, index] = values[id] ?? .null
                }
            }
        }
        return result
    }
}

extension ObjectGraph {
    /// The value of `property` of each of `ids`: from the registered object when it has
    /// unsaved changes the fetch includes (or this context is a child, whose objects are
    /// its view of its parent), else from the rows upstream, read together.
    func destinationValues(of ids: [ManagedObjectID], property: String, includesPendingChanges: Bool) throws -> [ManagedObjectID: ResultValue] {
        var values: [ManagedObjectID: ResultValue] = [:]
        var unread: [ManagedObjectID] = []
        for id in ids {
            if includesPendingChanges, let object = registeredObject(for: id), object.hasChanges {
                if object.isDeleted { continue }
                if !object.fulfilIfNeeded() { try object.throwIfStorageFailed() }
                if let slot = object.entity.attributeSlot(named: property) {
                    values[id] = ResultValue(object.attributeValue(at: slot))
                } else if let slot = object.entity.relationshipSlot(named: property), case .toOne(let destination) = object.relationshipStorage(at: slot) {
                    values[id] = destination.map { .object($0.objectID) } ?? .null
                }
            } else {
                unread.append(id)
            }
        }
        guard !unread.isEmpty else { return values }
        let model = try model
        for (id, snapshot) in try upstreamSnapshots(of: unread) {
            guard let entity = model.entitiesByName[id.entityName] else { continue }
            if let slot = entity.attributeSlot(named: property), slot < snapshot.attributes.count {
                values[id] = ResultValue(snapshot.attributes[slot])
            } else if let slot = entity.relationshipSlot(named: property), slot < snapshot.relationships.count, case .toOne(let destination) = snapshot.relationships[slot] {
                values[id] = destination.map(ResultValue.object) ?? .null
            }
        }
        return values
    }
}

/// Rows of values, stored flat (one allocation for a whole fetch), with each row's ID.
struct ValueTable {
    let columns: Int
    private var values: [ResultValue] = []
    private(set) var ids: [ManagedObjectID] = []
    /// Whether the rows came from an unordered scan (they need sorting).
    var isFromScan = true

    init(columns: Int) {
        self.columns = columns
    }

    var count: Int { ids.count }

    mutating func reserve(_ rows: Int) {
        values.reserveCapacity(rows * columns)
        ids.reserveCapacity(rows)
    }

    mutating func append(_ row: [ResultValue], id: ManagedObjectID) {
        values.append(contentsOf: row)
        ids.append(id)
    }

    subscript(row: Int, column: Int) -> ResultValue {
        get { values[row * columns + column] }
        set { values[row * columns + column] = newValue }
    }
}

/// For each entity storage met, the column of each field number (-1 for fields not read).
struct FieldColumns {
    private var last: (storage: ObjectIdentifier, columns: [Int])?
    private var byStorage: [ObjectIdentifier: [Int]] = [:]

    mutating func columns(of storage: EntityStorage, _ columns: DictionaryColumns) -> [Int] {
        let key = ObjectIdentifier(storage)
        if let last, last.storage == key { return last.columns }
        if let known = byStorage[key] {
            last = (key, known)
            return known
        }
        var numbers: [(UInt32, Int)] = []
        for (column, property) in columns.properties.enumerated() {
            switch property {
            case .attribute(let name):
                if let slot = storage.attributeSlot(named: name), let field = storage.attributes[slot].field { numbers.append((field, column)) }
            case .toOne(let name):
                if let slot = storage.relationshipSlot(named: name), let field = storage.relationships[slot].field { numbers.append((field, column)) }
            case .toMany:
                break
            }
        }
        var map = [Int](repeating: -1, count: Int(numbers.map(\.0).max() ?? 0) + 1)
        for (number, column) in numbers { map[Int(number)] = column }
        byStorage[key] = map
        last = (key, map)
        return map
    }
}

/// The values of a group's key, NaN equal to NaN (sorting puts them together, and a
/// group of NaN is one group), everything else as `ResultValue`'s own equality.
struct GroupKey: Hashable {
    let values: [ResultValue]

    static func == (lhs: GroupKey, rhs: GroupKey) -> Bool {
        lhs.values.count == rhs.values.count && zip(lhs.values, rhs.values).allSatisfy { $0 == $1 || ($0.isNaN && $1.isNaN) }
    }

    func hash(into hasher: inout Hasher) {
        for value in values {
            if value.isNaN { hasher.combine(Double.nan.bitPattern) } else { hasher.combine(value) }
        }
    }
}

extension ResultValue {
    /// Whether the value is a NaN double or float, or a date whose time is NaN.
    var isNaN: Bool {
        switch self {
        case .attribute(.double(let value)): value.isNaN
        case .attribute(.float(let value)): value.isNaN
        case .attribute(.date(let value)): value.timeIntervalSinceReferenceDate.isNaN
        default: false
        }
    }
}

/// Groups of rows and their aggregates' running values.
struct Groups {
    private let shape: DictionaryShape
    /// Each group's key and accumulators, in the order the groups were first met.
    private var groups: [(key: [ResultValue], accumulators: [Accumulator])] = []
    /// Where each group is in ``groups``.
    private var positions: [GroupKey: Int] = [:]
    /// The accumulators of the one group of a fetch without grouped key paths.
    private var single: [Accumulator]?

    init(_ shape: DictionaryShape) {
        self.shape = shape
        if shape.groups.isEmpty { single = Self.accumulators(shape) }
    }

    /// A new accumulator for each aggregate of `shape`.
    private static func accumulators(_ shape: DictionaryShape) -> [Accumulator] {
        shape.aggregates.map { Accumulator($0.expression, type: shape.paths[$0.path].attributeType) }
    }

    /// Adds a row: `value` gives its value of each key path of the shape, by position.
    mutating func add(_ value: (Int) -> ResultValue) {
        if single != nil {
            for index in single!.indices { single![index].add(value(shape.aggregates[index].path)) }
            return
        }
        let key = shape.groups.map(value)
        let position: Int
        if let found = positions[GroupKey(values: key)] {
            position = found
        } else {
            position = groups.count
            positions[GroupKey(values: key)] = position
            groups.append((key, Self.accumulators(shape)))
        }
        for index in shape.aggregates.indices { groups[position].accumulators[index].add(value(shape.aggregates[index].path)) }
    }

    /// Each group's result values, in the order the groups were first met: the grouped
    /// key paths fetched, then the aggregates (``DictionaryShape/resultNames``' order).
    func results() throws -> [[ResultValue]] {
        let groups = single.map { [(key: [ResultValue](), accumulators: $0)] } ?? self.groups
        return try groups.map { group in
            let aggregates = try group.accumulators.map { try $0.value() }
            return shape.outputs.map { output in
                shape.groups.firstIndex(of: output.path).map { group.key[$0] } ?? .null
            } + aggregates
        }
    }
}

/// One aggregate's running value. Numbers are added by the fast path's accumulator
/// (``NumericAggregates/Accumulator``), so both paths compute alike; decimals, counts and
/// the extremes of other values are kept here.
struct Accumulator {
    let expression: ExpressionDescription
    private var numeric: NumericAggregates.Accumulator?
    private var count = 0
    private var decimal: Decimal = 0
    private var extreme: ResultValue = .null

    /// An accumulator for `expression`, whose key path ends at an attribute of `type`
    /// (nil for `self` or a relationship).
    init(_ expression: ExpressionDescription, type: AttributeType?) {
        self.expression = expression
        switch type {
        case .integer16?, .integer32?, .integer64?:
            numeric = NumericAggregates.Accumulator(function: expression.function, isInteger: true, isFloat: false)
        case .double?, .float?:
            numeric = NumericAggregates.Accumulator(function: expression.function, isInteger: false, isFloat: type == .float)
        default:
            numeric = nil
        }
    }

    mutating func add(_ value: ResultValue) {
        if case .null = value { return }
        if numeric != nil {
            switch value {
            case .attribute(.integer(let n)): numeric!.add(integer: n)
            case .attribute(.double(let d)): numeric!.add(double: d)
            case .attribute(.float(let f)): numeric!.add(double: Double(f))
            default: break
            }
            return
        }
        switch expression.function {
        case .count:
            count += 1
        case .sum, .average:
            guard case .attribute(.decimal(let d)) = value else { return }
            count += 1
            decimal += d
        case .min, .max:
            count += 1
            if case .null = extreme {
                extreme = value
                return
            }
            let order = FetchSorting.compare(value.predicateValue, extreme.predicateValue, .literal)
            if expression.function == .min ? order == .orderedAscending : order == .orderedDescending { extreme = value }
        }
    }

    /// The aggregate's value (`.null` when it has none).
    ///
    /// - Throws: ``StrataError/invalidFetchRequest(_:)`` for an integer sum beyond `Int64`.
    func value() throws -> ResultValue {
        if let numeric { return try numeric.value(named: expression.name, keyPath: expression.keyPath) }
        switch expression.function {
        case .count: return .attribute(.integer(Int64(count)))
        case .sum: return .attribute(.decimal(decimal))
        case .average: return count > 0 ? .attribute(.decimal(decimal / Decimal(count))) : .null
        case .min, .max: return extreme
        }
    }
}

/// The `havingPredicate` of a grouped fetch: its key paths name result keys, and each
/// group's result is tested by substituting their values.
struct HavingCondition {
    let node: PredicateNode

    /// - Throws: ``StrataError/invalidFetchRequest(_:)`` for a key path that is not a
    ///   result key (a grouped key path fetched, or an aggregate's name).
    init(_ predicate: FetchPredicate, names: Set<String>) throws {
        if let error = predicate.deferredError { throw error }
        func check(_ expression: PredicateExpression) throws {
            switch expression {
            case .keyPath(let components):
                let name = components.joined(separator: ".")
                guard names.contains(name) else {
                    throw StrataError.invalidFetchRequest("havingPredicate tests \(name), which is not a result key (\(names.sorted().joined(separator: ", ")))")
                }
            case .aggregate(let expressions): for inner in expressions { try check(inner) }
            case .constant, .variable: return
            }
        }
        func walk(_ node: PredicateNode) throws {
            switch node {
            case .constant: return
            case .not(let inner): try walk(inner)
            case .and(let nodes), .or(let nodes): for inner in nodes { try walk(inner) }
            case .comparison(let comparison):
                try check(comparison.left)
                try check(comparison.right)
            }
        }
        try walk(predicate.node)
        node = predicate.node
    }

    /// Whether a group with these result values meets the condition.
    func holds(_ values: [String: ResultValue]) throws -> Bool {
        func substitute(_ expression: PredicateExpression) -> PredicateExpression {
            switch expression {
            case .keyPath(let components): .constant(values[components.joined(separator: ".")]?.predicateValue ?? .null)
            case .aggregate(let expressions): .aggregate(expressions.map(substitute))
            case .constant, .variable: expression
            }
        }
        func substitute(_ node: PredicateNode) -> PredicateNode {
            switch node {
            case .constant: node
            case .not(let inner): .not(substitute(inner))
            case .and(let nodes): .and(nodes.map(substitute))
            case .or(let nodes): .or(nodes.map(substitute))
            case .comparison(let comparison): .comparison(substituted(comparison))
            }
        }
        func substituted(_ comparison: PredicateComparison) -> PredicateComparison {
            var comparison = comparison
            comparison.left = substitute(comparison.left)
            comparison.right = substitute(comparison.right)
            return comparison
        }
        return try PredicateEvaluator.evaluate(substitute(node), on: ConstantSubject())
    }
}

/// The subject of a predicate that holds only constants.
private struct ConstantSubject: PredicateSubject {
    static let entity = EntityDescription(name: "result")
    var predicateEntity: EntityDescription { Self.entity }
    var predicateObjectID: ManagedObjectID { ManagedObjectID(storeNumber: 0, entityName: "result", primaryKey: 0) }
    func predicateAttribute(_ name: String) throws -> AttributeValue? { nil }
    func predicateDestinations(_ name: String) throws -> [ConstantSubject] { [] }
}
