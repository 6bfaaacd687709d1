//! The validation gate: every rule of `docs/plan-format.md`, checked before a [`Plan`] exists.
//! Nothing here indexes, unwraps or does unchecked arithmetic on anything derived from the
//! bytes; the lints below hold it to that.
#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::arithmetic_side_effects
)]

use tapeplan_core::format::{decode_attr_in, AttrError};
use tapeplan_core::format::{
    plan_crc, BindingKind, BindingRecord, Header, TensorKind, ALIGN_ELEMS, ALL_ENTRIES,
    BINDING_RECORD_BYTES, ENTRY_RECORD_BYTES, FUSE_NEXT, HEADER_BYTES, INSTR_RECORD_BYTES,
    KNOWN_FLAGS, MAGIC, MAX_CHAIN_INSTRS, MAX_REGISTERS, NO_ARG, TENSOR_RECORD_BYTES, VERSION,
};
use tapeplan_core::ops::infer_in;
use tapeplan_core::{ArithProfile, MathProfile, OpClass, OpSet, Opcode, Ops, Shape, MAX_ARITY};

use crate::error::{DecodeError, FusionRule, Operand, ParseError, Section, ValidateError};
use crate::plan::{name_in, us, Layout, Plan, TensorView};
use crate::Limits;

/// The tensor capacity of the scratch [`Plan::parse`] puts on the stack (about 28 KiB): 4096
/// tensors, the spec's cap before 2026-12 and what a device plan needs. Larger plans (up to
/// [`Limits::DEFAULT`]'s 16 384 tensors) need [`Plan::parse_with_scratch`] with a larger
/// [`Scratch`], or `Plan::parse_alloc` (feature `alloc`).
pub const DEFAULT_SCRATCH_TENSORS: usize = 4096;

/// The tensor capacity of the scratch `Plan::parse_alloc` puts on the heap: the spec's cap.
pub const MAX_SCRATCH_TENSORS: usize = Limits::DEFAULT.max_tensors as usize;

/// Not yet seen in the entry.
const NOT_IN: u16 = u16::MAX;
/// Flag: the tensor is a parameter's.
const PARAM: u8 = 1;
/// Flag: the tensor is an input of the entry being checked.
const INPUT: u8 = 2;
/// Flag: the tensor is an update of the entry being checked.
const UPDATE: u8 = 4;

/// The validator's working memory for plans of up to `N` tensors (`N ≤ 65536`): 7 bytes per
/// tensor (about 28 KiB for 4096 tensors, 112 KiB for the spec's 16 384). [`Plan::parse`] keeps one on the stack;
/// [`Plan::parse_with_scratch`] lets the caller put it elsewhere (a `static`, a smaller `N`).
pub struct Scratch<const N: usize> {
    /// Per tensor, the definition point in the entry being checked: `NOT_IN`, `0` for
    /// parameters and inputs (−1 in the spec), `i + 1` for instruction `i`.
    def: [u16; N],
    /// Per tensor, the end of its live interval, coded like `def`.
    end: [u16; N],
    /// Per tensor, [`PARAM`] | [`INPUT`] | [`UPDATE`].
    flags: [u8; N],
    /// The entry's tensors, sorted by offset for the overlap sweep.
    order: [u16; N],
}

impl<const N: usize> Scratch<N> {
    const FITS: () = assert!(N <= 1 << 16, "Scratch holds tensor indices as u16");

    /// Zeroed working memory.
    pub const fn new() -> Self {
        let () = Self::FITS;
        Scratch {
            def: [NOT_IN; N],
            end: [NOT_IN; N],
            flags: [0; N],
            order: [0; N],
        }
    }
}

impl<const N: usize> Default for Scratch<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> core::fmt::Debug for Scratch<N> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Scratch<{N}>")
    }
}

