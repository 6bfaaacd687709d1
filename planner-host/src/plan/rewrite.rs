//! Graph rewrites that keep the bits: constant folding and common-subexpression elimination.
//! Each replays a tape into a new one and answers where every old node went; the planner then
//! plans the new tape. Both rely on one fact: a node's value is a pure function of its opcode,
//! attribute and arguments' values, computed by the same reference kernel wherever it runs.

use std::collections::HashMap;

use tapeplan_core::ops::{self, Attr};
use tapeplan_core::{
    ArithProfile, Compute, MathProfile, NodeId, Opcode, Shape, Tape, TapeError, Tensor,
};

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
    /// Drop operations whose result is exactly one of their arguments ([`identity_of`]:
    /// `x · 1`, `1 · x`, `x / 1`, `x - (+0)`, `x + (-0)`, the constant a fill of the node's
    /// shape): the node becomes that argument.
    pub identities: bool,
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
        identities: true,
    };
    /// Every pass off.
    pub const NONE: Passes = Passes {
        constant_folding: false,
        cse: false,
        identities: false,
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
    /// Nodes replaced by the argument they equal ([`Passes::identities`]).
    pub identities: usize,
}

/// The argument (0 or 1) that `op(args)` equals bit for bit whatever its value, when the other
/// argument is the constant `c` (`c_arg` its position): `x · 1 = 1 · x = x / 1 = x - (+0) =
/// x + (-0) = x` for every `x` that is not a NaN (IEEE 754 §6.3: an exact result is the
/// operand; `-0 + -0 = -0`, `+0 - +0 = +0`), and a NaN stays a NaN (which the format does not
/// tell apart by payload). Not `x + (+0)` (`-0 + +0 = +0`) nor `x - (-0)`.
pub fn identity_of(op: Opcode, c_arg: usize, c: f32) -> Option<usize> {
    let bits = c.to_bits();
    let (one, pos_zero, neg_zero) = (1.0f32.to_bits(), 0.0f32.to_bits(), (-0.0f32).to_bits());
    match (op, c_arg) {
        (Opcode::Mul, 0) if bits == one => Some(1),
        (Opcode::Mul, 1) | (Opcode::Div, 1) if bits == one => Some(0),
        (Opcode::Sub, 1) if bits == pos_zero => Some(0),
        (Opcode::Add, 1) if bits == neg_zero => Some(0),
        (Opcode::Add, 0) if bits == neg_zero => Some(1),
        _ => None,
    }
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
            op => match identity(&out, &constant, op, &args, node.shape)
                .filter(|_| passes.identities && !keep.contains(&index))
            {
                Some(kept) => {
                    stats.identities += 1;
                    kept
                }
                None => {
                    let folded = if passes.constant_folding
                        && op != Opcode::Fill
                        && !args.is_empty()
                        && args.iter().all(|a| constant.contains_key(&a.index()))
                    {
                        let vals: Vec<&Tensor> =
                            args.iter().map(|a| &constant[&a.index()]).collect();
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
            },
        };
        map.push(id);
    }
    Ok((out, map, stats))
}

/// The argument of `op(args)` (a node of shape `shape` on `out`) that the node equals, by
/// [`identity_of`]: the other argument a fill of `shape` (one value, so one element each) and the
/// kept one of `shape` too (no broadcast), and not a leaf (an input or parameter stays a
/// distinct value from what is computed from it).
fn identity(
    out: &Tape,
    constant: &HashMap<usize, Tensor>,
    op: Opcode,
    args: &[NodeId],
    shape: Shape,
) -> Option<NodeId> {
    let [a, b] = args else {
        return None;
    };
    let pick = [*a, *b].iter().enumerate().find_map(|(i, c)| {
        let t = constant.get(&c.index())?;
        let v = *t.data.first()?;
        identity_of(op, i, v).filter(|_| t.shape == shape)
    })?;
    let kept = [*a, *b][pick];
    let leaf = matches!(out.node(kept).ok()?.op, Opcode::Input | Opcode::Parameter);
    (out.shape(kept).ok()? == shape && !leaf).then_some(kept)
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
    use tapeplan_core::Recordable;

    #[test]
    fn folds_constants_and_merges_duplicates() {
        let mut tape = Tape::new();
        let x = tape.input("x", Shape::vector(3));
        let (a, b) = {
            let mut t = tape.trace();
            let one = t.fill(1.0, Shape::SCALAR).unwrap();
            let k = t.fill(-0.5, Shape::SCALAR).unwrap();
            let prod = t.mul(&one, &k).unwrap(); // `1 · k`: k (an identity)
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
        assert_eq!(stats.folded, 1);
        assert_eq!(stats.identities, 1);
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

    /// Which operations with a constant become their other argument: `x · 1`, `1 · x`, `x / 1`,
    /// `x - (+0)`, `x + (-0)` of a computed `x` of the node's shape; not `x + (+0)` (`-0 + +0 =
    /// +0`), `x - (-0)`, `1 / x`, a constant of another shape (a broadcast), an input or
    /// parameter, nor a value kept distinct (an update).
    #[test]
    fn identities_become_their_argument_and_nothing_else_does() {
        let v3 = Shape::vector(3);
        let mut tape = Tape::new();
        let x = tape.input("x", v3);
        let mut nodes = Vec::new();
        let kept = {
            let mut t = tape.trace();
            let y = t.tanh(&x).unwrap();
            let one = t.fill(1.0, v3).unwrap();
            let one_s = t.fill(1.0, Shape::SCALAR).unwrap();
            let pz = t.fill(0.0, v3).unwrap();
            let nz = t.fill(-0.0, v3).unwrap();
            // (node, whether it becomes `y`)
            nodes.push((t.mul(&y, &one).unwrap(), true));
            nodes.push((t.mul(&one, &y).unwrap(), true));
            nodes.push((t.div(&y, &one).unwrap(), true));
            nodes.push((t.sub(&y, &pz).unwrap(), true));
            nodes.push((t.add(&y, &nz).unwrap(), true));
            nodes.push((t.add(&nz, &y).unwrap(), true));
            nodes.push((t.add(&y, &pz).unwrap(), false));
            nodes.push((t.sub(&y, &nz).unwrap(), false));
            nodes.push((t.div(&one, &y).unwrap(), false));
            nodes.push((t.mul(&x, &one).unwrap(), false));
            let s = t.sum_to(&y, Shape::SCALAR).unwrap();
            nodes.push((t.mul(&s, &one_s).unwrap(), false)); // becomes s, not y
            let kept = t.mul(&one, &y).unwrap();
            nodes.push((kept, false));
            (y, s, kept)
        };
        let (y, s, kept) = kept;
        let (_, map, stats) = rewrite(
            &tape,
            Passes::ALL,
            MathProfile::Precise,
            ArithProfile::Separate,
            &[kept],
        )
        .unwrap();
        for (i, &(n, becomes_y)) in nodes.iter().enumerate() {
            assert_eq!(map[n.index()] == map[y.index()], becomes_y, "node {i}");
        }
        let last_but_one = nodes[nodes.len() - 2].0;
        assert_eq!(map[last_but_one.index()], map[s.index()]);
        assert_eq!(stats.identities, 7);
    }
}
