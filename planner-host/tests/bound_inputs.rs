//! Inputs read from the caller's memory (issue 15: "inputs bound to the caller's memory instead
//! of copied into the arena every step"): `Session::run_program_with_inputs` of a program from
//! `Session::decode_with_inputs` must give, step after step, the bits of copying the inputs in
//! with `Session::write_binding` and running `Session::run_program`: the loss and every
//! parameter and optimizer state element, over a pool of distinct batches. The workloads cover
//! each way an input is read: a catalog kernel reading the caller's slice (the MLPs' first
//! product), a reference kernel that gets the input copied into the arena first (the CNN's
//! first convolution, where this build's catalog has none without `simd`), fused chains (W3's
//! target), guarded updates, dropout.

mod common;

use common::{adam, fused, initial_parameters, mlp_job};
use tapeplan_planner::model::optim::{Optimizer, Sgd};
use tapeplan_planner::model::run::mnist1d_cnn;
use tapeplan_planner::model::{Activation, JobOptions, Loss, TrainingJob};
use tapeplan_planner::protocol::SplitMix64;
use tapeplan_runtime::{Decoded, ExecError, Plan, Session, MAX_BOUND_INPUTS};

/// Steps run each way, cycling over a pool of `POOL` batches.
const STEPS: usize = 6;
const POOL: usize = 3;

/// A pool of `POOL` batches of `x` and the target (labels below `classes` for classification).
fn pool(plan: &Plan<'_>, loss: Loss, classes: usize, seed: u64) -> Vec<(Vec<f32>, Vec<f32>)> {
    let e = plan.entry("train_step").expect("train_step");
    let x_elems = plan.input(e, "x").expect("x").elems;
    let t_elems = plan.input(e, target_name(loss)).expect("target").elems;
    let mut rng = SplitMix64::new(seed);
    (0..POOL)
        .map(|_| {
            let x = (0..x_elems).map(|_| rng.next_f32() * 2.0 - 1.0).collect();
            let t = match loss {
                Loss::SoftmaxCrossEntropy => {
                    (0..t_elems).map(|_| rng.below(classes) as f32).collect()
                }
                _ => (0..t_elems).map(|_| rng.next_f32()).collect(),
            };
            (x, t)
        })
        .collect()
}

fn target_name(loss: Loss) -> &'static str {
    match loss {
        Loss::SoftmaxCrossEntropy => "labels",
        _ => "y",
    }
}

/// Per step: the loss's bits and the persistent region's bits (parameters and optimizer
/// state), trained with the inputs copied in (`bound == false`) or read from the pool (the
/// arena's input ranges poisoned with NaN before each step).
fn train(job: &TrainingJob, loss: Loss, classes: usize, bound: bool) -> Vec<(u32, Vec<u32>)> {
    let bytes = job.schedule.to_bytes();
    let plan = Plan::parse_alloc(&bytes).expect("valid plan");
    let e = plan.entry("train_step").expect("train_step");
    let batches = pool(&plan, loss, classes, 11);
    let tname = target_name(loss);
    let mut arena = vec![0.0f32; plan.arena_elems()];
    let mut buf = vec![Decoded::EMPTY; plan.n_instrs()];
    let mut s = Session::bind(&plan, &mut arena).expect("arena");
    for (n, v) in initial_parameters(job, 3) {
        s.load_parameter(&n, &v).expect("parameter");
    }
    if let Some(i) = plan.entry("init") {
        s.run(i).expect("init");
    }
    let program = if bound {
        s.decode_with_inputs(e, &mut buf, &["x", tname])
            .expect("decode")
    } else {
        s.decode(e, &mut buf).expect("decode")
    };
    let (bx, bt) = (
        plan.input(e, "x").expect("x"),
        plan.input(e, tname).expect("target"),
    );
    let bl = plan.output(e, "loss").expect("loss");
    let mut steps = Vec::new();
    for (x, t) in batches.iter().cycle().take(STEPS) {
        if bound {
            // NaN where a copied input would be: a kernel reading the arena instead of the
            // caller's memory (or before the input was copied there) would show it.
            s.write_binding(&bx, &vec![f32::NAN; x.len()]).expect("x");
            s.write_binding(&bt, &vec![f32::NAN; t.len()])
                .expect("target");
            s.run_program_with_inputs(&program, &[x, t]).expect("run");
        } else {
            s.write_binding(&bx, x).expect("x");
            s.write_binding(&bt, t).expect("target");
            s.run_program(&program).expect("run");
        }
        let loss_bits = s.read_binding(&bl)[0].to_bits();
        assert!(f32::from_bits(loss_bits).is_finite(), "a finite loss");
        steps.push((
            loss_bits,
            s.persistent().iter().map(|v| v.to_bits()).collect(),
        ));
    }
    steps
}

