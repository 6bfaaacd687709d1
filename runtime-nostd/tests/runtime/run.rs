//! Running validated plans: the bits are the reference kernels', the API's errors are values.

use crate::common;

use std::collections::HashMap;

use common::*;
use tapeplan_core::format::{BindingKind, TensorKind};
use tapeplan_core::{MathProfile, Opcode};
use tapeplan_runtime::{ExecError, Plan, Session};

#[test]
fn mlp_matches_reference_bits() {
    use mlp::*;
    let builder = mlp_builder();
    let bytes = builder.build();
    let plan = Plan::parse(&bytes).unwrap();
    assert_eq!(plan.arena_elems(), 72);
    assert_eq!(plan.persistent_elems(), 16);
    assert_eq!(plan.plan_id(), 0x5eed_0001);
    let fwd = plan.entry("forward").unwrap();
    let train = plan.entry("train_step").unwrap();
    assert_eq!(plan.entry_name(train), Some("train_step"));
    assert_eq!(plan.entry("nope"), None);

    let w = floats(1, 12);
    let b = floats(2, 4);
    let mut arena = vec![f32::NAN; plan.arena_elems()];
    let mut s = Session::bind(&plan, &mut arena).unwrap();
    s.load_parameter("w", &w).unwrap();
    s.load_parameter("b", &b).unwrap();

    let mut w_ref = w.clone();
    for step in 0..3u64 {
        let x = floats(10 + step, 6);
        // forward
        s.set_input(fwd, "x", &x).unwrap();
        s.run(fwd).unwrap();
        let mut vals = HashMap::from([(W, w_ref.clone()), (B, b.clone()), (X, x.clone())]);
        reference(&builder, 0, 4, &mut vals);
        assert_eq!(bits(s.output(fwd, "y").unwrap()), bits(&vals[&Y]));
        // train_step
        s.set_input(train, "x", &x).unwrap();
        s.run(train).unwrap();
        let mut vals = HashMap::from([(W, w_ref.clone()), (B, b.clone()), (X, x.clone())]);
        reference(&builder, 0, 7, &mut vals);
        assert_eq!(bits(s.output(train, "y").unwrap()), bits(&vals[&Y]));
        w_ref = vals[&W_NEW].clone();
        assert_eq!(bits(s.parameter("w").unwrap()), bits(&w_ref));
        assert_eq!(bits(s.parameter("b").unwrap()), bits(&b));
        // The update really is w - 0.125 * w, elementwise, with the kernels' rounding.
        assert_eq!(&s.persistent()[..12], &w_ref[..]);
    }
    assert_eq!(s.persistent().len(), 16);
}

#[test]
fn plan_lookups() {
    let bytes = mlp_plan();
    let plan = Plan::parse(&bytes).unwrap();
    let train = plan.entry("train_step").unwrap();
    let params: Vec<_> = plan.parameters().map(|p| (p.name, p.range())).collect();
    assert_eq!(params, [("w", 0..12), ("b", 12..16)]);
    let w = plan.parameter("w").unwrap();
    assert_eq!(w.shape.dims()[..2], [3, 4]);
    assert_eq!(w.kind, BindingKind::Parameter);
    assert_eq!(w.entry, None);
    let ins: Vec<_> = plan
        .inputs(train)
        .map(|b| (b.name, b.shape.rank(), b.elems))
        .collect();
    assert_eq!(ins, [("x", 2, 6)]);
    let outs: Vec<_> = plan.outputs(train).map(|b| b.name).collect();
    assert_eq!(outs, ["y"]);
    let ups: Vec<_> = plan.updates(train).map(|b| (b.name, b.range())).collect();
    assert_eq!(ups, [("w", 0..12)]);
    assert_eq!(plan.entry_instrs(train), Some(7));
    assert_eq!(plan.entries().count(), 2);
    assert_eq!(plan.bindings().count(), 7);
}

