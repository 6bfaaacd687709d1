//! Attacks on `program::stand_ins` (issue 15): every plan here validates; `Session::run` and
//! `Session::run_program` (and `run_program_with_inputs`) must agree bit for bit on outputs,
//! updates, parameters and the whole arena except a removed instruction's own range, with
//! sentinels past the arena's end. NaNs compare as one class (DESIGN's equality rule: payloads
//! may differ between targets); a NaN-only difference is logged (`NAN-ONLY`), and
//! `STRICT_NAN=1` makes it fail. Two do differ so: a constant read by a unary op (or twice by a
//! binary one) takes the scalar form where the fill's copy took the lane form, and a reader in
//! place over a broadcast reads its source as another buffer, which may pick the other
//! operand's NaN (`nan_unary_splat`, `nan_in_place_broadcast`). The same harness compares the
//! lane chains of a decoded program with `run`'s chain runner (`lane_chains_*`), and, from a
//! helper's attack, with the same plan unfused and every way of running it (`lane_attack_*`:
//! chains at the arena's end, 15, 16 and 17 elements, guarded entries, an entry starting inside
//! a chain, a fuzz of `LA_TRIES` random chains, 3 000 by default). A third NaN-only difference
//! shows there: a lane chain runs every element in the lane forms, the buffer kernels the
//! elements past their last whole vector in the scalar forms, and `maximum` and `minimum` answer
//! a NaN of another sign or payload in one form than in the other.

use crate::common;
use crate::rng::Rng;

use common::*;
use tapeplan_core::format::{BindingKind, TensorKind, FLAG_MATH_FAST, FUSE_NEXT};
use tapeplan_core::{op_set, Opcode, Ops};
use tapeplan_runtime::{Decoded, EntryId, Limits, Plan, Scratch, Session};

use Opcode::*;

/// One way of running a plan: its label, each entry's result, the arena after each entry.
type Snapshot = (
    String,
    Vec<Result<(), tapeplan_runtime::ExecError>>,
    Vec<Vec<f32>>,
);

const SENT: u32 = 0x7fa5_a5a5;
const PAD: usize = 19;
const INIT: u32 = 0xffc0_dead; // a NaN with a payload: what the arena holds before anything

