//! Fusion against the planner and real plans: random tapes (elementwise runs broken by
//! structural instructions, `select`, `uniform`, fills, in-place and guarded updates inside
//! chains) planned fused and unfused must both validate and give the tape's own bits through
//! `Session::run`, `Session::run_program` and the host interpreter; every bit of every flags,
//! kind and offset field of real fused training plans flipped must be rejected or run exactly as
//! the mutated plan's instructions one after another, inside its arena (so must tensors moved into
//! and out of registers, and, ignored by default, every bit of the plan); random MLP jobs train to
//! the same bits fused, unfused and in the oracle, with a fused arena never larger.
#![allow(clippy::indexing_slicing, clippy::unwrap_used, missing_docs)]

use proptest::prelude::*;
use tapeplan_core::format::{
    plan_crc, TensorKind, CRC_OFFSET, FUSE_NEXT, HEADER_BYTES, INSTR_RECORD_BYTES,
    TENSOR_RECORD_BYTES,
};
use tapeplan_core::ops::Attr;
use tapeplan_core::{NodeId, Opcode, Run, Shape, Tape, Tensor};
use tapeplan_planner::exec::Oracle;
use tapeplan_planner::exec::RuntimeModel;
use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::{glorot_uniform, Activation, Loss, Mlp};
use tapeplan_planner::model::{JobOptions, TrainingJob};
use tapeplan_planner::protocol::SplitMix64;
use tapeplan_planner::{plan_with, EntrySpec, FusionPolicy, PlanOptions, Root, Schedule};
use tapeplan_runtime::{Decoded, ExecError, Session};
// Named, so it shadows proptest's prelude trait of that name.
use tapeplan_tests::builder::Builder;
use tapeplan_tests::rng::Rng;
use tapeplan_tests::sequential::run_entry;

const SENTINEL: f32 = 3.0e-39;
const PAD: usize = 29;

/// Bits, every NaN one class (the kernels are the same; this keeps a failure about values).
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter()
        .map(|x| if x.is_nan() { 0x7fc0_0000 } else { x.to_bits() })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Random tapes.

const UNARY: [Opcode; 13] = [
    Opcode::Neg,
    Opcode::Tanh,
    Opcode::Relu,
    Opcode::Heaviside,
    Opcode::Exp,
    Opcode::Log,
    Opcode::Detach,
    Opcode::Sqrt,
    Opcode::Sigmoid,
    Opcode::Softplus,
    Opcode::Abs,
    Opcode::Sign,
    Opcode::Pow,
];
const BINARY: [Opcode; 9] = [
    Opcode::Add,
    Opcode::Sub,
    Opcode::Mul,
    Opcode::Div,
    Opcode::Equal,
    Opcode::Maximum,
    Opcode::Minimum,
    Opcode::Greater,
    Opcode::GreaterEqual,
];

struct Model {
    tape: Tape,
    inputs: Vec<NodeId>,
    params: Vec<NodeId>,
    outputs: Vec<NodeId>,
    updates: Vec<(NodeId, NodeId)>,
}

