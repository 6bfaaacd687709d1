//! Fused chains under attack: hand-built hostile chains (every rule of the spec's "Fused chains"
//! broken once, and the edge cases it allows run), and thousands of random chained entries over
//! aliased arena ranges and register slots. Every plan the validator accepts must leave the arena
//! exactly as running its instructions one after another does (`tapeplan_tests::sequential`,
//! whole tensors, registers by tensor index), through both `Session::run` and
//! `Session::run_program` and as an unfused copy (registers moved to fresh arena ranges), and
//! never touch an element past `arena_elems`. NaNs compare as one class. Without feature
//! `fusion` (the firmware's build), chains are `NotBuilt`: that test stays with the runtime
//! (`reject::without_the_feature_chains_are_rejected`), since this crate's runtime has `fusion`.
#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::arithmetic_side_effects,
    missing_docs
)]

use std::collections::HashMap;

use tapeplan_core::format::{BindingKind, TensorKind, FUSE_NEXT, MAX_CHAIN_INSTRS};
use tapeplan_core::Opcode;
use tapeplan_runtime::{
    DecodeError, Decoded, ExecError, FusionRule, ParseError, Plan, Session, ValidateError,
};
use tapeplan_tests::builder::*;
use tapeplan_tests::rng::Rng;
use tapeplan_tests::sequential::run_entry;

const SENTINEL: f32 = -7.25e-33;
const PAD: usize = 37;

/// Runs every entry of `b` (which must validate) from `init` three ways — sequentially,
/// `Session::run`, `Session::run_program` — over an arena with sentinels past `arena_elems`,
/// and checks the three agree bit for bit on the whole arena and that the sentinels survive.
fn agree(b: &Builder, init: &[f32]) {
    let bytes = b.build();
    let plan = Plan::parse(&bytes).unwrap();
    let n = plan.arena_elems();
    assert_eq!(init.len(), n);
    // The same plan unfused: no flags, every register a fresh arena range past the old arena.
    // It must validate (fresh ranges overlap nothing), and compute the same.
    let plain = defuse(b);
    let plain_bytes = plain.build();
    let plain_plan = match Plan::parse(&plain_bytes) {
        Ok(p) => p,
        Err(e) => panic!("the unfused copy is rejected: {e:?}"),
    };
    for e in plan.entries() {
        let mut want = init.to_vec();
        let seq = run_entry(b, e.index(), &mut want);
        // Ways: `run`, `run_program`, `run` of the unfused copy, `run` with the whole plan
        // decoded and attached (`with_decoded`: the guard asked once, when attached).
        for way in 0..4 {
            let (p, size) = if way == 2 {
                (&plain_plan, plain_plan.arena_elems())
            } else {
                (&plan, n)
            };
            let mut arena = init.to_vec();
            arena.resize(size, 0.0);
            arena.extend(std::iter::repeat_n(SENTINEL, PAD));
            let mut s = Session::bind(p, &mut arena).unwrap();
            let mut all = vec![Decoded::EMPTY; p.n_instrs()];
            let got = if way == 1 {
                let mut buf = vec![Decoded::EMPTY; p.entry_instrs(e).unwrap()];
                let p = s.decode(e, &mut buf).unwrap();
                s.run_program(&p)
            } else if way == 3 {
                let decoded = s.decode_all(&mut all).unwrap();
                s.with_decoded(decoded).unwrap().run(e)
            } else {
                s.run(e)
            };
            match (&seq, got) {
                (Ok(()), Ok(())) => {}
                (Err(bi), Err(ExecError::NonFinite { binding, .. })) => assert_eq!(*bi, binding),
                (w, g) => panic!("entry {e:?} way {way}: want {w:?}, got {g:?}"),
            }
            assert!(
                arena[size..]
                    .iter()
                    .all(|v| v.to_bits() == SENTINEL.to_bits()),
                "wrote past the arena"
            );
            // A decoded program (way 1) runs no `fill` or reshaping `broadcast` whose readers
            // took stand-ins (`Session::decode`): where one of those was the last to write, its
            // scratch range may keep what it held. Everywhere else the bits must agree.
            let skip = if way == 1 {
                stand_in_ranges(b, e.index())
            } else {
                vec![false; n]
            };
            let keep = |v: &[f32]| -> Vec<u32> {
                bits(v)
                    .into_iter()
                    .zip(&skip)
                    .map(|(x, &s)| if s { 0 } else { x })
                    .collect()
            };
            assert_eq!(
                keep(&arena[..n]),
                keep(&want),
                "entry {e:?} way {way}: {:?}",
                b.instrs
            );
            // NaNs compare as one class: Rust leaves the sign and payload of a NaN result
            // unspecified (a release build and the vectorized catalog pick differently).
        }
    }
}

/// Per arena element: whether the last instruction of entry `e` to write it is an unfused
/// `fill` or `broadcast` (one a decoded program may leave out for stand-ins).
fn stand_in_ranges(b: &Builder, e: usize) -> Vec<bool> {
    let mut last = vec![false; b.arena_elems as usize];
    let entry = &b.entries[e];
    let range = entry.first_instr as usize..(entry.first_instr + entry.n_instrs) as usize;
    for (k, i) in b
        .instrs
        .iter()
        .enumerate()
        .take(range.end)
        .skip(range.start)
    {
        let t = b.tensors[i.out as usize];
        if t.kind == TensorKind::Register as u8 {
            continue;
        }
        let fused =
            i.flags & FUSE_NEXT != 0 || (k > range.start && b.instrs[k - 1].flags & FUSE_NEXT != 0);
        let op = Opcode::from_u8(i.opcode);
        let removable = !fused && matches!(op, Some(Opcode::Fill | Opcode::Broadcast));
        let at = t.offset_elems as usize;
        let end = (at + elems(&t.dims[..t.rank as usize]) as usize).min(last.len());
        for x in last.iter_mut().take(end).skip(at) {
            *x = removable;
        }
    }
    last
}

