//! `cargo xtask matrix`: the cross-target matrix (issue 14, "the whole claim on every
//! target"). Every workload runs on every target through the same device code (the firmware
//! library, `tapeplan_firmware`), and every step is checked against the host oracle; the step
//! prints one table, rows = workloads, columns = targets, each cell `= N steps` (N state
//! digests, one per step, identical to the oracle's) or `n/a: why`. A cell that ran and
//! differs fails the step, after the table is printed.
//!
//! - Training workloads are run descriptions (`firmware-demo/models/*.run`). On the host
//!   (scalar, SSE2, AVX-512 catalogs) `firmware/tests/matrix.rs` trains them with
//!   `tapeplan_firmware::train` and verifies the transcript with the planner's `verify`. Under
//!   QEMU the firmware (feature `cnn`, the run given by `TAPEPLAN_RUN`) streams its transcript
//!   over the board's UART into `tapeplan verify --serial`, as `cargo xtask firmware` does.
//! - The Hessian-vector product workload: see [`HVP`].
//!
//! Documented with the table in `docs/cross-target-matrix.md`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use tapeplan_planner::exec::verify::HostRun;
use tapeplan_planner::model::hvp::{hvp_workload, HVP_ENTRY, HVP_SEED, HVP_STEPS};
use tapeplan_planner::model::RunConfig;

use crate::{browser, firmware, output, Ctx};

/// A column: where a workload runs.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Target {
    M4f,
    M3,
    M0,
    WasmNode,
    WasmChromium,
    WasmSimd128,
    HostScalar,
    HostSse2,
    HostAvx512,
}

/// The columns, in the table's order, with their headers.
const TARGETS: &[(Target, &str)] = &[
    (Target::M4f, "QEMU M4F"),
    (Target::M3, "QEMU M3"),
    (Target::M0, "QEMU M0"),
    (Target::WasmNode, "wasm Node"),
    (Target::WasmChromium, "wasm Chromium"),
    (Target::WasmSimd128, "wasm simd128"),
    (Target::HostScalar, "host scalar"),
    (Target::HostSse2, "host SSE2"),
    (Target::HostAvx512, "host AVX-512"),
];

/// A row: a workload, and the run description each target trains (`None`: `n/a` with the
/// reason).
struct Workload {
    /// Its name in the table.
    name: &'static str,
    /// The run description (under `firmware-demo/models/`) the host and wasm targets and the
    /// M4F train.
    run: &'static str,
    /// The M3's run, when it differs (the M3 has 64 KiB of RAM), or why there is none.
    m3: Result<&'static str, &'static str>,
    /// The M0's run (16 KiB of RAM), or why there is none.
    m0: Result<&'static str, &'static str>,
}

/// The training workloads.
const WORKLOADS: &[Workload] = &[
    Workload {
        name: "W3 online (2-16-16-1, SGD, batch 1)",
        run: "w3.run",
        m3: Ok("w3.run"),
        m0: Ok("w3.run"),
    },
    Workload {
        name: "Adam + dropout, 10^4 steps",
        run: "w3_adam_dropout.run",
        m3: Ok("w3_adam_dropout.run"),
        m0: Ok("w3_adam_dropout.run"),
    },
    Workload {
        name: "MNIST-1D CNN",
        run: "mnist1d.run",
        m3: Ok("mnist1d_m3.run"),
        m0: Err(
            "its 5 210 parameters and their gradient alone are 41 680 B, the M0 has 16 KiB of RAM",
        ),
    },
];

/// The Hessian-vector product row's name. Its workload is `tapeplan_planner::model::hvp`: the
/// plan's `hvp` entry run 256 times on seeded inputs by `tapeplan_firmware::run_entry`, each
/// step's output digest compared with the tape interpreter's (on the host by
/// `firmware/tests/matrix.rs`, under QEMU by the firmware's feature `hvp` and this step).
const HVP: &str = "Hessian-vector product entry (W3's loss, batch 4)";

/// A cell's outcome.
#[derive(Clone, Debug)]
enum Cell {
    /// Every step's digest equals the oracle's: steps, and a note (which run, a prefix).
    Same(usize, String),
    /// Not applicable here, and why.
    Na(String),
    /// Ran and failed: what happened.
    Failed(String),
}

