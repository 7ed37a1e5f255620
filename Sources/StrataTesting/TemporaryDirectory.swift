import Foundation

/// A directory for one test's stores, created at once and removed with everything in it
/// when the value goes away.
///
/// Non-copyable, so exactly one owner removes it:
///
/// ```swift
/// @Test func savesSurviveReopening() throws {
///     let directory = TemporaryDirectory()
///     let env = try Environment(path: directory.appending("store"))
///     // ...
/// }   // the directory and the store in it are removed here
/// ```
public struct TemporaryDirectory: ~Copyable {
    /// The directory's absolute path.
    public let path: String

    /// Creates a uniquely named directory under the system's temporary directory;
    /// `name` (by default the calling function) makes it recognisable.
    public init(_ name: String = #function) {
        let base = FileManager.default.temporaryDirectory.path
        let sanitized = String(name.filter { $0.isLetter || $0.isNumber }.prefix(60))
        path = "\(base)/strata-\(sanitized)-\(UUID().uuidString.prefix(8))"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    /// The directory as a file URL.
    public var url: URL { URL(fileURLWithPath: path, isDirectory: true) }

    /// A path inside the directory (nothing is created).
    public func appending(_ component: String) -> String { "\(path)/\(component)" }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}
