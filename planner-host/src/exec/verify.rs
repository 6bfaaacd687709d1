//! Verifying a device's training run bit for bit against the host oracle.
//!
//! A target (the Cortex-M firmware in `firmware-demo/`, or any other) trains a model from a
//! plan and sends back a **transcript**: which run it did ([`RunConfig`]), which plan and data
//! it used, the bits of every step's loss, and the bits of every final parameter.
//! [`verify`] rebuilds the same job from the run's description, retrains it with the
//! [`Oracle`] (tape interpreter + engine reverse scan, no plan involved) over the same samples
//! in the same order from the same initial parameters, and compares every bit.
//!
//! # The run
//!
//! A [`RunConfig`] names everything a run depends on: the MLP (`model`, `activation`), the loss,
//! `batch`, `lr`, `seed`, `split_seed`, `samples` and `epochs`, and optionally the math profile
//! (`math=precise|fast`; absent means `precise`, and the canonical line names it only when it is
//! `fast`). The plan's id depends on the profile, so a device that ran the other profile's plan
//! is a mismatch. Both sides derive the rest from it the same way:
//!
//! - **data**: the bundled digits set ([`data::digits`]), split with
//!   [`Dataset::split_seeded`]`(split_seed, DIGITS_TRAIN_ROWS)`; the training set is the first
//!   `samples` rows of the training half ([`RunConfig::training_set`]). A device stores the raw
//!   pixel counts (`u8`, `0..=16`) and labels, and converts a count `c` to the feature
//!   `c as f32 * 0.0625` (exact).
//! - **initial parameters**: [`glorot_uniform`]`(shapes, seed)`.
//! - **order**: epoch `e` (0-based) visits the rows `0..samples` in the order of a Fisher–Yates
//!   shuffle ([`SplitMix64::shuffle`]) by `SplitMix64::new(`[`epoch_seed`]`(seed, e))`, in full
//!   batches of `batch` consecutive rows of that order (the last `samples % batch` rows of
//!   each epoch are not used). Labels go in as `label as f32`.
//! - **steps**: `epochs · (samples / batch)`, numbered from 1.
//!
//! # The transcript (format version 1)
//!
//! ASCII text, one record per line, fields separated by single spaces; a line ends with `\n`
//! (a `\r` before it is ignored). Numbers are decimal unless said otherwise; `hex8` is a `u32`
//! as exactly 8 lowercase or uppercase hex digits (an `f32`'s bits: `f32::to_bits`), `hex16` a
//! `u64` as 16. Blank lines and lines starting with `#` are ignored.
//!
//! | line | meaning |
//! |---|---|
//! | `tapeplan-transcript 1` | first line: the format and its version (anything before it, such as a UART's boot noise, is skipped) |
//! | `config <key=value> …` | the run ([`RunConfig::to_line`]): exactly once, before `loss` |
//! | `target <text>` | what ran it (free text, e.g. `thumbv7em-none-eabihf mps2-an386`) |
//! | `plan <hex8> <arena_elems>` | the plan's id (its header's `plan_id`, the CRC-32 of its records) and arena size |
//! | `data <hex16> <rows>` | FNV-1a 64 ([`data_digest`]) of the embedded pixel counts then labels, and the row count |
//! | `loss <step> <hex8>` | the loss of step `step` (1-based), in step order, every step once |
//! | `epoch <epoch> <hex8>` | optional: epoch `epoch`'s (1-based) mean loss as the device computed it: `f32` sum of its steps' losses in order, divided by its step count as `f32` |
//! | `param <name> <start> <hex8> …` | final values of parameter `name`, elements `start, start+1, …` (any number per line, in order, every element once) |
//! | `digest <hex16>` | [`tapeplan_core::format::digest_f32`] of every parameter, concatenated in the order the `param` lines give them |
//! | `info <text>` | free text (timings, sizes); ignored |
//! | `end ok` | last line: the device finished; `end error <text>` reports a failure |
//!
//! A transcript without its `end` line is truncated, and rejected.

use std::collections::BTreeMap;
use std::fmt;

use tapeplan_core::format::digest_f32;
use tapeplan_core::MathProfile;

use crate::exec::oracle::{first_difference, same_bits, BitDiff, JobOptions, Oracle, TrainingJob};
use crate::io::data::{self, Dataset};
use crate::model::optim::Sgd;
use crate::model::{glorot_uniform, Activation, Loss, Mlp};
use crate::plan::PlanOptions;
use crate::protocol::SplitMix64;

/// The transcript's first line.
pub const TRANSCRIPT_MAGIC: &str = "tapeplan-transcript 1";

