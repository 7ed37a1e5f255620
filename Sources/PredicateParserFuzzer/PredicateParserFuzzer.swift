// libFuzzer target for the predicate format parser (`make fuzz`).
//
// Every input (read as UTF-8, invalid bytes replaced) must parse to a predicate or throw a
// FetchPredicateError whose position is inside the string: never a trap, never a hang, never a
// stack overflow. What parses must print as text that parses back to an equal predicate,
// and so must what substituting its variables gives.
// Built normally (swift build) it replays the files named on its command line instead.
import Foundation
import Strata

@_cdecl("LLVMFuzzerTestOneInput")
public func predicateParserFuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    checkOneInput(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

/// The arguments, in order; an input uses as many of them as it has placeholders.
let fixedArguments: [any Sendable] = [
    "inbox", 3, 2.5, "title", [1, 2], String?.none, Date(timeIntervalSinceReferenceDate: 0), "tags.@count", Set(["a"]),
]

func checkOneInput(_ bytes: UnsafeRawBufferPointer) {
    let format = String(decoding: bytes, as: UTF8.self)
    // Fewer arguments first, so that a format with k placeholders gets the first k.
    for count in 0...fixedArguments.count {
        do throws(Strata.FetchPredicateError) {
            let predicate = try FetchPredicate(format: format, argumentArray: Array(fixedArguments.prefix(count)))
            expectRoundTrip(predicate, from: format)
            let variables = Dictionary(uniqueKeysWithValues: predicate.variableNames.map { ($0, 7 as any Sendable) })
            if let substituted = try? predicate.substituting(variables) {
                guard substituted.variableNames.isEmpty else {
                    fatalError("variables left after substituting them in \(format.debugDescription)")
                }
                expectRoundTrip(substituted, from: format)
            }
            return
        } catch {
            guard error.position.map({ (0...format.count).contains($0) }) ?? false else {
                fatalError("\(format.debugDescription): an error outside the string: \(error)")
            }
            if error.kind != .missingArgument { return }
        }
    }
}

/// The printed predicate parses back to an equal one (NaN constants, never equal to
/// themselves, print the same instead).
func expectRoundTrip(_ predicate: FetchPredicate, from format: String) {
    let printed = predicate.description
    guard let again = try? FetchPredicate(format: printed) else {
        fatalError("\(format.debugDescription) printed as \(printed.debugDescription), which does not parse")
    }
    guard again == predicate || (again.description == printed && printed.lowercased().contains("nan")) else {
        fatalError("\(format.debugDescription) printed as \(printed.debugDescription), which parses as \(again)")
    }
}

#if !STRATA_FUZZING
/// Replays corpus files: `PredicateParserFuzzer FILE...`.
@main
enum ReplayPredicateInputs {
    static func main() throws {
        for path in CommandLine.arguments.dropFirst() {
            let data = try Data(contentsOf: URL(fileURLWithPath: path))
            data.withUnsafeBytes { checkOneInput($0) }
        }
    }
}
#endif