/// A random tape over `s = [a, b]`, its transpose and `[1, b]`: long elementwise runs (so chains
/// form, with more live values than slots), interrupted now and then by a structural
/// instruction; parameters updated at the end by elementwise chains of their own.
fn random_model(rng: &mut Rng) -> Model {
    let (a, b) = (
        1 + rng.below(4),
        [1usize, 3, 4, 17, 64, 65, 70][rng.below(7)],
    );
    let s = Shape::new(&[a, b]).unwrap();
    let st = Shape::new(&[b, a]).unwrap();
    let row = Shape::new(&[1, b]).unwrap();
    let mut tape = Tape::new();
    let inputs = vec![
        tape.input("x0", s),
        tape.input("x1", s),
        tape.input("x2", row),
    ];
    let params = vec![
        tape.parameter("p0", s),
        tape.parameter("p1", row),
        tape.parameter("p2", s),
    ];
    // Values by shape: 0 = s, 1 = st, 2 = row.
    let mut pools: [Vec<NodeId>; 3] = [
        vec![inputs[0], inputs[1], params[0], params[2]],
        vec![],
        vec![inputs[2], params[1]],
    ];
    let shapes = [s, st, row];
    let pick = |rng: &mut Rng, pool: &Vec<NodeId>| {
        let k = pool.len();
        pool[k - 1 - rng.below(k.min(5))]
    };
    let n = 4 + rng.below(40);
    for _ in 0..n {
        let which = if pools[1].is_empty() || rng.chance(70) {
            0
        } else {
            1 + rng.below(2)
        };
        let shape = shapes[which];
        let roll = rng.below(100);
        let v = if roll < 45 {
            let op = UNARY[rng.below(UNARY.len())];
            let x = pick(rng, &pools[which]);
            let attr = if op == Opcode::Pow {
                Attr::Pow([2.0f32, 0.5, 3.0, -1.0][rng.below(4)])
            } else {
                Attr::NONE
            };
            tape.push(op, attr, &[x]).unwrap()
        } else if roll < 80 {
            let op = BINARY[rng.below(BINARY.len())];
            let (x, y) = (pick(rng, &pools[which]), pick(rng, &pools[which]));
            tape.push(op, Attr::NONE, &[x, y]).unwrap()
        } else if roll < 86 {
            let v = [0.5f32, -0.0, 2.0][rng.below(3)];
            tape.push(Opcode::Fill, Attr::fill(v, shape), &[]).unwrap()
        } else if roll < 89 {
            let (c, x, y) = (
                pick(rng, &pools[which]),
                pick(rng, &pools[which]),
                pick(rng, &pools[which]),
            );
            tape.push(Opcode::Select, Attr::NONE, &[c, x, y]).unwrap()
        } else if roll < 91 {
            let k = tape
                .push(Opcode::Fill, Attr::fill(3.0, Shape::SCALAR), &[])
                .unwrap();
            let c = tape
                .push(Opcode::Fill, Attr::fill(7.0, Shape::SCALAR), &[])
                .unwrap();
            tape.push(Opcode::Uniform, Attr::target(shape), &[k, c])
                .unwrap()
        } else {
            // Structural, between shapes.
            match which {
                0 if rng.chance(50) => {
                    let x = pick(rng, &pools[0]);
                    let t = tape.push(Opcode::Transpose, Attr::NONE, &[x]).unwrap();
                    pools[1].push(t);
                    t
                }
                0 => {
                    let x = pick(rng, &pools[0]);
                    let t = tape.push(Opcode::SumTo, Attr::target(row), &[x]).unwrap();
                    pools[2].push(t);
                    t
                }
                1 => {
                    let x = pick(rng, &pools[1]);
                    tape.push(Opcode::Transpose, Attr::NONE, &[x]).unwrap()
                }
                _ => {
                    let x = pick(rng, &pools[2]);
                    tape.push(Opcode::Broadcast, Attr::target(s), &[x]).unwrap()
                }
            }
        };
        let shape_of = tape.shape(v).unwrap();
        let k = shapes.iter().position(|&x| x == shape_of).unwrap();
        if !pools[k].contains(&v) {
            pools[k].push(v);
        }
    }
    // Outputs: a few values of any shape (not leaves).
    let mut outputs = Vec::new();
    for pool in &pools {
        for &v in pool.iter().rev().take(1 + rng.below(3)) {
            let leaf = matches!(tape.node(v).unwrap().op, Opcode::Input | Opcode::Parameter);
            if !leaf && !outputs.contains(&v) {
                outputs.push(v);
            }
        }
    }
    // Updates: p ← p − lr·g (or g alone), recorded last, so nothing reads p after.
    let mut updates = Vec::new();
    for (k, &p) in params.iter().enumerate() {
        let pool = &pools[if k == 1 { 2 } else { 0 }];
        let mut g = pick(rng, pool);
        let shape = tape.shape(p).unwrap();
        // Now and then, g is another parameter's update (read after it is written in place),
        // or a parameter that a later update writes (then planning must refuse, fused or not).
        if shape == s && rng.chance(25) {
            let earlier = updates
                .iter()
                .rev()
                .find(|&&(q, _)| tape.shape(q).unwrap() == s);
            g = match earlier {
                Some(&(_, u)) if rng.chance(50) => u,
                _ => params[if k == 0 { 2 } else { 0 }],
            };
        }
        let v = if rng.chance(80) {
            let lr = tape
                .push(Opcode::Fill, Attr::fill(0.125, shape), &[])
                .unwrap();
            let m = tape.push(Opcode::Mul, Attr::NONE, &[g, lr]).unwrap();
            tape.push(Opcode::Sub, Attr::NONE, &[p, m]).unwrap()
        } else {
            tape.push(Opcode::Tanh, Attr::NONE, &[g]).unwrap()
        };
        updates.push((p, v));
    }
    // Outputs that read the new values after they are written (in place, or guarded).
    if rng.chance(40) {
        let (u0, u2) = (updates[0].1, updates[2].1);
        let y = tape.push(Opcode::Mul, Attr::NONE, &[u0, u2]).unwrap();
        let z = tape.push(Opcode::Exp, Attr::NONE, &[y]).unwrap();
        outputs.push(z);
    }
    if outputs.is_empty() {
        outputs.push(updates[0].1);
    }
    Model {
        tape,
        inputs,
        params,
        outputs,
        updates,
    }
}

