//! The host's seeded generator for initialization and data shuffling: SplitMix64 (Steele, Lea
//! and Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014), the generator
//! Java's `SplittableRandom` uses. Every draw is a pure function of the seed and the number of
//! draws before it, on every platform, so a plan's initial parameters and a data split are
//! reproducible from their seed. It is the run protocol's generator,
//! [`tapeplan_runtime::protocol::SplitMix64`] (every target draws the same numbers), re-exported.

pub use tapeplan_runtime::protocol::SplitMix64;

#[cfg(test)]
mod tests {
    use super::*;

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
}
