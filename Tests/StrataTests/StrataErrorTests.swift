import Foundation
@testable import Strata
import StrataLMDB
import Testing

/// StrataError as callers use it: built with its static members, matched exactly or by
/// its code in `catch`, `case` and `switch`, its payload read through its properties.
@Suite struct StrataErrorTests {
    static let id = ManagedObjectID(temporaryFor: "Note")
    static let conflict = MergeConflict(objectID: id, oldVersion: 1, newVersion: 2)
    static let failure = ValidationFailure(objectID: id, key: "title", reason: .missingValue)

    /// One error of every kind, with its code's name.
    static let everyKind: [(StrataError, String)] = [
        (.unknownEntity("Note"), "unknownEntity"),
        (.unknownKey(key: "k", entity: "Note"), "unknownKey"),
        (.typeMismatch(key: "k", entity: "Note", expected: "Int64", actual: "String"), "typeMismatch"),
        (.validation([failure]), "validation"),
        (.modelMismatch(store: "/s", storeHash: "a", modelHash: "b"), "modelMismatch"),
        (.incompatibleStore(store: "/s", reason: "r"), "incompatibleStore"),
        (.corruptStore(store: "/s", reason: "r"), "corruptStore"),
        (.inaccessibleFault(id), "inaccessibleFault"),
        (.corruptRecord(entity: "Note", primaryKey: 3, reason: "r"), "corruptRecord"),
        (.invalidObjectState(id, reason: "r"), "invalidObjectState"),
        (.storage(.mapFull), "storage"),
        (.unknownConfiguration("c"), "unknownConfiguration"),
        (.noStore(entity: "Note"), "noStore"),
        (.objectNotFound(id), "objectNotFound"),
        (.mergeConflicts([conflict]), "mergeConflicts"),
        (.noCoordinator, "noCoordinator"),
        (.readOnlyStore("s"), "readOnlyStore"),
        (.migrationFailed(store: "s", reason: "r"), "migrationFailed"),
        (.invalidContextConfiguration("r"), "invalidContextConfiguration"),
        (.wouldDeadlock("a -> b -> a"), "wouldDeadlock"),
        (.queryGenerationUnavailable(.current), "queryGenerationUnavailable"),
        (.queryGenerationExpired(.current, age: .seconds(2), maximumAge: .seconds(1)), "queryGenerationExpired"),
    ]

    @Test("every kind has a code of its own, named as its static member, and equal errors hash equally")
    func codesAndEquality() {
        let codes = Self.everyKind.map(\.0.code)
        #expect(Set(codes).count == Self.everyKind.count)
        for (error, name) in Self.everyKind {
            #expect(error.code.description == name)
            #expect(error == error && Set([error, error]).count == 1)
        }
        #expect(StrataError.unknownEntity("Note") != .unknownEntity("Folder"))
        #expect(StrataError.unknownEntity("Note") != .unknownConfiguration("Note"))
        #expect(StrataError.modelMismatch(store: "/s", storeHash: "a", modelHash: "b") != .modelMismatch(store: "/s", storeHash: "a", modelHash: "c"))
        // LMDBError compares codes only, and so does a storage error's payload.
        #expect(StrataError.storage(LMDBError(code: LMDBError.mapFull.code, message: "other words")) == .storage(.mapFull))
        #expect(StrataError.unknownEntity("Note").description == "the model has no entity named 'Note'")
    }

    @Test("catch matches an error exactly, or any error of a code")
    func catchPatterns() {
        func caught(_ error: any Error) -> String {
            do {
                throw error
            } catch StrataError.noCoordinator {
                return "noCoordinator"
            } catch StrataError.unknownEntity("Note") {
                return "unknownEntity Note"
            } catch StrataError.Code.unknownEntity {
                return "another unknownEntity"
            } catch let error as StrataError where error.code == .mergeConflicts {
                return "conflicts \(error.conflicts.count)"
            } catch StrataError.Code.storage {
                return "storage"
            } catch {
                return "other"
            }
        }
        #expect(caught(StrataError.noCoordinator) == "noCoordinator")
        #expect(caught(StrataError.unknownEntity("Note")) == "unknownEntity Note")
        #expect(caught(StrataError.unknownEntity("Folder")) == "another unknownEntity")
        #expect(caught(StrataError.mergeConflicts([Self.conflict, Self.conflict])) == "conflicts 2")
        #expect(caught(StrataError.storage(.readersFull)) == "storage")
        #expect(caught(StrataError.objectNotFound(Self.id)) == "other")
        #expect(caught(LMDBError.mapFull) == "other")
    }

