//! Pass: offsets. Each buffer gets a place in the entry's scratch region; buffers live at the
//! same time never overlap.

use crate::plan::align;
use crate::plan::in_place::Buffer;

/// Offsets for buffers, greedy: buffers in a priority order, each at the lowest aligned
/// offset that does not collide with an already placed buffer live at the same time. Three
/// orders are tried — by size (largest first), by size × lifetime, by definition — and the one
/// with the lowest high-water mark kept (the first on ties). Answers offsets relative to the
/// scratch base and the high-water mark, in elements.
pub fn assign_offsets(groups: &[Buffer]) -> (Vec<usize>, usize) {
    let by = |key: &dyn Fn(usize) -> (std::cmp::Reverse<usize>, isize)| {
        let mut order: Vec<usize> = (0..groups.len()).collect();
        order.sort_by_key(|&g| (key(g), g));
        assign_in_order(groups, &order)
    };
    let size = |g: usize| align(groups[g].elems);
    let life = |g: usize| (groups[g].end - groups[g].start + 1).max(1) as usize;
    let candidates = [
        by(&|g| (std::cmp::Reverse(size(g)), groups[g].start)),
        by(&|g| (std::cmp::Reverse(size(g) * life(g)), groups[g].start)),
        by(&|g| (std::cmp::Reverse(0), groups[g].start)),
    ];
    let best = candidates
        .iter()
        .enumerate()
        .min_by_key(|(i, c)| (c.1, *i))
        .map_or(0, |(i, _)| i);
    candidates.into_iter().nth(best).unwrap_or_default()
}

/// Greedy placement of `groups` in `order` (see [`assign_offsets`]).
fn assign_in_order(groups: &[Buffer], order: &[usize]) -> (Vec<usize>, usize) {
    let mut offsets = vec![0usize; groups.len()];
    let mut placed: Vec<usize> = Vec::new();
    let mut high = 0usize;
    for &g in order {
        let me = groups[g];
        let size = align(me.elems);
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .filter(|&&p| groups[p].start <= me.end && me.start <= groups[p].end)
            .map(|&p| (offsets[p], offsets[p] + align(groups[p].elems)))
            .collect();
        busy.sort();
        let mut at = 0usize;
        for (lo, hi) in busy {
            if at + size <= lo {
                break;
            }
            at = at.max(hi);
        }
        offsets[g] = at;
        high = high.max(at + size);
        placed.push(g);
    }
    (offsets, high)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapeplan_core::format::ALIGN_ELEMS;

    fn buffer(start: isize, end: isize, elems: usize) -> Buffer {
        Buffer { start, end, elems }
    }

    /// No two buffers live at the same time overlap, and every buffer lies below the mark.
    fn check(buffers: &[Buffer], offsets: &[usize], high: usize) {
        for (i, a) in buffers.iter().enumerate() {
            assert_eq!(offsets[i] % ALIGN_ELEMS, 0, "aligned");
            assert!(offsets[i] + a.elems <= high);
            for (j, b) in buffers.iter().enumerate().skip(i + 1) {
                let together = a.start <= b.end && b.start <= a.end;
                let apart =
                    offsets[i] + a.elems <= offsets[j] || offsets[j] + b.elems <= offsets[i];
                assert!(!together || apart, "buffers {i} and {j} overlap");
            }
        }
    }

    #[test]
    fn buffers_live_apart_in_time_share_memory() {
        let buffers = [buffer(0, 1, 64), buffer(2, 3, 64), buffer(1, 2, 16)];
        let (offsets, high) = assign_offsets(&buffers);
        check(&buffers, &offsets, high);
        assert_eq!(
            offsets[0], offsets[1],
            "disjoint lifetimes reuse the same place"
        );
        assert_eq!(high, 64 + align(16));
    }

    #[test]
    fn simultaneous_buffers_are_disjoint_and_the_mark_is_at_least_the_peak() {
        let buffers = [
            buffer(-1, 3, 10),
            buffer(0, 0, 100),
            buffer(1, 2, 30),
            buffer(2, 4, 30),
            buffer(3, 4, 5),
        ];
        let (offsets, high) = assign_offsets(&buffers);
        check(&buffers, &offsets, high);
        let peak = (-1..=4)
            .map(|t| {
                buffers
                    .iter()
                    .filter(|b| b.start <= t && t <= b.end)
                    .map(|b| align(b.elems))
                    .sum::<usize>()
            })
            .max()
            .unwrap_or(0);
        assert!(high >= peak);
        assert_eq!(assign_offsets(&[]), (Vec::new(), 0));
    }
}
