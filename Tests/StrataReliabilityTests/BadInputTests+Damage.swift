import Foundation
import Strata
import StrataReliability
import StrataTesting
import Testing

/// Damaged store files: truncated, with damaged meta pages, with random bytes changed.
/// Each store is opened, read and checked by `strata-reliability open-probe` in a child
/// process; a signal there fails the test.
extension BadInputTests {
    /// What one probe of a damaged store printed.
    enum ProbeOutcome: CustomStringConvertible {
        /// Opened, read, consistent; the number of objects read.
        case ok(Int)
        /// Opened and read, but `checkIntegrity()` found problems.
        case inconsistent(String)
        /// A thrown error: its type and case (`StrataError.corruptStore`) and text.
        case error(type: String, text: String)
        /// A signal, an exit status or output the probe never prints.
        case crashed(String)

        var description: String {
            switch self {
            case .ok(let rows): "ok \(rows)"
            case .inconsistent(let text): "inconsistent \(text)"
            case .error(let type, let text): "error \(type) \(text)"
            case .crashed(let text): "CRASH \(text)"
            }
        }

        /// `ok`, `inconsistent`, the error type, or `crash`: what the tallies count.
        var kind: String {
            switch self {
            case .ok: "ok"
            case .inconsistent: "inconsistent (checkIntegrity)"
            case .error(let type, let text):
                type == "StrataError.storage" ? "\(type) (\(text.split(separator: " ").dropFirst(2).first ?? ""))" : type
            case .crashed: "crash"
            }
        }

        var isCrash: Bool { if case .crashed = self { true } else { false } }
    }

    /// Runs `open-probe` on `store` in a child process.
    static func probe(_ store: String, _ flags: [String] = [], scratch: borrowing TemporaryDirectory) async throws -> ProbeOutcome {
        let child = try ChildProcess.spawn(
            reliabilityToolPath(), ["open-probe", "--store", store] + flags,
            outputPath: scratch.appending("probe.out"), errorPath: scratch.appending("probe.err"))
        let (termination, killed) = await child.ended(atMost: 120)
        let line = child.output.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !killed, termination == .exited(0) else {
            return .crashed("\(killed ? "hung, killed" : "\(termination)"): \(line) \(child.errorOutput.prefix(600))")
        }
        let words = line.split(separator: " ", maxSplits: 2).map(String.init)
        switch words.first {
        case "ok" where words.count == 2: return .ok(Int(words[1]) ?? -1)
        case "inconsistent": return .inconsistent(line)
        case "error" where words.count == 3: return .error(type: words[1], text: words[2])
        default: return .crashed("unexpected output: \(line)")
        }
    }

    /// A ledger store of about 3,000 objects (1,000 saves) at `directory/template`; returns
    /// its directory and page size.
    static func ledgerTemplate(in directory: borrowing TemporaryDirectory) async throws -> (path: String, pageSize: Int) {
        let path = directory.appending("template")
        var worker = LedgerWorker(store: URL(fileURLWithPath: path, isDirectory: true), seed: 11)
        worker.durability = .noSync
        worker.limit = 1000
        let null = open("/dev/null", O_WRONLY)
        defer { close(null) }
        worker.output = null
        let outcome = await worker.run()
        if let error = outcome.error { throw error }
        #expect(outcome.acknowledged == [1000])
        return (path, Int(sysconf(Int32(_SC_PAGESIZE))))
    }

    /// A copy of `template` at `directory/name` whose data.mdb `damage` changed.
    static func damagedCopy(
        of template: String, named name: String, in directory: borrowing TemporaryDirectory, _ damage: (inout Data) -> Void
    ) throws -> String {
        let path = directory.appending(name)
        try? FileManager.default.removeItem(atPath: path)
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        var data = try Data(contentsOf: URL(fileURLWithPath: template + "/data.mdb"))
        damage(&data)
        try data.write(to: URL(fileURLWithPath: path + "/data.mdb"))
        return path
    }

    /// Writes a little-endian integer into `data` at `offset`.
    static func poke<T: FixedWidthInteger>(_ value: T, at offset: Int, in data: inout Data) {
        withUnsafeBytes(of: value.littleEndian) { data.replaceSubrange(offset..<offset + MemoryLayout<T>.size, with: $0) }
    }