fn idx32(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

fn check_header(bytes: &[u8], limits: &Limits, cap_tensors: usize) -> Result<Header, ParseError> {
    if bytes.len() < HEADER_BYTES {
        return Err(DecodeError::Truncated {
            needed_bytes: HEADER_BYTES,
            found_bytes: bytes.len(),
        }
        .into());
    }
    let h = Header::decode(bytes);
    if h.magic != MAGIC {
        return Err(DecodeError::BadMagic { found: h.magic }.into());
    }
    if h.version > VERSION {
        return Err(DecodeError::FutureVersion {
            found: h.version,
            supported: VERSION,
        }
        .into());
    }
    if h.version != VERSION {
        return Err(DecodeError::UnknownVersion { found: h.version }.into());
    }
    if usize::from(h.header_bytes) != HEADER_BYTES {
        return Err(DecodeError::BadHeaderBytes {
            found: h.header_bytes,
        }
        .into());
    }
    let total = us(h.total_bytes);
    if bytes.len() < total {
        return Err(DecodeError::Truncated {
            needed_bytes: total,
            found_bytes: bytes.len(),
        }
        .into());
    }
    if bytes.len() > total {
        return Err(DecodeError::TrailingBytes {
            expected_bytes: total,
            found_bytes: bytes.len(),
        }
        .into());
    }
    let computed = plan_crc(bytes).unwrap_or(!h.crc32);
    if computed != h.crc32 {
        return Err(DecodeError::BadChecksum {
            stored: h.crc32,
            computed,
        }
        .into());
    }
    if h.flags & !KNOWN_FLAGS != 0 {
        return Err(DecodeError::UnknownFlags { found: h.flags }.into());
    }
    let math = MathProfile::from_flags(h.flags);
    if !math.in_build() {
        return Err(ValidateError::MathProfile { found: math }.into());
    }
    let arith = ArithProfile::from_flags(h.flags);
    if !arith.in_build() {
        return Err(ValidateError::ArithProfile { found: arith }.into());
    }
    let d = Limits::DEFAULT;
    let cap_t = limits.max_tensors.min(d.max_tensors);
    let scratch = u32::try_from(cap_tensors).unwrap_or(u32::MAX);
    if h.n_tensors <= cap_t && h.n_tensors > scratch {
        return Err(DecodeError::ScratchTooSmall {
            tensors: h.n_tensors,
            capacity: scratch,
        }
        .into());
    }
    for (section, found, limit) in [
        (Section::Tensors, h.n_tensors, cap_t),
        (
            Section::Instrs,
            h.n_instrs,
            limits.max_instrs.min(d.max_instrs),
        ),
        (
            Section::Entries,
            h.n_entries,
            limits.max_entries.min(d.max_entries),
        ),
        (
            Section::Bindings,
            h.n_bindings,
            limits.max_bindings.min(d.max_bindings),
        ),
    ] {
        if found > limit {
            return Err(DecodeError::TooMany {
                section,
                found,
                limit,
            }
            .into());
        }
    }
    if h.n_entries == 0 {
        return Err(ValidateError::NoEntries.into());
    }
    let expected = expected_bytes(&h);
    if expected != Some(u64::from(h.total_bytes)) {
        return Err(DecodeError::SizeMismatch {
            expected_bytes: expected.unwrap_or(u64::MAX),
            total_bytes: h.total_bytes,
        }
        .into());
    }
    if !h.persistent_elems.is_multiple_of(4) || h.persistent_elems > h.arena_elems {
        return Err(ValidateError::BadPersistentRegion {
            persistent_elems: h.persistent_elems,
            arena_elems: h.arena_elems,
        }
        .into());
    }
    Ok(h)
}

fn expected_bytes(h: &Header) -> Option<u64> {
    // The record sizes come from the format module the writer uses too, so they cannot drift.
    let size = |n: usize| u64::try_from(n).ok();
    let parts = [
        (h.n_tensors, size(TENSOR_RECORD_BYTES)?),
        (h.n_instrs, size(INSTR_RECORD_BYTES)?),
        (h.n_entries, size(ENTRY_RECORD_BYTES)?),
        (h.n_bindings, size(BINDING_RECORD_BYTES)?),
        (h.attr_words, 4),
    ];
    let mut total = size(HEADER_BYTES)?;
    for (n, size) in parts {
        total = total.checked_add(u64::from(n).checked_mul(size)?)?;
    }
    Some(total)
}

fn check_tensors(plan: &Plan<'_>) -> Result<(), ParseError> {
    let arena = plan.arena_elems();
    let persistent = plan.persistent_elems();
    for i in 0..plan.layout.n_tensors {
        let tensor = idx32(i);
        let rec = plan.tensor_record(i).ok_or(DecodeError::Truncated {
            needed_bytes: plan.layout.end_at,
            found_bytes: plan.bytes.len(),
        })?;
        let v = TensorView::new(&rec, tensor)?;
        if v.kind == TensorKind::Register {
            // Not in the arena: the offset is a register slot.
            if v.offset >= MAX_REGISTERS {
                return Err(ValidateError::TensorOutsideRegion {
                    tensor,
                    offset_elems: rec.offset_elems,
                    elems: idx32(v.elems),
                    kind: v.kind,
                }
                .into());
            }
            continue;
        }
        if !v.offset.is_multiple_of(ALIGN_ELEMS) {
            return Err(ValidateError::TensorMisaligned {
                tensor,
                offset_elems: rec.offset_elems,
            }
            .into());
        }
        let (lo, hi) = match v.kind {
            TensorKind::Scratch | TensorKind::Register => (persistent, arena),
            TensorKind::Persistent => (0, persistent),
        };
        if v.offset < lo || v.end > hi {
            return Err(ValidateError::TensorOutsideRegion {
                tensor,
                offset_elems: rec.offset_elems,
                elems: idx32(v.elems),
                kind: v.kind,
            }
            .into());
        }
    }
    Ok(())
}

/// Every instruction's record, attribute and shape rule, for a build dispatching the op set `O`
/// (an opcode outside it is refused by its shape rule: `OpError::Unsupported`, naming it).
fn check_instrs<O: Ops>(plan: &Plan<'_>) -> Result<(), ParseError> {
    let n_tensors = plan.layout.n_tensors;
    for i in 0..plan.layout.n_instrs {
        let instr = idx32(i);
        let rec = plan.instr_record(i).ok_or(DecodeError::Truncated {
            needed_bytes: plan.layout.end_at,
            found_bytes: plan.bytes.len(),
        })?;
        let op = Opcode::from_u8(rec.opcode).ok_or(DecodeError::UnknownOpcode {
            instr,
            byte: rec.opcode,
        })?;
        if matches!(op, Opcode::Input | Opcode::Parameter) {
            return Err(ValidateError::LeafInstruction { instr, op }.into());
        }
        let arity = op.arity();
        if usize::from(rec.n_args) != arity {
            return Err(DecodeError::ArityMismatch {
                instr,
                op,
                n_args: rec.n_args,
            }
            .into());
        }
        if rec.flags & !FUSE_NEXT != 0 {
            return Err(DecodeError::InstrReserved { instr }.into());
        }
        if us(rec.out) >= n_tensors {
            return Err(ValidateError::TensorIndex {
                instr,
                operand: Operand::Out,
                tensor: rec.out,
            }
            .into());
        }
        let mut shapes = [Shape::SCALAR; MAX_ARITY];
        for (slot, (&a, s)) in rec.args.iter().zip(shapes.iter_mut()).enumerate() {
            let slot8 = u8::try_from(slot).unwrap_or(u8::MAX);
            if slot < arity {
                let v = plan.tensor_view(a).ok_or(ValidateError::TensorIndex {
                    instr,
                    operand: Operand::Arg(slot8),
                    tensor: a,
                })?;
                *s = v.shape;
            } else if a != NO_ARG {
                return Err(DecodeError::UnusedArgSlot {
                    instr,
                    slot: slot8,
                    found: a,
                }
                .into());
            }
        }
        let out = plan
            .tensor_view(rec.out)
            .ok_or(ValidateError::TensorIndex {
                instr,
                operand: Operand::Out,
                tensor: rec.out,
            })?
            .shape;
        let attr = match decode_attr_in::<O>(op, rec.attr_word, plan.attr_section(), out) {
            Ok(attr) => attr,
            Err(AttrError::NonzeroWord { word }) => {
                return Err(DecodeError::NonzeroAttr {
                    instr,
                    op,
                    attr: word,
                }
                .into())
            }
            Err(error) => return Err(DecodeError::Attr { instr, op, error }.into()),
        };
        let arg_shapes = shapes.get(..arity).unwrap_or(&[]);
        match infer_in::<O>(op, attr, arg_shapes) {
            Ok(s) if s == out => {}
            Ok(inferred) => {
                return Err(ValidateError::OutputShape {
                    instr,
                    op,
                    inferred,
                    found: out,
                }
                .into())
            }
            Err(error) => return Err(ValidateError::ShapeRule { instr, error }.into()),
        }
    }
    Ok(())
}

fn check_entries(plan: &Plan<'_>) -> Result<(), ParseError> {
    let n_instrs = plan.layout.n_instrs;
    for i in 0..plan.layout.n_entries {
        let entry = idx32(i);
        let raw = plan.entry_bytes(i).unwrap_or(&[]);
        let name = name_in(raw).ok_or(DecodeError::BadName {
            section: Section::Entries,
            index: entry,
        })?;
        let rec = tapeplan_core::format::EntryRecord::decode(raw);
        let fits = us(rec.first_instr)
            .checked_add(us(rec.n_instrs))
            .is_some_and(|end| end <= n_instrs);
        if !fits {
            return Err(ValidateError::EntryRange {
                entry,
                first_instr: rec.first_instr,
                n_instrs: rec.n_instrs,
            }
            .into());
        }
        for j in 0..i {
            if plan
                .entry_bytes(j)
                .and_then(name_in)
                .is_some_and(|other| other == name)
            {
                return Err(ValidateError::DuplicateName {
                    section: Section::Entries,
                    index: entry,
                    first: idx32(j),
                }
                .into());
            }
        }
    }
    Ok(())
}

/// Decoded binding with its checked kind.
fn binding_at(plan: &Plan<'_>, i: usize) -> Option<(BindingRecord, BindingKind)> {
    let rec = plan.binding_record(i)?;
    Some((rec, BindingKind::from_u8(rec.kind)?))
}

fn check_bindings(plan: &Plan<'_>) -> Result<(), ParseError> {
    let n_entries = plan.layout.n_entries;
    for i in 0..plan.layout.n_bindings {
        let binding = idx32(i);
        let raw = plan.binding_bytes(i).unwrap_or(&[]);
        let name = name_in(raw).ok_or(DecodeError::BadName {
            section: Section::Bindings,
            index: binding,
        })?;
        let rec = BindingRecord::decode(raw);
        let kind = BindingKind::from_u8(rec.kind).ok_or(DecodeError::BindingKind {
            binding,
            kind: rec.kind,
        })?;
        if rec.reserved != [0; 3] {
            return Err(DecodeError::BindingReserved { binding }.into());
        }
        let entry_ok = match kind {
            BindingKind::Parameter => rec.entry == ALL_ENTRIES,
            _ => us(rec.entry) < n_entries,
        };
        if !entry_ok {
            return Err(ValidateError::BindingEntry {
                binding,
                entry: rec.entry,
            }
            .into());
        }
        let t = plan
            .tensor_view(rec.tensor)
            .ok_or(ValidateError::BindingTensor {
                binding,
                tensor: rec.tensor,
            })?;
        let region_ok = match kind {
            BindingKind::Parameter => t.kind == TensorKind::Persistent,
            // In place (persistent, over the parameter) or guarded (scratch, committed by copy);
            // never a register, which lives only inside its chain.
            BindingKind::Update | BindingKind::Output => t.kind != TensorKind::Register,
            BindingKind::Input => t.kind == TensorKind::Scratch,
        };
        if !region_ok {
            return Err(ValidateError::BindingRegion { binding, kind }.into());
        }
        for j in 0..i {
            let Some((other, other_kind)) = binding_at(plan, j) else {
                continue;
            };
            if other_kind == kind
                && other.entry == rec.entry
                && plan
                    .binding_bytes(j)
                    .and_then(name_in)
                    .is_some_and(|n| n == name)
            {
                return Err(ValidateError::DuplicateName {
                    section: Section::Bindings,
                    index: binding,
                    first: idx32(j),
                }
                .into());
            }
        }
        if kind == BindingKind::Update {
            let param = (0..plan.layout.n_bindings).find(|&j| {
                binding_at(plan, j).is_some_and(|(_, k)| k == BindingKind::Parameter)
                    && plan
                        .binding_bytes(j)
                        .and_then(name_in)
                        .is_some_and(|n| n == name)
            });
            let Some(p) = param else {
                return Err(ValidateError::UpdateWithoutParameter { binding }.into());
            };
            let pt = plan
                .binding_record(p)
                .and_then(|r| plan.tensor_view(r.tensor));
            let in_place = t.kind == TensorKind::Persistent;
            if !pt.is_some_and(|pt| pt.shape == t.shape && (!in_place || pt.offset == t.offset)) {
                return Err(ValidateError::UpdateMismatch {
                    binding,
                    parameter: idx32(p),
                }
                .into());
            }
        }
    }
    Ok(())
}

fn code(i: usize) -> Result<u16, ParseError> {
    // Entries are at most `max_instrs` ≤ 16 384 long, so `i + 1` fits.
    i.checked_add(1)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|&c| c != NOT_IN)
        .ok_or(ParseError::Decode(DecodeError::TooMany {
            section: Section::Instrs,
            found: idx32(i),
            limit: Limits::DEFAULT.max_instrs,
        }))
}

