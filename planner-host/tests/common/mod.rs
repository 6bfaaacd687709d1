//! What the step-loop tests (`no_alloc`, `bound_inputs`) share: planned MLP jobs and their
//! initial parameters.

use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::{glorot_uniform, Activation, JobOptions, Loss, Mlp, TrainingJob};
use tapeplan_planner::{FusionPolicy, PlanOptions};

/// A planned MLP job: layer `sizes`, `act`, `loss`, `optimizer`, `batch`, `options`.
pub fn mlp_job(
    sizes: &[usize],
    act: Activation,
    loss: Loss,
    optimizer: Optimizer,
    batch: usize,
    options: JobOptions,
) -> TrainingJob {
    let mlp = Mlp {
        sizes: sizes.to_vec(),
        activation: act,
    };
    TrainingJob::build_with(mlp, loss, optimizer, batch, options).expect("plan")
}

/// The default options, fused chains on or off.
pub fn fused(fuse: bool) -> JobOptions {
    JobOptions {
        planning: PlanOptions {
            fusion: FusionPolicy::all_or_off(fuse),
            ..PlanOptions::default()
        },
        ..Default::default()
    }
}

/// Adam with PyTorch's defaults at lr 1e-3.
pub fn adam() -> Optimizer {
    Optimizer::Adam {
        lr: 1e-3,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        decoupled_weight_decay: 0.0,
    }
}

/// The job's `(name, values)` initial parameters: the model's own (a CNN's), else Glorot
/// uniform from `seed`.
pub fn initial_parameters(job: &TrainingJob, seed: u64) -> Vec<(String, Vec<f32>)> {
    let shapes = job.parameter_shapes();
    let values: Vec<Vec<f32>> = if job.parameters.iter().all(|p| !p.init.is_empty()) {
        job.parameters.iter().map(|p| p.init.clone()).collect()
    } else {
        glorot_uniform(&shapes, seed)
    };
    shapes.into_iter().map(|(n, _)| n).zip(values).collect()
}
