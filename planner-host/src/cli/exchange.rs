//! `tapeplan export` and `tapeplan import`: a checkpoint's parameters and buffers to and from a
//! safetensors file under their PyTorch `state_dict` names (`tapeplan_planner::io::exchange`),
//! with `--rename` key remaps.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};

use tapeplan_planner::io::exchange::{self, Rename};
use tapeplan_planner::model::run::plan_model_tensors;

use super::{parse_plan, read, transcript_parameters};

/// Where `export` takes the parameters from.
pub enum From {
    /// A checkpoint of the plan.
    Checkpoint(PathBuf),
    /// A device's transcript: the final parameters at its end (`-`: standard input).
    Transcript(PathBuf),
}

/// `tapeplan export PLAN (--checkpoint CKPT | --transcript FILE) -o OUT [--rename FROM=TO …]`.
///
/// # Errors
/// Unreadable files, a rejected plan, checkpoint or transcript (one without its final
/// parameters, one whose parameters are not the plan's), a rule that renames nothing, an
/// unwritable `output` (checked before anything is read; an existing file is replaced only
/// once the export succeeded).
pub fn export(plan: &Path, from: &From, output: &Path, renames: &[Rename]) -> Result<ExitCode> {
    exchange::check_writable(output)?;
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
    let st = match from {
        From::Checkpoint(checkpoint) => {
            exchange::export_checkpoint(&parsed, &read(checkpoint)?, &rules)
                .with_context(|| format!("exporting {}", checkpoint.display()))?
        }
        From::Transcript(path) => {
            let base = vec![0.0f32; parsed.persistent_elems()];
            let (values, fin) = transcript_parameters(&parsed, &base, path)?;
            let st = exchange::export_plan_params_renamed(&parsed, &values, &rules)
                .with_context(|| format!("exporting {}", path.display()))?;
            println!(
                "the final parameters of {} ({}parameter digest {})",
                path.display(),
                fin.target
                    .as_deref()
                    .map(|t| format!("target {t}, "))
                    .unwrap_or_default(),
                fin.digest
                    .map(|d| format!("0x{d:016x}, checked"))
                    .unwrap_or_else(|| "not sent".into())
            );
            st
        }
    };
    exchange::write_atomic(output, &st)?;
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
