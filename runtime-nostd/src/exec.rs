//! The executor: the one run loop, shared by [`Session::run`](crate::Session::run) (which
//! decodes each instruction from the plan's records as it goes) and
//! [`Session::run_program`](crate::Session::run_program) (which runs instructions decoded once),
//! the single-instruction step (catalog kernel or reference kernel) and the guarded commit.
//! Fused chains run in [`crate::fused`].

use tapeplan_core::format::{decode_attr_in, BindingKind, TensorKind, FUSE_NEXT};
use tapeplan_core::ops::elementwise::{binary_in_place, unary_in_place, InPlace};
use tapeplan_core::ops::{binary_fn_in, eval_in, eval_in_arith, unary_fn_in, Attr};
use tapeplan_core::{MathProfile, OpClass, OpSet, Opcode, Ops, Shape, MAX_ARITY};

use crate::catalog::{self, Dims, Src};
use crate::error::ExecError;
use crate::fused::{self, Member, Registers};
use crate::plan::{us, EntryId, Plan, TensorView};
use crate::program::{decode_instr, BoundInput, Decoded, Placed, SPLAT};
use core::cell::Cell;

/// Where the run loop takes an entry's instructions from: the plan's records ([`Records`],
/// decoded as they run) or a decoded [`crate::Program`] (a slice of [`Decoded`]). The loop is
/// generic over it, so each source gets its own monomorphic copy with nothing in between.
pub(crate) trait Source {
    /// A handle on one instruction: its global index, or its decoded form.
    type Instr<'s>: Copy
    where
        Self: 's;
    /// The entry's `i`-th instruction; `None` past its end.
    fn get(&self, i: usize) -> Option<Self::Instr<'_>>;
    /// Whether the instruction carries `FUSE_NEXT` (a fused chain continues after it).
    fn fuse_next(&self, instr: Self::Instr<'_>) -> bool;
    /// Runs the instruction on its own, dispatching over the op set `O`.
    fn step<O: Ops>(
        &self,
        plan: &Plan<'_>,
        arena: &mut [f32],
        instr: Self::Instr<'_>,
    ) -> Result<(), ExecError>;
    /// The instruction as a member of a fused chain.
    fn member(&self, instr: Self::Instr<'_>) -> Result<Member, ExecError>;
    /// The instruction's global index in the plan (for errors).
    fn index(&self, instr: Self::Instr<'_>) -> usize;
    /// Before a fused chain starting at `i` runs (its members read the arena only): puts into
    /// the arena every bound input the chain reads. Nothing for sources without bound inputs.
    #[inline(always)]
    fn before_chain(&self, _arena: &mut [f32], _i: usize) -> Result<(), ExecError> {
        Ok(())
    }
    /// After the last instruction, before the commit (see [`BoundInput::copy_at_end`]).
    #[inline(always)]
    fn finish(&self, _arena: &mut [f32]) -> Result<(), ExecError> {
        Ok(())
    }
    /// The decoded members of the chain that starts at `i` when [`fused::run_one_tile`] runs it
    /// ([`fused::mark_one_tile`] marked it when a [`crate::Program`] was decoded); `None` for
    /// the plan's records and any other chain.
    #[cfg(all(feature = "catalog", feature = "fusion"))]
    #[inline(always)]
    fn one_tile(&self, _i: usize) -> Option<&[Decoded]> {
        None
    }
}

/// Where an instruction's arguments that read bound inputs find their values: nowhere
/// ([`NoInputs`], every argument in the arena) or the caller's memory ([`BoundInputs`]).
pub(crate) trait Inputs {
    /// The caller's values of argument `a` when it reads a bound input.
    fn external(&self, a: &Placed) -> Option<&[f32]>;
    /// Copies into the arena every bound input `d` reads that is not there yet in this run,
    /// for the kernels that read the arena only (reference kernels, fused chains).
    fn materialize(&self, arena: &mut [f32], d: &Decoded) -> Result<(), ExecError>;
}

/// Every argument in the arena.
pub(crate) struct NoInputs;

impl Inputs for NoInputs {
    #[inline(always)]
    fn external(&self, _a: &Placed) -> Option<&[f32]> {
        None
    }

    #[inline(always)]
    fn materialize(&self, _arena: &mut [f32], _d: &Decoded) -> Result<(), ExecError> {
        Ok(())
    }
}

/// A [`crate::Program`]'s bound inputs with the caller's values for one run.
pub(crate) struct BoundInputs<'x> {
    pub slots: &'x [BoundInput],
    pub values: &'x [&'x [f32]],
    /// Bit `i`: input `i` has been copied into the arena in this run.
    pub copied: Cell<u32>,
}

impl BoundInputs<'_> {
    /// Copies the inputs of `mask` (bit `i`: input `i`) into their arena ranges.
    #[inline(always)]
    fn copy_mask(&self, arena: &mut [f32], mask: u8) -> Result<(), ExecError> {
        if mask == 0 {
            return Ok(());
        }
        for i in 0..self.slots.len() {
            if mask & (1u8 << (i % 8)) != 0 {
                self.copy_in(arena, i)?;
            }
        }
        Ok(())
    }

