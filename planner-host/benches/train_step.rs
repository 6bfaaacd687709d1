//! Train-step time through the `no_std` runtime, one step per call, on fixed workloads:
//!
//! - W1: MLP 64-32-10, tanh, softmax cross-entropy, SGD, batch 32 (the digits demo).
//! - W2: MLP 784-128-10, relu, softmax cross-entropy, SGD, batch 64.
//! - W3: MLP 2-16-16-1, tanh, mean squared error, SGD, batch 1 (online learning).
//!
//! Run with `cargo bench -p tapeplan-planner --bench train_step`.

use criterion::{criterion_group, criterion_main, Criterion};
use tapeplan_planner::model::{glorot_uniform, Activation, Loss, Mlp};
use tapeplan_planner::optim::Sgd;
use tapeplan_planner::oracle::TrainingJob;
use tapeplan_planner::rng::SplitMix64;
use tapeplan_runtime::{Plan, Session};

fn workload(
    c: &mut Criterion,
    name: &str,
    sizes: &[usize],
    act: Activation,
    loss: Loss,
    batch: usize,
) {
    let job = TrainingJob::build(
        Mlp {
            sizes: sizes.to_vec(),
            activation: act,
        },
        loss,
        Sgd { lr: 0.01 },
        batch,
    )
    .expect("plan");
    let bytes = job.plan.to_bytes();
    let plan = Plan::parse(&bytes).expect("valid plan");
    let mut arena = vec![0.0f32; plan.arena_elems()];
    let e = plan.entry("train_step").expect("entry");
    let mut s = Session::bind(&plan, &mut arena).expect("arena");
    let shapes = job.parameter_shapes();
    for ((n, _), v) in shapes.iter().zip(glorot_uniform(&shapes, 1)) {
        s.load_parameter(n, &v).expect("parameter");
    }
    let mut rng = SplitMix64::new(5);
    let (d_in, d_out) = (sizes[0], *sizes.last().unwrap_or(&1));
    let x: Vec<f32> = (0..batch * d_in).map(|_| rng.next_f32()).collect();
    let (tname, target): (&str, Vec<f32>) = match loss {
        Loss::SoftmaxCrossEntropy => (
            "labels",
            (0..batch).map(|_| rng.below(d_out) as f32).collect(),
        ),
        Loss::MeanSquaredError => ("y", (0..batch * d_out).map(|_| rng.next_f32()).collect()),
    };
    let r = job.plan.entry("train_step").expect("entry").report;
    eprintln!(
        "{name}: arena {} B, liveness lower bound {} B ({:.3}x), retain-everything {} B",
        r.arena_bytes,
        r.lower_bound_bytes,
        r.arena_bytes as f64 / r.lower_bound_bytes as f64,
        r.retain_everything_bytes
    );
    c.bench_function(name, |b| {
        b.iter(|| {
            s.set_input(e, "x", &x).expect("x");
            s.set_input(e, tname, &target).expect("target");
            s.run(e).expect("run");
            s.output(e, "loss").expect("loss")[0]
        })
    });
}

fn benches(c: &mut Criterion) {
    workload(
        c,
        "W1 64-32-10 tanh ce b32",
        &[64, 32, 10],
        Activation::Tanh,
        Loss::SoftmaxCrossEntropy,
        32,
    );
    workload(
        c,
        "W2 784-128-10 relu ce b64",
        &[784, 128, 10],
        Activation::Relu,
        Loss::SoftmaxCrossEntropy,
        64,
    );
    workload(
        c,
        "W3 2-16-16-1 tanh mse b1",
        &[2, 16, 16, 1],
        Activation::Tanh,
        Loss::MeanSquaredError,
        1,
    );
}

criterion_group!(train_step, benches);
criterion_main!(train_step);