    @Test("a truncated data.mdb (empty, inside a meta page, between the meta pages, halfway, at the end): a typed error at open, or a new store for an empty file, never a crash")
    func truncatedDataFile() async throws {
        let directory = TemporaryDirectory()
        let (template, page) = try await Self.ledgerTemplate(in: directory)
        let size = try FileManager.default.attributesOfItem(atPath: template + "/data.mdb")[.size] as! Int
        try #require(size > 100 * page)
        let healthy = try await Self.probe(template, scratch: directory)
        guard case .ok(let objects) = healthy, objects > 2500 else {
            Issue.record("the template does not probe ok: \(healthy)")
            return
        }
        // (length, must be refused as corrupt): a cut at the very end may only lose free pages.
        let cuts: [(Int, Bool)] = [
            (1, true), (24, true), (100, true), (page - 1, true), (page, true), (page + 200, true), (2 * page - 1, true),
            (2 * page, true), (3 * page + 7, true), (size / 2, true), (size / 2 + 123, true), (size - 17 * page, true),
            (size - page, false), (size - 100, false), (size - 1, false),
        ]
        var outcomes: [String] = []
        for (length, mustBeCorrupt) in cuts {
            let store = try Self.damagedCopy(of: template, named: "cut-\(length)", in: directory) { $0 = $0.prefix(length) }
            let outcome = try await Self.probe(store, scratch: directory)
            outcomes.append("\(length): \(outcome)")
            #expect(!outcome.isCrash, "cut to \(length) bytes: \(outcome)")
            if mustBeCorrupt {
                guard case .error("StrataError.corruptStore", let text) = outcome else {
                    Issue.record("cut to \(length) bytes of \(size): \(outcome), not corruptStore")
                    continue
                }
                #expect(text.contains("truncated") || text.contains("not an LMDB data file"), "\(text)")
            } else if case .ok(let found) = outcome {
                #expect(found == objects, "cut to \(length) bytes: only free pages may go")
            }
        }
        // An empty data.mdb is a store that was never written (a crash between creating the
        // file and writing its meta pages): it opens as a new, empty store.
        let empty = try Self.damagedCopy(of: template, named: "empty", in: directory) { $0 = Data() }
        let outcome = try await Self.probe(empty, scratch: directory)
        guard case .ok(0) = outcome else {
            Issue.record("an empty data.mdb: \(outcome), not a new store")
            return
        }
        print("truncations of a \(size)-byte data.mdb:\n" + outcomes.joined(separator: "\n"))
    }

