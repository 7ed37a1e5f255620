import Foundation

/// The aggregates of a dictionary fetch over numbers, accumulated straight from encoded
/// records: each row's fields are walked once, the aggregated ones read as `Int64` or
/// `Double` and added in place, no value boxed. What `sum(score)` over a million rows runs
/// (`make bench` scenario 11); a fetch with groups, key paths or non-numeric aggregates
/// takes the general path (``Groups``).
struct NumericAggregates {
    /// One aggregate's running value.
    struct Accumulator {
        let function: ExpressionDescription.Function
        /// Integer attributes sum exactly; floating-point ones in `Double`.
        let isInteger: Bool
        /// Min and max of a `float` attribute come back as a `Float`.
        let isFloat: Bool
        var count = 0
        var integerSum: Int64 = 0
        var doubleSum: Double = 0
        /// The sum's wraps past Int64: +1 for each past the top, -1 past the bottom. The
        /// true sum is `integerSum` + `carries` × 2⁶⁴, so it fits when they cancel, in
        /// whatever order the rows came.
        var carries: Int64 = 0
        var overflowed: Bool { carries != 0 }
        var integerExtreme: Int64 = 0
        var doubleExtreme: Double = 0

        @inline(__always)
        mutating func add(integer value: Int64) {
            count &+= 1
            switch function {
            case .count: break
            case .sum, .average:
                let (sum, overflow) = integerSum.addingReportingOverflow(value)
                if overflow { carries &+= value < 0 ? -1 : 1 }
                integerSum = sum
                doubleSum += Double(value)
            case .min: if count == 1 || value < integerExtreme { integerExtreme = value }
            case .max: if count == 1 || value > integerExtreme { integerExtreme = value }
            }
        }

        @inline(__always)
        mutating func add(double value: Double) {
            count &+= 1
            switch function {
            case .count: break
            case .sum, .average: doubleSum += value
            case .min, .max: take(extreme: value)
            }
        }

        /// Keeps `value` when it is a new minimum or maximum (kept out of the sums' loop).
        @inline(never)
        private mutating func take(extreme value: Double) {
            // In the order sorting uses: NaN after every number.
            if count == 1 { doubleExtreme = value; return }
            let order = FetchSorting.compare(.double(value), .double(doubleExtreme), .literal)
            if function == .min ? order == .orderedAscending : order == .orderedDescending { doubleExtreme = value }
        }

        /// The aggregate's value, as the general path makes it.
        func value(named name: String, keyPath: String) throws -> ResultValue {
            switch function {
            case .count:
                return .attribute(.integer(Int64(count)))
            case .sum:
                if isInteger {
                    if overflowed { throw StrataError.invalidFetchRequest("the sum \(name) of \(keyPath) does not fit in an Int64") }
                    return .attribute(.integer(integerSum))
                }
                return .attribute(.double(doubleSum))
            case .average:
                guard count > 0 else { return .null }
                return .attribute(.double((isInteger && !overflowed ? Double(integerSum) : doubleSum) / Double(count)))
            case .min, .max:
                guard count > 0 else { return .null }
                if isInteger { return .attribute(.integer(integerExtreme)) }
                return .attribute(isFloat ? .float(Float(doubleExtreme)) : .double(doubleExtreme))
            }
        }
    }

    private let shape: DictionaryShape
    /// The attribute each aggregate reads (nil for `self`).
    private let attributes: [String?]
    private(set) var accumulators: [Accumulator]
    /// The aggregates of `self` (counts of rows).
    private let selfCounts: [Int]

    /// The fast path for `shape`, or nil when it does not apply: aggregates only, no
    /// groups, each of one numeric attribute of the entity (or a count of anything).
    init?(_ shape: DictionaryShape) {
        guard !shape.aggregates.isEmpty, shape.groups.isEmpty, shape.outputs.isEmpty else { return nil }
        var attributes: [String?] = []
        var accumulators: [Accumulator] = []
        var selfCounts: [Int] = []
        for (index, (expression, path)) in shape.aggregates.enumerated() {
            let steps = shape.paths[path].steps
            if steps.isEmpty, expression.function == .count {
                attributes.append(nil)
                selfCounts.append(index)
                accumulators.append(Accumulator(function: .count, isInteger: true, isFloat: false))
                continue
            }
            guard steps.count == 1, case .attribute(let name, let type) = steps[0] else { return nil }
            let isInteger: Bool
            switch type {
            case .integer16, .integer32, .integer64: isInteger = true
            case .double, .float: isInteger = false
            default: return nil
            }
            attributes.append(name)
            accumulators.append(Accumulator(function: expression.function, isInteger: isInteger, isFloat: type == .float))
        }
        self.shape = shape
        self.attributes = attributes
        self.accumulators = accumulators
        self.selfCounts = selfCounts
    }

