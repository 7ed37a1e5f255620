import Foundation

extension PersistentContainer {
    /// The directory where containers keep their stores unless told otherwise: each
    /// container's default store is `<defaultDirectoryURL>/<name>.strata`.
    ///
    /// The first of:
    ///
    /// 1. `$STRATA_STORE_DIRECTORY`, when set and not empty (a relative path is taken
    ///    from the current directory);
    /// 2. `$XDG_DATA_HOME/strata`, when `XDG_DATA_HOME` is an absolute path (the XDG
    ///    Base Directory specification ignores relative ones);
    /// 3. `~/.local/share/strata`, the XDG default.
    ///
    /// Nothing is created here: ``loadPersistentStores()`` creates missing directories.
    /// Core Data's `NSPersistentContainer.defaultDirectoryURL()`, whose subclass override
    /// is replaced here by the environment variable (or by setting
    /// ``persistentStoreDescriptions``).
    public static func defaultDirectoryURL() -> URL {
        defaultDirectoryURL(
            environment: ProcessInfo.processInfo.environment,
            home: FileManager.default.homeDirectoryForCurrentUser)
    }

    /// ``defaultDirectoryURL()`` for a given environment and home directory.
    static func defaultDirectoryURL(environment: [String: String], home: URL) -> URL {
        if let directory = environment["STRATA_STORE_DIRECTORY"], !directory.isEmpty {
            return URL(fileURLWithPath: directory, isDirectory: true).standardizedFileURL
        }
        if let data = environment["XDG_DATA_HOME"], data.hasPrefix("/") {
            return URL(fileURLWithPath: data, isDirectory: true).appendingPathComponent("strata", isDirectory: true)
        }
        return home.appendingPathComponent(".local/share/strata", isDirectory: true)
    }

    /// The default description of a container named `name`: an LMDB store at
    /// `<defaultDirectoryURL>/<name>.strata` that tracks persistent history.
    static func defaultStoreDescription(name: String) -> PersistentStoreDescription {
        var description = PersistentStoreDescription(url: defaultDirectoryURL().appendingPathComponent("\(name).strata", isDirectory: true))
        description.tracksPersistentHistory = true
        return description
    }
}

/// Creating a store's directory before the store is opened.
enum StoreLocation {
    /// Makes sure an LMDB store's directory exists: created, with its missing parents,
    /// unless the store is opened read-only (then it must exist already, and the store
    /// reports that).
    ///
    /// - Throws: ``StrataError/incompatibleStore(store:reason:)`` when the location, or
    ///   one of its parents, is a file, or a directory cannot be created.
    static func prepare(_ description: PersistentStoreDescription) throws(StrataError) {
        guard description.type == .lmdb, let url = description.url, url.isFileURL, !description.options.readOnly else {
            return  // the store itself reports a missing or non-file URL
        }
        let path = url.standardizedFileURL.path
        let manager = FileManager.default
        var isDirectory: ObjCBool = false
        if manager.fileExists(atPath: path, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else { throw .incompatibleStore(store: path, reason: "it is a file, not a directory") }
            return
        }
        do {
            try manager.createDirectory(atPath: path, withIntermediateDirectories: true)
        } catch {
            if let file = firstFileAmongParents(of: path) {
                throw .incompatibleStore(store: path, reason: "its directory cannot be created: \(file) is a file, not a directory")
            }
            throw .incompatibleStore(store: path, reason: "its directory cannot be created: \(error.localizedDescription)")
        }
    }

    /// The nearest existing parent of `path` when it is not a directory.
    private static func firstFileAmongParents(of path: String) -> String? {
        var parent = (path as NSString).deletingLastPathComponent
        while !parent.isEmpty {
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: parent, isDirectory: &isDirectory) {
                return isDirectory.boolValue ? nil : parent
            }
            let next = (parent as NSString).deletingLastPathComponent
            if next == parent { return nil }
            parent = next
        }
        return nil
    }
}
