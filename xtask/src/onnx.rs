//! `cargo xtask onnx-conformance`: ONNX's own backend node tests, which no one here wrote, run
//! through the translation (`tapeplan_planner::model::onnx`), the oracle and the `no_std`
//! runtime; and `cargo xtask onnx-proto`, which regenerates the committed Rust of `onnx.proto`.
//!
//! The tests come from the generators the pinned `onnx` wheel ships
//! (`scripts/onnx_node_tests.py`, run in the venv `target/py-venv`), for the operators of the
//! translation's table and those issue 12 names, into a cache keyed by the onnx version, the
//! operator list and the script. Every test is then: read `model.onnx` and its `.pb` tensors,
//! translate, plan a `forward` entry, run it through the oracle and the runtime, compare the
//! two bit for bit, and each with the expected outputs within the operator's tolerance
//! (`docs/onnx.md`). An operator, attribute, element type or rank outside the vocabulary is a
//! skip with its reason; every skipped test is listed by name. A failure (a translated test
//! whose bits differ between the readings, or whose values are outside the tolerance, or that
//! does not plan or run) fails the step.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use tapeplan_planner::exec::forward::run_forward;
use tapeplan_planner::model::onnx::{
    self, read_model, translate, OnnxError, TensorData, Tolerance, TranslateOptions,
};

use crate::{onnx_simd, run, venv_python, Ctx};

/// The pinned `onnx` release: its generators define the tests.
pub const ONNX_VERSION: &str = "1.23.2";

/// Operators issue 12 names that the translation's table may not have yet: generated too, so
/// that the table shows them (skipped: outside the vocabulary) until their row lands.
const ISSUE_OPERATORS: &[&str] = &[
    "ArgMax",
    "AveragePool",
    "BatchNormalization",
    "Clip",
    "Conv",
    "Gather",
    "Gelu",
    "GlobalAveragePool",
    "HardSigmoid",
    "HardSwish",
    "LayerNormalization",
    "LeakyRelu",
    "MaxPool",
    "ReduceProd",
];

/// The generator script, relative to the workspace root.
const SCRIPT: &str = "scripts/onnx_node_tests.py";

/// The Python of [`crate::PY_VENV`] with `onnx` [`ONNX_VERSION`] installed (made if missing).
fn onnx_python(ctx: &Ctx) -> Result<PathBuf> {
    let check = format!(
        "import sys, numpy, onnx; sys.exit(0 if onnx.__version__ == '{ONNX_VERSION}' else 1)"
    );
    let onnx = format!("onnx=={ONNX_VERSION}");
    venv_python(ctx, &check, &["numpy", &onnx], "the ONNX conformance step")
}

/// The operators whose tests are generated: the table's and [`ISSUE_OPERATORS`].
fn operators() -> Vec<&'static str> {
    let set: BTreeSet<&str> = onnx::OPERATORS
        .iter()
        .map(|o| o.name)
        .chain(ISSUE_OPERATORS.iter().copied())
        .collect();
    set.into_iter().collect()
}

/// FNV-1a, for the cache key.
fn fnv(bytes: &[u8], mut h: u64) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The cache directory of the node tests of `ops`, generated if missing.
fn node_tests(ctx: &Ctx, ops: &[&str]) -> Result<PathBuf> {
    let script = ctx.root.join(SCRIPT);
    let source = fs::read(&script).with_context(|| format!("reading {SCRIPT}"))?;
    let key = fnv(
        ops.join(",").as_bytes(),
        fnv(&source, 0xcbf2_9ce4_8422_2325),
    );
    let root = ctx.root.join("target").join("onnx-node-tests");
    let dir = root.join(format!("onnx-{ONNX_VERSION}-{key:016x}"));
    if dir.join("manifest.tsv").exists() {
        eprintln!("onnx: node tests cached in {}", dir.display());
        return Ok(dir);
    }
    let py = onnx_python(ctx)?;
    // Other keys' caches (another onnx version, operator list or script) and unfinished
    // generations are stale: remove them.
    if let Ok(entries) = fs::read_dir(&root) {
        for e in entries.flatten() {
            if e.path().is_dir() {
                fs::remove_dir_all(e.path())?;
            }
        }
    }
    let tmp = root.join(format!("tmp-{}", std::process::id()));
    fs::create_dir_all(&tmp)?;
    let mut cmd = Command::new(py);
    cmd.arg(&script).arg(&tmp).args(ops).current_dir(&ctx.root);
    run(cmd)?;
    if dir.exists() {
        fs::remove_dir_all(&dir)?;
    }
    fs::rename(&tmp, &dir)?;
    Ok(dir)
}

