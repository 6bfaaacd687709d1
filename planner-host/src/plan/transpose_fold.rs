//! Pass (before planning): a `transpose` folded into the matrix products that read it (issues
//! 14 and 15). A gradient reads its operands transposed (`matmul`'s rule: `Ā += ḡ · Bᵀ`,
//! `B̄ += Aᵀ · ḡ`), and the tape records each as a `transpose` then a `matmul`, so the transpose
//! is materialized in the arena every step: W1's peak holds `w2ᵀ`, W2 transposes its whole
//! `64 × 784` input batch. Where every reader of a `transpose` is a `matmul` and the transpose is
//! no root, each reader becomes [`Opcode::MatMulTn`] (`matmul(transpose(x), b)` →
//! `matmul_tn(x, b)`) or [`Opcode::MatMulNt`] (`matmul(a, transpose(y))` → `matmul_nt(a, y)`),
//! and the transpose is never computed. The bits are the same: each output is accumulated over
//! the same operand values in the same order (see [`tapeplan_core::ops::matmul_tn`]).
//!
//! A product whose two operands are both foldable transposes folds its first (there is no
//! `matmul_tt`); the second stays a `transpose` for all its readers.
//!
//! It runs after [`super::sgd_fusion`] (which reads `matmul(transpose(x), ḡ)` itself, and
//! reads `x` directly): only the nodes the entries' roots reach count as readers, so the
//! gradient nodes a fused update left behind do not hold a transpose back.

use tapeplan_core::ops::Attr;
use tapeplan_core::{NodeId, Opcode, Tape, TapeError};

use crate::plan::{EntrySpec, PlanOptions, PlanningError, Root, Schedule};

/// For every node of `tape`: whether the roots of `entries` reach it, and how many readers it
/// has among the reached nodes and the roots (an output, and an update's value, read it; a kept
/// parameter reads nothing).
pub(crate) fn live_readers(tape: &Tape, entries: &[EntrySpec]) -> (Vec<bool>, Vec<usize>) {
    let nodes = tape.nodes();
    let n = nodes.len();
    let mut live = vec![false; n];
    let mut stack: Vec<usize> = Vec::new();
    let mut readers = vec![0usize; n];
    for e in entries {
        for r in &e.roots {
            let v = match r {
                Root::Output { node, .. } => node.index(),
                Root::Update { value, .. } => value.index(),
                Root::Keep { .. } => continue,
            };
            stack.push(v);
            if let Some(c) = readers.get_mut(v) {
                *c += 1;
            }
        }
    }
    while let Some(v) = stack.pop() {
        if v >= n || live[v] {
            continue;
        }
        live[v] = true;
        stack.extend(nodes[v].arg_indices().iter().map(|&a| a as usize));
    }
    for (node, _) in nodes.iter().zip(&live).filter(|(_, &l)| l) {
        for &a in node.arg_indices() {
            readers[a as usize] += 1;
        }
    }
    (live, readers)
}

/// Replays `tape` into a new one, node by node at the same index: `replace(index)` answers the
/// instruction recorded in place of node `index` (opcode, attribute, argument indices in the old
/// tape), or `None` to copy it. Answers the new tape and the new id of every old node.
///
/// # Errors
/// A shape error from replaying (cannot happen for a tape that recorded and a replacement of
/// the same shape).
pub(crate) fn replay(
    tape: &Tape,
    replace: impl Fn(usize) -> Option<(Opcode, Attr, Vec<usize>)>,
) -> Result<(Tape, Vec<NodeId>), TapeError> {
    let mut out = Tape::new();
    let mut map: Vec<NodeId> = Vec::with_capacity(tape.len());
    for (index, node) in tape.nodes().iter().enumerate() {
        let id = match node.op {
            Opcode::Input => out.input(node.name.as_deref().unwrap_or("input"), node.shape),
            Opcode::Parameter => out.parameter(node.name.as_deref().unwrap_or("param"), node.shape),
            op => {
                let (op, attr, args) = replace(index).unwrap_or_else(|| {
                    let args = node.arg_indices().iter().map(|&a| a as usize).collect();
                    (op, node.attr, args)
                });
                let args: Vec<NodeId> = args.iter().map(|&a| map[a]).collect();
                out.push(op, attr, &args)?
            }
        };
        map.push(id);
    }
    Ok((out, map))
}

