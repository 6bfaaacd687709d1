//! A training run of any plan on a CSV, as `tapeplan train PLAN --data CSV` runs it: the same
//! table reading, train/validation/test split, scaling, standardization, initialization, epoch
//! order and batches, so the final [`TrainRun::parameter_digest`] equals the `parameter digest:
//! 0x…` line the host prints for the same plan, CSV, initial parameters, seeds and epochs.
//!
//! The protocol pieces (the seeded split and shuffles, the Glorot initialization, the
//! standardizer, the digest) are the runtime's [`tapeplan_runtime::protocol`], the ones the host
//! calls. The CSV is read in JavaScript (`www/own-run.js`'s `readCsv`, as `tapeplan train` reads
//! it, decimal to `f32` exactly), which keeps Rust's float parsing out of the module; so are the
//! report's numbers formatted (`reportLines`).

use tapeplan_runtime::protocol::{
    epoch_shuffle, glorot_uniform_fill, standardize_rows, standardizer_fit, SplitMix64,
    ENTRY_FORWARD, ENTRY_INIT, ENTRY_TRAIN_STEP, INPUT_LABELS, INPUT_X, INPUT_Y, OUTPUT_LOGITS,
};
use tapeplan_runtime::ExecError;
use wasm_bindgen::prelude::*;

use crate::{js, Error, Trainer};

/// A CSV read for a plan: features and targets, row-major.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    /// `[rows, n_features]`.
    pub features: Vec<f32>,
    /// `[rows, target_width]`: class indices as `f32` (classification) or float targets.
    pub targets: Vec<f32>,
    /// Features per row.
    pub n_features: usize,
    /// Targets per row: 1 for a label.
    pub target_width: usize,
    /// The class names when the label column held names (class `k` is `class_names[k]`).
    pub class_names: Vec<String>,
}

impl Table {
    /// The number of rows.
    pub fn len(&self) -> usize {
        self.features.len() / self.n_features.max(1)
    }

    /// No rows.
    pub fn is_empty(&self) -> bool {
        self.features.is_empty()
    }

    /// The rows at `rows`, in that order.
    fn subset(&self, rows: &[u32]) -> Table {
        let (nf, nt) = (self.n_features, self.target_width);
        let mut out = Table {
            n_features: nf,
            target_width: nt,
            ..Table::default()
        };
        for &r in rows {
            let r = r as usize;
            out.features
                .extend_from_slice(self.features.get(r * nf..(r + 1) * nf).unwrap_or(&[]));
            out.targets
                .extend_from_slice(self.targets.get(r * nt..(r + 1) * nt).unwrap_or(&[]));
        }
        out
    }
}

/// `0..n` as row indices.
fn identity(n: usize) -> Vec<u32> {
    (0..n as u32).collect()
}

/// Per-feature standardization fitted on the training split, as `tapeplan train
/// --standardize` ([`standardizer_fit`]), applied to every split.
fn standardize(train: &mut Table, others: [&mut Table; 2]) {
    let nf = train.n_features;
    let (mut mean, mut std) = (vec![0.0f32; nf], vec![1.0f32; nf]);
    standardizer_fit(&train.features, nf, &mut mean, &mut std);
    let [a, b] = others;
    for set in [train, a, b] {
        standardize_rows(&mut set.features, &mean, &std);
    }
}

/// How a [`TrainRun`] reads and visits its data: `tapeplan train`'s options of the same names.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunOptions {
    /// Epochs over the training split (`--epochs`).
    pub epochs: usize,
    /// Seed of the Glorot initialization and the epoch shuffles (`--seed`).
    pub seed: u64,
    /// Seed of the train/test split (`--split-seed`).
    pub split_seed: u64,
    /// Fraction of rows for training, the rest the test split (`--train-fraction`, 0.8).
    pub train_fraction: f64,
    /// Fraction of the training split held out for validation (`--val-fraction`, 0).
    pub val_fraction: f64,
    /// Every feature times this (`--scale`, 1).
    pub scale: f32,
    /// Standardize with the training split's statistics (`--standardize`).
    pub standardize: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            epochs: 10,
            seed: 42,
            split_seed: 0,
            train_fraction: 0.8,
            val_fraction: 0.0,
            scale: 1.0,
            standardize: false,
        }
    }
}