/// Why a run description, a transcript or a verification failed before any bit was compared.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// A run description is malformed.
    #[error("run config: {0}")]
    Config(String),
    /// A transcript line is malformed.
    #[error("transcript line {line}: {message}")]
    Transcript {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The transcript is missing something verification needs.
    #[error("transcript: {0}")]
    Incomplete(String),
    /// The device reported a failure in its `end` line.
    #[error("the device reported an error: {0}")]
    DeviceError(String),
    /// The device ran something other than what the host rebuilds.
    #[error("mismatch: {0}")]
    Mismatch(String),
    /// Building the job failed.
    #[error("planning: {0}")]
    Plan(#[from] crate::PlanError),
    /// The data set failed to load.
    #[error("data: {0}")]
    Data(#[from] data::DataError),
    /// The oracle failed.
    #[error("oracle: {0}")]
    Oracle(#[from] tapeplan_core::TapeError),
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
}

fn config_err(message: impl Into<String>) -> VerifyError {
    VerifyError::Config(message.into())
}

/// Everything a training run depends on; see the [module docs](self).
#[derive(Clone, Debug, PartialEq)]
pub struct RunConfig {
    /// Layer widths, input first (`64` for digits), output last (`10`).
    pub layers: Vec<usize>,
    /// The hidden activation.
    pub activation: Activation,
    /// The loss; only softmax cross-entropy (`ce`, labels) is supported on digits.
    pub loss: Loss,
    /// Rows per step.
    pub batch: usize,
    /// SGD learning rate.
    pub lr: f32,
    /// Seed of the initialization and the per-epoch shuffles.
    pub seed: u64,
    /// Seed of the digits train/test split.
    pub split_seed: u64,
    /// Rows of the training set (the first of the training split).
    pub samples: usize,
    /// Passes over the training set.
    pub epochs: usize,
    /// Fuse elementwise chains in the plan (optional key `fusion=on|off`, default `off`: the
    /// demo firmware links its runtime without feature `fusion`, to keep it within its flash
    /// budget).
    pub fusion: bool,
    /// The math profile of the plan and the oracle (optional key `math`; `precise` when absent).
    pub math: MathProfile,
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

    /// The optional keys, with their defaults: `math` (`precise`), `fusion` (`off`).
    pub const OPTIONAL_KEYS: [&'static str; 2] = ["math", "fusion"];

    /// Parses a run description: `key=value` tokens separated by white space, over any number of
    /// lines; `#` starts a comment that runs to the end of its line. Every key of
    /// [`RunConfig::KEYS`] must appear exactly once, each of [`RunConfig::OPTIONAL_KEYS`] at
    /// most once, e.g.
    /// `model=64,32,10 activation=tanh loss=ce batch=32 lr=0.1 seed=42 split_seed=0
    /// samples=256 epochs=10`.
    ///
    /// # Errors
    /// [`VerifyError::Config`] naming the key that is missing, repeated, unknown or malformed,
    /// or a run that cannot work (`batch` of zero or above `samples`, `samples` above the
    /// training split, labels that are not digits).
    pub fn parse(text: &str) -> Result<RunConfig, VerifyError> {
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
        let get = |k: &str| {
            values
                .get(k)
                .copied()
                .ok_or_else(|| config_err(format!("missing key {k:?}")))
        };
        fn num<T: std::str::FromStr>(k: &str, v: &str) -> Result<T, VerifyError> {
            v.parse()
                .map_err(|_| config_err(format!("{k}={v}: not a valid number")))
        }
        let layers = get("model")?
            .split(',')
            .map(|w| num::<usize>("model", w))
            .collect::<Result<Vec<_>, _>>()?;
        let activation = match get("activation")? {
            "tanh" => Activation::Tanh,
            "relu" => Activation::Relu,
            other => return Err(config_err(format!("activation={other}: tanh or relu"))),
        };
        let loss = match get("loss")? {
            "ce" => Loss::SoftmaxCrossEntropy,
            other => {
                return Err(config_err(format!(
                    "loss={other}: only ce (softmax cross-entropy over labels) is supported"
                )))
            }
        };
        let cfg = RunConfig {
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
                None | Some("off") => false,
                Some("on") => true,
                Some(other) => return Err(config_err(format!("fusion={other}: on or off"))),
            },
            math: match values.get("math") {
                None => MathProfile::Precise,
                Some(v) => MathProfile::from_name(v)
                    .ok_or_else(|| config_err(format!("math={v}: precise or fast")))?,
            },
        };
        cfg.check()?;
        Ok(cfg)
    }

    fn check(&self) -> Result<(), VerifyError> {
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
        crate::model::Mlp {
            sizes: self.layers.clone(),
            activation: crate::model::Activation::Tanh,
        }
        .check(self.batch)
        .map_err(|e| config_err(format!("model: {e}")))?;
        if self.layers[0] != data::DIGITS_FEATURES {
            return Err(config_err(format!(
                "model's input width is {}, digits rows have {}",
                self.layers[0],
                data::DIGITS_FEATURES
            )));
        }
        if self.layers.last() != Some(&data::DIGITS_CLASSES) {
            return Err(config_err(format!(
                "model's output width must be the {} digit classes",
                data::DIGITS_CLASSES
            )));
        }
        if !self.lr.is_finite() {
            return Err(config_err("lr must be finite"));
        }
        if self.samples > data::DIGITS_TRAIN_ROWS {
            return Err(config_err(format!(
                "samples={} exceeds the {} rows of the training split",
                self.samples,
                data::DIGITS_TRAIN_ROWS
            )));
        }
        if self.batch == 0 || self.batch > self.samples {
            return Err(config_err(format!(
                "batch={} must be in 1..=samples ({})",
                self.batch, self.samples
            )));
        }
        Ok(())
    }

    /// The canonical one-line form, which [`RunConfig::parse`] reads back to the same value.
    pub fn to_line(&self) -> String {
        let model: Vec<String> = self.layers.iter().map(usize::to_string).collect();
        let math = match self.math {
            MathProfile::Precise => String::new(),
            m => format!(" math={m}"),
        };
        format!(
            "model={} activation={} loss=ce batch={} lr={} seed={} split_seed={} samples={} epochs={}{math}",
            model.join(","),
            self.activation.name(),
            self.batch,
            self.lr,
            self.seed,
            self.split_seed,
            self.samples,
            self.epochs
        ) + if self.fusion { " fusion=on" } else { "" }
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
    /// [`VerifyError::Plan`].
    pub fn job(&self) -> Result<TrainingJob, VerifyError> {
        Ok(TrainingJob::build_with(
            Mlp {
                sizes: self.layers.clone(),
                activation: self.activation,
            },
            self.loss,
            Sgd { lr: self.lr }.into(),
            self.batch,
            JobOptions {
                math: self.math,
                planning: PlanOptions { fuse: self.fusion },
                ..JobOptions::default()
            },
        )?)
    }

    /// The run's training set: the first `samples` rows of the digits training split
    /// (with their raw pixel counts, for embedding).
    ///
    /// # Errors
    /// [`VerifyError::Data`] if the bundled set is corrupt.
    pub fn training_set(&self) -> Result<Dataset, VerifyError> {
        let digits = data::digits()?;
        let (train, _) = digits.split_seeded(self.split_seed, data::DIGITS_TRAIN_ROWS);
        let idx: Vec<usize> = (0..self.samples).collect();
        Ok(train.subset(&idx))
    }

    /// The initial parameters, in the job's parameter order.
    pub fn initial_parameters(&self, job: &TrainingJob) -> Vec<Vec<f32>> {
        glorot_uniform(&job.parameter_shapes(), self.seed)
    }

    /// The row order of epoch `epoch` (0-based): a permutation of `0..samples`.
    pub fn epoch_order(&self, epoch: usize) -> Vec<usize> {
        let mut idx: Vec<usize> = (0..self.samples).collect();
        SplitMix64::new(epoch_seed(self.seed, epoch)).shuffle(&mut idx);
        idx
    }
}

impl fmt::Display for RunConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_line())
    }
}

/// The shuffle seed of epoch `epoch` (0-based) of a run seeded with `seed`: the first output of
/// `SplitMix64::new(seed ^ ((epoch + 1) << 32))` (the same rule as `tapeplan demo`).
pub fn epoch_seed(seed: u64, epoch: usize) -> u64 {
    SplitMix64::new(seed ^ ((epoch as u64 + 1) << 32)).next_u64()
}

/// FNV-1a 64 (offset basis `0xcbf29ce484222325`, prime `0x100000001b3`) over `pixels`, then
/// `labels`: the digest a device reports for the data it embeds.
pub fn data_digest(pixels: &[u8], labels: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in pixels.iter().chain(labels) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A parsed transcript; see the [module docs](self) for its format.
#[derive(Clone, Debug, PartialEq)]
pub struct Transcript {
    /// The run.
    pub config: RunConfig,
    /// What ran it, if said.
    pub target: Option<String>,
    /// The plan id and arena elements the device reported.
    pub plan: Option<(u32, usize)>,
    /// The data digest and row count the device reported.
    pub data: Option<(u64, usize)>,
    /// Loss bits, index `i` for step `i + 1`.
    pub losses: Vec<u32>,
    /// Epoch mean-loss bits, index `i` for epoch `i + 1`.
    pub epoch_means: Vec<u32>,
    /// Final parameter bits by name, in the order first seen.
    pub params: Vec<(String, Vec<u32>)>,
    /// The parameter digest the device reported.
    pub digest: Option<u64>,
    /// `info` lines, verbatim (without `info `).
    pub info: Vec<String>,
}

fn hex32(s: &str) -> Option<u32> {
    (s.len() == 8)
        .then(|| u32::from_str_radix(s, 16).ok())
        .flatten()
}

fn hex64(s: &str) -> Option<u64> {
    (s.len() == 16)
        .then(|| u64::from_str_radix(s, 16).ok())
        .flatten()
}

impl Transcript {
    /// Parses a transcript.
    ///
    /// # Errors
    /// [`VerifyError::Transcript`] for a malformed line (naming it), [`VerifyError::Incomplete`]
    /// for a missing header, `config` or `end` line, [`VerifyError::DeviceError`] for
    /// `end error …`.
    pub fn parse(text: &str) -> Result<Transcript, VerifyError> {
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.strip_suffix('\r').unwrap_or(l)))
            .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'));
        // Whatever comes before the first line (a UART's boot noise, an emulator's warnings)
        // is not part of the transcript.
        if !lines.any(|(_, l)| l.trim() == TRANSCRIPT_MAGIC) {
            return Err(VerifyError::Incomplete(format!(
                "no {TRANSCRIPT_MAGIC:?} line: not a transcript"
            )));
        }
        let mut config = None;
        let mut t = Transcript {
            config: RunConfig {
                layers: Vec::new(),
                activation: Activation::Tanh,
                loss: Loss::SoftmaxCrossEntropy,
                batch: 0,
                lr: 0.0,
                seed: 0,
                split_seed: 0,
                samples: 0,
                epochs: 0,
                fusion: false,
                math: MathProfile::Precise,
            },
            target: None,
            plan: None,
            data: None,
            losses: Vec::new(),
            epoch_means: Vec::new(),
            params: Vec::new(),
            digest: None,
            info: Vec::new(),
        };
        let mut ended = false;
        for (line, text) in lines {
            let bad = |message: String| VerifyError::Transcript { line, message };
            if ended {
                return Err(bad("a line after `end`".into()));
            }
            let (kind, rest) = text.split_once(' ').unwrap_or((text, ""));
            let fields: Vec<&str> = rest.split(' ').filter(|f| !f.is_empty()).collect();
            match kind {
                "config" => {
                    if config.is_some() {
                        return Err(bad("a second `config` line".into()));
                    }
                    config = Some(RunConfig::parse(rest).map_err(|e| bad(e.to_string()))?);
                }
                "target" => t.target = Some(rest.to_string()),
                "info" => t.info.push(rest.to_string()),
                "plan" => match fields[..] {
                    [id, arena] => {
                        let id = hex32(id).ok_or_else(|| bad(format!("plan id {id:?}")))?;
                        let arena = arena
                            .parse()
                            .map_err(|_| bad(format!("arena elems {arena:?}")))?;
                        t.plan = Some((id, arena));
                    }
                    _ => return Err(bad("expected `plan <hex8> <arena_elems>`".into())),
                },
                "data" => match fields[..] {
                    [d, rows] => {
                        let d = hex64(d).ok_or_else(|| bad(format!("data digest {d:?}")))?;
                        let rows = rows.parse().map_err(|_| bad(format!("rows {rows:?}")))?;
                        t.data = Some((d, rows));
                    }
                    _ => return Err(bad("expected `data <hex16> <rows>`".into())),
                },
                "loss" | "epoch" => {
                    let [n, bits] = fields[..] else {
                        return Err(bad(format!("expected `{kind} <n> <hex8>`")));
                    };
                    let list = if kind == "loss" {
                        &mut t.losses
                    } else {
                        &mut t.epoch_means
                    };
                    let n: usize = n.parse().map_err(|_| bad(format!("{kind} number {n:?}")))?;
                    if n != list.len() + 1 {
                        return Err(bad(format!(
                            "{kind} {n} out of order: expected {}",
                            list.len() + 1
                        )));
                    }
                    if config.is_none() {
                        return Err(bad(format!("`{kind}` before `config`")));
                    }
                    list.push(hex32(bits).ok_or_else(|| bad(format!("bits {bits:?}")))?);
                }
                "param" => {
                    let [name, start, values @ ..] = &fields[..] else {
                        return Err(bad("expected `param <name> <start> <hex8>…`".into()));
                    };
                    let start: usize =
                        start.parse().map_err(|_| bad(format!("start {start:?}")))?;
                    let i = match t.params.iter().position(|(n, _)| n == name) {
                        Some(i) => i,
                        None => {
                            t.params.push((name.to_string(), Vec::new()));
                            t.params.len() - 1
                        }
                    };
                    let v = &mut t.params[i].1;
                    if start != v.len() {
                        return Err(bad(format!(
                            "param {name} starts at {start}, expected {}",
                            v.len()
                        )));
                    }
                    for b in values {
                        v.push(hex32(b).ok_or_else(|| bad(format!("bits {b:?}")))?);
                    }
                }
                "digest" => match fields[..] {
                    [d] => t.digest = Some(hex64(d).ok_or_else(|| bad(format!("digest {d:?}")))?),
                    _ => return Err(bad("expected `digest <hex16>`".into())),
                },
                "end" => match fields.first().copied() {
                    Some("ok") if fields.len() == 1 => ended = true,
                    Some("error") => {
                        return Err(VerifyError::DeviceError(
                            rest.strip_prefix("error").unwrap_or("").trim().to_string(),
                        ))
                    }
                    _ => return Err(bad("expected `end ok` or `end error <text>`".into())),
                },
                other => return Err(bad(format!("unknown record {other:?}"))),
            }
        }
        if !ended {
            return Err(VerifyError::Incomplete(
                "no `end ok` line: the transcript is truncated".into(),
            ));
        }
        t.config = config.ok_or_else(|| VerifyError::Incomplete("no `config` line".into()))?;
        Ok(t)
    }
}