fn raw(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A fresh-range builder like run.rs's `Prog`, plus direct control over offsets.
struct P {
    b: Builder,
    next: u32,
    inputs: Vec<(String, u32, Vec<f32>)>,
    params: Vec<(String, u32, Vec<f32>)>,
}

impl P {
    fn new() -> P {
        P {
            b: Builder::new(0, 0),
            next: 0,
            inputs: vec![],
            params: vec![],
        }
    }
    fn persistent(n: u32) -> P {
        let mut p = P::new();
        p.b.persistent_elems = n;
        p.next = n;
        p
    }
    fn fresh(&mut self, dims: &[u32]) -> u32 {
        let at = self.next;
        self.next += elems(dims).div_ceil(4) * 4 + 4;
        self.b.tensor(at, dims, TensorKind::Scratch)
    }
    fn at(&mut self, offset: u32, dims: &[u32]) -> u32 {
        self.next = self.next.max(offset + elems(dims) + 4);
        self.b.tensor(offset, dims, TensorKind::Scratch)
    }
    fn off(&self, t: u32) -> u32 {
        self.b.tensors[t as usize].offset_elems
    }
    fn input(&mut self, dims: &[u32], values: Vec<f32>) -> u32 {
        let t = self.fresh(dims);
        let name = format!("in{}", self.inputs.len());
        self.inputs.push((name, t, values));
        t
    }
    fn param(&mut self, offset: u32, dims: &[u32], values: Vec<f32>) -> u32 {
        let t = self.b.tensor(offset, dims, TensorKind::Persistent);
        let name = format!("p{}", self.params.len());
        self.b.param(&name, t);
        self.params.push((name, t, values));
        t
    }
    fn op(&mut self, op: Opcode, dims: &[u32], args: &[u32], attr: u32) -> u32 {
        let t = self.fresh(dims);
        self.b.instr(op, t, args, attr);
        t
    }
    fn op_at(&mut self, op: Opcode, offset: u32, dims: &[u32], args: &[u32], attr: u32) -> u32 {
        let t = self.at(offset, dims);
        self.b.instr(op, t, args, attr);
        t
    }
    /// `op` over the range of `over` (which must die here).
    fn op_over(&mut self, op: Opcode, over: u32, args: &[u32], attr: u32) -> u32 {
        let r = self.b.tensors[over as usize];
        let t = self.b.tensors.len() as u32;
        self.b.tensors.push(r);
        self.b.instr(op, t, args, attr);
        t
    }
    fn fill(&mut self, dims: &[u32], c: f32) -> u32 {
        self.op(Fill, dims, &[], c.to_bits())
    }
    fn fuse_last(&mut self) {
        self.b.instrs.last_mut().unwrap().flags |= FUSE_NEXT;
    }
    /// One entry over every instruction, inputs bound, `outs` outputs; returns the entry.
    fn finish(&mut self, outs: &[u32]) -> u32 {
        self.b.arena_elems = self.next.max(self.b.arena_elems);
        let n = self.b.instrs.len() as u32;
        let e = self.b.entry("main", 0, n);
        for (name, t, _) in self.inputs.clone() {
            self.b.bind(&name, BindingKind::Input, e, t);
        }
        for &t in outs {
            self.b.bind(&format!("t{t}"), BindingKind::Output, e, t);
        }
        e
    }
}

/// Per arena element, who wrote it last in the entry: 0 nobody, 1 an unfused fill or
/// broadcast (a stand-in may leave it unwritten), 2 anything else.
fn last_writers(b: &Builder, first: usize, n: usize, arena: usize) -> Vec<u8> {
    let mut w = vec![0u8; arena];
    let mut prev_fuses = false;
    for ins in &b.instrs[first..first + n] {
        let fused = prev_fuses || ins.flags & FUSE_NEXT != 0;
        prev_fuses = ins.flags & FUSE_NEXT != 0;
        let t = &b.tensors[ins.out as usize];
        if t.kind == TensorKind::Register as u8 {
            continue;
        }
        let e = t.dims[..t.rank as usize].iter().product::<u32>() as usize;
        let o = t.offset_elems as usize;
        let removable = !fused && (ins.opcode == Fill.to_u8() || ins.opcode == Broadcast.to_u8());
        for x in &mut w[o..o + e] {
            *x = if removable { 1 } else { 2 };
        }
    }
    w
}

/// `p`'s inputs that `entry` of `plan` binds, with their values.
fn bound_inputs(p: &P, plan: &Plan, entry: EntryId) -> Vec<(String, Vec<f32>)> {
    p.inputs
        .iter()
        .filter(|(name, _, _)| plan.inputs(entry).any(|b| b.name == name))
        .map(|(name, _, v)| (name.clone(), v.clone()))
        .collect()
}

struct Outcome {
    removed: usize,
}

/// Runs `entry` of `p` through `run` and through `decode`+`run_program` (and, with `bind`,
/// `decode_with_inputs` + `run_program_with_inputs`), twice each over the same arena, and
/// compares. Panics with a description on any difference.
fn compare_o<O: Ops>(
    p: &P,
    entry_name: &str,
    bind: bool,
    parse: impl Fn(&[u8]) -> Plan<'_>,
) -> Outcome {
    let bytes = p.b.build();
    let plan = parse(&bytes);
    let entry = plan.entry(entry_name).unwrap();
    let e_idx = entry.index();
    let er = &p.b.entries[e_idx];
    let n = plan.arena_elems();
    let writers = last_writers(&p.b, er.first_instr as usize, er.n_instrs as usize, n);
    let inputs = bound_inputs(p, &plan, entry);
    let mut removed = 0;
    let mut snaps: Vec<Snapshot> = vec![];
    for way in 0..if bind { 3 } else { 2 } {
        let mut arena = vec![f32::from_bits(INIT); n];
        arena.extend(std::iter::repeat_n(f32::from_bits(SENT), PAD));
        let mut s = Session::bind_selective::<O>(&plan, &mut arena).unwrap();
        for (name, _, v) in &p.params {
            s.load_parameter(name, v).unwrap();
        }
        let mut buf = vec![Decoded::EMPTY; plan.n_instrs()];
        let names: Vec<&str> = inputs.iter().map(|(n, _)| n.as_str()).collect();
        let slices: Vec<&[f32]> = inputs.iter().map(|(_, v)| v.as_slice()).collect();
        let mut results = vec![];
        let mut arenas = vec![];
        // Decode before anything runs (the program borrows the plan, not the session).
        let program = match way {
            0 => None,
            1 => Some(s.decode(entry, &mut buf).unwrap()),
            _ => Some(s.decode_with_inputs(entry, &mut buf, &names).unwrap()),
        };
        if let Some(pr) = &program {
            removed = removed * 100 + (er.n_instrs as usize - pr.len());
        }
        for _round in 0..2 {
            if way != 2 {
                for (name, v) in &inputs {
                    s.set_input(entry, name, v).unwrap();
                }
            }
            let r = match (way, &program) {
                (0, _) => s.run(entry),
                (1, Some(pr)) => s.run_program(pr),
                (_, Some(pr)) => s.run_program_with_inputs(pr, &slices),
                _ => unreachable!(),
            };
            results.push(r);
            // Snapshot the whole buffer, sentinels included.
            let a = s.into_arena();
            arenas.push(a.to_vec());
            s = Session::bind_selective::<O>(&plan, a).unwrap();
        }
        let label = ["run", "run_program", "run_program_with_inputs"][way].to_string();
        snaps.push((label, results, arenas));
    }
    let (_, want_r, want_a) = &snaps[0];
    // Bound inputs' own ranges may hold anything after a run with bound inputs.
    let input_ranges: Vec<(usize, usize)> = plan
        .inputs(entry)
        .map(|b| (b.offset_elems, b.offset_elems + b.elems))
        .collect();
    let binding_ranges: Vec<(String, usize, usize)> = plan
        .bindings()
        .filter(|b| {
            b.entry.is_none()
                || (b.entry == Some(entry)
                    && matches!(b.kind, BindingKind::Output | BindingKind::Update))
        })
        .map(|b| (b.name.to_string(), b.offset_elems, b.offset_elems + b.elems))
        .collect();
    for (label, got_r, got_a) in &snaps[1..] {
        for round in 0..2 {
            assert_eq!(
                got_r[round], want_r[round],
                "{label}: result, round {round}"
            );
            let (w, g) = (&want_a[round], &got_a[round]);
            for (name, lo, hi) in &binding_ranges {
                let what = name
                    .strip_prefix('t')
                    .and_then(|t| t.parse::<u32>().ok())
                    .and_then(|t| p.b.instrs.iter().find(|i| i.out == t))
                    .map(|i| {
                        let op = Opcode::from_u8(i.opcode).unwrap();
                        let args: Vec<String> = i.args[..op.arity()]
                            .iter()
                            .map(|&a| {
                                let w = p.b.instrs.iter().find(|j| j.out == a);
                                match w {
                                    Some(j) if j.opcode == Fill.to_u8() => {
                                        format!("fill({:#010x})", j.attr_word)
                                    }
                                    Some(j) => format!("{:?}", Opcode::from_u8(j.opcode).unwrap()),
                                    None => "input".into(),
                                }
                            })
                            .collect();
                        format!("{op:?}{args:?} attr {:#x}", i.attr_word)
                    })
                    .unwrap_or_default();
                let (gb, wb) = (raw(&g[*lo..*hi]), raw(&w[*lo..*hi]));
                if gb != wb {
                    let nan_only = gb.iter().zip(&wb).all(|(a, b)| {
                        a == b || (f32::from_bits(*a).is_nan() && f32::from_bits(*b).is_nan())
                    });
                    let msg = format!(
                        "{label}: binding {name} = {what}, round {round}, nan_only {nan_only}\n run_program {gb:x?}\n run         {wb:x?}"
                    );
                    if nan_only && std::env::var("STRICT_NAN").is_err() {
                        eprintln!("NAN-ONLY {msg}");
                    } else {
                        panic!("{msg}");
                    }
                }
            }
            for i in 0..w.len() {
                if w[i].to_bits() == g[i].to_bits() || (w[i].is_nan() && g[i].is_nan() && i < n) {
                    continue;
                }
                assert!(i < n, "{label}: sentinel {} written, round {round}", i - n);
                let in_removed = writers[i] == 1;
                let in_input = label == "run_program_with_inputs"
                    && writers[i] == 0
                    && input_ranges.iter().any(|&(lo, hi)| i >= lo && i < hi);
                assert!(
                    in_removed || in_input,
                    "{label}: arena[{i}] run {:#010x} vs {:#010x}, round {round}",
                    w[i].to_bits(),
                    g[i].to_bits()
                );
            }
        }
    }
    Outcome { removed }
}

fn compare(p: &P, bind: bool) -> Outcome {
    compare_o::<tapeplan_core::BuildOps>(p, "main", bind, |b| {
        Plan::parse(b).unwrap_or_else(|e| panic!("{e}"))
    })
}

fn specials() -> Vec<f32> {
    [
        0x8000_0000u32, // -0
        0x0000_0000,
        0x7fc0_0000, // NaN
        0xffc0_0000, // -NaN
        0x7fc1_2345, // NaN payload
        0x7f80_0001, // signalling NaN
        0x7f80_0000,
        0xff80_0000,
        0x0000_0001, // smallest subnormal
        0x8000_0001,
        0x7f7f_ffff,
        0x3f80_0000, // 1
        0xbfc0_0000, // -1.5
        0x4120_0000, // 10
        0x42c8_0000, // 100 (exp overflow)
        0xc2c8_0000, // -100
    ]
    .iter()
    .map(|&b| f32::from_bits(b))
    .collect()
}

fn xs(n: usize, seed: u64) -> Vec<f32> {
    let mut v = floats(seed, n);
    let sp = specials();
    for (k, s) in sp.iter().enumerate() {
        if k < n {
            v[k] = *s;
        }
    }
    v
}

const BINARY: [Opcode; 9] = [
    Add,
    Sub,
    Mul,
    Div,
    Equal,
    Greater,
    GreaterEqual,
    Maximum,
    Minimum,
];
const UNARY: [Opcode; 15] = [
    Neg, Abs, Relu, Heaviside, Sign, Detach, Sqrt, Tanh, Exp, Log, Sigmoid, Softplus, Erf, Neg, Abs,
];

/// Every special value as a fill read by every binary op on both sides, in place both sides,
/// twice, and every unary op; pow by several exponents. Precise and fast profiles.
fn fills_everywhere(fast: bool) {
    for (k, &c) in specials().iter().enumerate() {
        let mut p = P::new();
        if fast {
            p.b.flags |= FLAG_MATH_FAST;
        }
        let x = p.input(&[1, 23], xs(23, 7 + k as u64));
        let mut outs = vec![];
        for &op in &BINARY {
            let f = p.fill(&[1, 23], c);
            outs.push(p.op(op, &[1, 23], &[x, f], 0));
            outs.push(p.op(op, &[1, 23], &[f, x], 0));
            outs.push(p.op(op, &[1, 23], &[f, f], 0));
            let y = p.op(Detach, &[1, 23], &[x], 0);
            outs.push(p.op_over(op, y, &[y, f], 0));
            let z = p.op(Detach, &[1, 23], &[x], 0);
            outs.push(p.op_over(op, z, &[f, z], 0));
            let w = p.op(Neg, &[1, 23], &[f], 0);
            outs.push(p.op_over(op, f, &[w, f], 0));
        }
        for &op in &UNARY {
            let f = p.fill(&[1, 23], c);
            outs.push(p.op(op, &[1, 23], &[f], 0));
            outs.push(p.op_over(op, f, &[f], 0));
        }
        for e in [2.0f32, 0.5, -1.0, 3.0, f32::NAN, 0.0, -0.0, f32::INFINITY] {
            let f = p.fill(&[1, 23], c);
            outs.push(p.op(Pow, &[1, 23], &[f], e.to_bits()));
        }
        p.finish(&outs);
        let o = compare(&p, false);
        assert!(o.removed > 0);
    }
}

#[test]
fn stand_in_attack_fills_precise() {
    fills_everywhere(false);
}

#[test]
fn stand_in_attack_fills_fast() {
    fills_everywhere(true);
}

/// Broadcast `[23]` -> `[1, 23]` (and `[2,3]` -> `[1,2,3]`) read by every op, source specials.
#[test]
fn stand_in_attack_broadcasts_every_op() {
    for fast in [false, true] {
        let mut p = P::new();
        if fast {
            p.b.flags |= FLAG_MATH_FAST;
        }
        let x = p.input(&[1, 23], xs(23, 3));
        let bias = p.input(&[23], xs(23, 4).into_iter().rev().collect());
        let mut outs = vec![];
        for &op in &BINARY {
            let r = p.op(Broadcast, &[1, 23], &[bias], 0);
            outs.push(p.op(op, &[1, 23], &[x, r], 0));
            outs.push(p.op(op, &[1, 23], &[r, x], 0));
            outs.push(p.op(op, &[1, 23], &[r, r], 0));
            outs.push(p.op_over(op, r, &[r, x], 0));
        }
        for &op in &UNARY {
            let r = p.op(Broadcast, &[1, 23], &[bias], 0);
            outs.push(p.op(op, &[1, 23], &[r], 0));
        }
        let b6 = p.input(&[2, 3], xs(6, 9));
        let r = p.op(Broadcast, &[1, 2, 3], &[b6], 0);
        outs.push(p.op(Exp, &[1, 2, 3], &[r], 0));
        p.finish(&outs);
        let o = compare(&p, true);
        assert!(o.removed > 0, "removed {}", o.removed);
    }
}

/// The broadcast's source overwritten after the broadcast, before a reader, by each kind of
/// writer: in-place elementwise, a structural op over the dead source's range, sgd_matmul in
/// place, a fused chain member, a fused chain's last member, a fill (itself removable).
#[test]
fn stand_in_attack_source_overwritten() {
    for writer in 0..7 {
        let mut p = P::persistent(12);
        let _w = p.param(0, &[3, 4], xs(12, 5));
        let x = p.input(&[1, 12], xs(12, 6));
        let a = p.input(&[2, 3], xs(6, 7));
        let g = p.input(&[2, 4], xs(8, 8));
        let mut outs = vec![];
        // src: a scratch copy of x (so it may die and be written over).
        let xv = p.input(&[12], xs(12, 16));
        let src = p.op(Neg, &[12], &[xv], 0);
        let row = p.op(Broadcast, &[1, 12], &[src], 0);
        match writer {
            0 => {
                let _ = p.op_over(Exp, src, &[src], 0);
            }
            1 => {
                let _ = p.op_at(MatMulTn, p.off(src) + 4, &[3, 4], &[a, g], 0);
            }
            2 => {
                // sgd_matmul of the persistent weight: the source is w's copy, not w. Make
                // the broadcast's source the weight itself instead (update in place).
            }
            3 => {
                let t = p.op_at(Exp, p.off(src), &[12], &[xv], 0);
                p.fuse_last();
                let _ = p.op(Neg, &[12], &[t], 0);
            }
            4 => {
                let t = p.op(Exp, &[12], &[xv], 0);
                p.fuse_last();
                let _ = p.op_at(Neg, p.off(src), &[12], &[t], 0);
            }
            5 => {
                let _ = p.op_at(Fill, p.off(src) + 4, &[3], &[], 9.0f32.to_bits());
            }
            _ => {
                // a fill written over the source, read by an unfused elementwise op: removable
                // itself; the broadcast must still run.
                let f = p.op_at(Fill, p.off(src), &[1, 12], &[], 9.0f32.to_bits());
                outs.push(p.op(Add, &[1, 12], &[f, x], 0));
            }
        }
        outs.push(p.op(Add, &[1, 12], &[row, x], 0));
        p.finish(&outs);
        let o = compare(&p, true);
        eprintln!("writer {writer}: removed {}", o.removed);
    }
}

/// sgd_matmul updating the persistent weight in place after a broadcast of the weight, read
/// after the update. (A persistent source: the broadcast copy is scratch.)
#[test]
fn stand_in_attack_sgd_over_source() {
    let mut p = P::persistent(12);
    let w = p.param(0, &[3, 4], xs(12, 5));
    let a = p.input(&[2, 3], xs(6, 7));
    let g = p.input(&[2, 4], xs(8, 8));
    let x = p.input(&[1, 3, 4], xs(12, 9));
    let row = p.op(Broadcast, &[1, 3, 4], &[w], 0);
    let w2 = p.b.tensor(0, &[3, 4], TensorKind::Persistent);
    p.b.instr(SgdMatMul, w2, &[w, a, g], 0.5f32.to_bits());
    let y = p.op(Add, &[1, 3, 4], &[row, x], 0);
    let e = p.finish(&[y]);
    p.b.bind("p0", BindingKind::Update, e, w2);
    let o = compare(&p, true);
    eprintln!("sgd: removed {}", o.removed);
    // And the update before the broadcast's reader, the weight read after: the copy is old.
}

/// A reader writing its output over the source range exactly, or partially.
#[test]
fn stand_in_attack_reader_over_source() {
    for shift in [0u32, 4] {
        let mut p = P::new();
        let x = p.input(&[1, 12], xs(12, 6));
        let xv = p.input(&[12], xs(12, 16));
        let src = p.op(Neg, &[12], &[xv], 0);
        let row = p.op(Broadcast, &[1, 12], &[src], 0);
        let y1 = p.op_at(Sub, p.off(src) + shift, &[1, 12], &[row, x], 0);
        let y2 = p.op(Mul, &[1, 12], &[row, x], 0);
        p.finish(&[y1, y2]);
        let o = compare(&p, true);
        eprintln!("reader over source +{shift}: removed {}", o.removed);
    }
}

/// A fill / broadcast read by a fused chain member and by an unfused instruction; a fill that
/// is itself in a chain; a fill read only inside a chain.
#[test]
fn stand_in_attack_chains() {
    for case in 0..4 {
        let mut p = P::new();
        let x = p.input(&[1, 8], xs(8, 6));
        let bias = p.input(&[8], xs(8, 2));
        let f = p.fill(&[1, 8], 0.75);
        let r = p.op(Broadcast, &[1, 8], &[bias], 0);
        let mut outs = vec![];
        match case {
            0 => {
                let t = p.op(Mul, &[1, 8], &[x, f], 0);
                p.fuse_last();
                outs.push(p.op(Add, &[1, 8], &[t, r], 0));
                outs.push(p.op(Sub, &[1, 8], &[f, r], 0));
            }
            1 => {
                outs.push(p.op(Sub, &[1, 8], &[f, r], 0));
                let t = p.op(Mul, &[1, 8], &[x, f], 0);
                p.fuse_last();
                outs.push(p.op(Add, &[1, 8], &[t, r], 0));
            }
            2 => {
                let g = p.fill(&[1, 8], 2.0);
                p.fuse_last();
                outs.push(p.op(Add, &[1, 8], &[g, r], 0));
                outs.push(p.op(Sub, &[1, 8], &[f, x], 0));
            }
            _ => {
                // The reader is the chain's head.
                let t = p.op(Mul, &[1, 8], &[x, f], 0);
                p.fuse_last();
                let u = p.op(Add, &[1, 8], &[t, x], 0);
                outs.push(u);
                outs.push(p.op(Sub, &[1, 8], &[r, x], 0));
            }
        }
        p.finish(&outs);
        let o = compare(&p, true);
        eprintln!("chains case {case}: removed {}", o.removed);
    }
}

/// Tensors aliasing one range: a fill's range reused (after it dies) by another fill, a
/// broadcast copy, an elementwise result and a product; several records of the same range.
#[test]
fn stand_in_attack_aliases() {
    let mut p = P::new();
    let x = p.input(&[1, 8], xs(8, 6));
    let bias = p.input(&[8], xs(8, 2));
    let base = p.next;
    p.next += 16;
    let mut outs = vec![];
    let f1 = p.op_at(Fill, base, &[1, 8], &[], 3.0f32.to_bits());
    outs.push(p.op(Add, &[1, 8], &[f1, x], 0));
    let f2 = p.op_at(Fill, base, &[1, 8], &[], (-2.0f32).to_bits());
    outs.push(p.op(Mul, &[1, 8], &[x, f2], 0));
    let r = p.op_at(Broadcast, base, &[1, 8], &[bias], 0);
    outs.push(p.op(Sub, &[1, 8], &[r, x], 0));
    // The range read next as something nobody wrote since the removed ones: refused by the
    // validator? A tensor defined by an op over the range, read back.
    let f3 = p.op_at(Fill, base + 4, &[1, 4], &[], 5.0f32.to_bits());
    let f4 = p.op_at(Fill, base + 8, &[1, 4], &[], 6.0f32.to_bits());
    let c = p.op(Concat, &[1, 8], &[f3, f4], 1);
    outs.push(c);
    // A fill and a broadcast copy whose source is in the fill's old range.
    let s = p.op_at(Neg, base, &[8], &[bias], 0);
    let r2 = p.op_at(Broadcast, base + 8, &[1, 8], &[s], 0);
    let f5 = p.op_at(Fill, base, &[1, 8], &[], 7.0f32.to_bits());
    outs.push(p.op(Add, &[1, 8], &[r2, f5], 0));
    p.finish(&outs);
    let o = compare(&p, true);
    eprintln!("aliases: removed {}", o.removed);
}

/// A fill or broadcast whose output is an output, an update (guarded), persistent, or input.
#[test]
fn stand_in_attack_bound_outputs() {
    // Output.
    let mut p = P::new();
    let x = p.input(&[1, 8], xs(8, 6));
    let f = p.fill(&[1, 8], 1.5);
    let y = p.op(Add, &[1, 8], &[f, x], 0);
    p.finish(&[f, y]);
    assert_eq!(compare(&p, true).removed, 0);
    // Guarded update: the update's tensor is a fill's scratch.
    let mut p = P::persistent(8);
    let _w = p.param(0, &[1, 8], xs(8, 1));
    let x = p.input(&[1, 8], xs(8, 6));
    let f = p.fill(&[1, 8], 1.5);
    let y = p.op(Add, &[1, 8], &[f, x], 0);
    let e = p.finish(&[y]);
    p.b.bind("p0", BindingKind::Update, e, f);
    assert_eq!(compare(&p, true).removed, 0);
    // Persistent update written by a fill in place.
    let mut p = P::persistent(8);
    let w = p.param(0, &[1, 8], xs(8, 1));
    let x = p.input(&[1, 8], xs(8, 6));
    let y = p.op(Add, &[1, 8], &[w, x], 0);
    let w2 = p.b.tensor(0, &[1, 8], TensorKind::Persistent);
    p.b.instr(Fill, w2, &[], 0.25f32.to_bits());
    let z = p.op(Mul, &[1, 8], &[w2, x], 0);
    let e = p.finish(&[y, z]);
    p.b.bind("p0", BindingKind::Update, e, w2);
    assert_eq!(compare(&p, true).removed, 0);
}

/// Two entries over shared instructions: one ends with the reader, one reads the fill later.
#[test]
fn stand_in_attack_entries() {
    let mut p = P::new();
    let x = p.input(&[1, 8], xs(8, 6));
    let bias = p.input(&[8], xs(8, 2));
    let f = p.fill(&[1, 8], 0.5);
    let r = p.op(Broadcast, &[1, 8], &[bias], 0);
    let y = p.op(Add, &[1, 8], &[f, x], 0);
    let z = p.op(Mul, &[1, 8], &[r, f], 0);
    let m = p.op(MatMulNt, &[1, 1], &[z, x], 0);
    p.b.arena_elems = p.next;
    let e0 = p.b.entry("main", 0, 4);
    let e1 = p.b.entry("long", 0, 5);
    let e2 = p.b.entry("short", 0, 3);
    for (e, outs) in [(e0, vec![y, z]), (e1, vec![y, m]), (e2, vec![y])] {
        p.b.bind("in0", BindingKind::Input, e, x);
        p.b.bind("in1", BindingKind::Input, e, bias);
        for t in outs {
            p.b.bind(&format!("t{t}"), BindingKind::Output, e, t);
        }
    }
    for name in ["main", "long", "short"] {
        let o = compare_o::<tapeplan_core::BuildOps>(&p, name, true, |b| Plan::parse(b).unwrap());
        eprintln!("entry {name}: removed {}", o.removed);
    }
}

/// Bound inputs: a broadcast of the input itself, of a scratch tensor lying in a dead input's
/// range, a fill over a dead input's range, readers that also read a bound input.
#[test]
fn stand_in_attack_bound_inputs() {
    for case in 0..4 {
        let mut p = P::new();
        let x = p.input(&[1, 8], xs(8, 6));
        let bias = p.input(&[8], xs(8, 2));
        let mut outs = vec![];
        match case {
            0 => {
                let r = p.op(Broadcast, &[1, 8], &[bias], 0);
                outs.push(p.op(Add, &[1, 8], &[r, x], 0));
            }
            1 => {
                let y = p.op(Exp, &[1, 8], &[x], 0);
                let s = p.op_over(Neg, bias, &[bias], 0); // bias dies, s over it
                let r = p.op(Broadcast, &[1, 8], &[s], 0);
                outs.push(p.op(Add, &[1, 8], &[r, y], 0));
            }
            2 => {
                let y = p.op(Exp, &[1, 8], &[x], 0);
                let yb = p.op(Neg, &[8], &[bias], 0);
                let f = p.op_at(Fill, p.off(x), &[1, 8], &[], 4.0f32.to_bits()); // over dead x
                outs.push(p.op(Add, &[1, 8], &[f, y], 0));
                let r = p.op_at(Broadcast, p.off(bias), &[1, 8], &[yb], 0); // over dead bias
                outs.push(p.op(Sub, &[1, 8], &[r, f], 0));
            }
            _ => {
                let f = p.fill(&[1, 8], 4.0);
                outs.push(p.op(Add, &[1, 8], &[f, x], 0));
                let r = p.op(Broadcast, &[1, 8], &[bias], 0);
                outs.push(p.op(Mul, &[1, 8], &[x, r], 0));
                outs.push(p.op(Mul, &[1, 8], &[f, x], 0));
            }
        }
        p.finish(&outs);
        let o = compare(&p, true);
        eprintln!("bound inputs case {case}: removed {}", o.removed);
    }
}

/// Zero-element fills and broadcasts.
#[test]
fn stand_in_attack_zero_elems() {
    let mut p = P::new();
    let x = p.input(&[1, 0], vec![]);
    let b = p.input(&[0], vec![]);
    let y0 = p.input(&[1, 4], xs(4, 1));
    let f = p.fill(&[1, 0], 1.0);
    let r = p.op(Broadcast, &[1, 0], &[b], 0);
    let y = p.op(Add, &[1, 0], &[f, x], 0);
    let z = p.op(Mul, &[1, 0], &[r, f], 0);
    let g = p.fill(&[1, 4], 2.0);
    let w = p.op(Mul, &[1, 4], &[g, y0], 0);
    p.finish(&[y, z, w]);
    let o = compare(&p, true);
    eprintln!("zero: removed {}", o.removed);
}

op_set!(struct NoExp = [Fill, Broadcast, Add, Mul, Neg, Sub, Tanh]);
op_set!(struct Few = [Fill, Broadcast, Add, Mul, Neg, Sub, Tanh, Exp, Sigmoid]);

fn parse_with<O: Ops>(bytes: &[u8]) -> Plan<'_> {
    let mut scratch = Scratch::<64>::new();
    Plan::parse_selective::<O, 64>(bytes, &Limits::DEFAULT, &mut scratch).unwrap()
}

