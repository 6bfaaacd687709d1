//! No allocation per training step (issue 15's aim): a counting global allocator wraps the
//! system's, and a train step through the runtime — `Session::run_program` of a decoded entry,
//! `Session::run_program_with_inputs` (the inputs read from the caller's memory),
//! `Session::run` with the plan decoded once and attached, and the planner's host wrapper
//! `RuntimeModel::train_step` — must allocate nothing once the session exists, for MLPs (SGD,
//! Adam; fused, unfused; classification and regression) and the MNIST-1D CNN.
//!
//! Its own test binary, so that the counting allocator (`allocation-counter`, a global
//! allocator counting per thread) serves only these tests; the test harness's other threads do
//! not disturb the count.

mod common;

use common::{adam, fused, initial_parameters, mlp_job};
use tapeplan_planner::exec::runtime::RuntimeModel;
use tapeplan_planner::model::optim::Sgd;
use tapeplan_planner::model::run::mnist1d_cnn;
use tapeplan_planner::model::{Activation, Loss, TrainingJob};
use tapeplan_planner::protocol::SplitMix64;
use tapeplan_runtime::{Decoded, Plan, Session};

/// This thread's allocations (reallocations included) while `f` runs, counted by
/// `allocation-counter`'s global allocator.
fn allocations_in(f: impl FnOnce()) -> u64 {
    allocation_counter::measure(f).count_total
}

/// Steps counted after the first (warm-up) step.
const STEPS: usize = 5;

/// A step's inputs: `x` of `x_elems` uniform values and the target (`labels` below `classes`
/// for classification, `y` of `y_elems` values otherwise), under the target's binding name.
fn inputs(
    x_elems: usize,
    loss: Loss,
    batch: usize,
    classes: usize,
) -> (Vec<f32>, &'static str, Vec<f32>) {
    let mut rng = SplitMix64::new(7);
    let x = (0..x_elems).map(|_| rng.next_f32() * 2.0 - 1.0).collect();
    match loss {
        Loss::SoftmaxCrossEntropy => (
            x,
            "labels",
            (0..batch).map(|_| rng.below(classes) as f32).collect(),
        ),
        _ => (
            x,
            "y",
            (0..batch * classes).map(|_| rng.next_f32()).collect(),
        ),
    }
}

/// Allocations of `STEPS` train steps of `job` after a warm-up step, through
/// `run_program`, through `run` with the plan attached, and through `RuntimeModel`.
fn step_allocations(job: &TrainingJob, loss: Loss, batch: usize, classes: usize) -> [u64; 4] {
    let bytes = job.schedule.to_bytes();
    let init = initial_parameters(job, 1);
    let plan = Plan::parse_alloc(&bytes).expect("valid plan");
    let e = plan.entry("train_step").expect("train_step");
    let x_elems = plan.input(e, "x").expect("x").elems;
    let (x, tname, target) = inputs(x_elems, loss, batch, classes);

    let mut arena = vec![0.0f32; plan.arena_elems()];
    let mut all = vec![Decoded::EMPTY; plan.n_instrs()];
    let mut one = vec![Decoded::EMPTY; plan.n_instrs()];
    let mut with_inputs = vec![Decoded::EMPTY; plan.n_instrs()];
    let mut s = Session::bind(&plan, &mut arena).expect("arena");
    for (n, v) in &init {
        s.load_parameter(n, v).expect("parameter");
    }
    if let Some(i) = plan.entry("init") {
        s.run(i).expect("init");
    }
    let decoded = s.decode_all(&mut all).expect("decode");
    let mut s = s.with_decoded(decoded).expect("the same plan");
    let bx = plan.input(e, "x").expect("x");
    let bt = plan.input(e, tname).expect("target");
    let bl = plan.output(e, "loss").expect("loss");
    let program = s.decode(e, &mut one).expect("decode");
    let bound = s
        .decode_with_inputs(e, &mut with_inputs, &["x", tname])
        .expect("decode");
    let step = |s: &mut Session<'_, '_>, decoded_entry: bool| {
        s.write_binding(&bx, &x).expect("x");
        s.write_binding(&bt, &target).expect("target");
        if decoded_entry {
            s.run_program(&program).expect("run_program");
        } else {
            s.run(e).expect("run");
        }
        assert!(s.read_binding(&bl)[0].is_finite(), "a finite loss");
    };
    step(&mut s, true);
    let program_allocs = allocations_in(|| (0..STEPS).for_each(|_| step(&mut s, true)));
    let bound_allocs = allocations_in(|| {
        for _ in 0..STEPS {
            s.run_program_with_inputs(&bound, &[&x, &target])
                .expect("run_program_with_inputs");
        }
    });
    let run_allocs = allocations_in(|| (0..STEPS).for_each(|_| step(&mut s, false)));

    let mut model = RuntimeModel::new(&bytes).expect("runtime model");
    for (n, v) in &init {
        model.load_parameter(n, v).expect("parameter");
    }
    model.train_step(&x, &target).expect("step");
    let model_allocs = allocations_in(|| {
        for _ in 0..STEPS {
            assert!(model.train_step(&x, &target).expect("step").is_finite());
        }
    });
    [program_allocs, bound_allocs, run_allocs, model_allocs]
}

