//! The parsed plan: a validated, zero-copy view of the plan's bytes. Records are decoded on
//! access with the `tapeplan_core::format` decoders; nothing is copied or cached.

use core::ops::Range;

use tapeplan_core::format::{
    decode_name, BindingKind, BindingRecord, EntryRecord, Header, Instr, InstrError, InstrRecord,
    Sections, TensorKind, TensorRecord, ALL_ENTRIES, BINDING_RECORD_BYTES, ENTRY_RECORD_BYTES,
    HEADER_BYTES, INSTR_RECORD_BYTES, NAME_BYTES, TENSOR_RECORD_BYTES,
};
use tapeplan_core::{
    ops, ArithProfile, BuildOps, MathProfile, OpSet, Opcode, Ops, Shape, MAX_ARITY, MAX_RANK,
};

use crate::error::{DecodeError, ParseError, ValidateError};
use crate::validate::{self, Scratch};
use crate::Limits;

// Every count and offset of the format is a `u32`; the runtime needs `usize` to hold them.
const _: () = assert!(
    usize::BITS >= 32,
    "tapeplan-runtime needs a usize of at least 32 bits"
);

/// Lossless on every supported target (see the assertion above).
#[inline]
pub(crate) const fn us(x: u32) -> usize {
    x as usize
}

/// An entry of a plan (`forward`, `train_step`, …), as found by [`Plan::entry`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryId(pub(crate) u32);

impl EntryId {
    /// The entry's position among the plan's entry records.
    pub fn index(self) -> usize {
        us(self.0)
    }
}

/// A tensor record, checked and turned into arena terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TensorView {
    /// The first element's offset in the arena.
    pub offset: usize,
    /// The element count.
    pub elems: usize,
    /// One past the last element (`offset + elems`, checked).
    pub end: usize,
    /// The shape.
    pub shape: Shape,
    /// The region.
    pub kind: TensorKind,
}

impl TensorView {
    /// Checks a tensor record's own fields (not its region) and converts it.
    pub(crate) fn new(rec: &TensorRecord, tensor: u32) -> Result<TensorView, ParseError> {
        if rec.reserved != 0 {
            return Err(DecodeError::TensorReserved { tensor }.into());
        }
        let rank = usize::from(rec.rank);
        if rank > MAX_RANK {
            return Err(DecodeError::TensorRank {
                tensor,
                rank: rec.rank,
            }
            .into());
        }
        if rec.dims.iter().skip(rank).any(|&d| d != 0) {
            return Err(DecodeError::TensorDims { tensor }.into());
        }
        let shape =
            Shape::from_u32(rank, rec.dims).map_err(|_| DecodeError::TensorTooLarge { tensor })?;
        let kind = TensorKind::from_u8(rec.kind).ok_or(DecodeError::TensorKind {
            tensor,
            kind: rec.kind,
        })?;
        let offset = us(rec.offset_elems);
        let elems = shape.elems();
        let end = offset
            .checked_add(elems)
            .ok_or(ValidateError::TensorOutsideRegion {
                tensor,
                offset_elems: rec.offset_elems,
                elems: u32::try_from(elems).unwrap_or(u32::MAX),
                kind,
            })?;
        Ok(TensorView {
            offset,
            elems,
            end,
            shape,
            kind,
        })
    }
}

/// A named tensor of a plan: a parameter, or an input, output or update of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding<'a> {
    /// The binding's name.
    pub name: &'a str,
    /// Parameter, input, output or update.
    pub kind: BindingKind,
    /// The entry it belongs to; `None` for parameters (they belong to every entry).
    pub entry: Option<EntryId>,
    /// The tensor's shape.
    pub shape: Shape,
    /// The tensor's first element in the arena.
    pub offset_elems: usize,
    /// The tensor's element count (`shape.elems()`).
    pub elems: usize,
    /// The tensor's region. An update in the scratch region is a guarded update.
    pub tensor_kind: TensorKind,
}

impl Binding<'_> {
    /// The tensor's elements in the arena: `offset_elems..offset_elems + elems`. For a
    /// parameter or update this range also indexes [`crate::Session::persistent`].
    pub fn range(&self) -> Range<usize> {
        self.offset_elems..self.offset_elems.saturating_add(self.elems)
    }
}