    /// Copies input `i` into its arena range (once a run).
    fn copy_in(&self, arena: &mut [f32], i: usize) -> Result<(), ExecError> {
        let bit = 1u32 << (i % 32);
        if self.copied.get() & bit != 0 {
            return Ok(());
        }
        let (slot, values) = (self.slots.get(i), self.values.get(i));
        let (Some(slot), Some(values)) = (slot, values) else {
            return Err(ExecError::Inconsistent { instr: u32::MAX });
        };
        let dst = arena
            .get_mut(slot.offset..slot.end())
            .ok_or(ExecError::Inconsistent { instr: u32::MAX })?;
        if dst.len() != values.len() {
            return Err(ExecError::Inconsistent { instr: u32::MAX });
        }
        dst.copy_from_slice(values);
        self.copied.set(self.copied.get() | bit);
        Ok(())
    }
}

impl Inputs for BoundInputs<'_> {
    #[inline(always)]
    fn external(&self, a: &Placed) -> Option<&[f32]> {
        let i = usize::from(a.bound).checked_sub(1)?;
        let slot = self.slots.get(i)?;
        let start = a.offset.checked_sub(slot.offset)?;
        let end = a.end.checked_sub(slot.offset)?;
        self.values.get(i)?.get(start..end)
    }

    #[inline(always)]
    fn materialize(&self, arena: &mut [f32], d: &Decoded) -> Result<(), ExecError> {
        self.copy_mask(arena, d.reads_bound)
    }
}

/// [`execute`] of an instruction that reads bound inputs, out of line: the run loop then
/// inlines one copy of `execute`, as [`crate::Session::run_program`]'s does (two inlined copies
/// made W3's steps about a tenth slower for the same instructions).
#[inline(never)]
fn execute_bound<O: Ops>(
    plan: &Plan<'_>,
    arena: &mut [f32],
    d: &Decoded,
    inputs: &BoundInputs<'_>,
) -> Result<(), ExecError> {
    execute::<O, _>(plan, arena, d, inputs)
}

/// A decoded entry run with its bound inputs' values in the caller's memory
/// ([`crate::Session::run_program_with_inputs`]).
pub(crate) struct Bound<'x> {
    pub instrs: &'x [Decoded],
    pub inputs: BoundInputs<'x>,
    /// Some input is [`BoundInput::copy_at_end`].
    pub copy_at_end: bool,
}

impl Source for Bound<'_> {
    type Instr<'s>
        = &'s Decoded
    where
        Self: 's;

    #[inline(always)]
    fn get(&self, i: usize) -> Option<&Decoded> {
        self.instrs.get(i)
    }

    #[inline(always)]
    fn fuse_next(&self, d: &Decoded) -> bool {
        self.instrs.fuse_next(d)
    }

    #[inline(always)]
    fn step<O: Ops>(
        &self,
        plan: &Plan<'_>,
        arena: &mut [f32],
        d: &Decoded,
    ) -> Result<(), ExecError> {
        // Most instructions read no bound input: they take the path without the per-argument
        // test (callgrind, W3: the test in every argument's lookup cost about 5 % of a step).
        if d.reads_bound == 0 {
            execute::<O, _>(plan, arena, d, &NoInputs)
        } else {
            execute_bound::<O>(plan, arena, d, &self.inputs)
        }
    }

    fn member(&self, d: &Decoded) -> Result<Member, ExecError> {
        self.instrs.member(d)
    }

    fn index(&self, d: &Decoded) -> usize {
        self.instrs.index(d)
    }

    #[cfg(all(feature = "catalog", feature = "fusion"))]
    #[inline(always)]
    fn one_tile(&self, i: usize) -> Option<&[Decoded]> {
        self.instrs.one_tile(i)
    }

    #[inline(always)]
    fn before_chain(&self, arena: &mut [f32], i: usize) -> Result<(), ExecError> {
        // The chain's first member carries what every member reads (`mark_bound`).
        let mask = self.instrs.get(i).map_or(0, |d| d.reads_bound);
        self.inputs.copy_mask(arena, mask)
    }

    #[inline(always)]
    fn finish(&self, arena: &mut [f32]) -> Result<(), ExecError> {
        if !self.copy_at_end {
            return Ok(());
        }
        for (i, slot) in self.inputs.slots.iter().enumerate() {
            if slot.copy_at_end {
                self.inputs.copy_in(arena, i)?;
            }
        }
        Ok(())
    }
}

