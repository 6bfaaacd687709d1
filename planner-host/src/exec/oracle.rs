//! The host oracle, which checks the runtime: it trains a [`TrainingJob`] without its
//! schedule. The tape interpreter ([`Run`]) computes the loss, the engine reverse scan
//! ([`Run::backward`]) the gradient, and the same update body as the recorded update computes the
//! new parameters. And the bitwise comparison of two sets of tensors ([`first_difference`]).

use tapeplan_core::{Compute, MathProfile, NodeId, Run, Shape, TapeError, Tensor};

use crate::io::data::Dataset;
use crate::model::job::{advance_model_state, TrainingJob};
use crate::model::optim::Optimizer;
use crate::model::InputSpec;
use crate::model::RunConfig;

/// Why the oracle or a parameter store refused a call.
#[derive(Debug, thiserror::Error)]
pub enum OracleError {
    /// A shape or kernel error of the tape's reading.
    #[error("tape: {0:?}")]
    Tape(TapeError),
    /// The wrong number of model inputs.
    #[error("the model takes {expected} inputs ({names}), {found} given")]
    Inputs {
        /// How many the model takes.
        expected: usize,
        /// Their names, comma-separated.
        names: String,
        /// How many were given.
        found: usize,
    },
    /// An input of the wrong length.
    #[error("input {name}: {found} values given for shape {expected:?}")]
    InputLength {
        /// The input's name.
        name: String,
        /// Its shape.
        expected: Shape,
        /// The number of values given.
        found: usize,
    },
    /// A binding name that is neither a model input nor the target, or one given twice.
    #[error("no input named {name:?} (the job's inputs: {names})")]
    UnknownInput {
        /// The name given.
        name: String,
        /// The job's input names and its target's, comma-separated.
        names: String,
    },
    /// An input or the target not given.
    #[error("input {0:?} not given")]
    MissingInput(String),
    /// An entry the job was built without.
    #[error("the job has no {0} entry (see JobOptions::eval_entries)")]
    MissingEntry(&'static str),
    /// A gradient for a name the store does not hold.
    #[error("no parameter named {0:?} in the store")]
    UnknownParameter(String),
    /// A gradient whose shape is not its parameter's.
    #[error("gradient of {name}: shape {found:?}, the parameter's is {expected:?}")]
    GradientShape {
        /// The parameter.
        name: String,
        /// The parameter's shape.
        expected: Shape,
        /// The gradient's shape.
        found: Shape,
    },
}

impl From<TapeError> for OracleError {
    fn from(e: TapeError) -> OracleError {
        OracleError::Tape(e)
    }
}

impl OracleError {
    /// As a [`TapeError`], for the older one-input methods ([`Oracle::step`],
    /// [`Oracle::logits`]): an input problem becomes a missing value of the first input leaf.
    fn into_tape(self, job: &TrainingJob) -> TapeError {
        match self {
            OracleError::Tape(e) => e,
            _ => TapeError::MissingValue {
                index: job.inputs.first().map_or(0, |n| n.index()),
            },
        }
    }
}

/// The host oracle: trains a [`TrainingJob`]'s model with the tape interpreter, the engine
/// reverse scan and the same update body, holding its own parameters, buffers and state.
///
/// Inputs are given in the job's input order ([`TrainingJob::input_specs`], the model's
/// [`Model::inputs`](crate::model::Model::inputs)); the one-input methods ([`Oracle::step`],
/// [`Oracle::logits`]) are shorthands for models with a single input such as the MLP's `x`.
pub struct Oracle<'j> {
    job: &'j TrainingJob,
    /// The current persistent tensors of the model (parameters and buffers), in the job's order.
    pub params: Vec<Tensor>,
    /// The current state: the optimizer's, in
    /// [`Optimizer::state`](crate::model::optim::Optimizer::state) order over the trained
    /// parameters, then the generator's.
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

