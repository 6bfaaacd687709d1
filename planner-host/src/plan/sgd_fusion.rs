//! Pass (before planning): plain SGD's update fused with its weight gradient (issue 14, "Memory,
//! beyond the anchors": "the update can be fused into the weight gradient's product so that no
//! gradient buffer exists").
//!
//! SGD records `w ← sub(w, mul(ḡw, fill(lr)))` ([`crate::model::optim::Optimizer::step`]), and
//! the weight gradient of a product `y = x · w` is `ḡw = matmul(transpose(x), ḡy)` (`matmul`'s
//! rule); of `y = x · wᵀ` (`nn::Linear`'s weight `[out, in]`), `ḡw = transpose(matmul(
//! transpose(x), ḡy))`. Where the gradient and its scaling are read by nothing else, the update
//! becomes one [`Opcode::SgdMatMul`] instruction, `w − lr · (xᵀ · ḡy)` (or `w − lr · (ḡyᵀ · x)` for
//! the transposed weight), written over `w` in place: the gradient's `[m, n]` buffer, and the
//! transpose of `x` when nothing else reads it, are never allocated. The bits are the unfused
//! step's (see [`tapeplan_core::ops::sgd_matmul`]).
//!
//! Only updates of unguarded entries are fused. A guarded entry writes each new parameter into
//! scratch that lives to the entry's end (the runtime commits it only when every output and
//! update is finite), and its unfused update already runs in place over the gradient's own
//! buffer (`mul` and `sub` are elementwise), so the fused instruction would save nothing there
//! but the transpose; and it would be the one update written out of place by a
//! non-elementwise instruction, so it is left alone.

use std::collections::HashSet;

use tapeplan_core::ops::Attr;
use tapeplan_core::{NodeId, Opcode, Tape, TapeError};

use crate::plan::{EntrySpec, Root};

/// One update to fuse: the update node, its weight, and the two product operands in
/// `sgd_matmul`'s order (`a: [k, m]`, `b: [k, n]`), and the learning rate.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Fusable {
    update: usize,
    weight: usize,
    a: usize,
    b: usize,
    lr: f32,
}

/// Replays `tape` with every fusable SGD update (see the module's docs) recorded as one
/// `sgd_matmul`; answers the new tape, the new id of every old node (the same index: the fused
/// update takes the old one's place, its gradient nodes stay in the tape but no root reaches
/// them, so planning prunes them) and how many updates were fused.
///
/// # Errors
/// A shape error from replaying (cannot happen for a tape that recorded).
pub fn fuse_sgd_updates(
    tape: &Tape,
    entries: &[EntrySpec],
) -> Result<(Tape, Vec<NodeId>, usize), TapeError> {
    let found = fusable(tape, entries);
    let (out, map) = super::transpose_fold::replay(tape, |index| {
        found
            .iter()
            .find(|f| f.update == index)
            .map(|f| (Opcode::SgdMatMul, Attr::Lr(f.lr), vec![f.weight, f.a, f.b]))
    })?;
    Ok((out, map, found.len()))
}

