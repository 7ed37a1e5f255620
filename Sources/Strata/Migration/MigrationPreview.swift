import Foundation

/// What opening a store will do to migrate it, worked out without writing anything:
/// ``PersistentStoreCoordinator/migrationPreview(forStoreAt:options:)`` (an LMDB store),
/// ``PersistentStoreCoordinator/migrationPreview(ofType:configuration:options:)`` (a server
/// store: its SQL statements too), and `strata migrate PATH --dry-run`.
///
/// Its ``description`` is the plan as `strata migrate --dry-run` prints it:
///
/// ```
/// migrate /srv/library.strata from version 1 to version 2: 1 stage, 1,000,000 rows rewritten
/// stage 1: inferred lightweight version 1 → version 2
///   add attribute Volume.edition
///   add index Volume.edition
///   rewrite 1,000,000 rows of Volume
///   build index Volume.edition
/// ```
public struct MigrationPreview: Sendable, Hashable, CustomStringConvertible {
    /// One stage of the migration.
    public struct Stage: Sendable, Hashable {
        /// The stage: `lightweight version 1 → version 2`, or `inferred lightweight …`.
        public let name: String
        /// What changes between the stage's models, one line each.
        public let changes: [String]
        /// The rows rewritten (or moved, for a renamed entity), by entity (new names).
        public let rewrittenRows: [String: Int]
        /// The indexes built from the rows, as `Entity.attribute`.
        public let rebuiltIndexes: [String]
        /// The unique indexes built from the rows, as `Entity[attributes]`.
        public let rebuiltConstraints: [String]
        /// The to-many links built or copied, as `Entity.relationship (how)`.
        public let builtLinks: [String]
        /// The LMDB databases dropped (none on a server store).
        public let droppedDatabases: [String]
        /// The SQL statements the stage runs on a server store, in order, with their bound
        /// values (none on an LMDB store).
        public var statements: [String] = []
    }

    /// The store (its directory).
    public let store: String
    /// The version the store holds: its identifier, or its hash.
    public let fromVersion: String
    /// The version it migrates to.
    public let toVersion: String
    /// The stages, in order; empty when the store needs no migration.
    public let stages: [Stage]

    /// Every row the migration rewrites or moves.
    public var rewrittenRows: Int { stages.reduce(0) { $0 + $1.rewrittenRows.values.reduce(0, +) } }

    /// The plan, one line per change and action (see the type's example).
    public var description: String {
        guard !stages.isEmpty else { return "\(store) holds \(toVersion): nothing to migrate" }
        var lines = ["migrate \(store) from \(fromVersion) to \(toVersion): \(stages.count) stage\(stages.count == 1 ? "" : "s"), "
            + "\(Self.grouped(rewrittenRows)) rows rewritten"]
        for (number, stage) in stages.enumerated() {
            lines.append("stage \(number + 1): \(stage.name)")
            lines += stage.changes.map { "  " + $0 }
            lines += stage.rewrittenRows.sorted { $0.key < $1.key }.map { "  rewrite \(Self.grouped($0.value)) rows of \($0.key)" }
            lines += stage.rebuiltIndexes.map { "  build index \($0)" }
            lines += stage.rebuiltConstraints.map { "  build unique index \($0)" }
            lines += stage.builtLinks.map { "  build links \($0)" }
            lines += stage.droppedDatabases.map { "  drop database \($0)" }
            lines += stage.statements.map { "  sql: \($0)" }
        }
        return lines.joined(separator: "\n")
    }

    /// `1000000` as `1,000,000`, whatever the locale.
    static func grouped(_ number: Int) -> String {
        let digits = String(number.magnitude)
        var text = ""
        for (index, digit) in digits.enumerated() {
            if index > 0 && (digits.count - index) % 3 == 0 { text.append(",") }
            text.append(digit)
        }
        return (number < 0 ? "-" : "") + text
    }
}