fn specs(m: &Model, guarded: bool) -> Vec<EntrySpec> {
    let outs: Vec<Root> = m
        .outputs
        .iter()
        .enumerate()
        .map(|(i, &node)| Root::Output {
            name: format!("y{i}"),
            node,
        })
        .collect();
    let mut step = outs.clone();
    step.extend(
        m.updates
            .iter()
            .map(|&(param, value)| Root::Update { param, value }),
    );
    vec![
        EntrySpec {
            name: "fwd".into(),
            roots: outs,
            guarded: false,
        },
        EntrySpec {
            name: "step".into(),
            roots: step,
            guarded,
        },
    ]
}

/// What one entry leaves: outputs by name, then the parameters; `None` when a guarded entry
/// refused to commit.
type Outcome = (Vec<Vec<u32>>, Option<Vec<Vec<u32>>>);

fn values(m: &Model, rng: &mut Rng) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let gen = |rng: &mut Rng, id: NodeId| {
        let n = m.tape.shape(id).unwrap().elems();
        (0..n).map(|_| rng.f32()).collect::<Vec<f32>>()
    };
    let ins = m.inputs.iter().map(|&i| gen(rng, i)).collect();
    let ps = m.params.iter().map(|&p| gen(rng, p)).collect();
    (ins, ps)
}

/// The tape's own answer, by `Run`.
fn oracle(m: &Model, entry: &EntrySpec, ins: &[Vec<f32>], ps: &[Vec<f32>]) -> Outcome {
    let mut run = Run::new(&m.tape);
    for (&id, v) in m.inputs.iter().chain(&m.params).zip(ins.iter().chain(ps)) {
        let shape = m.tape.shape(id).unwrap();
        run.set(id, Tensor::new(shape, v.clone()).unwrap()).unwrap();
    }
    run.forward().unwrap();
    let val = |id: NodeId| run.value(id).unwrap().data.clone();
    let outs: Vec<Vec<f32>> = m.outputs.iter().map(|&o| val(o)).collect();
    let mut params: Vec<Vec<f32>> = ps.to_vec();
    let updates = entry.roots.iter().any(|r| matches!(r, Root::Update { .. }));
    if updates {
        for (k, &(_, v)) in m.updates.iter().enumerate() {
            params[k] = val(v);
        }
        let finite = outs
            .iter()
            .chain(&params)
            .all(|v| v.iter().all(|x| x.is_finite()));
        if entry.guarded && !finite {
            return (outs.iter().map(|v| bits(v)).collect(), None);
        }
    }
    (
        outs.iter().map(|v| bits(v)).collect(),
        Some(params.iter().map(|v| bits(v)).collect()),
    )
}

