import BoardBusTestSupport

/// A small deterministic random generator (SplitMix64), so that a fuzz or random-frame test
/// that fails can be replayed with the same seed.
public typealias SeededRandom = BoardBusTestSupport.SeededRandom
