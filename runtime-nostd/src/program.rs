//! Instructions decoded for execution: the one place the executor turns an instruction record
//! (and its tensors' records) into what a kernel needs.
//!
//! [`decode_instr`] reads the records through [`Plan::instr_record`] and
//! [`Plan::tensor_record`], which call `tapeplan_core::format`'s record decoders: the runtime
//! holds no byte offsets of its own. [`Session::run`](crate::Session::run) decodes each
//! instruction as it runs it; [`Session::decode`](crate::Session::decode) decodes an entry once
//! into a [`Program`] for [`Session::run_program`](crate::Session::run_program).

use tapeplan_core::format::TensorKind;
use tapeplan_core::ops::Attr;
use tapeplan_core::{OpClass, Opcode, MAX_ARITY, MAX_RANK};

use crate::catalog::Dims;
use crate::error::ExecError;
use crate::plan::{us, EntryId, Plan};

/// A tensor record decoded for execution: where it lives and its extents. Only for a plan that
/// passed validation (every field was checked there), so decoding here checks nothing but the
/// bounds of the bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Placed {
    pub offset: usize,
    pub end: usize,
    pub dims: Dims,
    /// A register of a fused chain (`offset` is its slot), not an arena range.
    pub register: bool,
    /// `i + 1` when this argument reads the caller's memory of bound input `i` (a [`Program`]
    /// decoded by [`crate::Session::decode_with_inputs`]); [`SPLAT`] when it reads no memory
    /// but the value [`Placed::splat`] (see [`stand_ins`]); 0 when it reads the arena.
    pub bound: u8,
    /// With `bound == SPLAT`: every element's value (a `fill`'s).
    pub splat: f32,
}

/// [`Placed::bound`] of an argument that reads the constant [`Placed::splat`] instead of memory.
pub(crate) const SPLAT: u8 = u8::MAX;

impl Placed {
    const EMPTY: Placed = Placed {
        offset: 0,
        end: 0,
        dims: Dims::EMPTY,
        register: false,
        bound: 0,
        splat: 0.0,
    };
}

/// Tensor `t` of a validated plan, placed (offset, rank, dims, kind); `None` past the tensor
/// section.
#[inline]
fn place_tensor(plan: &Plan<'_>, t: u32) -> Option<Placed> {
    let i = usize::try_from(t).ok()?;
    if i >= plan.layout.n_tensors {
        return None;
    }
    let rec = plan.tensor_record(i)?;
    let offset = us(rec.offset_elems);
    let rank = usize::from(rec.rank).min(MAX_RANK);
    let mut dims = [0usize; MAX_RANK];
    let mut elems = 1usize;
    for (d, &x) in dims.iter_mut().zip(&rec.dims).take(rank) {
        *d = us(x);
        elems = elems.saturating_mul(*d);
    }
    Some(Placed {
        offset,
        end: offset.checked_add(elems)?,
        dims: Dims { rank, dims, elems },
        register: rec.kind == TensorKind::Register as u8,
        bound: 0,
        splat: 0.0,
    })
}

/// Every opcode byte's arity and class, computed at compile time from the vocabulary's table:
/// `VALID | arity` plus `ELEMENTWISE` for elementwise opcodes, 0 for bytes that are no opcode.
/// One byte each (256 bytes of flash), one lookup per instruction instead of two calls.
#[cfg(feature = "catalog")]
#[allow(clippy::indexing_slicing)] // constant evaluation: an out-of-bounds index is a build error
const DECODE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        if let Some(op) = Opcode::from_u8(i as u8) {
            let elementwise = matches!(op.class(), OpClass::Elementwise);
            t[i] = VALID | op.arity() as u8 | if elementwise { ELEMENTWISE } else { 0 };
        }
        i += 1;
    }
    t
};
#[cfg(feature = "catalog")]
const VALID: u8 = 0x80;
#[cfg(feature = "catalog")]
const ELEMENTWISE: u8 = 0x40;
#[cfg(feature = "catalog")]
const ARITY: u8 = 0x0f;

