import Foundation

/// The three ways every scenario runs.
public enum Binding: String, CaseIterable, Sendable {
    case strata = "Strata"
    case raw = "raw LMDB"
    case grdb = "GRDB"

    /// The order of a round: alternated, so that no binding always runs on a warmer
    /// machine (or a fuller page cache) than another.
    public static func order(round: Int) -> [Binding] {
        round % 2 == 0 ? [.strata, .raw, .grdb] : [.grdb, .raw, .strata]
    }
}

/// One measured value of the table.
public struct Measure: Sendable {
    public enum Kind: Sendable {
        /// Seconds; lower is better.
        case time
        /// KiB of peak resident memory; lower is better.
        case memory
        /// Operations per second; higher is better.
        case rate(unit: String)
        /// A unitless ratio (readers under a writer / idle); shown as is, not compared.
        case ratio
    }

    public var value: Double
    public var kind: Kind

    public init(_ value: Double, _ kind: Kind) {
        self.value = value
        self.kind = kind
    }

    public static func time(_ seconds: Double) -> Measure { Measure(seconds, .time) }
    public static func memory(kib: Int) -> Measure { Measure(Double(kib), .memory) }
    public static func rate(_ perSecond: Double, _ unit: String) -> Measure { Measure(perSecond, .rate(unit: unit)) }
    public static func ratio(_ value: Double) -> Measure { Measure(value, .ratio) }

    /// What the value costs, lower being better: time, memory, or 1/rate. Nil for ratios.
    var cost: Double? {
        switch kind {
        case .time, .memory: value
        case .rate: value > 0 ? 1 / value : .infinity
        case .ratio: nil
        }
    }

    public var text: String {
        switch kind {
        case .time: formatSeconds(value)
        case .memory: String(format: "%.0f MiB", value / 1024)
        case .rate(let unit): "\(formatCount(value)) \(unit)"
        case .ratio: String(format: "%.2f", value)
        }
    }
}

/// `1.234 s`, `12.3 ms`, `45.6 µs`.
public func formatSeconds(_ seconds: Double) -> String {
    if seconds >= 1 { return String(format: "%.3f s", seconds) }
    if seconds >= 1e-3 { return String(format: "%.1f ms", seconds * 1e3) }
    return String(format: "%.1f µs", seconds * 1e6)
}

/// `1,234,567` (whole numbers), `12.3` (below 100).
public func formatCount(_ value: Double) -> String {
    if value < 100 { return String(format: "%.1f", value) }
    let digits = String(Int(value.rounded()))
    var grouped = ""
    for (index, character) in digits.reversed().enumerated() {
        if index > 0 && index % 3 == 0 { grouped.append(",") }
        grouped.append(character)
    }
    return String(grouped.reversed())
}

/// A target the table checks: met, missed, or not measured (and why).
public struct Target: Sendable {
    public var text: String
    public var met: Bool?

    public init(_ text: String, met: Bool?) {
        self.text = text
        self.met = met
    }

    var cell: String {
        switch met {
        case .some(true): "met: \(text)"
        case .some(false): "**missed**: \(text)"
        case .none: "not measured: \(text)"
        }
    }
}

/// One row of the summary table.
public struct ReportRow: Sendable {
    public var scenario: String
    public var values: [Binding: Measure]
    public var target: Target?
    public var note: String

    public init(_ scenario: String, _ values: [Binding: Measure], target: Target? = nil, note: String = "") {
        self.scenario = scenario
        self.values = values
        self.target = target
        self.note = note
    }

    /// Strata's cost over raw LMDB's (>1: Strata slower or bigger).
    public var strataOverRaw: Double? { ratio(.strata, .raw) }
    /// GRDB's cost over Strata's (>1: Strata faster or smaller by that factor).
    public var grdbOverStrata: Double? { ratio(.grdb, .strata) }

    private func ratio(_ numerator: Binding, _ denominator: Binding) -> Double? {
        guard let top = values[numerator]?.cost, let bottom = values[denominator]?.cost, bottom > 0 else { return nil }
        return top / bottom
    }
}

/// A table of its own (details of a scenario): a header and rows of text.
public struct DetailTable: Sendable {
    public var title: String
    public var header: [String]
    public var rows: [[String]]

    public init(title: String, header: [String], rows: [[String]] = []) {
        self.title = title
        self.header = header
        self.rows = rows
    }
}

/// Everything a run prints: the summary rows, detail tables and notes.
public final class Report {
    public var rows: [ReportRow] = []
    public var details: [DetailTable] = []
    public var notes: [String] = []

    public init() {}

    public func add(_ row: ReportRow) { rows.append(row) }

    /// The whole report as markdown.
    public func markdown(title: String, preamble: [String]) -> String {
        var lines = ["## \(title)", ""]
        lines += preamble
        lines.append("")
        lines.append("Ratios: **Strata/raw** = Strata's time (or memory) ÷ raw LMDB's, so 1.00 = parity and 2.00 = "
            + "Strata takes twice as long; **GRDB/Strata** = GRDB's time (or memory) ÷ Strata's, so 3.00 = Strata is "
            + "3× faster than GRDB and 0.50 = GRDB is 2× faster. For rates (saves/s, queries/s) the same direction "
            + "holds: each ratio compares the cost of one operation.")
        lines.append("")
        lines.append(markdownTable(
            header: ["scenario", "Strata", "raw LMDB", "GRDB", "Strata/raw", "GRDB/Strata", "target", "notes"],
            rows: rows.map { row in
                [
                    row.scenario,
                    row.values[.strata]?.text ?? "—",
                    row.values[.raw]?.text ?? "—",
                    row.values[.grdb]?.text ?? "—",
                    row.strataOverRaw.map { String(format: "%.2f", $0) } ?? "—",
                    row.grdbOverStrata.map { String(format: "%.2f", $0) } ?? "—",
                    row.target?.cell ?? "",
                    row.note,
                ]
            }))
        for table in details {
            lines.append("")
            lines.append("### \(table.title)")
            lines.append("")
            lines.append(markdownTable(header: table.header, rows: table.rows))
        }
        let targets = rows.compactMap(\.target)
        if !targets.isEmpty {
            lines.append("")
            lines.append("### Targets")
            lines.append("")
            let met = targets.filter { $0.met == true }.count
            let missed = targets.filter { $0.met == false }.count
            let unmeasured = targets.filter { $0.met == nil }.count
            lines.append("\(met) met, \(missed) missed, \(unmeasured) not measured.")
        }
        if !notes.isEmpty {
            lines.append("")
            lines.append("### Notes")
            lines.append("")
            lines += notes.map { "- " + $0 }
        }
        return lines.joined(separator: "\n") + "\n"
    }
}

/// A markdown table, cells padded to their column's width.
public func markdownTable(header: [String], rows: [[String]]) -> String {
    let escaped = rows.map { $0.map { $0.replacingOccurrences(of: "|", with: "\\|") } }
    let widths = header.indices.map { column in
        max(3, ([header[column]] + escaped.map { column < $0.count ? $0[column] : "" }).map(\.count).max() ?? 0)
    }
    func line(_ cells: [String]) -> String {
        "| " + header.indices.map { column in
            let cell = column < cells.count ? cells[column] : ""
            return cell + String(repeating: " ", count: max(0, widths[column] - cell.count))
        }.joined(separator: " | ") + " |"
    }
    var lines = [line(header), "| " + widths.map { String(repeating: "-", count: $0) }.joined(separator: " | ") + " |"]
    lines += escaped.map(line)
    return lines.joined(separator: "\n")
}