/// The byte offsets of the four record arrays, computed from the header's counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub n_tensors: usize,
    pub n_instrs: usize,
    pub n_entries: usize,
    pub n_bindings: usize,
    pub instrs_at: usize,
    pub entries_at: usize,
    pub bindings_at: usize,
    pub attrs_at: usize,
    pub end_at: usize,
}

impl Layout {
    /// `None` when an offset overflows.
    pub(crate) fn new(h: &Header) -> Option<Layout> {
        let n_tensors = us(h.n_tensors);
        let n_instrs = us(h.n_instrs);
        let n_entries = us(h.n_entries);
        let n_bindings = us(h.n_bindings);
        let at = Sections::of(h)?;
        Some(Layout {
            n_tensors,
            n_instrs,
            n_entries,
            n_bindings,
            instrs_at: at.instrs_at,
            entries_at: at.entries_at,
            bindings_at: at.bindings_at,
            attrs_at: at.attrs_at,
            end_at: at.end_at,
        })
    }
}

/// A validated plan: a zero-copy view of its bytes.
///
/// Only [`Plan::parse`] and its variants make one, and they check every rule of
/// `docs/plan-format.md` first, so a `Plan` can be bound to an arena and run. Records are
/// decoded from the bytes on every access; the struct itself is a few words and `Copy`.
#[derive(Clone, Copy, Debug)]
pub struct Plan<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) header: Header,
    pub(crate) layout: Layout,
}

#[inline(never)]
fn record(bytes: &[u8], at: usize, index: usize, size: usize) -> Option<&[u8]> {
    let start = at.checked_add(index.checked_mul(size)?)?;
    bytes.get(start..start.checked_add(size)?)
}

/// [`record`] as an array of its size: a record decoder inlined over it reads each field
/// without a bounds check (what `Session::run` does for every instruction of every step).
#[inline(always)]
fn record_array<const N: usize>(bytes: &[u8], at: usize, index: usize) -> Option<&[u8; N]> {
    record(bytes, at, index, N)?.try_into().ok()
}

/// The name field at the start of a record, borrowed from the plan's bytes.
pub(crate) fn name_in(rec: &[u8]) -> Option<&str> {
    let field: &[u8; NAME_BYTES] = rec.get(..NAME_BYTES)?.try_into().ok()?;
    decode_name(field)
}

impl<'a> Plan<'a> {
    /// Decodes and validates a plan with the spec's [`Limits::DEFAULT`].
    ///
    /// The validator's working memory ([`Scratch`] for 4096 tensors, about 28 KiB) lives on the
    /// stack for the duration of the call; on a device with a small stack use
    /// [`Plan::parse_with_scratch`] and keep the scratch elsewhere.
    ///
    /// # Errors
    /// [`ParseError`] naming the first rule of `docs/plan-format.md` the bytes break.
    pub fn parse(bytes: &'a [u8]) -> Result<Plan<'a>, ParseError> {
        Plan::parse_with_limits(bytes, &Limits::DEFAULT)
    }

    /// Decodes and validates a plan under tighter caps than the spec's (caps larger than
    /// [`Limits::DEFAULT`] are treated as the spec's).
    ///
    /// # Errors
    /// As [`Plan::parse`]; [`DecodeError::TooMany`] when a section exceeds its cap.
    pub fn parse_with_limits(bytes: &'a [u8], limits: &Limits) -> Result<Plan<'a>, ParseError> {
        let mut scratch = Scratch::<{ validate::DEFAULT_SCRATCH_TENSORS }>::new();
        Plan::parse_with_scratch(bytes, limits, &mut scratch)
    }

    /// Decodes and validates a plan using caller-provided working memory. A scratch sized for
    /// `N` tensors caps the plan's tensors at `N` (besides `limits`). The scratch's contents
    /// before and after the call mean nothing.
    ///
    /// # Errors
    /// As [`Plan::parse_with_limits`].
    pub fn parse_with_scratch<const N: usize>(
        bytes: &'a [u8],
        limits: &Limits,
        scratch: &mut Scratch<N>,
    ) -> Result<Plan<'a>, ParseError> {
        validate::validate::<BuildOps, N>(bytes, limits, scratch)
    }

    /// [`Plan::parse_with_scratch`] for a selective build over the op set `O` (see
    /// `tapeplan_core::Ops` and `docs/selective-build.md`): only `O`'s shape rules and attribute
    /// decoders are linked, and a plan using an opcode outside `O` is refused. Run it with
    /// [`crate::Session::bind_selective`] over the same set.
    ///
    /// # Errors
    /// As [`Plan::parse_with_limits`]; [`ValidateError::ShapeRule`] with
    /// `OpError::Unsupported` naming the first instruction whose opcode is outside `O`.
    pub fn parse_selective<O: Ops, const N: usize>(
        bytes: &'a [u8],
        limits: &Limits,
        scratch: &mut Scratch<N>,
    ) -> Result<Plan<'a>, ParseError> {
        validate::validate::<O, N>(bytes, limits, scratch)
    }

