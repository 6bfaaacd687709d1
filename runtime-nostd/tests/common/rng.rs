//! The test generator of the hostile suites: xorshift64 (G. Marsaglia, "Xorshift RNGs", Journal
//! of Statistical Software 8(14), 2003, the shift triple (13, 7, 17)). Small, fast and fixed by
//! its seed, so a failing random case replays from the seed a test prints or pins; not a
//! statistical generator.
//!
//! The runtime's tests (`tests/runtime/`) and the cross-crate tests (`tapeplan-tests`, as
//! `tapeplan_tests::rng`) include it by path.

/// An xorshift64 state.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose first output is `seed` shifted once.
    ///
    /// # Panics
    /// When `seed` is 0 (xorshift's fixed point: it would answer 0 forever).
    pub fn new(seed: u64) -> Rng {
        assert_ne!(seed, 0, "xorshift64 needs a nonzero seed");
        Rng(seed)
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// An index in `0..n` (by remainder: slightly biased to small values, which does not matter
    /// for picking cases).
    ///
    /// # Panics
    /// When `n` is 0.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// `true` with about `percent` chances in 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    /// A float in `[-2, 2)` on a grid of 2^-22 (the top 24 bits of the next output).
    pub fn f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
    }
}