/// The products to rewrite: `(product, opcode, a, b)` with the new opcode and its argument
/// indices (the transposes' own arguments in place of the transposes).
fn foldable(tape: &Tape, entries: &[EntrySpec]) -> Vec<(usize, Opcode, usize, usize)> {
    let nodes = tape.nodes();
    let (live, readers) = live_readers(tape, entries);
    // Live reads of each node by a `matmul`, by position (a `matmul(t, t)` reads `t` twice).
    let mut product_reads = vec![0usize; nodes.len()];
    for (node, _) in nodes.iter().zip(&live).filter(|(_, &l)| l) {
        if node.op == Opcode::MatMul {
            for &a in node.arg_indices() {
                product_reads[a as usize] += 1;
            }
        }
    }
    // A transpose every one of whose readers is a product (so no root reads it either).
    let mut candidate: Vec<bool> = (0..nodes.len())
        .map(|v| {
            live[v]
                && nodes[v].op == Opcode::Transpose
                && readers[v] > 0
                && readers[v] == product_reads[v]
        })
        .collect();
    // A product reading two candidates folds the first: the second stays for all its readers.
    for (node, _) in nodes.iter().zip(&live).filter(|(_, &l)| l) {
        let [a, b, _] = node.args;
        if node.op == Opcode::MatMul && candidate[a as usize] && candidate[b as usize] {
            candidate[b as usize] = false;
        }
    }
    let mut out = Vec::new();
    for (index, node) in nodes.iter().enumerate() {
        let [a, b, _] = node.args;
        let (a, b) = (a as usize, b as usize);
        if !live[index] || node.op != Opcode::MatMul {
            continue;
        }
        let source = |t: usize| nodes[t].args[0] as usize;
        if candidate[a] {
            out.push((index, Opcode::MatMulTn, source(a), b));
        } else if candidate[b] {
            out.push((index, Opcode::MatMulNt, a, source(b)));
        }
    }
    out
}

/// Replays `tape` with every foldable transpose (see the module's docs) folded into its
/// products; answers the new tape, the new id of every old node (the same index: a folded
/// product takes the old one's place, the transposes stay in the tape but no root reaches
/// them, so planning prunes them) and how many products were rewritten.
///
/// # Errors
/// A shape error from replaying (cannot happen for a tape that recorded).
pub fn fold_transposes(
    tape: &Tape,
    entries: &[EntrySpec],
) -> Result<(Tape, Vec<NodeId>, usize), TapeError> {
    let found = foldable(tape, entries);
    let (out, map) = replay(tape, |index| {
        found
            .iter()
            .find(|f| f.0 == index)
            .map(|&(_, op, a, b)| (op, Attr::NONE, vec![a, b]))
    })?;
    Ok((out, map, found.len()))
}

