//! A training run named by a few keys: the job description a firmware build, a device
//! transcript and `tapeplan verify` share ([`RunConfig`]).
//!
//! A [`RunConfig`] names everything a run depends on: the MLP (`model`, `activation`), the loss
//! (`ce` over labels or `mse` over float targets), `batch`, `lr`, `seed`, `split_seed`, `samples`
//! and `epochs`, and optionally the math profile (`math=precise|fast`; absent means `precise`,
//! and the canonical line names it only when it is `fast`), the arithmetic profile
//! (`arith=separate|fma`; absent means `separate`, named only when `fma`), fusion (`fusion=on|off|auto`), the
//! optimizer (`optimizer=sgd|momentum|nesterov|adam|adamw`, with `momentum=` and
//! `weight_decay=`; absent means SGD), an MLP's dropout (`dropout=P` after every hidden
//! activation, its generator keyed by `seed`; absent means none), the data (`data=digits`, the default, or
//! `data=PATH data_digest=HEX`) and the initial parameters (`init=glorot`, the default, or
//! `init=PATH init_digest=HEX`). Optional keys at their defaults are left out of the canonical
//! line, so descriptions written before they existed keep their line.
//!
//! `plan=PATH plan_digest=HEX` names a plan file instead of a model: one `tapeplan plan
//! --layers/--onnx` wrote, the layer API's `plan_sequential` example, or `tapeplan train`. The
//! plan fixes the model, the batch, the loss, the optimizer with its learning rate and the math
//! profile, so such a description gives none of `model`, `activation`, `loss`, `batch`, `lr`,
//! `optimizer`, `momentum`, `weight_decay`, `math`, `arith`, `fusion` ([`RunConfig::PLAN_FIXED_KEYS`];
//! each is an error naming it): `plan=PATH plan_digest=HEX seed=S split_seed=S samples=N
//! epochs=E`, then `data=` and `init=` as below. The plan's `train_step` inputs say the task
//! ([`PlanIo`]): `x` and `labels` (classification: the CSV's last column, [`RunConfig::loss`]
//! reads `ce`) or `x` and `y` (regression: its last `d_out` columns, `loss` reads `mse`
//! whatever the plan's loss is). The initial values are [`RunConfig::plan_initial_persistent`]:
//! `init=PATH`, else `PLAN.init.safetensors` beside the plan ([`INIT_SUFFIX`]), else an MLP's
//! Glorot draw or the plan's `init` entry, else an error naming the missing file. There is no
//! tape to retrain: `tapeplan verify` replays the plan file with the reference kernels
//! ([`crate::exec::replay`]).
//!
//! `model=mnist1d_cnn` names MNIST-1D's CNN instead of an MLP ([`mnist1d_cnn`]: the paper's
//! `ConvBase`, built with the layer API, initialized as PyTorch does from the run's `seed`); it
//! needs `activation=relu` (its activation), `loss=ce` and `data=mnist1d`. `data=mnist1d` is the
//! bundled MNIST-1D set (`data/mnist1d.csv.gz`, embedded: [`data::mnist1d`]); its training split is rows
//! `0..4000` of the file in order (the paper's split, as `examples/mnist1d.rs` takes it), so
//! `split_seed` must be 0; the run's training set is the first `samples` rows of that split, visited
//! in the epoch order below like every run. A device stores the features as `f32`; the data
//! digest is the CSV one (FNV-1a 64 of the features, little-endian, then the labels).
//!
//! `model=digits_cnn` names the digits' 2-D CNN ([`digits_cnn`], a LeNet-like stack of two
//! 3 × 3 convolutions with 2 × 2 max pooling and a linear head, 16 and 32 channels, the
//! `digits_cnn` example's model); `model=digits_cnn:C1,C2` the same with `C1` and `C2`
//! channels (smaller devices). It needs `activation=relu`, `loss=ce` and the bundled digits
//! (no `data=`), and is initialized as PyTorch does from the run's `seed`. Its device stores the
//! features as `f32` (the firmware's feature `cnn`), so its data digest is the `f32` one. The plan's id depends on
//! the profile, so a device that ran the other profile's plan is a mismatch. Both sides derive
//! the rest from it the same way:
//!
//! - **data**: the bundled digits set ([`data::digits`]), split with
//!   [`Dataset::split_seeded`]`(split_seed, DIGITS_TRAIN_ROWS)`; the training set is the first
//!   `samples` rows of the training half ([`RunConfig::training_set`]). A device stores the raw
//!   pixel counts (`u8`, `0..=16`) and labels, and converts a count `c` to the feature
//!   `c as f32 * 0.0625` (exact). With `data=PATH`, a CSV read as `tapeplan train --data` reads
//!   it ([`crate::io::table`]: the label in the last column for `ce`, the last `d_out` columns
//!   as targets for `mse`, class names sorted), whose bytes must have the FNV-1a 64 digest
//!   `data_digest` (16 hex digits; `tapeplan verify` prints it when it differs), split with
//!   [`Dataset::split_seeded`]`(split_seed, round(0.8 · rows))` (`train`'s default split).
//!   A relative path is relative to the folder of the run description's file
//!   ([`RunConfig::from_file`], [`RunConfig::parse_in`]; the current folder for
//!   [`RunConfig::parse`] of a text), wherever it is read from (the firmware build, `tapeplan
//!   verify --config`); it is kept as written in [`RunConfig::to_line`], the transcript's
//!   `config` line. Files are compared by digest, not by spelling: two runs that name one
//!   file by two paths are the same run, one path naming two different files is not.
//! - **initial parameters**: [`glorot_uniform`]`(shapes, seed)`; with `init=PATH`, the
//!   safetensors file (`tapeplan export`'s names and layouts), whose bytes must have the digest
//!   `init_digest`.
//! - **order**: epoch `e` (0-based) visits the rows `0..samples` in the run protocol's epoch
//!   order ([`epoch_shuffle`]`(seed, e, …)`), in full batches of `batch` consecutive rows of
//!   that order (the last `samples % batch` rows of each epoch are not used). Labels go in as
//!   `label as f32`; targets as they are.
//! - **steps**: `epochs · (samples / batch)`, numbered from 1.
//!

use std::collections::BTreeMap;
use std::fmt;

use tapeplan_core::{ArithProfile, MathProfile};

use crate::io::data::{self, Dataset};
use crate::io::exchange::{self, Param};
use crate::io::table::{self, TableSpec, Task};
use crate::model::job::{JobOptions, TrainingJob};
use crate::model::mlp::{glorot_uniform, Activation, Loss, Mlp};
use crate::model::nn::{Conv1d, Conv2d, Flatten, Linear, MaxPool2d, ReLU, Sequential};
use crate::model::optim::Optimizer;
use crate::plan::{FusionPolicy, PlanOptions, PlanningError};
use crate::protocol::{data_digest, epoch_shuffle, Fnv1a64};

