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
use tapeplan_planner::optim::Sgd;
use tapeplan_planner::oracle::{first_difference, same_bits, Oracle, TrainingJob};
use tapeplan_planner::plot::LossCurve;
use tapeplan_planner::rng::SplitMix64;
use tapeplan_planner::train::RuntimeModel;
use tapeplan_planner::MemoryReport;

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
        #[command(flatten)]
        model: ModelArgs,
    },
    /// Train from a .plan file through the no_std runtime on a CSV data set.
    Train {
        /// The plan (from `tapeplan plan`).
        plan: PathBuf,
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
        /// Fraction of rows used for training (the rest is the test split).
        #[arg(long, default_value_t = 0.8)]
        train_fraction: f64,
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
    /// FILE.tmp, then renamed over FILE).
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
    /// SGD learning rate.
    #[arg(long, default_value_t = 0.1)]
    lr: f32,
}

impl ModelArgs {
    fn job(&self) -> Result<TrainingJob> {
        if self.layers.len() < 2 || self.layers.contains(&0) {
            bail!("--layers needs at least two non-zero widths, e.g. 64,32,10");
        }
        if self.batch == 0 {
            bail!("--batch must be at least 1");
        }
        if !self.lr.is_finite() {
            bail!("--lr must be finite");
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
        Ok(TrainingJob::build(
            mlp,
            loss,
            Sgd { lr: self.lr },
            self.batch,
        )?)
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
            eprintln!("error: {e:#}");
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
                "wrote {} ({} bytes, {} instructions in {} entries)",
                output.display(),
                bytes.len(),
                job.plan
                    .entries
                    .iter()
                    .map(|e| e.instrs.len())
                    .sum::<usize>(),
                job.plan.entries.len()
            );
            println!("memory report:");
            print_report(&reports(&job));
            Ok(ExitCode::SUCCESS)
        }
        Command::Describe { plan, tape, model } => {
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
                                "the SGD update, recorded over the gradient"
                            ),
                        ]
                    )
                );
                return Ok(ExitCode::SUCCESS);
            }
            let Some(path) = plan else {
                bail!("give a .plan file, or --tape with model options");
            };
            let bytes =
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            tapeplan_runtime::Plan::parse(&bytes)
                .map_err(|e| anyhow::anyhow!("{}: plan rejected: {e}", path.display()))?;
            print!("{}", PlanInfo::decode(&bytes).listing());
            Ok(ExitCode::SUCCESS)
        }
        Command::Train {
            plan,
            data: data_path,
            epochs,
            seed,
            split_seed,
            train_fraction,
            outputs,
        } => {
            let bytes =
                std::fs::read(&plan).with_context(|| format!("reading {}", plan.display()))?;
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
            if !(0.0..=1.0).contains(&train_fraction) {
                bail!("--train-fraction must be in [0, 1]");
            }
            let n_train = ((dataset.len() as f64) * train_fraction).round() as usize;
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
            let start_epoch = match &outputs.resume {
                Some(path) => resume(&mut model, path, &plan)?,
                None => 0,
            };
            let mut curve = LossCurve::starting_at(start_epoch * (train.len() / batch));
            println!(
                "training {} for {epochs} epochs: {} train rows, {} test rows, batch {batch}, arena {} bytes",
                plan.display(),
                train.len(),
                test.len(),
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
                for (x, labels) in batches {
                    let loss = model.train_step(x, &labels)?;
                    total += loss as f64;
                    steps += 1;
                    curve.push_step(loss);
                    bar.set_message(format!("loss {loss:.4}"));
                    bar.inc(1);
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
        Command::Demo { epochs, seed } => demo(epochs, seed),
        Command::Verify { transcript, config } => Ok(tapeplan_planner::verify::run_cli(
            &transcript,
            config.as_deref(),
        )?),
    }
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
            "{} is a checkpoint of plan {:08x}, not of {} (plan {plan_id:08x}): resume with the plan it was saved from",
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

/// The shuffle seed of one epoch.
fn epoch_seed(seed: u64, epoch: usize) -> u64 {
    SplitMix64::new(seed ^ ((epoch as u64 + 1) << 32)).next_u64()
}

fn demo(epochs: usize, seed: u64) -> Result<ExitCode> {
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
    };
    let job = args.job()?;
    let bytes = job.plan.to_bytes();
    println!(
        "plan: MLP 64-32-10 tanh, softmax cross-entropy, SGD lr 0.1, batch {batch}: {} tape nodes, {} bytes, {} instructions (forward {}, train_step {})",
        job.tape.len(),
        bytes.len(),
        job.plan.entries.iter().map(|e| e.instrs.len()).sum::<usize>(),
        job.plan.entry("forward").map(|e| e.instrs.len()).unwrap_or(0),
        job.plan.entry("train_step").map(|e| e.instrs.len()).unwrap_or(0),
    );
    println!("memory report:");
    print_report(&reports(&job));

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
