//! Binding a plan to the caller's arena and running its entries.

use tapeplan_core::format::{BindingKind, TensorKind};
use tapeplan_core::ops::elementwise::{binary_in_place, unary_in_place, InPlace};
use tapeplan_core::ops::{binary_fn, eval, unary_fn, Attr};
use tapeplan_core::{MathProfile, OpClass, Opcode, Shape, MAX_ARITY};

use tapeplan_core::format::{decode_attr, FUSE_NEXT, MAX_CHAIN_INSTRS, MAX_REGISTERS};
use tapeplan_core::MAX_RANK;

use crate::catalog::{self, Dims, Src};
use crate::error::RunError;
use crate::plan::{us, Binding, EntryId, Plan, TensorView};

/// A plan bound to an arena the caller owns: load parameters, set inputs, run entries, read
/// outputs. Nothing is allocated; every read and write stays inside `arena[..arena_elems]`.
///
/// The arena's layout is the plan's: the persistent region `[0, persistent_elems)` holds the
/// parameters (and keeps them across runs); the rest is scratch that every run reuses, so set
/// an entry's inputs right before running it and read its outputs right after.
#[derive(Debug)]
pub struct Session<'p, 'a> {
    plan: &'p Plan<'p>,
    arena: &'a mut [f32],
    /// The register slots of fused chains, one tile each (empty without feature `fusion`):
    /// kept here so that a chain does not clear them on every run.
    regs: Registers,
}

/// The register slots of fused chains (see [`run_chain`]).
type Registers = [[f32; TILE_ELEMS]; MAX_REGISTERS];

impl<'p, 'a> Session<'p, 'a> {
    /// Binds `plan` to `arena`, leaving the arena's contents as they are, so parameters
    /// already in the persistent region (a previous session, a `static` buffer, a restored
    /// checkpoint) are kept. Elements past `arena_elems` are never touched.
    ///
    /// # Errors
    /// [`RunError::ArenaTooSmall`] when `arena.len() < plan.arena_elems()`.
    pub fn bind(plan: &'p Plan<'p>, arena: &'a mut [f32]) -> Result<Self, RunError> {
        let needed_elems = plan.arena_elems();
        if arena.len() < needed_elems {
            return Err(RunError::ArenaTooSmall {
                needed_elems,
                found_elems: arena.len(),
            });
        }
        Ok(Session {
            plan,
            arena,
            regs: [[0.0; TILE_ELEMS]; MAX_REGISTERS],
        })
    }

    /// Binds `plan` to `arena` and sets `arena[..arena_elems]` to `+0.0`: parameters, too.
    ///
    /// # Errors
    /// As [`Session::bind`].
    pub fn bind_zeroed(plan: &'p Plan<'p>, arena: &'a mut [f32]) -> Result<Self, RunError> {
        let s = Session::bind(plan, arena)?;
        let n = s.plan.arena_elems();
        if let Some(a) = s.arena.get_mut(..n) {
            a.fill(0.0);
        }
        Ok(s)
    }

    /// The plan.
    pub fn plan(&self) -> &'p Plan<'p> {
        self.plan
    }

