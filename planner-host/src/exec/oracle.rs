//! The training job as one tape, and the host oracle that checks the runtime.
//!
//! [`TrainingJob::build`] records the model's loss, its gradient (recorded reverse mode) and the
//! optimizer update as one tape, and plans two entries over it: `forward` (inference: logits) and
//! `train_step` (loss, and every parameter updated in place). [`Oracle`] trains the same model
//! without the plan: the tape interpreter ([`Run`]) computes the loss, the engine reverse scan
//! ([`Run::backward`]) the gradient, and the same update body computes the new parameters.

use tapeplan_core::{
    Compute, MathProfile, NodeId, Recordable, Run, Shape, Tape, TapeError, Tensor,
};

use crate::model::optim::{Optimizer, StateSpec};
use crate::model::{self, Loss, Mlp};
use crate::plan::rewrite::{self as passes, Passes, RewriteStats};
use crate::plan::{self as planner, EntrySpec, Plan, PlanError, PlanOptions, Root};

/// A model, its loss and optimizer, recorded and planned.
#[derive(Clone, Debug)]
pub struct TrainingJob {
    /// The model.
    pub mlp: Mlp,
    /// The loss.
    pub loss: Loss,
    /// The optimizer.
    pub optimizer: Optimizer,
    /// The persistent state: the optimizer's (in [`Optimizer::state`] order), then the
    /// model's (dropout's generator key and counter).
    pub state_specs: Vec<StateSpec>,
    /// How many of `state_specs` are the optimizer's.
    pub optimizer_state: usize,
    /// The state leaves (persistent, names with a `.`).
    pub state: Vec<NodeId>,
    /// Whether `train_step` commits its updates only when the loss and every update are finite.
    pub guarded: bool,
    /// The math profile of the plan and of the oracle's kernels.
    pub math: MathProfile,
    /// What the bit-preserving rewrites did before planning (the plan is made from the rewritten
    /// tape; `tape` stays as recorded, for the oracle and listings).
    pub rewrite_stats: RewriteStats,
    /// The batch size of both entries.
    pub batch: usize,
    /// The tape: forward, recorded gradient, recorded update.
    pub tape: Tape,
    /// The input leaves.
    pub inputs: model::TrainInputs,
    /// The parameter leaves, `w1, b1, w2, b2, …`.
    pub params: Vec<NodeId>,
    /// The logits node.
    pub logits: NodeId,
    /// The loss node.
    pub loss_node: NodeId,
    /// The index of the first node of the recorded gradient.
    pub gradient_start: usize,
    /// The index of the first node of the recorded update.
    pub update_start: usize,
    /// The plan.
    pub plan: Plan,
}

impl TrainingJob {
    /// Records and plans a training job whose `train_step` updates the parameters in place
    /// (no non-finite guard: the smallest arena).
    ///
    /// # Errors
    /// [`PlanError`] from recording or planning.
    pub fn build(
        mlp: Mlp,
        loss: Loss,
        optimizer: impl Into<Optimizer>,
        batch: usize,
    ) -> Result<TrainingJob, PlanError> {
        TrainingJob::build_with(mlp, loss, optimizer.into(), batch, JobOptions::default())
    }

