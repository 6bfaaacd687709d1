//! One test per rejection: each damage has its CRC recomputed, so validation (not the
//! checksum) must stop it, with the specific variant.

// The fused-chain tests need feature `fusion` (the firmware's build leaves it out).
#![cfg_attr(not(feature = "fusion"), allow(unused_imports, dead_code))]

use crate::common;

use common::mlp::*;
use common::*;
use tapeplan_core::format::{
    BindingKind, TensorKind, ALL_ENTRIES, FUSE_NEXT, HEADER_BYTES, NO_ARG, VERSION,
};
use tapeplan_core::{OpError, Opcode, Shape};
use tapeplan_runtime::{
    DecodeError, Limits, Operand, ParseError, Plan, Scratch, Section, Session, ValidateError,
};

fn err(bytes: Vec<u8>) -> ParseError {
    let e = Plan::parse(&bytes).unwrap_err();
    // Every error has a lowercase message.
    let msg = e.to_string();
    assert!(
        !msg.is_empty() && !msg.starts_with(char::is_uppercase),
        "{msg}"
    );
    e
}

#[test]
fn the_example_is_valid() {
    Plan::parse(&mlp_plan()).unwrap();
}

#[test]
fn truncated_and_trailing() {
    let b = mlp_plan();
    let n = b.len();
    assert_eq!(
        err(b[..HEADER_BYTES - 1].to_vec()),
        ParseError::Decode(DecodeError::Truncated {
            needed_bytes: HEADER_BYTES,
            found_bytes: HEADER_BYTES - 1
        })
    );
    assert_eq!(
        err(b[..n - 1].to_vec()),
        ParseError::Decode(DecodeError::Truncated {
            needed_bytes: n,
            found_bytes: n - 1
        })
    );
    let mut long = b.clone();
    long.push(0);
    assert_eq!(
        err(long),
        ParseError::Decode(DecodeError::TrailingBytes {
            expected_bytes: n,
            found_bytes: n + 1
        })
    );
}

#[test]
fn header_rules() {
    let b = mlp_plan();
    assert_eq!(
        err(with_header(b.clone(), |h| h.magic = *b"TPLX")),
        ParseError::Decode(DecodeError::BadMagic { found: *b"TPLX" })
    );
    assert_eq!(
        err(with_header(b.clone(), |h| h.version = VERSION + 1)),
        ParseError::Decode(DecodeError::FutureVersion {
            found: VERSION + 1,
            supported: VERSION
        })
    );
    assert_eq!(
        err(with_header(b.clone(), |h| h.version = u16::MAX)),
        ParseError::Decode(DecodeError::FutureVersion {
            found: u16::MAX,
            supported: VERSION
        })
    );
    assert_eq!(
        err(with_header(b.clone(), |h| h.version = 0)),
        ParseError::Decode(DecodeError::UnknownVersion { found: 0 })
    );
    assert_eq!(
        err(with_header(b.clone(), |h| h.header_bytes = 64)),
        ParseError::Decode(DecodeError::BadHeaderBytes { found: 64 })
    );
    assert_eq!(
        err(with_header(b.clone(), |h| h.flags = 4)),
        ParseError::Decode(DecodeError::UnknownFlags { found: 4 })
    );
    assert_eq!(
        err(with_header(b.clone(), |h| h.flags = 0x8000_0003)),
        ParseError::Decode(DecodeError::UnknownFlags { found: 0x8000_0003 })
    );
    assert_eq!(
        err(with_header(b.clone(), |h| h.flags = 0x8000_0001)),
        ParseError::Decode(DecodeError::UnknownFlags { found: 0x8000_0001 })
    );
    assert_eq!(
        err(with_header(b.clone(), |h| h.n_bindings += 1)),
        ParseError::Decode(DecodeError::SizeMismatch {
            expected_bytes: b.len() as u64 + 36,
            total_bytes: b.len() as u32
        })
    );
    assert_eq!(
        err(with_header(b.clone(), |h| h.persistent_elems = 18)),
        ParseError::Validate(ValidateError::BadPersistentRegion {
            persistent_elems: 18,
            arena_elems: 72
        })
    );
    assert_eq!(
        err(with_header(b.clone(), |h| h.persistent_elems = 76)),
        ParseError::Validate(ValidateError::BadPersistentRegion {
            persistent_elems: 76,
            arena_elems: 72
        })
    );
    let mut noentries = mlp_builder();
    noentries.entries.clear();
    noentries.bindings.retain(|x| x.entry == ALL_ENTRIES);
    assert_eq!(
        err(noentries.build()),
        ParseError::Validate(ValidateError::NoEntries)
    );
}

#[test]
fn checksum() {
    let mut b = mlp_plan();
    b[60] ^= 1;
    assert!(matches!(
        err(b),
        ParseError::Decode(DecodeError::BadChecksum { .. })
    ));
}