/// Entry `entry`'s instruction range (checked by `check_entries` before the per-entry passes).
fn entry_range(plan: &Plan<'_>, entry: u32) -> Result<core::ops::Range<usize>, ValidateError> {
    plan.entry_range(crate::EntryId(entry))
        .ok_or(ValidateError::EntryRange {
            entry,
            first_instr: 0,
            n_instrs: 0,
        })
}

/// Definition before use, then no overlap of simultaneously live buffers, for one entry.
fn check_entry<O: Ops, const N: usize>(
    plan: &Plan<'_>,
    e: usize,
    s: &mut Scratch<N>,
) -> Result<(), ParseError> {
    let entry = idx32(e);
    let nt = plan.layout.n_tensors;
    let range = entry_range(plan, entry)?;
    let first = range.start;
    let len = range.len();
    let (Some(def), Some(end), Some(flags)) = (
        s.def.get_mut(..nt),
        s.end.get_mut(..nt),
        s.flags.get_mut(..nt),
    ) else {
        return Err(DecodeError::TooMany {
            section: Section::Tensors,
            found: idx32(nt),
            limit: idx32(N),
        }
        .into());
    };
    def.fill(NOT_IN);
    end.fill(NOT_IN);
    flags.fill(0);

    // At the entry's start: parameters and the entry's inputs are defined (at −1, coded 0).
    for b in 0..plan.layout.n_bindings {
        let Some((rec, kind)) = binding_at(plan, b) else {
            continue;
        };
        let t = us(rec.tensor);
        let mine = us(rec.entry) == e;
        let flag = match kind {
            BindingKind::Parameter => PARAM,
            BindingKind::Input if mine => INPUT,
            BindingKind::Update if mine => UPDATE,
            _ => continue,
        };
        if let Some(f) = flags.get_mut(t) {
            *f |= flag;
        }
        if flag != UPDATE {
            if let (Some(d), Some(l)) = (def.get_mut(t), end.get_mut(t)) {
                *d = 0;
                *l = 0;
            }
        }
    }

    for li in 0..len {
        let k = first.saturating_add(li);
        let instr = idx32(k);
        let c = code(li)?;
        let rec = plan.instr_record(k).ok_or(ValidateError::EntryRange {
            entry,
            first_instr: idx32(first),
            n_instrs: idx32(len),
        })?;
        let arity = Opcode::from_u8(rec.opcode).map_or(0, Opcode::arity);
        for &a in rec.args.iter().take(arity) {
            let t = us(a);
            match def.get(t) {
                Some(&d) if d != NOT_IN => {}
                _ => {
                    return Err(ValidateError::UseBeforeDefinition {
                        entry,
                        instr,
                        tensor: a,
                    }
                    .into())
                }
            }
            if let Some(l) = end.get_mut(t) {
                *l = c;
            }
        }
        let t = us(rec.out);
        let f = flags.get(t).copied().unwrap_or(0);
        if def.get(t).is_some_and(|&d| d != NOT_IN) {
            let tensor = rec.out;
            return Err(ParseError::Validate(if f & PARAM != 0 {
                ValidateError::WritesParameter {
                    entry,
                    instr,
                    tensor,
                }
            } else if f & INPUT != 0 {
                ValidateError::WritesInput {
                    entry,
                    instr,
                    tensor,
                }
            } else {
                ValidateError::Redefinition {
                    entry,
                    instr,
                    tensor,
                }
            }));
        }
        let persistent = plan
            .tensor_view(rec.out)
            .is_some_and(|v| v.kind == TensorKind::Persistent);
        if persistent && f & UPDATE == 0 {
            return Err(ValidateError::PersistentNotUpdate {
                entry,
                instr,
                tensor: rec.out,
            }
            .into());
        }
        if let (Some(d), Some(l)) = (def.get_mut(t), end.get_mut(t)) {
            *d = c;
            *l = c;
        }
    }

    // An entry's updates are all in place or all guarded (committed by copy after the entry).
    let mut kinds = (false, false);
    for b in 0..plan.layout.n_bindings {
        if let Some((rec, BindingKind::Update)) = binding_at(plan, b) {
            if us(rec.entry) == e {
                let persistent = plan
                    .tensor_view(rec.tensor)
                    .is_some_and(|v| v.kind == TensorKind::Persistent);
                if persistent {
                    kinds.0 = true;
                } else {
                    kinds.1 = true;
                }
            }
        }
    }
    if kinds.0 && kinds.1 {
        return Err(ValidateError::MixedUpdates { entry }.into());
    }

    // Outputs and updates must be defined by an instruction, and outlive the entry.
    let outlive = code(len)?;
    for b in 0..plan.layout.n_bindings {
        let Some((rec, kind)) = binding_at(plan, b) else {
            continue;
        };
        if us(rec.entry) != e || !matches!(kind, BindingKind::Output | BindingKind::Update) {
            continue;
        }
        let t = us(rec.tensor);
        match def.get(t) {
            Some(&d) if d != NOT_IN && d != 0 => {}
            _ => {
                return Err(ValidateError::NotDefined {
                    entry,
                    binding: idx32(b),
                    tensor: rec.tensor,
                }
                .into())
            }
        }
        if let Some(l) = end.get_mut(t) {
            *l = outlive;
        }
    }

    check_overlap::<O>(plan, entry, first, len, def, end, &mut s.order)
}