/// A test's outcome.
enum Outcome {
    /// Passed, with the largest absolute and relative differences from the expected values.
    Pass(f64, f64),
    Fail(String),
    Skip(String),
}

/// Whether `got` is within `tol` of `expected` (NumPy's `assert_allclose`: NaN matches NaN,
/// infinities match exactly).
fn close(got: f32, expected: f32, tol: Tolerance) -> bool {
    if expected.is_nan() || got.is_nan() {
        return expected.is_nan() && got.is_nan();
    }
    if expected.is_infinite() || got.is_infinite() {
        return got == expected;
    }
    let (g, e) = (f64::from(got), f64::from(expected));
    (g - e).abs() <= f64::from(tol.atol) + f64::from(tol.rtol) * e.abs()
}

/// The loosest tolerance of the operators a graph uses (one operator for a node test; several
/// for a function's expansion).
/// Tests whose expected outputs are literals written in the generator rounded to a few digits,
/// not computed: they are checked with ONNX's own runner defaults (rtol 1e-3, atol 1e-7), which
/// those literals were written for.
const ROUNDED_LITERALS: &[(&str, &str)] = &[(
    "test_averagepool_2d_ceil_last_window_starts_on_pad",
    "expected values typed as 4-decimal literals (0.2841 for (0.8816 + 0.4353 + 0.5772 + 0.6623) / 9 = 0.28404…)",
)];

/// ONNX's runner defaults, for [`ROUNDED_LITERALS`].
const ONNX_RUNNER_DEFAULT: Tolerance = Tolerance {
    rtol: 1e-3,
    atol: 1e-7,
    why: "ONNX's runner defaults, for expected values typed as rounded literals",
};

/// The tolerance of test `name` of operator `op`: the loosest of the rows of the operators its
/// graph holds, and for a function-expanded test (whose graph computes `op`'s function) of
/// `op`'s own row too (the function has the operator's numerics, e.g. `Gelu`'s cancellation).
fn tolerance_of(name: &str, op: &str, model: &onnx::proto::ModelProto) -> Tolerance {
    if ROUNDED_LITERALS.iter().any(|(t, _)| *t == name) {
        return ONNX_RUNNER_DEFAULT;
    }
    let mut tol = onnx::ops::EXACT;
    let expanded_from = name.contains("_expanded").then_some(op);
    let ops = model
        .graph
        .iter()
        .flat_map(|g| g.node.iter())
        .map(|n| n.op_type())
        .chain(expanded_from);
    for o in ops {
        if let Some(row) = onnx::ops::operator(o) {
            if row.tolerance.rtol > tol.rtol || row.tolerance.atol > tol.atol {
                tol = Tolerance {
                    rtol: row.tolerance.rtol.max(tol.rtol),
                    atol: row.tolerance.atol.max(tol.atol),
                    why: row.tolerance.why,
                };
            }
        }
    }
    tol
}

/// A test's `.pb` tensor; `Ok(Err(reason))` for an element type the reader does not read (a
/// skip).
fn read_tensor(path: &Path) -> Result<Result<TensorData, String>, String> {
    let bytes = fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    match TensorData::from_bytes(&bytes) {
        Ok(t) => Ok(Ok(t)),
        Err(e @ OnnxError::Unsupported { .. }) => Ok(Err(e.to_string())),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// The `test_data_set_*` directories of a test, in order.
fn data_sets(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut sets: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("test_data_set_"))
        })
        .collect();
    sets.sort();
    Ok(sets)
}