#[test]
fn api_errors_are_values() {
    let bytes = mlp_plan();
    let plan = Plan::parse(&bytes).unwrap();
    let fwd = plan.entry("forward").unwrap();
    // One element short.
    let mut small = vec![0.0; 71];
    assert_eq!(
        Session::bind(&plan, &mut small).unwrap_err(),
        ExecError::ArenaTooSmall {
            needed_elems: 72,
            found_elems: 71
        }
    );
    let mut arena = vec![0.0; 80];
    let mut s = Session::bind(&plan, &mut arena).unwrap();
    assert_eq!(
        s.load_parameter("w", &[0.0; 11]),
        Err(ExecError::LengthMismatch {
            expected_elems: 12,
            found_elems: 11
        })
    );
    assert_eq!(
        s.load_parameter("v", &[0.0; 12]),
        Err(ExecError::UnknownName {
            kind: BindingKind::Parameter
        })
    );
    assert_eq!(
        s.set_input(fwd, "y", &[0.0; 6]),
        Err(ExecError::UnknownName {
            kind: BindingKind::Input
        })
    );
    assert_eq!(
        s.output(fwd, "x").unwrap_err(),
        ExecError::UnknownName {
            kind: BindingKind::Output
        }
    );
    // An entry of another plan with more entries.
    let mut b = mlp_builder();
    b.entry("third", 1, 1); // broadcast(b): reads a parameter only
    let other_bytes = b.build();
    let other = Plan::parse(&other_bytes).unwrap();
    let third = other.entry("third").unwrap();
    assert_eq!(s.run(third), Err(ExecError::UnknownEntry { entry: 2 }));
    assert_eq!(plan.entry_name(third), None);
    // Displays are lowercase sentences.
    let msg = ExecError::ArenaTooSmall {
        needed_elems: 72,
        found_elems: 71,
    }
    .to_string();
    assert!(msg.starts_with("arena of 71"), "{msg}");
    // Elements past arena_elems are never touched.
    s.run(fwd).unwrap();
    let arena = s.into_arena();
    assert!(arena[72..].iter().all(|&x| x == 0.0));
}

#[test]
fn bind_keeps_and_bind_zeroed_clears() {
    let bytes = mlp_plan();
    let plan = Plan::parse(&bytes).unwrap();
    let mut arena = vec![0.0; 72];
    {
        let mut s = Session::bind(&plan, &mut arena).unwrap();
        s.load_parameter("b", &[1.0, 2.0, 3.0, 4.0]).unwrap();
    }
    {
        let s = Session::bind(&plan, &mut arena).unwrap();
        assert_eq!(s.parameter("b").unwrap(), [1.0, 2.0, 3.0, 4.0]);
        assert_eq!(s.plan().plan_id(), plan.plan_id());
    }
    arena[71] = 9.0;
    let s = Session::bind_zeroed(&plan, &mut arena).unwrap();
    assert_eq!(s.parameter("b").unwrap(), [0.0; 4]);
    assert!(s.into_arena().iter().all(|&x| x == 0.0));
}

#[test]
fn persistent_round_trip_restores_state() {
    let bytes = mlp_plan();
    let plan = Plan::parse(&bytes).unwrap();
    let train = plan.entry("train_step").unwrap();
    let mut arena = vec![0.0; 72];
    let mut s = Session::bind(&plan, &mut arena).unwrap();
    s.persistent_mut().copy_from_slice(&floats(3, 16));
    let saved = s.persistent().to_vec();
    let x = floats(4, 6);
    s.set_input(train, "x", &x).unwrap();
    s.run(train).unwrap();
    let after_one = s.persistent().to_vec();
    s.persistent_mut().copy_from_slice(&saved);
    s.input_mut(train, "x").unwrap().copy_from_slice(&x);
    s.run(train).unwrap();
    assert_eq!(bits(s.persistent()), bits(&after_one));
    s.parameter_mut("b").unwrap()[0] = 7.0;
    assert_eq!(s.parameter("b").unwrap()[0], 7.0);
}

