import Foundation
import Hummingbird
import Logging
import Strata

/// An error the API answers with: an HTTP status and a JSON body
/// `{"error": code, "message": text, ...details}`.
///
/// Every failure a client can cause becomes one of these (bad JSON and query parameters
/// `400`, unknown objects `404`, stale `If-Match` `412`, conflicts `409`, validation
/// `422`); ``init(_:)`` maps Strata's errors. The server never traps on user input.
public struct APIError: Error, HTTPResponseError, Sendable {
    /// The HTTP status.
    public let status: HTTPResponse.Status
    /// A stable, machine-readable code: `invalid_parameter`, `not_found`, `conflict`, ...
    public let code: String
    /// A sentence for people.
    public let message: String
    /// Extra response headers (`ETag` of a 412, `Retry-After` of a 503).
    public var headers: HTTPFields = [:]
    /// Extra members of the JSON body, already encoded (conflicts, validation failures).
    var details: [String: JSONValue] = [:]

    /// An error with `status`, `code` and `message`.
    public init(_ status: HTTPResponse.Status, code: String, message: String) {
        self.status = status
        self.code = code
        self.message = message
    }

    /// The JSON response.
    public func response(from request: Request, context: some RequestContext) throws -> Response {
        var body = details
        body["error"] = .string(code)
        body["message"] = .string(message)
        var response = JSONResponse.make(status: status, value: JSONValue.object(body))
        for field in headers { response.headers.append(field) }
        return response
    }
}

extension APIError {
    /// The API's answer to an error thrown by Strata (or anything else) while serving a
    /// request. Unknown errors become `500` and are logged to `logger`.
    ///
    /// | Strata error | status |
    /// | --- | --- |
    /// | `mergeConflicts` (a concurrent save won, policy `.error`) | 409 `conflict`, the conflicts listed |
    /// | `constraintConflicts` (a taken folder name) | 409 `constraint_conflict` |
    /// | `validation` | 422 `validation_failed`, the failures listed |
    /// | `objectNotFound`, `inaccessibleFault` (deleted meanwhile) | 404 `not_found` |
    /// | `coordinatorClosed` (shutting down: saves and reads alike), `noCoordinator` (not loaded) | 503 `unavailable` |
    init(_ error: any Error, logger: Logger) {
        if let api = error as? APIError {
            self = api
            return
        }
        guard let strata = error as? StrataError else {
            logger.error("request failed", metadata: ["error": "\(String(reflecting: error))"])
            self.init(.internalServerError, code: "internal", message: "internal error")
            return
        }
        switch strata.code {
        case .mergeConflicts:
            self.init(.conflict, code: "conflict",
                      message: "the object was changed by another request since it was read; read it again and retry")
            details["conflicts"] = .array(strata.conflicts.map(Self.json))
            if strata.conflicts.count == 1, let version = strata.conflicts[0].newVersion {
                headers[.eTag] = ETag.strong(version)
            }
        case .constraintConflicts:
            self.init(.conflict, code: "constraint_conflict", message: "a value that must be unique is taken")
            details["conflicts"] = .array(strata.constraintConflicts.map(Self.json))
        case .validation:
            self.init(.unprocessableContent, code: "validation_failed", message: "the values are not valid")
            details["failures"] = .array(strata.validationFailures.map(Self.json))
        case .objectNotFound, .inaccessibleFault:
            self.init(.notFound, code: "not_found", message: "the object does not exist (any more)")
        case .coordinatorClosed, .noCoordinator:
            self.init(.serviceUnavailable, code: "unavailable", message: "the store is closed (the server is shutting down)")
            headers[.retryAfter] = "1"
        default:
            logger.error("request failed", metadata: ["error": "\(strata)", "strata.error.code": "\(strata.code)"])
            self.init(.internalServerError, code: "internal", message: "internal error")
        }
    }

    /// `{"object": key, "entity": "Note", "changedInRequest": [...], "changedElsewhere":
    /// [...], "readVersion": 3, "storedVersion": 4}`: what each side changed.
    static func json(_ conflict: MergeConflict) -> JSONValue {
        .object([
            "object": .string(ObjectKey.encode(conflict.objectID)),
            "entity": .string(conflict.objectID.entityName),
            "changedInRequest": .array(conflict.changedKeysInMemory.sorted().map(JSONValue.string)),
            "changedElsewhere": .array(conflict.changedKeysInStore.sorted().map(JSONValue.string)),
            "readVersion": .number(Double(conflict.oldVersion)),
            "storedVersion": conflict.newVersion.map { .number(Double($0)) } ?? .null,
        ])
    }

    /// `{"entity": "Folder", "keys": ["name"], "existing": key}`.
    static func json(_ conflict: ConstraintConflict) -> JSONValue {
        .object([
            "entity": .string(conflict.entityName),
            "keys": .array(conflict.constraint.map(JSONValue.string)),
            "existing": conflict.existingObjectID.map { .string(ObjectKey.encode($0)) } ?? .null,
        ])
    }

    /// `{"key": "priority", "reason": "Note.priority is above the maximum 5 (…)"}`.
    static func json(_ failure: ValidationFailure) -> JSONValue {
        .object([
            "key": failure.key.map(JSONValue.string) ?? .null,
            "reason": .string(failure.description),
        ])
    }
}

/// A JSON document built by hand: error bodies with optional members.
enum JSONValue: Encodable, Sendable {
    case string(String)
    case number(Double)
    case bool(Bool)
    case null
    case array([JSONValue])
    case object([String: JSONValue])

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .string(let value): try container.encode(value)
        case .number(let value):
            if value == value.rounded(), abs(value) < 9e15 { try container.encode(Int64(value)) } else { try container.encode(value) }
        case .bool(let value): try container.encode(value)
        case .null: try container.encodeNil()
        case .array(let values): try container.encode(values)
        case .object(let members): try container.encode(members)
        }
    }
}
