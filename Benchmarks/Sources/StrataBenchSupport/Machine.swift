import CLMDBRaw
import Foundation
import GRDB

/// What the table says about the machine it ran on.
public enum Machine {
    /// `2 cores, 23.4 GiB RAM, Linux 6.1.0-…`.
    public static var summary: String {
        let info = ProcessInfo.processInfo
        var name = utsname()
        uname(&name)
        let kernel = withUnsafeBytes(of: &name.release) { bytes in
            String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
        }
        let memory = String(format: "%.1f", Double(info.physicalMemory) / Double(1 << 30))
        return "\(info.activeProcessorCount) cores, \(memory) GiB RAM, Linux \(kernel)"
    }

    /// The 1-minute load average (other work on the machine skews every number).
    public static var loadAverage: String {
        var loads = [0.0, 0.0, 0.0]
        guard getloadavg(&loads, 3) == 3 else { return "?" }
        return String(format: "%.2f", loads[0])
    }

    /// The temporary directory stores are made in.
    public static var temporaryDirectory: String {
        FileManager.default.temporaryDirectory.path
    }
}

/// The library versions the baselines ran against.
public enum LibraryVersions {
    /// `liblmdb 0.9.24, SQLite 3.40.1`.
    public static var summary: String {
        var major: Int32 = 0, minor: Int32 = 0, patch: Int32 = 0
        _ = mdb_version(&major, &minor, &patch)
        let lmdb = "liblmdb \(major).\(minor).\(patch)"
        let sqlite = (try? DatabaseQueue().read { db in try String.fetchOne(db, sql: "SELECT sqlite_version()") }) ?? nil
        return "\(lmdb), SQLite \(sqlite ?? "?") through GRDB 7.10.0"
    }
}
