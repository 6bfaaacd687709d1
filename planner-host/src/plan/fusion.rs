//! Pass: fusion. Elementwise chains run a tile at a time, their intermediates in register
//! slots out of the arena.

use std::collections::{BTreeMap, BTreeSet};

use tapeplan_core::format::{MAX_CHAIN_INSTRS, MAX_REGISTERS};
use tapeplan_core::{OpClass, Opcode, Tape};

use crate::plan::liveness::Intervals;

/// Fused chains of one entry: which schedule positions run as one chain, and which values
/// live only in register slots.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fusion {
    /// Per schedule position, the position of the first instruction of its chain (itself when
    /// it is in none): the step at which liveness sees the whole chain.
    pub step: Vec<usize>,
    /// Per schedule position, whether the next position belongs to the same chain.
    pub fuse_next: Vec<bool>,
    /// Values held in register slots (node → slot), never in the arena.
    pub registers: BTreeMap<usize, usize>,
}

impl Fusion {
    /// The step at which liveness sees schedule position `pos`: a chain is one step (its first
    /// position). Positions outside the schedule (−1 for leaves, `len` for values that outlive
    /// the entry) are their own step.
    pub fn step_of(&self, pos: isize) -> isize {
        usize::try_from(pos)
            .ok()
            .and_then(|p| self.step.get(p))
            .map_or(pos, |&s| s as isize)
    }

    /// Its chains, as (first, last) schedule positions, in schedule order.
    pub fn chains(&self) -> Vec<(usize, usize)> {
        let mut chains = Vec::new();
        let mut start = None;
        for (p, &next) in self.fuse_next.iter().enumerate() {
            let lo = *start.get_or_insert(p);
            if !next {
                if p > lo {
                    chains.push((lo, p));
                }
                start = None;
            }
        }
        chains
    }

    /// This fusion without the chains whose first instruction computes a node of `drop` (over
    /// the schedule `order`): their positions become steps of their own again and their values
    /// go back to the arena. The chains kept are unchanged (a chain's registers are its own).
    pub fn without(&self, order: &[usize], drop: &BTreeSet<usize>) -> Fusion {
        let mut f = self.clone();
        for (lo, hi) in self.chains() {
            if !drop.contains(&order[lo]) {
                continue;
            }
            for (p, v) in order.iter().enumerate().take(hi + 1).skip(lo) {
                f.step[p] = p;
                f.fuse_next[p] = false;
                f.registers.remove(v);
            }
        }
        f
    }

    /// No chains: every position its own step, every value in the arena (`--no-fusion`).
    pub fn none(steps: usize) -> Fusion {
        Fusion {
            step: (0..steps).collect(),
            fuse_next: vec![false; steps],
            registers: BTreeMap::new(),
        }
    }
}

/// Which elementwise chains the planner fuses ([`crate::PlanOptions::fusion`]; CLI
/// `tapeplan plan --fusion off|all|auto|device|speed`). Fusion has two purposes, memory (a chain's
/// intermediates take no arena) and time (one pass over the data instead of one per
/// instruction), and they can disagree: on tiny tensors, or on a device whose runtime has no
/// kernel catalog, a fused chain costs more time than its unfused instructions. The bits are
/// the same whatever is chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FusionPolicy {
    /// No chains (`--no-fusion`, `--fusion off`).
    Off,
    /// Every chain the pass finds (`--fusion all`): the smallest arena. An entry whose fused
    /// schedule would need more scratch than its unfused one is still planned unfused.
    All,
    /// Per chain (`--fusion auto`, the default): starting from [`FusionPolicy::All`]'s plan,
    /// each chain that the target's cost model ([`ChainCost`]) finds slower than its unfused
    /// instructions is unfused, **unless** that raises the entry's scratch peak. Memory first:
    /// the arena is never larger than with [`FusionPolicy::All`]; only the time changes.
    #[default]
    Auto,
    /// Per chain, time first (`--fusion speed`, for hosts where a few hundred bytes of arena
    /// matter less than time): starting from [`FusionPolicy::All`]'s plan, every chain the
    /// host's cost model ([`ChainCost::HOST`]) finds slower than its unfused instructions is
    /// unfused, even where that raises the entry's scratch peak. A batch-one MLP 32 wide
    /// (chains of 32 elements: `1 - t²`, a bias's SGD step) runs them unfused, for a larger
    /// arena; W3's chains of at most 16 elements stay fused (lane chains, faster than their
    /// instructions).
    Speed,
    /// As [`FusionPolicy::Auto`], with the cost model of a device whose runtime runs the
    /// reference kernels, without the kernel catalog (`--fusion device`; the firmware's
    /// `fusion=auto`): there a chain runs 16-element tiles through the reference kernels, one
    /// kernel call per member per tile, so almost every chain is slower fused and stays fused
    /// only where the arena needs it.
    Device,
}