/// Selective op sets.
#[test]
fn stand_in_attack_op_sets() {
    let mut p = P::new();
    let x = p.input(&[1, 8], xs(8, 6));
    let bias = p.input(&[8], xs(8, 2));
    let f = p.fill(&[1, 8], 0.5);
    let r = p.op(Broadcast, &[1, 8], &[bias], 0);
    let y = p.op(Add, &[1, 8], &[f, x], 0);
    let z = p.op(Tanh, &[1, 8], &[r], 0);
    let u = p.op(Sub, &[1, 8], &[z, f], 0);
    p.finish(&[y, u]);
    let o = compare_o::<NoExp>(&p, "main", true, parse_with::<NoExp>);
    eprintln!("NoExp: removed {}", o.removed);
    let o = compare_o::<Few>(&p, "main", true, parse_with::<Few>);
    eprintln!("Few: removed {}", o.removed);
}

/// Random straight-line entries over few aliased slots: fills, reshaping broadcasts, sources,
/// elementwise readers (fresh range, in place, over a dead source), a structural writer,
/// two-member fused chains writing arena ranges. Plans the validator refuses are skipped.
fn fuzz(seed0: u64, tries: usize, fast: bool) -> (usize, usize) {
    let sp = specials();
    let (mut accepted, mut removed_total) = (0, 0);
    for seed in seed0..seed0 + tries as u64 {
        let mut r = Rng::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut p = P::new();
        if fast {
            p.b.flags |= FLAG_MATH_FAST;
        }
        const SLOTS: u32 = 8;
        p.next = 8 * SLOTS + 16;
        let x = p.b.tensor(0, &[1, 8], TensorKind::Scratch);
        p.inputs.push(("in0".into(), x, xs(8, seed)));
        let v = p.b.tensor(8, &[8], TensorKind::Scratch);
        p.inputs
            .push(("in1".into(), v, xs(8, seed + 1).into_iter().rev().collect()));
        let mut rows = vec![x]; // [1, 8] tensors
        let mut vecs = vec![v]; // [8] tensors
        let n_instrs = 3 + r.below(10);
        let mut fuse_pending = false;
        for _ in 0..n_instrs {
            let slot = |r: &mut Rng| {
                (r.below(SLOTS as usize) as u32) * 8 + if r.below(6) == 0 { 4 } else { 0 }
            };
            let kind = if fuse_pending { 3 } else { r.below(8) };
            match kind {
                0 => {
                    let c = sp[r.below(sp.len())];
                    let off = slot(&mut r);
                    rows.push(p.op_at(Fill, off, &[1, 8], &[], c.to_bits()));
                }
                1 => {
                    let s = vecs[r.below(vecs.len())];
                    let off = slot(&mut r);
                    rows.push(p.op_at(Broadcast, off, &[1, 8], &[s], 0));
                }
                2 => {
                    let s = rows[r.below(rows.len())];
                    let off = slot(&mut r);
                    let op = [Neg, Exp, Detach][r.below(3)];
                    // `[1, 8]` -> `[8]` through reshape, or an elementwise op of a vector.
                    if r.below(2) == 0 {
                        vecs.push(p.op_at(Reshape, off, &[8], &[s], 0));
                    } else {
                        let s = vecs[r.below(vecs.len())];
                        vecs.push(p.op_at(op, off, &[8], &[s], 0));
                    }
                }
                3..=5 => {
                    let a = rows[r.below(rows.len())];
                    let b = rows[r.below(rows.len())];
                    let unary = r.below(3) == 0;
                    let op = if unary {
                        [Neg, Exp, Tanh, Sqrt, Relu, Sign][r.below(6)]
                    } else {
                        BINARY[r.below(BINARY.len())]
                    };
                    let args: Vec<u32> = if unary { vec![a] } else { vec![a, b] };
                    let t = match r.below(3) {
                        0 => p.op_over(op, a, &args, 0),
                        _ => {
                            let off = slot(&mut r);
                            p.op_at(op, off, &[1, 8], &args, 0)
                        }
                    };
                    rows.push(t);
                    if fuse_pending {
                        fuse_pending = false;
                    } else if r.below(5) == 0 {
                        p.fuse_last();
                        fuse_pending = true;
                    }
                }
                6 => {
                    // A structural writer over a slot: [1,8]^T . [1,8] is [8,8]; use MatMulNt
                    // [1,8] x [1,8]^T = [1,1], and Concat of two halves.
                    let a = rows[r.below(rows.len())];
                    let off = slot(&mut r);
                    let t = p.op_at(Reshape, off, &[8], &[a], 0);
                    vecs.push(t);
                }
                _ => {
                    let a = rows[r.below(rows.len())];
                    let off = slot(&mut r);
                    rows.push(p.op_at(Neg, off, &[1, 8], &[a], 0));
                }
            }
        }
        if fuse_pending {
            continue;
        }
        // Outputs: the last two rows defined.
        let outs: Vec<u32> = rows
            .iter()
            .rev()
            .take(2)
            .copied()
            .filter(|&t| t != x)
            .collect();
        let mut outs = outs;
        outs.dedup();
        p.finish(&outs);
        p.b.arena_elems = p.next;
        let bytes = p.b.build();
        if Plan::parse(&bytes).is_err() {
            continue;
        }
        accepted += 1;
        let o = compare(&p, true);
        removed_total += o.removed / 100;
    }
    (accepted, removed_total)
}

