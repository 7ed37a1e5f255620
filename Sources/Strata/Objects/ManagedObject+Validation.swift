import CStrataRuntime
import Foundation
internal import StrataLocks

/// Validation: the model's rules, your own rules, every failure reported at once.
extension ManagedObject {
    /// The model's rules for one property (see ``validateValue(_:forKey:)``).
    func validateModelRules(_ value: Any?, forKey key: String) throws {
        let entity = _entity
        let attributeSlot = entity.attributeSlot(named: key)
        // Most values need no conversion to be checked: a value of exactly the attribute's
        // Swift type, of an attribute with no rules, can only fail by being missing. (A
        // transformable value is always converted: its encoding is part of the check.)
        if let slot = attributeSlot, let quick = entity.layout.quickChecks[slot] {
            if let value {
                if Swift.type(of: value) == quick.type { return }
            } else if quick.isOptional {
                return
            }
        }
        var failures: [ValidationFailure] = []
        func fail(_ reason: ValidationFailure.Reason) {
            failures.append(ValidationFailure(objectID: objectID, key: key, reason: reason))
        }
        if let slot = attributeSlot {
            let attribute = entity.attributes[slot]
            let stored: AttributeValue?
            do {
                stored = try attributeValue(from: value, for: attribute)
            } catch {
                fail(.wrongType(expected: attribute.type.swiftTypeName))
                throw StrataError.validation(failures)
            }
            Self.check(stored, against: attribute, fail: fail)
        } else if let relationship = entity.relationship(named: key) {
            let count: Int
            switch value {
            case nil: count = 0
            case is ManagedObject where !relationship.isToMany: count = 1
            case let many as Set<ManagedObject> where relationship.isToMany: count = many.count
            case let many as [ManagedObject] where relationship.isToMany: count = many.count
            default:
                fail(.wrongType(expected: relationship.isToMany ? "a collection of objects" : "an object"))
                throw StrataError.validation(failures)
            }
            if count == 0 {
                // An optional to-many may be empty whatever its minimum count.
                if !relationship.isOptional { fail(.missingValue) }
            } else if relationship.isToMany {
                if count < relationship.minCount { fail(.tooFewObjects(minimum: relationship.minCount, actual: count)) }
                if let maximum = relationship.maxCount, count > maximum {
                    fail(.tooManyObjects(maximum: maximum, actual: count))
                }
            }
        } else {
            throw StrataError.unknownKey(key: key, entity: entity.name)
        }
        if !failures.isEmpty { throw StrataError.validation(failures) }
    }

    /// Checks the deny delete rules (see ``validateForDelete()``).
    func validateDeleteRules() throws {
        var failures: [ValidationFailure] = []
        for (slot, relationship) in entity.relationships.enumerated() where relationship.deleteRule == .deny {
            if !loadRelationshipIfNeeded(slot) { try throwIfStorageFailed() }
            let count = relationshipStorage(at: slot).count
            if count > 0 {
                failures.append(ValidationFailure(objectID: objectID, key: relationship.name, reason: .deleteDenied(count: count)))
            }
        }
        if !failures.isEmpty { throw StrataError.validation(failures) }
    }


    /// Whether objects of `type` run an implementation of ``validateValue(_:forKey:)``
    /// other than `ManagedObject`'s: their class, or an ancestor below `ManagedObject`,
    /// overrides it. Asked of the Swift runtime (CStrataRuntime): Swift has no way to ask
    /// it in the language, and calling the method for every property of every object saved
    /// cost about a fifth of an import when nothing could fail. When the runtime gives no
    /// answer, the class is taken to override it.
    static func overridesValidateValue(_ type: ManagedObject.Type) -> Bool {
        guard let base = strata_validate_value_implementation(unsafeBitCast(ManagedObject.self, to: UnsafeRawPointer.self)),
              let own = strata_validate_value_implementation(unsafeBitCast(type, to: UnsafeRawPointer.self))
        else { return true }
        return base != own
    }

    /// Runs ``validateValue(_:forKey:)`` for every property and gathers the failures.
    ///
    /// Nothing is asked of an object whose entity's rules cannot fail, of exactly the
    /// entity's class when that class adds no rules (it does not override
    /// ``validateValue(_:forKey:)``), when its values are read and hold no nil that a
    /// field cannot hold: every call would pass.
    func validateAllProperties() throws {
        let entity = entity
        if entity.skipsPropertyValidation, _bits & (ObjectBits.faultMask | ObjectBits.nilOverrides) == 0,
           ObjectIdentifier(Swift.type(of: self)) == ObjectIdentifier(entity.managedObjectClass) {
            return
        }
        var failures: [ValidationFailure] = []
        let count = entity.attributes.count
        for index in 0..<(count + entity.relationships.count) {
            let name = index < count ? entity.attributeNames[index] : entity.relationshipNames[index - count]
            do {
                try validateValue(try value(ofSlot: index, attributeCount: count), forKey: name)
            } catch let error as StrataError where error.code == .validation {
                failures += error.validationFailures
            } catch let error as StrataError where error.code == .storage {
                throw error  // the store could not be read: not the object's fault
            } catch {
                failures.append(ValidationFailure(objectID: objectID, key: name, reason: .custom("\(error)")))
            }
        }
        if !failures.isEmpty { throw StrataError.validation(failures) }
    }