/// A training run of a plan on a CSV's table, as `tapeplan train PLAN --data CSV [--init FILE]`
/// runs it (the same split, standardization, initialization, epoch order and batches), stepped
/// a few steps at a time so a page can draw between them; its [`TrainRun::parameter_digest`] at
/// the end equals the `parameter digest: 0x…` line the host prints for the same run.
#[wasm_bindgen]
pub struct TrainRun {
    trainer: Trainer,
    options: RunOptions,
    train: Table,
    val: Table,
    test: Table,
    batch: usize,
    classes: usize,
    /// The parameters that need a value from the caller: those the `init` entry does not write.
    tensors: Vec<String>,
    loaded: Vec<bool>,
    checked: bool,
    epoch: usize,
    /// The current epoch's row order, and the next batch's place in it.
    order: Vec<u32>,
    at: usize,
    epoch_sum: f64,
    epoch_steps: usize,
    epoch_refused: usize,
    losses: Vec<f32>,
    class_names: Vec<String>,
    epochs: Vec<EpochReport>,
    test_metrics: Option<Metrics>,
}

/// A split's metrics, as numbers (the page formats them as `tapeplan train` prints them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Metrics {
    /// Classification: `correct` of `rows` (`tapeplan train` prints `correct as f32 / rows as
    /// f32` to 3 decimals).
    Accuracy {
        /// Rows whose largest logit is the label's (the first of equals).
        correct: usize,
        /// Rows evaluated.
        rows: usize,
    },
    /// Regression: mean squared and mean absolute error over every target, in `f64`.
    Regression {
        /// Mean squared error.
        mse: f64,
        /// Mean absolute error.
        mae: f64,
    },
}

impl Metrics {
    /// `[1, correct, rows]` or `[2, mse, mae]`; `[]` for none.
    fn numbers(m: Option<Metrics>) -> Vec<f64> {
        match m {
            None => Vec::new(),
            Some(Metrics::Accuracy { correct, rows }) => vec![1.0, correct as f64, rows as f64],
            Some(Metrics::Regression { mse, mae }) => vec![2.0, mse, mae],
        }
    }
}

/// One finished epoch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EpochReport {
    /// The mean of the committed steps' losses, summed in `f64` in step order.
    pub mean_loss: f64,
    /// Steps a guarded plan refused (a non-finite loss or update: nothing committed).
    pub refused: usize,
    /// The validation split's metrics after the epoch.
    pub validation: Option<Metrics>,
}

/// What a plan's `train_step` takes: class labels, or this many float targets per row.
enum Task {
    Labels,
    Targets(usize),
}

fn task_of(trainer: &Trainer, batch: usize) -> Result<Task, Error> {
    if trainer.input_shape(ENTRY_TRAIN_STEP, INPUT_LABELS).is_ok() {
        return Ok(Task::Labels);
    }
    let y = trainer.input_shape(ENTRY_TRAIN_STEP, INPUT_Y).map_err(|_| {
        fail("the plan's train_step has neither an input `labels` (classification) nor `y` (regression)")
    })?;
    Ok(Task::Targets(
        y.iter().product::<u32>() as usize / batch.max(1),
    ))
}

/// What a CSV read for `plan` holds after its features: 0 for one label column (a
/// classification plan, an input `labels`), else the float targets per row of a regression
/// plan's `y`.
///
/// # Errors
/// A rejected plan, or one without `train_step`'s `x` and `labels` or `y`.
pub fn target_width(plan: &[u8]) -> Result<usize, Error> {
    let trainer = Trainer::from_bytes(plan)?;
    let x = trainer.input_shape(ENTRY_TRAIN_STEP, INPUT_X)?;
    let batch = x.first().copied().unwrap_or(0) as usize;
    Ok(match task_of(&trainer, batch)? {
        Task::Labels => 0,
        Task::Targets(n) => n,
    })
}

/// What a CSV read for the plan holds after its features: 0 for one label column
/// (classification), else the number of float targets per row (regression). Throws on a plan
/// without `train_step`'s `x` and `labels` or `y`.
#[wasm_bindgen(js_name = targetWidth)]
pub fn js_target_width(plan: &[u8]) -> Result<usize, JsError> {
    target_width(plan).map_err(js)
}

