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
use tapeplan_planner::io::table::{self, ClassNames, Standardizer, Table, TableSpec, Task};
use tapeplan_planner::model::glorot_uniform;
use tapeplan_planner::model::run::{file_digest, INIT_SUFFIX};
use tapeplan_planner::model::RunConfig;
use tapeplan_planner::protocol::{
    parameter_digest, ENTRY_FORWARD, ENTRY_INIT, ENTRY_TRAIN_STEP, INPUT_LABELS, INPUT_X, INPUT_Y,
    OUTPUT_LOGITS,
};

use super::args::{LossArg, ModelArgs, TrainOutputs};
use super::{not_a_checkpoint, planning_options_need_no_plan, read};

/// `tapeplan train`'s options.
#[derive(Args)]
pub struct TrainArgs {
    /// The plan (from `tapeplan plan`, or any plan with `forward` and `train_step` entries).
    /// Without one, the model options below are planned first and the plan is written to
    /// `model.plan` (so checkpoints can be exported later); the input and output widths come
    /// from the data when --layers is not given.
    pub plan: Option<PathBuf>,
    #[command(flatten)]
    pub model: ModelArgs,
    /// A CSV (optionally gzip) file, one sample per row: feature columns and target columns
    /// (see --target-columns). A classification plan (an input `labels`) takes one label
    /// column of integers or class names; a regression plan (an input `y`) takes as many
    /// float columns as `y` has per row. Default: the bundled handwritten digits set.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// The target columns of --data, column numbers (counting from 1, as errors number them)
    /// or header names, comma-separated; every
    /// other column is a feature. Default: the last column (classification) or the last
    /// d_out columns (regression).
    #[arg(long, value_delimiter = ',', value_name = "COLUMNS")]
    pub target_columns: Vec<String>,
    /// Standardize every feature with the mean and standard deviation of the training split
    /// (after --scale), and apply them to the validation and test splits; they are written
    /// beside the plan (`PLAN.standardize.json`) for the device.
    #[arg(long)]
    pub standardize: bool,
    /// Fraction of the training split held out for validation, evaluated after every epoch
    /// (accuracy, or MSE and MAE).
    #[arg(long, default_value_t = 0.0)]
    pub val_fraction: f64,
    /// The initial parameters and buffers: a safetensors file under the plan's names (what
    /// `tapeplan export` writes; a model from ONNX or the layer API comes with one). Without
    /// it, `PLAN.init.safetensors` beside the plan when there is one (what `plan --onnx`
    /// writes), else the MLP's w*/b* get the seeded Glorot initialization, and any other model
    /// tensor must be initialized by the plan's `init` entry.
    #[arg(long, value_name = "FILE")]
    pub init: Option<PathBuf>,
    /// Without PLAN: plan over an existing `model.plan` (otherwise an error).
    #[arg(long)]
    pub force: bool,
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
    /// Write the run description of this run (`plan=… plan_digest=… seed=… split_seed=…
    /// samples=… epochs=… data=… init=…`, paths relative to FILE's folder, as a run description's are) to FILE after training, so
    /// `tapeplan verify` and the firmware replay the same run. Refused with the options a
    /// description cannot say: --scale, --standardize, --target-columns, --train-fraction
    /// other than the default, --resume.
    #[arg(long, value_name = "FILE")]
    pub write_run: Option<PathBuf>,
    /// The model options given on the command line (their long names, `--layers`), filled in
    /// by `main` from the parsed arguments.
    #[arg(skip)]
    pub given_model_options: Vec<String>,
}

/// Where `train` writes the plan it makes when it is given none.
const PLANNED_PATH: &str = "model.plan";

/// What the plan trains: class labels, or `n_targets` float targets per row.
pub(super) fn task_of(info: &PlanInfo, classes: Option<ClassNames>) -> Result<Task> {
    if info
        .binding_shape(ENTRY_TRAIN_STEP, BindingKind::Input, INPUT_LABELS)
        .is_some()
    {
        return Ok(Task::Classification { classes });
    }
    let batch = info
        .binding_shape(ENTRY_TRAIN_STEP, BindingKind::Input, INPUT_X)
        .and_then(|s| s.dim(0))
        .unwrap_or(1)
        .max(1);
    match info.binding_shape(ENTRY_TRAIN_STEP, BindingKind::Input, INPUT_Y) {
        Some(y) => Ok(Task::Regression {
            n_targets: y.elems() / batch,
        }),
        None => bail!(
            "the plan's train_step has neither an input `labels` (classification) nor `y` (regression)"
        ),
    }
}

