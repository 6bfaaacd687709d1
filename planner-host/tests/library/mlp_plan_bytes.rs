//! The `--layers` MLP's plan bytes are pinned: recording it through the general training job
//! (`impl Model for Mlp`) must not move a byte, for every loss, optimizer, dropout, guard, fusion
//! and math profile the MLP path offers. Two tables: planned with `interleave_updates: false`
//! (the schedule in tape order), the digests taken from the MLP-only job before the general job
//! replaced it (commit 361021c), so the recorded tape is the same; and planned with the default
//! options, the digests of f08d1ff's planner, which interleaves updates with the backward pass
//! where that saves memory and places offsets closer to the liveness bound (`sgd`, `mse` and
//! `unfused+fast` moved; the same digests come out of the MLP-only job at f08d1ff and of the
//! general job: the job did not move them).

use tapeplan_core::MathProfile;
use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::{Activation, JobOptions, Loss, Mlp, TrainingJob};
use tapeplan_planner::plan::{FusionPolicy, PlanOptions};
use tapeplan_planner::protocol::Fnv1a64;

#[allow(clippy::too_many_arguments)]
fn digest(
    sizes: &[usize],
    loss: Loss,
    opt: Optimizer,
    batch: usize,
    options: JobOptions,
    (interleave_updates, fuse_sgd, fold_transposes): (bool, bool, bool),
    per_chain: bool,
) -> u64 {
    // The SGD update fused with its weight gradient (`PlanOptions::fuse_sgd`) and the
    // transposes folded into their products (`PlanOptions::fold_transposes`), later planning
    // choices than both tables, are off there: those pins are about the recorded tape and the
    // planner they name. The fused and folded plans are pinned below. So is
    // the per-chain fusion decision (`FusionPolicy::Auto`, the default since branch
    // `chainfuse`): the tables were made fusing every chain, which `FusionPolicy::All` still
    // does byte for byte; the per-chain plans are pinned in `per_chain_plan_bytes_are_pinned`.
    let fusion = match options.planning.fusion {
        FusionPolicy::Auto if !per_chain => FusionPolicy::All,
        f => f,
    };
    let options = JobOptions {
        planning: PlanOptions {
            interleave_updates,
            fuse_sgd,
            fold_transposes,
            fusion,
            ..options.planning
        },
        ..options
    };
    let mlp = Mlp {
        sizes: sizes.to_vec(),
        activation: Activation::Tanh,
    };
    let job = TrainingJob::build_with(mlp, loss, opt, batch, options).unwrap();
    let mut h = Fnv1a64::new();
    h.bytes(&job.schedule.to_bytes());
    h.finish()
}

fn cases(interleave: bool, per_chain: bool) -> Vec<(&'static str, u64)> {
    let digest = |sizes: &[usize], loss, opt, batch, options| {
        digest(
            sizes,
            loss,
            opt,
            batch,
            options,
            (interleave, false, false),
            per_chain,
        )
    };
    let ce = Loss::SoftmaxCrossEntropy;
    let mse = Loss::MeanSquaredError;
    let d = JobOptions::default;
    let momentum = Optimizer::Momentum {
        lr: 0.1,
        momentum: 0.9,
        nesterov: true,
    };
    vec![
        (
            "sgd",
            digest(&[64, 32, 10], ce, Optimizer::sgd(0.1), 32, d()),
        ),
        ("mse", digest(&[4, 3, 2], mse, Optimizer::sgd(0.05), 8, d())),
        (
            "adam",
            digest(&[64, 16, 10], ce, Optimizer::adam(0.01), 16, d()),
        ),
        (
            "adamw",
            digest(&[8, 6, 4, 3], ce, Optimizer::adamw(0.01), 4, d()),
        ),
        ("nesterov", digest(&[8, 5, 3], mse, momentum, 4, d())),
        (
            "dropout+guard",
            digest(
                &[64, 32, 10],
                ce,
                Optimizer::adam(0.01),
                8,
                JobOptions {
                    guarded: true,
                    dropout: 0.1,
                    seed: 7,
                    ..d()
                },
            ),
        ),
        (
            "unfused+fast",
            digest(
                &[16, 8, 4],
                ce,
                Optimizer::sgd(0.1),
                4,
                JobOptions {
                    planning: PlanOptions {
                        fusion: tapeplan_planner::FusionPolicy::Off,
                        math: MathProfile::Fast,
                        ..PlanOptions::default()
                    },
                    ..d()
                },
            ),
        ),
    ]
}

#[test]
fn mlp_plan_bytes_are_pinned() {
    for (interleave, pinned) in [(false, &TAPE_ORDER), (true, &DEFAULT)] {
        let got = cases(interleave, false);
        for (name, h) in &got {
            println!("interleave {interleave} {name}: {h:#018x}");
        }
        assert_eq!(got.len(), pinned.len());
        for ((name, h), (pname, ph)) in got.iter().zip(pinned) {
            assert_eq!(name, pname);
            assert_eq!(h, ph, "{name} (interleave {interleave}): plan bytes moved");
        }
    }
}

/// Planned in tape order: the digests of the MLP-only job (commit 361021c).
const TAPE_ORDER: [(&str, u64); 7] = [
    ("sgd", 0x5bc196e140b8ed23),
    ("mse", 0xa5c8616bb5544ed1),
    ("adam", 0x2634e13f9a6dbc5e),
    ("adamw", 0xfb1bd9e8c423b979),
    ("nesterov", 0x1d6ecce5ebfe5020),
    ("dropout+guard", 0xb95f32dd219ad996),
    ("unfused+fast", 0x859c043b4b1440c7),
];

