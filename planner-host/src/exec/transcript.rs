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
    TranscriptWriter, ENTRY_TRAIN_STEP, INPUT_LABELS, INPUT_X, INPUT_Y, TRANSCRIPT_MAGIC,
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
    /// Loss bits, index `i` for step `i + 1`.
    pub losses: Vec<u32>,
    /// Epoch mean-loss bits, index `i` for epoch `i + 1`.
    pub epoch_means: Vec<u32>,
    /// Final parameter bits by name, in the order first seen.
    pub params: Vec<(String, Vec<u32>)>,
    /// The parameter digest the device reported.
    pub digest: Option<u64>,
    /// `info` lines, verbatim (without `info `).
    pub info: Vec<String>,
}

fn hex32(s: &str) -> Option<u32> {
    (s.len() == 8)
        .then(|| u32::from_str_radix(s, 16).ok())
        .flatten()
}

fn hex64(s: &str) -> Option<u64> {
    (s.len() == 16)
        .then(|| u64::from_str_radix(s, 16).ok())
        .flatten()
}

impl Transcript {
    /// Parses a transcript.
    ///
    /// # Errors
    /// [`VerifyError::Transcript`] for a malformed line (naming it), [`VerifyError::Incomplete`]
    /// for a missing header, `config` or `end` line, [`VerifyError::DeviceError`] for
    /// `end error …`.
    pub fn parse(text: &str) -> Result<Transcript, VerifyError> {
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.strip_suffix('\r').unwrap_or(l)))
            .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'));
        // Whatever comes before the first line (a UART's boot noise, an emulator's warnings)
        // is not part of the transcript.
        if !lines.any(|(_, l)| l.trim() == TRANSCRIPT_MAGIC) {
            return Err(VerifyError::Incomplete(format!(
                "no {TRANSCRIPT_MAGIC:?} line: not a transcript"
            )));
        }
        let mut config = None;
        let mut t = Transcript {
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
                fusion: false,
                math: MathProfile::Precise,
                arith: tapeplan_core::ArithProfile::Separate,
                optimizer: RunOptimizer::Sgd,
                data: RunData::Digits,
                init: RunInit::Glorot,
            },
            target: None,
            plan: None,
            data: None,
            losses: Vec::new(),
            epoch_means: Vec::new(),
            params: Vec::new(),
            digest: None,
            info: Vec::new(),
        };
        let mut ended = false;
        for (line, text) in lines {
            let bad = |message: String| VerifyError::Transcript { line, message };
            if ended {
                return Err(bad("a line after `end`".into()));
            }
            let (kind, rest) = text.split_once(' ').unwrap_or((text, ""));
            let fields: Vec<&str> = rest.split(' ').filter(|f| !f.is_empty()).collect();
            match kind {
                "config" => {
                    if config.is_some() {
                        return Err(bad("a second `config` line".into()));
                    }
                    config = Some(RunConfig::parse(rest).map_err(|e| bad(e.to_string()))?);
                }
                "target" => t.target = Some(rest.to_string()),
                "info" => t.info.push(rest.to_string()),
                "plan" => match fields[..] {
                    [id, arena] => {
                        let id = hex32(id).ok_or_else(|| bad(format!("plan id {id:?}")))?;
                        let arena = arena
                            .parse()
                            .map_err(|_| bad(format!("arena elems {arena:?}")))?;
                        t.plan = Some((id, arena));
                    }
                    _ => return Err(bad("expected `plan <hex8> <arena_elems>`".into())),
                },
                "data" => match fields[..] {
                    [d, rows] => {
                        let d = hex64(d).ok_or_else(|| bad(format!("data digest {d:?}")))?;
                        let rows = rows.parse().map_err(|_| bad(format!("rows {rows:?}")))?;
                        t.data = Some((d, rows));
                    }
                    _ => return Err(bad("expected `data <hex16> <rows>`".into())),
                },
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
                    if config.is_none() {
                        return Err(bad(format!("`{kind}` before `config`")));
                    }
                    list.push(hex32(bits).ok_or_else(|| bad(format!("bits {bits:?}")))?);
                }
                "param" => {
                    let [name, start, values @ ..] = &fields[..] else {
                        return Err(bad("expected `param <name> <start> <hex8>…`".into()));
                    };
                    let start: usize =
                        start.parse().map_err(|_| bad(format!("start {start:?}")))?;
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
                }
                "digest" => match fields[..] {
                    [d] => t.digest = Some(hex64(d).ok_or_else(|| bad(format!("digest {d:?}")))?),
                    _ => return Err(bad("expected `digest <hex16>`".into())),
                },
                "end" => match fields.first().copied() {
                    Some("ok") if fields.len() == 1 => ended = true,
                    Some("error") => {
                        return Err(VerifyError::DeviceError(
                            rest.strip_prefix("error").unwrap_or("").trim().to_string(),
                        ))
                    }
                    _ => return Err(bad("expected `end ok` or `end error <text>`".into())),
                },
                other => return Err(bad(format!("unknown record {other:?}"))),
            }
        }
        if !ended {
            return Err(VerifyError::Incomplete(
                "no `end ok` line: the transcript is truncated".into(),
            ));
        }
        t.config = config.ok_or_else(|| VerifyError::Incomplete("no `config` line".into()))?;
        Ok(t)
    }
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
    let _ = out.data(cfg.data_digest(&train), train.len());
    let run = oracle_run(cfg, &job, &train, &cfg.initial_parameters(&job)?)?;
    write_steps(&mut out, cfg, &run.losses, &run.epoch_means);
    for ((name, _), p) in job.parameter_shapes().iter().zip(&run.oracle.params) {
        let _ = out.param(name, &p.data);
    }
    let _ = out.digest();
    let _ = out.end_ok();
    Ok(out.into_inner())
}

/// The `loss` and `epoch` lines of a run, each epoch's losses before its mean.
fn write_steps(
    out: &mut TranscriptWriter<String>,
    cfg: &RunConfig,
    losses: &[f32],
    epoch_means: &[f32],
) {
    // Writing into a `String` cannot fail.
    let steps = losses.chunks(cfg.steps_per_epoch().max(1));
    for (epoch, (losses, mean)) in steps.zip(epoch_means).enumerate() {
        let first = epoch * cfg.steps_per_epoch();
        for (k, loss) in losses.iter().enumerate() {
            let _ = out.loss(first + k + 1, *loss);
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
    let _ = out.data(cfg.data_digest(&train), train.len());
    let (losses, epoch_means) = cfg
        .each_step(&train, |x, t| {
            model.train_step_named(&[(INPUT_X, x), (target_name, t)])
        })
        .map_err(device)?;
    write_steps(&mut out, cfg, &losses, &epoch_means);
    for (name, _) in plan_model_tensors(&plan) {
        let _ = out.param(&name, &model.parameter(&name).map_err(device)?);
    }
    let _ = out.digest();
    let _ = out.end_ok();
    Ok(out.into_inner())
}
