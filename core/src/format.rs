//! The plan format's constants and fixed-size records, shared by the writer (the planner) and
//! the reader (the runtime) so they cannot drift. `docs/plan-format.md` is the specification;
//! this module is its executable half.
//!
//! Everything is little-endian. A plan is a 52-byte header followed by four arrays of
//! fixed-size records, in this order: tensors, instructions, entries, bindings; then the
//! attribute section (`u32` words). The record decoders here only split bytes into fields;
//! [`Instr::decode`] is the one decoder of an instruction with its typed attribute, which the
//! runtime and the host's inspector both call. Every check of meaning (ranges, shapes, liveness)
//! is the runtime's validator's job.

use crate::shape::MAX_RANK;
use crate::{Attr, AttrKind, BuildOps, OpSet, Opcode, Ops, PoolWindow, Shape};

/// The first four bytes of every plan.
pub const MAGIC: [u8; 4] = *b"TPLN";
/// The format version this crate writes and reads. A change to the bytes bumps it.
pub const VERSION: u16 = 3;
/// The header's size in bytes.
pub const HEADER_BYTES: usize = 52;
/// Header flag bit 0: the plan runs under the `fast` math profile ([`crate::MathProfile`]);
/// clear: `precise`.
pub const FLAG_MATH_FAST: u32 = 1;
/// Header flag bit 1: the plan's matrix products use one fused multiply-add per step, the
/// `fma` arithmetic profile ([`crate::ArithProfile`]); clear: `separate`.
pub const FLAG_ARITH_FMA: u32 = 2;
/// Every header flag bit this version defines; a reader rejects a plan with any other bit set.
pub const KNOWN_FLAGS: u32 = FLAG_MATH_FAST | FLAG_ARITH_FMA;
/// One tensor record's size in bytes.
pub const TENSOR_RECORD_BYTES: usize = 24;
/// One instruction record's size in bytes.
pub const INSTR_RECORD_BYTES: usize = 24;
/// One entry record's size in bytes.
pub const ENTRY_RECORD_BYTES: usize = 32;
/// One binding record's size in bytes.
pub const BINDING_RECORD_BYTES: usize = 36;
/// The size of a name field in bytes (UTF-8, NUL-padded, at least one trailing NUL not required).
pub const NAME_BYTES: usize = 24;
/// Every tensor's offset in the arena is a multiple of this many elements (16 bytes).
pub const ALIGN_ELEMS: usize = 4;
/// The byte offset of the CRC field in the header.
pub const CRC_OFFSET: usize = 12;
/// The `entry` field of a binding that belongs to every entry (parameters).
pub const ALL_ENTRIES: u32 = u32::MAX;
/// The `args` slot value for an unused argument position.
pub const NO_ARG: u32 = u32::MAX;
/// Instruction flag (bit 0 of an instruction record's `flags`): this instruction and the next
/// belong to one fused chain. See [`TensorKind::Register`] and the spec's "Fused chains".
pub const FUSE_NEXT: u16 = 1;
/// The register slots a fused chain may use: a register tensor's `offset_elems` is its slot,
/// below this.
pub const MAX_REGISTERS: usize = 4;
/// The most instructions one fused chain may hold.
pub const MAX_CHAIN_INSTRS: usize = 16;
/// The most words an attribute block may hold after its length word.
pub const MAX_ATTR_BLOCK_WORDS: usize = 32;

/// The CRC used by the format: CRC-32/ISO-HDLC (the zlib / PNG / Ethernet CRC-32).
///
/// Computed bit by bit (`crc::NoTable`): the byte-wise table is 1 KiB of a firmware's flash,
/// and a plan is checked once, when it is parsed (about 8 shifts a byte; the same checksum).
pub const CRC32: crc::Crc<u32, crc::NoTable> =
    crc::Crc::<u32, crc::NoTable>::new(&crc::CRC_32_ISO_HDLC);

/// The checksum of a whole plan: CRC-32 over every byte except the four at [`CRC_OFFSET`].
/// Returns `None` when `bytes` is shorter than the header.
pub fn plan_crc(bytes: &[u8]) -> Option<u32> {
    let head = bytes.get(..CRC_OFFSET)?;
    let tail = bytes.get(CRC_OFFSET + 4..)?;
    let mut d = CRC32.digest();
    d.update(head);
    d.update(tail);
    Some(d.finalize())
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    let mut x = [0u8; 2];
    if let Some(s) = b.get(at..at + 2) {
        x.copy_from_slice(s);
    }
    u16::from_le_bytes(x)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        x.copy_from_slice(s);
    }
    u32::from_le_bytes(x)
}

fn put(b: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(s) = b.get_mut(at..at + bytes.len()) {
        s.copy_from_slice(bytes);
    }
}