/// An entry's instructions read from the plan's records, each decoded as it runs.
pub(crate) struct Records<'p> {
    pub plan: &'p Plan<'p>,
    pub range: core::ops::Range<usize>,
}

impl Source for Records<'_> {
    type Instr<'s>
        = usize
    where
        Self: 's;

    #[inline(always)]
    fn get(&self, i: usize) -> Option<usize> {
        let k = self.range.start.checked_add(i)?;
        (k < self.range.end).then_some(k)
    }

    #[inline(always)]
    fn fuse_next(&self, k: usize) -> bool {
        self.plan
            .instr_record(k)
            .is_some_and(|r| r.flags & FUSE_NEXT != 0)
    }

    #[inline(always)]
    fn step<O: Ops>(&self, plan: &Plan<'_>, arena: &mut [f32], k: usize) -> Result<(), ExecError> {
        step::<O>(plan, arena, k)
    }

    fn member(&self, k: usize) -> Result<Member, ExecError> {
        Ok(Member::of(&decode_instr(self.plan, k)?))
    }

    fn index(&self, k: usize) -> usize {
        k
    }
}

impl Source for [Decoded] {
    type Instr<'s> = &'s Decoded;

    #[inline(always)]
    fn get(&self, i: usize) -> Option<&Decoded> {
        <[Decoded]>::get(self, i)
    }

    #[inline(always)]
    fn fuse_next(&self, d: &Decoded) -> bool {
        d.fuse_next
    }

    #[inline(always)]
    fn step<O: Ops>(
        &self,
        plan: &Plan<'_>,
        arena: &mut [f32],
        d: &Decoded,
    ) -> Result<(), ExecError> {
        execute::<O, _>(plan, arena, d, &NoInputs)
    }

    fn member(&self, d: &Decoded) -> Result<Member, ExecError> {
        Ok(Member::of(d))
    }

    fn index(&self, d: &Decoded) -> usize {
        d.k
    }

    #[cfg(all(feature = "catalog", feature = "fusion"))]
    #[inline(always)]
    fn one_tile(&self, i: usize) -> Option<&[Decoded]> {
        let n = usize::from(<[Decoded]>::get(self, i)?.one_tile);
        if n == 0 {
            return None;
        }
        self.get(i..i.checked_add(n)?)
    }
}

/// The run loop: runs an entry's instructions (from `src`) in order over `arena`, each chain of
/// fused instructions as one (out of line, in [`fused::run_chain_at`], so that the chain code
/// does not crowd the per-instruction path: W3-unfused simd, about 0.98 -> 0.93 us per step),
/// then commits a guarded entry (`known_guarded`, or [`guarded`] asked after the loop when it
/// is `None`).
///
/// # Errors
/// [`ExecError::ArenaTooSmall`] when `arena` is shorter than the plan's; what an instruction or
/// the commit answers.
#[inline(always)]
pub(crate) fn run_entry<O: Ops, S: Source + ?Sized>(
    plan: &Plan<'_>,
    arena: &mut [f32],
    regs: &mut Registers,
    src: &S,
    entry: EntryId,
    known_guarded: Option<bool>,
) -> Result<(), ExecError> {
    let arena = arena
        .get_mut(..plan.arena_elems())
        .ok_or(ExecError::ArenaTooSmall {
            needed_elems: plan.arena_elems(),
            found_elems: 0,
        })?;
    let mut i = 0usize;
    while let Some(instr) = src.get(i) {
        if cfg!(feature = "fusion") && src.fuse_next(instr) {
            src.before_chain(arena, i)?;
            // A chain of one tile from a decoded program: straight from its members, without
            // the general chain runner's setup (example chain_cost, 16 elements, fused ÷
            // unfused: 2 members 1.69 -> 1.23, 4 members 1.50 -> 1.03, 8 members 1.38 -> 0.93).
            #[cfg(all(feature = "catalog", feature = "fusion"))]
            if let Some(members) = src.one_tile(i) {
                fused::run_one_tile::<O>(arena, regs, plan.math(), members)?;
                i = i.saturating_add(members.len());
                continue;
            }
            i = fused::run_chain_at::<O, S>(plan, arena, regs, src, i)?;
        } else {
            src.step::<O>(plan, arena, instr)?;
            i = i.saturating_add(1);
        }
    }
    src.finish(arena)?;
    // Asked here, after the loop, when the caller does not know (`Session::run`: a firmware's
    // code stays as it was).
    if known_guarded.unwrap_or_else(|| guarded(plan, entry)) {
        commit(plan, arena, entry)
    } else {
        Ok(())
    }
}

