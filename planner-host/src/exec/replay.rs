//! Replaying a plan file on the host with the reference kernels: the oracle side of a run that
//! trains a plan made elsewhere (`plan=PATH` in a [`RunConfig`]), for which no tape is at hand.
//!
//! [`PlanReplay`] decodes validated plan bytes ([`PlanInfo`]) and runs an entry instruction by
//! instruction through [`tapeplan_core::ops::eval`] over a `Vec` arena, every argument copied
//! out before the output is written, each fused chain's registers kept whole (as
//! [`Schedule::run_host`](crate::plan::Schedule::run_host) does for a schedule before
//! serialization). It shares the plan's bytes with the device but none of the runtime's
//! executor: not its in-place paths, its fused tiles, its slicing or its kernels' dispatch.
//! A guarded entry (its updates in scratch) commits its updates only when every output and
//! update is finite, as the runtime does.

use std::collections::BTreeMap;

use tapeplan_core::format::{BindingKind, TensorKind};
use tapeplan_core::{ops, ArithProfile, MathProfile, Shape};

use crate::io::data::Dataset;
use crate::io::inspect::PlanInfo;
use crate::model::RunConfig;
use crate::protocol::{ENTRY_INIT, ENTRY_TRAIN_STEP, INPUT_LABELS, INPUT_X, INPUT_Y, OUTPUT_LOSS};

/// Why a replay failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The runtime's validator rejected the plan's bytes.
    #[error("plan rejected: {0}")]
    Plan(tapeplan_runtime::ParseError),
    /// The plan has no entry of that name.
    #[error("the plan has no entry named {0:?}")]
    UnknownEntry(String),
    /// The entry has no binding of that kind and name.
    #[error("the plan's {entry} has no {kind} named {name:?}")]
    UnknownBinding {
        /// The entry (`*` for parameters, which every entry shares).
        entry: String,
        /// `input`, `output` or `parameter`.
        kind: &'static str,
        /// The name.
        name: String,
    },
    /// Values of the wrong length for a binding.
    #[error("{name} holds {expected_elems} elements, {found_elems} were given")]
    Length {
        /// The binding's name.
        name: String,
        /// Its elements.
        expected_elems: usize,
        /// The values given.
        found_elems: usize,
    },
    /// A reference kernel failed.
    #[error("instruction {instr} of {entry}: {error}")]
    Kernel {
        /// The entry.
        entry: String,
        /// The instruction's index in the entry.
        instr: usize,
        /// The kernel's error.
        error: ops::OpError,
    },
    /// A guarded entry produced a non-finite output or update, so nothing was committed (the
    /// runtime's `NonFinite`).
    #[error("{entry}: {name} element {element} is not finite; the step was not committed")]
    NonFinite {
        /// The entry.
        entry: String,
        /// The output or update.
        name: String,
        /// The element.
        element: usize,
    },
}

/// A plan replayed with the reference kernels; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct PlanReplay {
    info: PlanInfo,
    math: MathProfile,
    arith: ArithProfile,
    arena: Vec<f32>,
}

impl PlanReplay {
    /// Validates `bytes` with the runtime's validator, decodes them, allocates the arena (zeros)
    /// and runs the plan's `init` entry when it has one (the optimizer's state).
    ///
    /// # Errors
    /// [`ReplayError::Plan`] for rejected bytes; kernel errors of `init`.
    pub fn new(bytes: &[u8]) -> Result<PlanReplay, ReplayError> {
        let plan = tapeplan_runtime::Plan::parse_alloc(bytes).map_err(ReplayError::Plan)?;
        let info = PlanInfo::decode(bytes);
        let mut replay = PlanReplay {
            math: plan.math(),
            arith: plan.arith(),
            arena: vec![0.0; plan.arena_elems()],
            info,
        };
        if replay.has_entry(ENTRY_INIT) {
            replay.run(ENTRY_INIT)?;
        }
        Ok(replay)
    }

    /// The decoded plan.
    pub fn info(&self) -> &PlanInfo {
        &self.info
    }

    /// True when the plan has an entry named `entry`.
    pub fn has_entry(&self, entry: &str) -> bool {
        self.info.entries.iter().any(|e| e.name == entry)
    }

    fn entry_index(&self, entry: &str) -> Result<usize, ReplayError> {
        self.info
            .entries
            .iter()
            .position(|e| e.name == entry)
            .ok_or_else(|| ReplayError::UnknownEntry(entry.to_owned()))
    }

    /// The arena range of a tensor (registers have none).
    fn range(&self, tensor: usize) -> std::ops::Range<usize> {
        let t = self.info.tensors.get(tensor);
        let lo = t.map_or(0, |t| t.offset_elems as usize);
        let elems = t.map_or(0, |t| tensor_shape(t).elems());
        lo..lo + elems
    }