/// The runtime's answer, through `run` or `run_program`, with sentinels past the arena.
fn runtime(
    bytes: &[u8],
    entry: &str,
    n_out: usize,
    ins: &[Vec<f32>],
    ps: &[Vec<f32>],
    decoded: bool,
) -> Outcome {
    let plan = tapeplan_runtime::Plan::parse(bytes).unwrap();
    let n = plan.arena_elems();
    let mut arena = vec![f32::NAN; n + PAD];
    arena[n..].fill(SENTINEL);
    let e = plan.entry(entry).unwrap();
    let mut s = Session::bind(&plan, &mut arena).unwrap();
    for (k, v) in ps.iter().enumerate() {
        s.load_parameter(&format!("p{k}"), v).unwrap();
    }
    for (k, v) in ins.iter().enumerate() {
        let name = format!("x{k}");
        if plan.input(e, &name).is_some() {
            s.set_input(e, &name, v).unwrap();
        }
    }
    let r = if decoded {
        let mut buf = vec![Decoded::EMPTY; plan.entry_instrs(e).unwrap()];
        let p = s.decode(e, &mut buf).unwrap();
        s.run_program(&p)
    } else {
        s.run(e)
    };
    let outs: Vec<Vec<u32>> = (0..n_out)
        .map(|i| bits(s.output(e, &format!("y{i}")).unwrap()))
        .collect();
    let params: Vec<Vec<u32>> = (0..ps.len())
        .map(|k| bits(s.parameter(&format!("p{k}")).unwrap()))
        .collect();
    let outcome = match r {
        Ok(()) => (outs, Some(params)),
        Err(ExecError::NonFinite { .. }) => {
            let before: Vec<Vec<u32>> = ps.iter().map(|v| bits(v)).collect();
            assert_eq!(params, before, "a refused step changed parameters");
            (outs, None)
        }
        Err(e) => panic!("{e:?}"),
    };
    assert!(
        arena[n..].iter().all(|v| v.to_bits() == SENTINEL.to_bits()),
        "wrote past the arena"
    );
    outcome
}

/// The host interpreter's answer (outputs; parameters after a commit done here for guarded
/// entries).
fn host(p: &Schedule, entry: &str, ins: &[Vec<f32>], ps: &[Vec<f32>], names: &[String]) -> Outcome {
    let mut arena = vec![f32::NAN; p.arena_elems];
    let e = p.entry(entry).unwrap();
    let put = |arena: &mut Vec<f32>, t: u32, v: &[f32]| {
        let o = p.tensors[t as usize].offset_elems;
        arena[o..o + v.len()].copy_from_slice(v);
    };
    for (k, v) in ps.iter().enumerate() {
        let t = p
            .parameters
            .iter()
            .find(|x| x.0 == format!("p{k}"))
            .unwrap()
            .1;
        put(&mut arena, t, v);
    }
    for (name, t) in &e.inputs {
        let k: usize = name[1..].parse().unwrap();
        put(&mut arena, *t, &ins[k]);
    }
    p.run_host(entry, &mut arena).unwrap();
    let read = |t: u32| {
        let x = &p.tensors[t as usize];
        arena[x.offset_elems..x.offset_elems + x.shape.elems()].to_vec()
    };
    let outs: Vec<Vec<f32>> = names
        .iter()
        .map(|n| read(e.outputs.iter().find(|o| &o.0 == n).unwrap().1))
        .collect();
    let mut params: Vec<Vec<f32>> = ps.to_vec();
    for (name, t) in &e.updates {
        let k: usize = name[1..].parse().unwrap();
        params[k] = read(*t);
    }
    let guarded = e
        .updates
        .iter()
        .any(|(_, t)| p.tensors[*t as usize].kind == TensorKind::Scratch);
    let finite = outs
        .iter()
        .chain(&params)
        .all(|v| v.iter().all(|x| x.is_finite()));
    let o = outs.iter().map(|v| bits(v)).collect();
    if guarded && !finite {
        return (o, None);
    }
    (o, Some(params.iter().map(|v| bits(v)).collect()))
}

