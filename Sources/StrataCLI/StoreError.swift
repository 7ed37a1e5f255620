import Foundation
import StrataLMDB

/// Why the CLI could not use a store path: a one-line, human-readable reason.
///
/// ArgumentParser prints ``description`` to stderr as `Error: ...` and exits with status 1.
struct StoreError: Error, CustomStringConvertible, Equatable {
    /// The kinds of failure, so callers and tests can tell them apart.
    enum Kind: Equatable, Sendable {
        /// The path does not exist.
        case missing
        /// The path is a file (or a path component is), not a store directory.
        case notADirectory
        /// The path is a directory without a `data.mdb`.
        case noDataFile
        /// `data.mdb` exists but is not an LMDB data file.
        case notLMDB
        /// The demo refuses a non-empty directory that is not a store.
        case directoryNotEmpty
        /// The copy destination already holds a `data.mdb`.
        case destinationExists
        /// Any other LMDB or file-system failure.
        case other
    }

    /// What went wrong.
    let kind: Kind
    /// The one-line explanation printed to the user.
    let message: String

    /// The explanation, as ArgumentParser prints it.
    var description: String { message }

    /// Translates an error thrown while opening the store at `path` into a clear reason.
    static func opening(_ path: String, _ error: any Error) -> StoreError {
        guard let error = error as? LMDBError else {
            return StoreError(kind: .other, message: "cannot open the store at \(path): \(error)")
        }
        switch error {
        case .noSuchFile where !FileSystem.exists(path):
            return StoreError(kind: .missing, message: "no store at \(path): the path does not exist")
        case .noSuchFile where FileSystem.isDirectory(path):
            return StoreError(kind: .noDataFile, message: "no store at \(path): the directory has no data.mdb")
        case .notADirectory where FileSystem.exists(path):
            return StoreError(kind: .notADirectory, message: "no store at \(path): it is a file, not a store directory")
        case .notADirectory:
            return StoreError(kind: .notADirectory, message: "no store at \(path): part of the path is a file, not a directory")
        case .invalid:
            return StoreError(kind: .notLMDB, message: "no store at \(path): its data.mdb is not an LMDB data file")
        case .versionMismatch:
            return StoreError(kind: .notLMDB, message: "cannot open the store at \(path): it was written by an incompatible LMDB version")
        default:
            return StoreError(kind: .other, message: "cannot open the store at \(path): \(error.message)")
        }
    }
}

extension Environment {
    /// Opens an existing store read-only, writing nothing when `path` is not a store.
    ///
    /// - Throws: a ``StoreError`` explaining why `path` is not a usable store.
    static func openExisting(at path: String) throws(StoreError) -> Environment {
        var configuration = Environment.Configuration()
        configuration.readOnly = true
        configuration.createIfMissing = false
        // The smallest map: the store then opens at the map size its meta page records.
        configuration.mapSize = 0
        // Strata stores hold a database per entity and per index: leave room to open them
        // all (LMDB allocates about 60 bytes per slot per transaction, so 4,096 is cheap here).
        configuration.maxDatabases = 4096
        do {
            return try Environment(path: path, configuration: configuration)
        } catch {
            throw StoreError.opening(path, error)
        }
    }
}