/// The header, byte for byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Header {
    /// Bytes 0..4: [`MAGIC`].
    pub magic: [u8; 4],
    /// Bytes 4..6: the format version.
    pub version: u16,
    /// Bytes 6..8: the header's size, [`HEADER_BYTES`].
    pub header_bytes: u16,
    /// Bytes 8..12: the whole plan's size in bytes.
    pub total_bytes: u32,
    /// Bytes 12..16: [`plan_crc`] of the plan.
    pub crc32: u32,
    /// Bytes 16..20: the arena's size in `f32` elements.
    pub arena_elems: u32,
    /// Bytes 20..24: the persistent region `[0, persistent_elems)` of the arena.
    pub persistent_elems: u32,
    /// Bytes 24..28: the number of tensor records.
    pub n_tensors: u32,
    /// Bytes 28..32: the number of instruction records.
    pub n_instrs: u32,
    /// Bytes 32..36: the number of entry records.
    pub n_entries: u32,
    /// Bytes 36..40: the number of binding records.
    pub n_bindings: u32,
    /// Bytes 40..44: flags. Bit 0 ([`FLAG_MATH_FAST`]) records the math profile, bit 1
    /// ([`FLAG_ARITH_FMA`]) the arithmetic profile; every other bit must be 0 ([`KNOWN_FLAGS`]).
    pub flags: u32,
    /// Bytes 44..48: the plan's identity: a hash the planner derives from the model and its
    /// hyperparameters, so that state saved from one plan is not loaded into another.
    pub plan_id: u32,
    /// Bytes 48..52: the number of `u32` words in the attribute section.
    pub attr_words: u32,
}

impl Header {
    /// Splits the first [`HEADER_BYTES`] of `b` into fields (missing bytes read as zero).
    pub fn decode(b: &[u8]) -> Header {
        let mut magic = [0u8; 4];
        if let Some(s) = b.get(0..4) {
            magic.copy_from_slice(s);
        }
        Header {
            magic,
            version: u16_at(b, 4),
            header_bytes: u16_at(b, 6),
            total_bytes: u32_at(b, 8),
            crc32: u32_at(b, 12),
            arena_elems: u32_at(b, 16),
            persistent_elems: u32_at(b, 20),
            n_tensors: u32_at(b, 24),
            n_instrs: u32_at(b, 28),
            n_entries: u32_at(b, 32),
            n_bindings: u32_at(b, 36),
            flags: u32_at(b, 40),
            plan_id: u32_at(b, 44),
            attr_words: u32_at(b, 48),
        }
    }

    /// Writes the header's fields into the first [`HEADER_BYTES`] of `b`.
    pub fn encode(&self, b: &mut [u8]) {
        put(b, 0, &self.magic);
        put(b, 4, &self.version.to_le_bytes());
        put(b, 6, &self.header_bytes.to_le_bytes());
        for (at, v) in [
            (8, self.total_bytes),
            (12, self.crc32),
            (16, self.arena_elems),
            (20, self.persistent_elems),
            (24, self.n_tensors),
            (28, self.n_instrs),
            (32, self.n_entries),
            (36, self.n_bindings),
            (40, self.flags),
            (44, self.plan_id),
            (48, self.attr_words),
        ] {
            put(b, at, &v.to_le_bytes());
        }
    }
}

/// Where a tensor lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum TensorKind {
    /// In the scratch region `[persistent_elems, arena_elems)`, reused across entries and steps.
    Scratch = 0,
    /// In the persistent region `[0, persistent_elems)`: parameters and their updated values.
    Persistent = 1,
    /// Not in the arena: a value a fused chain passes from one of its instructions to a later
    /// one, a tile at a time, in register slot `offset_elems` (below [`MAX_REGISTERS`]).
    Register = 2,
}

impl TensorKind {
    /// Checked decoding.
    pub fn from_u8(b: u8) -> Option<TensorKind> {
        match b {
            0 => Some(TensorKind::Scratch),
            1 => Some(TensorKind::Persistent),
            2 => Some(TensorKind::Register),
            _ => None,
        }
    }
}

/// A tensor record: where in the arena, and what shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorRecord {
    /// Bytes 0..4: offset in the arena, in `f32` elements.
    pub offset_elems: u32,
    /// Byte 4: rank, at most [`MAX_RANK`].
    pub rank: u8,
    /// Byte 5: [`TensorKind`] as a byte.
    pub kind: u8,
    /// Bytes 6..8: reserved, 0.
    pub reserved: u16,
    /// Bytes 8..24: extents, unused ones 0.
    pub dims: [u32; MAX_RANK],
}

impl TensorRecord {
    /// Splits a record into fields.
    pub fn decode(b: &[u8]) -> TensorRecord {
        TensorRecord {
            offset_elems: u32_at(b, 0),
            rank: b.get(4).copied().unwrap_or(0),
            kind: b.get(5).copied().unwrap_or(0),
            reserved: u16_at(b, 6),
            dims: core::array::from_fn(|i| u32_at(b, 8 + 4 * i)),
        }
    }

