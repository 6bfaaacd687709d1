//! The run protocol: what the host and every device compute alike, so a device's training run
//! can be replayed and checked on the host. It is written once, `no_std`, in the runtime
//! ([`tapeplan_runtime::protocol`]), and re-exported here whole:
//!
//! - the seeded generator for initialization, data splits and shuffles: [`SplitMix64`] (every
//!   draw a pure function of the seed and the number of draws before it, on every platform, so
//!   a plan's initial parameters and a data split are reproducible from their seed);
//! - [`epoch_seed`] and [`epoch_shuffle`]: each epoch's row order;
//! - [`digest_f32`] and [`data_digest`]: the parameter and data digests a device reports;
//! - the train-step binding names ([`ENTRY_TRAIN_STEP`], [`INPUT_X`], …);
//! - the device transcript's format and its writer ([`TranscriptWriter`]).

pub use tapeplan_runtime::protocol::*;

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