    /// ``value(forKey:)`` by slot: attribute slots first, then relationship slots.
    private func value(ofSlot index: Int, attributeCount: Int) throws(StrataError) -> Any? {
        if index < attributeCount {
            guard faultState == .fulfilled || fulfilIfNeeded(property: entity.attributeNames[index]) else { throw inaccessibleError }
            return try swiftAttribute(at: index)
        }
        let slot = index - attributeCount
        guard loadRelationshipIfNeeded(slot) else { throw inaccessibleError }
        return swiftValue(relationshipStorage(at: slot), of: entity.relationships[slot])
    }

    /// The model's rules for one attribute value.
    static func check(
        _ value: AttributeValue?, against attribute: AttributeDescription, fail: (ValidationFailure.Reason) -> Void
    ) {
        guard let value else {
            if !attribute.isOptional { fail(.missingValue) }
            return
        }
        if !attribute.type.accepts(value) { fail(.wrongType(expected: attribute.type.swiftTypeName)) }
        let rules = attribute.validation
        if let number = value.numericValue {
            if let minimum = rules.minimum, number < minimum { fail(.belowMinimum(minimum)) }
            if let maximum = rules.maximum, number > maximum { fail(.aboveMaximum(maximum)) }
        }
        if case .string(let string) = value {
            // Counting characters walks the whole string: only when a rule needs it.
            if rules.minimumLength != nil || rules.maximumLength != nil {
                let length = string.count
                if let minimum = rules.minimumLength, length < minimum { fail(.tooShort(minimumLength: minimum)) }
                if let maximum = rules.maximumLength, length > maximum { fail(.tooLong(maximumLength: maximum)) }
            }
            if let pattern = rules.pattern, !PatternCache.shared.wholeMatch(pattern, string) {
                fail(.patternMismatch(pattern))
            }
        }
        if case .date(let date) = value {
            if let earliest = rules.earliestDate, date < earliest { fail(.tooEarly(earliest)) }
            if let latest = rules.latestDate, date > latest { fail(.tooLate(latest)) }
        }
    }
}

extension AttributeValue {
    /// The value as a `Double` for minimum/maximum rules; nil for non-numeric values.
    /// NaN compares false with everything, so it is reported by neither rule.
    var numericValue: Double? {
        switch self {
        case .integer(let n): Double(n)
        case .double(let d): d
        case .float(let f): Double(f)
        case .decimal(let d): NSDecimalNumber(decimal: d).doubleValue
        default: nil
        }
    }
}

/// Compiled validation patterns, shared by every object (compiling per check is slow).
final class PatternCache: Sendable {
    static let shared = PatternCache()
    private let compiled = LockedValue<[String: NSRegularExpression]>([:])

    /// Whether the whole of `string` matches `pattern`; an invalid pattern (which the
    /// model refuses to build with, and a predicate's MATCHES may hold) matches nothing.
    func wholeMatch(_ pattern: String, _ string: String, caseInsensitive: Bool = false) -> Bool {
        let key = caseInsensitive ? "i:" + pattern : "s:" + pattern
        let expression = compiled.withLock { cache -> NSRegularExpression? in
            if let hit = cache[key] { return hit }
            let options: NSRegularExpression.Options = caseInsensitive ? [.caseInsensitive] : []
            guard let made = try? NSRegularExpression(pattern: "^(?:\(pattern))$", options: options) else { return nil }
            cache[key] = made
            return made
        }
        guard let expression else { return false }
        let range = NSRange(string.startIndex..., in: string)
        return expression.firstMatch(in: string, options: [], range: range) != nil
    }
}

extension AttributeType {
    /// The one Swift type ``ManagedObject/value(forKey:)`` returns for the type, when a
    /// value of it needs no further check (a value of the integer type of the attribute's
    /// width is always in range; a transformable value needs its encoding checked).
    var exactSwiftType: Any.Type? {
        switch self {
        case .double: Double.self
        case .float: Float.self
        case .boolean: Bool.self
        case .string: String.self
        case .date: Date.self
        case .binaryData: Data.self
        case .uuid: UUID.self
        case .uri: URL.self
        case .decimal: Decimal.self
        case .integer16: Int16.self
        case .integer32: Int32.self
        case .integer64: Int64.self
        case .transformable: nil
        }
    }
}
