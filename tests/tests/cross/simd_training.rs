//! Whole training runs through the runtime's kernel catalog against the oracle, bit for bit:
//! the loss after every step and every parameter after every step.
//!
//! `cargo test -p tapeplan-tests --test cross -- simd_training::` checks the scalar catalog;
//! `--features simd` the vectorized one (SSE2 by default on x86_64; with
//! `RUSTFLAGS="-C target-cpu=native"` AVX2 or AVX-512). Both equal the oracle, so the SIMD run
//! equals the scalar run bit for bit.

use tapeplan_core::{ArithProfile, MathProfile};
use tapeplan_planner::exec::RuntimeModel;
use tapeplan_planner::exec::{first_difference, Oracle};
use tapeplan_planner::model::optim::Sgd;
use tapeplan_planner::model::{glorot_uniform, Activation, Loss, Mlp};
use tapeplan_planner::model::{JobOptions, TrainingJob};
use tapeplan_planner::protocol::SplitMix64;
use tapeplan_planner::PlanOptions;
use tapeplan_runtime::catalog;

fn run(sizes: &[usize], activation: Activation, loss: Loss, batch: usize, steps: usize) {
    run_with(sizes, activation, loss, batch, steps, MathProfile::Precise);
}

fn run_with(
    sizes: &[usize],
    activation: Activation,
    loss: Loss,
    batch: usize,
    steps: usize,
    math: MathProfile,
) {
    run_profiles(
        sizes,
        activation,
        loss,
        batch,
        steps,
        math,
        ArithProfile::Separate,
    );
}

fn run_profiles(
    sizes: &[usize],
    activation: Activation,
    loss: Loss,
    batch: usize,
    steps: usize,
    math: MathProfile,
    arith: ArithProfile,
) {
    let mlp = Mlp {
        sizes: sizes.to_vec(),
        activation,
    };
    let options = JobOptions {
        planning: PlanOptions {
            math,
            arith,
            ..PlanOptions::default()
        },
        ..JobOptions::default()
    };
    let job = TrainingJob::build_with(mlp, loss, Sgd { lr: 0.05 }.into(), batch, options).unwrap();
    let bytes = job.schedule.to_bytes();
    let mut model = RuntimeModel::new(&bytes).unwrap();
    let shapes = job.parameter_shapes();
    let init = glorot_uniform(&shapes, 11);
    for ((n, _), v) in shapes.iter().zip(&init) {
        model.load_parameter(n, v).unwrap();
    }
    let mut oracle = Oracle::new(&job, &init).unwrap();
    let names: Vec<&str> = shapes.iter().map(|(n, _)| n.as_str()).collect();
    let (d_in, d_out) = (sizes[0], *sizes.last().unwrap());
    let mut rng = SplitMix64::new(2024);
    for step in 0..steps {
        let x: Vec<f32> = (0..batch * d_in)
            .map(|i| match (i + 7 * step) % 97 {
                // a few awkward inputs among the ordinary ones
                0 => -0.0,
                1 => f32::MIN_POSITIVE / 4.0,
                _ => rng.next_f32() * 4.0 - 2.0,
            })
            .collect();
        let target: Vec<f32> = match loss {
            Loss::SoftmaxCrossEntropy => (0..batch).map(|_| rng.below(d_out) as f32).collect(),
            _ => (0..batch * d_out).map(|_| rng.next_f32()).collect(),
        };
        let l_rt = model.train_step(&x, &target).unwrap();
        let l_or = oracle.step(&x, &target).unwrap();
        assert_eq!(
            l_rt.to_bits(),
            l_or.to_bits(),
            "{sizes:?} step {step}: loss, catalog {} vs oracle ({math}, {arith})",
            catalog::CATALOG
        );
        let rt: Vec<Vec<f32>> = names.iter().map(|n| model.parameter(n).unwrap()).collect();
        let left: Vec<&[f32]> = rt.iter().map(Vec::as_slice).collect();
        let right: Vec<&[f32]> = oracle.params.iter().map(|t| t.data.as_slice()).collect();
        if let Some(d) = first_difference(names.iter().copied(), &left, &right) {
            panic!(
                "{sizes:?} step {step}: catalog {} vs oracle: {d}",
                catalog::CATALOG
            );
        }
    }
    assert_ne!(oracle.params[0].data, init[0], "training moved nothing");
}