fn same_bits(name: &str, job: &TrainingJob, loss: Loss, classes: usize) {
    let copied = train(job, loss, classes, false);
    let bound = train(job, loss, classes, true);
    for (step, (c, b)) in copied.iter().zip(&bound).enumerate() {
        assert_eq!(c.0, b.0, "{name}: the loss of step {step}");
        let first = c.1.iter().zip(&b.1).position(|(x, y)| x != y);
        assert_eq!(
            first, None,
            "{name}: a persistent element after step {step}"
        );
    }
    // The steps moved the parameters: comparing unchanged arenas would prove nothing.
    assert_ne!(
        copied[0].1,
        copied[STEPS - 1].1,
        "{name}: training changed nothing"
    );
}

#[test]
fn mlps_read_inputs_from_the_callers_memory_with_the_same_bits() {
    let ce = Loss::SoftmaxCrossEntropy;
    let w1 = |fuse| {
        let sgd: Optimizer = Sgd { lr: 0.1 }.into();
        mlp_job(&[64, 32, 10], Activation::Tanh, ce, sgd, 32, fused(fuse))
    };
    same_bits("W1 fused", &w1(true), ce, 10);
    same_bits("W1 unfused", &w1(false), ce, 10);
    let w2 = mlp_job(
        &[784, 128, 10],
        Activation::Relu,
        ce,
        adam(),
        64,
        fused(true),
    );
    same_bits("W2 Adam", &w2, ce, 10);
    let mse = Loss::MeanSquaredError;
    for fuse in [true, false] {
        let sgd: Optimizer = Sgd { lr: 0.01 }.into();
        let w3 = mlp_job(&[2, 16, 16, 1], Activation::Tanh, mse, sgd, 1, fused(fuse));
        same_bits("W3", &w3, mse, 1);
    }
    let guarded = JobOptions {
        guarded: true,
        dropout: 0.2,
        seed: 5,
        ..fused(true)
    };
    let g = mlp_job(&[8, 16, 4], Activation::Relu, mse, adam(), 4, guarded);
    same_bits("guarded Adam with dropout", &g, mse, 4);
}

#[test]
fn the_cnn_reads_inputs_from_the_callers_memory_with_the_same_bits() {
    let model = mnist1d_cnn(42);
    let job = TrainingJob::for_model(&model)
        .loss(Loss::SoftmaxCrossEntropy)
        .optimizer(adam())
        .batch(4)
        .build()
        .expect("plan");
    same_bits("MNIST-1D CNN", &job, Loss::SoftmaxCrossEntropy, 10);
}

#[test]
fn bad_bound_inputs_are_refused_with_what_was_found() {
    let ce = Loss::SoftmaxCrossEntropy;
    let sgd: Optimizer = Sgd { lr: 0.1 }.into();
    let job = mlp_job(&[4, 3, 2], Activation::Tanh, ce, sgd, 2, fused(true));
    let bytes = job.schedule.to_bytes();
    let plan = Plan::parse_alloc(&bytes).expect("valid plan");
    let e = plan.entry("train_step").expect("train_step");
    let mut arena = vec![0.0f32; plan.arena_elems()];
    let mut buf = vec![Decoded::EMPTY; plan.n_instrs()];
    let mut s = Session::bind(&plan, &mut arena).expect("arena");
    assert!(matches!(
        s.decode_with_inputs(e, &mut buf, &["x", "nope"]),
        Err(ExecError::UnknownName { .. })
    ));
    let many = ["x"; MAX_BOUND_INPUTS + 1];
    assert_eq!(
        s.decode_with_inputs(e, &mut buf, &many).err(),
        Some(ExecError::CannotBindInputs { count: 9 })
    );
    assert_eq!(
        s.decode_with_inputs(e, &mut buf, &["x", "x"]).err(),
        Some(ExecError::CannotBindInputs { count: 2 }),
        "the same input twice meets itself"
    );
    let mut buf = vec![Decoded::EMPTY; plan.n_instrs()];
    let program = s
        .decode_with_inputs(e, &mut buf, &["x", "labels"])
        .expect("decode");
    assert_eq!(program.bound_inputs(), 2);
    let (x, labels) = ([0.5f32; 8], [1.0f32, 0.0]);
    assert_eq!(
        s.run_program_with_inputs(&program, &[&x]),
        Err(ExecError::LengthMismatch {
            expected_elems: 2,
            found_elems: 1
        })
    );
    assert_eq!(
        s.run_program_with_inputs(&program, &[&x[..7], &labels]),
        Err(ExecError::LengthMismatch {
            expected_elems: 8,
            found_elems: 7
        })
    );
    s.run_program_with_inputs(&program, &[&x, &labels])
        .expect("the right inputs run");
    // Labels read from the caller's memory are checked once, up front.
    assert!(matches!(
        s.check_labels(e, "labels", &[1.0, 2.0]),
        Err(ExecError::BadLabel { index: 1, .. })
    ));
    assert!(s.check_labels(e, "labels", &labels).is_ok());
}
