//! The CLI fails loudly instead of losing work or reporting a run that did nothing (issue 16,
//! holes 3 to 6): non-finite data or parameters, epochs that commit nothing, unwritable
//! outputs, a kill between the loss curve and the checkpoint, and a closed standard output.

use crate::common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{ok, scratch_dir, tapeplan};

use tapeplan_planner::exec::RuntimeModel;
use tapeplan_planner::io::exchange::{
    check_writable, export_plan_params, import_to_checkpoint, write_atomic, ExchangeError,
};
use tapeplan_runtime::{checkpoint_bytes, write_checkpoint, Plan};

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs a command that must fail; answers its stdout and stderr.
fn fails(dir: &Path, args: &[&str]) -> (String, String) {
    let out = tapeplan(dir, args);
    let (stdout, stderr) = text(&out);
    assert!(
        !out.status.success(),
        "tapeplan {args:?} succeeded:\n{stdout}\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    (stdout, stderr)
}

/// The names in `dir` that end in `.tmp`.
fn stray_tmp(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

/// Writes a checkpoint of `plan` (sequence `sequence`) whose persistent region is the plan's
/// initial one with `poison` applied.
fn checkpoint_with(dir: &Path, plan: &str, sequence: u32, poison: impl Fn(&Plan<'_>, &mut [f32])) {
    let bytes = std::fs::read(dir.join(plan)).unwrap();
    let model = RuntimeModel::new(&bytes).unwrap();
    let mut persistent = model.persistent().to_vec();
    poison(model.plan(), &mut persistent);
    let mut blob = vec![0u8; checkpoint_bytes(model.plan())];
    let n = write_checkpoint(model.plan(), &persistent, sequence, &mut blob).unwrap();
    std::fs::write(dir.join("bad.ckpt"), &blob[..n]).unwrap();
}

/// Sets the first element of the first persistent binding `which` accepts to NaN.
fn nan_in(which: impl Fn(&str) -> bool) -> impl Fn(&Plan<'_>, &mut [f32]) {
    move |plan, persistent| {
        let b = plan.parameters().find(|b| which(b.name)).unwrap();
        persistent[b.range().start] = f32::NAN;
    }
}

// ---------------------------------------------------------------------------------------------
// Hole 3: a run that made no progress reports success.

#[test]
fn a_scale_that_overflows_the_features_is_refused_before_training() {
    let dir = scratch_dir("robust-scale");
    ok(&dir, &["plan", "-o", "m.plan"]);
    // Raw pixel counts up to 16: finite when loaded, infinite after `--scale 1e38`.
    let mut csv = String::new();
    for row in 0..60 {
        let features: Vec<String> = (0..64).map(|i| ((row + i) % 17).to_string()).collect();
        csv.push_str(&format!("{},{}\n", features.join(","), row % 10));
    }
    std::fs::write(dir.join("raw.csv"), csv).unwrap();
    let (stdout, stderr) = fails(
        &dir,
        &[
            "train", "m.plan", "--data", "raw.csv", "--scale", "1e38", "--epochs", "1",
        ],
    );
    assert!(stderr.contains("--scale 1e38 turns feature"), "{stderr}");
    assert!(stderr.contains("inf"), "{stderr}");
    assert!(!stdout.contains("mean loss"), "{stdout}");
}

#[test]
fn resuming_from_non_finite_parameters_is_refused_naming_the_element() {
    let dir = scratch_dir("robust-resume-nan");
    ok(&dir, &["plan", "-o", "m.plan"]);
    checkpoint_with(&dir, "m.plan", 1, nan_in(|n| n == "b1"));
    let (stdout, stderr) = fails(
        &dir,
        &["train", "m.plan", "--resume", "bad.ckpt", "--epochs", "2"],
    );
    assert!(
        stderr.contains("parameter b1 element 0 is NaN, not finite"),
        "{stderr}"
    );
    assert!(!stdout.contains("mean loss"), "{stdout}");
}

#[test]
fn import_refuses_non_finite_parameters() {
    let dir = scratch_dir("robust-import-nan");
    ok(&dir, &["plan", "-o", "m.plan"]);
    let bytes = std::fs::read(dir.join("m.plan")).unwrap();
    let plan = Plan::parse(&bytes).unwrap();
    let model = RuntimeModel::new(&bytes).unwrap();
    let mut persistent = model.persistent().to_vec();
    let w2 = plan.parameters().find(|b| b.name == "w2").unwrap();
    persistent[w2.range().start + 5] = f32::INFINITY;
    let st = export_plan_params(&plan, &persistent).unwrap();

    let err = import_to_checkpoint(&plan, &st, None).unwrap_err();
    assert!(
        matches!(&err, ExchangeError::NonFiniteParameter { name, element: 5, value }
            if name == "w2" && *value == f32::INFINITY),
        "{err:?}"
    );
    std::fs::write(dir.join("bad.safetensors"), &st).unwrap();
    let (_, stderr) = fails(
        &dir,
        &["import", "bad.safetensors", "m.plan", "-o", "x.ckpt"],
    );
    assert!(
        stderr.contains("parameter w2 element 5 is inf, not finite"),
        "{stderr}"
    );
    assert!(!dir.join("x.ckpt").exists());
}

#[test]
fn an_epoch_whose_every_step_is_refused_fails_loudly() {
    let dir = scratch_dir("robust-all-refused");
    ok(&dir, &["plan", "--optimizer", "momentum", "-o", "m.plan"]);
    // The parameters are finite, the momentum buffer is not: every update is NaN, and the
    // guard refuses every step.
    checkpoint_with(&dir, "m.plan", 0, nan_in(|n| n.contains('.')));
    let (stdout, stderr) = fails(
        &dir,
        &[
            "train",
            "m.plan",
            "--resume",
            "bad.ckpt",
            "--epochs",
            "1",
            "--checkpoint",
            "out.ckpt",
        ],
    );
    assert!(
        stderr.contains("epoch 1: the guard refused all 44 steps"),
        "{stderr}"
    );
    assert!(stderr.contains("no progress"), "{stderr}");
    assert!(!stdout.contains("mean loss"), "{stdout}");
    assert!(!dir.join("out.ckpt").exists(), "no checkpoint of nothing");
}

// ---------------------------------------------------------------------------------------------
// Hole 4: work lost to an output path.

#[test]
fn every_train_output_is_checked_before_the_first_epoch() {
    let dir = scratch_dir("robust-outputs");
    ok(&dir, &["plan", "-o", "m.plan"]);
    std::fs::create_dir(dir.join("adir")).unwrap();
    let cases: Vec<(&str, &str, &str)> = vec![
        ("--checkpoint", "adir", "is a folder"),
        (
            "--checkpoint",
            "missing/x.ckpt",
            "the folder missing does not exist",
        ),
        ("--save-params", "adir", "is a folder"),
        ("--save-test-logits", "missing/t.st", "does not exist"),
        ("--plot", "adir", "is a folder"),
        #[cfg(target_os = "linux")]
        (
            "--plot",
            "/proc/loss.svg",
            "cannot create a file in the folder /proc",
        ),
        #[cfg(target_os = "linux")]
        (
            "--checkpoint",
            "/proc/x.ckpt",
            "cannot create a file in the folder /proc",
        ),
    ];
    for (option, path, why) in cases {
        let (stdout, stderr) = fails(&dir, &["train", "m.plan", "--epochs", "1", option, path]);
        assert!(stderr.contains(why), "{option} {path}: {stderr}");
        assert!(
            stderr.contains("checked before any work is done"),
            "{option} {path}: {stderr}"
        );
        assert!(!stdout.contains("epoch"), "{option} {path}: {stdout}");
    }
    // The loss curve beside the checkpoint: FILE.losses.csv an existing folder.
    std::fs::create_dir(dir.join("c.ckpt.losses.csv")).unwrap();
    let (stdout, stderr) = fails(
        &dir,
        &["train", "m.plan", "--epochs", "1", "--checkpoint", "c.ckpt"],
    );
    assert!(
        stderr.contains("c.ckpt.losses.csv: is a folder"),
        "{stderr}"
    );
    assert!(!stdout.contains("epoch"), "{stdout}");
    assert!(stray_tmp(&dir).is_empty(), "{:?}", stray_tmp(&dir));
    assert!(stray_tmp(&dir.join("adir")).is_empty());
}

#[test]
fn the_plan_output_is_checked_before_planning() {
    let dir = scratch_dir("robust-plan-output");
    std::fs::create_dir(dir.join("adir")).unwrap();
    let (_, stderr) = fails(&dir, &["plan", "-o", "adir"]);
    assert!(stderr.contains("adir: is a folder"), "{stderr}");
    let (_, stderr) = fails(&dir, &["plan", "-o", "no/such/m.plan"]);
    assert!(stderr.contains("does not exist"), "{stderr}");
}

#[test]
fn check_writable_leaves_nothing_behind() {
    let dir = scratch_dir("robust-probe");
    check_writable(&dir.join("new.ckpt")).unwrap();
    std::fs::write(dir.join("old.ckpt"), b"keep").unwrap();
    check_writable(&dir.join("old.ckpt")).unwrap();
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("old.ckpt")]);
    assert_eq!(std::fs::read(dir.join("old.ckpt")).unwrap(), b"keep");
}

#[test]
fn a_failed_atomic_write_leaves_no_tmp_file() {
    let dir = scratch_dir("robust-atomic");
    std::fs::create_dir(dir.join("adir")).unwrap();
    // The rename over a folder fails after the `.tmp` file was written.
    let err = write_atomic(&dir.join("adir"), b"blob").unwrap_err();
    assert!(matches!(err, ExchangeError::Io { .. }), "{err:?}");
    assert!(stray_tmp(&dir).is_empty(), "{:?}", stray_tmp(&dir));
    write_atomic(&dir.join("ok.ckpt"), b"blob").unwrap();
    assert_eq!(std::fs::read(dir.join("ok.ckpt")).unwrap(), b"blob");
    assert!(stray_tmp(&dir).is_empty());
}

// ---------------------------------------------------------------------------------------------
// Hole 5: a kill between the loss curve and the checkpoint.

#[test]
fn resume_after_a_kill_between_the_curve_and_the_checkpoint_keeps_the_right_history() {
    let dir = scratch_dir("robust-kill");
    ok(&dir, &["plan", "-o", "m.plan"]);
    let train = |args: &[&str]| {
        ok(
            &dir,
            &[&["train", "m.plan", "--plot", "p.svg"][..], args].concat(),
        )
    };
    // The uninterrupted run, and the state after its first epoch.
    train(&["--epochs", "2", "--checkpoint", "full.ckpt"]);
    train(&["--epochs", "1", "--checkpoint", "one.ckpt"]);
    // Killed during epoch 2's save, after the curve was renamed and before the checkpoint was:
    // the curve has 2 epochs, the checkpoint 1.
    std::fs::copy(dir.join("one.ckpt"), dir.join("k.ckpt")).unwrap();
    std::fs::copy(
        dir.join("full.ckpt.losses.csv"),
        dir.join("k.ckpt.losses.csv"),
    )
    .unwrap();
    let stdout = train(&[
        "--epochs",
        "2",
        "--resume",
        "k.ckpt",
        "--checkpoint",
        "k.ckpt",
    ]);
    assert!(!stdout.contains("does not end where"), "{stdout}");
    assert_eq!(
        std::fs::read(dir.join("k.ckpt")).unwrap(),
        std::fs::read(dir.join("full.ckpt")).unwrap()
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("k.ckpt.losses.csv")).unwrap(),
        std::fs::read_to_string(dir.join("full.ckpt.losses.csv")).unwrap(),
        "the resumed run's curve is the whole run's, epoch 2 once"
    );
    assert!(stray_tmp(&dir).is_empty());
}

// ---------------------------------------------------------------------------------------------
// Hole 6: `tapeplan … | head`.

#[test]
fn a_closed_standard_output_ends_the_program_quietly() {
    let dir = scratch_dir("robust-pipe");
    // A pipe whose reading end is already closed: the first print fails with EPIPE.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_tapeplan"))
        .current_dir(&dir)
        .args(["plan", "-o", "m.plan"])
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(0 | 141)),
        "{:?}: {stderr}",
        out.status
    );
    assert!(stderr.is_empty(), "{stderr}");
}