    /// The one attribute the aggregates of attributes read, when they all read the same
    /// (besides counts of `self`): what an index of it can answer alone.
    var onlyAttribute: String? {
        let names = Set(attributes.compactMap { $0 })
        return names.count == 1 ? names.first : nil
    }

    /// Which aggregates read each field of `storage`'s records.
    func fieldMap(of storage: EntityStorage) -> FieldMap {
        var fields: [(field: UInt32, aggregate: Int)] = []
        for (index, name) in attributes.enumerated() {
            guard let name, let slot = storage.attributeSlot(named: name), let field = storage.attributes[slot].field else { continue }
            fields.append((field, index))
        }
        var first = [Int](repeating: -1, count: Int(fields.map(\.field).max() ?? 0) + 1)
        var next = [Int](repeating: -1, count: attributes.count)
        for (field, index) in fields.reversed() {
            next[index] = first[Int(field)]
            first[Int(field)] = index
        }
        let single = fields.count == 1 ? (number: UInt64(fields[0].field), target: fields[0].aggregate) : nil
        return FieldMap(first: first, next: next, single: single)
    }

    /// Adds one stored record of an entity to `targets`, which say which aggregates read
    /// which fields (``fieldMap(of:)``) and hold or reach their accumulators. Counts of
    /// `self` are not added here: the scan adds the rows it visited. `key` is called for the
    /// row's key only when its record turns out corrupt.
    ///
    /// Every read is bounds-checked; the walk stops after the last field aggregated
    /// (fields are stored in increasing number), and field order is not validated here (a
    /// fetch of the objects does that).
    @inline(__always)
    static func add<Targets: FieldTargets>(
        record: UnsafeRawBufferPointer, to targets: inout Targets, storage: EntityStorage, key: () -> UInt64
    ) throws {
        guard accumulate(record, &targets) else {
            throw StrataError.corruptRecord(entity: storage.name, primaryKey: key(), reason: "the record's fields do not decode")
        }
    }

    /// Adds `record`'s aggregated fields; false when the record does not decode.
    ///
    /// The per-row loop of `sum(score)` over a million rows: written for the common record
    /// (one-byte field heads, short varints) with wrapping arithmetic on offsets that are
    /// bounds-checked before each read, so that it compiles to a few instructions a field.
    @inline(__always)
    private static func accumulate<Targets: FieldTargets>(_ record: UnsafeRawBufferPointer, _ targets: inout Targets) -> Bool {
        // One pass over the fields, the cursor in locals (see RecordCodec for the format).
        let count = record.count
        guard let base = record.baseAddress?.assumingMemoryBound(to: UInt8.self), count > 1, base[0] == RecordCodec.formatVersion
        else { return false }
        // The record's version: one byte below 128.
        var offset = 2
        if base[1] >= 0x80 {
            offset = 1
            guard RecordWalker.skipVarint(base, count, &offset) else { return false }
        }
        let limit = targets.limit
        while offset < count {
            // A field head: one byte for field numbers below 8.
            var head = UInt64(base[offset])
            offset &+= 1
            if head >= 0x80 {
                offset &-= 1
                guard let long = RecordWalker.varint(base, count, &offset) else { return false }
                head = long
            }
            let number = head >> 4
            // Fields come in increasing number: past the last aggregated one, nothing is read.
            guard number < limit else { return true }
            let read = targets.reads(number)
            switch UInt8(truncatingIfNeeded: head) & 0xF {
            case TagCode.integer:
                guard read else {
                    guard RecordWalker.skipVarint(base, count, &offset) else { return false }
                    continue
                }
                guard let raw = RecordWalker.varint(base, count, &offset) else { return false }
                targets.add(integer: Int64(bitPattern: raw >> 1) ^ -Int64(bitPattern: raw & 1), field: number)
            case TagCode.double:
                guard count &- offset >= 8 else { return false }
                if read {
                    let value = Double(bitPattern: UInt64(littleEndian: UnsafeRawPointer(base + offset).loadUnaligned(as: UInt64.self)))
                    targets.add(double: value, field: number)
                }
                offset &+= 8
            case TagCode.float:
                guard count &- offset >= 4 else { return false }
                if read {
                    let value = Float(bitPattern: UInt32(littleEndian: UnsafeRawPointer(base + offset).loadUnaligned(as: UInt32.self)))
                    targets.add(double: Double(value), field: number)
                }
                offset &+= 4
            case TagCode.date:
                guard count &- offset >= 8 else { return false }
                offset &+= 8
            case TagCode.falseValue, TagCode.trueValue:
                continue
            case TagCode.uuid:
                guard count &- offset >= 16 else { return false }
                offset &+= 16
            case TagCode.string, TagCode.uri, TagCode.decimal,
                 TagCode.binaryData, TagCode.transformable:
                var length = UInt64(offset < count ? base[offset] : 0x80)
                offset &+= 1
                if length >= 0x80 {
                    offset &-= 1
                    guard let long = RecordWalker.varint(base, count, &offset) else { return false }
                    length = long
                }
                guard length <= UInt64(count &- offset) else { return false }
                offset &+= Int(truncatingIfNeeded: length)
            default:
                return false
            }
        }
        return true
    }

