//! The runtime's errors, one small `Copy` enum per stage: [`DecodeError`] (the bytes),
//! [`ValidateError`] (the rules), both answered by [`crate::Plan::parse`] as a [`ParseError`],
//! and [`ExecError`] (binding an arena, moving data, running an entry). Each is
//! `#[non_exhaustive]`, has a lowercase `Display`, implements `core::error::Error`, and with
//! feature `defmt` implements `defmt::Format` (fields of `tapeplan_core` types through their
//! `Display`, or `Debug` for the kinds).

use core::fmt;

use tapeplan_core::format::{AttrError, BindingKind, TensorKind};
use tapeplan_core::{ArithProfile, MathProfile, OpError, Opcode, Shape};

/// A section of the plan: which array of records an index refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Section {
    /// The tensor records.
    Tensors,
    /// The instruction records.
    Instrs,
    /// The entry records.
    Entries,
    /// The binding records.
    Bindings,
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Section::Tensors => "tensors",
            Section::Instrs => "instructions",
            Section::Entries => "entries",
            Section::Bindings => "bindings",
        })
    }
}

/// An operand position of an instruction record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Operand {
    /// The `out` field.
    Out,
    /// The argument slot with this position (0 or 1).
    Arg(u8),
}

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operand::Out => f.write_str("output"),
            Operand::Arg(k) => write!(f, "argument {k}"),
        }
    }
}

pub(crate) fn binding_kind_name(kind: BindingKind) -> &'static str {
    match kind {
        BindingKind::Input => "input",
        BindingKind::Output => "output",
        BindingKind::Parameter => "parameter",
        BindingKind::Update => "update",
    }
}

fn tensor_kind_name(kind: TensorKind) -> &'static str {
    match kind {
        TensorKind::Scratch => "scratch",
        TensorKind::Persistent => "persistent",
        TensorKind::Register => "register",
    }
}

/// Which rule of fused chains (see `docs/plan-format.md`, "Fused chains") an instruction breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum FusionRule {
    /// A chain member that is not elementwise, `fill` or `broadcast`, or a `broadcast` member
    /// whose source is a register.
    NotFusable,
    /// A member whose output shape differs from the chain's first member's.
    ShapeMismatch,
    /// A chain longer than `MAX_CHAIN_INSTRS` (`instr` is its first member past the limit), or
    /// one still open at its entry's end (`instr` is the entry's last instruction).
    Length,
    /// A register read or written by an instruction that is in no chain.
    RegisterOutsideChain,
    /// A chain member reads a register that no earlier member of its own chain left in its slot:
    /// another value took the slot in between, or the register was written by another chain.
    /// (A slot past `MAX_REGISTERS` is a [`ValidateError::TensorOutsideRegion`] of the tensor.)
    RegisterSlot,
    /// Two arena ranges of one chain, at least one written by it, that meet without being the
    /// same range (a tile at a time, they would not compute what one instruction at a time does).
    PartialAlias,
    /// The plan has fused chains and this runtime was built without feature `fusion`.
    NotBuilt,
}

impl fmt::Display for FusionRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FusionRule::NotFusable => "a chain member is not elementwise, fill or broadcast (or a broadcast reads a register)",
            FusionRule::ShapeMismatch => "chain members differ in output shape",
            FusionRule::Length => "the chain is too long or runs past its entry's end",
            FusionRule::RegisterOutsideChain => "a register is used outside its chain",
            FusionRule::RegisterSlot => {
                "a register slot is out of range or overwritten before its read"
            }
            FusionRule::PartialAlias => "two arena ranges of the chain partially overlap",
            FusionRule::NotBuilt => "this runtime was built without feature `fusion`",
        })
    }
}

