//! The run protocol: what the host and every device compute alike, so a device's training run
//! can be replayed and checked on the host.
//!
//! - The seeded generator for initialization and data shuffling: SplitMix64 (Steele, Lea and
//!   Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014), the generator
//!   Java's `SplittableRandom` uses. Every draw is a pure function of the seed and the number of
//!   draws before it, on every platform, so a plan's initial parameters and a data split are
//!   reproducible from their seed.
//! - [`epoch_seed`]: the seed of each epoch's shuffle.
//! - [`data_digest`]: the digest a device reports for the data it embeds.

/// A SplitMix64 stream.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A stream from a seed.
    pub fn new(seed: u64) -> SplitMix64 {
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

    /// A uniform `f32` in `[0, 1)`: the top 24 bits over 2^24 (exact in `f32`).
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// A uniform integer in `[0, n)` (Lemire's multiply-shift, without the rejection step: the
    /// bias is below 2^-32 for the sizes used here). `n == 0` answers 0.
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }

    /// Shuffles `items` in place with the Fisher–Yates algorithm (Knuth's Algorithm P), drawing
    /// `j` in `[0, i]` for `i` from the last index down to 1.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

/// The shuffle seed of epoch `epoch` (0-based) of a run seeded with `seed`: the first output of
/// `SplitMix64::new(seed ^ ((epoch + 1) << 32))` (the same rule as `tapeplan demo`).
pub fn epoch_seed(seed: u64, epoch: usize) -> u64 {
    SplitMix64::new(seed ^ ((epoch as u64 + 1) << 32)).next_u64()
}

/// FNV-1a 64 (offset basis `0xcbf29ce484222325`, prime `0x100000001b3`) over `pixels`, then
/// `labels`: the digest a device reports for the data it embeds.
pub fn data_digest(pixels: &[u8], labels: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in pixels.iter().chain(labels) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_published_reference_stream() {
        // First outputs of SplitMix64 seeded with 1234567 (the reference implementation's
        // test vector).
        let mut r = SplitMix64::new(1234567);
        assert_eq!(r.next_u64(), 6457827717110365317);
        assert_eq!(r.next_u64(), 3203168211198807973);
    }

    #[test]
    fn shuffle_is_a_seeded_permutation() {
        let mut a: Vec<u32> = (0..100).collect();
        SplitMix64::new(7).shuffle(&mut a);
        let mut b: Vec<u32> = (0..100).collect();
        SplitMix64::new(7).shuffle(&mut b);
        assert_eq!(a, b);
        assert_ne!(a, (0..100).collect::<Vec<_>>());
        a.sort();
        assert_eq!(a, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn data_digest_is_fnv1a() {
        assert_eq!(data_digest(&[], &[]), 0xcbf2_9ce4_8422_2325);
        // FNV-1a 64 of "a" (the published test vector).
        assert_eq!(data_digest(b"a", &[]), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(data_digest(b"ab", &[]), data_digest(b"a", b"b"));
    }
}