    /// Lends the accumulators out for a scan: `body` adds records to them
    /// (``add(record:first:next:to:storage:key:)``) and returns how many rows it visited,
    /// which the counts of `self` take.
    mutating func withAccumulators(_ body: (UnsafeMutableBufferPointer<Accumulator>) throws -> Int) rethrows {
        let visited = try accumulators.withUnsafeMutableBufferPointer { try body($0) }
        for index in selfCounts { accumulators[index].count += visited }
    }

    /// Adds a row as a snapshot (a server store's, or a parent's).
    mutating func add(snapshot: ObjectSnapshot, entity: EntityDescription?) {
        for index in selfCounts { accumulators[index].count += 1 }
        guard let entity else { return }
        for (index, name) in attributes.enumerated() {
            guard let name, let slot = entity.attributeSlot(named: name), slot < snapshot.attributes.count else { continue }
            switch snapshot.attributes[slot] {
            case .integer(let value)?: accumulators[index].add(integer: value)
            case .double(let value)?: accumulators[index].add(double: value)
            case .float(let value)?: accumulators[index].add(double: Double(value))
            default: break
            }
        }
    }

    /// The result's values: the aggregates, in order.
    func values() throws -> [ResultValue] {
        try zip(accumulators, shape.aggregates).map { accumulator, aggregate in
            try accumulator.value(named: aggregate.expression.name, keyPath: aggregate.expression.keyPath)
        }
    }
}

/// Which aggregates of a ``NumericAggregates`` read which fields of an entity's records,
/// and where their accumulators are.
protocol FieldTargets {
    /// Fields numbered from here on are read by none.
    var limit: UInt64 { get }
    /// Whether an aggregate reads field `number` (below ``limit``).
    func reads(_ number: UInt64) -> Bool
    /// Adds field `number`'s integer value to the aggregates reading it.
    mutating func add(integer value: Int64, field number: UInt64)
    /// Adds field `number`'s floating-point value to the aggregates reading it.
    mutating func add(double value: Double, field number: UInt64)
}

/// Which aggregates read each field of an entity's records.
struct FieldMap {
    /// For field n, `first[n]` is the first aggregate reading it (-1 for none).
    let first: [Int]
    /// For aggregate i, the next reading the same field (-1 for none).
    let next: [Int]
    /// The one field one aggregate reads, when that is all (a `sum(score)`): its own walk.
    let single: (number: UInt64, target: Int)?

    /// Runs a walk of records or entries over this map's targets and returns its count:
    /// `one` when one field is read by one aggregate (its accumulator held by the walk,
    /// stored back however the walk ends), `many` otherwise.
    func walk(
        adding accumulators: UnsafeMutableBufferPointer<NumericAggregates.Accumulator>,
        one: (inout OneField) throws -> Int, many: (inout ManyFields) throws -> Int
    ) rethrows -> Int {
        guard let (number, target) = single else { return try withManyFields(accumulators, many) }
        var targets = OneField(number: number, accumulator: accumulators[target])
        defer { accumulators[target] = targets.accumulator }
        return try one(&targets)
    }