    /// An oracle starting from the model's own initial values
    /// ([`TrainingJob::initial_parameters`]).
    ///
    /// # Errors
    /// As [`Oracle::new`].
    pub fn with_initial_parameters(job: &'j TrainingJob) -> Result<Oracle<'j>, TapeError> {
        Oracle::new(job, &job.initial_parameters())
    }

    /// A run with the given input leaves set (`None`: zeros of the leaf's shape) and every
    /// persistent leaf.
    fn run_with(&self, leaves: &[(NodeId, Option<&[f32]>)]) -> Result<Run<'j>, TapeError> {
        let job = self.job;
        let mut run = Run::with_math(&job.tape, job.math).with_arith(job.arith);
        for (leaf, values) in leaves {
            let shape = job.tape.shape(*leaf)?;
            let data = match values {
                Some(v) => v.to_vec(),
                None => vec![0.0; shape.elems()],
            };
            run.set(*leaf, Tensor::new(shape, data)?)?;
        }
        for (p, v) in job.params.iter().zip(&self.params) {
            run.set(*p, v.clone())?;
        }
        for (p, v) in job.state.iter().zip(&self.state) {
            run.set(*p, v.clone())?;
        }
        Ok(run)
    }

    /// Every input leaf of the job: the batch inputs from `inputs` (all of them, in order), the
    /// target from `target` (zeros when `None`), `forward_1`'s inputs as zeros.
    fn leaves<'a>(
        &self,
        inputs: &[&'a [f32]],
        target: Option<&'a [f32]>,
    ) -> Result<Vec<Leaf<'a>>, OracleError> {
        let job = self.job;
        check_inputs(job, &job.input_specs, inputs)?;
        let mut out: Vec<Leaf<'_>> = job
            .inputs
            .iter()
            .zip(inputs)
            .map(|(n, v)| (*n, Some(*v)))
            .collect();
        out.push((job.target, target));
        if let Some(f1) = &job.forward_1 {
            for n in &f1.inputs {
                if !job.inputs.contains(n) {
                    out.push((*n, None));
                }
            }
        }
        Ok(out)
    }

    /// One training step on a batch of a single-input model: [`Oracle::step_inputs`] with
    /// `&[x]`.
    ///
    /// # Shapes
    /// `x: [batch, d_in]` row-major; `target`: `[batch]` labels or the output's shape.
    ///
    /// # Errors
    /// Shape errors.
    pub fn step(&mut self, x: &[f32], target: &[f32]) -> Result<f32, TapeError> {
        self.step_inputs(&[x], target)
            .map_err(|e| e.into_tape(self.job))
    }

    /// One training step with the inputs and the target given by name (as the plan's
    /// `train_step` binds them: the model's input names and `labels` or `y`): resolves them to
    /// [`Oracle::step_inputs`]'s order.
    ///
    /// # Errors
    /// [`OracleError::UnknownInput`] for a name the job does not take (or given twice),
    /// [`OracleError::MissingInput`] for one not given, then as [`Oracle::step_inputs`].
    pub fn step_named(&mut self, bindings: &[(&str, &[f32])]) -> Result<f32, OracleError> {
        let (inputs, target) = self.resolve(bindings)?;
        self.step_inputs(&inputs, target)
    }

    /// The model's inputs in order and the target, from named bindings.
    fn resolve<'a>(
        &self,
        bindings: &[(&str, &'a [f32])],
    ) -> Result<(Vec<&'a [f32]>, &'a [f32]), OracleError> {
        let job = self.job;
        let names: Vec<&str> = job
            .input_specs
            .iter()
            .map(|s| s.name.as_str())
            .chain([job.target_name.as_str()])
            .collect();
        let mut found: Vec<Option<&'a [f32]>> = vec![None; names.len()];
        for (name, values) in bindings {
            match names.iter().position(|n| n == name) {
                Some(i) if found[i].is_none() => found[i] = Some(values),
                _ => {
                    return Err(OracleError::UnknownInput {
                        name: name.to_string(),
                        names: names.join(", "),
                    })
                }
            }
        }
        let mut values = Vec::with_capacity(found.len());
        for (v, n) in found.into_iter().zip(&names) {
            values.push(v.ok_or_else(|| OracleError::MissingInput(n.to_string()))?);
        }
        let target = values.pop().unwrap_or_default();
        Ok((values, target))
    }

    /// The loss of a batch in training mode and its gradient with respect to every trained
    /// parameter, named: the bridge from a recorded run to a parameter store
    /// ([`Parameters::step`]). Changes nothing.
    ///
    /// # Shapes
    /// `inputs` in the job's input order, each as [`TrainingJob::input_specs`] gives it;
    /// `target` as the job's target. Each gradient has its parameter's shape.
    ///
    /// # Errors
    /// Shape errors.
    ///
    /// # Example
    /// ```
    /// use tapeplan_planner::exec::oracle::{Oracle, Parameters};
    /// use tapeplan_planner::model::{Activation, Loss, Mlp, TrainingJob};
    /// use tapeplan_planner::model::optim::Optimizer;
    ///
    /// let mlp = Mlp { sizes: vec![2, 3, 1], activation: Activation::Tanh };
    /// let job = TrainingJob::for_model(&mlp)
    ///     .loss(Loss::MeanSquaredError)
    ///     .batch(2)
    ///     .build()
    ///     .unwrap();
    /// let oracle = Oracle::with_initial_parameters(&job).unwrap();
    /// let (loss, grads) = oracle.gradients(&[&[1.0, 2.0, 3.0, 4.0]], &[0.5, -0.5]).unwrap();
    /// assert!(loss.is_finite());
    /// assert_eq!(grads[0].0, "w1");
    /// // A parameter store of the same tensors takes the step.
    /// let mut store = Parameters::new(Optimizer::sgd(0.1), oracle.named_parameters()).unwrap();
    /// store.step(&grads).unwrap();
    /// ```
    pub fn gradients(
        &self,
        inputs: &[&[f32]],
        target: &[f32],
    ) -> Result<(f32, Vec<(String, Tensor)>), OracleError> {
        let job = self.job;
        let (_, loss, grads_by_leaf) = self.backward(inputs, target)?;
        let mut grads_by_leaf = grads_by_leaf.into_iter();
        let mut grads = Vec::new();
        for (spec, t) in job.parameters.iter().zip(&job.trainable) {
            if *t {
                let g = grads_by_leaf
                    .next()
                    .flatten()
                    .unwrap_or_else(|| Tensor::zeros(spec.shape));
                grads.push((spec.name.clone(), g));
            }
        }
        Ok((loss, grads))
    }

    /// The model's persistent tensors by name (parameters and buffers), as they stand.
    pub fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.job
            .parameters
            .iter()
            .zip(&self.params)
            .map(|(s, t)| (s.name.clone(), t.clone()))
            .collect()
    }

    /// The training loss of a batch and its gradient with respect to each trained leaf (`None`
    /// where the scan never reached it), and the run, for more values of the same step.
    fn backward(
        &self,
        inputs: &[&[f32]],
        target: &[f32],
    ) -> Result<(Run<'j>, f32, Vec<Option<Tensor>>), OracleError> {
        let job = self.job;
        let mut run = self.run_with(&self.leaves(inputs, Some(target))?)?;
        let trained = self.trained_leaves();
        let adjoints = run.backward(job.loss_node, Tensor::scalar(1.0), &trained)?;
        let loss = run
            .value(job.loss_node)
            .map(|t| t.data[0])
            .unwrap_or(f32::NAN);
        let grads = trained.iter().map(|p| adjoints.get(*p).cloned()).collect();
        Ok((run, loss, grads))
    }

    fn trained_leaves(&self) -> Vec<NodeId> {
        let job = self.job;
        job.params
            .iter()
            .zip(&job.trainable)
            .filter(|(_, t)| **t)
            .map(|(p, _)| *p)
            .collect()
    }

    /// One training step on a batch: answers the loss and updates the trained parameters, the
    /// buffers the training forward updates, and the state. When the job is guarded and the
    /// loss or an update is not finite, nothing is updated (as the runtime's commit refuses) and
    /// the loss is still answered.
    ///
    /// # Shapes
    /// `inputs` in the job's input order ([`TrainingJob::input_specs`]); `target`: `[batch]`
    /// labels or the output's shape.
    ///
    /// # Errors
    /// Shape errors.
    pub fn step_inputs(&mut self, inputs: &[&[f32]], target: &[f32]) -> Result<f32, OracleError> {
        let job = self.job;
        let (mut run, loss, grads) = self.backward(inputs, target)?;
        let mut buffers = Vec::with_capacity(job.buffer_updates.len());
        for (i, node) in &job.buffer_updates {
            run.forward_until(*node)?;
            buffers.push((*i, run.value(*node).cloned()));
        }
        let trained_values: Vec<Tensor> = self
            .params
            .iter()
            .zip(&job.trainable)
            .filter(|(_, t)| **t)
            .map(|(p, _)| p.clone())
            .collect();
        let k = job.optimizer_state;
        let mut compute = Compute::with_profiles(job.math, job.arith);
        let (new_params, mut new_state) =
            job.optimizer
                .step(&mut compute, &trained_values, &grads, &self.state[..k])?;
        new_state.extend(advance_model_state(&mut compute, &self.state[k..])?);
        let finite = |v: &Option<Tensor>| {
            v.as_ref()
                .is_none_or(|t| t.data.iter().all(|x| x.is_finite()))
        };
        if job.guarded
            && !(loss.is_finite()
                && new_params.iter().all(finite)
                && new_state.iter().all(finite)
                && buffers.iter().all(|(_, b)| finite(b)))
        {
            return Ok(loss);
        }
        let trained_slots = self
            .params
            .iter_mut()
            .zip(&job.trainable)
            .filter(|(_, t)| **t)
            .map(|(p, _)| p);
        for (p, n) in trained_slots.zip(new_params) {
            if let Some(n) = n {
                *p = n;
            }
        }
        for (i, b) in buffers {
            if let (Some(slot), Some(b)) = (self.params.get_mut(i), b) {
                *slot = b;
            }
        }
        for (p, n) in self.state.iter_mut().zip(new_state) {
            if let Some(n) = n {
                *p = n;
            }
        }
        Ok(loss)
    }

    /// The logits of a batch of a single-input model, `[batch, …]`: [`Oracle::forward`] with
    /// `&[x]`.
    ///
    /// # Errors
    /// Shape errors.
    pub fn logits(&self, x: &[f32]) -> Result<Vec<f32>, TapeError> {
        self.forward(&[x]).map_err(|e| e.into_tape(self.job))
    }

    /// The `forward` entry: the model's output in inference mode for a batch.
    ///
    /// # Shapes
    /// `inputs` as [`TrainingJob::input_specs`]; answers the output, `[batch, …]` row-major.
    ///
    /// # Errors
    /// Shape errors.
    pub fn forward(&self, inputs: &[&[f32]]) -> Result<Vec<f32>, OracleError> {
        let job = self.job;
        let mut run = self.run_with(&self.leaves(inputs, None)?)?;
        run.forward_until(job.output)?;
        Ok(run
            .value(job.output)
            .map(|t| t.data.clone())
            .unwrap_or_default())
    }

    /// The `forward_1` entry: the model's output in inference mode for one sample.
    ///
    /// # Shapes
    /// `inputs` as the model's inputs at batch 1; answers `[1, …]` row-major.
    ///
    /// # Errors
    /// [`OracleError::MissingEntry`] when the job has no `forward_1` entry; input and shape
    /// errors.
    pub fn forward_1(&self, inputs: &[&[f32]]) -> Result<Vec<f32>, OracleError> {
        let job = self.job;
        let Some(f1) = &job.forward_1 else {
            return Err(OracleError::MissingEntry(crate::model::ENTRY_FORWARD_1));
        };
        let specs_1: Vec<InputSpec> = f1
            .inputs
            .iter()
            .zip(&job.input_specs)
            .map(|(n, s)| {
                Ok(InputSpec {
                    name: s.name.clone(),
                    shape: job.tape.shape(*n)?,
                })
            })
            .collect::<Result<_, TapeError>>()?;
        check_inputs(job, &specs_1, inputs)?;
        let zeros: Vec<Vec<f32>> = job
            .input_specs
            .iter()
            .map(|s| vec![0.0; s.shape.elems()])
            .collect();
        let zero_refs: Vec<&[f32]> = zeros.iter().map(Vec::as_slice).collect();
        let mut leaves = self.leaves(&zero_refs, None)?;
        for (n, v) in f1.inputs.iter().zip(inputs) {
            match leaves.iter_mut().find(|(l, _)| l == n) {
                Some(slot) => slot.1 = Some(v),
                None => leaves.push((*n, Some(v))),
            }
        }
        let mut run = self.run_with(&leaves)?;
        run.forward_until(f1.output)?;
        Ok(run
            .value(f1.output)
            .map(|t| t.data.clone())
            .unwrap_or_default())
    }

    /// The `eval_loss` entry: the inference-mode loss of a batch; nothing is updated.
    ///
    /// # Errors
    /// [`OracleError::MissingEntry`] when the job has no `eval_loss` entry; input and shape
    /// errors.
    pub fn eval_loss(&self, inputs: &[&[f32]], target: &[f32]) -> Result<f32, OracleError> {
        let job = self.job;
        let Some(node) = job.eval_loss else {
            return Err(OracleError::MissingEntry(crate::model::ENTRY_EVAL_LOSS));
        };
        let mut run = self.run_with(&self.leaves(inputs, Some(target))?)?;
        run.forward_until(node)?;
        Ok(run.value(node).map(|t| t.data[0]).unwrap_or(f32::NAN))
    }
}

