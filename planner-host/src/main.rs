//! `tapeplan`: plan a model, describe a plan or tape, train from a plan through the `no_std`
//! runtime, and run the whole job end to end (`tapeplan demo`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};

use tapeplan_core::format::BindingKind;
use tapeplan_planner::data;
use tapeplan_planner::exchange;
use tapeplan_planner::inspect::PlanInfo;
use tapeplan_planner::model::{glorot_uniform, Activation, Loss, Mlp};
use tapeplan_planner::optim::Optimizer;
use tapeplan_planner::oracle::{first_difference, same_bits, JobOptions, Oracle, TrainingJob};
use tapeplan_planner::planner::PlanOptions;
use tapeplan_planner::plot::LossCurve;
use tapeplan_planner::rng::SplitMix64;
use tapeplan_planner::train::{RuntimeModel, TrainError};
use tapeplan_planner::MemoryReport;
use tapeplan_runtime::ExecError;

#[derive(Parser)]
#[command(
    name = "tapeplan",
    version,
    about = "Plan a differentiable computation into a static arena and train it with a no_std runtime, bitwise equal to the host oracle"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Plan a model (forward + recorded gradient + SGD update) into a .plan file.
    Plan {
        #[command(flatten)]
        model: ModelArgs,
        /// Where to write the plan.
        #[arg(short, long, default_value = "model.plan")]
        output: PathBuf,
    },
    /// List a .plan file (entries, instructions, bindings), or a model's tape with --tape.
    Describe {
        /// The plan to list.
        plan: Option<PathBuf>,
        /// List the recorded tape of the model given by the model options instead.
        #[arg(long)]
        tape: bool,
        /// With --tape: run the tape once in f32 and once in f64 (the same kernels over another
        /// element) on a batch of the digits data (or seeded random inputs for other widths)
        /// and report every node's rounding error, max absolute and relative.
        #[arg(long, requires = "tape")]
        error_report: bool,
        #[command(flatten)]
        model: ModelArgs,
    },
    /// Train from a .plan file through the no_std runtime on a CSV data set.
    Train {
        /// The plan (from `tapeplan plan`). Without one, the model options below are planned
        /// first and the plan is written to `model.plan` (so checkpoints can be exported later).
        plan: Option<PathBuf>,
        #[command(flatten)]
        model: ModelArgs,
        /// A CSV (optionally gzip) file, one sample per row, the integer label last. Default:
        /// the bundled handwritten digits set.
        #[arg(long)]
        data: Option<PathBuf>,
        /// Epochs over the training split.
        #[arg(long, default_value_t = 10)]
        epochs: usize,
        /// Seed of the Glorot-uniform initialization and the per-epoch shuffles.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Seed of the train/test split.
        #[arg(long, default_value_t = 0)]
        split_seed: u64,
        /// Fraction of rows used for training (the rest is the test split). Default: the
        /// bundled digits' fixed 1437/360 split (as `tapeplan demo`), else 0.8.
        #[arg(long)]
        train_fraction: Option<f64>,
        /// Multiply every feature of `--data` by this (the bundled digits are already scaled by
        /// 1/16 = 0.0625, their pixel counts' range; a raw digits CSV needs `--scale 0.0625`).
        #[arg(long, default_value_t = 1.0)]
        scale: f32,
        #[command(flatten)]
        outputs: TrainOutputs,
    },
    /// Convert a checkpoint's model parameters to a safetensors file with PyTorch's
    /// nn.Sequential names and layouts (`w1 -> 0.weight` transposed, `b1 -> 0.bias`, ...).
    Export {
        /// The plan the checkpoint belongs to.
        plan: PathBuf,
        /// The checkpoint (from `tapeplan train --checkpoint` or `tapeplan import`).
        #[arg(long)]
        checkpoint: PathBuf,
        /// Where to write the safetensors file.
        #[arg(short, long, default_value = "model.safetensors")]
        output: PathBuf,
    },
    /// Convert a safetensors file (PyTorch nn.Sequential of nn.Linear names and layouts) into a
    /// checkpoint of a plan, to train from with `tapeplan train --resume`.
    Import {
        /// The safetensors file.
        safetensors: PathBuf,
        /// The plan whose parameters it holds.
        plan: PathBuf,
        /// Keep the rest of the training state (optimizer state, step, epoch count) from this
        /// checkpoint of the same plan; without it that state is the plan's initial state.
        #[arg(long)]
        base: Option<PathBuf>,
        /// Where to write the checkpoint.
        #[arg(short, long, default_value = "model.ckpt")]
        output: PathBuf,
    },
    /// The main job end to end: plan the digits MLP, train it through the runtime, check every
    /// step bit for bit against the oracle, report test accuracy.
    Demo {
        /// Epochs over the training split.
        #[arg(long, default_value_t = 10)]
        epochs: usize,
        /// Seed of the initialization and the per-epoch shuffles.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Math profile of the transcendental kernels (see `plan --help`).
        #[arg(long, value_enum, default_value_t = MathArg::Precise)]
        math: MathArg,
    },
    /// Check a device's training transcript bit for bit against the host oracle (format:
    /// `tapeplan_planner::verify`); exits non-zero on any difference.
    Verify {
        /// The transcript the device sent (`-` for standard input).
        transcript: PathBuf,
        /// The run the device was meant to do (a run description file, e.g.
        /// firmware-demo/models/demo.run); without it, the transcript's own `config` is used.
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

/// `tapeplan train`'s state files and outputs.
#[derive(Args, Clone)]
struct TrainOutputs {
    /// Write the whole training state to this checkpoint after every epoch (atomically:
    /// FILE.tmp, then renamed over FILE), and the loss curve so far to FILE.losses.csv (which
    /// --resume FILE reads back, so a resumed run plots the whole curve).
    #[arg(long, value_name = "FILE")]
    checkpoint: Option<PathBuf>,
    /// Restore the training state from this checkpoint of the same plan and go on from the
    /// epoch it reached (give the same --seed and data for a bit-identical continuation).
    #[arg(long, value_name = "FILE")]
    resume: Option<PathBuf>,
    /// Write the trained parameters as safetensors (PyTorch nn.Sequential names).
    #[arg(long, value_name = "FILE")]
    save_params: Option<PathBuf>,
    /// Write the test split and the runtime's logits on it as safetensors (x, labels,
    /// logits), for scripts/check_export.py.
    #[arg(long, value_name = "FILE")]
    save_test_logits: Option<PathBuf>,
    /// Where to draw the loss curve (SVG). Default: the plan's path with `.loss.svg`.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
}

fn read(path: &std::path::Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

fn parse_plan<'b>(path: &std::path::Path, bytes: &'b [u8]) -> Result<tapeplan_runtime::Plan<'b>> {
    tapeplan_runtime::Plan::parse(bytes)
        .map_err(|e| anyhow::anyhow!("{}: plan rejected: {e}", path.display()))
}