#[test]
fn limits() {
    let b = mlp_plan();
    let tight = Limits {
        max_tensors: 5,
        ..Limits::DEFAULT
    };
    assert_eq!(
        Plan::parse_with_limits(&b, &tight).unwrap_err(),
        ParseError::Decode(DecodeError::TooMany {
            section: Section::Tensors,
            found: 10,
            limit: 5
        })
    );
    let tight = Limits {
        max_instrs: 6,
        ..Limits::DEFAULT
    };
    assert!(matches!(
        Plan::parse_with_limits(&b, &tight),
        Err(ParseError::Decode(DecodeError::TooMany {
            section: Section::Instrs,
            ..
        }))
    ));
    // A work cap: the example's entries do a few hundred element operations.
    let plan = Plan::parse(&b).unwrap();
    let worst = plan.entries().map(|e| plan.entry_work(e)).max().unwrap();
    assert!(worst > 0);
    let capped = Limits {
        max_work_per_entry: Some(worst - 1),
        ..Limits::DEFAULT
    };
    assert!(matches!(
        Plan::parse_with_limits(&b, &capped),
        Err(ParseError::Validate(ValidateError::TooMuchWork { work, .. })) if work == worst
    ));
    let enough = Limits {
        max_work_per_entry: Some(worst),
        ..Limits::DEFAULT
    };
    assert!(Plan::parse_with_limits(&b, &enough).is_ok());
    // Caps above the spec's count as the spec's.
    let loose = Limits {
        max_entries: 1000,
        ..Limits::DEFAULT
    };
    let mut many = mlp_builder();
    for i in 0..17 {
        many.entry(&format!("e{i}"), 1, 1);
    }
    assert_eq!(
        Plan::parse_with_limits(&many.build(), &loose).unwrap_err(),
        ParseError::Decode(DecodeError::TooMany {
            section: Section::Entries,
            found: 19,
            limit: 16
        })
    );
    assert_eq!(
        err(with_header(b.clone(), |h| h.n_tensors = 20_000)),
        ParseError::Decode(DecodeError::TooMany {
            section: Section::Tensors,
            found: 20_000,
            limit: 16_384
        })
    );
    // Within the spec's cap but over `Plan::parse`'s stack scratch: the way out is named.
    assert_eq!(
        err(with_header(b.clone(), |h| h.n_tensors = 5000)),
        ParseError::Decode(DecodeError::ScratchTooSmall {
            tensors: 5000,
            capacity: 4096
        })
    );
    // A scratch for fewer tensors caps the plan.
    let mut small = Scratch::<8>::new();
    assert_eq!(
        Plan::parse_with_scratch(&b, &Limits::DEFAULT, &mut small).unwrap_err(),
        ParseError::Decode(DecodeError::ScratchTooSmall {
            tensors: 10,
            capacity: 8
        })
    );
    let mut enough = Scratch::<10>::new();
    Plan::parse_with_scratch(&b, &Limits::DEFAULT, &mut enough).unwrap();
}

#[test]
fn tensor_rules() {
    let b = mlp_plan();
    let x = X as usize;
    assert_eq!(
        err(with_tensor(b.clone(), x, |t| t.reserved = 1)),
        ParseError::Decode(DecodeError::TensorReserved { tensor: X })
    );
    assert_eq!(
        err(with_tensor(b.clone(), x, |t| t.rank = 5)),
        ParseError::Decode(DecodeError::TensorRank { tensor: X, rank: 5 })
    );
    assert_eq!(
        err(with_tensor(b.clone(), x, |t| t.rank = 1)),
        ParseError::Decode(DecodeError::TensorDims { tensor: X })
    );
    assert_eq!(
        err(with_tensor(b.clone(), x, |t| t.dims = [1 << 15, 1 << 14, 0, 0])),
        ParseError::Decode(DecodeError::TensorTooLarge { tensor: X })
    );
    assert_eq!(
        err(with_tensor(b.clone(), x, |t| t.offset_elems = 18)),
        ParseError::Validate(ValidateError::TensorMisaligned {
            tensor: X,
            offset_elems: 18
        })
    );
    assert_eq!(
        err(with_tensor(b.clone(), x, |t| t.kind = 3)),
        ParseError::Decode(DecodeError::TensorKind { tensor: X, kind: 3 })
    );
    // Past the arena.
    assert_eq!(
        err(with_tensor(b.clone(), x, |t| t.offset_elems = 68)),
        ParseError::Validate(ValidateError::TensorOutsideRegion {
            tensor: X,
            offset_elems: 68,
            elems: 6,
            kind: TensorKind::Scratch
        })
    );
    assert_eq!(
        err(with_tensor(b.clone(), x, |t| t.offset_elems = u32::MAX - 3)),
        ParseError::Validate(ValidateError::TensorOutsideRegion {
            tensor: X,
            offset_elems: u32::MAX - 3,
            elems: 6,
            kind: TensorKind::Scratch
        })
    );
    // A scratch tensor in the persistent region, a persistent one in scratch.
    assert_eq!(
        err(with_tensor(b.clone(), x, |t| t.offset_elems = 8)),
        ParseError::Validate(ValidateError::TensorOutsideRegion {
            tensor: X,
            offset_elems: 8,
            elems: 6,
            kind: TensorKind::Scratch
        })
    );
    assert_eq!(
        err(with_tensor(b.clone(), B as usize, |t| t.offset_elems = 16)),
        ParseError::Validate(ValidateError::TensorOutsideRegion {
            tensor: B,
            offset_elems: 16,
            elems: 4,
            kind: TensorKind::Persistent
        })
    );
}

