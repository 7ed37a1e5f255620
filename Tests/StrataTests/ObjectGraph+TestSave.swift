@testable import Strata

extension ObjectGraph {
    /// A root graph's whole save, stage by stage, without a context to post
    /// notifications (``ManagedObjectContext/save()`` runs the same stages and posts
    /// between them).
    @discardableResult
    func save() throws -> ObjectChangeSets {
        guard try beginSave() else { return ObjectChangeSets() }
        let batch = try validatedSave(after: try runWillSave())
        return try writeToStores(batch)
    }
}
