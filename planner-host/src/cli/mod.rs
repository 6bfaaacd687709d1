//! The `tapeplan` commands, one module each; [`args`] holds the options they share. They parse
//! and print; the work is the library's.

pub mod args;
pub mod demo;
pub mod describe;
pub mod emit;
pub mod eval;
pub mod exchange;
pub mod plan;
pub mod train;
pub mod verify;

use anyhow::{bail, Context, Result};

use args::{ArithArg, MathArg, ModelArgs};
use tapeplan_planner::exec::transcript::{final_parameters, FinalParameters};

/// The bytes of `path`, or an error naming it.
pub fn read(path: &std::path::Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

/// Validates plan bytes read from `path` with the runtime.
pub fn parse_plan<'b>(
    path: &std::path::Path,
    bytes: &'b [u8],
) -> Result<tapeplan_runtime::Plan<'b>> {
    tapeplan_runtime::Plan::parse_alloc(bytes)
        .map_err(|e| anyhow::anyhow!("{}: plan rejected: {e}", path.display()))
}

/// `--math fast`, `--arith fma`, `--fusion`, `--no-fusion`, `--no-sgd-fusion` or `--no-fold-transposes` beside a plan file: the plan already records how it was
/// planned, so the options would be silently ignored.
pub fn planning_options_need_no_plan(model: &ModelArgs, plan: &std::path::Path) -> Result<()> {
    if matches!(model.math, MathArg::Fast)
        || matches!(model.arith, ArithArg::Fma)
        || model.no_fusion
        || model.fusion.is_some()
        || model.no_sgd_fusion
        || model.no_fold_transposes
    {
        bail!(
            "{} records its own math and arithmetic profiles and fusion; --math, --arith, \
             --fusion, --no-fusion / --no-sgd-fusion / --no-fold-transposes apply when \
             planning (`tapeplan plan`, or `train`/`describe --tape` without a plan)",
            plan.display()
        );
    }
    Ok(())
}

/// The persistent region of `plan` with its model tensors from the final parameters of the
/// device transcript at `path` (`-`: standard input), the rest from `base`; and what the
/// transcript said about them.
///
/// # Shapes
/// `base: [persistent_elems]`; answers `[persistent_elems]`.
///
/// # Errors
/// An unreadable file; a transcript without its final parameters or damaged
/// ([`final_parameters`]), of another plan, or whose parameters do not fit the plan's.
pub fn transcript_parameters(
    plan: &tapeplan_runtime::Plan<'_>,
    base: &[f32],
    path: &std::path::Path,
) -> Result<(Vec<f32>, FinalParameters)> {
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
    .with_context(|| format!("reading {}", path.display()))?;
    let fin = final_parameters(&text).with_context(|| format!("{}", path.display()))?;
    fin.check_plan_id(plan.plan_id())
        .with_context(|| format!("{}", path.display()))?;
    let values =
        tapeplan_planner::io::exchange::persistent_from_transcript(plan, base, &fin.params)
            .with_context(|| format!("{}", path.display()))?;
    Ok((values, fin))
}

/// A clear error for the common mix-up of passing a checkpoint where a plan goes.
pub fn not_a_checkpoint(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    if bytes.starts_with(&tapeplan_runtime::CHECKPOINT_MAGIC) {
        bail!(
            "{} is a checkpoint (magic TPCK), not a plan: give the .plan it was saved from, and the checkpoint with --resume or --checkpoint",
            path.display()
        );
    }
    Ok(())
}
