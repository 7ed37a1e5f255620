import Foundation

/// Small file-system queries shared by the subcommands.
enum FileSystem {
    /// Whether anything (file, directory or dangling symlink) is at `path`.
    static func exists(_ path: String) -> Bool {
        (try? FileManager.default.attributesOfItem(atPath: path)) != nil
    }

    /// Whether `path` is a directory (following symlinks).
    static func isDirectory(_ path: String) -> Bool {
        var isDirectory: ObjCBool = false
        return FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && isDirectory.boolValue
    }

    /// The size in bytes of the store's `data.mdb`, or nil when it cannot be read.
    static func dataFileSize(inStore path: String) -> Int? {
        let attributes = try? FileManager.default.attributesOfItem(atPath: path + "/data.mdb")
        return (attributes?[.size] as? NSNumber)?.intValue
    }

    /// `bytes` for people: `512 bytes`, `40 KiB`, `1.5 MiB`.
    static func formatBytes(_ bytes: Int) -> String {
        let units = ["KiB", "MiB", "GiB", "TiB"]
        guard bytes >= 1024 else { return "\(bytes) bytes" }
        var value = Double(bytes)
        var unit = -1
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        let rounded = (value * 10).rounded() / 10
        let number = rounded == rounded.rounded() ? String(Int(rounded)) : String(rounded)
        return "\(number) \(units[unit])"
    }

    /// `bytes` with the exact count: `512 bytes`, `40 KiB (40960 bytes)`.
    static func describeBytes(_ bytes: Int) -> String {
        bytes < 1024 ? "\(bytes) bytes" : "\(formatBytes(bytes)) (\(bytes) bytes)"
    }
}

extension FileSystem {
    /// Whether `path` is a directory with nothing in it.
    static func isEmptyDirectory(_ path: String) -> Bool {
        (try? FileManager.default.contentsOfDirectory(atPath: path))?.isEmpty ?? false
    }
}

extension FileSystem {
    /// Checks that `path` can hold a demo store: missing, an empty directory or a
    /// directory holding a store. Returns whether the store is new.
    ///
    /// - Throws: ``StoreError`` for a file, or a non-empty directory that is not a store.
    static func checkDemoStorePath(_ path: String) throws(StoreError) -> Bool {
        guard exists(path) else { return true }
        guard isDirectory(path) else {
            throw StoreError(kind: .notADirectory, message: "cannot create the demo store at \(path): it is a file, not a directory")
        }
        if exists(path + "/data.mdb") { return false }
        guard isEmptyDirectory(path) else {
            throw StoreError(
                kind: .directoryNotEmpty,
                message: "cannot create the demo store at \(path): the directory is not empty and holds no store")
        }
        return true
    }
}