    /// The tensor of the binding of `kind` named `name` in `entry` (`None`: a parameter).
    fn binding(
        &self,
        entry: Option<&str>,
        kind: BindingKind,
        name: &str,
    ) -> Result<usize, ReplayError> {
        let ei = entry.map(|e| self.entry_index(e)).transpose()?;
        self.info
            .bindings
            .iter()
            .find(|b| b.kind == kind && b.entry == ei && b.name == name)
            .map(|b| b.tensor)
            .ok_or_else(|| ReplayError::UnknownBinding {
                entry: entry.unwrap_or("*").to_owned(),
                kind: match kind {
                    BindingKind::Input => "input",
                    BindingKind::Output => "output",
                    BindingKind::Parameter => "parameter",
                    BindingKind::Update => "update",
                },
                name: name.to_owned(),
            })
    }

    fn write(&mut self, tensor: usize, name: &str, values: &[f32]) -> Result<(), ReplayError> {
        let range = self.range(tensor);
        let dst = self
            .arena
            .get_mut(range.clone())
            .filter(|d| d.len() == values.len())
            .ok_or_else(|| ReplayError::Length {
                name: name.to_owned(),
                expected_elems: range.len(),
                found_elems: values.len(),
            })?;
        dst.copy_from_slice(values);
        Ok(())
    }

    /// Sets `entry`'s input `name`.
    ///
    /// # Errors
    /// An unknown entry or input, or values of another length.
    pub fn set_input(
        &mut self,
        entry: &str,
        name: &str,
        values: &[f32],
    ) -> Result<(), ReplayError> {
        let t = self.binding(Some(entry), BindingKind::Input, name)?;
        self.write(t, name, values)
    }

    /// Loads the persistent tensor `name` (a parameter, a buffer or optimizer state).
    ///
    /// # Errors
    /// An unknown name, or values of another length.
    pub fn load_parameter(&mut self, name: &str, values: &[f32]) -> Result<(), ReplayError> {
        let t = self.binding(None, BindingKind::Parameter, name)?;
        self.write(t, name, values)
    }

    /// The persistent tensor `name` as it stands.
    ///
    /// # Errors
    /// An unknown name.
    pub fn parameter(&self, name: &str) -> Result<&[f32], ReplayError> {
        let t = self.binding(None, BindingKind::Parameter, name)?;
        Ok(&self.arena[self.range(t)])
    }

    /// `entry`'s output `name` after a run.
    ///
    /// # Errors
    /// An unknown entry or output.
    pub fn output(&self, entry: &str, name: &str) -> Result<&[f32], ReplayError> {
        let t = self.binding(Some(entry), BindingKind::Output, name)?;
        Ok(&self.arena[self.range(t)])
    }

    /// The persistent region `[0, persistent_elems)` as it stands.
    pub fn persistent(&self) -> &[f32] {
        let n = (self.info.header.persistent_elems as usize).min(self.arena.len());
        &self.arena[..n]
    }

    /// Runs `entry`: every instruction through the reference kernels, then the commit of a
    /// guarded entry.
    ///
    /// # Errors
    /// [`ReplayError::UnknownEntry`], [`ReplayError::Kernel`], and [`ReplayError::NonFinite`]
    /// when a guarded entry refuses the step (its parameters are then unchanged).
    pub fn run(&mut self, entry: &str) -> Result<(), ReplayError> {
        let ei = self.entry_index(entry)?;
        let instrs = self.info.entries[ei].instrs.clone();
        let mut registers: BTreeMap<u32, Vec<f32>> = BTreeMap::new();
        for (k, i) in instrs.iter().enumerate() {
            let kernel = |error| ReplayError::Kernel {
                entry: entry.to_owned(),
                instr: k,
                error,
            };
            let n = i.op.arity();
            let mut shapes: Vec<Shape> = Vec::with_capacity(n);
            let mut args: Vec<Vec<f32>> = Vec::with_capacity(n);
            for &a in i.args.iter().take(n) {
                let Some(t) = self.info.tensors.get(a as usize) else {
                    return Err(kernel(ops::OpError::Leaf { op: i.op }));
                };
                shapes.push(tensor_shape(t));
                args.push(if t.kind == TensorKind::Register as u8 {
                    registers.get(&a).cloned().unwrap_or_default()
                } else {
                    self.arena
                        .get(self.range(a as usize))
                        .map(<[f32]>::to_vec)
                        .unwrap_or_default()
                });
            }
            let arg_refs: Vec<&[f32]> = args.iter().map(Vec::as_slice).collect();
            let out = self.info.tensors.get(i.out as usize).copied();
            let is_register = out.is_some_and(|t| t.kind == TensorKind::Register as u8);
            let len = out.map_or(0, |t| tensor_shape(&t).elems());
            let mut register = vec![0.0; len];
            let range = self.range(i.out as usize);
            let dst = if is_register {
                &mut register[..]
            } else {
                self.arena.get_mut(range).ok_or_else(|| {
                    kernel(ops::OpError::BufferLength {
                        op: i.op,
                        expected_elems: len,
                        found_elems: 0,
                    })
                })?
            };
            ops::eval_arith(i.op, i.attr, self.math, self.arith, &arg_refs, &shapes, dst)
                .map_err(kernel)?;
            if is_register {
                registers.insert(i.out, register);
            }
        }
        self.commit(ei)
    }