impl Cell {
    fn show(&self) -> String {
        match self {
            Cell::Same(n, note) if note.is_empty() => format!("= {n}"),
            Cell::Same(n, note) => format!("= {n} ({note})"),
            Cell::Na(why) => format!("n/a: {why}"),
            Cell::Failed(what) => format!("FAILED: {what}"),
        }
    }
}

/// The matrix step.
pub fn step_matrix(ctx: &Ctx) -> Result<()> {
    let mut cells: BTreeMap<(String, Target), Cell> = BTreeMap::new();
    let rows: Vec<String> = WORKLOADS
        .iter()
        .map(|w| w.name.to_owned())
        .chain([HVP.to_owned()])
        .collect();

    // `TAPEPLAN_MATRIX_ONLY=host,wasm,qemu` (any of them) runs those columns only, for local
    // iteration; the others are then shown as not run.
    let only = std::env::var("TAPEPLAN_MATRIX_ONLY").ok();
    let wanted = |group: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|g| g == group))
    };
    if wanted("host") {
        host_cells(ctx, &mut cells)?;
    }
    if wanted("wasm") {
        wasm_cells(ctx, &mut cells)?;
    }
    if wanted("qemu") {
        qemu_cells(ctx, &mut cells)?;
    }
    if let Some(o) = &only {
        for w in &rows {
            for &(t, _) in TARGETS {
                cells
                    .entry((w.clone(), t))
                    .or_insert_with(|| Cell::Na(format!("not run (TAPEPLAN_MATRIX_ONLY={o})")));
            }
        }
    }
    for w in &rows {
        for &(t, _) in TARGETS {
            // Never blank: a cell nothing filled is a failure of this step.
            cells
                .entry((w.clone(), t))
                .or_insert_with(|| Cell::Failed("no result".into()));
        }
    }

    let table = render(&rows, &cells);
    println!("\n{table}");
    let failed: Vec<String> = cells
        .iter()
        .filter_map(|((w, t), c)| match c {
            Cell::Failed(what) => Some(format!("{w} on {t:?}: {what}")),
            _ => None,
        })
        .collect();
    if !failed.is_empty() {
        bail!(
            "cross-target matrix: {} cells failed:\n{}",
            failed.len(),
            failed.join("\n")
        );
    }
    Ok(())
}

/// The table, in Markdown: rows = workloads, columns = targets.
fn render(rows: &[String], cells: &BTreeMap<(String, Target), Cell>) -> String {
    let mut s = String::from("| workload |");
    for (_, header) in TARGETS {
        s += &format!(" {header} |");
    }
    s += "\n|---|";
    s += &"---|".repeat(TARGETS.len());
    for w in rows {
        s += &format!("\n| {w} |");
        for &(t, _) in TARGETS {
            let c = cells
                .get(&(w.clone(), t))
                .map(Cell::show)
                .unwrap_or_default();
            s += &format!(" {c} |");
        }
    }
    s + "\n"
}

/// The target folder of the `-C target-cpu=native` builds: the `simd` step's
/// (`target/simd-native`), or beside `CARGO_TARGET_DIR` when that is set.
fn native_target_dir(ctx: &Ctx) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => {
            let mut d = d;
            d.push("-simd-native");
            PathBuf::from(d)
        }
        None => ctx.root.join("target").join("simd-native"),
    }
}

/// Whether this CPU has AVX-512F (`/proc/cpuinfo`'s flags).
fn has_avx512f() -> bool {
    fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| {
        c.lines()
            .filter(|l| l.starts_with("flags"))
            .any(|l| l.split_whitespace().any(|f| f == "avx512f"))
    })
}

