//! The job description: a model, its loss and optimizer recorded as one tape (forward, recorded
//! gradient, recorded update) and planned.
//!
//! Any [`Model`] (a layer stack, an ONNX graph, a hand-recorded tape, the `--layers` MLP)
//! becomes a [`TrainingJob`] through [`TrainingJob::for_model`]: the job records the model's
//! inputs and persistent tensors as leaves, its forward computation, the loss
//! ([`Loss`] or a caller's [`LossRecorder`]), the loss's gradient with respect to the trainable
//! subset (recorded reverse mode), and the optimizer's update, then plans the entries:
//!
//! | entry | mode | bindings |
//! |---|---|---|
//! | `init` | | writes the optimizer's state and dropout's generator their initial values (present when there is such state) |
//! | `forward` | eval | the model's inputs at the plan's batch → `logits` (the model's output) |
//! | `train_step` | train | the model's inputs and the target (`labels` or `y`) → `loss`; updates the trainable parameters, the buffers a training forward updates (batch normalization's running statistics), the optimizer state and the generator's counter |
//! | `forward_1` | eval | the model's inputs at batch 1, under the same names (`x`) → `logits`: inference on one sample over the same parameters |
//! | `eval_loss` | eval | as `train_step`'s inputs → `loss`, no update |
//!
//! `forward_1` and `eval_loss` are on by default ([`JobOptions::eval_entries`]), except for
//! the `--layers` MLP built through [`TrainingJob::build`] / [`TrainingJob::build_with`],
//! whose plan bytes stay what they always were unless asked.
//!
//! The [`Oracle`](crate::exec::oracle::Oracle) trains the same job without its schedule.

use tapeplan_core::{ArithProfile, MathProfile, NodeId, Recordable, Shape, Tape, TapeError, Trace};

use crate::model::graph::RngLeaves;
use crate::model::graph::{ForwardCx, InputSpec, Mode, Model, ModelError, ParamKind, ParamSpec};
use crate::model::mlp::{self as model, Loss, Mlp};
use crate::model::optim::{Optimizer, StateSpec};
use crate::plan::rewrite::{self as passes, Passes, RewriteStats};
use crate::plan::{self as planner, EntrySpec, PlanOptions, PlanningError, Root, Schedule};
use crate::protocol::{
    ENTRY_FORWARD, ENTRY_INIT, ENTRY_TRAIN_STEP, INPUT_Y, OUTPUT_LOGITS, OUTPUT_LOSS,
};

/// The entry that runs the model in inference mode at batch 1 (its inputs keep their names).
pub const ENTRY_FORWARD_1: &str = "forward_1";
/// The entry that computes the inference-mode loss of a batch without updating anything.
pub const ENTRY_EVAL_LOSS: &str = "eval_loss";

/// A scalar loss a caller records on the tape itself, for a loss that [`Loss`] does not name.
///
/// The job records the target as an input leaf named [`LossRecorder::target_name`] of shape
/// [`LossRecorder::target_shape`], then calls [`LossRecorder::record`] once for `train_step`
/// (over the training-mode output) and, when the training forward differs from the inference
/// one, once more for `eval_loss`. The oracle replays the recorded nodes, so a custom loss is
/// verified bit for bit like a built-in one.
///
/// # Example
/// A squared error summed (not averaged) over the elements:
/// ```
/// use tapeplan_core::{NodeId, Recordable, Shape, TapeError, Trace};
/// use tapeplan_planner::model::LossRecorder;
///
/// struct SumSquares;
/// impl LossRecorder for SumSquares {
///     fn record(&self, t: &mut Trace<'_>, output: NodeId, target: NodeId) -> Result<NodeId, TapeError> {
///         let d = t.sub(&output, &target)?;
///         let dd = t.mul(&d, &d)?;
///         t.sum_all(&dd)
///     }
/// }
/// ```
pub trait LossRecorder {
    /// The target input's name (`y` unless overridden).
    fn target_name(&self) -> &str {
        INPUT_Y
    }

    /// The target's shape for a model output of shape `output` (the output's shape unless
    /// overridden).
    ///
    /// # Errors
    /// [`ModelError::Invalid`] when the loss cannot take that output.
    fn target_shape(&self, output: Shape) -> Result<Shape, ModelError> {
        Ok(output)
    }

