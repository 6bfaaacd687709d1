//! Graph rewrites that keep the bits: constant folding and common-subexpression elimination.
//! Each replays a tape into a new one and answers where every old node went; the planner then
//! plans the new tape. Both rely on one fact: a node's value is a pure function of its opcode,
//! attribute and arguments' values, computed by the same reference kernel wherever it runs.

use std::collections::HashMap;

use tapeplan_core::ops::{self, Attr};
use tapeplan_core::{ArithProfile, Compute, MathProfile, NodeId, Opcode, Tape, TapeError, Tensor};

use crate::plan::{EntrySpec, Root};

/// Which rewrites to apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Passes {
    /// Fold a node whose arguments are all constants into a constant, when the result is one
    /// value repeated (a plan holds no tensor data but `fill` attributes).
    pub constant_folding: bool,
    /// Merge nodes with the same opcode, attribute and arguments (fills excepted: constants are
    /// rematerialized where used rather than kept live).
    pub cse: bool,
}

impl Default for Passes {
    fn default() -> Passes {
        Passes::ALL
    }
}

impl Passes {
    /// Every pass on.
    pub const ALL: Passes = Passes {
        constant_folding: true,
        cse: true,
    };
    /// Every pass off.
    pub const NONE: Passes = Passes {
        constant_folding: false,
        cse: false,
    };
}

/// What identifies a node's value: opcode byte, attribute (floats by their bits, target shapes
/// included), arguments.
type NodeKey = (u8, Attr, Vec<usize>);

/// What a rewrite did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RewriteStats {
    /// Nodes replaced by a constant.
    pub folded: usize,
    /// Nodes merged into an earlier identical one.
    pub merged: usize,
}

/// Replays `tape` with `passes` into a new tape; answers it, the new id of every old node, and
/// what was done. Nodes in `keep_distinct` (each update's value: one buffer cannot be written
/// over two parameters) are never merged into another node. Constants fold under the math
/// profile `math` and the arithmetic profile `arith`, the plan's: a folded `exp` or `matmul`
/// must have the bits the runtime would compute.
///
/// # Errors
/// A kernel error while folding (cannot happen for a tape that recorded).
pub fn rewrite(
    tape: &Tape,
    passes: Passes,
    math: MathProfile,
    arith: ArithProfile,
    keep_distinct: &[NodeId],
) -> Result<(Tape, Vec<NodeId>, RewriteStats), TapeError> {
    let keep: std::collections::HashSet<usize> = keep_distinct.iter().map(|n| n.index()).collect();
    let mut out = Tape::new();
    let mut map: Vec<NodeId> = Vec::with_capacity(tape.len());
    let mut seen: HashMap<NodeKey, NodeId> = HashMap::new();
    // The constant value of new nodes that are fills.
    let mut constant: HashMap<usize, Tensor> = HashMap::new();
    let mut stats = RewriteStats::default();
    for (index, node) in tape.nodes().iter().enumerate() {
        let args: Vec<NodeId> = node
            .arg_indices()
            .iter()
            .map(|&a| map[a as usize])
            .collect();
        let id = match node.op {
            Opcode::Input => out.input(node.name.as_deref().unwrap_or("input"), node.shape),
            Opcode::Parameter => out.parameter(node.name.as_deref().unwrap_or("param"), node.shape),
            op => {
                let folded = if passes.constant_folding
                    && op != Opcode::Fill
                    && !args.is_empty()
                    && args.iter().all(|a| constant.contains_key(&a.index()))
                {
                    let vals: Vec<&Tensor> = args.iter().map(|a| &constant[&a.index()]).collect();
                    let v =
                        op.express(&mut Compute::with_profiles(math, arith), node.attr, &vals)?;
                    let first = v.data.first().map(|x| x.to_bits());
                    match first {
                        Some(bits) if v.data.iter().all(|x| x.to_bits() == bits) => {
                            stats.folded += 1;
                            Some(Attr::fill(f32::from_bits(bits), node.shape))
                        }
                        _ => None,
                    }
                } else {
                    None
                };
                let (op, attr, args) = match folded {
                    Some(a) => (Opcode::Fill, a, Vec::new()),
                    None => (op, node.attr, args),
                };
                let key = (
                    op.to_u8(),
                    attr,
                    args.iter().map(|a| a.index()).collect::<Vec<_>>(),
                );
                // Uniform and random draws are pure too (same key and counter, same numbers).
                // Fills are not merged: recomputing a constant where it is used is cheaper than
                // keeping one buffer live across the schedule (rematerialization).
                match seen
                    .get(&key)
                    .filter(|_| passes.cse && op != Opcode::Fill && !keep.contains(&index))
                {
                    Some(&prev) if out.shape(prev)? == node.shape => {
                        stats.merged += 1;
                        prev
                    }
                    _ => {
                        let id = out.push(op, attr, &args)?;
                        if op == Opcode::Fill {
                            let mut t = Tensor::zeros(node.shape);
                            ops::fill::kernel(attr.scalar(), &mut t.data);
                            constant.insert(id.index(), t);
                        }
                        seen.entry(key).or_insert(id);
                        id
                    }
                }
            }
        };
        map.push(id);
    }
    Ok((out, map, stats))
}

