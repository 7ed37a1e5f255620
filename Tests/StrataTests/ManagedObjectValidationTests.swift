import Foundation
import Testing
@testable import Strata

/// validateForInsert / Update / Delete collect every failure at once.
@Suite struct ManagedObjectValidationTests {
    func failures(_ body: () throws -> Void) -> [ValidationFailure] {
        do {
            try body()
            return []
        } catch let error as StrataError where error.code == .validation {
            return error.validationFailures
        } catch {
            Issue.record("unexpected error \(error)")
            return []
        }
    }

    @Test func aValidObjectPasses() throws {
        let note = Note()
        note.title = "ok"
        try note.validateForInsert()
        try note.validateForUpdate()
        try note.validateForDelete()
    }

    @Test func everyAttributeFailureIsReported() {
        let note = Note()
        note.priority = 9
        let folder = Folder()
        folder.name = ""
        let tag = Tag()
        tag.label = "Not Lowercase"
        #expect(failures { try note.validateForInsert() }.map(\.reason) == [.aboveMaximum(5)])
        #expect(failures { try folder.validateForUpdate() }.map(\.reason) == [.tooShort(minimumLength: 1)])
        folder.name = String(repeating: "x", count: 21)
        #expect(failures { try folder.validateForUpdate() }.map(\.reason) == [.tooLong(maximumLength: 20)])
        #expect(failures { try tag.validateForInsert() }.map(\.reason) == [.patternMismatch("[a-z]+")])
        tag.label = "lower"
        #expect(failures { try tag.validateForInsert() }.isEmpty)
    }

    @Test func failuresAcrossPropertiesAreCollectedTogether() throws {
        let model = try ManagedObjectModel(entities: [
            EntityDescription(name: "Event", attributes: [
                AttributeDescription(name: "name", type: .string, isOptional: false),
                AttributeDescription(name: "seats", type: .integer32, validation: AttributeValidation(minimum: 1)),
                AttributeDescription(name: "price", type: .decimal, validation: AttributeValidation(maximum: 100)),
                AttributeDescription(name: "when", type: .date, validation: AttributeValidation(
                    earliestDate: Date(timeIntervalSince1970: 0), latestDate: Date(timeIntervalSince1970: 100))),
            ]),
        ])
        let event = ManagedObject(entity: model.entitiesByName["Event"]!)
        try event.setValue(0, forKey: "seats")
        try event.setValue(Decimal(string: "100.5")!, forKey: "price")
        try event.setValue(Date(timeIntervalSince1970: -1), forKey: "when")
        let found = failures { try event.validateForInsert() }
        #expect(Set(found.map { $0.key ?? "" }) == ["name", "seats", "price", "when"])
        #expect(found.contains(ValidationFailure(objectID: event.objectID, key: "name", reason: .missingValue)))
        #expect(found.contains(ValidationFailure(objectID: event.objectID, key: "seats", reason: .belowMinimum(1))))
        #expect(found.contains(ValidationFailure(objectID: event.objectID, key: "price", reason: .aboveMaximum(100))))
        #expect(found.contains(ValidationFailure(objectID: event.objectID, key: "when", reason: .tooEarly(Date(timeIntervalSince1970: 0)))))
        try event.setValue(Date(timeIntervalSince1970: 101), forKey: "when")
        #expect(failures { try event.validateValue(try event.value(forKey: "when"), forKey: "when") }.map(\.reason)
            == [.tooLate(Date(timeIntervalSince1970: 100))])
        // Every failure names the object and describes itself.
        let error = StrataError.validation(found)
        #expect(error.description.contains("Event.name is required"))
    }

    @Test func relationshipCountsAndRequiredToOne() {
        let list = Playlist()
        list.tracks = (0..<4).map { _ in Track() }
        #expect(failures { try list.validateForUpdate() }.map(\.reason) == [.tooManyObjects(maximum: 3, actual: 4)])
        let person = Person()
        #expect(failures { try person.validateForInsert() }.map(\.reason) == [.missingValue])
        person.passport = Passport()
        #expect(failures { try person.validateForInsert() }.isEmpty)
    }

    @Test func denyDeleteRule() {
        let tag = Tag()
        let note = Note()
        #expect(failures { try tag.validateForDelete() }.isEmpty)
        note.tags = [tag]
        #expect(failures { try tag.validateForDelete() }.map(\.reason) == [.deleteDenied(count: 1)])
    }

    @Test func overridesAddTheirOwnRulesToTheModels() {
        let task = Chore()
        task.title = ""
        task.estimate = -1
        let found = failures { try task.validateForInsert() }
        #expect(Set(found.map(\.reason)) == [.custom("a title is needed"), .belowMinimum(0), .custom("chores are never free")])
    }

    @Test("the Swift runtime tells which classes run validateValue(_:forKey:) of their own: overriders and their subclasses do, others run ManagedObject's")
    func overridesOfValidateValueAreKnown() {
        #expect(!ManagedObject.overridesValidateValue(ManagedObject.self))
        #expect(!ManagedObject.overridesValidateValue(Plainly.self))
        #expect(ManagedObject.overridesValidateValue(Chore.self))
        #expect(ManagedObject.overridesValidateValue(Checked.self))
        #expect(ManagedObject.overridesValidateValue(CheckedAgain.self))   // inherits Checked's override
        #expect(!ManagedObject.overridesValidateValue(Note.self))
    }

    @Test("an entity whose rules cannot fail skips the per-property calls only for a class that adds no rules: an override is still called for every property, also through a subclass of a class that skips")
    func skippingNeverHidesAnOverride() throws {
        let model = try ManagedObjectModel(types: [Plainly.self, Checked.self])
        let plain = try #require(model.entitiesByName["Plainly"]), checked = try #require(model.entitiesByName["Checked"])
        #expect(plain.skipsPropertyValidation && !checked.skipsPropertyValidation)
        #expect(!(try #require(NotesModel.model.entitiesByName["Note"])).skipsPropertyValidation)  // it has rules

        let object = Checked(entity: checked)
        object.name = "bad"
        #expect(failures { try object.validateForInsert() }.map(\.key) == ["name"])
        object.name = "good"
        #expect(failures { try object.validateForUpdate() }.isEmpty)
        // An object of an overriding subclass of the skipping entity's class.
        let sub = PlainlyChecked(entity: plain)
        sub.name = "bad"
        #expect(failures { try sub.validateForInsert() }.map(\.reason) == [.custom("bad name")])
        // A nil in a field that cannot hold it is still reported for a skipping entity.
        let empty = Plainly(entity: plain)
        try empty.setValue(nil, forKey: "name")
        #expect(failures { try empty.validateForInsert() }.map(\.reason) == [.missingValue])
        let fine = Plainly(entity: plain)
        fine.name = "anything"
        #expect(failures { try fine.validateForInsert() }.isEmpty)
    }

    @Test func validateValueRejectsValuesOfTheWrongType() {
        let note = Note()
        #expect(failures { try note.validateValue("high", forKey: "priority") }.map(\.reason) == [.wrongType(expected: "Int16")])
        #expect(failures { try note.validateValue(Note(), forKey: "tags") }.map(\.reason) == [.wrongType(expected: "a collection of objects")])
        #expect(throws: StrataError.unknownKey(key: "nope", entity: "Note")) { try note.validateValue(nil, forKey: "nope") }
    }
}

