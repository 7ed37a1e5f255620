import Foundation
import Hummingbird

/// JSON encoding and decoding the way the API does it: ISO 8601 dates, sorted keys.
enum JSONResponse {
    /// A response with `value` as its JSON body.
    static func make(status: HTTPResponse.Status, value: some Encodable, headers: HTTPFields = [:]) -> Response {
        var headers = headers
        headers[.contentType] = "application/json; charset=utf-8"
        let data: Data
        do {
            data = try encoder().encode(value)
        } catch {
            // The API's types encode strings, numbers and dates only: this cannot fail.
            data = Data(#"{"error":"internal","message":"could not encode the response"}"#.utf8)
        }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// The API's encoder.
    static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }

    /// Decodes a request body of at most `limit` bytes as `T`; `400 invalid_json` when it
    /// is not valid JSON of that shape, `413` when it is too large.
    static func decode<T: Decodable>(_ type: T.Type, from request: Request, limit: Int = 64 * 1024) async throws -> T {
        var request = request
        let buffer: ByteBuffer
        do {
            buffer = try await request.collectBody(upTo: limit)
        } catch {
            throw APIError(.contentTooLarge, code: "body_too_large", message: "the body is over \(limit) bytes")
        }
        do {
            let decoder = JSONDecoder()
            decoder.dateDecodingStrategy = .iso8601
            return try decoder.decode(T.self, from: Data(buffer.readableBytesView))
        } catch let error as DecodingError {
            throw APIError(.badRequest, code: "invalid_json", message: Self.describe(error))
        } catch {
            throw APIError(.badRequest, code: "invalid_json", message: "the body is not valid JSON")
        }
    }

    /// A short account of what is wrong with a body.
    private static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context) -> String {
            let path = context.codingPath.map(\.stringValue).joined(separator: ".")
            return path.isEmpty ? "the body" : "'\(path)'"
        }
        switch error {
        case .typeMismatch(let type, let context): return "\(path(context)) is not a valid \(type)"
        case .valueNotFound(_, let context): return "\(path(context)) must not be null"
        case .keyNotFound(let key, _): return "'\(key.stringValue)' is required"
        case .dataCorrupted(let context):
            return context.codingPath.isEmpty ? "the body is not valid JSON" : "\(path(context)): \(context.debugDescription)"
        @unknown default: return "the body is not valid JSON"
        }
    }
}

/// Entity tags made of row versions.
enum ETag {
    /// `"7"`: the strong ETag of row version 7.
    static func strong(_ version: UInt64) -> String { "\"\(version)\"" }

    /// Whether an `If-Match` / `If-None-Match` header value lists `tag` (or is `*`).
    /// Weak comparison (RFC 9110 §8.8.3.2) for `If-None-Match`; `If-Match` tags here are
    /// always strong, so the comparison is the same.
    static func matches(_ header: String, _ tag: String) -> Bool {
        let candidates = header.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        let bare = tag.hasPrefix("W/") ? String(tag.dropFirst(2)) : tag
        return candidates.contains { candidate in
            candidate == "*" || candidate == bare || candidate == "W/" + bare
        }
    }
}
