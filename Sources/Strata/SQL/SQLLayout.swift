import Foundation

/// How a model is laid out in a SQL database (the "Running on PostgreSQL" article):
///
/// | model | SQL |
/// | --- | --- |
/// | a concrete entity `Note` | table `"Note"`: `"_pk" bigint PRIMARY KEY`, `"_version" bigint NOT NULL`, a column per stored attribute and per to-one relationship (inherited ones too) |
/// | an attribute | a column of its name and natural type (`bigint`, `text`, `timestamptz`, `bytea`, ...) |
/// | an indexed attribute | an index `"Note.title.index"` |
/// | a uniqueness constraint | a unique index over its columns (per table: across an entity hierarchy's tables, saves check every table under an advisory lock) |
/// | a to-one relationship `folder` | column `"folder"` (the destination's `_pk`), with a deferred foreign key when every destination lives in one table; else also `"folder._entity"` (the destination's entity number) |
/// | a to-many relationship whose inverse is to-one | nothing: the inverse's column holds it |
/// | a many-to-many or ordered to-many relationship `tags` | table `"Note.tags"`: `owner`, `destination`, `destination_entity`, `position` |
/// | new primary keys | a sequence per entity, `"Note._keys"`, handing out blocks of ``keyBlockSize`` |
/// | the store's identity and model | table `"strata_metadata"` |
///
/// Names are quoted, so any model name works; a name longer than PostgreSQL's 63 bytes
/// is refused when the store opens (PostgreSQL would cut it silently).
struct SQLLayout: Sendable {
    /// How many primary keys one `nextval` reserves.
    static let keyBlockSize: Int64 = 64
    /// The metadata table.
    static let metadataTable = "strata_metadata"
    /// The primary-key column.
    static let keyColumn = "_pk"
    /// The row-version column.
    static let versionColumn = "_version"

    /// The schema (namespace), quoted.
    let schema: String
    /// The tables of the concrete entities, by entity name.
    let tables: [String: SQLTable]
    /// The tables by entity number.
    let tablesByNumber: [UInt16: SQLTable]

    /// `"schema"."name"`.
    func qualified(_ name: String) -> String { schema + "." + SQLName.quoted(name) }

    // MARK: The model guard

    /// The run-time parameter in which an instance's connections carry the version hash of
    /// the model it runs (a startup parameter: no round trip).
    static let guardSetting = "strata.model"
    /// The function and the statement triggers that refuse writes of an instance running
    /// another model than the store's: every table of the store has the trigger.
    static let guardName = "strata_model_guard"
    /// The SQLSTATE the guard raises; its message ends with the store's version hash.
    static let guardState = "SM001"

    /// `CREATE OR REPLACE FUNCTION` of the guard for a store holding the model of `hash`
    /// (a version hash: hex digits, checked, so that it can be written in the statement).
    /// A connection whose ``guardSetting`` names another model is refused; one without
    /// the setting (a tool, a person at `psql`) is not.
    func guardFunctionStatement(hash: String) -> String { Self.guardFunctionStatement(schema: schema, hash: hash) }

    /// ``guardFunctionStatement(hash:)`` in `schema` (quoted).
    static func guardFunctionStatement(schema: String, hash: String) -> String {
        let literal = hash.allSatisfy(\.isHexDigit) ? hash : ""
        return """
            CREATE OR REPLACE FUNCTION \(schema).\(SQLName.quoted(guardName))() RETURNS trigger LANGUAGE plpgsql AS $guard$
            BEGIN
                IF coalesce(current_setting('\(guardSetting)', true), '') NOT IN ('', '\(literal)') THEN
                    RAISE EXCEPTION 'this instance runs model % but the store holds model \(literal)', current_setting('\(guardSetting)', true)
                        USING ERRCODE = '\(guardState)';
                END IF;
                RETURN NULL;
            END
            $guard$
            """
    }

    /// `CREATE TRIGGER` of the guard on `table` (qualified, quoted): once per statement
    /// that writes it.
    func guardTriggerStatement(on table: String) -> String {
        "CREATE TRIGGER \(SQLName.quoted(Self.guardName)) BEFORE INSERT OR UPDATE OR DELETE ON \(table) "
            + "FOR EACH STATEMENT EXECUTE FUNCTION \(qualified(Self.guardName))()"
    }