/// `b` without fusion: flags cleared, each register moved to its own range after the arena.
fn defuse(b: &Builder) -> Builder {
    let mut plain = b.clone();
    for i in &mut plain.instrs {
        i.flags = 0;
    }
    for t in &mut plain.tensors {
        if t.kind == TensorKind::Register as u8 {
            t.kind = TensorKind::Scratch as u8;
            t.offset_elems = plain.arena_elems;
            plain.arena_elems += elems(&t.dims[..t.rank as usize]).div_ceil(4) * 4;
        }
    }
    plain
}

fn fusion(instr: u32, rule: FusionRule) -> ParseError {
    ParseError::Validate(ValidateError::Fusion {
        entry: 0,
        instr,
        rule,
    })
}

fn fused(b: &mut Builder, instrs: std::ops::Range<usize>) {
    for k in instrs {
        b.instrs[k].flags = FUSE_NEXT;
    }
}

// ---------------------------------------------------------------------------------------------
// Hand-built hostile chains.

use TensorKind::{Persistent as P, Register as R, Scratch as S};

#[test]
fn chains_of_16_run_and_17_are_rejected() {
    for n in [1u32, 5, 64, 65, 200] {
        let b = neg_chain(n, MAX_CHAIN_INSTRS);
        agree(&b, &floats(u64::from(n), b.arena_elems as usize));
        let b = neg_chain(n, MAX_CHAIN_INSTRS + 1);
        assert_eq!(
            Plan::parse(&b.build()).unwrap_err(),
            fusion(MAX_CHAIN_INSTRS as u32, FusionRule::Length)
        );
        // Two chains of 16 back to back are fine; joined they are not.
        let mut b = neg_chain(n, 2 * MAX_CHAIN_INSTRS);
        b.instrs[MAX_CHAIN_INSTRS - 1].flags = 0;
        // The second chain's first member reads a register of the first: rejected.
        assert_eq!(
            Plan::parse(&b.build()).unwrap_err(),
            fusion(MAX_CHAIN_INSTRS as u32, FusionRule::RegisterSlot)
        );
        // Through the arena instead, it runs.
        let mid = b.instrs[MAX_CHAIN_INSTRS - 1].out;
        b.tensors[mid as usize].kind = S as u8;
        b.tensors[mid as usize].offset_elems = 0; // over x, which died at the first member
        agree(&b, &floats(u64::from(n) + 1, b.arena_elems as usize));
    }
}

#[test]
fn registers_read_before_written_or_across_chains() {
    // r read by the chain's first member, written by its second.
    let mut b = Builder::new(8, 0);
    let x = b.tensor(0, &[4], S);
    let r = b.tensor(0, &[4], R);
    let y = b.tensor(4, &[4], S);
    b.instr(Opcode::Neg, y, &[r], 0);
    b.instr(Opcode::Neg, r, &[x], 0);
    fused(&mut b, 0..1);
    b.entry("e", 0, 2);
    b.bind("x", BindingKind::Input, 0, x);
    b.bind("y", BindingKind::Output, 0, y);
    assert!(matches!(
        Plan::parse(&b.build()).unwrap_err(),
        ParseError::Validate(ValidateError::UseBeforeDefinition { .. })
    ));

    // Written in one entry's chain, read in another entry's chain (same instructions, shifted).
    let mut b = Builder::new(16, 0);
    let x = b.tensor(0, &[4], S);
    let r = b.tensor(1, &[4], R);
    let y = b.tensor(4, &[4], S);
    let z = b.tensor(8, &[4], S);
    b.instr(Opcode::Exp, r, &[x], 0);
    b.instr(Opcode::Neg, y, &[r], 0);
    b.instr(Opcode::Tanh, z, &[r], 0);
    fused(&mut b, 0..2);
    b.entry("a", 0, 3);
    b.entry("b", 1, 2);
    b.bind("x", BindingKind::Input, 0, x);
    b.bind("z", BindingKind::Output, 0, z);
    b.bind("x", BindingKind::Input, 1, x);
    b.bind("z", BindingKind::Output, 1, z);
    assert!(matches!(
        Plan::parse(&b.build()).unwrap_err(),
        ParseError::Validate(ValidateError::UseBeforeDefinition { entry: 1, .. })
    ));
    // Entry `b` alone from the chain's middle, with r's definition its own: the chain `b` sees
    // starts at its first instruction.
    b.entries.truncate(1);
    b.bindings.truncate(2);
    agree(&b, &floats(3, 16));

    // Two chains in one entry, the second reading the first's register.
    let mut b = Builder::new(16, 0);
    let x = b.tensor(0, &[4], S);
    let r = b.tensor(0, &[4], R);
    let y = b.tensor(4, &[4], S);
    let z = b.tensor(8, &[4], S);
    let w = b.tensor(12, &[4], S);
    b.instr(Opcode::Exp, r, &[x], 0);
    b.instr(Opcode::Neg, y, &[r], 0);
    b.instr(Opcode::Tanh, z, &[r], 0);
    b.instr(Opcode::Add, w, &[z, y], 0);
    b.instrs[0].flags = FUSE_NEXT;
    b.instrs[2].flags = FUSE_NEXT;
    b.entry("e", 0, 4);
    b.bind("x", BindingKind::Input, 0, x);
    b.bind("w", BindingKind::Output, 0, w);
    assert_eq!(
        Plan::parse(&b.build()).unwrap_err(),
        fusion(2, FusionRule::RegisterSlot)
    );
    // One chain of all four: fine.
    b.instrs[1].flags = FUSE_NEXT;
    agree(&b, &floats(4, 16));
}