/// One instruction of an entry decoded for execution: its opcode, attribute and where its
/// tensors live, read from the plan's records once by [`crate::Session::decode`] so that
/// [`crate::Session::run_program`] does not read them again on every step. About 300 bytes
/// each.
#[derive(Clone, Copy, Debug)]
pub struct Decoded {
    /// The instruction's global index in the plan.
    pub(crate) k: usize,
    pub(crate) fuse_next: bool,
    /// An argument reads a stand-in for an instruction [`stand_ins`] removed (a constant, or
    /// the broadcast's source): only the catalog's elementwise kernels can run it, not the
    /// reference kernel (which reads the records' arena ranges).
    pub(crate) stand_in: bool,
    /// Bit `i`: an argument reads bound input `i` (see [`mark_bound`]); for the first member of
    /// a fused chain, of any member of the chain. 0 in a program without bound inputs.
    pub(crate) reads_bound: u8,
    /// For the first member of a fused chain that [`crate::fused::run_one_tile`] runs (set by
    /// [`crate::fused::mark_one_tile`] when the entry is decoded): the chain's member count.
    /// 0 everywhere else. Only with the catalog and `fusion` (firmware without the catalog runs
    /// every chain alike).
    #[cfg(all(feature = "catalog", feature = "fusion"))]
    pub(crate) one_tile: u8,
    /// With [`Decoded::one_tile`]: the chain is small enough, and its ops in the catalog, for
    /// [`crate::fused`]'s lane chains (a chunk of lanes at a time through every member, the
    /// values in registers). Only with `simd`; `false` elsewhere.
    #[cfg(all(feature = "catalog", feature = "fusion"))]
    pub(crate) lane_chain: bool,
    pub(crate) op: Opcode,
    pub(crate) arity: usize,
    pub(crate) elementwise: bool,
    pub(crate) attr: Attr,
    pub(crate) out: Placed,
    pub(crate) args: [Option<Placed>; MAX_ARITY],
}

impl Decoded {
    /// A placeholder to fill a buffer with before [`crate::Session::decode`]:
    /// `[Decoded::EMPTY; N]`.
    pub const EMPTY: Decoded = Decoded {
        k: 0,
        fuse_next: false,
        stand_in: false,
        reads_bound: 0,
        #[cfg(all(feature = "catalog", feature = "fusion"))]
        one_tile: 0,
        #[cfg(all(feature = "catalog", feature = "fusion"))]
        lane_chain: false,
        op: Opcode::Input,
        arity: 0,
        elementwise: false,
        attr: Attr::None,
        out: Placed::EMPTY,
        args: [None; MAX_ARITY],
    };
}

/// An entry of a plan decoded once for repeated runs (see [`crate::Session::decode`]).
///
/// It borrows the [`Plan`] it was decoded from (and the caller's buffer of [`Decoded`]
/// instructions), so the plan's bytes cannot be rewritten while the program lives: a program
/// cannot outlive its plan. Reloading a plan buffer in place therefore ends every program
/// decoded from it, and this does not compile:
///
/// ```compile_fail,E0502
/// use tapeplan_runtime::{Decoded, Plan, Session};
///
/// fn stale(bytes: &mut [u8], new_plan: &[u8], arena: &mut [f32]) {
///     let plan = Plan::parse(bytes).unwrap();
///     let entry = plan.entry("train_step").unwrap();
///     let mut buf = [Decoded::EMPTY; 64];
///     let program = Session::bind(&plan, arena).unwrap().decode(entry, &mut buf).unwrap();
///     // The firmware's plan buffer reloaded with a re-planned model: refused, `bytes` is
///     // borrowed by `plan`, which `program` borrows.
///     bytes.copy_from_slice(new_plan);
///     let plan = Plan::parse(bytes).unwrap();
///     Session::bind(&plan, arena).unwrap().run_program(&program).unwrap();
/// }
/// ```
///
/// A program run in a session of another plan (both alive) is refused at run time:
/// [`crate::Session::run_program`] compares the plans' identities.
#[derive(Clone, Copy, Debug)]
pub struct Program<'a> {
    pub(crate) plan: &'a Plan<'a>,
    pub(crate) entry: EntryId,
    pub(crate) instrs: &'a [Decoded],
    /// The inputs read from the caller's memory, in the order
    /// [`crate::Session::decode_with_inputs`] named them (the first `n_bound`).
    pub(crate) bound: [BoundInput; MAX_BOUND_INPUTS],
    pub(crate) n_bound: usize,
    /// Whether the entry is guarded (`exec::guarded`), asked once when it is decoded.
    pub(crate) guarded: bool,
}

