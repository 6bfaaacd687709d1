//! Stage 2, planning: a tape and its entries' roots become the planner's [`Schedule`], every
//! entry's instructions in order over one arena. One pass per file, in the order they run:
//!
//! 1. [`rewrite`] (optional, before planning): bit-preserving constant folding and
//!    common-subexpression elimination, replaying the tape into a new one; [`sgd_fusion`]
//!    (optional, in [`plan_with`]): SGD updates fused with their weight gradients' products;
//!    then [`transpose_fold`] (optional, in [`plan_with`]): transposes folded into the matrix
//!    products that read them;
//! 2. [`persistent`]: the persistent region, every parameter an entry reaches, at the start of
//!    the arena;
//!
//! then, per entry:
//!
//! 3. [`roots`]: the entry's roots checked, sorted into outputs and in-place updates;
//! 4. [`prune`]: only the roots' ancestors are planned;
//! 5. [`order`]: the schedule's order, each update as early as it can be written;
//! 6. [`liveness`]: each value's interval, from definition to last read;
//! 7. [`fusion`]: elementwise chains, their intermediates in registers;
//! 8. [`in_place`]: values grouped into buffers, an elementwise result over a dying argument,
//!    an update over its parameter;
//! 9. [`offsets`]: each buffer's place in the scratch region;
//! 10. [`emit`]: tensors and instructions; and [`memory`], the entry's memory report.
//!
//! [`remat`] (optional, around all of it): under an arena budget, forward values recomputed in
//! the backward pass until the plan fits.
//!
//! [`writer`] turns a schedule into plan bytes (`docs/plan-format.md`).

pub mod emit;
pub mod fusion;
pub mod in_place;
pub mod liveness;
pub mod memory;
pub mod offsets;
pub mod order;
pub mod persistent;
pub mod prune;
pub mod remat;
pub mod rewrite;
pub mod roots;
pub mod sgd_fusion;
pub mod transpose_fold;
pub mod writer;

use std::collections::BTreeSet;

use tapeplan_core::format::{TensorKind, ALIGN_ELEMS};
use tapeplan_core::{ArithProfile, MathProfile, NodeId, Opcode, Shape, Tape, TapeError};

pub use memory::MemoryReport;
pub use rewrite::{Passes, RewriteStats};

use fusion::Fusion;
pub use fusion::{ChainCost, FusionPolicy};
use persistent::Persistent;

/// What an entry must produce.
#[derive(Clone, Debug)]
pub enum Root {
    /// A value the caller reads after the entry.
    Output {
        /// The binding's name.
        name: String,
        /// The node.
        node: NodeId,
    },
    /// The new value of a parameter, written in place over it.
    Update {
        /// The parameter leaf.
        param: NodeId,
        /// Its new value.
        value: NodeId,
    },
    /// A parameter kept in the plan's persistent region though the entry neither reads nor
    /// writes it: a model buffer the run never changes (an evaluation-mode BatchNorm's
    /// `num_batches_tracked`), kept so that the plan's model tensors are the model's whole
    /// `state_dict` (`tapeplan export` writes it, `tapeplan import` takes it). No instruction.
    Keep {
        /// The parameter leaf.
        param: NodeId,
    },
}

/// An entry to plan: a name and its roots.
#[derive(Clone, Debug)]
pub struct EntrySpec {
    /// The entry's name (`forward`, `train_step`, …), at most 24 bytes.
    pub name: String,
    /// What it produces.
    pub roots: Vec<Root>,
    /// Commit updates only when every output and update is finite: updates are computed into
    /// scratch and the runtime copies them over the parameters after checking them (see
    /// `docs/plan-format.md`, guarded entries). Without it, updates are written in place.
    pub guarded: bool,
}