#[test]
fn catalog_is_the_one_asked_for() {
    if cfg!(feature = "simd") {
        assert!(catalog::CATALOG.starts_with("simd"), "{}", catalog::CATALOG);
    } else {
        assert_eq!(catalog::CATALOG, "scalar");
    }
}

/// W1's shape: the digits MLP.
#[test]
fn w1_digits_mlp_tanh_cross_entropy() {
    run(
        &[64, 32, 10],
        Activation::Tanh,
        Loss::SoftmaxCrossEntropy,
        32,
        6,
    );
}

/// W2's kind (relu, cross-entropy), narrower so the oracle stays quick in debug builds.
#[test]
fn w2_like_relu_cross_entropy() {
    run(
        &[196, 64, 10],
        Activation::Relu,
        Loss::SoftmaxCrossEntropy,
        16,
        4,
    );
}

/// W3: online learning, batch 1.
#[test]
fn w3_online_tanh_mse() {
    run(
        &[2, 16, 16, 1],
        Activation::Tanh,
        Loss::MeanSquaredError,
        1,
        20,
    );
}

/// Widths that are no multiple of any lane count: every kernel's tail paths.
#[test]
fn odd_widths_take_the_tail_paths() {
    run(
        &[37, 19, 7],
        Activation::Relu,
        Loss::SoftmaxCrossEntropy,
        13,
        5,
    );
    run(&[5, 33, 3], Activation::Tanh, Loss::MeanSquaredError, 3, 5);
}

/// `Session::run_program` (records decoded once) gives `Session::run`'s bits, step after step.
#[test]
fn decoded_program_equals_run() {
    use tapeplan_runtime::{Decoded, Plan, Session};
    for (sizes, activation, loss, batch) in [
        (
            vec![64, 32, 10],
            Activation::Tanh,
            Loss::SoftmaxCrossEntropy,
            32,
        ),
        (
            vec![2, 16, 16, 1],
            Activation::Tanh,
            Loss::MeanSquaredError,
            1,
        ),
    ] {
        let mlp = Mlp {
            sizes: sizes.clone(),
            activation,
        };
        let job = TrainingJob::build(mlp, loss, Sgd { lr: 0.05 }, batch).unwrap();
        let bytes = job.schedule.to_bytes();
        let plan = Plan::parse(&bytes).unwrap();
        let e = plan.entry("train_step").unwrap();
        let shapes = job.parameter_shapes();
        let init = glorot_uniform(&shapes, 3);
        let mut arena_a = vec![0.0f32; plan.arena_elems()];
        let mut arena_b = vec![0.0f32; plan.arena_elems()];
        let mut a = Session::bind(&plan, &mut arena_a).unwrap();
        let mut b = Session::bind(&plan, &mut arena_b).unwrap();
        for ((n, _), v) in shapes.iter().zip(&init) {
            a.load_parameter(n, v).unwrap();
            b.load_parameter(n, v).unwrap();
        }
        let mut buf = vec![Decoded::EMPTY; plan.n_instrs()];
        let program = b.decode(e, &mut buf).unwrap();
        // At most the entry's instructions: the catalog removes fills and reshaping
        // broadcasts whose readers take stand-ins (`Session::decode`).
        assert!(program.len() <= plan.entry_instrs(e).unwrap());
        let target_name = match loss {
            Loss::SoftmaxCrossEntropy => "labels",
            _ => "y",
        };
        let mut rng = SplitMix64::new(77);
        let (d_in, d_out) = (sizes[0], *sizes.last().unwrap());
        for step in 0..10 {
            let x: Vec<f32> = (0..batch * d_in).map(|_| rng.next_f32() - 0.5).collect();
            let t: Vec<f32> = match loss {
                Loss::SoftmaxCrossEntropy => (0..batch).map(|_| rng.below(d_out) as f32).collect(),
                _ => (0..batch * d_out).map(|_| rng.next_f32()).collect(),
            };
            for s in [&mut a, &mut b] {
                s.set_input(e, "x", &x).unwrap();
                s.set_input(e, target_name, &t).unwrap();
            }
            a.run(e).unwrap();
            b.run_program(&program).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(a.output(e, "loss").unwrap()),
                bits(b.output(e, "loss").unwrap()),
                "{sizes:?} step {step}: loss"
            );
            assert_eq!(
                bits(a.persistent()),
                bits(b.persistent()),
                "{sizes:?} step {step}: parameters"
            );
        }
        // A program decoded from another plan (here: another learning rate, the same layout)
        // is refused; one decoded from the same plan's bytes in another buffer runs.
        let mlp = Mlp {
            sizes: sizes.clone(),
            activation,
        };
        let other = TrainingJob::build(mlp, loss, Sgd { lr: 0.06 }, batch)
            .unwrap()
            .schedule
            .to_bytes();
        assert_eq!(other.len(), bytes.len());
        let other_plan = Plan::parse(&other).unwrap();
        let mut arena_c = vec![0.0f32; other_plan.arena_elems()];
        let mut c = Session::bind(&other_plan, &mut arena_c).unwrap();
        assert_eq!(
            c.run_program(&program),
            Err(tapeplan_runtime::ExecError::ForeignProgram {
                entry: e.index() as u32
            })
        );
        let copy = bytes.clone();
        let copy_plan = Plan::parse(&copy).unwrap();
        let mut arena_d = vec![0.0f32; copy_plan.arena_elems()];
        let mut d = Session::bind(&copy_plan, &mut arena_d).unwrap();
        d.run_program(&program).unwrap();
        // A buffer too small for the entry is an error, not a panic.
        let mut small = vec![Decoded::EMPTY; 1];
        assert!(a.decode(e, &mut small).is_err());
    }
}