/// Whether `entry` is guarded (its updates live in scratch, committed by [`commit`] only when
/// every output and update is finite); an entry with in-place updates (or none) has nothing to
/// commit. The validator's test: an update in the scratch region is guarded (and then all
/// are). Read from the raw records (no names, no shapes). A decoded [`crate::Program`] asks
/// once, when it is decoded, and hands [`run_entry`] the answer: on W3's 1.4 µs steps the scan
/// of every binding after each run took 5 % of the step. `Session::run` lets [`run_entry`] ask
/// after each run.
pub(crate) fn guarded(plan: &Plan<'_>, entry: EntryId) -> bool {
    (0..plan.n_bindings()).any(|b| {
        plan.binding_record(b).is_some_and(|r| {
            BindingKind::from_u8(r.kind) == Some(BindingKind::Update)
                && r.entry == entry.0
                && plan
                    .tensor_record(us(r.tensor))
                    .is_some_and(|t| TensorKind::from_u8(t.kind) == Some(TensorKind::Scratch))
        })
    })
}

/// The end of a guarded entry: when every output and update is finite, copy each update over
/// its parameter; otherwise write nothing and say which value was not finite.
fn commit(plan: &Plan<'_>, arena: &mut [f32], entry: EntryId) -> Result<(), ExecError> {
    let bad = ExecError::Inconsistent { instr: u32::MAX };
    for b in 0..plan.n_bindings() {
        let Some(binding) = plan.binding(b) else {
            continue;
        };
        if binding.entry != Some(entry)
            || !matches!(binding.kind, BindingKind::Output | BindingKind::Update)
        {
            continue;
        }
        let values = arena.get(binding.range()).ok_or(bad)?;
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return Err(ExecError::NonFinite {
                entry: u32::try_from(entry.index()).unwrap_or(u32::MAX),
                binding: u32::try_from(b).unwrap_or(u32::MAX),
                element: u32::try_from(i).unwrap_or(u32::MAX),
            });
        }
    }
    for u in plan.updates(entry) {
        let p = plan.parameter(u.name).ok_or(bad)?;
        // A guarded update is scratch, its parameter persistent, and validation keeps the
        // persistent region before the scratch one: two disjoint slices, copied without
        // `copy_within` (whose `memmove` costs a firmware about 1.6 KiB of flash).
        let (params, rest) = arena.split_at_mut_checked(u.offset_elems).ok_or(bad)?;
        let dst = params.get_mut(p.range()).ok_or(bad)?;
        let src = rest.get(..u.elems).ok_or(bad)?;
        if dst.len() != src.len() {
            return Err(bad);
        }
        for (d, s) in dst.iter_mut().zip(src) {
            *d = *s;
        }
    }
    Ok(())
}

/// An argument's slice from the parts of the arena left and right of the output
/// `[out_start, out_end)`; `None` when it straddles the output.
fn pick<'s>(
    left: &'s [f32],
    right: &'s [f32],
    out_end: usize,
    v: &TensorView,
) -> Option<&'s [f32]> {
    pick_range(left, right, out_end, v.offset, v.end)
}

/// The arena range `[offset, end)` from the parts left and right of an output buffer that ends
/// at `out_end` (`None` when it meets the output).
pub(crate) fn pick_range<'s>(
    left: &'s [f32],
    right: &'s [f32],
    out_end: usize,
    offset: usize,
    end: usize,
) -> Option<&'s [f32]> {
    if end <= offset {
        return Some(&[]);
    }
    if end <= left.len() {
        left.get(offset..end)
    } else if offset >= out_end {
        right.get(offset.checked_sub(out_end)?..end.checked_sub(out_end)?)
    } else {
        None
    }
}

