//! `tapeplan export` and `tapeplan import`: a checkpoint's parameters and buffers to and from a
//! safetensors file under their PyTorch `state_dict` names (`tapeplan_planner::io::exchange`),
//! with `--rename` key remaps.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};

use tapeplan_planner::io::exchange::{self, Rename};
use tapeplan_planner::model::run::plan_model_tensors;

use super::{parse_plan, read};

/// `tapeplan export PLAN --checkpoint CKPT -o OUT [--rename FROM=TO …]`.
///
/// # Errors
/// Unreadable files, a rejected plan or checkpoint, a rule that renames nothing, an
/// unwritable `output`.
pub fn export(
    plan: &Path,
    checkpoint: &Path,
    output: &Path,
    renames: &[Rename],
) -> Result<ExitCode> {
    let bytes = read(plan)?;
    let parsed = parse_plan(plan, &bytes)?;
    let map = exchange::with_suffix(plan, exchange::NAMES_SUFFIX);
    let (rules, restored) = if map.is_file() {
        let names = exchange::read_names(&map)?;
        let keys: Vec<String> = plan_model_tensors(&parsed)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        let restored = keys
            .iter()
            .filter(|k| names.iter().any(|(short, _)| short == *k))
            .count();
        (exchange::compose_renames(&keys, &names, renames)?, restored)
    } else {
        (renames.to_vec(), 0)
    };
    let st = exchange::export_checkpoint(&parsed, &read(checkpoint)?, &rules)
        .with_context(|| format!("exporting {}", checkpoint.display()))?;
    std::fs::write(output, &st).with_context(|| format!("writing {}", output.display()))?;
    println!("wrote {} ({} bytes)", output.display(), st.len());
    if restored > 0 {
        println!(
            "restored {restored} full state_dict keys from {} (the plan's names are shortened to 24 bytes)",
            map.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `tapeplan import SAFETENSORS PLAN [--base CKPT] -o OUT [--rename FROM=TO …]`.
///
/// # Errors
/// Unreadable files, a rejected plan, safetensors file or base checkpoint, a rule that renames
/// nothing, an unwritable `output`.
pub fn import(
    safetensors: &Path,
    plan: &Path,
    base: Option<&Path>,
    output: &Path,
    renames: &[Rename],
) -> Result<ExitCode> {
    let bytes = read(plan)?;
    let base = base.map(read).transpose()?;
    let ckpt = exchange::import_to_checkpoint_renamed(
        &parse_plan(plan, &bytes)?,
        &read(safetensors)?,
        base.as_deref(),
        renames,
    )
    .with_context(|| format!("importing {}", safetensors.display()))?;
    exchange::write_atomic(output, &ckpt)?;
    println!("wrote {} ({} bytes)", output.display(), ckpt.len());
    Ok(ExitCode::SUCCESS)
}