    /// Records the loss of `output` against `target`; answers a scalar node.
    ///
    /// # Errors
    /// The tape's (a shape rule refused an instruction).
    fn record(
        &self,
        t: &mut Trace<'_>,
        output: NodeId,
        target: NodeId,
    ) -> Result<NodeId, TapeError>;
}

impl LossRecorder for Loss {
    fn target_name(&self) -> &str {
        Loss::target_name(*self)
    }

    fn target_shape(&self, output: Shape) -> Result<Shape, ModelError> {
        Loss::target_shape(*self, output)
    }

    fn record(
        &self,
        t: &mut Trace<'_>,
        output: NodeId,
        target: NodeId,
    ) -> Result<NodeId, TapeError> {
        model::loss_of(t, *self, &output, &target)
    }
}

/// Why a training job could not be built.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The model could not describe or record itself.
    #[error("model: {0}")]
    Model(#[from] ModelError),
    /// Recording the loss, gradient or update, or planning, failed.
    #[error(transparent)]
    Planning(#[from] PlanningError),
    /// A trainable-subset pattern that matches no parameter, or a subset left empty.
    #[error("trainable subset: {0}")]
    Subset(String),
    /// A loss that is not a scalar, or a batch of 0.
    #[error("{0}")]
    Invalid(String),
}

impl From<TapeError> for JobError {
    fn from(e: TapeError) -> JobError {
        JobError::Planning(PlanningError::Tape(e))
    }
}

/// The `forward_1` entry's leaves: the model's inputs at batch 1 and its output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forward1 {
    /// The input leaves at batch 1, in [`Model::inputs`] order, named as the model's inputs.
    pub inputs: Vec<NodeId>,
    /// The output at batch 1.
    pub output: NodeId,
}

/// A model, its loss and optimizer, recorded and planned.
#[derive(Clone, Debug)]
pub struct TrainingJob {
    /// The model's persistent tensors (parameters and buffers) with their initial values, in
    /// [`Model::parameters`] order.
    pub parameters: Vec<ParamSpec>,
    /// The model's data inputs at the plan's batch.
    pub input_specs: Vec<InputSpec>,
    /// Per persistent tensor (same order as `parameters`): true when it is trained (a
    /// parameter of the trainable subset). Buffers and frozen parameters are false.
    pub trainable: Vec<bool>,
    /// The loss, or `None` for a caller's [`LossRecorder`].
    pub loss: Option<Loss>,
    /// The target input's name (`labels` or `y`, or a [`LossRecorder`]'s).
    pub target_name: String,
    /// The optimizer.
    pub optimizer: Optimizer,
    /// The persistent state: the optimizer's (in [`Optimizer::state`] order over the trainable
    /// parameters), then the model's (dropout's generator key and counter).
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
    /// The arithmetic profile of the schedule and of the oracle's matrix products
    /// ([`JobOptions::planning`]'s).
    pub arith: ArithProfile,
    /// What the bit-preserving rewrites did before planning (the plan is made from the rewritten
    /// tape; `tape` stays as recorded, for the oracle and listings).
    pub rewrite_stats: RewriteStats,
    /// The batch size of every entry but `forward_1`.
    pub batch: usize,
    /// The tape: forward, recorded gradient, recorded update.
    pub tape: Tape,
    /// The model's input leaves at the plan's batch, in [`Model::inputs`] order.
    pub inputs: Vec<NodeId>,
    /// The target input leaf.
    pub target: NodeId,
    /// The persistent leaves of the model (parameters and buffers), in `parameters` order.
    pub params: Vec<NodeId>,
    /// The model's output in inference mode (the `forward` entry's `logits`).
    pub output: NodeId,
    /// The training loss node (`train_step`'s `loss`).
    pub loss_node: NodeId,
    /// The inference-mode loss (`eval_loss`'s `loss`; the training loss itself when the model's
    /// two modes coincide), when the job has the entry.
    pub eval_loss: Option<NodeId>,
    /// The `forward_1` entry's leaves, when the job has it.
    pub forward_1: Option<Forward1>,
    /// The buffers' new values after a training step: (index into `parameters`, value).
    pub buffer_updates: Vec<(usize, NodeId)>,
    /// The index of the first node of the recorded gradient.
    pub gradient_start: usize,
    /// The index of the first node of the recorded update.
    pub update_start: usize,
    /// The arena of the same job with every parameter trainable, in bytes, when the trainable
    /// subset is partial (`None` for a full update).
    pub full_update_arena_bytes: Option<usize>,
    /// What rematerialization did, when the job was planned under an arena budget
    /// ([`JobOptions::arena_budget_bytes`]).
    pub remat: Option<crate::plan::remat::RematReport>,
    /// The planner's schedule of the entries, over the rewritten tape; its bytes
    /// ([`Schedule::to_bytes`]) are the plan a runtime runs.
    pub schedule: Schedule,
}