/// The entry's live tensors, sorted by offset. Their element ranges are pairwise disjoint
/// between steps (that is what is being checked), so the ones a new tensor meets are found by
/// binary search.
struct Active<'s> {
    list: &'s mut [u16],
    len: usize,
}

impl Active<'_> {
    fn live(&self) -> &[u16] {
        self.list.get(..self.len).unwrap_or(&[])
    }

    /// The position of the first live tensor starting at or after `offset`.
    fn position(&self, plan: &Plan<'_>, offset: usize) -> usize {
        self.live().partition_point(|&t| {
            plan.tensor_view(u32::from(t))
                .is_some_and(|v| v.offset < offset)
        })
    }

    fn insert(&mut self, plan: &Plan<'_>, t: u16, offset: usize) {
        let at = self.position(plan, offset);
        if let Some(tail) = self.list.get_mut(at..=self.len) {
            shift_right(tail);
            if let Some(slot) = tail.first_mut() {
                *slot = t;
            }
            self.len = self.len.saturating_add(1);
        }
    }

    fn remove(&mut self, plan: &Plan<'_>, t: u16, offset: usize) {
        let at = self.position(plan, offset);
        let found = match self.live().get(at) {
            Some(&x) if x == t => Some(at),
            _ => self.live().iter().position(|&x| x == t),
        };
        if let Some(tail) = found.and_then(|at| self.list.get_mut(at..self.len)) {
            shift_left(tail);
            self.len = self.len.saturating_sub(1);
        }
    }

    /// The live tensors whose ranges meet `[v.offset, v.end)` (`v` not empty).
    fn meeting<'x>(
        &'x self,
        plan: &'x Plan<'_>,
        v: &TensorView,
    ) -> impl Iterator<Item = (u16, TensorView)> + 'x {
        let at = self.position(plan, v.offset);
        let (lo, hi) = (v.offset, v.end);
        self.live()
            .iter()
            .skip(at.saturating_sub(1))
            .filter_map(move |&t| plan.tensor_view(u32::from(t)).map(|w| (t, w)))
            .skip_while(move |(_, w)| w.end <= lo)
            .take_while(move |(_, w)| w.offset < hi)
    }
}