#[test]
fn instruction_rules() {
    let b = mlp_plan();
    assert_eq!(
        err(with_instr(b.clone(), 2, |i| i.opcode = 0x03)),
        ParseError::Decode(DecodeError::UnknownOpcode { instr: 2, byte: 3 })
    );
    assert_eq!(
        err(with_instr(b.clone(), 4, |i| i.opcode = 0x01)),
        ParseError::Validate(ValidateError::LeafInstruction {
            instr: 4,
            op: Opcode::Parameter
        })
    );
    // n_args disagrees with the arity.
    assert_eq!(
        err(with_instr(b.clone(), 2, |i| i.n_args = 1)),
        ParseError::Decode(DecodeError::ArityMismatch {
            instr: 2,
            op: Opcode::Add,
            n_args: 1
        })
    );
    // A unary opcode with two arguments.
    assert_eq!(
        err(with_instr(b.clone(), 2, |i| i.opcode = Opcode::Tanh.to_u8())),
        ParseError::Decode(DecodeError::ArityMismatch {
            instr: 2,
            op: Opcode::Tanh,
            n_args: 2
        })
    );
    assert_eq!(
        err(with_instr(b.clone(), 2, |i| i.flags = 2)),
        ParseError::Decode(DecodeError::InstrReserved { instr: 2 })
    );
    assert_eq!(
        err(with_instr(b.clone(), 2, |i| i.out = 10)),
        ParseError::Validate(ValidateError::TensorIndex {
            instr: 2,
            operand: Operand::Out,
            tensor: 10
        })
    );
    assert_eq!(
        err(with_instr(b.clone(), 2, |i| i.args[1] = 99)),
        ParseError::Validate(ValidateError::TensorIndex {
            instr: 2,
            operand: Operand::Arg(1),
            tensor: 99
        })
    );
    assert_eq!(
        err(with_instr(b.clone(), 3, |i| i.args[1] = 0)),
        ParseError::Decode(DecodeError::UnusedArgSlot {
            instr: 3,
            slot: 1,
            found: 0
        })
    );
    assert_eq!(
        err(with_instr(b.clone(), 2, |i| i.attr_word = 1)),
        ParseError::Decode(DecodeError::NonzeroAttr {
            instr: 2,
            op: Opcode::Add,
            attr: 1
        })
    );
    // broadcast([2, 3] -> [2, 4]) breaks the shape rule.
    assert_eq!(
        err(with_instr(b.clone(), 1, |i| i.args[0] = X)),
        ParseError::Validate(ValidateError::ShapeRule {
            instr: 1,
            error: OpError::BadTarget {
                op: Opcode::Broadcast,
                from: Shape::new(&[2, 3]).unwrap(),
                to: Shape::new(&[2, 4]).unwrap(),
            }
        })
    );
    // add of [2, 3] and [2, 4].
    assert!(matches!(
        err(with_instr(b.clone(), 2, |i| i.args[0] = X)),
        ParseError::Validate(ValidateError::ShapeRule {
            instr: 2,
            error: OpError::ShapeMismatch { .. }
        })
    ));
    // matmul's output declared [4, 2] where the rule gives [2, 4].
    assert_eq!(
        err(with_tensor(b.clone(), XW as usize, |t| t.dims = [4, 2, 0, 0])),
        ParseError::Validate(ValidateError::OutputShape {
            instr: 0,
            op: Opcode::MatMul,
            inferred: Shape::new(&[2, 4]).unwrap(),
            found: Shape::new(&[4, 2]).unwrap(),
        })
    );
}

#[test]
fn entry_rules() {
    let b = mlp_plan();
    assert_eq!(
        err(with_entry(b.clone(), 1, |e| e.name = [0; 24])),
        ParseError::Decode(DecodeError::BadName {
            section: Section::Entries,
            index: 1
        })
    );
    assert_eq!(
        err(with_entry(b.clone(), 1, |e| {
            e.name[3] = 0;
        })),
        ParseError::Decode(DecodeError::BadName {
            section: Section::Entries,
            index: 1
        })
    );
    assert_eq!(
        err(with_entry(b.clone(), 1, |e| e.name[0] = 0xFF)),
        ParseError::Decode(DecodeError::BadName {
            section: Section::Entries,
            index: 1
        })
    );
    assert_eq!(
        err(with_entry(b.clone(), 1, |e| e.name =
            tapeplan_core::format::encode_name("forward").unwrap())),
        ParseError::Validate(ValidateError::DuplicateName {
            section: Section::Entries,
            index: 1,
            first: 0
        })
    );
    assert_eq!(
        err(with_entry(b.clone(), 0, |e| e.first_instr = 5)),
        ParseError::Validate(ValidateError::EntryRange {
            entry: 0,
            first_instr: 5,
            n_instrs: 4
        })
    );
    assert_eq!(
        err(with_entry(b.clone(), 0, |e| {
            e.first_instr = u32::MAX;
            e.n_instrs = 2;
        })),
        ParseError::Validate(ValidateError::EntryRange {
            entry: 0,
            first_instr: u32::MAX,
            n_instrs: 2
        })
    );
}