/// The first step whose loss differs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepDiff {
    /// The step, 1-based.
    pub step: usize,
    /// The epoch it belongs to, 1-based.
    pub epoch: usize,
    /// The device's loss bits.
    pub device_bits: u32,
    /// The oracle's loss bits.
    pub oracle_bits: u32,
}

/// The outcome of comparing a transcript with the oracle.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The run.
    pub config: RunConfig,
    /// What ran it.
    pub target: Option<String>,
    /// Steps compared.
    pub steps: usize,
    /// Steps whose loss bits are identical.
    pub identical_steps: usize,
    /// The first differing step.
    pub first_step_diff: Option<StepDiff>,
    /// Epoch means the device reported, and how many are identical.
    pub epoch_means: (usize, usize),
    /// The first differing epoch mean: (epoch, device bits, oracle bits).
    pub first_epoch_diff: Option<(usize, u32, u32)>,
    /// Parameter elements compared, and how many are identical.
    pub param_elems: (usize, usize),
    /// The first differing parameter element (left: device, right: oracle).
    pub first_param_diff: Option<BitDiff>,
    /// The oracle's parameter digest; and whether the device's digest (if sent) equals it.
    pub digest: (u64, Option<bool>),
}

impl Report {
    /// True when every compared bit is identical.
    pub fn passed(&self) -> bool {
        self.first_step_diff.is_none()
            && self.first_epoch_diff.is_none()
            && self.first_param_diff.is_none()
            && self.digest.1 != Some(false)
    }
}