fn fail(text: impl Into<String>) -> Error {
    Error::Data(text.into())
}

impl TrainRun {
    /// Loads `plan` (running its `init` entry, as the host does) and takes `table` (read for
    /// the plan: [`target_width`]), then scales, splits and standardizes it as `tapeplan train`
    /// does.
    ///
    /// # Errors
    /// A rejected plan, a plan without `train_step`/`forward` or their `x` and target, a table
    /// that does not fit the plan (widths, labels past the plan's classes), options out of
    /// range, or a training split smaller than one batch.
    pub fn create(plan: &[u8], mut table: Table, options: RunOptions) -> Result<TrainRun, Error> {
        if options.epochs == 0 {
            return Err(fail("epochs must be at least 1"));
        }
        if !(0.0..=1.0).contains(&options.train_fraction) {
            return Err(fail("the train fraction must be in [0, 1]"));
        }
        if !(0.0..1.0).contains(&options.val_fraction) {
            return Err(fail("the validation fraction must be in [0, 1)"));
        }
        if !options.scale.is_finite() {
            return Err(fail("the scale must be finite"));
        }
        let mut trainer = Trainer::from_bytes(plan)?;
        for needed in [ENTRY_TRAIN_STEP, ENTRY_FORWARD] {
            trainer.entry_id(needed)?;
        }
        if trainer.entry_id(ENTRY_INIT).is_ok() {
            trainer.run(ENTRY_INIT)?;
        }
        let x = trainer.input_shape(ENTRY_TRAIN_STEP, INPUT_X)?;
        let batch = x.first().copied().unwrap_or(0).max(1) as usize;
        let d_in = x.iter().skip(1).product::<u32>() as usize;
        let task = task_of(&trainer, batch)?;
        if table.is_empty() {
            return Err(fail("the data has no rows"));
        }
        let width = match task {
            Task::Labels => 1,
            Task::Targets(n) => n,
        };
        if table.target_width != width || table.targets.len() != table.len() * width {
            return Err(fail(format!(
                "the table has {} target values per row; the plan's train_step takes {width}",
                table.target_width
            )));
        }
        if table.n_features != d_in {
            return Err(fail(format!(
                "the data has {} features per row; the plan's input x is [{}] ({d_in} per row)",
                table.n_features,
                x.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
            )));
        }
        let classes = trainer
            .output_shape(ENTRY_FORWARD, OUTPUT_LOGITS)
            .ok()
            .and_then(|s| s.get(1).copied())
            .unwrap_or(0) as usize;
        if let Task::Labels = task {
            if let Some((row, &l)) = table
                .targets
                .iter()
                .enumerate()
                .find(|(_, &l)| l as usize >= classes)
            {
                return Err(fail(format!(
                    "data row {} has label {}, but the plan has {classes} classes (0..{})",
                    row + 1,
                    l as usize,
                    classes.saturating_sub(1)
                )));
            }
        }
        if options.scale != 1.0 {
            for v in &mut table.features {
                *v *= options.scale;
            }
            if table.features.iter().any(|v| !v.is_finite()) {
                return Err(fail(
                    "the scale makes a feature infinite: every training step would be non-finite; use a smaller scale",
                ));
            }
        }
        let len = table.len();
        let n_train = (((len as f64) * options.train_fraction).round() as usize).min(len);
        let n_val = (((n_train as f64) * options.val_fraction).round() as usize).min(n_train);
        let mut rows = identity(len);
        SplitMix64::new(options.split_seed).shuffle(&mut rows);
        let (train_rows, test_rows) = rows.split_at(n_train);
        let (train_rows, val_rows) = train_rows.split_at(n_train - n_val);
        let (mut train, mut val, mut test) = (
            table.subset(train_rows),
            table.subset(val_rows),
            table.subset(test_rows),
        );
        if train.len() < batch {
            return Err(fail(format!(
                "the training split has {} rows, fewer than one batch of {batch}",
                train.len()
            )));
        }
        if options.standardize {
            standardize(&mut train, [&mut val, &mut test]);
        }
        let writes_init: Vec<String> = match trainer.plan().entry(ENTRY_INIT) {
            Some(e) => trainer
                .plan()
                .updates(e)
                .map(|b| b.name.to_owned())
                .collect(),
            None => Vec::new(),
        };
        let tensors: Vec<String> = trainer
            .parameter_names()
            .into_iter()
            .filter(|n| !writes_init.contains(n))
            .collect();
        let run = TrainRun {
            loaded: vec![false; tensors.len()],
            tensors,
            trainer,
            options,
            train,
            val,
            test,
            batch,
            classes,
            checked: false,
            epoch: 0,
            order: Vec::new(),
            at: 0,
            epoch_sum: 0.0,
            epoch_steps: 0,
            epoch_refused: 0,
            losses: Vec::new(),
            class_names: std::mem::take(&mut table.class_names),
            epochs: Vec::new(),
            test_metrics: None,
        };
        Ok(run)
    }

