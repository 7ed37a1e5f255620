import Foundation

extension PredicateNode {
    /// The node with every `$NAME` replaced by the constant `variables[NAME]` (converted
    /// as `%@` converts arguments: arrays and sets become `.array`, nil `.null`).
    ///
    /// - Throws: ``FetchPredicateError`` of kind `.missingVariable` for a variable `variables`
    ///   lacks, `.argumentType` for a value no predicate can hold or one its comparison
    ///   cannot take (`x BETWEEN $range` with anything but 2 values, `x IN $set` with a
    ///   number).
    func substituting(_ variables: [String: any Sendable]) throws(FetchPredicateError) -> PredicateNode {
        switch self {
        case .constant:
            return self
        case .not(let operand):
            return .not(try operand.substituting(variables))
        case .and(let operands):
            var result: [PredicateNode] = []
            for operand in operands { result.append(try operand.substituting(variables)) }
            return .and(result)
        case .or(let operands):
            var result: [PredicateNode] = []
            for operand in operands { result.append(try operand.substituting(variables)) }
            return .or(result)
        case .comparison(var comparison):
            comparison.left = try comparison.left.substituting(variables)
            let right = try comparison.right.substituting(variables)
            if case .variable(let name) = comparison.right,
               let problem = PredicateFormatParser.checkRightOperand(right, of: comparison.op) {
                throw FetchPredicateError(kind: .argumentType, message: "$\(name): \(problem)")
            }
            comparison.right = right
            return .comparison(comparison)
        }
    }

    /// The names of the `$VARIABLE`s in the node.
    var variableNames: Set<String> {
        var names: Set<String> = []
        collectVariableNames(into: &names)
        return names
    }

    private func collectVariableNames(into names: inout Set<String>) {
        switch self {
        case .constant:
            break
        case .not(let operand):
            operand.collectVariableNames(into: &names)
        case .and(let operands), .or(let operands):
            for operand in operands { operand.collectVariableNames(into: &names) }
        case .comparison(let comparison):
            comparison.left.collectVariableNames(into: &names)
            comparison.right.collectVariableNames(into: &names)
        }
    }
}

extension PredicateExpression {
    /// The expression with its variables replaced (see ``PredicateNode/substituting(_:)``).
    func substituting(_ variables: [String: any Sendable]) throws(FetchPredicateError) -> PredicateExpression {
        switch self {
        case .keyPath, .constant:
            return self
        case .variable(let name):
            guard let found = variables[name] else {
                throw FetchPredicateError(kind: .missingVariable, message: "no value for the variable $\(name)")
            }
            guard let value = PredicateArguments.value(found) else {
                throw FetchPredicateError(
                    kind: .argumentType,
                    message: "$\(name) takes \(PredicateArguments.objectTypes), not \(PredicateArguments.typeName(found))")
            }
            return .constant(value)
        case .aggregate(let elements):
            var result: [PredicateExpression] = []
            for element in elements { result.append(try element.substituting(variables)) }
            return .aggregate(result)
        }
    }

    func collectVariableNames(into names: inout Set<String>) {
        switch self {
        case .keyPath, .constant:
            break
        case .variable(let name):
            names.insert(name)
        case .aggregate(let elements):
            for element in elements { element.collectVariableNames(into: &names) }
        }
    }
}
