//! Verifying a device's training run bit for bit against the host oracle.
//!
//! A target (the Cortex-M firmware in `firmware-demo/`, or any other) trains a model from a
//! plan and sends back a **transcript** ([`transcript`](crate::exec::transcript)): which run it
//! did ([`RunConfig`]), which plan and data it used, the bits of every step's loss, and the bits
//! of every final parameter. [`verify`] rebuilds the same job from the run's description,
//! retrains it with the [`Oracle`](crate::exec::oracle::Oracle) (tape interpreter + engine
//! reverse scan, no plan involved) over the same samples in the same order from the same
//! initial parameters, and compares every bit. A run of a plan file (`plan=PATH`) has no tape
//! on the host: its plan is replayed with the reference kernels
//! ([`replay_run`]) and compared the same way, over the
//! model's tensors (not the optimizer's state).
//!
//! The run and how both sides derive its data, initial parameters and order are in
//! [`crate::model::run`]; the shared arithmetic in [`crate::protocol`]; the outcome is a
//! [`Report`].

use tapeplan_core::Shape;

use crate::exec::oracle::{first_difference, oracle_run, same_bits};
use crate::exec::replay::{replay_run, ReplayError};
use crate::exec::report::{Report, StepDiff};
use crate::exec::transcript::{Record, Transcript, TranscriptReader};
use crate::model::run::plan_model_tensors;
use crate::model::{RunConfig, RunConfigError};
use crate::protocol::{digest_f32, Fnv1a64};

