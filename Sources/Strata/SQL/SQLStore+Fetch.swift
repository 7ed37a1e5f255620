import Foundation

/// Fetches: a request's predicate and sort descriptors compiled to SQL with bound
/// parameters, and what cannot be compiled evaluated in memory by the one evaluator
/// (``PredicateEvaluator``) after a query that returns a superset.
extension SQLStore {
    /// How a fetch reads one table.
    struct TableQuery: CustomStringConvertible {
        let table: SQLTable
        /// The compiled conditions (`TRUE` when none), with `$n` placeholders.
        let condition: String
        /// The bound values of ``condition``.
        let binds: [SQLValue]
        /// The conjuncts tested in memory on each row the query returns; nil when none.
        let residue: PredicateNode?
        /// The compiled `ORDER BY` terms; nil when the order is made in memory.
        let order: [String]?

        var description: String {
            var text = "SELECT FROM \(table.tableName) WHERE \(condition)"
            if let order { text += " ORDER BY " + order.joined(separator: ", ") }
            if let residue { text += "; FILTER IN MEMORY \(FetchPredicate(node: residue))" }
            return text
        }
    }

    /// The queries of `request`, one per table of its entity (and sub-entities), and
    /// whether they put their rows in the request's order on their own.
    func queries(for request: FetchRequest<some Any>) throws -> (queries: [TableQuery], sortsInMemory: Bool) {
        if let error = request.predicate?.deferredError { throw error }
        let tables = layout.tables(for: request.entityName, includesSubentities: request.includesSubentities, in: model)
        var queries: [TableQuery] = []
        var sortsInMemory = false
        for table in tables {
            var compiler = SQLPredicateCompiler(store: self, table: table)
            var conditions: [String] = []
            var residue: [PredicateNode] = []
            for conjunct in request.predicate?.node.conjuncts ?? [] {
                if let compiled = compiler.compile(conjunct) {
                    conditions.append(compiled.sql)
                    if !compiled.exact { residue.append(conjunct) }
                } else {
                    residue.append(conjunct)
                }
            }
            var order: [String]? = []
            for descriptor in request.sortDescriptors {
                guard let term = compiler.orderTerm(descriptor) else {
                    order = nil
                    break
                }
                order?.append(term)
            }
            order?.append(SQLName.quoted(SQLLayout.keyColumn))
            if order == nil { sortsInMemory = true }
            queries.append(TableQuery(
                table: table, condition: conditions.isEmpty ? "TRUE" : conditions.joined(separator: " AND "), binds: compiler.binds,
                residue: residue.isEmpty ? nil : (residue.count == 1 ? residue[0] : .and(residue)), order: order))
        }
        return (queries, sortsInMemory)
    }

    /// How `request` would run: each table's SQL and what is tested or sorted in memory.
    func explain(_ request: FetchRequest<some Any>) throws -> String {
        let (queries, sortsInMemory) = try queries(for: request)
        var lines = queries.map(\.description)
        if queries.count > 1 || sortsInMemory || queries.contains(where: { $0.residue != nil }) {
            if sortsInMemory || (queries.count > 1 && !request.sortDescriptors.isEmpty) { lines.append("SORT IN MEMORY") }
            if queries.count > 1 || queries.contains(where: { $0.residue != nil }) {
                if request.fetchLimit > 0 || request.fetchOffset > 0 { lines.append("WINDOW IN MEMORY") }
            }
        } else if request.fetchLimit > 0 || request.fetchOffset > 0 {
            lines.append("LIMIT \(request.fetchLimit > 0 ? "\(request.fetchLimit)" : "ALL") OFFSET \(max(0, request.fetchOffset))")
        }
        return lines.joined(separator: "\n")
    }

    /// Runs `request`: snapshots of the matching rows (for objects and dictionaries), their
    /// IDs, or their count, in the request's order and window.
    ///
    /// - Throws: ``StrataError`` for a row that does not decode or a server failure;
    ///   ``FetchPredicateError`` for what the evaluator refuses.
    func fetch(_ request: FetchRequest<some Any>, in pinned: SQLSnapshot? = nil) throws -> FetchRows {
        try withConnectionPassingErrors(in: pinned) { connection throws -> FetchRows in try fetch(request, on: connection) }
    }

