import Foundation
import Hummingbird
import Strata

/// `/folders` and `/folders/:id`. Every route uses the `.error` merge policy: a rename
/// that meets a concurrent rename answers `409`; a name another folder has, `409
/// constraint_conflict`. Deleting a folder nullifies its notes' folder (they stay).
struct FolderRoutes {
    let service: NotesService

    /// The most folders `GET /folders` lists.
    static let listLimit = 1_000

    func register(on router: Router<some RequestContext>) {
        router.get("/folders") { request, context in try await list(request, context) }
        router.post("/folders") { request, context in try await create(request, context) }
        router.get("/folders/:id") { request, context in try await show(request, context) }
        router.patch("/folders/:id") { request, context in try await rename(request, context) }
        router.delete("/folders/:id") { request, context in try await delete(request, context) }
    }

    private func folderID(_ context: some RequestContext) throws -> ManagedObjectID {
        try ObjectKey.decode(context.parameters.get("id") ?? "", entityName: "Folder", in: service.coordinator)
    }

    /// `GET /folders`: every folder (up to ``listLimit``) by name.
    func list(_ request: Request, _ context: some RequestContext) async throws -> Response {
        guard request.uri.queryParameters.isEmpty else {
            throw APIError(.badRequest, code: "invalid_parameter", message: "GET /folders takes no query parameters")
        }
        let folders = try await service.perform(context) { ctx in
            var fetch = FetchRequest<Folder>()
            fetch.sortDescriptors = [FetchSortDescriptor(key: "name")]
            fetch.fetchLimit = Self.listLimit
            return try ctx.fetch(fetch).map(FolderRepresentation.init)
        }
        return JSONResponse.make(status: .ok, value: ["folders": folders])
    }

    /// `GET /folders/:id` with its `ETag`.
    func show(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let id = try folderID(context)
        let folder = try await service.perform(context) { ctx in try FolderRepresentation(ctx.existing(Folder.self, id)) }
        let tag = ETag.strong(folder.version)
        if let response = Preconditions.notModified(ifNoneMatch: request.headers[.ifNoneMatch], tag: tag) { return response }
        return JSONResponse.make(status: .ok, value: folder, headers: [.eTag: tag])
    }

    /// `POST /folders` `{"name"}` → `201`; a taken name → `409 constraint_conflict`.
    func create(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let body = try await JSONResponse.decode(FolderBody.self, from: request)
        let folder = try await service.perform(context) { ctx in
            let folder = Folder()
            try ctx.insert(folder)
            folder.name = body.name
            try ctx.save()
            return try FolderRepresentation(folder)
        }
        return JSONResponse.make(status: .created, value: folder, headers: [
            .eTag: ETag.strong(folder.version), .location: "/folders/\(folder.id)",
        ])
    }

    /// `PATCH /folders/:id` `{"name"}`; honours `If-Match`.
    func rename(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let id = try folderID(context)
        let body = try await JSONResponse.decode(FolderBody.self, from: request)
        let ifMatch = request.headers[.ifMatch]
        let folder = try await service.perform(context) { ctx in
            let folder = try ctx.existing(Folder.self, id)
            try Preconditions.check(ifMatch: ifMatch, version: folder.storedVersion())
            if folder.name != body.name {
                folder.name = body.name
                try ctx.save()
            }
            return try FolderRepresentation(folder)
        }
        return JSONResponse.make(status: .ok, value: folder, headers: [.eTag: ETag.strong(folder.version)])
    }

    /// `DELETE /folders/:id` → `204`; its notes stay, in no folder. Honours `If-Match`.
    func delete(_ request: Request, _ context: some RequestContext) async throws -> Response {
        try await service.delete(Folder.self, try folderID(context), ifMatch: request.headers[.ifMatch], context)
        return Response(status: .noContent)
    }
}