/// An input leaf and its values (`None`: zeros).
type Leaf<'a> = (NodeId, Option<&'a [f32]>);

/// Checks the number and lengths of a model's inputs.
fn check_inputs(
    job: &TrainingJob,
    specs: &[InputSpec],
    inputs: &[&[f32]],
) -> Result<(), OracleError> {
    if inputs.len() != specs.len() || specs.len() != job.inputs.len() {
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        return Err(OracleError::Inputs {
            expected: specs.len(),
            names: names.join(", "),
            found: inputs.len(),
        });
    }
    for (s, v) in specs.iter().zip(inputs) {
        if v.len() != s.shape.elems() {
            return Err(OracleError::InputLength {
                name: s.name.clone(),
                expected: s.shape,
                found: v.len(),
            });
        }
    }
    Ok(())
}

/// A parameter store and its optimizer: named tensors, the optimizer's state, and
/// [`Parameters::step`], which applies named gradients (from [`Oracle::gradients`], or any
/// other source) with the optimizer's recorded-spec update body, computed. The same body the
/// plan records, so a store stepped with the oracle's gradients holds the bits a `train_step`
/// commits.
#[derive(Clone, Debug)]
pub struct Parameters {
    optimizer: Optimizer,
    math: MathProfile,
    /// The tensors, by name, in order.
    pub tensors: Vec<(String, Tensor)>,
    /// The optimizer's state (in [`Optimizer::state`] order over `tensors`).
    pub state: Vec<Tensor>,
}