/// Why a byte string does not decode as a plan: its framing (header, size, checksum, the
/// [`crate::Limits`]) or a record's own fields (reserved bytes, kinds, opcodes, names) are
/// malformed. Indices are record positions in their section; `instr` is a global instruction
/// index (not relative to an entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum DecodeError {
    /// The bytes end before the header or before `total_bytes` says the plan ends.
    Truncated {
        /// The bytes the plan needs.
        needed_bytes: usize,
        /// The bytes given.
        found_bytes: usize,
    },
    /// More bytes were given than `total_bytes` says the plan has.
    TrailingBytes {
        /// `total_bytes` from the header.
        expected_bytes: usize,
        /// The bytes given.
        found_bytes: usize,
    },
    /// The first four bytes are not `TPLN`.
    BadMagic {
        /// The bytes found.
        found: [u8; 4],
    },
    /// A format version later than the one this runtime reads; it is not guessed at.
    FutureVersion {
        /// The version found.
        found: u16,
        /// The version this runtime reads.
        supported: u16,
    },
    /// A format version that never existed (0) or that this runtime does not read.
    UnknownVersion {
        /// The version found.
        found: u16,
    },
    /// `header_bytes` is not `tapeplan_core::format::HEADER_BYTES`.
    BadHeaderBytes {
        /// The value found.
        found: u16,
    },
    /// The stored CRC-32 does not match the bytes.
    BadChecksum {
        /// The CRC stored in the header.
        stored: u32,
        /// The CRC of the bytes.
        computed: u32,
    },
    /// A flag this version does not define is set (only bit 0, the math profile, is defined).
    UnknownFlags {
        /// The flags word found.
        found: u32,
    },
    /// A section has more records than the [`crate::Limits`] allow.
    TooMany {
        /// The section.
        section: Section,
        /// The count in the header.
        found: u32,
        /// The cap.
        limit: u32,
    },
    /// The plan has more tensors than the validator's working memory holds (within the
    /// spec's cap): [`crate::Plan::parse`]'s stack scratch holds
    /// [`crate::DEFAULT_SCRATCH_TENSORS`]; parse it with
    /// [`crate::Plan::parse_with_scratch`] and a larger [`crate::Scratch`], or with
    /// `Plan::parse_alloc` (feature `alloc`).
    ScratchTooSmall {
        /// The plan's tensor records.
        tensors: u32,
        /// The tensors the scratch holds.
        capacity: u32,
    },
    /// `total_bytes` differs from the size the record counts imply.
    SizeMismatch {
        /// `48 + 24·n_tensors + 20·n_instrs + 32·n_entries + 36·n_bindings`.
        expected_bytes: u64,
        /// `total_bytes` from the header.
        total_bytes: u32,
    },
    /// A tensor record's reserved field is not 0.
    TensorReserved {
        /// The tensor's index.
        tensor: u32,
    },
    /// A tensor's rank exceeds 4.
    TensorRank {
        /// The tensor's index.
        tensor: u32,
        /// The rank found.
        rank: u8,
    },
    /// A tensor has a non-zero extent past its rank.
    TensorDims {
        /// The tensor's index.
        tensor: u32,
    },
    /// A tensor has more than 2^28 elements.
    TensorTooLarge {
        /// The tensor's index.
        tensor: u32,
    },
    /// A tensor's kind byte is neither scratch (0) nor persistent (1).
    TensorKind {
        /// The tensor's index.
        tensor: u32,
        /// The byte found.
        kind: u8,
    },
    /// An instruction's opcode byte is not in the opcode table.
    UnknownOpcode {
        /// The instruction's index.
        instr: u32,
        /// The byte found.
        byte: u8,
    },
    /// An instruction's `n_args` differs from its opcode's arity.
    ArityMismatch {
        /// The instruction's index.
        instr: u32,
        /// The opcode.
        #[cfg_attr(feature = "defmt", defmt(Display2Format))]
        op: Opcode,
        /// The `n_args` found.
        n_args: u8,
    },
    /// An instruction record's flags hold a bit this version does not define.
    InstrReserved {
        /// The instruction's index.
        instr: u32,
    },
    /// An argument slot past the opcode's arity is not `0xFFFFFFFF`.
    UnusedArgSlot {
        /// The instruction's index.
        instr: u32,
        /// The slot's position.
        slot: u8,
        /// The value found.
        found: u32,
    },
    /// An instruction whose opcode takes no attribute value (kind `none` or `target`) has a
    /// non-zero attribute word.
    NonzeroAttr {
        /// The instruction's index.
        instr: u32,
        /// The opcode.
        #[cfg_attr(feature = "defmt", defmt(Display2Format))]
        op: Opcode,
        /// The word found.
        attr: u32,
    },
    /// An instruction's attribute block is malformed (outside the attribute section, or of the
    /// wrong length for the opcode).
    Attr {
        /// The instruction's index.
        instr: u32,
        /// The opcode.
        #[cfg_attr(feature = "defmt", defmt(Display2Format))]
        op: Opcode,
        /// What is wrong.
        #[cfg_attr(feature = "defmt", defmt(Display2Format))]
        error: AttrError,
    },
    /// A name field is empty, not UTF-8, or has non-NUL bytes after its padding starts.
    BadName {
        /// The section (entries or bindings).
        section: Section,
        /// The record's index.
        index: u32,
    },
    /// A binding's kind byte is not 0..=3.
    BindingKind {
        /// The binding's index.
        binding: u32,
        /// The byte found.
        kind: u8,
    },
    /// A binding record's reserved bytes are not 0.
    BindingReserved {
        /// The binding's index.
        binding: u32,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use DecodeError as E;
        match *self {
            E::Truncated {
                needed_bytes,
                found_bytes,
            } => write!(
                f,
                "plan truncated: {found_bytes} bytes where {needed_bytes} are needed"
            ),
            E::TrailingBytes {
                expected_bytes,
                found_bytes,
            } => write!(
                f,
                "{found_bytes} bytes given where the plan says it has {expected_bytes}"
            ),
            E::BadMagic { found } => write!(f, "bad magic {found:02x?}, expected \"TPLN\""),
            E::FutureVersion { found, supported } => write!(
                f,
                "plan format version {found} is newer than the supported version {supported}"
            ),
            E::UnknownVersion { found } => write!(
                f,
                "plan format version {found} is not read here (this runtime reads version {}); plan the model again",
                tapeplan_core::format::VERSION
            ),
            E::BadHeaderBytes { found } => write!(
                f,
                "header_bytes is {found}, expected {}",
                tapeplan_core::format::HEADER_BYTES
            ),
            E::BadChecksum { stored, computed } => write!(
                f,
                "checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
            ),
            E::UnknownFlags { found } => write!(f, "unknown flags {found:#x}"),
            E::TooMany {
                section,
                found,
                limit,
            } => write!(f, "{found} {section} exceed the limit {limit}"),
            E::ScratchTooSmall { tensors, capacity } => write!(
                f,
                "the plan has {tensors} tensors, more than the validator's scratch holds \
                 ({capacity}): parse it with Plan::parse_with_scratch and a Scratch of at least \
                 {tensors} tensors, or with Plan::parse_alloc (feature `alloc`)"
            ),
            E::SizeMismatch {
                expected_bytes,
                total_bytes,
            } => write!(
                f,
                "total_bytes is {total_bytes} but the record counts imply {expected_bytes}"
            ),
            E::TensorReserved { tensor } => {
                write!(f, "tensor {tensor}: reserved field is not zero")
            }
            E::TensorRank { tensor, rank } => {
                write!(f, "tensor {tensor}: rank {rank} exceeds 4")
            }
            E::TensorDims { tensor } => {
                write!(f, "tensor {tensor}: non-zero extent past its rank")
            }
            E::TensorTooLarge { tensor } => {
                write!(f, "tensor {tensor}: more than 2^28 elements")
            }
            E::TensorKind { tensor, kind } => write!(f, "tensor {tensor}: unknown kind {kind}"),
            E::UnknownOpcode { instr, byte } => {
                write!(f, "instruction {instr}: unknown opcode {byte:#04x}")
            }
            E::ArityMismatch { instr, op, n_args } => write!(
                f,
                "instruction {instr}: {op} takes {} arguments, n_args is {n_args}",
                op.arity()
            ),
            E::InstrReserved { instr } => {
                write!(f, "instruction {instr}: undefined flag bits are set")
            }
            E::UnusedArgSlot { instr, slot, found } => write!(
                f,
                "instruction {instr}: unused argument slot {slot} holds {found:#x}, not 0xffffffff"
            ),
            E::NonzeroAttr { instr, op, attr } => write!(
                f,
                "instruction {instr}: {op} takes no attribute, found {attr:#x}"
            ),
            E::Attr { instr, op, error } => write!(f, "instruction {instr}: {op}: {error}"),
            E::BadName { section, index } => {
                write!(f, "{section} record {index}: malformed name")
            }
            E::BindingKind { binding, kind } => {
                write!(f, "binding {binding}: unknown kind {kind}")
            }
            E::BindingReserved { binding } => {
                write!(f, "binding {binding}: reserved bytes are not zero")
            }
        }
    }
}