    /// ``fetch(_:in:)`` on `connection` (in its transaction, if it is in one).
    func fetch(_ request: FetchRequest<some Any>, on connection: any SQLConnection) throws -> FetchRows {
        let (queries, sortsInMemory) = try queries(for: request)
        let offset = max(0, request.fetchOffset)
        let limit = request.fetchLimit > 0 ? request.fetchLimit : nil
        guard !queries.isEmpty else { return request.resultType == .count ? .count(0) : .snapshots([]) }
        do {
            // One query does everything when one table answers and nothing is left to memory.
            if queries.count == 1, let query = queries.first, query.residue == nil, let order = query.order {
                var window = ""
                if let limit { window += " LIMIT \(limit)" }
                if offset > 0 { window += " OFFSET \(offset)" }
                switch request.resultType {
                case .count:
                    let sql = "SELECT count(*) FROM (SELECT 1 FROM \(query.table.name) WHERE \(query.condition)\(window)) AS matches"
                    return .count(Int(try connection.execute(sql, query.binds).rows.first?.first?.integer ?? 0))
                case .managedObjectID:
                    let sql = "SELECT \(SQLName.quoted(SQLLayout.keyColumn)) FROM \(query.table.name) WHERE \(query.condition) ORDER BY \(order.joined(separator: ", "))\(window)"
                    return .objectIDs(try connection.execute(sql, query.binds).rows.compactMap { row in
                        row.first?.integer.flatMap { PrimaryKey(UInt64(bitPattern: $0)) }.map { objectID(entity: query.table.storage.name, key: $0) }
                    })
                case .managedObject, .dictionary:
                    let sql = "SELECT \(query.table.selectList) FROM \(query.table.name) WHERE \(query.condition) ORDER BY \(order.joined(separator: ", "))\(window)"
                    return .snapshots(try connection.execute(sql, query.binds).rows.map { row throws(StrataError) in try snapshot(of: row, table: query.table) })
                }
            }
            // Otherwise every table's candidates, tested, ordered and windowed here.
            var matches: [ObjectSnapshot] = []
            let loader = SQLRowLoader(store: self, connection: connection)
            for query in queries {
                let orderClause = query.order.map { " ORDER BY " + $0.joined(separator: ", ") } ?? ""
                let sql = "SELECT \(query.table.selectList) FROM \(query.table.name) WHERE \(query.condition)\(orderClause)"
                for row in try connection.execute(sql, query.binds).rows {
                    let snapshot = try snapshot(of: row, table: query.table)
                    if let residue = query.residue {
                        loader.remember(snapshot)
                        guard try PredicateEvaluator.evaluate(residue, on: try loader.subject(snapshot)) else { continue }
                    }
                    matches.append(snapshot)
                }
            }
            if sortsInMemory || queries.count > 1 {
                var failure: (any Error)?
                let subjects = try matches.map { try loader.subject($0) }
                let order = subjects.indices.sorted { a, b in
                    do {
                        return try FetchSorting.precedes(subjects[a], subjects[b], by: request.sortDescriptors)
                    } catch {
                        failure = failure ?? error
                        return false
                    }
                }
                if let failure { throw failure }
                matches = order.map { matches[$0] }
            }
            let window = matches.dropFirst(offset).prefix(limit ?? Int.max)
            switch request.resultType {
            case .count: return .count(window.count)
            case .managedObjectID: return .objectIDs(window.map(\.objectID))
            case .managedObject, .dictionary: return .snapshots(Array(window))
            }
        }
    }
}

/// Rows read during one fetch for the evaluator (relationships of the rows it tests and
/// sorts), on the fetch's connection, each read once: the subjects it makes are
/// ``StoredRowSubject``s, as an LMDB fetch's are.
final class SQLRowLoader: StoredRowLoader {
    let store: SQLStore
    let connection: any SQLConnection
    private var rows: [ManagedObjectID: ObjectSnapshot?] = [:]
    private var toMany: [ManagedObjectID: [String: [ManagedObjectID]]] = [:]

    init(store: SQLStore, connection: any SQLConnection) {
        self.store = store
        self.connection = connection
    }

    /// Keeps a row already read.
    func remember(_ snapshot: ObjectSnapshot) {
        rows[snapshot.objectID] = snapshot
    }

    /// A subject for a row already read.
    func subject(_ snapshot: ObjectSnapshot) throws -> StoredRowSubject<SQLRowLoader> {
        guard let entity = store.model.entitiesByName[snapshot.objectID.entityName] else {
            throw StrataError.unknownEntity(snapshot.objectID.entityName)
        }
        return StoredRowSubject(loader: self, snapshot: snapshot, entity: entity)
    }