/// Why a tape could not be planned: the planning stage's error (the runtime's
/// `tapeplan_runtime::ParseError` is another thing: why plan bytes were refused).
#[derive(Debug, thiserror::Error)]
pub enum PlanningError {
    /// A handle or shape problem in the tape.
    #[error("tape: {0}")]
    Tape(#[from] TapeError),
    /// An update whose parameter is still read after the update is computed, or that is not an
    /// elementwise function of it; it cannot be written in place.
    #[error("entry {entry}: the update of parameter {param} cannot be written in place ({why})")]
    UpdateNotInPlace {
        /// The entry.
        entry: String,
        /// The parameter's name.
        param: String,
        /// What is wrong.
        why: &'static str,
    },
    /// A root of the wrong kind (an update of a non-parameter, an output that is a parameter).
    #[error("entry {entry}: bad root: {why}")]
    BadRoot {
        /// The entry.
        entry: String,
        /// What is wrong.
        why: String,
    },
    /// A name that does not fit the plan format (empty, over 24 bytes, or containing NUL).
    #[error("name {0:?} does not fit the plan format (1 to 24 bytes, no NUL)")]
    BadName(String),
    /// The arena would exceed the format's `u32` element offsets.
    #[error("the arena would exceed 2^32 elements")]
    TooLarge,
    /// No rematerialization found brings the arena within the budget ([`remat::plan_within`]).
    #[error(
        "the arena cannot be brought within the budget of {budget_bytes} B: {unbudgeted_bytes} B \
         without rematerialization, {smallest_bytes} B at the smallest found (recomputing \
         {recomputed} forward values in the backward pass); the rest is parameters, optimizer \
         state and values the backward pass cannot recompute: raise the budget, use a smaller \
         batch, or freeze layers (--frozen)"
    )]
    OverBudget {
        /// The budget asked for, in bytes.
        budget_bytes: usize,
        /// The arena without rematerialization, in bytes.
        unbudgeted_bytes: usize,
        /// The smallest arena found, in bytes.
        smallest_bytes: usize,
        /// The forward values recomputed in that plan.
        recomputed: usize,
    },
    /// The runtime's validator refuses the planned bytes: a model over the format's caps
    /// (`tapeplan_runtime::Limits::DEFAULT`: 16 384 tensors, 16 384 instructions, 4096
    /// bindings), or a planner bug.
    #[error("the plan does not load in the runtime: {0}")]
    Rejected(String),
}

/// A planned tensor: where it lives and what shape it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Offset in the arena, in elements.
    pub offset_elems: usize,
    /// Shape.
    pub shape: Shape,
    /// Region.
    pub kind: TensorKind,
}

/// A planned instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Instr {
    /// The opcode.
    pub op: Opcode,
    /// The output tensor.
    pub out: u32,
    /// The argument tensors, `op.arity()` of them.
    pub args: [u32; 3],
    /// The attribute (its bytes are written by `tapeplan_core::format::encode_attr`).
    pub attr: tapeplan_core::Attr,
    /// The tape node this instruction computes.
    pub node: usize,
    /// This instruction and the next are one fused chain (the format's `FUSE_NEXT`).
    pub fuse_next: bool,
}