#[test]
fn binding_rules() {
    let b = mlp_plan();
    // Bindings: 0 param w, 1 param b, 2 fwd input x, 3 fwd output y, 4 train input x,
    // 5 train output y, 6 train update w.
    assert_eq!(
        err(with_binding(b.clone(), 2, |x| x.name[5] = b'z')),
        ParseError::Decode(DecodeError::BadName {
            section: Section::Bindings,
            index: 2
        })
    );
    assert_eq!(
        err(with_binding(b.clone(), 2, |x| x.kind = 4)),
        ParseError::Decode(DecodeError::BindingKind {
            binding: 2,
            kind: 4
        })
    );
    assert_eq!(
        err(with_binding(b.clone(), 2, |x| x.reserved[2] = 1)),
        ParseError::Decode(DecodeError::BindingReserved { binding: 2 })
    );
    assert_eq!(
        err(with_binding(b.clone(), 0, |x| x.entry = 0)),
        ParseError::Validate(ValidateError::BindingEntry {
            binding: 0,
            entry: 0
        })
    );
    assert_eq!(
        err(with_binding(b.clone(), 2, |x| x.entry = ALL_ENTRIES)),
        ParseError::Validate(ValidateError::BindingEntry {
            binding: 2,
            entry: ALL_ENTRIES
        })
    );
    assert_eq!(
        err(with_binding(b.clone(), 2, |x| x.entry = 2)),
        ParseError::Validate(ValidateError::BindingEntry {
            binding: 2,
            entry: 2
        })
    );
    assert_eq!(
        err(with_binding(b.clone(), 2, |x| x.tensor = 10)),
        ParseError::Validate(ValidateError::BindingTensor {
            binding: 2,
            tensor: 10
        })
    );
    assert_eq!(
        err(with_binding(b.clone(), 1, |x| x.tensor = X)),
        ParseError::Validate(ValidateError::BindingRegion {
            binding: 1,
            kind: BindingKind::Parameter
        })
    );
    assert_eq!(
        err(with_binding(b.clone(), 2, |x| x.tensor = W)),
        ParseError::Validate(ValidateError::BindingRegion {
            binding: 2,
            kind: BindingKind::Input
        })
    );
    // An update in scratch is a guarded update; it must still have its parameter's shape.
    assert_eq!(
        err(with_binding(b.clone(), 6, |x| x.tensor = Y)),
        ParseError::Validate(ValidateError::UpdateMismatch {
            binding: 6,
            parameter: 0
        })
    );
    // Two parameters named "w".
    assert_eq!(
        err(with_binding(b.clone(), 1, |x| x.name[0] = b'w')),
        ParseError::Validate(ValidateError::DuplicateName {
            section: Section::Bindings,
            index: 1,
            first: 0
        })
    );
    // Two outputs "y" of the train step.
    assert_eq!(
        err(with_binding(b.clone(), 3, |x| x.entry = 1)),
        ParseError::Validate(ValidateError::DuplicateName {
            section: Section::Bindings,
            index: 5,
            first: 3
        })
    );
    assert_eq!(
        err(with_binding(b.clone(), 6, |x| x.name[0] = b'v')),
        ParseError::Validate(ValidateError::UpdateWithoutParameter { binding: 6 })
    );
    // The update tensor moved: another offset than its parameter's.
    assert_eq!(
        err(with_tensor(b.clone(), W_NEW as usize, |t| {
            t.offset_elems = 4;
        })),
        ParseError::Validate(ValidateError::UpdateMismatch {
            binding: 6,
            parameter: 0
        })
    );
}

#[test]
fn definition_before_use() {
    let b = mlp_plan();
    // The forward entry starting at the add: matmul's output was never defined.
    assert_eq!(
        err(with_entry(b.clone(), 0, |e| {
            e.first_instr = 2;
            e.n_instrs = 2;
        })),
        ParseError::Validate(ValidateError::UseBeforeDefinition {
            entry: 0,
            instr: 2,
            tensor: XW
        })
    );
    // tanh(s) -> s: s is written a second time.
    assert_eq!(
        err(with_instr(b.clone(), 3, |i| i.out = S)),
        ParseError::Validate(ValidateError::Redefinition {
            entry: 0,
            instr: 3,
            tensor: S
        })
    );
    // An instruction reading its own output.
    assert_eq!(
        err(with_instr(b.clone(), 3, |i| i.args[0] = Y)),
        ParseError::Validate(ValidateError::UseBeforeDefinition {
            entry: 0,
            instr: 3,
            tensor: Y
        })
    );
    // sub(w, fw) -> w: writes the parameter itself.
    assert_eq!(
        err(with_instr(b.clone(), 6, |i| i.out = W)),
        ParseError::Validate(ValidateError::WritesParameter {
            entry: 1,
            instr: 6,
            tensor: W
        })
    );
    // An instruction no entry runs still may not write a parameter.
    let mut stray = mlp_builder();
    stray.instr(Opcode::Neg, B, &[B], 0);
    assert_eq!(
        err(stray.build()),
        ParseError::Validate(ValidateError::WritesParameter {
            entry: ALL_ENTRIES,
            instr: 7,
            tensor: B
        })
    );
    // tanh(x) -> x: writes an input.
    assert_eq!(
        err(with_instr(b.clone(), 3, |i| {
            i.args[0] = X;
            i.out = X;
        })),
        ParseError::Validate(ValidateError::WritesInput {
            entry: 0,
            instr: 3,
            tensor: X
        })
    );
    // The forward entry running the update too: a persistent write that is not its update.
    let mut fwd_all = mlp_builder();
    fwd_all.entries[0].n_instrs = 7;
    assert_eq!(
        err(fwd_all.build()),
        ParseError::Validate(ValidateError::PersistentNotUpdate {
            entry: 0,
            instr: 6,
            tensor: W_NEW
        })
    );
    // The forward output bound to a tensor only the train step defines.
    assert_eq!(
        err(with_binding(b.clone(), 3, |x| x.tensor = FW)),
        ParseError::Validate(ValidateError::NotDefined {
            entry: 0,
            binding: 3,
            tensor: FW
        })
    );
    // An update in the forward entry, which never defines it.
    assert_eq!(
        err(with_binding(b.clone(), 6, |x| x.entry = 0)),
        ParseError::Validate(ValidateError::NotDefined {
            entry: 0,
            binding: 6,
            tensor: W_NEW
        })
    );
    // An output that is an input (defined, but by no instruction).
    assert_eq!(
        err(with_binding(b.clone(), 3, |x| x.tensor = X)),
        ParseError::Validate(ValidateError::NotDefined {
            entry: 0,
            binding: 3,
            tensor: X
        })
    );
}

