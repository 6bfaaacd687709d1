//! Whole training runs: the runtime (from serialized bytes) against the oracle and against the
//! planner's host interpreter of the unserialized plan, bit for bit after every step.

use tapeplan_core::{ArithProfile, MathProfile};
use tapeplan_planner::exec::RuntimeModel;
use tapeplan_planner::exec::{first_difference, Oracle};
use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::optim::Sgd;
use tapeplan_planner::model::{glorot_uniform, Activation, Loss, Mlp};
use tapeplan_planner::model::{JobOptions, TrainingJob};
use tapeplan_planner::protocol::SplitMix64;
use tapeplan_planner::PlanOptions;

fn run_case(mlp: Mlp, loss: Loss, batch: usize, steps: usize) {
    run_case_with(
        mlp,
        loss,
        Sgd { lr: 0.05 }.into(),
        batch,
        steps,
        MathProfile::Precise,
    );
}

/// Trains `steps` steps through the runtime, the oracle and the host interpreter under `math`,
/// checking every bit after every step; answers the loss of every step.
fn run_case_with(
    mlp: Mlp,
    loss: Loss,
    optimizer: Optimizer,
    batch: usize,
    steps: usize,
    math: MathProfile,
) -> Vec<f32> {
    run_case_profiles(
        mlp,
        loss,
        optimizer,
        batch,
        steps,
        math,
        ArithProfile::Separate,
    )
}

/// [`run_case_with`] under the arithmetic profile `arith` as well.
fn run_case_profiles(
    mlp: Mlp,
    loss: Loss,
    optimizer: Optimizer,
    batch: usize,
    steps: usize,
    math: MathProfile,
    arith: ArithProfile,
) -> Vec<f32> {
    let options = JobOptions {
        planning: PlanOptions {
            math,
            arith,
            ..PlanOptions::default()
        },
        ..JobOptions::default()
    };
    let job = TrainingJob::build_with(mlp.clone(), loss, optimizer, batch, options).unwrap();
    assert_eq!((job.schedule.math, job.schedule.arith), (math, arith));
    let bytes = job.schedule.to_bytes();
    let mut model = RuntimeModel::new(&bytes).unwrap();
    let shapes = job.parameter_shapes();
    let init = glorot_uniform(&shapes, 7);
    for ((n, _), v) in shapes.iter().zip(&init) {
        model.load_parameter(n, v).unwrap();
    }
    let mut oracle = Oracle::new(&job, &init).unwrap();
    // The host interpreter's arena, parameters at their offsets.
    let mut host = vec![0.0f32; job.schedule.arena_elems];
    for ((_, t, _), v) in job.schedule.parameters.iter().zip(&init) {
        let o = job.schedule.tensors[*t as usize].offset_elems;
        host[o..o + v.len()].copy_from_slice(v);
    }
    // An optimizer with state: the runtime ran `init` when it loaded the plan.
    if job.schedule.entry("init").is_some() {
        job.schedule.run_host("init", &mut host).unwrap();
    }
    let train = job.schedule.entry("train_step").unwrap();
    let (d_in, d_out) = (mlp.sizes[0], *mlp.sizes.last().unwrap());
    let mut rng = SplitMix64::new(99);
    assert_eq!((model.plan().math(), model.plan().arith()), (math, arith));
    let names: Vec<&str> = shapes.iter().map(|(n, _)| n.as_str()).collect();
    let mut losses = Vec::with_capacity(steps);
    for step in 0..steps {
        let x: Vec<f32> = (0..batch * d_in)
            .map(|_| rng.next_f32() * 2.0 - 1.0)
            .collect();
        let target: Vec<f32> = match loss {
            Loss::SoftmaxCrossEntropy => (0..batch).map(|_| rng.below(d_out) as f32).collect(),
            _ => (0..batch * d_out).map(|_| rng.next_f32()).collect(),
        };
        let l_rt = model.train_step(&x, &target).unwrap();
        let l_or = oracle.step(&x, &target).unwrap();
        losses.push(l_or);
        for (name, t) in &train.inputs {
            let o = job.schedule.tensors[*t as usize].offset_elems;
            let src = if name == "x" { &x } else { &target };
            host[o..o + src.len()].copy_from_slice(src);
        }
        job.schedule.run_host("train_step", &mut host).unwrap();
        let (_, lt) = &train.outputs[0];
        let l_host = host[job.schedule.tensors[*lt as usize].offset_elems];
        assert_eq!(
            l_rt.to_bits(),
            l_or.to_bits(),
            "step {step}: loss runtime vs oracle"
        );
        assert_eq!(
            l_rt.to_bits(),
            l_host.to_bits(),
            "step {step}: loss runtime vs host plan"
        );
        let rt: Vec<Vec<f32>> = names.iter().map(|n| model.parameter(n).unwrap()).collect();
        let left: Vec<&[f32]> = rt.iter().map(Vec::as_slice).collect();
        let right: Vec<&[f32]> = oracle.params.iter().map(|t| t.data.as_slice()).collect();
        if let Some(d) = first_difference(names.iter().copied(), &left, &right) {
            panic!("step {step}: runtime vs oracle: {d}");
        }
        assert_eq!(
            model.persistent(),
            &host[..job.schedule.persistent_elems],
            "step {step}: host plan"
        );
    }
    // Training moved the parameters.
    assert_ne!(oracle.params[0].data, init[0]);
    losses
}