    /// What `tapeplan train` says before the first epoch: the split and the batch, and the
    /// class names of a label column of names.
    pub fn header(&self) -> Vec<String> {
        let epochs = self.options.epochs;
        let mut lines = vec![format!(
            "training for {epochs} epoch{}: {} train rows, {}{} test rows, batch {}, arena {} bytes",
            if epochs == 1 { "" } else { "s" },
            self.train.len(),
            if self.val.is_empty() {
                String::new()
            } else {
                format!("{} validation rows, ", self.val.len())
            },
            self.test.len(),
            self.batch,
            self.trainer.plan().arena_bytes()
        )];
        if !self.class_names.is_empty() {
            lines.push(format!(
                "{} class names (class k is the k-th): {}",
                self.class_names.len(),
                self.class_names.join(", ")
            ));
        }
        lines
    }

    /// The finished epochs' reports.
    pub fn epoch_reports(&self) -> &[EpochReport] {
        &self.epochs
    }

    /// The test split's metrics once the run is over.
    pub fn test_metrics(&self) -> Option<Metrics> {
        self.test_metrics
    }

    /// The parameters the caller must give values (those the plan's `init` entry does not
    /// write), in the plan's order.
    pub fn tensor_names(&self) -> &[String] {
        &self.tensors
    }

    /// Loads one initial parameter (row-major, in the plan's layout).
    ///
    /// # Errors
    /// No such parameter, or the wrong length.
    pub fn load_parameter(&mut self, name: &str, values: &[f32]) -> Result<(), Error> {
        if values.iter().any(|v| !v.is_finite()) {
            return Err(fail(format!(
                "initial parameter \"{name}\" has a non-finite value"
            )));
        }
        self.trainer.load_parameter(name, values)?;
        if let Some(k) = self.tensors.iter().position(|t| t == name) {
            if let Some(l) = self.loaded.get_mut(k) {
                *l = true;
            }
        }
        Ok(())
    }

    /// The `--layers` MLP's seeded Glorot initialization (`tapeplan train` without `--init`):
    /// every weight `w1, w2, …` from one [`SplitMix64`] stream seeded with the run's seed, in
    /// the plan's order, biases `b1, …` zero.
    ///
    /// # Errors
    /// A plan with a parameter to initialize that is not an MLP's `w<k>` or `b<k>`: it needs
    /// an initial-parameters file.
    pub fn glorot(&mut self) -> Result<(), Error> {
        let mlp_name = |n: &str| {
            let digits = n.strip_prefix('w').or_else(|| n.strip_prefix('b'));
            digits.is_some_and(|d| {
                !d.is_empty() && !d.starts_with('0') && d.bytes().all(|c| c.is_ascii_digit())
            })
        };
        if let Some(other) = self.tensors.iter().find(|n| !mlp_name(n)) {
            return Err(fail(format!(
                "the plan's {other} needs an initial value: its init entry does not write it and it is not an MLP's w*/b*; give an initial-parameters file (a safetensors file under the plan's names, such as the PLAN.init.safetensors written beside a plan from ONNX or the layer API)"
            )));
        }
        let mut rng = SplitMix64::new(self.options.seed);
        for name in self.tensors.clone() {
            let shape = self.trainer.parameter_shape(&name)?;
            let elems = shape.iter().product::<u32>() as usize;
            let mut values = vec![0.0f32; elems];
            if let [fan_in, fan_out] = shape[..] {
                glorot_uniform_fill(&mut rng, fan_in as usize, fan_out as usize, &mut values);
            }
            self.load_parameter(&name, &values)?;
        }
        Ok(())
    }

