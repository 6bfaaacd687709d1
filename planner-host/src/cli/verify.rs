//! `tapeplan verify TRANSCRIPT [--config RUN]`: a device's training transcript against the host
//! oracle, bit for bit; and `tapeplan digest FILE…`, the digests a run description pins its
//! files with.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use tapeplan_planner::exec::transcript::Transcript;
use tapeplan_planner::exec::verify::verify as verify_run;
use tapeplan_planner::model::run::{file_digest, FileKind};
use tapeplan_planner::model::RunConfig;

/// Reads the transcript (`-` for standard input) and the optional run description, verifies,
/// and prints the report. Answers [`ExitCode::FAILURE`] when a bit differs.
///
/// # Errors
/// Unreadable files, and every error of [`Transcript::parse`] and [`verify_run`].
pub fn verify(transcript: &Path, config: Option<&Path>) -> Result<ExitCode> {
    let read = |path: &Path| {
        let r = if path.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin())
        } else {
            std::fs::read_to_string(path)
        };
        r.with_context(|| format!("cannot read {}", path.display()))
    };
    let t = Transcript::parse(&read(transcript)?)?;
    let expected = config.map(read).transpose()?;
    let expected = expected.as_deref().map(RunConfig::parse).transpose()?;
    let report = verify_run(&t, expected.as_ref())?;
    println!(
        "verify: {} ({} steps) from {}",
        report.config,
        report.steps,
        report.target.as_deref().unwrap_or("an unnamed target")
    );
    println!("{report}");
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `tapeplan digest FILE…`: one line per file, `KEY=PATH KEY_digest=HEX` with the key its
/// kind takes in a run description (`plan`, `init` or `data`; [`FileKind::of`]), and a plan's
/// id.
///
/// # Errors
/// An unreadable file.
pub fn digest(files: &[std::path::PathBuf]) -> Result<ExitCode> {
    for path in files {
        // A run description names regular files; a FIFO would wait for a writer, a device never end.
        let meta =
            std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
        if !meta.is_file() {
            bail!(
                "{}: not a regular file (a run description pins regular files only)",
                path.display()
            );
        }
        let bytes = super::read(path)?;
        let kind = FileKind::of(&bytes);
        let id = match kind {
            FileKind::Plan { plan_id } => format!("  # plan id {plan_id:08x}"),
            _ => String::new(),
        };
        println!(
            "{key}={} {key}_digest={:016x}{id}",
            path.display(),
            file_digest(&bytes),
            key = kind.key()
        );
    }
    Ok(ExitCode::SUCCESS)
}
