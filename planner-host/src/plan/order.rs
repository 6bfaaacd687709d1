//! Pass: order. The order of an entry's instructions in its schedule.
//!
//! The tape's own order is topological (a node is recorded after its arguments), and a training
//! tape records the forward, then the whole gradient, then every update. Scheduled that way, each
//! weight gradient lives from its product in the backward pass to the update at the end, so the
//! backward pass's peak holds every gradient at once. [`order`] moves each update forward instead,
//! to the first place where it can be computed and written over its parameter: right after the
//! last instruction that reads the parameter's old value, with the gradient product and the
//! optimizer's arithmetic that only it needs pulled in just before it. Each gradient buffer is
//! then freed as soon as it is made (the Tiny Training Engine's operator reordering: Lin et al.,
//! "On-Device Training Under 256KB Memory", NeurIPS 2022, section 3.3). The same nodes compute
//! the same values, so the bits do not change; only the schedule and the arena do.

use std::collections::{BTreeMap, BTreeSet};

use tapeplan_core::{Opcode, Tape};

use crate::plan::roots::EntryRoots;

/// The schedule's order in the tape's order (every update after the whole backward pass): the
/// live non-leaf nodes, as recorded.
pub fn tape_order(tape: &Tape, live: &[bool]) -> Vec<usize> {
    (0..tape.len())
        .filter(|&i| live[i] && !is_leaf(tape, i))
        .collect()
}

fn is_leaf(tape: &Tape, i: usize) -> bool {
    matches!(tape.nodes()[i].op, Opcode::Input | Opcode::Parameter)
}

/// The largest value, in elements, that [`order`] computes ahead of the tape's order so that an
/// update need not wait for it, if it does not depend on the entry's inputs: the optimizer's
/// scalars (a learning rate, Adam's bias corrections from its step state), which a tape records
/// after the whole gradient.
pub const PULLED_ELEMS: usize = 64;

/// The schedule's order: a topological order of the live non-leaf nodes in which each update
/// comes as early as it can (see the module's docs).
///
/// An update's *tail* is its value and every node that only it needs: a node whose every
/// reader is in the tail, and that is not an output (SGD's weight gradient product and its
/// scaling; Adam's moment arithmetic belongs to the tails of the moments' own updates). Every
/// other node keeps the tape's order. After each of those, every pending tail whose other
/// arguments are computed and whose parameter (for an update in place) is read by nothing
/// unscheduled outside the tail is scheduled, in tape order; a tail that waits only for small
/// values that do not depend on the inputs (at most [`PULLED_ELEMS`] elements each) pulls them
/// in first. What remains keeps the tape's order.
pub fn order(tape: &Tape, live: &[bool], roots: &EntryRoots) -> Vec<usize> {
    let nodes = tape.nodes();
    let n = tape.len();
    let plain = tape_order(tape, live);
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &i in &plain {
        for &a in nodes[i].arg_indices() {
            let a = a as usize;
            if a < n && readers[a].last() != Some(&i) {
                readers[a].push(i);
            }
        }
    }
    let outputs: BTreeSet<usize> = roots.outputs.iter().map(|(_, i)| *i).collect();
    // The update whose tail each node is in.
    let mut owner: Vec<Option<usize>> = vec![None; n];
    for &i in plain.iter().rev() {
        if outputs.contains(&i) {
            continue;
        }
        if roots.update_of.contains_key(&i) {
            if readers[i].is_empty() {
                owner[i] = Some(i);
            }
            continue;
        }
        let first = readers[i].first().and_then(|&r| owner[r]);
        if first.is_some() && readers[i].iter().all(|&r| owner[r] == first) {
            owner[i] = first;
        }
    }
    // What depends on the entry's inputs (the data): never computed ahead of the tape's order.
    let data = depends_on_inputs(tape);
    let mut tails: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &i in &plain {
        if let Some(v) = owner[i] {
            tails.entry(v).or_default().push(i);
        }
    }
    let mut done = vec![false; n];
    for i in 0..n {
        done[i] = live[i] && is_leaf(tape, i);
    }
    // The unscheduled small ancestors (in tape order) that `tail` waits for, when every one
    // of them is small and computable from what is scheduled; `None` otherwise.
    let pull = |tail: &[usize], done: &[bool]| -> Option<Vec<usize>> {
        let mine: BTreeSet<usize> = tail.iter().copied().collect();
        let mut seen = BTreeSet::new();
        let mut stack: Vec<usize> = tail
            .iter()
            .flat_map(|&t| nodes[t].arg_indices().iter().map(|&a| a as usize))
            .collect();
        while let Some(i) = stack.pop() {
            if done[i] || mine.contains(&i) || !seen.insert(i) {
                continue;
            }
            if owner[i].is_some() || data[i] || nodes[i].shape.elems() > PULLED_ELEMS {
                return None;
            }
            stack.extend(nodes[i].arg_indices().iter().map(|&a| a as usize));
        }
        // An update in place must come after every other reader of its parameter's old value.
        for &u in tail {
            if let Some(&p) = roots.update_of.get(&u) {
                if readers[p]
                    .iter()
                    .any(|&r| !done[r] && !mine.contains(&r) && !seen.contains(&r))
                {
                    return None;
                }
            }
        }
        Some(seen.into_iter().collect())
    };
    let mut out = Vec::with_capacity(plain.len());
    let flush = |out: &mut Vec<usize>,
                 done: &mut Vec<bool>,
                 tails: &mut BTreeMap<usize, Vec<usize>>| {
        loop {
            let ready = tails
                .iter()
                .find_map(|(&v, tail)| pull(tail, done).map(|p| (v, p)));
            let Some((v, pulled)) = ready else { break };
            for i in pulled
                .into_iter()
                .chain(tails.remove(&v).unwrap_or_default())
            {
                done[i] = true;
                out.push(i);
            }
        }
    };
    flush(&mut out, &mut done, &mut tails);
    for &i in &plain {
        if done[i] || owner[i].is_some() {
            continue;
        }
        done[i] = true;
        out.push(i);
        flush(&mut out, &mut done, &mut tails);
    }
    for &i in &plain {
        if !done[i] {
            done[i] = true;
            out.push(i);
        }
    }
    out
}