#[test]
fn stand_in_attack_fuzz() {
    for fast in [false, true] {
        let tries = std::env::var("FUZZ_TRIES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(40_000);
        let (acc, rem) = fuzz(1, tries, fast);
        eprintln!("fuzz fast={fast}: {acc} plans accepted, {rem} instructions removed");
        assert!(acc > 100);
    }
}

/// Baseline: no fill, no broadcast (nothing removed): do NaN bits already differ between
/// `run` and `run_program(_with_inputs)`? (Run with STRICT_NAN=1 to make it panic.)
#[test]
fn stand_in_attack_nan_baseline() {
    let mut p = P::new();
    let x = p.input(&[1, 8], xs(8, 1));
    let y = p.input(&[1, 8], xs(8, 2).into_iter().rev().collect());
    let n = p.op(Neg, &[1, 8], &[y], 0);
    let m = p.op(Mul, &[1, 8], &[x, n], 0);
    let a = p.op(Add, &[1, 8], &[y, x], 0);
    p.finish(&[m, a]);
    assert_eq!(compare(&p, true).removed, 0);
}

/// NaN-bits repro 1: a broadcast read by an in-place reader (`Src::Out` under `run`, the
/// source as `Src::Buf` under `run_program`). STRICT_NAN=1 to panic.
#[test]
fn stand_in_attack_nan_in_place_broadcast() {
    let mut p = P::new();
    let nans = [
        0x7fc0_0000u32,
        0xffc0_0000,
        0x7fc1_2345,
        0x7f80_0001,
        0x3f80_0000,
        0,
        0x7fc0_0000,
        0xffc0_0000,
    ];
    let x = p.input(&[1, 8], nans.iter().map(|&b| f32::from_bits(b)).collect());
    let bias = p.input(
        &[8],
        nans.iter().rev().map(|&b| f32::from_bits(b)).collect(),
    );
    let r = p.op(Broadcast, &[1, 8], &[bias], 0);
    let y = p.op_over(Add, r, &[r, x], 0);
    p.finish(&[y]);
    assert_eq!(compare(&p, false).removed, 1);
}

/// NaN-bits repro 2: a fill of a signalling NaN / -NaN read by `tanh`, `log`, `maximum(f, f)`
/// (simd: the lane form over the fill's copy vs the scalar form of the constant).
#[test]
fn stand_in_attack_nan_unary_splat() {
    for (c, op) in [
        (0x7f80_0001u32, Tanh),
        (0xbfc0_0000, Log),
        (0xffc0_0000, Maximum),
    ] {
        let mut p = P::new();
        let f = p.op(Fill, &[1, 23], &[], c);
        let args: Vec<u32> = if op == Maximum { vec![f, f] } else { vec![f] };
        let y = p.op(op, &[1, 23], &args, 0);
        p.finish(&[y]);
        assert_eq!(compare(&p, false).removed, 1);
    }
}

/// Adam's three chains (as the planner records them, in place) with an unfused fill between
/// the first and second chain, read by an unfused `add` at the end: under `run` the chains
/// are not adjacent (no one-pass Adam), in the decoded program they are once the fill goes.
#[test]
fn stand_in_attack_adam_adjacency() {
    use TensorKind::{Persistent as PP, Register as R, Scratch as S};
    for n in [64u32, 100, 257] {
        for consts in [
            [0.9f32, 0.100000024, 0.999, 0.0009999871, 1e-8],
            [0.0, 1.0, 0.5, f32::INFINITY, 0.0],
            [-0.0, f32::NAN, 1.0, 0.0, f32::MIN_POSITIVE / 8.0],
        ] {
            let a = n.div_ceil(4) * 4;
            let mut b = Builder::new(9 * a + 8, 3 * a);
            let p = b.tensor(0, &[n], PP);
            let m = b.tensor(a, &[n], PP);
            let v = b.tensor(2 * a, &[n], PP);
            let g = b.tensor(3 * a, &[n], S);
            let s1 = b.tensor(4 * a, &[], S);
            let s2 = b.tensor(4 * a + 4, &[], S);
            let (m_out, v_out, p_out) = (
                b.tensor(a, &[n], PP),
                b.tensor(2 * a, &[n], PP),
                b.tensor(0, &[n], PP),
            );
            let [beta1, c1, beta2, c2, eps] = consts.map(f32::to_bits);
            let reg = |b: &mut Builder, slot: u32| b.tensor(slot, &[n], R);
            let (f0, x0) = (reg(&mut b, 0), reg(&mut b, 0));
            b.instr(Fill, f0, &[], beta1);
            b.instr(Mul, x0, &[m, f0], 0);
            let (f1, x1) = (reg(&mut b, 1), reg(&mut b, 1));
            b.instr(Fill, f1, &[], c1);
            b.instr(Mul, x1, &[g, f1], 0);
            b.instr(Add, m_out, &[x0, x1], 0);
            // The intruder: an unfused fill in scratch.
            let fz = b.tensor(5 * a + 8, &[n], S);
            b.instr(Fill, fz, &[], 0.5f32.to_bits());
            let (f0, x0, x1, f2, y1) = (
                reg(&mut b, 0),
                reg(&mut b, 0),
                reg(&mut b, 1),
                reg(&mut b, 2),
                reg(&mut b, 1),
            );
            b.instr(Fill, f0, &[], beta2);
            b.instr(Mul, x0, &[v, f0], 0);
            b.instr(Mul, x1, &[g, g], 0);
            b.instr(Fill, f2, &[], c2);
            b.instr(Mul, y1, &[x1, f2], 0);
            b.instr(Add, v_out, &[x0, y1], 0);
            let [q0, b1, q1, e1, q2, q3, b2, q4] =
                [0, 1, 0, 1, 0, 0, 1, 0].map(|slot| reg(&mut b, slot));
            b.instr(Sqrt, q0, &[v_out], 0);
            b.instr(Broadcast, b1, &[s2], 0);
            b.instr(Div, q1, &[q0, b1], 0);
            b.instr(Fill, e1, &[], eps);
            b.instr(Add, q2, &[q1, e1], 0);
            b.instr(Div, q3, &[m_out, q2], 0);
            b.instr(Broadcast, b2, &[s1], 0);
            b.instr(Mul, q4, &[b2, q3], 0);
            b.instr(Sub, p_out, &[p, q4], 0);
            let out = b.tensor(6 * a + 8, &[n], S);
            b.instr(Add, out, &[fz, g], 0);
            let len = b.instrs.len();
            for k in (0..4).chain(6..11).chain(12..len - 2) {
                b.instrs[k].flags = FUSE_NEXT;
            }
            b.entry("main", 0, len as u32);
            let mut pp = P::new();
            pp.b = b;
            pp.b.arena_elems = 9 * a + 8;
            pp.next = 9 * a + 8;
            for (name, t) in [("p", p), ("m", m), ("v", v)] {
                pp.b.param(name, t);
                let vals = xs(n as usize, t as u64)
                    .iter()
                    .map(|x| if name == "v" { x.abs() } else { *x })
                    .collect();
                pp.params.push((name.into(), t, vals));
            }
            pp.inputs.push(("g".into(), g, xs(n as usize, 77)));
            pp.inputs.push(("s1".into(), s1, vec![0.001]));
            pp.inputs.push(("s2".into(), s2, vec![0.97]));
            for (name, t, _) in pp.inputs.clone() {
                pp.b.bind(&name, BindingKind::Input, 0, t);
            }
            pp.b.bind("p", BindingKind::Update, 0, p_out);
            pp.b.bind("m", BindingKind::Update, 0, m_out);
            pp.b.bind("v", BindingKind::Update, 0, v_out);
            pp.b.bind("out", BindingKind::Output, 0, out);
            // Sanity: the same plan with the intruder moved after the chains is one-pass.
            let mut moved = pp.b.clone();
            let intruder = moved.instrs.remove(5);
            moved.instrs.insert(len - 2, intruder);
            let mb = moved.build();
            let mplan = Plan::parse(&mb).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                tapeplan_runtime::catalog::one_pass_adam_updates(
                    &mplan,
                    mplan.entry("main").unwrap()
                ),
                1
            );
            let bytes = pp.b.build();
            let plan = Plan::parse(&bytes).unwrap_or_else(|e| panic!("{e}"));
            let one_pass = tapeplan_runtime::catalog::one_pass_adam_updates(
                &plan,
                plan.entry("main").unwrap(),
            );
            let o = compare(&pp, true);
            eprintln!(
                "adam n={n}: removed {}, one-pass per records {one_pass}",
                o.removed
            );
            assert_eq!(o.removed % 100, 1);
        }
    }
}