/// Runs instruction `k` over `arena`: with the catalog's kernel when it has one for the
/// instruction (the same bits as the reference kernel), else through [`step_reference`].
///
/// Without the `catalog` feature (flash-bound firmware) every instruction takes
/// [`step_reference`]'s path: the least code, the same bits. Inlined into the run loop, its one
/// caller, as it was before the loop became generic.
#[inline(always)]
fn step<O: Ops>(plan: &Plan<'_>, arena: &mut [f32], k: usize) -> Result<(), ExecError> {
    if cfg!(feature = "catalog") {
        execute::<O, _>(plan, arena, &decode_instr(plan, k)?, &NoInputs)
    } else {
        step_reference::<O>(plan, arena, k)
    }
}

/// Runs a decoded instruction over `arena` (see [`step`]), arguments that read bound inputs
/// from `inputs`.
#[inline(always)]
fn execute<O: Ops, I: Inputs>(
    plan: &Plan<'_>,
    arena: &mut [f32],
    d: &Decoded,
    inputs: &I,
) -> Result<(), ExecError> {
    let (k, op, arity, elementwise, attr, out, args) =
        (d.k, d.op, d.arity, d.elementwise, d.attr, &d.out, &d.args);
    let bad = ExecError::Inconsistent {
        instr: u32::try_from(k).unwrap_or(u32::MAX),
    };
    if out.dims.elems == 0 {
        // Nothing to write; skipping also spares loops over empty extents.
        return Ok(());
    }
    let (left, rest) = arena.split_at_mut_checked(out.offset).ok_or(bad)?;
    let (buf, right) = rest.split_at_mut_checked(out.dims.elems).ok_or(bad)?;
    // An argument: the output buffer itself (in place), or a disjoint range left or right of
    // it; `None` when it straddles the output (validation rules that out).
    // With the catalog a macro, not a closure: the closure was called out of line, and its
    // `Option<Src>` came back through the stack on every argument. Without it (the small wasm
    // module, firmware) the closure, which is smaller: one copy of `arg_src`.
    #[cfg(feature = "catalog")]
    macro_rules! src {
        ($a:expr) => {
            arg_src($a, out, left, right, inputs)
        };
    }
    #[cfg(not(feature = "catalog"))]
    let arg = |a: &Option<Placed>| arg_src(a, out, left, right, inputs);
    #[cfg(not(feature = "catalog"))]
    macro_rules! src {
        ($a:expr) => {
            arg($a)
        };
    }
    if elementwise {
        let a = src!(&args[0]).ok_or(bad)?;
        let b = if arity == 2 {
            src!(&args[1]).ok_or(bad)?
        } else {
            Src::Out
        };
        let lengths_ok = [a, b].iter().take(arity).all(|s| match s {
            Src::Out | Src::Splat(_) => true,
            Src::Buf(x) => x.len() == buf.len(),
        });
        // Without the `catalog` feature (firmware short of flash) everything runs the
        // reference kernels: the same bits, less code.
        if cfg!(feature = "catalog")
            && lengths_ok
            && catalog::elementwise::<O>(op, attr.scalar(), plan.math(), a, b, buf)
        {
            return Ok(());
        }
    } else {
        let mut slices: [&[f32]; MAX_ARITY] = [&[]; MAX_ARITY];
        // References, not copies: each argument's `Dims` (48 bytes) copied into a zeroed stack
        // array was up to 288 bytes of stores per structural instruction (W3's step 0.978).
        let mut dims: [&Dims; MAX_ARITY] = [&Dims::EMPTY; MAX_ARITY];
        let mut disjoint = true;
        for ((slot, d), a) in slices.iter_mut().zip(&mut dims).zip(args).take(arity) {
            match src!(a) {
                Some(Src::Buf(x)) => *slot = x,
                _ => disjoint = false,
            }
            if let Some(a) = a {
                *d = &a.dims;
            }
        }
        // `sgd_matmul` over its weight's own range (argument 0 is the output): the catalog's
        // vector kernel from the decoded operands, without the reference path's reading the
        // records again (on W3's small steps that re-reading cost more than the update).
        if cfg!(feature = "simd")
            && const {
                OpSet::BUILD
                    .intersection(O::SET)
                    .contains(Opcode::SgdMatMul)
            }
            && op == Opcode::SgdMatMul
            && matches!(src!(&args[0]), Some(Src::Out))
        {
            if let (Some(pa), Some(pb), Some(Src::Buf(a)), Some(Src::Buf(b))) =
                (&args[1], &args[2], src!(&args[1]), src!(&args[2]))
            {
                let (k, m, n) = (pa.dims.dims[0], pa.dims.dims[1], pb.dims.dims[1]);
                if pa.dims.rank == 2
                    && pb.dims.rank == 2
                    && buf.len() == m.saturating_mul(n)
                    && a.len() == k.saturating_mul(m)
                    && b.len() == k.saturating_mul(n)
                    && catalog::sgd_matmul(buf, a, b, (k, m, n), attr.scalar(), plan.arith())
                {
                    return Ok(());
                }
            }
        }
        // Asked only of the convolutions and pools: passing `attr` copies it through the stack, a
        // copy that stalled a store forward (16 % of `run_program`'s own time on W3's step).
        if cfg!(feature = "simd")
            && disjoint
            && matches!(
                op,
                Opcode::Conv
                    | Opcode::ConvTranspose
                    | Opcode::ConvWeightGrad
                    | Opcode::MaxPool
                    | Opcode::MaxPoolGather
                    | Opcode::MaxPoolScatter
            )
            && catalog::windowed::<O>(
                op,
                attr,
                slices.get(..arity).ok_or(bad)?,
                dims.get(..arity).ok_or(bad)?,
                buf,
            )
        {
            return Ok(());
        }
        if cfg!(feature = "catalog")
            && disjoint
            && catalog::structural::<O>(
                op,
                attr.scalar(),
                plan.arith(),
                slices.get(..arity).ok_or(bad)?,
                dims.get(..arity).ok_or(bad)?,
                &out.dims,
                buf,
            )
        {
            return Ok(());
        }
    }
    // A stand-in's value is not in the arena (`program::stand_ins` leaves readers the catalog
    // runs, so this is never reached from a decoded program).
    if d.stand_in {
        return Err(bad);
    }
    // The reference kernels read the arena only.
    inputs.materialize(arena, d)?;
    step_reference::<O>(plan, arena, k)
}