impl Parameters {
    /// A store of `tensors` with `optimizer`'s initial state (`precise` math profile).
    ///
    /// # Errors
    /// [`TapeError::ValueShape`] when a tensor's data does not fill its shape.
    pub fn new(
        optimizer: Optimizer,
        tensors: Vec<(String, Tensor)>,
    ) -> Result<Parameters, TapeError> {
        Parameters::with_math(optimizer, tensors, MathProfile::Precise)
    }

    /// As [`Parameters::new`], computing under `math` (a plan's profile).
    ///
    /// # Errors
    /// As [`Parameters::new`].
    pub fn with_math(
        optimizer: Optimizer,
        tensors: Vec<(String, Tensor)>,
        math: MathProfile,
    ) -> Result<Parameters, TapeError> {
        for (_, t) in &tensors {
            Tensor::new(t.shape, t.data.clone())?;
        }
        let shapes: Vec<(String, Shape)> =
            tensors.iter().map(|(n, t)| (n.clone(), t.shape)).collect();
        let state = optimizer
            .state(&shapes)
            .into_iter()
            .map(|s| Tensor {
                shape: s.shape,
                data: vec![s.init; s.shape.elems()],
            })
            .collect();
        Ok(Parameters {
            optimizer,
            math,
            tensors,
            state,
        })
    }

