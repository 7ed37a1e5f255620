import Foundation
import Hummingbird
import Prometheus
import ServiceLifecycle
import Strata

/// `GET /notes/live?folder=&q=&sort=`: the notes a query matches, as server-sent events
/// (`text/event-stream`), one `snapshot` event per ``ResultsSnapshot`` of Strata's live
/// results (`context.results(for:transform:)`).
///
/// ```
/// event: snapshot
/// data: {"initial":true,"notes":[…],"difference":{"inserted":[0,1],"deleted":[],"moved":[],"updated":[]}}
/// ```
///
/// The first event holds every matching note (all "inserted"); each later one follows a
/// save that changed the results, with the indexes to apply. A comment line
/// (`: keep-alive`) goes out every ``NotesServerConfiguration/liveHeartbeat``, so a
/// client that went away is noticed by the failed write even when nothing changes. The
/// stream ends when the client disconnects (the write fails), or at the server's
/// graceful shutdown; either way the iteration ends and Strata removes the observer. The
/// `notes_live_streams` gauge counts the open streams.
struct LiveFeed {
    let service: NotesService
    let heartbeat: Duration
    let openStreams: Prometheus.Gauge

    /// One event of the stream.
    struct Event: Encodable {
        var initial: Bool
        var notes: [NoteRepresentation]
        var difference: Difference
    }

    /// A ``ResultsDifference`` as JSON.
    struct Difference: Encodable {
        var inserted: [Int]
        var deleted: [Int]
        var moved: [Move]
        var updated: [Int]

        struct Move: Encodable {
            var from: Int
            var to: Int
        }

        init(_ difference: ResultsDifference) {
            inserted = difference.inserted
            deleted = difference.deleted
            moved = difference.moved.map { Move(from: $0.from, to: $0.to) }
            updated = difference.updated
        }
    }

    func register(on router: Router<some RequestContext>) {
        router.get("/notes/live") { request, context in try stream(request, context) }
    }

    func stream(_ request: Request, _ context: some RequestContext) throws -> Response {
        let query = try NoteQuery(request, coordinator: service.coordinator, allowsPaging: false)
        let fetch: FetchRequest<Note>
        do {
            fetch = try query.fetchRequest()
        } catch {
            throw APIError(error, logger: context.logger)
        }
        let live = service.makeContext(service.container).results(for: fetch) { note in try NoteRepresentation(note) }
        let heartbeat = heartbeat, openStreams = openStreams, logger = context.logger
        let headers: HTTPFields = [
            .contentType: "text/event-stream; charset=utf-8", .cacheControl: "no-cache",
        ]
        return Response(status: .ok, headers: headers, body: ResponseBody { writer in
            openStreams.increment()
            defer { openStreams.decrement() }
            // Snapshots and keep-alives meet in one stream, written by this task alone.
            let (events, continuation) = AsyncStream<ByteBuffer>.makeStream()
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    do {
                        for try await snapshot in live {
                            let event = Event(initial: snapshot.isInitial, notes: snapshot.elements,
                                              difference: Difference(snapshot.difference))
                            let json = try JSONResponse.encoder().encode(event)
                            continuation.yield(ByteBuffer(string: "event: snapshot\ndata: \(String(decoding: json, as: UTF8.self))\n\n"))
                        }
                    } catch {
                        let message = String(describing: error).replacingOccurrences(of: "\n", with: " ")
                        continuation.yield(ByteBuffer(string: "event: error\ndata: \(message)\n\n"))
                    }
                    continuation.finish()
                }
                group.addTask {
                    while (try? await Task.sleep(for: heartbeat)) != nil {
                        continuation.yield(ByteBuffer(string: ": keep-alive\n\n"))
                    }
                }
                // Ends at the client's disconnection (a write throws), at the server's
                // graceful shutdown, or when the live results end.
                do {
                    for try await event in events.cancelOnGracefulShutdown() { try await writer.write(event) }
                } catch {
                    logger.debug("live feed client went away", metadata: ["error": "\(error)"])
                }
                continuation.finish()
                group.cancelAll()
            }
            try? await writer.finish(nil)
        })
    }
}
