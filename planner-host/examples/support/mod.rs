//! What the CNN examples (`mnist1d`, `digits_cnn`) share: a batch's rows, and the per-step
//! bitwise check of the runtime against the oracle.

use anyhow::{bail, Result};
use tapeplan_planner::exec::oracle::Oracle;
use tapeplan_planner::exec::runtime::RuntimeModel;
use tapeplan_planner::io::data::Dataset;

/// Rows `start .. start + n` of `set` (features and labels as `f32`).
pub fn batch_rows(set: &Dataset, start: usize, n: usize) -> (Vec<f32>, Vec<f32>) {
    let mut x = Vec::with_capacity(n * set.n_features());
    let mut labels = Vec::with_capacity(n);
    for i in start..start + n {
        let (row, label) = set.row(i);
        x.extend_from_slice(row);
        labels.push(f32::from(label));
    }
    (x, labels)
}

/// Errors unless the runtime's loss, every parameter (`names`) and every piece of optimizer
/// state (`state_names`) equal the oracle's bit for bit after step `step`.
pub fn check_step(
    rt: &mut RuntimeModel<'_>,
    oracle: &Oracle<'_>,
    names: &[String],
    state_names: &[String],
    step: usize,
    losses: (f32, f32),
) -> Result<()> {
    let (loss_rt, loss_or) = losses;
    if loss_rt.to_bits() != loss_or.to_bits() {
        bail!("step {step}: loss {loss_rt} (runtime) != {loss_or} (oracle)");
    }
    for (name, value) in names
        .iter()
        .zip(&oracle.params)
        .chain(state_names.iter().zip(&oracle.state))
    {
        let got = rt.parameter(name)?;
        if got
            .iter()
            .zip(&value.data)
            .any(|(a, b)| a.to_bits() != b.to_bits())
        {
            bail!("step {step}: {name} differs between the runtime and the oracle");
        }
    }
    Ok(())
}