/// An instruction of a fused chain into register slot `slot` (FUSE_NEXT set).
fn reg_op(p: &mut P, op: Opcode, slot: u32, dims: &[u32], args: &[u32], attr: u32) -> u32 {
    let t = p.b.tensor(slot, dims, TensorKind::Register);
    p.b.instr(op, t, args, attr);
    p.fuse_last();
    t
}

/// Lane chains (`fused::run_lane_chain`: a chain of at most one chunk of `L2` lanes in a decoded
/// program, one vector operation per member) against `Session::run`'s chain runner, with the same
/// harness: every special value through every op (both sides, and every unary op and `pow`) in
/// chains over 1 to 16 elements (one chunk with AVX2 and AVX-512, two with SSE2), their values in
/// register slots and the arena, a `fill` first, a `broadcast` that only reshapes as a member, a
/// last member written in place over an argument; outputs and the whole arena compared.
fn lane_chains(fast: bool) {
    for n in [1u32, 3, 8, 13, 16] {
        for (k, &c) in specials().iter().enumerate() {
            let mut p = P::new();
            if fast {
                p.b.flags |= FLAG_MATH_FAST;
            }
            let d = [1, n];
            let x = p.input(&d, xs(n as usize, 31 + k as u64));
            let bias = p.input(&[n], xs(n as usize, 3 + k as u64));
            let mut outs = vec![];
            for &op in &BINARY {
                let f = reg_op(&mut p, Fill, 0, &d, &[], c.to_bits());
                let r = reg_op(&mut p, op, 1, &d, &[x, f], 0);
                let g = reg_op(&mut p, Broadcast, 2, &d, &[bias], 0);
                let s = reg_op(&mut p, op, 3, &d, &[g, r], 0);
                outs.push(p.op(op, &d, &[s, x], 0));
                // In place over an arena argument, the constant on the right.
                let y = p.op(Detach, &d, &[x], 0);
                let f = reg_op(&mut p, Fill, 0, &d, &[], c.to_bits());
                outs.push(p.op_over(op, y, &[y, f], 0));
            }
            for &op in &UNARY {
                let f = reg_op(&mut p, Fill, 0, &d, &[], c.to_bits());
                let t = reg_op(&mut p, op, 1, &d, &[f], 0);
                let u = reg_op(&mut p, op, 2, &d, &[x], 0);
                outs.push(p.op(Add, &d, &[t, u], 0));
            }
            for e in [2.0f32, 0.5, -1.0, f32::NAN, -0.0, f32::INFINITY] {
                let f = reg_op(&mut p, Fill, 0, &d, &[], c.to_bits());
                let t = reg_op(&mut p, Pow, 1, &d, &[f], e.to_bits());
                outs.push(p.op(Pow, &d, &[t], e.to_bits()));
            }
            p.finish(&outs);
            compare(&p, n == 13);
        }
    }
}