/// Custom validation: a per-key rule and an object-wide rule.
final class Chore: ManagedObject {
    @Attribute var title: String = ""
    @Attribute(validation: AttributeValidation(minimum: 0)) var estimate: Int = 0

    override func validateValue(_ value: Any?, forKey key: String) throws {
        var failures: [ValidationFailure] = []
        do {
            try super.validateValue(value, forKey: key)
        } catch let error as StrataError where error.code == .validation {
            failures = error.validationFailures
        }
        if key == "title", (value as? String)?.isEmpty ?? true {
            failures.append(ValidationFailure(objectID: objectID, key: key, reason: .custom("a title is needed")))
        }
        if !failures.isEmpty { throw StrataError.validation(failures) }
    }

    override func validateForInsert() throws {
        var failures: [ValidationFailure] = []
        do {
            try super.validateForInsert()
        } catch let error as StrataError where error.code == .validation {
            failures = error.validationFailures
        }
        if estimate <= 0 { failures.append(ValidationFailure(objectID: objectID, key: nil, reason: .custom("chores are never free"))) }
        if !failures.isEmpty { throw StrataError.validation(failures) }
    }
}

/// No rules, no override: its saves ask nothing of each property.
class Plainly: ManagedObject {
    @Attribute var name: String = ""
    @Attribute var count: Int64 = 0
}

/// An overriding subclass of a class whose entity skips the per-property calls.
final class PlainlyChecked: Plainly {
    override func validateValue(_ value: Any?, forKey key: String) throws {
        if key == "name", value as? String == "bad" {
            throw StrataError.validation([ValidationFailure(objectID: objectID, key: key, reason: .custom("bad name"))])
        }
        try super.validateValue(value, forKey: key)
    }
}

/// No model rules, one rule of its own.
class Checked: ManagedObject {
    @Attribute var name: String = ""

    override func validateValue(_ value: Any?, forKey key: String) throws {
        if key == "name", value as? String == "bad" {
            throw StrataError.validation([ValidationFailure(objectID: objectID, key: key, reason: .custom("bad name"))])
        }
        try super.validateValue(value, forKey: key)
    }
}

/// Inherits `Checked`'s override.
final class CheckedAgain: Checked {}
