//! Pass (optional, before planning): rematerialization under an arena budget.
//!
//! A training tape records the forward pass, then the gradient. Every forward value the
//! gradient reads (a layer's input for its weight gradient, an activation for its derivative)
//! stays live from the forward pass to its last reader in the backward pass, and those values
//! together make the backward pass's peak. Rematerialization trades work for memory: a chosen
//! forward value is computed a second time, right before its first reader in the backward pass,
//! from the same arguments, and the backward readers read the copy. The forward value then dies
//! at its last forward reader. Chen et al., "Training Deep Nets with Sublinear Memory Cost"
//! (2016), is the idea; the choice here is greedy, plan by plan.
//!
//! Every copy is the same opcode, attribute and arguments as its original, run by the same
//! reference kernel, so it has the same bits (a node's value is a pure function of those: the
//! fact [`super::rewrite`] relies on too; `uniform` draws from its key and counter, not from a
//! state). A budgeted plan trains bit for bit as the unbudgeted one does; only the schedule,
//! the arena and the work change.
//!
//! [`rematerialize`] makes the tape with copies for a chosen set of forward values;
//! [`plan_within`] chooses the set: it plans, and while the arena is over the budget it tries
//! each forward value the gradient reads, largest first, keeping a copy only where the arena (or,
//! at an equal arena, the entries' liveness lower bound) goes down.

use std::collections::{BTreeMap, BTreeSet};

use tapeplan_core::{NodeId, Opcode, Shape, Tape, TapeError};

use crate::plan::rewrite::remap_entries;
use crate::plan::{plan_with, EntrySpec, PlanOptions, PlanningError, Root, Schedule};

/// Replays `tape` into a new one in which every node at index `gradient_start` or later that
/// reads a value in `recompute` (nodes before `gradient_start`) reads a copy of it instead. Each
/// value gets one copy, recorded just before its first reader in the gradient part; a copy's
/// arguments that are in `recompute` are copied too (a chain recomputed from what is kept).
/// Answers the new tape, where every old node went (its original, never a copy), and the
/// number of copies.
///
/// # Errors
/// A tape error from recording a copy (cannot happen for a tape that recorded).
pub fn rematerialize(
    tape: &Tape,
    gradient_start: usize,
    recompute: &BTreeSet<usize>,
) -> Result<(Tape, Vec<NodeId>, usize), TapeError> {
    let nodes = tape.nodes();
    let mut out = Tape::new();
    let mut map: Vec<NodeId> = Vec::with_capacity(tape.len());
    let mut copies: BTreeMap<usize, NodeId> = BTreeMap::new();
    for (index, node) in nodes.iter().enumerate() {
        let id = match node.op {
            Opcode::Input => out.input(node.name.as_deref().unwrap_or("input"), node.shape),
            Opcode::Parameter => out.parameter(node.name.as_deref().unwrap_or("param"), node.shape),
            op => {
                let mut args = Vec::with_capacity(node.arg_indices().len());
                for &a in node.arg_indices() {
                    let a = a as usize;
                    let late = index >= gradient_start && recompute.contains(&a);
                    args.push(if late {
                        copy_of(tape, a, &map, recompute, &mut copies, &mut out)?
                    } else {
                        map[a]
                    });
                }
                out.push(op, node.attr, &args)?
            }
        };
        map.push(id);
    }
    Ok((out, map, copies.len()))
}

/// The copy of `value` (in `recompute`) in `out`, recorded with its own copied arguments first
/// if it has none yet.
fn copy_of(
    tape: &Tape,
    value: usize,
    map: &[NodeId],
    recompute: &BTreeSet<usize>,
    copies: &mut BTreeMap<usize, NodeId>,
    out: &mut Tape,
) -> Result<NodeId, TapeError> {
    if let Some(&c) = copies.get(&value) {
        return Ok(c);
    }
    let node = &tape.nodes()[value];
    let mut args = Vec::with_capacity(node.arg_indices().len());
    for &a in node.arg_indices() {
        let a = a as usize;
        args.push(if recompute.contains(&a) {
            copy_of(tape, a, map, recompute, copies, out)?
        } else {
            map[a]
        });
    }
    let c = out.push(node.op, node.attr, &args)?;
    copies.insert(value, c);
    Ok(c)
}

/// What [`plan_within`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RematReport {
    /// The arena of the plan without rematerialization, in bytes.
    pub unbudgeted_arena_bytes: usize,
    /// The arena of the plan answered, in bytes.
    pub arena_bytes: usize,
    /// Forward values computed a second time in the backward pass.
    pub recomputed_values: usize,
    /// The extra instructions, summed over the plan's entries.
    pub extra_instrs: usize,
    /// The extra work, in element operations ([`tapeplan_core::ops::work`]'s cost model),
    /// summed over the plan's entries.
    pub extra_work: u64,
    /// The work of the plan without rematerialization, in the same units.
    pub unbudgeted_work: u64,
}