/// Builds a straight-line program where every tensor has its own fresh range (or, when asked,
/// the range of an argument that dies there), marks every defined tensor an output, runs it,
/// and compares every output with the reference interpreter.
struct Prog {
    b: Builder,
    next: u32,
    inputs: Vec<(u32, Vec<f32>)>,
}

impl Prog {
    fn new() -> Prog {
        Prog {
            b: Builder::new(0, 0),
            next: 0,
            inputs: vec![],
        }
    }

    fn fresh(&mut self, dims: &[u32]) -> u32 {
        let at = self.next;
        self.next += elems(dims).div_ceil(4) * 4;
        self.b.tensor(at, dims, TensorKind::Scratch)
    }

    fn input(&mut self, dims: &[u32], values: Vec<f32>) -> u32 {
        let t = self.fresh(dims);
        self.inputs.push((t, values));
        t
    }

    fn op(&mut self, op: Opcode, dims: &[u32], args: &[u32], attr: u32) -> u32 {
        let t = self.fresh(dims);
        self.b.instr(op, t, args, attr);
        t
    }

    /// `op` written over the range of `over`, which must die here.
    fn op_over(&mut self, op: Opcode, over: u32, args: &[u32]) -> u32 {
        let r = self.b.tensors[over as usize];
        let t = self.b.tensors.len() as u32;
        self.b.tensors.push(r);
        self.b.instr(op, t, args, 0);
        t
    }

    /// Answers the outputs' bits.
    fn check(self, outputs: &[u32]) -> Vec<Vec<u32>> {
        self.check_decoded(outputs).0
    }

    /// Runs the program through `Session::run` and, decoded once (`Session::decode`, stand-ins
    /// and all), through `Session::run_program`, each in an arena of NaNs, and checks both
    /// against the reference interpreter; answers the outputs' bits and the decoded program's
    /// length.
    fn check_decoded(mut self, outputs: &[u32]) -> (Vec<Vec<u32>>, usize) {
        self.b.arena_elems = self.next;
        let n = self.b.instrs.len() as u32;
        let e = self.b.entry("main", 0, n);
        for (i, &(t, _)) in self.inputs.iter().enumerate() {
            self.b.bind(&format!("in{i}"), BindingKind::Input, e, t);
        }
        for &t in outputs {
            self.b.bind(&format!("t{t}"), BindingKind::Output, e, t);
        }
        let bytes = self.b.build();
        let plan = Plan::parse(&bytes).unwrap_or_else(|err| panic!("{err}"));
        let entry = plan.entry("main").unwrap();
        let mut arena = vec![f32::NAN; plan.arena_elems()];
        let mut s = Session::bind(&plan, &mut arena).unwrap();
        let mut vals = HashMap::new();
        for (i, (t, v)) in self.inputs.iter().enumerate() {
            s.set_input(entry, &format!("in{i}"), v).unwrap();
            vals.insert(*t, v.clone());
        }
        s.run(entry).unwrap();
        assert_eq!(plan.math(), MathProfile::from_flags(self.b.flags));
        reference(&self.b, 0, n as usize, &mut vals);
        for &t in outputs {
            assert_eq!(
                bits(s.output(entry, &format!("t{t}")).unwrap()),
                bits(&vals[&t]),
                "tensor {t}"
            );
        }
        let results: Vec<Vec<u32>> = outputs
            .iter()
            .map(|t| bits(s.output(entry, &format!("t{t}")).unwrap()))
            .collect();
        let mut arena = vec![f32::NAN; plan.arena_elems()];
        let mut buf = vec![tapeplan_runtime::Decoded::EMPTY; n as usize];
        let mut s = Session::bind(&plan, &mut arena).unwrap();
        for (i, (_, v)) in self.inputs.iter().enumerate() {
            s.set_input(entry, &format!("in{i}"), v).unwrap();
        }
        let program = s.decode(entry, &mut buf).unwrap();
        s.run_program(&program).unwrap();
        for &t in outputs {
            assert_eq!(
                bits(s.output(entry, &format!("t{t}")).unwrap()),
                bits(&vals[&t]),
                "tensor {t}, decoded program"
            );
        }
        (results, program.len())
    }
}