/// The updates of `entries` that fuse.
fn fusable(tape: &Tape, entries: &[EntrySpec]) -> Vec<Fusable> {
    let nodes = tape.nodes();
    // Readers among the roots' ancestors (a dead node's reading does not count), and the roots
    // themselves (an update reads its value too: a value that is also another parameter's
    // update, or an output, must exist, so it is not fused away).
    let (_, readers) = super::transpose_fold::live_readers(tape, entries);
    // The update nodes of guarded entries, and those named by more than one root.
    let mut guarded: HashSet<usize> = HashSet::new();
    let mut seen: HashSet<usize> = HashSet::new();
    let mut updates: Vec<(usize, usize)> = Vec::new();
    for e in entries {
        for r in &e.roots {
            if let Root::Update { param, value } = r {
                if e.guarded || !seen.insert(value.index()) {
                    guarded.insert(value.index());
                }
                updates.push((param.index(), value.index()));
            }
        }
    }
    let only_read_once = |v: usize| readers[v] == 1;
    let node = |v: u32| &nodes[v as usize];
    let mut out = Vec::new();
    for (param, u) in updates {
        if guarded.contains(&u) || out.iter().any(|f: &Fusable| f.update == u) {
            continue;
        }
        let upd = &nodes[u];
        let [w, s, _] = upd.args;
        if upd.op != Opcode::Sub || w as usize != param || !only_read_once(s as usize) {
            continue;
        }
        let scale = node(s);
        let [g, f, _] = scale.args;
        let fill = node(f);
        let Attr::Fill { value: lr, .. } = fill.attr else {
            continue;
        };
        if scale.op != Opcode::Mul || fill.op != Opcode::Fill || !only_read_once(g as usize) {
            continue;
        }
        // The product `transpose(x) · ḡ`, possibly transposed itself (`[out, in]` weights).
        let (product, transposed) = match node(g).op {
            Opcode::MatMul => (g, false),
            Opcode::Transpose if only_read_once(node(g).args[0] as usize) => {
                (node(g).args[0], true)
            }
            _ => continue,
        };
        let mm = node(product);
        let [t, dy, _] = mm.args;
        if mm.op != Opcode::MatMul || node(t).op != Opcode::Transpose {
            continue;
        }
        let x = node(t).args[0];
        if [x, dy].iter().any(|&v| node(v).shape.rank() != 2) || nodes[param].shape.rank() != 2 {
            continue;
        }
        let (a, b) = if transposed { (dy, x) } else { (x, dy) };
        // The weight must not be an operand of its own product (it is overwritten in place).
        if a as usize == param || b as usize == param {
            continue;
        }
        out.push(Fusable {
            update: u,
            weight: param,
            a: a as usize,
            b: b as usize,
            lr,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapeplan_core::{Recordable, Shape};

    /// `y = x · w` (or `x · wᵀ`), loss-free: the seed is `ḡy` itself, an input; the update
    /// `w − 0.5 · ḡw` recorded as SGD records it.
    fn sgd_tape(transposed: bool, guarded: bool) -> (Tape, Vec<EntrySpec>) {
        let mut tape = Tape::new();
        let x = tape.input("x", Shape::matrix(4, 3));
        let dy = tape.input("dy", Shape::matrix(4, 2));
        let w = tape.parameter(
            "w",
            if transposed {
                Shape::matrix(2, 3)
            } else {
                Shape::matrix(3, 2)
            },
        );
        let new_w = {
            let mut t = tape.trace();
            let xt = t.transpose(&x).unwrap();
            let g = t.matmul(&xt, &dy).unwrap();
            let g = if transposed {
                t.transpose(&g).unwrap()
            } else {
                g
            };
            let s = t.scale(&g, 0.5).unwrap();
            t.sub(&w, &s).unwrap()
        };
        let entries = vec![EntrySpec {
            name: "train_step".into(),
            roots: vec![Root::Update {
                param: w,
                value: new_w,
            }],
            guarded,
        }];
        (tape, entries)
    }

    #[test]
    fn both_weight_layouts_fuse_and_guarded_updates_do_not() {
        for transposed in [false, true] {
            let (tape, entries) = sgd_tape(transposed, false);
            let (fused, map, n) = fuse_sgd_updates(&tape, &entries).unwrap();
            assert_eq!(n, 1);
            assert_eq!(map.len(), tape.len());
            let last = &fused.nodes()[tape.len() - 1];
            assert_eq!(last.op, Opcode::SgdMatMul);
            assert_eq!(last.attr, Attr::Lr(0.5));
            // (w, x, ḡy), or (w, ḡy, x) for the transposed weight.
            let want = if transposed { [2, 1, 0] } else { [2, 0, 1] };
            assert_eq!(last.args, want);
            let (_, _, none) = fuse_sgd_updates(&tape, &sgd_tape(transposed, true).1).unwrap();
            assert_eq!(none, 0, "a guarded entry's update is not fused");
        }
    }

    #[test]
    fn a_gradient_read_elsewhere_is_not_fused() {
        let (mut tape, mut entries) = sgd_tape(false, false);
        // An output reads the gradient (a gradient-norm report would): it must exist.
        let g = tape.id(4).unwrap();
        assert_eq!(tape.nodes()[4].op, Opcode::MatMul);
        let norm = tape.trace().sum_all(&g).unwrap();
        entries[0].roots.push(Root::Output {
            name: "norm".into(),
            node: norm,
        });
        assert_eq!(fuse_sgd_updates(&tape, &entries).unwrap().2, 0);
    }
}