/// No overlap between simultaneously live buffers, for one entry: a sweep over the entry's
/// time. A tensor's live interval `[def, end]` meets another's, `def` first, exactly when
/// the other is still live at the first's `def`; so each new tensor is checked against the
/// tensors live at its definition, which (having passed) occupy disjoint ranges.
fn check_overlap<O: Ops>(
    plan: &Plan<'_>,
    entry: u32,
    first: usize,
    len: usize,
    def: &[u16],
    end: &[u16],
    order: &mut [u16],
) -> Result<(), ParseError> {
    let end_of = |t: u16| end.get(usize::from(t)).copied().unwrap_or(0);
    let overlap = |a: u16, b: u16| ValidateError::Overlap {
        entry,
        tensor_a: u32::from(a.min(b)),
        tensor_b: u32::from(a.max(b)),
    };
    let mut active = Active {
        list: order,
        len: 0,
    };
    // At −1 (coded 0): parameters and inputs, all live together.
    let at_start = || {
        def.iter().enumerate().filter_map(|(t, &d)| {
            let t = u16::try_from(t).ok()?;
            let v = plan.tensor_view(u32::from(t))?;
            (d == 0 && v.elems > 0).then_some((t, v))
        })
    };
    for (t, v) in at_start() {
        if let Some((a, _)) = active.meeting(plan, &v).next() {
            return Err(overlap(a, t).into());
        }
        active.insert(plan, t, v.offset);
    }
    for (t, v) in at_start() {
        if end_of(t) == 0 {
            active.remove(plan, t, v.offset);
        }
    }
    // Then one definition per instruction.
    for li in 0..len {
        let c = code(li)?;
        let Some(rec) = plan.instr_record(first.saturating_add(li)) else {
            continue;
        };
        let op = Opcode::from_u8(rec.opcode);
        let args = rec.args.get(..op.map_or(0, Opcode::arity)).unwrap_or(&[]);
        let (Ok(b), Some(vb)) = (u16::try_from(rec.out), plan.tensor_view(rec.out)) else {
            continue;
        };
        // Registers are not in the arena (fused chains are checked by `check_chains`).
        let in_arena = vb.elems > 0 && vb.kind != TensorKind::Register;
        if in_arena {
            for (a, va) in active.meeting(plan, &vb) {
                // The in-place exception: `a` dies here, is an argument of this instruction
                // only at positions its opcode may write over (any, for an elementwise opcode;
                // the weight, for `sgd_matmul`), and occupies exactly `b`'s range.
                // (A build or op set without `sgd_matmul` refused it already, and keeps the
                // elementwise test alone: a constant condition.)
                let a32 = u32::from(a);
                let sgd = const {
                    OpSet::BUILD
                        .intersection(O::SET)
                        .contains(Opcode::SgdMatMul)
                };
                let in_place = end_of(a) == c
                    && args.contains(&a32)
                    && op.is_some_and(|op| {
                        if sgd {
                            args.iter()
                                .enumerate()
                                .all(|(k, &x)| x != a32 || op.writes_over_arg(k))
                        } else {
                            op.class() == OpClass::Elementwise
                        }
                    })
                    && va.offset == vb.offset
                    && va.end == vb.end;
                if !in_place {
                    return Err(overlap(a, b).into());
                }
            }
        }
        for (k, &a) in args.iter().enumerate() {
            // `x * x` names its argument twice; it dies once.
            let repeated = args.iter().take(k).any(|&p| p == a);
            let Ok(a) = u16::try_from(a) else { continue };
            if repeated {
                continue;
            }
            if end_of(a) == c {
                let in_arena = |v: &TensorView| v.elems > 0 && v.kind != TensorKind::Register;
                if let Some(va) = plan.tensor_view(u32::from(a)).filter(in_arena) {
                    active.remove(plan, a, va.offset);
                }
            }
        }
        if in_arena && end_of(b) > c {
            active.insert(plan, b, vb.offset);
        }
    }
    Ok(())
}

