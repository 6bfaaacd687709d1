//! `tapeplan verify TRANSCRIPT [--config RUN]`: a device's training transcript against the host
//! oracle, bit for bit.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};

use tapeplan_planner::exec::transcript::Transcript;
use tapeplan_planner::exec::verify::verify as verify_run;
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
