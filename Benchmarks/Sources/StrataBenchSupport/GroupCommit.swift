import Strata

/// The coordinator's group commit switch and write statistics, in one place.
///
/// PENDING: `PersistentStoreCoordinator.isGroupCommitEnabled` and `.writeStatistics` are
/// being built on `main`. Until this branch is rebased onto them, group commit cannot be
/// switched (``isAvailable`` is false, the runner reports it as not measured) and the
/// commit count is not observable.
public enum GroupCommit {
    /// Whether the library has the switch.
    public static let isAvailable = false

    /// Turns group commit on or off for `coordinator`'s saves.
    public static func setEnabled(_ enabled: Bool, on coordinator: PersistentStoreCoordinator) {}

    /// Saves and commits so far, or nil when the library does not count them.
    public static func counts(of coordinator: PersistentStoreCoordinator) -> WriteCounts? { nil }
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