impl core::error::Error for DecodeError {}

/// Why a plan that decodes breaks a rule of `docs/plan-format.md` (regions, references between
/// records, shapes, liveness, fused chains, the caps on work), or asks for a capability this
/// build leaves out. Indices as in [`DecodeError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ValidateError {
    /// The plan records a math profile this build leaves out (a firmware built with only
    /// feature `math-precise` or `math-fast`).
    MathProfile {
        /// The profile the plan records.
        #[cfg_attr(feature = "defmt", defmt(Display2Format))]
        found: MathProfile,
    },
    /// The plan records an arithmetic profile this build leaves out (`fma` in a build without
    /// the feature `arith-fma`).
    ArithProfile {
        /// The profile the plan records.
        #[cfg_attr(feature = "defmt", defmt(Display2Format))]
        found: ArithProfile,
    },
    /// The build runs one plan, validated on the host when it was made
    /// (`tapeplan_core::Ops::PREVALIDATED_CRC32`), and this plan's CRC-32 is another's: a
    /// plan changed since (a corrupt image, another plan) is not run unvalidated.
    NotPrevalidated {
        /// The CRC-32 of the plan the build validated.
        expected: u32,
        /// This plan's.
        found: u32,
    },
    /// The plan has no entry.
    NoEntries,
    /// `persistent_elems` is not a multiple of 4 or exceeds `arena_elems`.
    BadPersistentRegion {
        /// The persistent region's size.
        persistent_elems: u32,
        /// The arena's size.
        arena_elems: u32,
    },
    /// A tensor's offset is not a multiple of 4 elements.
    TensorMisaligned {
        /// The tensor's index.
        tensor: u32,
        /// The offset found.
        offset_elems: u32,
    },
    /// A tensor does not lie inside the region its kind names.
    TensorOutsideRegion {
        /// The tensor's index.
        tensor: u32,
        /// Its offset.
        offset_elems: u32,
        /// Its element count.
        elems: u32,
        /// Its kind.
        #[cfg_attr(feature = "defmt", defmt(Debug2Format))]
        kind: TensorKind,
    },
    /// An instruction names a leaf (`input`, `parameter`), which is not an instruction.
    LeafInstruction {
        /// The instruction's index.
        instr: u32,
        /// The opcode.
        #[cfg_attr(feature = "defmt", defmt(Display2Format))]
        op: Opcode,
    },
    /// A fused chain that breaks one of the format's rules.
    Fusion {
        /// The entry's index.
        entry: u32,
        /// The offending instruction's global index.
        instr: u32,
        /// The rule.
        rule: FusionRule,
    },
    /// An operand names a tensor index past the tensor records.
    TensorIndex {
        /// The instruction's index.
        instr: u32,
        /// Which operand.
        operand: Operand,
        /// The index found.
        tensor: u32,
    },
    /// The opcode's shape rule rejects the argument shapes.
    ShapeRule {
        /// The instruction's index.
        instr: u32,
        /// What the rule says.
        #[cfg_attr(feature = "defmt", defmt(Display2Format))]
        error: OpError,
    },
    /// The output tensor's shape is not the one the shape rule gives.
    OutputShape {
        /// The instruction's index.
        instr: u32,
        /// The opcode.
        #[cfg_attr(feature = "defmt", defmt(Display2Format))]
        op: Opcode,
        /// The shape the rule gives.
        #[cfg_attr(feature = "defmt", defmt(Display2Format))]
        inferred: Shape,
        /// The output tensor's shape.
        #[cfg_attr(feature = "defmt", defmt(Display2Format))]
        found: Shape,
    },
    /// Two records that must have distinct names share one.
    DuplicateName {
        /// The section (entries or bindings).
        section: Section,
        /// The later record's index.
        index: u32,
        /// The earlier record's index.
        first: u32,
    },
    /// An entry's instruction range runs past the instruction records.
    EntryRange {
        /// The entry's index.
        entry: u32,
        /// Its `first_instr`.
        first_instr: u32,
        /// Its `n_instrs`.
        n_instrs: u32,
    },
    /// A binding's entry field is out of range, or is `0xFFFFFFFF` for a non-parameter, or is
    /// not `0xFFFFFFFF` for a parameter.
    BindingEntry {
        /// The binding's index.
        binding: u32,
        /// The entry field found.
        entry: u32,
    },
    /// A binding names a tensor index past the tensor records.
    BindingTensor {
        /// The binding's index.
        binding: u32,
        /// The index found.
        tensor: u32,
    },
    /// A parameter or update bound to a scratch tensor, or an input bound to a persistent one.
    BindingRegion {
        /// The binding's index.
        binding: u32,
        /// The binding's kind.
        #[cfg_attr(feature = "defmt", defmt(Debug2Format))]
        kind: BindingKind,
    },
    /// An update whose name is not a parameter's.
    UpdateWithoutParameter {
        /// The update binding's index.
        binding: u32,
    },
    /// An entry does more work than [`crate::Limits::max_work_per_entry`] allows (or, by
    /// default, than [`crate::Limits::derived_work_cap`] allows for the plan's size).
    TooMuchWork {
        /// The entry's index.
        entry: u32,
        /// Its work, in element operations.
        work: u64,
        /// The cap.
        limit: u64,
    },
    /// An entry with both in-place and guarded (scratch) updates.
    MixedUpdates {
        /// The entry's index.
        entry: u32,
    },
    /// An update whose tensor has another offset or shape than its parameter's.
    UpdateMismatch {
        /// The update binding's index.
        binding: u32,
        /// The parameter binding's index.
        parameter: u32,
    },
    /// An instruction reads a tensor that is not defined at that point of the entry.
    UseBeforeDefinition {
        /// The entry's index.
        entry: u32,
        /// The instruction's index.
        instr: u32,
        /// The tensor's index.
        tensor: u32,
    },
    /// An instruction writes a tensor already defined in the entry.
    Redefinition {
        /// The entry's index.
        entry: u32,
        /// The instruction's index.
        instr: u32,
        /// The tensor's index.
        tensor: u32,
    },
    /// An instruction writes a parameter (its update is a separate tensor).
    WritesParameter {
        /// The entry's index; `0xFFFFFFFF` for an instruction that no entry runs.
        entry: u32,
        /// The instruction's index.
        instr: u32,
        /// The tensor's index.
        tensor: u32,
    },
    /// An instruction writes one of its entry's inputs.
    WritesInput {
        /// The entry's index.
        entry: u32,
        /// The instruction's index.
        instr: u32,
        /// The tensor's index.
        tensor: u32,
    },
    /// An instruction writes a persistent tensor that is not an update of its entry.
    PersistentNotUpdate {
        /// The entry's index.
        entry: u32,
        /// The instruction's index.
        instr: u32,
        /// The tensor's index.
        tensor: u32,
    },
    /// An output or update that no instruction of its entry defines.
    NotDefined {
        /// The entry's index.
        entry: u32,
        /// The binding's index.
        binding: u32,
        /// The tensor's index.
        tensor: u32,
    },
    /// Two tensors whose element ranges intersect are live at the same time (and are not an
    /// in-place pair).
    Overlap {
        /// The entry's index.
        entry: u32,
        /// One tensor's index.
        tensor_a: u32,
        /// The other tensor's index.
        tensor_b: u32,
    },
}