/// An argument of an instruction whose output `out` splits the arena into `left` and `right`:
/// the output buffer itself (in place), or a disjoint range left or right of it; `None` when it
/// straddles the output (validation rules that out). An argument that reads a bound input takes
/// the caller's values from `inputs`.
#[inline(always)]
fn arg_src<'s, I: Inputs>(
    a: &Option<Placed>,
    out: &Placed,
    left: &'s [f32],
    right: &'s [f32],
    inputs: &'s I,
) -> Option<Src<'s>> {
    let a = a.as_ref()?;
    if a.bound != 0 {
        if a.bound == SPLAT {
            return Some(Src::Splat(a.splat));
        }
        if let Some(x) = inputs.external(a) {
            return Some(Src::Buf(x));
        }
    }
    if a.offset == out.offset && a.end == out.end {
        return Some(Src::Out);
    }
    if a.dims.elems == 0 {
        return Some(Src::Buf(&[]));
    }
    if a.end <= left.len() {
        left.get(a.offset..a.end).map(Src::Buf)
    } else if a.offset >= out.end {
        right
            .get(a.offset.checked_sub(out.end)?..a.end.checked_sub(out.end)?)
            .map(Src::Buf)
    } else {
        None
    }
}

/// Runs instruction `k` over `arena` with its reference kernel from `tapeplan_core::ops`.
fn step_reference<O: Ops>(plan: &Plan<'_>, arena: &mut [f32], k: usize) -> Result<(), ExecError> {
    let instr = u32::try_from(k).unwrap_or(u32::MAX);
    let bad = ExecError::Inconsistent { instr };
    let rec = plan.instr_record(k).ok_or(bad)?;
    let op = Opcode::from_u8(rec.opcode).ok_or(bad)?;
    let arity = op.arity();
    let out = plan.tensor_view(rec.out).ok_or(bad)?;
    // The format's one attribute decoder (validation already accepted it).
    let attr =
        decode_attr_in::<O>(op, rec.attr_word, plan.attr_section(), out.shape).map_err(|_| bad)?;
    if out.elems == 0 {
        // Nothing to write; skipping also spares loops over empty extents.
        return Ok(());
    }
    let mut views = [None::<TensorView>; MAX_ARITY];
    let mut shapes = [Shape::SCALAR; MAX_ARITY];
    for ((&a, v), s) in rec.args.iter().zip(&mut views).zip(&mut shapes).take(arity) {
        let t = plan.tensor_view(a).ok_or(bad)?;
        *v = Some(t);
        *s = t.shape;
    }
    let same = |v: Option<&Option<TensorView>>| {
        v.is_some_and(|v| v.is_some_and(|v| v.offset == out.offset && v.end == out.end))
    };
    let views = views.get(..arity).ok_or(bad)?;
    let shapes = shapes.get(..arity).ok_or(bad)?;

    let math = plan.math();
    if op.class() == OpClass::Elementwise && views.iter().any(|v| same(Some(v))) {
        let (a0, a1) = (views.first(), views.get(1));
        if let (Some(f), 1) = (unary_fn_in::<f32, O>(op, math), arity) {
            unary_in_place(f, arena.get_mut(out.offset..out.end).ok_or(bad)?);
            return Ok(());
        }
        if let (Some(f), 2) = (binary_fn_in::<f32, O>(op), arity) {
            let (which, other) = match (same(a0), same(a1)) {
                (true, true) => (InPlace::Both, None),
                (true, false) => (InPlace::Lhs, a1),
                (_, _) => (InPlace::Rhs, a0),
            };
            let (left, rest) = arena.split_at_mut_checked(out.offset).ok_or(bad)?;
            let (buf, right) = rest.split_at_mut_checked(out.elems).ok_or(bad)?;
            let other = match other {
                None => &[][..],
                Some(v) => pick(left, right, out.end, v.as_ref().ok_or(bad)?).ok_or(bad)?,
            };
            binary_in_place(f, buf, other, which);
            return Ok(());
        }
        // Any other elementwise opcode in place: through the reference kernel, a chunk at a
        // time from copies (elementwise, so chunking cannot change a bit).
        return elementwise_chunked::<O>(op, attr, math, views, arena, &out, instr);
    }

    // `sgd_matmul` over its weight's own range (validation allows it for that argument only):
    // the reference kernel in place. A constant condition: a build or op set without the
    // opcode links none of it.
    if const {
        OpSet::BUILD
            .intersection(O::SET)
            .contains(Opcode::SgdMatMul)
    } && op == Opcode::SgdMatMul
        && same(views.first())
    {
        return sgd_matmul_in_place(plan, arena, &out, views, attr, bad);
    }

    let (left, rest) = arena.split_at_mut_checked(out.offset).ok_or(bad)?;
    let (buf, right) = rest.split_at_mut_checked(out.elems).ok_or(bad)?;
    let mut args: [&[f32]; MAX_ARITY] = [&[]; MAX_ARITY];
    for (slot, v) in args.iter_mut().zip(views) {
        let v = v.as_ref().ok_or(bad)?;
        *slot = pick(left, right, out.end, v).ok_or(bad)?;
    }
    let args = args.get(..arity).ok_or(bad)?;
    eval_in_arith::<f32, O>(op, attr, math, plan.arith(), args, shapes, buf)
        .map_err(|error| ExecError::Kernel { instr, error })
}