    fn check_initialized(&mut self) -> Result<(), Error> {
        if self.checked {
            return Ok(());
        }
        if let Some((name, _)) = self.tensors.iter().zip(&self.loaded).find(|(_, &l)| !l) {
            return Err(fail(format!(
                "the plan's {name} has no initial value: the initial-parameters file has no tensor of that name (its init entry does not write it)"
            )));
        }
        self.checked = true;
        Ok(())
    }

    /// Steps per epoch: the training rows in full batches.
    pub fn steps_per_epoch(&self) -> usize {
        self.train.len() / self.batch
    }

    /// Every step of the run.
    pub fn total_steps(&self) -> usize {
        self.steps_per_epoch() * self.options.epochs
    }

    /// The run is over.
    pub fn done(&self) -> bool {
        self.epoch >= self.options.epochs
    }

    /// Runs up to `steps` training steps (crossing epochs, evaluating the validation split at
    /// each epoch's end); answers how many ran (0 when the run is over).
    ///
    /// # Errors
    /// A parameter without an initial value, a runtime error, an epoch in which the guard
    /// refused every step, or a non-finite loss of a plan that writes its updates in place.
    pub fn advance(&mut self, steps: usize) -> Result<usize, Error> {
        self.check_initialized()?;
        let mut ran = 0;
        let last = self.steps_per_epoch() * self.batch;
        while ran < steps && !self.done() {
            if self.order.is_empty() {
                self.order = identity(self.train.len());
                epoch_shuffle(self.options.seed, self.epoch, &mut self.order);
                self.at = 0;
            }
            if let Some(rows) = self.order.get(self.at..self.at + self.batch) {
                let b = self.train.subset(rows);
                self.at += self.batch;
                ran += 1;
                match self.trainer.train_step(&b.features, &b.targets) {
                    Ok(loss) if loss.is_finite() => {
                        self.losses.push(loss);
                        self.epoch_sum += f64::from(loss);
                        self.epoch_steps += 1;
                    }
                    Ok(_) => {
                        return Err(fail(format!(
                            "epoch {}: the loss is not finite; this plan writes updates in place (--no-guard), so the parameters are no longer finite",
                            self.epoch + 1
                        )))
                    }
                    Err(Error::Run {
                        error: ExecError::NonFinite { .. },
                        ..
                    }) => self.epoch_refused += 1,
                    Err(e) => return Err(e),
                }
            }
            if self.at + self.batch > last {
                self.end_epoch()?;
            }
        }
        Ok(ran)
    }

    fn end_epoch(&mut self) -> Result<(), Error> {
        let epoch = self.epoch + 1;
        if self.epoch_refused > 0 && self.epoch_steps == 0 {
            return Err(fail(format!(
                "epoch {epoch}: the guard refused all {} steps (a non-finite loss or update each time), so nothing was committed and training made no progress",
                self.epoch_refused
            )));
        }
        let validation = self.metrics(Split::Val)?;
        self.epochs.push(EpochReport {
            mean_loss: self.epoch_sum / self.epoch_steps.max(1) as f64,
            refused: self.epoch_refused,
            validation,
        });
        self.epoch += 1;
        self.order.clear();
        self.at = 0;
        self.epoch_sum = 0.0;
        self.epoch_steps = 0;
        self.epoch_refused = 0;
        if self.done() {
            self.test_metrics = self.metrics(Split::Test)?;
        }
        Ok(())
    }