    /// The tensor named `name`.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// One optimizer step: every tensor named in `grads` is updated with its gradient, the
    /// others (and their state) keep their values; the optimizer's shared state (Adam's running
    /// powers, the step counter) advances.
    ///
    /// # Shapes
    /// Each gradient has its tensor's shape.
    ///
    /// # Errors
    /// [`OracleError::UnknownParameter`] for a gradient whose name the store does not hold,
    /// [`OracleError::GradientShape`] for a gradient of the wrong shape; nothing is updated
    /// then.
    pub fn step(&mut self, grads: &[(String, Tensor)]) -> Result<(), OracleError> {
        let mut by_param: Vec<Option<Tensor>> = vec![None; self.tensors.len()];
        for (name, g) in grads {
            let Some(i) = self.tensors.iter().position(|(n, _)| n == name) else {
                return Err(OracleError::UnknownParameter(name.clone()));
            };
            let expected = self.tensors[i].1.shape;
            if g.shape != expected || g.data.len() != expected.elems() {
                return Err(OracleError::GradientShape {
                    name: name.clone(),
                    expected,
                    found: g.shape,
                });
            }
            by_param[i] = Some(g.clone());
        }
        let values: Vec<Tensor> = self.tensors.iter().map(|(_, t)| t.clone()).collect();
        let mut compute = Compute::with_math(self.math);
        let (new_params, new_state) =
            self.optimizer
                .step(&mut compute, &values, &by_param, &self.state)?;
        for ((_, t), n) in self.tensors.iter_mut().zip(new_params) {
            if let Some(n) = n {
                *t = n;
            }
        }
        for (s, n) in self.state.iter_mut().zip(new_state) {
            if let Some(n) = n {
                *s = n;
            }
        }
        Ok(())
    }
}

/// The oracle's run of a [`RunConfig`]: what a correct device reports.
pub struct OracleRun<'j> {
    /// Every step's loss, index `i` for step `i + 1`.
    pub losses: Vec<f32>,
    /// Every epoch's mean loss as a device computes it: the `f32` sum of its steps' losses in
    /// order, divided by its step count as `f32`.
    pub epoch_means: Vec<f32>,
    /// Every step's state digest, index `i` after step `i + 1`: the
    /// [`digest_f32`](crate::protocol::digest_f32) of the parameters, concatenated in the job's
    /// order (a transcript's `state` lines).
    pub states: Vec<u64>,
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
    // Not reserved up front: a run description may claim 2^32 steps (32 GiB of digests).
    let mut states = Vec::new();
    let (losses, epoch_means) = cfg.each_step(train, |x, labels| {
        let loss = oracle.step(x, labels)?;
        let mut h = crate::protocol::Fnv1a64::new();
        for p in &oracle.params {
            h.f32s(&p.data);
        }
        states.push(h.finish());
        Ok::<f32, TapeError>(loss)
    })?;
    Ok(OracleRun {
        losses,
        epoch_means,
        states,
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
