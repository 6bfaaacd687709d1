//! The train-step protocol, independent of the board: decode and validate the plan, bind it to
//! the caller's arena, load the initial parameters, run the plan's `init` entry when it has one
//! (an optimizer's state), train `epochs` passes over the rows in the run protocol's shuffled
//! order, and write the transcript `tapeplan verify` reads. Every rule here is the run protocol
//! of `tapeplan_runtime::protocol` (binding names, epoch order, digests, the transcript's
//! format), the code the host's oracle and runtime runs follow too.

use core::fmt;

use embedded_hal::delay::DelayNs;
use embedded_io::Write;
use tapeplan_runtime::protocol::{
    epoch_shuffle, Fnv1a64, ENTRY_INIT, ENTRY_TRAIN_STEP, INPUT_LABELS, INPUT_X, INPUT_Y,
    OUTPUT_LOSS,
};
use tapeplan_runtime::{ExecError, Limits, Ops, ParseError, Plan, Scratch, Session};

use crate::board::Clock;
use crate::link::Transcript;

/// The training rows a device embeds (or streams): features and class labels.
pub trait Rows {
    /// The number of rows.
    fn len(&self) -> usize;

    /// Whether there are no rows.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes row `row`'s features into `dst`.
    ///
    /// # Shapes
    /// `dst: [d_in]`, the plan's `x` input's row.
    fn load(&self, row: usize, dst: &mut [f32]);

    /// Row `row`'s class label, as the `f32` the plan's `labels` input takes.
    fn label(&self, row: usize) -> f32;

    /// Writes row `row`'s targets into `dst`: its [`Rows::label`] for a plan whose
    /// `train_step` takes `labels` (one a row), its regression targets for a plan that takes
    /// float targets (an input `y`) instead. The default writes the label into every element:
    /// right for labels and a single regression target; rows with several targets override it.
    ///
    /// # Shapes
    /// `dst: [1]` for labels, `[d_out]` for `y`.
    fn load_target(&self, row: usize, dst: &mut [f32]) {
        dst.fill(self.label(row));
    }

    /// The data digest ([`tapeplan_runtime::protocol::data_digest`] of the rows' bytes then
    /// the labels), as the host computes it for the run.
    fn digest(&self) -> u64;
}

/// What one run trains: the plan, the initial values of its model tensors, and the run
/// description's schedule.
#[derive(Clone, Copy, Debug)]
pub struct Run<'a> {
    /// The plan's bytes (`tapeplan plan`, or planned at build time).
    pub plan: &'a [u8],
    /// The run description's canonical line (the transcript's `config` line; the planner's
    /// `RunConfig::to_line`).
    pub config: &'a str,
    /// What runs it, for the transcript's `target` line (e.g. `thumbv7em-none-eabihf
    /// mps2-an386`).
    pub target: &'a str,
    /// The initial model tensors, little-endian `f32`, concatenated in `params` order.
    pub init: &'a [u8],
    /// The model tensors: name and element count, in the order of `init` (and of the
    /// transcript's `param` lines and digests).
    pub params: &'a [(&'static str, usize)],
    /// Rows per step.
    pub batch: usize,
    /// Passes over the rows.
    pub epochs: usize,
    /// The run's seed (of the epoch shuffles).
    pub seed: u64,
    /// Validation caps. A plan compiled into the firmware is trusted (`max_work_per_entry:
    /// Some(u64::MAX)` saves the work cap's code); a plan taken from outside keeps
    /// [`Limits::DEFAULT`] (`docs/threat-model.md`).
    pub limits: Limits,
}

