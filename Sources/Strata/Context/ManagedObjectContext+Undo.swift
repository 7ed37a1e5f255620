// Undo and redo (see ObjectGraph+Undo.swift for what is recorded).
extension ManagedObjectContext {
    /// The undo manager that records the context's changes; nil (the default) records
    /// nothing and costs nothing.
    ///
    /// With a manager, every change the context records is undoable: attribute values,
    /// relationships (both sides), inserts and deletes (a delete's rules with it, as one
    /// step), and the changes a child's save brings in. Each event (a block, or a call of
    /// ``processPendingChanges()``) makes one step. Changes merged from other contexts'
    /// saves and refreshes are not recorded: they are the store's state, not this
    /// context's edits. See <doc:UndoAndRedo>.
    ///
    /// Setting another manager (or nil) removes this context's actions from the old one.
    /// Set it to nil around a large import for speed, as Core Data advises.
    public var undoManager: UndoManager? {
        get { graph.undoRecorder?.manager }
        set {
            guard newValue !== graph.undoRecorder?.manager else { return }
            if let old = graph.undoRecorder?.manager {
                graph.undoRecorder?.clear()
                old.detach(self)
            }
            graph.undoRecorder = newValue.map { UndoRecorder(manager: $0, context: self, graph: graph) }
            newValue?.attach(self)
        }
    }

    /// Undoes the last group of the undo manager (nothing without one): the context's
    /// changes in it are taken back, objects inserted leave, objects deleted come back
    /// (an object whose deletion was saved is inserted again, and the next save stores
    /// it). After a save, undone objects have changes again, with their earlier values;
    /// an object back at its saved values has none.
    ///
    /// Ends the current event first (``processPendingChanges()``), so the changes made so
    /// far are a step of their own and the first undone.
    ///
    /// - Throws: what ``UndoManager/undo()`` throws (the group stays on the stack and
    ///   nothing changes); what ``processPendingChanges()`` throws.
    public func undo() throws {
        guard let manager = undoManager else { return }
        try processPendingChanges()
        try manager.undo()
    }

    /// Redoes the last group undone (nothing without an undo manager). See ``undo()``.
    ///
    /// - Throws: as ``undo()``.
    public func redo() throws {
        guard let manager = undoManager else { return }
        try processPendingChanges()
        try manager.redo()
    }
}