/// The most inputs one [`Program`] reads from the caller's memory
/// ([`crate::Session::decode_with_inputs`]); a training entry has two (samples and labels).
pub const MAX_BOUND_INPUTS: usize = 8;

/// An input a [`Program`] reads from the caller's memory instead of the arena: its arena range
/// (where [`crate::Session::set_input`] would have copied it).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct BoundInput {
    pub offset: usize,
    pub elems: usize,
    /// An output or update of the entry overlaps the input's range and no instruction writes
    /// over it: the input is copied into the arena after the run, so the output reads as it
    /// would have.
    pub copy_at_end: bool,
}

impl BoundInput {
    pub(crate) fn end(&self) -> usize {
        self.offset.saturating_add(self.elems)
    }

    fn meets(&self, offset: usize, end: usize) -> bool {
        offset < self.end() && self.offset < end
    }
}

/// Marks, in an entry's decoded instructions, every argument that reads one of the `bound`
/// inputs before any instruction writes over it (an input's range is its own until its last
/// read: liveness); such an argument then reads the caller's memory. An argument that lies in
/// an input's range after a write over it reads the arena, as before. Returns, for each input,
/// whether it is still untouched at the end (see [`BoundInput::copy_at_end`]).
pub(crate) fn mark_bound(instrs: &mut [Decoded], bound: &[BoundInput]) -> [bool; MAX_BOUND_INPUTS] {
    let mut intact = [false; MAX_BOUND_INPUTS];
    for (i, _) in intact.iter_mut().zip(bound) {
        *i = true;
    }
    // The first member of the chain being walked, if any.
    let mut head: Option<usize> = None;
    for k in 0..instrs.len() {
        let Some(d) = instrs.get_mut(k) else {
            break;
        };
        let mut reads = 0u8;
        for a in d.args.iter_mut().take(d.arity).flatten() {
            if a.register || a.dims.elems == 0 {
                continue;
            }
            let within = bound
                .iter()
                .zip(intact)
                .position(|(b, ok)| ok && a.offset >= b.offset && a.end <= b.end());
            a.bound = within.map_or(0, |i| u8::try_from(i.saturating_add(1)).unwrap_or(0));
            if let Some(i) = within {
                reads |= 1u8 << (i % 8);
            }
        }
        d.reads_bound = reads;
        if !d.out.register && d.out.dims.elems != 0 {
            for (ok, b) in intact.iter_mut().zip(bound) {
                if b.meets(d.out.offset, d.out.end) {
                    *ok = false;
                }
            }
        }
        let fuse_next = d.fuse_next;
        match head {
            Some(h) if h != k => {
                if let Some(first) = instrs.get_mut(h) {
                    first.reads_bound |= reads;
                }
            }
            _ => {}
        }
        head = match (head, fuse_next) {
            (None, true) => Some(k),
            (Some(h), true) => Some(h),
            (_, false) => None,
        };
    }
    intact
}