/// The host columns: `firmware/tests/matrix.rs` once per workload and catalog, each run
/// verified at every step against the oracle. Scalar: the runtime's default features; SSE2:
/// feature `simd` at x86_64's baseline; AVX-512: feature `simd` with `-C target-cpu=native`
/// (the `simd` step's target folder), and `n/a` on a CPU without AVX-512F.
fn host_cells(ctx: &Ctx, cells: &mut BTreeMap<(String, Target), Cell>) -> Result<()> {
    let avx512 = has_avx512f();
    for (target, simd, native, expect) in [
        (Target::HostScalar, false, false, "scalar"),
        (Target::HostSse2, true, false, "simd-sse2"),
        (Target::HostAvx512, true, true, "simd-avx512"),
    ] {
        if native && !avx512 {
            for name in WORKLOADS.iter().map(|w| w.name).chain([HVP]) {
                cells.insert(
                    (name.to_owned(), target),
                    Cell::Na("no avx512f on this CPU".into()),
                );
            }
            continue;
        }
        let runs = WORKLOADS
            .iter()
            .map(|w| (w.name, format!("firmware-demo/models/{}", w.run)))
            .chain([(HVP, "hvp".to_owned())]);
        for (name, run) in runs {
            let mut cmd = ctx.cargo(["test", "-p", "tapeplan-firmware", "--test", "matrix"]);
            if simd {
                cmd.args(["--features", "simd"]);
            }
            cmd.args(["--", "--nocapture"])
                .env("TAPEPLAN_MATRIX_RUNS", &run);
            if native {
                cmd.env("RUSTFLAGS", "-C target-cpu=native")
                    .env("CARGO_TARGET_DIR", native_target_dir(ctx));
            }
            let cell = match output(cmd) {
                Ok(out) => host_cell(&out, &run, expect),
                Err(e) => Cell::Failed(format!("{e:#}")),
            };
            eprintln!("matrix: {name} on {target:?}: {}", cell.show());
            cells.insert((name.to_owned(), target), cell);
        }
    }
    Ok(())
}