/// Runs one node test; when it passes, its forward runs join `jobs` (to repeat on the SIMD
/// catalog).
fn run_test(dir: &Path, op: &str, jobs: &mut Vec<onnx_simd::Job>) -> Outcome {
    let mut mine = Vec::new();
    let outcome = match run_test_inner(dir, op, &mut mine) {
        Ok(o) => o,
        Err(e) => Outcome::Fail(e),
    };
    if matches!(outcome, Outcome::Pass(..)) {
        jobs.append(&mut mine);
    }
    outcome
}

fn run_test_inner(dir: &Path, op: &str, jobs: &mut Vec<onnx_simd::Job>) -> Result<Outcome, String> {
    let (mut max_abs, mut max_rel) = (0.0f64, 0.0f64);
    let bytes = fs::read(dir.join("model.onnx")).map_err(|e| format!("model.onnx: {e}"))?;
    let model = read_model(&bytes).map_err(|e| e.to_string())?;
    let graph = model.graph.as_ref().ok_or("no graph")?;
    let initializers: BTreeSet<&str> = graph.initializer.iter().map(|t| t.name()).collect();
    let input_names: Vec<&str> = graph
        .input
        .iter()
        .map(|i| i.name())
        .filter(|n| !initializers.contains(n))
        .collect();
    let test_name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let tol = tolerance_of(test_name, op, &model);
    let sets = data_sets(dir)?;
    if sets.is_empty() {
        return Err("no test_data_set_*".into());
    }
    for set in sets {
        let mut options = TranslateOptions::default();
        for (j, name) in input_names.iter().enumerate() {
            let path = set.join(format!("input_{j}.pb"));
            if path.exists() {
                match read_tensor(&path)? {
                    Ok(t) => options.known.insert((*name).to_owned(), t),
                    Err(why) => return Ok(Outcome::Skip(why)),
                };
            }
        }
        let t = match translate(&model, &options) {
            Ok(t) => t,
            Err(e @ OnnxError::Unsupported { .. }) => return Ok(Outcome::Skip(e.to_string())),
            Err(e) => return Err(format!("translation: {e}")),
        };
        let mut inputs = BTreeMap::new();
        for i in &t.inputs {
            let data = &options.known[&i.onnx_name];
            let v = data.to_f32().ok_or_else(|| {
                format!(
                    "input {:?} of type {} reached the tape",
                    i.onnx_name,
                    data.type_name()
                )
            })?;
            inputs.insert(i.onnx_name.clone(), v);
        }
        for (k, name, value) in &t.folded_outputs {
            // Shape arithmetic folded at plan time: exact integers.
            let expected = match read_tensor(&set.join(format!("output_{k}.pb")))? {
                Ok(t) => t,
                Err(why) => return Ok(Outcome::Skip(why)),
            };
            if expected.dims != value.dims || expected.to_i64() != value.to_i64() {
                return Ok(Outcome::Fail(format!(
                    "output {name:?} (folded at plan time): {:?} {:?}, expected {:?} {:?}",
                    value.dims,
                    value.to_i64(),
                    expected.dims,
                    expected.to_i64()
                )));
            }
        }
        if t.outputs.is_empty() {
            continue;
        }
        let out = run_forward(&t, &inputs).map_err(|e| e.to_string())?;
        jobs.push(onnx_simd::Job::new(test_name, &t, &inputs, &out));
        for (k, o) in t.outputs.iter().enumerate() {
            let expected = match read_tensor(&set.join(format!("output_{}.pb", o.index)))? {
                Ok(t) => t,
                Err(why) => return Ok(Outcome::Skip(why)),
            };
            let Some(want) = expected.to_f32() else {
                return Ok(Outcome::Skip(format!(
                    "output {k} of element type {}",
                    expected.type_name()
                )));
            };
            let (oracle, runtime) = (&out.oracle[k], &out.runtime[k]);
            if let Some(i) = (0..oracle.len().max(runtime.len())).find(|&i| {
                oracle.get(i).map(|v| v.to_bits()) != runtime.get(i).map(|v| v.to_bits())
            }) {
                return Ok(Outcome::Fail(format!(
                    "output {:?}: oracle and runtime differ at element {i}: {:?} vs {:?}",
                    o.onnx_name,
                    oracle.get(i),
                    runtime.get(i)
                )));
            }
            // The ONNX extents (a rank-5 output is held folded on the tape, the same elements
            // in the same order): they must be the expected ones, and so the element count.
            let count = t.tape.shape(o.node).map_err(|e| e.to_string())?.elems();
            if o.dims != expected.dims || count != want.len() || oracle.len() != want.len() {
                return Ok(Outcome::Fail(format!(
                    "output {:?}: extents {:?} ({count} elements on the tape, {} computed), expected {:?} ({} elements)",
                    o.onnx_name,
                    o.dims,
                    oracle.len(),
                    expected.dims,
                    want.len()
                )));
            }
            let worst = oracle
                .iter()
                .zip(&want)
                .enumerate()
                .filter(|(_, (g, e))| !close(**g, **e, tol))
                .max_by(|a, b| {
                    let d = |(g, e): (&f32, &f32)| (f64::from(*g) - f64::from(*e)).abs();
                    d(a.1).total_cmp(&d(b.1))
                });
            for (g, e) in oracle.iter().zip(&want) {
                if g.is_finite() && e.is_finite() {
                    let d = (f64::from(*g) - f64::from(*e)).abs();
                    max_abs = max_abs.max(d);
                    if *e != 0.0 {
                        max_rel = max_rel.max(d / f64::from(*e).abs());
                    }
                }
            }
            if let Some((i, (g, e))) = worst {
                return Ok(Outcome::Fail(format!(
                    "output {:?}: element {i} is {g:e}, expected {e:e} (rtol {:e}, atol {:e})",
                    o.onnx_name, tol.rtol, tol.atol
                )));
            }
        }
    }
    Ok(Outcome::Pass(max_abs, max_rel))
}

