//! Pass: offsets. Each buffer gets a place in the entry's scratch region; buffers live at the
//! same time never overlap.

use crate::plan::align;
use crate::plan::in_place::Buffer;

/// Offsets for buffers, greedy: buffers in a priority order, each at the lowest aligned
/// offset that does not collide with an already placed buffer live at the same time. Six
/// orders are tried — by size (largest first), by size × lifetime, by definition, by lifetime,
/// by size then last use, by last use — and the one with the lowest high-water mark kept (the
/// first on ties); then a seeded local search swaps pairs of that order while the mark does not
/// rise, until it reaches the lower bound (the most bytes live at one step) or its budget.
/// Deterministic: the same buffers always get the same offsets. Answers offsets relative to the
/// scratch base and the high-water mark, in elements.
pub fn assign_offsets(groups: &[Buffer]) -> (Vec<usize>, usize) {
    let sorted = |key: &dyn Fn(usize) -> (std::cmp::Reverse<usize>, isize)| {
        let mut order: Vec<usize> = (0..groups.len()).collect();
        order.sort_by_key(|&g| (key(g), g));
        order
    };
    let size = |g: usize| align(groups[g].elems);
    let life = |g: usize| (groups[g].end - groups[g].start + 1).max(1) as usize;
    let orders = [
        sorted(&|g| (std::cmp::Reverse(size(g)), groups[g].start)),
        sorted(&|g| (std::cmp::Reverse(size(g) * life(g)), groups[g].start)),
        sorted(&|g| (std::cmp::Reverse(0), groups[g].start)),
        sorted(&|g| (std::cmp::Reverse(life(g)), groups[g].start)),
        sorted(&|g| (std::cmp::Reverse(size(g)), -groups[g].end)),
        sorted(&|g| (std::cmp::Reverse(0), -groups[g].end)),
    ];
    let mut order: Vec<usize> = (0..groups.len()).collect();
    let mut placed = (vec![0; groups.len()], usize::MAX);
    for candidate in orders {
        let next = assign_in_order(groups, &candidate);
        if next.1 < placed.1 {
            (order, placed) = (candidate, next);
        }
    }
    // Then a deterministic local search over the placement order: swap two buffers, keep the
    // order when the mark does not rise (sideways moves included), within a fixed budget of
    // pairwise checks (about `SEARCH_BUDGET` of them), so large entries plan in bounded time.
    let n = groups.len();
    let lower = lower_bound(groups);
    let tries = SEARCH_BUDGET / (n * n).max(1);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..tries.min(SEARCH_TRIES) {
        if placed.1 <= lower || n < 2 {
            break;
        }
        rng = rng
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let (a, b) = ((rng >> 33) as usize % n, (rng >> 13) as usize % n);
        order.swap(a, b);
        let next = assign_in_order(groups, &order);
        if next.1 <= placed.1 {
            placed = next;
        } else {
            order.swap(a, b);
        }
    }
    placed
}

/// The local search's budget in pairwise overlap checks (each try costs about `n²`).
const SEARCH_BUDGET: usize = 1 << 26;
/// At most this many tries of the local search.
const SEARCH_TRIES: usize = 2_000;

/// The largest total size of the buffers live at one step: no placement is below it.
fn lower_bound(groups: &[Buffer]) -> usize {
    let mut events: Vec<(isize, isize)> = Vec::with_capacity(2 * groups.len());
    for g in groups {
        events.push((g.start, align(g.elems) as isize));
        events.push((g.end + 1, -(align(g.elems) as isize)));
    }
    events.sort();
    let (mut live, mut peak) = (0isize, 0isize);
    for (_, d) in events {
        live += d;
        peak = peak.max(live);
    }
    peak.max(0) as usize
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