#[test]
fn overlapping_live_buffers() {
    let b = mlp_plan();
    // broadcast(b) written over matmul's output while it is still live.
    assert_eq!(
        err(with_tensor(b.clone(), BB as usize, |t| t.offset_elems = 24)),
        ParseError::Validate(ValidateError::Overlap {
            entry: 0,
            tensor_a: XW,
            tensor_b: BB
        })
    );
    // Partial overlap.
    assert_eq!(
        err(with_tensor(b.clone(), BB as usize, |t| t.offset_elems = 28)),
        ParseError::Validate(ValidateError::Overlap {
            entry: 0,
            tensor_a: XW,
            tensor_b: BB
        })
    );
    // Two parameters sharing elements.
    assert_eq!(
        err(with_tensor(b.clone(), B as usize, |t| t.offset_elems = 8)),
        ParseError::Validate(ValidateError::Overlap {
            entry: 0,
            tensor_a: W,
            tensor_b: B
        })
    );
    // The matmul output over its own argument (structural: no in-place exception).
    let mut mm = mlp_builder();
    mm.tensors[X as usize].dims = [2, 4, 0, 0];
    mm.tensors[W as usize].dims = [4, 4, 0, 0];
    mm.tensors[W_NEW as usize].dims = [4, 4, 0, 0];
    mm.tensors[F as usize].dims = [4, 4, 0, 0];
    mm.tensors[FW as usize].dims = [4, 4, 0, 0];
    mm.tensors[FW as usize].offset_elems = 64;
    mm.tensors[B as usize].offset_elems = 16;
    mm.persistent_elems = 20;
    mm.arena_elems = 80;
    mm.tensors[X as usize].offset_elems = 20;
    mm.tensors[XW as usize].offset_elems = 20;
    mm.tensors[BB as usize].offset_elems = 28;
    mm.tensors[S as usize].offset_elems = 36;
    mm.tensors[Y as usize].offset_elems = 36;
    mm.tensors[F as usize].offset_elems = 44;
    assert_eq!(
        err(mm.build()),
        ParseError::Validate(ValidateError::Overlap {
            entry: 0,
            tensor_a: X,
            tensor_b: XW
        })
    );
    // The same layout with an elementwise op in place is fine (the example's tanh), but not
    // when the argument lives on: read w again after its in-place update.
    let mut late = mlp_builder();
    let g = late.tensor(64, &[3, 4], TensorKind::Scratch);
    late.arena_elems = 76;
    late.instr(Opcode::Mul, g, &[F, W], 0);
    late.entries[1].n_instrs = 8;
    assert_eq!(
        err(late.build()),
        ParseError::Validate(ValidateError::Overlap {
            entry: 1,
            tensor_a: W,
            tensor_b: W_NEW
        })
    );
}