impl fmt::Display for ValidateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ValidateError as E;
        match *self {
            E::MathProfile { found } => write!(
                f,
                "the plan runs under the {found} math profile, which this build leaves out \
                 (feature `math-{found}`)"
            ),
            E::ArithProfile { found } => write!(
                f,
                "the plan's matrix products run under the {found} arithmetic profile, which this \
                 build leaves out (feature `arith-{found}`)"
            ),
            E::NotPrevalidated { expected, found } => write!(
                f,
                "the plan's checksum is {found:#010x}, not {expected:#010x} of the plan this \
                 build validated when it was made"
            ),
            E::NoEntries => f.write_str("the plan has no entry"),
            E::BadPersistentRegion {
                persistent_elems,
                arena_elems,
            } => write!(
                f,
                "persistent region of {persistent_elems} elements is not a multiple of 4 \
                 within the arena of {arena_elems}"
            ),
            E::TensorMisaligned {
                tensor,
                offset_elems,
            } => write!(
                f,
                "tensor {tensor}: offset {offset_elems} is not a multiple of 4 elements"
            ),
            E::TensorOutsideRegion {
                tensor,
                offset_elems,
                elems,
                kind,
            } => write!(
                f,
                "tensor {tensor}: {elems} elements at offset {offset_elems} lie outside the \
                 {} region",
                tensor_kind_name(kind)
            ),
            E::LeafInstruction { instr, op } => {
                write!(f, "instruction {instr}: {op} is a leaf, not an instruction")
            }
            E::Fusion { entry, instr, rule } => {
                write!(f, "entry {entry}, instruction {instr}: fused chain: {rule}")
            }
            E::TensorIndex {
                instr,
                operand,
                tensor,
            } => write!(
                f,
                "instruction {instr}: {operand} names tensor {tensor}, past the tensor records"
            ),
            E::ShapeRule { instr, error } => write!(f, "instruction {instr}: {error}"),
            E::OutputShape {
                instr,
                op,
                inferred,
                found,
            } => write!(
                f,
                "instruction {instr}: {op} gives shape {inferred}, its output has shape {found}"
            ),
            E::DuplicateName {
                section,
                index,
                first,
            } => write!(
                f,
                "{section} record {index}: name already used by record {first}"
            ),
            E::EntryRange {
                entry,
                first_instr,
                n_instrs,
            } => write!(
                f,
                "entry {entry}: instructions {first_instr}+{n_instrs} run past the instruction records"
            ),
            E::BindingEntry { binding, entry } => {
                write!(f, "binding {binding}: bad entry field {entry:#x}")
            }
            E::BindingTensor { binding, tensor } => write!(
                f,
                "binding {binding}: tensor {tensor} is past the tensor records"
            ),
            E::BindingRegion { binding, kind } => write!(
                f,
                "binding {binding}: {} bound to a tensor of the wrong region",
                binding_kind_name(kind)
            ),
            E::UpdateWithoutParameter { binding } => {
                write!(f, "binding {binding}: update of no parameter")
            }
            E::TooMuchWork { entry, work, limit } => write!(
                f,
                "entry {entry} does {work} element operations, over the cap of {limit}"
            ),
            E::MixedUpdates { entry } => {
                write!(f, "entry {entry}: mixes in-place and guarded updates")
            }
            E::UpdateMismatch { binding, parameter } => write!(
                f,
                "binding {binding}: update differs in offset or shape from parameter binding {parameter}"
            ),
            E::UseBeforeDefinition {
                entry,
                instr,
                tensor,
            } => write!(
                f,
                "entry {entry}, instruction {instr}: tensor {tensor} is read before it is defined"
            ),
            E::Redefinition {
                entry,
                instr,
                tensor,
            } => write!(
                f,
                "entry {entry}, instruction {instr}: tensor {tensor} is written a second time"
            ),
            E::WritesParameter {
                entry,
                instr,
                tensor,
            } => write!(
                f,
                "entry {entry}, instruction {instr}: writes parameter tensor {tensor}"
            ),
            E::WritesInput {
                entry,
                instr,
                tensor,
            } => write!(
                f,
                "entry {entry}, instruction {instr}: writes input tensor {tensor}"
            ),
            E::PersistentNotUpdate {
                entry,
                instr,
                tensor,
            } => write!(
                f,
                "entry {entry}, instruction {instr}: writes persistent tensor {tensor}, which is not an update of the entry"
            ),
            E::NotDefined {
                entry,
                binding,
                tensor,
            } => write!(
                f,
                "entry {entry}: binding {binding} names tensor {tensor}, which no instruction of the entry defines"
            ),
            E::Overlap {
                entry,
                tensor_a,
                tensor_b,
            } => write!(
                f,
                "entry {entry}: tensors {tensor_a} and {tensor_b} overlap while both are live"
            ),
        }
    }
}

