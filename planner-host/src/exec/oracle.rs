//! The host oracle, which checks the runtime: it trains a [`TrainingJob`] without its
//! schedule. The tape interpreter ([`Run`]) computes the loss, the engine reverse scan
//! ([`Run::backward`]) the gradient, and the same update body as the recorded update computes the
//! new parameters. And the bitwise comparison of two sets of tensors ([`first_difference`]).

use tapeplan_core::{Compute, Run, TapeError, Tensor};

use crate::io::data::Dataset;
use crate::model::job::{advance_model_state, TrainingJob};
use crate::model::RunConfig;

/// The host oracle: trains a [`TrainingJob`]'s model with the tape interpreter, the engine
/// reverse scan and the same update body, holding its own parameters.
pub struct Oracle<'j> {
    job: &'j TrainingJob,
    /// The current parameters, in the job's order.
    pub params: Vec<Tensor>,
    /// The current optimizer state, in [`Optimizer::state`](crate::model::optim::Optimizer::state) order.
    pub state: Vec<Tensor>,
}

impl<'j> Oracle<'j> {
    /// An oracle starting from `params` (in the job's parameter order) and the optimizer state's
    /// initial values.
    ///
    /// # Errors
    /// [`TapeError::ValueShape`] when a parameter has the wrong length.
    pub fn new(job: &'j TrainingJob, params: &[Vec<f32>]) -> Result<Oracle<'j>, TapeError> {
        let tensors = job
            .params
            .iter()
            .zip(params)
            .map(|(p, v)| Tensor::new(job.tape.shape(*p)?, v.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let state = job
            .state_specs
            .iter()
            .map(|s| Tensor {
                shape: s.shape,
                data: vec![s.init; s.shape.elems()],
            })
            .collect();
        Ok(Oracle {
            job,
            params: tensors,
            state,
        })
    }

    fn run_with(&self, x: &[f32], target: &[f32]) -> Result<Run<'j>, TapeError> {
        let job = self.job;
        let mut run = Run::with_math(&job.tape, job.math);
        run.set(
            job.inputs.x,
            Tensor::new(job.tape.shape(job.inputs.x)?, x.to_vec())?,
        )?;
        run.set(
            job.inputs.target,
            Tensor::new(job.tape.shape(job.inputs.target)?, target.to_vec())?,
        )?;
        for (p, v) in job.params.iter().zip(&self.params) {
            run.set(*p, v.clone())?;
        }
        for (p, v) in job.state.iter().zip(&self.state) {
            run.set(*p, v.clone())?;
        }
        Ok(run)
    }

    /// One training step on a batch: answers the loss and updates the parameters and state. When
    /// the job is guarded and the loss or an update is not finite, nothing is updated (as the
    /// runtime's commit refuses) and the loss is still answered.
    ///
    /// # Shapes
    /// `x: [batch, d_in]` row-major; `target`: `[batch]` labels or `[batch, d_out]`.
    ///
    /// # Errors
    /// Shape errors.
    pub fn step(&mut self, x: &[f32], target: &[f32]) -> Result<f32, TapeError> {
        let job = self.job;
        let mut run = self.run_with(x, target)?;
        let adjoints = run.backward(job.loss_node, Tensor::scalar(1.0), &job.params)?;
        let loss = run
            .value(job.loss_node)
            .map(|t| t.data[0])
            .unwrap_or(f32::NAN);
        let grads: Vec<Option<Tensor>> = job
            .params
            .iter()
            .map(|p| adjoints.get(*p).cloned())
            .collect();
        let k = job.optimizer_state;
        let mut compute = Compute::with_math(job.math);
        let (new_params, mut new_state) =
            job.optimizer
                .step(&mut compute, &self.params, &grads, &self.state[..k])?;
        new_state.extend(advance_model_state(&mut compute, &self.state[k..])?);
        let finite = |v: &Option<Tensor>| {
            v.as_ref()
                .is_none_or(|t| t.data.iter().all(|x| x.is_finite()))
        };
        if job.guarded
            && !(loss.is_finite() && new_params.iter().all(finite) && new_state.iter().all(finite))
        {
            return Ok(loss);
        }
        for (p, n) in self.params.iter_mut().zip(new_params) {
            if let Some(n) = n {
                *p = n;
            }
        }
        for (p, n) in self.state.iter_mut().zip(new_state) {
            if let Some(n) = n {
                *p = n;
            }
        }
        Ok(loss)
    }

    /// The logits of a batch, `[batch, d_out]`.
    ///
    /// # Errors
    /// Shape errors.
    pub fn logits(&self, x: &[f32]) -> Result<Vec<f32>, TapeError> {
        let job = self.job;
        let target = vec![0.0; job.tape.shape(job.inputs.target)?.elems()];
        let mut run = self.run_with(x, &target)?;
        run.forward_until(job.logits)?;
        Ok(run
            .value(job.logits)
            .map(|t| t.data.clone())
            .unwrap_or_default())
    }
}

/// The oracle's run of a [`RunConfig`]: what a correct device reports.
pub struct OracleRun<'j> {
    /// Every step's loss, index `i` for step `i + 1`.
    pub losses: Vec<f32>,
    /// Every epoch's mean loss as a device computes it: the `f32` sum of its steps' losses in
    /// order, divided by its step count as `f32`.
    pub epoch_means: Vec<f32>,
    /// The oracle after the last step (its parameters are the run's final parameters).
    pub oracle: Oracle<'j>,
}

/// Trains `job` (`cfg`'s) with the oracle over `train` (`cfg`'s training set) from `init`
/// (`cfg`'s initial parameters, [`RunConfig::initial_parameters`]), in `cfg`'s order (see
/// [`RunConfig`]).
///
/// # Errors
/// Shape errors.
pub fn oracle_run<'j>(
    cfg: &RunConfig,
    job: &'j TrainingJob,
    train: &Dataset,
    init: &[Vec<f32>],
) -> Result<OracleRun<'j>, TapeError> {
    let mut oracle = Oracle::new(job, init)?;
    let mut losses = Vec::with_capacity(cfg.total_steps());
    let mut epoch_means = Vec::with_capacity(cfg.epochs);
    for epoch in 0..cfg.epochs {
        let data = train.subset(&cfg.epoch_order(epoch));
        let mut sum = 0.0f32;
        for (x, labels) in data.batches(cfg.batch) {
            let loss = oracle.step(x, &labels)?;
            sum += loss;
            losses.push(loss);
        }
        epoch_means.push(sum / cfg.steps_per_epoch() as f32);
    }
    Ok(OracleRun {
        losses,
        epoch_means,
        oracle,
    })
}