    /// The row of `id`, nil when it does not exist.
    func snapshot(of id: ManagedObjectID) throws -> ObjectSnapshot? {
        if let known = rows[id] { return known }
        let snapshot = try store.snapshots(of: [id], on: connection).first
        rows[id] = snapshot
        return snapshot
    }

    /// The destinations of to-many relationship `name` of `id`.
    func destinations(of id: ManagedObjectID, relationship name: String) throws -> [ManagedObjectID] {
        if let known = toMany[id]?[name] { return known }
        let ids = try store.destinations(of: [id], relationship: name, on: connection)[id] ?? []
        toMany[id, default: [:]][name] = ids
        return ids
    }
}

/// Compiles predicate nodes to SQL conditions over one table, binding every value.
///
/// A compiled condition means what the evaluator means, where "nil compares only with
/// nil": a comparison with a NULL operand is false. Where a condition is not negated,
/// SQL's NULL already excludes the row as false would (through `AND` and `OR` too), so
/// comparisons stay bare and the server can use the column's index; under a `NOT`, each is
/// made two-valued (`COALESCE(..., FALSE)`) so that the negation keeps the meaning. What
/// it cannot express exactly (key paths through relationships, `[c]`/`[d]` options, `MATCHES`, aggregates,
/// quantifiers, decimals and URIs) is left to memory; a few conditions compile to a
/// superset (`exact` false) and are tested in memory too.
struct SQLPredicateCompiler {
    let store: SQLStore
    let table: SQLTable
    /// The values bound so far (`$1` is the first).
    private(set) var binds: [SQLValue] = []
    /// Whether the node being compiled is under an odd number of `NOT`s.
    private var negated = false

    init(store: SQLStore, table: SQLTable) {
        self.store = store
        self.table = table
    }

    /// Binds `value` and returns its placeholder.
    private mutating func bind(_ value: SQLValue) -> String {
        binds.append(value)
        return "$\(binds.count)"
    }

    /// `node` as a condition, or nil when it cannot be compiled; `exact` false when the
    /// condition only narrows the rows to a superset of the matches.
    mutating func compile(_ node: PredicateNode) -> (sql: String, exact: Bool)? {
        let mark = binds.count
        guard let result = compileNode(node) else {
            binds.removeLast(binds.count - mark)
            return nil
        }
        return result
    }

    private mutating func compileNode(_ node: PredicateNode) -> (sql: String, exact: Bool)? {
        switch node {
        case .constant(let value):
            return (value ? "TRUE" : "FALSE", true)
        case .not(let inner):
            // The negation of a superset is not a superset: only an exact condition negates.
            negated.toggle()
            defer { negated.toggle() }
            guard let compiled = compileNode(inner), compiled.exact else { return nil }
            return ("(NOT \(compiled.sql))", true)
        case .and(let nodes):
            var parts: [String] = []
            var exact = true
            for inner in nodes {
                // A conjunct left out only widens the result: the whole AND stays a superset.
                if let compiled = compileNode(inner) {
                    parts.append(compiled.sql)
                    exact = exact && compiled.exact
                } else {
                    exact = false
                }
            }
            return (parts.isEmpty ? "TRUE" : "(" + parts.joined(separator: " AND ") + ")", exact)
        case .or(let nodes):
            var parts: [String] = []
            var exact = true
            for inner in nodes {
                guard let compiled = compileNode(inner) else { return nil }
                parts.append(compiled.sql)
                exact = exact && compiled.exact
            }
            return (parts.isEmpty ? "FALSE" : "(" + parts.joined(separator: " OR ") + ")", exact)
        case .comparison(let comparison):
            return compileComparison(comparison)
        }
    }

    private mutating func compileComparison(_ comparison: PredicateComparison) -> (sql: String, exact: Bool)? {
        guard comparison.modifier == .direct else { return nil }
        var comparison = comparison
        if case .constant = comparison.left, case .keyPath = comparison.right, let flipped = Self.flipped(comparison.op) {
            swap(&comparison.left, &comparison.right)
            comparison.op = flipped
        }
        guard case .keyPath(let path) = comparison.left, case .constant(let value) = comparison.right else { return nil }
        let components = path.first == "SELF" ? Array(path.dropFirst()) : path
        guard components.count == 1, let name = components.first else { return nil }
        let storage = table.storage
        if let slot = storage.attributeSlot(named: name), let column = table.attributeColumns[slot] {
            guard comparison.options.isEmpty || comparison.op == .matches else { return nil }
            return compileAttribute(SQLName.quoted(column.name), type: storage.attributes[slot].type, comparison.op, value)
        }
        if let slot = storage.relationshipSlot(named: name), let column = table.toOneColumns[slot] {
            return compileToOne(column, comparison.op, value)
        }
        return nil
    }