impl core::error::Error for ValidateError {}

/// Why [`crate::Plan::parse`] refused a byte string: it does not decode, or it breaks a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ParseError {
    /// The bytes do not decode.
    Decode(DecodeError),
    /// The plan decodes but breaks a rule.
    Validate(ValidateError),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Decode(e) => e.fmt(f),
            ParseError::Validate(e) => e.fmt(f),
        }
    }
}

impl core::error::Error for ParseError {}

impl From<DecodeError> for ParseError {
    fn from(e: DecodeError) -> Self {
        ParseError::Decode(e)
    }
}

impl From<ValidateError> for ParseError {
    fn from(e: ValidateError) -> Self {
        ParseError::Validate(e)
    }
}

/// Why binding an arena, moving data in or out, or running an entry failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ExecError {
    /// The arena is shorter than the plan's `arena_elems`.
    ArenaTooSmall {
        /// The plan's `arena_elems`.
        needed_elems: usize,
        /// The arena's length.
        found_elems: usize,
    },
    /// An [`crate::EntryId`] that is not an entry of this plan.
    UnknownEntry {
        /// The entry index.
        entry: u32,
    },
    /// No binding of this kind has this name (in this entry, for inputs, outputs and updates).
    UnknownName {
        /// The kind of binding looked for.
        #[cfg_attr(feature = "defmt", defmt(Debug2Format))]
        kind: BindingKind,
    },
    /// A slice whose length is not the tensor's element count.
    LengthMismatch {
        /// The tensor's element count.
        expected_elems: usize,
        /// The slice's length.
        found_elems: usize,
    },
    /// A reference kernel refused its operands (cannot happen for a validated plan).
    Kernel {
        /// The instruction's index.
        instr: u32,
        /// The kernel's error.
        #[cfg_attr(feature = "defmt", defmt(Display2Format))]
        error: OpError,
    },
    /// An instruction whose records are inconsistent with the arena (cannot happen for a
    /// validated plan; reported rather than panicking).
    Inconsistent {
        /// The instruction's index.
        instr: u32,
    },
    /// Inputs that [`crate::Session::decode_with_inputs`] cannot bind: more than
    /// [`crate::MAX_BOUND_INPUTS`], or two whose arena ranges meet.
    CannotBindInputs {
        /// How many inputs were named.
        count: u32,
    },
    /// A [`crate::Program`] run in a session of another plan (another `plan_id`, CRC-32 or
    /// bytes than the plan it was decoded from).
    ForeignProgram {
        /// The program's entry index.
        entry: u32,
    },
    /// A `DecodedPlan` attached to a session of another plan (feature `decoded-run`).
    #[cfg(feature = "decoded-run")]
    ForeignDecoding,
    /// A guarded entry produced a value that is not finite (NaN or ±inf) in an output or an
    /// update, so it committed nothing: the parameters and optimizer state are exactly as they
    /// were before the run. The caller can skip the batch or lower the learning rate.
    NonFinite {
        /// The entry's index.
        entry: u32,
        /// The index of the output or update binding holding the value.
        binding: u32,
        /// The element's index within that binding's tensor.
        element: u32,
    },
    /// [`crate::Session::set_labels`]: a label that is not a class index `0, 1, …, classes − 1`
    /// of a `one_hot` reading the input (a fraction, a negative, NaN, out of range). `one_hot`
    /// itself would give that row all zeros; nothing was written.
    BadLabel {
        /// The label's position in the given slice.
        index: u32,
        /// The label's bit pattern (`f32::to_bits`).
        value_bits: u32,
        /// The class count it must stay below.
        classes: u32,
    },
}