impl FusionPolicy {
    /// The on/off switch of before the policy: [`FusionPolicy::All`] or [`FusionPolicy::Off`].
    pub fn all_or_off(on: bool) -> FusionPolicy {
        if on {
            FusionPolicy::All
        } else {
            FusionPolicy::Off
        }
    }

    /// Whether the pass runs at all.
    pub fn fuses(self) -> bool {
        self != FusionPolicy::Off
    }

    /// The cost model chains are weighed with (`None`: every chain is kept).
    pub fn cost(self) -> Option<ChainCost> {
        match self {
            FusionPolicy::Off | FusionPolicy::All => None,
            FusionPolicy::Auto | FusionPolicy::Speed => Some(ChainCost::HOST),
            FusionPolicy::Device => Some(ChainCost::DEVICE),
        }
    }
}

/// A cost model of a fused chain against its unfused instructions, for one class of target,
/// in that target's unit (nanoseconds on the host, instructions on the device). A chain of
/// `m` members over `n` elements costs, unfused, `m · (instr + n · elem_unfused)`, and fused
/// `chain + ⌈n / tile_elems⌉ · m · tile_member + m · n · elem_fused`. The constants are
/// measured (`cargo run --release -p tapeplan-planner --example chain_cost [--features simd]`,
/// docs/benchmarks.md, "Fusion per chain"); a member's own arithmetic (its transcendental, say)
/// is the same kernel either way and cancels out. Broadcast members are counted like the rest
/// (and `fill`s, though a decoded program leaves an unfused one out: counting them as free
/// unfused made W3's step 1.09 and W2's 1.13 times as long, the chains they unfused being
/// faster fused than the model says).
/// A chain of at most `lane_elems` elements runs as a lane chain (one chunk of vectors through
/// every member, the runtime's `fused::run_lane_chain`): `lane_chain + m · lane_member`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChainCost {
    /// One unfused instruction's dispatch (decoding, the kernel call's setup).
    pub instr: f64,
    /// A chain's setup (finding its end, decoding its members).
    pub chain: f64,
    /// One member over one tile (its kernel call's setup).
    pub tile_member: f64,
    /// The runtime's tile, in elements.
    pub tile_elems: usize,
    /// Per member and element, unfused (arena in, arena out).
    pub elem_unfused: f64,
    /// Per member and element, fused (register tiles in cache).
    pub elem_fused: f64,
    /// The largest chain, in elements, that runs as a lane chain (0: none does).
    pub lane_elems: usize,
    /// A lane chain's setup.
    pub lane_chain: f64,
    /// One member of a lane chain (its vector operations and dispatch).
    pub lane_member: f64,
}