impl fmt::Display for Report {
    /// The verdict: `bitwise: N/N steps identical`, the parameter verdict, and on a difference
    /// where it is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "bitwise: {}/{} steps identical",
            self.identical_steps, self.steps
        )?;
        if let Some(d) = &self.first_step_diff {
            writeln!(
                f,
                "first difference: step {} (epoch {}), tensor loss element 0: device {:#010x} ({}) vs oracle {:#010x} ({})",
                d.step,
                d.epoch,
                d.device_bits,
                f32::from_bits(d.device_bits),
                d.oracle_bits,
                f32::from_bits(d.oracle_bits)
            )?;
        }
        if self.epoch_means.0 > 0 {
            writeln!(
                f,
                "epoch means: {}/{} identical",
                self.epoch_means.1, self.epoch_means.0
            )?;
        }
        if let Some((e, d, o)) = self.first_epoch_diff {
            writeln!(
                f,
                "first difference: epoch {e} mean loss: device {d:#010x} ({}) vs oracle {o:#010x} ({})",
                f32::from_bits(d),
                f32::from_bits(o)
            )?;
        }
        let (n, same) = self.param_elems;
        let verdict = if same == n && self.first_param_diff.is_none() {
            "identical"
        } else {
            "DIFFER"
        };
        write!(
            f,
            "parameters: {same}/{n} elements bitwise identical after step {} ({verdict}), digest {:#018x}",
            self.steps, self.digest.0
        )?;
        match self.digest.1 {
            Some(true) => write!(f, " (device agrees)")?,
            Some(false) => write!(f, " (device DIFFERS)")?,
            None => {}
        }
        if let Some(d) = &self.first_param_diff {
            write!(
                f,
                "\nfirst difference: after step {}: {d} (device vs oracle)",
                self.steps
            )?;
        }
        Ok(())
    }
}