/// Fused chains, for one entry (the spec's "Fused chains"): a run of instructions joined by
/// [`FUSE_NEXT`] ends inside its entry, holds at most [`MAX_CHAIN_INSTRS`] elementwise or `fill`
/// instructions of one output shape, reads each register it uses from the slot its own earlier
/// member wrote, and never lets two arena ranges it touches (one of them written) meet without
/// being the same range. Instructions outside chains touch no register.
fn check_chains(plan: &Plan<'_>, e: usize) -> Result<(), ValidateError> {
    let entry = idx32(e);
    let range = entry_range(plan, entry)?;
    let fusion = |k: usize, rule| ValidateError::Fusion {
        entry,
        instr: idx32(k),
        rule,
    };
    let flags = |k: usize| plan.instr_record(k).map_or(0, |r| r.flags);
    let mut k = range.start;
    while k < range.end {
        let mut last = k;
        while flags(last) & FUSE_NEXT != 0 {
            // Open at the entry's end: the offending instruction is the one with the flag (the
            // next index is another entry's instruction, or no instruction at all).
            if last.saturating_add(1) >= range.end {
                return Err(fusion(last, FusionRule::Length));
            }
            last = last.saturating_add(1);
            if last.saturating_sub(k) >= MAX_CHAIN_INSTRS {
                return Err(fusion(last, FusionRule::Length));
            }
        }
        if last == k {
            let rec = plan.instr_record(k).ok_or(fusion(k, FusionRule::Length))?;
            let arity = Opcode::from_u8(rec.opcode).map_or(0, Opcode::arity);
            let register = |t: u32| {
                plan.tensor_view(t)
                    .is_some_and(|v| v.kind == TensorKind::Register)
            };
            if register(rec.out) || rec.args.iter().take(arity).any(|&a| register(a)) {
                return Err(fusion(k, FusionRule::RegisterOutsideChain));
            }
        } else if cfg!(feature = "fusion") {
            check_chain(plan, k, last, &fusion)?;
        } else {
            return Err(fusion(k, FusionRule::NotBuilt));
        }
        k = last.saturating_add(1);
    }
    Ok(())
}