/// A host or wasm cell from the test's `matrix-cell RUN CATALOG SAME/STEPS` line.
fn host_cell(stdout: &str, run: &str, expect: &str) -> Cell {
    let Some(line) = stdout
        .lines()
        .find(|l| l.starts_with(&format!("matrix-cell {run} ")))
    else {
        return Cell::Failed(format!("the test printed no matrix-cell line for {run}"));
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    let (catalog, counts) = (words.get(2).copied(), words.get(3).copied());
    if catalog != Some(expect) {
        return Cell::Failed(format!(
            "ran the {} catalog, not {expect}",
            catalog.unwrap_or("?")
        ));
    }
    match counts.and_then(|c| c.split_once('/')) {
        Some((same, steps)) if same == steps => match steps.parse() {
            Ok(n) => Cell::Same(n, String::new()),
            Err(_) => Cell::Failed(format!("unreadable counts in {line:?}")),
        },
        _ => Cell::Failed(format!("not every step identical: {line:?}")),
    }
}

/// The QEMU columns: the firmware (feature `cnn`) built for each workload's run on each core,
/// trained under QEMU and verified as it streams (`tapeplan verify --serial`). The MNIST-1D
/// CNN's M4F and M3 runs are the `qemu` step's (`m4f-cnn`, `m3-cnn`): when their transcripts
/// are there they are verified again against the run, not rebuilt.
fn qemu_cells(ctx: &Ctx, cells: &mut BTreeMap<(String, Target), Cell>) -> Result<()> {
    let tapeplan = firmware::verifier(ctx)?;
    let dir = ctx.root.join("firmware-demo");
    let out = dir.join("target").join("xtask");
    fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    for w in WORKLOADS {
        for (target, core, run) in [
            (Target::M4f, "m4f", Ok(w.run)),
            (Target::M3, "m3", w.m3),
            (Target::M0, "m0", w.m0),
        ] {
            let run = match run {
                Ok(r) => r,
                Err(why) => {
                    cells.insert((w.name.to_owned(), target), Cell::Na(why.to_owned()));
                    continue;
                }
            };
            let run_file = dir.join("models").join(run);
            let note = if run == w.run {
                String::new()
            } else {
                format!("models/{run}")
            };
            let stem = run.trim_end_matches(".run");
            let reused = match (core, stem) {
                ("m4f", "mnist1d") => Some("m4f-cnn"),
                ("m3", "mnist1d_m3") => Some("m3-cnn"),
                _ => None,
            };
            let cell = match reused.map(|n| out.join(format!("{n}.transcript"))) {
                Some(t) if t.is_file() => {
                    match firmware::verify_file(&ctx.root, &tapeplan, &t, &run_file) {
                        Ok(()) => states(&t).map_or_else(
                            |e| Cell::Failed(format!("{e:#}")),
                            |n| {
                                Cell::Same(
                                    n,
                                    [note.as_str(), "the qemu step's run"]
                                        .iter()
                                        .filter(|s| !s.is_empty())
                                        .copied()
                                        .collect::<Vec<_>>()
                                        .join(", "),
                                )
                            },
                        ),
                        Err(e) => Cell::Failed(format!("{e:#}")),
                    }
                }
                _ => {
                    let name = format!("matrix-{core}-{stem}");
                    match firmware::run_on_core(
                        ctx,
                        (&dir, &out, &tapeplan),
                        core,
                        &name,
                        &run_file,
                    ) {
                        Ok(t) => Cell::Same(state_lines(&t), note.clone()),
                        Err(e) => Cell::Failed(format!("{e:#}")),
                    }
                }
            };
            eprintln!("matrix: {} on {target:?}: {}", w.name, cell.show());
            cells.insert((w.name.to_owned(), target), cell);
        }
    }
    // The HVP entry on every core: its `state` lines against the tape interpreter's digests.
    let w = tapeplan_planner::model::hvp::hvp_workload()?;
    let expected = w.expected_digests(tapeplan_planner::model::hvp::HVP_STEPS)?;
    for (target, core) in [(Target::M4f, "m4f"), (Target::M3, "m3"), (Target::M0, "m0")] {
        let name = format!("matrix-{core}-hvp");
        let cell = match firmware::run_hvp_on_core(ctx, (&dir, &out), core, &name) {
            Ok(t) => compare_digests(&t, &expected),
            Err(e) => Cell::Failed(format!("{e:#}")),
        };
        eprintln!("matrix: {HVP} on {target:?}: {}", cell.show());
        cells.insert((HVP.to_owned(), target), cell);
    }
    Ok(())
}

/// A cell from a transcript's `state STEP HEX` lines against the oracle's digests, step by
/// step.
fn compare_digests(transcript: &str, expected: &[u64]) -> Cell {
    let got: Vec<Option<u64>> = transcript
        .lines()
        .filter_map(|l| l.strip_prefix("state "))
        .map(|l| {
            l.split_once(' ')
                .and_then(|(_, hex)| u64::from_str_radix(hex, 16).ok())
        })
        .collect();
    if !transcript.lines().any(|l| l == "end ok") {
        return Cell::Failed("the transcript does not end with `end ok`".into());
    }
    if got.len() != expected.len() {
        return Cell::Failed(format!(
            "{} state lines, the oracle has {} steps",
            got.len(),
            expected.len()
        ));
    }
    match got.iter().zip(expected).position(|(g, e)| *g != Some(*e)) {
        None => Cell::Same(expected.len(), String::new()),
        Some(i) => Cell::Failed(format!(
            "step {}: device {:?} vs oracle {:016x}",
            i + 1,
            got[i],
            expected[i]
        )),
    }
}

/// The `state` lines (one per step) of a transcript file that `tapeplan verify` accepted.
fn states(transcript: &Path) -> Result<usize> {
    let text = fs::read_to_string(transcript)
        .with_context(|| format!("reading {}", transcript.display()))?;
    Ok(state_lines(&text))
}

/// The `state` lines of a transcript.
fn state_lines(text: &str) -> usize {
    text.lines().filter(|l| l.starts_with("state ")).count()
}

/// The wasm cases: each training workload's run (key, run description) and the HVP entry.
const WASM_CASES: &[(&str, &str)] = &[
    ("w3", "w3.run"),
    ("adam_dropout", "w3_adam_dropout.run"),
    ("mnist1d", "mnist1d.run"),
];

/// The workspace's target folder (`CARGO_TARGET_DIR`, or `target/`).
fn target_dir(ctx: &Ctx) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| ctx.root.join("target"))
}

