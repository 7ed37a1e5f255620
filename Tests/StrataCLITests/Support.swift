import Foundation
import StrataLMDB
import StrataTesting
import Testing

@testable import StrataCLI

/// The sample databases `makeStore` writes: name and number of entries.
let sampleDatabases: [(name: String, entries: Int)] = [("alpha", 3), ("beta", 40), ("empty", 0)]

/// Creates a store at `path` holding `databases` (`key-N` = `value-N`), then closes it, so
/// the CLI code can open the same path in this process.
func makeStore(at path: String, _ databases: [(name: String, entries: Int)] = sampleDatabases) throws {
    let environment = try Environment(path: path)
    for (name, entries) in databases {
        let database = try environment.openDatabase(named: name, flags: .create)
        try environment.write { txn in
            for n in 0..<entries {
                try txn.put(Array("value-\(n)".utf8), forKey: Array("key-\(n)".utf8), in: database)
            }
        }
    }
}

/// Every entry of every named database of the store at `path`, as strings.
func contents(ofStoreAt path: String) throws -> [String: [String: String]] {
    let environment = try Environment(path: path)
    var result: [String: [String: String]] = [:]
    for name in try environment.databaseNames() {
        let database = try environment.openDatabase(named: name)
        result[name] = try environment.read { txn in
            var entries: [String: String] = [:]
            try txn.scan(database) { key, value in
                entries[String(decoding: key, as: UTF8.self)] = String(decoding: value, as: UTF8.self)
                return .continue
            }
            return entries
        }
    }
    return result
}

/// One node of a directory tree, to check that a failed command changed nothing.
enum Node: Equatable {
    case directory
    case file(Data)
}

/// Everything under `root` (and whether `root` exists), by relative path.
func tree(_ root: String) -> [String: Node] {
    let manager = FileManager.default
    var isDirectory: ObjCBool = false
    guard manager.fileExists(atPath: root, isDirectory: &isDirectory) else { return [:] }
    var nodes: [String: Node] = [".": isDirectory.boolValue ? .directory : .file(manager.contents(atPath: root) ?? Data())]
    for relative in (try? manager.subpathsOfDirectory(atPath: root)) ?? [] {
        let path = root + "/" + relative
        _ = manager.fileExists(atPath: path, isDirectory: &isDirectory)
        nodes[relative] = isDirectory.boolValue ? .directory : .file(manager.contents(atPath: path) ?? Data())
    }
    return nodes
}

/// Parses `arguments` as the `strata` command line and runs the chosen subcommand.
func runCommand(_ arguments: [String]) throws {
    var command = try StrataCommand.parseAsRoot(arguments)
    try command.run()
}