/// What a training job is built with.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct JobOptions {
    /// With `guarded`, `train_step` computes the new parameters and state into scratch and the
    /// runtime commits them only when the loss and every update are finite (a step that diverges
    /// changes nothing); without, updates are written in place as they are computed.
    pub guarded: bool,
    /// For [`TrainingJob::build`] / [`TrainingJob::build_with`] (the `--layers` MLP): the
    /// dropout probability after every hidden activation in `train_step` (0: none). The
    /// `forward` entry never drops (inference mode). A general [`Model`] says itself whether it
    /// draws ([`Model::uses_rng`]); this field is not read for it.
    pub dropout: f32,
    /// The dropout generator's key (taken modulo 2^24, stored exactly as an `f32`).
    pub seed: u64,
    /// The bit-preserving rewrites applied before planning (all by default).
    pub passes: Passes,
    /// How to plan: fusion (on by default) and the math profile (`precise` by default), which
    /// the schedule records and the oracle, the constant folding and every runtime follow.
    pub planning: PlanOptions,
    /// Whether the plan has the entries `forward_1` and `eval_loss`. `None`: yes for
    /// [`TrainingJob::for_model`], no for [`TrainingJob::build`] / [`TrainingJob::build_with`]
    /// (the `--layers` MLP, whose plan bytes the firmware and the browser pin).
    pub eval_entries: Option<bool>,
    /// An arena budget, in bytes: when the plan's arena is larger, forward values are recomputed
    /// in the backward pass until it fits ([`crate::plan::remat::plan_within`]; the bits do not
    /// change). `None` (the default): no rematerialization.
    pub arena_budget_bytes: Option<usize>,
}

/// The loss a [`JobBuilder`] records.
#[derive(Clone, Copy)]
enum JobLoss<'m> {
    Builtin(Loss),
    Custom(&'m dyn LossRecorder),
}

impl JobLoss<'_> {
    fn recorder(&self) -> &dyn LossRecorder {
        match self {
            JobLoss::Builtin(l) => l,
            JobLoss::Custom(r) => *r,
        }
    }
}

/// Builds a [`TrainingJob`] from any [`Model`]: [`TrainingJob::for_model`], then the loss,
/// optimizer, batch, options and trainable subset, then [`JobBuilder::build`].
///
/// Defaults: [`Loss::SoftmaxCrossEntropy`], SGD with learning rate 0.01, batch 1,
/// [`JobOptions::default`], every parameter trainable.
///
/// # Example
/// ```
/// use tapeplan_planner::model::{Activation, Loss, Mlp, TrainingJob};
/// use tapeplan_planner::model::optim::Optimizer;
///
/// let mlp = Mlp { sizes: vec![4, 8, 8, 3], activation: Activation::Relu };
/// let job = TrainingJob::for_model(&mlp)
///     .loss(Loss::SoftmaxCrossEntropy)
///     .optimizer(Optimizer::adam(0.01))
///     .batch(16)
///     .frozen(["w1", "b1"])
///     .build()
///     .unwrap();
/// assert_eq!(job.trainable, [false, false, true, true, true, true]);
/// assert!(job.schedule.arena_elems * 4 < job.full_update_arena_bytes.unwrap());
/// ```
#[derive(Clone)]
pub struct JobBuilder<'m> {
    model: &'m dyn Model,
    loss: JobLoss<'m>,
    optimizer: Optimizer,
    batch: usize,
    options: JobOptions,
    trainable: Vec<String>,
    frozen: Vec<String>,
}