    /// Writes a record.
    pub fn encode(&self, b: &mut [u8]) {
        put(b, 0, &self.offset_elems.to_le_bytes());
        put(b, 4, &[self.rank, self.kind]);
        put(b, 6, &self.reserved.to_le_bytes());
        for (i, d) in self.dims.iter().enumerate() {
            put(b, 8 + 4 * i, &d.to_le_bytes());
        }
    }
}

/// An instruction record: `out = opcode(args…)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InstrRecord {
    /// Byte 0: the opcode's byte.
    pub opcode: u8,
    /// Byte 1: the number of arguments; must equal the opcode's arity.
    pub n_args: u8,
    /// Bytes 2..4: flags; bit 0 is [`FUSE_NEXT`], the other bits must be 0.
    pub flags: u16,
    /// Bytes 4..8: the output tensor's index.
    pub out: u32,
    /// Bytes 8..20: argument tensor indices; unused slots hold [`NO_ARG`].
    pub args: [u32; 3],
    /// Bytes 20..24: the attribute word: the attribute itself for an inline kind, the index
    /// of its block in the attribute section for a block kind (see [`encode_attr`]).
    pub attr_word: u32,
}

impl InstrRecord {
    /// Splits a record into fields.
    pub fn decode(b: &[u8]) -> InstrRecord {
        InstrRecord {
            opcode: b.first().copied().unwrap_or(0),
            n_args: b.get(1).copied().unwrap_or(0),
            flags: u16_at(b, 2),
            out: u32_at(b, 4),
            args: [u32_at(b, 8), u32_at(b, 12), u32_at(b, 16)],
            attr_word: u32_at(b, 20),
        }
    }

    /// Writes a record.
    pub fn encode(&self, b: &mut [u8]) {
        put(b, 0, &[self.opcode, self.n_args]);
        put(b, 2, &self.flags.to_le_bytes());
        put(b, 4, &self.out.to_le_bytes());
        put(b, 8, &self.args[0].to_le_bytes());
        put(b, 12, &self.args[1].to_le_bytes());
        put(b, 16, &self.args[2].to_le_bytes());
        put(b, 20, &self.attr_word.to_le_bytes());
    }
}

/// An entry record: a named, contiguous run of instructions (`forward`, `train_step`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryRecord {
    /// Bytes 0..24: the name.
    pub name: [u8; NAME_BYTES],
    /// Bytes 24..28: the first instruction's index.
    pub first_instr: u32,
    /// Bytes 28..32: the number of instructions.
    pub n_instrs: u32,
}

impl EntryRecord {
    /// Splits a record into fields.
    pub fn decode(b: &[u8]) -> EntryRecord {
        EntryRecord {
            name: name_at(b, 0),
            first_instr: u32_at(b, 24),
            n_instrs: u32_at(b, 28),
        }
    }

    /// Writes a record.
    pub fn encode(&self, b: &mut [u8]) {
        put(b, 0, &self.name);
        put(b, 24, &self.first_instr.to_le_bytes());
        put(b, 28, &self.n_instrs.to_le_bytes());
    }
}

/// What a binding names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum BindingKind {
    /// A value the caller sets before running the entry.
    Input = 0,
    /// A value the caller reads after running the entry.
    Output = 1,
    /// A trainable parameter in the persistent region (entry [`ALL_ENTRIES`]).
    Parameter = 2,
    /// The entry's new value of the parameter of the same name, written in place over it.
    Update = 3,
}

impl BindingKind {
    /// Checked decoding.
    pub fn from_u8(b: u8) -> Option<BindingKind> {
        match b {
            0 => Some(BindingKind::Input),
            1 => Some(BindingKind::Output),
            2 => Some(BindingKind::Parameter),
            3 => Some(BindingKind::Update),
            _ => None,
        }
    }
}

/// A binding record: a name for a tensor of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BindingRecord {
    /// Bytes 0..24: the name.
    pub name: [u8; NAME_BYTES],
    /// Byte 24: [`BindingKind`] as a byte.
    pub kind: u8,
    /// Bytes 25..28: reserved, 0.
    pub reserved: [u8; 3],
    /// Bytes 28..32: the entry's index, or [`ALL_ENTRIES`].
    pub entry: u32,
    /// Bytes 32..36: the tensor's index.
    pub tensor: u32,
}

impl BindingRecord {
    /// Splits a record into fields.
    pub fn decode(b: &[u8]) -> BindingRecord {
        BindingRecord {
            name: name_at(b, 0),
            kind: b.get(24).copied().unwrap_or(0),
            reserved: [
                b.get(25).copied().unwrap_or(0),
                b.get(26).copied().unwrap_or(0),
                b.get(27).copied().unwrap_or(0),
            ],
            entry: u32_at(b, 28),
            tensor: u32_at(b, 32),
        }
    }