    @Test("damaged meta pages (garbage, zeros, one of two, a wrong page size, roots and last page out of range, another version): a typed error at open, never a crash")
    func damagedMetaPages() async throws {
        let directory = TemporaryDirectory()
        let (template, page) = try await Self.ledgerTemplate(in: directory)
        var random = SeededRandomNumberGenerator(seed: 0xBAD_4E7A)
        let garbage = (0..<(2 * page)).map { _ in UInt8.random(in: 0...255, using: &random) }
        // Offsets in a meta page: magic 16, version 20, page size 40, main root 128, last page 136, txnid 144.
        let cases: [(String, (inout Data) -> Void, String)] = [
            ("garbage metas", { $0.replaceSubrange(0..<(2 * page), with: garbage) }, "StrataError.corruptStore"),
            ("garbage meta 0", { $0.replaceSubrange(0..<page, with: garbage[..<page]) }, "StrataError.corruptStore"),
            ("garbage meta 1 body", { $0.replaceSubrange((page + 16)..<(2 * page), with: garbage[16..<page]) }, "StrataError.corruptStore"),
            ("zeroed metas", { $0.replaceSubrange(0..<(2 * page), with: Data(count: 2 * page)) }, "StrataError.corruptStore"),
            ("zeroed meta 1", { $0.replaceSubrange(page..<(2 * page), with: Data(count: page)) }, "StrataError.corruptStore"),
            ("zeroed data pages", { $0.replaceSubrange((2 * page)..<$0.count, with: Data(count: $0.count - 2 * page)) }, ""),
        ]
        var pageSizes: [(String, (inout Data) -> Void, String)] = []
        for size in [UInt32(0), 1, 1000, UInt32(page / 2), UInt32(page * 2), 65536, .max] {
            pageSizes.append(("page size \(size)", { data in
                for meta in [0, page] { Self.poke(size, at: meta + 40, in: &data) }
            }, "StrataError.corruptStore"))
        }
        pageSizes.append(("page size \(page * 2) in meta 0 only", { Self.poke(UInt32(page * 2), at: 40, in: &$0) }, "StrataError.corruptStore"))
        let fields: [(String, (inout Data) -> Void, String)] = [
            ("magic", { data in for meta in [0, page] { Self.poke(UInt32(0xDEAD_BEEF), at: meta + 16, in: &data) } }, "StrataError.corruptStore"),
            ("data version 2", { data in for meta in [0, page] { Self.poke(UInt32(2), at: meta + 20, in: &data) } }, "StrataError.incompatibleStore"),
            ("main root 1", { data in for meta in [0, page] { Self.poke(UInt64(1), at: meta + 128, in: &data) } }, "StrataError.corruptStore"),
            ("main root past the last page", { data in
                for meta in [0, page] { Self.poke(UInt64(1 << 40), at: meta + 128, in: &data) }
            }, "StrataError.corruptStore"),
            ("free root past the last page", { data in
                for meta in [0, page] { Self.poke(UInt64(1 << 40), at: meta + 80, in: &data) }
            }, "StrataError.corruptStore"),
            ("last page 0", { data in for meta in [0, page] { Self.poke(UInt64(0), at: meta + 136, in: &data) } }, "StrataError.corruptStore"),
            ("last page huge", { data in for meta in [0, page] { Self.poke(UInt64(1 << 50), at: meta + 136, in: &data) } }, ""),
            ("meta 0 picked, older", { data in Self.poke(UInt64.max, at: 144, in: &data) }, ""),
            // What LMDB leaves after a failed meta-page write: the older meta page keeps the
            // new roots but its old last page (mdb_env_write_meta). LMDB never reads it: fine.
            ("older meta's roots past its last page", { data in
                let first = data.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 144, as: UInt64.self) }
                let second = data.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: page + 144, as: UInt64.self) }
                let older = first < second ? 0 : page
                Self.poke(UInt64(1) << 40, at: older + 80, in: &data)
                Self.poke(UInt64(1) << 40, at: older + 128, in: &data)
            }, "ok"),
        ]
        var outcomes: [String] = []
        for (name, damage, expected) in cases + pageSizes + fields {
            let store = try Self.damagedCopy(of: template, named: name.filter(\.isLetter), in: directory, damage)
            for flags in [[], ["--verify-pages"], ["--write"]] {
                let outcome = try await Self.probe(store, flags, scratch: directory)
                outcomes.append("\(name) \(flags): \(outcome)")
                #expect(!outcome.isCrash, "\(name) \(flags): \(outcome)")
                if expected == "ok" {
                    guard case .ok = outcome else {
                        Issue.record("\(name) \(flags): \(outcome), not ok")
                        continue
                    }
                } else if !expected.isEmpty {
                    guard case .error(expected, _) = outcome else {
                        Issue.record("\(name) \(flags): \(outcome), not \(expected)")
                        continue
                    }
                }
            }
        }
        print("damaged meta pages:\n" + outcomes.joined(separator: "\n"))
    }

    /// How many random-damage seeds to run: `STRATA_BAD_INPUT_SEEDS`, else 60.
    static let damageSeeds = ProcessInfo.processInfo.environment["STRATA_BAD_INPUT_SEEDS"].flatMap { Int($0) } ?? 60

    @Test("random bytes changed in the data pages (many seeds): with verifiesPagesAtOpen a typed error or a consistent read, never a crash; the default open is tallied")
    func randomDamage() async throws {
        let directory = TemporaryDirectory()
        let (template, page) = try await Self.ledgerTemplate(in: directory)
        let original = try Data(contentsOf: URL(fileURLWithPath: template + "/data.mdb"))
        var tallies: [String: [String: Int]] = [:]
        var crashes: [String: [String]] = [:]
        for seed in 0..<Self.damageSeeds {
            var random = SeededRandomNumberGenerator(seed: UInt64(0x5EED_0000 + seed))
            // 1 to 16 changed bytes (a bit flipped, or a random byte) anywhere past the meta pages.
            let changes = (0..<Int.random(in: 1...16, using: &random)).map { _ in
                (Int.random(in: (2 * page)..<original.count, using: &random), UInt8.random(in: 1...255, using: &random),
                 Bool.random(using: &random))
            }
            let store = try Self.damagedCopy(of: template, named: "seed", in: directory) { data in
                for (offset, byte, flipOneBit) in changes {
                    data[offset] ^= flipOneBit ? 1 << (byte % 8) : byte
                }
            }
            for mode in ["default", "--verify-pages", "--write"] {
                let outcome = try await Self.probe(store, mode == "default" ? [] : [mode], scratch: directory)
                tallies[mode, default: [:]][outcome.kind, default: 0] += 1
                if outcome.isCrash { crashes[mode, default: []].append("seed \(seed): \(outcome)") }
            }
        }
        let report = tallies.sorted { $0.key < $1.key }.map { mode, counts in
            "\(mode): " + counts.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", ")
        }.joined(separator: "\n")
        print("random damage, \(Self.damageSeeds) seeds:\n\(report)")
        #expect(crashes["--verify-pages"] == nil, "\(crashes["--verify-pages"] ?? [])")
        // LMDB trusts its pages: without verifiesPagesAtOpen, a page whose structure was
        // damaged can crash LMDB when a read meets it (a node flag says "duplicates" in a
        // database without them, a branch points at a leaf's bytes, ...).
        withKnownIssue("LMDB reads pages without checking them; open with verifiesPagesAtOpen", isIntermittent: true) {
            #expect(crashes["default"] == nil, "\(crashes["default"] ?? [])")
            #expect(crashes["--write"] == nil, "\(crashes["--write"] ?? [])")
        }
    }
}