/// Removes from a decoded entry (catalog builds) each `fill`, and each `broadcast` that only
/// reshapes (as many elements out as in: a bias `[n]` to the `[1, n]` of a batch of one), whose
/// readers are all unfused elementwise instructions the catalog runs
/// ([`crate::catalog::runs_elementwise`]). Each reader takes a stand-in instead: the fill's value
/// as a constant ([`SPLAT`], read as `Src::Splat`), the broadcast's source range in place of its
/// copy; the removed instruction never runs. The same bits, NaNs as one class (the project's
/// equality rule: a constant read by a unary op takes the scalar form, whose NaN sign and payload
/// may differ from the lane form's; tests `stand_in_attack::nan_*`): an elementwise kernel computes
/// each element from its arguments' values alone, wherever it reads them (a `mul` by a constant
/// takes `mul`'s own path for one, see `lanes::mul`), and the source is checked unwritten from the
/// broadcast to its last reader. The removed write's range is checked to be the tensor's alone:
/// every entry writes all of it before reading any of it, and after the instruction it is read only
/// as the tensor, before any write over it (the validator's `Overlap` and `UseBeforeDefinition`
/// rules make that so for accepted plans; the check does not lean on them). Only for a scratch
/// tensor that no binding names (never an output, update, parameter or input), outside fused chains
/// (whose members read the arena), and a source that reads the arena (not a bound input). Readers
/// get [`Decoded::stand_in`]. Answers the entry's length after removal: the instructions kept, in
/// order, at the front of `instrs` (fused chains stay whole and in order, so
/// [`crate::fused::mark_one_tile`]'s counts hold).
///
/// W3's training step: 3 fills (two learning rates, the `1` of `1 - t²`) and 3 bias
/// broadcasts of its 40 instructions (8 of 40 planned with `--fusion speed`).
#[cfg(feature = "catalog")]
pub(crate) fn stand_ins<O: tapeplan_core::Ops>(plan: &Plan<'_>, instrs: &mut [Decoded]) -> usize {
    let mut kept = 0usize;
    let mut prev_fuses = false;
    for i in 0..instrs.len() {
        let Some(&d) = instrs.get(i) else {
            break;
        };
        let in_chain = prev_fuses || d.fuse_next;
        prev_fuses = d.fuse_next;
        if !in_chain && stand_in_for::<O>(plan, instrs, i) {
            continue;
        }
        if let Some(slot) = instrs.get_mut(kept) {
            *slot = d;
        }
        kept = kept.saturating_add(1);
    }
    kept
}

/// Whether instruction `i` (unfused) of a decoded entry can be removed for stand-ins (see
/// [`stand_ins`]); if so its readers, later in `instrs`, have them already.
#[cfg(feature = "catalog")]
fn stand_in_for<O: tapeplan_core::Ops>(plan: &Plan<'_>, instrs: &mut [Decoded], i: usize) -> bool {
    let Some(d) = instrs.get(i).copied() else {
        return false;
    };
    if d.out.register || d.out.dims.elems == 0 || d.reads_bound != 0 {
        return false;
    }
    // The fill's value, or the broadcast's source.
    let (splat, source) = match (d.op, d.args[0]) {
        (Opcode::Fill, _) => (Some(d.attr.scalar()), None),
        (Opcode::Broadcast, Some(a))
            if !a.register && a.bound == 0 && a.dims.elems == d.out.dims.elems =>
        {
            (None, Some(a))
        }
        _ => return false,
    };
    let Some(t) = plan.instr_record(d.k).map(|r| r.out) else {
        return false;
    };
    let scratch = plan
        .tensor_record(us(t))
        .is_some_and(|r| r.kind == TensorKind::Scratch as u8);
    let named =
        (0..plan.n_bindings()).any(|b| plan.binding_record(b).is_none_or(|r| r.tensor == t));
    if !scratch || named {
        return false;
    }
    let (lo, hi) = (d.out.offset, d.out.end);
    // The range is the tensor's alone: every entry (this one up to `i` included) writes all of
    // it before reading any of it, so no run reads what the left-out write would have put there
    // except through `t` itself.
    if !plan
        .entries()
        .all(|e| written_before_read(plan, e, (lo, hi)))
    {
        return false;
    }
    // After `i`: `t` is read only by readers that are unfused, elementwise and run by the
    // catalog, before anything writes over any of its range; the part of the range nothing has
    // written since (`stale`: what the left-out write would have held) is read as nothing else.
    // The last reader's position.
    let (mut last, mut stale, mut touched) = (None, Stale::whole((lo, hi)), false);
    for j in i.saturating_add(1)..instrs.len() {
        let (Some(r), Some(before)) = (instrs.get(j), instrs.get(j.saturating_sub(1))) else {
            return false;
        };
        let Some(rec) = plan.instr_record(r.k) else {
            return false;
        };
        let mut reads_t = false;
        for &a in rec.args.iter().take(r.arity) {
            if a == t {
                reads_t = true;
            } else if arena_range(plan, a).is_none_or(|x| stale.meets(x)) {
                return false;
            }
        }
        if reads_t {
            if touched
                || r.fuse_next
                || before.fuse_next
                || !r.elementwise
                || !crate::catalog::runs_elementwise::<O>(r.op, plan.math())
            {
                return false;
            }
            last = Some(j);
        }
        match arena_range(plan, rec.out) {
            None => return false,
            Some(o) => {
                touched |= meets(o, (lo, hi));
                if let Some(o) = o {
                    stale.write(o);
                }
            }
        }
    }
    let Some(last) = last else {
        return false;
    };
    // The source unwritten until the last reader has read it.
    if let Some(s) = source {
        let written = instrs
            .get(i.saturating_add(1)..=last)
            .unwrap_or_default()
            .iter()
            .any(|w| !w.out.register && w.out.offset < s.end && s.offset < w.out.end);
        if written {
            return false;
        }
    }
    for j in i.saturating_add(1)..=last {
        let (Some(rec), Some(r)) = (
            instrs.get(j).and_then(|r| plan.instr_record(r.k)),
            instrs.get_mut(j),
        ) else {
            return false;
        };
        let arity = r.arity;
        for (slot, &a) in r.args.iter_mut().zip(&rec.args).take(arity) {
            let Some(p) = slot.as_mut() else {
                continue;
            };
            if a != t {
                continue;
            }
            *p = match (splat, source) {
                (Some(c), _) => Placed {
                    bound: SPLAT,
                    splat: c,
                    ..*p
                },
                (None, Some(s)) => Placed { dims: p.dims, ..s },
                (None, None) => return false,
            };
            r.stand_in = true;
        }
    }
    true
}