    /// Every table of the layout (entity tables and join tables), qualified and quoted.
    var allTables: [String] {
        tables.values.sorted { $0.tableName < $1.tableName }.flatMap { [$0.name] + $0.links.map(\.name) }
    }

    /// Lays out `model`'s concrete entities among `entityNames`, numbered by `storeSchema`.
    ///
    /// - Throws: ``StrataError/incompatibleStore(store:reason:)`` for a name PostgreSQL
    ///   would cut, or a property named like one of the store's own columns.
    init(
        model: ManagedObjectModel, entities: [String: EntityStorage], entityNames: Set<String>, schema: String, location: String
    ) throws(StrataError) {
        self.schema = SQLName.quoted(schema)
        var tables: [String: SQLTable] = [:]
        for name in entityNames.sorted() {
            guard let storage = entities[name], !storage.entity.isAbstract else { continue }
            tables[name] = try SQLTable(storage: storage, model: model, entities: entities, schema: self.schema, location: location)
        }
        self.tables = tables
        tablesByNumber = Dictionary(uniqueKeysWithValues: tables.values.map { ($0.storage.number, $0) })
    }

    /// The tables of `entityName` and (with `includesSubentities`) of its sub-entities,
    /// in entity-name order (the store order of their rows).
    func tables(for entityName: String, includesSubentities: Bool, in model: ManagedObjectModel) -> [SQLTable] {
        let names = includesSubentities ? model.entityNames(kindOf: entityName) : [entityName]
        return names.sorted().compactMap { tables[$0] }
    }

    /// The statements that create every table, sequence and index of the store, in order,
    /// guarded for the model of `hash` (``guardFunctionStatement(hash:)``).
    func creationStatements(hash: String) -> [String] {
        var statements: [String] = [guardFunctionStatement(hash: hash)]
        for table in tables.values.sorted(by: { $0.storage.name < $1.storage.name }) {
            statements += creationStatements(of: table)
        }
        // Foreign keys last: every table they name exists by then.
        for table in tables.values.sorted(by: { $0.storage.name < $1.storage.name }) {
            statements += table.foreignKeyStatements(layout: self)
        }
        return statements
    }

    /// The statements that create `table`, its key sequence, its indexes and its join
    /// tables (not its foreign keys).
    func creationStatements(of table: SQLTable) -> [String] {
        [table.createStatement, "CREATE SEQUENCE \(qualified(table.sequenceName)) INCREMENT BY \(Self.keyBlockSize) START WITH 1"]
            + table.indexStatements + table.links.map { $0.createStatement(owner: table) }
            + ([table.name] + table.links.map(\.name)).map(guardTriggerStatement(on:))
    }
}

/// One concrete entity's table (a class: a save looks it up for every row, and a struct
/// this size would be copied each time).
final class SQLTable: Sendable {
    /// How the entity is stored (numbers and slots).
    let storage: EntityStorage
    /// The table, schema-qualified and quoted.
    let name: String
    /// The table's unqualified name (the entity's).
    let tableName: String
    /// The schema, quoted.
    let schema: String
    /// The stored columns after `_pk` and `_version`, in the order of ``selectList``.
    let columns: [SQLColumn]
    /// `"_pk", "_version", "title", ...`: what every read of whole rows selects.
    let selectList: String
    /// The join tables of this entity's many-to-many and ordered to-many relationships.
    let links: [SQLLink]
    /// Join tables by relationship slot.
    let linksBySlot: [Int: SQLLink]
    /// The column of each attribute slot (stored attributes only).
    let attributeColumns: [Int: SQLColumn]
    /// The column of each to-one relationship slot.
    let toOneColumns: [Int: SQLColumn]
    /// The name of the primary-key sequence.
    var sequenceName: String { tableName + "._keys" }

