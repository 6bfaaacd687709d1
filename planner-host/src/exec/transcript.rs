//! Device transcripts: the text a target sends back after a training run ([`Transcript`]), and
//! the transcript the host oracle itself would send ([`oracle_transcript`]).
//!
//! The format (version 1) is specified once, with the writer every target uses
//! ([`TranscriptWriter`]), in [`tapeplan_runtime::protocol`]; this module reads it.

use tapeplan_core::MathProfile;

use crate::exec::oracle::oracle_run;
use crate::exec::runtime::{RuntimeModel, TrainError};
use crate::exec::verify::VerifyError;
use crate::model::run::plan_model_tensors;
use crate::model::run::{RunData, RunInit, RunModel, RunOptimizer};
use crate::model::{Activation, Loss, RunConfig};
use crate::protocol::{
    digest_f32, Fnv1a64, TranscriptWriter, ENTRY_TRAIN_STEP, INPUT_LABELS, INPUT_X, INPUT_Y,
    TRANSCRIPT_MAGIC,
};

/// A parsed transcript; see the [module docs](self) for its format.
#[derive(Clone, Debug, PartialEq)]
pub struct Transcript {
    /// The run.
    pub config: RunConfig,
    /// What ran it, if said.
    pub target: Option<String>,
    /// The plan id and arena elements the device reported.
    pub plan: Option<(u32, usize)>,
    /// The data digest and row count the device reported.
    pub data: Option<(u64, usize)>,
    /// The header's `bind` line, if sent.
    pub bind: Option<Bind>,
    /// Loss bits, index `i` for step `i + 1`.
    pub losses: Vec<u32>,
    /// State digests (`state` lines), index `i` after step `i + 1`; empty when not sent.
    pub states: Vec<u64>,
    /// Epoch mean-loss bits, index `i` for epoch `i + 1`.
    pub epoch_means: Vec<u32>,
    /// Final parameter bits by name, in the order first seen.
    pub params: Vec<(String, Vec<u32>)>,
    /// The parameter digest the device reported.
    pub digest: Option<u64>,
    /// `info` lines, verbatim (without `info `).
    pub info: Vec<String>,
}

/// A transcript's `bind` line: what the device's run is bound to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bind {
    /// The plan's checksum (its header's `crc32`).
    pub plan_crc32: u32,
    /// The data digest.
    pub data: u64,
    /// The digest of the initial model tensors.
    pub init: u64,
    /// The math profile.
    pub math: MathProfile,
}

/// Whether `s` is `digits` hex digits and nothing else (`from_str_radix` alone also takes a
/// leading `+`).
fn hex_digits(s: &str, digits: usize) -> bool {
    s.len() == digits && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn hex32(s: &str) -> Option<u32> {
    hex_digits(s, 8)
        .then(|| u32::from_str_radix(s, 16).ok())
        .flatten()
}

fn hex64(s: &str) -> Option<u64> {
    hex_digits(s, 16)
        .then(|| u64::from_str_radix(s, 16).ok())
        .flatten()
}

/// The longest message about a transcript line, in bytes: a message quotes what it found, and
/// a hostile line may be megabytes long.
const MESSAGE_BYTES: usize = 160;

/// `message` cut to [`MESSAGE_BYTES`] (at a character boundary), saying how long it was.
fn shortened(message: String) -> String {
    if message.len() <= MESSAGE_BYTES {
        return message;
    }
    let mut end = MESSAGE_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &message[..end], message.len())
}

/// What a transcript line was, as [`TranscriptReader::line`] read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// Blank, a comment, or noise before the first line.
    Skipped,
    /// The first line (`tapeplan-transcript 1`).
    Start,
    /// The `config` line.
    Config,
    /// The `bind` line.
    Bind,
    /// `loss <step>`.
    Loss(usize),
    /// `state <step>`.
    State(usize),
    /// `epoch <epoch>`.
    Epoch(usize),
    /// `end ok`.
    End,
    /// Any other record (`target`, `plan`, `data`, `param`, `digest`, `info`).
    Other,
}