/// Issue 15: what the stand-ins rely on besides their own checks (`program::stand_ins`): a
/// fill's range read after it through another tensor record written before it (so that `run`
/// would read the fill's values there) is a plan the validator refuses (`Overlap`: two records
/// over one range, both live), as it refuses a record read before it is written
/// (`UseBeforeDefinition`). Without that read the fill is left out and the bits are `run`'s.
#[test]
fn a_fill_read_through_another_record_is_refused() {
    use tapeplan_runtime::{Decoded, ParseError, ValidateError};
    use Opcode::*;
    // `g = -x` (range 4..8), then the fill `f` over the same range, `y = x + f`, and (with
    // `alias`) `z = x · g`.
    for alias in [false, true] {
        let mut b = Builder::new(16, 0);
        let x = b.tensor(0, &[4], TensorKind::Scratch);
        let g = b.tensor(4, &[4], TensorKind::Scratch);
        let f = b.tensor(4, &[4], TensorKind::Scratch);
        let y = b.tensor(8, &[4], TensorKind::Scratch);
        let z = b.tensor(12, &[4], TensorKind::Scratch);
        b.instr(Neg, g, &[x], 0);
        b.instr(Fill, f, &[], 2.5f32.to_bits());
        b.instr(Add, y, &[x, f], 0);
        if alias {
            b.instr(Mul, z, &[x, g], 0);
        }
        let n = b.instrs.len();
        let main = b.entry("main", 0, n as u32);
        b.bind("x", BindingKind::Input, main, x);
        b.bind("y", BindingKind::Output, main, y);
        let bytes = b.build();
        if alias {
            assert!(matches!(
                Plan::parse(&bytes),
                Err(ParseError::Validate(ValidateError::Overlap { .. }))
            ));
            continue;
        }
        let plan = Plan::parse(&bytes).unwrap();
        let main = plan.entry("main").unwrap();
        let x = [1.0f32, -2.0, 0.5, 3.0];
        let mut results = Vec::new();
        for decoded in [false, true] {
            let mut arena = vec![f32::NAN; plan.arena_elems()];
            let mut buf = vec![Decoded::EMPTY; n];
            let mut s = Session::bind(&plan, &mut arena).unwrap();
            s.set_input(main, "x", &x).unwrap();
            if decoded {
                let program = s.decode(main, &mut buf).unwrap();
                let left_out = usize::from(cfg!(feature = "catalog"));
                assert_eq!(program.len(), n - left_out);
                s.run_program(&program).unwrap();
            } else {
                s.run(main).unwrap();
            }
            results.push(bits(s.output(main, "y").unwrap()));
        }
        assert_eq!(results[0], results[1]);
        assert_eq!(results[1], bits(&[3.5, 0.5, 3.0, 5.5]));
    }
}

