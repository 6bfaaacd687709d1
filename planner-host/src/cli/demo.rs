//! `tapeplan demo`: the main job end to end. Plan the digits MLP, train it through the `no_std`
//! runtime, check every step bit for bit against the oracle, report test accuracy.

use std::process::ExitCode;

use anyhow::Result;

use tapeplan_planner::exec::oracle::{first_difference, same_bits, BitDiff, Oracle};
use tapeplan_planner::exec::runtime::{RuntimeModel, TrainError};
use tapeplan_planner::exec::training::{
    train_epochs, EpochOrder, EpochSummary, Flow, Step, StepOutcome, TrainObserver,
};
use tapeplan_planner::io::data;
use tapeplan_planner::model::glorot_uniform;

use super::args::{
    ActivationArg, ArithArg, FrozenBnArg, LossArg, MathArg, ModelArgs, OptimizerArg,
};
use super::plan::{print_fusion, print_report, reports};

/// `tapeplan demo [--epochs N] [--seed S] [--math M]`.
///
/// # Errors
/// Planning, runtime and oracle errors. A bit difference is not an error: it is reported, and
/// the answer is [`ExitCode::FAILURE`].
pub fn demo(epochs: usize, seed: u64, math: MathArg) -> Result<ExitCode> {
    let batch = 32;
    let digits = data::digits()?;
    let (train, test) = digits.split_seeded(0, data::DIGITS_TRAIN_ROWS);
    println!(
        "digits: {} train / {} test rows, 64 features, 10 classes (UCI optdigits, via scikit-learn)",
        train.len(),
        test.len()
    );
    let args = ModelArgs {
        onnx: None,
        trainable: Vec::new(),
        frozen: Vec::new(),
        frozen_bn: FrozenBnArg::Train,
        layers: vec![64, 32, 10],
        activation: ActivationArg::Tanh,
        loss: LossArg::Ce,
        batch,
        lr: 0.1,
        optimizer: OptimizerArg::Sgd,
        momentum: 0.9,
        weight_decay: 0.01,
        dropout: 0.0,
        dropout_seed: 1,
        no_guard: false,
        no_fusion: false,
        fusion: None,
        no_sgd_fusion: false,
        no_fold_transposes: false,
        arena_budget: None,
        math,
        arith: ArithArg::Separate,
    };
    let job = args.job()?;
    let bytes = job.schedule.to_bytes();
    println!(
        "plan: MLP 64-32-10 tanh, softmax cross-entropy, SGD lr 0.1, batch {batch}, math {}: {} tape nodes, {} bytes, {} instructions (forward {}, train_step {})",
        job.schedule.math,
        job.tape.len(),
        bytes.len(),
        job.schedule.entries.iter().map(|e| e.instrs.len()).sum::<usize>(),
        job.schedule.entry("forward").map(|e| e.instrs.len()).unwrap_or(0),
        job.schedule.entry("train_step").map(|e| e.instrs.len()).unwrap_or(0),
    );
    println!("memory report:");
    print_report(&reports(&job));
    print_fusion(&job, &args)?;

    let mut model = RuntimeModel::new(&bytes)?;
    let shapes = job.parameter_shapes();
    let init = glorot_uniform(&shapes, seed);
    for ((name, _), v) in shapes.iter().zip(&init) {
        model.load_parameter(name, v)?;
    }
    let mut check = BitwiseCheck {
        oracle: Oracle::new(&job, &init)?,
        names: shapes.iter().map(|(n, _)| n.as_str()).collect(),
        steps: 0,
        identical: 0,
    };
    let order = EpochOrder { seed, batch };
    if train_epochs(&mut model, &train, order, 0..epochs, &mut check)? == Flow::Stop {
        return Ok(ExitCode::FAILURE);
    }
    println!(
        "bitwise: {}/{} steps identical",
        check.identical, check.steps
    );
    let acc = model.accuracy(&test.features, &test.labels, 64, batch)?;
    println!("test accuracy: {acc:.3}");
    Ok(ExitCode::SUCCESS)
}

/// Steps the oracle beside the runtime and compares the loss and every parameter after each
/// step; stops at the first difference, which it reports.
struct BitwiseCheck<'j> {
    oracle: Oracle<'j>,
    names: Vec<&'j str>,
    steps: usize,
    identical: usize,
}

impl TrainObserver for BitwiseCheck<'_> {
    type Error = anyhow::Error;

    fn step(&mut self, model: &mut RuntimeModel<'_>, step: Step<'_>) -> Result<Flow> {
        let loss = match step.outcome {
            StepOutcome::Loss(loss) => loss,
            StepOutcome::Refused(e) => return Err(TrainError::Run(e).into()),
        };
        let oracle_loss = self.oracle.step(step.x, step.labels)?;
        self.steps += 1;
        let runtime_params: Vec<Vec<f32>> = self
            .names
            .iter()
            .map(|n| model.parameter(n))
            .collect::<Result<_, _>>()?;
        let left: Vec<&[f32]> = runtime_params.iter().map(Vec::as_slice).collect();
        let right: Vec<&[f32]> = self
            .oracle
            .params
            .iter()
            .map(|t| t.data.as_slice())
            .collect();
        let diff = if same_bits(loss, oracle_loss) {
            first_difference(self.names.iter().copied(), &left, &right)
        } else {
            Some(BitDiff {
                tensor: "loss".into(),
                element: 0,
                left_bits: loss.to_bits(),
                right_bits: oracle_loss.to_bits(),
            })
        };
        if let Some(d) = diff {
            println!("bitwise: {}/{} steps identical", self.identical, self.steps);
            eprintln!(
                "error: step {} (epoch {}): runtime vs oracle differ: {d}",
                self.steps,
                step.epoch + 1
            );
            return Ok(Flow::Stop);
        }
        self.identical += 1;
        Ok(Flow::Continue)
    }

    fn epoch_end(&mut self, _: &mut RuntimeModel<'_>, summary: &EpochSummary) -> Result<Flow> {
        println!(
            "epoch {:>2}: mean loss {:.6}",
            summary.epoch + 1,
            summary.mean_loss
        );
        Ok(Flow::Continue)
    }
}
