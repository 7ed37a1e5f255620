import Foundation
@testable import StrataLMDB
import StrataTesting
import Testing

@Suite("Cursors and scans")
struct CursorScanTests {
    /// Keys 0, 10, 20, ..., 90 with values "v0", "v10", ...
    static func tens(_ dir: borrowing TemporaryDirectory) throws -> (Environment, Database) {
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "tens", flags: .create)
        try env.write { txn throws in
            for n in stride(from: 0, to: 100, by: 10) {
                try txn.put(bytes("v\(n)"), forKey: key(UInt64(n)), in: db)
            }
        }
        return (env, db)
    }

    static func collect(_ env: Environment, _ db: Database, _ range: KeyRange, reverse: Bool = false) throws -> [UInt64] {
        try env.read { txn throws in
            var keys: [UInt64] = []
            try txn.scan(db, range: range, reverse: reverse) { key, _ in
                keys.append(UInt64(bigEndian: key.loadUnaligned(as: UInt64.self)))
                return .continue
            }
            return keys
        }
    }

    @Test func forwardAndReverseIteration() throws {
        let dir = TemporaryDirectory()
        let (env, db) = try Self.tens(dir)
        #expect(try Self.collect(env, db, .all) == [0, 10, 20, 30, 40, 50, 60, 70, 80, 90])
        #expect(try Self.collect(env, db, .all, reverse: true) == [90, 80, 70, 60, 50, 40, 30, 20, 10, 0])
    }

    @Test func rangeScansInBothDirections() throws {
        let dir = TemporaryDirectory()
        let (env, db) = try Self.tens(dir)
        #expect(try Self.collect(env, db, .from(key(20), upTo: key(50))) == [20, 30, 40])
        #expect(try Self.collect(env, db, .from(key(20), through: key(50))) == [20, 30, 40, 50])
        #expect(try Self.collect(env, db, .from(key(15), upTo: key(55))) == [20, 30, 40, 50])
        #expect(try Self.collect(env, db, .from(key(20), upTo: key(50)), reverse: true) == [40, 30, 20])
        #expect(try Self.collect(env, db, .from(key(20), through: key(50)), reverse: true) == [50, 40, 30, 20])
        #expect(try Self.collect(env, db, .from(key(15), through: key(55)), reverse: true) == [50, 40, 30, 20])
        #expect(try Self.collect(env, db, .from(key(85))) == [90])
        #expect(try Self.collect(env, db, .from(key(95))).isEmpty)
        #expect(try Self.collect(env, db, .from(key(91), through: key(99)), reverse: true).isEmpty)
        #expect(try Self.collect(env, db, .from(key(50), upTo: key(50))).isEmpty)
        #expect(try Self.collect(env, db, KeyRange(lower: nil, upper: key(25)), reverse: true) == [20, 10, 0])
        #expect(try Self.collect(env, db, KeyRange(lower: nil, upper: key(1000)), reverse: true).count == 10)
    }

    @Test func scanStopsWhenAsked() throws {
        let dir = TemporaryDirectory()
        let (env, db) = try Self.tens(dir)
        let visited = try env.read { txn throws in
            try txn.scan(db) { key, _ in
                UInt64(bigEndian: key.loadUnaligned(as: UInt64.self)) == 30 ? .stop : .continue
            }
        }
        #expect(visited == 4)
    }

    @Test func prefixScans() throws {
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "words", flags: .create)
        let words = ["app", "apple", "applied", "apply", "apz", "banana", "b\u{FF}"]
        try env.write { txn throws in
            for word in words { try txn.put(bytes(word), forKey: bytes(word), in: db) }
            try txn.put(bytes("ff"), forKey: [0xFF, 0xFF], in: db)
            try txn.put(bytes("ff1"), forKey: [0xFF, 0xFF, 0x01], in: db)
        }
        func scan(_ prefix: [UInt8], reverse: Bool = false) throws -> [String] {
            try env.read { txn throws in
                var found: [String] = []
                try txn.scan(db, range: .prefix(prefix), reverse: reverse) { _, value in
                    found.append(string(value))
                    return .continue
                }
                return found
            }
        }
        #expect(try scan(bytes("appl")) == ["apple", "applied", "apply"])
        #expect(try scan(bytes("appl"), reverse: true) == ["apply", "applied", "apple"])
        #expect(try scan(bytes("ap")) == ["app", "apple", "applied", "apply", "apz"])
        #expect(try scan(bytes("zzz")).isEmpty)
        #expect(try scan([0xFF, 0xFF]) == ["ff", "ff1"], "a prefix of 0xFF bytes has no upper bound")
        #expect(try scan([]).count == words.count + 2)
    }

    @Test func cursorSeeks() throws {
        let dir = TemporaryDirectory()
        let (env, db) = try Self.tens(dir)
        try env.read { txn throws in
            try txn.withCursor(on: db) { cursor throws in
                #expect(try cursor.current() == nil)
                #expect(try cursor.seek(to: key(30)).map { string($0.value) } == "v30")
                #expect(try cursor.seek(to: key(35)) == nil)
                #expect(try cursor.seek(atOrAfter: key(35)).map { string($0.value) } == "v40")
                #expect(try cursor.seek(atOrBefore: key(35)).map { string($0.value) } == "v30")
                #expect(try cursor.seek(atOrBefore: key(30)).map { string($0.value) } == "v30")
                #expect(try cursor.seek(atOrBefore: key(500)).map { string($0.value) } == "v90")
                #expect(try cursor.seek(atOrAfter: key(500)) == nil)
                #expect(try cursor.first().map { string($0.value) } == "v0")
                #expect(try cursor.previous() == nil)
                #expect(try cursor.last().map { string($0.value) } == "v90")
                #expect(try cursor.next() == nil)
            }
        }
    }

    @Test func sortedDuplicatesForIndexes() throws {
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let index = try env.openDatabase(named: "byColour", flags: [.create, .sortedDuplicates])
        #expect(index.flags.contains(.sortedDuplicates))
        try env.write { txn throws in
            for (colour, id) in [("red", 3), ("red", 1), ("blue", 2), ("red", 2), ("green", 9)] {
                try txn.put(key(UInt64(id)), forKey: bytes(colour), in: index)
            }
            #expect(throws: LMDBError.keyExists) {
                try txn.put(key(1), forKey: bytes("red"), in: index, flags: .noDuplicateData)
            }
        }
        try env.read { txn throws in
            #expect(try txn.count(in: index) == 5)
            try txn.withCursor(on: index) { cursor throws in
                #expect(try cursor.seek(to: bytes("red")) != nil)
                #expect(try cursor.duplicateCount() == 3)
                var ids: [UInt64] = []
                var entry = try cursor.firstDuplicate()
                while let (_, value) = entry {
                    ids.append(UInt64(bigEndian: value.loadUnaligned(as: UInt64.self)))
                    entry = try cursor.nextDuplicate()
                }
                #expect(ids == [1, 2, 3])
                #expect(try cursor.lastDuplicate().map { UInt64(bigEndian: $0.value.loadUnaligned(as: UInt64.self)) } == 3)
                let found = try key(2).withUnsafeBytes { v in try bytes("red").withUnsafeBytes { k in try cursor.seek(key: k, valueAtOrAfter: v) } }
                #expect(found.map { UInt64(bigEndian: $0.value.loadUnaligned(as: UInt64.self)) } == 2)
                #expect(try cursor.first().map { string($0.key) } == "blue")
                #expect(try cursor.nextKey().map { string($0.key) } == "green")
                #expect(try cursor.nextKey().map { string($0.key) } == "red")
                #expect(try cursor.previousKey().map { string($0.key) } == "green")
            }
            // A reverse scan with an excluded upper bound skips every duplicate of it.
            var keys: [String] = []
            try txn.scan(index, range: .from(bytes("blue"), upTo: bytes("red")), reverse: true) { key, _ in
                keys.append(string(key))
                return .continue
            }
            #expect(keys == ["green", "blue"])
            var reds: [UInt64] = []
            try txn.scan(index, range: .from(bytes("red"), through: bytes("red")), reverse: true) { _, value in
                reds.append(UInt64(bigEndian: value.loadUnaligned(as: UInt64.self)))
                return .continue
            }
            #expect(reds == [3, 2, 1])
        }
        try env.write { txn throws in
            #expect(try key(2).withUnsafeBytes { v in try bytes("red").withUnsafeBytes { k in try txn.delete(forKey: k, value: v, in: index) } })
            #expect(try key(2).withUnsafeBytes { v in try bytes("red").withUnsafeBytes { k in try txn.delete(forKey: k, value: v, in: index) } } == false)
        }
        #expect(try env.statistics(of: index).entries == 4)
    }

    @Test func reverseAndIntegerKeyOrdersUseTheDatabaseComparator() throws {
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let integers = try env.openDatabase(named: "ints", flags: [.create, .integerKey])
        try env.write { txn throws in
            for n: UInt64 in [300, 2, 70_000, 1] {
                try withUnsafeBytes(of: n) { try txn.put(bytes("\(n)"), forKey: $0, in: integers) }
            }
        }
        let lower = withUnsafeBytes(of: UInt64(2)) { Array($0) }
        let upper = withUnsafeBytes(of: UInt64(70_000)) { Array($0) }
        let values = try env.read { txn throws in
            var found: [String] = []
            try txn.scan(integers, range: .from(lower, upTo: upper)) { _, value in
                found.append(string(value))
                return .continue
            }
            return found
        }
        #expect(values == ["2", "300"], "native integer order, not byte order")
    }

    @Test func deletingThroughACursor() throws {
        let dir = TemporaryDirectory()
        let (env, db) = try Self.tens(dir)
        try env.write { txn throws in
            try txn.withCursor(on: db) { cursor throws in
                var entry = try cursor.seek(atOrAfter: key(30))
                while let (k, _) = entry, UInt64(bigEndian: k.loadUnaligned(as: UInt64.self)) < 70 {
                    try cursor.deleteCurrent()
                    entry = try cursor.current()
                }
            }
        }
        #expect(try Self.collect(env, db, .all) == [0, 10, 20, 70, 80, 90])
        // A cursor in a read transaction cannot delete.
        try env.read { txn throws in
            try txn.withCursor(on: db) { cursor throws in
                _ = try cursor.first()
                #expect(throws: LMDBError.self) { try cursor.deleteCurrent() }
            }
        }
    }

    @Test func zeroCopyValuesAndCopy() throws {
        let dir = TemporaryDirectory()
        let (env, db) = try Self.tens(dir)
        let length = try env.read { txn in try txn.withValue(forKey: key(50), in: db) { $0?.count } }
        #expect(length == 3)
        #expect(try env.read { try $0.contains(key: key(50), in: db) })
        #expect(try env.read { try $0.contains(key: key(55), in: db) } == false)

        let copy = dir.appending("copy")
        try env.copy(to: copy)
        #expect(throws: LMDBError.fileExists) { try env.copy(to: copy) }
        try env.copy(to: dir.appending("compact"), compacting: true)
        for path in [copy, dir.appending("compact")] {
            let other = try Environment(path: path)
            let otherDB = try other.openDatabase(named: "tens")
            #expect(try Self.collect(other, otherDB, .all).count == 10)
        }
    }
}