/// The update values of `entries`: nodes [`rewrite`] must keep distinct.
pub fn update_values(entries: &[EntrySpec]) -> Vec<NodeId> {
    entries
        .iter()
        .flat_map(|e| e.roots.iter())
        .filter_map(|r| match r {
            Root::Update { value, .. } => Some(*value),
            Root::Output { .. } | Root::Keep { .. } => None,
        })
        .collect()
}

/// The entries' roots moved to the rewritten tape.
pub fn remap_entries(entries: &[EntrySpec], map: &[NodeId]) -> Vec<EntrySpec> {
    entries
        .iter()
        .map(|e| EntrySpec {
            name: e.name.clone(),
            guarded: e.guarded,
            roots: e
                .roots
                .iter()
                .map(|r| match r {
                    Root::Output { name, node } => Root::Output {
                        name: name.clone(),
                        node: map[node.index()],
                    },
                    Root::Update { param, value } => Root::Update {
                        param: map[param.index()],
                        value: map[value.index()],
                    },
                    Root::Keep { param } => Root::Keep {
                        param: map[param.index()],
                    },
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapeplan_core::{Recordable, Shape};

    #[test]
    fn folds_constants_and_merges_duplicates() {
        let mut tape = Tape::new();
        let x = tape.input("x", Shape::vector(3));
        let (a, b) = {
            let mut t = tape.trace();
            let one = t.fill(1.0, Shape::SCALAR).unwrap();
            let k = t.fill(-0.5, Shape::SCALAR).unwrap();
            let prod = t.mul(&one, &k).unwrap(); // folds to fill(-0.5), then merges with k
            let kb = t.broadcast(&prod, Shape::vector(3)).unwrap(); // folds to fill(-0.5, [3])
            let a = t.mul(&x, &kb).unwrap();
            let b = t.mul(&x, &kb).unwrap(); // merges with a
            (a, b)
        };
        let (out, map, stats) = rewrite(
            &tape,
            Passes::ALL,
            MathProfile::Precise,
            ArithProfile::Separate,
            &[],
        )
        .unwrap();
        assert_eq!(map[a.index()], map[b.index()]);
        assert_eq!(stats.merged, 1);
        assert_eq!(stats.folded, 2);
        assert!(out.len() < tape.len());
        let (_, _, none) = rewrite(
            &tape,
            Passes::NONE,
            MathProfile::Precise,
            ArithProfile::Separate,
            &[],
        )
        .unwrap();
        assert_eq!(none, RewriteStats::default());
    }
}