/// Checks one model; answers its fused instruction count, `None` when planning refused it
/// (fused and unfused alike).
fn check_model(m: &Model, guarded: bool, rng: &mut Rng) -> Option<usize> {
    let specs = specs(m, guarded);
    let fused = plan_with(
        &m.tape,
        &specs,
        PlanOptions {
            fusion: FusionPolicy::All,
            ..PlanOptions::default()
        },
    );
    let plain = plan_with(
        &m.tape,
        &specs,
        PlanOptions {
            fusion: FusionPolicy::Off,
            ..PlanOptions::default()
        },
    );
    let (fused, plain) = match (fused, plain) {
        (Ok(f), Ok(p)) => (f, p),
        (Err(f), Err(p)) => {
            assert_eq!(f.to_string(), p.to_string());
            return None;
        }
        (f, p) => panic!("fused {:?} vs plain {:?}", f.err(), p.err()),
    };
    assert!(
        fused.arena_elems <= plain.arena_elems,
        "fused arena {} > unfused {}",
        fused.arena_elems,
        plain.arena_elems
    );
    for p in [&fused, &plain] {
        for e in &p.entries {
            let r = &e.report;
            assert!(r.lower_bound_bytes <= r.entry_bytes, "{}: {r:?}", e.name);
            assert!(r.entry_bytes <= r.arena_bytes, "{}: {r:?}", e.name);
            assert!(
                r.lower_bound_bytes <= r.retain_everything_bytes,
                "{}: {r:?}",
                e.name
            );
        }
    }
    // Fusion decided per chain (a host's cost model, or a device's): a subset of the fused
    // plan's chains, never a larger arena, the same results.
    let per_chain = plan_with(
        &m.tape,
        &specs,
        PlanOptions {
            fusion: if guarded {
                FusionPolicy::Device
            } else {
                FusionPolicy::Auto
            },
            ..PlanOptions::default()
        },
    )
    .expect("planned fused, so planned per chain");
    assert!(per_chain.arena_elems <= fused.arena_elems);
    let n_fused = fused
        .entries
        .iter()
        .flat_map(|e| &e.instrs)
        .filter(|i| i.fuse_next)
        .count();
    let names: Vec<String> = (0..m.outputs.len()).map(|i| format!("y{i}")).collect();
    let (fb, pb, cb) = (fused.to_bytes(), plain.to_bytes(), per_chain.to_bytes());
    for bytes in [&fb, &pb, &cb] {
        if let Err(e) = tapeplan_runtime::Plan::parse(bytes) {
            panic!(
                "the runtime rejects a planned plan: {e}\n{:#?}",
                fused.entries
            );
        }
    }
    for _ in 0..2 {
        let (ins, ps) = values(m, rng);
        for spec in &specs {
            let want = oracle(m, spec, &ins, &ps);
            for (p, bytes) in [(&fused, &fb), (&plain, &pb), (&per_chain, &cb)] {
                for decoded in [false, true] {
                    let got = runtime(bytes, &spec.name, m.outputs.len(), &ins, &ps, decoded);
                    assert_eq!(got, want, "{}: runtime (decoded {decoded})", spec.name);
                }
                let got = host(p, &spec.name, &ins, &ps, &names);
                assert_eq!(got, want, "{}: host interpreter", spec.name);
            }
        }
    }
    Some(n_fused)
}