/// Why a run stopped.
#[derive(Debug)]
pub enum Failure<E> {
    /// The plan was rejected.
    Plan(ParseError),
    /// Binding or running failed.
    Run(ExecError),
    /// The plan lacks an entry or binding the protocol or the run needs: its kind (`entry`,
    /// `output`, `parameter`) and name.
    Missing(&'static str, &'static str),
    /// The initial values of this model tensor are missing or do not fit the plan's.
    InitLength(&'static str),
    /// The initial values are more bytes than the model tensors take: found, needed.
    InitBytes(usize, usize),
    /// The run's batch is not the plan's (its `train_step` takes that many rows a step): the
    /// run's, the plan's.
    Batch(usize, usize),
    /// The rows do not fill one batch: rows, batch.
    TooFewRows(usize, usize),
    /// More rows than a `u16` order index reaches (65 536): rows.
    TooManyRows(usize),
    /// The order buffer holds fewer indices than there are rows: found, needed.
    OrderTooShort(usize, usize),
    /// The link failed.
    Link(E),
    /// Restoring or saving a checkpoint failed: what failed.
    Checkpoint(&'static str),
}

impl<E> From<ParseError> for Failure<E> {
    fn from(e: ParseError) -> Self {
        Failure::Plan(e)
    }
}

impl<E> From<ExecError> for Failure<E> {
    fn from(e: ExecError) -> Self {
        Failure::Run(e)
    }
}

impl<E: fmt::Debug> fmt::Display for Failure<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Plan(e) => write!(f, "plan rejected: {e}"),
            Failure::Run(e) => write!(f, "runtime: {e}"),
            Failure::Missing(kind, name) => write!(f, "the plan has no {name} {kind}"),
            Failure::InitLength(name) => write!(f, "initial values of {name} do not fit"),
            Failure::InitBytes(found, needed) => write!(
                f,
                "the initial values are {found} bytes, the model tensors take {needed}"
            ),
            Failure::Batch(run, plan) => write!(
                f,
                "the run's batch {run} is not the plan's (its train_step takes {plan} rows a step)"
            ),
            Failure::TooFewRows(rows, batch) => {
                write!(f, "{rows} rows do not fill one batch of {batch}")
            }
            Failure::TooManyRows(rows) => write!(
                f,
                "{rows} rows: the order buffer's u16 indices reach 65536 rows"
            ),
            Failure::OrderTooShort(found, needed) => write!(
                f,
                "the order buffer holds {found} row indices, the data has {needed} rows"
            ),
            Failure::Link(e) => write!(f, "link: {e:?}"),
            Failure::Checkpoint(what) => write!(f, "checkpoint: {what}"),
        }
    }
}

/// Where [`train_resumable`] keeps its training state between epochs: it restores the newest
/// checkpoint once the parameters are initialized, and saves one after every epoch.
pub trait Checkpoints {
    /// Restores the newest checkpoint into the session's persistent region; answers the
    /// number of epochs it completed, `None` when there is none (the run starts fresh).
    ///
    /// # Errors
    /// What failed, for [`Failure::Checkpoint`].
    fn resume<O: Ops>(
        &mut self,
        session: &mut Session<'_, '_, O>,
    ) -> Result<Option<u32>, &'static str>;

    /// Saves the session's persistent region after epoch `epochs_done` (1-based).
    ///
    /// # Errors
    /// What failed, for [`Failure::Checkpoint`].
    fn save<O: Ops>(
        &mut self,
        session: &Session<'_, '_, O>,
        epochs_done: u32,
    ) -> Result<(), &'static str>;
}

/// No checkpoints: [`train`] starts fresh and saves nothing.
pub struct NoCheckpoints;

impl Checkpoints for NoCheckpoints {
    fn resume<O: Ops>(&mut self, _: &mut Session<'_, '_, O>) -> Result<Option<u32>, &'static str> {
        Ok(None)
    }

    fn save<O: Ops>(&mut self, _: &Session<'_, '_, O>, _: u32) -> Result<(), &'static str> {
        Ok(())
    }
}

/// What a run measured.
#[derive(Clone, Copy, Debug)]
pub struct Summary {
    /// Training steps run.
    pub steps: usize,
    /// Clock ticks spent in `train_step`, all steps.
    pub step_ticks_total: u64,
    /// The fastest step, in ticks.
    pub step_ticks_min: u64,
    /// The slowest step, in ticks.
    pub step_ticks_max: u64,
    /// The last epoch's mean loss.
    pub last_mean_loss: f32,
}

