//! Model-based test of the overlap rule: random straight-line plans whose tensors are placed on
//! a few shared slots, validated by the runtime's sweep and by an independent brute-force
//! reading of the spec (every pair of tensors), which must agree.

use crate::common;
use crate::rng::Rng;

use common::*;
use proptest::prelude::*;
use tapeplan_core::format::{BindingKind, TensorKind};
use tapeplan_core::{OpClass, Opcode};
use tapeplan_runtime::{ParseError, Plan, ValidateError};

struct Case {
    b: Builder,
    /// Tensors live at the start (parameters and inputs).
    start: Vec<u32>,
    outputs: Vec<u32>,
}

fn random_case(seed: u64) -> Case {
    let mut r = Rng::new(seed | 1);
    let persistent = 12u32;
    let mut b = Builder::new(persistent + 6 * 8, persistent);
    // (tensor, dims)
    let mut defined: Vec<(u32, Vec<u32>)> = vec![];
    let mut start = vec![];
    let shapes: [&[u32]; 3] = [&[4], &[8], &[2, 4]];
    for i in 0..r.below(3) {
        let t = b.tensor(4 * r.below(3) as u32, &[4], TensorKind::Persistent);
        b.param(&format!("p{i}"), t);
        defined.push((t, vec![4]));
        start.push(t);
    }
    let slot = |r: &mut Rng| persistent + 4 * r.below(11) as u32;
    let mut inputs = vec![];
    for _ in 0..1 + r.below(2) {
        let dims = shapes[r.below(3)].to_vec();
        let mut off = slot(&mut r);
        while off + elems(&dims) > b.arena_elems {
            off -= 4;
        }
        let t = b.tensor(off, &dims, TensorKind::Scratch);
        defined.push((t, dims));
        inputs.push(t);
        start.push(t);
    }
    let n = 1 + r.below(7);
    for _ in 0..n {
        let (a, adims) = defined[r.below(defined.len())].clone();
        let same: Vec<u32> = defined
            .iter()
            .filter(|(_, d)| *d == adims)
            .map(|&(t, _)| t)
            .collect();
        let (op, args, dims): (Opcode, Vec<u32>, Vec<u32>) = match r.below(5) {
            0 => (Opcode::Neg, vec![a], adims.clone()),
            1 | 2 => (
                Opcode::Add,
                vec![a, same[r.below(same.len())]],
                adims.clone(),
            ),
            3 => {
                let to: Vec<u32> = if adims.len() == 1 && adims[0] == 8 {
                    vec![2, 4]
                } else {
                    vec![elems(&adims)]
                };
                (Opcode::Reshape, vec![a], to)
            }
            _ => (Opcode::Fill, vec![], adims.clone()),
        };
        // Place the output on a random slot, or exactly over an argument half the time.
        let off = if !args.is_empty() && r.below(2) == 0 {
            b.tensors[args[r.below(args.len())] as usize].offset_elems
        } else {
            slot(&mut r)
        };
        let mut off = off.max(persistent);
        while off + elems(&dims) > b.arena_elems {
            off -= 4;
        }
        let t = b.tensor(off, &dims, TensorKind::Scratch);
        b.instr(op, t, &args, 0);
        defined.push((t, dims));
    }
    let e = b.entry("main", 0, n as u32);
    for (i, &t) in inputs.iter().enumerate() {
        b.bind(&format!("in{i}"), BindingKind::Input, e, t);
    }
    let mut outputs = vec![];
    for (i, ins) in b.instrs.clone().iter().enumerate() {
        if i + 1 == n || r.below(3) == 0 {
            b.bind(&format!("out{i}"), BindingKind::Output, e, ins.out);
            outputs.push(ins.out);
        }
    }
    Case { b, start, outputs }
}

/// The spec's rule 3, read literally: every pair of tensors of the entry.
fn brute_force_overlaps(c: &Case) -> bool {
    let b = &c.b;
    let n = b.instrs.len() as i64;
    let mut life: Vec<Option<(i64, i64)>> = vec![None; b.tensors.len()];
    for &t in &c.start {
        life[t as usize] = Some((-1, -1));
    }
    for (i, ins) in b.instrs.iter().enumerate() {
        let op = Opcode::from_u8(ins.opcode).unwrap();
        for &a in &ins.args[..op.arity()] {
            let l = life[a as usize].as_mut().unwrap();
            l.1 = i as i64;
        }
        life[ins.out as usize] = Some((i as i64, i as i64));
    }
    for &t in &c.outputs {
        life[t as usize].as_mut().unwrap().1 = n;
    }
    let range = |t: usize| {
        let r = &b.tensors[t];
        let s = shape_of(r);
        (r.offset_elems as usize, r.offset_elems as usize + s.elems())
    };
    let in_place = |a: usize, bb: usize| {
        let (_, ea) = life[a].unwrap();
        let (db, _) = life[bb].unwrap();
        if ea < 0 || ea != db || range(a) != range(bb) {
            return false;
        }
        let ins = &b.instrs[ea as usize];
        let op = Opcode::from_u8(ins.opcode).unwrap();
        ins.out as usize == bb
            && op.class() == OpClass::Elementwise
            && ins.args[..op.arity()].contains(&(a as u32))
    };
    for x in 0..b.tensors.len() {
        for y in x + 1..b.tensors.len() {
            let (Some((dx, ex)), Some((dy, ey))) = (life[x], life[y]) else {
                continue;
            };
            let (sx, tx) = range(x);
            let (sy, ty) = range(y);
            let ranges_meet = sx < tx && sy < ty && sx < ty && sy < tx;
            let lives_meet = dx <= ey && dy <= ex;
            if ranges_meet && lives_meet && !in_place(x, y) && !in_place(y, x) {
                return true;
            }
        }
    }
    false
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn sweep_agrees_with_brute_force(seed in any::<u64>()) {
        let c = random_case(seed);
        let bytes = c.b.build();
        let got = Plan::parse(&bytes);
        let expect_overlap = brute_force_overlaps(&c);
        match got {
            Ok(_) => {
                prop_assert!(!expect_overlap, "accepted an overlap");
                run_everything(&bytes);
            }
            Err(ParseError::Validate(ValidateError::Overlap { .. })) => prop_assert!(expect_overlap, "rejected a valid plan"),
            Err(e) => prop_assert!(false, "unexpected error {e:?}"),
        }
    }
}

#[test]
fn both_outcomes_occur() {
    let (mut ok, mut bad) = (0, 0);
    for seed in 0..2000u64 {
        let c = random_case(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        if brute_force_overlaps(&c) {
            bad += 1;
        } else {
            ok += 1;
        }
    }
    assert!(ok > 200 && bad > 200, "ok {ok}, bad {bad}");
}
