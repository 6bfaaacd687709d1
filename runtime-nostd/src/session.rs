//! The runtime's API: a plan bound to the caller's arena. Running is [`crate::exec`]'s.

use core::cell::Cell;
use core::marker::PhantomData;
use core::ops::Range;

use tapeplan_core::format::{BindingKind, MAX_REGISTERS};
use tapeplan_core::{BuildOps, Opcode, Ops};

use crate::error::ExecError;
use crate::exec::{guarded, run_entry, Bound, BoundInputs, Records};
use crate::fused::{Registers, TILE_ELEMS};
use crate::plan::{Binding, EntryId, Plan};
use crate::program::{decode_instr, mark_bound, BoundInput, Decoded, Program, MAX_BOUND_INPUTS};
#[cfg(feature = "decoded-run")]
use crate::program::{DecodedPlan, PlanIdentity};

/// How many entries' guard answers a session with a decoded plan keeps (the bits of a `u64`).
#[cfg(feature = "decoded-run")]
const GUARD_BITS: usize = 64;

/// A plan bound to an arena the caller owns: load parameters, set inputs, run entries, read
/// outputs. Nothing is allocated; every read and write stays inside `arena[..arena_elems]`.
///
/// The arena's layout is the plan's: the persistent region `[0, persistent_elems)` holds the
/// parameters (and keeps them across runs); the rest is scratch that every run reuses, so set
/// an entry's inputs right before running it and read its outputs right after.
///
/// `O` is the op set its runs dispatch over: the build's whole vocabulary by default
/// ([`BuildOps`]); a selective build ([`Session::bind_selective`], `docs/selective-build.md`)
/// names its plan's opcodes so that only their kernels are linked.
#[derive(Debug)]
pub struct Session<'p, 'a, O: Ops = BuildOps> {
    plan: &'p Plan<'p>,
    arena: &'a mut [f32],
    /// The register slots of fused chains, one tile each (empty without feature `fusion`):
    /// kept here so that a chain does not clear them on every run.
    regs: Registers,
    #[cfg(feature = "decoded-run")]
    /// Every instruction of the plan, decoded ([`Session::with_decoded`]); empty: [`Session::run`]
    /// reads the records.
    decoded: &'a [Decoded],
    #[cfg(feature = "decoded-run")]
    /// Whether each of the plan's first 64 entries is guarded (bit `e` for entry `e`), asked
    /// once in [`Session::with_decoded`] so that [`Session::run`] does not scan the binding
    /// records after every run, as [`Session::run_program`] does not; later entries ask.
    guarded_entries: u64,
    ops: PhantomData<O>,
}

impl<'p, 'a> Session<'p, 'a> {
    /// Binds `plan` to `arena`, leaving the arena's contents as they are, so parameters
    /// already in the persistent region (a previous session, a `static` buffer, a restored
    /// checkpoint) are kept. Elements past `arena_elems` are never touched.
    ///
    /// # Errors
    /// [`ExecError::ArenaTooSmall`] when `arena.len() < plan.arena_elems()`.
    pub fn bind(plan: &'p Plan<'p>, arena: &'a mut [f32]) -> Result<Self, ExecError> {
        Session::bind_selective(plan, arena)
    }

    /// [`Session::bind`] for a selective build: its runs dispatch over the op set `O` only
    /// (see `tapeplan_core::Ops`), so the kernels of other opcodes are not linked. Parse the
    /// plan with [`Plan::parse_selective`] over the same set, which refuses a plan using
    /// another opcode, naming it; an instruction outside `O` that runs anyway answers
    /// [`ExecError::Kernel`] with `OpError::Unsupported`.
    ///
    /// # Errors
    /// As [`Session::bind`].
    pub fn bind_selective<O: Ops>(
        plan: &'p Plan<'p>,
        arena: &'a mut [f32],
    ) -> Result<Session<'p, 'a, O>, ExecError> {
        let needed_elems = plan.arena_elems();
        if arena.len() < needed_elems {
            return Err(ExecError::ArenaTooSmall {
                needed_elems,
                found_elems: arena.len(),
            });
        }
        Ok(Session {
            plan,
            arena,
            regs: [[0.0; TILE_ELEMS]; MAX_REGISTERS],
            #[cfg(feature = "decoded-run")]
            decoded: &[],
            #[cfg(feature = "decoded-run")]
            guarded_entries: 0,
            ops: PhantomData,
        })
    }