/// `order` with every node that depends neither on the entry's inputs nor on a parameter the
/// entry updates (a function of frozen parameters, buffers it does not update, and constants:
/// a broadcast or reshape of a frozen weight) moved to just before the first instruction that
/// needs it.
///
/// A tape records such a node once, where it was first needed, and an entry planned from a tape
/// that recorded another entry first (a training forward after the evaluation forward, which
/// shares every parameter-only node) would compute them all up front and keep each alive, at
/// activation size, until its late reader. Sunk, each lives only as long as its reader needs.
/// Roots (outputs and updates) and nodes that depend on the inputs keep their place; every other
/// node is emitted on demand, arguments first, in `order`'s relative order. Same nodes, same
/// values: only the schedule and the arena change.
pub fn sink(tape: &Tape, order: &[usize], roots: &EntryRoots) -> Vec<usize> {
    let nodes = tape.nodes();
    let n = tape.len();
    let data = depends_on_inputs(tape);
    let mut is_root = vec![false; n];
    for &r in &roots.nodes {
        if let Some(x) = is_root.get_mut(r) {
            *x = true;
        }
    }
    // A node that reads a parameter this entry updates (directly or through its arguments)
    // must stay before the update writes over the old value: it keeps its place.
    let updated: BTreeSet<usize> = roots.update_of.values().copied().collect();
    let mut reads_updated = vec![false; n];
    for i in 0..n {
        reads_updated[i] = updated.contains(&i)
            || nodes[i]
                .arg_indices()
                .iter()
                .any(|&a| reads_updated.get(a as usize).copied().unwrap_or(false));
    }
    let sinkable = |i: usize| !data[i] && !is_root[i] && !reads_updated[i];
    let mut in_order = vec![false; n];
    for &i in order {
        in_order[i] = true;
    }
    let mut done = vec![false; n];
    let mut out = Vec::with_capacity(order.len());
    // Emits the not-yet-emitted sinkable ancestors of `i` (arguments first), then `i`.
    let emit = |i: usize, out: &mut Vec<usize>, done: &mut Vec<bool>| {
        let mut stack = vec![(i, false)];
        while let Some((j, expanded)) = stack.pop() {
            if done[j] {
                continue;
            }
            if expanded {
                done[j] = true;
                out.push(j);
                continue;
            }
            stack.push((j, true));
            for &a in nodes[j].arg_indices().iter().rev() {
                let a = a as usize;
                if a < n && in_order[a] && !done[a] && sinkable(a) {
                    stack.push((a, false));
                }
            }
        }
    };
    for &i in order {
        if !sinkable(i) {
            emit(i, &mut out, &mut done);
        }
    }
    // Whatever no kept node needed (nothing, in a pruned entry) keeps its relative order.
    for &i in order {
        if !done[i] {
            emit(i, &mut out, &mut done);
        }
    }
    out
}