/// Tensor `t`'s arena range `(offset, end)`; `Some(None)` for a register or an empty tensor
/// (no arena memory); `None` past the tensor records.
#[cfg(feature = "catalog")]
fn arena_range(plan: &Plan<'_>, t: u32) -> Option<Option<(usize, usize)>> {
    let p = place_tensor(plan, t)?;
    Some((!p.register && p.dims.elems != 0).then_some((p.offset, p.end)))
}

/// Whether an arena range (`None`: none) meets `[lo, hi)` (never when that is empty).
#[cfg(feature = "catalog")]
fn meets(x: Option<(usize, usize)>, (lo, hi): (usize, usize)) -> bool {
    lo < hi && x.is_some_and(|(a, b)| a < hi && lo < b)
}

/// The parts of an arena range not written since some point of a run: at most [`Stale::PARTS`]
/// disjoint ranges. A write that would split a part into more than that leaves the part whole
/// (an over-estimate, which only refuses more).
#[cfg(feature = "catalog")]
#[derive(Clone, Copy)]
struct Stale {
    parts: [(usize, usize); Stale::PARTS],
    n: usize,
}

#[cfg(feature = "catalog")]
impl Stale {
    const PARTS: usize = 8;

    fn whole(range: (usize, usize)) -> Stale {
        let mut parts = [(0, 0); Stale::PARTS];
        if let Some(first) = parts.first_mut() {
            *first = range;
        }
        Stale { parts, n: 1 }
    }

    fn is_empty(&self) -> bool {
        self.parts.iter().take(self.n).all(|&(lo, hi)| lo >= hi)
    }

    /// Whether an arena range (`None`: none) meets a part.
    fn meets(&self, x: Option<(usize, usize)>) -> bool {
        self.parts.iter().take(self.n).any(|&p| meets(x, p))
    }

