//! The memory report: what an entry needs, against what any offset assignment for its schedule
//! needs at least and what a retain-everything posture would hold.

use tapeplan_core::Tape;

use crate::plan::in_place::Buffer;

/// What an entry needs in memory, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryReport {
    /// The whole arena (persistent region plus the largest scratch need over all entries).
    pub arena_bytes: usize,
    /// The persistent region (parameters).
    pub persistent_bytes: usize,
    /// This entry's use: the persistent region plus its scratch high-water mark.
    pub entry_bytes: usize,
    /// The liveness lower bound for this schedule: the persistent region plus the maximum, over
    /// the schedule's steps, of the bytes of buffers live at that step (after in-place merging).
    /// No offset assignment for this schedule can use less.
    pub lower_bound_bytes: usize,
    /// What a retain-everything posture holds: the persistent region plus every value of the
    /// entry in its own buffer, never reused (what an engine reverse scan that keeps all
    /// intermediates for the backward walk needs).
    pub retain_everything_bytes: usize,
    /// This entry's use when every update keeps the tape's place (after the whole backward
    /// pass) instead of the interleaved order ([`crate::plan::order::order`]): what the
    /// interleaving saves is `tape_order_bytes - entry_bytes`. Equal to `entry_bytes` for an
    /// entry planned in the tape's order.
    pub tape_order_bytes: usize,
}

/// The liveness lower bound, in elements: the most elements of `buffers` live at one step, over
/// the steps −1 (before the entry) to `steps` (after it).
pub fn lower_bound_elems(buffers: &[Buffer], steps: usize) -> usize {
    (-1..=steps as isize)
        .map(|t| {
            buffers
                .iter()
                .filter(|g| g.start <= t && t <= g.end)
                .map(|g| g.elems)
                .sum::<usize>()
        })
        .max()
        .unwrap_or(0)
}

/// Every value in `values` (nodes of `tape`) in its own buffer, in elements.
pub fn retain_everything_elems(tape: &Tape, values: impl IntoIterator<Item = usize>) -> usize {
    values
        .into_iter()
        .map(|n| tape.nodes()[n].shape.elems())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapeplan_core::{Recordable, Shape};

    #[test]
    fn the_lower_bound_is_the_busiest_step() {
        let b = |start, end, elems| Buffer { start, end, elems };
        let buffers = [b(-1, 0, 10), b(0, 1, 20), b(1, 2, 5), b(2, 3, 1)];
        // Step 0: 10 + 20; step 1: 20 + 5; step 2: 5 + 1.
        assert_eq!(lower_bound_elems(&buffers, 3), 30);
        assert_eq!(lower_bound_elems(&[], 3), 0);
    }

    #[test]
    fn retain_everything_counts_every_value() {
        let mut tape = Tape::new();
        let x = tape.input("x", Shape::matrix(2, 3));
        let y = tape.trace().neg(&x).unwrap();
        assert_eq!(retain_everything_elems(&tape, [x.index(), y.index()]), 12);
    }
}
