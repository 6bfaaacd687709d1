//! `tapeplan export` and `tapeplan import`: a checkpoint's parameters to and from a safetensors
//! file with PyTorch's names and layouts.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};

use tapeplan_planner::io::exchange;

use super::{parse_plan, read};

/// `tapeplan export PLAN --checkpoint CKPT -o OUT`.
///
/// # Errors
/// Unreadable files, a rejected plan or checkpoint, an unwritable `output`.
pub fn export(plan: &Path, checkpoint: &Path, output: &Path) -> Result<ExitCode> {
    let bytes = read(plan)?;
    let st = exchange::export_checkpoint(&parse_plan(plan, &bytes)?, &read(checkpoint)?)
        .with_context(|| format!("exporting {}", checkpoint.display()))?;
    std::fs::write(output, &st).with_context(|| format!("writing {}", output.display()))?;
    println!("wrote {} ({} bytes)", output.display(), st.len());
    Ok(ExitCode::SUCCESS)
}

/// `tapeplan import SAFETENSORS PLAN [--base CKPT] -o OUT`.
///
/// # Errors
/// Unreadable files, a rejected plan, safetensors file or base checkpoint, an unwritable
/// `output`.
pub fn import(
    safetensors: &Path,
    plan: &Path,
    base: Option<&Path>,
    output: &Path,
) -> Result<ExitCode> {
    let bytes = read(plan)?;
    let base = base.map(read).transpose()?;
    let ckpt = exchange::import_to_checkpoint(
        &parse_plan(plan, &bytes)?,
        &read(safetensors)?,
        base.as_deref(),
    )
    .with_context(|| format!("importing {}", safetensors.display()))?;
    exchange::write_atomic(output, &ckpt)?;
    println!("wrote {} ({} bytes)", output.display(), ckpt.len());
    Ok(ExitCode::SUCCESS)
}