    /// The end of a guarded entry (an update in scratch): when every output and update is
    /// finite, each update is copied over its parameter; otherwise nothing is.
    fn commit(&mut self, ei: usize) -> Result<(), ReplayError> {
        let mine = |kinds: &[BindingKind]| -> Vec<(String, usize)> {
            self.info
                .bindings
                .iter()
                .filter(|b| b.entry == Some(ei) && kinds.contains(&b.kind))
                .map(|b| (b.name.clone(), b.tensor))
                .collect()
        };
        let updates = mine(&[BindingKind::Update]);
        let guarded = updates.iter().any(|(_, t)| {
            self.info
                .tensors
                .get(*t)
                .is_some_and(|r| r.kind == TensorKind::Scratch as u8)
        });
        if !guarded {
            return Ok(());
        }
        for (name, t) in mine(&[BindingKind::Output, BindingKind::Update]) {
            if let Some(element) = self.arena[self.range(t)]
                .iter()
                .position(|v| !v.is_finite())
            {
                return Err(ReplayError::NonFinite {
                    entry: self.info.entries[ei].name.clone(),
                    name,
                    element,
                });
            }
        }
        for (name, t) in updates {
            let p = self.binding(None, BindingKind::Parameter, &name)?;
            let (from, to) = (self.range(t), self.range(p));
            if from.len() == to.len() {
                self.arena.copy_within(from, to.start);
            }
        }
        Ok(())
    }

    /// One `train_step` with the named inputs; answers the loss.
    ///
    /// # Errors
    /// As [`PlanReplay::set_input`] and [`PlanReplay::run`].
    pub fn train_step_named(&mut self, inputs: &[(&str, &[f32])]) -> Result<f32, ReplayError> {
        for (name, values) in inputs {
            self.set_input(ENTRY_TRAIN_STEP, name, values)?;
        }
        self.run(ENTRY_TRAIN_STEP)?;
        Ok(self
            .output(ENTRY_TRAIN_STEP, OUTPUT_LOSS)?
            .first()
            .copied()
            .unwrap_or(f32::NAN))
    }
}

fn tensor_shape(t: &tapeplan_core::format::TensorRecord) -> Shape {
    Shape::from_u32(t.rank as usize, t.dims).unwrap_or(Shape::SCALAR)
}

/// A plan run replayed: every step's loss, every epoch's mean loss (the `f32` sum of its
/// losses over its steps, as the device computes it), and the replay at its end.
#[derive(Clone, Debug)]
pub struct ReplayRun {
    /// Loss of step `i + 1` at index `i`.
    pub losses: Vec<f32>,
    /// Mean loss of epoch `i + 1` at index `i`.
    pub epoch_means: Vec<f32>,
    /// State digest after step `i + 1` at index `i`: the
    /// [`digest_f32`](crate::protocol::digest_f32) of the model tensors
    /// ([`plan_model_tensors`](crate::model::run::plan_model_tensors), in that order).
    pub states: Vec<u64>,
    /// The plan after the last step (its parameters are the run's result).
    pub replay: PlanReplay,
}

/// Replays the `plan=` run `cfg` over the plan `bytes`: loads the persistent region
/// `persistent` ([`RunConfig::plan_initial_persistent`]), then trains `cfg.epochs` epochs
/// over `train` in the run's epoch order ([`RunConfig::epoch_order`]), `cfg.batch` rows a
/// step, feeding `x` and `labels` (as `f32`) or `y`.
///
/// # Shapes
/// `persistent: [persistent_elems]`; `train`'s rows are the plan's `x` rows.
///
/// # Errors
/// As [`PlanReplay::new`] and [`PlanReplay::run`]; a guarded step that is refused
/// ([`ReplayError::NonFinite`]) ends the replay, as it ends the device's run.
pub fn replay_run(
    cfg: &RunConfig,
    bytes: &[u8],
    train: &Dataset,
    persistent: &[f32],
) -> Result<ReplayRun, ReplayError> {
    let mut replay = PlanReplay::new(bytes)?;
    let n = replay.persistent().len().min(persistent.len());
    replay.arena[..n].copy_from_slice(&persistent[..n]);
    let target = if replay
        .binding(Some(ENTRY_TRAIN_STEP), BindingKind::Input, INPUT_LABELS)
        .is_ok()
    {
        INPUT_LABELS
    } else {
        INPUT_Y
    };
    let names: Vec<String> = tapeplan_runtime::Plan::parse_alloc(bytes)
        .map(|plan| {
            crate::model::run::plan_model_tensors(&plan)
                .into_iter()
                .map(|(n, _)| n)
                .collect()
        })
        .unwrap_or_default();
    // Not reserved up front: a run description may claim 2^32 steps (32 GiB of digests).
    let mut states = Vec::new();
    let (losses, epoch_means) = cfg.each_step(train, |x, t| {
        let loss = replay.train_step_named(&[(INPUT_X, x), (target, t)])?;
        let mut h = crate::protocol::Fnv1a64::new();
        for n in &names {
            h.f32s(replay.parameter(n)?);
        }
        states.push(h.finish());
        Ok(loss)
    })?;
    Ok(ReplayRun {
        losses,
        epoch_means,
        states,
        replay,
    })
}
