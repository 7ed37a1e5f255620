/// A small, fast, deterministic random number generator (SplitMix64), so that a
/// randomised test or benchmark repeats exactly from its printed seed.
///
/// ```swift
/// var random = SeededRandomNumberGenerator(seed: 42)
/// let value = Int.random(in: 0..<100, using: &random)   // the same on every run
/// ```
public struct SeededRandomNumberGenerator: RandomNumberGenerator, Sendable {
    /// The seed the generator started from.
    public let seed: UInt64
    private var state: UInt64

    /// A generator that produces the same sequence for the same `seed`.
    public init(seed: UInt64) {
        self.seed = seed
        state = seed
    }

    /// The next 64 random bits.
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
