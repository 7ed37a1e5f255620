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
        var overflowed = false
        var integerExtreme: Int64 = 0
        var doubleExtreme: Double = 0

        @inline(__always)
        mutating func add(integer value: Int64) {
            count += 1
            switch function {
            case .count: break
            case .sum, .average:
                let (sum, overflow) = integerSum.addingReportingOverflow(value)
                if overflow { overflowed = true }
                integerSum = sum
                doubleSum += Double(value)
            case .min: if count == 1 || value < integerExtreme { integerExtreme = value }
            case .max: if count == 1 || value > integerExtreme { integerExtreme = value }
            }
        }

        @inline(__always)
        mutating func add(double value: Double) {
            count += 1
            switch function {
            case .count: break
            case .sum, .average: doubleSum += value
            case .min, .max:
                // In the order sorting uses: NaN after every number.
                if count == 1 { doubleExtreme = value; return }
                let order = FetchSorting.compare(.double(value), .double(doubleExtreme), .literal)
                if function == .min ? order == .orderedAscending : order == .orderedDescending { doubleExtreme = value }
            }
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

    /// The aggregates reading each field number of `storage`'s records: for field n,
    /// `first[n]` is the first (-1 for none) and `next[i]` the one after aggregate i.
    func fieldMap(of storage: EntityStorage) -> (first: [Int], next: [Int]) {
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
        return (first, next)
    }

    /// Adds one stored record of `storage`'s entity, whose field map is `first`/`next`
    /// (``fieldMap(of:)``), to `accumulators` (this value's, lent out for a scan: see
    /// ``withAccumulators(_:)``). Counts of `self` are not added here: the scan adds the
    /// rows it visited.
    ///
    /// Every read is bounds-checked; field order is not validated here (a fetch of the
    /// objects does that).
    @inline(__always)
    static func add(
        record: UnsafeRawBufferPointer, first: UnsafeBufferPointer<Int>, next: UnsafeBufferPointer<Int>,
        to accumulators: UnsafeMutableBufferPointer<Accumulator>, storage: EntityStorage, key: PrimaryKey
    ) throws {
        guard accumulate(record, first, next, accumulators) else { throw corrupt(storage, key.rawValue) }
    }

    /// ``add(record:first:next:to:storage:key:)`` for a row met by a cursor, whose key is
    /// decoded only when its record turns out corrupt.
    @inline(__always)
    static func add(
        record: UnsafeRawBufferPointer, first: UnsafeBufferPointer<Int>, next: UnsafeBufferPointer<Int>,
        to accumulators: UnsafeMutableBufferPointer<Accumulator>, storage: EntityStorage, keyBytes: UnsafeRawBufferPointer
    ) throws {
        guard accumulate(record, first, next, accumulators) else {
            throw corrupt(storage, PrimaryKey(encoded: keyBytes)?.rawValue ?? 0)
        }
    }

    /// Adds `record`'s aggregated fields; false when the record does not decode.
    @inline(__always)
    private static func accumulate(
        _ record: UnsafeRawBufferPointer, _ first: UnsafeBufferPointer<Int>, _ next: UnsafeBufferPointer<Int>,
        _ accumulators: UnsafeMutableBufferPointer<Accumulator>
    ) -> Bool {
        // One pass over the fields, the cursor in locals (see RecordCodec for the format).
        let count = record.count
        guard let base = record.baseAddress?.assumingMemoryBound(to: UInt8.self), count > 0, base[0] == RecordCodec.formatVersion
        else { return false }
        var offset = 1
        guard RecordWalker.varint(base, count, &offset) != nil else { return false }
        while offset < count {
            guard let head = RecordWalker.varint(base, count, &offset) else { return false }
            let number = head >> 4
            var target = number < UInt64(first.count) ? first[Int(number)] : -1
            switch UInt8(head & 0xF) {
            case TagCode.integer:
                guard let raw = RecordWalker.varint(base, count, &offset) else { return false }
                guard target >= 0 else { continue }
                let value = Int64(bitPattern: raw >> 1) ^ -Int64(bitPattern: raw & 1)
                while target >= 0 {
                    accumulators[target].add(integer: value)
                    target = next[target]
                }
            case TagCode.double:
                guard count - offset >= 8 else { return false }
                defer { offset += 8 }
                guard target >= 0 else { continue }
                let value = Double(bitPattern: UInt64(littleEndian: UnsafeRawPointer(base + offset).loadUnaligned(as: UInt64.self)))
                while target >= 0 {
                    accumulators[target].add(double: value)
                    target = next[target]
                }
            case TagCode.float:
                guard count - offset >= 4 else { return false }
                defer { offset += 4 }
                guard target >= 0 else { continue }
                let value = Float(bitPattern: UInt32(littleEndian: UnsafeRawPointer(base + offset).loadUnaligned(as: UInt32.self)))
                while target >= 0 {
                    accumulators[target].add(double: Double(value))
                    target = next[target]
                }
            case TagCode.date:
                guard count - offset >= 8 else { return false }
                offset += 8
            case TagCode.falseValue, TagCode.trueValue:
                continue
            case TagCode.uuid:
                guard count - offset >= 16 else { return false }
                offset += 16
            case TagCode.string, TagCode.uri, TagCode.decimal,
                 TagCode.binaryData, TagCode.transformable:
                guard let length = RecordWalker.varint(base, count, &offset), length <= UInt64(count - offset) else { return false }
                offset += Int(length)
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

    private static func corrupt(_ storage: EntityStorage, _ key: UInt64) -> StrataError {
        .corruptRecord(entity: storage.name, primaryKey: key, reason: "the record's fields do not decode")
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

/// Reading the varints of an encoded record in place (``RecordCodec``'s format), for
/// scans that read a few fields of every row.
enum RecordWalker {
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
