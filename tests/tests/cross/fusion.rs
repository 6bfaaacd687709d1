//! Fusion keeps the bits: plans with elementwise chains fused (registers out of the arena, run a
//! tile at a time) and the same plans unfused give identical losses and parameters, step after
//! step, for every optimizer and loss; both equal the oracle; fused arenas are never larger.
//! Long chains with more live values than register slots, and lengths that are not a multiple
//! of the runtime's tile, are planned and run against the oracle too, through both the
//! record-reading path (`Session::run`) and the decoded one (`Session::run_program`).

use tapeplan_core::format::TensorKind;
use tapeplan_core::{Recordable, Run, Shape, Tape, Tensor};
use tapeplan_planner::exec::Oracle;
use tapeplan_planner::exec::RuntimeModel;
use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::{glorot_uniform, Activation, Loss, Mlp};
use tapeplan_planner::model::{JobOptions, TrainingJob};
use tapeplan_planner::protocol::SplitMix64;
use tapeplan_planner::{plan_with, EntrySpec, PlanOptions, Root, Schedule};
use tapeplan_runtime::{Decoded, Session};

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn chains(plan: &Schedule) -> (usize, usize) {
    let fused: usize = plan
        .entries
        .iter()
        .flat_map(|e| &e.instrs)
        .filter(|i| i.fuse_next)
        .count();
    let registers = plan
        .tensors
        .iter()
        .filter(|t| t.kind == TensorKind::Register)
        .count();
    (fused, registers)
}

struct Config {
    optimizer: Optimizer,
    activation: Activation,
    loss: Loss,
    guarded: bool,
    dropout: f32,
}

fn train_both(c: &Config) {
    let mlp = Mlp {
        sizes: vec![12, 9, 5],
        activation: c.activation,
    };
    let batch = 7;
    let job = |fuse: bool| {
        TrainingJob::build_with(
            mlp.clone(),
            c.loss,
            c.optimizer,
            batch,
            JobOptions {
                guarded: c.guarded,
                dropout: c.dropout,
                seed: 5,
                planning: PlanOptions {
                    fuse,
                    ..PlanOptions::default()
                },
                ..Default::default()
            },
        )
        .unwrap()
    };
    let (fused, plain) = (job(true), job(false));
    let (n_fused, n_registers) = chains(&fused.schedule);
    assert!(n_fused > 0 && n_registers > 0, "the fused plan has chains");
    assert_eq!(chains(&plain.schedule), (0, 0), "the unfused plan has none");
    assert!(fused.schedule.arena_elems <= plain.schedule.arena_elems);

    let (fb, pb) = (fused.schedule.to_bytes(), plain.schedule.to_bytes());
    let mut models = [
        RuntimeModel::new(&fb).unwrap(),
        RuntimeModel::new(&pb).unwrap(),
    ];
    let shapes = fused.parameter_shapes();
    let init = glorot_uniform(&shapes, 11);
    for m in &mut models {
        for ((n, _), v) in shapes.iter().zip(&init) {
            m.load_parameter(n, v).unwrap();
        }
    }
    let mut oracle = Oracle::new(&fused, &init).unwrap();
    let mut rng = SplitMix64::new(3);
    let (d_in, d_out) = (mlp.sizes[0], *mlp.sizes.last().unwrap());
    for step in 0..12 {
        let x: Vec<f32> = (0..batch * d_in)
            .map(|_| rng.next_f32() * 2.0 - 1.0)
            .collect();
        let target: Vec<f32> = match c.loss {
            Loss::SoftmaxCrossEntropy => (0..batch).map(|_| rng.below(d_out) as f32).collect(),
            _ => (0..batch * d_out).map(|_| rng.next_f32()).collect(),
        };
        let l_fused = models[0].train_step(&x, &target).unwrap();
        let l_plain = models[1].train_step(&x, &target).unwrap();
        let l_oracle = oracle.step(&x, &target).unwrap();
        assert_eq!(l_fused.to_bits(), l_plain.to_bits(), "step {step}: loss");
        assert_eq!(l_fused.to_bits(), l_oracle.to_bits(), "step {step}: oracle");
        for (k, (n, _)) in shapes.iter().enumerate() {
            let f = models[0].parameter(n).unwrap();
            let p = models[1].parameter(n).unwrap();
            assert_eq!(bits(&f), bits(&p), "step {step}: {n}");
            assert_eq!(bits(&f), bits(&oracle.params[k].data), "step {step}: {n}");
        }
        let (lf, lp) = (models[0].logits(&x).unwrap(), models[1].logits(&x).unwrap());
        assert_eq!(bits(&lf), bits(&lp), "step {step}: logits");
    }
}

#[test]
fn fused_and_unfused_plans_train_to_the_same_bits() {
    for c in [
        Config {
            optimizer: Optimizer::Sgd { lr: 0.05 },
            activation: Activation::Tanh,
            loss: Loss::SoftmaxCrossEntropy,
            guarded: false,
            dropout: 0.0,
        },
        Config {
            optimizer: Optimizer::Momentum {
                lr: 0.05,
                momentum: 0.9,
                nesterov: true,
            },
            activation: Activation::Relu,
            loss: Loss::MeanSquaredError,
            guarded: true,
            dropout: 0.25,
        },
        Config {
            optimizer: Optimizer::Adam {
                lr: 0.01,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                decoupled_weight_decay: 0.01,
            },
            activation: Activation::Tanh,
            loss: Loss::SoftmaxCrossEntropy,
            guarded: false,
            dropout: 0.0,
        },
        Config {
            optimizer: Optimizer::Adam {
                lr: 0.01,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                decoupled_weight_decay: 0.0,
            },
            activation: Activation::Relu,
            loss: Loss::MeanSquaredError,
            guarded: true,
            dropout: 0.0,
        },
    ] {
        train_both(&c);
    }
}

