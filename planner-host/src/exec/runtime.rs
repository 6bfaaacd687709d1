//! Training through the `no_std` runtime from a plan's bytes, on the host, and the per-step
//! bitwise check against the [`Oracle`](crate::exec::oracle::Oracle).

use tapeplan_runtime::{DecodedPlanBuf, EntryId, Plan as RtPlan, Session};

use crate::protocol::{
    ENTRY_FORWARD, ENTRY_INIT, ENTRY_TRAIN_STEP, INPUT_LABELS, INPUT_X, INPUT_Y, OUTPUT_LOGITS,
    OUTPUT_LOSS,
};

/// Errors of driving the runtime.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The plan's bytes were rejected.
    #[error("plan rejected: {0}")]
    Plan(tapeplan_runtime::ParseError),
    /// Binding or running failed.
    #[error("runtime: {0}")]
    Run(tapeplan_runtime::ExecError),
    /// The plan lacks an entry the trainer needs.
    #[error("the plan has no entry named {0:?}")]
    MissingEntry(&'static str),
    /// The plan lacks an entry a caller named.
    #[error("the plan has no entry named {0:?}")]
    UnknownEntry(String),
    /// The oracle failed.
    #[error("oracle: {0}")]
    Oracle(#[from] tapeplan_core::TapeError),
    /// The oracle refused a call.
    #[error("oracle: {0}")]
    OracleCall(#[from] crate::exec::oracle::OracleError),
}

impl From<tapeplan_runtime::ParseError> for TrainError {
    fn from(e: tapeplan_runtime::ParseError) -> Self {
        TrainError::Plan(e)
    }
}

impl From<tapeplan_runtime::ExecError> for TrainError {
    fn from(e: tapeplan_runtime::ExecError) -> Self {
        TrainError::Run(e)
    }
}

/// A model trained by the runtime: a validated plan and the arena it runs over.
pub struct RuntimeModel<'b> {
    plan: RtPlan<'b>,
    /// Every instruction decoded once: runs skip reading the records (`Session::run` as fast
    /// as `Session::run_program`).
    decoded: DecodedPlanBuf,
    arena: Vec<f32>,
    train: EntryId,
    forward: EntryId,
}

/// A session of `plan` over `arena` that runs from `decoded`.
fn bound<'s>(
    plan: &'s RtPlan<'_>,
    arena: &'s mut [f32],
    decoded: &'s DecodedPlanBuf,
) -> Result<Session<'s, 's>, TrainError> {
    Ok(Session::bind(plan, arena)?.with_decoded(decoded.as_decoded())?)
}

impl<'b> RuntimeModel<'b> {
    /// Decodes and validates `bytes`, allocates an arena of exactly the size the plan needs, and
    /// runs the plan's `init` entry if it has one (the optimizer state's initial values).
    ///
    /// # Errors
    /// [`TrainError::Plan`] for rejected bytes, [`TrainError::MissingEntry`] without `forward`
    /// and `train_step` entries.
    pub fn new(bytes: &'b [u8]) -> Result<RuntimeModel<'b>, TrainError> {
        let plan = RtPlan::parse_alloc(bytes)?;
        let train = plan
            .entry(ENTRY_TRAIN_STEP)
            .ok_or(TrainError::MissingEntry(ENTRY_TRAIN_STEP))?;
        let forward = plan
            .entry(ENTRY_FORWARD)
            .ok_or(TrainError::MissingEntry(ENTRY_FORWARD))?;
        let mut arena = vec![0.0f32; plan.arena_elems()];
        let decoded = DecodedPlanBuf::new(&plan)?;
        if let Some(init) = plan.entry(ENTRY_INIT) {
            bound(&plan, &mut arena, &decoded)?.run(init)?;
        }
        Ok(RuntimeModel {
            plan,
            decoded,
            arena,
            train,
            forward,
        })
    }

    /// True when the plan's `train_step` is guarded (commits only finite steps).
    pub fn is_guarded(&self) -> bool {
        self.plan
            .updates(self.train)
            .any(|u| u.tensor_kind == tapeplan_runtime::TensorKind::Scratch)
    }

    /// The validated plan.
    pub fn plan(&self) -> &RtPlan<'b> {
        &self.plan
    }

    /// The arena's size in bytes.
    pub fn arena_bytes(&self) -> usize {
        self.arena.len() * 4
    }

    /// Loads one parameter by name.
    ///
    /// # Errors
    /// Unknown name or wrong length.
    pub fn load_parameter(&mut self, name: &str, values: &[f32]) -> Result<(), TrainError> {
        Session::bind(&self.plan, &mut self.arena)?.load_parameter(name, values)?;
        Ok(())
    }

    /// A parameter's current value.
    ///
    /// # Errors
    /// Unknown name.
    pub fn parameter(&mut self, name: &str) -> Result<Vec<f32>, TrainError> {
        let s = Session::bind(&self.plan, &mut self.arena)?;
        Ok(s.parameter(name)?.to_vec())
    }

    /// The persistent region (every parameter) as it stands.
    pub fn persistent(&self) -> &[f32] {
        let n = self.plan.persistent_elems().min(self.arena.len());
        &self.arena[..n]
    }