/// How to plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanOptions {
    /// Which elementwise chains to fuse (see [`fusion::fuse`]): values that live only between
    /// neighbouring elementwise instructions of one shape become registers, out of the arena.
    /// [`FusionPolicy::Auto`] by default: per chain, fused where the host's cost model finds it
    /// not slower, or where unfusing it would grow the arena. The bits are the same whatever is
    /// chosen (a test checks). Never costs memory: an entry whose fused schedule would need more
    /// scratch than its unfused one is planned unfused.
    pub fusion: FusionPolicy,
    /// The math profile the schedule records (header flag bit 0), which every reader runs it
    /// under: `precise` by default. Planning itself computes nothing; a caller that folded
    /// constants first ([`rewrite::rewrite`]) folds them under the same profile.
    pub math: MathProfile,
    /// The arithmetic profile the schedule records (header flag bit 1): how every matrix
    /// product forms its multiply-accumulate steps (`separate` by default; `fma`: one fused
    /// multiply-add each, see `docs/arith-profiles.md`). Constants fold under it too.
    pub arith: ArithProfile,
    /// Schedule each update as early as it can be computed and written over its parameter, its
    /// weight gradient right before it ([`order::order`]): each gradient buffer is freed at
    /// once instead of living to the end of the backward pass. On by default; off, the
    /// schedule keeps the tape's order (every update after the whole backward pass). Same bits
    /// either way (a test checks).
    pub interleave_updates: bool,
    /// Fuse each plain-SGD update of an unguarded entry with its weight gradient's product
    /// ([`sgd_fusion`]: one `sgd_matmul` instruction written over the weight, no gradient
    /// buffer). On by default, and kept only where it makes the arena smaller (the plan is made
    /// both ways; on a tie the unfused plan is kept, so plans that gain nothing keep their
    /// bytes). Same bits either way (a test checks).
    pub fuse_sgd: bool,
    /// Fold each `transpose` read only by matrix products into them ([`transpose_fold`]:
    /// `matmul_tn`, `matmul_nt`; the transpose never touches the arena). On by default, and
    /// kept unless it makes the arena larger (on a tie the folded plan is kept: it computes no
    /// transposes). Same bits either way (a test checks).
    pub fold_transposes: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            fusion: FusionPolicy::Auto,
            math: MathProfile::Precise,
            arith: ArithProfile::Separate,
            interleave_updates: true,
            fuse_sgd: true,
            fold_transposes: true,
        }
    }
}

/// A planned entry.
#[derive(Clone, Debug)]
pub struct PlannedEntry {
    /// Its name.
    pub name: String,
    /// Its instructions, in schedule order.
    pub instrs: Vec<Instr>,
    /// Input bindings: name and tensor.
    pub inputs: Vec<(String, u32)>,
    /// Output bindings.
    pub outputs: Vec<(String, u32)>,
    /// Update bindings: the parameter's name and the new value's tensor.
    pub updates: Vec<(String, u32)>,
    /// Its memory report.
    pub report: MemoryReport,
}

/// The planner's schedule: every entry's instructions in order, over one arena whose every
/// tensor has its place. It is what the planner makes and the writer turns into plan bytes
/// ([`Schedule::to_bytes`]); the runtime's `tapeplan_runtime::Plan` is those bytes decoded and
/// validated.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// Every tensor.
    pub tensors: Vec<TensorInfo>,
    /// Parameters: name, tensor, and the leaf in the tape.
    pub parameters: Vec<(String, u32, NodeId)>,
    /// The entries.
    pub entries: Vec<PlannedEntry>,
    /// The arena, in elements.
    pub arena_elems: usize,
    /// The persistent region `[0, persistent_elems)`.
    pub persistent_elems: usize,
    /// The math profile every reader runs the plan under (header flag bit 0), as
    /// [`PlanOptions::math`] asked.
    pub math: MathProfile,
    /// The arithmetic profile every reader runs the plan's matrix products under (header flag
    /// bit 1), as [`PlanOptions::arith`] asked.
    pub arith: ArithProfile,
}

fn align(n: usize) -> usize {
    n.div_ceil(ALIGN_ELEMS) * ALIGN_ELEMS
}

fn check_name(name: &str) -> Result<(), PlanningError> {
    tapeplan_core::format::encode_name(name)
        .map(|_| ())
        .ok_or_else(|| PlanningError::BadName(name.to_string()))
}

/// Plans `entries` over `tape` with the default [`PlanOptions`] (fused, math `precise`): one
/// arena, the parameters every entry names in a persistent region at its start (in tape order),
/// each entry's scratch after it.
///
/// # Errors
/// [`PlanningError`] for bad roots or names, or an update that cannot be written in place.
pub fn plan(tape: &Tape, entries: &[EntrySpec]) -> Result<Schedule, PlanningError> {
    plan_with(tape, entries, PlanOptions::default())
}