/// The first difference between two sets of named tensors, compared bit for bit (every NaN
/// equals every NaN: payloads may legally differ between targets).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BitDiff {
    /// The tensor's name.
    pub tensor: String,
    /// The element's index.
    pub element: usize,
    /// The first set's bits.
    pub left_bits: u32,
    /// The second set's bits.
    pub right_bits: u32,
}

impl std::fmt::Display for BitDiff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tensor {} element {}: {:#010x} ({}) vs {:#010x} ({})",
            self.tensor,
            self.element,
            self.left_bits,
            f32::from_bits(self.left_bits),
            self.right_bits,
            f32::from_bits(self.right_bits)
        )
    }
}

/// True when two floats have the same bits, or are both NaN.
pub fn same_bits(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Compares `left[i]` with `right[i]` element by element; answers the first difference.
pub fn first_difference<'a>(
    names: impl IntoIterator<Item = &'a str>,
    left: &[&[f32]],
    right: &[&[f32]],
) -> Option<BitDiff> {
    for ((name, l), r) in names.into_iter().zip(left).zip(right) {
        if l.len() != r.len() {
            return Some(BitDiff {
                tensor: name.to_string(),
                element: l.len().min(r.len()),
                left_bits: 0,
                right_bits: 0,
            });
        }
        for (e, (a, b)) in l.iter().zip(r.iter()).enumerate() {
            if !same_bits(*a, *b) {
                return Some(BitDiff {
                    tensor: name.to_string(),
                    element: e,
                    left_bits: a.to_bits(),
                    right_bits: b.to_bits(),
                });
            }
        }
    }
    None
}