#[test]
fn random_tapes_plan_fused_and_run_as_the_tape() {
    let mut rng = Rng::new(0x5eed_f00d_cafe_0001);
    let (mut fused_instrs, mut refused) = (0, 0);
    let n: usize = std::env::var("FH_MODELS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400);
    for _ in 0..n {
        let m = random_model(&mut rng);
        let guarded = rng.chance(50);
        match check_model(&m, guarded, &mut rng) {
            Some(k) => fused_instrs += k,
            None => refused += 1,
        }
    }
    eprintln!("{n} models: {refused} refused by the planner, {fused_instrs} fused instructions");
    assert!(refused < n / 2 && fused_instrs > 500);
}

// ---------------------------------------------------------------------------------------------
// Mutations of real fused plans.

/// Parses a mutant; if accepted, runs every entry (the entries in turn over one arena, like a
/// training loop, from a deterministic start) and checks the runtime against the sequential
/// meaning (`tapeplan_tests::sequential::run_entry` over the mutant's records), with sentinels
/// past the arena. Answers whether it was accepted.
fn exercise(bytes: &[u8]) -> bool {
    let Ok(plan) = tapeplan_runtime::Plan::parse(bytes) else {
        return false;
    };
    let n = plan.arena_elems();
    if n > 1 << 20 {
        return true;
    }
    let r = Builder::decode(bytes);
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15 ^ n as u64);
    let init: Vec<f32> = (0..n).map(|_| rng.f32() * 0.5).collect();
    for decoded in [false, true] {
        let mut want = init.clone();
        let mut arena = init.clone();
        arena.extend(std::iter::repeat_n(SENTINEL, PAD));
        let entries: Vec<_> = plan.entries().collect();
        let mut s = Session::bind(&plan, &mut arena).unwrap();
        for e in entries {
            let ok = run_entry(&r, e.index(), &mut want).is_ok();
            let got = if decoded {
                let mut buf = vec![Decoded::EMPTY; plan.entry_instrs(e).unwrap()];
                let p = s.decode(e, &mut buf).unwrap();
                s.run_program(&p)
            } else {
                s.run(e)
            };
            match got {
                Ok(()) => assert!(ok, "committed a step the spec refuses"),
                Err(ExecError::NonFinite { .. }) => assert!(!ok, "refused a finite step"),
                Err(e) => panic!("an accepted plan failed to run: {e:?}"),
            }
        }
        let arena = s.into_arena();
        assert!(
            arena[n..].iter().all(|v| v.to_bits() == SENTINEL.to_bits()),
            "wrote past the arena"
        );
        assert_eq!(bits(&arena[..n]), bits(&want), "decoded {decoded}");
    }
    true
}

fn fix_crc(b: &mut [u8]) {
    if let Some(c) = plan_crc(b) {
        b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&c.to_le_bytes());
    }
}

fn job_bytes(optimizer: Optimizer, guarded: bool) -> Vec<u8> {
    let job = TrainingJob::build_with(
        Mlp {
            sizes: vec![5, 4, 3],
            activation: Activation::Tanh,
        },
        Loss::SoftmaxCrossEntropy,
        optimizer,
        2,
        JobOptions {
            guarded,
            planning: PlanOptions {
                fusion: FusionPolicy::All,
                ..PlanOptions::default()
            },
            ..Default::default()
        },
    )
    .unwrap();
    assert!(job
        .schedule
        .entries
        .iter()
        .flat_map(|e| &e.instrs)
        .any(|i| i.fuse_next));
    job.schedule.to_bytes()
}

const ADAM: Optimizer = Optimizer::Adam {
    lr: 0.01,
    beta1: 0.9,
    beta2: 0.999,
    eps: 1e-8,
    decoupled_weight_decay: 0.01,
};