impl ChainCost {
    /// A host whose runtime has the kernel catalog (1 024-element tiles), in nanoseconds:
    /// measured with the example `chain_cost` (x86-64, SSE2 catalog, one core): an unfused
    /// instruction about 10 ns of dispatch, a chain about 12 ns plus 19 ns per member and tile,
    /// 0.15 ns per member and element unfused. Fused elements cost the same in that example
    /// (its unfused chain runs in place, in cache); the 0.05 ns fused elements save is what
    /// the Adam MLP (W4, 26 chains over 2 048-element tensors) gains fused, 0.71x the unfused
    /// time (docs/benchmarks.md). A chain that fits one tile then stays fused from about
    /// 180 + 240 / members elements on. A chain of at most 16 elements (one chunk of
    /// `L2` lanes with AVX2 or AVX-512) runs as a lane chain: about 6 ns plus 7.5 ns per member
    /// (AVX2: 20.6, 34.2 and 65.2 ns for 2, 4 and 8 members over 16 elements, against 27.8,
    /// 55.5 and 111.0 unfused), so it stays fused.
    pub const HOST: ChainCost = ChainCost {
        instr: 10.0,
        chain: 12.0,
        tile_member: 19.0,
        tile_elems: 1024,
        elem_unfused: 0.15,
        elem_fused: 0.10,
        lane_elems: 16,
        lane_chain: 6.0,
        lane_member: 7.5,
    };

    /// A device whose runtime has no kernel catalog (16-element tiles through the reference
    /// kernels, each member of each tile a reference-kernel call like an unfused instruction,
    /// and, reading the plan's records, the member decoded again per tile), in instructions:
    /// a fused chain is slower at every size (the M4F's 1-D CNN ran 356 650 instructions per
    /// step fused against 148 787 unfused). The figures are that structure's, not a fit: an
    /// instruction's dispatch and a member's tile call about 400 instructions each, a chain's
    /// setup 300, an element 12 unfused and 13 fused (the tile copy).
    pub const DEVICE: ChainCost = ChainCost {
        instr: 400.0,
        chain: 300.0,
        tile_member: 400.0,
        tile_elems: 16,
        elem_unfused: 12.0,
        elem_fused: 13.0,
        lane_elems: 0,
        lane_chain: 0.0,
        lane_member: 0.0,
    };

    /// The unfused instructions' cost: `members` instructions over `elems` elements each.
    pub fn unfused(&self, members: usize, elems: usize) -> f64 {
        members as f64 * (self.instr + elems as f64 * self.elem_unfused)
    }

    /// The fused chain's cost.
    pub fn fused(&self, members: usize, elems: usize) -> f64 {
        if elems <= self.lane_elems {
            return self.lane_chain + members as f64 * self.lane_member;
        }
        let tiles = elems.div_ceil(self.tile_elems.max(1)).max(1);
        self.chain
            + (tiles * members) as f64 * self.tile_member
            + (members * elems) as f64 * self.elem_fused
    }
}

/// The chains of `fusion` (over the schedule `order`) that `cost` finds slower fused than
/// unfused, each named by the node its first instruction computes.
pub fn slower_chains(
    tape: &Tape,
    order: &[usize],
    fusion: &Fusion,
    cost: &ChainCost,
) -> Vec<usize> {
    let nodes = tape.nodes();
    fusion
        .chains()
        .into_iter()
        .filter(|&(lo, hi)| {
            let (members, elems) = (hi - lo + 1, nodes[order[lo]].shape.elems());
            cost.fused(members, elems) > cost.unfused(members, elems)
        })
        .map(|(lo, _)| order[lo])
        .collect()
}

/// The fused chains among `instrs` (an entry's, in schedule order).
pub fn chain_count(instrs: &[crate::plan::Instr]) -> usize {
    let after = std::iter::once(false).chain(instrs.iter().map(|i| i.fuse_next));
    instrs
        .iter()
        .zip(after)
        .filter(|(i, prev)| i.fuse_next && !prev)
        .count()
}