    /// One `train_step`: sets `x` and the target (`labels` or `y`), runs, answers the loss.
    ///
    /// # Shapes
    /// `x: [batch, d_in]`; target `[batch]` labels or `[batch, d_out]`.
    ///
    /// # Errors
    /// Wrong lengths, or a runtime error.
    pub fn train_step(&mut self, x: &[f32], target: &[f32]) -> Result<f32, TrainError> {
        let e = self.train;
        let mut s = bound(&self.plan, &mut self.arena, &self.decoded)?;
        s.set_input(e, INPUT_X, x)?;
        let target_name = if self.plan.input(e, INPUT_LABELS).is_some() {
            INPUT_LABELS
        } else {
            INPUT_Y
        };
        s.set_input(e, target_name, target)?;
        s.run(e)?;
        Ok(s.output(e, OUTPUT_LOSS)?
            .first()
            .copied()
            .unwrap_or(f32::NAN))
    }

    /// Runs entry `entry` with its inputs set by name, and answers its output `output`.
    ///
    /// # Shapes
    /// Each input as the plan's binding of that name in that entry.
    ///
    /// # Errors
    /// [`TrainError::UnknownEntry`]; an unknown input or output name, a wrong length, or a
    /// runtime error ([`TrainError::Run`]).
    pub fn run_entry(
        &mut self,
        entry: &str,
        inputs: &[(&str, &[f32])],
        output: &str,
    ) -> Result<Vec<f32>, TrainError> {
        let e = self
            .plan
            .entry(entry)
            .ok_or_else(|| TrainError::UnknownEntry(entry.to_string()))?;
        let mut s = bound(&self.plan, &mut self.arena, &self.decoded)?;
        for (name, values) in inputs {
            s.set_input(e, name, values)?;
        }
        s.run(e)?;
        Ok(s.output(e, output)?.to_vec())
    }

    /// One `train_step` with every input set by name (the model's inputs and the target:
    /// `labels` or `y`); answers the loss.
    ///
    /// # Errors
    /// As [`RuntimeModel::run_entry`].
    pub fn train_step_named(&mut self, inputs: &[(&str, &[f32])]) -> Result<f32, TrainError> {
        let loss = self.run_entry(ENTRY_TRAIN_STEP, inputs, OUTPUT_LOSS)?;
        Ok(loss.first().copied().unwrap_or(f32::NAN))
    }

    /// The `forward` entry's output (`logits`) with the model's inputs set by name.
    ///
    /// # Errors
    /// As [`RuntimeModel::run_entry`].
    pub fn forward_named(&mut self, inputs: &[(&str, &[f32])]) -> Result<Vec<f32>, TrainError> {
        self.run_entry(ENTRY_FORWARD, inputs, OUTPUT_LOGITS)
    }

    /// The `forward_1` entry's output (`logits`, batch 1) with the model's inputs set by name.
    ///
    /// # Errors
    /// As [`RuntimeModel::run_entry`] ([`TrainError::UnknownEntry`] for a plan without it).
    pub fn forward_1(&mut self, inputs: &[(&str, &[f32])]) -> Result<Vec<f32>, TrainError> {
        self.run_entry(crate::model::ENTRY_FORWARD_1, inputs, OUTPUT_LOGITS)
    }

    /// The `eval_loss` entry's loss (inference mode, nothing updated) with every input set by
    /// name.
    ///
    /// # Errors
    /// As [`RuntimeModel::run_entry`] ([`TrainError::UnknownEntry`] for a plan without it).
    pub fn eval_loss(&mut self, inputs: &[(&str, &[f32])]) -> Result<f32, TrainError> {
        let loss = self.run_entry(crate::model::ENTRY_EVAL_LOSS, inputs, OUTPUT_LOSS)?;
        Ok(loss.first().copied().unwrap_or(f32::NAN))
    }

    /// The `forward` entry's logits for one batch.
    ///
    /// # Errors
    /// Wrong lengths, or a runtime error.
    pub fn logits(&mut self, x: &[f32]) -> Result<Vec<f32>, TrainError> {
        let e = self.forward;
        let mut s = bound(&self.plan, &mut self.arena, &self.decoded)?;
        s.set_input(e, INPUT_X, x)?;
        s.run(e)?;
        Ok(s.output(e, OUTPUT_LOGITS)?.to_vec())
    }

    /// Classification accuracy of the `forward` entry over `rows` samples of `features`
    /// (`[rows, d_in]`) against `labels`, in batches of `batch`; the last batch is padded with
    /// zeros and its padding ignored. Ties go to the lowest class.
    ///
    /// # Errors
    /// A runtime error.
    pub fn accuracy(
        &mut self,
        features: &[f32],
        labels: &[u8],
        d_in: usize,
        batch: usize,
    ) -> Result<f32, TrainError> {
        let rows = labels.len();
        let mut correct = 0usize;
        let mut start = 0;
        while start < rows {
            let n = batch.min(rows - start);
            let mut x = vec![0.0f32; batch * d_in];
            x[..n * d_in].copy_from_slice(&features[start * d_in..(start + n) * d_in]);
            let logits = self.logits(&x)?;
            let classes = logits.len() / batch;
            for r in 0..n {
                let row = &logits[r * classes..(r + 1) * classes];
                if argmax(row) == labels[start + r] as usize {
                    correct += 1;
                }
            }
            start += n;
        }
        Ok(correct as f32 / rows.max(1) as f32)
    }
}

/// The index of the largest element (the first of equals; NaN never wins).
pub fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best
}