/// [`plan`] with explicit [`PlanOptions`], the math profile among them.
///
/// # Errors
/// As [`plan`].
pub fn plan_with(
    tape: &Tape,
    entries: &[EntrySpec],
    options: PlanOptions,
) -> Result<Schedule, PlanningError> {
    let plan = |t: &Tape, e: &[EntrySpec]| plan_tape(t, e, options);
    let plain = plan_tape(tape, entries, options)?;
    if !options.fuse_sgd {
        return transpose_fold::keep_if_not_larger(tape, entries, options, plain, plan);
    }
    let (fused_tape, map, fused) = sgd_fusion::fuse_sgd_updates(tape, entries)?;
    if fused == 0 {
        return transpose_fold::keep_if_not_larger(tape, entries, options, plain, plan);
    }
    let fused_entries = rewrite::remap_entries(entries, &map);
    let mut schedule = plan_tape(&fused_tape, &fused_entries, options)?;
    if schedule.arena_elems >= plain.arena_elems {
        return transpose_fold::keep_if_not_larger(tape, entries, options, plain, plan);
    }
    schedule =
        transpose_fold::keep_if_not_larger(&fused_tape, &fused_entries, options, schedule, plan)?;
    // The fused tape keeps every node's index: name the caller's nodes.
    for (_, _, node) in &mut schedule.parameters {
        *node = tape.id(node.index())?;
    }
    Ok(schedule)
}

/// [`plan_with`] over `tape` as it is (no SGD fusion).
fn plan_tape(
    tape: &Tape,
    entries: &[EntrySpec],
    options: PlanOptions,
) -> Result<Schedule, PlanningError> {
    let region = persistent::persistent_region(tape, entries)?;
    check_caps(tape, entries, region.tensors.len())?;
    let mut tensors = region.tensors.clone();
    let mut planned = Vec::new();
    for spec in entries {
        // Each attempt plans into its own copy of the tensor list; the kept one replaces it.
        // A fused attempt leaves out the chains (first nodes) of `drop`, and answers the chains
        // it kept that the policy's cost model finds slower.
        let no_drop = BTreeSet::new();
        let attempt = |fuse: bool, order: Order, beat: Option<usize>, drop: &BTreeSet<usize>| {
            let mut t = tensors.clone();
            let chains = fuse.then_some(Chains {
                drop,
                cost: options.fusion.cost(),
            });
            let e = plan_entry(tape, spec, &mut t, &region, chains, order, beat)?;
            Ok::<_, PlanningError>(e.map(|(e, high, slower)| ((t, e, slower, fuse, order), high)))
        };
        // Neither fusion nor the memory-aware orders ever cost memory: each is kept only where
        // it does not make the entry's scratch larger (the greedy offsets can land either way; a
        // guarded entry's updates live to its end in any order). On a tie the tape's order is
        // kept, so plans that gain nothing keep their bytes.
        let fusions: &[bool] = if options.fusion.fuses() {
            &[true, false]
        } else {
            &[false]
        };
        let orders: &[Order] = if options.interleave_updates {
            &[Order::Tape, Order::Interleaved, Order::Sunk]
        } else {
            &[Order::Tape]
        };
        let first = attempt(fusions[0], Order::Tape, None, &no_drop)?;
        let mut kept = first.ok_or(PlanningError::TooLarge)?;
        let mut tape_order_high = kept.1;
        for &fuse in fusions {
            for &order in orders {
                if (fuse, order) == (fusions[0], Order::Tape) {
                    continue;
                }
                let Some(other) = attempt(fuse, order, Some(kept.1), &no_drop)? else {
                    continue;
                };
                if order == Order::Tape {
                    tape_order_high = tape_order_high.min(other.1);
                }
                if other.1 < kept.1 {
                    kept = other;
                }
            }
        }
        // Then, per chain, time where memory allows (`FusionPolicy::Auto`), or time first
        // (`FusionPolicy::Speed`: every slower chain unfused, whatever the scratch).
        let (slower, fuse, order, high) = (kept.0 .2.clone(), kept.0 .3, kept.0 .4, kept.1);
        if fuse && options.fusion == FusionPolicy::Speed {
            let all: BTreeSet<usize> = slower.iter().copied().collect();
            if !all.is_empty() {
                if let Some(p) = attempt(true, order, None, &all)? {
                    kept = p;
                }
            }
        } else if fuse {
            kept = fusion::unfuse_slower(kept, &slower, |drop| {
                attempt(true, order, Some(high + 1), drop)
            })?;
            // Chains left only because unfusing them grows the scratch in this order, when an
            // unfused plan in another order fits: that plan.
            let left = &kept.0 .2;
            if !left.is_empty() && left.len() == fusion::chain_count(&kept.0 .1.instrs) {
                for &o in orders {
                    let unfused = attempt(false, o, Some(kept.1 + 1), &no_drop)?;
                    if let Some(p) = unfused.filter(|p| p.1 <= kept.1) {
                        kept = p;
                        break;
                    }
                }
            }
        }
        let ((kept_tensors, mut entry, ..), high) = kept;
        entry.report.tape_order_bytes = entry.report.persistent_bytes + tape_order_high * 4;
        tensors = kept_tensors;
        planned.push((entry, high));
    }
    let scratch_high = planned.iter().map(|(_, h)| *h).max().unwrap_or(0);
    let arena_elems = region.elems + scratch_high;
    if arena_elems > u32::MAX as usize || tensors.len() > u32::MAX as usize {
        return Err(PlanningError::TooLarge);
    }
    let entries = planned
        .into_iter()
        .map(|(mut e, _)| {
            e.report.arena_bytes = arena_elems * 4;
            e
        })
        .collect();
    let schedule = Schedule {
        tensors,
        parameters: region.parameters,
        entries,
        arena_elems,
        persistent_elems: region.elems,
        math: options.math,
        arith: options.arith,
    };
    // Every plan the planner answers is one the runtime loads: the runtime's own validator
    // checks the bytes (the format's caps among its rules), so a model too large for the format
    // is refused here, by name, and not by a device later.
    let bytes = schedule.to_bytes();
    if let Err(e) = tapeplan_runtime::Plan::parse_alloc(&bytes) {
        return Err(PlanningError::Rejected(e.to_string()));
    }
    Ok(schedule)
}

