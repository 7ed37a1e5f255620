import Foundation
import Hummingbird
import Strata

/// `/notes` and `/notes/:id`.
///
/// Merge policies, per route:
/// - `PATCH /notes/:id`, `DELETE /notes/:id`: `.error` (the default). A save that meets a
///   change saved by another request since this one read the note fails, and the client
///   gets `409 Conflict` with both sides' changed keys: it decides. `If-Match` makes the
///   check explicit: the read version must be the one the client saw (else `412`), and
///   the save's optimistic lock makes check-then-write atomic. A note's folder is saved
///   too when the note joins or leaves it (its `notes` set), so a PATCH that moves a note,
///   or a DELETE of a note in a folder, can also get `409` naming the *folder* when
///   another request changed that folder's notes at the same moment: retry it.
/// - `POST /notes`: `.mergeByPropertyObjectTrump`. A new note cannot conflict with
///   anything but its folder's `notes` set, which every merging policy merges member by
///   member (Strata's merge rule 2): concurrent creations in one folder all succeed.
///   Under `.error` they failed with `409` whenever another creation in the same folder
///   committed between the read of the folder and the save (the concurrent-clients test
///   showed 7 of 200).
/// - `PUT /notes/:id/priority`: `.mergeByPropertyObjectTrump`. Setting a priority is a
///   blind write of one property: a concurrent change to the title or body is kept, and
///   this request's priority wins. It never answers `409`.
struct NoteRoutes {
    let service: NotesService

    func register(on router: Router<some RequestContext>) {
        router.get("/notes") { request, context in try await list(request, context) }
        router.post("/notes") { request, context in try await create(request, context) }
        router.get("/notes/:id") { request, context in try await show(request, context) }
        router.patch("/notes/:id") { request, context in try await update(request, context) }
        router.delete("/notes/:id") { request, context in try await delete(request, context) }
        router.put("/notes/:id/priority") { request, context in try await setPriority(request, context) }
    }

    private func noteID(_ context: some RequestContext) throws -> ManagedObjectID {
        try ObjectKey.decode(context.parameters.get("id") ?? "", entityName: "Note", in: service.coordinator)
    }

    private func folderID(_ key: String) throws -> ManagedObjectID {
        do {
            return try ObjectKey.decode(key, entityName: "Folder", in: service.coordinator)
        } catch {
            throw APIError(.unprocessableContent, code: "invalid_reference", message: "no folder with key '\(key)'")
        }
    }

    /// `GET /notes?folder=&q=&sort=&limit=&offset=`: one page of the newest committed
    /// state, with the total, and a weak `ETag` of the page (`If-None-Match` → `304`).
    func list(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let query = try NoteQuery(request, coordinator: service.coordinator)
        let page = try await service.perform(context) { ctx in
            var fetch = try query.fetchRequest()
            let total = try ctx.count(for: fetch)
            fetch.fetchLimit = query.limit
            fetch.fetchOffset = query.offset
            fetch.returnsObjectsAsFaults = false
            let notes = try ctx.fetch(fetch).map(NoteRepresentation.init)
            return NotePage(notes: notes, total: total, limit: query.limit, offset: query.offset)
        }
        let tag = Self.pageTag(page)
        if let response = Preconditions.notModified(ifNoneMatch: request.headers[.ifNoneMatch], tag: tag) { return response }
        return JSONResponse.make(status: .ok, value: page, headers: [.eTag: tag])
    }

    /// `GET /notes/:id`, with `ETag: "<version>"` (`If-None-Match` → `304`).
    func show(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let id = try noteID(context)
        let note = try await service.perform(context) { ctx in try NoteRepresentation(ctx.existing(Note.self, id)) }
        let tag = ETag.strong(note.version)
        if let response = Preconditions.notModified(ifNoneMatch: request.headers[.ifNoneMatch], tag: tag) { return response }
        return JSONResponse.make(status: .ok, value: note, headers: [.eTag: tag])
    }

    /// `POST /notes` `{"title", "body"?, "priority"?, "folder"?}` → `201` with `Location`.
    func create(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let body = try await JSONResponse.decode(NoteCreation.self, from: request)
        let folder = try body.folder.map(folderID)
        let note = try await service.perform(context, mergePolicy: .mergeByPropertyObjectTrump) { ctx in
            let note = Note()
            try ctx.insert(note)
            note.title = body.title
            note.body = body.body ?? ""
            note.priority = body.priority ?? 0
            if let folder { note.folder = try ctx.existing(Folder.self, folder) }
            try ctx.save()
            return try NoteRepresentation(note)
        }
        return JSONResponse.make(status: .created, value: note, headers: [
            .eTag: ETag.strong(note.version), .location: "/notes/\(note.id)",
        ])
    }

    /// `PATCH /notes/:id` with the members to change; honours `If-Match`.
    func update(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let id = try noteID(context)
        let patch = try await JSONResponse.decode(NotePatch.self, from: request)
        let folder: ManagedObjectID?? = try patch.folder.map { key in try key.map(folderID) }
        let ifMatch = request.headers[.ifMatch]
        let note = try await service.perform(context) { ctx in
            let note = try ctx.existing(Note.self, id)
            try Preconditions.check(ifMatch: ifMatch, version: note.storedVersion())
            if let title = patch.title { note.title = title }
            if let body = patch.body { note.body = body }
            if let priority = patch.priority { note.priority = priority }
            if let folder { note.folder = try folder.map { try ctx.existing(Folder.self, $0) } }
            if note.hasChanges {
                note.updated = Date()
                try ctx.save()
            }
            return try NoteRepresentation(note)
        }
        return JSONResponse.make(status: .ok, value: note, headers: [.eTag: ETag.strong(note.version)])
    }

    /// `PUT /notes/:id/priority` `{"priority": n}`: last writer wins on that property only.
    func setPriority(_ request: Request, _ context: some RequestContext) async throws -> Response {
        let id = try noteID(context)
        let change = try await JSONResponse.decode(PriorityChange.self, from: request)
        let ifMatch = request.headers[.ifMatch]
        let note = try await service.perform(context, mergePolicy: .mergeByPropertyObjectTrump) { ctx in
            let note = try ctx.existing(Note.self, id)
            try Preconditions.check(ifMatch: ifMatch, version: note.storedVersion())
            if note.priority != change.priority {
                note.priority = change.priority
                note.updated = Date()
                try ctx.save()
            }
            return try NoteRepresentation(note)
        }
        return JSONResponse.make(status: .ok, value: note, headers: [.eTag: ETag.strong(note.version)])
    }

    /// `DELETE /notes/:id` → `204`; honours `If-Match`.
    func delete(_ request: Request, _ context: some RequestContext) async throws -> Response {
        try await service.delete(Note.self, try noteID(context), ifMatch: request.headers[.ifMatch], context)
        return Response(status: .noContent)
    }

    /// A weak entity tag of a page: FNV-1a over the total and each note's key and version.
    static func pageTag(_ page: NotePage) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        func mix(_ text: String) {
            for byte in text.utf8 {
                hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3
            }
        }
        mix("\(page.total)/\(page.limit)/\(page.offset)")
        for note in page.notes { mix("|\(note.id)@\(note.version)") }
        return "W/\"\(String(hash, radix: 16))\""
    }
}