/// `sgd_matmul` written over its weight `w` (argument 0, the output's range): the weight is
/// updated in place from `a` and `b`, which validation keeps apart from it, by the catalog's
/// vector kernel (`simd` builds) or [`tapeplan_core::ops::sgd_matmul::kernel`], with the
/// same bits.
#[inline(never)]
fn sgd_matmul_in_place(
    plan: &Plan<'_>,
    arena: &mut [f32],
    out: &TensorView,
    views: &[Option<TensorView>],
    attr: Attr,
    bad: ExecError,
) -> Result<(), ExecError> {
    let (Some(Some(a)), Some(Some(b))) = (views.get(1), views.get(2)) else {
        return Err(bad);
    };
    let (k, m, n) = (
        a.shape.dim(0).ok_or(bad)?,
        a.shape.dim(1).ok_or(bad)?,
        b.shape.dim(1).ok_or(bad)?,
    );
    let (left, rest) = arena.split_at_mut_checked(out.offset).ok_or(bad)?;
    let (w, right) = rest.split_at_mut_checked(out.elems).ok_or(bad)?;
    let a = pick(left, right, out.end, a).ok_or(bad)?;
    let b = pick(left, right, out.end, b).ok_or(bad)?;
    if w.len() != m.saturating_mul(n)
        || a.len() != k.saturating_mul(m)
        || b.len() != k.saturating_mul(n)
    {
        return Err(bad);
    }
    // The catalog's vector kernel where the build has one (the same bits), else the reference.
    if cfg!(feature = "simd")
        && catalog::sgd_matmul(w, a, b, (k, m, n), attr.scalar(), plan.arith())
    {
        return Ok(());
    }
    tapeplan_core::ops::sgd_matmul::kernel(
        w,
        a,
        b,
        (k, m, n),
        attr.scalar(),
        plan.arith() == tapeplan_core::ArithProfile::Fma,
    );
    Ok(())
}