/// Per tape node: whether it depends on an input (the data), directly or through its arguments.
fn depends_on_inputs(tape: &Tape) -> Vec<bool> {
    let nodes = tape.nodes();
    let mut data = vec![false; tape.len()];
    for i in 0..tape.len() {
        data[i] = nodes[i].op == Opcode::Input
            || nodes[i]
                .arg_indices()
                .iter()
                .any(|&a| data.get(a as usize).copied().unwrap_or(false));
    }
    data
}

/// The live leaves (inputs and parameters), in tape order.
pub fn leaves(tape: &Tape, live: &[bool]) -> Vec<usize> {
    (0..tape.len())
        .filter(|&i| live[i] && is_leaf(tape, i))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::prune::prune;
    use tapeplan_core::{Recordable, Shape};

    #[test]
    fn orders_live_non_leaves_in_tape_order() {
        let mut tape = Tape::new();
        let x = tape.input("x", Shape::vector(2));
        let w = tape.parameter("w", Shape::vector(2));
        let (a, dead, b) = {
            let mut t = tape.trace();
            let a = t.add(&x, &w).unwrap();
            let dead = t.neg(&x).unwrap();
            let b = t.mul(&a, &a).unwrap();
            (a, dead, b)
        };
        let live = prune(&tape, &[b.index()]);
        let o = tape_order(&tape, &live);
        // Leaves are not instructions; the dead node is not live.
        assert_eq!(o, vec![a.index(), b.index()]);
        assert!(!o.contains(&dead.index()));
        assert_eq!(leaves(&tape, &live), vec![x.index(), w.index()]);
        // Every argument of a scheduled node is a leaf or scheduled before it.
        for (pos, &n) in o.iter().enumerate() {
            for &arg in tape.nodes()[n].arg_indices() {
                let arg = arg as usize;
                assert!(arg == x.index() || arg == w.index() || o[..pos].contains(&arg));
            }
        }
    }

    /// A two-layer tanh network, its squared loss, the recorded gradient and an SGD update of
    /// each parameter in place (the tape's order: every update after the whole gradient).
    type Job = (Tape, Vec<crate::plan::EntrySpec>, Vec<(String, Vec<f32>)>);

    fn two_layers(batch: usize) -> Job {
        use crate::plan::{EntrySpec, Root};
        let mut tape = Tape::new();
        let x = tape.input("x", Shape::matrix(batch, 6));
        let y = tape.input("y", Shape::matrix(batch, 3));
        let shapes = [
            ("w1", Shape::matrix(6, 5)),
            ("b1", Shape::vector(5)),
            ("w2", Shape::matrix(5, 3)),
            ("b2", Shape::vector(3)),
        ];
        let params: Vec<_> = shapes.iter().map(|(n, s)| tape.parameter(n, *s)).collect();
        let loss = {
            let mut t = tape.trace();
            let mut h = x;
            for l in 0..2 {
                let z = t.matmul(&h, &params[2 * l]).unwrap();
                let b = t.broadcast(&params[2 * l + 1], t.shape_of(&z)).unwrap();
                let z = t.add(&z, &b).unwrap();
                h = if l == 0 { t.tanh(&z).unwrap() } else { z };
            }
            let d = t.sub(&h, &y).unwrap();
            let dd = t.mul(&d, &d).unwrap();
            let s = t.sum_all(&dd).unwrap();
            t.scale(&s, 0.5).unwrap()
        };
        let adj = tape.differentiate(loss, &params).unwrap();
        let mut roots = vec![Root::Output {
            name: "loss".into(),
            node: loss,
        }];
        for p in &params {
            let g = *adj.get(*p).unwrap();
            let mut t = tape.trace();
            let step = t.scale(&g, 0.05).unwrap();
            let value = t.sub(p, &step).unwrap();
            roots.push(Root::Update { param: *p, value });
        }
        let values = shapes
            .iter()
            .enumerate()
            .map(|(k, (n, s))| {
                let v = (0..s.elems())
                    .map(|i| ((i * 7 + k * 3) % 11) as f32 / 11.0 - 0.45)
                    .collect();
                (n.to_string(), v)
            })
            .collect();
        let entry = EntrySpec {
            name: "train_step".into(),
            roots,
            guarded: false,
        };
        (tape, vec![entry], values)
    }

    fn is_topological(tape: &Tape, o: &[usize]) -> bool {
        o.iter().enumerate().all(|(pos, &n)| {
            tape.nodes()[n]
                .arg_indices()
                .iter()
                .all(|&a| is_leaf(tape, a as usize) || o[..pos].contains(&(a as usize)))
        })
    }

    #[test]
    fn each_update_follows_its_last_gradient_contribution() {
        let (tape, entries, _) = two_layers(4);
        let roots = crate::plan::roots::entry_roots(&tape, &entries[0]).unwrap();
        let live = prune(&tape, &roots.nodes);
        let plain = tape_order(&tape, &live);
        let o = order(&tape, &live, &roots);
        // A permutation of the tape's order, and topological.
        let mut sorted = o.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, plain);
        assert!(is_topological(&tape, &o));
        let pos = |n: usize| o.iter().position(|&x| x == n).unwrap();
        for (&v, &p) in &roots.update_of {
            // In place: after every other read of the parameter's old value.
            for (i, node) in tape.nodes().iter().enumerate() {
                if i != v && live[i] && node.arg_indices().contains(&(p as u32)) {
                    assert!(pos(i) < pos(v), "update {v} before reader {i}");
                }
            }
        }
        // The tape's order puts the four updates after every gradient product; interleaved,
        // the second layer's updates come before the first layer's weight gradient (the
        // product that reads `x`'s transpose).
        let x = 0u32;
        let nodes = tape.nodes();
        let x_t = (0..tape.len())
            .find(|&i| nodes[i].op == Opcode::Transpose && nodes[i].arg_indices() == [x])
            .unwrap();
        let g_w1 = (0..tape.len())
            .find(|&i| nodes[i].op == Opcode::MatMul && nodes[i].arg_indices()[0] == x_t as u32)
            .unwrap();
        let updates: Vec<usize> = roots.update_of.keys().map(|&v| pos(v)).collect();
        let before = updates.iter().filter(|&&u| u < pos(g_w1)).count();
        let ops: Vec<String> = o
            .iter()
            .map(|&n| format!("{n}:{}", nodes[n].op.name()))
            .collect();
        assert_eq!(before, 2, "{updates:?}, g_w1 at {}: {ops:?}", pos(g_w1));
        let plain_pos = |n: usize| plain.iter().position(|&x| x == n).unwrap();
        assert!(roots
            .update_of
            .keys()
            .all(|&v| plain_pos(v) > plain_pos(g_w1)));
    }

    #[test]
    fn interleaved_updates_save_memory_and_keep_every_bit() {
        use crate::plan::{plan_with, PlanOptions};
        let (tape, entries, values) = two_layers(16);
        let run = |interleave_updates: bool| {
            let options = PlanOptions {
                interleave_updates,
                ..PlanOptions::default()
            };
            let schedule = plan_with(&tape, &entries, options).unwrap();
            let bytes = schedule.to_bytes();
            let plan = tapeplan_runtime::Plan::parse(&bytes).unwrap();
            let mut arena = vec![0.0; plan.arena_elems()];
            let mut s = tapeplan_runtime::Session::bind(&plan, &mut arena).unwrap();
            for (n, v) in &values {
                s.load_parameter(n, v).unwrap();
            }
            let e = plan.entry("train_step").unwrap();
            let mut losses = Vec::new();
            for step in 0..5 {
                let x: Vec<f32> = (0..16 * 6)
                    .map(|i| ((i + step) % 9) as f32 * 0.1 - 0.4)
                    .collect();
                let y: Vec<f32> = (0..16 * 3)
                    .map(|i| ((i * 5 + step) % 7) as f32 * 0.1)
                    .collect();
                s.set_input(e, "x", &x).unwrap();
                s.set_input(e, "y", &y).unwrap();
                s.run(e).unwrap();
                losses.push(s.output(e, "loss").unwrap()[0].to_bits());
            }
            let params: Vec<u32> = values
                .iter()
                .flat_map(|(n, _)| {
                    s.parameter(n)
                        .unwrap()
                        .iter()
                        .map(|v| v.to_bits())
                        .collect::<Vec<_>>()
                })
                .collect();
            let report = schedule.entries[0].report;
            (losses, params, report)
        };
        let (l1, p1, r1) = run(true);
        let (l0, p0, r0) = run(false);
        assert_eq!(l1, l0, "losses");
        assert_eq!(p1, p0, "parameters");
        assert!(r1.entry_bytes < r0.entry_bytes, "{r1:?} vs {r0:?}");
        assert_eq!(r1.tape_order_bytes, r0.entry_bytes);
        assert_eq!(r0.tape_order_bytes, r0.entry_bytes);
    }
}