#[test]
fn lane_chains_precise() {
    lane_chains(false);
}

#[test]
fn lane_chains_fast() {
    lane_chains(true);
}

// ---------------------------------------------------------------------------------------------
// Lane-chain attacks (appended): fused vs unfused, decode_all + with_decoded, chains at the
// arena's very end, junk (specials) in the lanes past a chain, every register slot, broadcasts
// of inputs and parameters first, writes read back within a chain, guarded entries.

/// The same plan with every chain unfused: FUSE_NEXT cleared, each register tensor moved to a
/// scratch range of its own past the arena.
fn la_unfused(p: &P) -> P {
    let mut b = p.b.clone();
    let mut next = b.arena_elems.div_ceil(4) * 4 + 4;
    for t in b.tensors.iter_mut() {
        if t.kind == TensorKind::Register as u8 {
            let e: u32 = t.dims[..t.rank as usize].iter().product();
            t.kind = TensorKind::Scratch as u8;
            t.offset_elems = next;
            next += e.div_ceil(4) * 4 + 4;
        }
    }
    for i in b.instrs.iter_mut() {
        i.flags &= !FUSE_NEXT;
    }
    b.arena_elems = next;
    P {
        b,
        next,
        inputs: p.inputs.clone(),
        params: p.params.clone(),
    }
}

/// Per binding name (outputs, updates, parameters), its bits after each of two rounds, with
/// each round's result; `way`: 0 run, 1 decode + run_program, 2 decode_with_inputs +
/// run_program_with_inputs, 3 decode_all + with_decoded + run. Sentinels past the arena checked.
type LaRun = (
    Vec<Result<(), tapeplan_runtime::ExecError>>,
    Vec<Vec<(String, Vec<f32>)>>,
);
fn la_run(p: &P, way: usize) -> LaRun {
    let bytes = p.b.build();
    let plan = Plan::parse(&bytes).unwrap_or_else(|e| panic!("{e}"));
    let entry = plan.entry("main").unwrap();
    let n = plan.arena_elems();
    let inputs = bound_inputs(p, &plan, entry);
    let names: Vec<&str> = inputs.iter().map(|(n, _)| n.as_str()).collect();
    let slices: Vec<&[f32]> = inputs.iter().map(|(_, v)| v.as_slice()).collect();
    let mut arena = vec![f32::from_bits(INIT); n];
    arena.extend(std::iter::repeat_n(f32::from_bits(SENT), PAD));
    let mut bufs = vec![vec![Decoded::EMPTY; plan.n_instrs()]; 2];
    let (ba, bb) = bufs.split_at_mut(1);
    let mut spare = [Some(&mut ba[0]), Some(&mut bb[0])].into_iter();
    let mut results = vec![];
    let mut values = vec![];
    {
        let mut s = Session::bind_selective::<tapeplan_core::BuildOps>(&plan, &mut arena).unwrap();
        if way == 3 {
            let d = s.decode_all(spare.next().unwrap().unwrap()).unwrap();
            s = s.with_decoded(d).unwrap();
        }
        for (name, _, v) in &p.params {
            s.load_parameter(name, v).unwrap();
        }
        let mut buf2 = vec![Decoded::EMPTY; plan.n_instrs()];
        let program = match way {
            1 => Some(s.decode(entry, &mut buf2).unwrap()),
            2 => Some(s.decode_with_inputs(entry, &mut buf2, &names).unwrap()),
            _ => None,
        };
        for _round in 0..2 {
            if way != 2 {
                for (name, v) in &inputs {
                    s.set_input(entry, name, v).unwrap();
                }
            }
            let r = match (way, &program) {
                (1, Some(pr)) => s.run_program(pr),
                (2, Some(pr)) => s.run_program_with_inputs(pr, &slices),
                _ => s.run(entry),
            };
            results.push(r);
            let a = s.into_arena();
            assert!(
                a[n..].iter().all(|x| x.to_bits() == SENT),
                "way {way}: a sentinel past the arena was written"
            );
            let mut vals = vec![];
            for b in plan.bindings() {
                let keep = b.entry.is_none()
                    || (b.entry == Some(entry)
                        && matches!(b.kind, BindingKind::Output | BindingKind::Update));
                if keep {
                    let key = format!("{:?} {}", b.kind, b.name);
                    vals.push((key, a[b.offset_elems..b.offset_elems + b.elems].to_vec()));
                }
            }
            values.push(vals);
            s = Session::bind_selective::<tapeplan_core::BuildOps>(&plan, a).unwrap();
            if way == 3 {
                if let Some(Some(b)) = spare.next() {
                    let d = s.decode_all(b).unwrap();
                    s = s.with_decoded(d).unwrap();
                }
            }
        }
    }
    (results, values)
}

