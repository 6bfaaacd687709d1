//! `tapeplan emit`: a plan as a Rust module for the user's firmware.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};

use tapeplan_planner::io::exchange::check_writable;
use tapeplan_planner::io::rust_module::rust_module;

use super::read;

/// `tapeplan emit PLAN -o OUTPUT`.
///
/// # Errors
/// An unreadable or rejected plan, an unwritable output.
pub fn emit(plan: &Path, output: &Path) -> Result<ExitCode> {
    check_writable(output)?;
    let bytes = read(plan)?;
    let module = rust_module(&bytes, &plan.display().to_string())
        .map_err(|e| anyhow::anyhow!("{}: plan rejected: {e}", plan.display()))?;
    std::fs::write(output, &module).with_context(|| format!("writing {}", output.display()))?;
    println!(
        "wrote {} ({} lines: the plan's {} bytes, its arena size and typed accessors)",
        output.display(),
        module.lines().count(),
        bytes.len()
    );
    Ok(ExitCode::SUCCESS)
}
