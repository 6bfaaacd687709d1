//! The training run, independent of the board: decode and validate the embedded plan, bind it
//! to the arena, load the initial parameters, train `EPOCHS` passes over the embedded rows in
//! the run's shuffled order, and send the transcript `tapeplan verify` reads: the run protocol
//! (`tapeplan_runtime::protocol`: binding names, epoch order, digests, the transcript's format
//! and writer), the same code the host runs.

use core::fmt::{self, Write as _};

use embedded_hal::delay::DelayNs;
use embedded_io::Write;
use tapeplan_runtime::protocol::{
    data_digest, epoch_shuffle, LineSink, TranscriptWriter, ENTRY_TRAIN_STEP, INPUT_LABELS,
    INPUT_X, OUTPUT_LOSS,
};
use tapeplan_runtime::{ExecError, Limits, ParseError, Plan, Scratch, Session};

use crate::board::Clock;
use crate::gen;
use crate::rows;

/// Why a run stopped.
#[derive(Debug)]
pub enum Failure<E> {
    /// The embedded plan was rejected.
    Plan(ParseError),
    /// Binding or running failed.
    Run(ExecError),
    /// The plan lacks an entry or binding the trainer needs: its kind (`entry`, `output`) and
    /// name.
    Missing(&'static str, &'static str),
    /// The initial parameters do not fit the plan's.
    InitLength(&'static str),
    /// The link failed.
    Link(E),
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
            Failure::Link(e) => write!(f, "link: {e:?}"),
        }
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

/// The transcript's link: each line is formatted into a buffer and written whole (one link
/// write per line). A line longer than the buffer is cut.
pub struct LineLink<'w, W: Write> {
    link: &'w mut W,
    line: LineBuf,
}

/// One line being formatted.
struct LineBuf {
    bytes: [u8; gen::LINE_BYTES],
    len: usize,
}

impl fmt::Write for LineBuf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.bytes.len() - 1 - self.len; // keep one byte for the newline
        let n = s.len().min(room);
        self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        if n < s.len() {
            Err(fmt::Error)
        } else {
            Ok(())
        }
    }
}

impl<'w, W: Write> LineLink<'w, W> {
    /// A line link over `link`.
    pub fn new(link: &'w mut W) -> Self {
        LineLink {
            link,
            line: LineBuf {
                bytes: [0; gen::LINE_BYTES],
                len: 0,
            },
        }
    }
}

impl<W: Write> LineSink for LineLink<'_, W> {
    type Error = W::Error;

    fn write_line(&mut self, line: fmt::Arguments<'_>) -> Result<(), W::Error> {
        self.line.len = 0;
        let _cut = self.line.write_fmt(line); // an over-long line is cut, not lost
        self.line.bytes[self.line.len] = b'\n';
        self.link.write_all(&self.line.bytes[..=self.line.len])
    }
}

/// The transcript (`tapeplan_runtime::protocol`'s format and writer) over a link.
pub type Transcript<'w, W> = TranscriptWriter<LineLink<'w, W>>;