#[test]
fn every_flags_kind_and_offset_bit_flipped_in_fused_plans() {
    for (optimizer, guarded) in [
        (ADAM, false),
        (ADAM, true),
        (
            Optimizer::Momentum {
                lr: 0.1,
                momentum: 0.9,
                nesterov: true,
            },
            false,
        ),
    ] {
        let bytes = job_bytes(optimizer, guarded);
        assert!(exercise(&bytes));
        let r = Builder::decode(&bytes);
        let (t_at, i_at) = (
            HEADER_BYTES,
            HEADER_BYTES + TENSOR_RECORD_BYTES * r.tensors.len(),
        );
        let mut mutants = Vec::new();
        for i in 0..r.instrs.len() {
            for bit in 0..16 {
                let at = i_at + INSTR_RECORD_BYTES * i + 2 + bit / 8;
                mutants.push((at, 1u8 << (bit % 8)));
            }
        }
        for t in 0..r.tensors.len() {
            let at = t_at + TENSOR_RECORD_BYTES * t;
            for bit in 0..8 {
                mutants.push((at + 5, 1 << bit));
            }
            for bit in 0..32 {
                mutants.push((at + bit / 8, 1 << (bit % 8)));
            }
        }
        let mut accepted = 0;
        for (at, mask) in mutants {
            let mut b = bytes.clone();
            b[at] ^= mask;
            fix_crc(&mut b);
            if exercise(&b) {
                accepted += 1;
            }
        }
        eprintln!("{optimizer:?} guarded {guarded}: {accepted} mutants accepted");
        assert!(accepted > 0);
    }
}

/// Pairs of flags flipped together: chains joined and split at once, so registers cross the
/// new boundaries and joined chains grow past their lengths.
#[test]
fn flags_flipped_in_pairs() {
    let bytes = job_bytes(ADAM, false);
    let r = Builder::decode(&bytes);
    let i_at = HEADER_BYTES + TENSOR_RECORD_BYTES * r.tensors.len();
    let n = r.instrs.len();
    let mut accepted = 0;
    for i in 0..n {
        for j in i + 1..n.min(i + 20) {
            let mut b = bytes.clone();
            b[i_at + INSTR_RECORD_BYTES * i + 2] ^= FUSE_NEXT as u8;
            b[i_at + INSTR_RECORD_BYTES * j + 2] ^= FUSE_NEXT as u8;
            fix_crc(&mut b);
            if exercise(&b) {
                accepted += 1;
            }
        }
    }
    eprintln!("{accepted} pair mutants accepted");
}

// ---------------------------------------------------------------------------------------------
// Random MLP jobs: fused = unfused = oracle.