    init(storage: EntityStorage, model: ManagedObjectModel, entities: [String: EntityStorage], schema: String, location: String) throws(StrataError) {
        self.storage = storage
        self.schema = schema
        tableName = storage.name
        name = schema + "." + SQLName.quoted(storage.name)
        var columns: [SQLColumn] = []
        var attributeColumns: [Int: SQLColumn] = [:]
        var toOneColumns: [Int: SQLColumn] = [:]
        var used: Set<String> = [SQLLayout.keyColumn, SQLLayout.versionColumn]
        func check(_ name: String, what: String) throws(StrataError) {
            guard name.utf8.count <= SQLName.maximumLength else {
                throw .incompatibleStore(store: location, reason: "\(what) '\(name)' is longer than PostgreSQL's \(SQLName.maximumLength) bytes")
            }
            guard used.insert(name).inserted else {
                throw .incompatibleStore(store: location, reason: "\(what) '\(name)' of entity \(storage.name) clashes with a column of the store")
            }
        }
        try check(storage.name, what: "entity")
        used = [SQLLayout.keyColumn, SQLLayout.versionColumn]
        for (number, field) in storage.fieldOrder {
            switch field {
            case .attribute(let slot):
                let attribute = storage.attributes[slot].description
                try check(attribute.name, what: "attribute")
                let column = SQLColumn(
                    name: attribute.name, kind: .attribute(slot: slot, type: attribute.type), field: number, position: columns.count)
                columns.append(column)
                attributeColumns[slot] = column
            case .relationship(let slot):
                let relationship = storage.relationships[slot].description
                try check(relationship.name, what: "relationship")
                let destinations = model.entityNames(kindOf: relationship.destinationEntityName)
                    .filter { model.entitiesByName[$0].map { !$0.isAbstract } ?? false }.sorted()
                let single = destinations.count == 1 ? entities[destinations[0]] : nil
                if single == nil { try check(relationship.name + "._entity", what: "relationship") }
                let column = SQLColumn(
                    name: relationship.name,
                    kind: .toOne(slot: slot, destination: single?.name, destinationEntity: single?.number),
                    field: number, position: columns.count)
                columns.append(column)
                toOneColumns[slot] = column
            }
        }
        self.columns = columns
        self.attributeColumns = attributeColumns
        self.toOneColumns = toOneColumns
        var parts = [SQLName.quoted(SQLLayout.keyColumn), SQLName.quoted(SQLLayout.versionColumn)]
        for column in columns { parts += column.sqlNames.map(SQLName.quoted) }
        selectList = parts.joined(separator: ", ")
        var links: [SQLLink] = []
        for (slot, stored) in storage.relationships.enumerated() {
            let shape = stored.shape
            guard shape == .manyToMany || (shape == .oneToMany && stored.description.isOrdered) else { continue }
            let linkName = storage.name + "." + stored.description.name
            guard linkName.utf8.count <= SQLName.maximumLength else {
                throw .incompatibleStore(store: location, reason: "join table '\(linkName)' is longer than PostgreSQL's \(SQLName.maximumLength) bytes")
            }
            links.append(SQLLink(slot: slot, relationship: stored.description, tableName: linkName, name: schema + "." + SQLName.quoted(linkName)))
        }
        self.links = links
        linksBySlot = Dictionary(uniqueKeysWithValues: links.map { ($0.slot, $0) })
    }

    /// `CREATE TABLE ...`.
    var createStatement: String {
        var definitions = [
            "\(SQLName.quoted(SQLLayout.keyColumn)) bigint PRIMARY KEY",
            "\(SQLName.quoted(SQLLayout.versionColumn)) bigint NOT NULL",
        ]
        for column in columns {
            switch column.kind {
            case .attribute(_, let type):
                definitions.append("\(SQLName.quoted(column.name)) \(SQLColumn.sqlType(of: type))")
            case .toOne(_, let destination, _):
                definitions.append("\(SQLName.quoted(column.name)) bigint")
                if destination == nil { definitions.append("\(SQLName.quoted(column.name + "._entity")) smallint") }
            }
        }
        return "CREATE TABLE \(name) (\(definitions.joined(separator: ", ")))"
    }

    /// The indexes of indexed attributes and uniqueness constraints, and of to-one
    /// columns (a to-many relationship is read through its inverse's column).
    var indexes: [SQLIndex] {
        var indexes: [SQLIndex] = []
        for column in columns {
            switch column.kind {
            case .attribute(let slot, let type):
                guard storage.attributes[slot].description.isIndexed else { continue }
                // Text in byte order, as fetches compare and sort it (`COLLATE "C"`): so the index serves them.
                indexes.append(SQLIndex(
                    name: indexName("i\(column.field)"), isUnique: false, fields: [column.field], columns: [column.name],
                    isBinaryCollated: type == .string))
            case .toOne:
                indexes.append(SQLIndex(name: indexName("r\(column.field)"), isUnique: false, fields: [column.field], columns: [column.name]))
            }
        }
        for (index, constraint) in storage.entity.uniquenessConstraints.enumerated() {
            let fields = constraint.compactMap { name in columns.first { $0.name == name }?.field }
            indexes.append(SQLIndex(name: indexName("u\(index)"), isUnique: true, fields: fields, columns: constraint))
        }
        return indexes
    }