#[test]
fn in_place_exception_is_exact() {
    // a = input [2, 4] at 0; c = add(a, a) over a's range: fine (a dies there).
    let mut ok = Builder::new(8, 0);
    let a = ok.tensor(0, &[2, 4], TensorKind::Scratch);
    let c = ok.tensor(0, &[2, 4], TensorKind::Scratch);
    ok.instr(Opcode::Add, c, &[a, a], 0);
    let e = ok.entry("main", 0, 1);
    ok.bind("a", BindingKind::Input, e, a);
    ok.bind("c", BindingKind::Output, e, c);
    Plan::parse(&ok.build()).unwrap();

    // reshape is structural: no in-place even with the same range.
    let mut rs = ok.clone();
    rs.tensors[c as usize].dims = [8, 0, 0, 0];
    rs.tensors[c as usize].rank = 1;
    rs.instrs[0] = tapeplan_core::format::InstrRecord {
        opcode: Opcode::Reshape.to_u8(),
        n_args: 1,
        flags: 0,
        out: c,
        args: [a, u32::MAX, u32::MAX],
        attr_word: 0,
    };
    assert_eq!(
        err(rs.build()),
        ParseError::Validate(ValidateError::Overlap {
            entry: 0,
            tensor_a: a,
            tensor_b: c
        })
    );

    // Same offset, but the output is a prefix of a bigger argument's range.
    let mut pre = Builder::new(16, 0);
    let big = pre.tensor(0, &[2, 4], TensorKind::Scratch);
    let row = pre.tensor(0, &[4], TensorKind::Scratch);
    pre.instr(Opcode::SumTo, row, &[big], 0);
    let e = pre.entry("main", 0, 1);
    pre.bind("a", BindingKind::Input, e, big);
    pre.bind("r", BindingKind::Output, e, row);
    assert_eq!(
        err(pre.build()),
        ParseError::Validate(ValidateError::Overlap {
            entry: 0,
            tensor_a: big,
            tensor_b: row
        })
    );

    // Elementwise in place, but a second reader of the argument comes later.
    let mut two = Builder::new(16, 0);
    let a = two.tensor(0, &[4], TensorKind::Scratch);
    let c = two.tensor(0, &[4], TensorKind::Scratch);
    let d = two.tensor(4, &[4], TensorKind::Scratch);
    two.instr(Opcode::Neg, c, &[a], 0);
    two.instr(Opcode::Mul, d, &[a, c], 0);
    let e = two.entry("main", 0, 2);
    two.bind("a", BindingKind::Input, e, a);
    two.bind("d", BindingKind::Output, e, d);
    assert_eq!(
        err(two.build()),
        ParseError::Validate(ValidateError::Overlap {
            entry: 0,
            tensor_a: a,
            tensor_b: c
        })
    );

    // Zero-element tensors occupy nothing and never overlap.
    let mut empty = Builder::new(8, 0);
    let a = empty.tensor(0, &[0, 3], TensorKind::Scratch);
    let f = empty.tensor(0, &[0, 3], TensorKind::Scratch);
    let g = empty.tensor(8, &[0], TensorKind::Scratch);
    empty.instr(Opcode::Fill, f, &[], 0);
    empty.instr(Opcode::Fill, g, &[], 0);
    let e = empty.entry("main", 0, 2);
    empty.bind("a", BindingKind::Input, e, a);
    empty.bind("f", BindingKind::Output, e, f);
    empty.bind("g", BindingKind::Output, e, g);
    let bytes = empty.build();
    Plan::parse(&bytes).unwrap();
    run_everything(&bytes);
}

/// A chain `r = x * x` (register, slot 0), `y = r + x` (scratch), then `z = tanh(y)` unfused:
/// valid, and each fusion rule broken once.
fn chain_plan() -> (Builder, [u32; 4]) {
    let mut b = Builder::new(24, 0);
    let x = b.tensor(0, &[4], TensorKind::Scratch);
    let r = b.tensor(0, &[4], TensorKind::Register);
    let y = b.tensor(4, &[4], TensorKind::Scratch);
    let z = b.tensor(8, &[4], TensorKind::Scratch);
    b.instr(Opcode::Mul, r, &[x, x], 0);
    b.instr(Opcode::Add, y, &[r, x], 0);
    b.instr(Opcode::Tanh, z, &[y], 0);
    b.instrs[0].flags = FUSE_NEXT;
    b.entry("e", 0, 3);
    b.bind("x", BindingKind::Input, 0, x);
    b.bind("z", BindingKind::Output, 0, z);
    (b, [x, r, y, z])
}

#[cfg(feature = "fusion")]
#[test]
#[cfg(feature = "fusion")] // without it, every chain is `NotBuilt`
fn fused_chain_rules() {
    use tapeplan_runtime::FusionRule as R;
    let (ok, [x, r, y, z]) = chain_plan();
    Plan::parse(&ok.build()).unwrap();
    let fusion = |instr, rule| {
        ParseError::Validate(ValidateError::Fusion {
            entry: 0,
            instr,
            rule,
        })
    };
    let with = |f: &dyn Fn(&mut Builder)| {
        let mut b = ok.clone();
        f(&mut b);
        err(b.build())
    };
    // Undefined flag bits.
    assert_eq!(
        with(&|b| b.instrs[0].flags = 3),
        ParseError::Decode(DecodeError::InstrReserved { instr: 0 })
    );
    // A member that is not elementwise (`sum_to` to the same shape).
    assert_eq!(
        with(&|b| {
            b.instrs[1] = b.instrs[2];
            b.instrs[1].opcode = Opcode::SumTo.to_u8();
            b.instrs[1].args[0] = r;
            b.instrs[1].out = y;
            b.instrs[2].args[0] = y;
        }),
        fusion(1, R::NotFusable)
    );
    // A structural member (`reshape`), however its shapes fit.
    assert_eq!(
        with(&|b| {
            b.tensors[y as usize].dims = [2, 2, 0, 0];
            b.tensors[y as usize].rank = 2;
            b.tensors[z as usize].dims = [2, 2, 0, 0];
            b.tensors[z as usize].rank = 2;
            b.instrs[1].opcode = Opcode::Reshape.to_u8();
            b.instrs[1].n_args = 1;
            b.instrs[1].args = [r, NO_ARG, NO_ARG];
        }),
        fusion(1, R::NotFusable)
    );
    // A chain open at its entry's end.
    assert_eq!(
        with(&|b| {
            b.instrs[1].flags = FUSE_NEXT;
            b.instrs[2].flags = FUSE_NEXT;
        }),
        fusion(2, R::Length)
    );
    // A register read outside its chain.
    assert_eq!(
        with(&|b| b.instrs[2].args[0] = r),
        fusion(2, R::RegisterOutsideChain)
    );
    // A register bound as an output.
    assert!(matches!(
        with(&|b| b.bindings[1].tensor = r),
        ParseError::Validate(ValidateError::BindingRegion { .. })
    ));
    // A register slot past the four.
    assert!(matches!(
        with(&|b| b.tensors[r as usize].offset_elems = 4),
        ParseError::Validate(ValidateError::TensorOutsideRegion { .. })
    ));
    // A register read from a slot another value took in between: `r2 = x + x` into slot 0
    // before `y` reads `r`.
    {
        let mut b = ok.clone();
        let r2 = b.tensor(0, &[4], TensorKind::Register);
        let tanh = b.instrs[2];
        b.instrs[2] = b.instrs[1];
        b.instrs[1] = b.instrs[0];
        b.instrs[1].opcode = Opcode::Add.to_u8();
        b.instrs[1].out = r2;
        b.instrs[1].flags = FUSE_NEXT;
        b.instrs.push(tanh);
        b.instrs[3].args[0] = y;
        b.entries[0].n_instrs = 4;
        assert_eq!(err(b.build()), fusion(2, R::RegisterSlot));
        // In another slot it is fine (`r2` is never read: harmless).
        b.tensors[r2 as usize].offset_elems = 1;
        Plan::parse(&b.build()).unwrap();
    }
    let _ = (x, z);
}