#[test]
fn fast_profile_digits_mlp_tanh_cross_entropy() {
    run_with(
        &[64, 32, 10],
        Activation::Tanh,
        Loss::SoftmaxCrossEntropy,
        32,
        12,
        MathProfile::Fast,
    );
}

/// The `fma` arithmetic profile through the catalog's matrix product (the hardware fused
/// multiply-add with the `fma` target feature, `libm::fmaf` lane by lane otherwise): W2's kind
/// and odd widths that leave partial tiles, bit for bit with the oracle.
#[test]
fn fma_profile_w2_like_and_odd_widths() {
    let (p, f) = (MathProfile::Precise, ArithProfile::Fma);
    let (relu, ce) = (Activation::Relu, Loss::SoftmaxCrossEntropy);
    run_profiles(&[196, 64, 10], relu, ce, 16, 4, p, f);
    run_profiles(
        &[5, 13, 3],
        Activation::Tanh,
        Loss::MeanSquaredError,
        7,
        12,
        p,
        f,
    );
    run_profiles(&[37, 70, 11], relu, ce, 9, 3, MathProfile::Fast, f);
}

#[test]
fn fast_profile_odd_widths_tanh_mse() {
    run_with(
        &[5, 13, 3],
        Activation::Tanh,
        Loss::MeanSquaredError,
        7,
        20,
        MathProfile::Fast,
    );
}