/// One fused chain, instructions `first..=last` (see [`check_chains`]).
fn check_chain(
    plan: &Plan<'_>,
    first: usize,
    last: usize,
    fusion: &dyn Fn(usize, FusionRule) -> ValidateError,
) -> Result<(), ValidateError> {
    const MAX_TOUCHED: usize = MAX_CHAIN_INSTRS * (MAX_ARITY + 1);
    let mut holder = [NO_ARG; MAX_REGISTERS];
    // The arena tensors the chain touches: whether the chain writes them, and whether it reads
    // them at other indices than the tile's (a `broadcast`'s source).
    let mut touched = [(NO_ARG, false, false); MAX_TOUCHED];
    let mut n_touched = 0usize;
    let mut shape = None;
    for k in first..=last {
        let rec = plan.instr_record(k).ok_or(fusion(k, FusionRule::Length))?;
        let op = Opcode::from_u8(rec.opcode).ok_or(fusion(k, FusionRule::NotFusable))?;
        let broadcast = op == Opcode::Broadcast;
        if op.class() != OpClass::Elementwise && op != Opcode::Fill && !broadcast {
            return Err(fusion(k, FusionRule::NotFusable));
        }
        let out = plan
            .tensor_view(rec.out)
            .ok_or(fusion(k, FusionRule::ShapeMismatch))?;
        if *shape.get_or_insert(out.shape) != out.shape {
            return Err(fusion(k, FusionRule::ShapeMismatch));
        }
        for &a in rec.args.iter().take(op.arity()) {
            let v = plan
                .tensor_view(a)
                .ok_or(fusion(k, FusionRule::ShapeMismatch))?;
            if v.kind == TensorKind::Register {
                if broadcast {
                    // A register holds tiles of the chain's shape, not a broadcast's source.
                    return Err(fusion(k, FusionRule::NotFusable));
                }
                if holder.get(v.offset) != Some(&a) {
                    return Err(fusion(k, FusionRule::RegisterSlot));
                }
            } else {
                let slot = touched
                    .get_mut(n_touched)
                    .ok_or(fusion(k, FusionRule::Length))?;
                *slot = (a, false, broadcast);
                n_touched = n_touched.saturating_add(1);
            }
        }
        if out.kind == TensorKind::Register {
            let slot = holder
                .get_mut(out.offset)
                .ok_or(fusion(k, FusionRule::RegisterSlot))?;
            *slot = rec.out;
        } else {
            let slot = touched
                .get_mut(n_touched)
                .ok_or(fusion(k, FusionRule::Length))?;
            *slot = (rec.out, true, false);
            n_touched = n_touched.saturating_add(1);
        }
    }
    let touched = touched.get(..n_touched).unwrap_or(&[]);
    for (i, &(a, wa, sa)) in touched.iter().enumerate() {
        for &(b, wb, sb) in touched.iter().skip(i.saturating_add(1)) {
            let (Some(va), Some(vb)) = (plan.tensor_view(a), plan.tensor_view(b)) else {
                continue;
            };
            let meet = va.elems > 0 && vb.elems > 0 && va.offset < vb.end && vb.offset < va.end;
            let same = va.offset == vb.offset && va.end == vb.end;
            // A broadcast's source is read away from the tile: it may not meet a written
            // range at all, not even as the same range.
            if (wa || wb) && meet && (!same || sa || sb) {
                return Err(fusion(last, FusionRule::PartialAlias));
            }
        }
    }
    Ok(())
}