    /// Writes a record.
    pub fn encode(&self, b: &mut [u8]) {
        put(b, 0, &self.name);
        put(b, 24, &[self.kind]);
        put(b, 25, &self.reserved);
        put(b, 28, &self.entry.to_le_bytes());
        put(b, 32, &self.tensor.to_le_bytes());
    }
}

/// The byte offsets of a plan's sections, from its header's counts (`None` when one
/// overflows). Every reader finds the sections with it, so they cannot disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sections {
    /// The first tensor record.
    pub tensors_at: usize,
    /// The first instruction record.
    pub instrs_at: usize,
    /// The first entry record.
    pub entries_at: usize,
    /// The first binding record.
    pub bindings_at: usize,
    /// The attribute section.
    pub attrs_at: usize,
    /// One past the attribute section: the plan's size in bytes.
    pub end_at: usize,
}

impl Sections {
    /// The offsets of `h`'s sections.
    pub fn of(h: &Header) -> Option<Sections> {
        let after = |at: usize, n: u32, size: usize| {
            at.checked_add(usize::try_from(n).ok()?.checked_mul(size)?)
        };
        let tensors_at = HEADER_BYTES;
        let instrs_at = after(tensors_at, h.n_tensors, TENSOR_RECORD_BYTES)?;
        let entries_at = after(instrs_at, h.n_instrs, INSTR_RECORD_BYTES)?;
        let bindings_at = after(entries_at, h.n_entries, ENTRY_RECORD_BYTES)?;
        let attrs_at = after(bindings_at, h.n_bindings, BINDING_RECORD_BYTES)?;
        let end_at = after(attrs_at, h.attr_words, 4)?;
        Some(Sections {
            tensors_at,
            instrs_at,
            entries_at,
            bindings_at,
            attrs_at,
            end_at,
        })
    }
}

/// An attribute as the plan stores it, from [`encode_attr`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodedAttr {
    /// In the instruction record's attribute word.
    Inline(u32),
    /// In a block of the attribute section: a length word `len`, then `words[..len]`; the
    /// instruction record's attribute word is the index of the length word in the section.
    Block {
        /// The block's words (the first `len` are used).
        words: [u32; MAX_ATTR_BLOCK_WORDS],
        /// How many.
        len: usize,
    },
}

impl EncodedAttr {
    fn block(values: &[u32]) -> EncodedAttr {
        let mut words = [0u32; MAX_ATTR_BLOCK_WORDS];
        let len = values.len().min(MAX_ATTR_BLOCK_WORDS);
        words[..len].copy_from_slice(&values[..len]);
        EncodedAttr::Block { words, len }
    }
}

/// The plan format's form of an attribute (the table "Attributes" of `docs/plan-format.md`):
/// no attribute and a target shape are the word `0` (the target is the output tensor's shape);
/// a fill value and an exponent are their `f32` bit patterns; an axis is the axis; a window is
/// the block `[3, axis, start, len]`; a convolution is the block `[1 + 5r, groups, stride…,
/// pad_begin…, pad_end…, dilation…, extent…]` with `r` values each for its `r` spatial axes;
/// a pooling window is the block of its 11 words ([`crate::PoolWindow::words`]). Only the plan
/// writer calls this.
pub fn encode_attr(attr: &Attr) -> EncodedAttr {
    let w = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
    match *attr {
        Attr::Conv(c) => {
            let r = c.spatial_rank();
            let mut words = [0u32; 11];
            words[0] = c.groups;
            for (k, field) in [c.stride, c.pad_begin, c.pad_end, c.dilation, c.extent]
                .iter()
                .enumerate()
            {
                words[1 + k * r..1 + (k + 1) * r].copy_from_slice(&field[..r]);
            }
            EncodedAttr::block(&words[..1 + 5 * r])
        }
        Attr::None | Attr::Target(_) => EncodedAttr::Inline(0),
        Attr::Fill { value, .. } => EncodedAttr::Inline(value.to_bits()),
        Attr::Pow(p) | Attr::Lr(p) => EncodedAttr::Inline(p.to_bits()),
        Attr::Axis(axis) | Attr::AxisTo(axis, _) => EncodedAttr::Inline(w(axis)),
        Attr::Window { axis, start, len } => EncodedAttr::block(&[w(axis), w(start), w(len)]),
        Attr::Pool(window) | Attr::PoolTo(window, _) => EncodedAttr::block(&window.words()),
        Attr::Scan { axes, reverse } => {
            EncodedAttr::Inline(u32::from(axes) | u32::from(reverse) << 8)
        }
    }
}