/// Memory first, then time: from `kept`, an entry's plan with every chain fused (its scratch
/// high-water mark `.1`), unfuses the chains of `slower` (first nodes), all at once when that
/// keeps the scratch within `kept`'s, else one at a time in schedule order, each only where it
/// does. `attempt` plans the entry without the chains it is given (`None`: no better plan).
///
/// # Errors
/// What `attempt` answers.
pub fn unfuse_slower<T, E>(
    kept: (T, usize),
    slower: &[usize],
    mut attempt: impl FnMut(&BTreeSet<usize>) -> Result<Option<(T, usize)>, E>,
) -> Result<(T, usize), E> {
    if slower.is_empty() {
        return Ok(kept);
    }
    let all: BTreeSet<usize> = slower.iter().copied().collect();
    let high = kept.1;
    if let Some(p) = attempt(&all)?.filter(|p| p.1 <= high) {
        return Ok(p);
    }
    let (mut kept, mut dropped) = (kept, BTreeSet::new());
    for &c in slower {
        dropped.insert(c);
        match attempt(&dropped)?.filter(|p| p.1 <= high) {
            Some(p) => kept = p,
            None => {
                dropped.remove(&c);
            }
        }
    }
    Ok(kept)
}

/// Fuses an entry's elementwise chains. A value becomes a register when it is neither an output nor an update, and
/// every position from its definition to its last read holds an elementwise instruction, a
/// `fill` or a `broadcast` of its shape (and no broadcast reads it): then those positions run
/// as one chain, a tile at a time, and the value never needs arena memory. Overlapping
/// intervals merge into one chain (at most `MAX_CHAIN_INSTRS` long); registers get slots
/// greedily in definition order (a slot is free once its value's last read is at or before the
/// new value's definition); a value that finds no free slot stays in the arena. Liveness then
/// sees each chain as one step (`step`), which keeps the arena ranges of a chain disjoint or
/// identical, as the format requires.
pub fn fuse(tape: &Tape, order: &[usize], iv: &Intervals, roots: &[usize]) -> Fusion {
    let nodes = tape.nodes();
    let n = order.len();
    let fusable = |pos: usize| {
        let op = nodes[order[pos]].op;
        op.class() == OpClass::Elementwise || matches!(op, Opcode::Fill | Opcode::Broadcast)
    };
    // A broadcast reads its source away from the tile: the source stays in the arena.
    let read_by_broadcast = |v: usize, from: usize, to: usize| {
        (from..=to).any(|p| {
            let n = &nodes[order[p]];
            n.op == Opcode::Broadcast && n.arg_indices().contains(&(v as u32))
        })
    };
    // A broadcast whose source is defined inside a chain would read a range the chain writes
    // (the source stays in the arena, written a tile at a time): no chain may hold both.
    let position: BTreeMap<usize, usize> = order.iter().enumerate().map(|(p, &v)| (v, p)).collect();
    let broadcasts_inner_value = |lo: usize, hi: usize| {
        (lo..=hi).any(|p| {
            let n = &nodes[order[p]];
            n.op == Opcode::Broadcast
                && n.arg_indices().iter().any(|&a| {
                    position
                        .get(&(a as usize))
                        .is_some_and(|&q| lo <= q && q <= hi)
                })
        })
    };
    // Candidate intervals, in definition order, merged into chains.
    let mut chains: Vec<(usize, usize)> = Vec::new();
    let mut candidates: Vec<(usize, usize, usize)> = Vec::new(); // (def, last read, node)
    for (pos, &v) in order.iter().enumerate() {
        if roots.contains(&v) || !fusable(pos) {
            continue;
        }
        let end = iv[&v].1;
        if end <= pos as isize || end >= n as isize {
            continue;
        }
        let end = end as usize;
        let shape = nodes[v].shape;
        if !(pos..=end).all(|p| fusable(p) && nodes[order[p]].shape == shape)
            || read_by_broadcast(v, pos, end)
        {
            continue;
        }
        let (lo, hi) = match chains.last() {
            Some(&(a, b)) if pos <= b => (a, b.max(end)),
            _ => (pos, end),
        };
        if hi - lo + 1 > MAX_CHAIN_INSTRS || broadcasts_inner_value(lo, hi) {
            continue;
        }
        match chains.last_mut() {
            Some(c) if pos <= c.1 => *c = (lo, hi),
            _ => chains.push((lo, hi)),
        }
        candidates.push((pos, end, v));
    }
    let mut fusion = Fusion {
        step: (0..n).collect(),
        fuse_next: vec![false; n],
        registers: BTreeMap::new(),
    };
    for &(lo, hi) in &chains {
        for p in lo..=hi {
            fusion.step[p] = lo;
            fusion.fuse_next[p] = p < hi;
        }
        // Slots: (last read, node) of each slot's current holder.
        let mut slots: Vec<Option<usize>> = vec![None; MAX_REGISTERS];
        for &(def, end, v) in candidates.iter().filter(|c| lo <= c.0 && c.0 <= hi) {
            let free = slots.iter().position(|s| s.is_none_or(|last| last <= def));
            if let Some(k) = free {
                slots[k] = Some(end);
                fusion.registers.insert(v, k);
            }
        }
    }
    fusion
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::liveness::liveness;
    use tapeplan_core::{Recordable, Shape};

    /// The fusion of `roots` over a tape whose every non-leaf node is scheduled, in tape order.
    fn fusion_of(tape: &Tape, leaves: &[usize], roots: &[usize]) -> (Vec<usize>, Fusion) {
        let order: Vec<usize> = (0..tape.len()).filter(|i| !leaves.contains(i)).collect();
        let iv = liveness(tape, &order, leaves, roots);
        let f = fuse(tape, &order, &iv, roots);
        (order, f)
    }

    #[test]
    fn an_elementwise_chain_keeps_its_intermediates_in_registers() {
        let mut tape = Tape::new();
        let x = tape.input("x", Shape::vector(8));
        let (a, b, c) = {
            let mut t = tape.trace();
            let a = t.neg(&x).unwrap();
            let b = t.exp(&a).unwrap();
            let c = t.tanh(&b).unwrap();
            (a, b, c)
        };
        let (_, f) = fusion_of(&tape, &[x.index()], &[c.index()]);
        assert_eq!(f.step, vec![0, 0, 0], "one chain: liveness sees one step");
        assert_eq!(f.fuse_next, vec![true, true, false]);
        // `a` is dead when `b` is defined: they share slot 0. The root stays in the arena.
        let slots: Vec<(usize, usize)> = f.registers.into_iter().collect();
        assert_eq!(slots, vec![(a.index(), 0), (b.index(), 0)]);
        assert_eq!(Fusion::none(3).registers.len(), 0);
    }

    #[test]
    fn a_chain_is_named_by_its_first_node_and_can_be_left_out() {
        let mut tape = Tape::new();
        let x = tape.input("x", Shape::vector(8));
        let w = tape.parameter("w", Shape::matrix(8, 8));
        let (a, c, e) = {
            let mut t = tape.trace();
            let a = t.neg(&x).unwrap();
            let b = t.exp(&a).unwrap();
            let c = t.tanh(&b).unwrap();
            let r = t.reshape(&c, Shape::matrix(1, 8)).unwrap();
            let m = t.matmul(&r, &w).unwrap();
            let d = t.neg(&m).unwrap();
            let e = t.exp(&d).unwrap();
            (a, c, t.tanh(&e).unwrap())
        };
        let _ = c;
        let (order, f) = fusion_of(&tape, &[x.index(), w.index()], &[e.index()]);
        let chains = f.chains();
        assert_eq!(chains, vec![(0, 2), (5, 7)], "two chains of three");
        let d = order[5];
        let g = f.without(&order, &[d].into_iter().collect());
        assert_eq!(g.chains(), vec![(0, 2)], "the second chain left out");
        assert_eq!(g.step[5..], [5, 6, 7]);
        assert!(g.registers.keys().all(|&v| v == a.index() || v == order[1]));
        assert_eq!(f.without(&order, &BTreeSet::new()), f);
    }

    #[test]
    fn the_cost_models_weigh_tiles_against_dispatch() {
        let host = ChainCost::HOST;
        // Tensors of one chunk of lanes: a lane chain, cheaper than the instructions.
        assert!(host.fused(3, 16) < host.unfused(3, 16));
        assert!(host.fused(3, 1) < host.unfused(3, 1));
        // Small tensors past a chunk: a chain's setup and per-member tile call outweigh the
        // dispatch saved.
        assert!(host.fused(3, 17) > host.unfused(3, 17));
        assert!(host.fused(3, 64) > host.unfused(3, 64));
        // Tensors of thousands of elements: the cheaper element loop wins.
        assert!(host.fused(3, 8192) < host.unfused(3, 8192));
        // A device without the catalog: every member costs a reference-kernel call per
        // 16-element tile, slower than one call per instruction at every size.
        let dev = ChainCost::DEVICE;
        for n in [1, 16, 17, 256, 8192] {
            assert!(dev.fused(4, n) > dev.unfused(4, n), "{n} elements");
        }
    }

    #[test]
    fn unfusing_keeps_the_scratch_within_the_fused_plans() {
        // Three slower chains, 10, 20, 30; the plan without 20 needs more scratch.
        let attempt = |drop: &BTreeSet<usize>| -> Result<Option<(Vec<usize>, usize)>, ()> {
            let high = if drop.contains(&20) { 120 } else { 100 };
            Ok(Some((drop.iter().copied().collect(), high)))
        };
        let kept = unfuse_slower((vec![], 100), &[10, 20, 30], attempt).unwrap();
        assert_eq!(kept, (vec![10, 30], 100), "20 stays fused: memory first");
        let all = unfuse_slower((vec![], 130), &[10, 20, 30], attempt).unwrap();
        assert_eq!(all, (vec![10, 20, 30], 120), "all at once where it fits");
        let none = unfuse_slower((vec![1], 100), &[], attempt).unwrap();
        assert_eq!(none, (vec![1], 100));
    }

    #[test]
    fn a_broadcast_of_a_value_defined_in_the_chain_stays_out_of_it() {
        // `k` is live across `one` and its same-shape broadcast `b` (a scalar, as the seed of a
        // recorded gradient is): fusing them would let `b` read `one` from the arena while the
        // chain writes it, which the runtime's validator refuses (PartialAlias).
        let mut tape = Tape::new();
        let w = tape.input("w", Shape::SCALAR);
        let out = {
            let mut t = tape.trace();
            let k = t.fill(6.0, Shape::SCALAR).unwrap();
            let one = t.fill(1.0, Shape::SCALAR).unwrap();
            let b = t.broadcast(&one, Shape::SCALAR).unwrap();
            let m = t.mul(&b, &w).unwrap();
            t.div(&m, &k).unwrap()
        };
        let (order, f) = fusion_of(&tape, &[w.index()], &[out.index()]);
        let b_pos = order
            .iter()
            .position(|&v| tape.nodes()[v].op == Opcode::Broadcast)
            .unwrap();
        let one_pos = b_pos - 1;
        assert_ne!(
            f.step[b_pos], f.step[one_pos],
            "the broadcast and its source's definition are not one chain: {f:?}"
        );
    }

    #[test]
    fn a_non_elementwise_reader_or_a_shape_change_breaks_the_chain() {
        let mut tape = Tape::new();
        let x = tape.input("x", Shape::matrix(2, 2));
        let w = tape.parameter("w", Shape::matrix(2, 2));
        let (a, m, s) = {
            let mut t = tape.trace();
            let a = t.neg(&x).unwrap();
            let m = t.matmul(&a, &w).unwrap(); // reads `a` away from any tile
            let s = t.sum_all(&m).unwrap(); // another shape
            (a, m, s)
        };
        let (order, f) = fusion_of(&tape, &[x.index(), w.index()], &[s.index()]);
        assert!(order.contains(&a.index()) && order.contains(&m.index()));
        assert_eq!(f, Fusion::none(order.len()));
    }
}