/// "No instruction writes" a parameter: the per-entry pass covers the instructions entries run;
/// this covers the rest (reported with entry `0xFFFFFFFF`).
fn check_no_parameter_writes<const N: usize>(
    plan: &Plan<'_>,
    s: &mut Scratch<N>,
) -> Result<(), ParseError> {
    let flags = s.flags.get_mut(..plan.layout.n_tensors).unwrap_or(&mut []);
    flags.fill(0);
    for b in 0..plan.layout.n_bindings {
        if let Some((rec, BindingKind::Parameter)) = binding_at(plan, b) {
            if let Some(f) = flags.get_mut(us(rec.tensor)) {
                *f = PARAM;
            }
        }
    }
    for k in 0..plan.layout.n_instrs {
        let Some(rec) = plan.instr_record(k) else {
            continue;
        };
        if flags.get(us(rec.out)).is_some_and(|&f| f & PARAM != 0) {
            return Err(ValidateError::WritesParameter {
                entry: ALL_ENTRIES,
                instr: idx32(k),
                tensor: rec.out,
            }
            .into());
        }
    }
    Ok(())
}

/// Decode → validate: the whole gate, for a build dispatching the op set `O`.
pub(crate) fn validate<'a, O: Ops, const N: usize>(
    bytes: &'a [u8],
    limits: &Limits,
    scratch: &mut Scratch<N>,
) -> Result<Plan<'a>, ParseError> {
    let header = check_header(bytes, limits, N)?;
    let layout = Layout::new(&header).ok_or(DecodeError::SizeMismatch {
        expected_bytes: u64::MAX,
        total_bytes: header.total_bytes,
    })?;
    let plan = Plan {
        bytes,
        header,
        layout,
    };
    // A build that names its one plan, validated in full on the host when it was made
    // (`Ops::PREVALIDATED_CRC32`), takes that plan on its header's checks and its checksum;
    // the rest of the validator is then dead code in that build.
    if let Some(expected) = O::PREVALIDATED_CRC32 {
        if header.crc32 != expected {
            return Err(ValidateError::NotPrevalidated {
                expected,
                found: header.crc32,
            }
            .into());
        }
        return Ok(plan);
    }
    check_tensors(&plan)?;
    check_instrs::<O>(&plan)?;
    check_entries(&plan)?;
    check_bindings(&plan)?;
    for e in 0..layout.n_entries {
        check_entry::<O, N>(&plan, e, scratch)?;
        check_chains(&plan, e)?;
    }
    check_no_parameter_writes(&plan, scratch)?;
    let cap = limits.work_cap(bytes.len(), plan.arena_elems());
    if cap < u64::MAX {
        for e in plan.entries() {
            let work = plan.entry_work(e);
            if work > cap {
                return Err(ValidateError::TooMuchWork {
                    entry: idx32(e.index()),
                    work,
                    limit: cap,
                }
                .into());
            }
        }
    }
    Ok(plan)
}

/// `list.rotate_right(1)` by adjacent swaps: `rotate_*` links `ptr_rotate` and
/// `compiler_builtins`' `memmove` (about 1.9 KiB of a firmware's flash, where nothing else
/// needs them); the same number of moves, one element at a time.
fn shift_right(list: &mut [u16]) {
    let n = list.len();
    for (a, b) in (0..n).zip(1..n).rev() {
        list.swap(a, b);
    }
}

/// `list.rotate_left(1)` by adjacent swaps (see [`shift_right`]).
fn shift_left(list: &mut [u16]) {
    let n = list.len();
    for (a, b) in (0..n).zip(1..n) {
        list.swap(a, b);
    }
}