    /// Records and plans a training job with [`JobOptions`].
    ///
    /// Entries: `forward` (logits, inference: no dropout), `train_step` (loss; every parameter and
    /// piece of state updated), and, when there is state (an optimizer's, dropout's generator),
    /// `init` (writes the state's initial values; run it once).
    ///
    /// # Errors
    /// [`PlanError`] from recording or planning.
    pub fn build_with(
        mlp: Mlp,
        loss: Loss,
        optimizer: Optimizer,
        batch: usize,
        options: JobOptions,
    ) -> Result<TrainingJob, PlanError> {
        let guarded = options.guarded;
        let math = options.math;
        mlp.check(batch)
            .map_err(|e| TapeError::Op(tapeplan_core::OpError::Shape(e)))?;
        let mut tape = Tape::new();
        let inputs = model::record_inputs(&mut tape, &mlp, loss, batch);
        let params = mlp.record_parameters(&mut tape);
        let logits = mlp.logits(&mut tape.trace(), &inputs.x, &params)?;
        let mut state_specs = optimizer.state(&mlp.parameter_shapes());
        let optimizer_state = state_specs.len();
        if options.dropout > 0.0 {
            state_specs.push(StateSpec {
                name: "rng.key".into(),
                shape: Shape::SCALAR,
                init: (options.seed % (1 << 24)) as f32,
            });
            state_specs.push(StateSpec {
                name: "rng.counter".into(),
                shape: Shape::SCALAR,
                init: 0.0,
            });
        }
        let state: Vec<NodeId> = state_specs
            .iter()
            .map(|s| tape.parameter(&s.name, s.shape))
            .collect();
        let loss_node = {
            let mut t = tape.trace();
            let train_logits = if options.dropout > 0.0 {
                let d = model::Dropout {
                    p: options.dropout,
                    key: state[optimizer_state],
                    counter: state[optimizer_state + 1],
                };
                mlp.logits_with_dropout(&mut t, &inputs.x, &params, &d)?
            } else {
                logits
            };
            model::loss_of(&mut t, loss, &train_logits, &inputs.target)?
        };
        let gradient_start = tape.len();
        let adjoints = tape.differentiate(loss_node, &params)?;
        let grads: Vec<Option<NodeId>> = params.iter().map(|p| adjoints.get(*p).copied()).collect();
        let update_start = tape.len();
        let (new_params, mut new_state) = optimizer.step(
            &mut tape.trace(),
            &params,
            &grads,
            &state[..optimizer_state],
        )?;
        new_state.extend(advance_model_state(
            &mut tape.trace(),
            &state[optimizer_state..],
        )?);
        let mut train_roots = vec![Root::Output {
            name: "loss".into(),
            node: loss_node,
        }];
        for (p, v) in params
            .iter()
            .chain(&state)
            .zip(new_params.iter().chain(&new_state))
        {
            if let Some(v) = v {
                train_roots.push(Root::Update {
                    param: *p,
                    value: *v,
                });
            }
        }
        let mut init_roots = Vec::new();
        for (leaf, spec) in state.iter().zip(&state_specs) {
            let value = tape.trace().fill(spec.init, spec.shape)?;
            init_roots.push(Root::Update {
                param: *leaf,
                value,
            });
        }
        let mut entries = vec![
            EntrySpec {
                name: "forward".into(),
                roots: vec![Root::Output {
                    name: "logits".into(),
                    node: logits,
                }],
                guarded: false,
            },
            EntrySpec {
                name: "train_step".into(),
                roots: train_roots,
                guarded,
            },
        ];
        if !init_roots.is_empty() {
            entries.push(EntrySpec {
                name: "init".into(),
                roots: init_roots,
                guarded: false,
            });
        }
        let (rewritten, map, rewrite_stats) = passes::rewrite(
            &tape,
            options.passes,
            math,
            &passes::update_values(&entries),
        )?;
        let mut plan = planner::plan_with(
            &rewritten,
            &passes::remap_entries(&entries, &map),
            options.planning,
        )?;
        plan.math = math;
        Ok(TrainingJob {
            mlp,
            loss,
            optimizer,
            optimizer_state,
            state_specs,
            state,
            guarded,
            math,
            rewrite_stats,
            batch,
            tape,
            inputs,
            params,
            logits,
            loss_node,
            gradient_start,
            update_start,
            plan,
        })
    }

    /// The parameters' names and shapes, in order.
    pub fn parameter_shapes(&self) -> Vec<(String, Shape)> {
        self.mlp.parameter_shapes()
    }
}

/// What a training job is built with.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct JobOptions {
    /// With `guarded`, `train_step` computes the new parameters and state into scratch and the
    /// runtime commits them only when the loss and every update are finite (a step that diverges
    /// changes nothing); without, updates are written in place as they are computed.
    pub guarded: bool,
    /// Dropout probability after every hidden activation in `train_step` (0: none). The
    /// `forward` entry never drops (inference mode).
    pub dropout: f32,
    /// The dropout generator's key (taken modulo 2^24, stored exactly as an `f32`).
    pub seed: u64,
    /// The bit-preserving rewrites applied before planning (all by default).
    pub passes: Passes,
    /// How to plan (fusion on by default).
    pub planning: PlanOptions,
    /// The math profile (`precise` by default): recorded in the plan, and followed by the
    /// oracle, the planner's constant folding and every runtime.
    pub math: MathProfile,
}

/// Advances the model's own state by one training step: dropout's counter `c ← c + 1`. Written
/// against [`Recordable`] so the plan and the oracle share it.
///
/// # Errors
/// The payload's.
pub fn advance_model_state<R: Recordable>(
    r: &mut R,
    state: &[R::Value],
) -> Result<Vec<Option<R::Value>>, R::Error> {
    match state {
        [_key, counter] => {
            let one = r.fill(1.0, Shape::SCALAR)?;
            Ok(vec![None, Some(r.add(counter, &one)?)])
        }
        _ => Ok(vec![None; state.len()]),
    }
}

/// The host oracle: trains a [`TrainingJob`]'s model with the tape interpreter, the engine
/// reverse scan and the same update body, holding its own parameters.
pub struct Oracle<'j> {
    job: &'j TrainingJob,
    /// The current parameters, in the job's order.
    pub params: Vec<Tensor>,
    /// The current optimizer state, in [`Optimizer::state`] order.
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