    @Test("case and switch match by code, on any Error, on a StrataError and on an optional one")
    func casePatterns() {
        let error: StrataError = .storage(.mapFull)
        let untyped: any Error = error
        let optional: StrataError? = error
        #expect({ if case StrataError.Code.storage = untyped { true } else { false } }())
        #expect({ if case StrataError.Code.storage = error { true } else { false } }())
        #expect({ if case StrataError.storage(.mapFull) = untyped { true } else { false } }())
        #expect({ if case StrataError.storage(.mapFull) = error { true } else { false } }())
        #expect({ if case StrataError.Code.validation = untyped { true } else { false } }() == false)
        #expect({ if case .storage? = optional?.code { true } else { false } }())
        let kind = switch error.code {
        case .validation: "validation"
        case .storage: "storage \(error.storageError?.name ?? "")"
        default: "other"
        }
        #expect(kind == "storage mapFull")
        #expect(throws: StrataError.noCoordinator) { throw StrataError.noCoordinator }
    }

    @Test("each property reads the payload of the kinds that carry it, and is nil or empty for the others")
    func payloads() {
        for (error, _) in Self.everyKind {
            let code = error.code
            #expect((error.entityName != nil) == [.unknownEntity, .unknownKey, .typeMismatch, .noStore, .corruptRecord].contains(code))
            #expect((error.key != nil) == [.unknownKey, .typeMismatch].contains(code))
            #expect((error.expectedType != nil) == (code == .typeMismatch) && (error.actualType != nil) == (code == .typeMismatch))
            #expect(error.validationFailures.isEmpty == (code != .validation))
            #expect(error.conflicts.isEmpty == (code != .mergeConflicts))
            #expect((error.storageError != nil) == (code == .storage))
            #expect((error.objectID != nil) == [.inaccessibleFault, .invalidObjectState, .objectNotFound].contains(code))
            #expect((error.storeName != nil) == [.modelMismatch, .incompatibleStore, .corruptStore, .readOnlyStore, .migrationFailed].contains(code))
            #expect((error.reason != nil) == [
                .incompatibleStore, .corruptStore, .corruptRecord, .invalidObjectState, .invalidContextConfiguration, .wouldDeadlock,
                .migrationFailed,
            ].contains(code))
            #expect((error.storeHash != nil) == (code == .modelMismatch) && (error.modelHash != nil) == (code == .modelMismatch))
            #expect((error.primaryKey != nil) == (code == .corruptRecord))
            #expect((error.configurationName != nil) == (code == .unknownConfiguration))
            #expect((error.token != nil) == [.queryGenerationUnavailable, .queryGenerationExpired].contains(code))
            #expect((error.age != nil) == (code == .queryGenerationExpired) && (error.maximumAge != nil) == (code == .queryGenerationExpired))
        }
        let mismatch = StrataError.typeMismatch(key: "k", entity: "Note", expected: "Int64", actual: "String")
        #expect(mismatch.key == "k" && mismatch.entityName == "Note" && mismatch.expectedType == "Int64" && mismatch.actualType == "String")
        let model = StrataError.modelMismatch(store: "/s", storeHash: "a", modelHash: "b")
        #expect(model.storeName == "/s" && model.storeHash == "a" && model.modelHash == "b")
        let record = StrataError.corruptRecord(entity: "Note", primaryKey: 3, reason: "r")
        #expect(record.entityName == "Note" && record.primaryKey == 3 && record.reason == "r")
        #expect(StrataError.invalidObjectState(Self.id, reason: "r").objectID == Self.id)
        #expect(StrataError.validation([Self.failure]).validationFailures == [Self.failure])
        #expect(StrataError.mergeConflicts([Self.conflict]).conflicts == [Self.conflict])
        #expect(StrataError.storage(.readersFull).storageError == .readersFull)
        #expect(StrataError.unknownConfiguration("c").configurationName == "c")
        #expect(StrataError.wouldDeadlock("a -> b -> a").reason == "a -> b -> a")
        let expired = StrataError.queryGenerationExpired(.current, age: .seconds(2), maximumAge: .seconds(1))
        #expect(expired.token == .current && expired.age == .seconds(2) && expired.maximumAge == .seconds(1))
    }
}