/// Why a run description is refused, or its job or data could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunConfigError {
    /// A run description is malformed, or names a run that cannot work.
    #[error("run config: {0}")]
    Invalid(String),
    /// Recording or planning the run's job failed.
    #[error("planning: {0}")]
    Plan(#[from] PlanningError),
    /// The data set failed to load.
    #[error("data: {0}")]
    Data(#[from] data::DataError),
    /// The `data=PATH` table failed to load.
    #[error("data: {0}")]
    Table(#[from] table::TableError),
    /// The `init=PATH` file does not fit the model.
    #[error("init: {0}")]
    Init(#[from] exchange::ExchangeError),
    /// A file the run names cannot be read, or its digest is not the one the run names.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// Samples per MNIST-1D signal (the CNN's input length).
pub const MNIST1D_LENGTH: usize = data::MNIST1D_FEATURES;
/// MNIST-1D's classes.
pub const MNIST1D_CLASSES: usize = 10;
/// Rows of MNIST-1D's training split (rows `0..4000` of the file; the other 1000 are the test
/// split).
pub const MNIST1D_TRAIN_ROWS: usize = 4000;

/// MNIST-1D's CNN (Greydanus, "Scaling Down Deep Learning", 2020; its repository's `ConvBase`)
/// in the layer API: three `Conv1d` with 25 channels (kernel 5, then 3 and 3; stride 2,
/// padding 1), ReLU after each, a linear head on the flattened 25 × 5 features; PyTorch's
/// default initialization drawn from the layer API's stream seeded with `seed`.
///
/// # Shapes
/// Input `x` `[batch, 1, 40]`; output logits `[batch, 10]`.
pub fn mnist1d_cnn(seed: u64) -> Sequential {
    Sequential::new(&[1, MNIST1D_LENGTH])
        .push(Conv1d::new(1, 25, 5).stride(2).padding(1))
        .push(ReLU)
        .push(Conv1d::new(25, 25, 3).stride(2).padding(1))
        .push(ReLU)
        .push(Conv1d::new(25, 25, 3).stride(2).padding(1))
        .push(ReLU)
        .push(Flatten)
        .push(Linear::new(125, MNIST1D_CLASSES))
        .seed(seed)
}

/// The channels of [`digits_cnn`]'s two convolutions in `model=digits_cnn` (the
/// `digits_cnn` example's model); `model=digits_cnn:C1,C2` names others.
pub const DIGITS_CNN_CHANNELS: [usize; 2] = [16, 32];

/// A LeNet-like 2-D CNN for the bundled 8 × 8 digits (the shape of LeCun et al., 1998, at this
/// size): `Conv2d(1, c1, 3, padding 1) → ReLU → MaxPool2d(2) → Conv2d(c1, c2, 3, padding 1) →
/// ReLU → MaxPool2d(2) → Flatten → Linear(4 · c2, 10)` with `[c1, c2] = channels`, PyTorch's
/// default initialization drawn from the layer API's stream seeded with `seed`.
/// [`DIGITS_CNN_CHANNELS`] (16, 32: 6 090 parameters) is the `digits_cnn` example's model.
///
/// # Shapes
/// Input `x` `[batch, 1, 8, 8]` (a row's 64 features, row-major); output logits `[batch, 10]`.
pub fn digits_cnn(channels: [usize; 2], seed: u64) -> Sequential {
    let [c1, c2] = channels;
    Sequential::new(&[1, 8, 8])
        .push(Conv2d::new(1, c1, 3).padding(1))
        .push(ReLU)
        .push(MaxPool2d::new(2))
        .push(Conv2d::new(c1, c2, 3).padding(1))
        .push(ReLU)
        .push(MaxPool2d::new(2))
        .push(Flatten)
        .push(Linear::new(4 * c2, data::DIGITS_CLASSES))
        .seed(seed)
}

/// A plan file a run trains (`plan=PATH plan_digest=HEX`), with what its bindings say.
///
/// Two are equal when their files' digests are: the file, not the spelling of its path, is
/// the run's (`plan=a.plan` and `plan=./a.plan` agree; one path naming two different files
/// does not).
#[derive(Clone, Debug)]
pub struct RunPlan {
    /// The path, as written (relative to the run description's folder, or absolute).
    pub path: String,
    /// FNV-1a 64 of the file's bytes.
    pub digest: u64,
    /// Where the file is read from: `path` resolved against the run description's folder
    /// ([`RunConfig::parse_in`]).
    pub file: String,
}

impl PartialEq for RunPlan {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest
    }
}

impl Eq for RunPlan {}

/// Where the files a run description names are read from: relative paths from its folder,
/// and any path whose digest is one of `known`'s from that file (a device's description of the
/// expected run may spell a file otherwise).
struct Resolver<'a> {
    /// The description's folder (empty: the current folder).
    dir: &'a std::path::Path,
    /// Files already pinned by digest (an expected run's), as `(digest, file)`.
    known: &'a [(u64, String)],
}

impl Resolver<'_> {
    /// The file to read for `path` pinned by `digest`: a known file of that digest, else
    /// `path` itself when absolute (or the folder is the current one), else `dir/path`.
    fn file(&self, path: &str, digest: u64) -> String {
        if let Some((_, f)) = self.known.iter().find(|(d, _)| *d == digest) {
            return f.clone();
        }
        let p = std::path::Path::new(path);
        if p.is_absolute() || self.dir.as_os_str().is_empty() {
            path.to_owned()
        } else {
            self.dir.join(p).to_string_lossy().into_owned()
        }
    }
}

/// The model a run trains.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunModel {
    /// The MLP of [`RunConfig::layers`] (`model=64,32,10`).
    Mlp,
    /// MNIST-1D's CNN, [`mnist1d_cnn`] (`model=mnist1d_cnn`; [`RunConfig::layers`] is then
    /// `[40, 10]`, its input length and classes).
    Mnist1dCnn,
    /// The digits' 2-D CNN, [`digits_cnn`] with these channels (`model=digits_cnn`, or
    /// `model=digits_cnn:C1,C2`; [`RunConfig::layers`] is then `[64, 10]`).
    DigitsCnn([usize; 2]),
    /// A plan file (`plan=PATH plan_digest=HEX`): its batch, loss, optimizer, learning rate
    /// and math profile are the plan's own ([`RunConfig::parse`] reads them from its bindings).
    Plan(RunPlan),
}

/// Where a run's rows come from. Two CSVs are equal when their digests are, whatever the
/// spelling of their paths.
#[derive(Clone, Debug)]
pub enum RunData {
    /// The bundled digits set (`data=digits`, the default).
    Digits,
    /// The bundled MNIST-1D set (`data=mnist1d`, [`data::mnist1d`]).
    Mnist1d,
    /// A CSV file (`data=PATH data_digest=HEX`).
    Csv {
        /// The path, as written (relative to the run description's folder, or absolute).
        path: String,
        /// FNV-1a 64 of the file's bytes.
        digest: u64,
        /// Where the file is read from: `path` resolved against the run description's folder.
        file: String,
    },
}

impl PartialEq for RunData {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (RunData::Digits, RunData::Digits) | (RunData::Mnist1d, RunData::Mnist1d) => true,
            (RunData::Csv { digest: a, .. }, RunData::Csv { digest: b, .. }) => a == b,
            _ => false,
        }
    }
}

impl Eq for RunData {}

/// Where a run's initial parameters come from. Two files are equal when their digests are,
/// whatever the spelling of their paths.
#[derive(Clone, Debug)]
pub enum RunInit {
    /// [`glorot_uniform`] with the run's seed (`init=glorot`, the default).
    Glorot,
    /// A safetensors file (`init=PATH init_digest=HEX`).
    Safetensors {
        /// The path, as written (relative to the run description's folder, or absolute).
        path: String,
        /// FNV-1a 64 of the file's bytes.
        digest: u64,
        /// Where the file is read from: `path` resolved against the run description's folder.
        file: String,
    },
}

impl PartialEq for RunInit {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (RunInit::Glorot, RunInit::Glorot) => true,
            (RunInit::Safetensors { digest: a, .. }, RunInit::Safetensors { digest: b, .. }) => {
                a == b
            }
            _ => false,
        }
    }
}

impl Eq for RunInit {}

/// A run's optimizer (its learning rate is [`RunConfig::lr`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RunOptimizer {
    /// Plain SGD (`optimizer=sgd`, the default).
    Sgd,
    /// SGD with momentum (`optimizer=momentum momentum=μ`, μ 0.9 by default).
    Momentum(f32),
    /// Nesterov momentum (`optimizer=nesterov momentum=μ`).
    Nesterov(f32),
    /// Adam with PyTorch's defaults (`optimizer=adam`).
    Adam,
    /// AdamW (`optimizer=adamw weight_decay=λ`, λ 0.01 by default).
    AdamW(f32),
}

impl RunOptimizer {
    /// The optimizer with learning rate `lr` and PyTorch's defaults for the rest (as
    /// `tapeplan plan --optimizer`).
    pub fn with_lr(self, lr: f32) -> Optimizer {
        match self {
            RunOptimizer::Sgd => Optimizer::sgd(lr),
            RunOptimizer::Momentum(momentum) | RunOptimizer::Nesterov(momentum) => {
                Optimizer::Momentum {
                    lr,
                    momentum,
                    nesterov: matches!(self, RunOptimizer::Nesterov(_)),
                }
            }
            RunOptimizer::Adam => Optimizer::adam(lr),
            RunOptimizer::AdamW(decay) => match Optimizer::adamw(lr) {
                Optimizer::Adam {
                    beta1, beta2, eps, ..
                } => Optimizer::Adam {
                    lr,
                    beta1,
                    beta2,
                    eps,
                    decoupled_weight_decay: decay,
                },
                other => other,
            },
        }
    }
}

/// The suffix of the initial parameters' file beside a plan (`model.plan` →
/// `model.plan.init.safetensors`), what `tapeplan plan --onnx` and the layer API's
/// `plan_sequential` example write.
pub const INIT_SUFFIX: &str = ".init.safetensors";

/// The model's tensors of a plan (its parameters and buffers, not the optimizer's state), by
/// name, in binding order: what a transcript's `param` lines and an init file carry.
pub fn plan_model_tensors(
    plan: &tapeplan_runtime::Plan<'_>,
) -> Vec<(String, tapeplan_core::Shape)> {
    let all: Vec<&str> = plan.parameters().map(|b| b.name).collect();
    plan.parameters()
        .filter(|b| !exchange::is_training_state(b.name, &all))
        .map(|b| (b.name.to_owned(), b.shape))
        .collect()
}

/// What a plan's `train_step` bindings say about the run that trains it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanIo {
    /// Rows per step (the first extent of input `x`).
    pub batch: usize,
    /// Features per row (`x`'s elements per row).
    pub d_in: usize,
    /// Classes (the `forward` entry's `logits` per row) for a classification plan, targets
    /// per row (`y`'s) for a regression plan.
    pub d_out: usize,
    /// True for a classification plan (an input `labels`), false for a regression plan (an
    /// input `y`).
    pub labels: bool,
    /// The plan's math profile.
    pub math: MathProfile,
    /// The plan's arithmetic profile.
    pub arith: ArithProfile,
}