/// The largest number of planning attempts [`plan_within`] makes over all its passes: each
/// candidate value tried is one attempt, so this bounds the planner's time on a model with very
/// many layers.
pub const MAX_ATTEMPTS: usize = 512;

/// Plans `entries` over `tape` as [`plan_with`] does; if the arena is over `budget_bytes`,
/// recomputes forward values in the backward pass ([`rematerialize`]) until it is not.
/// `gradient_start` is the index of the tape's first gradient node (everything before it is the
/// forward pass and the loss). Candidates are the forward values that a node of the gradient
/// part reads, that are not an entry's output, a leaf or a constant, largest first; each comes
/// with its chain (the forward values between it and what stays live anyway, which must be
/// recomputed with it: a layer's pre-activation with its activation; [`MAX_CHAIN`] at most). A
/// candidate is kept if planning with it makes the arena smaller (or, at an equal arena, the
/// entries' summed liveness lower bound smaller). The candidates are tried in passes until a
/// pass keeps none, and the search stops as soon as the arena fits.
///
/// # Errors
/// [`PlanningError::OverBudget`] when no set of copies found brings the arena within the
/// budget (it names the smallest arena reached); any error of [`plan_with`].
pub fn plan_within(
    tape: &Tape,
    entries: &[EntrySpec],
    options: PlanOptions,
    gradient_start: usize,
    budget_bytes: usize,
) -> Result<(Schedule, RematReport), PlanningError> {
    let base = plan_with(tape, entries, options)?;
    let base_work = schedule_work(&base);
    let mut report = RematReport {
        unbudgeted_arena_bytes: base.arena_elems * 4,
        arena_bytes: base.arena_elems * 4,
        unbudgeted_work: base_work,
        ..RematReport::default()
    };
    if base.arena_elems * 4 <= budget_bytes {
        return Ok((base, report));
    }
    let mut best = (base, BTreeSet::new());
    let (order, late_read) = candidates(tape, entries, gradient_start);
    let mut attempts = 0;
    // Passes over the candidates until one keeps nothing: a copy kept late in a pass can make
    // one refused earlier worth it.
    'passes: loop {
        let mut kept_any = false;
        for &candidate in &order {
            if best.1.contains(&candidate) {
                continue;
            }
            let mut set = best.1.clone();
            let Some(chain) = recompute_chain(tape, candidate, &set, &late_read) else {
                continue;
            };
            if attempts == MAX_ATTEMPTS {
                break 'passes;
            }
            attempts += 1;
            set.extend(chain);
            let (remat, map, _) = rematerialize(tape, gradient_start, &set)?;
            let schedule = plan_with(&remat, &remap_entries(entries, &map), options)?;
            if smaller(&schedule, &best.0) {
                best = (schedule, set);
                kept_any = true;
                if best.0.arena_elems * 4 <= budget_bytes {
                    break 'passes;
                }
            }
        }
        if !kept_any {
            break;
        }
    }
    let (schedule, set) = best;
    if schedule.arena_elems * 4 > budget_bytes {
        return Err(PlanningError::OverBudget {
            budget_bytes,
            unbudgeted_bytes: report.unbudgeted_arena_bytes,
            smallest_bytes: schedule.arena_elems * 4,
            recomputed: set.len(),
        });
    }
    let instrs = |s: &Schedule| s.entries.iter().map(|e| e.instrs.len()).sum::<usize>();
    let (_, _, copies) = rematerialize(tape, gradient_start, &set)?;
    report.arena_bytes = schedule.arena_elems * 4;
    report.recomputed_values = copies;
    report.extra_work = schedule_work(&schedule).saturating_sub(base_work);
    let base_instrs = {
        let base = plan_with(tape, entries, options)?;
        instrs(&base)
    };
    report.extra_instrs = instrs(&schedule).saturating_sub(base_instrs);
    Ok((schedule, report))
}

/// `a` is a better plan under a budget than `b`: a smaller arena, or an equal arena and a
/// smaller summed liveness lower bound (a step towards a smaller arena that needs more copies).
fn smaller(a: &Schedule, b: &Schedule) -> bool {
    let bound = |s: &Schedule| {
        s.entries
            .iter()
            .map(|e| e.report.lower_bound_bytes)
            .sum::<usize>()
    };
    a.arena_elems < b.arena_elems || (a.arena_elems == b.arena_elems && bound(a) < bound(b))
}

/// The forward values a gradient node reads that are worth a copy: not leaves, not fills
/// (a fill's copy is the constant itself, which the rewrite already rematerializes), not an
/// entry's root; largest first, ties in tape order. Also answers every forward value a gradient
/// node reads.
fn candidates(
    tape: &Tape,
    entries: &[EntrySpec],
    gradient_start: usize,
) -> (Vec<usize>, BTreeSet<usize>) {
    let nodes = tape.nodes();
    let roots: BTreeSet<usize> = entries
        .iter()
        .flat_map(|e| e.roots.iter())
        .flat_map(|r| match r {
            Root::Output { node, .. } => vec![node.index()],
            Root::Update { param, value } => vec![param.index(), value.index()],
            Root::Keep { param } => vec![param.index()],
        })
        .collect();
    let mut late_read = BTreeSet::new();
    for node in nodes.iter().skip(gradient_start) {
        for &a in node.arg_indices() {
            if (a as usize) < gradient_start {
                late_read.insert(a as usize);
            }
        }
    }
    let mut out: Vec<usize> = late_read
        .iter()
        .copied()
        .filter(|&i| !is_kept(nodes[i].op) && !roots.contains(&i))
        .collect();
    out.sort_by_key(|&i| (std::cmp::Reverse(nodes[i].shape.elems()), i));
    (out, late_read)
}

