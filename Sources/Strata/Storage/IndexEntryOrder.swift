import Foundation

/// The order of a save's index entries (byte strings, compared bytewise as LMDB compares
/// keys), for putting them into their B-tree in key order.
///
/// A comparison sort of a bulk import's entries cost more than the LMDB puts it speeds
/// up (about 660 instructions an entry at 10,000 entries, `make profile`). Entries are
/// instead ordered by their first 16 bytes, read as two big-endian words, with a least
/// significant digit radix sort that skips the bytes every entry shares (an integer
/// index of small values and ascending primary keys differs in a few bytes only); entries
/// whose first 16 bytes tie are then ordered by a comparison of their whole bytes. Small
/// batches use the comparison sort alone.
enum IndexEntryOrder {
    /// One entry: where its bytes are, and its first 8 bytes as a big-endian number
    /// (zero-padded).
    typealias Entry = (prefix: UInt64, start: Int32, count: Int32)

    /// An entry's first 16 bytes as two big-endian words, and its place in the input.
    private struct Key {
        var high: UInt64
        var low: UInt64
        var index: Int32
    }

    /// Entries below this count are ordered by comparisons alone.
    static let radixThreshold = 256

    /// `entries` (of the bytes at `base`) in ascending bytewise order of their bytes
    /// (a shorter entry first when it is a prefix of a longer one). Equal entries keep
    /// their relative order.
    static func sorted(_ entries: [Entry], base: UnsafeRawPointer) -> [Entry] {
        func precedes(_ a: Entry, _ b: Entry) -> Bool {
            if a.prefix != b.prefix { return a.prefix < b.prefix }
            let common = Int(min(a.count, b.count))
            let compared = memcmp(base + Int(a.start), base + Int(b.start), common)
            return compared != 0 ? compared < 0 : a.count < b.count
        }
        if entries.indices.dropFirst().allSatisfy({ !precedes(entries[$0], entries[$0 - 1]) }) { return entries }
        guard entries.count >= radixThreshold else { return entries.sorted(by: precedes) }

        // Each entry's first 16 bytes as two words (the second zero-padded), with its place.
        var keys = [Key](repeating: Key(high: 0, low: 0, index: 0), count: entries.count)
        var counts = [Int](repeating: 0, count: 16 * 256)
        keys.withUnsafeMutableBufferPointer { keys in
            counts.withUnsafeMutableBufferPointer { counts in
                for (index, entry) in entries.enumerated() {
                    var low: UInt64 = 0
                    let count = Int(entry.count)
                    for offset in 8..<16 {
                        low = low << 8 | (offset < count ? UInt64(base.load(fromByteOffset: Int(entry.start) + offset, as: UInt8.self)) : 0)
                    }
                    keys[index] = Key(high: entry.prefix, low: low, index: Int32(index))
                    // Every digit's histogram in the one pass: digits 0...7 are the low
                    // word's bytes (least significant first), 8...15 the high word's.
                    for digit in 0..<8 {
                        counts[digit << 8 | Int(truncatingIfNeeded: low >> UInt64(8 * digit)) & 0xFF] += 1
                        counts[(digit + 8) << 8 | Int(truncatingIfNeeded: entry.prefix >> UInt64(8 * digit)) & 0xFF] += 1
                    }
                }
            }
        }
        var scratch = keys
        for digit in 0..<16 {
            let histogram = digit << 8
            // A digit every entry shares orders nothing.
            if counts[histogram...].prefix(256).contains(entries.count) { continue }
            var total = 0
            for bucket in histogram..<histogram + 256 {
                let count = counts[bucket]
                counts[bucket] = total
                total += count
            }
            let shift = UInt64(8 * (digit % 8))
            keys.withUnsafeBufferPointer { source in
                scratch.withUnsafeMutableBufferPointer { target in
                    counts.withUnsafeMutableBufferPointer { counts in
                        for key in source {
                            let bucket = histogram | Int(truncatingIfNeeded: ((digit < 8 ? key.low : key.high) >> shift) & 0xFF)
                            target[counts[bucket]] = key
                            counts[bucket] += 1
                        }
                    }
                }
            }
            swap(&keys, &scratch)
        }
        var result = keys.map { entries[Int($0.index)] }
        // Runs that tie on their first 16 bytes: ordered by their whole bytes.
        var start = 0
        while start < result.count {
            var end = start + 1
            while end < result.count, keys[end].high == keys[start].high, keys[end].low == keys[start].low { end += 1 }
            if end - start > 1 {
                let run = result[start..<end].sorted(by: precedes)
                result.replaceSubrange(start..<end, with: run)
            }
            start = end
        }
        return result
    }
}