impl PlanIo {
    /// Reads validated plan bytes' `train_step` inputs: `x`, and `labels` or `y`.
    ///
    /// # Errors
    /// A message naming what is missing or not supported: a rejected plan, no `train_step`,
    /// no `x`, neither `labels` nor `y`, another input, no `forward` `logits` beside `labels`.
    pub fn of(bytes: &[u8]) -> Result<PlanIo, String> {
        use crate::io::inspect::PlanInfo;
        use crate::protocol::{
            ENTRY_FORWARD, ENTRY_TRAIN_STEP, INPUT_LABELS, INPUT_X, INPUT_Y, OUTPUT_LOGITS,
        };
        use tapeplan_core::format::BindingKind;
        let plan =
            tapeplan_runtime::Plan::parse_alloc(bytes).map_err(|e| format!("rejected: {e}"))?;
        let info = PlanInfo::decode(bytes);
        let step = info
            .entries
            .iter()
            .position(|e| e.name == ENTRY_TRAIN_STEP)
            .ok_or("the plan has no train_step entry")?;
        if let Some(other) = info.bindings.iter().find(|b| {
            b.kind == BindingKind::Input
                && b.entry == Some(step)
                && ![INPUT_X, INPUT_LABELS, INPUT_Y].contains(&b.name.as_str())
        }) {
            return Err(format!(
                "its train_step has an input {:?}: a run feeds x and labels or y only",
                other.name
            ));
        }
        let input = |name| info.binding_shape(ENTRY_TRAIN_STEP, BindingKind::Input, name);
        let x = input(INPUT_X).ok_or("its train_step has no input x")?;
        let batch = x
            .dim(0)
            .filter(|&b| b > 0)
            .ok_or("its input x has no batch")?;
        let (labels, d_out) = match (input(INPUT_LABELS), input(INPUT_Y)) {
            (Some(_), None) => (
                true,
                info.binding_shape(ENTRY_FORWARD, BindingKind::Output, OUTPUT_LOGITS)
                    .map(|s| s.elems() / s.dim(0).unwrap_or(1).max(1))
                    .ok_or("a classification plan (input labels) needs a forward entry with an output logits")?,
            ),
            (None, Some(y)) => (false, y.elems() / batch),
            _ => {
                return Err(
                    "its train_step needs an input labels (classification) or y (regression), one of them"
                        .to_owned(),
                )
            }
        };
        Ok(PlanIo {
            batch,
            d_in: x.elems() / batch,
            d_out,
            labels,
            math: plan.math(),
            arith: plan.arith(),
        })
    }
}

/// FNV-1a 64 of a file's bytes, as a run description's `plan_digest`, `data_digest` and
/// `init_digest` name it.
pub fn file_digest(bytes: &[u8]) -> u64 {
    data_digest(bytes, &[])
}

/// What a file a run description names is, by its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A plan the runtime accepts (`plan=`).
    Plan {
        /// Its id.
        plan_id: u32,
    },
    /// A safetensors file (`init=`).
    Safetensors,
    /// Anything else: a data table (`data=`).
    Data,
}

impl FileKind {
    /// The kind of `bytes`.
    pub fn of(bytes: &[u8]) -> FileKind {
        if let Ok(plan) = tapeplan_runtime::Plan::parse_alloc(bytes) {
            FileKind::Plan {
                plan_id: plan.plan_id(),
            }
        } else if safetensors::SafeTensors::deserialize(bytes).is_ok() {
            FileKind::Safetensors
        } else {
            FileKind::Data
        }
    }

    /// The run description's key for such a file: `plan`, `init` or `data`.
    pub fn key(self) -> &'static str {
        match self {
            FileKind::Plan { .. } => "plan",
            FileKind::Safetensors => "init",
            FileKind::Data => "data",
        }
    }
}

/// The bytes of `path` and their [`file_digest`]. A description may come from a device's
/// transcript (untrusted): only a regular file is read (not `/dev/zero`, a FIFO or a folder).
fn read_with_digest(path: &str) -> Result<(Vec<u8>, u64), RunConfigError> {
    let file_err = |message: String| RunConfigError::File {
        path: path.to_owned(),
        message,
    };
    let meta = std::fs::metadata(path).map_err(|e| file_err(e.to_string()))?;
    if !meta.is_file() {
        return Err(file_err("not a regular file".to_owned()));
    }
    let bytes = std::fs::read(path).map_err(|e| file_err(e.to_string()))?;
    let digest = file_digest(&bytes);
    Ok((bytes, digest))
}

/// The bytes of `path` after checking their digest against `expected` (the `key` of the run).
fn checked_file(path: &str, expected: u64, key: &str) -> Result<Vec<u8>, RunConfigError> {
    let (bytes, digest) = read_with_digest(path)?;
    if digest != expected {
        return Err(RunConfigError::File {
            path: path.to_owned(),
            message: format!(
                "its digest is {digest:016x}, the run's {key}={expected:016x}: another file than the run was made with"
            ),
        });
    }
    Ok(bytes)
}

/// `key=VALUE` parsed as a number.
fn num<T: std::str::FromStr>(k: &str, v: &str) -> Result<T, RunConfigError> {
    v.parse()
        .map_err(|_| config_err(format!("{k}={v}: not a valid number")))
}

/// The digest key `k` (16 hex digits) that pins a file of the run.
fn hex(values: &BTreeMap<&str, &str>, k: &str) -> Result<u64, RunConfigError> {
    let v = values.get(k).copied().ok_or_else(|| {
        config_err(format!(
            "missing key {k:?}: a file of the run is pinned by its digest (16 hex digits; `tapeplan digest FILE` prints it)"
        ))
    })?;
    u64::from_str_radix(v, 16)
        .ok()
        .filter(|_| v.len() == 16)
        .ok_or_else(|| config_err(format!("{k}={v}: 16 hex digits")))
}

/// The keys `data` and `data_digest`, a path resolved against `dir`.
fn parse_data(values: &BTreeMap<&str, &str>, at: &Resolver<'_>) -> Result<RunData, RunConfigError> {
    let opt = |k: &str| values.get(k).copied();
    Ok(match opt("data") {
        None | Some("digits") | Some("mnist1d") => {
            if opt("data_digest").is_some() {
                return Err(config_err("data_digest= applies to data=PATH"));
            }
            if opt("data") == Some("mnist1d") {
                RunData::Mnist1d
            } else {
                RunData::Digits
            }
        }
        Some(path) => {
            let digest = hex(values, "data_digest")?;
            RunData::Csv {
                path: path.to_owned(),
                digest,
                file: at.file(path, digest),
            }
        }
    })
}

/// The keys `init` and `init_digest`, a path resolved against `dir`.
fn parse_init(values: &BTreeMap<&str, &str>, at: &Resolver<'_>) -> Result<RunInit, RunConfigError> {
    Ok(match values.get("init").copied() {
        None | Some("glorot") => {
            if values.contains_key("init_digest") {
                return Err(config_err("init_digest= applies to init=PATH"));
            }
            RunInit::Glorot
        }
        Some(path) => {
            let digest = hex(values, "init_digest")?;
            RunInit::Safetensors {
                path: path.to_owned(),
                digest,
                file: at.file(path, digest),
            }
        }
    })
}

fn config_err(message: impl Into<String>) -> RunConfigError {
    RunConfigError::Invalid(message.into())
}

/// The channels of `model=digits_cnn` ([`DIGITS_CNN_CHANNELS`]) or `model=digits_cnn:C1,C2`.
fn digits_cnn_channels(model: &str) -> Result<[usize; 2], RunConfigError> {
    let bad = || {
        config_err(format!(
            "model={model}: digits_cnn, or digits_cnn:C1,C2 with two non-zero channel counts"
        ))
    };
    match model.strip_prefix("digits_cnn") {
        Some("") => Ok(DIGITS_CNN_CHANNELS),
        Some(rest) => {
            let (c1, c2) = rest
                .strip_prefix(':')
                .and_then(|r| r.split_once(','))
                .ok_or_else(bad)?;
            match (c1.parse::<usize>(), c2.parse::<usize>()) {
                (Ok(c1), Ok(c2)) if c1 > 0 && c2 > 0 => {
                    // Each count is an extent of a tensor (the head's width is 4 · C2): past
                    // the largest tensor it only overflows.
                    let most = tapeplan_core::MAX_TENSOR_ELEMS;
                    if c1.max(c2) > most {
                        return Err(config_err(format!(
                            "model={model}: channel counts of at most {most}"
                        )));
                    }
                    Ok([c1, c2])
                }
                _ => Err(bad()),
            }
        }
        None => Err(bad()),
    }
}

/// Everything a training run depends on; see the [module docs](self).
#[derive(Clone, Debug, PartialEq)]
pub struct RunConfig {
    /// The model (`model=WIDTHS`, `model=mnist1d_cnn` or `model=digits_cnn[:C1,C2]`).
    pub model: RunModel,
    /// Layer widths, input first (`64` for digits), output last (`10`); for the CNN, its input
    /// length and classes; for a `plan=` run, `[d_in, d_out]` of its bindings ([`PlanIo`]).
    pub layers: Vec<usize>,
    /// The hidden activation.
    pub activation: Activation,
    /// The loss; only softmax cross-entropy (`ce`, labels) is supported on digits. For a
    /// `plan=` run, only the task: `ce` for labels, `mse` for float targets (the plan's own
    /// loss is whatever it recorded).
    pub loss: Loss,
    /// Rows per step.
    pub batch: usize,
    /// SGD learning rate (0 for a `plan=` run: the plan's own).
    pub lr: f32,
    /// Seed of the initialization and the per-epoch shuffles.
    pub seed: u64,
    /// Seed of the digits train/test split.
    pub split_seed: u64,
    /// Rows of the training set (the first of the training split).
    pub samples: usize,
    /// Passes over the training set.
    pub epochs: usize,
    /// Which elementwise chains the plan fuses (optional key `fusion=on|off|auto`, default
    /// `off`: the demo firmware links its runtime without feature `fusion`, to keep it within
    /// its flash budget). `on` fuses every chain ([`FusionPolicy::All`]); `auto` decides per
    /// chain for a device without the kernel catalog ([`FusionPolicy::Device`]: a chain stays
    /// fused only where unfusing it would grow the arena, since there it is slower).
    pub fusion: FusionPolicy,
    /// The math profile of the plan and the oracle (optional key `math`; `precise` when absent).
    pub math: MathProfile,
    /// The arithmetic profile of the plan and the oracle (optional key `arith`; `separate`
    /// when absent).
    pub arith: ArithProfile,
    /// The optimizer (optional key `optimizer`; SGD when absent).
    pub optimizer: RunOptimizer,
    /// The dropout probability after every hidden activation of an MLP in `train_step`
    /// (optional key `dropout`; 0, none, when absent). Its generator's key is the run's `seed`
    /// ([`JobOptions::seed`]); the plan's `init` entry writes the key and a zero counter.
    pub dropout: f32,
    /// The data (optional keys `data`, `data_digest`; the digits when absent).
    pub data: RunData,
    /// The initial parameters (optional keys `init`, `init_digest`; the model's own when
    /// absent: Glorot for the MLP, PyTorch's for the CNN).
    pub init: RunInit,
}