    /// The parts less a write over `o`.
    fn write(&mut self, o: (usize, usize)) {
        let mut out = *self;
        out.n = 0;
        for &(lo, hi) in self.parts.iter().take(self.n) {
            let left = (lo, hi.min(o.0));
            let right = (lo.max(o.1), hi);
            let pieces = if meets(Some(o), (lo, hi)) {
                [left, right]
            } else {
                [(lo, hi), (0, 0)]
            };
            let kept = pieces.iter().filter(|p| p.0 < p.1).count();
            if out.n.saturating_add(kept) > Stale::PARTS {
                return; // too many pieces: keep every part as it was
            }
            for p in pieces.iter().filter(|p| p.0 < p.1) {
                if let Some(slot) = out.parts.get_mut(out.n) {
                    *slot = *p;
                    out.n = out.n.saturating_add(1);
                }
            }
        }
        *self = out;
    }
}

/// Whether entry `e`, run from its start, never reads a part of `[lo, hi)` that it has not
/// written earlier in the run (see [`Stale`]).
/// Arguments that are `e`'s inputs are the caller's to write before the run, and count as
/// written.
#[cfg(feature = "catalog")]
fn written_before_read(plan: &Plan<'_>, e: EntryId, range: (usize, usize)) -> bool {
    let Some(instrs) = plan.entry_range(e) else {
        return false;
    };
    let input = |a: u32| {
        (0..plan.n_bindings()).any(|b| {
            plan.binding_record(b).is_some_and(|r| {
                r.tensor == a
                    && r.entry == e.0
                    && tapeplan_core::format::BindingKind::from_u8(r.kind)
                        == Some(tapeplan_core::format::BindingKind::Input)
            })
        })
    };
    let mut stale = Stale::whole(range);
    for k in instrs {
        if stale.is_empty() {
            return true;
        }
        let Some(rec) = plan.instr_record(k) else {
            return false;
        };
        let arity = usize::from(rec.n_args).min(MAX_ARITY);
        for &a in rec.args.iter().take(arity) {
            if arena_range(plan, a).is_none_or(|x| stale.meets(x)) && !input(a) {
                return false;
            }
        }
        match arena_range(plan, rec.out) {
            None => return false,
            Some(o) => {
                if let Some(o) = o {
                    stale.write(o);
                }
            }
        }
    }
    true
}

impl<'a> Program<'a> {
    /// The entry it runs.
    pub fn entry(&self) -> EntryId {
        self.entry
    }

    /// The plan it was decoded from.
    pub fn plan(&self) -> &'a Plan<'a> {
        self.plan
    }

    /// Its number of instructions: the entry's, less those whose readers took stand-ins (with
    /// feature `catalog`: `fill`s, and `broadcast`s that only reshape, read only by
    /// elementwise instructions; see [`crate::Session::decode`]).
    pub fn len(&self) -> usize {
        self.instrs.len()
    }

    /// True for an entry without instructions.
    pub fn is_empty(&self) -> bool {
        self.instrs.is_empty()
    }

    /// How many inputs it reads from the caller's memory
    /// ([`crate::Session::decode_with_inputs`]); 0 for [`crate::Session::decode`]'s.
    pub fn bound_inputs(&self) -> usize {
        self.n_bound
    }
}

#[cfg(feature = "decoded-run")]
/// Every entry of a plan decoded once, for [`crate::Session::run`] (see
/// [`crate::Session::decode_all`] and [`crate::Session::with_decoded`]): a session with it
/// attached runs each entry from its decoded instructions, as [`crate::Session::run_program`]
/// runs one entry's [`Program`], instead of reading the plan's records on every run. Same bits
/// either way.
///
/// It borrows only the caller's buffer of [`Decoded`] instructions and keeps its plan's
/// identity (`plan_id`, CRC-32, length in bytes): a session of another plan refuses it
/// ([`crate::Session::with_decoded`]). With feature `alloc`, `DecodedPlanBuf` owns its
/// buffer, for a host that keeps the decoding beside its plan.
#[derive(Clone, Copy, Debug)]
pub struct DecodedPlan<'d> {
    pub(crate) identity: PlanIdentity,
    pub(crate) instrs: &'d [Decoded],
}