/// Reads a transcript a line at a time, as it arrives (a serial port, a growing file): each
/// line is checked and added; [`TranscriptReader::finish`] answers the whole transcript.
/// [`Transcript::parse`] is this over a whole text.
#[derive(Clone, Debug)]
pub struct TranscriptReader {
    started: bool,
    ended: bool,
    config: Option<RunConfig>,
    /// Whether the `config` line has been read (parsed or, without `parse_config`, kept as
    /// text).
    config_seen: bool,
    /// Whether the `config` line is parsed into a [`RunConfig`] (which reads the files it
    /// names); [`final_parameters`] reads a transcript without them.
    parse_config: bool,
    /// The folder the `config` line's relative paths are read from (empty: the current one).
    dir: std::path::PathBuf,
    /// The run the device is expected to have run: its files stand for any path the `config`
    /// line pins with their digests ([`RunConfig::parse_against`]).
    expected: Option<RunConfig>,
    t: Transcript,
}

impl Default for TranscriptReader {
    fn default() -> Self {
        TranscriptReader::new()
    }
}

impl TranscriptReader {
    /// A reader before the first line.
    pub fn new() -> TranscriptReader {
        TranscriptReader {
            started: false,
            ended: false,
            config: None,
            config_seen: false,
            parse_config: true,
            dir: std::path::PathBuf::new(),
            expected: None,
            t: Transcript {
                config: RunConfig {
                    model: RunModel::Mlp,
                    layers: Vec::new(),
                    activation: Activation::Tanh,
                    loss: Loss::SoftmaxCrossEntropy,
                    batch: 0,
                    lr: 0.0,
                    seed: 0,
                    split_seed: 0,
                    samples: 0,
                    epochs: 0,
                    fusion: crate::plan::FusionPolicy::Off,
                    math: MathProfile::Precise,
                    arith: tapeplan_core::ArithProfile::Separate,
                    optimizer: RunOptimizer::Sgd,
                    dropout: 0.0,
                    data: RunData::Digits,
                    init: RunInit::Glorot,
                },
                target: None,
                plan: None,
                data: None,
                bind: None,
                losses: Vec::new(),
                states: Vec::new(),
                epoch_means: Vec::new(),
                params: Vec::new(),
                digest: None,
                info: Vec::new(),
            },
        }
    }

    /// This reader, reading the relative paths of the `config` line (a device sends its run
    /// description's paths as written) from folder `dir`: the run description's own folder
    /// ([`RunConfig::parse_in`]).
    pub fn relative_to(mut self, dir: &std::path::Path) -> TranscriptReader {
        self.dir = dir.to_path_buf();
        self
    }

    /// This reader, for a device expected to run `expected`: a file the `config` line pins
    /// with the digest of one of `expected`'s files is that file, whatever its spelling
    /// ([`RunConfig::parse_against`]).
    pub fn expecting(mut self, expected: &RunConfig) -> TranscriptReader {
        self.expected = Some(expected.clone());
        self
    }

    /// The transcript read so far (its `config` is a placeholder until
    /// [`TranscriptReader::config`] has one).
    pub fn so_far(&self) -> &Transcript {
        &self.t
    }

    /// The `config` line's run, once read.
    pub fn config(&self) -> Option<&RunConfig> {
        self.config.as_ref()
    }