/// Refuses, before any planning work, a model whose plan would exceed the format's caps on
/// tensors or instructions (`tapeplan_runtime::Limits::DEFAULT`): each entry's live
/// instructions each write a tensor of their own, so their sum (plus the persistent tensors) is
/// a lower bound on both counts. Without it a model far over the caps would be planned in full
/// (minutes, for thousands of layers) only to be refused by the runtime's validator.
fn check_caps(tape: &Tape, entries: &[EntrySpec], persistent: usize) -> Result<(), PlanningError> {
    let caps = tapeplan_runtime::Limits::DEFAULT;
    let mut instrs = 0usize;
    for spec in entries {
        let roots = roots::entry_roots(tape, spec)?;
        let live = prune::prune(tape, &roots.nodes);
        instrs += order::tape_order(tape, &live).len();
    }
    let tensors = persistent + instrs;
    let (what, found, cap) = if tensors > caps.max_tensors as usize {
        ("tensors", tensors, caps.max_tensors)
    } else if instrs > caps.max_instrs as usize {
        ("instructions", instrs, caps.max_instrs)
    } else {
        return Ok(());
    };
    Err(PlanningError::Rejected(format!(
        "the model needs at least {found} {what} in its plan, over the format's cap of {cap}: \
         train fewer parameters (--trainable/--frozen: nothing is recorded for the gradient \
         of what is frozen), plan fewer entries, or use a shallower model"
    )))
}

/// The order of an entry's instructions that one planning attempt uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Order {
    /// The tape's order ([`order::tape_order`]).
    Tape,
    /// Each update as early as it can be ([`order::order`]).
    Interleaved,
    /// [`Order::Interleaved`], with what depends only on parameters and constants computed
    /// just before its first reader ([`order::sink`]).
    Sunk,
}