/// The data set `train` reads: the bundled digits, or `--data` read for `task`.
pub(super) fn load_data(
    data_path: Option<&Path>,
    task: &Task,
    target_columns: &[String],
) -> Result<Table> {
    match data_path {
        None => {
            if let Task::Regression { .. } = task {
                bail!("a regression plan (an input y) needs --data: the bundled digits are a classification set");
            }
            if !target_columns.is_empty() {
                bail!("--target-columns applies to --data");
            }
            let dataset = data::digits()?;
            Ok(Table {
                feature_columns: (0..dataset.n_features()).collect(),
                target_columns: vec![dataset.n_features()],
                dataset,
                class_names: None,
            })
        }
        Some(p) => {
            let spec = TableSpec {
                task: task.clone(),
                target_columns: target_columns.to_vec(),
            };
            table::load_table(p, &spec).with_context(|| format!("loading {}", p.display()))
        }
    }
}

/// An error when model options were given beside a plan file: they would be ignored.
fn no_model_options_beside(plan: &Path, given: &[String]) -> Result<()> {
    if !given.is_empty() {
        bail!(
            "{} is already planned, so {} would be ignored: model options apply when `train` plans the model itself (no PLAN) or with `tapeplan plan`",
            plan.display(),
            given.join(", ")
        );
    }
    Ok(())
}

/// Plans the model options into [`PLANNED_PATH`] (widths from `table` unless `--layers` was
/// given) and answers its path.
fn plan_model_options(args: &TrainArgs, table: &Table) -> Result<PathBuf> {
    let p = PathBuf::from(PLANNED_PATH);
    if p.exists() && !args.force {
        bail!(
            "{} exists: train it with `tapeplan train {}`, or give --force to plan the model options over it",
            p.display(),
            p.display()
        );
    }
    exchange::check_writable(&p)?;
    let mut model_args = args.model.clone();
    let d = &table.dataset;
    let d_out = if d.n_targets() > 0 {
        d.n_targets()
    } else {
        d.n_classes()
    };
    let layers = &model_args.layers;
    if !args.given_model_options.iter().any(|o| o == "--layers") {
        let distinct: std::collections::BTreeSet<u8> = d.labels.iter().copied().collect();
        if d.n_targets() == 0 && distinct.len() < 2 {
            // Cross-entropy over one class is 0 whatever the weights: nothing would be learned
            // while the run reported a loss of 0 and an accuracy of 1.
            bail!(
                "every label of the data is the same class ({}): a classifier needs at least two classes (is --target-columns the label column?)",
                distinct
                    .first()
                    .map(|&l| match &table.class_names {
                        Some(n) => n.get(usize::from(l)).cloned().unwrap_or_default(),
                        None => l.to_string(),
                    })
                    .unwrap_or_default()
            );
        }
        let mut inferred = vec![d.n_features()];
        inferred.extend_from_slice(&layers[1..layers.len() - 1]);
        inferred.push(d_out);
        model_args.layers = inferred;
    } else if layers.first() != Some(&d.n_features())
        || layers
            .last()
            .is_none_or(|&w| w < d_out || (d.n_targets() > 0 && w != d_out))
    {
        // Checked before the plan is written, so a mistake leaves no plan behind.
        bail!(
            "--layers {} does not fit the data: its rows have {} features and {d_out} {}; leave out --layers to take the widths from the data",
            layers.iter().map(usize::to_string).collect::<Vec<_>>().join(","),
            d.n_features(),
            if d.n_targets() > 0 { "targets" } else { "classes" }
        );
    }
    let job = model_args.job()?;
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
    Ok(p)
}

