import StrataLMDB

/// The outcome of `strata copy`: where the store went and how big each `data.mdb` is.
struct CopyReport: Equatable, Sendable {
    /// The source store directory.
    var source: String
    /// The destination store directory.
    var destination: String
    /// Whether free pages were left out (`--compact`).
    var compacted: Bool
    /// The size of the source `data.mdb`, in bytes.
    var sourceSize: Int?
    /// The size of the copied `data.mdb`, in bytes.
    var destinationSize: Int?

    /// Copies the store at `source` into `destination` (created when missing), a
    /// consistent snapshot even while another process writes.
    ///
    /// - Throws: a ``StoreError``: the source is not a store, or the destination already
    ///   holds a `data.mdb` (``StoreError/Kind/destinationExists``) or cannot be written.
    static func copy(from source: String, to destination: String, compacting: Bool) throws -> CopyReport {
        if FileSystem.exists(destination + "/data.mdb") {
            throw StoreError(
                kind: .destinationExists,
                message: "cannot copy to \(destination): it already holds a data.mdb; choose a new or empty directory")
        }
        let environment = try Environment.openExisting(at: source)
        do {
            try environment.copy(to: destination, compacting: compacting)
        } catch LMDBError.fileExists {
            throw StoreError(kind: .destinationExists, message: "cannot copy to \(destination): it already holds a data.mdb")
        } catch LMDBError.notADirectory {
            throw StoreError(kind: .notADirectory, message: "cannot copy to \(destination): it is a file, not a directory")
        } catch {
            let reason = (error as? LMDBError)?.message ?? "\(error)"
            throw StoreError(kind: .other, message: "cannot copy \(source) to \(destination): \(reason)")
        }
        return CopyReport(
            source: source, destination: destination, compacted: compacting,
            sourceSize: FileSystem.dataFileSize(inStore: source),
            destinationSize: FileSystem.dataFileSize(inStore: destination))
    }

    /// The outcome as human-readable lines.
    func text() -> String {
        func size(_ bytes: Int?) -> String { bytes.map(FileSystem.describeBytes) ?? "unknown" }
        var lines = [
            "Copied \(source) to \(destination)" + (compacted ? ", compacting free pages" : ""),
            "  source      data.mdb  \(size(sourceSize))",
            "  destination data.mdb  \(size(destinationSize))",
        ]
        if let sourceSize, let destinationSize, sourceSize > 0, destinationSize < sourceSize {
            let saved = 100 - destinationSize * 100 / sourceSize
            lines.append("  the copy is \(saved)% smaller")
        }
        return lines.joined(separator: "\n")
    }
}
