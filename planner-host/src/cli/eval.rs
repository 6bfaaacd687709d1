//! `tapeplan eval`: a plan's `forward` entry over every row of a data set's split, with
//! parameters from a checkpoint, a safetensors file or a device transcript; accuracy and mean
//! cross-entropy (classification) or MSE and MAE (regression), as text or JSON. Nothing is
//! trained and nothing is written.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{ArgGroup, Args, ValueEnum};

use tapeplan_core::format::BindingKind;
use tapeplan_planner::exec::runtime::{argmax, RuntimeModel};
use tapeplan_planner::io::data::{self, Dataset};
use tapeplan_planner::io::exchange;
use tapeplan_planner::io::inspect::PlanInfo;
use tapeplan_planner::io::table::{self, Standardizer, Table, Task};
use tapeplan_planner::model::run::{plan_model_tensors, MNIST1D_TRAIN_ROWS};
use tapeplan_planner::protocol::{
    digest_f32, ENTRY_FORWARD, ENTRY_TRAIN_STEP, INPUT_X, OUTPUT_LOGITS,
};

use super::train::{
    load_data, saved_class_names, split_rows, task_of, Evaluation, STANDARDIZE_SUFFIX,
};
use super::{not_a_checkpoint, read, transcript_parameters};

/// Which rows `eval` runs: the held-out rows `train` reports its test figures on, the rows it
/// trains on (its validation rows included), or every row.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SplitArg {
    /// The test split (`train`'s held-out rows).
    Test,
    /// The training split (validation rows included).
    Train,
    /// Every row of the data set.
    All,
}

impl SplitArg {
    /// How the text output names the split's figures (`test accuracy: …`, as `train` prints).
    fn label(self) -> &'static str {
        match self {
            SplitArg::All => "all rows",
            other => other.name(),
        }
    }

    fn name(self) -> &'static str {
        match self {
            SplitArg::Test => "test",
            SplitArg::Train => "train",
            SplitArg::All => "all",
        }
    }
}