    /// A split's metrics through the `forward` entry, in batches, the last one zero-padded, as
    /// `tapeplan train` computes them; `None` for an empty split.
    fn metrics(&mut self, split: Split) -> Result<Option<Metrics>, Error> {
        let set = match split {
            Split::Val => &self.val,
            Split::Test => &self.test,
        };
        if set.is_empty() {
            return Ok(None);
        }
        let (rows, nf, nt) = (set.len(), set.n_features, set.target_width);
        let features = set.features.clone();
        let targets = set.targets.clone();
        let classification = self.train_is_classification();
        let mut correct = 0usize;
        let (mut se, mut ae) = (0.0f64, 0.0f64);
        let mut start = 0;
        while start < rows {
            let n = self.batch.min(rows - start);
            let mut x = vec![0.0f32; self.batch * nf];
            if let (Some(dst), Some(src)) = (
                x.get_mut(..n * nf),
                features.get(start * nf..(start + n) * nf),
            ) {
                dst.copy_from_slice(src);
            }
            let out = self.trainer.forward(&x)?;
            let width = out.len() / self.batch;
            for r in 0..n {
                let row = out.get(r * width..(r + 1) * width).unwrap_or(&[]);
                if classification {
                    let label = targets.get(start + r).copied().unwrap_or(-1.0);
                    if argmax(row) as f32 == label {
                        correct += 1;
                    }
                } else {
                    let t = targets
                        .get((start + r) * nt..(start + r + 1) * nt)
                        .unwrap_or(&[]);
                    for (p, y) in row.iter().zip(t) {
                        let d = f64::from(*p) - f64::from(*y);
                        se += d * d;
                        ae += d.abs();
                    }
                }
            }
            start += n;
        }
        Ok(Some(if classification {
            Metrics::Accuracy { correct, rows }
        } else {
            let n = (rows * nt).max(1) as f64;
            Metrics::Regression {
                mse: se / n,
                mae: ae / n,
            }
        }))
    }

    fn train_is_classification(&self) -> bool {
        self.trainer
            .input_shape(ENTRY_TRAIN_STEP, INPUT_LABELS)
            .is_ok()
    }

    /// The parameter digest as the host prints it: `0x` and 16 hex digits of
    /// [`parameter_digest`](tapeplan_runtime::protocol::parameter_digest).
    pub fn parameter_digest(&self) -> String {
        self.trainer.parameter_digest()
    }
}

#[derive(Clone, Copy)]
enum Split {
    Val,
    Test,
}

/// The index of the largest element (the first of equals; NaN never wins), as the host's.
fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if row.get(best).is_some_and(|&b| v > b) {
            best = i;
        }
    }
    best
}