    /// Gives the arena back.
    pub fn into_arena(self) -> &'a mut [f32] {
        self.arena
    }

    /// The whole persistent region `[0, persistent_elems)`: every parameter at its
    /// [`Binding::range`]. Hash it for a digest, copy it for a checkpoint.
    pub fn persistent(&self) -> &[f32] {
        self.arena
            .get(..self.plan.persistent_elems())
            .unwrap_or(&[])
    }

    /// The persistent region, writable: restore a checkpoint by copying it back.
    pub fn persistent_mut(&mut self) -> &mut [f32] {
        let n = self.plan.persistent_elems();
        self.arena.get_mut(..n).unwrap_or(&mut [])
    }

    fn slice(&self, b: &Binding<'_>) -> &[f32] {
        self.arena.get(b.range()).unwrap_or(&[])
    }

    fn slice_mut(&mut self, b: &Binding<'_>) -> &mut [f32] {
        self.arena.get_mut(b.range()).unwrap_or(&mut [])
    }

    fn check_entry(&self, entry: EntryId) -> Result<(), RunError> {
        if entry.index() < self.plan.n_entries() {
            Ok(())
        } else {
            Err(RunError::UnknownEntry { entry: entry.0 })
        }
    }

    fn copy_in(dst: &mut [f32], values: &[f32]) -> Result<(), RunError> {
        if dst.len() != values.len() {
            return Err(RunError::LengthMismatch {
                expected_elems: dst.len(),
                found_elems: values.len(),
            });
        }
        dst.copy_from_slice(values);
        Ok(())
    }

    fn param(&self, name: &str) -> Result<Binding<'p>, RunError> {
        self.plan.parameter(name).ok_or(RunError::UnknownName {
            kind: BindingKind::Parameter,
        })
    }

    /// Copies a parameter's values (row-major, `shape.elems()` of them) into the arena.
    ///
    /// # Errors
    /// [`RunError::UnknownName`] for no such parameter; [`RunError::LengthMismatch`] when
    /// `values.len()` is not its element count.
    pub fn load_parameter(&mut self, name: &str, values: &[f32]) -> Result<(), RunError> {
        let b = self.param(name)?;
        Self::copy_in(self.slice_mut(&b), values)
    }

    /// A parameter's current values.
    ///
    /// # Errors
    /// [`RunError::UnknownName`] for no such parameter.
    pub fn parameter(&self, name: &str) -> Result<&[f32], RunError> {
        let b = self.param(name)?;
        Ok(self.slice(&b))
    }

    /// A parameter's values, writable in place.
    ///
    /// # Errors
    /// [`RunError::UnknownName`] for no such parameter.
    pub fn parameter_mut(&mut self, name: &str) -> Result<&mut [f32], RunError> {
        let b = self.param(name)?;
        Ok(self.slice_mut(&b))
    }

    fn input_binding(&self, entry: EntryId, name: &str) -> Result<Binding<'p>, RunError> {
        self.check_entry(entry)?;
        self.plan.input(entry, name).ok_or(RunError::UnknownName {
            kind: BindingKind::Input,
        })
    }

    /// Copies an input's values into the arena. Inputs live in scratch, which every run
    /// reuses: set all of an entry's inputs right before running it.
    ///
    /// # Errors
    /// [`RunError::UnknownEntry`], [`RunError::UnknownName`] for no such input of `entry`,
    /// [`RunError::LengthMismatch`] when `values.len()` is not its element count.
    pub fn set_input(
        &mut self,
        entry: EntryId,
        name: &str,
        values: &[f32],
    ) -> Result<(), RunError> {
        let b = self.input_binding(entry, name)?;
        Self::copy_in(self.slice_mut(&b), values)
    }

    /// An input's buffer, to fill in place instead of copying.
    ///
    /// # Errors
    /// [`RunError::UnknownEntry`], [`RunError::UnknownName`] for no such input of `entry`.
    pub fn input_mut(&mut self, entry: EntryId, name: &str) -> Result<&mut [f32], RunError> {
        let b = self.input_binding(entry, name)?;
        Ok(self.slice_mut(&b))
    }

    /// An output's values, as the last run of `entry` left them (meaningful only until another
    /// entry runs, or inputs are set, since outputs may live in scratch).
    ///
    /// # Errors
    /// [`RunError::UnknownEntry`], [`RunError::UnknownName`] for no such output of `entry`.
    pub fn output(&self, entry: EntryId, name: &str) -> Result<&[f32], RunError> {
        self.check_entry(entry)?;
        let b = self.plan.output(entry, name).ok_or(RunError::UnknownName {
            kind: BindingKind::Output,
        })?;
        Ok(self.slice(&b))
    }

    /// Copies `values` into the tensor of `binding` (an input or parameter of this session's
    /// plan, found once with [`Plan::input`] or [`Plan::parameter`]): [`Session::set_input`]
    /// without the lookup by name, for loops that run an entry many times.
    ///
    /// # Errors
    /// [`RunError::LengthMismatch`] when `values.len()` is not the binding's element count (or
    /// the binding does not lie in this session's arena).
    pub fn write_binding(&mut self, binding: &Binding<'_>, values: &[f32]) -> Result<(), RunError> {
        Self::copy_in(self.slice_mut(binding), values)
    }

    /// The values of `binding`'s tensor (an output, update, input or parameter of this
    /// session's plan): [`Session::output`] without the lookup by name. Empty when the binding
    /// does not lie in this session's arena.
    pub fn read_binding(&self, binding: &Binding<'_>) -> &[f32] {
        self.slice(binding)
    }

    /// Decodes `entry`'s instructions into `buf` once (the opcode, attribute and tensor
    /// records of each), for [`Session::run_program`] to run many times without reading the
    /// plan's records again: what a step loop over a small model saves per instruction.
    ///
    /// # Errors
    /// [`RunError::UnknownEntry`]; [`RunError::LengthMismatch`] when `buf` holds fewer than
    /// the entry's instructions (`expected_elems` is the count needed).
    pub fn decode<'b>(
        &self,
        entry: EntryId,
        buf: &'b mut [Decoded],
    ) -> Result<Program<'b>, RunError> {
        self.check_entry(entry)?;
        let range = self
            .plan
            .entry_range(entry)
            .ok_or(RunError::UnknownEntry { entry: entry.0 })?;
        let (n, found_elems) = (range.len(), buf.len());
        let slots = buf.get_mut(..n).ok_or(RunError::LengthMismatch {
            expected_elems: n,
            found_elems,
        })?;
        for (slot, k) in slots.iter_mut().zip(range) {
            *slot = decode_instr(self.plan, k)?;
        }
        Ok(Program {
            entry,
            plan_addr: self.plan.bytes.as_ptr() as usize,
            plan_len: self.plan.bytes.len(),
            instrs: slots,
        })
    }

    /// Runs a decoded entry: the same as [`Session::run`] of its entry, with the same bits.
    ///
    /// # Errors
    /// As [`Session::run`]; [`RunError::UnknownEntry`] when `program` was decoded from another
    /// plan.
    pub fn run_program(&mut self, program: &Program<'_>) -> Result<(), RunError> {
        let plan = self.plan;
        if program.plan_addr != plan.bytes.as_ptr() as usize || program.plan_len != plan.bytes.len()
        {
            return Err(RunError::UnknownEntry {
                entry: program.entry.0,
            });
        }
        self.check_entry(program.entry)?;
        let arena = self
            .arena
            .get_mut(..plan.arena_elems())
            .ok_or(RunError::ArenaTooSmall {
                needed_elems: plan.arena_elems(),
                found_elems: 0,
            })?;
        // The loop stays small (an instruction outside a chain is one `execute`, inlined here);
        // chains go through `run_decoded_chain`, out of line, so that the chain code does not
        // crowd the per-instruction path (W3-unfused simd: about 0.98 -> 0.93 us per step).
        let mut i = 0usize;
        while let Some(d) = program.instrs.get(i) {
            if d.fuse_next {
                i = run_decoded_chain(plan, arena, &mut self.regs, program.instrs, i)?;
            } else {
                execute(plan, arena, d)?;
                i = i.saturating_add(1);
            }
        }
        commit(plan, arena, program.entry)
    }

    /// Runs an entry's instructions in order, each with the kernel catalog's entry for it
    /// ([`crate::catalog`]: scalar, or vectorized with feature `simd`) or, where the catalog
    /// has none, its reference kernel from `tapeplan_core::ops`; either way the bits are the
    /// reference kernels' (so the oracle's). Updates are written in place over their
    /// parameters.
    ///
    /// # Errors
    /// [`RunError::UnknownEntry`]; [`RunError::Inconsistent`] or [`RunError::Kernel`] only if
    /// the plan's records contradict themselves, which validation rules out.
    pub fn run(&mut self, entry: EntryId) -> Result<(), RunError> {
        self.check_entry(entry)?;
        let range = self
            .plan
            .entry_range(entry)
            .ok_or(RunError::UnknownEntry { entry: entry.0 })?;
        let plan = self.plan;
        let arena = self
            .arena
            .get_mut(..plan.arena_elems())
            .ok_or(RunError::ArenaTooSmall {
                needed_elems: plan.arena_elems(),
                found_elems: 0,
            })?;
        let mut k = range.start;
        while k < range.end {
            let mut last = k;
            while last.saturating_add(1) < range.end
                && plan
                    .instr_record(last)
                    .is_some_and(|r| r.flags & FUSE_NEXT != 0)
            {
                last = last.saturating_add(1);
            }
            if cfg!(feature = "fusion") && last > k {
                let count = last.saturating_sub(k).saturating_add(1);
                let member = |j: usize| Ok(Member::of(&decode_instr(plan, k.saturating_add(j))?));
                run_chain(arena, &mut self.regs, plan.math(), k, count, member)?;
            } else {
                step(plan, arena, k)?;
            }
            k = last.saturating_add(1);
        }
        commit(plan, arena, entry)
    }
}