/// Issue 15: a decoded program runs no `fill`, nor `broadcast` that only reshapes, whose
/// readers are all elementwise instructions the catalog runs: they read the fill's value as a
/// constant and the broadcast's source in place (`program::stand_ins`). The bits stay the
/// reference's for special values in either operand, over the fill's own range, and where a
/// source is overwritten before a reader (that broadcast must run). Without the catalog
/// nothing is removed.
#[test]
fn stand_ins_keep_the_bits() {
    use Opcode::*;
    let specials = [
        -0.0f32,
        0.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1e-40,
        -3.5,
        f32::MAX,
    ];
    let mut p = Prog::new();
    let mut xs = floats(51, 14);
    xs.extend_from_slice(&[0.0, -0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e-40]);
    let x = p.input(&[1, 20], xs);
    let bias = p.input(&[20], floats(52, 20));
    let mut outs = vec![];
    let mut removed = 0;
    for (k, &c) in specials.iter().enumerate() {
        // A fill read by a binary op on either side, by a unary op, twice by one op, and
        // written over by its reader.
        let f = p.op(Fill, &[1, 20], &[], c.to_bits());
        let op = [Mul, Add, Sub, Div][k % 4];
        outs.push(p.op(op, &[1, 20], &[x, f], 0));
        outs.push(p.op(op, &[1, 20], &[f, x], 0));
        // (No `sqrt`: Miri runs this test, and libm's `sqrtf` is inline assembly there.)
        outs.push(p.op([Tanh, Exp, Abs, Neg][k % 4], &[1, 20], &[f], 0));
        outs.push(p.op(Mul, &[1, 20], &[f, f], 0));
        outs.push(p.op_over(Sub, f, &[x, f]));
        removed += 1;
    }
    // A bias `[20]` broadcast to `[1, 20]`, read by two instructions.
    let row = p.op(Broadcast, &[1, 20], &[bias], 0);
    outs.push(p.op(Add, &[1, 20], &[x, row], 0));
    outs.push(p.op(Maximum, &[1, 20], &[row, x], 0));
    removed += 1;
    // A fill read by a product: it must run.
    let ones = p.op(Fill, &[20, 2], &[], 1.0f32.to_bits());
    outs.push(p.op(MatMul, &[1, 2], &[x, ones], 0));
    // A broadcast whose source is written over before its reader reads the copy: it must run
    // (the reader would see the new values).
    let src = p.op(Neg, &[20], &[bias], 0);
    let copy = p.op(Broadcast, &[1, 20], &[src], 0);
    let _ = p.op_over(Exp, src, &[src]);
    outs.push(p.op(Add, &[1, 20], &[copy, x], 0));
    // A fill read by an output binding's tensor directly: it must run.
    outs.push(p.op(Fill, &[1, 3], &[], 2.5f32.to_bits()));
    let n = p.b.instrs.len();
    let (_, len) = p.check_decoded(&outs);
    if cfg!(feature = "catalog") {
        assert_eq!(
            len,
            n - removed,
            "{removed} instructions should have stand-ins"
        );
    } else {
        assert_eq!(len, n);
    }
}

#[test]
fn every_opcode_matches_reference_bits() {
    use Opcode::*;
    let mut p = Prog::new();
    let a = p.input(&[3, 5], floats(21, 15));
    let b = p.input(&[3, 5], floats(22, 15));
    let m = p.input(&[5, 2], floats(23, 10));
    let labels = p.input(&[4], vec![2.0, 0.0, 7.0, f32::NAN]);
    let mut outs = vec![];
    for op in [Add, Sub, Mul, Div, Equal] {
        outs.push(p.op(op, &[3, 5], &[a, b], 0));
    }
    for op in [Neg, Tanh, Relu, Heaviside, Exp, Log, Detach] {
        outs.push(p.op(op, &[3, 5], &[a], 0));
    }
    outs.push(p.op(MatMul, &[3, 2], &[a, m], 0));
    outs.push(p.op(Transpose, &[5, 3], &[a], 0));
    outs.push(p.op(Reshape, &[15], &[a], 0));
    outs.push(p.op(SumTo, &[5], &[a], 0));
    outs.push(p.op(SumTo, &[3, 1], &[a], 0));
    outs.push(p.op(SumTo, &[], &[a], 0));
    outs.push(p.op(MaxTo, &[1, 5], &[a], 0));
    let row = p.op(SumTo, &[5], &[b], 0);
    outs.push(p.op(Broadcast, &[2, 3, 5], &[row], 0));
    outs.push(p.op(OneHot, &[4, 3], &[labels], 0));
    outs.push(p.op(Fill, &[2, 2], &[], (-0.0f32).to_bits()));
    outs.push(p.op(Fill, &[], &[], 1.5f32.to_bits()));
    outs.push(p.op(Fill, &[0, 3], &[], 1.5f32.to_bits()));
    p.check(&outs);
}