/// Why an instruction's attribute could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrError {
    /// An opcode without an attribute value (none, or a target) whose attribute word is not 0.
    NonzeroWord {
        /// The word found.
        word: u32,
    },
    /// A block index whose block does not lie inside the attribute section.
    BlockOutOfRange {
        /// The index (in words) found.
        at: u32,
    },
    /// A block of another length than the attribute kind has.
    BlockLength {
        /// The kind's length in words.
        expected: u32,
        /// The block's length word.
        found: u32,
    },
    /// A word outside its kind's range (a pooling window's value above `u16::MAX` or flag
    /// other than 0 or 1; a scan word with bits above its mask and direction).
    OutOfRange {
        /// The word found.
        word: u32,
    },
}

impl core::fmt::Display for AttrError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            AttrError::NonzeroWord { word } => {
                write!(f, "takes no attribute value, found the word {word:#x}")
            }
            AttrError::BlockOutOfRange { at } => {
                write!(
                    f,
                    "attribute block at word {at} lies outside the attribute section"
                )
            }
            AttrError::BlockLength { expected, found } => {
                write!(
                    f,
                    "attribute block of {found} words where {expected} are needed"
                )
            }
            AttrError::OutOfRange { word } => {
                write!(f, "attribute word {word:#x} out of its range")
            }
        }
    }
}

impl core::error::Error for AttrError {}