/// Plans one entry: its tensors are appended to `tensors`; answers the entry and its scratch
/// high-water mark, in elements, or `None` for an [`Order::Sunk`] attempt whose order is the
/// interleaved one (nothing to sink: the same plan), and for an attempt in another order than
/// the tape's whose liveness lower bound is already at least `beat`, the scratch of the plan
/// kept so far: it cannot be smaller, so its offsets are not searched for.
fn plan_entry(
    tape: &Tape,
    spec: &EntrySpec,
    tensors: &mut Vec<TensorInfo>,
    region: &Persistent,
    chains: Option<Chains<'_>>,
    order_kind: Order,
    beat: Option<usize>,
) -> Result<Option<(PlannedEntry, usize, Vec<usize>)>, PlanningError> {
    check_name(&spec.name)?;
    let roots = roots::entry_roots(tape, spec)?;
    let live = prune::prune(tape, &roots.nodes);
    let order = match order_kind {
        Order::Tape => order::tape_order(tape, &live),
        Order::Interleaved => order::order(tape, &live, &roots),
        Order::Sunk => {
            let interleaved = order::order(tape, &live, &roots);
            let sunk = order::sink(tape, &interleaved, &roots);
            if sunk == interleaved {
                return Ok(None);
            }
            sunk
        }
    };
    let leaves = order::leaves(tape, &live);
    let iv = liveness::liveness(tape, &order, &leaves, &roots.nodes);
    let (fusion, slower) = match chains {
        Some(c) => {
            let f = fusion::fuse(tape, &order, &iv, &roots.nodes).without(&order, c.drop);
            let slower = c.cost.map_or_else(Vec::new, |cost| {
                fusion::slower_chains(tape, &order, &f, &cost)
            });
            (f, slower)
        }
        None => (Fusion::none(order.len()), Vec::new()),
    };
    let param_name = |p: usize| {
        region
            .parameters
            .iter()
            .find(|(_, t, _)| Some(t) == region.param_tensor.get(&p))
            .map(|(n, _, _)| n.clone())
            .unwrap_or_default()
    };
    let buffers = in_place::group(
        tape,
        spec,
        &roots,
        &order,
        &leaves,
        &iv,
        &fusion,
        &param_name,
    )?;
    let peak_elems = memory::lower_bound_elems(&buffers.buffers, order.len());
    if order_kind != Order::Tape && beat.is_some_and(|b| peak_elems >= b) {
        return Ok(None);
    }
    let (offsets, high) = offsets::assign_offsets(&buffers.buffers);
    let emitted = emit::emit(
        tape,
        spec.guarded,
        &order,
        &live,
        &roots,
        &buffers,
        &offsets,
        &fusion,
        region,
        &param_name,
        tensors,
    );
    let all_values = memory::retain_everything_elems(
        tape,
        buffers
            .buffer_of
            .keys()
            .chain(fusion.registers.keys())
            .copied(),
    );
    let persistent_bytes = region.elems * 4;
    let binding = |(name, n): (String, usize)| (name, emitted.tensor_of[&n]);
    let entry = PlannedEntry {
        name: spec.name.clone(),
        inputs: buffers.inputs.into_iter().map(binding).collect(),
        outputs: roots.outputs.into_iter().map(binding).collect(),
        instrs: emitted.instrs,
        updates: emitted.updates,
        report: MemoryReport {
            arena_bytes: 0,
            persistent_bytes,
            entry_bytes: persistent_bytes + high * 4,
            lower_bound_bytes: persistent_bytes + peak_elems * 4,
            retain_everything_bytes: persistent_bytes + all_values * 4,
            tape_order_bytes: persistent_bytes + high * 4,
        },
    };
    Ok(Some((entry, high, slower)))
}

/// The chains a fused planning attempt leaves out (by their first instructions' nodes), and
/// the cost model that names the slower ones among those it keeps.
#[derive(Clone, Copy)]
struct Chains<'a> {
    drop: &'a BTreeSet<usize>,
    cost: Option<ChainCost>,
}

