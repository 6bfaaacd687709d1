//! Pass: fusion. Elementwise chains run a tile at a time, their intermediates in register
//! slots out of the arena.

use std::collections::BTreeMap;

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

    /// No chains: every position its own step, every value in the arena (`--no-fusion`).
    pub fn none(steps: usize) -> Fusion {
        Fusion {
            step: (0..steps).collect(),
            fuse_next: vec![false; steps],
            registers: BTreeMap::new(),
        }
    }
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