    /// Whether the `end ok` line has been read.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Reads line `line` (1-based, for messages) of the transcript, without its line end (a
    /// `\r` before it is ignored).
    ///
    /// # Errors
    /// [`VerifyError::Transcript`] for a malformed line (naming it), a line after `end`, steps
    /// out of order; [`VerifyError::DeviceError`] for `end error …`.
    pub fn line(&mut self, line: usize, text: &str) -> Result<Record, VerifyError> {
        let text = text.strip_suffix('\r').unwrap_or(text);
        if text.trim().is_empty() || text.starts_with('#') {
            return Ok(Record::Skipped);
        }
        // Whatever comes before the first line (a UART's boot noise, an emulator's warnings)
        // is not part of the transcript.
        if !self.started {
            if text.trim() == TRANSCRIPT_MAGIC {
                self.started = true;
                return Ok(Record::Start);
            }
            return Ok(Record::Skipped);
        }
        let bad = |message: String| VerifyError::Transcript {
            line,
            message: shortened(message),
        };
        if self.ended {
            return Err(bad("a line after `end`".into()));
        }
        let t = &mut self.t;
        let (kind, rest) = text.split_once(' ').unwrap_or((text, ""));
        let fields: Vec<&str> = rest.split(' ').filter(|f| !f.is_empty()).collect();
        let record = match kind {
            "config" => {
                if self.config_seen {
                    return Err(bad("a second `config` line".into()));
                }
                if self.parse_config {
                    let cfg = match &self.expected {
                        Some(e) => RunConfig::parse_against(rest, &self.dir, e),
                        None => RunConfig::parse_in(rest, &self.dir),
                    };
                    self.config = Some(cfg.map_err(|e| bad(e.to_string()))?);
                }
                self.config_seen = true;
                Record::Config
            }
            "target" => {
                t.target = Some(rest.to_string());
                Record::Other
            }
            "info" => {
                t.info.push(rest.to_string());
                Record::Other
            }
            "plan" => match fields[..] {
                [id, arena] => {
                    let id = hex32(id).ok_or_else(|| bad(format!("plan id {id:?}")))?;
                    let arena = arena
                        .parse()
                        .map_err(|_| bad(format!("arena elems {arena:?}")))?;
                    t.plan = Some((id, arena));
                    Record::Other
                }
                _ => return Err(bad("expected `plan <hex8> <arena_elems>`".into())),
            },
            "data" => match fields[..] {
                [d, rows] => {
                    let d = hex64(d).ok_or_else(|| bad(format!("data digest {d:?}")))?;
                    let rows = rows.parse().map_err(|_| bad(format!("rows {rows:?}")))?;
                    t.data = Some((d, rows));
                    Record::Other
                }
                _ => return Err(bad("expected `data <hex16> <rows>`".into())),
            },
            "bind" => {
                let expected =
                    "expected `bind plan=<hex8> data=<hex16> init=<hex16> math=<profile>`";
                let values: Option<Vec<&str>> = ["plan=", "data=", "init=", "math="]
                    .iter()
                    .zip(&fields)
                    .map(|(key, f)| f.strip_prefix(key))
                    .collect();
                let (Some([plan, data, init, math]), 4) = (values.as_deref(), fields.len()) else {
                    return Err(bad(expected.into()));
                };
                if t.bind.is_some() {
                    return Err(bad("a second `bind` line".into()));
                }
                if !t.losses.is_empty() {
                    return Err(bad("`bind` after the first `loss`".into()));
                }
                t.bind = Some(Bind {
                    plan_crc32: hex32(plan).ok_or_else(|| bad(format!("plan {plan:?}")))?,
                    data: hex64(data).ok_or_else(|| bad(format!("data {data:?}")))?,
                    init: hex64(init).ok_or_else(|| bad(format!("init {init:?}")))?,
                    math: MathProfile::from_name(math)
                        .ok_or_else(|| bad(format!("math {math:?}: precise or fast")))?,
                });
                Record::Bind
            }
            "loss" | "epoch" => {
                let [n, bits] = fields[..] else {
                    return Err(bad(format!("expected `{kind} <n> <hex8>`")));
                };
                let list = if kind == "loss" {
                    &mut t.losses
                } else {
                    &mut t.epoch_means
                };
                let n: usize = n.parse().map_err(|_| bad(format!("{kind} number {n:?}")))?;
                if n != list.len() + 1 {
                    return Err(bad(format!(
                        "{kind} {n} out of order: expected {}",
                        list.len() + 1
                    )));
                }
                if !self.config_seen {
                    return Err(bad(format!("`{kind}` before `config`")));
                }
                list.push(hex32(bits).ok_or_else(|| bad(format!("bits {bits:?}")))?);
                if kind == "loss" {
                    Record::Loss(n)
                } else {
                    Record::Epoch(n)
                }
            }
            "state" => {
                let [n, digest] = fields[..] else {
                    return Err(bad("expected `state <step> <hex16>`".into()));
                };
                let n: usize = n.parse().map_err(|_| bad(format!("state step {n:?}")))?;
                if n != t.states.len() + 1 || n != t.losses.len() {
                    return Err(bad(format!(
                        "state {n} out of order: expected {} (after `loss {}`)",
                        t.states.len() + 1,
                        t.states.len() + 1
                    )));
                }
                t.states
                    .push(hex64(digest).ok_or_else(|| bad(format!("state digest {digest:?}")))?);
                Record::State(n)
            }
            "param" => {
                let [name, start, values @ ..] = &fields[..] else {
                    return Err(bad("expected `param <name> <start> <hex8>…`".into()));
                };
                let start: usize = start.parse().map_err(|_| bad(format!("start {start:?}")))?;
                let i = match t.params.iter().position(|(n, _)| n == name) {
                    Some(i) => i,
                    None => {
                        t.params.push((name.to_string(), Vec::new()));
                        t.params.len() - 1
                    }
                };
                let v = &mut t.params[i].1;
                if start != v.len() {
                    return Err(bad(format!(
                        "param {name} starts at {start}, expected {}",
                        v.len()
                    )));
                }
                for b in values {
                    v.push(hex32(b).ok_or_else(|| bad(format!("bits {b:?}")))?);
                }
                Record::Other
            }
            "digest" => match fields[..] {
                [d] => {
                    t.digest = Some(hex64(d).ok_or_else(|| bad(format!("digest {d:?}")))?);
                    Record::Other
                }
                _ => return Err(bad("expected `digest <hex16>`".into())),
            },
            "end" => match fields.first().copied() {
                Some("ok") if fields.len() == 1 => {
                    self.ended = true;
                    Record::End
                }
                Some("error") => {
                    return Err(VerifyError::DeviceError(
                        rest.strip_prefix("error").unwrap_or("").trim().to_string(),
                    ))
                }
                _ => return Err(bad("expected `end ok` or `end error <text>`".into())),
            },
            other => return Err(bad(format!("unknown record {other:?}"))),
        };
        Ok(record)
    }

