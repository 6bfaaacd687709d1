//! `tapeplan train`: train from a plan through the `no_std` runtime on a data set, with
//! checkpoints, a loss curve and optional exports.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use tapeplan_core::format::BindingKind;
use tapeplan_planner::exec::runtime::RuntimeModel;
use tapeplan_planner::exec::training::{
    train_epochs, EpochOrder, EpochSummary, Flow, Step, StepOutcome, TrainObserver,
};
use tapeplan_planner::io::data;
use tapeplan_planner::io::exchange;
use tapeplan_planner::io::inspect::PlanInfo;
use tapeplan_planner::io::plot::LossCurve;
use tapeplan_planner::model::glorot_uniform;

use super::args::{ModelArgs, TrainOutputs};
use super::{not_a_checkpoint, planning_options_need_no_plan, read};

/// `tapeplan train`'s options.
#[derive(Args)]
pub struct TrainArgs {
    /// The plan (from `tapeplan plan`). Without one, the model options below are planned
    /// first and the plan is written to `model.plan` (so checkpoints can be exported later).
    pub plan: Option<PathBuf>,
    #[command(flatten)]
    pub model: ModelArgs,
    /// A CSV (optionally gzip) file, one sample per row, the integer label last. Default:
    /// the bundled handwritten digits set.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Epochs over the training split.
    #[arg(long, default_value_t = 10)]
    pub epochs: usize,
    /// Seed of the Glorot-uniform initialization and the per-epoch shuffles.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Seed of the train/test split.
    #[arg(long, default_value_t = 0)]
    pub split_seed: u64,
    /// Fraction of rows used for training (the rest is the test split). Default: the
    /// bundled digits' fixed 1437/360 split (as `tapeplan demo`), else 0.8.
    #[arg(long)]
    pub train_fraction: Option<f64>,
    /// Multiply every feature of `--data` by this (the bundled digits are already scaled by
    /// 1/16 = 0.0625, their pixel counts' range; a raw digits CSV needs `--scale 0.0625`).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f32,
    #[command(flatten)]
    pub outputs: TrainOutputs,
}

