//! Issue 14's memory table: for the digits MLP (W1) and MNIST-1D's CNN, the arena of the
//! training step against the liveness lower bound of its schedule, against a retain-everything
//! reverse scan, against the same schedule in the tape's order (every gradient materialized,
//! then every update), without SGD's update fused into its weight gradient's product
//! (`PlanOptions::fuse_sgd` off: every weight gradient in a buffer), and with rematerialization
//! at the smallest arena it reaches; and the training step's memory over the inference pass's
//! at the same batch.
//!
//! ```sh
//! cargo run --release -p tapeplan-planner --example memory_table
//! ```
//!
//! Every figure is in bytes and comes from the planner's own memory report
//! ([`tapeplan_planner::MemoryReport`]). "Input batch excluded" subtracts the entry's input
//! bindings (the features and the labels), which a device may stream instead of holding.

use anyhow::{bail, Result};
use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::run::mnist1d_cnn;
use tapeplan_planner::model::{Activation, JobError, JobOptions, Loss, Mlp, Model, TrainingJob};
use tapeplan_planner::plan::{PlanOptions, PlanningError};

/// One row: a model, its batch and optimizer.
struct Row {
    name: &'static str,
    model: Box<dyn Model>,
    batch: usize,
    optimizer: Optimizer,
    /// Trainable parameters (name patterns); empty: all.
    trainable: &'static [&'static str],
}

fn job(row: &Row, budget: Option<usize>, fuse_sgd: bool) -> Result<TrainingJob, JobError> {
    let mut builder = TrainingJob::for_model(row.model.as_ref());
    if !row.trainable.is_empty() {
        builder = builder.trainable(row.trainable.iter().copied());
    }
    builder
        .loss(Loss::SoftmaxCrossEntropy)
        .optimizer(row.optimizer)
        .batch(row.batch)
        .options(JobOptions {
            eval_entries: Some(false),
            arena_budget_bytes: budget,
            planning: PlanOptions {
                fuse_sgd,
                ..PlanOptions::default()
            },
            ..JobOptions::default()
        })
        .build()
}

fn main() -> Result<()> {
    let w1 = Mlp {
        sizes: vec![64, 32, 10],
        activation: Activation::Tanh,
    };
    let rows = [
        Row {
            name: "W1: MLP 64-32-10 tanh, SGD, unguarded",
            model: Box::new(w1.model(0.0, 42)),
            batch: 32,
            optimizer: Optimizer::sgd(0.1),
            trainable: &[],
        },
        Row {
            name: "MNIST-1D CNN (the paper's ConvBase), Adam",
            model: Box::new(mnist1d_cnn(42)),
            batch: 100,
            optimizer: Optimizer::adam(1e-2),
            trainable: &[],
        },
        Row {
            name: "MNIST-1D CNN, SGD",
            model: Box::new(mnist1d_cnn(42)),
            batch: 100,
            optimizer: Optimizer::sgd(1e-2),
            trainable: &[],
        },
        // Sparse update (the Tiny Training Engine's, Lin et al. 2022): every bias, and the
        // weights of the last convolution and the head only.
        Row {
            name: "MNIST-1D CNN, Adam, sparse update (biases, last conv, head)",
            model: Box::new(mnist1d_cnn(42)),
            batch: 100,
            optimizer: Optimizer::adam(1e-2),
            trainable: &["*.bias", "4.weight", "7.weight"],
        },
        Row {
            name: "MNIST-1D CNN, Adam, head only",
            model: Box::new(mnist1d_cnn(42)),
            batch: 100,
            optimizer: Optimizer::adam(1e-2),
            trainable: &["7.*"],
        },
    ];
    println!(
        "| model | batch | train_step arena | input batch | arena, input excluded | liveness lower bound | retain-everything | tape order (all gradients, then updates) | SGD update not fused, input excluded | smallest with --arena-budget | forward entry | training / inference |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in &rows {
        let job = job(row, None, true)?;
        let unfused = job_train_bytes(row)? - input_bytes_of(&job)?;
        let entry = |name: &str| {
            job.schedule
                .entries
                .iter()
                .find(|e| e.name == name)
                .ok_or_else(|| anyhow::anyhow!("no entry {name}"))
        };
        let train = entry("train_step")?;
        let forward = entry("forward")?;
        let input_bytes = input_bytes_of(&job)?;
        let r = &train.report;
        let smallest = match job_smallest(row) {
            Ok(b) => b,
            Err(e) => bail!("{}: {e}", row.name),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} ({:.3}x) | {} | {} | {} | {} | {} | {:.2}x |",
            row.name,
            row.batch,
            r.entry_bytes,
            input_bytes,
            r.entry_bytes - input_bytes,
            r.lower_bound_bytes,
            r.entry_bytes as f64 / r.lower_bound_bytes.max(1) as f64,
            r.retain_everything_bytes,
            r.tape_order_bytes,
            unfused,
            smallest,
            forward.report.entry_bytes,
            r.entry_bytes as f64 / forward.report.entry_bytes.max(1) as f64,
        );
    }
    Ok(())
}

/// The training step's bytes with every weight gradient in a buffer (no SGD fusion).
fn job_train_bytes(row: &Row) -> Result<usize> {
    let job = job(row, None, false)?;
    Ok(train_step(&job)?.report.entry_bytes)
}

/// The `train_step` entry.
fn train_step(job: &TrainingJob) -> Result<&tapeplan_planner::plan::PlannedEntry> {
    job.schedule
        .entries
        .iter()
        .find(|e| e.name == "train_step")
        .ok_or_else(|| anyhow::anyhow!("no entry train_step"))
}

/// The bytes of the training step's input bindings (the features and the labels).
fn input_bytes_of(job: &TrainingJob) -> Result<usize> {
    Ok(train_step(job)?
        .inputs
        .iter()
        .map(|(_, t)| job.schedule.tensors[*t as usize].shape.elems() * 4)
        .sum())
}

/// The smallest arena rematerialization reaches: asking for 1 byte is refused with it.
fn job_smallest(row: &Row) -> Result<usize> {
    match job(row, Some(1), true) {
        Err(JobError::Planning(PlanningError::OverBudget { smallest_bytes, .. })) => {
            Ok(smallest_bytes)
        }
        Err(e) => Err(e.into()),
        Ok(_) => bail!("a 1-byte budget was met"),
    }
}