impl<'m> JobBuilder<'m> {
    /// The loss (the target input is `labels` `[batch]` for cross-entropy, `y` shaped as the
    /// output for the others).
    pub fn loss(mut self, loss: Loss) -> Self {
        self.loss = JobLoss::Builtin(loss);
        self
    }

    /// A loss the caller records ([`LossRecorder`]).
    pub fn custom_loss(mut self, loss: &'m dyn LossRecorder) -> Self {
        self.loss = JobLoss::Custom(loss);
        self
    }

    /// The optimizer.
    pub fn optimizer(mut self, optimizer: impl Into<Optimizer>) -> Self {
        self.optimizer = optimizer.into();
        self
    }

    /// The batch size of every entry but `forward_1`.
    pub fn batch(mut self, batch: usize) -> Self {
        self.batch = batch;
        self
    }

    /// Guard, generator seed, rewrites, planning options, optional entries.
    pub fn options(mut self, options: JobOptions) -> Self {
        self.options = options;
        self
    }

    /// Glob patterns over parameter names (`*`: any run of characters, `.` included; `?`: any
    /// one character) selecting the trainable parameters; none given: every parameter.
    pub fn trainable<S: Into<String>>(mut self, patterns: impl IntoIterator<Item = S>) -> Self {
        self.trainable.extend(patterns.into_iter().map(Into::into));
        self
    }

    /// Glob patterns over parameter names removed from the trainable set (applied after
    /// [`JobBuilder::trainable`]).
    pub fn frozen<S: Into<String>>(mut self, patterns: impl IntoIterator<Item = S>) -> Self {
        self.frozen.extend(patterns.into_iter().map(Into::into));
        self
    }

    /// Records and plans the job.
    ///
    /// A frozen parameter gets no gradient node and no update, and no optimizer state: the
    /// recorded gradient is that of the loss with respect to the trainable leaves only, and the
    /// reverse scan applies rules only to nodes that depend on one of them (its ancestor mask),
    /// so nothing is recorded for a frozen backbone's own weights. Buffers are never
    /// differentiated; a training forward may update them.
    ///
    /// # Errors
    /// [`JobError::Model`] when the model cannot describe or record itself,
    /// [`JobError::Subset`] for a pattern that matches no parameter (or an empty subset),
    /// [`JobError::Invalid`] for a batch of 0 or a loss that is not a scalar,
    /// [`JobError::Planning`] from recording or planning.
    pub fn build(&self) -> Result<TrainingJob, JobError> {
        let mut job = record_and_plan(self)?;
        if job
            .trainable
            .iter()
            .zip(&job.parameters)
            .any(|(t, p)| !t && p.kind == ParamKind::Parameter)
        {
            let full = JobBuilder {
                trainable: Vec::new(),
                frozen: Vec::new(),
                ..self.clone()
            };
            job.full_update_arena_bytes = Some(record_and_plan(&full)?.schedule.arena_elems * 4);
        }
        Ok(job)
    }
}

/// True when `name` matches the glob `pattern`: `*` matches any run of characters (`.`
/// included, so `features.*` matches `features.0.weight`), `?` any one character, every other
/// character itself.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // The classic backtracking matcher: remember the last `*` and where it started matching.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || (p[i] != '*' && p[i] == n[j])) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

/// The trainable flag of every persistent tensor: parameters matching a `trainable` pattern
/// (all when none is given) and no `frozen` pattern; buffers never.
///
/// # Errors
/// [`JobError::Subset`] for a pattern that matches no parameter, or when no parameter is left.
pub fn trainable_subset(
    specs: &[ParamSpec],
    trainable: &[String],
    frozen: &[String],
) -> Result<Vec<bool>, JobError> {
    let is_param = |s: &ParamSpec| s.kind == ParamKind::Parameter;
    for pat in trainable.iter().chain(frozen) {
        if !specs
            .iter()
            .any(|s| is_param(s) && glob_match(pat, &s.name))
        {
            let names: Vec<&str> = specs
                .iter()
                .filter(|s| is_param(s))
                .map(|s| s.name.as_str())
                .collect();
            return Err(JobError::Subset(format!(
                "pattern {pat:?} matches no parameter (the parameters: {})",
                names.join(", ")
            )));
        }
    }
    let flags: Vec<bool> = specs
        .iter()
        .map(|s| {
            is_param(s)
                && (trainable.is_empty() || trainable.iter().any(|p| glob_match(p, &s.name)))
                && !frozen.iter().any(|p| glob_match(p, &s.name))
        })
        .collect();
    if !flags.iter().any(|&t| t) {
        return Err(JobError::Subset(
            "no parameter is left trainable (trainable and frozen patterns exclude them all)"
                .into(),
        ));
    }
    Ok(flags)
}