/// Trains `run` over `arena` and writes its transcript, from its first line up to the `digest`
/// and `info` lines; the caller ends it (`end ok` / `end error …`) once it has added its own.
///
/// `O` is the selective build's op set (`tapeplan_core::op_set!`: the runtime dispatches only
/// those opcodes) and `TENSORS` the validator's scratch, at least the plan's tensor count (7
/// bytes of stack each). `order` is where each epoch's row order goes, at least `rows.len()`
/// long. `pause_ms` is waited with `delay` after each epoch (a duty cycle; 0 under QEMU).
///
/// The transcript: `tapeplan-transcript 1`, `config`, `target`, `plan`, `data`, `bind` (the
/// plan's checksum, the data digest, the initial parameters' digest, the math profile), then
/// per step `loss` and `state` (the model tensors' digest after the step), per epoch `epoch`
/// and `info epoch_ticks`, then every model tensor's final `param` lines, the `digest` and two
/// `info` lines (step timings, flash figures).
///
/// # Shapes
/// `arena: [plan.arena_elems()]` at least; `order: [rows.len()]` at least.
///
/// # Errors
/// [`Failure`]: a rejected plan, a runtime error, a missing entry or binding, initial values
/// that do not fit, a batch other than the plan's, rows that do not fill a batch (or more than
/// 65 536), a short order buffer, a link error.
#[allow(clippy::too_many_arguments)]
pub fn train<O: Ops, const TENSORS: usize, const LINE: usize, W, R, C, D>(
    out: &mut Transcript<'_, W, LINE>,
    run: &Run<'_>,
    rows: &R,
    order: &mut [u16],
    clock: &C,
    delay: &mut D,
    arena: &mut [f32],
    pause_ms: u32,
) -> Result<Summary, Failure<W::Error>>
where
    W: Write,
    R: Rows,
    C: Clock,
    D: DelayNs,
{
    train_resumable::<O, TENSORS, LINE, W, R, C, D, NoCheckpoints>(
        out,
        run,
        rows,
        order,
        clock,
        delay,
        arena,
        pause_ms,
        &mut NoCheckpoints,
    )
}