fn word_at(section: &[u8], index: usize) -> Option<u32> {
    let start = index.checked_mul(4)?;
    let b = section.get(start..start.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn block<const N: usize>(at: u32, section: &[u8]) -> Result<[u32; N], AttrError> {
    let len = block_len(at, section)?;
    if usize::try_from(len).ok() != Some(N) {
        return Err(AttrError::BlockLength {
            expected: N as u32,
            found: len,
        });
    }
    block_words(at, section)
}

/// The length word of the block at word `at`.
fn block_len(at: u32, section: &[u8]) -> Result<u32, AttrError> {
    let bad = AttrError::BlockOutOfRange { at };
    word_at(section, usize::try_from(at).map_err(|_| bad)?).ok_or(bad)
}

/// The first `N` words of the block at word `at` (all of them inside the section).
fn block_words<const N: usize>(at: u32, section: &[u8]) -> Result<[u32; N], AttrError> {
    let bad = AttrError::BlockOutOfRange { at };
    let at = usize::try_from(at).map_err(|_| bad)?;
    let mut out = [0u32; N];
    for (k, o) in out.iter_mut().enumerate() {
        let i = at
            .checked_add(1)
            .and_then(|x| x.checked_add(k))
            .ok_or(bad)?;
        *o = word_at(section, i).ok_or(bad)?;
    }
    Ok(out)
}

/// The typed attribute of an instruction of opcode `op` from its attribute word, the plan's
/// attribute section (`section`, its bytes) and the output tensor's shape `out` (the target of
/// the opcodes whose attribute is one): the inverse of [`encode_attr`], and the one place a
/// plan's attribute bytes are read.
///
/// # Errors
/// [`AttrError`] for a nonzero word where the opcode takes none, a block outside the section,
/// or a block of the wrong length. Whether the values fit the shapes is the shape rule's
/// question ([`crate::ops::infer`]).
pub fn decode_attr(op: Opcode, word: u32, section: &[u8], out: Shape) -> Result<Attr, AttrError> {
    decode_attr_in::<BuildOps>(op, word, section, out)
}

/// [`decode_attr`] in the selective build over the op set `O` (see [`crate::Ops`]): only the
/// decoders of the attribute kinds `O`'s opcodes take are linked; the other kinds decode to
/// [`Attr::None`], which the shape rule of an opcode outside `O` then refuses
/// ([`crate::OpError::Unsupported`]).
///
/// # Errors
/// As [`decode_attr`].
pub fn decode_attr_in<O: Ops>(
    op: Opcode,
    word: u32,
    section: &[u8],
    out: Shape,
) -> Result<Attr, AttrError> {
    let none = |attr: Attr| {
        if word == 0 {
            Ok(attr)
        } else {
            Err(AttrError::NonzeroWord { word })
        }
    };
    let us = |x: u32| usize::try_from(x).unwrap_or(usize::MAX);
    match op.attr_kind() {
        AttrKind::None => none(Attr::None),
        AttrKind::Target => none(Attr::Target(out)),
        AttrKind::Fill => Ok(Attr::Fill {
            value: f32::from_bits(word),
            shape: out,
        }),
        AttrKind::Pow => Ok(Attr::Pow(f32::from_bits(word))),
        AttrKind::Lr => Ok(Attr::Lr(f32::from_bits(word))),
        AttrKind::Axis => Ok(Attr::Axis(us(word))),
        // The kinds only `ext` opcodes take: a build without `all-ops` (a firmware) refuses
        // those opcodes in the shape rule (`OpError::Unsupported`) and links no decoder for
        // their attributes.
        AttrKind::AxisTo | AttrKind::Scan | AttrKind::Pool | AttrKind::PoolTo | AttrKind::Conv
            if !cfg!(feature = "all-ops") =>
        {
            Ok(Attr::None)
        }
        // The same in a selective build, kind by kind: a constant condition each.
        AttrKind::AxisTo if !const { takes::<O>(AttrKind::AxisTo) } => Ok(Attr::None),
        AttrKind::Scan if !const { takes::<O>(AttrKind::Scan) } => Ok(Attr::None),
        AttrKind::Window if !const { takes::<O>(AttrKind::Window) } => Ok(Attr::None),
        AttrKind::Conv if !const { takes::<O>(AttrKind::Conv) } => Ok(Attr::None),
        AttrKind::Pool | AttrKind::PoolTo
            if !const { takes::<O>(AttrKind::Pool) || takes::<O>(AttrKind::PoolTo) } =>
        {
            Ok(Attr::None)
        }
        AttrKind::AxisTo => Ok(Attr::AxisTo(us(word), out)),
        AttrKind::Scan => {
            if word & !0x1ff != 0 {
                return Err(AttrError::OutOfRange { word });
            }
            Ok(Attr::Scan {
                axes: (word & 0xff) as u8,
                reverse: word & 0x100 != 0,
            })
        }
        AttrKind::Window => {
            let [axis, start, len] = block::<3>(word, section)?;
            Ok(Attr::Window {
                axis: us(axis),
                start: us(start),
                len: us(len),
            })
        }
        AttrKind::Conv => decode_conv(word, section),
        AttrKind::Pool | AttrKind::PoolTo => {
            let words = block::<11>(word, section)?;
            let window =
                PoolWindow::from_words(words).map_err(|word| AttrError::OutOfRange { word })?;
            Ok(if op.attr_kind() == AttrKind::Pool {
                Attr::Pool(window)
            } else {
                Attr::PoolTo(window, out)
            })
        }
    }
}

/// True when an opcode of `O` in this build's vocabulary takes attributes of `kind`.
const fn takes<O: Ops>(kind: AttrKind) -> bool {
    OpSet::BUILD.intersection(O::SET).takes(kind)
}

/// A convolution's block: `1 + 5r` words for `r` spatial axes (1 or 2), see [`encode_attr`].
fn decode_conv(at: u32, section: &[u8]) -> Result<Attr, AttrError> {
    let len = block_len(at, section)?;
    let r = match len {
        6 => 1,
        11 => 2,
        found => {
            return Err(AttrError::BlockLength {
                expected: if found < 11 { 6 } else { 11 },
                found,
            })
        }
    };
    let mut w = [0u32; 11];
    if r == 1 {
        w[..6].copy_from_slice(&block_words::<6>(at, section)?);
    } else {
        w = block_words::<11>(at, section)?;
    }
    let mut c = crate::ConvAttr::d1(1, 0, 0, 1, w[0]);
    c.spatial = r as u8;
    for k in 0..r {
        c.stride[k] = w[1 + k];
        c.pad_begin[k] = w[1 + r + k];
        c.pad_end[k] = w[1 + 2 * r + k];
        c.dilation[k] = w[1 + 3 * r + k];
        c.extent[k] = w[1 + 4 * r + k];
    }
    Ok(Attr::Conv(c))
}

/// An instruction decoded: its opcode, flags, tensors and typed attribute.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Instr {
    /// The opcode.
    pub op: Opcode,
    /// The record's flags ([`FUSE_NEXT`]).
    pub flags: u16,
    /// The output tensor's index.
    pub out: u32,
    /// The argument tensors' indices; the first `op.arity()` are used.
    pub args: [u32; 3],
    /// The attribute.
    pub attr: Attr,
}

/// Why an instruction record could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstrError {
    /// A byte that is no opcode.
    UnknownOpcode {
        /// The byte.
        byte: u8,
    },
    /// The attribute.
    Attr {
        /// The opcode.
        op: Opcode,
        /// What is wrong.
        error: AttrError,
    },
}

impl core::fmt::Display for InstrError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            InstrError::UnknownOpcode { byte } => write!(f, "unknown opcode byte {byte:#04x}"),
            InstrError::Attr { op, error } => write!(f, "{op}: {error}"),
        }
    }
}

impl core::error::Error for InstrError {}

