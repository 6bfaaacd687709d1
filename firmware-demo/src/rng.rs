//! The run's shuffles, on the device: SplitMix64 (Steele, Lea and Flood, OOPSLA 2014) and the
//! Fisher–Yates shuffle, the same arithmetic as `tapeplan_planner::protocol` (which `tapeplan
//! verify` uses), so both sides visit the rows in the same order. 64-bit integer arithmetic
//! only: identical on every core.

/// A SplitMix64 stream.
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A stream from a seed.
    pub const fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform integer in `[0, n)` (Lemire's multiply-shift without rejection).
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }

    /// Fisher–Yates: `j` in `[0, i]` for `i` from the last index down to 1.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

/// The shuffle seed of epoch `epoch` (0-based): `tapeplan_planner::protocol::epoch_seed`.
pub fn epoch_seed(seed: u64, epoch: usize) -> u64 {
    SplitMix64::new(seed ^ ((epoch as u64 + 1) << 32)).next_u64()
}

/// FNV-1a 64 (offset basis `0xcbf29ce484222325`, prime `0x100000001b3`), streamed: the data
/// digest (`tapeplan_planner::protocol::data_digest`) over bytes, and the parameter digest
/// (`tapeplan_core::format::digest_f32`) over `f32`s, NaNs canonicalized to `0x7fc00000`.
pub struct Fnv64(u64);

impl Default for Fnv64 {
    fn default() -> Self {
        Fnv64::new()
    }
}

impl Fnv64 {
    /// The offset basis.
    pub const fn new() -> Fnv64 {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }

    /// Feeds bytes.
    pub fn bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// Feeds `f32`s as their little-endian bytes.
    pub fn f32s(&mut self, values: &[f32]) {
        for v in values {
            let bits = if v.is_nan() { 0x7fc0_0000 } else { v.to_bits() };
            self.bytes(&bits.to_le_bytes());
        }
    }

    /// The digest so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
}