#[test]
fn registers_overwritten_written_twice_bound_or_misshapen() {
    let base = || {
        let mut b = Builder::new(16, 0);
        let x = b.tensor(0, &[4], S);
        let r0 = b.tensor(2, &[4], R);
        let r1 = b.tensor(3, &[4], R);
        let y = b.tensor(4, &[4], S);
        b.instr(Opcode::Exp, r0, &[x], 0);
        b.instr(Opcode::Tanh, r1, &[r0], 0);
        b.instr(Opcode::Mul, y, &[r0, r1], 0);
        fused(&mut b, 0..2);
        b.entry("e", 0, 3);
        b.bind("x", BindingKind::Input, 0, x);
        b.bind("y", BindingKind::Output, 0, y);
        (b, [x, r0, r1, y])
    };
    let (ok, [x, r0, r1, y]) = base();
    agree(&ok, &floats(5, 16));
    // r1 into r0's slot before r0's last read.
    let mut b = ok.clone();
    b.tensors[r1 as usize].offset_elems = 2;
    assert_eq!(
        Plan::parse(&b.build()).unwrap_err(),
        fusion(2, FusionRule::RegisterSlot)
    );
    // ... but r0's slot may be retaken by the instruction that reads r0 last: `r1 = tanh(r0)`,
    // then `y = r1 * r1`.
    b.instrs[2].args = [r1, r1, u32::MAX];
    agree(&b, &floats(6, 16));
    // Slots 4 and u32::MAX.
    for slot in [4, 5, 1 << 20, u32::MAX] {
        let mut b = ok.clone();
        b.tensors[r1 as usize].offset_elems = slot;
        assert!(matches!(
            Plan::parse(&b.build()).unwrap_err(),
            ParseError::Validate(ValidateError::TensorOutsideRegion { .. })
        ));
    }
    // Written twice.
    let mut b = ok.clone();
    b.instrs[1].out = r0;
    assert!(matches!(
        Plan::parse(&b.build()).unwrap_err(),
        ParseError::Validate(ValidateError::Redefinition { .. })
    ));
    // A register of another shape than the chain ([2, 2] and [8]; the same and other counts).
    for (rank, dims) in [(2u8, [2, 2, 0, 0]), (1, [8, 0, 0, 0]), (0, [0; 4])] {
        let mut b = ok.clone();
        b.tensors[r1 as usize].rank = rank;
        b.tensors[r1 as usize].dims = dims;
        assert!(Plan::parse(&b.build()).is_err(), "{dims:?}");
    }
    // Registers bound, every kind.
    for kind in [
        BindingKind::Input,
        BindingKind::Output,
        BindingKind::Update,
        BindingKind::Parameter,
    ] {
        let mut b = ok.clone();
        let entry = if kind == BindingKind::Parameter {
            u32::MAX
        } else {
            0
        };
        b.bind("r", kind, entry, r0);
        assert!(
            matches!(
                Plan::parse(&b.build()).unwrap_err(),
                ParseError::Validate(ValidateError::BindingRegion { .. })
            ),
            "{kind:?}"
        );
    }
    // The input bound on a register.
    let mut b = ok.clone();
    b.bindings[0].tensor = r0;
    assert!(Plan::parse(&b.build()).is_err());
    // A register as a non-chain instruction's output or argument.
    let mut b = ok.clone();
    b.instrs[1].flags = 0;
    assert_eq!(
        Plan::parse(&b.build()).unwrap_err(),
        fusion(2, FusionRule::RegisterOutsideChain)
    );
    let _ = (x, y);
}

#[test]
fn fuse_next_on_an_entrys_last_instruction() {
    // The error names the instruction with the flag: the entry's last, not one past it (which
    // is another entry's instruction, or none at all).
    let mut b = neg_chain(8, 3);
    b.instrs[2].flags = FUSE_NEXT;
    assert_eq!(
        Plan::parse(&b.build()).unwrap_err(),
        fusion(2, FusionRule::Length)
    );
    // Even when the next record exists (another entry's), the chain may not run into it.
    let extra = b.tensor(0, &[8], S);
    b.instr(Opcode::Neg, extra, &[2], 0);
    b.arena_elems = 16;
    assert_eq!(
        Plan::parse(&b.build()).unwrap_err(),
        fusion(2, FusionRule::Length)
    );
    // Flags outside every entry are not looked at (never run); flags other than bit 0 are.
    let mut b = neg_chain(8, 3);
    let extra = b.tensor(8, &[8], S);
    b.instr(Opcode::Neg, extra, &[0], 0);
    b.instrs[3].flags = FUSE_NEXT;
    Plan::parse(&b.build()).unwrap();
    for f in [2u16, 0x8000, 0xFFFF] {
        b.instrs[3].flags = f;
        assert!(matches!(
            Plan::parse(&b.build()).unwrap_err(),
            ParseError::Decode(DecodeError::InstrReserved { instr: 3 })
        ));
    }
    // An empty entry, and an entry of one instruction with the flag.
    let mut b = neg_chain(8, 1);
    b.entry("empty", 0, 0);
    agree(&b, &floats(8, 16));
    b.instrs[0].flags = FUSE_NEXT;
    assert_eq!(
        Plan::parse(&b.build()).unwrap_err(),
        fusion(0, FusionRule::Length)
    );
}