impl Instr {
    /// Decodes an instruction record with its attribute (see [`decode_attr`]); `out_shape` is
    /// the shape of its output tensor.
    ///
    /// # Errors
    /// [`InstrError`].
    pub fn decode(
        rec: &InstrRecord,
        attr_section: &[u8],
        out_shape: Shape,
    ) -> Result<Instr, InstrError> {
        let op =
            Opcode::from_u8(rec.opcode).ok_or(InstrError::UnknownOpcode { byte: rec.opcode })?;
        let attr = decode_attr(op, rec.attr_word, attr_section, out_shape)
            .map_err(|error| InstrError::Attr { op, error })?;
        Ok(Instr {
            op,
            flags: rec.flags,
            out: rec.out,
            args: rec.args,
            attr,
        })
    }

    /// The argument indices used (the opcode's arity of them).
    pub fn arg_indices(&self) -> &[u32] {
        self.args.get(..self.op.arity()).unwrap_or(&self.args)
    }

    /// True when this instruction and the next are one fused chain.
    pub fn fuse_next(&self) -> bool {
        self.flags & FUSE_NEXT != 0
    }
}

fn name_at(b: &[u8], at: usize) -> [u8; NAME_BYTES] {
    let mut n = [0u8; NAME_BYTES];
    if let Some(s) = b.get(at..at + NAME_BYTES) {
        n.copy_from_slice(s);
    }
    n
}

/// Packs a name into a NUL-padded field. Returns `None` when it is empty, longer than
/// [`NAME_BYTES`], or contains a NUL.
pub fn encode_name(name: &str) -> Option<[u8; NAME_BYTES]> {
    let b = name.as_bytes();
    if b.is_empty() || b.len() > NAME_BYTES || b.contains(&0) {
        return None;
    }
    let mut n = [0u8; NAME_BYTES];
    n[..b.len()].copy_from_slice(b);
    Some(n)
}