fn optimizer(k: usize) -> Optimizer {
    match k {
        0 => Optimizer::Sgd { lr: 0.05 },
        1 => Optimizer::Momentum {
            lr: 0.05,
            momentum: 0.9,
            nesterov: false,
        },
        2 => Optimizer::Momentum {
            lr: 0.05,
            momentum: 0.8,
            nesterov: true,
        },
        3 => ADAM,
        _ => Optimizer::Adam {
            lr: 0.02,
            beta1: 0.8,
            beta2: 0.99,
            eps: 1e-6,
            decoupled_weight_decay: 0.0,
        },
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_mlps_train_to_the_same_bits_fused_and_unfused(
        sizes in prop::collection::vec(1usize..12, 2..5),
        batch in 1usize..6,
        opt in 0usize..5,
        guarded: bool,
        relu: bool,
        mse: bool,
        dropout in prop::sample::select(vec![0.0f32, 0.3]),
        seed in 0u64..1000,
    ) {
        let mlp = Mlp {
            sizes: sizes.clone(),
            activation: if relu { Activation::Relu } else { Activation::Tanh },
        };
        let loss = if mse { Loss::MeanSquaredError } else { Loss::SoftmaxCrossEntropy };
        let job = |fuse: bool| {
            TrainingJob::build_with(
                mlp.clone(),
                loss,
                optimizer(opt),
                batch,
                JobOptions {
                    guarded,
                    dropout,
                    seed,
                    planning: PlanOptions {
                        fusion: FusionPolicy::all_or_off(fuse),
                        ..PlanOptions::default()
                    },
                    ..Default::default()
                },
            )
            .unwrap()
        };
        let (fused, plain) = (job(true), job(false));
        prop_assert!(fused.schedule.arena_elems <= plain.schedule.arena_elems);
        let (fb, pb) = (fused.schedule.to_bytes(), plain.schedule.to_bytes());
        let mut models = [RuntimeModel::new(&fb).unwrap(), RuntimeModel::new(&pb).unwrap()];
        let shapes = fused.parameter_shapes();
        let init = glorot_uniform(&shapes, seed);
        for m in &mut models {
            for ((n, _), v) in shapes.iter().zip(&init) {
                m.load_parameter(n, v).unwrap();
            }
        }
        let mut oracle = Oracle::new(&fused, &init).unwrap();
        let mut rng = SplitMix64::new(seed);
        let (d_in, d_out) = (sizes[0], *sizes.last().unwrap());
        for step in 0..3 {
            let x: Vec<f32> = (0..batch * d_in).map(|_| rng.next_f32() * 2.0 - 1.0).collect();
            let target: Vec<f32> = match loss {
                Loss::SoftmaxCrossEntropy => (0..batch).map(|_| rng.below(d_out) as f32).collect(),
                _ => (0..batch * d_out).map(|_| rng.next_f32()).collect(),
            };
            let lf = models[0].train_step(&x, &target).unwrap();
            let lp = models[1].train_step(&x, &target).unwrap();
            let lo = oracle.step(&x, &target).unwrap();
            prop_assert_eq!(lf.to_bits(), lp.to_bits(), "step {}: loss", step);
            prop_assert_eq!(lf.to_bits(), lo.to_bits(), "step {}: oracle", step);
            for (k, (n, _)) in shapes.iter().enumerate() {
                let f = models[0].parameter(n).unwrap();
                let p = models[1].parameter(n).unwrap();
                prop_assert_eq!(bits(&f), bits(&p), "step {}: {}", step, n);
                prop_assert_eq!(bits(&f), bits(&oracle.params[k].data), "step {}: {}", step, n);
            }
            prop_assert_eq!(models[0].persistent().len(), models[1].persistent().len());
            prop_assert_eq!(bits(models[0].persistent()), bits(models[1].persistent()));
        }
    }
}

/// Every bit of every byte of a fused Adam plan (guarded and in place), CRC recomputed: accepted
/// mutants must run as their instructions one after another. Slow in debug builds: run with
/// `cargo test --release -p tapeplan-tests --test cross -- --ignored fusion_hostile::`.
#[test]
#[ignore]
fn every_bit_of_fused_plans_flipped() {
    for guarded in [false, true] {
        let bytes = job_bytes(ADAM, guarded);
        let mut accepted = 0;
        for at in HEADER_BYTES..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[at] ^= 1 << bit;
                fix_crc(&mut b);
                if exercise(&b) {
                    accepted += 1;
                }
            }
        }
        eprintln!("guarded {guarded}: {accepted} mutants accepted");
    }
}

/// Tensors moved between the arena and the registers: every tensor made a register in every
/// slot, every register put at every aligned scratch offset; accepted plans must run as their
/// instructions one after another.
#[test]
fn tensors_moved_into_and_out_of_registers() {
    for guarded in [false, true] {
        let bytes = job_bytes(ADAM, guarded);
        let r = Builder::decode(&bytes);
        let (persistent, arena) = (r.persistent_elems, r.arena_elems);
        let mut accepted = 0;
        let mut with = |t: usize, kind: TensorKind, offset: u32| {
            let mut b = bytes.clone();
            let at = HEADER_BYTES + TENSOR_RECORD_BYTES * t;
            b[at + 5] = kind as u8;
            b[at..at + 4].copy_from_slice(&offset.to_le_bytes());
            fix_crc(&mut b);
            if exercise(&b) {
                accepted += 1;
            }
        };
        for (t, rec) in r.tensors.iter().enumerate() {
            if rec.kind == TensorKind::Register as u8 {
                for offset in (persistent..arena).step_by(4) {
                    with(t, TensorKind::Scratch, offset);
                }
            } else {
                for slot in 0..4 {
                    with(t, TensorKind::Register, slot);
                }
            }
        }
        eprintln!("guarded {guarded}: {accepted} moves accepted");
        assert!(accepted > 0);
    }
}