#[test]
fn chains_with_structural_members_are_rejected() {
    // x [2, 2] at 0, r = exp(x) register, then a structural member of the same output shape,
    // then y = r + that.
    let mk = |op: Opcode, args: &[u32], attr: u32| {
        let mut b = Builder::new(32, 0);
        let x = b.tensor(0, &[2, 2], S);
        let x2 = b.tensor(4, &[2, 2], S);
        let r = b.tensor(0, &[2, 2], R);
        let t = b.tensor(8, &[2, 2], S);
        let y = b.tensor(12, &[2, 2], S);
        let k = b.tensor(16, &[], S);
        let c = b.tensor(20, &[], S);
        b.instr(Opcode::Exp, r, &[x], 0);
        let args: Vec<u32> = args.iter().map(|&a| [x, x2, r, k, c][a as usize]).collect();
        b.instr(op, t, &args, attr);
        b.instr(Opcode::Add, y, &[r, t], 0);
        fused(&mut b, 0..2);
        b.entry("e", 0, 3);
        b.bind("x", BindingKind::Input, 0, x);
        b.bind("x2", BindingKind::Input, 0, x2);
        b.bind("k", BindingKind::Input, 0, k);
        b.bind("c", BindingKind::Input, 0, c);
        b.bind("y", BindingKind::Output, 0, y);
        b
    };
    for (op, args, attr) in [
        (Opcode::MatMul, &[0u32, 1][..], 0),
        (Opcode::MatMul, &[2, 2][..], 0),
        (Opcode::Select, &[0, 1, 2][..], 0),
        (Opcode::Select, &[2, 0, 1][..], 0),
        // `uniform` is a function of the element's index: a tile at a time it would restart.
        (Opcode::Uniform, &[3, 4][..], 0),
        (Opcode::Transpose, &[2][..], 0),
        (Opcode::Reshape, &[0][..], 0),
        // A broadcast may join a chain, but not from a register.
        (Opcode::Broadcast, &[2][..], 0),
    ] {
        let b = mk(op, args, attr);
        let bytes = b.build();
        let e = Plan::parse(&bytes).unwrap_err();
        assert_eq!(e, fusion(1, FusionRule::NotFusable), "{op}");
    }
    // A broadcast from the arena is a member: same shape, and from a scalar.
    agree(&mk(Opcode::Broadcast, &[0], 0), &floats(11, 32));
    agree(&mk(Opcode::Broadcast, &[3], 0), &floats(12, 32));
    // `fill` is a member like any other, in a register or in the arena.
    let b = mk(Opcode::Fill, &[], 2.5f32.to_bits());
    agree(&b, &floats(9, 32));
    let mut b = mk(Opcode::Fill, &[], f32::NAN.to_bits());
    b.tensors[3].kind = R as u8;
    b.tensors[3].offset_elems = 1;
    agree(&b, &floats(10, 32));
    // Elementwise members with partial aliasing of their own output.
    let mut b = mk(Opcode::Mul, &[0, 2], 0);
    b.tensors[3].offset_elems = 4; // t over x2 (not read): exact, fine
    agree(&b, &floats(11, 32));
}

#[test]
fn zero_element_chains() {
    let mut b = Builder::new(8, 0);
    let x = b.tensor(0, &[0, 3], S);
    let r = b.tensor(3, &[0, 3], R);
    let y = b.tensor(0, &[0, 3], S);
    let z = b.tensor(4, &[0, 3], S);
    b.instr(Opcode::Exp, r, &[x], 0);
    b.instr(Opcode::Neg, y, &[r], 0);
    b.instr(Opcode::Fill, z, &[], 1.0f32.to_bits());
    fused(&mut b, 0..2);
    b.entry("e", 0, 3);
    b.bind("x", BindingKind::Input, 0, x);
    b.bind("y", BindingKind::Output, 0, y);
    b.bind("z", BindingKind::Output, 0, z);
    agree(&b, &floats(12, 8));
    // The zero-element chain with a non-empty member: shape mismatch.
    b.tensors[z as usize].dims = [1, 3, 0, 0];
    assert_eq!(
        Plan::parse(&b.build()).unwrap_err(),
        fusion(2, FusionRule::ShapeMismatch)
    );
    // A huge register-only chain costs no arena and is bounded by the work cap.
    let mut b = Builder::new(4, 0);
    let r0 = b.tensor(0, &[1 << 14, 1 << 14], R);
    let r1 = b.tensor(1, &[1 << 14, 1 << 14], R);
    let s = b.tensor(0, &[1], S);
    b.instr(Opcode::Fill, r0, &[], 0);
    b.instr(Opcode::Neg, r1, &[r0], 0);
    b.instr(Opcode::Fill, s, &[], 0);
    b.instrs[0].flags = FUSE_NEXT;
    b.entry("e", 0, 3);
    b.bind("s", BindingKind::Output, 0, s);
    let bytes = b.build();
    // By default the cap is derived from the plan's size and arena (issue 16, hole 2: this
    // plan used to run 2^29 element operations over a 4-element arena).
    let derived = tapeplan_runtime::Limits::derived_work_cap(bytes.len(), 4);
    assert!(derived < 1 << 20, "{derived}");
    assert!(matches!(
        Plan::parse(&bytes).unwrap_err(),
        ParseError::Validate(ValidateError::TooMuchWork { work, limit, .. })
            if work > 1 << 29 && limit == derived
    ));
    let limits = tapeplan_runtime::Limits {
        max_work_per_entry: Some(1 << 20),
        ..tapeplan_runtime::Limits::DEFAULT
    };
    assert!(matches!(
        Plan::parse_with_limits(&bytes, &limits).unwrap_err(),
        ParseError::Validate(ValidateError::TooMuchWork { .. })
    ));
}