/// Values never copied: leaves (inputs, parameters) and constants.
fn is_kept(op: Opcode) -> bool {
    matches!(op, Opcode::Input | Opcode::Parameter | Opcode::Fill)
}

/// The most nodes one candidate's chain may hold: a copy recomputes at most this many
/// instructions, so a value far from anything kept is not recomputed from the inputs.
pub const MAX_CHAIN: usize = 16;

/// What must be recomputed to recompute `value` given `set` (the values already recomputed):
/// `value`, and each forward argument of a recomputed node that would otherwise be kept live
/// only for the copy (it is not read by the gradient itself, nor recomputed already, nor a leaf
/// or constant). `None` when that is over [`MAX_CHAIN`] nodes.
fn recompute_chain(
    tape: &Tape,
    value: usize,
    set: &BTreeSet<usize>,
    late_read: &BTreeSet<usize>,
) -> Option<BTreeSet<usize>> {
    let nodes = tape.nodes();
    let mut chain = BTreeSet::from([value]);
    let mut todo = vec![value];
    while let Some(n) = todo.pop() {
        for &a in nodes[n].arg_indices() {
            let a = a as usize;
            if is_kept(nodes[a].op) || set.contains(&a) || late_read.contains(&a) {
                continue;
            }
            if chain.insert(a) {
                if chain.len() > MAX_CHAIN {
                    return None;
                }
                todo.push(a);
            }
        }
    }
    Some(chain)
}

/// The work of every entry of `schedule`, in element operations.
fn schedule_work(schedule: &Schedule) -> u64 {
    let shape = |t: u32| schedule.tensors[t as usize].shape;
    schedule
        .entries
        .iter()
        .flat_map(|e| e.instrs.iter())
        .map(|i| {
            let args: Vec<Shape> = i.args[..i.op.arity()].iter().map(|&a| shape(a)).collect();
            tapeplan_core::ops::work(i.op, &args, shape(i.out))
        })
        .fold(0u64, u64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapeplan_core::Recordable;

    #[test]
    fn a_copy_has_the_original_s_opcode_attribute_and_arguments() {
        let mut tape = Tape::new();
        let x = tape.input("x", Shape::matrix(8, 16));
        let w = tape.parameter("w", Shape::matrix(16, 16));
        let (h, a, g) = {
            let mut t = tape.trace();
            let h = t.matmul(&x, &w).unwrap();
            let a = t.tanh(&h).unwrap();
            let g = t.relu(&h).unwrap();
            (h, a, g)
        };
        let gradient_start = tape.len();
        let (early, late) = {
            let mut t = tape.trace();
            (t.neg(&g).unwrap(), t.mul(&a, &h).unwrap())
        };
        // `a` recomputed, and `h` with it: `a`'s copy reads `h`'s copy.
        let set: BTreeSet<usize> = [h.index(), a.index()].into();
        let (out, map, copies) = rematerialize(&tape, gradient_start, &set).unwrap();
        assert_eq!(copies, 2);
        assert_eq!(out.len(), tape.len() + 2);
        let reader = &out.nodes()[map[late.index()].index()];
        let (a_copy, h_copy) = (
            reader.arg_indices()[0] as usize,
            reader.arg_indices()[1] as usize,
        );
        assert_ne!(
            a_copy,
            map[a.index()].index(),
            "the late reader reads a copy"
        );
        assert_ne!(h_copy, map[h.index()].index());
        let node = |i: usize| {
            let n = &out.nodes()[i];
            (n.op, n.attr, n.shape)
        };
        assert_eq!(node(a_copy), node(map[a.index()].index()));
        assert_eq!(node(h_copy), node(map[h.index()].index()));
        assert_eq!(out.nodes()[a_copy].arg_indices(), &[h_copy as u32][..]);
        // The copies come right before their first late reader.
        assert!(h_copy < a_copy && a_copy < map[late.index()].index());
        // A reader in the gradient part of a value not in the set reads the original.
        let e = &out.nodes()[map[early.index()].index()];
        assert_eq!(e.arg_indices(), &[map[g.index()].index() as u32][..]);
        // With nothing to recompute the replay is the tape itself.
        let (same, _, none) = rematerialize(&tape, gradient_start, &BTreeSet::new()).unwrap();
        assert_eq!(none, 0);
        assert_eq!(same.len(), tape.len());
    }
}
