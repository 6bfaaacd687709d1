//! Train-step time through the `no_std` runtime, one step per call, on fixed workloads:
//!
//! - W1: MLP 64-32-10, tanh, softmax cross-entropy, SGD, batch 32 (the digits demo).
//! - W2: MLP 784-128-10, relu, softmax cross-entropy, SGD, batch 64 (`W2-adam`: Adam, as W4's,
//!   whose weight gradients `xᵀ · ḡ` are products, not fused updates).
//! - W3: MLP 2-16-16-1, tanh, mean squared error, SGD, batch 1 (online learning).
//! - W4: MLP 64-32-10, tanh, softmax cross-entropy, Adam, batch 32, unguarded (the optimizer
//!   with the longest elementwise chains).
//!
//! Plans fuse chains per chain (the default, `FusionPolicy::Auto`); `W<n>-unfused` is W<n>
//! planned without fusion and `W<n>-allfused` with every chain fused (`FusionPolicy::All`), to
//! measure what fused chains cost or save in time (their bits are the same); `W<n>-unfolded` is
//! W<n> planned without folding transposes into the products that read them
//! (`PlanOptions::fold_transposes` off: every `transpose` materialized, as before
//! `matmul_tn` / `matmul_nt`; the same bits). `W<n>-fma` is W<n>
//! planned under the `fma` arithmetic profile (one fused multiply-add per matrix-product step:
//! the hardware instruction where the build has the `fma` target feature, `libm::fmaf`
//! otherwise; other bits than W<n>'s).
//!
//! Each is a criterion benchmark `train_step/W<n>/<catalog>`, the catalog being the runtime's
//! (`scalar`, or `simd-avx512` / `simd-avx2` / `simd-sse2` with `--features simd`). One iteration
//! sets the step's inputs, runs the `train_step` entry and reads the loss: the bindings are
//! looked up and the entry decoded (`Session::decode`) once, outside the loop, as a training loop
//! would; `W3-run` is W3 through `Session::run`, which reads the plan's records on every step;
//! `W3-run-decoded` is `Session::run` with the plan decoded once and attached
//! (`Session::decode_all`, `Session::with_decoded`).
//!
//! Run with `cargo bench -p tapeplan-planner --bench train_step [--features simd]`, best with
//! `RUSTFLAGS="-C target-cpu=native"` (the runtime picks its vector width at compile time);
//! `cargo xtask bench` runs both catalogs and prints the table of docs/benchmarks.md.
//!
//! With `TAPEPLAN_BENCH_REPORT=FILE` set, one tab-separated line per workload is appended to
//! FILE: `id  catalog  flops_per_step  arena_bytes  lower_bound_bytes  retain_everything_bytes`.

use std::io::Write;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tapeplan_core::{ArithProfile, Opcode};
use tapeplan_planner::model::optim::{Optimizer, Sgd};
use tapeplan_planner::model::{glorot_uniform, Activation, Loss, Mlp};
use tapeplan_planner::model::{JobOptions, TrainingJob};
use tapeplan_planner::protocol::SplitMix64;
use tapeplan_planner::{FusionPolicy, PlanOptions};
use tapeplan_runtime::catalog::CATALOG;
use tapeplan_runtime::{Decoded, Plan, Session};

/// Floating-point operations of one run of `entry`: `2·m·k·n` per `matmul` (and `matmul_tn`,
/// `matmul_nt`; not `sgd_matmul`), one per output
/// element of every elementwise instruction (transcendentals included) and of `select`, one
/// per input element of `sum_to` and `max_to`; copies (`broadcast`, `transpose`, `reshape`,
/// `fill`, `one_hot`) count nothing.
fn flops(job: &TrainingJob, entry: &str) -> u64 {
    let plan = &job.schedule;
    let e = plan.entry(entry).expect("entry");
    let elems = |t: u32| plan.tensors[t as usize].shape.elems() as u64;
    e.instrs
        .iter()
        .map(|i| match i.op {
            // The inner extent: `a`'s last, or (`matmul_tn`, `a: [k, m]`) its first.
            Opcode::MatMul | Opcode::MatMulNt => {
                2 * elems(i.out) * plan.tensors[i.args[0] as usize].shape.dims()[1] as u64
            }
            Opcode::MatMulTn => {
                2 * elems(i.out) * plan.tensors[i.args[0] as usize].shape.dims()[0] as u64
            }
            Opcode::SumTo | Opcode::MaxTo => elems(i.args[0]),
            op if op.class() == tapeplan_core::OpClass::Elementwise || op == Opcode::Select => {
                elems(i.out)
            }
            _ => 0,
        })
        .sum()
}

/// How a workload's iterations run `train_step`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Run {
    /// `Session::run_program` of the entry decoded once.
    Program,
    /// `Session::run`, reading the records every step.
    Records,
    /// `Session::run` with the whole plan decoded once and attached.
    Attached,
}