/// Elements per chunk of [`elementwise_chunked`] (its stack copies are `MAX_ARITY` of these).
const CHUNK_ELEMS: usize = 64;

/// An elementwise instruction whose output shares its range with arguments, for opcodes
/// without a scalar function: each chunk of every argument is copied to the stack, then the
/// reference kernel writes the output chunk. Elementwise kernels compute each element from
/// the same-index argument elements only, so the bits are those of one whole-buffer call.
fn elementwise_chunked<O: Ops>(
    op: Opcode,
    attr: Attr,
    math: MathProfile,
    views: &[Option<TensorView>],
    arena: &mut [f32],
    out: &TensorView,
    instr: u32,
) -> Result<(), ExecError> {
    let bad = ExecError::Inconsistent { instr };
    let mut copies = [[0.0f32; CHUNK_ELEMS]; MAX_ARITY];
    let mut start = 0usize;
    while start < out.elems {
        let len = (out.elems.saturating_sub(start)).min(CHUNK_ELEMS);
        let shape = Shape::new(&[len]).map_err(|e| ExecError::Kernel {
            instr,
            error: e.into(),
        })?;
        for (copy, v) in copies.iter_mut().zip(views) {
            let v = v.as_ref().ok_or(bad)?;
            let from = v.offset.checked_add(start).ok_or(bad)?;
            let src = arena
                .get(from..from.checked_add(len).ok_or(bad)?)
                .ok_or(bad)?;
            copy.get_mut(..len).ok_or(bad)?.copy_from_slice(src);
        }
        let mut args: [&[f32]; MAX_ARITY] = [&[]; MAX_ARITY];
        for (slot, copy) in args.iter_mut().zip(&copies) {
            *slot = copy.get(..len).ok_or(bad)?;
        }
        let shapes = [shape; MAX_ARITY];
        let arity = views.len();
        let from = out.offset.checked_add(start).ok_or(bad)?;
        let dst = arena
            .get_mut(from..from.checked_add(len).ok_or(bad)?)
            .ok_or(bad)?;
        eval_in::<f32, O>(
            op,
            attr.with_target(shape),
            math,
            args.get(..arity).ok_or(bad)?,
            shapes.get(..arity).ok_or(bad)?,
            dst,
        )
        .map_err(|error| ExecError::Kernel { instr, error })?;
        start = start.saturating_add(len);
    }
    Ok(())
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::arithmetic_side_effects
)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;
    use tapeplan_core::format::TensorKind;
    use tapeplan_core::ops::eval;
    use tapeplan_core::BuildOps;

    fn view(offset: usize, elems: usize) -> TensorView {
        TensorView {
            offset,
            elems,
            end: offset + elems,
            shape: Shape::new(&[elems]).unwrap(),
            kind: TensorKind::Scratch,
        }
    }

    #[test]
    fn chunked_in_place_matches_whole_buffer_kernels() {
        let n = 150; // more than two chunks, not a multiple of one
        let mut arena = [0.0f32; 304];
        for (i, x) in arena.iter_mut().enumerate() {
            *x = (i as f32 * 0.37).sin() * 3.0;
        }
        let (a, b) = (view(0, n), view(152, n));
        for (op, views) in [
            (Opcode::Div, &[Some(a), Some(b)][..]),
            (Opcode::Sub, &[Some(b), Some(a)][..]),
            (Opcode::Mul, &[Some(a), Some(a)][..]),
            (Opcode::Tanh, &[Some(a)][..]),
        ] {
            let mut expect = [0.0f32; 150];
            let args: [&[f32]; 2] = [&arena[0..n], &arena[152..152 + n]];
            let args: Vec<&[f32]> = views
                .iter()
                .map(|v| args[usize::from(v.unwrap().offset != 0)])
                .collect();
            let shapes = [a.shape; 2];
            let m = MathProfile::Precise;
            eval(
                op,
                Attr::NONE,
                m,
                &args,
                &shapes[..views.len()],
                &mut expect,
            )
            .unwrap();
            elementwise_chunked::<BuildOps>(op, Attr::NONE, m, views, &mut arena, &a, 0).unwrap();
            let got: Vec<u32> = arena[..n].iter().map(|x| x.to_bits()).collect();
            let want: Vec<u32> = expect.iter().map(|x| x.to_bits()).collect();
            assert_eq!(got, want, "{op}");
        }
    }
}