/// Rebuilds the transcript's run on the host, retrains it with the [`Oracle`] and compares
/// every loss and final parameter bit for bit (NaNs compare as one class).
///
/// `expected`, when given, is the run the caller meant the device to do: a transcript of
/// another run is a [`VerifyError::Mismatch`].
///
/// # Errors
/// [`VerifyError::Mismatch`] when the device ran another run, plan (id or arena size) or data
/// (digest or rows); [`VerifyError::Incomplete`] for missing or extra steps or parameters;
/// planning, data and oracle errors. Bit differences are not errors: they are in the
/// [`Report`] (see [`Report::passed`]).
pub fn verify(t: &Transcript, expected: Option<&RunConfig>) -> Result<Report, VerifyError> {
    let cfg = &t.config;
    if let Some(e) = expected {
        if e != cfg {
            return Err(VerifyError::Mismatch(format!(
                "the device ran `{cfg}`, expected `{e}`"
            )));
        }
    }
    let job = cfg.job()?;
    let bytes = job.plan.to_bytes();
    let plan = tapeplan_runtime::Plan::parse(&bytes)
        .map_err(|e| VerifyError::Mismatch(format!("the host's own plan is rejected: {e}")))?;
    if let Some((id, arena)) = t.plan {
        if (id, arena) != (plan.plan_id(), plan.arena_elems()) {
            return Err(VerifyError::Mismatch(format!(
                "the device ran plan {id:#010x} (arena {arena} elems), the host plans {:#010x} (arena {} elems) from the run description: do its model, math= and fusion= match the device's build?",
                plan.plan_id(),
                plan.arena_elems()
            )));
        }
    }
    let train = cfg.training_set()?;
    if let Some((digest, rows)) = t.data {
        let host = data_digest(&train.pixels, &train.labels);
        if (digest, rows) != (host, train.len()) {
            return Err(VerifyError::Mismatch(format!(
                "the device's data digest is {digest:#018x} over {rows} rows, the host's {host:#018x} over {}",
                train.len()
            )));
        }
    }
    let steps = cfg.total_steps();
    if t.losses.len() != steps {
        return Err(VerifyError::Incomplete(format!(
            "{} loss lines for a run of {steps} steps",
            t.losses.len()
        )));
    }
    if t.epoch_means.len() > cfg.epochs {
        return Err(VerifyError::Incomplete(format!(
            "{} epoch lines for a run of {} epochs",
            t.epoch_means.len(),
            cfg.epochs
        )));
    }

    let init = cfg.initial_parameters(&job);
    let mut oracle = Oracle::new(&job, &init)?;
    let mut identical = 0;
    let mut first_step_diff = None;
    let mut epochs_same = 0;
    let mut first_epoch_diff = None;
    let mut step = 0;
    for epoch in 0..cfg.epochs {
        let data = train.subset(&cfg.epoch_order(epoch));
        let mut sum = 0.0f32;
        for (x, labels) in data.batches(cfg.batch) {
            let loss = oracle.step(x, &labels)?;
            sum += loss;
            let device = t.losses[step];
            step += 1;
            if same_bits(f32::from_bits(device), loss) {
                identical += 1;
            } else if first_step_diff.is_none() {
                first_step_diff = Some(StepDiff {
                    step,
                    epoch: epoch + 1,
                    device_bits: device,
                    oracle_bits: loss.to_bits(),
                });
            }
        }
        if let Some(&device) = t.epoch_means.get(epoch) {
            let mean = sum / cfg.steps_per_epoch() as f32;
            if same_bits(f32::from_bits(device), mean) {
                epochs_same += 1;
            } else if first_epoch_diff.is_none() {
                first_epoch_diff = Some((epoch + 1, device, mean.to_bits()));
            }
        }
    }

    // Final parameters, in the job's order.
    let shapes = job.parameter_shapes();
    for (name, _) in &t.params {
        if !shapes.iter().any(|(n, _)| n == name) {
            return Err(VerifyError::Incomplete(format!(
                "the device sent an unknown parameter {name:?}"
            )));
        }
    }
    let mut device: Vec<Vec<f32>> = Vec::new();
    for (name, shape) in &shapes {
        let bits = t
            .params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, b)| b)
            .ok_or_else(|| {
                VerifyError::Incomplete(format!("no `param {name}` lines: parameter missing"))
            })?;
        if bits.len() != shape.elems() {
            return Err(VerifyError::Incomplete(format!(
                "parameter {name} has {} elements, the device sent {}",
                shape.elems(),
                bits.len()
            )));
        }
        device.push(bits.iter().map(|&b| f32::from_bits(b)).collect());
    }
    let names: Vec<&str> = shapes.iter().map(|(n, _)| n.as_str()).collect();
    let left: Vec<&[f32]> = device.iter().map(Vec::as_slice).collect();
    let right: Vec<&[f32]> = oracle.params.iter().map(|p| p.data.as_slice()).collect();
    let first_param_diff = first_difference(names.iter().copied(), &left, &right);
    let elems: usize = right.iter().map(|p| p.len()).sum();
    let same_elems = left
        .iter()
        .zip(&right)
        .flat_map(|(l, r)| l.iter().zip(r.iter()))
        .filter(|(a, b)| same_bits(**a, **b))
        .count();

    // The digest over the parameters in the order the device sent them.
    let mut concat: Vec<f32> = Vec::with_capacity(elems);
    for (name, _) in &t.params {
        if let Some(i) = names.iter().position(|n| n == name) {
            concat.extend_from_slice(right[i]);
        }
    }
    let host_digest = digest_f32(&concat);

    Ok(Report {
        config: cfg.clone(),
        target: t.target.clone(),
        steps,
        identical_steps: identical,
        first_step_diff,
        epoch_means: (t.epoch_means.len(), epochs_same),
        first_epoch_diff,
        param_elems: (elems, same_elems),
        first_param_diff,
        digest: (host_digest, t.digest.map(|d| d == host_digest)),
    })
}