impl RunConfig {
    /// The keys of a run description, in [`RunConfig::to_line`] order.
    pub const KEYS: [&'static str; 9] = [
        "model",
        "activation",
        "loss",
        "batch",
        "lr",
        "seed",
        "split_seed",
        "samples",
        "epochs",
    ];

    /// The optional keys, with their defaults: `plan` and `plan_digest` (a plan file's run,
    /// see [`RunConfig::parse`]), `dropout` (`0`, an MLP's only), `math` (`precise`), `arith`
    /// (`separate`), `fusion` (`off`), `optimizer` (`sgd`), `momentum` (`0.9`), `weight_decay` (`0.01`), `data` (`digits`),
    /// `data_digest` (needed with a data path), `init` (`glorot`), `init_digest` (needed with
    /// an init path).
    pub const OPTIONAL_KEYS: [&'static str; 13] = [
        "plan",
        "dropout",
        "plan_digest",
        "math",
        "arith",
        "fusion",
        "optimizer",
        "momentum",
        "weight_decay",
        "data",
        "data_digest",
        "init",
        "init_digest",
    ];

    /// Parses a run description: `key=value` tokens separated by white space, over any number of
    /// lines; `#` starts a comment that runs to the end of its line. Every key of
    /// [`RunConfig::KEYS`] must appear exactly once, each of [`RunConfig::OPTIONAL_KEYS`] at
    /// most once, e.g.
    /// `model=64,32,10 activation=tanh loss=ce batch=32 lr=0.1 seed=42 split_seed=0
    /// samples=256 epochs=10`. A `plan=PATH` description instead gives `plan`,
    /// `plan_digest`, `seed`, `split_seed`, `samples`, `epochs` (and `data`, `init`), and
    /// reads the plan file (paths relative to the current folder; [`RunConfig::from_file`] and
    /// [`RunConfig::parse_in`] read them relative to the description's folder) for what it
    /// fixes; see the
    /// [module docs](self).
    ///
    /// # Errors
    /// [`RunConfigError::Invalid`] naming the key that is missing, repeated, unknown or malformed,
    /// or a run that cannot work (`batch` of zero or above `samples`, `samples` above the
    /// training split, labels that are not digits), a key a `plan=` run leaves to its plan, a
    /// plan whose bindings a run cannot feed; [`RunConfigError::File`] for a plan file that
    /// cannot be read or has another digest.
    pub fn parse(text: &str) -> Result<RunConfig, RunConfigError> {
        RunConfig::parse_in(text, std::path::Path::new(""))
    }

    /// Reads and parses the run description in file `path` ([`RunConfig::parse_in`] with its
    /// folder): the paths it names are relative to the file's own folder, wherever it is read
    /// from.
    ///
    /// # Errors
    /// [`RunConfigError::File`] for an unreadable file; as [`RunConfig::parse`].
    pub fn from_file(path: &std::path::Path) -> Result<RunConfig, RunConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| RunConfigError::File {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        RunConfig::parse_in(&text, path.parent().unwrap_or(std::path::Path::new("")))
    }

    /// [`RunConfig::parse`] for a description whose relative paths (`plan=`, `data=`,
    /// `init=`) are relative to folder `dir` (the run file's folder; empty: the current
    /// folder). The paths are kept as written ([`RunConfig::to_line`] writes them so, a
    /// device's transcript sends them so) and read from `dir`.
    ///
    /// # Errors
    /// As [`RunConfig::parse`].
    pub fn parse_in(text: &str, dir: &std::path::Path) -> Result<RunConfig, RunConfigError> {
        RunConfig::parse_at(text, &Resolver { dir, known: &[] })
    }

    /// [`RunConfig::parse_in`] for a device's description of the run `expected` (a
    /// transcript's `config` line): a file it pins with the digest of one of `expected`'s files
    /// is that file, however the device spells its path (files are compared by content, not by
    /// name); other relative paths are read from `dir`.
    ///
    /// # Errors
    /// As [`RunConfig::parse`].
    pub fn parse_against(
        text: &str,
        dir: &std::path::Path,
        expected: &RunConfig,
    ) -> Result<RunConfig, RunConfigError> {
        let known = expected.files();
        RunConfig::parse_at(text, &Resolver { dir, known: &known })
    }

    /// The files the run names (its plan, data and initial values), as `(digest, file)`.
    pub fn files(&self) -> Vec<(u64, String)> {
        let mut files = Vec::new();
        if let RunModel::Plan(p) = &self.model {
            files.push((p.digest, p.file.clone()));
        }
        if let RunData::Csv { digest, file, .. } = &self.data {
            files.push((*digest, file.clone()));
        }
        if let RunInit::Safetensors { digest, file, .. } = &self.init {
            files.push((*digest, file.clone()));
        }
        files
    }