    /// The opcodes the plan's instructions use: the op set of a selective build that runs it
    /// (`tapeplan_core::op_set!`, [`Plan::parse_selective`]; a firmware's build script derives
    /// it from the plan's bytes, see `docs/selective-build.md`).
    pub fn op_set(&self) -> OpSet {
        (0..self.n_instrs())
            .filter_map(|k| self.instr_record(k))
            .filter_map(|r| Opcode::from_u8(r.opcode))
            .collect()
    }

    /// Decodes and validates a plan of up to the spec's [`Limits::DEFAULT`] tensors, with the
    /// validator's working memory on the heap when the plan needs more than [`Plan::parse`]'s
    /// stack scratch ([`crate::DEFAULT_SCRATCH_TENSORS`]); for hosts (feature `alloc`).
    ///
    /// # Errors
    /// As [`Plan::parse`].
    #[cfg(feature = "alloc")]
    pub fn parse_alloc(bytes: &'a [u8]) -> Result<Plan<'a>, ParseError> {
        match Plan::parse(bytes) {
            Err(ParseError::Decode(DecodeError::ScratchTooSmall { .. })) => {
                let mut scratch =
                    alloc::boxed::Box::new(Scratch::<{ crate::MAX_SCRATCH_TENSORS }>::new());
                Plan::parse_with_scratch(bytes, &Limits::DEFAULT, &mut scratch)
            }
            other => other,
        }
    }

    /// The plan's bytes, as given to [`Plan::parse`].
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The arena the plan needs, in `f32` elements.
    pub fn arena_elems(&self) -> usize {
        us(self.header.arena_elems)
    }

    /// The arena the plan needs, in bytes (`4 · arena_elems`, saturating).
    pub fn arena_bytes(&self) -> usize {
        self.arena_elems().saturating_mul(4)
    }

    /// The persistent region `[0, persistent_elems)` of the arena, in elements: parameters and
    /// their updates; it keeps its contents across entries and steps.
    pub fn persistent_elems(&self) -> usize {
        us(self.header.persistent_elems)
    }

    /// The math profile the plan records (header flag bit 0): every transcendental kernel runs
    /// under it, so the results match the oracle's under the same profile.
    pub fn math(&self) -> MathProfile {
        MathProfile::from_flags(self.header.flags)
    }

    /// The arithmetic profile the plan records (header flag bit 1): every matrix product runs
    /// under it, so the results match the oracle's under the same profile.
    pub fn arith(&self) -> ArithProfile {
        ArithProfile::from_flags(self.header.flags)
    }

    /// The plan's identity (a hash of the model and hyperparameters), for checkpoints.
    pub fn plan_id(&self) -> u32 {
        self.header.plan_id
    }

    /// The plan's checksum: its header's `crc32` (bytes 12..16, CRC-32/ISO-HDLC over every other
    /// byte; `docs/plan-format.md`). A transcript's `bind` line carries it.
    pub fn crc32(&self) -> u32 {
        self.header.crc32
    }

    /// Whether `other` is this plan: the same identity (`plan_id`, CRC-32, size) and the same
    /// bytes (compared only when the two are not the same borrowed buffer; while both plans
    /// borrow it, a buffer cannot change). A copy of a plan's bytes elsewhere is the same plan.
    pub fn same_plan(&self, other: &Plan<'_>) -> bool {
        self.header.plan_id == other.header.plan_id
            && self.header.crc32 == other.header.crc32
            && self.bytes.len() == other.bytes.len()
            && (core::ptr::eq(self.bytes, other.bytes) || self.bytes == other.bytes)
    }

    /// The number of tensor records.
    pub fn n_tensors(&self) -> usize {
        self.layout.n_tensors
    }

    /// The number of instruction records.
    pub fn n_instrs(&self) -> usize {
        self.layout.n_instrs
    }

    /// The number of binding records.
    pub fn n_bindings(&self) -> usize {
        self.layout.n_bindings
    }

    /// The number of entries (at least 1).
    pub fn n_entries(&self) -> usize {
        self.layout.n_entries
    }

    pub(crate) fn tensor_record(&self, index: usize) -> Option<TensorRecord> {
        record_array::<TENSOR_RECORD_BYTES>(self.bytes, HEADER_BYTES, index)
            .map(|r| TensorRecord::decode(r))
    }

    pub(crate) fn tensor_view(&self, index: u32) -> Option<TensorView> {
        if us(index) >= self.layout.n_tensors {
            return None;
        }
        TensorView::new(&self.tensor_record(us(index))?, index).ok()
    }

    /// The work entry `entry` does, in element operations: the sum over its instructions of
    /// [`tapeplan_core::ops::work`] (a matrix product `[m, k] x [k, n]` counts `m·k·n`; every
    /// other instruction the elements of its arguments and output), saturating at `u64::MAX`.
    /// A measure for watchdog budgets, see [`crate::Limits::max_work_per_entry`]. An unknown
    /// opcode counts as the elements of its output and arguments.
    pub fn entry_work(&self, entry: EntryId) -> u64 {
        let Some(range) = self.entry_range(entry) else {
            return 0;
        };
        let shape = |t: u32| self.tensor_view(t).map_or(Shape::SCALAR, |v| v.shape);
        let mut work = 0u64;
        for k in range {
            let Some(rec) = self.instr_record(k) else {
                continue;
            };
            let arity = usize::from(rec.n_args).min(rec.args.len());
            let mut args = [Shape::SCALAR; MAX_ARITY];
            for (a, &t) in args.iter_mut().zip(rec.args.iter().take(arity)) {
                *a = shape(t);
            }
            let args = args.get(..arity).unwrap_or(&[]);
            let cost = match tapeplan_core::Opcode::from_u8(rec.opcode) {
                Some(op) => ops::work(op, args, shape(rec.out)),
                None => args.iter().fold(shape(rec.out).elems() as u64, |acc, a| {
                    acc.saturating_add(a.elems() as u64)
                }),
            };
            work = work.saturating_add(cost);
        }
        work
    }

    /// Instruction record `index`, through `tapeplan_core::format`'s decoder: the runtime's one
    /// reader of instruction records (the validator, the work count and the executor's
    /// [`crate::program`] all call it), so a change to the record's bytes lands here.
    pub(crate) fn instr_record(&self, index: usize) -> Option<InstrRecord> {
        if index >= self.layout.n_instrs {
            return None;
        }
        record_array::<INSTR_RECORD_BYTES>(self.bytes, self.layout.instrs_at, index)
            .map(|r| InstrRecord::decode(r))
    }

    /// The attribute section's bytes.
    pub(crate) fn attr_section(&self) -> &'a [u8] {
        self.bytes
            .get(self.layout.attrs_at..self.layout.end_at)
            .unwrap_or(&[])
    }