/// Writes the cases `wasm/matrix/tests/matrix.rs` embeds into `<target>/matrix-cases/<key>/`:
/// the plan, the initial model tensors, the rows (`f32` features, `u8` labels, `f32`
/// targets), the host oracle's digest after every step (`expected.u64`, little-endian) and
/// `meta.txt`. Answers the folder.
fn write_cases(ctx: &Ctx) -> Result<PathBuf> {
    let dir = target_dir(ctx).join("matrix-cases");
    // The runs' own paths are relative to their files' folders (`RunConfig::from_file`); the
    // folders below are the repository's.
    std::env::set_current_dir(&ctx.root)?;
    let le = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let put = |key: &str, files: &[(&str, &[u8])]| -> Result<()> {
        let d = dir.join(key);
        fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        for (name, bytes) in files {
            fs::write(d.join(name), bytes)
                .with_context(|| format!("writing {}", d.join(name).display()))?;
        }
        Ok(())
    };
    let expected =
        |digests: &[u64]| -> Vec<u8> { digests.iter().flat_map(|d| d.to_le_bytes()).collect() };
    for &(key, run) in WASM_CASES {
        let path = ctx.root.join("firmware-demo").join("models").join(run);
        let cfg = RunConfig::from_file(&path).with_context(|| format!("{}", path.display()))?;
        let job = cfg.job()?;
        let init: Vec<f32> = cfg.initial_parameters(&job)?.concat();
        let params: Vec<String> = job
            .parameter_shapes()
            .iter()
            .map(|(n, s)| format!("{n}:{}", s.elems()))
            .collect();
        let train = cfg.training_set()?;
        let host = HostRun::new(&cfg)?;
        let meta = format!(
            "kind train\nconfig {}\nbatch {}\nepochs {}\nseed {}\nd_in {}\nd_out {}\nparams {}\n",
            cfg.to_line(),
            cfg.batch,
            cfg.epochs,
            cfg.seed,
            cfg.layers[0],
            train.n_targets(),
            params.join(" ")
        );
        put(
            key,
            &[
                ("meta.txt", meta.as_bytes()),
                ("plan.bin", &job.schedule.to_bytes()),
                ("init.bin", &le(&init)),
                ("features.f32", &le(&train.features)),
                ("labels.u8", &train.labels),
                ("targets.f32", &le(train.targets())),
                ("expected.u64", &expected(host.states())),
            ],
        )?;
    }
    let w = hvp_workload()?;
    let params: Vec<String> = w
        .params
        .iter()
        .map(|(n, s)| format!("{n}:{}", s.elems()))
        .collect();
    let meta = format!(
        "kind entry\nentry {HVP_ENTRY}\nsteps {HVP_STEPS}\nseed {HVP_SEED}\nparams {}\n",
        params.join(" ")
    );
    put(
        "hvp",
        &[
            ("meta.txt", meta.as_bytes()),
            ("plan.bin", &w.plan),
            ("init.bin", &w.init_bytes()),
            ("features.f32", &[]),
            ("labels.u8", &[]),
            ("targets.f32", &[]),
            ("expected.u64", &expected(&w.expected_digests(HVP_STEPS)?)),
        ],
    )?;
    Ok(dir)
}

