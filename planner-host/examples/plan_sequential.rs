//! A model written with the layer API (`tapeplan_planner::model::nn`), planned into a `.plan`
//! file that the command line trains, describes and exports like any other
//! (docs/getting-started/plan-on-the-host.md).
//!
//! ```sh
//! cargo run --release -p tapeplan-planner --example plan_sequential -- seq.plan
//! tapeplan train seq.plan --data waves.csv --init seq.plan.init.safetensors --epochs 5
//! ```
//!
//! The model takes the walkthrough's two-channel signals (`[2, 32]` per row, 64 CSV columns,
//! 5 classes): `Conv1d(2, 8, 5, padding=2)` → ReLU → `MaxPool1d(2)` → `Flatten` →
//! `Linear(128, 5)`, PyTorch's default initializations from the seeded stream (seed 7). The job:
//! softmax cross-entropy, Adam (lr 0.01), batch 16. The plan is written to the path given (default
//! `seq.plan`), its initial parameters beside it as `PLAN.init.safetensors` under their
//! `state_dict` names (`0.weight`, `0.bias`, `4.weight`, `4.bias`), the file `tapeplan train
//! --init` reads.

use std::path::PathBuf;

use anyhow::{Context, Result};
use tapeplan_planner::io::exchange::{export_safetensors, Param};
use tapeplan_planner::model::nn::{Conv1d, Flatten, Linear, MaxPool1d, ReLU, Sequential};
use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::{Loss, TrainingJob};

fn main() -> Result<()> {
    let plan = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "seq.plan".into()));
    let model = Sequential::new(&[2, 32])
        .push(Conv1d::new(2, 8, 5).padding(2))
        .push(ReLU)
        .push(MaxPool1d::new(2))
        .push(Flatten)
        .push(Linear::new(8 * 16, 5))
        .seed(7);
    let job = TrainingJob::for_model(&model)
        .loss(Loss::SoftmaxCrossEntropy)
        .optimizer(Optimizer::adam(0.01))
        .batch(16)
        .build()?;
    let bytes = job.schedule.to_bytes();
    std::fs::write(&plan, &bytes).with_context(|| format!("writing {}", plan.display()))?;
    let params: Vec<Param> = job
        .parameters
        .iter()
        .map(|p| Param {
            name: p.name.clone(),
            shape: p.shape,
            values: p.init.clone(),
        })
        .collect();
    let init = tapeplan_planner::io::exchange::with_suffix(&plan, ".init.safetensors");
    std::fs::write(&init, export_safetensors(&params, &[])?)
        .with_context(|| format!("writing {}", init.display()))?;
    for p in &job.parameters {
        println!("{:<10} {}", p.name, p.shape);
    }
    println!(
        "wrote {} ({} bytes, entries {}) and {}",
        plan.display(),
        bytes.len(),
        job.schedule
            .entries
            .iter()
            .map(|e| e.name.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        init.display()
    );
    Ok(())
}