    /// Instruction `index` decoded with its typed attribute by the format's one decoder
    /// ([`Instr::decode`]); `None` past the instruction section or for an output tensor index
    /// past the tensor section.
    pub(crate) fn instr(&self, index: usize) -> Option<Result<Instr, InstrError>> {
        let rec = self.instr_record(index)?;
        let out = self.tensor_view(rec.out)?.shape;
        Some(Instr::decode(&rec, self.attr_section(), out))
    }

    pub(crate) fn entry_bytes(&self, index: usize) -> Option<&'a [u8]> {
        if index >= self.layout.n_entries {
            return None;
        }
        record(
            self.bytes,
            self.layout.entries_at,
            index,
            ENTRY_RECORD_BYTES,
        )
    }

    pub(crate) fn entry_record(&self, index: usize) -> Option<EntryRecord> {
        self.entry_bytes(index).map(EntryRecord::decode)
    }

    #[inline(never)]
    pub(crate) fn binding_bytes(&self, index: usize) -> Option<&'a [u8]> {
        if index >= self.layout.n_bindings {
            return None;
        }
        record(
            self.bytes,
            self.layout.bindings_at,
            index,
            BINDING_RECORD_BYTES,
        )
    }

    pub(crate) fn binding_record(&self, index: usize) -> Option<BindingRecord> {
        self.binding_bytes(index).map(BindingRecord::decode)
    }

    /// The instruction range `first..first + n` of an entry.
    pub(crate) fn entry_range(&self, entry: EntryId) -> Option<Range<usize>> {
        let rec = self.entry_record(entry.index())?;
        let first = us(rec.first_instr);
        let end = first.checked_add(us(rec.n_instrs))?;
        if end > self.layout.n_instrs {
            return None;
        }
        Some(first..end)
    }

    /// Every entry, in record order.
    pub fn entries(&self) -> impl Iterator<Item = EntryId> + 'a {
        (0..self.header.n_entries).map(EntryId)
    }

    /// The entry of this name.
    pub fn entry(&self, name: &str) -> Option<EntryId> {
        self.entries()
            .find(|&e| self.entry_name(e).is_some_and(|n| n == name))
    }

    /// The name of an entry; `None` when `entry` is not an entry of this plan.
    pub fn entry_name(&self, entry: EntryId) -> Option<&'a str> {
        name_in(self.entry_bytes(entry.index())?)
    }

    /// The number of instructions an entry runs; `None` when `entry` is not an entry of this
    /// plan.
    pub fn entry_instrs(&self, entry: EntryId) -> Option<usize> {
        self.entry_range(entry).map(|r| r.len())
    }

    /// The binding record at `index`, resolved.
    pub fn binding(&self, index: usize) -> Option<Binding<'a>> {
        let raw = self.binding_bytes(index)?;
        let rec = BindingRecord::decode(raw);
        let name = name_in(raw)?;
        let kind = BindingKind::from_u8(rec.kind)?;
        let entry = if rec.entry == ALL_ENTRIES {
            None
        } else {
            Some(EntryId(rec.entry))
        };
        let t = self.tensor_view(rec.tensor)?;
        Some(Binding {
            name,
            kind,
            entry,
            shape: t.shape,
            offset_elems: t.offset,
            elems: t.elems,
            tensor_kind: t.kind,
        })
    }

    /// Every binding, in record order.
    pub fn bindings(&self) -> impl Iterator<Item = Binding<'a>> + 'a {
        let plan = *self;
        (0..self.layout.n_bindings).filter_map(move |i| plan.binding(i))
    }

    fn bindings_of(
        &self,
        kind: BindingKind,
        entry: Option<EntryId>,
    ) -> impl Iterator<Item = Binding<'a>> + 'a {
        self.bindings()
            .filter(move |b| b.kind == kind && b.entry == entry)
    }

    fn find(&self, kind: BindingKind, entry: Option<EntryId>, name: &str) -> Option<Binding<'a>> {
        self.bindings_of(kind, entry).find(|b| b.name == name)
    }

    /// The parameters (shared by every entry), in record order.
    pub fn parameters(&self) -> impl Iterator<Item = Binding<'a>> + 'a {
        self.bindings_of(BindingKind::Parameter, None)
    }

    /// The parameter of this name.
    pub fn parameter(&self, name: &str) -> Option<Binding<'a>> {
        self.find(BindingKind::Parameter, None, name)
    }

    /// An entry's inputs, which the caller sets before running it.
    pub fn inputs(&self, entry: EntryId) -> impl Iterator<Item = Binding<'a>> + 'a {
        self.bindings_of(BindingKind::Input, Some(entry))
    }

    /// An entry's input of this name.
    pub fn input(&self, entry: EntryId, name: &str) -> Option<Binding<'a>> {
        self.find(BindingKind::Input, Some(entry), name)
    }

    /// An entry's outputs, which the caller reads after running it.
    pub fn outputs(&self, entry: EntryId) -> impl Iterator<Item = Binding<'a>> + 'a {
        self.bindings_of(BindingKind::Output, Some(entry))
    }

    /// An entry's output of this name.
    pub fn output(&self, entry: EntryId, name: &str) -> Option<Binding<'a>> {
        self.find(BindingKind::Output, Some(entry), name)
    }

    /// An entry's updates: the parameters it rewrites in place (same names, same ranges).
    pub fn updates(&self, entry: EntryId) -> impl Iterator<Item = Binding<'a>> + 'a {
        self.bindings_of(BindingKind::Update, Some(entry))
    }
}