/// [`train`] that survives a reset: once the initial parameters and the `init` entry are in
/// place, `checkpoints` restores the newest checkpoint (which says how many epochs it
/// completed, `k`), training runs epochs `k + 1 ..= epochs` (the epoch order depends only on
/// the seed and the epoch, so the resumed run computes the uninterrupted run's bits), and a
/// checkpoint is saved after every epoch. A resumed run's transcript has an `info resumed
/// epochs k` line and the steps after the checkpoint only; its `digest` line is the
/// uninterrupted run's.
///
/// # Shapes
/// As [`train`].
///
/// # Errors
/// As [`train`], and [`Failure::Checkpoint`] when restoring or saving fails, or the newest
/// checkpoint completed more epochs than `run` has (a longer run's).
#[allow(clippy::too_many_arguments)]
pub fn train_resumable<O: Ops, const TENSORS: usize, const LINE: usize, W, R, C, D, K>(
    out: &mut Transcript<'_, W, LINE>,
    run: &Run<'_>,
    rows: &R,
    order: &mut [u16],
    clock: &C,
    delay: &mut D,
    arena: &mut [f32],
    pause_ms: u32,
    checkpoints: &mut K,
) -> Result<Summary, Failure<W::Error>>
where
    W: Write,
    R: Rows,
    C: Clock,
    D: DelayNs,
    K: Checkpoints,
{
    let link = Failure::Link;
    out.header().map_err(link)?;
    out.config(run.config).map_err(link)?;
    out.target(run.target).map_err(link)?;

    // Decode and validate, with the validator's scratch on the stack, for the op set's
    // opcodes only (the selective build).
    let mut scratch = Scratch::<TENSORS>::new();
    let plan = Plan::parse_selective::<O, TENSORS>(run.plan, &run.limits, &mut scratch)?;
    out.plan(plan.plan_id(), plan.arena_elems()).map_err(link)?;
    let samples = rows.len();
    let data = rows.digest();
    out.data(data, samples).map_err(link)?;
    let mut init = Fnv1a64::new();
    for b in run.init.chunks_exact(4) {
        init.f32s(&[f32::from_le_bytes([b[0], b[1], b[2], b[3]])]);
    }
    let math = plan.math();
    out.bind(plan.crc32(), data, init.finish(), math.name())
        .map_err(link)?;
    info!(
        "plan {=u32:#010x}: arena {=usize} B, {=usize} instructions; {=usize} rows, data digest {=u64:#018x}",
        plan.plan_id(),
        plan.arena_bytes(),
        plan.n_instrs(),
        samples,
        data
    );

    let mut s = Session::bind_selective::<O>(&plan, arena)?;
    load_initial(&mut s, run.init, run.params)?;
    // An optimizer's state (Adam's moments and step) starts from the plan's `init` entry.
    if let Some(init) = plan.entry(ENTRY_INIT) {
        s.run(init)?;
    }
    let train = plan
        .entry(ENTRY_TRAIN_STEP)
        .ok_or(Failure::Missing("entry", ENTRY_TRAIN_STEP))?;
    let order_len = order.len();
    let order = order
        .get_mut(..samples)
        .ok_or(Failure::OrderTooShort(order_len, samples))?;
    if samples > usize::from(u16::MAX) + 1 {
        return Err(Failure::TooManyRows(samples));
    }
    // The plan's batch: the first extent of its `x`, one row a step's row.
    let plan_batch = plan
        .input(train, INPUT_X)
        .ok_or(Failure::Missing("input", INPUT_X))?
        .shape
        .dims()
        .first()
        .copied()
        .unwrap_or(1);
    let batch = run.batch;
    if batch != plan_batch {
        return Err(Failure::Batch(batch, plan_batch));
    }
    if samples < batch {
        return Err(Failure::TooFewRows(samples, batch));
    }
    let steps_per_epoch = samples / batch;
    // Classification feeds `labels` (one a row); a regression plan (no `labels`) feeds its
    // targets to `y`. Both through `Rows::load_target`, whose default writes the label.
    let targets = if s.input_mut(train, INPUT_LABELS).is_ok() {
        INPUT_LABELS
    } else {
        INPUT_Y
    };
    let resumed = checkpoints
        .resume(&mut s)
        .map_err(Failure::Checkpoint)?
        .map_or(0, |k| k as usize);
    if resumed > run.epochs {
        // A checkpoint of a longer run of the same plan: its state is not this run's.
        return Err(Failure::Checkpoint(
            "the checkpoint has more epochs than the run",
        ));
    }
    if resumed > 0 {
        out.info(format_args!("resumed epochs {resumed}"))
            .map_err(link)?;
    }
    let mut summary = Summary {
        steps: resumed * steps_per_epoch,
        step_ticks_total: 0,
        step_ticks_min: u64::MAX,
        step_ticks_max: 0,
        last_mean_loss: f32::NAN,
    };
    for epoch in resumed..run.epochs {
        for (i, o) in order.iter_mut().enumerate() {
            *o = i as u16; // at most 65 536 rows (checked above)
        }
        epoch_shuffle(run.seed, epoch, order);
        let mut sum = 0.0f32;
        let mut epoch_ticks = 0u64;
        for rows_of_step in order.chunks_exact(batch) {
            let x = s.input_mut(train, INPUT_X)?;
            let d_in = x.len() / batch;
            for (dst, &row) in x.chunks_exact_mut(d_in.max(1)).zip(rows_of_step) {
                rows.load(usize::from(row), dst);
            }
            let t = s.input_mut(train, targets)?;
            let per_row = t.len() / batch;
            for (dst, &row) in t.chunks_exact_mut(per_row.max(1)).zip(rows_of_step) {
                rows.load_target(usize::from(row), dst);
            }
            let t0 = clock.now_ticks();
            s.run(train)?;
            let ticks = clock.now_ticks().wrapping_sub(t0);
            let loss = s
                .output(train, OUTPUT_LOSS)?
                .first()
                .copied()
                .ok_or(Failure::Missing("output", OUTPUT_LOSS))?;
            sum += loss;
            summary.steps += 1;
            summary.step_ticks_total += ticks;
            epoch_ticks += ticks;
            summary.step_ticks_min = summary.step_ticks_min.min(ticks);
            summary.step_ticks_max = summary.step_ticks_max.max(ticks);
            out.loss(summary.steps, loss).map_err(link)?;
            let mut state = Fnv1a64::new();
            for &(name, _) in run.params {
                state.f32s(s.parameter(name)?);
            }
            out.state(summary.steps, state.finish()).map_err(link)?;
        }
        let mean = sum / steps_per_epoch as f32;
        summary.last_mean_loss = mean;
        info!(
            "epoch {=usize}/{=usize}: mean loss {=f32} ({=u32:#010x})",
            epoch + 1,
            run.epochs,
            mean,
            mean.to_bits()
        );
        out.epoch(epoch + 1, mean).map_err(link)?;
        out.info(format_args!(
            "epoch_ticks {} {} steps {}",
            epoch + 1,
            epoch_ticks,
            steps_per_epoch
        ))
        .map_err(link)?;
        checkpoints
            .save(&s, (epoch + 1) as u32)
            .map_err(Failure::Checkpoint)?;
        delay.delay_ms(pause_ms);
    }

    // The final model tensors (not an optimizer's state), and their digest.
    for &(name, _) in run.params {
        out.param(name, s.parameter(name)?).map_err(link)?;
    }
    let digest = out.digest().map_err(link)?;
    info!(
        "trained {=usize} steps; parameter digest {=u64:#018x}",
        summary.steps, digest
    );
    let _ = digest;
    // Timed steps: the ones this run ran (not a checkpoint's).
    let steps = (summary.steps - resumed * steps_per_epoch).max(1) as u64;
    out.info(format_args!(
        "steps {} step_ticks mean {} min {} max {} at {} Hz math {}",
        summary.steps,
        summary.step_ticks_total / steps,
        summary.step_ticks_min,
        summary.step_ticks_max,
        clock.ticks_per_second(),
        math.name()
    ))
    .map_err(link)?;
    Ok(summary)
}