#[cfg(feature = "fusion")]
#[test]
#[cfg(feature = "fusion")] // without it, every chain is `NotBuilt`
fn fused_chain_partial_alias_is_rejected() {
    // x [8] at 0 is read by the chain's first member only; y [8] written by its second member
    // at offset 4: unfused this is legal (x dies before y is born), a tile at a time it is not.
    let mut b = Builder::new(32, 0);
    let x = b.tensor(0, &[8], TensorKind::Scratch);
    let r = b.tensor(0, &[8], TensorKind::Register);
    let y = b.tensor(4, &[8], TensorKind::Scratch);
    b.instr(Opcode::Tanh, r, &[x], 0);
    b.instr(Opcode::Neg, y, &[r], 0);
    b.instrs[0].flags = FUSE_NEXT;
    b.entry("e", 0, 2);
    b.bind("x", BindingKind::Input, 0, x);
    b.bind("y", BindingKind::Output, 0, y);
    assert_eq!(
        err(b.build()),
        ParseError::Validate(ValidateError::Fusion {
            entry: 0,
            instr: 1,
            rule: tapeplan_runtime::FusionRule::PartialAlias
        })
    );
    // The same range is fine, and runs: y = -tanh(x).
    b.tensors[y as usize].offset_elems = 0;
    let bytes = b.build();
    let plan = Plan::parse(&bytes).unwrap();
    let e = plan.entry("e").unwrap();
    let mut arena = vec![0.0; 32];
    let mut s = Session::bind(&plan, &mut arena).unwrap();
    let xs = [0.5f32, -1.0, 2.0, 0.0, -0.0, 3.0, -3.0, 1e-3];
    s.set_input(e, "x", &xs).unwrap();
    s.run(e).unwrap();
    let want: Vec<u32> = xs.iter().map(|v| (-libm::tanhf(*v)).to_bits()).collect();
    let got: Vec<u32> = s
        .output(e, "y")
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect();
    assert_eq!(got, want);
}

#[cfg(not(feature = "fusion"))]
#[test]
fn fused_chains_need_the_feature() {
    let (ok, _) = chain_plan();
    assert_eq!(
        err(ok.build()),
        ParseError::Validate(ValidateError::Fusion {
            entry: 0,
            instr: 0,
            rule: tapeplan_runtime::FusionRule::NotBuilt
        })
    );
}

/// A runtime built without fused chains (firmware) rejects every plan with a chain, at its
/// first member, and still runs plans whose register tensors nothing uses (through
/// `Session::run` and `Session::run_program`: the reference kernel's bits, nothing written past
/// the arena). The fused-chain suite itself is `tapeplan-tests`' `fusion_hostile_chains`, whose
/// runtime always has `fusion`; this part of it runs here, in the builds without.
#[cfg(not(feature = "fusion"))]
#[test]
fn without_the_feature_chains_are_rejected() {
    use std::collections::HashMap;
    use tapeplan_runtime::{Decoded, FusionRule};
    let fusion = |instr, rule| {
        ParseError::Validate(ValidateError::Fusion {
            entry: 0,
            instr,
            rule,
        })
    };
    assert_eq!(
        err(neg_chain(8, 3).build()),
        fusion(0, FusionRule::NotBuilt)
    );
    // y = neg(x), x at 0 and y at 8, and a register tensor nothing reads or writes.
    let mut b = neg_chain(8, 1);
    b.tensor(3, &[8], TensorKind::Register);
    let bytes = b.build();
    let plan = Plan::parse(&bytes).unwrap();
    let init = floats(1, 16);
    let mut vals = HashMap::from([(0u32, init[..8].to_vec())]);
    reference(&b, 0, 1, &mut vals);
    let mut want = init.clone();
    want[8..].copy_from_slice(&vals[&1]);
    const SENTINEL: f32 = -7.25e-33;
    for decoded in [false, true] {
        let mut arena = init.clone();
        arena.extend([SENTINEL; 37]);
        let e = plan.entry("e").unwrap();
        let mut s = Session::bind(&plan, &mut arena).unwrap();
        if decoded {
            let mut buf = vec![Decoded::EMPTY; plan.entry_instrs(e).unwrap()];
            let p = s.decode(e, &mut buf).unwrap();
            s.run_program(&p).unwrap();
        } else {
            s.run(e).unwrap();
        }
        let arena = s.into_arena();
        assert!(
            arena[16..]
                .iter()
                .all(|v| v.to_bits() == SENTINEL.to_bits()),
            "wrote past the arena"
        );
        assert_eq!(bits(&arena[..16]), bits(&want), "decoded {decoded}");
    }
    // Registers used by instructions outside a chain: the chain rule, not `NotBuilt`.
    let mut b = neg_chain(8, 2);
    b.instrs[0].flags = 0;
    assert_eq!(err(b.build()), fusion(0, FusionRule::RegisterOutsideChain));
}