/// Planned with the default options (commit f08d1ff's planner).
const DEFAULT: [(&str, u64); 7] = [
    ("sgd", 0x33eeb14380ee07be),
    ("mse", 0x784169c5b7b42c11),
    ("adam", 0x2634e13f9a6dbc5e),
    ("adamw", 0xfb1bd9e8c423b979),
    ("nesterov", 0x1d6ecce5ebfe5020),
    ("dropout+guard", 0xb95f32dd219ad996),
    ("unfused+fast", 0x9c9d4a3dfe6a6d7e),
];

/// The SGD cases planned with the default options, SGD fusion included (`sgd_matmul` written
/// over each weight: no weight-gradient buffer). Pinned when fusion came (branch `fusedsgd`).
#[test]
fn fused_sgd_plan_bytes_are_pinned() {
    let ce = Loss::SoftmaxCrossEntropy;
    let d = JobOptions::default;
    let got = [
        digest(
            &[64, 32, 10],
            ce,
            Optimizer::sgd(0.1),
            32,
            d(),
            (true, true, false),
            false,
        ),
        digest(
            &[4, 3, 2],
            Loss::MeanSquaredError,
            Optimizer::sgd(0.05),
            8,
            d(),
            (true, true, false),
            false,
        ),
    ];
    println!("fused sgd: {:#018x}, mse: {:#018x}", got[0], got[1]);
    assert_eq!(got, FUSED_SGD);
}

/// `sgd` and `mse` of [`DEFAULT`] with the SGD update fused.
const FUSED_SGD: [u64; 2] = [0xea30df48a1532f82, 0x867938cdae3e2ecd];

/// The cases of [`DEFAULT`] and [`FUSED_SGD`] planned as the default now plans them: fusion
/// decided per chain (`FusionPolicy::Auto`, branch `chainfuse`). Every case with chains moved
/// (its chains over a few elements, biases and narrow layers' activations, are unfused where
/// the arena allows); `unfused+fast`, planned without fusion, did not. The arena is never
/// larger than [`DEFAULT`]'s (tests/tests/cross/fusion.rs checks that on every policy). Every
/// case with chains moved again when chains of at most 16 elements became lane chains
/// (`fused::run_lane_chain` in the runtime), which the host's cost model keeps fused (issue 15,
/// 2026-12-05: a bias's SGD step over 10 elements, Adam's scalar bias corrections).
#[test]
fn per_chain_plan_bytes_are_pinned() {
    let got = cases(true, true);
    for (name, h) in &got {
        println!("per chain {name}: {h:#018x}");
    }
    let ce = Loss::SoftmaxCrossEntropy;
    let d = JobOptions::default;
    let sgd = [
        digest(
            &[64, 32, 10],
            ce,
            Optimizer::sgd(0.1),
            32,
            d(),
            (true, true, false),
            true,
        ),
        digest(
            &[4, 3, 2],
            Loss::MeanSquaredError,
            Optimizer::sgd(0.05),
            8,
            d(),
            (true, true, false),
            true,
        ),
    ];
    println!(
        "per chain fused sgd: {:#018x}, mse: {:#018x}",
        sgd[0], sgd[1]
    );
    assert_eq!(got.len(), PER_CHAIN.len());
    for ((name, h), (pname, ph)) in got.iter().zip(&PER_CHAIN) {
        assert_eq!(name, pname);
        assert_eq!(h, ph, "{name} (per chain): plan bytes moved");
    }
    assert_eq!(sgd, PER_CHAIN_FUSED_SGD);
}

/// [`DEFAULT`]'s cases with fusion decided per chain.
const PER_CHAIN: [(&str, u64); 7] = [
    ("sgd", 0x046fd1efa68767db),
    ("mse", 0xc860dfc11b2e36fe),
    ("adam", 0xdeaad36882f120ab),
    ("adamw", 0x17f5c4c14f4345f8),
    ("nesterov", 0x93ea2ed7924db848),
    ("dropout+guard", 0xabee043925389c91),
    ("unfused+fast", 0x9c9d4a3dfe6a6d7e),
];

/// [`FUSED_SGD`]'s cases with fusion decided per chain.
const PER_CHAIN_FUSED_SGD: [u64; 2] = [0x096bb33766a392cb, 0x5ec8f9e21c930b0e];

/// The default plans, transposes folded into the products that read them (`matmul_tn`,
/// `matmul_nt`; branch `mmt`): `sgd` and `mse` with the SGD update fused, `adam` and `adamw`;
/// every chain fused (`FusionPolicy::All`, as they were pinned before the per-chain decision).
#[test]
fn folded_plan_bytes_are_pinned() {
    let ce = Loss::SoftmaxCrossEntropy;
    let d = JobOptions::default;
    let got = [
        digest(
            &[64, 32, 10],
            ce,
            Optimizer::sgd(0.1),
            32,
            d(),
            (true, true, true),
            false,
        ),
        digest(
            &[4, 3, 2],
            Loss::MeanSquaredError,
            Optimizer::sgd(0.05),
            8,
            d(),
            (true, true, true),
            false,
        ),
        digest(
            &[64, 16, 10],
            ce,
            Optimizer::adam(0.01),
            16,
            d(),
            (true, true, true),
            false,
        ),
        digest(
            &[8, 6, 4, 3],
            ce,
            Optimizer::adamw(0.01),
            4,
            d(),
            (true, true, true),
            false,
        ),
    ];
    for h in &got {
        println!("folded: {h:#018x}");
    }
    assert_eq!(got, FOLDED);
}

/// `sgd`, `mse` (SGD update fused), `adam` and `adamw` of [`DEFAULT`] with transposes folded.
const FOLDED: [u64; 4] = [
    0x0067dc41c63cdf03,
    0xc563880877fae7d9,
    0x73feaf6e5f49e49a,
    0x2a6bed1c0f0ca9e5,
];
