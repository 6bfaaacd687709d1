//! The train step of the benchmark workloads W1–W4 (planner-host/benches/train_step.rs) under
//! each fusion policy (`off`, `all`, `auto`), timed interleaved: 21 samples per plan, each the
//! mean of a batch of `Session::run_program` steps, the plans taking turns sample by sample so
//! that a loaded machine slows them alike. Prints the median microseconds per step, the arena
//! and the fused instructions of each plan (rows `-sgd`: planned with `fuse_sgd: false`, every
//! SGD update after its gradient's product, as before `sgd_matmul`), and checks that the three plans' losses and
//! parameters have the same bits after the timed steps.
//!
//! ```sh
//! taskset -c 1 cargo run --release -p tapeplan-planner --example policy_step --features simd
//! ```

use std::time::Instant;

use tapeplan_planner::model::optim::{Optimizer, Sgd};
use tapeplan_planner::model::{glorot_uniform, Activation, JobOptions, Loss, Mlp, TrainingJob};
use tapeplan_planner::protocol::SplitMix64;
use tapeplan_planner::{FusionPolicy, PlanOptions};
use tapeplan_runtime::catalog::CATALOG;
use tapeplan_runtime::{Decoded, Plan, Session};

struct Workload {
    id: &'static str,
    sizes: &'static [usize],
    act: Activation,
    loss: Loss,
    batch: usize,
    adam: bool,
    /// `PlanOptions::fuse_sgd` (the default, on): off for the `-sgd` rows.
    fuse_sgd: bool,
}

fn job(w: &Workload, fusion: FusionPolicy) -> TrainingJob {
    let optimizer = if w.adam {
        Optimizer::Adam {
            lr: 0.001,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            decoupled_weight_decay: 0.0,
        }
    } else {
        Sgd { lr: 0.01 }.into()
    };
    let mlp = Mlp {
        sizes: w.sizes.to_vec(),
        activation: w.act,
    };
    let planning = PlanOptions {
        fusion,
        fuse_sgd: w.fuse_sgd,
        ..PlanOptions::default()
    };
    let options = JobOptions {
        planning,
        ..Default::default()
    };
    TrainingJob::build_with(mlp, w.loss, optimizer, w.batch, options).unwrap()
}

/// One sample of `steps` train steps from the state in `arena`: microseconds per step, and the
/// bits of the last loss and of every parameter.
fn sample(
    job: &TrainingJob,
    arena: &mut [f32],
    x: &[f32],
    t: &[f32],
    steps: usize,
) -> (f64, Vec<u32>) {
    let bytes = job.schedule.to_bytes();
    let plan = Plan::parse(&bytes).unwrap();
    let e = plan.entry("train_step").unwrap();
    let mut buf = vec![Decoded::EMPTY; plan.n_instrs()];
    let mut s = Session::bind(&plan, arena).unwrap();
    let tname = if plan.input(e, "labels").is_some() {
        "labels"
    } else {
        "y"
    };
    let (bx, bt) = (plan.input(e, "x").unwrap(), plan.input(e, tname).unwrap());
    let bl = plan.output(e, "loss").unwrap();
    let program = s.decode(e, &mut buf).unwrap();
    let t0 = Instant::now();
    let mut loss = 0.0f32;
    for _ in 0..steps {
        s.write_binding(&bx, x).unwrap();
        s.write_binding(&bt, t).unwrap();
        s.run_program(&program).unwrap();
        loss = s.read_binding(&bl)[0];
    }
    let us = t0.elapsed().as_secs_f64() * 1e6 / steps as f64;
    let mut bits = vec![loss.to_bits()];
    for (n, _) in job.parameter_shapes() {
        bits.extend(s.parameter(&n).unwrap().iter().map(|v| v.to_bits()));
    }
    (us, bits)
}