/// The JavaScript API.
#[wasm_bindgen]
impl TrainRun {
    /// `new TrainRun(planBytes, features, targets, nFeatures, classNames, epochs, seed,
    /// splitSeed, trainFraction, valFraction, scale, standardize)`: the plan loaded (its `init`
    /// entry run) and the table (`Float32Array`s, row-major: `[rows, nFeatures]` and `[rows,
    /// targetWidth]`, labels as floats; the class names of a label column of names, else `[]`)
    /// scaled, split and standardized as `tapeplan train` does with the same options (`seed`
    /// and `splitSeed` are `BigInt`s). `own-run.js`'s `startRun` reads the CSV and calls it.
    /// Throws on a plan or table that does not fit.
    #[wasm_bindgen(constructor)]
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        plan: &[u8],
        features: Vec<f32>,
        targets: Vec<f32>,
        n_features: usize,
        class_names: Vec<String>,
        epochs: usize,
        seed: u64,
        split_seed: u64,
        train_fraction: f64,
        val_fraction: f64,
        scale: f32,
        standardize: bool,
    ) -> Result<TrainRun, JsError> {
        let rows = features.len().checked_div(n_features).unwrap_or(0);
        let table = Table {
            target_width: targets.len().checked_div(rows).unwrap_or(0),
            features,
            targets,
            n_features,
            class_names,
        };
        let options = RunOptions {
            epochs,
            seed,
            split_seed,
            train_fraction,
            val_fraction,
            scale,
            standardize,
        };
        TrainRun::create(plan, table, options).map_err(js)
    }

    /// The parameters to give initial values (those the plan's `init` entry does not write).
    #[wasm_bindgen(js_name = tensorNames)]
    pub fn js_tensor_names(&self) -> Vec<String> {
        self.tensors.clone()
    }

    /// A parameter's shape (`Uint32Array`).
    #[wasm_bindgen(js_name = parameterShape)]
    pub fn js_parameter_shape(&self, name: &str) -> Result<Vec<u32>, JsError> {
        self.trainer.parameter_shape(name).map_err(js)
    }

    /// Loads one initial parameter from a `Float32Array` (row-major).
    #[wasm_bindgen(js_name = loadParameter)]
    pub fn js_load_parameter(&mut self, name: &str, values: &[f32]) -> Result<(), JsError> {
        self.load_parameter(name, values).map_err(js)
    }

    /// A parameter's current values, as a new `Float32Array`.
    #[wasm_bindgen(js_name = parameter)]
    pub fn js_parameter(&mut self, name: &str) -> Result<Vec<f32>, JsError> {
        self.trainer.parameter(name).map_err(js)
    }

    /// The `--layers` MLP's seeded Glorot initialization; throws for any other plan.
    #[wasm_bindgen(js_name = glorot)]
    pub fn js_glorot(&mut self) -> Result<(), JsError> {
        self.glorot().map_err(js)
    }

    /// Runs up to `steps` steps; answers how many ran.
    #[wasm_bindgen(js_name = advance)]
    pub fn js_advance(&mut self, steps: usize) -> Result<usize, JsError> {
        self.advance(steps).map_err(js)
    }

    /// The run is over.
    #[wasm_bindgen(getter, js_name = done)]
    pub fn js_done(&self) -> bool {
        self.done()
    }

    /// Steps taken so far (refused ones included).
    #[wasm_bindgen(getter, js_name = step)]
    pub fn js_step(&self) -> usize {
        self.epoch * self.steps_per_epoch() + self.at / self.batch
    }

    /// Every step of the run.
    #[wasm_bindgen(getter, js_name = totalSteps)]
    pub fn js_total_steps(&self) -> usize {
        self.total_steps()
    }

    /// Steps per epoch.
    #[wasm_bindgen(getter, js_name = stepsPerEpoch)]
    pub fn js_steps_per_epoch(&self) -> usize {
        self.steps_per_epoch()
    }

    /// Epochs completed.
    #[wasm_bindgen(getter, js_name = epochsDone)]
    pub fn js_epochs_done(&self) -> usize {
        self.epoch
    }

    /// The committed steps' losses so far, as a new `Float32Array`.
    #[wasm_bindgen(js_name = losses)]
    pub fn js_losses(&self) -> Vec<f32> {
        self.losses.clone()
    }

    /// What `tapeplan train` says before the first epoch, one line each.
    #[wasm_bindgen(js_name = header)]
    pub fn js_header(&self) -> Vec<String> {
        self.header()
    }

    /// Epoch `k`'s (0-based) report as numbers: `[meanLoss, refused, …validation]`, the
    /// validation part `[1, correct, rows]` (classification), `[2, mse, mae]` (regression) or
    /// empty; `undefined` past the finished epochs. `own-run.js`'s `reportLines` formats them
    /// as `tapeplan train` prints them.
    #[wasm_bindgen(js_name = epochReport)]
    pub fn js_epoch_report(&self, k: usize) -> Option<Vec<f64>> {
        let e = self.epochs.get(k)?;
        let mut out = vec![e.mean_loss, e.refused as f64];
        out.extend(Metrics::numbers(e.validation));
        Some(out)
    }

    /// The test split's metrics once the run is over, as [`TrainRun::js_epoch_report`]'s
    /// validation part (empty before the end or for an empty split).
    #[wasm_bindgen(js_name = testMetrics)]
    pub fn js_test_metrics(&self) -> Vec<f64> {
        Metrics::numbers(self.test_metrics)
    }

    /// The parameter digest, `0x` and 16 hex digits, as `tapeplan train` prints it.
    #[wasm_bindgen(js_name = parameterDigest)]
    pub fn js_parameter_digest(&self) -> String {
        self.parameter_digest()
    }

    /// The number of classes of a classification plan's logits (0 for regression).
    #[wasm_bindgen(getter, js_name = classes)]
    pub fn js_classes(&self) -> usize {
        if self.train_is_classification() {
            self.classes
        } else {
            0
        }
    }
}

// Host tests against the planner's own run; the planner is host-only.
#[cfg(all(test, not(target_arch = "wasm32")))]
#[path = "run_tests.rs"]
mod tests;