    fn parse_at(text: &str, at: &Resolver<'_>) -> Result<RunConfig, RunConfigError> {
        let mut values: BTreeMap<&str, &str> = BTreeMap::new();
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("");
            for token in line.split_whitespace() {
                let (k, v) = token
                    .split_once('=')
                    .ok_or_else(|| config_err(format!("{token:?} is not key=value")))?;
                if !Self::KEYS.contains(&k) && !Self::OPTIONAL_KEYS.contains(&k) {
                    return Err(config_err(format!(
                        "unknown key {k:?} (keys: {}, {})",
                        Self::KEYS.join(", "),
                        Self::OPTIONAL_KEYS.join(", ")
                    )));
                }
                if values.insert(k, v).is_some() {
                    return Err(config_err(format!("key {k:?} given twice")));
                }
            }
        }
        if values.contains_key("plan") || values.contains_key("plan_digest") {
            return Self::parse_plan_run(&values, at);
        }
        let get = |k: &str| {
            values
                .get(k)
                .copied()
                .ok_or_else(|| config_err(format!("missing key {k:?}")))
        };
        let (model, layers) = match get("model")? {
            "mnist1d_cnn" => (RunModel::Mnist1dCnn, vec![MNIST1D_LENGTH, MNIST1D_CLASSES]),
            m if m.starts_with("digits_cnn") => (
                RunModel::DigitsCnn(digits_cnn_channels(m)?),
                vec![data::DIGITS_FEATURES, data::DIGITS_CLASSES],
            ),
            widths => (
                RunModel::Mlp,
                widths
                    .split(',')
                    .map(|w| num::<usize>("model", w))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        let activation = match get("activation")? {
            "tanh" => Activation::Tanh,
            "relu" => Activation::Relu,
            other => return Err(config_err(format!("activation={other}: tanh or relu"))),
        };
        let loss = match get("loss")? {
            "ce" => Loss::SoftmaxCrossEntropy,
            "mse" => Loss::MeanSquaredError,
            other => {
                return Err(config_err(format!(
                    "loss={other}: ce (softmax cross-entropy over labels) or mse (mean squared error over float targets)"
                )))
            }
        };
        let opt = |k: &str| values.get(k).copied();
        let momentum = opt("momentum")
            .map(|v| num::<f32>("momentum", v))
            .transpose()?;
        let weight_decay = opt("weight_decay")
            .map(|v| num::<f32>("weight_decay", v))
            .transpose()?;
        let optimizer = match opt("optimizer").unwrap_or("sgd") {
            "sgd" => RunOptimizer::Sgd,
            "momentum" => RunOptimizer::Momentum(momentum.unwrap_or(0.9)),
            "nesterov" => RunOptimizer::Nesterov(momentum.unwrap_or(0.9)),
            "adam" => RunOptimizer::Adam,
            "adamw" => RunOptimizer::AdamW(weight_decay.unwrap_or(0.01)),
            other => {
                return Err(config_err(format!(
                    "optimizer={other}: sgd, momentum, nesterov, adam or adamw"
                )))
            }
        };
        if momentum.is_some()
            && !matches!(
                optimizer,
                RunOptimizer::Momentum(_) | RunOptimizer::Nesterov(_)
            )
        {
            return Err(config_err(
                "momentum= applies to optimizer=momentum|nesterov",
            ));
        }
        if weight_decay.is_some() && !matches!(optimizer, RunOptimizer::AdamW(_)) {
            return Err(config_err("weight_decay= applies to optimizer=adamw"));
        }
        let data = parse_data(&values, at)?;
        let init = parse_init(&values, at)?;
        let dropout = opt("dropout")
            .map(|v| num::<f32>("dropout", v))
            .transpose()?
            .unwrap_or(0.0);
        if !(0.0..1.0).contains(&dropout) {
            return Err(config_err(format!(
                "dropout={dropout}: a probability in [0, 1)"
            )));
        }
        if dropout > 0.0 && model != RunModel::Mlp {
            return Err(config_err("dropout= applies to an MLP (model=WIDTHS)"));
        }
        let cfg = RunConfig {
            model,
            layers,
            activation,
            loss,
            batch: num("batch", get("batch")?)?,
            lr: num("lr", get("lr")?)?,
            seed: num("seed", get("seed")?)?,
            split_seed: num("split_seed", get("split_seed")?)?,
            samples: num("samples", get("samples")?)?,
            epochs: num("epochs", get("epochs")?)?,
            fusion: match values.get("fusion").copied() {
                None | Some("off") => FusionPolicy::Off,
                Some("on") => FusionPolicy::All,
                Some("auto") => FusionPolicy::Device,
                Some(other) => return Err(config_err(format!("fusion={other}: on, off or auto"))),
            },
            math: match values.get("math") {
                None => MathProfile::Precise,
                Some(v) => MathProfile::from_name(v)
                    .ok_or_else(|| config_err(format!("math={v}: precise or fast")))?,
            },
            arith: match values.get("arith") {
                None => ArithProfile::Separate,
                Some(v) => ArithProfile::from_name(v)
                    .ok_or_else(|| config_err(format!("arith={v}: separate or fma")))?,
            },
            optimizer,
            dropout,
            data,
            init,
        };
        cfg.check()?;
        Ok(cfg)
    }

    /// The keys a `plan=` run leaves to its plan: [`RunConfig::parse`] refuses them.
    pub const PLAN_FIXED_KEYS: [&'static str; 11] = [
        "model",
        "activation",
        "loss",
        "batch",
        "lr",
        "math",
        "arith",
        "fusion",
        "optimizer",
        "momentum",
        "weight_decay",
    ];

    /// A `plan=PATH plan_digest=HEX` run (see [`RunConfig::parse`]).
    fn parse_plan_run(
        values: &BTreeMap<&str, &str>,
        at: &Resolver<'_>,
    ) -> Result<RunConfig, RunConfigError> {
        if let Some(k) = Self::PLAN_FIXED_KEYS
            .iter()
            .find(|k| values.contains_key(*k))
        {
            return Err(config_err(format!(
                "{k}= is fixed by the plan of a plan= run (its model, batch, loss, optimizer, learning rate and math and arithmetic profiles are the plan's own): leave it out"
            )));
        }
        let path = values
            .get("plan")
            .copied()
            .ok_or_else(|| config_err("plan_digest= applies to plan=PATH"))?;
        let digest = hex(values, "plan_digest")?;
        let get = |k: &str| {
            values
                .get(k)
                .copied()
                .ok_or_else(|| config_err(format!("missing key {k:?}")))
        };
        let (seed, split_seed, samples, epochs) = (
            num("seed", get("seed")?)?,
            num("split_seed", get("split_seed")?)?,
            num("samples", get("samples")?)?,
            num("epochs", get("epochs")?)?,
        );
        let file = at.file(path, digest);
        let bytes = checked_file(&file, digest, "plan_digest")?;
        let io = PlanIo::of(&bytes).map_err(|e| config_err(format!("plan={path}: {e}")))?;
        let cfg = RunConfig {
            model: RunModel::Plan(RunPlan {
                path: path.to_owned(),
                digest,
                file,
            }),
            layers: vec![io.d_in, io.d_out],
            activation: Activation::Tanh,
            loss: if io.labels {
                Loss::SoftmaxCrossEntropy
            } else {
                Loss::MeanSquaredError
            },
            batch: io.batch,
            lr: 0.0,
            seed,
            split_seed,
            samples,
            epochs,
            fusion: FusionPolicy::Off,
            math: io.math,
            arith: io.arith,
            optimizer: RunOptimizer::Sgd,
            dropout: 0.0,
            data: parse_data(values, at)?,
            init: parse_init(values, at)?,
        };
        cfg.check()?;
        Ok(cfg)
    }

    /// The plan file of a `plan=` run, read and checked against its `plan_digest`; `None` for
    /// a run that records its own job.
    ///
    /// # Errors
    /// [`RunConfigError::File`] for an unreadable file or another digest.
    pub fn plan_bytes(&self) -> Result<Option<Vec<u8>>, RunConfigError> {
        match &self.model {
            RunModel::Plan(p) => checked_file(&p.file, p.digest, "plan_digest").map(Some),
            _ => Ok(None),
        }
    }

    /// The persistent region a `plan=` run starts from, for the plan `bytes`
    /// ([`RunConfig::plan_bytes`]): what the plan's `init` entry writes (the optimizer's
    /// state), with the model's tensors from, in this order, `init=PATH`, the file
    /// `PLAN.init.safetensors` beside the plan (what `tapeplan plan --onnx` and the layer
    /// API's `plan_sequential` example write), the seeded Glorot draw for an MLP's `w*`/`b*`
    /// (as `tapeplan train`), or the `init` entry when it writes every model tensor.
    ///
    /// # Shapes
    /// Answers `[persistent_elems]`.
    ///
    /// # Errors
    /// [`RunConfigError::File`] for an unreadable file or another digest,
    /// [`RunConfigError::Init`] for a file that does not fit the plan, and
    /// [`RunConfigError::Invalid`] naming a model tensor nothing initializes.
    pub fn plan_initial_persistent(&self, bytes: &[u8]) -> Result<Vec<f32>, RunConfigError> {
        let replay = crate::exec::replay::PlanReplay::new(bytes)
            .map_err(|e| config_err(format!("plan: {e}")))?;
        let plan = tapeplan_runtime::Plan::parse_alloc(bytes)
            .map_err(|e| config_err(format!("plan rejected: {e}")))?;
        let base = replay.persistent().to_vec();
        let plan_path = match &self.model {
            RunModel::Plan(p) => p.file.as_str(),
            _ => "the plan",
        };
        let file = match &self.init {
            RunInit::Safetensors { file, digest, .. } => {
                Some((file.clone(), checked_file(file, *digest, "init_digest")?))
            }
            RunInit::Glorot => {
                let beside = format!("{plan_path}{INIT_SUFFIX}");
                match std::fs::read(&beside) {
                    Ok(b) => Some((beside, b)),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                    Err(e) => {
                        return Err(RunConfigError::File {
                            path: beside,
                            message: e.to_string(),
                        })
                    }
                }
            }
        };
        if let Some((_, b)) = file {
            return Ok(exchange::import_into_persistent(&plan, &base, &b)?);
        }
        let model = plan_model_tensors(&plan);
        let mut out = base;
        if model.iter().all(|(n, _)| exchange::torch_name(n).is_some()) {
            for ((name, _), v) in model.iter().zip(glorot_uniform(&model, self.seed)) {
                if let Some(b) = plan.parameter(name) {
                    if let Some(dst) = out.get_mut(b.range()) {
                        dst.copy_from_slice(&v);
                    }
                }
            }
            return Ok(out);
        }
        let written: Vec<&str> = plan
            .entry(crate::protocol::ENTRY_INIT)
            .map(|e| plan.updates(e).map(|b| b.name).collect())
            .unwrap_or_default();
        match model.iter().find(|(n, _)| !written.contains(&n.as_str())) {
            Some((name, _)) => Err(config_err(format!(
                "the plan's {name} needs an initial value: there is no {plan_path}{INIT_SUFFIX}, the plan's init entry does not write it and it is not an MLP's w*/b*; name a safetensors file under the plan's names with init=PATH init_digest=HEX"
            ))),
            None => Ok(out),
        }
    }

    fn check(&self) -> Result<(), RunConfigError> {
        if self.layers.len() < 2 || self.layers.contains(&0) {
            return Err(config_err("model needs at least two non-zero widths"));
        }
        // A device transcript is untrusted input: bound the run so counts cannot overflow.
        let steps = self
            .samples
            .checked_div(self.batch.max(1))
            .and_then(|s| s.checked_mul(self.epochs));
        if steps.is_none_or(|s| s > 1 << 32) || self.epochs > 1 << 24 {
            return Err(config_err(
                "the run is implausibly long (epochs · samples / batch)",
            ));
        }
        match self.model {
            RunModel::Mnist1dCnn => {
                if self.data != RunData::Mnist1d || self.activation != Activation::Relu {
                    return Err(config_err(
                        "model=mnist1d_cnn trains on data=mnist1d with its activation=relu",
                    ));
                }
            }
            RunModel::DigitsCnn(_) => {
                if self.data != RunData::Digits || self.activation != Activation::Relu {
                    return Err(config_err(
                        "model=digits_cnn trains on the bundled digits (no data=) with its activation=relu",
                    ));
                }
            }
            RunModel::Plan(_) => {}
            RunModel::Mlp => Mlp {
                sizes: self.layers.clone(),
                activation: Activation::Tanh,
            }
            .check(self.batch)
            .map_err(|e| config_err(format!("model: {e}")))?,
        }
        if !self.lr.is_finite() {
            return Err(config_err("lr must be finite"));
        }
        if self.batch == 0 || self.batch > self.samples {
            return Err(config_err(format!(
                "batch={} must be in 1..=samples ({})",
                self.batch, self.samples
            )));
        }
        if let RunData::Csv { .. } = self.data {
            // The table's widths and rows are checked when it is read (`training_set`).
            return Ok(());
        }
        if self.data == RunData::Mnist1d {
            return self.check_mnist1d();
        }
        if self.loss != Loss::SoftmaxCrossEntropy {
            return Err(config_err(
                "loss=mse needs float targets: name a CSV with data=PATH (the digits are labels)",
            ));
        }
        if self.layers[0] != data::DIGITS_FEATURES {
            return Err(config_err(format!(
                "the model's input width is {}, but the bundled digits (the data of a run \
                 without data=) have {} features: add data=PATH data_digest=HEX",
                self.layers[0],
                data::DIGITS_FEATURES
            )));
        }
        if self.layers.last() != Some(&data::DIGITS_CLASSES) {
            return Err(config_err(format!(
                "the model's output width is {}, but the bundled digits (the data of a run \
                 without data=) have {} classes: add data=PATH data_digest=HEX",
                self.layers.last().copied().unwrap_or(0),
                data::DIGITS_CLASSES
            )));
        }
        if self.samples > data::DIGITS_TRAIN_ROWS {
            return Err(config_err(format!(
                "samples={} exceeds the {} rows of the training split",
                self.samples,
                data::DIGITS_TRAIN_ROWS
            )));
        }
        Ok(())
    }

    /// The checks of a `data=mnist1d` run: its widths, loss, split and rows.
    fn check_mnist1d(&self) -> Result<(), RunConfigError> {
        if self.loss != Loss::SoftmaxCrossEntropy {
            return Err(config_err("data=mnist1d has labels: loss=ce"));
        }
        if self.layers.first() != Some(&MNIST1D_LENGTH)
            || self.layers.last() != Some(&MNIST1D_CLASSES)
        {
            return Err(config_err(format!(
                "data=mnist1d rows have {MNIST1D_LENGTH} features and {MNIST1D_CLASSES} classes: the model's widths must start and end with them"
            )));
        }
        if self.split_seed != 0 {
            return Err(config_err(
                "data=mnist1d has a fixed split (rows 0..4000 train): split_seed=0",
            ));
        }
        if self.samples > MNIST1D_TRAIN_ROWS {
            return Err(config_err(format!(
                "samples={} exceeds the {MNIST1D_TRAIN_ROWS} rows of MNIST-1D's training split",
                self.samples
            )));
        }
        Ok(())
    }

    /// The canonical one-line form, which [`RunConfig::parse`] reads back to the same value.
    pub fn to_line(&self) -> String {
        let model: Vec<String> = match &self.model {
            RunModel::Mlp => self.layers.iter().map(usize::to_string).collect(),
            RunModel::Mnist1dCnn => vec!["mnist1d_cnn".to_owned()],
            RunModel::DigitsCnn(c) if *c == DIGITS_CNN_CHANNELS => vec!["digits_cnn".to_owned()],
            RunModel::DigitsCnn([c1, c2]) => vec![format!("digits_cnn:{c1},{c2}")],
            RunModel::Plan(p) => return self.plan_line(p),
        };
        let math = match (self.math, self.arith) {
            (MathProfile::Precise, ArithProfile::Separate) => String::new(),
            (m, ArithProfile::Separate) => format!(" math={m}"),
            (MathProfile::Precise, a) => format!(" arith={a}"),
            (m, a) => format!(" math={m} arith={a}"),
        };
        let mut line = format!(
            "model={} activation={} loss={} batch={} lr={} seed={} split_seed={} samples={} epochs={}{math}",
            model.join(","),
            self.activation.name(),
            // `parse` reads only these two.
            if self.loss == Loss::SoftmaxCrossEntropy {
                "ce"
            } else {
                "mse"
            },
            self.batch,
            self.lr,
            self.seed,
            self.split_seed,
            self.samples,
            self.epochs
        ) + match self.fusion {
            FusionPolicy::Off => "",
            FusionPolicy::Device | FusionPolicy::Auto | FusionPolicy::Speed => " fusion=auto",
            FusionPolicy::All => " fusion=on",
        };
        match self.optimizer {
            RunOptimizer::Sgd => {}
            RunOptimizer::Momentum(m) => line += &format!(" optimizer=momentum momentum={m}"),
            RunOptimizer::Nesterov(m) => line += &format!(" optimizer=nesterov momentum={m}"),
            RunOptimizer::Adam => line += " optimizer=adam",
            RunOptimizer::AdamW(w) => line += &format!(" optimizer=adamw weight_decay={w}"),
        }
        if self.dropout > 0.0 {
            line += &format!(" dropout={}", self.dropout);
        }
        self.push_files(&mut line);
        line
    }

    /// [`RunConfig::to_line`] of a `plan=` run: the plan, the keys it does not fix, the data
    /// and the init.
    fn plan_line(&self, p: &RunPlan) -> String {
        let mut line = format!(
            "plan={} plan_digest={:016x} seed={} split_seed={} samples={} epochs={}",
            p.path, p.digest, self.seed, self.split_seed, self.samples, self.epochs
        );
        self.push_files(&mut line);
        line
    }

    /// The `data=` and `init=` keys of [`RunConfig::to_line`], when not at their defaults.
    fn push_files(&self, line: &mut String) {
        match &self.data {
            RunData::Digits => {}
            RunData::Mnist1d => *line += " data=mnist1d",
            RunData::Csv { path, digest, .. } => {
                *line += &format!(" data={path} data_digest={digest:016x}");
            }
        }
        if let RunInit::Safetensors { path, digest, .. } = &self.init {
            *line += &format!(" init={path} init_digest={digest:016x}");
        }
    }

    /// The optimizer this run records, with its learning rate ([`RunOptimizer::with_lr`]).
    pub fn optimizer(&self) -> Optimizer {
        self.optimizer.with_lr(self.lr)
    }

    /// The digest of the run's training set that a transcript's `data` line carries: for the
    /// digits, [`data_digest`] of the raw pixel counts and labels; for a CSV, FNV-1a 64 of the
    /// features (`f32`, little-endian), then the labels (bytes) or the targets (`f32`).
    ///
    /// A `plan=` or `model=digits_cnn` run's device stores its rows as `f32` features whatever
    /// the data (the firmware's feature `cnn`), so its digest is the `f32` one, the digits
    /// included.
    pub fn data_digest(&self, train: &Dataset) -> u64 {
        let f32_rows = matches!(self.model, RunModel::Plan(_) | RunModel::DigitsCnn(_));
        match self.data {
            RunData::Digits if !f32_rows => data_digest(&train.pixels, &train.labels),
            RunData::Digits | RunData::Csv { .. } | RunData::Mnist1d => {
                let mut h = Fnv1a64::new();
                h.f32s(&train.features);
                h.bytes(&train.labels);
                h.f32s(train.targets());
                h.finish()
            }
        }
    }

    /// Steps in one epoch: `samples / batch` (rounded down).
    pub fn steps_per_epoch(&self) -> usize {
        self.samples / self.batch.max(1)
    }

    /// Steps of the whole run.
    pub fn total_steps(&self) -> usize {
        self.steps_per_epoch() * self.epochs
    }

    /// Records and plans the run's training job.
    ///
    /// # Errors
    /// [`RunConfigError::Plan`].
    pub fn job(&self) -> Result<TrainingJob, RunConfigError> {
        let planning = PlanOptions {
            fusion: self.fusion,
            math: self.math,
            arith: self.arith,
            ..PlanOptions::default()
        };
        if let RunModel::Plan(p) = &self.model {
            return Err(config_err(format!(
                "plan={}: a plan run trains its plan file and records no job; replay it (exec::replay::replay_run)",
                p.path
            )));
        }
        let cnn = match self.model {
            RunModel::Mnist1dCnn => Some(("mnist1d_cnn", mnist1d_cnn(self.seed))),
            RunModel::DigitsCnn(c) => Some(("digits_cnn", digits_cnn(c, self.seed))),
            _ => None,
        };
        if let Some((name, model)) = cnn {
            // The general job; a device runs `init` (the optimizer's state) and `train_step`
            // only, so the evaluation entries are left out.
            return TrainingJob::for_model(&model)
                .loss(self.loss)
                .optimizer(self.optimizer())
                .batch(self.batch)
                .options(JobOptions {
                    planning,
                    eval_entries: Some(false),
                    ..JobOptions::default()
                })
                .build()
                .map_err(|e| config_err(format!("model={name}: {e}")));
        }
        Ok(TrainingJob::build_with(
            Mlp {
                sizes: self.layers.clone(),
                activation: self.activation,
            },
            self.loss,
            self.optimizer(),
            self.batch,
            JobOptions {
                planning,
                dropout: self.dropout,
                // The generator's key; only a plan with dropout has one.
                seed: if self.dropout > 0.0 { self.seed } else { 0 },
                ..JobOptions::default()
            },
        )?)
    }

    /// The run's training set: the first `samples` rows of the digits training split
    /// (with their raw pixel counts, for embedding).
    ///
    /// # Errors
    /// [`RunConfigError::Data`] if the bundled set is corrupt.
    pub fn training_set(&self) -> Result<Dataset, RunConfigError> {
        let (all, n_train) = match &self.data {
            RunData::Digits => (data::digits()?, data::DIGITS_TRAIN_ROWS),
            RunData::Mnist1d => {
                let all = data::mnist1d()?;
                if all.len() < MNIST1D_TRAIN_ROWS {
                    return Err(config_err(format!(
                        "the bundled MNIST-1D set holds {} rows, fewer than its {MNIST1D_TRAIN_ROWS} training rows",
                        all.len()
                    )));
                }
                // The fixed split: the first rows, in file order.
                let idx: Vec<usize> = (0..self.samples).collect();
                return Ok(all.subset(&idx));
            }
            RunData::Csv { path, file, digest } => {
                let bytes = checked_file(file, *digest, "data_digest")?;
                let d_out = self.layers.last().copied().unwrap_or(0);
                let task = if self.loss == Loss::SoftmaxCrossEntropy {
                    Task::Classification { classes: None }
                } else {
                    Task::Regression { n_targets: d_out }
                };
                let spec = TableSpec {
                    task,
                    target_columns: Vec::new(),
                };
                let set = table::load_table_bytes(&bytes, &spec)?.dataset;
                if set.n_features() != self.layers[0] {
                    return Err(config_err(format!(
                        "model's input width is {}, the rows of {path} have {} features",
                        self.layers[0],
                        set.n_features()
                    )));
                }
                if set.n_targets() == 0 && set.n_classes() > d_out {
                    return Err(config_err(format!(
                        "model's output width is {d_out}, {path} has {} classes",
                        set.n_classes()
                    )));
                }
                let n_train = ((set.len() as f64) * 0.8).round() as usize;
                (set, n_train)
            }
        };
        if self.samples > n_train {
            return Err(config_err(format!(
                "samples={} exceeds the {n_train} rows of the training split",
                self.samples
            )));
        }
        let (train, _) = all.split_seeded(self.split_seed, n_train);
        let idx: Vec<usize> = (0..self.samples).collect();
        Ok(train.subset(&idx))
    }

    /// The run's held-out rows, which no step trains on: the digits' test half of
    /// [`Dataset::split_seeded`]`(split_seed, DIGITS_TRAIN_ROWS)` (the split `tapeplan train`
    /// and `tapeplan demo` hold out), or MNIST-1D's test split (rows `4000..5000` of the file,
    /// the paper's).
    ///
    /// # Errors
    /// [`RunConfigError::Data`] if the bundled set is corrupt; [`RunConfigError::Invalid`] for
    /// a `data=PATH` or `plan=` run (their held-out rows are not defined here).
    pub fn test_set(&self) -> Result<Dataset, RunConfigError> {
        if matches!(self.model, RunModel::Plan(_)) {
            return Err(config_err(
                "a plan= run's held-out rows are not defined here",
            ));
        }
        match &self.data {
            RunData::Digits => {
                let all = data::digits()?;
                Ok(all.split_seeded(self.split_seed, data::DIGITS_TRAIN_ROWS).1)
            }
            RunData::Mnist1d => {
                let all = data::mnist1d()?;
                let idx: Vec<usize> = (MNIST1D_TRAIN_ROWS..all.len()).collect();
                Ok(all.subset(&idx))
            }
            RunData::Csv { path, .. } => Err(config_err(format!(
                "data={path}: the held-out rows of a CSV run are not defined here"
            ))),
        }
    }

    /// The classification accuracy on [`RunConfig::test_set`] of the run's model with the
    /// parameters `params` (by name, e.g. a device's final parameters read back from its
    /// transcript), computed once through the runtime's `forward` entry of the run's plan,
    /// in batches of `batch` (the last one padded); a fraction in `[0, 1]`.
    ///
    /// # Shapes
    /// Each of `params` has the element count of the job's parameter of that name.
    ///
    /// # Errors
    /// [`RunConfigError::Invalid`] for a parameter the job does not have, a job parameter
    /// missing from `params`, or a runtime error; as [`RunConfig::job`] and
    /// [`RunConfig::test_set`].
    pub fn test_accuracy(&self, params: &[(String, Vec<f32>)]) -> Result<f32, RunConfigError> {
        let job = self.job()?;
        let test = self.test_set()?;
        let bytes = job.schedule.to_bytes();
        let err = |e: crate::exec::runtime::TrainError| config_err(format!("runtime: {e}"));
        let mut rt = crate::exec::runtime::RuntimeModel::new(&bytes).map_err(err)?;
        for (name, values) in params {
            if !job.parameters.iter().any(|p| &p.name == name) {
                return Err(config_err(format!(
                    "the run's model has no parameter {name:?}"
                )));
            }
            rt.load_parameter(name, values).map_err(err)?;
        }
        if let Some(p) = job
            .parameters
            .iter()
            .find(|p| !params.iter().any(|(n, _)| n == &p.name))
        {
            return Err(config_err(format!(
                "no values for the parameter {:?}",
                p.name
            )));
        }
        rt.accuracy(&test.features, &test.labels, self.layers[0], self.batch)
            .map_err(err)
    }

    /// The initial parameters, in the job's parameter order: the Glorot draw of the run's seed,
    /// or the `init=PATH` file's values.
    ///
    /// # Errors
    /// [`RunConfigError::File`] for an unreadable file or another digest;
    /// [`RunConfigError::Init`] for a file that does not fit the model.
    pub fn initial_parameters(&self, job: &TrainingJob) -> Result<Vec<Vec<f32>>, RunConfigError> {
        let shapes = job.parameter_shapes();
        match &self.init {
            RunInit::Glorot
                if matches!(self.model, RunModel::Mnist1dCnn | RunModel::DigitsCnn(_)) =>
            {
                Ok(job.initial_parameters())
            }
            RunInit::Glorot => Ok(glorot_uniform(&shapes, self.seed)),
            RunInit::Safetensors { file, digest, .. } => {
                let bytes = checked_file(file, *digest, "init_digest")?;
                let mut params: Vec<Param> = shapes
                    .iter()
                    .map(|(name, shape)| Param {
                        name: name.clone(),
                        shape: *shape,
                        values: vec![0.0; shape.elems()],
                    })
                    .collect();
                exchange::import_safetensors(&bytes, &mut params)?;
                Ok(params.into_iter().map(|p| p.values).collect())
            }
        }
    }

    /// Runs the whole run's steps over `train` with `step`: epoch by epoch in
    /// [`RunConfig::epoch_order`], `batch` rows a step (`x` and the labels as `f32` or the
    /// targets, [`Dataset::batches`]); answers every step's loss and every epoch's mean (the
    /// `f32` sum of its losses divided by its steps, as a device computes it).
    ///
    /// # Shapes
    /// `step(x [batch, d_in], target [batch] or [batch, d_out])`.
    ///
    /// # Errors
    /// The first error of `step`.
    pub fn each_step<E>(
        &self,
        train: &Dataset,
        mut step: impl FnMut(&[f32], &[f32]) -> Result<f32, E>,
    ) -> Result<(Vec<f32>, Vec<f32>), E> {
        // Not reserved up front: a run description may claim 2^32 steps.
        let mut losses = Vec::new();
        let mut epoch_means = Vec::with_capacity(self.epochs);
        for epoch in 0..self.epochs {
            let data = train.subset(&self.epoch_order(epoch));
            let mut sum = 0.0f32;
            for (x, target) in data.batches(self.batch.max(1)) {
                let loss = step(x, &target)?;
                sum += loss;
                losses.push(loss);
            }
            epoch_means.push(sum / self.steps_per_epoch() as f32);
        }
        Ok((losses, epoch_means))
    }

    /// The row order of epoch `epoch` (0-based): a permutation of `0..samples`.
    pub fn epoch_order(&self, epoch: usize) -> Vec<usize> {
        let mut idx: Vec<usize> = (0..self.samples).collect();
        epoch_shuffle(self.seed, epoch, &mut idx);
        idx
    }
}

impl fmt::Display for RunConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_line())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A small run (two epochs of four steps), for tests.
    pub(crate) fn small() -> RunConfig {
        RunConfig::parse(
            "model=64,8,10 activation=tanh loss=ce batch=4 lr=0.1 seed=42 split_seed=0 \
             samples=16 epochs=2",
        )
        .unwrap()
    }

    /// `dropout=P` round-trips, plans an MLP whose `train_step` draws (an `init` entry writes
    /// the generator's key and counter), and is refused outside `[0, 1)` and for a CNN.
    #[test]
    fn the_dropout_key_plans_a_drawing_mlp() {
        let line = "model=64,8,10 activation=tanh loss=ce batch=4 lr=0.1 seed=42 \
                    split_seed=0 samples=16 epochs=1 optimizer=adam dropout=0.1";
        let c = RunConfig::parse(line).unwrap();
        assert_eq!(c.dropout, 0.1);
        assert_eq!(c.to_line(), line);
        let with = c.job().unwrap();
        let without = RunConfig { dropout: 0.0, ..c }.job().unwrap();
        let has_rng = |j: &TrainingJob| j.state_specs.iter().any(|s| s.name.starts_with("rng."));
        assert!(
            has_rng(&with),
            "the dropout job keeps its generator's state"
        );
        assert!(!has_rng(&without));
        assert_ne!(with.schedule.to_bytes(), without.schedule.to_bytes());
        for bad in ["dropout=1", "dropout=-0.1", "dropout=x"] {
            let e = RunConfig::parse(&line.replace("dropout=0.1", bad)).unwrap_err();
            assert!(e.to_string().contains("dropout"), "{bad}: {e}");
        }
        let cnn = "model=mnist1d_cnn activation=relu loss=ce batch=10 lr=0.01 seed=42 \
                   split_seed=0 samples=40 epochs=1 data=mnist1d dropout=0.5";
        let e = RunConfig::parse(cnn).unwrap_err();
        assert!(e.to_string().contains("applies to an MLP"), "{e}");
    }

    #[test]
    fn the_mnist1d_cnn_run_parses_plans_and_refuses_what_cannot_work() {
        let line = "model=mnist1d_cnn activation=relu loss=ce batch=10 lr=0.01 seed=42 \
                    split_seed=0 samples=40 epochs=1 optimizer=adam data=mnist1d";
        let c = RunConfig::parse(line).unwrap();
        assert_eq!(c.model, RunModel::Mnist1dCnn);
        assert_eq!(c.layers, [40, 10]);
        assert_eq!(c.to_line(), line);
        assert_eq!(RunConfig::parse(&c.to_line()).unwrap(), c);
        // The job is the layer API's CNN under PyTorch's names; its initial values are the
        // model's own draw for the run's seed (not Glorot).
        let job = c.job().unwrap();
        let names: Vec<String> = job.parameter_shapes().into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            [
                "0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias", "7.weight",
                "7.bias"
            ]
        );
        let init = c.initial_parameters(&job).unwrap();
        assert_eq!(
            init.iter().map(Vec::len).sum::<usize>(),
            125 + 25 + 2 * (1875 + 25) + 1260
        );
        // PyTorch's Conv1d default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in 1·5 for the first.
        let bound = 1.0 / 5f32.sqrt();
        assert!(init[0].iter().all(|v| v.abs() <= bound));
        assert!(init[0].iter().any(|v| v.abs() > 0.5 * bound));
        // The training set: the file's first rows, in order, 40 features each.
        let train = c.training_set().unwrap();
        assert_eq!((train.len(), train.n_features()), (40, 40));
        let all = data::mnist1d().unwrap();
        assert_eq!(train.row(39), all.row(39));
        for (bad, what) in [
            (
                line.replace("activation=relu", "activation=tanh"),
                "activation=relu",
            ),
            (line.replace(" data=mnist1d", ""), "data=mnist1d"),
            (line.replace("split_seed=0", "split_seed=1"), "split_seed=0"),
            (line.replace("samples=40", "samples=4001"), "4000 rows"),
            (
                line.replace(
                    "model=mnist1d_cnn activation=relu",
                    "model=64,10 activation=tanh",
                ),
                "40 features",
            ),
        ] {
            let e = RunConfig::parse(&bad).unwrap_err().to_string();
            assert!(e.contains(what), "{bad}: {e}");
        }
    }

    /// The firmware's own runs (firmware-demo/models) with `fusion=auto`, a device's per-chain
    /// decision: no chain is faster there, so only the chains the arena needs stay fused (the
    /// arena of `fusion=on`, with fewer chains; a plan with none needs no feature `fusion`).
    #[test]
    fn a_device_keeps_only_the_chains_the_arena_needs() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../firmware-demo/models");
        for run in ["demo.run", "digits_cnn.run", "mnist1d.run"] {
            let text = std::fs::read_to_string(dir.join(run)).unwrap();
            let mut c = RunConfig::parse(&text).unwrap();
            let mut plan = |f| {
                c.fusion = f;
                let s = c.job().unwrap().schedule;
                let fused = s
                    .entries
                    .iter()
                    .flat_map(|e| &e.instrs)
                    .filter(|i| i.fuse_next);
                (fused.count(), s.arena_elems)
            };
            let (off, device, all) = (
                plan(FusionPolicy::Off),
                plan(FusionPolicy::Device),
                plan(FusionPolicy::All),
            );
            eprintln!("{run}: (fused instructions, arena elements) off {off:?}, auto {device:?}, on {all:?}");
            assert!(all.0 > 0, "{run}: fusion=on has chains");
            assert!(device.0 < all.0, "{run}: fusion=auto unfuses some");
            assert!(device.1 <= all.1, "{run}: no larger arena than fusion=on");
            assert!(all.1 <= off.1);
        }
    }

    #[test]
    fn the_digits_cnn_run_parses_plans_and_refuses_what_cannot_work() {
        let line = "model=digits_cnn activation=relu loss=ce batch=8 lr=0.003 seed=42 \
                    split_seed=0 samples=32 epochs=1 optimizer=adam";
        let c = RunConfig::parse(line).unwrap();
        assert_eq!(c.model, RunModel::DigitsCnn(DIGITS_CNN_CHANNELS));
        assert_eq!(c.layers, [64, 10]);
        assert_eq!(c.to_line(), line);
        let small = line.replace("digits_cnn", "digits_cnn:4,8");
        let s = RunConfig::parse(&small).unwrap();
        assert_eq!(s.model, RunModel::DigitsCnn([4, 8]));
        assert_eq!(s.to_line(), small);
        // The job is the layer API's CNN: conv 1→4 (36 + 4), conv 4→8 (288 + 8), linear 32→10.
        let job = s.job().unwrap();
        let init = s.initial_parameters(&job).unwrap();
        assert_eq!(
            init.iter().map(Vec::len).collect::<Vec<_>>(),
            [36, 4, 288, 8, 320, 10]
        );
        // PyTorch's Conv2d default: U(±1/sqrt(fan_in)), fan_in 1·3·3 for the first.
        assert!(init[0].iter().all(|v| v.abs() <= 1.0 / 3.0));
        let six: usize = c
            .initial_parameters(&c.job().unwrap())
            .unwrap()
            .iter()
            .map(Vec::len)
            .sum();
        assert_eq!(six, 6090);
        // The device stores `f32` features: the digest is the `f32` one, not the pixel one.
        let train = c.training_set().unwrap();
        let mlp = RunConfig::parse(
            "model=64,8,10 activation=tanh loss=ce batch=8 lr=0.1 seed=42 split_seed=0 \
             samples=32 epochs=1",
        )
        .unwrap();
        assert_ne!(c.data_digest(&train), mlp.data_digest(&train));
        // The held-out rows are the split's other 360, disjoint from the training rows.
        let test = c.test_set().unwrap();
        assert_eq!(test.len(), data::DIGITS_TEST_ROWS);
        assert!((0..test.len()).all(|i| (0..train.len()).all(|j| test.row(i) != train.row(j))));
        // The accuracy of the initial parameters equals a count over the forward entry's
        // logits row by row (one row a batch of 8, the rest zeros); a missing tensor is refused.
        let names: Vec<(String, Vec<f32>)> = job
            .parameter_shapes()
            .into_iter()
            .map(|(n, _)| n)
            .zip(init.clone())
            .collect();
        let acc = s.test_accuracy(&names).unwrap();
        let bytes = job.schedule.to_bytes();
        let mut rt = crate::exec::runtime::RuntimeModel::new(&bytes).unwrap();
        for (n, v) in &names {
            rt.load_parameter(n, v).unwrap();
        }
        let mut correct = 0;
        for i in 0..test.len() {
            let mut x = test.row(i).0.to_vec();
            x.resize(8 * 64, 0.0);
            let logits = rt.logits(&x).unwrap();
            let row = &logits[..10];
            let best = (0..10).fold(0, |b, k| if row[k] > row[b] { k } else { b });
            correct += usize::from(best == usize::from(test.row(i).1));
        }
        assert_eq!(acc, correct as f32 / test.len() as f32);
        let e = s.test_accuracy(&names[1..]).unwrap_err().to_string();
        assert!(e.contains("0.weight"), "{e}");
        for (bad, what) in [
            (
                line.replace("activation=relu", "activation=tanh"),
                "activation=relu",
            ),
            (
                format!("{line} data=mnist1d"),
                "model=digits_cnn trains on the bundled digits",
            ),
            (
                line.replace("digits_cnn", "digits_cnn:4"),
                "digits_cnn:C1,C2",
            ),
            (line.replace("digits_cnn", "digits_cnn:0,8"), "non-zero"),
            (
                line.replace("digits_cnn", "digits_cnn:1,4611686018427387904"),
                "channel counts of at most 268435456",
            ),
            (
                line.replace("digits_cnn", "digits_cnn:18446744073709551615,1"),
                "channel counts of at most 268435456",
            ),
            (
                line.replace("digits_cnn", "digits_cnnx"),
                "digits_cnn:C1,C2",
            ),
            (line.replace("samples=32", "samples=1438"), "1437 rows"),
        ] {
            let e = RunConfig::parse(&bad).unwrap_err().to_string();
            assert!(e.contains(what), "{bad}: {e}");
        }
    }

    #[test]
    fn config_round_trips_and_rejects_bad_input() {
        let c = small();
        assert_eq!(RunConfig::parse(&c.to_line()).unwrap(), c);
        assert_eq!(c.total_steps(), 8);
        let multi = "# the demo\nmodel=64,8,10 activation=tanh # hidden\nloss=ce batch=4 lr=0.1\n\
                     seed=42 split_seed=0 samples=16 epochs=2\n";
        assert_eq!(RunConfig::parse(multi).unwrap(), c);
        for (bad, what) in [
            ("model=64,8,10", "missing key"),
            (&format!("{} epochs=3", c.to_line()), "twice"),
            (&format!("{} colour=red", c.to_line()), "unknown key"),
            (
                &c.to_line().replace("batch=4", "batch=x"),
                "not a valid number",
            ),
            (&c.to_line().replace("batch=4", "batch=17"), "batch=17"),
            (
                &c.to_line().replace("loss=ce", "loss=mse"),
                "needs float targets",
            ),
            (&c.to_line().replace("loss=ce", "loss=l2"), "ce (softmax"),
            (
                &format!("{} optimizer=lion", c.to_line()),
                "sgd, momentum, nesterov, adam or adamw",
            ),
            (&format!("{} momentum=0.5", c.to_line()), "applies to"),
            (
                &format!("{} data=x.csv", c.to_line()),
                "missing key \"data_digest\"",
            ),
            (
                &format!("{} init=p.safetensors init_digest=12", c.to_line()),
                "16 hex digits",
            ),
            (
                &c.to_line().replace("model=64,", "model=63,"),
                "input width",
            ),
        ] {
            let e = RunConfig::parse(bad).unwrap_err().to_string();
            assert!(e.contains(what), "{bad}: {e}");
        }
    }
}