    /// Calls `body` with this map's arrays as targets adding to `accumulators`.
    func withManyFields<R>(
        _ accumulators: UnsafeMutableBufferPointer<NumericAggregates.Accumulator>, _ body: (inout ManyFields) throws -> R
    ) rethrows -> R {
        try first.withUnsafeBufferPointer { first in
            try next.withUnsafeBufferPointer { next in
                var targets = ManyFields(firstOf: first, nextOf: next, accumulators: accumulators)
                return try body(&targets)
            }
        }
    }
}

/// One field read by one aggregate, whose accumulator it holds during a scan (in
/// registers, its function's switch out of the loop), to be stored back after it.
struct OneField: FieldTargets {
    let number: UInt64
    var accumulator: NumericAggregates.Accumulator
    var limit: UInt64 { number &+ 1 }
    @inline(__always) func reads(_ number: UInt64) -> Bool { number == self.number }
    @inline(__always) mutating func add(integer value: Int64, field number: UInt64) { accumulator.add(integer: value) }
    @inline(__always) mutating func add(double value: Double, field number: UInt64) { accumulator.add(double: value) }
}

/// Any fields, any aggregates: a ``FieldMap``'s arrays and the accumulators.
struct ManyFields: FieldTargets {
    let firstOf: UnsafeBufferPointer<Int>
    let nextOf: UnsafeBufferPointer<Int>
    let accumulators: UnsafeMutableBufferPointer<NumericAggregates.Accumulator>
    var limit: UInt64 { UInt64(firstOf.count) }
    @inline(__always) func reads(_ number: UInt64) -> Bool { firstOf[Int(truncatingIfNeeded: number)] >= 0 }

    @inline(__always)
    mutating func add(integer value: Int64, field number: UInt64) {
        forEachReading(number) { $0.add(integer: value) }
    }

    @inline(__always)
    mutating func add(double value: Double, field number: UInt64) {
        forEachReading(number) { $0.add(double: value) }
    }

    /// Calls `body` with the accumulator of each aggregate reading field `number`.
    @inline(__always)
    private func forEachReading(_ number: UInt64, _ body: (inout NumericAggregates.Accumulator) -> Void) {
        var target = firstOf[Int(truncatingIfNeeded: number)]
        while target >= 0 {
            body(&accumulators[target])
            target = nextOf[target]
        }
    }
}

/// Reading the varints of an encoded record in place (``RecordCodec``'s format), for
/// scans that read a few fields of every row.
enum RecordWalker {
    /// Moves `offset` past the varint there; false when it runs past the end or past 64
    /// bits (ten bytes).
    @inline(__always)
    static func skipVarint(_ base: UnsafePointer<UInt8>, _ count: Int, _ offset: inout Int) -> Bool {
        // Eight bytes at once where eight remain: the first byte without its high bit ends it.
        if count &- offset >= 8 {
            let word = UInt64(littleEndian: UnsafeRawPointer(base + offset).loadUnaligned(as: UInt64.self))
            let ends = ~word & 0x8080_8080_8080_8080
            if ends != 0 {
                offset &+= ends.trailingZeroBitCount &>> 3 &+ 1
                return true
            }
        }
        let end = min(count, offset &+ 10)
        var at = offset
        while at < end {
            let byte = base[at]
            at &+= 1
            if byte < 0x80 {
                offset = at
                return true
            }
        }
        return false
    }

    /// The varint at `offset` of the `count` bytes at `base`, `offset` moved past it; nil
    /// when it runs past the end or past 64 bits.
    @inline(__always)
    static func varint(_ base: UnsafePointer<UInt8>, _ count: Int, _ offset: inout Int) -> UInt64? {
        guard offset < count else { return nil }
        let first = base[offset]
        offset += 1
        if first < 0x80 { return UInt64(first) }
        var result = UInt64(first & 0x7F)
        var shift: UInt64 = 7
        while offset < count, shift < 64 {
            let byte = base[offset]
            offset += 1
            result |= UInt64(byte & 0x7F) << shift
            if byte < 0x80 { return result }
            shift += 7
        }
        return nil
    }
}

/// ``RecordCodec``'s value tags as literal bytes, for `switch`es in per-row loops (the
/// enum's `rawValue` need not fold to a constant there).
private enum TagCode {
    static let integer: UInt8 = 1, double: UInt8 = 2, float: UInt8 = 3, falseValue: UInt8 = 4, trueValue: UInt8 = 5
    static let string: UInt8 = 6, date: UInt8 = 7, binaryData: UInt8 = 8, uuid: UInt8 = 9, uri: UInt8 = 10
    static let decimal: UInt8 = 11, transformable: UInt8 = 12
}
