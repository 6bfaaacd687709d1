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
use tapeplan_planner::{plan_with, EntrySpec, FusionPolicy, PlanOptions, Root, Schedule};
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
    let job = |fusion: FusionPolicy| {
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
                    fusion,
                    ..PlanOptions::default()
                },
                ..Default::default()
            },
        )
        .unwrap()
    };
    // Every chain, none, and the per-chain decisions for a host and for a device.
    let (fused, plain) = (job(FusionPolicy::All), job(FusionPolicy::Off));
    let (auto, device) = (job(FusionPolicy::Auto), job(FusionPolicy::Device));
    let speed = job(FusionPolicy::Speed);
    // Time first keeps no chain `auto` unfuses; it may unfuse what `auto` keeps for memory.
    assert!(chains(&speed.schedule).0 <= chains(&auto.schedule).0);
    let (n_fused, n_registers) = chains(&fused.schedule);
    assert!(n_fused > 0 && n_registers > 0, "the fused plan has chains");
    assert_eq!(chains(&plain.schedule), (0, 0), "the unfused plan has none");
    assert!(fused.schedule.arena_elems <= plain.schedule.arena_elems);
    for per_chain in [&auto, &device] {
        assert!(per_chain.schedule.arena_elems <= fused.schedule.arena_elems);
        assert!(chains(&per_chain.schedule).0 <= n_fused);
    }

    let bytes: Vec<Vec<u8>> = [&fused, &plain, &auto, &device, &speed]
        .iter()
        .map(|j| j.schedule.to_bytes())
        .collect();
    let mut models: Vec<RuntimeModel> = bytes
        .iter()
        .map(|b| RuntimeModel::new(b).unwrap())
        .collect();
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
        let l_oracle = oracle.step(&x, &target).unwrap();
        let l_fused = models[0].train_step(&x, &target).unwrap();
        assert_eq!(l_fused.to_bits(), l_oracle.to_bits(), "step {step}: oracle");
        let lf = models[0].logits(&x).unwrap();
        for (k, (n, _)) in shapes.iter().enumerate() {
            let f = models[0].parameter(n).unwrap();
            assert_eq!(bits(&f), bits(&oracle.params[k].data), "step {step}: {n}");
        }
        for (i, m) in models.iter_mut().enumerate().skip(1) {
            let l = m.train_step(&x, &target).unwrap();
            assert_eq!(
                l_fused.to_bits(),
                l.to_bits(),
                "step {step}: loss, plan {i}"
            );
            for (n, _) in &shapes {
                let (f, p) = (models_param(m, n), oracle_bits(&oracle, &shapes, n));
                assert_eq!(f, p, "step {step}: {n}, plan {i}");
            }
            assert_eq!(
                bits(&lf),
                bits(&m.logits(&x).unwrap()),
                "step {step}: logits, plan {i}"
            );
        }
    }
}

fn models_param(m: &mut RuntimeModel, name: &str) -> Vec<u32> {
    bits(&m.parameter(name).unwrap())
}

