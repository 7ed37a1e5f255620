import Foundation

extension MigrationStep {
    /// What the stage will do to a store whose entities hold `rowCounts` rows (by the
    /// entity names before the stage), as a ``MigrationPreview/Stage``.
    func preview(name: String, rowCounts: [String: Int]) -> MigrationPreview.Stage {
        var rewritten: [String: Int] = [:]
        var indexes: [String] = [], constraints: Set<String> = [], links: [String] = []
        for plan in entities {
            let rows = plan.sourceName.flatMap { rowCounts[$0] } ?? 0
            if plan.sourceName != nil && (plan.rewrite != nil || plan.movesRows) { rewritten[plan.entity.name] = rows }
            indexes += plan.rebuiltIndexes.map { "\(plan.entity.name).\($0.attribute)" }
            for constraint in plan.rebuiltConstraints {
                constraints.insert("\(constraint.owner)[\(constraint.attributes.joined(separator: ", "))]")
            }
            links += plan.builtLinks.map { "\($0.database.dropFirst("links:".count)) (from foreign keys)" }
            links += plan.copiedLinks.map { "\($0.to.dropFirst("links:".count)) (copied from \($0.from.dropFirst("links:".count)))" }
        }
        let dropped = Self.databaseNames(of: sourceModel).subtracting(Self.databaseNames(of: target)).sorted()
        return MigrationPreview.Stage(
            name: name, changes: diff.changes.map(\.description) + diff.problems.map { "left to the stage's code: " + $0 },
            rewrittenRows: rewritten, rebuiltIndexes: indexes.sorted(),
            rebuiltConstraints: constraints.sorted(), builtLinks: links.sorted(), droppedDatabases: dropped)
    }

    /// `rowCounts` (by the entity names before the stage) after it: by the names after it.
    func rowCounts(after rowCounts: [String: Int]) -> [String: Int] {
        var counts: [String: Int] = [:]
        for plan in entities { counts[plan.entity.name] = plan.sourceName.flatMap { rowCounts[$0] } ?? 0 }
        return counts
    }
}