/// The end of a guarded entry (one whose updates live in scratch): when every output and update
/// is finite, copy each update over its parameter; otherwise write nothing and say which value
/// was not finite. An entry with in-place updates (or none) has nothing to commit.
/// The validator's test: an update in the scratch region is guarded (and then all are). Read
/// from the raw records (no names, no shapes): it runs after every entry.
fn guarded(plan: &Plan<'_>, entry: EntryId) -> bool {
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

fn commit(plan: &Plan<'_>, arena: &mut [f32], entry: EntryId) -> Result<(), RunError> {
    if !guarded(plan, entry) {
        return Ok(());
    }
    let bad = RunError::Inconsistent { instr: u32::MAX };
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
            return Err(RunError::NonFinite {
                entry: u32::try_from(entry.index()).unwrap_or(u32::MAX),
                binding: u32::try_from(b).unwrap_or(u32::MAX),
                element: u32::try_from(i).unwrap_or(u32::MAX),
            });
        }
    }
    for u in plan.updates(entry) {
        let p = plan.parameter(u.name).ok_or(bad)?;
        if u.range().end > arena.len() || p.range().end > arena.len() || p.elems != u.elems {
            return Err(bad);
        }
        arena.copy_within(u.range(), p.offset_elems);
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
fn pick_range<'s>(
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

/// A tensor record decoded for execution: where it lives and its extents. Only for a plan that
/// passed validation (every field was checked there), so decoding here checks nothing but the
/// bounds of the bytes.
#[derive(Clone, Copy, Debug)]
struct Fast {
    offset: usize,
    end: usize,
    dims: Dims,
    /// A register of a fused chain (`offset` is its slot), not an arena range.
    register: bool,
}

/// Tensor `t`'s record (the validated fields: offset, rank, dims), decoded by the format's
/// record decoder; `None` past the tensor section.
#[inline]
fn fast_tensor(plan: &Plan<'_>, t: u32) -> Option<Fast> {
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
        elems = elems.saturating_mul(us(x));
    }
    Some(Fast {
        offset,
        end: offset.checked_add(elems)?,
        dims: Dims { rank, dims, elems },
        register: rec.kind == TensorKind::Register as u8,
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
/// tensors live, read from the plan's records once by [`Session::decode`] so that
/// [`Session::run_program`] does not read them again on every step. About 300 bytes each.
#[derive(Clone, Copy, Debug)]
pub struct Decoded {
    k: usize,
    fuse_next: bool,
    op: Opcode,
    arity: usize,
    elementwise: bool,
    attr: Attr,
    out: Fast,
    args: [Option<Fast>; MAX_ARITY],
}

impl Decoded {
    /// A placeholder to fill a buffer with before [`Session::decode`]: `[Decoded::EMPTY; N]`.
    pub const EMPTY: Decoded = Decoded {
        k: 0,
        fuse_next: false,
        op: Opcode::Input,
        arity: 0,
        elementwise: false,
        attr: Attr::None,
        out: Fast {
            offset: 0,
            end: 0,
            dims: Dims {
                rank: 0,
                dims: [0; MAX_RANK],
                elems: 0,
            },
            register: false,
        },
        args: [None; MAX_ARITY],
    };
}

/// An entry of a plan decoded once for repeated runs (see [`Session::decode`]): it borrows the
/// caller's buffer of [`Decoded`] instructions and remembers which plan it was decoded from.
#[derive(Clone, Copy, Debug)]
pub struct Program<'b> {
    entry: EntryId,
    plan_addr: usize,
    plan_len: usize,
    instrs: &'b [Decoded],
}

impl Program<'_> {
    /// The entry it runs.
    pub fn entry(&self) -> EntryId {
        self.entry
    }

    /// Its number of instructions.
    pub fn len(&self) -> usize {
        self.instrs.len()
    }

    /// True for an entry without instructions.
    pub fn is_empty(&self) -> bool {
        self.instrs.is_empty()
    }
}

/// Decodes instruction `k` (through the format's one decoder, `Plan::instr`) and its tensors'
/// records (see [`Decoded`]).
#[inline(always)]
fn decode_instr(plan: &Plan<'_>, k: usize) -> Result<Decoded, RunError> {
    let instr = u32::try_from(k).unwrap_or(u32::MAX);
    let bad = RunError::Inconsistent { instr };
    let ins = plan.instr(k).ok_or(bad)?.map_err(|_| bad)?;
    let op = ins.op;
    // With the catalog (hosts), a table lookup; without (flash-bound firmware), two calls and
    // 256 bytes less.
    #[cfg(feature = "catalog")]
    let (arity, elementwise) = {
        let flags = DECODE.get(usize::from(op.to_u8())).copied().unwrap_or(0);
        (usize::from(flags & ARITY), flags & ELEMENTWISE != 0)
    };
    #[cfg(not(feature = "catalog"))]
    let (arity, elementwise) = (op.arity(), op.class() == OpClass::Elementwise);
    let out = fast_tensor(plan, ins.out).ok_or(bad)?;
    let mut d = Decoded {
        k,
        fuse_next: ins.fuse_next(),
        op,
        arity,
        elementwise,
        attr: ins.attr,
        out,
        args: [None; MAX_ARITY],
    };
    if out.dims.elems == 0 {
        return Ok(d);
    }
    for (slot, &a) in d.args.iter_mut().zip(&ins.args).take(arity) {
        *slot = Some(fast_tensor(plan, a).ok_or(bad)?);
    }
    Ok(d)
}

/// Runs instruction `k` over `arena`: with the catalog's kernel when it has one for the
/// instruction (the same bits as the reference kernel), else through [`step_reference`].
///
/// Without the `catalog` feature (flash-bound firmware) every instruction takes
/// [`step_reference`]'s path: the least code, the same bits.
fn step(plan: &Plan<'_>, arena: &mut [f32], k: usize) -> Result<(), RunError> {
    if cfg!(feature = "catalog") {
        execute(plan, arena, &decode_instr(plan, k)?)
    } else {
        step_reference(plan, arena, k)
    }
}

/// Runs a decoded instruction over `arena` (see [`step`]).
#[inline(always)]
fn execute(plan: &Plan<'_>, arena: &mut [f32], d: &Decoded) -> Result<(), RunError> {
    let (k, op, arity, elementwise, attr, out, args) =
        (d.k, d.op, d.arity, d.elementwise, d.attr, &d.out, &d.args);
    let bad = RunError::Inconsistent {
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
    let src = |a: &Option<Fast>| -> Option<Src<'_>> {
        let a = a.as_ref()?;
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
    };
    if elementwise {
        let a = src(&args[0]).ok_or(bad)?;
        let b = if arity == 2 {
            src(&args[1]).ok_or(bad)?
        } else {
            Src::Out
        };
        let lengths_ok = [a, b].iter().take(arity).all(|s| match s {
            Src::Out => true,
            Src::Buf(x) => x.len() == buf.len(),
        });
        // Without the `catalog` feature (firmware short of flash) everything runs the
        // reference kernels: the same bits, less code.
        if cfg!(feature = "catalog")
            && lengths_ok
            && catalog::elementwise(op, attr.scalar(), plan.math(), a, b, buf)
        {
            return Ok(());
        }
    } else {
        let mut slices: [&[f32]; MAX_ARITY] = [&[]; MAX_ARITY];
        let mut dims = [out.dims; MAX_ARITY];
        let mut disjoint = true;
        for ((slot, d), a) in slices.iter_mut().zip(&mut dims).zip(args).take(arity) {
            match src(a) {
                Some(Src::Buf(x)) => *slot = x,
                _ => disjoint = false,
            }
            if let Some(a) = a {
                *d = a.dims;
            }
        }
        if cfg!(feature = "catalog")
            && disjoint
            && catalog::structural(
                op,
                attr.scalar(),
                slices.get(..arity).ok_or(bad)?,
                dims.get(..arity).ok_or(bad)?,
                &out.dims,
                buf,
            )
        {
            return Ok(());
        }
    }
    step_reference(plan, arena, k)
}

/// Runs instruction `k` over `arena` with its reference kernel from `tapeplan_core::ops`.
fn step_reference(plan: &Plan<'_>, arena: &mut [f32], k: usize) -> Result<(), RunError> {
    let instr = u32::try_from(k).unwrap_or(u32::MAX);
    let bad = RunError::Inconsistent { instr };
    let rec = plan.instr_record(k).ok_or(bad)?;
    let op = Opcode::from_u8(rec.opcode).ok_or(bad)?;
    let arity = op.arity();
    let out = plan.tensor_view(rec.out).ok_or(bad)?;
    // The format's one attribute decoder (validation already accepted it).
    let attr = decode_attr(op, rec.attr_word, plan.attr_section(), out.shape).map_err(|_| bad)?;
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
        if let (Some(f), 1) = (unary_fn(op, math), arity) {
            unary_in_place(f, arena.get_mut(out.offset..out.end).ok_or(bad)?);
            return Ok(());
        }
        if let (Some(f), 2) = (binary_fn(op), arity) {
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
        return elementwise_chunked(op, attr, math, views, arena, &out, instr);
    }

    let (left, rest) = arena.split_at_mut_checked(out.offset).ok_or(bad)?;
    let (buf, right) = rest.split_at_mut_checked(out.elems).ok_or(bad)?;
    let mut args: [&[f32]; MAX_ARITY] = [&[]; MAX_ARITY];
    for (slot, v) in args.iter_mut().zip(views) {
        let v = v.as_ref().ok_or(bad)?;
        *slot = pick(left, right, out.end, v).ok_or(bad)?;
    }
    let args = args.get(..arity).ok_or(bad)?;
    eval(op, attr, math, args, shapes, buf).map_err(|error| RunError::Kernel { instr, error })
}

/// Elements per tile of a fused chain ([`run_chain`]); the session keeps `MAX_REGISTERS` tiles
/// (16 KiB on hosts, 256 bytes with `fusion` but without the catalog, nothing without `fusion`).
const TILE_ELEMS: usize = match (cfg!(feature = "fusion"), cfg!(feature = "catalog")) {
    (false, _) => 0,
    (true, true) => 1024,
    (true, false) => 16,
};

/// Where a chain member reads or writes: a register slot, or an arena offset.
#[derive(Clone, Copy, Debug)]
enum Loc {
    Register(usize),
    Arena(usize),
}

/// A chain member decoded once for the whole chain.
#[derive(Clone, Copy, Debug)]
struct Member {
    op: Opcode,
    attr: Attr,
    arity: usize,
    elems: usize,
    out: Loc,
    args: [Loc; MAX_ARITY],
    /// For `broadcast`: its source's extents and the output's.
    from: Dims,
    to: Dims,
}

impl Member {
    /// From a decoded instruction (its tensors' offsets and kinds).
    fn of(d: &Decoded) -> Member {
        let loc = |f: &Fast| {
            if f.register {
                Loc::Register(f.offset)
            } else {
                Loc::Arena(f.offset)
            }
        };
        let mut args = [Loc::Register(0); MAX_ARITY];
        for (slot, a) in args.iter_mut().zip(&d.args) {
            if let Some(a) = a {
                *slot = loc(a);
            }
        }
        Member {
            op: d.op,
            attr: d.attr,
            arity: d.arity,
            elems: d.out.dims.elems,
            out: loc(&d.out),
            args,
            from: d.args[0].map_or(Dims::EMPTY, |a| a.dims),
            to: d.out.dims,
        }
    }
}

/// The instructions of `instrs` from `i`, which carries `FUSE_NEXT`, to the end of its chain,
/// run as one chain (with feature `fusion`; else `instrs[i]` alone); answers the index after
/// the chain. Out of line: [`Session::run_program`]'s loop then holds only the
/// per-instruction path.
#[inline(never)]
fn run_decoded_chain(
    plan: &Plan<'_>,
    arena: &mut [f32],
    regs: &mut Registers,
    instrs: &[Decoded],
    i: usize,
) -> Result<usize, RunError> {
    let d = instrs.get(i).ok_or(RunError::Inconsistent {
        instr: u32::try_from(i).unwrap_or(u32::MAX),
    })?;
    let mut last = i;
    while instrs.get(last).is_some_and(|d| d.fuse_next) && last.saturating_add(1) < instrs.len() {
        last = last.saturating_add(1);
    }
    if cfg!(feature = "fusion") && last > i {
        let chain = instrs.get(i..=last).unwrap_or(&[]);
        let bad = RunError::Inconsistent {
            instr: u32::try_from(d.k).unwrap_or(u32::MAX),
        };
        let member = |j: usize| chain.get(j).map(Member::of).ok_or(bad);
        run_chain(arena, regs, plan.math(), d.k, chain.len(), member)?;
    } else {
        execute(plan, arena, d)?;
    }
    Ok(last.saturating_add(1))
}

/// Runs a fused chain (instructions `first`, `first + 1`, … decoded as `members`) a tile at a
/// time: for each tile of [`TILE_ELEMS`] elements, every member in order computes its tile from
/// the same-index elements of its arguments (arena ranges or register slots), through the
/// catalog's elementwise kernel or the reference kernel. Members are elementwise (or `fill`), so
/// an element's value depends on the same-index argument elements alone and the bits are those
/// of running the members one after another over whole buffers; validation ruled out arena
/// ranges that meet without being equal, the one case where the order of tiles could show.
fn run_chain(
    arena: &mut [f32],
    regs: &mut Registers,
    math: MathProfile,
    first: usize,
    count: usize,
    member: impl Fn(usize) -> Result<Member, RunError>,
) -> Result<(), RunError> {
    let bad = |k: usize| RunError::Inconsistent {
        instr: u32::try_from(k).unwrap_or(u32::MAX),
    };
    if TILE_ELEMS == 0 || count > MAX_CHAIN_INSTRS {
        return Err(bad(first));
    }
    let n_elems = member(0)?.elems;
    let mut start = 0usize;
    while start < n_elems {
        let len = n_elems.saturating_sub(start).min(TILE_ELEMS);
        for i in 0..count {
            let k = first.saturating_add(i);
            let m = &member(i)?;
            // The destination tile, written in place: a register slot, or the arena range.
            // Arguments are then the destination itself (`Src::Out`: the same slot or the same
            // arena range), another slot, or an arena range disjoint from the destination.
            match m.out {
                Loc::Register(r) => {
                    let (before, rest) = regs.split_at_mut(r.min(MAX_REGISTERS));
                    let (dst, after) = rest.split_first_mut().ok_or(bad(k))?;
                    let dst = dst.get_mut(..len).ok_or(bad(k))?;
                    let src = |a: Loc| -> Option<Src<'_>> {
                        match a {
                            Loc::Register(x) if x == r => Some(Src::Out),
                            Loc::Register(x) if x < r => before.get(x)?.get(..len).map(Src::Buf),
                            Loc::Register(x) => after
                                .get(x.checked_sub(r)?.checked_sub(1)?)?
                                .get(..len)
                                .map(Src::Buf),
                            Loc::Arena(o) => {
                                let from = o.checked_add(start)?;
                                arena.get(from..from.checked_add(len)?).map(Src::Buf)
                            }
                        }
                    };
                    if m.op == Opcode::Broadcast {
                        let Loc::Arena(o) = m.args[0] else {
                            return Err(bad(k));
                        };
                        let from = o.checked_add(m.from.elems).ok_or(bad(k))?;
                        let x = arena.get(o..from).ok_or(bad(k))?;
                        broadcast_tile(x, &m.from, &m.to, start, dst);
                        continue;
                    }
                    let [a, b, _] = m.args.map(src);
                    chain_step(m, math, a, b, dst, k)?;
                }
                Loc::Arena(o) => {
                    let at = o.checked_add(start).ok_or(bad(k))?;
                    let (left, rest) = arena.split_at_mut_checked(at).ok_or(bad(k))?;
                    let (dst, right) = rest.split_at_mut_checked(len).ok_or(bad(k))?;
                    // Where the destination tile ends: `right` starts there.
                    let skip = at.checked_add(len).ok_or(bad(k))?;
                    let src = |a: Loc| -> Option<Src<'_>> {
                        match a {
                            Loc::Register(x) => regs.get(x)?.get(..len).map(Src::Buf),
                            Loc::Arena(p) if p == o => Some(Src::Out),
                            Loc::Arena(p) => {
                                let from = p.checked_add(start)?;
                                pick_range(left, right, skip, from, from.checked_add(len)?)
                                    .map(Src::Buf)
                            }
                        }
                    };
                    if m.op == Opcode::Broadcast {
                        // The whole source, left or right of the destination (validation keeps
                        // it apart from every range the chain writes).
                        let Loc::Arena(p) = m.args[0] else {
                            return Err(bad(k));
                        };
                        let end = p.checked_add(m.from.elems).ok_or(bad(k))?;
                        let x = pick_range(left, right, skip, p, end).ok_or(bad(k))?;
                        broadcast_tile(x, &m.from, &m.to, start, dst);
                        continue;
                    }
                    let [a, b, _] = m.args.map(src);
                    chain_step(m, math, a, b, dst, k)?;
                }
            }
        }
        start = start.saturating_add(len);
    }
    Ok(())
}