/// Checks that the plan's names (inputs, the loss's target, parameters and buffers, optimizer
/// and generator state) are distinct: a model may name a tensor as the job names its own
/// (`opt.step`, `<name>.m`, `labels`), and a plan with one name twice is refused by every
/// runtime, so the job refuses it first.
fn distinct_names<'a>(names: impl Iterator<Item = &'a str>) -> Result<(), JobError> {
    let mut seen = std::collections::BTreeSet::new();
    for n in names {
        if !seen.insert(n) {
            return Err(JobError::Invalid(format!(
                "the name {n:?} is taken twice in the plan (the model's inputs, parameters and \
                 buffers, the loss's target and the optimizer's state must have distinct names): \
                 rename the model's tensor"
            )));
        }
    }
    Ok(())
}

/// Records the model's leaves, forward, loss, gradient and update, and plans the entries.
fn record_and_plan(b: &JobBuilder<'_>) -> Result<TrainingJob, JobError> {
    let (model, batch, options) = (b.model, b.batch, b.options);
    if batch == 0 {
        return Err(JobError::Invalid(
            "the batch size must be at least 1".into(),
        ));
    }
    let loss = b.loss.recorder();
    let guarded = options.guarded;
    let math = options.planning.math;
    let arith = options.planning.arith;
    let eval_entries = options.eval_entries.unwrap_or(true);
    let parameters = model.parameters()?;
    let input_specs = model.inputs(batch)?;
    for p in &parameters {
        if p.init.len() != p.shape.elems() {
            return Err(ModelError::Invalid(format!(
                "parameter {}: initial value of {} elements for shape {:?}",
                p.name,
                p.init.len(),
                p.shape
            ))
            .into());
        }
    }
    let trainable = trainable_subset(&parameters, &b.trainable, &b.frozen)?;
    let has_buffers = parameters.iter().any(|p| p.kind == ParamKind::Buffer);
    // Recordings on scratch tapes: the output's shape fixes the target's; and a model that
    // neither draws nor has buffers is checked to record the same nodes in both modes.
    let scratch = |mode: Mode| -> Result<(Tape, NodeId), JobError> {
        let mut t = Tape::new();
        let (inputs, params) = record_leaves(&mut t, &input_specs, &parameters);
        let cx = ForwardCx {
            mode,
            ..eval_cx(batch, &inputs, &params)
        };
        let out = model.record(&mut t, &cx)?.output;
        Ok((t, out))
    };
    let (eval_tape, eval_out) = scratch(Mode::Eval)?;
    let output_shape = eval_tape.shape(eval_out)?;
    // The training forward is recorded again when the modes can differ (a generator to draw
    // from, buffers to use and update, or simply other nodes); otherwise the inference forward
    // is the training one.
    let modes_differ = model.uses_rng() || has_buffers || {
        let (train_tape, train_out) = scratch(Mode::Train)?;
        train_tape.nodes() != eval_tape.nodes() || train_out.index() != eval_out.index()
    };
    let target_shape = loss.target_shape(output_shape)?;

    let mut tape = Tape::new();
    let inputs: Vec<NodeId> = input_specs
        .iter()
        .map(|s| tape.input(&s.name, s.shape))
        .collect();
    let target = tape.input(loss.target_name(), target_shape);
    let params: Vec<NodeId> = parameters
        .iter()
        .map(|s| tape.parameter(&s.name, s.shape))
        .collect();
    let output = model
        .record(&mut tape, &eval_cx(batch, &inputs, &params))?
        .output;

    let trained: Vec<(String, Shape)> = parameters
        .iter()
        .zip(&trainable)
        .filter(|(_, t)| **t)
        .map(|(s, _)| (s.name.clone(), s.shape))
        .collect();
    let trained_leaves: Vec<NodeId> = params
        .iter()
        .zip(&trainable)
        .filter(|(_, t)| **t)
        .map(|(p, _)| *p)
        .collect();
    let mut state_specs = b.optimizer.state(&trained);
    let optimizer_state = state_specs.len();
    if model.uses_rng() {
        state_specs.push(StateSpec {
            name: crate::model::names::RNG_KEY.into(),
            shape: Shape::SCALAR,
            init: (options.seed % (1 << 24)) as f32,
        });
        state_specs.push(StateSpec {
            name: crate::model::names::RNG_COUNTER.into(),
            shape: Shape::SCALAR,
            init: 0.0,
        });
    }
    if let Some(s) = state_specs
        .iter()
        .find(|s| tapeplan_core::format::encode_name(&s.name).is_none())
    {
        return Err(JobError::Invalid(format!(
            "the {} optimizer's state {:?} does not fit the plan format's names (1 to {} bytes, \
             no NUL): its parameter's name is not a plan name",
            b.optimizer.name(),
            s.name,
            tapeplan_core::format::NAME_BYTES
        )));
    }
    distinct_names(
        input_specs
            .iter()
            .map(|s| s.name.as_str())
            .chain([loss.target_name()])
            .chain(parameters.iter().map(|s| s.name.as_str()))
            .chain(state_specs.iter().map(|s| s.name.as_str())),
    )?;
    let state: Vec<NodeId> = state_specs
        .iter()
        .map(|s| tape.parameter(&s.name, s.shape))
        .collect();

    let (train_output, buffer_updates) = if modes_differ {
        let rng = model.uses_rng().then(|| RngLeaves {
            key: state[optimizer_state],
            counter: state[optimizer_state + 1],
        });
        let f = model.record(
            &mut tape,
            &ForwardCx {
                batch,
                mode: Mode::Train,
                inputs: &inputs,
                params: &params,
                rng,
            },
        )?;
        (f.output, f.buffer_updates)
    } else {
        (output, Vec::new())
    };
    for (i, _) in &buffer_updates {
        if parameters.get(*i).map(|p| p.kind) != Some(ParamKind::Buffer) {
            return Err(ModelError::Invalid(format!(
                "the training forward updates persistent tensor {i}, which is not a buffer"
            ))
            .into());
        }
    }
    let loss_node = loss.record(&mut tape.trace(), train_output, target)?;
    if tape.shape(loss_node)? != Shape::SCALAR {
        return Err(JobError::Invalid(format!(
            "the loss must be a scalar, it is {:?}",
            tape.shape(loss_node)?
        )));
    }

    let gradient_start = tape.len();
    let adjoints = tape.differentiate(loss_node, &trained_leaves)?;
    let grads: Vec<Option<NodeId>> = trained_leaves
        .iter()
        .map(|p| adjoints.get(*p).copied())
        .collect();
    let update_start = tape.len();
    let (new_params, mut new_state) = b.optimizer.step(
        &mut tape.trace(),
        &trained_leaves,
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
    for (p, v) in trained_leaves
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
    for (i, v) in &buffer_updates {
        train_roots.push(Root::Update {
            param: params[*i],
            value: *v,
        });
    }
    // Every model tensor stays in the plan, even one no entry reads or writes (an
    // evaluation-mode BatchNorm's `num_batches_tracked`): the plan's model tensors are then the
    // model's whole `state_dict`, which `tapeplan export` writes and `tapeplan import` takes.
    train_roots.extend(params.iter().map(|&param| Root::Keep { param }));
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
                node: output,
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
    let (mut forward_1, mut eval_loss) = (None, None);
    if eval_entries {
        let f1 = if batch == 1 {
            Forward1 {
                inputs: inputs.clone(),
                output,
            }
        } else {
            let one = model.inputs(1)?;
            let inputs_1: Vec<NodeId> = one.iter().map(|s| tape.input(&s.name, s.shape)).collect();
            let output_1 = model
                .record(&mut tape, &eval_cx(1, &inputs_1, &params))?
                .output;
            Forward1 {
                inputs: inputs_1,
                output: output_1,
            }
        };
        let el = if modes_differ {
            loss.record(&mut tape.trace(), output, target)?
        } else {
            loss_node
        };
        entries.push(EntrySpec {
            name: ENTRY_FORWARD_1.into(),
            roots: vec![Root::Output {
                name: OUTPUT_LOGITS.into(),
                node: f1.output,
            }],
            guarded: false,
        });
        entries.push(EntrySpec {
            name: ENTRY_EVAL_LOSS.into(),
            roots: vec![Root::Output {
                name: OUTPUT_LOSS.into(),
                node: el,
            }],
            guarded: false,
        });
        forward_1 = Some(f1);
        eval_loss = Some(el);
    }
    let (rewritten, map, rewrite_stats) = passes::rewrite(
        &tape,
        options.passes,
        math,
        arith,
        &passes::update_values(&entries),
    )?;
    let rewritten_entries = passes::remap_entries(&entries, &map);
    let (schedule, remat) = match options.arena_budget_bytes {
        None => (
            planner::plan_with(&rewritten, &rewritten_entries, options.planning)?,
            None,
        ),
        Some(budget_bytes) => {
            // The rewritten tape's first gradient node: every node replayed from the forward
            // pass has a smaller index (a rewrite only merges or folds, in order).
            let rewritten_gradient_start = map[..gradient_start]
                .iter()
                .map(|n| n.index() + 1)
                .max()
                .unwrap_or(0);
            let (s, r) = crate::plan::remat::plan_within(
                &rewritten,
                &rewritten_entries,
                options.planning,
                rewritten_gradient_start,
                budget_bytes,
            )?;
            (s, Some(r))
        }
    };
    Ok(TrainingJob {
        parameters,
        input_specs,
        trainable,
        loss: match b.loss {
            JobLoss::Builtin(l) => Some(l),
            JobLoss::Custom(_) => None,
        },
        target_name: loss.target_name().to_string(),
        optimizer: b.optimizer,
        state_specs,
        optimizer_state,
        state,
        guarded,
        math,
        arith,
        rewrite_stats,
        batch,
        tape,
        inputs,
        target,
        params,
        output,
        loss_node,
        eval_loss,
        forward_1,
        buffer_updates,
        gradient_start,
        update_start,
        full_update_arena_bytes: None,
        remat,
        schedule,
    })
}

/// The input and persistent leaves of a model, recorded in that order.
fn record_leaves(
    tape: &mut Tape,
    inputs: &[InputSpec],
    params: &[ParamSpec],
) -> (Vec<NodeId>, Vec<NodeId>) {
    let i = inputs
        .iter()
        .map(|s| tape.input(&s.name, s.shape))
        .collect();
    let p = params
        .iter()
        .map(|s| tape.parameter(&s.name, s.shape))
        .collect();
    (i, p)
}

/// The context of an inference-mode recording.
fn eval_cx<'a>(batch: usize, inputs: &'a [NodeId], params: &'a [NodeId]) -> ForwardCx<'a> {
    ForwardCx {
        batch,
        mode: Mode::Eval,
        inputs,
        params,
        rng: None,
    }
}

impl TrainingJob {
    /// Starts a job for any [`Model`]; see [`JobBuilder`].
    pub fn for_model(model: &dyn Model) -> JobBuilder<'_> {
        JobBuilder {
            model,
            loss: JobLoss::Builtin(Loss::SoftmaxCrossEntropy),
            optimizer: Optimizer::sgd(0.01),
            batch: 1,
            options: JobOptions::default(),
            trainable: Vec::new(),
            frozen: Vec::new(),
        }
    }

    /// Records and plans a training job for the `--layers` MLP whose `train_step` updates the
    /// parameters in place (no non-finite guard: the smallest arena).
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

    /// Records and plans a training job for the `--layers` MLP with [`JobOptions`]:
    /// [`TrainingJob::for_model`] over [`Mlp::model`]`(options.dropout, 0)`, every parameter
    /// trainable, without the entries `forward_1` and `eval_loss` unless
    /// [`JobOptions::eval_entries`] asks for them.
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
        mlp.check(batch)
            .map_err(|e| TapeError::Op(tapeplan_core::OpError::Shape(e)))?;
        let model = mlp.model(options.dropout, 0);
        let options = JobOptions {
            eval_entries: Some(options.eval_entries.unwrap_or(false)),
            ..options
        };
        TrainingJob::for_model(&model)
            .loss(loss)
            .optimizer(optimizer)
            .batch(batch)
            .options(options)
            .build()
            .map_err(|e| match e {
                JobError::Planning(p) => p,
                JobError::Model(ModelError::Tape(t)) => PlanningError::Tape(t),
                other => PlanningError::BadRoot {
                    entry: ENTRY_TRAIN_STEP.into(),
                    why: other.to_string(),
                },
            })
    }

    /// The persistent tensors' names and shapes (parameters and buffers), in order.
    pub fn parameter_shapes(&self) -> Vec<(String, Shape)> {
        self.parameters
            .iter()
            .map(|p| (p.name.clone(), p.shape))
            .collect()
    }

    /// The model's initial values of its persistent tensors, in order.
    pub fn initial_parameters(&self) -> Vec<Vec<f32>> {
        self.parameters.iter().map(|p| p.init.clone()).collect()
    }

    /// The names of the trained parameters, in order.
    pub fn trainable_names(&self) -> Vec<&str> {
        self.parameters
            .iter()
            .zip(&self.trainable)
            .filter(|(_, t)| **t)
            .map(|(p, _)| p.name.as_str())
            .collect()
    }

    /// The output's shape at the plan's batch (`[batch, …]`).
    ///
    /// # Errors
    /// Never for a built job (the node is on its tape).
    pub fn output_shape(&self) -> Result<Shape, TapeError> {
        self.tape.shape(self.output)
    }

    /// The memory line of a partial update: `partial update: X B arena, full update: Y B`, or
    /// `None` when every parameter is trained.
    pub fn subset_report(&self) -> Option<String> {
        self.full_update_arena_bytes.map(|full| {
            format!(
                "partial update ({} of {} parameters): {} B arena, full update: {} B",
                self.trainable.iter().filter(|t| **t).count(),
                self.parameters
                    .iter()
                    .filter(|p| p.kind == ParamKind::Parameter)
                    .count(),
                self.schedule.arena_elems * 4,
                full
            )
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_names() {
        for (p, n, want) in [
            ("features.*", "features.0.weight", true),
            ("*.bias", "fc.bias", true),
            ("*.bias", "fc.weight", false),
            ("w?", "w1", true),
            ("w?", "w12", false),
            ("*", "", true),
            ("", "", true),
            ("", "a", false),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
            ("*0*", "features.0.weight", true),
            ("fc.bias", "fc.bias", true),
            ("fc.bias", "fc.biasx", false),
            ("?*?", "ab", true),
            ("?*?", "a", false),
        ] {
            assert_eq!(glob_match(p, n), want, "{p} vs {n}");
        }
    }

    fn spec(name: &str, kind: ParamKind) -> ParamSpec {
        ParamSpec {
            name: name.into(),
            shape: Shape::SCALAR,
            kind,
            init: vec![0.0],
        }
    }

    #[test]
    fn subsets_select_parameters_never_buffers() {
        let specs = [
            spec("features.0.weight", ParamKind::Parameter),
            spec("features.0.bias", ParamKind::Parameter),
            spec("bn.running_mean", ParamKind::Buffer),
            spec("fc.weight", ParamKind::Parameter),
            spec("fc.bias", ParamKind::Parameter),
        ];
        let s = |t: &[&str], f: &[&str]| {
            let t: Vec<String> = t.iter().map(|x| x.to_string()).collect();
            let f: Vec<String> = f.iter().map(|x| x.to_string()).collect();
            trainable_subset(&specs, &t, &f)
        };
        assert_eq!(s(&[], &[]).unwrap(), [true, true, false, true, true]);
        assert_eq!(s(&["*"], &[]).unwrap(), [true, true, false, true, true]);
        assert_eq!(
            s(&["*.bias"], &[]).unwrap(),
            [false, true, false, false, true]
        );
        assert_eq!(
            s(&[], &["features.*"]).unwrap(),
            [false, false, false, true, true]
        );
        let e = s(&["conv*"], &[]).unwrap_err().to_string();
        assert!(e.contains("\"conv*\" matches no parameter"), "{e}");
        assert!(e.contains("fc.weight"), "{e}");
        // A pattern matching only a buffer matches no parameter.
        let e = s(&[], &["bn.*"]).unwrap_err().to_string();
        assert!(e.contains("matches no parameter"), "{e}");
        let e = s(&["fc.*"], &["*"]).unwrap_err().to_string();
        assert!(e.contains("no parameter is left trainable"), "{e}");
    }
}