/// Loads the initial values `init` (little-endian `f32`, concatenated in `params` order) into
/// the session's model tensors `params` (name, element count).
///
/// # Errors
/// [`Failure::InitLength`] naming a tensor whose values are missing or do not fit;
/// [`Failure::Run`] for a name the plan lacks.
// Inlined: a call of its own costs the Cortex-M4F firmware about 240 bytes of flash (its
// runtime budget, `cargo xtask firmware`).
#[inline(always)]
pub(crate) fn load_initial<O: Ops, E>(
    s: &mut Session<'_, '_, O>,
    init: &[u8],
    params: &[(&'static str, usize)],
) -> Result<(), Failure<E>> {
    // Bytes of `init` taken so far.
    let mut at = 0usize;
    for &(name, elems) in params {
        let dst = s
            .parameter_mut(name)
            .map_err(|_| Failure::Missing("parameter", name))?;
        let end = elems
            .checked_mul(4)
            .and_then(|n| n.checked_add(at))
            .ok_or(Failure::InitLength(name))?;
        let src = init.get(at..end).ok_or(Failure::InitLength(name))?;
        if dst.len() != elems {
            return Err(Failure::InitLength(name));
        }
        for (d, b) in dst.iter_mut().zip(src.chunks_exact(4)) {
            *d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        at = end;
    }
    if at != init.len() {
        return Err(Failure::InitBytes(init.len(), at));
    }
    Ok(())
}