    /// The whole transcript.
    ///
    /// # Errors
    /// [`VerifyError::Incomplete`] for a missing first, `config` or `end` line, or `state`
    /// lines for some steps only.
    pub fn finish(self) -> Result<Transcript, VerifyError> {
        if !self.started {
            return Err(VerifyError::Incomplete(format!(
                "no {TRANSCRIPT_MAGIC:?} line: not a transcript"
            )));
        }
        if !self.ended {
            return Err(VerifyError::Incomplete(
                "no `end ok` line: the transcript is truncated".into(),
            ));
        }
        let mut t = self.t;
        if !t.states.is_empty() && t.states.len() != t.losses.len() {
            return Err(VerifyError::Incomplete(format!(
                "{} `state` lines for {} steps: either every step has one or none does",
                t.states.len(),
                t.losses.len()
            )));
        }
        t.config = self
            .config
            .ok_or_else(|| VerifyError::Incomplete("no `config` line".into()))?;
        Ok(t)
    }
}

impl Transcript {
    /// Parses a transcript.
    ///
    /// # Errors
    /// [`VerifyError::Transcript`] for a malformed line (naming it), [`VerifyError::Incomplete`]
    /// for a missing header, `config` or `end` line, [`VerifyError::DeviceError`] for
    /// `end error …`.
    pub fn parse(text: &str) -> Result<Transcript, VerifyError> {
        Transcript::parse_in(text, std::path::Path::new(""))
    }

    /// [`Transcript::parse`], the `config` line's relative paths read from folder `dir` (the
    /// folder of the run description the device ran: [`RunConfig::from_file`]).
    ///
    /// # Errors
    /// As [`Transcript::parse`].
    pub fn parse_in(text: &str, dir: &std::path::Path) -> Result<Transcript, VerifyError> {
        Transcript::parse_with(text, TranscriptReader::new().relative_to(dir))
    }

    /// [`Transcript::parse_in`] for a device expected to run `expected`
    /// ([`TranscriptReader::expecting`]): its files are compared by digest, not by the
    /// spelling of their paths.
    ///
    /// # Errors
    /// As [`Transcript::parse`].
    pub fn parse_against(
        text: &str,
        dir: &std::path::Path,
        expected: &RunConfig,
    ) -> Result<Transcript, VerifyError> {
        Transcript::parse_with(
            text,
            TranscriptReader::new().relative_to(dir).expecting(expected),
        )
    }

    fn parse_with(text: &str, mut reader: TranscriptReader) -> Result<Transcript, VerifyError> {
        for (i, line) in text.lines().enumerate() {
            reader.line(i + 1, line)?;
        }
        reader.finish()
    }
}

/// What a transcript holds at its end: the device's final model tensors (its `param` lines),
/// read by [`final_parameters`].
#[derive(Clone, Debug, PartialEq)]
pub struct FinalParameters {
    /// Each model tensor's final values by name, in the order of the `param` lines (row-major,
    /// as the plan lays the tensor out).
    pub params: Vec<(String, Vec<f32>)>,
    /// The `digest` line, checked against the values ([`digest_f32`] of them all, in order).
    pub digest: Option<u64>,
    /// What ran it (the `target` line), if said.
    pub target: Option<String>,
    /// The plan id the device reported (the `plan` line), if sent.
    pub plan_id: Option<u32>,
}