/// Why a run description, a transcript or a verification failed before any bit was compared.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The run description is refused, or its job or data could not be made.
    #[error(transparent)]
    Run(#[from] RunConfigError),
    /// A transcript line is malformed.
    #[error("transcript line {line}: {message}")]
    Transcript {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The transcript is missing something verification needs.
    #[error("transcript: {0}")]
    Incomplete(String),
    /// The device reported a failure in its `end` line.
    #[error("the device reported an error: {0}")]
    DeviceError(String),
    /// The device ran something other than what the host rebuilds.
    #[error("mismatch: {0}")]
    Mismatch(String),
    /// The oracle failed.
    #[error("oracle: {0}")]
    Oracle(#[from] tapeplan_core::TapeError),
    /// The replay of a `plan=` run failed.
    #[error("replay: {0}")]
    Replay(#[from] ReplayError),
    /// A streamed step differs from the host's (the first one).
    #[error("step {step} differs: {what}")]
    StepDiffers {
        /// The step, 1-based.
        step: usize,
        /// What differs, with the device's and the oracle's bits.
        what: String,
    },
}

/// The host's side of a run: what the device's transcript is compared with. Made once from
/// the run description ([`HostRun::new`]); [`verify_against`] and [`StreamVerifier`] compare
/// with it.
#[derive(Clone, Debug)]
pub struct HostRun {
    config: RunConfig,
    plan_id: u32,
    plan_crc32: u32,
    arena_elems: usize,
    data_digest: u64,
    rows: usize,
    init_digest: u64,
    losses: Vec<f32>,
    epoch_means: Vec<f32>,
    /// The model tensors' digest after each step.
    states: Vec<u64>,
    /// The model tensors the transcript carries, in order.
    shapes: Vec<(String, Shape)>,
    /// Their final values.
    params: Vec<Vec<f32>>,
}

impl HostRun {
    /// Retrains `cfg` on the host: a `plan=` run replays its plan file with the reference
    /// kernels ([`replay_run`]); any other run records its job and retrains it with the oracle
    /// ([`oracle_run`]).
    ///
    /// # Errors
    /// Planning, data, oracle and replay errors.
    pub fn new(cfg: &RunConfig) -> Result<HostRun, VerifyError> {
        let train = cfg.training_set()?;
        let data_digest = cfg.data_digest(&train);
        let rows = train.len();
        if let Some(bytes) = cfg.plan_bytes()? {
            let plan = tapeplan_runtime::Plan::parse_alloc(&bytes)
                .map_err(|e| VerifyError::Mismatch(format!("the run's plan is rejected: {e}")))?;
            let persistent = cfg.plan_initial_persistent(&bytes)?;
            let shapes = plan_model_tensors(&plan);
            let mut init = Fnv1a64::new();
            for (n, _) in &shapes {
                if let Some(b) = plan.parameter(n) {
                    init.f32s(persistent.get(b.range()).unwrap_or(&[]));
                }
            }
            let run = replay_run(cfg, &bytes, &train, &persistent)?;
            let params = shapes
                .iter()
                .map(|(n, _)| run.replay.parameter(n).map(<[f32]>::to_vec))
                .collect::<Result<_, _>>()?;
            return Ok(HostRun {
                config: cfg.clone(),
                plan_id: plan.plan_id(),
                plan_crc32: plan.crc32(),
                arena_elems: plan.arena_elems(),
                data_digest,
                rows,
                init_digest: init.finish(),
                losses: run.losses,
                epoch_means: run.epoch_means,
                states: run.states,
                shapes,
                params,
            });
        }
        let job = cfg.job()?;
        let bytes = job.schedule.to_bytes();
        let plan = tapeplan_runtime::Plan::parse_alloc(&bytes)
            .map_err(|e| VerifyError::Mismatch(format!("the host's own plan is rejected: {e}")))?;
        let init = cfg.initial_parameters(&job)?;
        let mut init_digest = Fnv1a64::new();
        for p in &init {
            init_digest.f32s(p);
        }
        let run = oracle_run(cfg, &job, &train, &init)?;
        Ok(HostRun {
            config: cfg.clone(),
            plan_id: plan.plan_id(),
            plan_crc32: plan.crc32(),
            arena_elems: plan.arena_elems(),
            data_digest,
            rows,
            init_digest: init_digest.finish(),
            losses: run.losses,
            epoch_means: run.epoch_means,
            states: run.states,
            shapes: job.parameter_shapes(),
            params: run.oracle.params.iter().map(|p| p.data.clone()).collect(),
        })
    }

    /// The digest of the model tensors after each step (the `state` lines a device's
    /// transcript must carry), step 1 first.
    pub fn states(&self) -> &[u64] {
        &self.states
    }

    /// The run it retrained.
    pub fn config(&self) -> &RunConfig {
        &self.config
    }

    /// Checks what the transcript has said so far of its plan, data, initial parameters and
    /// math profile (its `plan`, `data` and `bind` lines, those it has).
    ///
    /// # Errors
    /// [`VerifyError::Mismatch`] naming the field, the device's value and the host's.
    pub fn check_header(&self, t: &Transcript) -> Result<(), VerifyError> {
        if let Some((id, arena)) = t.plan {
            if (id, arena) != (self.plan_id, self.arena_elems) {
                return Err(VerifyError::Mismatch(format!(
                    "the device ran plan {id:#010x} (arena {arena} elems), the host plans {:#010x} (arena {} elems) from the run description: do its model, math= and fusion= match the device's build?",
                    self.plan_id,
                    self.arena_elems
                )));
            }
        }
        if let Some((digest, rows)) = t.data {
            if (digest, rows) != (self.data_digest, self.rows) {
                return Err(VerifyError::Mismatch(format!(
                    "the device's data digest is {digest:#018x} over {rows} rows, the host's {:#018x} over {}",
                    self.data_digest, self.rows
                )));
            }
        }
        if let Some(b) = &t.bind {
            let mismatch = |field: &str, device: String, host: String| {
                Err(VerifyError::Mismatch(format!(
                    "bind {field}: the device's is {device}, the host's {host}"
                )))
            };
            if b.plan_crc32 != self.plan_crc32 {
                return mismatch(
                    "plan (the plan's checksum)",
                    format!("{:08x}", b.plan_crc32),
                    format!("{:08x}", self.plan_crc32),
                );
            }
            if b.data != self.data_digest {
                return mismatch(
                    "data (the data digest)",
                    format!("{:016x}", b.data),
                    format!("{:016x}", self.data_digest),
                );
            }
            if b.init != self.init_digest {
                return mismatch(
                    "init (the initial parameters' digest)",
                    format!("{:016x}", b.init),
                    format!("{:016x}", self.init_digest),
                );
            }
            if b.math != self.config.math {
                return mismatch(
                    "math (the math profile)",
                    b.math.to_string(),
                    self.config.math.to_string(),
                );
            }
        }
        Ok(())
    }
}

/// Rebuilds the transcript's run on the host, retrains it with the oracle ([`oracle_run`]) and
/// compares every loss and final parameter bit for bit (NaNs compare as one class).
///
/// `expected`, when given, is the run the caller meant the device to do: a transcript of
/// another run is a [`VerifyError::Mismatch`].
///
/// # Errors
/// [`VerifyError::Mismatch`] when the device ran another run, plan (id, checksum or arena
/// size), data (digest or rows), initial parameters or math profile;
/// [`VerifyError::Incomplete`] for missing or extra steps or parameters; planning, data and
/// oracle errors. Bit differences are not errors: they are in the [`Report`] (see
/// [`Report::passed`]).
pub fn verify(t: &Transcript, expected: Option<&RunConfig>) -> Result<Report, VerifyError> {
    if let Some(e) = expected {
        if e != &t.config {
            return Err(VerifyError::Mismatch(format!(
                "the device ran `{}`, expected `{e}`",
                t.config
            )));
        }
    }
    // A transcript that cannot be the run's is refused before the run is retrained (a run
    // description may claim up to 2^32 steps: hours on the host).
    all_steps(t, &t.config)?;
    verify_against(t, &HostRun::new(&t.config)?)
}

/// Whether the transcript has a `loss` line for every step of `cfg`.
///
/// # Errors
/// [`VerifyError::Incomplete`] with both counts.
fn all_steps(t: &Transcript, cfg: &RunConfig) -> Result<(), VerifyError> {
    let steps = cfg.total_steps();
    if t.losses.len() != steps {
        return Err(VerifyError::Incomplete(format!(
            "{} loss lines for a run of {steps} steps",
            t.losses.len()
        )));
    }
    Ok(())
}

/// [`verify`] against a host run made before (its run must be the transcript's).
///
/// # Errors
/// As [`verify`].
pub fn verify_against(t: &Transcript, host: &HostRun) -> Result<Report, VerifyError> {
    let cfg = &t.config;
    if cfg != &host.config {
        return Err(VerifyError::Mismatch(format!(
            "the device ran `{cfg}`, expected `{}`",
            host.config
        )));
    }
    host.check_header(t)?;
    all_steps(t, cfg)?;
    let steps = cfg.total_steps();
    if t.epoch_means.len() > cfg.epochs {
        return Err(VerifyError::Incomplete(format!(
            "{} epoch lines for a run of {} epochs",
            t.epoch_means.len(),
            cfg.epochs
        )));
    }

    let run = host;
    let mut identical = 0;
    let mut first_step_diff = None;
    for (step, (&device, &loss)) in t.losses.iter().zip(&run.losses).enumerate() {
        if same_bits(f32::from_bits(device), loss) {
            identical += 1;
        } else if first_step_diff.is_none() {
            first_step_diff = Some(StepDiff {
                step: step + 1,
                epoch: step / cfg.steps_per_epoch().max(1) + 1,
                device_bits: device,
                oracle_bits: loss.to_bits(),
            });
        }
    }
    let mut epochs_same = 0;
    let mut first_epoch_diff = None;
    for (epoch, (&device, &mean)) in t.epoch_means.iter().zip(&run.epoch_means).enumerate() {
        if same_bits(f32::from_bits(device), mean) {
            epochs_same += 1;
        } else if first_epoch_diff.is_none() {
            first_epoch_diff = Some((epoch + 1, device, mean.to_bits()));
        }
    }
    let states_same = t
        .states
        .iter()
        .zip(&run.states)
        .filter(|(d, h)| d == h)
        .count();
    let first_state_diff = t
        .states
        .iter()
        .zip(&run.states)
        .position(|(d, h)| d != h)
        .map(|i| (i + 1, t.states[i], run.states[i]));

    // Final parameters, in the host's order.
    let shapes = &host.shapes;
    for (name, _) in &t.params {
        if !shapes.iter().any(|(n, _)| n == name) {
            return Err(VerifyError::Incomplete(format!(
                "the device sent an unknown parameter {name:?}"
            )));
        }
    }
    let mut device: Vec<Vec<f32>> = Vec::new();
    for (name, shape) in shapes {
        let bits = t
            .params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, b)| b)
            .ok_or_else(|| {
                VerifyError::Incomplete(format!("no `param {name}` lines: parameter missing"))
            })?;
        if bits.len() != shape.elems() {
            return Err(VerifyError::Incomplete(format!(
                "parameter {name} has {} elements, the device sent {}",
                shape.elems(),
                bits.len()
            )));
        }
        device.push(bits.iter().map(|&b| f32::from_bits(b)).collect());
    }
    let names: Vec<&str> = shapes.iter().map(|(n, _)| n.as_str()).collect();
    let left: Vec<&[f32]> = device.iter().map(Vec::as_slice).collect();
    let right: Vec<&[f32]> = host.params.iter().map(Vec::as_slice).collect();
    let first_param_diff = first_difference(names.iter().copied(), &left, &right);
    let elems: usize = right.iter().map(|p| p.len()).sum();
    let same_elems = left
        .iter()
        .zip(&right)
        .flat_map(|(l, r)| l.iter().zip(r.iter()))
        .filter(|(a, b)| same_bits(**a, **b))
        .count();

    // The digest over the parameters in the order the device sent them.
    let mut concat: Vec<f32> = Vec::with_capacity(elems);
    for (name, _) in &t.params {
        if let Some(i) = names.iter().position(|n| n == name) {
            concat.extend_from_slice(right[i]);
        }
    }
    let host_digest = digest_f32(&concat);

    Ok(Report {
        config: cfg.clone(),
        target: t.target.clone(),
        steps,
        identical_steps: identical,
        first_step_diff,
        epoch_means: (t.epoch_means.len(), epochs_same),
        first_epoch_diff,
        states: (t.states.len(), states_same),
        first_state_diff,
        param_elems: (elems, same_elems),
        first_param_diff,
        digest: (host_digest, t.digest.map(|d| d == host_digest)),
    })
}

/// Verifies a transcript as it arrives, a line at a time (`tapeplan verify --serial`): the
/// `config` line is checked against the expected run as soon as it arrives, the `plan`, `data`
/// and `bind` lines before the first step, and each step's `loss` and `state` against the host's
/// retraining ([`HostRun::new`]), so the first difference stops the run at its step. The `end ok`
/// line answers the same [`Report`] as [`verify`].
///
/// [`StreamVerifier::new`] retrains the whole run first; [`StreamVerifier::spawn`] retrains it
/// on another thread while the lines are read (their structure and the `config` line are
/// checked at once; the checks against the host's retraining wait for it), so a long run, or a
/// run description absurdly long, never keeps the stream unread.
#[derive(Debug)]
pub struct StreamVerifier {
    expected: RunConfig,
    host: Host,
    reader: TranscriptReader,
    /// Records read but not yet checked against the host (it is still retraining), with
    /// their line numbers.
    queued: std::collections::VecDeque<(usize, Record)>,
    /// The line of the record checked last (or being checked).
    line_checked: usize,
    steps_checked: usize,
}

/// The host's side of a [`StreamVerifier`]: retrained, or retraining on another thread.
#[derive(Debug)]
enum Host {
    Ready(Box<HostRun>),
    Retraining(std::sync::mpsc::Receiver<Result<HostRun, VerifyError>>),
}

impl StreamVerifier {
    /// A verifier of a device's run of `expected`, once the host has retrained it.
    ///
    /// # Errors
    /// As [`HostRun::new`].
    pub fn new(expected: &RunConfig) -> Result<StreamVerifier, VerifyError> {
        Ok(StreamVerifier::with_host(
            expected,
            Host::Ready(Box::new(HostRun::new(expected)?)),
        ))
    }

    /// A verifier of a device's run of `expected` that retrains it on a new thread
    /// ([`HostRun::new`]) while lines are read; its errors come from
    /// [`StreamVerifier::line`] or [`StreamVerifier::poll`]. The thread runs the retraining to
    /// its end even when the verifier is dropped first (a process that gives up exits).
    pub fn spawn(expected: &RunConfig) -> StreamVerifier {
        let (tx, rx) = std::sync::mpsc::channel();
        let cfg = expected.clone();
        std::thread::spawn(move || {
            // The receiver may be gone (the stream failed first): nothing to tell then.
            let _ = tx.send(HostRun::new(&cfg));
        });
        StreamVerifier::with_host(expected, Host::Retraining(rx))
    }

    fn with_host(expected: &RunConfig, host: Host) -> StreamVerifier {
        StreamVerifier {
            expected: expected.clone(),
            host,
            reader: TranscriptReader::new().expecting(expected),
            queued: std::collections::VecDeque::new(),
            line_checked: 0,
            steps_checked: 0,
        }
    }

    /// This verifier, reading the relative paths of the device's `config` line from folder
    /// `dir` (the run description's folder, as [`RunConfig::from_file`] reads it); call it
    /// before the first line.
    pub fn relative_to(mut self, dir: &std::path::Path) -> StreamVerifier {
        self.reader = self.reader.relative_to(dir);
        self
    }

    /// Steps whose loss has been checked identical so far (the state digest of the last one
    /// may be still to come).
    pub fn steps_checked(&self) -> usize {
        self.steps_checked
    }

    /// The line (1-based) of the record checked last against the host, or whose check
    /// failed: the line an error of [`StreamVerifier::line`] or [`StreamVerifier::poll`]
    /// is about; 0 before any, and when the host's retraining failed (an error about the run
    /// description, not a line).
    pub fn line_checked(&self) -> usize {
        self.line_checked
    }

    /// Whether the host has retrained the run (always, for [`StreamVerifier::new`]).
    pub fn host_ready(&self) -> bool {
        matches!(self.host, Host::Ready(_))
    }

    /// Reads and checks line `line` (1-based); answers the report after `end ok`. At `end ok`
    /// it waits for the host's retraining, if still under way.
    ///
    /// # Errors
    /// Every error of [`TranscriptReader::line`]; [`VerifyError::Mismatch`] for another run,
    /// plan, data, initial parameters or math profile; [`VerifyError::StepDiffers`] for the
    /// first step whose loss or state digest differs from the host's; at `end ok`, every error
    /// of [`verify_against`]; the errors of [`HostRun::new`].
    pub fn line(&mut self, line: usize, text: &str) -> Result<Option<Report>, VerifyError> {
        self.line_checked = line;
        let record = self.reader.line(line, text)?;
        if record == Record::Config {
            if let Some(cfg) = self.reader.config() {
                if cfg != &self.expected {
                    return Err(VerifyError::Mismatch(format!(
                        "the device runs `{cfg}`, expected `{}`",
                        self.expected
                    )));
                }
            }
        }
        if record == Record::End {
            // A transcript that cannot be the run's does not wait for the host's retraining.
            all_steps(self.reader.so_far(), &self.expected)?;
        }
        self.queued.push_back((line, record));
        self.check_queued(record == Record::End)
    }

    /// Checks the lines read so far against the host's retraining if it has finished (without
    /// waiting for it); answers the report when `end ok` was among them.
    ///
    /// # Errors
    /// As [`StreamVerifier::line`].
    pub fn poll(&mut self) -> Result<Option<Report>, VerifyError> {
        self.check_queued(false)
    }

    /// Takes the host's retraining if it has finished (waits for it when `wait`), then checks
    /// the queued records in order.
    fn check_queued(&mut self, wait: bool) -> Result<Option<Report>, VerifyError> {
        if let Host::Retraining(rx) = &self.host {
            let got = if wait {
                rx.recv().ok()
            } else {
                match rx.try_recv() {
                    Ok(r) => Some(r),
                    Err(std::sync::mpsc::TryRecvError::Empty) => return Ok(None),
                    Err(std::sync::mpsc::TryRecvError::Disconnected) => None,
                }
            };
            let host = got
                .ok_or_else(|| {
                    VerifyError::Incomplete("the host's retraining stopped without a result".into())
                })
                .flatten()
                .inspect_err(|_| self.line_checked = 0)?;
            self.host = Host::Ready(Box::new(host));
        }
        while let Some((line, record)) = self.queued.pop_front() {
            self.line_checked = line;
            if let Some(report) = self.check(record)? {
                return Ok(Some(report));
            }
        }
        Ok(None)
    }

    /// Checks one record against the host (ready).
    fn check(&mut self, record: Record) -> Result<Option<Report>, VerifyError> {
        let Host::Ready(host) = &self.host else {
            return Ok(None);
        };
        match record {
            Record::Bind => host.check_header(self.reader.so_far())?,
            Record::Loss(step) => {
                let t = self.reader.so_far();
                if step == 1 {
                    host.check_header(t)?;
                }
                let device = t.losses.get(step - 1).copied().unwrap_or(0);
                let oracle = host.losses.get(step - 1).copied().ok_or_else(|| {
                    VerifyError::Incomplete(format!(
                        "loss {step} for a run of {} steps",
                        host.losses.len()
                    ))
                })?;
                if !same_bits(f32::from_bits(device), oracle) {
                    return Err(VerifyError::StepDiffers {
                        step,
                        what: format!(
                            "loss: device {device:#010x} ({}) vs oracle {:#010x} ({oracle})",
                            f32::from_bits(device),
                            oracle.to_bits()
                        ),
                    });
                }
                self.steps_checked = step;
            }
            Record::State(step) => {
                let t = self.reader.so_far();
                let device = t.states.get(step - 1).copied().unwrap_or(0);
                let host_state = host.states.get(step - 1).copied().unwrap_or(0);
                if device != host_state {
                    return Err(VerifyError::StepDiffers {
                        step,
                        what: format!(
                            "parameter digest after the step: device {device:016x} vs oracle {host_state:016x}"
                        ),
                    });
                }
                self.steps_checked = step;
            }
            Record::End => {
                let reader = std::mem::take(&mut self.reader);
                let t = reader.finish()?;
                return verify_against(&t, host).map(Some);
            }
            Record::Config | Record::Skipped | Record::Start | Record::Epoch(_) | Record::Other => {
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::transcript::oracle_transcript;
    use crate::model::run::tests::small;
    use tapeplan_core::MathProfile;

    /// `arith=fma` is part of a run as `math=fast` is: it round-trips, plans an `fma` plan, and
    /// an fma run's transcript verifies under its own description only.
    #[test]
    fn the_arith_profile_is_part_of_the_run() {
        use tapeplan_core::ArithProfile;
        let separate = small();
        let fma = RunConfig {
            arith: ArithProfile::Fma,
            ..small()
        };
        assert!(fma.to_line().ends_with(" arith=fma"), "{}", fma.to_line());
        assert!(!separate.to_line().contains("arith="));
        assert_eq!(RunConfig::parse(&fma.to_line()).unwrap(), fma);
        let both = RunConfig {
            math: MathProfile::Fast,
            ..fma.clone()
        };
        assert!(both.to_line().ends_with(" math=fast arith=fma"));
        assert_eq!(RunConfig::parse(&both.to_line()).unwrap(), both);
        let e = RunConfig::parse(&format!("{} arith=fused", separate.to_line())).unwrap_err();
        assert!(e.to_string().contains("separate or fma"), "{e}");
        let fb = fma.job().unwrap().schedule.to_bytes();
        assert_eq!(
            tapeplan_runtime::Plan::parse_alloc(&fb).unwrap().arith(),
            ArithProfile::Fma
        );
        let text = oracle_transcript(&fma).unwrap();
        let t = Transcript::parse(&text).unwrap();
        assert!(verify(&t, Some(&fma)).unwrap().passed());
        assert!(matches!(
            verify(&t, Some(&separate)),
            Err(VerifyError::Mismatch(_))
        ));
        let sb = separate.job().unwrap().schedule.to_bytes();
        assert_ne!(
            tapeplan_runtime::Plan::parse_alloc(&sb).unwrap().plan_id(),
            tapeplan_runtime::Plan::parse_alloc(&fb).unwrap().plan_id()
        );
    }

    #[test]
    fn the_math_profile_is_part_of_the_run() {
        let precise = small();
        let fast = RunConfig {
            math: MathProfile::Fast,
            ..small()
        };
        // `math=fast` round-trips; precise lines do not name the profile.
        assert!(fast.to_line().ends_with(" math=fast"), "{}", fast.to_line());
        assert!(!precise.to_line().contains("math="));
        assert_eq!(RunConfig::parse(&fast.to_line()).unwrap(), fast);
        assert_eq!(
            RunConfig::parse(&format!("{} math=precise", precise.to_line())).unwrap(),
            precise
        );
        let e = RunConfig::parse(&format!("{} math=approx", precise.to_line())).unwrap_err();
        assert!(e.to_string().contains("precise or fast"), "{e}");
        // The two profiles plan different plans (flag bit 0 and the id), and train differently.
        let (pj, fj) = (precise.job().unwrap(), fast.job().unwrap());
        let (pb, fb) = (pj.schedule.to_bytes(), fj.schedule.to_bytes());
        let (pp, fp) = (
            tapeplan_runtime::Plan::parse_alloc(&pb).unwrap(),
            tapeplan_runtime::Plan::parse_alloc(&fb).unwrap(),
        );
        assert_eq!(
            (pp.math(), fp.math()),
            (MathProfile::Precise, MathProfile::Fast)
        );
        assert_ne!(pp.plan_id(), fp.plan_id());
        // A fast run's transcript verifies under its own description, and is a mismatch for
        // the precise one.
        let text = oracle_transcript(&fast).unwrap();
        let t = Transcript::parse(&text).unwrap();
        assert!(verify(&t, Some(&fast)).unwrap().passed());
        assert!(matches!(
            verify(&t, Some(&precise)),
            Err(VerifyError::Mismatch(_))
        ));
        // Relabelled as precise, its plan id no longer matches the host's precise plan.
        let relabelled = text.replacen(" math=fast", "", 1);
        let t = Transcript::parse(&relabelled).unwrap();
        assert!(matches!(verify(&t, None), Err(VerifyError::Mismatch(_))));
    }

    #[test]
    fn a_good_transcript_verifies() {
        let c = small();
        let text = oracle_transcript(&c).unwrap();
        let t = Transcript::parse(&text).unwrap();
        assert_eq!(t.losses.len(), 8);
        let r = verify(&t, Some(&c)).unwrap();
        assert!(r.passed(), "{r}");
        let shown = r.to_string();
        assert!(
            shown.starts_with("bitwise: 8/8 steps identical\n"),
            "{shown}"
        );
        assert!(
            shown.contains("parameters: 610/610 elements bitwise identical"),
            "{shown}"
        );
        assert!(shown.contains("(device agrees)"), "{shown}");
        assert!(
            shown.contains("state digests: 8/8 steps identical"),
            "{shown}"
        );
        // A transcript without the optional `bind` and `state` lines (an older device's)
        // still verifies, on its losses and parameters.
        let older: String = text
            .lines()
            .filter(|l| !l.starts_with("bind ") && !l.starts_with("state "))
            .map(|l| format!("{l}\n"))
            .collect();
        let r = verify(&Transcript::parse(&older).unwrap(), Some(&c)).unwrap();
        assert!(r.passed(), "{r}");
        assert_eq!(r.states, (0, 0));
        // `state` lines for some steps only are refused.
        let some: String = text
            .lines()
            .filter(|l| !l.starts_with("state 8 "))
            .map(|l| format!("{l}\n"))
            .collect();
        let e = Transcript::parse(&some).unwrap_err();
        assert!(matches!(e, VerifyError::Incomplete(_)), "{e}");
    }

    /// Flips the lowest bit of the `index`-th hex word of the first line starting with `prefix`.
    fn flip(text: &str, prefix: &str, word: usize) -> String {
        let mut done = false;
        text.lines()
            .map(|l| {
                if !done && l.starts_with(prefix) {
                    done = true;
                    let mut f: Vec<String> = l.split(' ').map(str::to_string).collect();
                    let v = u32::from_str_radix(&f[word], 16).unwrap() ^ 1;
                    f[word] = format!("{v:08x}");
                    f.join(" ") + "\n"
                } else {
                    format!("{l}\n")
                }
            })
            .collect()
    }

    #[test]
    fn a_flipped_loss_bit_names_the_step() {
        let c = small();
        let text = flip(&oracle_transcript(&c).unwrap(), "loss 3 ", 2);
        let r = verify(&Transcript::parse(&text).unwrap(), None).unwrap();
        assert!(!r.passed());
        assert_eq!(r.identical_steps, 7);
        let d = r.first_step_diff.as_ref().unwrap();
        assert_eq!((d.step, d.epoch), (3, 1));
        assert_eq!(d.device_bits ^ d.oracle_bits, 1);
        let shown = r.to_string();
        assert!(shown.starts_with("bitwise: 7/8 steps identical"), "{shown}");
        assert!(
            shown.contains("step 3 (epoch 1), tensor loss element 0"),
            "{shown}"
        );
    }

    #[test]
    fn a_flipped_parameter_bit_names_tensor_and_element() {
        let c = small();
        // `param w2 8 …`: elements 8..16 of w2; flip element 8 + 2 = 10.
        let text = flip(&oracle_transcript(&c).unwrap(), "param w2 8 ", 5);
        let r = verify(&Transcript::parse(&text).unwrap(), None).unwrap();
        assert!(!r.passed());
        assert_eq!(r.identical_steps, 8);
        let d = r.first_param_diff.as_ref().unwrap();
        assert_eq!((d.tensor.as_str(), d.element), ("w2", 10));
        assert_eq!(d.left_bits ^ d.right_bits, 1);
        assert_eq!(r.param_elems, (610, 609));
        assert_eq!(
            r.digest.1,
            Some(true),
            "the digest is the oracle's; the device's agrees"
        );
        let shown = r.to_string();
        assert!(shown.contains("tensor w2 element 10"), "{shown}");
        assert!(shown.contains("DIFFER"), "{shown}");
    }

    #[test]
    fn nan_payloads_compare_as_one_class() {
        assert!(same_bits(
            f32::from_bits(0x7fc0_0000),
            f32::from_bits(0xffc0_0000)
        ));
    }

    #[test]
    fn broken_transcripts_are_rejected() {
        let c = small();
        let good = oracle_transcript(&c).unwrap();
        let truncated: String = good.lines().take(12).map(|l| format!("{l}\n")).collect();
        assert!(matches!(
            Transcript::parse(&truncated),
            Err(VerifyError::Incomplete(_))
        ));
        let e = Transcript::parse(&good.replace("loss 2 ", "loss 9 ")).unwrap_err();
        assert!(matches!(e, VerifyError::Transcript { line: 9, .. }), "{e}");
        let e =
            Transcript::parse(&good.replace("end ok", "end error arena too small")).unwrap_err();
        assert!(matches!(e, VerifyError::DeviceError(ref m) if m == "arena too small"));
        let e = Transcript::parse(&good.replace("tapeplan-transcript 1", "hello")).unwrap_err();
        assert!(matches!(e, VerifyError::Incomplete(_)), "{e}");
        // Noise before the first line is skipped; noise inside is an error.
        assert!(Transcript::parse(&format!("Timer with period zero, disabling\n{good}")).is_ok());
        let e = Transcript::parse(&good.replace("loss 2 ", "noise\nloss 2 ")).unwrap_err();
        assert!(matches!(e, VerifyError::Transcript { line: 9, .. }), "{e}");
        // A different plan or data set is a mismatch, not a bit difference.
        let other_plan = good
            .lines()
            .map(|l| {
                if l.starts_with("plan ") {
                    "plan 00000000 1\n".to_string()
                } else {
                    format!("{l}\n")
                }
            })
            .collect::<String>();
        let e = verify(&Transcript::parse(&other_plan).unwrap(), None).unwrap_err();
        assert!(matches!(e, VerifyError::Mismatch(_)), "{e}");
        let mut other = c.clone();
        other.epochs = 3;
        let e = verify(&Transcript::parse(&good).unwrap(), Some(&other)).unwrap_err();
        assert!(matches!(e, VerifyError::Mismatch(_)), "{e}");
        // A missing step is incomplete.
        let missing: String = good
            .lines()
            .filter(|l| {
                !l.starts_with("loss 8 ")
                    && !l.starts_with("state 8 ")
                    && !l.starts_with("epoch 2 ")
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let e = verify(&Transcript::parse(&missing).unwrap(), None).unwrap_err();
        assert!(matches!(e, VerifyError::Incomplete(_)), "{e}");
    }
}
