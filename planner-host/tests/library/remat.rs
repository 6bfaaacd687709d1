//! Rematerialization under an arena budget (`JobOptions::arena_budget_bytes`, `tapeplan plan
//! --arena-budget`): MNIST-1D's CNN and a deep MLP planned within a budget below their
//! unbudgeted arena train bit for bit as the unbudgeted plans do (and as the oracle does), at
//! every step; a budget no recomputation reaches is refused with the smallest arena found.

use tapeplan_planner::exec::oracle::Oracle;
use tapeplan_planner::exec::RuntimeModel;
use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::run::mnist1d_cnn;
use tapeplan_planner::model::{Activation, JobError, JobOptions, Loss, Mlp, Model, TrainingJob};
use tapeplan_planner::plan::PlanningError;
use tapeplan_planner::protocol::SplitMix64;

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn job_with(
    model: &dyn Model,
    optimizer: Optimizer,
    batch: usize,
    budget: Option<usize>,
) -> Result<TrainingJob, JobError> {
    TrainingJob::for_model(model)
        .loss(Loss::SoftmaxCrossEntropy)
        .optimizer(optimizer)
        .batch(batch)
        .options(JobOptions {
            arena_budget_bytes: budget,
            ..JobOptions::default()
        })
        .build()
}

/// Adam at 1e-2, MNIST-1D's paper's optimizer.
fn job(model: &dyn Model, batch: usize, budget: Option<usize>) -> Result<TrainingJob, JobError> {
    job_with(model, Optimizer::adam(1e-2), batch, budget)
}

/// Trains `budgeted` and `plain` (the same job planned without a budget) through the runtime
/// from the same parameters and batches, and the oracle beside them: every loss and parameter
/// identical at every step.
fn same_bits(
    plain: &TrainingJob,
    budgeted: &TrainingJob,
    features: usize,
    classes: usize,
    steps: usize,
) {
    let batch = plain.batch;
    let (pb, bb) = (plain.schedule.to_bytes(), budgeted.schedule.to_bytes());
    assert_ne!(pb, bb, "the budget changed nothing");
    let mut a = RuntimeModel::new(&pb).unwrap();
    let mut b = RuntimeModel::new(&bb).unwrap();
    for p in &plain.parameters {
        a.load_parameter(&p.name, &p.init).unwrap();
        b.load_parameter(&p.name, &p.init).unwrap();
    }
    let mut oracle = Oracle::with_initial_parameters(plain).unwrap();
    let mut rng = SplitMix64::new(7);
    for step in 0..steps {
        let x: Vec<f32> = (0..batch * features)
            .map(|_| 2.0 * rng.next_f32() - 1.0)
            .collect();
        let labels: Vec<f32> = (0..batch).map(|_| rng.below(classes) as f32).collect();
        let la = a.train_step(&x, &labels).unwrap();
        let lb = b.train_step(&x, &labels).unwrap();
        let lo = oracle.step(&x, &labels).unwrap();
        assert!(la.is_finite());
        assert_eq!(
            lb.to_bits(),
            la.to_bits(),
            "step {step}: loss, budgeted vs plain"
        );
        assert_eq!(
            lb.to_bits(),
            lo.to_bits(),
            "step {step}: loss, budgeted vs oracle"
        );
        for (p, v) in plain.parameters.iter().zip(&oracle.params) {
            let got = bits(&b.parameter(&p.name).unwrap());
            assert_eq!(
                got,
                bits(&a.parameter(&p.name).unwrap()),
                "step {step}: {}",
                p.name
            );
            assert_eq!(got, bits(&v.data), "step {step}: {} vs oracle", p.name);
        }
    }
}

#[test]
fn mnist1d_cnn_within_a_budget_trains_bit_for_bit() {
    let model = mnist1d_cnn(42);
    let plain = job(&model, 32, None).unwrap();
    let unbudgeted = plain.schedule.arena_elems * 4;
    // Find the smallest arena rematerialization reaches, then ask for exactly that.
    let Err(err) = job(&model, 32, Some(1)) else {
        panic!("a 1-byte budget is refused");
    };
    let JobError::Planning(PlanningError::OverBudget {
        smallest_bytes,
        unbudgeted_bytes,
        recomputed,
        ..
    }) = err
    else {
        panic!("expected OverBudget, got {err}");
    };
    assert_eq!(unbudgeted_bytes, unbudgeted);
    assert!(
        recomputed > 0 && smallest_bytes < unbudgeted,
        "{smallest_bytes} vs {unbudgeted}"
    );
    let budgeted = job(&model, 32, Some(smallest_bytes)).unwrap();
    let r = budgeted.remat.clone().unwrap();
    assert!(budgeted.schedule.arena_elems * 4 <= smallest_bytes);
    assert_eq!(r.unbudgeted_arena_bytes, unbudgeted);
    assert!(r.extra_instrs > 0 && r.extra_work > 0);
    eprintln!(
        "mnist1d_cnn batch 32: arena {unbudgeted} B -> {} B ({:+.1}%), {} values recomputed, +{} instructions, +{:.2}% work",
        r.arena_bytes,
        (r.arena_bytes as f64 - unbudgeted as f64) * 100.0 / unbudgeted as f64,
        r.recomputed_values,
        r.extra_instrs,
        r.extra_work as f64 * 100.0 / r.unbudgeted_work as f64
    );
    same_bits(&plain, &budgeted, 40, 10, 5);
}

#[test]
fn a_budget_already_met_changes_nothing() {
    let model = mnist1d_cnn(42);
    let plain = job(&model, 4, None).unwrap();
    let arena = plain.schedule.arena_elems * 4;
    let same = job(&model, 4, Some(arena)).unwrap();
    assert_eq!(same.schedule.to_bytes(), plain.schedule.to_bytes());
    assert_eq!(same.remat.unwrap().recomputed_values, 0);
}

#[test]
fn deep_mlp_within_a_budget_trains_bit_for_bit() {
    let mlp = Mlp {
        sizes: vec![64, 128, 128, 128, 128, 128, 10],
        activation: Activation::Tanh,
    };
    let model = mlp.model(0.0, 3);
    let sgd = || Optimizer::sgd(0.1);
    let plain = job_with(&model, sgd(), 256, None).unwrap();
    let unbudgeted = plain.schedule.arena_elems * 4;
    let budgeted = job_with(&model, sgd(), 256, Some(unbudgeted - 1)).unwrap();
    let r = budgeted.remat.clone().unwrap();
    assert!(r.arena_bytes < unbudgeted && r.recomputed_values > 0);
    eprintln!(
        "mlp 64-128x5-10 batch 256, SGD: arena {unbudgeted} B -> {} B, {} values recomputed, +{} instructions",
        r.arena_bytes, r.recomputed_values, r.extra_instrs
    );
    same_bits(&plain, &budgeted, 64, 10, 5);
}
