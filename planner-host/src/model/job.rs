//! The job description: a model, its loss and optimizer recorded as one tape (forward, recorded
//! gradient, recorded update) and planned.
//!
//! [`TrainingJob::build`] records the model's loss, its gradient (recorded reverse mode) and the
//! optimizer update as one tape, and plans two entries over it: `forward` (inference: logits) and
//! `train_step` (loss, and every parameter updated in place). The
//! [`Oracle`](crate::exec::oracle::Oracle) trains the same job without its schedule.

use tapeplan_core::{MathProfile, NodeId, Recordable, Shape, Tape, TapeError};

use crate::model::mlp::{self as model, Loss, Mlp};
use crate::model::optim::{Optimizer, StateSpec};
use crate::plan::rewrite::{self as passes, Passes, RewriteStats};
use crate::plan::{self as planner, EntrySpec, PlanOptions, PlanningError, Root, Schedule};
use crate::protocol::{ENTRY_FORWARD, ENTRY_INIT, ENTRY_TRAIN_STEP, OUTPUT_LOGITS, OUTPUT_LOSS};

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
    /// The math profile of the schedule and of the oracle's kernels
    /// ([`JobOptions::planning`]'s).
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
    /// The planner's schedule of the entries, over the rewritten tape; its bytes
    /// ([`Schedule::to_bytes`]) are the plan a runtime runs.
    pub schedule: Schedule,
}

impl TrainingJob {
    /// Records and plans a training job whose `train_step` updates the parameters in place
    /// (no non-finite guard: the smallest arena).
    ///
    /// # Errors
    /// [`PlanningError`] from recording or planning.
    pub fn build(
        mlp: Mlp,
        loss: Loss,
        optimizer: impl Into<Optimizer>,
        batch: usize,
    ) -> Result<TrainingJob, PlanningError> {
        TrainingJob::build_with(mlp, loss, optimizer.into(), batch, JobOptions::default())
    }

    /// Records and plans a training job with [`JobOptions`].
    ///
    /// Entries: `forward` (logits, inference: no dropout), `train_step` (loss; every parameter and
    /// piece of state updated), and, when there is state (an optimizer's, dropout's generator),
    /// `init` (writes the state's initial values; run it once).
    ///
    /// # Errors
    /// [`PlanningError`] from recording or planning.
    pub fn build_with(
        mlp: Mlp,
        loss: Loss,
        optimizer: Optimizer,
        batch: usize,
        options: JobOptions,
    ) -> Result<TrainingJob, PlanningError> {
        let guarded = options.guarded;
        let math = options.planning.math;
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
            name: OUTPUT_LOSS.into(),
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
                name: ENTRY_FORWARD.into(),
                roots: vec![Root::Output {
                    name: OUTPUT_LOGITS.into(),
                    node: logits,
                }],
                guarded: false,
            },
            EntrySpec {
                name: ENTRY_TRAIN_STEP.into(),
                roots: train_roots,
                guarded,
            },
        ];
        if !init_roots.is_empty() {
            entries.push(EntrySpec {
                name: ENTRY_INIT.into(),
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
        let schedule = planner::plan_with(
            &rewritten,
            &passes::remap_entries(&entries, &map),
            options.planning,
        )?;
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
            schedule,
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
    /// How to plan: fusion (on by default) and the math profile (`precise` by default), which
    /// the schedule records and the oracle, the constant folding and every runtime follow.
    pub planning: PlanOptions,
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