fn la_same_class(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

/// Every way of running `p` and its unfused twin agree on results and on every output,
/// update and parameter (NaNs as one class). Also the harness's whole-arena `compare`.
fn la_check(p: &P, what: &str) {
    compare(p, !p.inputs.is_empty());
    let u = la_unfused(p);
    let want = la_run(&u, 1);
    let mut all = vec![("unfused run".to_string(), la_run(&u, 0))];
    for way in 0..4 {
        all.push((format!("fused way {way}"), la_run(p, way)));
    }
    for (label, (r, v)) in &all {
        for round in 0..2 {
            // An error's instruction index may differ between the twins; compare kinds.
            assert_eq!(
                format!("{:?}", r[round])
                    .split('{')
                    .next()
                    .map(str::to_owned),
                format!("{:?}", want.0[round])
                    .split('{')
                    .next()
                    .map(str::to_owned),
                "{what}: {label} result, round {round}: {:?} vs unfused {:?}",
                r[round],
                want.0[round]
            );
            for ((k, got), (k2, w)) in v[round].iter().zip(&want.1[round]) {
                assert_eq!(k, k2);
                assert!(
                    la_same_class(got, w),
                    "{what}: {label}: {k}, round {round}\n got     {:x?}\n unfused {:x?}",
                    raw(got),
                    raw(w)
                );
            }
        }
    }
}

fn la_junk(k: usize, seed: u64) -> Vec<f32> {
    let sp = specials();
    (0..k)
        .map(|i| {
            if i % 3 == 2 {
                floats(seed + i as u64, 1)[0]
            } else {
                sp[(i * 7 + seed as usize) % sp.len()]
            }
        })
        .collect()
}

/// A chain ending exactly at the arena's end (its window falls back to zeros) or `tail`
/// elements short of it, the junk after it in the arena: every register slot, a member
/// writing an arena range a later member reads, in place, div/log/sqrt/pow/exp on the junk's
/// lanes. n = 1..=17; precise and fast; bias as an input or a parameter.
#[test]
fn lane_attack_arena_end() {
    for fast in [false, true] {
        for param_bias in [false, true] {
            for n in 1u32..=17 {
                for tail in [0u32, 1, 2, 7, 16] {
                    let a4 = n.div_ceil(4) * 4;
                    let mut p = P::persistent(if param_bias { a4 } else { 0 });
                    if fast {
                        p.b.flags |= FLAG_MATH_FAST;
                    }
                    let d = [1, n];
                    let nn = n as usize;
                    let bias = if param_bias {
                        let v = xs(nn, 5 + n as u64);
                        p.param(0, &[n], v)
                    } else {
                        let t = p.b.tensor(p.next, &[n], TensorKind::Scratch);
                        p.next += a4;
                        p.inputs.push(("bias".into(), t, xs(nn, 5 + n as u64)));
                        t
                    };
                    // x and y packed, no gaps.
                    let x = p.b.tensor(p.next, &d, TensorKind::Scratch);
                    p.inputs.push(("x".into(), x, xs(nn, 11 + n as u64)));
                    let y = p.b.tensor(p.next + a4, &d, TensorKind::Scratch);
                    p.inputs.push((
                        "y".into(),
                        y,
                        xs(nn, 12 + n as u64).into_iter().rev().collect(),
                    ));
                    let mid = p.next + 2 * a4;
                    let end = mid + n;
                    let arena = end + tail;
                    if tail > 0 && end.is_multiple_of(4) {
                        let j = p.b.tensor(end, &[tail], TensorKind::Scratch);
                        p.inputs
                            .push(("junk".into(), j, la_junk(tail as usize, n as u64)));
                    }
                    // Chain 1: broadcast first, every slot, write `out` then read it back,
                    // in place over `out` and over x.
                    let r0 = reg_op(&mut p, Broadcast, 0, &d, &[bias], 0);
                    let r1 = reg_op(&mut p, Div, 1, &d, &[x, r0], 0);
                    let out = p.b.tensor(mid, &d, TensorKind::Scratch);
                    p.b.instr(Add, out, &[r1, y], 0);
                    p.fuse_last();
                    let r2 = reg_op(&mut p, Log, 2, &d, &[out], 0);
                    let r3 = reg_op(&mut p, Mul, 3, &d, &[r2, out], 0);
                    let out2 = p.b.tensor(mid, &d, TensorKind::Scratch);
                    p.b.instr(Sqrt, out2, &[out], 0);
                    p.fuse_last();
                    let r0b = reg_op(&mut p, Pow, 0, &d, &[r3], 0.5f32.to_bits());
                    let r1b = reg_op(&mut p, Maximum, 1, &d, &[r0b, out2], 0);
                    let r2b = reg_op(&mut p, Exp, 2, &d, &[r1b], 0);
                    let x2 = p.b.tensor(mid - 2 * a4, &d, TensorKind::Scratch);
                    p.b.instr(Sub, x2, &[r2b, x], 0);
                    // End of chain 1 (no FUSE_NEXT). Chain 2: fill, in place at the end.
                    let f = reg_op(&mut p, Fill, 3, &d, &[], (-0.0f32).to_bits());
                    let q = reg_op(&mut p, Div, 0, &d, &[out2, f], 0);
                    let out3 = p.b.tensor(mid, &d, TensorKind::Scratch);
                    p.b.instr(Minimum, out3, &[q, x2], 0);
                    p.next = arena;
                    p.b.arena_elems = arena;
                    p.finish(&[out3, x2]);
                    p.b.arena_elems = arena;
                    let bytes = p.b.build();
                    if let Err(e) = Plan::parse(&bytes) {
                        panic!("n {n} tail {tail}: refused: {e}");
                    }
                    la_check(
                        &p,
                        &format!("arena_end fast {fast} param {param_bias} n {n} tail {tail}"),
                    );
                }
            }
        }
    }
}

/// Every op (erf too, which is not a lane op) on every special value in chains over 15, 16
/// and 17 elements, with specials in the arena right after each chain's ranges; fused vs
/// unfused vs every way of running.
#[test]
fn lane_attack_15_16_17() {
    for fast in [false, true] {
        for n in [2u32, 7, 9, 15, 16, 17] {
            for (k, &c) in specials().iter().enumerate() {
                let mut p = P::new();
                if fast {
                    p.b.flags |= FLAG_MATH_FAST;
                }
                let d = [1, n];
                let nn = n as usize;
                // x, then junk right after it.
                let x = p.b.tensor(0, &d, TensorKind::Scratch);
                p.inputs.push(("x".into(), x, xs(nn, 31 + k as u64)));
                let a4 = n.div_ceil(4) * 4;
                let j = p.b.tensor(a4, &[16], TensorKind::Scratch);
                p.inputs.push(("j".into(), j, la_junk(16, k as u64)));
                p.next = a4 + 16;
                let mut outs = vec![];
                for &op in BINARY.iter() {
                    let f = reg_op(&mut p, Fill, 0, &d, &[], c.to_bits());
                    let r = reg_op(&mut p, op, 1, &d, &[f, x], 0);
                    let s = reg_op(&mut p, op, 2, &d, &[x, r], 0);
                    let t = reg_op(&mut p, op, 3, &d, &[s, s], 0);
                    outs.push(p.op(op, &d, &[t, f], 0));
                }
                for &op in UNARY.iter() {
                    let f = reg_op(&mut p, Fill, 3, &d, &[], c.to_bits());
                    let t = reg_op(&mut p, op, 2, &d, &[f], 0);
                    let u = reg_op(&mut p, op, 1, &d, &[x], 0);
                    let v = reg_op(&mut p, Div, 0, &d, &[t, u], 0);
                    outs.push(p.op(op, &d, &[v], 0));
                }
                for e in [
                    2.0f32,
                    0.5,
                    -1.0,
                    3.0,
                    -0.5,
                    f32::NAN,
                    -0.0,
                    f32::NEG_INFINITY,
                    1e-45,
                ] {
                    let f = reg_op(&mut p, Fill, 2, &d, &[], c.to_bits());
                    let t = reg_op(&mut p, Pow, 1, &d, &[f], e.to_bits());
                    let u = reg_op(&mut p, Pow, 0, &d, &[x], e.to_bits());
                    outs.push(p.op(Add, &d, &[t, u], 0));
                }
                p.finish(&outs);
                la_check(
                    &p,
                    &format!("15_16_17 fast {fast} n {n} c {:#x}", c.to_bits()),
                );
            }
        }
    }
}

/// A guarded entry (its update in scratch) whose update comes out of a lane chain: non-finite
/// in some runs (NonFinite, nothing committed), finite in others; parameter read by the chain.
#[test]
fn lane_attack_guarded() {
    for fast in [false, true] {
        for n in [1u32, 5, 8, 15, 16, 17] {
            for (k, &c) in specials().iter().enumerate() {
                let mut p = P::persistent(n.div_ceil(4) * 4);
                if fast {
                    p.b.flags |= FLAG_MATH_FAST;
                }
                let d = [n];
                let nn = n as usize;
                let w = p.param(0, &d, xs(nn, 3).iter().map(|v| v.abs().min(1.0)).collect());
                let mut g = vec![0.25f32; nn];
                g[k % nn] = c;
                let gt = p.input(&d, g);
                let f = reg_op(&mut p, Fill, 0, &d, &[], 0.5f32.to_bits());
                let m = reg_op(&mut p, Mul, 1, &d, &[gt, f], 0);
                let l = reg_op(&mut p, Log, 2, &d, &[w], 0);
                let s = reg_op(&mut p, Add, 3, &d, &[l, m], 0);
                let e = reg_op(&mut p, Exp, 0, &d, &[s], 0);
                let u = p.fresh(&d);
                p.b.instr(Sub, u, &[w, e], 0);
                let ent = p.finish(&[]);
                p.b.bind("p0", BindingKind::Update, ent, u);
                if Plan::parse(&p.b.build()).is_err() {
                    panic!("refused");
                }
                la_check(
                    &p,
                    &format!("guarded fast {fast} n {n} c {:#x}", c.to_bits()),
                );
            }
        }
    }
}

/// Random lane chains (and neighbours): 1..=17 elements over packed slots of the chain's
/// length (the last at the arena's end or a few elements short), members fill / broadcast of an
/// input or parameter / unary (erf and pow too) / binary, outputs in any register slot or arena
/// slot (in place, over inputs, read back later in the chain), two chains per entry with an
/// unfused op between; both math profiles. Checked: every way of running and the unfused twin.
fn la_fuzz(seed0: u64, tries: usize) -> usize {
    let sp = specials();
    let unary = [
        Neg, Abs, Relu, Heaviside, Sign, Detach, Sqrt, Tanh, Exp, Log, Sigmoid, Softplus, Erf, Pow,
    ];
    let mut accepted = 0;
    for seed in seed0..seed0 + tries as u64 {
        let mut r = Rng::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let n = 1 + r.below(17) as u32;
        let nn = n as usize;
        let fast = r.below(2) == 0;
        let param_bias = r.below(2) == 0;
        const SLOTS: u32 = 6;
        let a4 = n.div_ceil(4) * 4;
        let mut p = P::persistent(if param_bias { a4 } else { 0 });
        if fast {
            p.b.flags |= FLAG_MATH_FAST;
        }
        let d = [1, n];
        let base = p.next;
        let bias = if param_bias {
            p.param(0, &[n], xs(nn, seed))
        } else {
            let t = p.b.tensor(base + SLOTS * a4, &[n], TensorKind::Scratch);
            p.inputs.push(("bias".into(), t, xs(nn, seed)));
            t
        };
        let slot_off = |j: u32| base + j * a4;
        // latest tensor per arena slot; slots 0 and 1 inputs.
        let mut slot_t: Vec<Option<u32>> = vec![None; SLOTS as usize];
        for j in 0..2 {
            let t = p.b.tensor(slot_off(j), &d, TensorKind::Scratch);
            let mut v = xs(nn, seed + 7 + j as u64);
            if j == 1 {
                v.reverse();
            }
            p.inputs.push((format!("in{j}"), t, v));
            slot_t[j as usize] = Some(t);
        }
        let tail = [0u32, 0, 1, 3, 16][r.below(5)];
        // The last slot (or the bias) ends `tail` elements before the arena's end.
        let arena = if param_bias {
            slot_off(SLOTS - 1) + n + tail
        } else {
            slot_off(SLOTS) + n + tail
        };
        if tail > 0 && (arena - tail).is_multiple_of(4) {
            let t = p.b.tensor(arena - tail, &[tail], TensorKind::Scratch);
            p.inputs
                .push(("junk".into(), t, la_junk(tail as usize, seed)));
        }
        let n_chains = 1 + r.below(2);
        for ch in 0..n_chains {
            let mut regs: [Option<u32>; 4] = [None; 4];
            let span = if r.below(3) == 0 { 15 } else { 6 };
            let m = 2 + r.below(span);
            for k in 0..m {
                let last = k + 1 == m;
                // A value: a held register or a defined arena slot.
                let pick = |r: &mut Rng, regs: &[Option<u32>; 4], slot_t: &Vec<Option<u32>>| {
                    let mut c: Vec<u32> = regs.iter().flatten().copied().collect();
                    c.extend(slot_t.iter().flatten().copied());
                    c[r.below(c.len())]
                };
                let kind = r.below(10);
                let (op, args, attr): (Opcode, Vec<u32>, u32) = match kind {
                    0 => (Fill, vec![], sp[r.below(sp.len())].to_bits()),
                    1 => (Broadcast, vec![bias], 0),
                    2..=5 => {
                        let op = unary[r.below(unary.len())];
                        let e = [2.0f32, 0.5, -1.0, 3.0, -0.0, f32::NAN, 1.5][r.below(7)];
                        let a = pick(&mut r, &regs, &slot_t);
                        (op, vec![a], if op == Pow { e.to_bits() } else { 0 })
                    }
                    _ => {
                        let op = BINARY[r.below(BINARY.len())];
                        let a = pick(&mut r, &regs, &slot_t);
                        let b = pick(&mut r, &regs, &slot_t);
                        (op, vec![a, b], 0)
                    }
                };
                let to_reg = !last && r.below(3) != 0;
                let t = if to_reg {
                    let s = r.below(4) as u32;
                    let t = p.b.tensor(s, &d, TensorKind::Register);
                    regs[s as usize] = Some(t);
                    t
                } else {
                    let j = r.below(SLOTS as usize) as u32;
                    let t = p.b.tensor(slot_off(j), &d, TensorKind::Scratch);
                    slot_t[j as usize] = Some(t);
                    t
                };
                p.b.instr(op, t, &args, attr);
                if !last {
                    p.fuse_last();
                }
            }
            if ch + 1 < n_chains && r.below(2) == 0 {
                // An unfused op between the chains.
                let a = pick_slot(&mut r, &slot_t);
                let j = r.below(SLOTS as usize) as u32;
                let t = p.b.tensor(slot_off(j), &d, TensorKind::Scratch);
                p.b.instr([Neg, Exp, Detach][r.below(3)], t, &[a], 0);
                slot_t[j as usize] = Some(t);
            }
        }
        let outs: Vec<u32> = slot_t
            .iter()
            .enumerate()
            .filter(|(j, _)| *j >= 2)
            .filter_map(|(_, t)| *t)
            .collect();
        p.next = arena;
        p.b.arena_elems = arena;
        p.finish(&outs);
        p.b.arena_elems = arena;
        if Plan::parse(&p.b.build()).is_err() {
            continue;
        }
        accepted += 1;
        la_check(&p, &format!("fuzz seed {seed}"));
    }
    accepted
}

fn pick_slot(r: &mut Rng, slot_t: &[Option<u32>]) -> u32 {
    let c: Vec<u32> = slot_t.iter().flatten().copied().collect();
    c[r.below(c.len())]
}

#[test]
fn lane_attack_fuzz() {
    let tries = std::env::var("LA_TRIES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3_000);
    let acc = la_fuzz(1, tries);
    eprintln!("lane fuzz: {acc} of {tries} plans accepted");
    assert!(acc > tries / 10, "{acc} accepted");
}

/// Two entries over one chain's records: `main` runs the whole chain, `tail` starts at its
/// second member (a chain of its own there, reading an input `main` writes): `decode_all` marks
/// the plan once; each entry through run / run_program / with_inputs / decode_all + run.
#[test]
fn lane_attack_entry_mid_chain() {
    for n in [1u32, 5, 15, 16, 17] {
        for fast in [false, true] {
            let mut p = P::new();
            if fast {
                p.b.flags |= FLAG_MATH_FAST;
            }
            let d = [1, n];
            let x = p.input(&d, xs(n as usize, 3));
            let a = p.fresh(&d);
            p.b.instr(Neg, a, &[x], 0);
            p.fuse_last();
            let r = reg_op(&mut p, Exp, 0, &d, &[x], 0);
            let l = reg_op(&mut p, Log, 1, &d, &[a], 0);
            let out = p.op(Add, &d, &[r, l], 0);
            p.finish(&[out]);
            let t = p.b.entry("tail", 1, 3);
            p.b.bind("in0", BindingKind::Input, t, x);
            p.b.bind("a", BindingKind::Input, t, a);
            p.b.bind("tout", BindingKind::Output, t, out);
            let bytes = p.b.build();
            if let Err(e) = Plan::parse(&bytes) {
                eprintln!("n {n}: refused: {e}");
                continue;
            }
            p.inputs.push(("a".into(), a, xs(n as usize, 9)));
            for name in ["main", "tail"] {
                compare_o::<tapeplan_core::BuildOps>(&p, name, true, |b| Plan::parse(b).unwrap());
                // decode_all + with_decoded + run against decode + run_program.
                let plan = Plan::parse(&bytes).unwrap();
                let e = plan.entry(name).unwrap();
                let mut outs = vec![];
                for way in 0..2 {
                    let mut arena = vec![f32::from_bits(INIT); plan.arena_elems() + PAD];
                    let mut buf = vec![Decoded::EMPTY; plan.n_instrs()];
                    let mut buf2 = vec![Decoded::EMPTY; plan.n_instrs()];
                    let mut s =
                        Session::bind_selective::<tapeplan_core::BuildOps>(&plan, &mut arena)
                            .unwrap();
                    for (iname, _, v) in &p.inputs {
                        if plan.inputs(e).any(|b| b.name == iname) {
                            s.set_input(e, iname, v).unwrap();
                        }
                    }
                    let res = if way == 0 {
                        let pr = s.decode(e, &mut buf2).unwrap();
                        s.run_program(&pr)
                    } else {
                        let dp = s.decode_all(&mut buf).unwrap();
                        let mut s = s.with_decoded(dp).unwrap();
                        s.run(e)
                    };
                    outs.push((format!("{res:?}"), raw(&arena)));
                }
                assert_eq!(outs[0].0, outs[1].0, "n {n} {name}: results");
                assert!(
                    la_same_class(
                        &outs[0]
                            .1
                            .iter()
                            .map(|&b| f32::from_bits(b))
                            .collect::<Vec<_>>(),
                        &outs[1]
                            .1
                            .iter()
                            .map(|&b| f32::from_bits(b))
                            .collect::<Vec<_>>()
                    ),
                    "n {n} {name}: arenas differ"
                );
            }
        }
    }
}