#[cfg(feature = "decoded-run")]
/// What tells plans apart: `plan_id`, CRC-32, length in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PlanIdentity {
    plan_id: u32,
    crc32: u32,
    len_bytes: usize,
}

#[cfg(feature = "decoded-run")]
impl PlanIdentity {
    pub(crate) fn of(plan: &Plan<'_>) -> PlanIdentity {
        PlanIdentity {
            plan_id: plan.plan_id(),
            crc32: plan.crc32(),
            len_bytes: plan.bytes().len(),
        }
    }
}

#[cfg(feature = "decoded-run")]
impl<'d> DecodedPlan<'d> {
    /// Its number of instructions: the plan's.
    pub fn len(&self) -> usize {
        self.instrs.len()
    }

    /// True for a plan without instructions.
    pub fn is_empty(&self) -> bool {
        self.instrs.is_empty()
    }
}

/// A [`DecodedPlan`] that owns its instructions (feature `alloc`): decode once when a model is
/// loaded, keep it beside the plan, attach [`DecodedPlanBuf::as_decoded`] to each session.
#[cfg(all(feature = "alloc", feature = "decoded-run"))]
#[derive(Clone, Debug)]
pub struct DecodedPlanBuf {
    identity: PlanIdentity,
    instrs: alloc::vec::Vec<Decoded>,
}

#[cfg(all(feature = "alloc", feature = "decoded-run"))]
impl DecodedPlanBuf {
    /// Every instruction of `plan`, decoded.
    ///
    /// # Errors
    /// [`ExecError::Inconsistent`] only if the plan's records contradict themselves, which
    /// validation rules out.
    pub fn new(plan: &Plan<'_>) -> Result<DecodedPlanBuf, ExecError> {
        let instrs = (0..plan.n_instrs())
            .map(|k| decode_instr(plan, k))
            .collect::<Result<_, _>>()?;
        Ok(DecodedPlanBuf {
            identity: PlanIdentity::of(plan),
            instrs,
        })
    }

    /// The decoding, borrowed.
    pub fn as_decoded(&self) -> DecodedPlan<'_> {
        DecodedPlan {
            identity: self.identity,
            instrs: &self.instrs,
        }
    }
}

/// Decodes instruction `k`'s record and its tensors' records (see [`Decoded`]): the one
/// decoder of instructions for execution.
#[inline(always)]
pub(crate) fn decode_instr(plan: &Plan<'_>, k: usize) -> Result<Decoded, ExecError> {
    let bad = ExecError::Inconsistent {
        instr: u32::try_from(k).unwrap_or(u32::MAX),
    };
    // The format's one decoder, the typed attribute included (`Plan::instr`).
    let rec = plan.instr(k).ok_or(bad)?.map_err(|_| bad)?;
    let op = rec.op;
    // With the catalog (hosts), a table lookup; without (flash-bound firmware), two calls and
    // 256 bytes less.
    #[cfg(feature = "catalog")]
    let (arity, elementwise) = {
        let flags = DECODE.get(usize::from(op.to_u8())).copied().unwrap_or(0);
        (usize::from(flags & ARITY), flags & ELEMENTWISE != 0)
    };
    #[cfg(not(feature = "catalog"))]
    let (arity, elementwise) = (op.arity(), op.class() == OpClass::Elementwise);
    let out = place_tensor(plan, rec.out).ok_or(bad)?;
    let mut d = Decoded {
        k,
        fuse_next: rec.fuse_next(),
        stand_in: false,
        reads_bound: 0,
        #[cfg(all(feature = "catalog", feature = "fusion"))]
        one_tile: 0,
        #[cfg(all(feature = "catalog", feature = "fusion"))]
        lane_chain: false,
        op,
        arity,
        elementwise,
        attr: rec.attr,
        out,
        args: [None; MAX_ARITY],
    };
    if out.dims.elems == 0 {
        return Ok(d);
    }
    for (slot, &a) in d.args.iter_mut().zip(&rec.args).take(arity) {
        *slot = Some(place_tensor(plan, a).ok_or(bad)?);
    }
    Ok(d)
}