/// A CNN whose rows are wide enough for the catalog's convolution kernels (20 columns, at least
/// `MIN_SIMD_COLUMNS`): a dense 3×3 convolution, a depthwise one, a strided and dilated one, so
/// a training step runs `conv`, `conv_transpose` (its stride-2 and stride-1 classes) and
/// `conv_weight_grad` (tiles within a group and across groups) from the catalog. The loss and
/// every parameter and optimizer state equal the oracle's after every step.
#[test]
fn cnn_with_catalog_convolutions() {
    use tapeplan_planner::model::nn::{Conv2d, Flatten, Linear, ReLU, Sequential};
    let (batch, steps) = (2usize, 3usize);
    let model = Sequential::new(&[3, 20, 20])
        .push(Conv2d::new(3, 8, 3).padding(1))
        .push(ReLU)
        .push(Conv2d::new(8, 8, 3).padding(1).groups(8))
        .push(ReLU)
        .push(Conv2d::new(8, 4, 3).padding(2).stride(2).dilation(2))
        .push(Flatten)
        .push(Linear::new(4 * 10 * 10, 5))
        .seed(7);
    train_bitwise(&model, batch, 3 * 20 * 20, 5, steps);
}

/// The MNIST-1D CNN's shape (issue 15's workload C1, smaller): three `Conv1d`, kernels 5, 3, 3,
/// stride 2, padding 1, signals 40 -> 19 -> 10 -> 5, channels 6 (not a multiple of 4, 8 or
/// 16): rows narrower than `MIN_SIMD_COLUMNS`, so `conv` and `conv_transpose` run the
/// catalog's channel-lane kernels. The loss and every parameter and optimizer state equal the
/// oracle's after every step.
#[test]
fn narrow_1d_cnn_with_catalog_convolutions() {
    use tapeplan_planner::model::nn::{Conv1d, Flatten, Linear, ReLU, Sequential};
    let model = Sequential::new(&[1, 40])
        .push(Conv1d::new(1, 6, 5).stride(2).padding(1))
        .push(ReLU)
        .push(Conv1d::new(6, 6, 3).stride(2).padding(1))
        .push(ReLU)
        .push(Conv1d::new(6, 6, 3).stride(2).padding(1))
        .push(ReLU)
        .push(Flatten)
        .push(Linear::new(6 * 5, 10))
        .seed(3);
    train_bitwise(&model, 5, 40, 10, 3);
}

/// Trains `model` (`sample` inputs per row, `classes` labels) for `steps` steps of `batch`
/// rows through the runtime and the oracle, with Adam and softmax cross-entropy: the loss and
/// every parameter and optimizer state must be equal after every step.
fn train_bitwise(
    model: &tapeplan_planner::model::nn::Sequential,
    batch: usize,
    sample: usize,
    classes: usize,
    steps: usize,
) {
    use tapeplan_planner::model::optim::Optimizer;
    let job = TrainingJob::for_model(model)
        .loss(Loss::SoftmaxCrossEntropy)
        .optimizer(Optimizer::adam(1e-2))
        .batch(batch)
        .build()
        .unwrap();
    let bytes = job.schedule.to_bytes();
    let mut rt = RuntimeModel::new(&bytes).unwrap();
    for s in &job.parameters {
        rt.load_parameter(&s.name, &s.init).unwrap();
    }
    let mut oracle = Oracle::with_initial_parameters(&job).unwrap();
    let names: Vec<String> = job.parameters.iter().map(|s| s.name.clone()).collect();
    let state: Vec<String> = job.state_specs.iter().map(|s| s.name.clone()).collect();
    let mut rng = SplitMix64::new(99);
    for step in 0..steps {
        let x: Vec<f32> = (0..batch * sample)
            .map(|_| rng.next_f32() * 2.0 - 1.0)
            .collect();
        let labels: Vec<f32> = (0..batch).map(|_| rng.below(classes) as f32).collect();
        let l_rt = rt.train_step(&x, &labels).unwrap();
        let l_or = oracle.step(&x, &labels).unwrap();
        assert_eq!(
            l_rt.to_bits(),
            l_or.to_bits(),
            "step {step}: loss, catalog {}",
            catalog::CATALOG
        );
        for (name, value) in names
            .iter()
            .zip(&oracle.params)
            .chain(state.iter().zip(&oracle.state))
        {
            let got = rt.parameter(name).unwrap();
            assert!(
                got.iter()
                    .zip(&value.data)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "step {step}: {name} differs (catalog {})",
                catalog::CATALOG
            );
        }
    }
}