    private static func flipped(_ op: PredicateComparison.Operator) -> PredicateComparison.Operator? {
        switch op {
        case .equal: .equal
        case .notEqual: .notEqual
        case .less: .greater
        case .lessOrEqual: .greaterOrEqual
        case .greater: .less
        case .greaterOrEqual: .lessOrEqual
        default: nil
        }
    }

    /// `condition` as the comparison's SQL: bare where nothing negates it (a NULL then
    /// excludes the row as false does, and the column's index serves), two-valued under a
    /// `NOT`.
    private func comparison(_ condition: String) -> String {
        negated ? "COALESCE(\(condition), FALSE)" : "(\(condition))"
    }

    /// A comparison of attribute column `column` with a constant.
    private mutating func compileAttribute(
        _ column: String, type: AttributeType, _ op: PredicateComparison.Operator, _ value: PredicateValue
    ) -> (sql: String, exact: Bool)? {
        let isFloating = type == .double || type == .float
        let collate = type == .string ? " COLLATE \"C\"" : ""
        // The evaluator orders a NaN with nothing; PostgreSQL puts it above every number.
        let notNaN = isFloating ? " AND \(column) <> 'NaN'" : ""
        switch op {
        case .equal, .notEqual, .less, .lessOrEqual, .greater, .greaterOrEqual:
            if case .null = value {
                switch op {
                case .equal: return ("(\(column) IS NULL)", true)
                case .notEqual: return ("(\(column) IS NOT NULL)", true)
                default: return ("FALSE", true)
                }
            }
            guard let bound = Self.sqlValue(value, for: type) else { return nil }
            if op == .notEqual {
                // Not equal: true for nil too (nil equals only nil), false for NaN on neither side.
                if isFloating { return ("(\(column) IS NULL OR \(column) = 'NaN' OR \(column) <> \(bind(bound)))", true) }
                return ("(\(column) IS DISTINCT FROM \(bind(bound)))", true)
            }
            if [.less, .lessOrEqual, .greater, .greaterOrEqual].contains(op), ![.string, .date, .integer16, .integer32, .integer64, .double, .float, .binaryData].contains(type) {
                return nil
            }
            let sqlOp = op == .equal ? "=" : op.rawValue
            return (comparison("\(column)\(collate) \(sqlOp) \(bind(bound))\(notNaN)"), true)
        case .between:
            guard case .array(let bounds) = value, bounds.count == 2, [.string, .date, .integer16, .integer32, .integer64, .double, .float].contains(type),
                  let low = Self.sqlValue(bounds[0], for: type), let high = Self.sqlValue(bounds[1], for: type)
            else { return nil }
            return (comparison("\(column)\(collate) >= \(bind(low)) AND \(column)\(collate) <= \(bind(high))\(notNaN)"), true)
        case .in:
            guard case .array(let members) = value else { return nil }
            var placeholders: [String] = []
            var includesNil = false
            for member in members {
                if case .null = member {
                    includesNil = true
                    continue
                }
                guard let bound = Self.sqlValue(member, for: type) else { return nil }
                placeholders.append(bind(bound))
            }
            var parts: [String] = []
            if !placeholders.isEmpty { parts.append(comparison("\(column)\(collate) IN (\(placeholders.joined(separator: ", ")))\(notNaN)")) }
            if includesNil { parts.append("\(column) IS NULL") }
            return (parts.isEmpty ? "FALSE" : "(" + parts.joined(separator: " OR ") + ")", true)
        case .beginsWith, .endsWith, .contains, .like:
            guard type == .string, case .string(let text) = value else { return nil }
            switch op {
            case .beginsWith:
                return (comparison("starts_with(\(column), \(bind(.text(text))))"), true)
            case .endsWith:
                let placeholder = bind(.text(text))
                return (comparison("right(\(column), char_length(\(placeholder))) = \(placeholder)"), true)
            case .contains:
                // The evaluator matches whole characters (canonically equivalent ones too):
                // bytes found are a superset of its matches only for an ASCII needle.
                guard text.utf8.allSatisfy({ $0 < 0x80 }) else { return nil }
                return (comparison("strpos(\(column), \(bind(.text(text)))) > 0"), false)
            default:
                return (comparison("\(column) LIKE \(bind(.text(Self.likePattern(text)))) ESCAPE '\\'"), true)
            }
        case .matches:
            return nil
        }
    }