#[test]
fn mlp_steps_allocate_nothing() {
    let w1 = |fuse| {
        mlp_job(
            &[64, 32, 10],
            Activation::Tanh,
            Loss::SoftmaxCrossEntropy,
            Sgd { lr: 0.1 }.into(),
            32,
            fused(fuse),
        )
    };
    let w2 = mlp_job(
        &[784, 128, 10],
        Activation::Relu,
        Loss::SoftmaxCrossEntropy,
        adam(),
        64,
        fused(true),
    );
    let w3 = mlp_job(
        &[2, 16, 16, 1],
        Activation::Tanh,
        Loss::MeanSquaredError,
        Sgd { lr: 0.01 }.into(),
        1,
        fused(true),
    );
    let cases = [
        ("W1 fused", w1(true), Loss::SoftmaxCrossEntropy, 32, 10),
        ("W1 unfused", w1(false), Loss::SoftmaxCrossEntropy, 32, 10),
        ("W2 Adam", w2, Loss::SoftmaxCrossEntropy, 64, 10),
        ("W3 regression", w3, Loss::MeanSquaredError, 1, 1),
    ];
    for (name, job, loss, batch, classes) in cases {
        let [program, bound, run, model] = step_allocations(&job, loss, batch, classes);
        assert_eq!(
            (program, bound, run, model),
            (0, 0, 0, 0),
            "{name}: allocations in {STEPS} steps (run_program, run_program_with_inputs, run, \
             RuntimeModel::train_step)"
        );
    }
}

#[test]
fn cnn_steps_allocate_nothing() {
    let model = mnist1d_cnn(42);
    let job = TrainingJob::for_model(&model)
        .loss(Loss::SoftmaxCrossEntropy)
        .optimizer(adam())
        .batch(8)
        .build()
        .expect("plan");
    let [program, bound, run, model] = step_allocations(&job, Loss::SoftmaxCrossEntropy, 8, 10);
    assert_eq!(
        (program, bound, run, model),
        (0, 0, 0, 0),
        "MNIST-1D CNN: allocations in {STEPS} steps (run_program, run_program_with_inputs, run, \
         RuntimeModel::train_step)"
    );
}

/// The counter counts: a test that could not fail would prove nothing.
#[test]
fn the_counter_sees_an_allocation() {
    let n = allocations_in(|| {
        let v: Vec<u64> = std::hint::black_box(vec![1, 2, 3]);
        assert_eq!(v.len(), 3);
    });
    assert!(n >= 1, "a Vec allocation was not counted");
}