#[derive(Clone, Copy, ValueEnum)]
enum ActivationArg {
    Tanh,
    Relu,
}

/// The math profile (`tapeplan_core::MathProfile`).
#[derive(Clone, Copy, ValueEnum)]
enum MathArg {
    /// libm's functions (faithfully rounded): the default.
    Precise,
    /// micromath's approximations (about 1e-3 relative error; less code, not necessarily faster: see docs/math-profiles.md).
    Fast,
}

impl From<MathArg> for tapeplan_core::MathProfile {
    fn from(m: MathArg) -> Self {
        match m {
            MathArg::Precise => tapeplan_core::MathProfile::Precise,
            MathArg::Fast => tapeplan_core::MathProfile::Fast,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum LossArg {
    /// Softmax cross-entropy over integer labels.
    Ce,
    /// Mean squared error.
    Mse,
}

#[derive(Args, Clone)]
struct ModelArgs {
    /// Layer widths, input first, output last.
    #[arg(long, value_delimiter = ',', default_value = "64,32,10")]
    layers: Vec<usize>,
    /// Hidden activation.
    #[arg(long, value_enum, default_value_t = ActivationArg::Tanh)]
    activation: ActivationArg,
    /// Loss.
    #[arg(long, value_enum, default_value_t = LossArg::Ce)]
    loss: LossArg,
    /// Batch size of both entries.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Learning rate.
    #[arg(long, default_value_t = 0.1)]
    lr: f32,
    /// Optimizer, recorded into the plan as update nodes (PyTorch's documented rules: SGD,
    /// SGD with momentum, Nesterov momentum, Adam, AdamW).
    #[arg(long, value_enum, default_value_t = OptimizerArg::Sgd)]
    optimizer: OptimizerArg,
    /// Momentum for `--optimizer momentum|nesterov`.
    #[arg(long, default_value_t = 0.9)]
    momentum: f32,
    /// AdamW's decoupled weight decay.
    #[arg(long, default_value_t = 0.01)]
    weight_decay: f32,
    /// Dropout probability after each hidden activation during training (0: none); inference
    /// (the `forward` entry) never drops.
    #[arg(long, default_value_t = 0.0)]
    dropout: f32,
    /// The dropout generator's key (stored in the plan's persistent state).
    #[arg(long, default_value_t = 1)]
    dropout_seed: u64,
    /// Write updates in place as they are computed (smallest arena) instead of committing a
    /// step only when its loss and every update are finite.
    #[arg(long)]
    no_guard: bool,
    /// Plan without fusing elementwise chains (every value in the arena; same bits).
    #[arg(long)]
    no_fusion: bool,
    /// Math profile of the transcendental kernels (exp, log, tanh, sigmoid, softplus, pow),
    /// recorded in the plan and followed by the oracle and every runtime: `precise` (libm) or
    /// `fast` (micromath's approximations). sqrt stays correctly rounded in both.
    #[arg(long, value_enum, default_value_t = MathArg::Precise)]
    math: MathArg,
}

#[derive(Clone, Copy, ValueEnum)]
enum OptimizerArg {
    Sgd,
    Momentum,
    Nesterov,
    Adam,
    Adamw,
}

impl ModelArgs {
    fn job(&self) -> Result<TrainingJob> {
        if self.layers.len() < 2 || self.layers.contains(&0) {
            bail!("--layers needs at least two non-zero widths, e.g. 64,32,10");
        }
        if self.batch == 0 {
            bail!("--batch must be at least 1");
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            bail!("--lr must be a positive, finite number");
        }
        if !(0.0..1.0).contains(&self.dropout) {
            bail!("--dropout must be in [0, 1)");
        }
        let elems: Option<usize> = self
            .layers
            .windows(2)
            .try_fold(0usize, |acc, w| acc.checked_add(w[0].checked_mul(w[1])?));
        if elems.is_none_or(|e| e > 1 << 26) || self.batch > 1 << 20 {
            bail!("the model is too large for one plan (over 2^26 weights or a batch over 2^20)");
        }
        let mlp = Mlp {
            sizes: self.layers.clone(),
            activation: match self.activation {
                ActivationArg::Tanh => Activation::Tanh,
                ActivationArg::Relu => Activation::Relu,
            },
        };
        let loss = match self.loss {
            LossArg::Ce => Loss::SoftmaxCrossEntropy,
            LossArg::Mse => Loss::MeanSquaredError,
        };
        let lr = self.lr;
        let optimizer = match self.optimizer {
            OptimizerArg::Sgd => Optimizer::sgd(lr),
            OptimizerArg::Momentum | OptimizerArg::Nesterov => Optimizer::Momentum {
                lr,
                momentum: self.momentum,
                nesterov: matches!(self.optimizer, OptimizerArg::Nesterov),
            },
            OptimizerArg::Adam => Optimizer::adam(lr),
            OptimizerArg::Adamw => match Optimizer::adamw(lr) {
                Optimizer::Adam {
                    beta1, beta2, eps, ..
                } => Optimizer::Adam {
                    lr,
                    beta1,
                    beta2,
                    eps,
                    decoupled_weight_decay: self.weight_decay,
                },
                other => other,
            },
        };
        let options = JobOptions {
            guarded: !self.no_guard,
            dropout: self.dropout,
            seed: self.dropout_seed,
            planning: PlanOptions {
                fuse: !self.no_fusion,
            },
            math: self.math.into(),
            ..Default::default()
        };
        Ok(TrainingJob::build_with(
            mlp, loss, optimizer, self.batch, options,
        )?)
    }

    fn activation_name(&self) -> &'static str {
        match self.activation {
            ActivationArg::Tanh => "tanh",
            ActivationArg::Relu => "relu",
        }
    }
}

fn print_report(entries: &[(String, MemoryReport)]) {
    for (name, r) in entries {
        println!(
            "  {name:<11} arena {:>8} B   entry {:>8} B   liveness lower bound {:>8} B ({:.3}x)   retain-everything {:>8} B",
            r.arena_bytes,
            r.entry_bytes,
            r.lower_bound_bytes,
            r.entry_bytes as f64 / r.lower_bound_bytes.max(1) as f64,
            r.retain_everything_bytes
        );
    }
}

/// `--math fast` or `--no-fusion` beside a plan file: the plan already records how it was
/// planned, so the options would be silently ignored.
fn planning_options_need_no_plan(model: &ModelArgs, plan: &std::path::Path) -> Result<()> {
    if matches!(model.math, MathArg::Fast) || model.no_fusion {
        bail!(
            "{} records its own math profile and fusion; --math and --no-fusion apply when \
             planning (`tapeplan plan`, or `train`/`describe --tape` without a plan)",
            plan.display()
        );
    }
    Ok(())
}

/// The fusion line of `tapeplan plan`: chains, registers, and the arena against the same model
/// planned unfused.
fn print_fusion(job: &TrainingJob, model: &ModelArgs) -> Result<()> {
    if model.no_fusion {
        println!("fusion: off");
        return Ok(());
    }
    let instrs = job.plan.entries.iter().flat_map(|e| &e.instrs);
    let chains = instrs
        .clone()
        .zip(instrs.clone().skip(1))
        .filter(|(a, b)| !a.fuse_next && b.fuse_next)
        .count()
        + usize::from(instrs.clone().next().is_some_and(|i| i.fuse_next));
    let fused = instrs
        .clone()
        .zip(std::iter::once(false).chain(instrs.clone().map(|i| i.fuse_next)))
        .filter(|(i, prev)| i.fuse_next || *prev)
        .count();
    let registers = job
        .plan
        .tensors
        .iter()
        .filter(|t| t.kind == tapeplan_core::format::TensorKind::Register)
        .count();
    let mut plain = model.clone();
    plain.no_fusion = true;
    let plain = plain.job()?;
    let (a, b) = (job.plan.arena_elems * 4, plain.plan.arena_elems * 4);
    println!(
        "fusion: {chains} chains ({fused} instructions), {registers} values in registers; arena {a} B, unfused {b} B ({:+.1}%)",
        (a as f64 - b as f64) * 100.0 / b.max(1) as f64
    );
    Ok(())
}

fn reports(job: &TrainingJob) -> Vec<(String, MemoryReport)> {
    job.plan
        .entries
        .iter()
        .map(|e| (e.name.clone(), e.report))
        .collect()
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            // Each cause once: some errors already quote their source in their own message.
            let mut msg = e.to_string();
            for cause in e.chain().skip(1) {
                let c = cause.to_string();
                if !msg.contains(&c) {
                    msg.push_str(": ");
                    msg.push_str(&c);
                }
            }
            eprintln!("error: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Plan { model, output } => {
            let job = model.job()?;
            let bytes = job.plan.to_bytes();
            std::fs::write(&output, &bytes)
                .with_context(|| format!("writing {}", output.display()))?;
            println!(
                "wrote {} ({} bytes, {} instructions in {} entries, math {})",
                output.display(),
                bytes.len(),
                job.plan
                    .entries
                    .iter()
                    .map(|e| e.instrs.len())
                    .sum::<usize>(),
                job.plan.entries.len(),
                job.plan.math
            );
            println!("memory report:");
            print_report(&reports(&job));
            print_fusion(&job, &model)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Describe {
            plan,
            tape,
            error_report,
            model,
        } => {
            if let Some(p) = &plan {
                planning_options_need_no_plan(&model, p)?;
            }
            if tape && plan.is_some() {
                bail!("give either a .plan file or --tape (which lists the tape of the model options), not both");
            }
            if tape && error_report {
                return error_report_of(&model.job()?);
            }
            if tape {
                let job = model.job()?;
                print!(
                    "{}",
                    tapeplan_core::describe(
                        &job.tape,
                        &[
                            (job.gradient_start, "the gradient, recorded over the loss"),
                            (
                                job.update_start,
                                "the optimizer update, recorded over the gradient"
                            ),
                        ]
                    )
                );
                println!(
                    "(the tape is profile-free; planned with these options it runs under math {})",
                    job.plan.math.name()
                );
                return Ok(ExitCode::SUCCESS);
            }
            let Some(path) = plan else {
                bail!("give a .plan file, or --tape with model options");
            };
            let bytes =
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            not_a_checkpoint(&path, &bytes)?;
            tapeplan_runtime::Plan::parse(&bytes)
                .map_err(|e| anyhow::anyhow!("{}: plan rejected: {e}", path.display()))?;
            print!("{}", PlanInfo::decode(&bytes).listing());
            Ok(ExitCode::SUCCESS)
        }
        Command::Train {
            plan,
            model: model_args,
            data: data_path,
            epochs,
            seed,
            split_seed,
            train_fraction,
            scale,
            outputs,
        } => {
            let plan = match plan {
                Some(p) => {
                    planning_options_need_no_plan(&model_args, &p)?;
                    p
                }
                None => {
                    let job = model_args.job()?;
                    let p = PathBuf::from("model.plan");
                    std::fs::write(&p, job.plan.to_bytes())
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
            let bytes =
                std::fs::read(&plan).with_context(|| format!("reading {}", plan.display()))?;
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
                Some(p) => {
                    data::load_csv(p, d_in).with_context(|| format!("loading {}", p.display()))?
                }
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
                .filter(|(n, _)| !tapeplan_planner::optim::is_state_name(n))
                .collect();
            for ((name, _), v) in shapes.iter().zip(glorot_uniform(&shapes, seed)) {
                model.load_parameter(name, &v)?;
            }
            for out in [
                &outputs.checkpoint,
                &outputs.save_params,
                &outputs.save_test_logits,
                &outputs.plot,
            ]
            .into_iter()
            .flatten()
            {
                let dir = out.parent().filter(|d| !d.as_os_str().is_empty());
                if let Some(dir) = dir.filter(|d| !d.is_dir()) {
                    bail!(
                        "{}: the folder {} does not exist (checked before training, so no work is lost)",
                        out.display(),
                        dir.display()
                    );
                }
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
            // The curve so far, kept beside the checkpoint (`FILE.losses.csv`).
            if let Some(path) = &outputs.resume {
                let history = losses_path(path);
                if let Ok(text) = std::fs::read_to_string(&history) {
                    match LossCurve::from_csv(&text) {
                        Ok(old) if old.end_step() == curve.first_step && !old.step_losses.is_empty() => {
                            curve = old;
                        }
                        Ok(_) => println!(
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
            for epoch in start_epoch..epochs {
                let epoch_data = train.subset(&train.shuffled_indices(epoch_seed(seed, epoch)));
                let batches = epoch_data.batches(batch);
                let bar = ProgressBar::new(batches.len() as u64).with_style(
                    ProgressStyle::with_template("epoch {prefix:>3} [{bar:30}] {pos}/{len} {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_bar()),
                );
                bar.set_prefix(format!("{}", epoch + 1));
                let mut total = 0.0f64;
                let mut steps = 0usize;
                let mut skipped = 0usize;
                for (x, labels) in batches {
                    let loss = match model.train_step(x, &labels) {
                        Ok(loss) if loss.is_finite() => loss,
                        // A guarded plan refused to commit a diverging step: nothing changed;
                        // skip the batch.
                        Err(TrainError::Run(ExecError::NonFinite { .. })) => {
                            skipped += 1;
                            bar.inc(1);
                            continue;
                        }
                        Ok(loss) => {
                            bar.finish_and_clear();
                            bail!(
                                "epoch {}: the loss is {loss}; this plan writes updates in place \
                                 (--no-guard), so the parameters are no longer finite and nothing \
                                 more is saved. Plan without --no-guard to skip such steps, or \
                                 lower the learning rate",
                                epoch + 1
                            );
                        }
                        Err(e) => return Err(e.into()),
                    };
                    total += loss as f64;
                    steps += 1;
                    curve.push_step(loss);
                    bar.set_message(format!("loss {loss:.4}"));
                    bar.inc(1);
                }
                if skipped > 0 {
                    println!(
                        "epoch {:>3}: skipped {skipped} non-finite step(s) (guarded: nothing committed)",
                        epoch + 1
                    );
                }

                bar.finish_and_clear();
                curve.end_epoch(steps);
                println!(
                    "epoch {:>3}: mean loss {:.6}",
                    epoch + 1,
                    total / steps.max(1) as f64
                );
                if let Some(path) = &outputs.checkpoint {
                    let blob = exchange::checkpoint_of(&model, epoch as u32 + 1)?;
                    exchange::write_atomic(path, &blob)?;
                    exchange::write_atomic(&losses_path(path), curve.to_csv().as_bytes())?;
                }
            }
            if !test.is_empty() {
                let acc = model.accuracy(&test.features, &test.labels, d_in, batch)?;
                println!("test accuracy: {acc:.3}");
            }
            write_train_outputs(&mut model, &outputs, &plan, &curve, &test, (d_in, batch))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Export {
            plan,
            checkpoint,
            output,
        } => {
            let bytes = read(&plan)?;
            let st = exchange::export_checkpoint(&parse_plan(&plan, &bytes)?, &read(&checkpoint)?)
                .with_context(|| format!("exporting {}", checkpoint.display()))?;
            std::fs::write(&output, &st)
                .with_context(|| format!("writing {}", output.display()))?;
            println!("wrote {} ({} bytes)", output.display(), st.len());
            Ok(ExitCode::SUCCESS)
        }
        Command::Import {
            safetensors,
            plan,
            base,
            output,
        } => {
            let bytes = read(&plan)?;
            let base = base.as_deref().map(read).transpose()?;
            let ckpt = exchange::import_to_checkpoint(
                &parse_plan(&plan, &bytes)?,
                &read(&safetensors)?,
                base.as_deref(),
            )
            .with_context(|| format!("importing {}", safetensors.display()))?;
            exchange::write_atomic(&output, &ckpt)?;
            println!("wrote {} ({} bytes)", output.display(), ckpt.len());
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo { epochs, seed, math } => {
            if epochs == 0 {
                bail!("--epochs must be at least 1");
            }
            demo(epochs, seed, math)
        }
        Command::Verify { transcript, config } => Ok(tapeplan_planner::verify::run_cli(
            &transcript,
            config.as_deref(),
        )?),
    }
}

/// Where the loss curve of checkpoint `ckpt` is kept: `ckpt` with `.losses.csv` appended.
fn losses_path(ckpt: &std::path::Path) -> PathBuf {
    let mut p = ckpt.as_os_str().to_owned();
    p.push(".losses.csv");
    PathBuf::from(p)
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
    plan: &std::path::Path,
    curve: &LossCurve,
    test: &data::Dataset,
    (d_in, batch): (usize, usize),
) -> Result<()> {
    let plot = outputs.plot.clone().unwrap_or_else(|| {
        let mut p = plan.as_os_str().to_owned();
        p.push(".loss.svg");
        PathBuf::from(p)
    });
    if !curve.step_losses.is_empty() {
        let title = format!("{}: training loss", plan.display());
        std::fs::write(&plot, curve.to_svg(&title, 800, 480)?)
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

/// `tapeplan describe --tape --error-report`: every node's f32 rounding error against f64.
fn error_report_of(job: &TrainingJob) -> Result<ExitCode> {
    use tapeplan_core::Tensor;
    let x_shape = job.tape.shape(job.inputs.x)?;
    let t_shape = job.tape.shape(job.inputs.target)?;
    let (batch, d_in) = (x_shape.dim(0).unwrap_or(0), x_shape.dim(1).unwrap_or(0));
    let mut rng = SplitMix64::new(7);
    let x: Vec<f32> = if d_in == data::DIGITS_FEATURES {
        let digits = data::digits()?;
        (0..batch)
            .flat_map(|r| digits.row(r % digits.len()).0.to_vec())
            .collect()
    } else {
        (0..x_shape.elems()).map(|_| rng.next_f32()).collect()
    };
    let classes = job.mlp.sizes.last().copied().unwrap_or(1);
    let target: Vec<f32> = match job.loss {
        Loss::SoftmaxCrossEntropy => (0..batch).map(|r| (r % classes) as f32).collect(),
        Loss::MeanSquaredError => (0..t_shape.elems()).map(|_| rng.next_f32()).collect(),
    };
    let mut leaves = vec![
        (job.inputs.x, Tensor::new(x_shape, x)?),
        (job.inputs.target, Tensor::new(t_shape, target)?),
    ];
    let shapes = job.parameter_shapes();
    for ((p, (_, s)), v) in job
        .params
        .iter()
        .zip(&shapes)
        .zip(glorot_uniform(&shapes, 42))
    {
        leaves.push((*p, Tensor::new(*s, v)?));
    }
    for (leaf, spec) in job.state.iter().zip(&job.state_specs) {
        leaves.push((
            *leaf,
            Tensor::new(spec.shape, vec![spec.init; spec.shape.elems()])?,
        ));
    }
    let last = job.tape.id(job.tape.len() - 1)?;
    let errors =
        tapeplan_planner::precision::rounding_errors_with(&job.tape, &leaves, last, job.math)?;
    println!(
        "rounding error of every node in f32 (math {}), against the same tape in f64",
        job.math
    );
    println!(
        "{:>5}  {:<14} {:>12} {:>12}",
        "node", "opcode", "max abs", "max rel"
    );
    let (mut worst_abs, mut worst_rel) = (0.0f64, 0.0f64);
    for e in &errors {
        let op = job.tape.nodes()[e.node.index()].op;
        println!(
            "{:>5}  {:<14} {:>12.3e} {:>12.3e}",
            e.node.index(),
            op.name(),
            e.max_abs,
            e.max_rel
        );
        worst_abs = worst_abs.max(e.max_abs);
        worst_rel = worst_rel.max(e.max_rel);
    }
    let loss = errors.iter().find(|e| e.node == job.loss_node);
    if let Some(l) = loss {
        println!("loss: max abs {:.3e}, max rel {:.3e}", l.max_abs, l.max_rel);
    }
    println!("all nodes: max abs {worst_abs:.3e}, max rel {worst_rel:.3e}");
    Ok(ExitCode::SUCCESS)
}

/// A clear error for the common mix-up of passing a checkpoint where a plan goes.
fn not_a_checkpoint(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    if bytes.starts_with(&tapeplan_runtime::CHECKPOINT_MAGIC) {
        bail!(
            "{} is a checkpoint (magic TPCK), not a plan: give the .plan it was saved from, and the checkpoint with --resume or --checkpoint",
            path.display()
        );
    }
    Ok(())
}

/// The shuffle seed of one epoch.
fn epoch_seed(seed: u64, epoch: usize) -> u64 {
    SplitMix64::new(seed ^ ((epoch as u64 + 1) << 32)).next_u64()
}

fn demo(epochs: usize, seed: u64, math: MathArg) -> Result<ExitCode> {
    let batch = 32;
    let digits = data::digits()?;
    let (train, test) = digits.split_seeded(0, data::DIGITS_TRAIN_ROWS);
    println!(
        "digits: {} train / {} test rows, 64 features, 10 classes (UCI optdigits, via scikit-learn)",
        train.len(),
        test.len()
    );
    let args = ModelArgs {
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
        math,
    };
    let job = args.job()?;
    let bytes = job.plan.to_bytes();
    println!(
        "plan: MLP 64-32-10 tanh, softmax cross-entropy, SGD lr 0.1, batch {batch}, math {}: {} tape nodes, {} bytes, {} instructions (forward {}, train_step {})",
        job.plan.math,
        job.tape.len(),
        bytes.len(),
        job.plan.entries.iter().map(|e| e.instrs.len()).sum::<usize>(),
        job.plan.entry("forward").map(|e| e.instrs.len()).unwrap_or(0),
        job.plan.entry("train_step").map(|e| e.instrs.len()).unwrap_or(0),
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
    let mut oracle = Oracle::new(&job, &init)?;
    let names: Vec<&str> = shapes.iter().map(|(n, _)| n.as_str()).collect();

    let mut steps = 0usize;
    let mut identical = 0usize;
    for epoch in 0..epochs {
        let epoch_data = train.subset(&train.shuffled_indices(epoch_seed(seed, epoch)));
        let mut total = 0.0f64;
        let mut n = 0usize;
        for (x, labels) in epoch_data.batches(batch) {
            let loss = model.train_step(x, &labels)?;
            let oracle_loss = oracle.step(x, &labels)?;
            steps += 1;
            let runtime_params: Vec<Vec<f32>> = names
                .iter()
                .map(|n| model.parameter(n))
                .collect::<Result<_, _>>()?;
            let left: Vec<&[f32]> = runtime_params.iter().map(Vec::as_slice).collect();
            let right: Vec<&[f32]> = oracle.params.iter().map(|t| t.data.as_slice()).collect();
            let diff = if same_bits(loss, oracle_loss) {
                first_difference(names.iter().copied(), &left, &right)
            } else {
                Some(tapeplan_planner::oracle::BitDiff {
                    tensor: "loss".into(),
                    element: 0,
                    left_bits: loss.to_bits(),
                    right_bits: oracle_loss.to_bits(),
                })
            };
            if let Some(d) = diff {
                println!("bitwise: {identical}/{steps} steps identical");
                eprintln!(
                    "error: step {steps} (epoch {}): runtime vs oracle differ: {d}",
                    epoch + 1
                );
                return Ok(ExitCode::FAILURE);
            }
            identical += 1;
            total += loss as f64;
            n += 1;
        }
        println!(
            "epoch {:>2}: mean loss {:.6}",
            epoch + 1,
            total / n.max(1) as f64
        );
    }
    println!("bitwise: {identical}/{steps} steps identical");
    let acc = model.accuracy(&test.features, &test.labels, 64, batch)?;
    println!("test accuracy: {acc:.3}");
    Ok(ExitCode::SUCCESS)
}