    /// `CREATE INDEX` statements of ``indexes``.
    var indexStatements: [String] { indexes.map { $0.createStatement(on: name) } }

    /// An index or constraint name unique in the schema and short enough: the entity's
    /// number and a tag.
    func indexName(_ tag: String) -> String { "strata_\(storage.number)_\(tag)" }

    /// The deferred foreign keys of to-one columns whose destinations live in one table.
    func foreignKeys(layout: SQLLayout) -> [SQLForeignKey] {
        columns.compactMap { column in
            guard case .toOne(_, let destination?, _) = column.kind, let table = layout.tables[destination] else { return nil }
            return SQLForeignKey(name: indexName("f\(column.field)"), column: column.name, destination: table.storage.number, destinationTable: table.name)
        }
    }

    /// `ALTER TABLE ... ADD CONSTRAINT` statements of ``foreignKeys(layout:)``.
    func foreignKeyStatements(layout: SQLLayout) -> [String] {
        foreignKeys(layout: layout).map { $0.addStatement(on: name) }
    }
}

/// An index of a ``SQLTable``.
struct SQLIndex: Sendable, Hashable {
    /// Its name (unqualified: an index lives in its table's schema).
    let name: String
    let isUnique: Bool
    /// The field numbers of its columns: what a migration compares (names change with renames).
    let fields: [UInt32]
    /// Its columns' names.
    let columns: [String]
    /// Whether its (text) columns are in byte order (`COLLATE "C"`), the order fetches
    /// compare and sort text in.
    var isBinaryCollated = false

    /// `CREATE [UNIQUE] INDEX ...` on `table` (qualified, quoted).
    func createStatement(on table: String) -> String {
        let collate = isBinaryCollated ? " COLLATE \"C\"" : ""
        return "CREATE \(isUnique ? "UNIQUE " : "")INDEX \(SQLName.quoted(name)) ON \(table) (\(columns.map { SQLName.quoted($0) + collate }.joined(separator: ", ")))"
    }
}

/// A to-one column's foreign key (deferred: a save writes rows in any order).
struct SQLForeignKey: Sendable, Hashable {
    /// The constraint's name.
    let name: String
    /// The to-one column.
    let column: String
    /// The destination's entity number.
    let destination: UInt16
    /// The destination's table, qualified and quoted.
    let destinationTable: String

    /// `ALTER TABLE ... ADD CONSTRAINT ...` on `table` (qualified, quoted).
    func addStatement(on table: String) -> String {
        "ALTER TABLE \(table) ADD CONSTRAINT \(SQLName.quoted(name)) FOREIGN KEY (\(SQLName.quoted(column))) "
            + "REFERENCES \(destinationTable) (\(SQLName.quoted(SQLLayout.keyColumn))) DEFERRABLE INITIALLY DEFERRED"
    }
}

/// One stored column (or pair of columns, for a to-one relationship whose destinations
/// live in several tables) of a ``SQLTable``.
struct SQLColumn: Sendable {
    enum Kind: Sendable {
        /// Attribute `slot`, of `type`.
        case attribute(slot: Int, type: AttributeType)
        /// To-one relationship `slot`: the destination's primary key, and its entity when
        /// `destination` is nil (several tables).
        case toOne(slot: Int, destination: String?, destinationEntity: UInt16?)
    }

    /// The property's name (the column's).
    let name: String
    let kind: Kind
    /// The property's field number in the store schema.
    let field: UInt32
    /// The column's position among the table's stored columns.
    let position: Int
    /// ``name`` quoted, and the entity column's name (`"folder._entity"`) quoted: made
    /// once, as a save names the columns of every row.
    let quoted: String, quotedEntity: String

    init(name: String, kind: Kind, field: UInt32, position: Int) {
        self.name = name
        self.kind = kind
        self.field = field
        self.position = position
        quoted = SQLName.quoted(name)
        quotedEntity = SQLName.quoted(name + "._entity")
    }