/// A long elementwise computation over `[n]`: many values live at once (more than the register
/// slots), every elementwise opcode the vocabulary has, and a reduction at the end.
fn long_chain(n: usize) -> (Tape, [tapeplan_core::NodeId; 4]) {
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::vector(n));
    let y = tape.input("y", Shape::vector(n));
    let (out, sum) = {
        let mut t = tape.trace();
        let a = t.exp(&x).unwrap();
        let b = t.tanh(&y).unwrap();
        let c = t.mul(&a, &b).unwrap();
        let d = t.sigmoid(&x).unwrap();
        let e = t.softplus(&y).unwrap();
        let f = t.abs(&c).unwrap();
        let g = t.sqrt(&f).unwrap();
        let h = t.add(&d, &e).unwrap();
        let i = t.div(&g, &h).unwrap();
        let j = t.maximum(&i, &b).unwrap();
        let k = t.minimum(&j, &a).unwrap();
        let l = t.sub(&k, &c).unwrap();
        let m = t.greater(&l, &d).unwrap();
        let o = t.mul(&m, &l).unwrap();
        let p = t.pow_const(&o, 3.0).unwrap();
        let q = t.neg(&p).unwrap();
        let r = t.relu(&q).unwrap();
        let s = t.add(&r, &h).unwrap();
        let u = t.log(&s).unwrap();
        let w = t.sign(&u).unwrap();
        let z = t.mul(&w, &u).unwrap();
        let sum = t.sum_all(&z).unwrap();
        (z, sum)
    };
    (tape, [x, y, out, sum])
}

fn run_runtime(p: &Schedule, x: &[f32], y: &[f32], decoded: bool) -> (Vec<f32>, Vec<f32>) {
    let bytes = p.to_bytes();
    let rt = tapeplan_runtime::Plan::parse(&bytes).unwrap();
    let e = rt.entry("e").unwrap();
    let mut arena = vec![0.0; rt.arena_elems()];
    let mut s = Session::bind(&rt, &mut arena).unwrap();
    s.set_input(e, "x", x).unwrap();
    s.set_input(e, "y", y).unwrap();
    if decoded {
        let mut buf = vec![Decoded::EMPTY; rt.entry_instrs(e).unwrap()];
        let program = s.decode(e, &mut buf).unwrap();
        s.run_program(&program).unwrap();
    } else {
        s.run(e).unwrap();
    }
    (
        s.output(e, "z").unwrap().to_vec(),
        s.output(e, "sum").unwrap().to_vec(),
    )
}

#[test]
fn long_chains_and_odd_lengths_match_the_oracle() {
    for n in [1usize, 3, 16, 63, 64, 65, 130, 1000] {
        let (tape, [xn, yn, z, sum]) = long_chain(n);
        let spec = [EntrySpec {
            name: "e".into(),
            roots: vec![
                Root::Output {
                    name: "z".into(),
                    node: z,
                },
                Root::Output {
                    name: "sum".into(),
                    node: sum,
                },
            ],
            guarded: false,
        }];
        let fused = plan_with(&tape, &spec, PlanOptions::default()).unwrap();
        let plain = plan_with(
            &tape,
            &spec,
            PlanOptions {
                fuse: false,
                ..PlanOptions::default()
            },
        )
        .unwrap();
        let (n_fused, n_registers) = chains(&fused);
        assert!(n_fused >= 8, "n = {n}: {n_fused} fused instructions");
        assert!(n_registers >= 4, "n = {n}: {n_registers} registers");
        assert!(
            fused.arena_elems < plain.arena_elems,
            "n = {n}: fused {} vs {} elems",
            fused.arena_elems,
            plain.arena_elems
        );
        let mut rng = SplitMix64::new(n as u64);
        let x: Vec<f32> = (0..n).map(|_| rng.next_f32() * 4.0 - 2.0).collect();
        let y: Vec<f32> = (0..n).map(|_| rng.next_f32() * 4.0 - 2.0).collect();
        let mut run = Run::new(&tape);
        run.set(xn, Tensor::new(Shape::vector(n), x.clone()).unwrap())
            .unwrap();
        run.set(yn, Tensor::new(Shape::vector(n), y.clone()).unwrap())
            .unwrap();
        run.forward().unwrap();
        let want_z = bits(&run.value(z).unwrap().data);
        let want_sum = bits(&run.value(sum).unwrap().data);
        for p in [&fused, &plain] {
            for decoded in [false, true] {
                let (got_z, got_sum) = run_runtime(p, &x, &y, decoded);
                assert_eq!(bits(&got_z), want_z, "n = {n}, decoded {decoded}");
                assert_eq!(bits(&got_sum), want_sum, "n = {n}, decoded {decoded}");
            }
            let mut host = vec![0.0f32; p.arena_elems];
            let e = p.entry("e").unwrap();
            for (name, t) in &e.inputs {
                let o = p.tensors[*t as usize].offset_elems;
                host[o..o + n].copy_from_slice(if name == "x" { &x } else { &y });
            }
            p.run_host("e", &mut host).unwrap();
            let (_, zt) = &e.outputs[0];
            let o = p.tensors[*zt as usize].offset_elems;
            assert_eq!(bits(&host[o..o + n]), want_z, "n = {n}: host interpreter");
        }
    }
}
