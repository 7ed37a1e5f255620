import StrataLMDB

extension PersistentStore {
    /// The error that put the store into its terminal state, or nil while it is usable.
    ///
    /// A store becomes terminal when LMDB can no longer trust its own state: a failed
    /// write of the meta page at the end of a commit (LMDB then panics: see lmdb.h,
    /// `MDB_PANIC`) or a corrupted page (`MDB_CORRUPTED`). From then on every save and
    /// every read of the store fails with ``StrataError/storage(_:)`` of
    /// `LMDBError.environmentUnusable`; the save that hit the failure gets the failure
    /// itself (an `LMDBError.ioError`, say), and is not in the store. Saves that
    /// returned before are on disk.
    ///
    /// The state lasts until the store is opened again: remove it from its coordinator,
    /// let go of every reference to it, and add it again (or add it to a new
    /// coordinator). The environment closes with the last reference to the store (a
    /// variable, a context pinned to a query generation of it): until then, adding the
    /// same directory again fails with ``StrataError/storage(_:)`` of
    /// `LMDBError.alreadyOpen` (LMDB allows one environment per file in a process), or
    /// with ``StrataError/incompatibleStore(store:reason:)`` while it is still added to
    /// the coordinator; either message says the store is terminal and what to let go of.
    /// Objects of the old store keep their IDs, because the store keeps its
    /// ``identifier``:
    ///
    /// ```swift
    /// var store: PersistentStore? = try await coordinator.addPersistentStore(type: .lmdb, at: url)
    /// do {
    ///     try await context.perform { try $0.save() }
    /// } catch {
    ///     if store?.terminalError != nil {
    ///         if let old = store { try await coordinator.remove(old) }
    ///         store = nil  // the last reference: the environment closes
    ///         store = try await coordinator.addPersistentStore(type: .lmdb, at: url)
    ///     }
    /// }
    /// ```
    ///
    /// The value is ``StrataError/storage(_:)`` of the LMDB error that made the store
    /// terminal (`LMDBError.panic` or `LMDBError.corrupted`).
    public var terminalError: StrataError? {
        file?.environment.terminalError.map { .storage($0) }
    }
}