/// A `broadcast` member over one tile: `dst[i] = x[source(start + i)]`, NumPy broadcasting of
/// `x` (extents `from`) to `to`. A copy: any order gives the same bits. A scalar source fills;
/// a source that is the target's trailing extents (a row repeated) cycles; anything else maps
/// each element through the broadcasting index rule.
fn broadcast_tile(x: &[f32], from: &Dims, to: &Dims, start: usize, dst: &mut [f32]) {
    if let [v] = x {
        dst.fill(*v);
        return;
    }
    let n = x.len();
    let trailing = from.rank <= to.rank
        && (0..from.rank).all(|i| {
            let j = to.rank.saturating_sub(from.rank).saturating_add(i);
            from.dims.get(i) == to.dims.get(j)
        });
    if trailing && n > 0 {
        // Runs of the source, the first from the tile's offset into it.
        let mut j = start.checked_rem(n).unwrap_or(0);
        let mut rest = dst;
        while !rest.is_empty() {
            let take = n.saturating_sub(j).min(rest.len()).max(1);
            let (head, tail) = rest.split_at_mut(take.min(rest.len()));
            if let Some(src) = x.get(j..j.saturating_add(head.len())) {
                head.copy_from_slice(src);
            }
            rest = tail;
            j = 0;
        }
        return;
    }
    // A column repeated across rows (`[m, 1]` to `[m, n]`): runs of one value.
    let column = from.rank == to.rank
        && from.rank >= 1
        && from.dims.get(from.rank.saturating_sub(1)) == Some(&1)
        && (0..from.rank.saturating_sub(1)).all(|i| from.dims.get(i) == to.dims.get(i));
    let width = to.dims.get(to.rank.saturating_sub(1)).copied().unwrap_or(0);
    if column && width > 0 {
        let mut e = start;
        let mut rest = dst;
        while !rest.is_empty() {
            let row = e.checked_div(width).unwrap_or(0);
            let take = width
                .saturating_sub(e.checked_rem(width).unwrap_or(0))
                .min(rest.len())
                .max(1);
            let (head, tail) = rest.split_at_mut(take.min(rest.len()));
            if let Some(&v) = x.get(row) {
                head.fill(v);
            }
            e = e.saturating_add(head.len());
            rest = tail;
        }
        return;
    }
    let (Ok(fs), Ok(ts)) = (
        Shape::new(from.dims.get(..from.rank).unwrap_or(&[])),
        Shape::new(to.dims.get(..to.rank).unwrap_or(&[])),
    ) else {
        return;
    };
    for (i, d) in dst.iter_mut().enumerate() {
        if let Some(v) = x.get(fs.broadcast_source_index(&ts, start.saturating_add(i))) {
            *d = *v;
        }
    }
}

