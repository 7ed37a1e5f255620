import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A child process started with `posix_spawn`, its output in files, killed and reaped
/// by the parent: the reliability runs' way to crash a worker at a chosen moment.
public struct ChildProcess: Sendable {
    /// How a child ended.
    public enum Termination: Sendable, Equatable, CustomStringConvertible {
        /// It exited with this status.
        case exited(Int32)
        /// A signal ended it.
        case signalled(Int32)

        /// `exit 0`, `signal 9`.
        public var description: String {
            switch self {
            case .exited(let status): "exit \(status)"
            case .signalled(let signal): "signal \(signal)"
            }
        }
    }

    /// A spawn failure.
    public struct SpawnError: Error, CustomStringConvertible {
        /// What failed.
        public var description: String
    }

    /// The child's process ID.
    public let pid: pid_t
    /// The file holding its standard output.
    public let outputPath: String
    /// The file holding its standard error.
    public let errorPath: String

    /// Starts `executable` with `arguments`, this process's environment plus
    /// `environment`, standard output to `outputPath` and standard error to `errorPath`.
    public static func spawn(
        _ executable: String, _ arguments: [String], environment: [String: String] = [:],
        outputPath: String, errorPath: String
    ) throws -> ChildProcess {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_addopen(&actions, 2, errorPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        var merged = ProcessInfo.processInfo.environment
        merged.merge(environment) { $1 }
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let status = posix_spawn(&pid, executable, &actions, nil, argv, envp)
        guard status == 0 else {
            throw SpawnError(description: "cannot start \(executable): \(String(cString: strerror(status)))")
        }
        return ChildProcess(pid: pid, outputPath: outputPath, errorPath: errorPath)
    }

    /// Sends `signal` (SIGKILL by default) to the child.
    public func kill(_ signal: Int32 = SIGKILL) {
        _ = Glibc.kill(pid, signal)
    }

    /// Waits for the child to end and reaps it.
    public func wait() -> Termination {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1, errno == EINTR {}
        return Self.termination(status)
    }

    /// The child's termination when it has ended (reaping it), or nil while it runs.
    public func poll() -> Termination? {
        var status: Int32 = 0
        let result = waitpid(pid, &status, WNOHANG)
        return result == pid ? Self.termination(status) : nil
    }

    /// Waits up to `seconds` for the child to end; kills it with SIGKILL if it has not.
    /// Returns the termination and whether the child had to be killed.
    public func wait(atMost seconds: Double) -> (Termination, killed: Bool) {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if let ended = poll() { return (ended, false) }
            usleep(2_000)
        }
        kill()
        return (wait(), true)
    }

    /// Waits up to `seconds` for the child to end, as ``wait(atMost:)`` does, but
    /// suspends between polls instead of blocking its thread: a test that waits for
    /// children this way leaves the cooperative pool (two threads on two cores) to the
    /// tests running beside it.
    public func ended(atMost seconds: Double) async -> (Termination, killed: Bool) {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if let ended = poll() { return (ended, false) }
            try? await Task.sleep(nanoseconds: 2_000_000)
        }
        kill()
        return (wait(), true)
    }

    /// The child's standard output so far.
    public var output: String { (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "" }
    /// The child's standard error so far.
    public var errorOutput: String { (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? "" }

    private static func termination(_ status: Int32) -> Termination {
        // WIFEXITED / WEXITSTATUS / WTERMSIG, which Swift does not import (they are macros).
        let signal = status & 0x7F
        return signal == 0 ? .exited((status >> 8) & 0xFF) : .signalled(signal)
    }
}

/// Where the `strata-reliability` executable is: `STRATA_RELIABILITY_TOOL`; else the
/// running executable when it is the tool (under any name, a copy included); else the
/// tool next to it (the test bundle in `.build/debug`).
public func reliabilityToolPath(runningTheTool: Bool = false) -> String {
    if let path = ProcessInfo.processInfo.environment["STRATA_RELIABILITY_TOOL"], !path.isEmpty { return path }
    let running = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    if runningTheTool { return running }
    return URL(fileURLWithPath: running).deletingLastPathComponent().appendingPathComponent("strata-reliability").path
}