impl Schedule {
    /// The entry named `name`.
    pub fn entry(&self, name: &str) -> Option<&PlannedEntry> {
        self.entries.iter().find(|e| e.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapeplan_core::Recordable;

    /// `forward`: `y = tanh(x · w)`; `train_step`: `w ← w − 0.5 · (x · w)`, in place.
    fn small() -> (Tape, Vec<EntrySpec>) {
        let mut tape = Tape::new();
        let x = tape.input("x", Shape::matrix(2, 3));
        let w = tape.parameter("w", Shape::matrix(3, 3));
        let (y, new_w) = {
            let mut t = tape.trace();
            let xw = t.matmul(&x, &w).unwrap();
            let y = t.tanh(&xw).unwrap();
            let g = t.sum_to(&xw, Shape::matrix(1, 3)).unwrap();
            let g = t.broadcast(&g, Shape::matrix(3, 3)).unwrap();
            let step = t.scale(&g, 0.5).unwrap();
            let new_w = t.sub(&w, &step).unwrap();
            (y, new_w)
        };
        let entries = vec![
            EntrySpec {
                name: "forward".into(),
                roots: vec![Root::Output {
                    name: "y".into(),
                    node: y,
                }],
                guarded: false,
            },
            EntrySpec {
                name: "train_step".into(),
                roots: vec![Root::Update {
                    param: w,
                    value: new_w,
                }],
                guarded: false,
            },
        ];
        (tape, entries)
    }

    #[test]
    fn plans_entries_over_one_arena_with_the_persistent_region_first() {
        let (tape, entries) = small();
        let s = plan(&tape, &entries).unwrap();
        assert_eq!(s.entries.len(), 2);
        assert_eq!(s.persistent_elems, align(9));
        assert_eq!(s.parameters.len(), 1);
        assert_eq!(s.tensors[0].kind, TensorKind::Persistent);
        for t in &s.tensors {
            if t.kind != TensorKind::Register {
                assert!(t.offset_elems + t.shape.elems() <= s.arena_elems);
            }
        }
        let f = s.entry("forward").unwrap();
        assert_eq!(f.inputs.len(), 1);
        assert_eq!(f.outputs.len(), 1);
        assert!(f.updates.is_empty());
        // The in-place update writes the parameter's own memory.
        let t = s.entry("train_step").unwrap();
        let (_, new_w) = &t.updates[0];
        assert_eq!(s.tensors[*new_w as usize].offset_elems, 0);
        assert_eq!(s.tensors[*new_w as usize].kind, TensorKind::Persistent);
        for e in &s.entries {
            assert_eq!(e.report.arena_bytes, s.arena_elems * 4);
            assert!(e.report.lower_bound_bytes <= e.report.entry_bytes);
            assert!(e.report.entry_bytes <= e.report.retain_everything_bytes);
        }
    }

    #[test]
    fn the_math_profile_is_an_input() {
        let (tape, entries) = small();
        assert_eq!(plan(&tape, &entries).unwrap().math, MathProfile::Precise);
        let fast = PlanOptions {
            math: MathProfile::Fast,
            ..PlanOptions::default()
        };
        let s = plan_with(&tape, &entries, fast).unwrap();
        assert_eq!(s.math, MathProfile::Fast);
    }

    #[test]
    fn fusion_never_costs_memory() {
        let (tape, entries) = small();
        let fused = plan(&tape, &entries).unwrap();
        let plain = PlanOptions {
            fusion: FusionPolicy::Off,
            ..PlanOptions::default()
        };
        let plain = plan_with(&tape, &entries, plain).unwrap();
        assert!(fused.arena_elems <= plain.arena_elems);
        assert!(plain
            .entries
            .iter()
            .all(|e| e.instrs.iter().all(|i| !i.fuse_next)));
    }

    #[test]
    fn names_that_do_not_fit_the_format_are_refused() {
        let (tape, mut entries) = small();
        entries[0].name = "a name longer than twenty-four bytes".into();
        let e = plan(&tape, &entries).unwrap_err();
        assert!(matches!(e, PlanningError::BadName(_)), "{e}");
    }
}