    /// A comparison of to-one column `column` with an object ID or nil.
    private mutating func compileToOne(_ column: SQLColumn, _ op: PredicateComparison.Operator, _ value: PredicateValue) -> (sql: String, exact: Bool)? {
        guard op == .equal || op == .notEqual else { return nil }
        let name = SQLName.quoted(column.name)
        let equal: String
        switch value {
        case .null:
            equal = "(\(name) IS NULL)"
        case .objectID(let id):
            guard id.storeIdentifier == store.identifier, let key = id.primaryKey, let storage = store.entities[id.entityName] else {
                equal = "FALSE"   // an object of another store, or a new one: no row refers to it
                break
            }
            // Under the NOT of `!=`, as under any NOT, the comparison is two-valued.
            let twoValued = negated || op == .notEqual
            func compared(_ condition: String) -> String { twoValued ? "COALESCE(\(condition), FALSE)" : "(\(condition))" }
            var sql = compared("\(name) = \(bind(.int64(Int64(bitPattern: key.rawValue))))")
            if case .toOne(_, nil, _) = column.kind {
                sql = "(\(sql) AND \(compared("\(SQLName.quoted(column.name + "._entity")) = \(bind(.int16(Int16(bitPattern: storage.number))))")))"
            } else if case .toOne(_, let destination?, _) = column.kind, destination != id.entityName {
                sql = "FALSE"
            }
            equal = sql
        default:
            return nil
        }
        return (op == .equal ? equal : "(NOT \(equal))", true)
    }

    /// An `ORDER BY` term for `descriptor`, or nil when it must be sorted in memory.
    mutating func orderTerm(_ descriptor: FetchSortDescriptor) -> String? {
        guard descriptor.deferredError == nil, descriptor.comparison == .literal else { return nil }
        let components = descriptor.components.first == "SELF" ? Array(descriptor.components.dropFirst()) : descriptor.components
        guard components.count == 1, let slot = table.storage.attributeSlot(named: components[0]),
              let column = table.attributeColumns[slot]
        else { return nil }
        let type = table.storage.attributes[slot].type
        guard [.string, .date, .integer16, .integer32, .integer64, .double, .float, .boolean, .binaryData, .uuid].contains(type) else { return nil }
        let collate = type == .string ? " COLLATE \"C\"" : ""
        // The evaluator puts nil first in ascending order.
        return "\(SQLName.quoted(column.name))\(collate) " + (descriptor.ascending ? "ASC NULLS FIRST" : "DESC NULLS LAST")
    }

    /// The SQL value of a predicate constant compared with an attribute of `type`, when
    /// PostgreSQL compares them as the evaluator does; nil otherwise.
    static func sqlValue(_ value: PredicateValue, for type: AttributeType) -> SQLValue? {
        switch (value, type) {
        case (.integer(let n), .integer16), (.integer(let n), .integer32), (.integer(let n), .integer64): return .int64(n)
        case (.double(let d), .integer16), (.double(let d), .integer32), (.double(let d), .integer64):
            return d.isNaN ? nil : .double(d)
        case (.integer(let n), .double), (.integer(let n), .float): return .double(Double(n))
        case (.double(let d), .double), (.double(let d), .float): return d.isNaN ? nil : .double(d)
        case (.bool(let b), .boolean): return .bool(b)
        case (.integer(let n), .boolean) where n == 0 || n == 1: return .bool(n == 1)
        case (.string(let s), .string): return .text(s)
        case (.date(let date), .date): return date.timeIntervalSinceReferenceDate.isNaN ? nil : .timestamp(date)
        case (.uuid(let uuid), .uuid): return .uuid(uuid)
        case (.data(let data), .binaryData): return .bytes([UInt8](data))
        default: return nil
        }
    }

    /// A LIKE pattern of the predicate language (`*` any run, `?` one character) as SQL's,
    /// with `%`, `_` and `\` escaped.
    static func likePattern(_ pattern: String) -> String {
        var result = ""
        for character in pattern.unicodeScalars {
            switch character {
            case "*": result += "%"
            case "?": result += "_"
            case "%", "_", "\\": result += "\\" + String(character)
            default: result.unicodeScalars.append(character)
            }
        }
        return result
    }
}