/// `tapeplan train`.
///
/// # Errors
/// Bad options or data (features that `--scale` makes infinite), a rejected plan or checkpoint
/// (one with non-finite parameters too), runtime errors, unwritable outputs (checked before the
/// first epoch), an epoch in which the guard refused every step, and a non-finite loss of a
/// plan that writes its updates in place.
pub fn train(args: TrainArgs) -> Result<ExitCode> {
    let TrainArgs {
        plan,
        model: model_args,
        data: data_path,
        epochs,
        seed,
        split_seed,
        train_fraction,
        scale,
        outputs,
    } = args;
    let plan = match plan {
        Some(p) => {
            planning_options_need_no_plan(&model_args, &p)?;
            p
        }
        None => {
            let job = model_args.job()?;
            let p = PathBuf::from("model.plan");
            std::fs::write(&p, job.schedule.to_bytes())
                .with_context(|| format!("writing {}", p.display()))?;
            println!(
                "planned {} ({}, {} optimizer{}) into {}",
                model_args
                    .layers
                    .iter()
                    .map(|w| w.to_string())
                    .collect::<Vec<_>>()
                    .join("-"),
                model_args.activation_name(),
                job.optimizer.name(),
                if job.state_specs.iter().any(|s| s.name == "rng.key") {
                    ", dropout"
                } else {
                    ""
                },
                p.display()
            );
            p
        }
    };
    let bytes = std::fs::read(&plan).with_context(|| format!("reading {}", plan.display()))?;
    not_a_checkpoint(&plan, &bytes)?;
    let mut model =
        RuntimeModel::new(&bytes).with_context(|| format!("loading {}", plan.display()))?;
    let info = PlanInfo::decode(&bytes);
    let x_shape = info
        .binding_shape("train_step", BindingKind::Input, "x")
        .context("the plan's train_step has no input x")?;
    if info
        .binding_shape("train_step", BindingKind::Input, "labels")
        .is_none()
    {
        bail!("tapeplan train supports classification plans (an input `labels`)");
    }
    let (batch, d_in) = (x_shape.dim(0).unwrap_or(0), x_shape.dim(1).unwrap_or(0));
    let dataset = match &data_path {
        None => data::digits()?,
        Some(p) => data::load_csv(p, d_in).with_context(|| format!("loading {}", p.display()))?,
    };
    if dataset.n_features() != d_in {
        bail!(
            "the data has {} features per row; the plan's input x is {}",
            dataset.n_features(),
            x_shape
        );
    }
    let classes = info
        .binding_shape("forward", BindingKind::Output, "logits")
        .and_then(|s| s.dim(1))
        .unwrap_or(0);
    if let Some((row, &label)) = dataset
        .labels
        .iter()
        .enumerate()
        .find(|(_, &l)| usize::from(l) >= classes)
    {
        bail!(
            "row {} has label {label}, but the plan has {classes} classes (0..{}): plan a model whose last layer is at least {} wide",
            row + 1,
            classes.saturating_sub(1),
            usize::from(label) + 1
        );
    }

    let mut dataset = dataset;
    if scale != 1.0 {
        if !scale.is_finite() {
            bail!("--scale must be finite");
        }
        for v in &mut dataset.features {
            *v *= scale;
        }
        // The data was checked finite when loaded; scaling can overflow it to infinity, and
        // a guarded plan would then refuse every step.
        if let Some(i) = dataset.features.iter().position(|v| !v.is_finite()) {
            bail!(
                "--scale {scale:?} turns feature {} of row {} into {}: every training step would be non-finite; use a smaller --scale",
                i % d_in.max(1) + 1,
                i / d_in.max(1) + 1,
                dataset.features[i]
            );
        }
    }
    let n_train = match (train_fraction, &data_path) {
        (Some(f), _) if !(0.0..=1.0).contains(&f) => {
            bail!("--train-fraction must be in [0, 1]")
        }
        (Some(f), _) => ((dataset.len() as f64) * f).round() as usize,
        (None, None) => data::DIGITS_TRAIN_ROWS,
        (None, Some(_)) => ((dataset.len() as f64) * 0.8).round() as usize,
    };
    let (train, test) = dataset.split_seeded(split_seed, n_train);
    if train.len() < batch {
        bail!(
            "the training split has {} rows, fewer than one batch of {batch}",
            train.len()
        );
    }
    // Trainable parameters from the seeded initializer; optimizer state (names with a
    // `.`) was written by the plan's `init` entry when the model was loaded.
    let shapes: Vec<_> = info
        .parameters()
        .into_iter()
        .filter(|(n, _)| !tapeplan_planner::model::optim::is_state_name(n))
        .collect();
    for ((name, _), v) in shapes.iter().zip(glorot_uniform(&shapes, seed)) {
        model.load_parameter(name, &v)?;
    }
    // Every output, checked before training so no work is lost to an unwritable path.
    let plot = plot_path(&outputs, &plan);
    let history = outputs.checkpoint.as_deref().map(losses_path);
    for out in [
        outputs.checkpoint.as_ref(),
        history.as_ref(),
        outputs.save_params.as_ref(),
        outputs.save_test_logits.as_ref(),
        Some(&plot),
    ]
    .into_iter()
    .flatten()
    {
        exchange::check_writable(out)?;
    }
    if epochs == 0 {
        bail!("--epochs must be at least 1");
    }
    let start_epoch = match &outputs.resume {
        Some(path) => resume(&mut model, path, &plan)?,
        None => 0,
    };
    if start_epoch >= epochs {
        println!(
            "the checkpoint has completed {start_epoch} epochs; --epochs {epochs} is the total, so nothing is left to train"
        );
    }
    let mut curve = LossCurve::starting_at(start_epoch * (train.len() / batch));
    // The curve so far, kept beside the checkpoint (`FILE.losses.csv`). It is written before
    // the checkpoint, so after a kill between the two it may hold one epoch more than the
    // checkpoint: that epoch is cut off (docs/checkpoints.md).
    if let Some(path) = &outputs.resume {
        let history = losses_path(path);
        if let Ok(text) = std::fs::read_to_string(&history) {
            match LossCurve::from_csv(&text).map(|old| old.truncated_to(curve.first_step)) {
                Ok(Some(old)) if !old.step_losses.is_empty() => {
                    curve = old;
                }
                Ok(Some(_)) => {}
                Ok(None) => println!(
                    "{} does not end where the checkpoint does: the loss curve starts at the resumed epoch",
                    history.display()
                ),
                Err(e) => println!(
                    "{}: {e}: the loss curve starts at the resumed epoch",
                    history.display()
                ),
            }
        }
    }
    println!(
        "training {} for {epochs} epoch{}: {} train rows, {} test rows, batch {batch}, math {}, arena {} bytes",
        plan.display(),
        if epochs == 1 { "" } else { "s" },
        train.len(),
        test.len(),
        model.plan().math(),
        model.arena_bytes()
    );
    let mut progress = Progress {
        bar: ProgressBar::hidden(),
        curve: &mut curve,
        checkpoint: outputs.checkpoint.as_deref(),
    };
    let order = EpochOrder { seed, batch };
    train_epochs(
        &mut model,
        &train,
        order,
        start_epoch..epochs,
        &mut progress,
    )?;
    if !test.is_empty() {
        let acc = model.accuracy(&test.features, &test.labels, d_in, batch)?;
        println!("test accuracy: {acc:.3}");
    }
    write_train_outputs(
        &mut model,
        &outputs,
        &plot,
        &plan,
        &curve,
        &test,
        (d_in, batch),
    )?;
    Ok(ExitCode::SUCCESS)
}