/// p [8] persistent at 0, g [8] input at 8; a chain `u = p - g * lr` written as an update of
/// `p`, either in place (over p) or guarded (in scratch).
fn update_chain(guarded: bool) -> Builder {
    let mut b = Builder::new(32, 8);
    let p = b.tensor(0, &[8], P);
    let g = b.tensor(8, &[8], S);
    let f = b.tensor(0, &[8], R);
    let m = b.tensor(1, &[8], R);
    let u = if guarded {
        b.tensor(16, &[8], S)
    } else {
        b.tensor(0, &[8], P)
    };
    b.instr(Opcode::Fill, f, &[], 0.5f32.to_bits());
    b.instr(Opcode::Mul, m, &[g, f], 0);
    b.instr(Opcode::Sub, u, &[p, m], 0);
    fused(&mut b, 0..2);
    b.entry("e", 0, 3);
    b.param("p", p);
    b.bind("g", BindingKind::Input, 0, g);
    b.bind("p", BindingKind::Update, 0, u);
    b
}

#[test]
fn updates_in_chains_in_place_and_guarded_with_non_finite_values() {
    for guarded in [false, true] {
        let b = update_chain(guarded);
        let mut init = floats(13, 32);
        agree(&b, &init);
        // NaN, inf in the gradient: in place writes them; guarded refuses to commit.
        init[9] = f32::INFINITY;
        init[12] = f32::NAN;
        agree(&b, &init);
        init[9] = f32::NEG_INFINITY;
        init[12] = -f32::NAN;
        init[2] = f32::INFINITY;
        agree(&b, &init);
    }
    // The in-place update partially over its parameter: rejected (by the update rule).
    let mut b = update_chain(false);
    b.tensors[4].offset_elems = 4;
    b.persistent_elems = 16;
    assert!(Plan::parse(&b.build()).is_err());
    // The parameter read after the in-place update, in the same chain: overlap.
    let mut b = update_chain(false);
    let v = b.tensor(24, &[8], S);
    b.instr(Opcode::Add, v, &[0, 4], 0);
    b.instrs[2].flags = FUSE_NEXT;
    b.entries[0].n_instrs = 4;
    b.bind("v", BindingKind::Output, 0, v);
    assert!(matches!(
        Plan::parse(&b.build()).unwrap_err(),
        ParseError::Validate(ValidateError::Overlap { .. })
    ));
    // The update read after it is written, in the same chain: fine.
    b.instrs[3].args = [4, 4, u32::MAX];
    agree(&b, &floats(14, 32));
}

#[test]
fn chain_outputs_partially_over_inputs_and_persistent_tensors() {
    // y written by the chain 4 elements into x (read by the chain): partial, rejected, for
    // every pair of members and both orders.
    for (reader, writer) in [(0usize, 1usize), (1, 0), (0, 2), (2, 2)] {
        let mut b = Builder::new(40, 0);
        let x = b.tensor(0, &[8], S);
        let q = b.tensor(8, &[8], S);
        let r = b.tensor(0, &[8], R);
        let r2 = b.tensor(1, &[8], R);
        let y = b.tensor(4, &[8], S);
        let mut outs = [r, r2, y];
        let mut srcs = [q, r, r2];
        srcs[reader] = x;
        if writer != 2 {
            outs.swap(writer, 2);
        }
        let _ = &mut outs;
        b.instr(Opcode::Exp, r, &[srcs[0]], 0);
        b.instr(Opcode::Tanh, r2, &[if reader == 1 { x } else { r }], 0);
        b.instr(Opcode::Add, y, &[r2, if reader == 2 { x } else { q }], 0);
        fused(&mut b, 0..2);
        b.entry("e", 0, 3);
        b.bind("x", BindingKind::Input, 0, x);
        b.bind("q", BindingKind::Input, 0, q);
        b.bind("y", BindingKind::Output, 0, y);
        let e = Plan::parse(&b.build()).unwrap_err();
        assert!(
            e == fusion(2, FusionRule::PartialAlias)
                || matches!(e, ParseError::Validate(ValidateError::Overlap { .. })),
            "{reader} {writer}: {e:?}"
        );
        // Exactly over x instead: fine when x dies at its reader (it always does here).
        b.tensors[y as usize].offset_elems = 0;
        agree(&b, &floats(15 + reader as u64, 40));
    }
    // A chain writing 4 elements into a persistent tensor: rejected (out of region, or a
    // write to a parameter).
    let mut b = update_chain(false);
    b.tensors[4].kind = S as u8;
    b.tensors[4].offset_elems = 4;
    assert!(Plan::parse(&b.build()).is_err());
}

#[test]
fn exact_alias_over_an_input_read_by_a_later_member() {
    // Member 0 writes y over x's range; member 1 reads x: one instruction at a time, member 1
    // would see y, not x. The overlap rule (x is live) must reject it, fused or not.
    let mut b = Builder::new(16, 0);
    let x = b.tensor(0, &[8], S);
    let y = b.tensor(0, &[8], S);
    let z = b.tensor(8, &[8], S);
    b.instr(Opcode::Exp, y, &[z], 0);
    b.instr(Opcode::Add, z, &[x, y], 0);
    b.entry("e", 0, 2);
    b.bind("x", BindingKind::Input, 0, x);
    b.bind("z", BindingKind::Output, 0, z);
    assert!(Plan::parse(&b.build()).is_err());
    fused(&mut b, 0..1);
    assert!(Plan::parse(&b.build()).is_err());
    // Member 0 reads x and writes y over it (x dead after): then member 1 reads y — exact
    // aliasing, a tile at a time the same as whole buffers.
    let mut b = Builder::new(24, 0);
    let x = b.tensor(0, &[20], S);
    let y = b.tensor(0, &[20], S);
    b.instr(Opcode::Exp, y, &[x], 0);
    let z = b.tensor(0, &[20], S);
    b.instr(Opcode::Mul, z, &[y, y], 0);
    fused(&mut b, 0..1);
    b.entry("e", 0, 2);
    b.bind("x", BindingKind::Input, 0, x);
    b.bind("z", BindingKind::Output, 0, z);
    agree(&b, &floats(20, 24));
}