/// Flag bit 0 is the math profile: a plan of either profile parses in a build with both (the
/// default), and a build with one (a firmware's) refuses the other's with `MathProfile`.
/// `cargo xtask ci` runs this file once per single-profile build too.
#[test]
fn math_profile_flag() {
    use tapeplan_core::MathProfile;
    let b = mlp_plan();
    for math in MathProfile::ALL {
        let bytes = with_header(b.clone(), |h| h.flags = math.flags());
        if math.in_build() {
            assert_eq!(Plan::parse(&bytes).unwrap().math(), math);
        } else {
            assert_eq!(
                err(bytes),
                ParseError::Validate(ValidateError::MathProfile { found: math })
            );
        }
    }
    assert_eq!(
        MathProfile::ALL.iter().filter(|m| m.in_build()).count(),
        usize::from(cfg!(feature = "math-precise")) + usize::from(cfg!(feature = "math-fast"))
    );
}

/// Flag bit 1 is the arithmetic profile: a plan of either profile parses in a build with
/// `arith-fma` (the default), with either math profile beside it, and a build without it
/// refuses an `fma` plan with `ArithProfile`.
#[test]
fn arith_profile_flag() {
    use tapeplan_core::{ArithProfile, MathProfile};
    let b = mlp_plan();
    for arith in ArithProfile::ALL {
        for math in MathProfile::ALL.into_iter().filter(|m| m.in_build()) {
            let bytes = with_header(b.clone(), |h| h.flags = math.flags() | arith.flags());
            if arith.in_build() {
                let plan = Plan::parse(&bytes).unwrap();
                assert_eq!((plan.arith(), plan.math()), (arith, math));
            } else {
                assert_eq!(
                    err(bytes),
                    ParseError::Validate(ValidateError::ArithProfile { found: arith })
                );
            }
        }
    }
    assert_eq!(ArithProfile::Fma.flags(), 2);
    assert_eq!(ArithProfile::Fma.in_build(), cfg!(feature = "arith-fma"));
}

/// A broadcast's source is read away from the tile: a chain may not write over it, not even
/// exactly (which would be fine for an elementwise reader).
#[cfg(feature = "fusion")]
#[test]
fn fused_broadcast_source_is_never_written_by_its_chain() {
    let build_from = |x_dims: &[u32], y_at: u32| {
        let mut b = Builder::new(16, 0);
        let x = b.tensor(0, x_dims, TensorKind::Scratch);
        let r = b.tensor(0, &[2, 4], TensorKind::Register);
        let y = b.tensor(y_at, &[2, 4], TensorKind::Scratch);
        b.instr(Opcode::Broadcast, r, &[x], 0);
        b.instr(Opcode::Neg, y, &[r], 0);
        b.instrs[0].flags = FUSE_NEXT;
        b.entry("e", 0, 2);
        b.bind("x", BindingKind::Input, 0, x);
        b.bind("y", BindingKind::Output, 0, y);
        b.build()
    };
    let build = |y_at: u32| build_from(&[4], y_at);
    // Exactly over an identity broadcast's source [2, 4]: still refused.
    assert_eq!(
        err(build_from(&[2, 4], 0)),
        ParseError::Validate(ValidateError::Fusion {
            entry: 0,
            instr: 1,
            rule: tapeplan_runtime::FusionRule::PartialAlias
        })
    );
    // y [2, 4] over x [4] (x dies at the broadcast: fine one instruction at a time).
    assert_eq!(
        err(build(0)),
        ParseError::Validate(ValidateError::Fusion {
            entry: 0,
            instr: 1,
            rule: tapeplan_runtime::FusionRule::PartialAlias
        })
    );
    let bytes = build(4);
    let plan = Plan::parse(&bytes).unwrap();
    let e = plan.entry("e").unwrap();
    let mut arena = vec![0.0; 16];
    let mut s = Session::bind(&plan, &mut arena).unwrap();
    s.set_input(e, "x", &[1.0, -2.0, 0.5, -0.0]).unwrap();
    s.run(e).unwrap();
    let got: Vec<u32> = s
        .output(e, "y")
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect();
    let want: Vec<u32> = [-1.0f32, 2.0, -0.5, 0.0, -1.0, 2.0, -0.5, 0.0]
        .iter()
        .map(|v| v.to_bits())
        .collect();
    assert_eq!(got, want);
}