impl fmt::Display for ExecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ExecError::ArenaTooSmall {
                needed_elems,
                found_elems,
            } => write!(
                f,
                "arena of {found_elems} elements is smaller than the {needed_elems} the plan needs"
            ),
            ExecError::UnknownEntry { entry } => write!(f, "entry {entry} is not in the plan"),
            ExecError::UnknownName { kind } => {
                write!(f, "no {} of that name", binding_kind_name(kind))
            }
            ExecError::LengthMismatch {
                expected_elems,
                found_elems,
            } => write!(
                f,
                "{found_elems} elements given where the tensor has {expected_elems}"
            ),
            ExecError::Kernel { instr, error } => write!(f, "instruction {instr}: {error}"),
            ExecError::Inconsistent { instr } => {
                write!(
                    f,
                    "instruction {instr}: records inconsistent with the arena"
                )
            }
            ExecError::CannotBindInputs { count } => write!(
                f,
                "cannot read these {count} inputs from the caller's memory: at most {} can be, \
                 and no two may share arena elements",
                crate::MAX_BOUND_INPUTS
            ),
            ExecError::ForeignProgram { entry } => write!(
                f,
                "the program of entry {entry} was decoded from another plan than the session's"
            ),
            #[cfg(feature = "decoded-run")]
            ExecError::ForeignDecoding => {
                f.write_str("the decoded plan comes from another plan than the session's")
            }
            ExecError::NonFinite {
                entry,
                binding,
                element,
            } => write!(
                f,
                "entry {entry}: binding {binding} element {element} is not finite; nothing was committed"
            ),
            ExecError::BadLabel {
                index,
                value_bits,
                classes,
            } => write!(
                // The bits, not the float: formatting an f32 would link about 14 KiB of
                // float-printing code into every firmware.
                f,
                "label {index} (f32 bits {value_bits:#010x}) is not a class index below {classes}"
            ),
        }
    }
}

impl core::error::Error for ExecError {}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::size_of;

    /// Errors travel by value through every `?` of the decode, validate and run paths, so they
    /// stay small: at most 24 bytes for [`DecodeError`] (the bytes found and a record index),
    /// 56 for the others, whose largest variants carry a shape rule's [`OpError`] (48 bytes:
    /// the shapes it names) or two [`Shape`]s. A variant that grows past these is a deliberate
    /// change to this test.
    #[test]
    fn errors_stay_small() {
        assert!(
            size_of::<DecodeError>() <= 24,
            "{}",
            size_of::<DecodeError>()
        );
        assert!(
            size_of::<ValidateError>() <= 56,
            "{}",
            size_of::<ValidateError>()
        );
        assert!(size_of::<ParseError>() <= 56, "{}", size_of::<ParseError>());
        assert!(size_of::<ExecError>() <= 56, "{}", size_of::<ExecError>());
        assert!(size_of::<FusionRule>() <= 1 && size_of::<Section>() <= 1);
    }
}