/// `tapeplan eval`'s options.
#[derive(Args)]
#[command(group(ArgGroup::new("parameters").required(true).args(["checkpoint", "params", "transcript"])))]
pub struct EvalArgs {
    /// The plan (its `forward` entry is run; its `train_step` says the task).
    pub plan: PathBuf,
    /// The parameters from a checkpoint of the plan (`tapeplan train --checkpoint`, `tapeplan
    /// import`).
    #[arg(long, value_name = "CKPT")]
    pub checkpoint: Option<PathBuf>,
    /// The parameters from a safetensors file under the plan's names (`tapeplan train
    /// --save-params`, `tapeplan export`, PLAN.init.safetensors).
    #[arg(long, value_name = "FILE")]
    pub params: Option<PathBuf>,
    /// The parameters a device sent back at the end of its transcript (its `param` lines,
    /// checked against its `digest` line; `-` for standard input).
    #[arg(long, value_name = "FILE")]
    pub transcript: Option<PathBuf>,
    /// The data set: `digits` (the bundled handwritten digits, the default), `mnist1d` (the
    /// bundled MNIST-1D: rows 0..4000 train, 4000..5000 test), or a CSV (optionally gzip)
    /// file read as `tapeplan train --data` reads it.
    #[arg(long, value_name = "digits|mnist1d|FILE", default_value = "digits")]
    pub data: String,
    /// The target columns of a CSV, as `train --target-columns`.
    #[arg(long, value_delimiter = ',', value_name = "COLUMNS")]
    pub target_columns: Vec<String>,
    /// Which rows: `test` (the held-out split `train` reports on), `train` or `all`.
    #[arg(long, value_enum, default_value_t = SplitArg::Test)]
    pub split: SplitArg,
    /// Seed of the train/test split (as `train --split-seed`).
    #[arg(long, default_value_t = 0)]
    pub split_seed: u64,
    /// Fraction of rows in the training split (as `train --train-fraction`; default: the
    /// digits' 1437/360 split, 0.8 of a CSV).
    #[arg(long)]
    pub train_fraction: Option<f64>,
    /// Multiply every feature by this (as `train --scale`).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f32,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The data set `eval` reads.
enum EvalData {
    Digits,
    Mnist1d,
    Csv(PathBuf),
}

impl EvalData {
    fn of(arg: &str) -> EvalData {
        match arg {
            "digits" => EvalData::Digits,
            "mnist1d" => EvalData::Mnist1d,
            path => EvalData::Csv(PathBuf::from(path)),
        }
    }
}

/// Where the parameters came from: its kind (`checkpoint`, `safetensors`, `transcript`) and
/// path.
struct Source {
    kind: &'static str,
    path: PathBuf,
}

/// Loads the parameters of `args` into `model`.
fn load_parameters(model: &mut RuntimeModel<'_>, args: &EvalArgs) -> Result<Source> {
    let plan = *model.plan();
    let values = if let Some(path) = &args.checkpoint {
        let blob = read(path)?;
        let ckpt = tapeplan_runtime::Checkpoint::parse(&blob)
            .map_err(|e| anyhow::anyhow!("{}: checkpoint rejected: {e}", path.display()))?;
        if ckpt.plan_id() != plan.plan_id() {
            bail!(
                "{} is a checkpoint of plan {:08x}, not of {} (plan {:08x}): evaluate it with the plan it was saved from",
                path.display(),
                ckpt.plan_id(),
                args.plan.display(),
                plan.plan_id()
            );
        }
        exchange::restore_into_model(model, &ckpt)
            .with_context(|| format!("restoring {}", path.display()))?;
        return Ok(Source {
            kind: "checkpoint",
            path: path.clone(),
        });
    } else if let Some(path) = &args.params {
        let values = exchange::import_into_persistent(&plan, model.persistent(), &read(path)?)
            .with_context(|| format!("--params {}", path.display()))?;
        exchange::check_finite_parameters(&plan, &values)
            .with_context(|| format!("--params {}", path.display()))?;
        (values, "safetensors", path)
    } else if let Some(path) = &args.transcript {
        let (values, _) = transcript_parameters(&plan, model.persistent(), path)?;
        (values, "transcript", path)
    } else {
        bail!("give the parameters: --checkpoint CKPT, --params FILE or --transcript FILE");
    };
    let (values, kind, path) = values;
    for b in plan.parameters() {
        model.load_parameter(b.name, &values[b.range()])?;
    }
    Ok(Source {
        kind,
        path: path.clone(),
    })
}

/// The rows of `args.split` of the data set, for `task`, with the class names of a CSV.
fn split_of(args: &EvalArgs, task: &Task) -> Result<(Dataset, Option<Vec<String>>)> {
    let data = EvalData::of(&args.data);
    let table = match &data {
        EvalData::Digits => load_data(None, task, &args.target_columns)?,
        EvalData::Csv(p) => load_data(Some(p), task, &args.target_columns)?,
        EvalData::Mnist1d => {
            if let Task::Regression { .. } = task {
                bail!(
                    "a regression plan (an input y) needs a CSV: MNIST-1D is a classification set"
                );
            }
            if !args.target_columns.is_empty() {
                bail!("--target-columns applies to a CSV");
            }
            if args.train_fraction.is_some() || args.split_seed != 0 {
                bail!("MNIST-1D has a fixed split (rows 0..{MNIST1D_TRAIN_ROWS} train, the rest test): leave out --train-fraction and --split-seed");
            }
            let dataset = data::mnist1d()?;
            Table {
                feature_columns: (0..dataset.n_features()).collect(),
                target_columns: vec![dataset.n_features()],
                dataset,
                class_names: None,
            }
        }
    };
    let Table {
        dataset,
        class_names,
        ..
    } = table;
    let (train, test) = match data {
        EvalData::Mnist1d => dataset.split_at(MNIST1D_TRAIN_ROWS.min(dataset.len())),
        EvalData::Digits | EvalData::Csv(_) => {
            let (n_train, _) = split_rows(
                dataset.len(),
                args.train_fraction,
                matches!(data, EvalData::Csv(_)),
                0.0,
            );
            dataset.split_seeded(args.split_seed, n_train)
        }
    };
    let set = match args.split {
        SplitArg::Test => test,
        SplitArg::Train => train,
        SplitArg::All => dataset,
    };
    Ok((set, class_names))
}

/// The figures of one evaluation.
enum Figures {
    Classification {
        correct: usize,
        mean_cross_entropy: f64,
    },
    Regression {
        mse: f64,
        mae: f64,
    },
}

/// Mean softmax cross-entropy of `logits` (`[rows, classes]`) against `labels` (`[rows]`),
/// in `f64` from the `f32` logits: `log Σ_j exp(z_j − max z) + max z − z_label` per row
/// (`libm`'s `exp` and `log`, the same on every host), rows summed in order, divided by the
/// row count.
fn mean_cross_entropy(logits: &[f32], labels: &[u8], classes: usize) -> f64 {
    let mut sum = 0.0f64;
    for (row, &label) in logits.chunks_exact(classes.max(1)).zip(labels) {
        let max = row
            .iter()
            .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
        let lse = libm::log(
            row.iter()
                .map(|&v| libm::exp(f64::from(v) - max))
                .sum::<f64>(),
        ) + max;
        sum += lse - f64::from(row[usize::from(label)]);
    }
    sum / labels.len().max(1) as f64
}

/// `tapeplan eval`.
///
/// # Errors
/// Unreadable files; a plan without a `forward` entry (or `train_step`, which says the task);
/// parameters that do not fit the plan (a name missing or foreign, another shape, a checkpoint
/// of another plan, non-finite values); data whose rows do not fit the plan's `x` or whose
/// labels the plan has no class for; an empty split; runtime errors.
pub fn eval(args: EvalArgs) -> Result<ExitCode> {
    if !args.scale.is_finite() {
        bail!("--scale must be finite");
    }
    if args
        .train_fraction
        .is_some_and(|f| !(0.0..=1.0).contains(&f))
    {
        bail!("--train-fraction must be in [0, 1]");
    }
    let plan_path = &args.plan;
    let bytes = read(plan_path)?;
    not_a_checkpoint(plan_path, &bytes)?;
    super::parse_plan(plan_path, &bytes)?;
    let info = PlanInfo::decode(&bytes);
    let entries: Vec<&str> = info.entries.iter().map(|e| e.name.as_str()).collect();
    for needed in [ENTRY_FORWARD, ENTRY_TRAIN_STEP] {
        if !entries.contains(&needed) {
            bail!(
                "{} has no `{needed}` entry (its entries: {}): `eval` runs `forward` and reads the task from `train_step`",
                plan_path.display(),
                entries.join(", ")
            );
        }
    }
    let x_shape = info
        .binding_shape(ENTRY_FORWARD, BindingKind::Input, INPUT_X)
        .with_context(|| format!("{}: the forward entry has no input x", plan_path.display()))?;
    let batch = x_shape.dim(0).unwrap_or(0).max(1);
    let d_in = x_shape.elems() / batch;
    let task = task_of(&info, saved_class_names(plan_path)?)?;
    let (mut set, class_names) = split_of(&args, &task)?;
    if set.n_features() != d_in {
        bail!(
            "the data has {} features per row; the plan's input x is {x_shape} ({d_in} per row)",
            set.n_features()
        );
    }
    if set.is_empty() {
        bail!(
            "the {} split of the data has no rows (--train-fraction?)",
            args.split.name()
        );
    }
    let classes = info
        .binding_shape(ENTRY_FORWARD, BindingKind::Output, OUTPUT_LOGITS)
        .and_then(|s| s.dim(1))
        .unwrap_or(0);
    if set.n_targets() == 0 {
        if let Some((row, &label)) = set
            .labels
            .iter()
            .enumerate()
            .find(|(_, &l)| usize::from(l) >= classes)
        {
            let name = class_names
                .as_ref()
                .and_then(|n| n.get(usize::from(label)))
                .map(|n| format!(" ({n:?})"))
                .unwrap_or_default();
            bail!(
                "row {} of the {} split has label {label}{name}, but the plan's logits have {classes} classes: is --data the data set the plan was trained on?",
                row + 1,
                args.split.name()
            );
        }
    }
    if args.scale != 1.0 {
        for v in &mut set.features {
            *v *= args.scale;
        }
        if let Some(i) = set.features.iter().position(|v| !v.is_finite()) {
            bail!(
                "--scale {:?} turns feature {} of row {} into {}",
                args.scale,
                i % d_in + 1,
                i / d_in + 1,
                set.features[i]
            );
        }
    }
    // What `train --standardize` wrote beside the plan: the training split's statistics.
    let standardize = exchange::with_suffix(plan_path, STANDARDIZE_SUFFIX);
    let standardized = if standardize.is_file() {
        let text = std::fs::read_to_string(&standardize)
            .with_context(|| format!("reading {}", standardize.display()))?;
        let s = Standardizer::from_json(&text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", standardize.display()))?;
        s.apply(&mut set);
        Some(standardize)
    } else {
        None
    };

    let mut model =
        RuntimeModel::new(&bytes).with_context(|| format!("loading {}", plan_path.display()))?;
    let source = load_parameters(&mut model, &args)?;
    let tensors = plan_model_tensors(model.plan());
    let shown = Evaluation {
        set: &set,
        d_in,
        batch,
    }
    .metrics(&mut model)?
    .unwrap_or_default();
    let figures = if set.n_targets() == 0 {
        let logits = exchange::forward_logits(&mut model, &set.features, set.len(), d_in, batch)?;
        let correct = logits
            .chunks_exact(classes.max(1))
            .zip(&set.labels)
            .filter(|(row, &label)| argmax(row) == usize::from(label))
            .count();
        Figures::Classification {
            correct,
            mean_cross_entropy: mean_cross_entropy(&logits, &set.labels, classes),
        }
    } else {
        let pred = exchange::forward_logits(&mut model, &set.features, set.len(), d_in, batch)?;
        if pred.len() != set.targets().len() {
            bail!(
                "the plan's forward output has {} values per row, the data's targets {}",
                pred.len() / set.len(),
                set.n_targets()
            );
        }
        let (mse, mae) = table::mse_mae(&pred, set.targets());
        Figures::Regression { mse, mae }
    };
    // The digest of the model's tensors (not the optimizer's state), in binding order: a
    // transcript's `digest` line, and `train`'s parameter digest for a plan without state.
    let model_values: Vec<f32> = model
        .plan()
        .parameters()
        .filter(|b| tensors.iter().any(|(n, _)| n == b.name))
        .flat_map(|b| model.persistent()[b.range()].to_vec())
        .collect();
    let digest = digest_f32(&model_values);
    if args.json {
        let mut out = serde_json::json!({
            "plan": plan_path.display().to_string(),
            "parameters": { "kind": source.kind, "path": source.path.display().to_string() },
            "model_digest": format!("{digest:016x}"),
            "data": args.data,
            "split": args.split.name(),
            "rows": set.len(),
            "standardized_with": standardized.as_ref().map(|p| p.display().to_string()),
        });
        let figures = match figures {
            Figures::Classification {
                correct,
                mean_cross_entropy,
            } => serde_json::json!({
                "task": "classification",
                "correct": correct,
                // `correct / rows`, in f64 (the text's accuracy is train's f32 one).
                "accuracy": correct as f64 / set.len() as f64,
                "mean_cross_entropy": mean_cross_entropy,
            }),
            Figures::Regression { mse, mae } => serde_json::json!({
                "task": "regression",
                "mse": mse,
                "mae": mae,
            }),
        };
        if let (Some(o), Some(f)) = (out.as_object_mut(), figures.as_object()) {
            o.extend(f.clone());
        }
        println!("{out}");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "eval {} with the parameters of {} {} on the {} split of {} ({} rows{})",
        plan_path.display(),
        source.kind,
        source.path.display(),
        args.split.name(),
        args.data,
        set.len(),
        standardized
            .as_ref()
            .map(|p| format!(", standardized with {}", p.display()))
            .unwrap_or_default()
    );
    match figures {
        Figures::Classification {
            correct,
            mean_cross_entropy,
            ..
        } => println!(
            "{} {shown} ({correct}/{} correct), mean cross-entropy: {mean_cross_entropy:.6}",
            args.split.label(),
            set.len()
        ),
        Figures::Regression { .. } => println!("{} {shown}", args.split.label()),
    }
    println!(
        "model digest: 0x{digest:016x} (its {} tensors, as a transcript's `digest` line)",
        tensors.len()
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cross_entropy_of_known_logits() {
        // Row 1: logits [0, ln 3], label 1: -ln(3/4); row 2: equal logits over 2, label 0: ln 2.
        let l3 = libm::logf(3.0);
        let ce = mean_cross_entropy(&[0.0, l3, 5.0, 5.0], &[1, 0], 2);
        let expected = (-libm::log(libm::exp(f64::from(l3)) / (1.0 + libm::exp(f64::from(l3))))
            + libm::log(2.0))
            / 2.0;
        assert!((ce - expected).abs() < 1e-12, "{ce} against {expected}");
    }
}