/// The class names saved beside `plan`, if any.
pub(super) fn saved_class_names(plan: &Path) -> Result<Option<ClassNames>> {
    let path = exchange::with_suffix(plan, CLASSES_SUFFIX);
    match std::fs::read_to_string(&path) {
        Ok(text) => table::class_names_from_json(&text)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// The suffix of the class-name mapping's file beside a plan.
const CLASSES_SUFFIX: &str = ".classes.json";
/// The suffix of the standardization's file beside a plan.
pub(super) const STANDARDIZE_SUFFIX: &str = ".standardize.json";

/// `tapeplan train`.
///
/// # Errors
/// Bad options or data (features that `--scale` makes infinite, labels the plan has no class
/// for, widths that do not match the plan's), model options beside a plan, an existing
/// `model.plan` without `--force`, a rejected plan or checkpoint (one with non-finite
/// parameters too), a model tensor without an initial value, runtime errors, unwritable
/// outputs (checked before the first epoch), an epoch in which the guard refused every step,
/// and a non-finite loss of a plan that writes its updates in place.
pub fn train(args: TrainArgs) -> Result<ExitCode> {
    // The options that need no data, checked before a plan is written (`--force` would
    // otherwise replace model.plan and then fail).
    if !(0.0..1.0).contains(&args.val_fraction) {
        bail!("--val-fraction must be in [0, 1)");
    }
    if args
        .train_fraction
        .is_some_and(|f| !(0.0..=1.0).contains(&f))
    {
        bail!("--train-fraction must be in [0, 1]");
    }
    if !args.scale.is_finite() {
        bail!("--scale must be finite");
    }
    if args.epochs == 0 {
        bail!("--epochs must be at least 1");
    }
    let (plan, table) = match &args.plan {
        Some(p) => {
            planning_options_need_no_plan(&args.model, p)?;
            no_model_options_beside(p, &args.given_model_options)?;
            let bytes = read(p)?;
            not_a_checkpoint(p, &bytes)?;
            super::parse_plan(p, &bytes)?;
            let task = task_of(&PlanInfo::decode(&bytes), saved_class_names(p)?)?;
            let table = load_data(args.data.as_deref(), &task, &args.target_columns)?;
            (p.clone(), table)
        }
        None => {
            // Cross-entropy takes labels; every other loss float targets.
            let task = if matches!(args.model.loss, LossArg::Ce) {
                Task::Classification { classes: None }
            } else {
                Task::Regression {
                    n_targets: if args.given_model_options.iter().any(|o| o == "--layers") {
                        args.model.layers.last().copied().unwrap_or(1)
                    } else {
                        args.target_columns.len().max(1)
                    },
                }
            };
            let table = load_data(args.data.as_deref(), &task, &args.target_columns)?;
            let (n_train, n_val) = split_rows(
                table.dataset.len(),
                args.train_fraction,
                args.data.is_some(),
                args.val_fraction,
            );
            if n_train - n_val < args.model.batch {
                bail!(
                    "the training split would have {} rows, fewer than one batch of {}",
                    n_train - n_val,
                    args.model.batch
                );
            }
            (plan_model_options(&args, &table)?, table)
        }
    };
    let TrainArgs {
        data: data_path,
        epochs,
        seed,
        split_seed,
        train_fraction,
        scale,
        standardize,
        val_fraction,
        init,
        outputs,
        write_run,
        target_columns,
        ..
    } = args;
    if let Some(out) = &write_run {
        exchange::check_writable(out)?;
        for (option, path) in [
            ("the plan", Some(plan.as_path())),
            ("--data", data_path.as_deref()),
            ("--init", init.as_deref()),
        ] {
            if path.is_some_and(|p| p.to_string_lossy().contains(char::is_whitespace)) {
                bail!(
                    "--write-run: a run description separates its keys by spaces, so it cannot \
                     name {option} {:?}: rename the file without spaces",
                    path.map(|p| p.display().to_string()).unwrap_or_default()
                );
            }
        }
        describable(&DescribedOptions {
            scale,
            standardize,
            target_columns: &target_columns,
            train_fraction,
            data_given: data_path.is_some(),
            resume: outputs.resume.is_some(),
        })?;
    }
    let bytes = std::fs::read(&plan).with_context(|| format!("reading {}", plan.display()))?;
    not_a_checkpoint(&plan, &bytes)?;
    let mut model =
        RuntimeModel::new(&bytes).with_context(|| format!("loading {}", plan.display()))?;
    let info = PlanInfo::decode(&bytes);
    let x_shape = info
        .binding_shape(ENTRY_TRAIN_STEP, BindingKind::Input, INPUT_X)
        .context("the plan's train_step has no input x")?;
    let batch = x_shape.dim(0).unwrap_or(0);
    let d_in = x_shape.elems() / batch.max(1);
    let Table {
        dataset,
        class_names,
        ..
    } = table;
    if dataset.n_features() != d_in {
        bail!(
            "the data has {} features per row; the plan's input x is {} ({d_in} per row)",
            dataset.n_features(),
            x_shape
        );
    }
    let classes = info
        .binding_shape(ENTRY_FORWARD, BindingKind::Output, OUTPUT_LOGITS)
        .and_then(|s| s.dim(1))
        .unwrap_or(0);
    if let Some((row, &label)) = dataset
        .labels
        .iter()
        .enumerate()
        .find(|(_, &l)| usize::from(l) >= classes)
    {
        let name = class_names
            .as_ref()
            .and_then(|n| n.get(usize::from(label)))
            .map(|n| format!(" ({n:?}, class {} of the sorted class names)", label))
            .unwrap_or_default();
        bail!(
            "row {} has label {label}{name}, but the plan has {classes} classes (0..{}): plan a model whose last layer is at least {} wide",
            row + 1,
            classes.saturating_sub(1),
            usize::from(label) + 1
        );
    }
    let regression = dataset.n_targets() > 0;
    if regression && outputs.save_test_logits.is_some() {
        bail!("--save-test-logits writes a classification test set (x, labels, logits); the plan is a regression plan");
    }

    let mut dataset = dataset;
    if scale != 1.0 {
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
    let (n_train, n_val) = split_rows(
        dataset.len(),
        train_fraction,
        data_path.is_some(),
        val_fraction,
    );
    let (train, mut test) = dataset.split_seeded(split_seed, n_train);
    // The validation rows: the last of the (shuffled) training split.
    let (mut train, mut val) = train.split_at(train.len() - n_val);
    if train.len() < batch {
        bail!(
            "the training split has {} rows, fewer than one batch of {batch}",
            train.len()
        );
    }
    let standardize_path = exchange::with_suffix(&plan, STANDARDIZE_SUFFIX);
    let classes_path = exchange::with_suffix(&plan, CLASSES_SUFFIX);
    // Every output, checked before training so no work is lost to an unwritable path.
    let plot = plot_path(&outputs, &plan);
    let history = outputs.checkpoint.as_deref().map(losses_path);
    for out in [
        outputs.checkpoint.as_ref(),
        history.as_ref(),
        outputs.save_params.as_ref(),
        outputs.save_test_logits.as_ref(),
        Some(&plot),
        standardize.then_some(&standardize_path),
        class_names.as_ref().map(|_| &classes_path),
    ]
    .into_iter()
    .flatten()
    {
        exchange::check_writable(out)?;
    }
    // The starting point, before any file beside the plan is written: a bad --init or
    // --resume leaves the standardization and class names of an earlier run as they were.
    // Without --init (and --resume), the file beside the plan that `plan --onnx` and the layer
    // API's `plan_sequential` example write, as a `plan=` run description reads it.
    let beside = exchange::with_suffix(&plan, INIT_SUFFIX);
    let (init, found_beside) = match init {
        None if outputs.resume.is_none() && beside.is_file() => (Some(beside), true),
        given => (given, false),
    };
    initial_parameters(&mut model, init.as_deref(), seed, outputs.resume.is_some())?;
    if found_beside {
        println!("(found beside the plan; --init FILE names another file)");
    }
    let start_epoch = match &outputs.resume {
        Some(path) => resume(&mut model, path, &plan)?,
        None => 0,
    };
    if standardize {
        let s = Standardizer::fit(&train);
        for set in [&mut train, &mut val, &mut test] {
            s.apply(set);
        }
        std::fs::write(&standardize_path, s.to_json())
            .with_context(|| format!("writing {}", standardize_path.display()))?;
        println!(
            "standardized {d_in} features with the training split's mean and std: {}",
            standardize_path.display()
        );
    }
    if let Some(names) = &class_names {
        std::fs::write(&classes_path, table::class_names_to_json(names))
            .with_context(|| format!("writing {}", classes_path.display()))?;
        println!(
            "{} class names (class k is the k-th): {}",
            names.len(),
            classes_path.display()
        );
    }
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
        "training {} for {epochs} epoch{}: {} train rows, {}{} test rows, batch {batch}, math {}, arena {} bytes",
        plan.display(),
        if epochs == 1 { "" } else { "s" },
        train.len(),
        if val.is_empty() {
            String::new()
        } else {
            format!("{} validation rows, ", val.len())
        },
        test.len(),
        model.plan().math(),
        model.arena_bytes()
    );
    let left_out = train.len() % batch;
    if left_out != 0 {
        println!(
            "each epoch trains {} full batches of {batch} rows: the last {left_out} row{} of each epoch's shuffle {} left out (a plan's batch is fixed)",
            train.len() / batch,
            if left_out == 1 { "" } else { "s" },
            if left_out == 1 { "is" } else { "are" },
        );
    }
    let mut progress = Progress {
        bar: ProgressBar::hidden(),
        curve: &mut curve,
        checkpoint: outputs.checkpoint.as_deref(),
        val: Evaluation {
            set: &val,
            d_in,
            batch,
        },
    };
    let order = EpochOrder { seed, batch };
    train_epochs(
        &mut model,
        &train,
        order,
        start_epoch..epochs,
        &mut progress,
    )?;
    let test_eval = Evaluation {
        set: &test,
        d_in,
        batch,
    };
    if let Some(metrics) = test_eval.metrics(&mut model)? {
        println!("test {metrics}");
    }
    // The digest the browser page shows for the same run (docs/getting-started/train-in-a-browser.md).
    println!(
        "parameter digest: 0x{:016x}",
        parameter_digest(model.plan(), model.persistent())
    );
    if let Some(names) = &class_names {
        print_predictions(&mut model, &test_eval, names)?;
    }
    if let Some(out) = &write_run {
        let line = run_line(
            out,
            &plan,
            data_path.as_deref(),
            init.as_deref(),
            (seed, split_seed, train.len(), epochs),
        )?;
        std::fs::write(out, format!("{line}\n"))
            .with_context(|| format!("writing {}", out.display()))?;
        println!(
            "run description: {} (`tapeplan verify --config` and the firmware replay it)",
            out.display()
        );
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

/// The options of a `train` run that decide whether a run description can say it.
struct DescribedOptions<'a> {
    scale: f32,
    standardize: bool,
    target_columns: &'a [String],
    train_fraction: Option<f64>,
    data_given: bool,
    resume: bool,
}

/// An error naming the option a run description cannot say (`--write-run`): a description's
/// rows are the data file's as they are, its split the default one, and it starts from the
/// initial values.
fn describable(o: &DescribedOptions<'_>) -> Result<()> {
    let refused = if o.scale != 1.0 {
        Some("--scale")
    } else if o.standardize {
        Some("--standardize")
    } else if !o.target_columns.is_empty() {
        Some("--target-columns")
    } else if o
        .train_fraction
        .is_some_and(|f| !o.data_given || f != DEFAULT_TRAIN_FRACTION)
    {
        Some("--train-fraction")
    } else if o.resume {
        Some("--resume")
    } else {
        None
    };
    match refused {
        Some(option) => bail!(
            "--write-run: a run description cannot say {option} (it names the data file as it is, its default split and the initial values): leave {option} out, or prepare the CSV itself"
        ),
        None => Ok(()),
    }
}

/// The CSV's default training fraction (`train` without `--train-fraction`, and a run
/// description's split).
const DEFAULT_TRAIN_FRACTION: f64 = 0.8;

/// The run description of a `train` run, its files pinned by their digests, checked by
/// parsing it back ([`RunConfig::parse`]).
fn run_line(
    out: &Path,
    plan: &Path,
    data: Option<&Path>,
    init: Option<&Path>,
    (seed, split_seed, samples, epochs): (u64, u64, usize, usize),
) -> Result<String> {
    // A run description's paths are relative to its own folder.
    let dir = out.parent().unwrap_or(Path::new(""));
    let pinned = |key: &str, path: &Path| -> Result<String> {
        Ok(format!(
            " {key}={} {key}_digest={:016x}",
            relative_path(path, dir)?.display(),
            file_digest(&read(path)?)
        ))
    };
    let mut line = pinned("plan", plan)?.trim_start().to_owned();
    line += &format!(" seed={seed} split_seed={split_seed} samples={samples} epochs={epochs}");
    if let Some(d) = data {
        line += &pinned("data", d)?;
    }
    if let Some(i) = init {
        line += &pinned("init", i)?;
    }
    RunConfig::parse_in(&line, dir).with_context(|| format!("--write-run: the run `{line}`"))?;
    Ok(line)
}

/// `path` (relative to the current folder, or absolute) as a path relative to folder `dir`
/// (relative to the current folder; empty: the current folder itself): `path` itself when
/// absolute or when `dir` is the current folder, else the way from `dir` to it (`../data.csv`).
///
/// # Errors
/// A path or folder that cannot be resolved (it does not exist).
fn relative_path(path: &Path, dir: &Path) -> Result<PathBuf> {
    if path.is_absolute() || dir.as_os_str().is_empty() || dir == Path::new(".") {
        return Ok(path.to_path_buf());
    }
    let canon = |p: &Path| {
        p.canonicalize()
            .with_context(|| format!("--write-run: resolving {}", p.display()))
    };
    let (to, from) = (canon(path)?, canon(dir)?);
    let common = to
        .components()
        .zip(from.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut rel = PathBuf::new();
    for _ in from.components().skip(common) {
        rel.push("..");
    }
    rel.extend(to.components().skip(common));
    Ok(rel)
}

/// The training split's rows and, of them, the validation rows for a data set of `len` rows:
/// `--train-fraction` of them (default: the digits' training split, or 80 % of a CSV's rows),
/// then `--val-fraction` of those (both checked in range before).
pub(super) fn split_rows(
    len: usize,
    train_fraction: Option<f64>,
    data_given: bool,
    val_fraction: f64,
) -> (usize, usize) {
    let n_train = match (train_fraction, data_given) {
        (Some(f), _) => ((len as f64) * f).round() as usize,
        (None, false) => data::DIGITS_TRAIN_ROWS,
        (None, true) => ((len as f64) * DEFAULT_TRAIN_FRACTION).round() as usize,
    }
    .min(len);
    let n_val = ((n_train as f64) * val_fraction).round() as usize;
    (n_train, n_val.min(n_train))
}

/// Loads the initial model tensors: from `--init`, else the MLP's Glorot initialization, else
/// what the plan's `init` entry wrote (an error naming a model tensor it does not write, unless
/// a checkpoint is resumed, which overwrites every tensor).
fn initial_parameters(
    model: &mut RuntimeModel<'_>,
    init: Option<&Path>,
    seed: u64,
    resuming: bool,
) -> Result<()> {
    let plan = *model.plan();
    if let Some(path) = init {
        let values = exchange::import_into_persistent(&plan, model.persistent(), &read(path)?)
            .with_context(|| format!("--init {}", path.display()))?;
        exchange::check_finite_parameters(&plan, &values)
            .with_context(|| format!("--init {}", path.display()))?;
        for b in plan.parameters() {
            model.load_parameter(b.name, &values[b.range()])?;
        }
        println!("initial parameters: {}", path.display());
        return Ok(());
    }
    let all: Vec<&str> = plan.parameters().map(|b| b.name).collect();
    let tensors: Vec<(String, tapeplan_core::Shape)> = plan
        .parameters()
        .filter(|b| !exchange::is_training_state(b.name, &all))
        .map(|b| (b.name.to_string(), b.shape))
        .collect();
    if tensors
        .iter()
        .all(|(n, _)| exchange::torch_name(n).is_some())
    {
        // The --layers MLP: the seeded Glorot initialization, as `tapeplan demo`.
        for ((name, _), v) in tensors.iter().zip(glorot_uniform(&tensors, seed)) {
            model.load_parameter(name, &v)?;
        }
        return Ok(());
    }
    let written: Vec<&str> = plan
        .entry(ENTRY_INIT)
        .map(|e| plan.updates(e).map(|b| b.name).collect())
        .unwrap_or_default();
    match tensors.iter().find(|(n, _)| !written.contains(&n.as_str())) {
        Some((name, _)) if !resuming => bail!(
            "the plan's {name} needs an initial value: its init entry does not write it, it is not an MLP's w*/b* and there is no PLAN{INIT_SUFFIX} beside the plan; give --init FILE (a safetensors file under the plan's names, such as the one written beside a plan from ONNX or the layer API) or --resume CKPT"
        ),
        _ => Ok(()),
    }
}

/// A split evaluated with the `forward` entry.
pub(super) struct Evaluation<'a> {
    pub(super) set: &'a data::Dataset,
    pub(super) d_in: usize,
    pub(super) batch: usize,
}

impl Evaluation<'_> {
    /// `accuracy A` (classification) or `MSE M, MAE A` (regression); `None` for an empty
    /// split.
    pub(super) fn metrics(&self, model: &mut RuntimeModel<'_>) -> Result<Option<String>> {
        let s = self.set;
        if s.is_empty() {
            return Ok(None);
        }
        if s.n_targets() == 0 {
            let acc = model.accuracy(&s.features, &s.labels, self.d_in, self.batch)?;
            return Ok(Some(format!("accuracy: {acc:.3}")));
        }
        let pred = exchange::forward_logits(model, &s.features, s.len(), self.d_in, self.batch)?;
        if pred.len() != s.targets().len() {
            bail!(
                "the plan's forward output has {} values per row, the targets {}",
                pred.len() / s.len(),
                s.n_targets()
            );
        }
        let (mse, mae) = table::mse_mae(&pred, s.targets());
        // Small errors in scientific notation, so a fit that converged still shows digits.
        let show = |v: f64| {
            if v != 0.0 && v.abs() < 1e-3 {
                format!("{v:.4e}")
            } else {
                format!("{v:.6}")
            }
        };
        Ok(Some(format!("MSE: {}, MAE: {}", show(mse), show(mae))))
    }
}

/// The first test rows' predicted classes by name.
fn print_predictions(
    model: &mut RuntimeModel<'_>,
    test: &Evaluation<'_>,
    names: &[String],
) -> Result<()> {
    let rows = test.set.len().min(5);
    if rows == 0 {
        return Ok(());
    }
    let logits = exchange::forward_logits(
        model,
        &test.set.features[..rows * test.d_in],
        rows,
        test.d_in,
        test.batch,
    )?;
    let width = logits.len() / rows;
    let name = |k: usize| names.get(k).map_or("?", String::as_str);
    let shown: Vec<String> = logits
        .chunks_exact(width.max(1))
        .zip(&test.set.labels)
        .map(|(row, &label)| {
            format!(
                "{} (label {})",
                name(tapeplan_planner::exec::runtime::argmax(row)),
                name(usize::from(label))
            )
        })
        .collect();
    println!("test predictions, first {rows}: {}", shown.join(", "));
    Ok(())
}

/// The progress bar, the loss curve and the checkpoints of a `train` run.
struct Progress<'a> {
    bar: ProgressBar,
    curve: &'a mut LossCurve,
    checkpoint: Option<&'a Path>,
    /// The validation split, evaluated after every epoch (nothing when it is empty).
    val: Evaluation<'a>,
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
        match self.val.metrics(model)? {
            None => println!("epoch {:>3}: mean loss {:.6}", s.epoch + 1, s.mean_loss),
            Some(m) => println!(
                "epoch {:>3}: mean loss {:.6}, validation {m}",
                s.epoch + 1,
                s.mean_loss
            ),
        }
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
