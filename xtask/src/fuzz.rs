//! Fuzzing and Miri (issue 16): `cargo xtask fuzz [--seconds N] [--target NAME]` runs the
//! cargo-fuzz targets of `fuzz/` (libFuzzer, nightly), and the CI steps `fuzz-smoke` (every
//! target for a few seconds) and `miri` (the runtime's unit and rejection tests under Miri).
//!
//! Both need the nightly toolchain; `ensure_nightly` installs it (with Miri and `rust-src`)
//! and `cargo-fuzz` when a fresh machine lacks them.

use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::{output, run, Ctx};

/// The fuzz targets (`fuzz/fuzz_targets/*.rs`), in the order they run.
pub const TARGETS: &[&str] = &[
    "plan_bytes",
    "plan_mutate",
    "checkpoint",
    "differential",
    "onnx_import",
];

/// Seconds per target in CI's smoke run.
const SMOKE_SECONDS: u32 = 15;

/// The toolchain cargo-fuzz and Miri run on.
const NIGHTLY: &str = "nightly";

/// `cargo` of the nightly toolchain, through rustup (the workspace pins a stable one), run in
/// `dir`, with the variables the outer `cargo xtask` set for its own toolchain removed.
fn nightly_cargo(dir: &std::path::Path) -> Command {
    let mut cmd = Command::new("rustup");
    cmd.args(["run", NIGHTLY, "cargo"])
        .current_dir(dir)
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("RUSTC")
        .env_remove("RUSTDOC")
        .env_remove("CARGO");
    cmd
}

