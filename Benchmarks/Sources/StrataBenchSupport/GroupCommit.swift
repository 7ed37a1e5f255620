import Strata

/// The coordinator's group commit switch and write statistics, in one place
/// (`PersistentStoreCoordinator.isGroupCommitEnabled` and `.writeStatistics`).
public enum GroupCommit {
    /// Whether the library has the switch.
    public static let isAvailable = true

    /// Turns group commit on or off for `coordinator`'s saves.
    public static func setEnabled(_ enabled: Bool, on coordinator: PersistentStoreCoordinator) {
        coordinator.isGroupCommitEnabled = enabled
    }

    /// Saves and commits so far, or nil when the library does not count them.
    public static func counts(of coordinator: PersistentStoreCoordinator) -> WriteCounts? {
        let statistics = coordinator.writeStatistics
        return WriteCounts(saves: statistics.saves, commits: statistics.commits, largestGroup: statistics.largestGroup)
    }
}

/// How many saves a coordinator wrote in how many LMDB commits.
public struct WriteCounts: Sendable {
    public var saves: Int
    public var commits: Int
    public var largestGroup: Int

    public init(saves: Int, commits: Int, largestGroup: Int) {
        self.saves = saves
        self.commits = commits
        self.largestGroup = largestGroup
    }
}