fn oracle_bits(oracle: &Oracle, shapes: &[(String, Shape)], name: &str) -> Vec<u32> {
    let k = shapes.iter().position(|(n, _)| n == name).unwrap();
    bits(&oracle.params[k].data)
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
                fusion: FusionPolicy::Off,
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

/// W3 (2-16-16-1 tanh, mean squared error, SGD, batch 1), the same twice as wide (2-32-32-1)
/// and a wide layer's model (64-128-10 relu, batch 64) planned under each fusion policy: the
/// per-chain decision (`Auto`: the host's cost model) keeps W3's chains over 1–16 elements (lane
/// chains, faster than their instructions), unfuses the wider model's chains over 32 elements
/// where the arena allows, keeps the wide model's chains over 8 192 elements, and never makes
/// the arena larger than fusing every chain; for a device (`Device`) chains stay only where the
/// arena needs them. Time first (`Speed`, issue 15) unfuses the slower chains `Auto` keeps for
/// memory: fewer of the 32-wide model's, for a larger arena; W3's and the wide model's stay.
/// The bits of every plan are compared in `fused_and_unfused_plans_train_to_the_same_bits`.
#[test]
fn per_chain_fusion_unfuses_tiny_chains_where_the_arena_allows() {
    let job = |sizes: &[usize], act, batch, fusion| {
        TrainingJob::build_with(
            Mlp {
                sizes: sizes.to_vec(),
                activation: act,
            },
            Loss::MeanSquaredError,
            Optimizer::Sgd { lr: 0.01 },
            batch,
            JobOptions {
                planning: PlanOptions {
                    fusion,
                    ..PlanOptions::default()
                },
                ..Default::default()
            },
        )
        .unwrap()
        .schedule
    };
    let w3 = |f| job(&[2, 16, 16, 1], Activation::Tanh, 1, f);
    let w32 = |f| job(&[2, 32, 32, 1], Activation::Tanh, 1, f);
    let wide = |f| job(&[64, 128, 10], Activation::Relu, 64, f);
    for model in [&w3 as &dyn Fn(FusionPolicy) -> Schedule, &w32, &wide] {
        let all = model(FusionPolicy::All);
        let auto = model(FusionPolicy::Auto);
        let device = model(FusionPolicy::Device);
        let off = model(FusionPolicy::Off);
        assert!(auto.arena_elems <= all.arena_elems && device.arena_elems <= all.arena_elems);
        assert!(all.arena_elems <= off.arena_elems);
        assert!(chains(&device).0 <= chains(&auto).0 && chains(&auto).0 <= chains(&all).0);
        eprintln!(
            "chains fused (instructions with FUSE_NEXT, registers): all {:?}, auto {:?}, device {:?}; arena {} / {} / {} / off {} elements",
            chains(&all),
            chains(&auto),
            chains(&device),
            all.arena_elems,
            auto.arena_elems,
            device.arena_elems,
            off.arena_elems
        );
    }
    // W3's lane chains stay; a two-member chain over one element costs the model about the
    // same either way (21 against 20.3 ns) and may be unfused, by both policies alike.
    let (all, auto) = (w3(FusionPolicy::All), w3(FusionPolicy::Auto));
    eprintln!(
        "W3: all {:?}, auto {:?}, speed {:?}",
        chains(&all),
        chains(&auto),
        chains(&w3(FusionPolicy::Speed))
    );
    assert!(
        chains(&auto).0 + 1 >= chains(&all).0,
        "W3: lane chains stay"
    );
    assert_eq!(
        chains(&w3(FusionPolicy::Speed)),
        chains(&auto),
        "W3: lane chains stay"
    );
    assert!(
        chains(&w3(FusionPolicy::Device)).0 < chains(&all).0,
        "W3: a device has no lane chains"
    );
    let (all, auto) = (w32(FusionPolicy::All), w32(FusionPolicy::Auto));
    assert!(
        chains(&auto).0 < chains(&all).0,
        "32 wide: some small chain unfused"
    );
    let speed = w32(FusionPolicy::Speed);
    assert!(chains(&auto).0 > 0, "32 wide: auto keeps chains for memory");
    assert!(
        chains(&speed).0 < chains(&auto).0,
        "32 wide: speed unfuses some"
    );
    assert!(
        speed.arena_elems > auto.arena_elems,
        "32 wide: for a larger arena"
    );
    let (all, auto) = (wide(FusionPolicy::All), wide(FusionPolicy::Auto));
    assert!(
        chains(&auto).0 > 0,
        "the wide model keeps chains over 8 192 elements"
    );
    assert!(chains(&auto).0 <= chains(&all).0);
    assert_eq!(chains(&wide(FusionPolicy::Speed)), chains(&auto));
}

/// NaNs as one class (payloads may differ between targets), every other value by its bits.
fn class_bits(v: &[f32]) -> Vec<u32> {
    v.iter()
        .map(|x| if x.is_nan() { 0x7fc0_0000 } else { x.to_bits() })
        .collect()
}

/// Registers that hold one value (a `fill`, a scalar `broadcast`) are read as splats by the
/// chain runner: every binary form (splat on either side, of a buffer, of the destination
/// itself, two splats), a unary op of a splat, and `erf` (no catalog kernel: the runner writes
/// the register's tile out first), with special values in the fill, the scalar and `x`,
/// against the oracle, the unfused plan and the host interpreter, through both run paths.
#[test]
fn splat_registers_match_the_oracle() {
    let specials = [
        -0.0f32,
        0.0,
        f32::MIN_POSITIVE / 8.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1.5,
    ];
    for (case, (&c, &s)) in specials
        .iter()
        .zip(specials.iter().rev().cycle().skip(2))
        .enumerate()
    {
        for n in [1usize, 17, 1000, 2049] {
            let mut tape = Tape::new();
            let xn = tape.input("x", Shape::vector(n));
            let yn = tape.input("y", Shape::SCALAR);
            let (z, sum) = {
                let mut t = tape.trace();
                let f = t.fill(c, Shape::vector(n)).unwrap();
                let b = t.broadcast(&yn, Shape::vector(n)).unwrap();
                let a1 = t.mul(&xn, &f).unwrap();
                let a2 = t.div(&b, &xn).unwrap();
                let a3 = t.sub(&a1, &b).unwrap();
                let a4 = t.add(&f, &b).unwrap();
                let a5 = t.erf(&b).unwrap();
                let a6 = t.maximum(&a4, &a2).unwrap();
                let a7 = t.mul(&a6, &a5).unwrap();
                let a8 = t.sqrt(&b).unwrap();
                let a9 = t.add(&a3, &a8).unwrap();
                let a10 = t.sub(&f, &a9).unwrap();
                let z = t.add(&a7, &a10).unwrap();
                let sum = t.sum_all(&z).unwrap();
                (z, sum)
            };
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
            let fused = plan_with(
                &tape,
                &spec,
                PlanOptions {
                    fusion: FusionPolicy::All,
                    ..PlanOptions::default()
                },
            )
            .unwrap();
            let plain = plan_with(
                &tape,
                &spec,
                PlanOptions {
                    fusion: FusionPolicy::Off,
                    ..PlanOptions::default()
                },
            )
            .unwrap();
            let (n_fused, n_registers) = chains(&fused);
            assert!(n_fused >= 6, "n = {n}: {n_fused} fused instructions");
            assert!(n_registers >= 2, "n = {n}: {n_registers} registers");
            // The fill and the scalar broadcast are chain members writing register slots (the
            // splat path), each read by another member.
            let in_register = |op| {
                fused.entries.iter().flat_map(|e| &e.instrs).any(|i| {
                    i.op == op && fused.tensors[i.out as usize].kind == TensorKind::Register
                })
            };
            assert!(
                in_register(tapeplan_core::Opcode::Fill)
                    && in_register(tapeplan_core::Opcode::Broadcast),
                "n = {n}: the fill and the broadcast are not in registers"
            );
            let mut rng = SplitMix64::new(n as u64 + case as u64);
            let x: Vec<f32> = (0..n)
                .map(|i| {
                    if i % 7 == 3 {
                        specials[i % specials.len()]
                    } else {
                        rng.next_f32() * 4.0 - 2.0
                    }
                })
                .collect();
            let mut run = Run::new(&tape);
            run.set(xn, Tensor::new(Shape::vector(n), x.clone()).unwrap())
                .unwrap();
            run.set(yn, Tensor::new(Shape::SCALAR, vec![s]).unwrap())
                .unwrap();
            run.forward().unwrap();
            let want_z = class_bits(&run.value(z).unwrap().data);
            let want_sum = class_bits(&run.value(sum).unwrap().data);
            for p in [&fused, &plain] {
                for decoded in [false, true] {
                    let (got_z, got_sum) = run_runtime(p, &x, &[s], decoded);
                    let at = format!("fill {c}, scalar {s}, n = {n}, decoded {decoded}");
                    assert_eq!(class_bits(&got_z), want_z, "{at}");
                    assert_eq!(class_bits(&got_sum), want_sum, "{at}");
                }
            }
        }
    }
}