/// One member of a fused chain over one tile: `dst` from arguments `a` and `b` (`None` for a
/// range that would straddle the destination, which validation rules out; unused ones are
/// ignored). `fill` writes the attribute's bits; the catalog's elementwise kernel when it has
/// one; otherwise the reference kernel, from copies where an argument is the destination.
fn chain_step(
    m: &Member,
    math: MathProfile,
    a: Option<Src<'_>>,
    b: Option<Src<'_>>,
    dst: &mut [f32],
    k: usize,
) -> Result<(), RunError> {
    let instr = u32::try_from(k).unwrap_or(u32::MAX);
    let bad = RunError::Inconsistent { instr };
    if m.op == Opcode::Fill {
        // The reference kernel's meaning: every element the attribute's bits.
        dst.fill(m.attr.scalar());
        return Ok(());
    }
    let a = a.ok_or(bad)?;
    let b = if m.arity == 2 {
        b.ok_or(bad)?
    } else {
        Src::Out
    };
    if cfg!(feature = "catalog") && catalog::elementwise(m.op, m.attr.scalar(), math, a, b, dst) {
        return Ok(());
    }
    let len = dst.len();
    let mut copy = [0.0f32; TILE_ELEMS];
    let copy = copy.get_mut(..len).ok_or(bad)?;
    copy.copy_from_slice(dst);
    let copy: &[f32] = copy;
    let args: [&[f32]; 2] = [a, b].map(|s| match s {
        Src::Out => copy,
        Src::Buf(x) => x,
    });
    let shape = Shape::new(&[len]).map_err(|e| RunError::Kernel {
        instr,
        error: e.into(),
    })?;
    let shapes = [shape; 2];
    eval(
        m.op,
        m.attr.with_target(shape),
        math,
        args.get(..m.arity).ok_or(bad)?,
        shapes.get(..m.arity).ok_or(bad)?,
        dst,
    )
    .map_err(|error| RunError::Kernel { instr, error })
}

