//! Helpers the CLI tests share: run the built `tapeplan` binary in a scratch folder.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `tapeplan args` in `dir`.
pub fn tapeplan(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tapeplan"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

/// Runs `tapeplan args` in `dir`, which must succeed; answers its standard output.
pub fn ok(dir: &Path, args: &[&str]) -> String {
    let out = tapeplan(dir, args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "tapeplan {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs `tapeplan args` in `dir`, which must fail without a panic; answers its standard
/// error.
pub fn fails(dir: &Path, args: &[&str]) -> String {
    let out = tapeplan(dir, args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "tapeplan {args:?} succeeded:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

/// The run description `plan=PLAN plan_digest=… REST` of the plan file `dir/PLAN` (`PLAN`
/// as written, relative to `dir`).
pub fn plan_run(dir: &Path, plan: &str, rest: &str) -> String {
    let digest = tapeplan_planner::model::run::file_digest(&std::fs::read(dir.join(plan)).unwrap());
    format!("plan={plan} plan_digest={digest:016x} {rest}\n")
}

/// The transcript a device sends for the run description `run` of folder `dir` (the host
/// runtime's run of it: `runtime_transcript`).
pub fn device_transcript(dir: &Path, run: &str) -> String {
    let cfg = tapeplan_planner::model::RunConfig::parse_in(run, dir).unwrap();
    tapeplan_planner::exec::transcript::runtime_transcript(&cfg, "host runtime").unwrap()
}

/// A new, empty folder for test `name` under the system's temporary folder.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tapeplan-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