/// The wasm columns: `wasm/matrix`'s `wasm-bindgen-test` suite (release) over the cases
/// [`write_cases`] wrote, in Node, in headless Chromium, and in Node with simd128 and the
/// runtime's simd catalog (a target folder of its own). A test passes only if every step's
/// digest equals the oracle's; `n/a` when the wasm tools are missing (the `wasm-setup` step
/// installs them).
fn wasm_cells(ctx: &Ctx, cells: &mut BTreeMap<(String, Target), Cell>) -> Result<()> {
    let rows: Vec<(&str, &str)> = WORKLOADS
        .iter()
        .zip(["w3", "adam_dropout", "mnist1d"])
        .map(|(w, k)| (w.name, k))
        .chain([(HVP, "hvp")])
        .collect();
    let needs = browser::WasmNeeds {
        chromium: true,
        ..browser::WasmNeeds::BUILD
    };
    if let Err(e) = browser::require_wasm_tools(ctx, needs) {
        for &(name, _) in &rows {
            for t in [Target::WasmNode, Target::WasmChromium, Target::WasmSimd128] {
                cells.insert(
                    (name.to_owned(), t),
                    Cell::Na(format!("wasm tools missing ({e}); cargo xtask wasm-setup")),
                );
            }
        }
        return Ok(());
    }
    let cases = write_cases(ctx)?;
    let expected_steps = |key: &str| -> usize {
        fs::metadata(cases.join(key).join("expected.u64")).map_or(0, |m| m.len() as usize / 8)
    };
    let simd_dir = target_dir(ctx).join("wasm-matrix-simd128");
    for target in [Target::WasmNode, Target::WasmChromium, Target::WasmSimd128] {
        let mut cmd = match target {
            Target::WasmChromium => {
                let mut c = ctx.tool(
                    "wasm-pack",
                    [
                        "test",
                        "--release",
                        "--headless",
                        "--chrome",
                        "--chromedriver",
                        browser::CHROMEDRIVER,
                        "--",
                        "--",
                        "--nocapture",
                    ],
                );
                c.env("WASM_BINDGEN_USE_BROWSER", "1");
                c
            }
            Target::WasmSimd128 => {
                let mut c = ctx.tool(
                    "wasm-pack",
                    [
                        "test",
                        "--release",
                        "--node",
                        "--",
                        "--features",
                        "simd",
                        "--",
                        "--nocapture",
                    ],
                );
                c.env("RUSTFLAGS", "-C target-feature=+simd128")
                    .env("CARGO_TARGET_DIR", &simd_dir);
                c
            }
            _ => ctx.tool(
                "wasm-pack",
                ["test", "--release", "--node", "--", "--", "--nocapture"],
            ),
        };
        cmd.current_dir(ctx.root.join("wasm").join("matrix"))
            .env("TAPEPLAN_MATRIX_CASES", &cases);
        let result = output(cmd);
        let catalog = if target == Target::WasmSimd128 {
            "simd128"
        } else {
            "scalar"
        };
        for &(name, key) in &rows {
            // The test's `matrix-cell KEY CATALOG SAME/STEPS` line (console output, shown with
            // --nocapture), and its steps against the oracle's.
            let cell = match &result {
                Err(e) => Cell::Failed(format!("{e:#}")),
                Ok(out) => match host_cell(out, key, catalog) {
                    Cell::Same(n, _) if n != expected_steps(key) => {
                        Cell::Failed(format!("{n} steps, the oracle has {}", expected_steps(key)))
                    }
                    c => c,
                },
            };
            eprintln!("matrix: {name} on {target:?}: {}", cell.show());
            cells.insert((name.to_owned(), target), cell);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_is_same_only_when_every_step_matches() {
        let t =
            "tapeplan-transcript 1\nstate 1 00000000000000aa\nstate 2 00000000000000bb\nend ok\n";
        assert!(matches!(
            compare_digests(t, &[0xaa, 0xbb]),
            Cell::Same(2, _)
        ));
        let Cell::Failed(why) = compare_digests(t, &[0xaa, 0xbc]) else {
            panic!("a differing step passed");
        };
        assert!(why.starts_with("step 2:"), "{why}");
        assert!(matches!(compare_digests(t, &[0xaa]), Cell::Failed(_)));
        let cut = t.replace("end ok\n", "");
        assert!(matches!(
            compare_digests(&cut, &[0xaa, 0xbb]),
            Cell::Failed(_)
        ));
    }

    #[test]
    fn a_host_cell_checks_its_catalog_and_counts() {
        let out = "matrix-cell w3 simd-sse2 1024/1024\n";
        assert!(matches!(
            host_cell(out, "w3", "simd-sse2"),
            Cell::Same(1024, _)
        ));
        assert!(matches!(
            host_cell(out, "w3", "simd-avx512"),
            Cell::Failed(_)
        ));
        assert!(matches!(
            host_cell(out, "hvp", "simd-sse2"),
            Cell::Failed(_)
        ));
        let short = "matrix-cell w3 scalar 1023/1024\n";
        assert!(matches!(host_cell(short, "w3", "scalar"), Cell::Failed(_)));
    }

    #[test]
    fn the_table_has_a_row_per_workload_and_no_blank_cell() {
        let rows = vec!["a".to_owned()];
        let mut cells = BTreeMap::new();
        for &(t, _) in TARGETS {
            cells.insert(("a".to_owned(), t), Cell::Na("why".into()));
        }
        let table = render(&rows, &cells);
        assert_eq!(table.lines().count(), 3);
        assert_eq!(table.matches("n/a: why").count(), TARGETS.len());
    }
}
