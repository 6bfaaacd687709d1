//! The training loop: epochs of seeded shuffles over a training set, in full batches, through the
//! `no_std` runtime ([`RuntimeModel`]). `tapeplan train` and `tapeplan demo` both run it; what
//! each does around a step (a progress bar and a loss curve, or a bitwise check against the
//! oracle) is a [`TrainObserver`].
//!
//! # The order
//!
//! Epoch `e` (0-based) visits the training rows in the order
//! [`Dataset::shuffled_indices`]`(`[`epoch_seed`]`(seed, e))`, in full batches of `batch`
//! consecutive rows of that order; the last `len % batch` rows of each epoch are not used.
//! Labels go in as `label as f32`.

use std::ops::Range;

use tapeplan_runtime::ExecError;

use crate::exec::runtime::{RuntimeModel, TrainError};
use crate::io::data::Dataset;
use crate::protocol::epoch_seed;

/// What one `train_step` did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StepOutcome {
    /// The step ran and committed its updates; its loss (finite unless the plan writes updates
    /// in place: a guarded plan refuses a non-finite step).
    Loss(f32),
    /// A guarded plan refused to commit the step (its loss or an update was not finite):
    /// nothing changed. The runtime's error says which.
    Refused(ExecError),
}

/// One step, as the loop hands it to a [`TrainObserver`].
#[derive(Clone, Copy, Debug)]
pub struct Step<'a> {
    /// The epoch, 0-based.
    pub epoch: usize,
    /// The batch's features, `[batch, d_in]` row-major.
    pub x: &'a [f32],
    /// The batch's labels as `f32`, `[batch]`.
    pub labels: &'a [f32],
    /// What the step did.
    pub outcome: StepOutcome,
}

/// One epoch's figures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EpochSummary {
    /// The epoch, 0-based.
    pub epoch: usize,
    /// Steps that committed (their losses are in the mean).
    pub steps: usize,
    /// Steps a guarded plan refused.
    pub refused: usize,
    /// The mean of the committed steps' losses, summed in `f64` in step order (0 without one).
    pub mean_loss: f64,
}

/// Whether the loop goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Go on.
    Continue,
    /// Stop now (after this step or epoch): nothing more is run.
    Stop,
}

/// What a caller of [`train_epochs`] does around the steps. Every method but
/// [`TrainObserver::step`] does nothing by default.
pub trait TrainObserver {
    /// The caller's error; the loop's own errors (a runtime failure) convert into it.
    type Error: From<TrainError>;

    /// Epoch `epoch` (0-based) is about to run `steps` steps.
    ///
    /// # Errors
    /// The observer's; the loop stops and answers it.
    fn epoch_start(&mut self, epoch: usize, steps: usize) -> Result<(), Self::Error> {
        let _ = (epoch, steps);
        Ok(())
    }

    /// A step ran. A committed loss counts in the epoch's mean only when this answers
    /// [`Flow::Continue`].
    ///
    /// # Errors
    /// The observer's; the loop stops and answers it.
    fn step(&mut self, model: &mut RuntimeModel<'_>, step: Step<'_>) -> Result<Flow, Self::Error>;

    /// An epoch ended.
    ///
    /// # Errors
    /// The observer's; the loop stops and answers it.
    fn epoch_end(
        &mut self,
        model: &mut RuntimeModel<'_>,
        summary: &EpochSummary,
    ) -> Result<Flow, Self::Error> {
        let _ = (model, summary);
        Ok(Flow::Continue)
    }
}

/// How a training set is visited: the seed of the per-epoch shuffles and the batch size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochOrder {
    /// The run's seed; epoch `e` is shuffled by [`epoch_seed`]`(seed, e)`.
    pub seed: u64,
    /// Rows per step.
    pub batch: usize,
}

impl EpochOrder {
    /// The rows of epoch `epoch` (0-based) of `train`, in the order they are visited.
    pub fn epoch(&self, train: &Dataset, epoch: usize) -> Dataset {
        train.subset(&train.shuffled_indices(epoch_seed(self.seed, epoch)))
    }
}

/// Trains `model` over `train` for the epochs `epochs` (0-based, e.g. `start..total` for a
/// resumed run) in the order `order` (see the [module docs](self)), telling `observer` about
/// every step and epoch. Answers [`Flow::Stop`] when the observer stopped the loop.
///
/// # Shapes
/// `train`'s rows are the plan's `x` rows (`[batch, d_in]` per step); its labels the plan's
/// `labels`.
///
/// # Errors
/// A runtime error of a step (other than a guarded refusal, which is a
/// [`StepOutcome::Refused`]), and the observer's errors.
///
/// # Panics
/// If `order.batch == 0`.
pub fn train_epochs<O: TrainObserver>(
    model: &mut RuntimeModel<'_>,
    train: &Dataset,
    order: EpochOrder,
    epochs: Range<usize>,
    observer: &mut O,
) -> Result<Flow, O::Error> {
    for epoch in epochs {
        let epoch_data = order.epoch(train, epoch);
        let batches = epoch_data.batches(order.batch);
        observer.epoch_start(epoch, batches.len())?;
        let mut total = 0.0f64;
        let mut steps = 0usize;
        let mut refused = 0usize;
        for (x, labels) in batches {
            let outcome = match model.train_step(x, &labels) {
                Ok(loss) => StepOutcome::Loss(loss),
                Err(TrainError::Run(e @ ExecError::NonFinite { .. })) => StepOutcome::Refused(e),
                Err(e) => return Err(e.into()),
            };
            let step = Step {
                epoch,
                x,
                labels: &labels,
                outcome,
            };
            if observer.step(model, step)? == Flow::Stop {
                return Ok(Flow::Stop);
            }
            match outcome {
                StepOutcome::Loss(loss) => {
                    total += loss as f64;
                    steps += 1;
                }
                StepOutcome::Refused(_) => refused += 1,
            }
        }
        let summary = EpochSummary {
            epoch,
            steps,
            refused,
            mean_loss: total / steps.max(1) as f64,
        };
        if observer.epoch_end(model, &summary)? == Flow::Stop {
            return Ok(Flow::Stop);
        }
    }
    Ok(Flow::Continue)
}