/// Reads a NUL-padded name field. Returns `None` when it is empty, not UTF-8, or has bytes after
/// its padding starts.
pub fn decode_name(field: &[u8; NAME_BYTES]) -> Option<&str> {
    let len = field.iter().position(|&c| c == 0).unwrap_or(NAME_BYTES);
    if len == 0 || field[len..].iter().any(|&c| c != 0) {
        return None;
    }
    core::str::from_utf8(&field[..len]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn records_round_trip() {
        let h = Header {
            magic: MAGIC,
            version: VERSION,
            header_bytes: HEADER_BYTES as u16,
            total_bytes: 1234,
            crc32: 0xdead_beef,
            arena_elems: 99,
            persistent_elems: 8,
            n_tensors: 3,
            n_instrs: 4,
            n_entries: 2,
            n_bindings: 5,
            flags: 0,
            plan_id: 7,
            attr_words: 3,
        };
        let mut b = [0u8; HEADER_BYTES];
        h.encode(&mut b);
        assert_eq!(Header::decode(&b), h);
        let i = InstrRecord {
            opcode: 0x12,
            n_args: 2,
            flags: 0,
            out: 9,
            args: [1, 2, NO_ARG],
            attr_word: 1.5f32.to_bits(),
        };
        let mut b = [0u8; INSTR_RECORD_BYTES];
        i.encode(&mut b);
        assert_eq!(InstrRecord::decode(&b), i);
        assert_eq!(b[..2], [0x12, 2]);
        let n = encode_name("w1").unwrap();
        assert_eq!(decode_name(&n), Some("w1"));
        assert_eq!(encode_name(""), None);
    }

    #[test]
    fn attributes_round_trip() {
        let s = Shape::matrix(2, 3);
        let cases = [
            (Opcode::Mul, Attr::None),
            (Opcode::Reshape, Attr::Target(s)),
            (Opcode::Fill, Attr::fill(-0.0, s)),
            (Opcode::Pow, Attr::Pow(0.5)),
            (Opcode::Concat, Attr::Axis(1)),
            (Opcode::ScatterAdd, Attr::AxisTo(1, s)),
            (
                Opcode::AffineScan,
                Attr::Scan {
                    axes: 0b101,
                    reverse: true,
                },
            ),
            (
                Opcode::Slice,
                Attr::Window {
                    axis: 1,
                    start: 2,
                    len: 1,
                },
            ),
            (
                Opcode::Conv,
                Attr::Conv(crate::ConvAttr::d1(2, 1, 3, 4, 5).with_extent(&[6])),
            ),
            (
                Opcode::ConvTranspose,
                Attr::Conv(
                    crate::ConvAttr::d2([2, 3], [4, 5], [6, 7], [8, 9], 10).with_extent(&[11, 12]),
                ),
            ),
            (
                Opcode::MaxPool,
                Attr::Pool(
                    PoolWindow::new_2d([2, 3], [4, 5], [6, 7, 8, 9]).with_dilations([10, 11]),
                ),
            ),
            (
                Opcode::AvgPoolBackward,
                Attr::PoolTo(
                    PoolWindow::new_1d(3, 2, [1, 0]).with_count_include_pad(true),
                    s,
                ),
            ),
        ];
        for (op, attr) in cases {
            let mut section = [0u8; 4 * 16];
            let word = match encode_attr(&attr) {
                EncodedAttr::Inline(w) => w,
                EncodedAttr::Block { words, len } => {
                    // At word 2, after two unrelated words.
                    section[8..12].copy_from_slice(&(len as u32).to_le_bytes());
                    for (k, w) in words[..len].iter().enumerate() {
                        section[12 + 4 * k..16 + 4 * k].copy_from_slice(&w.to_le_bytes());
                    }
                    2
                }
            };
            assert_eq!(decode_attr(op, word, &section, s), Ok(attr), "{op}");
        }
        assert_eq!(
            decode_attr(Opcode::Mul, 1, &[], s),
            Err(AttrError::NonzeroWord { word: 1 })
        );
        assert_eq!(
            decode_attr(Opcode::Slice, 0, &[3, 0, 0, 0], s),
            Err(AttrError::BlockOutOfRange { at: 0 })
        );
        assert_eq!(
            decode_attr(Opcode::Pad, 0, &[2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], s),
            Err(AttrError::BlockLength {
                expected: 3,
                found: 2
            })
        );
    }

    #[test]
    fn conv_blocks_are_laid_out_as_onnx_orders_them() {
        // groups, strides, pads (begins then ends, ONNX's order), dilations, extent.
        let a = crate::ConvAttr::d2([2, 3], [4, 5], [6, 7], [8, 9], 10).with_extent(&[11, 12]);
        match encode_attr(&Attr::Conv(a)) {
            EncodedAttr::Block { words, len } => {
                assert_eq!(words[..len], [10, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12]);
            }
            other => panic!("{other:?}"),
        }
        let one = crate::ConvAttr::d1(2, 1, 3, 4, 5).with_extent(&[6]);
        match encode_attr(&Attr::Conv(one)) {
            EncodedAttr::Block { words, len } => assert_eq!(words[..len], [5, 2, 1, 3, 4, 6]),
            other => panic!("{other:?}"),
        }
        // Another length than 6 or 11 is refused; a block running past the section too.
        let words = |w: &[u32]| w.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let s = Shape::SCALAR;
        assert_eq!(
            decode_attr(Opcode::Conv, 0, &words(&[7, 1, 1, 0, 0, 1, 0, 0]), s),
            Err(AttrError::BlockLength {
                expected: 6,
                found: 7
            })
        );
        assert_eq!(
            decode_attr(Opcode::Conv, 0, &words(&[11, 1, 1, 1, 0, 0]), s),
            Err(AttrError::BlockOutOfRange { at: 0 })
        );
        assert_eq!(
            decode_attr(Opcode::Conv, 1, &words(&[0, 6, 1, 1, 0, 0, 1, 3]), s),
            Ok(Attr::Conv(
                crate::ConvAttr::d1(1, 0, 0, 1, 1).with_extent(&[3])
            ))
        );
    }

    #[test]
    fn a_pool_block_is_eleven_words_in_onnx_order_and_its_flag_is_0_or_1() {
        let w = PoolWindow::new_2d([2, 3], [4, 5], [6, 7, 8, 9])
            .with_dilations([10, 11])
            .with_count_include_pad(true);
        match encode_attr(&Attr::Pool(w)) {
            EncodedAttr::Block { words, len } => {
                assert_eq!(words[..len], [2, 3, 4, 5, 10, 11, 6, 7, 8, 9, 1]);
            }
            other => panic!("{other:?}"),
        }
        let s = Shape::matrix(2, 3);
        let mut section = alloc::vec::Vec::new();
        for word in [11u32, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0, 2] {
            section.extend_from_slice(&word.to_le_bytes());
        }
        assert_eq!(
            decode_attr(Opcode::AvgPool, 0, &section, s),
            Err(AttrError::OutOfRange { word: 2 })
        );
        assert_eq!(
            decode_attr(Opcode::AvgPool, 0, &section[..44], s),
            Err(AttrError::BlockOutOfRange { at: 0 })
        );
    }

    #[test]
    fn a_scan_word_is_the_mask_and_the_direction_bit() {
        let s = Shape::vector(3);
        let attr = Attr::Scan {
            axes: 0b11,
            reverse: true,
        };
        assert_eq!(encode_attr(&attr), EncodedAttr::Inline(0x103));
        assert_eq!(
            decode_attr(Opcode::CumprodExclusive, 0x103, &[], s),
            Ok(attr)
        );
        assert_eq!(
            decode_attr(Opcode::CumprodExclusive, 0x203, &[], s),
            Err(AttrError::OutOfRange { word: 0x203 })
        );
    }

    #[test]
    fn crc_is_the_zlib_crc() {
        assert_eq!(CRC32.checksum(b"123456789"), 0xCBF4_3926);
    }
}
