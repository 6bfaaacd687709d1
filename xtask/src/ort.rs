//! `cargo xtask ort-check`: issue 13's check of tapeplan's recorded gradients against ONNX
//! Runtime's on-device training, run fresh.
//!
//! It installs the pinned Python packages (`onnx`, `onnxruntime-training-cpu`, numpy) into the
//! project's venv, writes the five test models (`scripts/onnx_models.py`) into
//! `target/ort-check/`, checks they are the checked-in `planner-host/tests/data/onnx/*.onnx`
//! byte for byte, runs ONNX Runtime's training and inference on them (`scripts/ort_check.py`),
//! then the Rust test `planner-host/tests/library/onnx_ort.rs` against those fresh numbers
//! (`TAPEPLAN_ORT_DIR`), which prints the table of differences. Missing packages that pip
//! cannot install fail the step: it never skips.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::onnx::ONNX_VERSION;
use crate::{run, venv_python, Ctx};

/// The pinned ONNX Runtime training release (its `artifacts` and `api` modules).
pub const ORT_VERSION: &str = "1.19.2";

/// The five test models.
const MODELS: &[&str] = &["mlp", "cnn1d", "cnn2d_bn", "dwsep", "text"];

/// The Python of [`crate::PY_VENV`] with `onnx` [`ONNX_VERSION`] and `onnxruntime-training-cpu`
/// [`ORT_VERSION`] with its training modules (installed if missing).
fn ort_python(ctx: &Ctx) -> Result<PathBuf> {
    let check = format!(
        "import os, sys, numpy, onnx, onnxruntime; \
         d = os.path.join(os.path.dirname(onnxruntime.__file__), 'training'); \
         sys.exit(0 if onnx.__version__ == '{ONNX_VERSION}' \
         and onnxruntime.__version__ == '{ORT_VERSION}' \
         and os.path.exists(os.path.join(d, 'artifacts.py')) else 1)"
    );
    venv_python(
        ctx,
        &check,
        &[
            "numpy",
            &format!("onnx=={ONNX_VERSION}"),
            &format!("onnxruntime-training-cpu=={ORT_VERSION}"),
        ],
        "the ORT check",
    )
}

/// The step: regenerate, compare the models, run ORT, run the Rust comparison.
pub fn step_ort_check(ctx: &Ctx) -> Result<()> {
    let py = ort_python(ctx)?;
    let dir = ctx.root.join("target").join("ort-check");
    if dir.exists() {
        fs::remove_dir_all(&dir)?;
    }
    fs::create_dir_all(&dir)?;
    let mut models = Command::new(&py);
    models
        .arg("scripts/onnx_models.py")
        .arg(&dir)
        .current_dir(&ctx.root);
    run(models)?;
    let checked_in = ctx.root.join("planner-host/tests/data/onnx");
    for m in MODELS {
        let file = format!("{m}.onnx");
        let fresh = fs::read(dir.join(&file)).with_context(|| format!("reading fresh {file}"))?;
        let kept = fs::read(checked_in.join(&file))
            .with_context(|| format!("reading planner-host/tests/data/onnx/{file}"))?;
        if fresh != kept {
            bail!(
                "scripts/onnx_models.py writes a {file} that differs from the checked-in one: \
                 regenerate planner-host/tests/data/onnx with it and scripts/ort_check.py"
            );
        }
    }
    let mut ort = Command::new(&py);
    ort.arg("scripts/ort_check.py")
        .arg(&dir)
        .current_dir(&ctx.root);
    run(ort)?;
    let mut test = ctx.cargo([
        "test",
        "-p",
        "tapeplan-planner",
        "--test",
        "library",
        "--",
        "onnx_ort::",
        "--nocapture",
    ]);
    test.env("TAPEPLAN_ORT_DIR", &dir);
    run(test)
}