    /// Binds `plan` to `arena` and sets `arena[..arena_elems]` to `+0.0`: parameters, too.
    ///
    /// # Errors
    /// As [`Session::bind`].
    pub fn bind_zeroed(plan: &'p Plan<'p>, arena: &'a mut [f32]) -> Result<Self, ExecError> {
        let s = Session::bind(plan, arena)?;
        let n = s.plan.arena_elems();
        if let Some(a) = s.arena.get_mut(..n) {
            a.fill(0.0);
        }
        Ok(s)
    }
}

impl<'p, 'a, O: Ops> Session<'p, 'a, O> {
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

    fn check_entry(&self, entry: EntryId) -> Result<(), ExecError> {
        if entry.index() < self.plan.n_entries() {
            Ok(())
        } else {
            Err(ExecError::UnknownEntry { entry: entry.0 })
        }
    }

    fn copy_in(dst: &mut [f32], values: &[f32]) -> Result<(), ExecError> {
        if dst.len() != values.len() {
            return Err(ExecError::LengthMismatch {
                expected_elems: dst.len(),
                found_elems: values.len(),
            });
        }
        dst.copy_from_slice(values);
        Ok(())
    }

    fn param(&self, name: &str) -> Result<Binding<'p>, ExecError> {
        self.plan.parameter(name).ok_or(ExecError::UnknownName {
            kind: BindingKind::Parameter,
        })
    }

    /// Copies a parameter's values (row-major, `shape.elems()` of them) into the arena.
    ///
    /// # Errors
    /// [`ExecError::UnknownName`] for no such parameter; [`ExecError::LengthMismatch`] when
    /// `values.len()` is not its element count.
    pub fn load_parameter(&mut self, name: &str, values: &[f32]) -> Result<(), ExecError> {
        let b = self.param(name)?;
        Self::copy_in(self.slice_mut(&b), values)
    }

    /// A parameter's current values.
    ///
    /// # Errors
    /// [`ExecError::UnknownName`] for no such parameter.
    pub fn parameter(&self, name: &str) -> Result<&[f32], ExecError> {
        let b = self.param(name)?;
        Ok(self.slice(&b))
    }

    /// A parameter's values, writable in place.
    ///
    /// # Errors
    /// [`ExecError::UnknownName`] for no such parameter.
    pub fn parameter_mut(&mut self, name: &str) -> Result<&mut [f32], ExecError> {
        let b = self.param(name)?;
        Ok(self.slice_mut(&b))
    }

    fn input_binding(&self, entry: EntryId, name: &str) -> Result<Binding<'p>, ExecError> {
        self.check_entry(entry)?;
        self.plan.input(entry, name).ok_or(ExecError::UnknownName {
            kind: BindingKind::Input,
        })
    }

    /// Copies an input's values into the arena. Inputs live in scratch, which every run
    /// reuses: set all of an entry's inputs right before running it.
    ///
    /// # Errors
    /// [`ExecError::UnknownEntry`], [`ExecError::UnknownName`] for no such input of `entry`,
    /// [`ExecError::LengthMismatch`] when `values.len()` is not its element count.
    pub fn set_input(
        &mut self,
        entry: EntryId,
        name: &str,
        values: &[f32],
    ) -> Result<(), ExecError> {
        let b = self.input_binding(entry, name)?;
        Self::copy_in(self.slice_mut(&b), values)
    }

    /// Copies class labels (integers stored as `f32`, as `one_hot` reads them) into an input
    /// after checking each against every `one_hot` of `entry` that reads the input: a label must
    /// be one of `0.0, 1.0, …, classes − 1` (`-0.0` counts as `0`). `one_hot` itself turns any
    /// other value into a row of zeros, silently; this is the checked way in for data the caller
    /// did not make. An input no `one_hot` reads is copied unchecked, as [`Session::set_input`].
    ///
    /// # Errors
    /// As [`Session::set_input`]; [`ExecError::BadLabel`] naming the first bad label, in which
    /// case nothing is written.
    pub fn set_labels(
        &mut self,
        entry: EntryId,
        name: &str,
        labels: &[f32],
    ) -> Result<(), ExecError> {
        let b = self.check_labels(entry, name, labels)?;
        Self::copy_in(self.slice_mut(&b), labels)
    }

    /// [`Session::set_labels`]'s check without the copy: for labels that
    /// [`Session::run_program_with_inputs`] reads from the caller's memory, where nothing checks
    /// them (check a pool of labels once, then run from it). Returns the input's binding.
    ///
    /// # Errors
    /// [`ExecError::UnknownEntry`], [`ExecError::UnknownName`] for no such input of `entry`,
    /// [`ExecError::BadLabel`] naming the first bad label. Any length passes: the length is
    /// checked where the labels are used.
    pub fn check_labels(
        &self,
        entry: EntryId,
        name: &str,
        labels: &[f32],
    ) -> Result<Binding<'p>, ExecError> {
        let b = self.input_binding(entry, name)?;
        if let Some(classes) = self.one_hot_classes(entry, &b)? {
            // Classes are at most 2^24 (one_hot's shape rule), so every index is an exact f32
            // and `l as u32` is exact for the labels that pass the range test.
            let bad = labels
                .iter()
                .position(|&l| !(l >= 0.0 && l < classes as f32 && (l as u32) as f32 == l));
            if let Some(i) = bad {
                return Err(ExecError::BadLabel {
                    index: u32::try_from(i).unwrap_or(u32::MAX),
                    value_bits: labels.get(i).map_or(0, |l| l.to_bits()),
                    classes: u32::try_from(classes).unwrap_or(u32::MAX),
                });
            }
        }
        Ok(b)
    }

    /// The fewest classes of any `one_hot` of `entry` reading input `b`; `None` if none does.
    fn one_hot_classes(&self, entry: EntryId, b: &Binding<'_>) -> Result<Option<usize>, ExecError> {
        let mut fewest: Option<usize> = None;
        for k in self.entry_range(entry)? {
            let Some(rec) = self.plan.instr_record(k) else {
                continue;
            };
            if rec.opcode != Opcode::OneHot.to_u8() {
                continue;
            }
            let reads_b = self
                .plan
                .tensor_view(rec.args[0])
                .is_some_and(|v| v.offset == b.offset_elems && v.kind == b.tensor_kind);
            let classes = self.plan.tensor_view(rec.out).and_then(|v| v.shape.dim(1));
            if let (true, Some(c)) = (reads_b, classes) {
                fewest = Some(fewest.map_or(c, |f| f.min(c)));
            }
        }
        Ok(fewest)
    }

    /// An input's buffer, to fill in place instead of copying.
    ///
    /// # Errors
    /// [`ExecError::UnknownEntry`], [`ExecError::UnknownName`] for no such input of `entry`.
    pub fn input_mut(&mut self, entry: EntryId, name: &str) -> Result<&mut [f32], ExecError> {
        let b = self.input_binding(entry, name)?;
        Ok(self.slice_mut(&b))
    }

    /// An output's values, as the last run of `entry` left them (meaningful only until another
    /// entry runs, or inputs are set, since outputs may live in scratch).
    ///
    /// # Errors
    /// [`ExecError::UnknownEntry`], [`ExecError::UnknownName`] for no such output of `entry`.
    pub fn output(&self, entry: EntryId, name: &str) -> Result<&[f32], ExecError> {
        self.check_entry(entry)?;
        let b = self
            .plan
            .output(entry, name)
            .ok_or(ExecError::UnknownName {
                kind: BindingKind::Output,
            })?;
        Ok(self.slice(&b))
    }

    /// Copies `values` into the tensor of `binding` (an input or parameter of this session's
    /// plan, found once with [`Plan::input`] or [`Plan::parameter`]): [`Session::set_input`]
    /// without the lookup by name, for loops that run an entry many times.
    ///
    /// # Errors
    /// [`ExecError::LengthMismatch`] when `values.len()` is not the binding's element count (or
    /// the binding does not lie in this session's arena).
    pub fn write_binding(
        &mut self,
        binding: &Binding<'_>,
        values: &[f32],
    ) -> Result<(), ExecError> {
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
    /// plan's records again: what a step loop over a small model saves per instruction. The
    /// [`Program`] borrows this session's plan (and `buf`), not the session.
    ///
    /// With feature `catalog`, a `fill`, or a `broadcast` that only reshapes (a bias `[n]` to
    /// `[1, n]`), read only by unfused elementwise instructions is left out of the program:
    /// its readers read the fill's value as a constant, or the broadcast's source in place (the
    /// same bits; W3's step 6 of 40 instructions, 0.93-0.94 of its time). Its scratch range is
    /// then not written: read outputs, updates and parameters, not scratch, after a run.
    ///
    /// # Errors
    /// [`ExecError::UnknownEntry`]; [`ExecError::LengthMismatch`] when `buf` holds fewer than
    /// the entry's instructions (`expected_elems` is the count needed).
    pub fn decode<'b>(
        &self,
        entry: EntryId,
        buf: &'b mut [Decoded],
    ) -> Result<Program<'b>, ExecError>
    where
        'p: 'b,
    {
        let instrs = self.decode_into(entry, buf)?;
        Ok(Program {
            plan: self.plan,
            entry,
            instrs: self.with_stand_ins(instrs),
            bound: [BoundInput::default(); MAX_BOUND_INPUTS],
            n_bound: 0,
            guarded: guarded(self.plan, entry),
        })
    }

    /// A decoded entry with its `fill`s and reshaping `broadcast`s replaced by stand-ins where
    /// the catalog runs every reader ([`crate::program::stand_ins`]); as it is without the
    /// catalog.
    fn with_stand_ins<'b>(&self, instrs: &'b mut [Decoded]) -> &'b [Decoded] {
        #[cfg(feature = "catalog")]
        {
            let kept = crate::program::stand_ins::<O>(self.plan, instrs);
            instrs.get(..kept).unwrap_or_default()
        }
        #[cfg(not(feature = "catalog"))]
        {
            instrs
        }
    }

    /// `entry`'s instructions decoded into the front of `buf` (see [`Session::decode`]).
    fn decode_into<'b>(
        &self,
        entry: EntryId,
        buf: &'b mut [Decoded],
    ) -> Result<&'b mut [Decoded], ExecError> {
        let range = self.entry_range(entry)?;
        let (n, found_elems) = (range.len(), buf.len());
        let slots = buf.get_mut(..n).ok_or(ExecError::LengthMismatch {
            expected_elems: n,
            found_elems,
        })?;
        for (slot, k) in slots.iter_mut().zip(range) {
            *slot = decode_instr(self.plan, k)?;
        }
        #[cfg(all(feature = "catalog", feature = "fusion"))]
        crate::fused::mark_one_tile::<O>(slots, self.plan.math());
        Ok(slots)
    }

    /// [`Session::decode`], with the inputs named in `inputs` read from the caller's memory
    /// when the program runs ([`Session::run_program_with_inputs`]) instead of copied into the
    /// arena first: a step loop over a pool of batches hands each batch's slices over as they
    /// are (W2's 200 KB batch is no longer copied every step). Each instruction that reads an
    /// input before anything is written over its arena range reads the caller's slice; a kernel
    /// that reads the arena only (a reference kernel, a fused chain) gets the input copied into
    /// its arena range first, once a run, which is what [`Session::set_input`] did. The bits are
    /// those of setting the inputs and running [`Session::run_program`].
    ///
    /// Labels read this way are not checked ([`Session::set_labels`] checks them): check a
    /// pool once with [`Session::check_labels`].
    ///
    /// # Errors
    /// As [`Session::decode`]; [`ExecError::UnknownName`] when `entry` has no input of one of
    /// the names; [`ExecError::CannotBindInputs`] for more than [`MAX_BOUND_INPUTS`] names, or
    /// two inputs whose arena ranges meet.
    pub fn decode_with_inputs<'b>(
        &self,
        entry: EntryId,
        buf: &'b mut [Decoded],
        inputs: &[&str],
    ) -> Result<Program<'b>, ExecError>
    where
        'p: 'b,
    {
        let count = u32::try_from(inputs.len()).unwrap_or(u32::MAX);
        if inputs.len() > MAX_BOUND_INPUTS {
            return Err(ExecError::CannotBindInputs { count });
        }
        let mut bound = [BoundInput::default(); MAX_BOUND_INPUTS];
        for (slot, name) in bound.iter_mut().zip(inputs) {
            let b = self.input_binding(entry, name)?;
            *slot = BoundInput {
                offset: b.offset_elems,
                elems: b.elems,
                copy_at_end: false,
            };
        }
        let n_bound = inputs.len();
        let slots = bound.get_mut(..n_bound).unwrap_or_default();
        for (i, x) in slots.iter().enumerate() {
            let later = slots.get(i.saturating_add(1)..).unwrap_or_default();
            if later
                .iter()
                .any(|y| x.offset < y.end() && y.offset < x.end())
            {
                return Err(ExecError::CannotBindInputs { count });
            }
        }
        let instrs = self.decode_into(entry, buf)?;
        let intact = mark_bound(instrs, slots);
        for (slot, untouched) in slots.iter_mut().zip(intact) {
            // An output (or update) that lies in an input no instruction wrote over.
            slot.copy_at_end = untouched
                && self.plan.bindings().any(|b| {
                    b.entry == Some(entry)
                        && matches!(b.kind, BindingKind::Output | BindingKind::Update)
                        && b.offset_elems < slot.end()
                        && slot.offset < b.range().end
                });
        }
        Ok(Program {
            plan: self.plan,
            entry,
            instrs: self.with_stand_ins(instrs),
            bound,
            n_bound,
            guarded: guarded(self.plan, entry),
        })
    }

    #[cfg(feature = "decoded-run")]
    /// Decodes every instruction of the plan into `buf` (once, e.g. when a model is loaded) for
    /// [`Session::with_decoded`].
    ///
    /// # Errors
    /// [`ExecError::LengthMismatch`] when `buf` holds fewer than the plan's instructions
    /// ([`Plan::n_instrs`]); [`ExecError::Inconsistent`] only if the plan's records contradict
    /// themselves, which validation rules out.
    pub fn decode_all<'b>(&self, buf: &'b mut [Decoded]) -> Result<DecodedPlan<'b>, ExecError> {
        let (n, found_elems) = (self.plan.n_instrs(), buf.len());
        let slots = buf.get_mut(..n).ok_or(ExecError::LengthMismatch {
            expected_elems: n,
            found_elems,
        })?;
        for (k, slot) in slots.iter_mut().enumerate() {
            *slot = decode_instr(self.plan, k)?;
        }
        // Chains never cross an entry's end (validation), so the whole plan marks as each entry.
        #[cfg(all(feature = "catalog", feature = "fusion"))]
        crate::fused::mark_one_tile::<O>(slots, self.plan.math());
        Ok(DecodedPlan {
            identity: PlanIdentity::of(self.plan),
            instrs: slots,
        })
    }

    #[cfg(feature = "decoded-run")]
    /// This session with `decoded` attached: from now on [`Session::run`] runs every entry from
    /// its decoded instructions (as fast as [`Session::run_program`]). Cheap: decode once with
    /// [`Session::decode_all`], attach to every session of the plan.
    ///
    /// # Errors
    /// [`ExecError::ForeignDecoding`] when `decoded` comes from another plan (another
    /// `plan_id`, CRC-32 or length in bytes: a weaker test than [`Session::run_program`]'s, which
    /// compares the bytes; a decoding forged to pass it still reads and writes only inside the
    /// arena, every access being checked).
    pub fn with_decoded(mut self, decoded: DecodedPlan<'a>) -> Result<Self, ExecError> {
        if decoded.identity != PlanIdentity::of(self.plan)
            || decoded.instrs.len() != self.plan.n_instrs()
        {
            return Err(ExecError::ForeignDecoding);
        }
        self.decoded = decoded.instrs;
        self.guarded_entries = self
            .plan
            .entries()
            .take(GUARD_BITS)
            .filter(|&e| guarded(self.plan, e))
            .fold(0, |mask, e| mask | 1u64.checked_shl(e.0).unwrap_or(0));
        Ok(self)
    }

    /// Runs a decoded entry: the same as [`Session::run`] of its entry, with the same bits.
    ///
    /// The program must come from this session's plan: the same plan identity (`plan_id` and
    /// CRC-32) and the same bytes. A program borrows its plan, so the plan's bytes cannot change
    /// under it (see [`Program`]); one decoded from another plan is refused here.
    ///
    /// # Errors
    /// As [`Session::run`]; [`ExecError::ForeignProgram`] when `program` was decoded from
    /// another plan.
    pub fn run_program(&mut self, program: &Program<'_>) -> Result<(), ExecError> {
        if !self.plan.same_plan(program.plan) {
            return Err(ExecError::ForeignProgram {
                entry: program.entry.0,
            });
        }
        self.check_entry(program.entry)?;
        run_entry::<O, _>(
            self.plan,
            self.arena,
            &mut self.regs,
            program.instrs,
            program.entry,
            Some(program.guarded),
        )
    }

    /// [`Session::run_program`] of a program decoded by [`Session::decode_with_inputs`], its
    /// bound inputs' values taken from `inputs` (in the order they were named there, each
    /// `shape.elems()` long) instead of the arena. The same bits as setting each input with
    /// [`Session::set_input`] and running [`Session::run_program`]. The arena ranges of the
    /// bound inputs are left as they were unless a kernel needed them there (so read an
    /// input back from `inputs`, not the session).
    ///
    /// # Errors
    /// As [`Session::run_program`]; [`ExecError::LengthMismatch`] when `inputs` holds another
    /// number of slices than the program binds (`expected_elems` is that number) or a slice's
    /// length is not its input's element count; nothing runs then.
    pub fn run_program_with_inputs(
        &mut self,
        program: &Program<'_>,
        inputs: &[&[f32]],
    ) -> Result<(), ExecError> {
        if !self.plan.same_plan(program.plan) {
            return Err(ExecError::ForeignProgram {
                entry: program.entry.0,
            });
        }
        self.check_entry(program.entry)?;
        let slots = program.bound.get(..program.n_bound).unwrap_or_default();
        if inputs.len() != slots.len() {
            return Err(ExecError::LengthMismatch {
                expected_elems: slots.len(),
                found_elems: inputs.len(),
            });
        }
        for (slot, x) in slots.iter().zip(inputs) {
            if x.len() != slot.elems {
                return Err(ExecError::LengthMismatch {
                    expected_elems: slot.elems,
                    found_elems: x.len(),
                });
            }
        }
        let src = Bound {
            copy_at_end: slots.iter().any(|s| s.copy_at_end),
            instrs: program.instrs,
            inputs: BoundInputs {
                slots,
                values: inputs,
                copied: Cell::new(0),
            },
        };
        run_entry::<O, _>(
            self.plan,
            self.arena,
            &mut self.regs,
            &src,
            program.entry,
            Some(program.guarded),
        )
    }

    /// Runs an entry's instructions in order, each with the kernel catalog's entry for it
    /// ([`crate::catalog`]: scalar, or vectorized with feature `simd`) or, where the catalog
    /// has none, its reference kernel from `tapeplan_core::ops`; either way the bits are the
    /// reference kernels' (so the oracle's). Updates are written in place over their
    /// parameters.
    ///
    /// # Errors
    /// [`ExecError::UnknownEntry`]; [`ExecError::Inconsistent`] or [`ExecError::Kernel`] only if
    /// the plan's records contradict themselves, which validation rules out;
    /// [`ExecError::NonFinite`] when a guarded entry refuses to commit.
    ///
    /// With a `DecodedPlan` attached (feature `decoded-run`: `Session::with_decoded`), it runs
    /// the entry's decoded instructions, as [`Session::run_program`] does; otherwise it reads
    /// each instruction's records as it runs it (no memory for decoded instructions, slower on
    /// small steps).
    pub fn run(&mut self, entry: EntryId) -> Result<(), ExecError> {
        let range = self.entry_range(entry)?;
        #[cfg(feature = "decoded-run")]
        if !self.decoded.is_empty() {
            let instrs = self.decoded.get(range).ok_or(ExecError::ForeignDecoding)?;
            let known = usize::try_from(entry.0)
                .is_ok_and(|e| e < GUARD_BITS)
                .then(|| {
                    self.guarded_entries
                        .checked_shr(entry.0)
                        .is_some_and(|bits| bits & 1 == 1)
                });
            return run_entry::<O, _>(self.plan, self.arena, &mut self.regs, instrs, entry, known);
        }
        let src = Records {
            plan: self.plan,
            range,
        };
        run_entry::<O, _>(self.plan, self.arena, &mut self.regs, &src, entry, None)
    }

    fn entry_range(&self, entry: EntryId) -> Result<Range<usize>, ExecError> {
        self.check_entry(entry)?;
        self.plan
            .entry_range(entry)
            .ok_or(ExecError::UnknownEntry { entry: entry.0 })
    }
}