impl FinalParameters {
    /// Whether the device said it ran a plan other than the one with id `plan_id`.
    ///
    /// # Errors
    /// [`VerifyError::Mismatch`] naming both plan ids.
    pub fn check_plan_id(&self, plan_id: u32) -> Result<(), VerifyError> {
        match self.plan_id {
            Some(id) if id != plan_id => Err(VerifyError::Mismatch(format!(
                "the device ran plan {id:08x}, not this plan ({plan_id:08x})"
            ))),
            _ => Ok(()),
        }
    }
}

/// The final parameters of a complete transcript (its `param` lines, checked against its
/// `digest` line), without reading the files its `config` line names: a device's trained model,
/// to export (`tapeplan export --transcript`) or evaluate (`tapeplan eval --transcript`). Every
/// line is checked as [`Transcript::parse`] checks it, but the `config` line is not parsed.
///
/// # Errors
/// [`VerifyError::Transcript`] for a malformed line; [`VerifyError::Incomplete`] for a
/// transcript without its first line, its `config` line, its `end ok` line or any `param`
/// line, or whose `digest` differs from the digest of its `param` values (a damaged
/// transcript); [`VerifyError::DeviceError`] for `end error …` (a run that failed has no final
/// parameters).
pub fn final_parameters(text: &str) -> Result<FinalParameters, VerifyError> {
    let mut reader = TranscriptReader::new();
    reader.parse_config = false;
    for (i, line) in text.lines().enumerate() {
        reader.line(i + 1, line)?;
    }
    if !reader.started {
        return Err(VerifyError::Incomplete(format!(
            "no {TRANSCRIPT_MAGIC:?} line: not a transcript"
        )));
    }
    if !reader.config_seen {
        return Err(VerifyError::Incomplete("no `config` line".into()));
    }
    if !reader.ended {
        return Err(VerifyError::Incomplete(
            "no `end ok` line: the transcript is truncated, so its parameters may be too".into(),
        ));
    }
    let t = reader.t;
    if t.params.is_empty() {
        return Err(VerifyError::Incomplete(
            "no `param` lines: the device sent no final parameters".into(),
        ));
    }
    let params: Vec<(String, Vec<f32>)> = t
        .params
        .into_iter()
        .map(|(name, bits)| (name, bits.into_iter().map(f32::from_bits).collect()))
        .collect();
    if let Some(d) = t.digest {
        let all: Vec<f32> = params.iter().flat_map(|(_, v)| v.iter().copied()).collect();
        let found = digest_f32(&all);
        if found != d {
            return Err(VerifyError::Incomplete(format!(
                "the `param` lines' digest is {found:016x}, the `digest` line says {d:016x}: a damaged transcript"
            )));
        }
    }
    Ok(FinalParameters {
        params,
        digest: t.digest,
        target: t.target,
        plan_id: t.plan.map(|(id, _)| id),
    })
}

/// Writes the transcript the host oracle itself would send for `cfg`: what a correct device
/// sends, byte for byte except `target` and `info`. Used by tests, and to show the format.
///
/// # Errors
/// Planning, data and oracle errors.
pub fn oracle_transcript(cfg: &RunConfig) -> Result<String, VerifyError> {
    let job = cfg.job()?;
    let bytes = job.schedule.to_bytes();
    let plan = tapeplan_runtime::Plan::parse_alloc(&bytes)
        .map_err(|e| VerifyError::Mismatch(format!("the host's own plan is rejected: {e}")))?;
    let train = cfg.training_set()?;
    // Writing into a `String` cannot fail.
    let mut out = TranscriptWriter::new(String::new());
    let _ = out.header();
    let _ = out.config(&cfg.to_line());
    let _ = out.target("host oracle");
    let _ = out.plan(plan.plan_id(), plan.arena_elems());
    let data = cfg.data_digest(&train);
    let _ = out.data(data, train.len());
    let init = cfg.initial_parameters(&job)?;
    let mut init_digest = Fnv1a64::new();
    for p in &init {
        init_digest.f32s(p);
    }
    let _ = out.bind(plan.crc32(), data, init_digest.finish(), plan.math().name());
    let run = oracle_run(cfg, &job, &train, &init)?;
    write_steps(&mut out, cfg, &run.losses, &run.states, &run.epoch_means);
    for ((name, _), p) in job.parameter_shapes().iter().zip(&run.oracle.params) {
        let _ = out.param(name, &p.data);
    }
    let _ = out.digest();
    let _ = out.end_ok();
    Ok(out.into_inner())
}

