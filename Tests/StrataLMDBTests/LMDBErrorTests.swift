import Foundation
@testable import StrataLMDB
import StrataTesting
import Testing

@Suite("Errors")
struct LMDBErrorTests {
    @Test func codesMapToNamedStatics() {
        #expect(LMDBError(code: -30798) == .notFound)
        #expect(LMDBError(code: -30792) == .mapFull)
        #expect(LMDBError(code: -30790) == .readersFull)
        #expect(LMDBError(code: -30795) == .panic)
        #expect(LMDBError(code: -30796) == .corrupted)
        #expect(LMDBError(code: -30794) == .versionMismatch)
        #expect(LMDBError(code: EIO) == .ioError)
        #expect(LMDBError(code: ENOSPC) == .noSpace)
        #expect(LMDBError.errno(EACCES) == .permissionDenied)
        #expect(LMDBError.mapFull.name == "mapFull")
        #expect(LMDBError.errno(EIO).description.contains("ioError"))
        #expect(LMDBError(code: 9999).name == "errno(9999)")
        #expect(LMDBError.keyExists.message.contains("MDB_KEYEXIST"))
        #expect(LMDBError.panic.isTerminal && LMDBError.corrupted.isTerminal && !LMDBError.mapFull.isTerminal)
    }

    @Test func errorsMatchInCatchAndSwitch() {
        func classify(_ error: any Error) -> String {
            switch error {
            case LMDBError.mapFull: return "full"
            case LMDBError.keyExists: return "exists"
            default: return "other"
            }
        }
        #expect(classify(LMDBError(code: -30792, message: "with context")) == "full")
        #expect(classify(LMDBError.keyExists) == "exists")
        #expect(classify(CocoaError(.fileNoSuchFile)) == "other")
        do {
            throw LMDBError(code: -30799, message: "x")
        } catch LMDBError.keyExists {
            // matched
        } catch {
            Issue.record("should have matched keyExists")
        }
    }

    @Test func putErrorsAreTypedAndLeaveTheTransactionUsable() throws {
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "t", flags: .create)
        try env.write { txn throws in
            try txn.put(bytes("first"), forKey: key(5), in: db)
            #expect(throws: LMDBError.keyExists) { try txn.put(bytes("second"), forKey: key(5), in: db, flags: .noOverwrite) }
            #expect(throws: LMDBError.keyExists) { try txn.put(bytes("out of order"), forKey: key(1), in: db, flags: .append) }
            #expect(throws: LMDBError.badValueSize) { try txn.put(bytes("empty key"), forKey: [UInt8](), in: db) }
            #expect(throws: LMDBError.badValueSize) { try txn.put(bytes("long key"), forKey: [UInt8](repeating: 1, count: 512), in: db) }
            try txn.put(bytes("append"), forKey: key(6), in: db, flags: .append)
        }
        try env.read { txn throws in
            #expect(try txn.string(forKey: key(5), in: db) == "first")
            #expect(try txn.string(forKey: key(6), in: db) == "append")
        }
    }

    @Test func databaseErrors() throws {
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir) { $0.maxDatabases = 2 }
        #expect(throws: LMDBError.notFound) { try env.openDatabase(named: "missing") }
        let a = try env.openDatabase(named: "a", flags: .create)
        #expect(try env.openDatabase(named: "a") == a, "handles are cached by name")
        #expect(throws: LMDBError.incompatible) { try env.openDatabase(named: "a", flags: [.create, .sortedDuplicates]) }
        _ = try env.openDatabase(named: "b", flags: .create)
        #expect(throws: LMDBError.databasesFull) { try env.openDatabase(named: "c", flags: .create) }
        #expect(try env.databaseNames() == ["a", "b"])
    }

    @Test func terminalStateRefusesNewTransactions() throws {
        let dir = TemporaryDirectory()
        let env = try openEnvironment(dir)
        let db = try env.openDatabase(named: "t", flags: .create)
        let snapshot = try env.makeSnapshot()
        #expect(env.terminalError == nil)
        #expect(throws: Never.self) { try env.checkUsable() }
        // What the environment does when LMDB reports MDB_PANIC from any operation.
        env.noteIfTerminal(LMDBError(code: -30795, message: "fatal write failure"))
        #expect(env.terminalError == .panic)
        #expect(throws: LMDBError.environmentUnusable) { try env.checkUsable() }
        #expect(throws: LMDBError.environmentUnusable) { try env.read { _ in } }
        #expect(throws: LMDBError.environmentUnusable) { try env.write { _ in } }
        #expect(throws: LMDBError.environmentUnusable) { try env.makeSnapshot() }
        #expect(throws: LMDBError.environmentUnusable) { try snapshot.read { try $0.count(in: db) } }
        do {
            try env.read { _ in }
        } catch let error as LMDBError {
            #expect(error.message.contains("panic"))
            #expect(error.message.contains("open the store again"))
        }
        // Opening the directory again says it is still open in a terminal state.
        #expect(Environment.terminalErrorOfOpenEnvironment(atPath: env.path) == .panic)
        do {
            _ = try Environment(path: env.path)
            Issue.record("a second environment of an open directory")
        } catch let error as LMDBError {
            #expect(error == .alreadyOpen && error.message.contains("terminal state") && error.message.contains("panic"))
        }
    }

    @Test func openUsableEnvironmentIsNotTerminal() throws {
        let dir = TemporaryDirectory()
        #expect(Environment.terminalErrorOfOpenEnvironment(atPath: dir.appending("store")) == nil)
        let env = try openEnvironment(dir)
        #expect(Environment.terminalErrorOfOpenEnvironment(atPath: env.path) == nil)
    }

    @Test func databaseOfAnotherEnvironmentIsAPrecondition() async throws {
        await #expect(processExitsWith: .failure) {
            let first = TemporaryDirectory(), second = TemporaryDirectory()
            let a = try Environment(path: first.path), b = try Environment(path: second.path)
            let db = try a.openDatabase(named: "t", flags: .create)
            try b.write { txn in try txn.put(bytes("x"), forKey: key(1), in: db) }
        }
    }
}