/// The last step of [`super::plan_with`]: `schedule`, planned over `tape`, against the plan of
/// `tape` with its transposes folded ([`fold_transposes`]); the folded plan is kept unless its
/// arena is larger (on a tie it is kept: it computes no transposes). Off with
/// [`PlanOptions::fold_transposes`] false.
///
/// # Errors
/// As [`super::plan_with`].
pub(crate) fn keep_if_not_larger(
    tape: &Tape,
    entries: &[EntrySpec],
    options: PlanOptions,
    schedule: Schedule,
    plan: impl Fn(&Tape, &[EntrySpec]) -> Result<Schedule, PlanningError>,
) -> Result<Schedule, PlanningError> {
    if !options.fold_transposes {
        return Ok(schedule);
    }
    let (folded, map, n) = fold_transposes(tape, entries)?;
    if n == 0 {
        return Ok(schedule);
    }
    let mut kept = plan(&folded, &super::rewrite::remap_entries(entries, &map))?;
    if kept.arena_elems > schedule.arena_elems {
        return Ok(schedule);
    }
    // The folded tape keeps every node's index: name the caller's nodes.
    for (_, _, node) in &mut kept.parameters {
        *node = tape.id(node.index())?;
    }
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapeplan_core::{Recordable, Shape};

    /// `y = x · w`, `z = y · vᵀ`; outputs `z` and (optionally) `vᵀ` itself.
    fn tape(transpose_is_output: bool) -> (Tape, Vec<EntrySpec>) {
        let mut tape = Tape::new();
        let x = tape.input("x", Shape::matrix(4, 3));
        let w = tape.parameter("w", Shape::matrix(4, 2));
        let v = tape.parameter("v", Shape::matrix(5, 2));
        let (z, vt) = {
            let mut t = tape.trace();
            let xt = t.transpose(&x).unwrap();
            let y = t.matmul(&xt, &w).unwrap();
            let vt = t.transpose(&v).unwrap();
            (t.matmul(&y, &vt).unwrap(), vt)
        };
        let mut roots = vec![Root::Output {
            name: "z".into(),
            node: z,
        }];
        if transpose_is_output {
            roots.push(Root::Output {
                name: "vt".into(),
                node: vt,
            });
        }
        let entries = vec![EntrySpec {
            name: "forward".into(),
            roots,
            guarded: false,
        }];
        (tape, entries)
    }

    #[test]
    fn both_sides_fold_and_an_output_transpose_stays() {
        let (t, entries) = tape(false);
        let (folded, map, n) = fold_transposes(&t, &entries).unwrap();
        assert_eq!((n, map.len()), (2, t.len()));
        let ops: Vec<Opcode> = folded.nodes().iter().map(|n| n.op).collect();
        assert_eq!(ops[4], Opcode::MatMulTn);
        assert_eq!(folded.nodes()[4].arg_indices(), [0, 1]);
        assert_eq!(ops[6], Opcode::MatMulNt);
        assert_eq!(folded.nodes()[6].arg_indices(), [4, 2]);
        let (t, entries) = tape(true);
        let (folded, _, n) = fold_transposes(&t, &entries).unwrap();
        assert_eq!(n, 1, "vᵀ is an output: it exists");
        assert_eq!(folded.nodes()[6].op, Opcode::MatMul);
    }

    #[test]
    fn a_transpose_read_by_anything_else_stays() {
        let (mut t, mut entries) = tape(false);
        let xt = t.id(3).unwrap();
        let s = t.trace().sum_all(&xt).unwrap();
        entries[0].roots.push(Root::Output {
            name: "s".into(),
            node: s,
        });
        let (folded, _, n) = fold_transposes(&t, &entries).unwrap();
        assert_eq!(n, 1);
        assert_eq!(folded.nodes()[4].op, Opcode::MatMul);
    }

    #[test]
    fn a_product_of_two_transposes_folds_the_first() {
        let mut t = Tape::new();
        let a = t.input("a", Shape::matrix(3, 2));
        let b = t.input("b", Shape::matrix(4, 3));
        let p = {
            let mut r = t.trace();
            let at = r.transpose(&a).unwrap();
            let bt = r.transpose(&b).unwrap();
            r.matmul(&at, &bt).unwrap()
        };
        let entries = vec![EntrySpec {
            name: "forward".into(),
            roots: vec![Root::Output {
                name: "p".into(),
                node: p,
            }],
            guarded: false,
        }];
        let (folded, _, n) = fold_transposes(&t, &entries).unwrap();
        assert_eq!(n, 1);
        let last = &folded.nodes()[4];
        assert_eq!(last.op, Opcode::MatMulTn);
        assert_eq!(last.arg_indices(), [0, 3]);
    }
}