/// The `loss`, `state` and `epoch` lines of a run, each epoch's steps before its mean.
fn write_steps(
    out: &mut TranscriptWriter<String>,
    cfg: &RunConfig,
    losses: &[f32],
    states: &[u64],
    epoch_means: &[f32],
) {
    // Writing into a `String` cannot fail.
    let steps = losses.chunks(cfg.steps_per_epoch().max(1));
    for (epoch, (losses, mean)) in steps.zip(epoch_means).enumerate() {
        let first = epoch * cfg.steps_per_epoch();
        for (k, loss) in losses.iter().enumerate() {
            let step = first + k + 1;
            let _ = out.loss(step, *loss);
            if let Some(&state) = states.get(step - 1) {
                let _ = out.state(step, state);
            }
        }
        let _ = out.epoch(epoch + 1, *mean);
    }
}

/// The transcript of a `plan=` run trained by the `no_std` runtime on the host (what a device
/// sends): the run's plan file, its initial values ([`RunConfig::plan_initial_persistent`]),
/// the run's rows in its epoch order, every step's loss and epoch's mean, and the final model
/// tensors (not the optimizer's state), as the firmware writes them.
///
/// # Errors
/// [`VerifyError::Run`] for a run that is not a `plan=` run, or whose plan, data or init
/// cannot be read; [`VerifyError::DeviceError`] for a runtime error (a refused step among
/// them).
pub fn runtime_transcript(cfg: &RunConfig, target: &str) -> Result<String, VerifyError> {
    let bytes = cfg.plan_bytes()?.ok_or_else(|| {
        VerifyError::Run(crate::model::RunConfigError::Invalid(
            "a runtime transcript replays a plan= run".to_owned(),
        ))
    })?;
    let device = |e: TrainError| VerifyError::DeviceError(e.to_string());
    let mut model = RuntimeModel::new(&bytes).map_err(device)?;
    let persistent = cfg.plan_initial_persistent(&bytes)?;
    let plan = *model.plan();
    for b in plan.parameters() {
        if let Some(v) = persistent.get(b.range()) {
            model.load_parameter(b.name, v).map_err(device)?;
        }
    }
    let train = cfg.training_set()?;
    let target_name = if plan
        .entry(ENTRY_TRAIN_STEP)
        .and_then(|e| plan.input(e, INPUT_LABELS))
        .is_some()
    {
        INPUT_LABELS
    } else {
        INPUT_Y
    };
    let mut out = TranscriptWriter::new(String::new());
    let _ = out.header();
    let _ = out.config(&cfg.to_line());
    let _ = out.target(target);
    let _ = out.plan(plan.plan_id(), plan.arena_elems());
    let data = cfg.data_digest(&train);
    let _ = out.data(data, train.len());
    let tensors = plan_model_tensors(&plan);
    let mut init = Fnv1a64::new();
    for (name, _) in &tensors {
        init.f32s(&model.parameter(name).map_err(device)?);
    }
    let _ = out.bind(plan.crc32(), data, init.finish(), plan.math().name());
    // Not reserved up front: a run description may claim 2^32 steps (32 GiB of digests).
    let mut states = Vec::new();
    let (losses, epoch_means) = cfg
        .each_step(&train, |x, t| {
            let loss = model.train_step_named(&[(INPUT_X, x), (target_name, t)])?;
            let mut h = Fnv1a64::new();
            for (name, _) in &tensors {
                h.f32s(&model.parameter(name)?);
            }
            states.push(h.finish());
            Ok(loss)
        })
        .map_err(device)?;
    write_steps(&mut out, cfg, &losses, &states, &epoch_means);
    for (name, _) in tensors {
        let _ = out.param(&name, &model.parameter(&name).map_err(device)?);
    }
    let _ = out.digest();
    let _ = out.end_ok();
    Ok(out.into_inner())
}