/// Elements per chunk of [`elementwise_chunked`] (its stack copies are `MAX_ARITY` of these).
const CHUNK_ELEMS: usize = 64;

/// An elementwise instruction whose output shares its range with arguments, for opcodes
/// without a scalar function: each chunk of every argument is copied to the stack, then the
/// reference kernel writes the output chunk. Elementwise kernels compute each element from
/// the same-index argument elements only, so the bits are those of one whole-buffer call.
fn elementwise_chunked(
    op: Opcode,
    attr: Attr,
    math: MathProfile,
    views: &[Option<TensorView>],
    arena: &mut [f32],
    out: &TensorView,
    instr: u32,
) -> Result<(), RunError> {
    let bad = RunError::Inconsistent { instr };
    let mut copies = [[0.0f32; CHUNK_ELEMS]; MAX_ARITY];
    let mut start = 0usize;
    while start < out.elems {
        let len = (out.elems.saturating_sub(start)).min(CHUNK_ELEMS);
        let shape = Shape::new(&[len]).map_err(|e| RunError::Kernel {
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
        eval(
            op,
            attr.with_target(shape),
            math,
            args.get(..arity).ok_or(bad)?,
            shapes.get(..arity).ok_or(bad)?,
            dst,
        )
        .map_err(|error| RunError::Kernel { instr, error })?;
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
            elementwise_chunked(op, Attr::NONE, m, views, &mut arena, &a, 0).unwrap();
            let got: Vec<u32> = arena[..n].iter().map(|x| x.to_bits()).collect();
            let want: Vec<u32> = expect.iter().map(|x| x.to_bits()).collect();
            assert_eq!(got, want, "{op}");
        }
    }
}