/// `tapeplan verify TRANSCRIPT [--config RUN]`: reads the transcript (`-` for standard input)
/// and the optional run description, verifies, and prints the [`Report`]. Answers
/// [`std::process::ExitCode::FAILURE`] when a bit differs.
///
/// # Errors
/// Unreadable files and every [`VerifyError`] of [`Transcript::parse`] and [`verify`].
pub fn run_cli(
    transcript: &std::path::Path,
    config: Option<&std::path::Path>,
) -> Result<std::process::ExitCode, VerifyError> {
    let read = |path: &std::path::Path| {
        let r = if path.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin())
        } else {
            std::fs::read_to_string(path)
        };
        r.map_err(|source| VerifyError::Io {
            path: path.to_owned(),
            source,
        })
    };
    let t = Transcript::parse(&read(transcript)?)?;
    let expected = config.map(read).transpose()?;
    let expected = expected.as_deref().map(RunConfig::parse).transpose()?;
    let report = verify(&t, expected.as_ref())?;
    println!(
        "verify: {} ({} steps) from {}",
        report.config,
        report.steps,
        report.target.as_deref().unwrap_or("an unnamed target")
    );
    println!("{report}");
    Ok(if report.passed() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}

/// Writes the transcript the host oracle itself would send for `cfg`: what a correct device
/// sends, byte for byte except `target` and `info`. Used by tests, and to show the format.
///
/// # Errors
/// Planning, data and oracle errors.
pub fn oracle_transcript(cfg: &RunConfig) -> Result<String, VerifyError> {
    use std::fmt::Write as _;
    let job = cfg.job()?;
    let bytes = job.plan.to_bytes();
    let plan = tapeplan_runtime::Plan::parse(&bytes)
        .map_err(|e| VerifyError::Mismatch(format!("the host's own plan is rejected: {e}")))?;
    let train = cfg.training_set()?;
    let mut out = String::new();
    let _ = writeln!(out, "{TRANSCRIPT_MAGIC}");
    let _ = writeln!(out, "config {}", cfg.to_line());
    let _ = writeln!(out, "target host oracle");
    let _ = writeln!(out, "plan {:08x} {}", plan.plan_id(), plan.arena_elems());
    let _ = writeln!(
        out,
        "data {:016x} {}",
        data_digest(&train.pixels, &train.labels),
        train.len()
    );
    let init = cfg.initial_parameters(&job);
    let mut oracle = Oracle::new(&job, &init)?;
    let mut step = 0;
    for epoch in 0..cfg.epochs {
        let data = train.subset(&cfg.epoch_order(epoch));
        let mut sum = 0.0f32;
        for (x, labels) in data.batches(cfg.batch) {
            let loss = oracle.step(x, &labels)?;
            sum += loss;
            step += 1;
            let _ = writeln!(out, "loss {step} {:08x}", loss.to_bits());
        }
        let mean = sum / cfg.steps_per_epoch() as f32;
        let _ = writeln!(out, "epoch {} {:08x}", epoch + 1, mean.to_bits());
    }
    let mut all = Vec::new();
    for ((name, _), p) in job.parameter_shapes().iter().zip(&oracle.params) {
        for (k, chunk) in p.data.chunks(8).enumerate() {
            let _ = write!(out, "param {name} {}", k * 8);
            for v in chunk {
                let _ = write!(out, " {:08x}", v.to_bits());
            }
            out.push('\n');
        }
        all.extend_from_slice(&p.data);
    }
    let _ = writeln!(out, "digest {:016x}", digest_f32(&all));
    let _ = writeln!(out, "end ok");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> RunConfig {
        RunConfig::parse(
            "model=64,8,10 activation=tanh loss=ce batch=4 lr=0.1 seed=42 split_seed=0 \
             samples=16 epochs=2",
        )
        .unwrap()
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
            (&c.to_line().replace("loss=ce", "loss=mse"), "only ce"),
            (
                &c.to_line().replace("model=64,", "model=63,"),
                "input width",
            ),
        ] {
            let e = RunConfig::parse(bad).unwrap_err().to_string();
            assert!(e.contains(what), "{bad}: {e}");
        }
    }

    #[test]
    fn the_math_profile_is_part_of_the_run() {
        let precise = small();
        let fast = RunConfig {
            math: MathProfile::Fast,
            ..small()
        };
        // `math=fast` round-trips; precise lines do not name the profile.
        assert!(fast.to_line().ends_with(" math=fast"), "{}", fast.to_line());
        assert!(!precise.to_line().contains("math="));
        assert_eq!(RunConfig::parse(&fast.to_line()).unwrap(), fast);
        assert_eq!(
            RunConfig::parse(&format!("{} math=precise", precise.to_line())).unwrap(),
            precise
        );
        let e = RunConfig::parse(&format!("{} math=approx", precise.to_line())).unwrap_err();
        assert!(e.to_string().contains("precise or fast"), "{e}");
        // The two profiles plan different plans (flag bit 0 and the id), and train differently.
        let (pj, fj) = (precise.job().unwrap(), fast.job().unwrap());
        let (pb, fb) = (pj.plan.to_bytes(), fj.plan.to_bytes());
        let (pp, fp) = (
            tapeplan_runtime::Plan::parse(&pb).unwrap(),
            tapeplan_runtime::Plan::parse(&fb).unwrap(),
        );
        assert_eq!(
            (pp.math(), fp.math()),
            (MathProfile::Precise, MathProfile::Fast)
        );
        assert_ne!(pp.plan_id(), fp.plan_id());
        // A fast run's transcript verifies under its own description, and is a mismatch for
        // the precise one.
        let text = oracle_transcript(&fast).unwrap();
        let t = Transcript::parse(&text).unwrap();
        assert!(verify(&t, Some(&fast)).unwrap().passed());
        assert!(matches!(
            verify(&t, Some(&precise)),
            Err(VerifyError::Mismatch(_))
        ));
        // Relabelled as precise, its plan id no longer matches the host's precise plan.
        let relabelled = text.replace(" math=fast", "");
        let t = Transcript::parse(&relabelled).unwrap();
        assert!(matches!(verify(&t, None), Err(VerifyError::Mismatch(_))));
    }

    #[test]
    fn a_good_transcript_verifies() {
        let c = small();
        let text = oracle_transcript(&c).unwrap();
        let t = Transcript::parse(&text).unwrap();
        assert_eq!(t.losses.len(), 8);
        let r = verify(&t, Some(&c)).unwrap();
        assert!(r.passed(), "{r}");
        let shown = r.to_string();
        assert!(
            shown.starts_with("bitwise: 8/8 steps identical\n"),
            "{shown}"
        );
        assert!(
            shown.contains("parameters: 610/610 elements bitwise identical"),
            "{shown}"
        );
        assert!(shown.contains("(device agrees)"), "{shown}");
    }

    /// Flips the lowest bit of the `index`-th hex word of the first line starting with `prefix`.
    fn flip(text: &str, prefix: &str, word: usize) -> String {
        let mut done = false;
        text.lines()
            .map(|l| {
                if !done && l.starts_with(prefix) {
                    done = true;
                    let mut f: Vec<String> = l.split(' ').map(str::to_string).collect();
                    let v = u32::from_str_radix(&f[word], 16).unwrap() ^ 1;
                    f[word] = format!("{v:08x}");
                    f.join(" ") + "\n"
                } else {
                    format!("{l}\n")
                }
            })
            .collect()
    }

    #[test]
    fn a_flipped_loss_bit_names_the_step() {
        let c = small();
        let text = flip(&oracle_transcript(&c).unwrap(), "loss 3 ", 2);
        let r = verify(&Transcript::parse(&text).unwrap(), None).unwrap();
        assert!(!r.passed());
        assert_eq!(r.identical_steps, 7);
        let d = r.first_step_diff.as_ref().unwrap();
        assert_eq!((d.step, d.epoch), (3, 1));
        assert_eq!(d.device_bits ^ d.oracle_bits, 1);
        let shown = r.to_string();
        assert!(shown.starts_with("bitwise: 7/8 steps identical"), "{shown}");
        assert!(
            shown.contains("step 3 (epoch 1), tensor loss element 0"),
            "{shown}"
        );
    }

    #[test]
    fn a_flipped_parameter_bit_names_tensor_and_element() {
        let c = small();
        // `param w2 8 …`: elements 8..16 of w2; flip element 8 + 2 = 10.
        let text = flip(&oracle_transcript(&c).unwrap(), "param w2 8 ", 5);
        let r = verify(&Transcript::parse(&text).unwrap(), None).unwrap();
        assert!(!r.passed());
        assert_eq!(r.identical_steps, 8);
        let d = r.first_param_diff.as_ref().unwrap();
        assert_eq!((d.tensor.as_str(), d.element), ("w2", 10));
        assert_eq!(d.left_bits ^ d.right_bits, 1);
        assert_eq!(r.param_elems, (610, 609));
        assert_eq!(
            r.digest.1,
            Some(true),
            "the digest is the oracle's; the device's agrees"
        );
        let shown = r.to_string();
        assert!(shown.contains("tensor w2 element 10"), "{shown}");
        assert!(shown.contains("DIFFER"), "{shown}");
    }

    #[test]
    fn nan_payloads_compare_as_one_class() {
        assert!(same_bits(
            f32::from_bits(0x7fc0_0000),
            f32::from_bits(0xffc0_0000)
        ));
    }

    #[test]
    fn broken_transcripts_are_rejected() {
        let c = small();
        let good = oracle_transcript(&c).unwrap();
        let truncated: String = good.lines().take(12).map(|l| format!("{l}\n")).collect();
        assert!(matches!(
            Transcript::parse(&truncated),
            Err(VerifyError::Incomplete(_))
        ));
        let e = Transcript::parse(&good.replace("loss 2 ", "loss 9 ")).unwrap_err();
        assert!(matches!(e, VerifyError::Transcript { line: 7, .. }), "{e}");
        let e =
            Transcript::parse(&good.replace("end ok", "end error arena too small")).unwrap_err();
        assert!(matches!(e, VerifyError::DeviceError(ref m) if m == "arena too small"));
        let e = Transcript::parse(&good.replace("tapeplan-transcript 1", "hello")).unwrap_err();
        assert!(matches!(e, VerifyError::Incomplete(_)), "{e}");
        // Noise before the first line is skipped; noise inside is an error.
        assert!(Transcript::parse(&format!("Timer with period zero, disabling\n{good}")).is_ok());
        let e = Transcript::parse(&good.replace("loss 2 ", "noise\nloss 2 ")).unwrap_err();
        assert!(matches!(e, VerifyError::Transcript { line: 7, .. }), "{e}");
        // A different plan or data set is a mismatch, not a bit difference.
        let other_plan = good
            .lines()
            .map(|l| {
                if l.starts_with("plan ") {
                    "plan 00000000 1\n".to_string()
                } else {
                    format!("{l}\n")
                }
            })
            .collect::<String>();
        let e = verify(&Transcript::parse(&other_plan).unwrap(), None).unwrap_err();
        assert!(matches!(e, VerifyError::Mismatch(_)), "{e}");
        let mut other = c.clone();
        other.epochs = 3;
        let e = verify(&Transcript::parse(&good).unwrap(), Some(&other)).unwrap_err();
        assert!(matches!(e, VerifyError::Mismatch(_)), "{e}");
        // A missing step is incomplete.
        let missing: String = good
            .lines()
            .filter(|l| !l.starts_with("loss 8 ") && !l.starts_with("epoch 2 "))
            .map(|l| format!("{l}\n"))
            .collect();
        let e = verify(&Transcript::parse(&missing).unwrap(), None).unwrap_err();
        assert!(matches!(e, VerifyError::Incomplete(_)), "{e}");
    }

    #[test]
    fn data_digest_is_fnv1a() {
        assert_eq!(data_digest(&[], &[]), 0xcbf2_9ce4_8422_2325);
        // FNV-1a 64 of "a" (the published test vector).
        assert_eq!(data_digest(b"a", &[]), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(data_digest(b"ab", &[]), data_digest(b"a", b"b"));
    }
}