/// How [`adam_chains`] lays out Adam's update.
#[derive(Clone, Copy, Debug, PartialEq)]
enum AdamLayout {
    /// Every update over the tensor it replaces (an unguarded plan).
    InPlace,
    /// Every update in scratch (a guarded plan).
    Guarded,
    /// The first moment's product written `β₁ · m` instead of `m · β₁`: not the planner's form.
    Swapped,
    /// The second moment's update written over the gradient's range (dead after that chain):
    /// valid, but a range one pass would read after writing it.
    OverGradient,
}

/// Adam's update of one tensor of `n` elements as `tapeplan_planner` records it (three fused
/// chains: `m' = m · β₁ + g · c1`, `v' = v · β₂ + (g · g) · c2`,
/// `p' = p − s1 · (m' / (√v' / s2 + ε))`, `s1` and `s2` arena scalars) with the constants
/// `k = [β₁, c1, β₂, c2, ε]`; with `decay`, AdamW's (`p · decay` for `p` in the last chain).
/// Arena: p, m, v (persistent) at 0, `a`, `2a`; g at `3a`; s1, s2 at `4a`, `4a + 4`; scratch
/// updates from `4a + 8`.
fn adam_chains(n: u32, layout: AdamLayout, k: [f32; 5], decay: Option<f32>) -> Builder {
    let a = n.div_ceil(4) * 4;
    let mut b = Builder::new(7 * a + 8, 3 * a);
    let p = b.tensor(0, &[n], P);
    let m = b.tensor(a, &[n], P);
    let v = b.tensor(2 * a, &[n], P);
    let g = b.tensor(3 * a, &[n], S);
    let s1 = b.tensor(4 * a, &[], S);
    let s2 = b.tensor(4 * a + 4, &[], S);
    let (m_out, v_out, p_out) = match layout {
        AdamLayout::Guarded => (
            b.tensor(4 * a + 8, &[n], S),
            b.tensor(5 * a + 8, &[n], S),
            b.tensor(6 * a + 8, &[n], S),
        ),
        AdamLayout::OverGradient => (
            b.tensor(a, &[n], P),
            b.tensor(3 * a, &[n], S),
            b.tensor(0, &[n], P),
        ),
        _ => (
            b.tensor(a, &[n], P),
            b.tensor(2 * a, &[n], P),
            b.tensor(0, &[n], P),
        ),
    };
    let [beta1, c1, beta2, c2, eps] = k.map(f32::to_bits);
    // Each value its own register tensor (records are defined once), in slots 0 to 2.
    let reg = |b: &mut Builder, slot: u32| b.tensor(slot, &[n], R);
    // m' = m · β₁ + g · c1
    let (f0, x0) = (reg(&mut b, 0), reg(&mut b, 0));
    b.instr(Opcode::Fill, f0, &[], beta1);
    if layout == AdamLayout::Swapped {
        b.instr(Opcode::Mul, x0, &[f0, m], 0);
    } else {
        b.instr(Opcode::Mul, x0, &[m, f0], 0);
    }
    let (f1, x1) = (reg(&mut b, 1), reg(&mut b, 1));
    b.instr(Opcode::Fill, f1, &[], c1);
    b.instr(Opcode::Mul, x1, &[g, f1], 0);
    b.instr(Opcode::Add, m_out, &[x0, x1], 0);
    // v' = v · β₂ + (g · g) · c2
    let (f0, x0, x1, f2, y1) = (
        reg(&mut b, 0),
        reg(&mut b, 0),
        reg(&mut b, 1),
        reg(&mut b, 2),
        reg(&mut b, 1),
    );
    b.instr(Opcode::Fill, f0, &[], beta2);
    b.instr(Opcode::Mul, x0, &[v, f0], 0);
    b.instr(Opcode::Mul, x1, &[g, g], 0);
    b.instr(Opcode::Fill, f2, &[], c2);
    b.instr(Opcode::Mul, y1, &[x1, f2], 0);
    b.instr(Opcode::Add, v_out, &[x0, y1], 0);
    // p' = p − s1 · (m' / (√v' / s2 + ε)), AdamW's with p · decay, first, in slot 2
    let p_in = match decay {
        Some(d) => {
            let (f, x) = (reg(&mut b, 2), reg(&mut b, 2));
            b.instr(Opcode::Fill, f, &[], d.to_bits());
            b.instr(Opcode::Mul, x, &[p, f], 0);
            x
        }
        None => p,
    };
    let [q0, b1, q1, e1, q2, q3, b2, q4] = [0, 1, 0, 1, 0, 0, 1, 0].map(|slot| reg(&mut b, slot));
    b.instr(Opcode::Sqrt, q0, &[v_out], 0);
    b.instr(Opcode::Broadcast, b1, &[s2], 0);
    b.instr(Opcode::Div, q1, &[q0, b1], 0);
    b.instr(Opcode::Fill, e1, &[], eps);
    b.instr(Opcode::Add, q2, &[q1, e1], 0);
    b.instr(Opcode::Div, q3, &[m_out, q2], 0);
    b.instr(Opcode::Broadcast, b2, &[s1], 0);
    b.instr(Opcode::Mul, q4, &[b2, q3], 0);
    b.instr(Opcode::Sub, p_out, &[p_in, q4], 0);
    let len = b.instrs.len();
    fused(&mut b, 0..4);
    fused(&mut b, 5..10);
    fused(&mut b, 11..len - 1);
    b.entry("step", 0, len as u32);
    b.param("p", p);
    b.param("m", m);
    b.param("v", v);
    b.bind("g", BindingKind::Input, 0, g);
    b.bind("s1", BindingKind::Input, 0, s1);
    b.bind("s2", BindingKind::Input, 0, s2);
    b.bind("p", BindingKind::Update, 0, p_out);
    b.bind("m", BindingKind::Update, 0, m_out);
    if layout == AdamLayout::OverGradient {
        b.bind("v_out", BindingKind::Output, 0, v_out);
    } else {
        b.bind("v", BindingKind::Update, 0, v_out);
    }
    b
}

