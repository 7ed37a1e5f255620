/// The version of the Strata framework and of the store format it writes.
///
/// Strata is Core Data's managed-object-context model for Swift 6 on Linux: contexts
/// are actors, managed objects stay confined to their context, saves go one store up
/// through parent–child chains to a coordinator that writes an LMDB store, and query
/// generations are LMDB read snapshots. This release provides the LMDB foundation
/// (the `StrataLMDB` module); the object graph layers build on it.
public struct StrataRelease: Sendable, Hashable, CustomStringConvertible {
    /// The framework's semantic version.
    public let version: String
    /// The version of the on-disk layout the framework reads and writes.
    public let storeFormat: Int

    /// The version of this build of Strata.
    public static let current = StrataRelease(version: "0.1.0", storeFormat: StoreLayout.formatVersion)

    /// `Strata 0.1.0 (store format 1)`.
    public var description: String { "Strata \(version) (store format \(storeFormat))" }
}