/// The progress bar, the loss curve and the checkpoints of a `train` run.
struct Progress<'a> {
    bar: ProgressBar,
    curve: &'a mut LossCurve,
    checkpoint: Option<&'a Path>,
}

impl TrainObserver for Progress<'_> {
    type Error = anyhow::Error;

    fn epoch_start(&mut self, epoch: usize, steps: usize) -> Result<()> {
        self.bar = ProgressBar::new(steps as u64).with_style(
            ProgressStyle::with_template("epoch {prefix:>3} [{bar:30}] {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        self.bar.set_prefix(format!("{}", epoch + 1));
        Ok(())
    }

    fn step(&mut self, _: &mut RuntimeModel<'_>, step: Step<'_>) -> Result<Flow> {
        match step.outcome {
            // A guarded plan refused to commit a diverging step: nothing changed; skip the
            // batch.
            StepOutcome::Refused(_) => {}
            StepOutcome::Loss(loss) if loss.is_finite() => {
                self.curve.push_step(loss);
                self.bar.set_message(format!("loss {loss:.4}"));
            }
            StepOutcome::Loss(loss) => {
                self.bar.finish_and_clear();
                bail!(
                    "epoch {}: the loss is {loss}; this plan writes updates in place \
                     (--no-guard), so the parameters are no longer finite and nothing \
                     more is saved. Plan without --no-guard to skip such steps, or \
                     lower the learning rate",
                    step.epoch + 1
                );
            }
        }
        self.bar.inc(1);
        Ok(Flow::Continue)
    }

    fn epoch_end(&mut self, model: &mut RuntimeModel<'_>, s: &EpochSummary) -> Result<Flow> {
        if s.refused > 0 {
            println!(
                "epoch {:>3}: skipped {} non-finite step(s) (guarded: nothing committed)",
                s.epoch + 1,
                s.refused
            );
        }
        self.bar.finish_and_clear();
        if s.steps == 0 && s.refused > 0 {
            bail!(
                "epoch {}: the guard refused all {} steps (a non-finite loss or update each time), so nothing was committed and training made no progress; check the data and --scale, the starting parameters (--resume), and the learning rate",
                s.epoch + 1,
                s.refused
            );
        }
        self.curve.end_epoch(s.steps);
        println!("epoch {:>3}: mean loss {:.6}", s.epoch + 1, s.mean_loss);
        if let Some(path) = self.checkpoint {
            // The curve first, then the checkpoint: a kill between the two leaves the curve
            // one epoch ahead, which --resume cuts back (docs/checkpoints.md).
            let blob = exchange::checkpoint_of(model, s.epoch as u32 + 1)?;
            exchange::write_atomic(&losses_path(path), self.curve.to_csv().as_bytes())?;
            exchange::write_atomic(path, &blob)?;
        }
        Ok(Flow::Continue)
    }
}

/// Where the loss curve of checkpoint `ckpt` is kept: `ckpt` with `.losses.csv` appended.
fn losses_path(ckpt: &Path) -> PathBuf {
    exchange::with_suffix(ckpt, ".losses.csv")
}

/// Where the loss curve is drawn: `--plot`, else the plan's path with `.loss.svg`.
fn plot_path(outputs: &TrainOutputs, plan: &Path) -> PathBuf {
    outputs
        .plot
        .clone()
        .unwrap_or_else(|| exchange::with_suffix(plan, ".loss.svg"))
}

/// Restores `--resume FILE` into `model`; answers the epochs the checkpoint had completed.
fn resume(
    model: &mut RuntimeModel<'_>,
    path: &std::path::Path,
    plan: &std::path::Path,
) -> Result<usize> {
    let blob = read(path)?;
    let ckpt = tapeplan_runtime::Checkpoint::parse(&blob)
        .map_err(|e| anyhow::anyhow!("{}: checkpoint rejected: {e}", path.display()))?;
    let plan_id = model.plan().plan_id();
    if ckpt.plan_id() != plan_id {
        bail!(
            "{} is a checkpoint of plan {:08x}, not of {} (plan {plan_id:08x}): resume with the plan it was saved from (the same model planned with another --no-guard, --no-fusion or --math is another plan)",
            path.display(),
            ckpt.plan_id(),
            plan.display(),
        );
    }
    exchange::restore_into_model(model, &ckpt)
        .with_context(|| format!("restoring {}", path.display()))?;
    println!(
        "resumed from {} after epoch {}",
        path.display(),
        ckpt.sequence()
    );
    Ok(ckpt.sequence() as usize)
}

/// The loss curve, and the parameters and test logits when asked for.
fn write_train_outputs(
    model: &mut RuntimeModel<'_>,
    outputs: &TrainOutputs,
    plot: &Path,
    plan: &Path,
    curve: &LossCurve,
    test: &data::Dataset,
    (d_in, batch): (usize, usize),
) -> Result<()> {
    if !curve.step_losses.is_empty() {
        let title = format!("{}: training loss", plan.display());
        std::fs::write(plot, curve.to_svg(&title, 800, 480)?)
            .with_context(|| format!("writing {}", plot.display()))?;
        println!("loss curve: {}", plot.display());
    }
    if let Some(path) = &outputs.save_params {
        let st = exchange::export_plan_params(model.plan(), model.persistent())?;
        std::fs::write(path, st).with_context(|| format!("writing {}", path.display()))?;
        println!("parameters: {}", path.display());
    }
    if let Some(path) = &outputs.save_test_logits {
        let logits = exchange::forward_logits(model, &test.features, test.len(), d_in, batch)?;
        let st = exchange::reference_file(&test.features, &test.labels, &logits)?;
        std::fs::write(path, st).with_context(|| format!("writing {}", path.display()))?;
        println!("test logits: {}", path.display());
    }
    Ok(())
}