/// One row of the printed table.
#[derive(Default)]
struct Row {
    passed: usize,
    failed: usize,
    skipped: usize,
    max_abs: f64,
    max_rel: f64,
    /// Passed tests whose every run also equals the oracle on the SIMD catalog.
    simd_equal: usize,
}

/// `cargo xtask onnx-conformance`.
pub fn step_onnx_conformance(ctx: &Ctx) -> Result<()> {
    let ops = operators();
    let dir = node_tests(ctx, &ops)?;
    let manifest = fs::read_to_string(dir.join("manifest.tsv"))?;
    let mut rows: BTreeMap<String, Row> = ops
        .iter()
        .map(|o| ((*o).to_owned(), Row::default()))
        .collect();
    let mut skipped = Vec::new();
    let mut failed = Vec::new();
    let mut jobs = Vec::new();
    let mut key_of = BTreeMap::new();
    for line in manifest.lines() {
        let Some((name, op)) = line.split_once('\t') else {
            continue;
        };
        let outcome = if op == "-" {
            Outcome::Skip(
                "inputs or outputs that are not plain tensors (sequences, maps, optionals)".into(),
            )
        } else {
            run_test(&dir.join(name), op, &mut jobs)
        };
        let key = if op == "-" {
            "(sequence or optional I/O)".to_owned()
        } else if name.contains("_expanded") {
            format!("{op} (expanded)")
        } else {
            op.to_owned()
        };
        key_of.insert(name.to_owned(), key.clone());
        let row = rows.entry(key.clone()).or_default();
        match outcome {
            Outcome::Pass(a, r) => {
                row.passed += 1;
                row.max_abs = row.max_abs.max(a);
                row.max_rel = row.max_rel.max(r);
            }
            Outcome::Fail(why) => {
                row.failed += 1;
                failed.push(format!("{name} [{key}]: {why}"));
            }
            Outcome::Skip(why) => {
                row.skipped += 1;
                skipped.push(format!("{name} [{key}]: {why}"));
            }
        }
    }
    // Every passing test again on the SIMD catalog (a second runtime build), bitwise.
    let simd = onnx_simd::check(ctx, &jobs, &ctx.root.join("target").join("onnx-simd"))?;
    let mut simd_failed: BTreeMap<&str, String> = BTreeMap::new();
    for (job, r) in jobs.iter().zip(&simd.results) {
        if let Err(why) = r {
            simd_failed.entry(&job.test).or_insert_with(|| why.clone());
        }
    }
    let simd_tests: BTreeSet<&str> = jobs.iter().map(|j| j.test.as_str()).collect();
    for test in &simd_tests {
        let key = key_of.get(*test).cloned().unwrap_or_default();
        let row = rows.entry(key.clone()).or_default();
        match simd_failed.get(test) {
            None => row.simd_equal += 1,
            Some(why) => {
                row.passed -= 1;
                row.failed += 1;
                failed.push(format!("{test} [{key}]: {why}"));
            }
        }
    }
    println!("\nONNX backend node tests (onnx {ONNX_VERSION}), through the oracle and the no_std runtime (scalar catalog; every passing test again on the {} catalog):\n", simd.catalog);
    println!(
        "| operator | passed | failed | skipped | max abs diff | max rel diff | {} = oracle |",
        simd.catalog
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let mut total = Row::default();
    for (op, r) in &rows {
        let (abs, rel) = if r.passed == 0 {
            ("—".to_owned(), "—".to_owned())
        } else {
            (format!("{:.1e}", r.max_abs), format!("{:.1e}", r.max_rel))
        };
        println!(
            "| {op} | {} | {} | {} | {abs} | {rel} | {} |",
            r.passed, r.failed, r.skipped, r.simd_equal
        );
        total.passed += r.passed;
        total.failed += r.failed;
        total.skipped += r.skipped;
        total.simd_equal += r.simd_equal;
    }
    println!(
        "| **total** | {} | {} | {} | | | {} |",
        total.passed, total.failed, total.skipped, total.simd_equal
    );
    println!(
        "\n{} of {} passing tests with a runtime run ({} forward runs) bitwise equal to the oracle on the {} catalog too; {} passing tests have every output folded at plan time (no runtime run)",
        total.simd_equal,
        simd_tests.len(),
        jobs.len(),
        simd.catalog,
        total.passed - total.simd_equal
    );
    println!("\nskipped ({}):", skipped.len());
    for s in &skipped {
        println!("  {s}");
    }
    println!("\nfailed ({}):", failed.len());
    for f in &failed {
        println!("  {f}");
    }
    if !failed.is_empty() {
        bail!(
            "{} ONNX node tests failed (translated, but outside the tolerance, not bitwise between the readings, or not planned)",
            failed.len()
        );
    }
    Ok(())
}

/// `cargo xtask onnx-proto [--check]`: regenerates `planner-host/src/model/onnx/proto/onnx.rs`
/// from `onnx.proto` with `prost-build` and the `protoc` of `protoc-bin-vendored` (the
/// generator is its own workspace, `xtask/onnx-proto-gen/`); `--check` only compares.
pub fn verb_onnx_proto(ctx: &Ctx, args: &[String]) -> Result<()> {
    let check = match args {
        [] => false,
        [a] if a == "--check" => true,
        _ => bail!("usage: cargo xtask onnx-proto [--check]"),
    };
    let proto_dir = ctx.root.join("planner-host/src/model/onnx/proto");
    let committed = proto_dir.join("onnx.rs");
    let out = if check {
        ctx.root.join("target").join("onnx.rs.generated")
    } else {
        committed.clone()
    };
    let mut cmd = ctx.cargo([
        "run",
        "--release",
        "--quiet",
        "--manifest-path",
        "xtask/onnx-proto-gen/Cargo.toml",
        "--",
    ]);
    cmd.arg(&proto_dir).arg(&out).env(
        "CARGO_TARGET_DIR",
        ctx.root.join("target").join("onnx-proto-gen"),
    );
    run(cmd)?;
    if check {
        if fs::read(&out)? != fs::read(&committed)? {
            bail!(
                "{} differs from what onnx.proto generates: run `cargo xtask onnx-proto`",
                committed.display()
            );
        }
        eprintln!("onnx-proto: the committed onnx.rs is what onnx.proto generates");
    }
    Ok(())
}
