//! A training run named by a few keys: the job description a firmware build, a device
//! transcript and `tapeplan verify` share ([`RunConfig`]).
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
//! - **order**: epoch `e` (0-based) visits the rows `0..samples` in the run protocol's epoch
//!   order ([`epoch_shuffle`]`(seed, e, …)`), in full batches of `batch` consecutive rows of
//!   that order (the last `samples % batch` rows of each epoch are not used). Labels go in as
//!   `label as f32`.
//! - **steps**: `epochs · (samples / batch)`, numbered from 1.
//!

use std::collections::BTreeMap;
use std::fmt;

use tapeplan_core::MathProfile;

use crate::io::data::{self, Dataset};
use crate::model::job::{JobOptions, TrainingJob};
use crate::model::mlp::{glorot_uniform, Activation, Loss, Mlp};
use crate::model::optim::Sgd;
use crate::plan::{PlanOptions, PlanningError};
use crate::protocol::epoch_shuffle;

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
}

fn config_err(message: impl Into<String>) -> RunConfigError {
    RunConfigError::Invalid(message.into())
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
    /// [`RunConfigError::Invalid`] naming the key that is missing, repeated, unknown or malformed,
    /// or a run that cannot work (`batch` of zero or above `samples`, `samples` above the
    /// training split, labels that are not digits).
    pub fn parse(text: &str) -> Result<RunConfig, RunConfigError> {
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
        fn num<T: std::str::FromStr>(k: &str, v: &str) -> Result<T, RunConfigError> {
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
        Mlp {
            sizes: self.layers.clone(),
            activation: Activation::Tanh,
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
    /// [`RunConfigError::Plan`].
    pub fn job(&self) -> Result<TrainingJob, RunConfigError> {
        Ok(TrainingJob::build_with(
            Mlp {
                sizes: self.layers.clone(),
                activation: self.activation,
            },
            self.loss,
            Sgd { lr: self.lr }.into(),
            self.batch,
            JobOptions {
                planning: PlanOptions {
                    fuse: self.fusion,
                    math: self.math,
                    ..PlanOptions::default()
                },
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
}