    /// The SQL column names: one, or two for a to-one relationship to several tables.
    var sqlNames: [String] {
        if case .toOne(_, nil, _) = kind { return [name, name + "._entity"] }
        return [name]
    }

    /// The natural PostgreSQL type of an attribute type.
    static func sqlType(of type: AttributeType) -> String {
        switch type {
        case .integer16: "smallint"
        case .integer32: "integer"
        case .integer64: "bigint"
        case .double: "double precision"
        case .float: "real"
        case .boolean: "boolean"
        case .string, .uri: "text"
        case .date: "timestamptz"
        case .binaryData, .transformable: "bytea"
        case .uuid: "uuid"
        case .decimal: "numeric"
        }
    }

    /// The SQL value of an attribute value of `type` (nil: SQL NULL).
    static func sqlValue(_ value: AttributeValue?, of type: AttributeType) -> SQLValue {
        guard let value else { return .null }
        switch (value, type) {
        case (.integer(let n), .integer16): return .int16(Int16(truncatingIfNeeded: n))
        case (.integer(let n), .integer32): return .int32(Int32(truncatingIfNeeded: n))
        case (.integer(let n), _): return .int64(n)
        case (.double(let d), _): return .double(d)
        case (.float(let f), _): return .float(f)
        case (.boolean(let b), _): return .bool(b)
        case (.string(let s), _): return .text(s)
        case (.date(let date), _): return .timestamp(date)
        case (.binaryData(let data), _), (.transformable(let data), _): return .bytes([UInt8](data))
        case (.uuid(let uuid), _): return .uuid(uuid)
        case (.uri(let url), _): return .text(url.absoluteString)
        case (.decimal(let decimal), _): return .numeric("\(decimal)")
        }
    }

    /// The attribute value of a SQL value read from a column of `type`; nil for NULL.
    ///
    /// - Throws: a description of the mismatch when the value is not of the type's kind
    ///   (a column whose type was changed underneath the store).
    static func attributeValue(_ value: SQLValue, of type: AttributeType) throws(SQLValueMismatch) -> AttributeValue? {
        switch (value, type) {
        case (.null, _): return nil
        case (_, .integer16), (_, .integer32), (_, .integer64):
            guard let n = value.integer else { break }
            return .integer(n)
        case (.double(let d), .double): return .double(d)
        case (.float(let f), .double): return .double(Double(f))
        case (.float(let f), .float): return .float(f)
        case (.double(let d), .float): return .float(Float(d))
        case (.bool(let b), .boolean): return .boolean(b)
        case (.text(let s), .string): return .string(s)
        case (.text(let s), .uri):
            guard let url = URL(string: s) else { break }
            return .uri(url)
        case (.timestamp(let date), .date): return .date(date)
        case (.bytes(let bytes), .binaryData): return .binaryData(Data(bytes))
        case (.bytes(let bytes), .transformable): return .transformable(Data(bytes))
        case (.uuid(let uuid), .uuid): return .uuid(uuid)
        case (.numeric(let text), .decimal):
            guard let decimal = Decimal(string: text, locale: Locale(identifier: "en_US_POSIX")) else { break }
            return .decimal(decimal)
        default: break
        }
        throw SQLValueMismatch(description: "a \(sqlType(of: type)) column holds \(value)")
    }
}

/// A column value that does not fit its attribute's type.
struct SQLValueMismatch: Error {
    let description: String
}

/// The join table of a many-to-many or ordered to-many relationship: one row per member,
/// with its position (the order of an ordered relationship, else the order written).
struct SQLLink: Sendable {
    /// The relationship's slot in its entity.
    let slot: Int
    let relationship: RelationshipDescription
    /// The table's unqualified name: `Note.tags`.
    let tableName: String
    /// The table, schema-qualified and quoted.
    let name: String

    /// `CREATE TABLE ...`: rows go when their owner's row goes.
    func createStatement(owner: SQLTable) -> String {
        "CREATE TABLE \(name) (owner bigint NOT NULL REFERENCES \(owner.name) (\(SQLName.quoted(SQLLayout.keyColumn))) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED, "
            + "destination bigint NOT NULL, destination_entity smallint NOT NULL, position integer NOT NULL, "
            + "PRIMARY KEY (owner, destination_entity, destination))"
    }
}
