//! The outcome of verifying a device's run against the oracle, and how it is shown.

use std::fmt;

use crate::exec::oracle::BitDiff;
use crate::model::RunConfig;

/// The first step whose loss differs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepDiff {
    /// The step, 1-based.
    pub step: usize,
    /// The epoch it belongs to, 1-based.
    pub epoch: usize,
    /// The device's loss bits.
    pub device_bits: u32,
    /// The oracle's loss bits.
    pub oracle_bits: u32,
}

/// The outcome of comparing a transcript with the oracle.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The run.
    pub config: RunConfig,
    /// What ran it.
    pub target: Option<String>,
    /// Steps compared.
    pub steps: usize,
    /// Steps whose loss bits are identical.
    pub identical_steps: usize,
    /// The first differing step.
    pub first_step_diff: Option<StepDiff>,
    /// Epoch means the device reported, and how many are identical.
    pub epoch_means: (usize, usize),
    /// The first differing epoch mean: (epoch, device bits, oracle bits).
    pub first_epoch_diff: Option<(usize, u32, u32)>,
    /// State digests (`state` lines) the device sent, and how many equal the host's.
    pub states: (usize, usize),
    /// The first step whose state digest differs: (step, device digest, host digest).
    pub first_state_diff: Option<(usize, u64, u64)>,
    /// Parameter elements compared, and how many are identical.
    pub param_elems: (usize, usize),
    /// The first differing parameter element (left: device, right: oracle).
    pub first_param_diff: Option<BitDiff>,
    /// The oracle's parameter digest; and whether the device's digest (if sent) equals it.
    pub digest: (u64, Option<bool>),
}

impl Report {
    /// True when every compared bit is identical.
    pub fn passed(&self) -> bool {
        self.first_step_diff.is_none()
            && self.first_epoch_diff.is_none()
            && self.first_state_diff.is_none()
            && self.first_param_diff.is_none()
            && self.digest.1 != Some(false)
    }
}

impl fmt::Display for Report {
    /// The verdict: `bitwise: N/N steps identical`, the parameter verdict, and on a difference
    /// where it is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "bitwise: {}/{} steps identical",
            self.identical_steps, self.steps
        )?;
        if let Some(d) = &self.first_step_diff {
            writeln!(
                f,
                "first difference: step {} (epoch {}), tensor loss element 0: device {:#010x} ({}) vs oracle {:#010x} ({})",
                d.step,
                d.epoch,
                d.device_bits,
                f32::from_bits(d.device_bits),
                d.oracle_bits,
                f32::from_bits(d.oracle_bits)
            )?;
        }
        if self.epoch_means.0 > 0 {
            writeln!(
                f,
                "epoch means: {}/{} identical",
                self.epoch_means.1, self.epoch_means.0
            )?;
        }
        if let Some((e, d, o)) = self.first_epoch_diff {
            writeln!(
                f,
                "first difference: epoch {e} mean loss: device {d:#010x} ({}) vs oracle {o:#010x} ({})",
                f32::from_bits(d),
                f32::from_bits(o)
            )?;
        }
        if self.states.0 > 0 {
            writeln!(
                f,
                "state digests: {}/{} steps identical",
                self.states.1, self.states.0
            )?;
        }
        if let Some((step, d, h)) = self.first_state_diff {
            writeln!(
                f,
                "first difference: parameter digest after step {step}: device {d:016x} vs oracle {h:016x}"
            )?;
        }
        let (n, same) = self.param_elems;
        let verdict = if same == n && self.first_param_diff.is_none() {
            "identical"
        } else {
            "DIFFER"
        };
        write!(
            f,
            "parameters: {same}/{n} elements bitwise identical after step {} ({verdict}), digest {:#018x}",
            self.steps, self.digest.0
        )?;
        match self.digest.1 {
            Some(true) => write!(f, " (device agrees)")?,
            Some(false) => write!(f, " (device DIFFERS)")?,
            None => {}
        }
        if let Some(d) = &self.first_param_diff {
            write!(
                f,
                "\nfirst difference: after step {}: {d} (device vs oracle)",
                self.steps
            )?;
        }
        Ok(())
    }
}