/// The `fma` arithmetic profile: runtime, oracle and host interpreter agree bit for bit under
/// it (with either math profile), its losses differ from the `separate` run's (the products
/// round once per step), and training reaches the same place.
#[test]
fn fma_profile_runtime_equals_oracle() {
    let mlp = Mlp {
        sizes: vec![12, 9, 4],
        activation: Activation::Relu,
    };
    let sgd = || Sgd { lr: 0.05 }.into();
    let loss = Loss::SoftmaxCrossEntropy;
    let (p, s, f) = (
        MathProfile::Precise,
        ArithProfile::Separate,
        ArithProfile::Fma,
    );
    let fused = run_case_profiles(mlp.clone(), loss, sgd(), 5, 30, p, f);
    let separate = run_case_profiles(mlp.clone(), loss, sgd(), 5, 30, p, s);
    assert_ne!(
        fused.iter().map(|l| l.to_bits()).collect::<Vec<_>>(),
        separate.iter().map(|l| l.to_bits()).collect::<Vec<_>>()
    );
    let (a, b) = (fused[29], separate[29]);
    assert!((a - b).abs() <= 1e-3 * b.abs(), "fma {a} vs separate {b}");
    run_case_profiles(mlp, loss, sgd(), 5, 10, MathProfile::Fast, f);
}

#[test]
fn fast_profile_tanh_cross_entropy_runtime_equals_oracle() {
    let mlp = Mlp {
        sizes: vec![8, 6, 4],
        activation: Activation::Tanh,
    };
    let sgd = || Sgd { lr: 0.05 }.into();
    let loss = Loss::SoftmaxCrossEntropy;
    let fast = run_case_with(mlp.clone(), loss, sgd(), 5, 40, MathProfile::Fast);
    let precise = run_case_with(mlp, loss, sgd(), 5, 40, MathProfile::Precise);
    // The profiles are different functions: the same run gives other losses from step 1 on.
    assert_ne!(fast[0].to_bits(), precise[0].to_bits());
    // And the approximations stay close: within 1 % of the precise loss after 40 steps.
    let (f, p) = (fast[39], precise[39]);
    assert!((f - p).abs() <= 0.01 * p.abs(), "fast {f} vs precise {p}");
}

#[test]
fn fast_profile_adam_mse_runtime_equals_oracle() {
    // Adam's update speaks `sqrt` (correctly rounded in both profiles) and its bias
    // corrections; the tanh layer is the transcendental here.
    run_case_with(
        Mlp {
            sizes: vec![3, 7, 2],
            activation: Activation::Tanh,
        },
        Loss::MeanSquaredError,
        Optimizer::adam(0.01),
        4,
        30,
        MathProfile::Fast,
    );
}

#[test]
fn tanh_cross_entropy_runtime_equals_oracle() {
    run_case(
        Mlp {
            sizes: vec![8, 6, 4],
            activation: Activation::Tanh,
        },
        Loss::SoftmaxCrossEntropy,
        5,
        40,
    );
}

#[test]
fn relu_mse_three_layers_runtime_equals_oracle() {
    run_case(
        Mlp {
            sizes: vec![2, 16, 16, 1],
            activation: Activation::Relu,
        },
        Loss::MeanSquaredError,
        1,
        60,
    );
}

#[test]
fn relu_cross_entropy_wide_runtime_equals_oracle() {
    run_case(
        Mlp {
            sizes: vec![30, 20, 10],
            activation: Activation::Relu,
        },
        Loss::SoftmaxCrossEntropy,
        16,
        20,
    );
}