/// Installs the nightly toolchain with Miri and `rust-src`, and cargo-fuzz, when missing.
fn ensure_nightly(ctx: &Ctx, miri: bool) -> Result<()> {
    let have = output(ctx.tool("rustup", ["toolchain", "list"]))?;
    if !have.lines().any(|l| l.starts_with(NIGHTLY)) {
        run(ctx.tool(
            "rustup",
            ["toolchain", "install", NIGHTLY, "--profile", "minimal"],
        ))?;
    }
    if miri {
        let comps = output(ctx.tool(
            "rustup",
            ["component", "list", "--installed", "--toolchain", NIGHTLY],
        ))?;
        if !comps.lines().any(|l| l.starts_with("miri")) || !comps.lines().any(|l| l == "rust-src")
        {
            run(ctx.tool(
                "rustup",
                [
                    "component",
                    "add",
                    "miri",
                    "rust-src",
                    "--toolchain",
                    NIGHTLY,
                ],
            ))?;
        }
    } else {
        let probe = nightly_cargo(&ctx.root)
            .args(["fuzz", "--version"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !probe.is_ok_and(|s| s.success()) {
            run(ctx.cargo(["install", "cargo-fuzz", "--locked"]))
                .context("could not install cargo-fuzz")?;
        }
    }
    Ok(())
}

/// What libFuzzer reported at the end of a run.
struct Stats {
    target: &'static str,
    runs: u64,
    seconds: f64,
    cov: u64,
    features: u64,
}

/// The last `#N ... cov: C ft: F` line of libFuzzer's log.
fn parse_stats(target: &'static str, log: &str, seconds: f64) -> Stats {
    let mut s = Stats {
        target,
        runs: 0,
        seconds,
        cov: 0,
        features: 0,
    };
    for line in log.lines().filter(|l| l.starts_with('#')) {
        let mut words = line.split_whitespace();
        if let Some(n) = words.next().and_then(|w| w[1..].parse().ok()) {
            s.runs = n;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        for pair in words.windows(2) {
            match pair[0] {
                "cov:" => s.cov = pair[1].parse().unwrap_or(s.cov),
                "ft:" => s.features = pair[1].parse().unwrap_or(s.features),
                _ => {}
            }
        }
    }
    s
}

/// The planner's plans, written into `plan_bytes`'s corpus as its seeds (the other targets
/// build their seed plans in-process, `tapeplan_fuzz::seeds`): without them raw bytes rarely
/// pass the header's magic and checksum.
fn seed_plan_bytes(ctx: &Ctx) -> Result<()> {
    let dir = ctx.root.join("fuzz").join("corpus").join("plan_bytes");
    std::fs::create_dir_all(&dir)?;
    let seeds: [(&str, &[&str]); 4] = [
        ("mlp-sgd", &["--layers", "16,8,4", "--batch", "4"]),
        (
            "mlp-sgd-unfused",
            &["--layers", "16,8,4", "--batch", "4", "--no-fusion"],
        ),
        (
            "adam-dropout",
            &[
                "--layers",
                "6,5,3",
                "--batch",
                "3",
                "--optimizer",
                "adam",
                "--dropout",
                "0.25",
            ],
        ),
        (
            "momentum-unguarded",
            &[
                "--layers",
                "4,3,2",
                "--batch",
                "2",
                "--optimizer",
                "momentum",
                "--no-guard",
            ],
        ),
    ];
    for (name, args) in seeds {
        let out = dir.join(format!("seed-{name}.plan"));
        let mut cmd = ctx.cargo([
            "run",
            "-q",
            "--release",
            "-p",
            "tapeplan-planner",
            "--",
            "plan",
        ]);
        cmd.args(args).arg("-o").arg(&out);
        cmd.stdout(Stdio::null());
        run(cmd).with_context(|| format!("could not plan the fuzz seed {name}"))?;
    }
    Ok(())
}

/// Up to 200 node-test models of the ONNX conformance step's cache (`target/onnx-node-tests`,
/// when `cargo xtask onnx-conformance` has made it), written into `onnx_import`'s corpus.
fn seed_onnx(ctx: &Ctx) -> Result<()> {
    let dir = ctx.root.join("fuzz").join("corpus").join("onnx_import");
    std::fs::create_dir_all(&dir)?;
    let cache = ctx.root.join("target").join("onnx-node-tests");
    let mut models = Vec::new();
    for key in std::fs::read_dir(&cache).into_iter().flatten().flatten() {
        for test in std::fs::read_dir(key.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let model = test.path().join("model.onnx");
            if model.is_file() {
                models.push(model);
            }
        }
    }
    models.sort();
    for m in models.iter().take(200) {
        let name = m
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        std::fs::copy(m, dir.join(format!("seed-{name}.onnx")))?;
    }
    eprintln!("fuzz: {} ONNX seed models", models.len().min(200));
    Ok(())
}

/// Builds the targets (sanitizer `none`: the runtime's one `unsafe` is a volatile read of a
/// reference, so AddressSanitizer has nothing to watch that Rust's own bounds checks do not;
/// coverage instrumentation stays),
/// then runs each for `seconds`, failing at the first crash, and prints the table.
fn fuzz(ctx: &Ctx, targets: &[&'static str], seconds: u32) -> Result<()> {
    ensure_nightly(ctx, false)?;
    let fuzz_dir = ctx.root.join("fuzz");
    let mut build = nightly_cargo(&fuzz_dir);
    build.args(["fuzz", "build", "--sanitizer", "none"]);
    run(build)?;
    seed_plan_bytes(ctx)?;
    seed_onnx(ctx)?;
    let mut table = Vec::new();
    for &target in targets {
        let corpus = fuzz_dir.join("corpus").join(target);
        std::fs::create_dir_all(&corpus)?;
        let mut cmd = nightly_cargo(&fuzz_dir);
        cmd.args(["fuzz", "run", "--sanitizer", "none", target])
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .arg("-rss_limit_mb=2048")
            .arg("-print_final_stats=1");
        eprintln!("$ (fuzz) cargo +{NIGHTLY} fuzz run {target} -- -max_total_time={seconds}");
        let start = Instant::now();
        let out = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .with_context(|| format!("could not start the fuzz target {target}"))?;
        let log = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            for l in tail.iter().rev() {
                eprintln!("{l}");
            }
            bail!(
                "fuzz target {target} failed ({}): the crashing input is in fuzz/artifacts/{target}/",
                out.status
            );
        }
        table.push(parse_stats(target, &log, start.elapsed().as_secs_f64()));
    }
    println!("\ntarget        runs        exec/s   cov   features");
    let mut total = 0;
    for s in &table {
        total += s.runs;
        println!(
            "{:<13} {:>10} {:>9.0} {:>5} {:>10}",
            s.target,
            s.runs,
            s.runs as f64 / s.seconds.max(1e-9),
            s.cov,
            s.features
        );
    }
    println!("total         {total:>10}");
    Ok(())
}

/// `cargo xtask fuzz [--seconds N] [--target NAME]`.
pub fn verb_fuzz(ctx: &Ctx, args: &[String]) -> Result<()> {
    let mut seconds = 60;
    let mut targets: Vec<&'static str> = TARGETS.to_vec();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match (a.as_str(), it.next()) {
            ("--seconds", Some(n)) => {
                seconds = n.parse().with_context(|| format!("--seconds {n}"))?;
            }
            ("--target", Some(t)) => {
                let Some(&t) = TARGETS.iter().find(|&&x| x == t) else {
                    bail!("no fuzz target `{t}`: the targets are {TARGETS:?}");
                };
                targets = vec![t];
            }
            _ => bail!("usage: cargo xtask fuzz [--seconds N] [--target NAME]"),
        }
    }
    fuzz(ctx, &targets, seconds)
}

/// CI's smoke run: every target for [`SMOKE_SECONDS`].
pub fn step_fuzz_smoke(ctx: &Ctx) -> Result<()> {
    fuzz(ctx, TARGETS, SMOKE_SECONDS)
}

/// The runtime's unit tests and its rejection, checkpoint and API (`run`) tests under Miri
/// (undefined behaviour, out-of-bounds and uninitialized reads, in our code and the crates
/// it links), with few property-test cases: Miri runs about a thousand times slower (the
/// hostile-plan suite took over six CPU minutes alone under Miri, and the model property tests
/// 395 s with four cases each, so they stay out of CI; run
/// `cargo +nightly miri test -p tapeplan-runtime --test runtime -- hostile:: model::` by hand).
/// The integration tests are one binary (`runtime`), so the subjects are chosen by filter, in a
/// run of their own: the filters would also apply to the unit tests.
pub fn step_miri(ctx: &Ctx) -> Result<()> {
    ensure_nightly(ctx, true)?;
    let miri = |args: &[&str]| {
        let mut cmd = nightly_cargo(&ctx.root);
        cmd.args(["miri", "test", "-p", "tapeplan-runtime"])
            .args(args)
            .env("PROPTEST_CASES", "4")
            .env("MIRIFLAGS", "-Zmiri-disable-isolation");
        cmd
    };
    run(miri(&["--lib"]))?;
    run(miri(&[
        "--test",
        "runtime",
        "--",
        "reject::",
        "checkpoint::",
        "run::",
        // The two exhaustive checkpoint tests (every bit flipped, every length cut) take
        // minutes under Miri and exercise the same code as their neighbours.
        "--skip",
        "every_flipped_bit_and_byte",
        "--skip",
        "truncation_at_every_length",
    ]))
}