/// Trains the embedded run over `arena` and writes its transcript, up to the `digest` and
/// `info` lines; the caller ends it (`end ok` / `end error …`) once it has added its own.
///
/// `pause_ms` is waited with `delay` after each epoch (a duty cycle on a real device; 0 under
/// QEMU).
///
/// # Errors
/// [`Failure`] for a rejected plan, a runtime error or a link error.
pub fn train<W: Write, C: Clock, D: DelayNs>(
    out: &mut Transcript<'_, W>,
    clock: &C,
    delay: &mut D,
    arena: &mut [f32],
    pause_ms: u32,
) -> Result<Summary, Failure<W::Error>> {
    let link = Failure::Link;
    out.header().map_err(link)?;
    out.config(gen::RUN).map_err(link)?;
    out.target(format_args!("{} {}", gen::TARGET, gen::BOARD))
        .map_err(link)?;

    // Decode and validate, with the validator's scratch sized by the plan (on the stack: 7
    // bytes per tensor). The plan is compiled into this firmware, so it is trusted: no work
    // cap (the derived cap and its error's `u64` formatting cost about 800 bytes of flash). A
    // firmware that takes plans from outside keeps `Limits::DEFAULT` (docs/threat-model.md).
    let trusted = Limits {
        max_work_per_entry: Some(u64::MAX),
        ..Limits::DEFAULT
    };
    let mut scratch = Scratch::<{ gen::PLAN_TENSORS }>::new();
    // The selective build: the validator and the kernels of the plan's opcodes only (build.rs
    // derived `gen::PlanOps` from the plan).
    let plan = Plan::parse_selective::<gen::PlanOps, { gen::PLAN_TENSORS }>(
        gen::PLAN,
        &trusted,
        &mut scratch,
    )?;
    out.plan(plan.plan_id(), plan.arena_elems()).map_err(link)?;
    let data = data_digest(rows::BYTES, gen::LABELS);
    out.data(data, gen::SAMPLES).map_err(link)?;
    defmt::info!(
        "plan {=u32:#010x}: arena {=usize} B, {=usize} instructions; {=usize} rows, data digest {=u64:#018x} (host {=u64:#018x})",
        plan.plan_id(),
        plan.arena_bytes(),
        plan.n_instrs(),
        gen::SAMPLES,
        data,
        gen::DATA_DIGEST
    );

    let mut s = Session::bind_selective::<gen::PlanOps>(&plan, arena)?;
    let mut at = 0;
    for &(name, elems) in gen::INIT_PARAMS {
        let dst = s.parameter_mut(name)?;
        let src = gen::INIT
            .get(at * 4..(at + elems) * 4)
            .ok_or(Failure::InitLength(name))?;
        if dst.len() != elems {
            return Err(Failure::InitLength(name));
        }
        for (d, b) in dst.iter_mut().zip(src.chunks_exact(4)) {
            *d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        at += elems;
    }
    // The optimizer's state (Adam's moments and step) starts from the plan's `init` entry.
    #[cfg(feature = "cnn")]
    if let Some(init) = plan.entry(tapeplan_runtime::protocol::ENTRY_INIT) {
        s.run(init)?;
    }
    let train = plan
        .entry(ENTRY_TRAIN_STEP)
        .ok_or(Failure::Missing("entry", ENTRY_TRAIN_STEP))?;

    let steps_per_epoch = gen::SAMPLES / gen::BATCH;
    let mut order = [0u16; gen::SAMPLES];
    let mut summary = Summary {
        steps: 0,
        step_ticks_total: 0,
        step_ticks_min: u64::MAX,
        step_ticks_max: 0,
        last_mean_loss: f32::NAN,
    };
    for epoch in 0..gen::EPOCHS {
        for (i, o) in order.iter_mut().enumerate() {
            *o = i as u16; // SAMPLES ≤ 65535, checked by build.rs
        }
        epoch_shuffle(gen::SEED, epoch, &mut order);
        let mut sum = 0.0f32;
        let mut epoch_ticks = 0u64;
        for batch in order.chunks_exact(gen::BATCH) {
            let x = s.input_mut(train, INPUT_X)?;
            for (dst, &row) in x.chunks_exact_mut(gen::D_IN).zip(batch) {
                rows::load(dst, usize::from(row));
            }
            let labels = s.input_mut(train, INPUT_LABELS)?;
            for (d, &row) in labels.iter_mut().zip(batch) {
                *d = f32::from(gen::LABELS[usize::from(row)]);
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
        }
        let mean = sum / steps_per_epoch as f32;
        summary.last_mean_loss = mean;
        defmt::info!(
            "epoch {=usize}/{=usize}: mean loss {=f32} ({=u32:#010x})",
            epoch + 1,
            gen::EPOCHS,
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
        delay.delay_ms(pause_ms);
    }

    // The final parameters, in the plan's order, and their digest.
    #[cfg(not(feature = "cnn"))]
    for b in plan.parameters() {
        out.param(b.name, s.parameter(b.name)?).map_err(link)?;
    }
    // The model's tensors only: the plan's other persistent bindings are the optimizer's state
    // (Adam's moments), which the transcript does not carry.
    #[cfg(feature = "cnn")]
    for &(name, _) in gen::INIT_PARAMS {
        out.param(name, s.parameter(name)?).map_err(link)?;
    }
    let digest = out.digest().map_err(link)?;
    defmt::info!(
        "trained {=usize} steps; parameter digest {=u64:#018x}",
        summary.steps,
        digest
    );
    let steps = summary.steps.max(1) as u64;
    out.info(format_args!(
        "steps {} step_ticks mean {} min {} max {} at {} Hz math {}",
        summary.steps,
        summary.step_ticks_total / steps,
        summary.step_ticks_min,
        summary.step_ticks_max,
        clock.ticks_per_second(),
        gen::MATH
    ))
    .map_err(link)?;
    out.info(format_args!(
        "flash plan_bytes {} data_bytes {} init_bytes {}",
        gen::PLAN.len(),
        rows::BYTES.len() + gen::LABELS.len(),
        gen::INIT.len()
    ))
    .map_err(link)?;
    Ok(summary)
}