fn workload(
    c: &mut Criterion,
    id: &str,
    run: Run,
    sizes: &[usize],
    act: Activation,
    loss: Loss,
    batch: usize,
) {
    let fusion = if id.ends_with("-unfused") {
        FusionPolicy::Off
    } else if id.ends_with("-allfused") {
        FusionPolicy::All
    } else {
        FusionPolicy::Auto
    };
    let fold_transposes = !id.ends_with("-unfolded");
    let arith = if id.ends_with("-fma") {
        ArithProfile::Fma
    } else {
        ArithProfile::Separate
    };
    let optimizer = if id.starts_with("W4") || id.contains("-adam") {
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
    let job = TrainingJob::build_with(
        Mlp {
            sizes: sizes.to_vec(),
            activation: act,
        },
        loss,
        optimizer,
        batch,
        JobOptions {
            planning: PlanOptions {
                fusion,
                arith,
                fold_transposes,
                ..PlanOptions::default()
            },
            ..Default::default()
        },
    )
    .expect("plan");
    let bytes = job.schedule.to_bytes();
    let plan = Plan::parse(&bytes).expect("valid plan");
    let mut arena = vec![0.0f32; plan.arena_elems()];
    let e = plan.entry("train_step").expect("entry");
    let mut all = vec![Decoded::EMPTY; plan.n_instrs()];
    let mut s = Session::bind(&plan, &mut arena).expect("arena");
    if run == Run::Attached {
        let decoded = s.decode_all(&mut all).expect("decode");
        s = s.with_decoded(decoded).expect("the same plan");
    }
    let shapes = job.parameter_shapes();
    for ((n, _), v) in shapes.iter().zip(glorot_uniform(&shapes, 1)) {
        s.load_parameter(n, &v).expect("parameter");
    }
    if let Some(init) = plan.entry("init") {
        s.run(init).expect("init");
    }
    let mut rng = SplitMix64::new(5);
    let (d_in, d_out) = (sizes[0], *sizes.last().unwrap_or(&1));
    let x: Vec<f32> = (0..batch * d_in).map(|_| rng.next_f32()).collect();
    let (tname, target): (&str, Vec<f32>) = match loss {
        Loss::SoftmaxCrossEntropy => (
            "labels",
            (0..batch).map(|_| rng.below(d_out) as f32).collect(),
        ),
        _ => ("y", (0..batch * d_out).map(|_| rng.next_f32()).collect()),
    };
    let r = job.schedule.entry("train_step").expect("entry").report;
    let fl = flops(&job, "train_step");
    eprintln!(
        "{id} [{CATALOG}]: {fl} flop/step, arena {} B, liveness lower bound {} B ({:.3}x), retain-everything {} B",
        r.arena_bytes,
        r.lower_bound_bytes,
        r.arena_bytes as f64 / r.lower_bound_bytes as f64,
        r.retain_everything_bytes
    );
    if let Some(path) = std::env::var_os("TAPEPLAN_BENCH_REPORT") {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("report file");
        writeln!(
            f,
            "{id}\t{CATALOG}\t{fl}\t{}\t{}\t{}",
            r.arena_bytes, r.lower_bound_bytes, r.retain_everything_bytes
        )
        .expect("report line");
    }
    let bx = plan.input(e, "x").expect("x");
    let bt = plan.input(e, tname).expect("target");
    let bl = plan.output(e, "loss").expect("loss");
    let mut buf = vec![Decoded::EMPTY; plan.n_instrs()];
    let program = s.decode(e, &mut buf).expect("decode");
    let mut g = c.benchmark_group("train_step");
    g.bench_function(BenchmarkId::new(id, CATALOG), |b| {
        b.iter(|| {
            s.write_binding(&bx, &x).expect("x");
            s.write_binding(&bt, &target).expect("target");
            if run == Run::Program {
                s.run_program(&program).expect("run");
            } else {
                s.run(e).expect("run");
            }
            s.read_binding(&bl)[0]
        })
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    for id in [
        "W1",
        "W1-unfused",
        "W1-allfused",
        "W4",
        "W4-unfused",
        "W4-allfused",
    ] {
        workload(
            c,
            id,
            Run::Program,
            &[64, 32, 10],
            Activation::Tanh,
            Loss::SoftmaxCrossEntropy,
            32,
        );
    }
    for id in [
        "W2",
        "W2-unfolded",
        "W2-unfused",
        "W2-allfused",
        "W2-fma",
        "W2-adam",
        "W2-adam-unfolded",
    ] {
        workload(
            c,
            id,
            Run::Program,
            &[784, 128, 10],
            Activation::Relu,
            Loss::SoftmaxCrossEntropy,
            64,
        );
    }
    for (id, run) in [
        ("W3", Run::Program),
        ("W3-unfused", Run::Program),
        ("W3-allfused", Run::Program),
        ("W3-run", Run::Records),
        ("W3-run-decoded", Run::Attached),
    ] {
        workload(
            c,
            id,
            run,
            &[2, 16, 16, 1],
            Activation::Tanh,
            Loss::MeanSquaredError,
            1,
        );
    }
}

criterion_group!(train_step, benches);
criterion_main!(train_step);
