import Foundation
import Hummingbird
import Logging
import Strata

/// What every route shares: the container, and how a request gets its context.
///
/// Each request works in a context of its own, made for it
/// (`PersistentContainer.newBackgroundContext()`) and dropped when it answers: objects
/// never outlive the request or cross into another one, reads see the newest committed
/// state, and saves of different requests run side by side (group commit shares their
/// LMDB commits). Only `Sendable` values (``NoteRepresentation``, object IDs) leave a
/// context.
struct NotesService: Sendable {
    /// The store.
    let container: PersistentContainer
    /// Makes each request's context; `newBackgroundContext()` unless a test supplies
    /// one (see ``NotesServerConfiguration/makeContext``).
    let makeContext: @Sendable (PersistentContainer) -> ManagedObjectContext

    /// The container's coordinator, which turns object keys into IDs.
    var coordinator: PersistentStoreCoordinator { container.persistentStoreCoordinator }

    /// Runs `body` in a new context with merge policy `policy`, with the request's
    /// logger bound as the task-local logger (so Strata's log entries carry the request
    /// ID), and maps what it throws to an ``APIError``.
    func perform<T: Sendable>(
        _ request: some RequestContext, mergePolicy: MergePolicy = .error,
        _ body: (isolated ManagedObjectContext) throws -> T
    ) async throws(APIError) -> T {
        let context = makeContext(container)
        context.mergePolicy = mergePolicy
        do {
            return try await withLogger(request.logger) { _ in
                try await context.perform(body)
            }
        } catch {
            throw APIError(error, logger: request.logger)
        }
    }

    /// Deletes the object `id` of type `T` in a context of its own, when `ifMatch` (the
    /// request's `If-Match`, if any) lists its stored version: `DELETE /folders/:id` and
    /// `DELETE /notes/:id`.
    ///
    /// - Throws: ``APIError`` `404` when it is not stored, `412` when `ifMatch` is stale,
    ///   `409` when another request changed it meanwhile.
    func delete<T: ManagedObject>(_ type: T.Type, _ id: ManagedObjectID, ifMatch: String?, _ request: some RequestContext) async throws(APIError) {
        try await perform(request) { ctx in
            let object = try ctx.existing(T.self, id)
            try Preconditions.check(ifMatch: ifMatch, version: object.storedVersion())
            try ctx.delete(object)
            try ctx.save()
        }
    }
}

/// Fetching objects by key inside a context, with the API's errors.
extension ManagedObjectContext {
    /// The object `id` as `T`, read from the store when not registered.
    ///
    /// - Throws: ``APIError`` `404` when no such object is stored (any more).
    func existing<T: ManagedObject>(_ type: T.Type, _ id: ManagedObjectID) throws -> T {
        guard let object = try existingObject(with: id) as? T else {
            throw APIError(.notFound, code: "not_found", message: "no \(id.entityName.lowercased()) with that key")
        }
        return object
    }
}

/// `If-Match` and `If-None-Match` against row versions.
enum Preconditions {
    /// Throws `412 precondition_failed` (with the current `ETag`) when `ifMatch` is set
    /// and does not list the object's stored version.
    static func check(ifMatch: String?, version: UInt64) throws(APIError) {
        guard let ifMatch else { return }
        let current = ETag.strong(version)
        guard ETag.matches(ifMatch, current) else {
            var error = APIError(.preconditionFailed, code: "precondition_failed",
                                 message: "the object changed since the client read it (If-Match \(ifMatch), current \(current))")
            error.headers[.eTag] = current
            throw error
        }
    }

    /// A `304 Not Modified` when `ifNoneMatch` lists `tag`; nil otherwise.
    static func notModified(ifNoneMatch: String?, tag: String) -> Response? {
        guard let ifNoneMatch, ETag.matches(ifNoneMatch, tag) else { return nil }
        return Response(status: .notModified, headers: [.eTag: tag])
    }
}