/// The transcendentals under each math profile, out of place and in place: the runtime (its
/// catalog, and the reference path for the in-place ones) gives the reference kernels' bits
/// for the plan's profile, and the two profiles differ.
#[test]
fn math_profiles_reach_every_transcendental() {
    use Opcode::*;
    let outputs = |fast: bool| {
        let mut p = Prog::new();
        p.b.flags = u32::from(fast);
        let a = p.input(&[4, 8], floats(41, 32));
        let pos = p.op(Abs, &[4, 8], &[a], 0);
        let mut outs = vec![];
        for op in [Tanh, Exp, Sigmoid, Softplus] {
            outs.push(p.op(op, &[4, 8], &[a], 0));
        }
        outs.push(p.op(Log, &[4, 8], &[pos], 0));
        outs.push(p.op(Pow, &[4, 8], &[pos], 1.5f32.to_bits()));
        outs.push(p.op(Pow, &[4, 8], &[a], 3.0f32.to_bits()));
        let c = p.op(Add, &[4, 8], &[a, a], 0);
        // In place: the catalog's `Src::Out` path, or without `catalog` the reference path.
        let d = p.op_over(Tanh, c, &[c]);
        let e = p.op_over(Exp, d, &[d]);
        let f = p.op_over(Sigmoid, e, &[e]);
        outs.push(f);
        p.check(&outs)
    };
    let (precise, fast) = (outputs(false), outputs(true));
    for (k, (p, f)) in precise.iter().zip(&fast).enumerate() {
        assert_ne!(p, f, "output {k}: the profiles give the same bits");
    }
}

#[test]
fn in_place_variants_match_reference_bits() {
    use Opcode::*;
    let mut p = Prog::new();
    let a = p.input(&[2, 3], floats(31, 6));
    let b = p.input(&[2, 3], floats(32, 6));
    let c = p.op(Add, &[2, 3], &[a, b], 0); // fresh
    let d = p.op_over(Tanh, c, &[c]); // unary in place
    let e = p.op_over(Mul, d, &[d, d]); // both
    let f = p.op_over(Sub, e, &[e, a]); // lhs
    let g = p.op_over(Div, b, &[f, b]); // rhs, over an input that dies here
    let h = p.op(Exp, &[2, 3], &[g], 0);
    p.check(&[f, h]);
}

/// Issue 16, hole 1: a decoded program runs only in a session of the plan it was decoded from,
/// compared by identity (`plan_id`, CRC-32, bytes), not by the address of the bytes. (A program
/// borrows its plan, so the plan's buffer cannot be reloaded under it: the compile-fail example
/// on `Program`.)
#[test]
fn a_program_runs_only_on_its_own_plan() {
    use tapeplan_runtime::Decoded;
    let bytes = mlp_plan();
    // Another plan, same layout and length: the learning rate's `fill` differs.
    let other = with_instr(bytes.clone(), 4, |r| r.attr_word = 0.5f32.to_bits());
    assert_eq!(other.len(), bytes.len());
    let plan = Plan::parse(&bytes).unwrap();
    let other_plan = Plan::parse(&other).unwrap();
    assert_eq!(plan.plan_id(), other_plan.plan_id());
    let train = plan.entry("train_step").unwrap();
    let (w, b, x) = (floats(1, 12), floats(2, 4), floats(3, 6));

    let mut arena = vec![0.0f32; plan.arena_elems()];
    let mut buf = vec![Decoded::EMPTY; plan.entry_instrs(train).unwrap()];
    let program = Session::bind(&plan, &mut arena)
        .unwrap()
        .decode(train, &mut buf)
        .unwrap();
    assert!(std::ptr::eq(program.plan(), &plan));

    // In a session of the other plan: refused, and nothing ran.
    let mut other_arena = vec![0.0f32; other_plan.arena_elems()];
    let mut s = Session::bind(&other_plan, &mut other_arena).unwrap();
    s.load_parameter("w", &w).unwrap();
    s.load_parameter("b", &b).unwrap();
    s.set_input(train, "x", &x).unwrap();
    let before = s.persistent().to_vec();
    let e = s.run_program(&program).unwrap_err();
    assert_eq!(
        e,
        ExecError::ForeignProgram {
            entry: train.index() as u32
        }
    );
    assert!(e.to_string().contains("another plan"), "{e}");
    assert_eq!(bits(s.persistent()), bits(&before));

    // In a session of a copy of the same bytes (another buffer, the same plan): it runs, with
    // `run`'s bits.
    let copy = bytes.clone();
    let copy_plan = Plan::parse(&copy).unwrap();
    let mut results = Vec::new();
    for decoded in [false, true] {
        let mut arena = vec![0.0f32; copy_plan.arena_elems()];
        let mut s = Session::bind(&copy_plan, &mut arena).unwrap();
        s.load_parameter("w", &w).unwrap();
        s.load_parameter("b", &b).unwrap();
        s.set_input(train, "x", &x).unwrap();
        if decoded {
            s.run_program(&program).unwrap();
        } else {
            s.run(train).unwrap();
        }
        results.push(bits(s.persistent()));
    }
    assert_eq!(results[0], results[1]);
    assert_ne!(results[0], bits(&before), "the step changed nothing");
}