/// `n` values, about one in three awkward: zeros of both signs, infinities, NaNs of both signs,
/// subnormals, huge and tiny values; the rest ordinary, of both signs.
fn hostile(seed: u64, n: usize) -> Vec<f32> {
    let awkward = [
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::MIN_POSITIVE / 8.0,
        -f32::MIN_POSITIVE,
        3e38,
        -1e-30,
    ];
    floats(seed, n)
        .into_iter()
        .enumerate()
        .map(|(i, x)| {
            let h = (i as u64 ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 59;
            awkward.get(h as usize).copied().unwrap_or(x)
        })
        .collect()
}

#[test]
fn adam_updates_in_one_pass_are_the_chains_bits() {
    // Adam's constants as the planner rounds them, and hostile ones: a zero β₁ (its product
    // with an infinite moment is `mul`'s signed zero, not NaN), an infinite c2, a zero ε; each
    // as Adam and as AdamW (decay factors 0.99999 and 0).
    let consts = [
        [0.9, 0.100000024, 0.999, 0.0009999871, 1e-8],
        [0.0, 1.0, 0.5, f32::INFINITY, 0.0],
        [-0.0, f32::NAN, 1.0, 0.0, f32::MIN_POSITIVE / 8.0],
    ];
    for n in [1u32, 63, 64, 65, 100, 1000, 2053] {
        for layout in [
            AdamLayout::InPlace,
            AdamLayout::Guarded,
            AdamLayout::Swapped,
            AdamLayout::OverGradient,
        ] {
            for ((c, &k), decay) in consts
                .iter()
                .enumerate()
                .flat_map(|c| [(c, None), (c, Some(0.99999)), (c, Some(0.0))])
            {
                let b = adam_chains(n, layout, k, decay);
                let bytes = b.build();
                let plan = Plan::parse(&bytes).unwrap();
                let e = plan.entry("step").unwrap();
                // The update runs in one pass exactly when it has the planner's form, 64
                // elements or more and ranges one pass may read and write.
                let one_pass = tapeplan_runtime::catalog::one_pass_adam_updates(&plan, e);
                let want = usize::from(
                    n >= 64 && matches!(layout, AdamLayout::InPlace | AdamLayout::Guarded),
                );
                assert_eq!(one_pass, want, "n {n} {layout:?} decay {decay:?}");
                // Awkward values everywhere (NaNs, infinities, zeros, subnormals, negative
                // second moments), then ordinary ones with awkward scalars.
                let size = plan.arena_elems();
                let seed = u64::from(n) * 16 + c as u64;
                agree(&b, &hostile(seed, size));
                let a = n.div_ceil(4) as usize * 4;
                let mut init: Vec<f32> = (0..size)
                    .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
                    .collect();
                for x in &mut init[2 * a..3 * a] {
                    *x = x.abs();
                }
                for (s1, s2) in [(1e-3, 0.5), (0.0, 0.0), (f32::INFINITY, f32::NAN)] {
                    init[4 * a] = s1;
                    init[4 * a + 4] = s2;
                    agree(&b, &init);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Random chained entries.

const ELEMENTWISE: [Opcode; 22] = [
    Opcode::Add,
    Opcode::Sub,
    Opcode::Mul,
    Opcode::Div,
    Opcode::Neg,
    Opcode::Tanh,
    Opcode::Relu,
    Opcode::Heaviside,
    Opcode::Exp,
    Opcode::Log,
    Opcode::Detach,
    Opcode::Equal,
    Opcode::Sqrt,
    Opcode::Sigmoid,
    Opcode::Softplus,
    Opcode::Abs,
    Opcode::Sign,
    Opcode::Pow,
    Opcode::Maximum,
    Opcode::Minimum,
    Opcode::Greater,
    Opcode::GreaterEqual,
];

/// A random entry over tensors of one shape: a parameter, two inputs, then instructions whose
/// outputs are registers (random slots) or arena ranges from a small set of offsets (equal,
/// disjoint, or 4 elements apart), with random `FUSE_NEXT` flags; some written as updates of
/// the parameter (in place or guarded).
fn random_entry(rng: &mut Rng) -> Builder {
    let n = [1u32, 3, 4, 8, 13, 64, 65, 100][rng.below(8)];
    let al = n.div_ceil(4) * 4;
    let slots = 4u32;
    let persistent = al;
    let arena = persistent + slots * al + 4;
    let mut b = Builder::new(arena, persistent);
    let p = b.tensor(0, &[n], P);
    b.param("w", p);
    let x0 = b.tensor(persistent, &[n], S);
    let x1 = b.tensor(persistent + al, &[n], S);
    b.bind("x0", BindingKind::Input, 0, x0);
    b.bind("x1", BindingKind::Input, 0, x1);
    let guarded = rng.chance(30);
    let mut defined = vec![p, x0, x1];
    let n_instrs = 2 + rng.below(10);
    let mut updated = false;
    for _ in 0..n_instrs {
        let out = if rng.chance(40) {
            b.tensor(rng.below(4) as u32, &[n], R)
        } else if !updated && rng.chance(12) {
            updated = true;
            let t = if guarded {
                b.tensor(persistent + rng.below(slots as usize) as u32 * al, &[n], S)
            } else {
                b.tensor(0, &[n], P)
            };
            b.bind("w", BindingKind::Update, 0, t);
            t
        } else {
            let mut o = persistent + rng.below(slots as usize) as u32 * al;
            if rng.chance(8) {
                o += 4;
            }
            b.tensor(o, &[n], S)
        };
        let op = if rng.chance(10) {
            Opcode::Fill
        } else if rng.chance(8) {
            // Structural, of the chain's shape: breaks (or, flagged, poisons) a chain.
            [Opcode::Select, Opcode::Reshape, Opcode::SumTo][rng.below(3)]
        } else {
            ELEMENTWISE[rng.below(ELEMENTWISE.len())]
        };
        let args: Vec<u32> = (0..op.arity())
            .map(|_| {
                // Mostly recent values, so registers get read inside their chain.
                let k = defined.len();
                let back = rng.below(k.min(4));
                defined[k - 1 - back]
            })
            .collect();
        let attr = match op {
            Opcode::Fill => [0.0f32, -0.0, 1.5, f32::NAN, f32::INFINITY][rng.below(5)].to_bits(),
            Opcode::Pow => [2.0f32, 0.5, -1.0, 3.0][rng.below(4)].to_bits(),
            _ => 0,
        };
        b.instr(op, out, &args, attr);
        if rng.chance(75) {
            let last = b.instrs.len() - 1;
            b.instrs[last].flags = FUSE_NEXT;
        }
        defined.push(out);
    }
    // The last instruction's flag: mostly cleared (an open chain is rejected anyway).
    if rng.chance(90) {
        let last = b.instrs.len() - 1;
        b.instrs[last].flags = 0;
    }
    b.entry("e", 0, b.instrs.len() as u32);
    // Outputs: every arena value not an update, most of the time (keeps them live).
    let outs: Vec<u32> = defined[3..]
        .iter()
        .copied()
        .filter(|&t| b.tensors[t as usize].kind == S as u8)
        .filter(|&t| !b.bindings.iter().any(|x| x.tensor == t))
        .collect();
    for (i, t) in outs.into_iter().enumerate() {
        if rng.chance(50) {
            b.bind(&format!("y{i}"), BindingKind::Output, 0, t);
        }
    }
    if rng.chance(40) {
        // A second entry over a suffix (or middle) of the same instructions, maybe starting
        // inside a chain: what it reads before writing becomes its inputs (registers cannot).
        let len = b.instrs.len();
        let start = rng.below(len);
        let end = start + 1 + rng.below(len - start);
        let mut written = std::collections::HashSet::new();
        let mut needed = Vec::new();
        for k in start..end {
            let ins = b.instrs[k];
            let op = Opcode::from_u8(ins.opcode).unwrap();
            for &a in &ins.args[..op.arity()] {
                if a != p && !written.contains(&a) && !needed.contains(&a) {
                    needed.push(a);
                }
            }
            written.insert(ins.out);
        }
        // Mostly only when every such value can be an input (a register cannot: rejected).
        if rng.chance(90)
            && needed
                .iter()
                .any(|&a| b.tensors[a as usize].kind != S as u8)
        {
            return b;
        }
        b.entry("f", start as u32, (end - start) as u32);
        for a in needed {
            b.bind(&format!("i{a}"), BindingKind::Input, 1, a);
        }
        let mine: Vec<_> = b
            .bindings
            .iter()
            .filter(|x| x.entry == 0 && (x.kind == 1 || x.kind == 3))
            .filter(|x| written.contains(&x.tensor))
            .copied()
            .collect();
        for mut x in mine {
            x.entry = 1;
            b.bindings.push(x);
        }
    }
    b
}

#[test]
fn random_chains_run_as_one_instruction_at_a_time() {
    // FH_CASES and FH_SEED widen the search (e.g. a million cases in a release build).
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let mut rng = Rng::new(env("FH_SEED", 0x0123_4567_89ab_cdef) | 1);
    let (mut accepted, mut with_chains, mut rejected) = (0, 0, HashMap::new());
    for case in 0..env("FH_CASES", 60_000) {
        let b = random_entry(&mut rng);
        let bytes = b.build();
        match Plan::parse(&bytes) {
            Ok(_) => {
                accepted += 1;
                if b.instrs.iter().any(|i| i.flags & FUSE_NEXT != 0) {
                    with_chains += 1;
                }
                let mut init = floats(case, b.arena_elems as usize);
                if case % 3 == 0 {
                    for i in (0..init.len()).step_by(7) {
                        init[i] = [f32::NAN, f32::INFINITY, -0.0][i % 3];
                    }
                }
                agree(&b, &init);
            }
            Err(e) => {
                let key = match e {
                    ParseError::Validate(ValidateError::Fusion { rule, .. }) => format!("{rule:?}"),
                    e => format!("{e:?}")
                        .split([' ', '{'])
                        .next()
                        .unwrap()
                        .to_string(),
                };
                *rejected.entry(key).or_insert(0) += 1;
            }
        }
    }
    eprintln!("accepted {accepted} ({with_chains} with chains); rejected {rejected:?}");
    assert!(
        with_chains > 1000,
        "{with_chains} accepted plans with chains"
    );
}