fn main() {
    let workloads = [
        Workload {
            id: "W1",
            sizes: &[64, 32, 10],
            act: Activation::Tanh,
            loss: Loss::SoftmaxCrossEntropy,
            batch: 32,
            adam: false,
            fuse_sgd: true,
        },
        Workload {
            id: "W2",
            sizes: &[784, 128, 10],
            act: Activation::Relu,
            loss: Loss::SoftmaxCrossEntropy,
            batch: 64,
            adam: false,
            fuse_sgd: true,
        },
        Workload {
            id: "W3",
            sizes: &[2, 16, 16, 1],
            act: Activation::Tanh,
            loss: Loss::MeanSquaredError,
            batch: 1,
            adam: false,
            fuse_sgd: true,
        },
        Workload {
            id: "W4",
            sizes: &[64, 32, 10],
            act: Activation::Tanh,
            loss: Loss::SoftmaxCrossEntropy,
            batch: 32,
            adam: true,
            fuse_sgd: true,
        },
        Workload {
            id: "W1-sgd",
            sizes: &[64, 32, 10],
            act: Activation::Tanh,
            loss: Loss::SoftmaxCrossEntropy,
            batch: 32,
            adam: false,
            fuse_sgd: false,
        },
        Workload {
            id: "W2-sgd",
            sizes: &[784, 128, 10],
            act: Activation::Relu,
            loss: Loss::SoftmaxCrossEntropy,
            batch: 64,
            adam: false,
            fuse_sgd: false,
        },
    ];
    println!("catalog {CATALOG}");
    println!("workload\tpolicy\tus_per_step\tarena_bytes\tfused_instrs");
    for w in &workloads {
        let policies = [FusionPolicy::Off, FusionPolicy::All, FusionPolicy::Auto];
        let jobs: Vec<TrainingJob> = policies.iter().map(|&p| job(w, p)).collect();
        let shapes = jobs[0].parameter_shapes();
        let init = glorot_uniform(&shapes, 1);
        let mut arenas: Vec<Vec<f32>> = jobs
            .iter()
            .map(|j| {
                let bytes = j.schedule.to_bytes();
                let plan = Plan::parse(&bytes).unwrap();
                let mut arena = vec![0.0f32; plan.arena_elems()];
                let mut s = Session::bind(&plan, &mut arena).unwrap();
                for ((n, _), v) in shapes.iter().zip(&init) {
                    s.load_parameter(n, v).unwrap();
                }
                if let Some(e) = plan.entry("init") {
                    s.run(e).unwrap();
                }
                arena
            })
            .collect();
        let mut rng = SplitMix64::new(5);
        let (d_in, d_out) = (w.sizes[0], *w.sizes.last().unwrap());
        let x: Vec<f32> = (0..w.batch * d_in).map(|_| rng.next_f32()).collect();
        let t: Vec<f32> = match w.loss {
            Loss::SoftmaxCrossEntropy => (0..w.batch).map(|_| rng.below(d_out) as f32).collect(),
            _ => (0..w.batch * d_out).map(|_| rng.next_f32()).collect(),
        };
        let steps = match w.id {
            "W2" => 20,
            "W2-sgd" => 100,
            "W3" => 4000,
            _ => 300,
        };
        let mut samples = vec![Vec::new(); jobs.len()];
        let mut bits = vec![Vec::new(); jobs.len()];
        for _ in 0..21 {
            for (k, j) in jobs.iter().enumerate() {
                let (us, b) = sample(j, &mut arenas[k], &x, &t, steps);
                samples[k].push(us);
                bits[k] = b;
            }
        }
        for (k, j) in jobs.iter().enumerate() {
            assert_eq!(
                bits[k], bits[0],
                "{}: the same bits under every policy",
                w.id
            );
            samples[k].sort_by(f64::total_cmp);
            let fused = j
                .schedule
                .entry("train_step")
                .unwrap()
                .instrs
                .iter()
                .filter(|i| i.fuse_next)
                .count();
            println!(
                "{}\t{:?}\t{:.2}\t{}\t{}",
                w.id,
                policies[k],
                samples[k][samples[k].len() / 2],
                j.schedule.arena_elems * 4,
                fused
            );
        }
    }
}