#[cfg(feature = "decoded-run")]
/// Issue 15: `Session::run` with the whole plan decoded once and attached
/// (`Session::decode_all`, `Session::with_decoded`) gives `run`'s bits for every entry, and a
/// decoding of another plan (same layout and length, another learning rate) is refused.
#[test]
fn an_attached_decoding_runs_with_runs_bits_and_only_on_its_own_plan() {
    use tapeplan_runtime::Decoded;
    let bytes = mlp_plan();
    let other = with_instr(bytes.clone(), 4, |r| r.attr_word = 0.5f32.to_bits());
    let plan = Plan::parse(&bytes).unwrap();
    let other_plan = Plan::parse(&other).unwrap();
    let (w, b, x) = (floats(1, 12), floats(2, 4), floats(3, 6));
    let names: Vec<&str> = plan
        .entries()
        .map(|e| plan.entry_name(e).unwrap())
        .collect();
    assert!(names.len() >= 2, "{names:?}");

    let mut buf = vec![Decoded::EMPTY; plan.n_instrs()];
    let mut scratch = vec![0.0f32; plan.arena_elems()];
    let decoded = Session::bind(&plan, &mut scratch)
        .unwrap()
        .decode_all(&mut buf)
        .unwrap();
    assert_eq!(decoded.len(), plan.n_instrs());

    // Every entry, three steps each, records against the attached decoding.
    let mut results = Vec::new();
    for attached in [false, true] {
        let mut arena = vec![0.0f32; plan.arena_elems()];
        let mut s = Session::bind(&plan, &mut arena).unwrap();
        if attached {
            s = s.with_decoded(decoded).unwrap();
        }
        s.load_parameter("w", &w).unwrap();
        s.load_parameter("b", &b).unwrap();
        let mut seen = Vec::new();
        for _ in 0..3 {
            for name in &names {
                let e = plan.entry(name).unwrap();
                if plan.input(e, "x").is_some() {
                    s.set_input(e, "x", &x).unwrap();
                }
                s.run(e).unwrap();
                seen.push(bits(s.persistent()));
            }
        }
        results.push(seen);
    }
    assert_eq!(results[0], results[1]);
    assert_ne!(
        results[0][0],
        results[0][results[0].len() - 1],
        "nothing ran"
    );

    // Attached to a session of the other plan: refused.
    let mut other_arena = vec![0.0f32; other_plan.arena_elems()];
    let e = Session::bind(&other_plan, &mut other_arena)
        .unwrap()
        .with_decoded(decoded)
        .unwrap_err();
    assert_eq!(e, ExecError::ForeignDecoding);
    assert!(e.to_string().contains("another plan"), "{e}");

    // A buffer one instruction short: refused, naming both lengths.
    let mut short = vec![Decoded::EMPTY; plan.n_instrs() - 1];
    let e = Session::bind(&plan, &mut scratch)
        .unwrap()
        .decode_all(&mut short)
        .unwrap_err();
    assert_eq!(
        e,
        ExecError::LengthMismatch {
            expected_elems: plan.n_instrs(),
            found_elems: plan.n_instrs() - 1
        }
    );
}
