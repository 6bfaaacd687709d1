//! tapeplan's project automation, in the `cargo xtask` pattern
//! (<https://github.com/matklad/cargo-xtask>): `cargo xtask <verb>` runs a verb from the table
//! in [`VERBS`]. `cargo xtask ci` is the one command that runs every check, the same locally
//! as in CI (`.ci/run`).
//!
//! Adding a verb: write a `fn(&Ctx, &[String]) -> Result<()>` and add a row to [`VERBS`]. A
//! verb that is a single check is better written as a [`Step`] in [`STEPS`]: it then becomes a
//! verb of its own and can join `ci` by name in [`CI_STEPS`].

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

mod aifes;
mod bench;
mod browser;
mod docs;

mod firmware;
mod fuzz;
mod mathcheck;
mod matrix;
mod onnx;
mod onnx_simd;
mod ort;
mod package;
mod peers;
mod rtt;

/// Rust targets a fresh machine must add: the no_std targets the runtime is built for, plus
/// `thumbv7m-none-eabi` (Cortex-M3, for the QEMU firmware runs).
const TARGETS: &[&str] = &[
    "thumbv7em-none-eabihf",
    "thumbv7m-none-eabi",
    "thumbv6m-none-eabi",
    "riscv32imac-unknown-none-elf",
    "wasm32-unknown-unknown",
];

/// The targets `tapeplan-runtime` must build for, proving it `no_std` and heap-free.
const NOSTD_TARGETS: &[&str] = &[
    "thumbv7em-none-eabihf",
    "thumbv6m-none-eabi",
    "riscv32imac-unknown-none-elf",
    "wasm32-unknown-unknown",
];

/// rustup components the checks need.
const COMPONENTS: &[&str] = &["clippy", "rustfmt"];

/// A check: a name (also its verb), a line of help, and what it runs.
struct Step {
    name: &'static str,
    about: &'static str,
    run: fn(&Ctx) -> Result<()>,
}

/// Every step, in the order `ci` runs them.
const STEPS: &[Step] = &[
    Step {
        name: "setup",
        about: "add the rustup targets and components a fresh machine lacks (idempotent)",
        run: step_setup,
    },
    Step {
        name: "fmt",
        about: "cargo fmt --all -- --check",
        run: step_fmt,
    },
    Step {
        name: "clippy",
        about: "cargo clippy --workspace --all-targets -- -D warnings",
        run: step_clippy,
    },
    Step {
        name: "test",
        about: "cargo test --workspace, and the runtime's rejection tests with one math profile each",
        run: step_test,
    },
    Step {
        name: "nostd",
        about: "cargo build -p tapeplan-runtime for each no_std target, and -p tapeplan-firmware for thumbv6m, thumbv7m and thumbv7em",
        run: step_nostd,
    },
    Step {
        name: "simd",
        about: "the runtime's simd catalog: clippy, catalog and training tests (SSE2, then -C target-cpu=native), catalog tests with AVX2 and FMA where the host has them, wasm32 simd128 build",
        run: step_simd,
    },
    Step {
        name: "doc",
        about: "cargo doc --no-deps, the libraries in dependency order then the workspace, RUSTDOCFLAGS=\"-D warnings -D rustdoc::broken-intra-doc-links\"; fails on intra-doc links rendered as text",
        run: step_doc,
    },
    Step {
        name: "publish-dry-run",
        about: "cargo publish --dry-run of tapeplan-core, tapeplan-runtime and tapeplan-planner (each verified building from its package), and their file lists (README, licenses)",
        run: package::step_publish_dry_run,
    },
    Step {
        name: "demo",
        about: "cargo run --release -p tapeplan-planner -- demo (fails if the bits differ)",
        run: step_demo,
    },
    Step {
        name: "docs-check",
        about: "run the commands whose output the docs quote (`<!-- docs-check -->` blocks) and fail on a difference",
        run: docs::step_docs_check,
    },
    Step {
        name: "onnx-conformance",
        about: "ONNX's backend node tests (pinned onnx, generated into a cache) through the translation, the oracle and the no_std runtime (scalar catalog, then every passing test again on the simd catalog: a second runtime build): bitwise between the readings, each operator's tolerance against the expected outputs; prints the table",
        run: onnx::step_onnx_conformance,
    },
    Step {
        name: "ort-check",
        about: "the five ONNX test models trained by tapeplan (oracle and no_std runtime, bitwise) and by ONNX Runtime's training (pinned onnxruntime-training-cpu in the venv): losses, gradients and parameters after 5 SGD steps, and after 5 steps of Adam, AdamW, momentum and Nesterov, within 1e-5 + 1e-4|ORT|; prints the tables",
        run: ort::step_ort_check,
    },
    Step {
        name: "qemu",
        about: "cargo xtask firmware: train on Cortex-M4F, M3 and M0 under QEMU (and the M4F under the fast math profile too), verify bitwise against the oracle, check sizes",
        run: firmware::step_qemu,
    },
    Step {
        name: "web-assets",
        about: "write the browser demo's plan, data and host oracle digest into wasm/www/assets",
        run: browser::step_web_assets,
    },
    Step {
        name: "wasm-setup",
        about: "install what the browser checks need and lack, three lines at once: chromium, chromedriver, node and npm (then npm packages); wasm-bindgen-cli; wasm-pack",
        run: browser::step_wasm_setup,
    },
    Step {
        name: "wasm-test",
        about: "wasm-bindgen-test suites in Node and headless Chromium, and the Node package's test",
        run: browser::step_wasm_test,
    },
    Step {
        name: "npm-pack",
        about: "the wasm package for npm: wasm-pack build --target web, wasm-opt, npm pack into target/npm; the tarball's file list and package.json checked, and the package imported by name in Node against the host; then the small module for the demo's digits MLP (cargo xtask wasm-small): within 102 400 B, the demo's run in Node bitwise against the host oracle, a ReLU plan refused naming relu",
        run: package::step_npm_pack,
    },
    Step {
        name: "wasm-simd",
        about: "the wasm-bindgen-test suite in Node with the runtime's simd catalog under simd128 (a whole training run against the host oracle)",
        run: step_wasm_simd,
    },
    Step {
        name: "miri",
        about: "the runtime's unit, rejection, checkpoint and API tests under Miri (nightly; installed if missing)",
        run: fuzz::step_miri,
    },
    Step {
        name: "fuzz-smoke",
        about: "every cargo-fuzz target of fuzz/ for 15 s (nightly and cargo-fuzz; installed if missing)",
        run: fuzz::step_fuzz_smoke,
    },
    Step {
        name: "matrix",
        about: "the cross-target matrix (issue 14): W3, a Hessian-vector product entry, Adam + dropout for 10^4 steps and the MNIST-1D CNN on QEMU M4F/M3/M0, wasm (Node, Chromium, simd128) and the host (scalar, SSE2, AVX-512), every step's digest against the host oracle through the firmware library; prints the table",
        run: matrix::step_matrix,
    },
    Step {
        name: "browser",
        about: "the demo page in headless Chromium: train, check the digest against the host oracle, screenshot",
        run: browser::step_browser,
    },
];

/// The steps `cargo xtask ci` runs, in order.
const CI_STEPS: &[&str] = &[
    "setup",
    "fmt",
    "clippy",
    "test",
    "nostd",
    "simd",
    "doc",
    "publish-dry-run",
    "demo",
    "docs-check",
    "onnx-conformance",
    "ort-check",
    "miri",
    "fuzz-smoke",
    "qemu",
    "wasm-setup",
    "wasm-test",
    "npm-pack",
    "wasm-simd",
    "browser",
    "matrix",
];

/// The steps `cargo xtask ci --quick` leaves out, for local iteration: the slow cross-target
/// ones (QEMU, WebAssembly, the browser, Miri, fuzzing) and the packaging checks, whose first
/// runs rebuild the dependency tree. CI (`bash .ci/run`) runs them all.
const QUICK_SKIPS: &[&str] = &[
    "publish-dry-run",
    "miri",
    "fuzz-smoke",
    "qemu",
    "wasm-setup",
    "wasm-test",
    "npm-pack",
    "wasm-simd",
    "browser",
    "matrix",
];

/// A verb that is not a single step.
struct Verb {
    name: &'static str,
    usage: &'static str,
    about: &'static str,
    run: fn(&Ctx, &[String]) -> Result<()>,
}

/// The verbs besides the steps.
const VERBS: &[Verb] = &[
    Verb {
        name: "ci",
        usage: "ci [--quick] [--from STEP]",
        about: "run every check in order, failing fast: what CI runs (`bash .ci/run`); --quick leaves out the slow cross-target and packaging steps (see below) for local iteration",
        run: verb_ci,
    },
    Verb {
        name: "serve",
        usage: "serve [--port N]",
        about: "build the browser demo and serve wasm/www on http://127.0.0.1:8000/",
        run: browser::verb_serve,
    },
    Verb {
        name: "firmware",
        usage: "firmware [--core m4f|m3|m0|all] [--math precise|fast|both] [--icount] [--bless] | firmware --full [--transcript PATH --wall-secs S]",
        about: "build the Cortex-M firmware, train it under QEMU, verify it bitwise against the oracle, check its sizes (default: every core precise, the M4F fast too; --math: precise, fast or both; --icount: count instructions per train step, fast vs precise; --bless: rewrite the size snapshot; --full: MNIST-1D's whole schedule on the M4F once, hours, its result into firmware-demo/full-run.txt; not in CI)",
        run: firmware::verb_firmware,
    },
    Verb {
        name: "wasm-small",
        usage: "wasm-small [--plan PLAN]... [--run RUN]... [--core] [--features LIST] [--wasm-opt Oz|O3] [--opt-level s|z] [--out DIR] [--check] [--train DATA.csv]",
        about: "a small wasm package (--target web, into target/npm/small) that runs only the given plans' opcodes (--run: a run description's plan, e.g. firmware-demo/models/mnist1d.run; default: the demo's digits MLP; a selective build: the op set from the plans, the features they need, no TrainRun; --core: the core set; --features: the wasm crate's features instead), after wasm-opt -Oz; prints the module's size; --check: the demo's fixed run in Node, bitwise against the host oracle; --train DATA: each plan 2 epochs in Node (needs feature train-run) and on the host, same parameter digest",
        run: package::verb_wasm_small,
    },
    Verb {
        name: "aifes",
        usage: "aifes --aifes-src PATH [--model w1|digits-cnn|all] [--skip-tapeplan]",
        about: "the on-device peer: the firmware demo's run (W1) and the M4F's digits CNN run (default: both) trained with AIfES (the user's checkout of it, AGPL: never in this repository; arm-none-eabi-gcc -O2 and -Os) beside tapeplan's firmware on QEMU mps2-an386 under -icount: instructions per train step, code, training RAM, stack; AIfES's losses and final parameters checked against the oracle within a tolerance (not in CI)",
        run: aifes::verb_aifes,
    },
    Verb {
        name: "bench",
        usage: "bench [--quick] | bench --peers [--rounds N] [--smoke]",
        about: "train-step benchmarks W1-W3, scalar and simd catalogs (-C target-cpu=native): the table of docs/benchmarks.md; --peers: W1-W3 and the CNNs C1, C2 side by side with JAX (lax.scan and one jit call per step) and ONNX Runtime training, pinned to one core, interleaved rounds (default 13), the ratio table and each system's check figures (--smoke: one epoch, one round)",
        run: bench::verb_bench,
    },
    Verb {
        name: "mathcheck",
        usage: "mathcheck [--stride N] [--only NAME] [--baseline]",
        about: "the catalog's tanh, exp, log, sigmoid and softplus against libm on all 2^32 f32 inputs, in release (-C target-cpu=native; --baseline: SSE2 too), and libm's accuracy against f64 (max ulp); --stride N: every Nth input",
        run: mathcheck::verb_mathcheck,
    },
    Verb {
        name: "fuzz",
        usage: "fuzz [--seconds N] [--target NAME]",
        about: "run the cargo-fuzz targets of fuzz/ (default: each 60 s) and print runs, exec/s and coverage per target",
        run: fuzz::verb_fuzz,
    },
    Verb {
        name: "onnx-proto",
        usage: "onnx-proto [--check]",
        about: "regenerate planner-host/src/model/onnx/proto/onnx.rs from onnx.proto (prost-build, vendored protoc; its own workspace xtask/onnx-proto-gen); --check: compare with the committed file",
        run: onnx::verb_onnx_proto,
    },
    Verb {
        name: "help",
        usage: "help",
        about: "print this help",
        run: verb_help,
    },
];

/// What every step needs: where the workspace is and how to call cargo.
struct Ctx {
    root: PathBuf,
    cargo: OsString,
}

impl Ctx {
    fn new() -> Result<Ctx> {
        let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let root = manifest_dir
            .parent()
            .ok_or_else(|| anyhow!("xtask's manifest dir has no parent"))?
            .to_path_buf();
        // `cargo run` sets CARGO to the cargo that ran us: use the same one.
        let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        Ok(Ctx { root, cargo })
    }

    /// A `cargo` command run in the workspace root.
    fn cargo<const N: usize>(&self, args: [&str; N]) -> Command {
        let mut cmd = Command::new(&self.cargo);
        cmd.args(args).current_dir(&self.root);
        cmd
    }

    /// A command run in the workspace root (so `rust-toolchain.toml` picks the toolchain).
    fn tool<const N: usize>(&self, program: &str, args: [&str; N]) -> Command {
        let mut cmd = Command::new(program);
        cmd.args(args).current_dir(&self.root);
        cmd
    }
}

/// Runs `cmd` with its output streamed to ours; an error names the command and its status.
fn run(mut cmd: Command) -> Result<()> {
    let shown = show(&cmd);
    eprintln!("$ {shown}");
    let status = cmd
        .status()
        .with_context(|| format!("could not start `{shown}`"))?;
    if !status.success() {
        bail!("`{shown}` failed ({status})");
    }
    Ok(())
}

/// Runs `cmd` and returns its standard output (stderr streamed).
fn output(mut cmd: Command) -> Result<String> {
    let shown = show(&cmd);
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("could not start `{shown}`"))?;
    if !out.status.success() {
        bail!("`{shown}` failed ({})", out.status);
    }
    String::from_utf8(out.stdout).with_context(|| format!("`{shown}` printed non-UTF-8"))
}

/// A command as a shell line, with the environment it sets.
fn show(cmd: &Command) -> String {
    let mut parts: Vec<String> = cmd
        .get_envs()
        .filter_map(|(k, v)| Some(format!("{}={}", k.to_string_lossy(), v?.to_string_lossy())))
        .collect();
    let program = Path::new(cmd.get_program());
    let program = if program.components().count() > 1 {
        // The CARGO path is long and always the same cargo: show its name.
        program.file_name().unwrap_or(program.as_os_str())
    } else {
        program.as_os_str()
    };
    parts.push(program.to_string_lossy().into_owned());
    parts.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    parts.join(" ")
}

fn step_setup(ctx: &Ctx) -> Result<()> {
    let mut probe = ctx.tool("rustup", ["--version"]);
    probe
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    if !probe.status().is_ok_and(|s| s.success()) {
        bail!(
            "rustup is not on PATH: install the toolchain in rust-toolchain.toml with the \
             targets {TARGETS:?} and components {COMPONENTS:?} by hand"
        );
    }
    let installed = output(ctx.tool("rustup", ["target", "list", "--installed"]))?;
    let missing: Vec<&str> = TARGETS
        .iter()
        .copied()
        .filter(|t| !installed.lines().any(|l| l.trim() == *t))
        .collect();
    if missing.is_empty() {
        eprintln!("targets: all present ({})", TARGETS.join(" "));
    } else {
        let mut cmd = ctx.tool("rustup", ["target", "add"]);
        cmd.args(&missing);
        run(cmd)?;
    }
    let installed = output(ctx.tool("rustup", ["component", "list", "--installed"]))?;
    // Installed components are listed with their host triple: `clippy-x86_64-unknown-linux-gnu`.
    let missing: Vec<&str> = COMPONENTS
        .iter()
        .copied()
        .filter(|c| {
            !installed.lines().any(|l| {
                let l = l.trim();
                l == *c || l.strip_prefix(c).is_some_and(|rest| rest.starts_with('-'))
            })
        })
        .collect();
    if missing.is_empty() {
        eprintln!("components: all present ({})", COMPONENTS.join(" "));
    } else {
        let mut cmd = ctx.tool("rustup", ["component", "add"]);
        cmd.args(&missing);
        run(cmd)?;
    }
    setup_python(ctx);
    Ok(())
}

fn step_fmt(ctx: &Ctx) -> Result<()> {
    run(ctx.cargo(["fmt", "--all", "--", "--check"]))
        .context("formatting differs: run `cargo fmt --all`")
}

fn step_clippy(ctx: &Ctx) -> Result<()> {
    run(ctx.cargo([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))
}

fn step_test(ctx: &Ctx) -> Result<()> {
    let mut cmd = ctx.cargo(["test", "--workspace"]);
    let py = ctx.root.join(PY_VENV).join("bin").join("python");
    if py.exists() {
        // planner-host/tests/cli/exchange.rs runs scripts/check_export.py with it.
        cmd.env("TAPEPLAN_PYTHON", py);
    }
    run(cmd)?;
    // A firmware links one math profile: the runtime built with each alone refuses the other's
    // plans (`ValidateError::MathProfile`).
    for math in ["all-ops,math-precise", "all-ops,math-fast"] {
        run(ctx.cargo([
            "test",
            "-p",
            "tapeplan-runtime",
            "--no-default-features",
            "--features",
            math,
            "--test",
            "runtime",
            "--",
            "reject::",
        ]))?;
    }
    Ok(())
}

/// The venv (numpy and safetensors from PyPI) that runs `scripts/check_export.py`, the check
/// that an exported safetensors file reproduces the runtime's forward pass outside Rust.
const PY_VENV: &str = "target/py-venv";

/// The Python of [`PY_VENV`], made if missing, with `packages` pip-installed unless `check`
/// (a Python program) already exits 0; `what` names the caller in errors.
fn venv_python(ctx: &Ctx, check: &str, packages: &[&str], what: &str) -> Result<PathBuf> {
    let venv = ctx.root.join(PY_VENV);
    let py = venv.join("bin").join("python");
    let ready = |py: &Path| {
        Command::new(py)
            .args(["-c", check])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if ready(&py) {
        return Ok(py);
    }
    if !py.exists() {
        let mut cmd = Command::new("python3");
        cmd.arg("-m").arg("venv").arg(&venv);
        run(cmd).with_context(|| format!("python3 -m venv: {what} needs Python 3"))?;
    }
    let mut pip = Command::new(&py);
    pip.args(["-m", "pip", "install", "--quiet"]).args(packages);
    run(pip).with_context(|| format!("pip could not install {}", packages.join(" ")))?;
    if !ready(&py) {
        bail!(
            "{PY_VENV} lacks what {what} needs after pip install ({})",
            packages.join(" ")
        );
    }
    Ok(py)
}

/// Best effort: makes [`PY_VENV`] if `python3` and PyPI are there. Without it the exchange
/// test says it skipped the Python check, and passes.
fn setup_python(ctx: &Ctx) {
    let venv = ctx.root.join(PY_VENV);
    let py = venv.join("bin").join("python");
    let ready = |py: &Path| {
        Command::new(py)
            .args(["-c", "import numpy, safetensors"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !ready(&py) {
        let made = Command::new("python3")
            .arg("-m")
            .arg("venv")
            .arg(&venv)
            .status()
            .is_ok_and(|s| s.success());
        if made {
            // A failure shows in `ready` below.
            let _ = Command::new(&py)
                .args(["-m", "pip", "install", "--quiet", "numpy", "safetensors"])
                .status();
        }
    }
    if ready(&py) {
        eprintln!("python: numpy and safetensors in {PY_VENV}");
    } else {
        eprintln!(
            "python: no venv with numpy and safetensors; scripts/check_export.py will be skipped"
        );
    }
}

fn step_nostd(ctx: &Ctx) -> Result<()> {
    for target in NOSTD_TARGETS {
        run(ctx.cargo(["build", "-p", "tapeplan-runtime", "--target", target]))
            .with_context(|| format!("tapeplan-runtime does not build for {target}"))?;
    }
    // The firmware library, on the Cortex-M cores a user's firmware targets.
    for target in FIRMWARE_LIB_TARGETS {
        run(ctx.cargo(["build", "-p", "tapeplan-firmware", "--target", target]))
            .with_context(|| format!("tapeplan-firmware does not build for {target}"))?;
    }
    Ok(())
}

/// The targets `tapeplan-firmware` (the firmware library) must build for.
const FIRMWARE_LIB_TARGETS: &[&str] = &[
    "thumbv6m-none-eabi",
    "thumbv7m-none-eabi",
    "thumbv7em-none-eabihf",
];

/// The `simd` feature: linted, its catalog tested against the reference kernels, fused chains
/// against the sequential interpreter, fused SGD updates (`sgd_matmul`) against unfused ones and
/// a whole training run against the oracle, first at x86_64's baseline (SSE2), then built for this CPU
/// (AVX2 / AVX-512 where present) in a target directory of its own; and built for wasm32 with
/// `simd128`.
fn step_simd(ctx: &Ctx) -> Result<()> {
    run(ctx.cargo([
        "clippy",
        "-p",
        "tapeplan-runtime",
        "--all-targets",
        "--features",
        "simd",
        "--",
        "-D",
        "warnings",
    ]))?;
    let native = ctx.root.join("target").join("simd-native");
    for target_dir in [None, Some(&native)] {
        let mut runtime = ctx.cargo(["test", "-p", "tapeplan-runtime", "--features", "simd"]);
        let mut training = ctx.cargo([
            "test",
            "-p",
            "tapeplan-tests",
            "--features",
            "simd",
            "--test",
            "cross",
            "--",
            "simd_training::",
            "fusion::",
            "fusion_hostile_chains::",
            "sgd_fusion::",
        ]);
        if let Some(dir) = target_dir {
            for cmd in [&mut runtime, &mut training] {
                cmd.env("RUSTFLAGS", "-C target-cpu=native")
                    .env("CARGO_TARGET_DIR", dir);
            }
        }
        run(runtime)?;
        run(training)?;
    }
    // AVX2 with FMA: on an AVX-512 host the native pass runs neither the eight-lane tiles nor
    // the `fma` profile's blocked steps `p` (`lanes::Step::BLOCK_P`, off with AVX-512), which an
    // AVX2 machine runs; this pass does, where the host can run it.
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        let mut avx2 = ctx.cargo(["test", "-p", "tapeplan-runtime", "--features", "simd"]);
        avx2.env("RUSTFLAGS", "-C target-feature=+avx2,+fma").env(
            "CARGO_TARGET_DIR",
            ctx.root.join("target").join("simd-avx2"),
        );
        run(avx2)?;
    }
    let mut wasm = ctx.cargo([
        "build",
        "-p",
        "tapeplan-runtime",
        "--features",
        "simd",
        "--target",
        "wasm32-unknown-unknown",
    ]);
    wasm.env("RUSTFLAGS", "-C target-feature=+simd128")
        .env("CARGO_TARGET_DIR", ctx.root.join("target").join("simd128"));
    run(wasm).context("tapeplan-runtime --features simd does not build for wasm32 simd128")
}

/// The wasm crate's wasm-bindgen-test suite (its fixed training run equals the host oracle's
/// digests bit for bit) in Node, built with `simd128` and the runtime's `simd` catalog, in a
/// target directory of its own. Needs what `wasm-setup` installs.
fn step_wasm_simd(ctx: &Ctx) -> Result<()> {
    browser::require_wasm_tools(ctx, browser::WasmNeeds::BUILD)?;
    browser::step_web_assets(ctx)?;
    let mut cmd = ctx.tool(
        "wasm-pack",
        [
            "test",
            "--node",
            "--",
            "--features",
            "tapeplan-runtime/simd",
        ],
    );
    cmd.current_dir(ctx.root.join("wasm"))
        .env("RUSTFLAGS", "-C target-feature=+simd128")
        .env(
            "CARGO_TARGET_DIR",
            ctx.root.join("target").join("wasm-simd128"),
        );
    let shown = show(&cmd);
    eprintln!("$ {shown}");
    let out = cmd
        .output()
        .with_context(|| format!("could not start `{shown}`"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprint!("{text}");
    if !out.status.success() {
        bail!("`{shown}` failed ({})", out.status);
    }
    // The suite must really have run in Node (not been skipped).
    let ran = text.lines().any(|l| {
        l.trim_start()
            .strip_prefix("test result: ok. ")
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse::<usize>().ok())
            .is_some_and(|n| n > 0)
    });
    if !ran {
        bail!("`{shown}` ran no test");
    }
    Ok(())
}

/// The library crates, in dependency order: `doc` documents each before the crates that link
/// to it.
const DOC_ORDER: &[&str] = &[
    "tapeplan-core",
    "tapeplan-runtime",
    "tapeplan-firmware",
    "tapeplan-planner",
];

/// The crates whose HTML `doc` scans for links rendered as text (the `tapeplan` binary's pages
/// also carry clap's trait docs, whose links point into clap, which `--no-deps` leaves out).
const DOC_SCANNED: &[&str] = &[
    "tapeplan_core",
    "tapeplan_runtime",
    "tapeplan_firmware",
    "tapeplan_planner",
    "tapeplan_wasm",
    "tapeplan_tests",
];

/// Rustdoc, warnings (broken intra-doc links among them) as errors. A link that resolves to an
/// item of a crate whose docs do not exist yet is rendered as its literal text (`[Recordable]`)
/// without any warning, and cargo may document a crate before its dependencies: so the
/// libraries are documented in dependency order, then the workspace one job at a time, and the
/// HTML is scanned for links left as text.
fn step_doc(ctx: &Ctx) -> Result<()> {
    let flags = "-D warnings -D rustdoc::broken-intra-doc-links";
    for package in DOC_ORDER {
        let mut cmd = ctx.cargo(["doc", "--no-deps", "-p", package]);
        cmd.env("RUSTDOCFLAGS", flags);
        run(cmd)?;
    }
    // One job at a time: with the workspace's unified features cargo documents the libraries
    // again, and in parallel it may document a crate while the docs its links point to are
    // being rewritten (their links then come out as text).
    let mut cmd = ctx.cargo(["doc", "--workspace", "--no-deps", "-j", "1"]);
    cmd.env("RUSTDOCFLAGS", flags);
    run(cmd)?;
    let doc = target_dir(ctx)?.join("doc");
    let mut found = Vec::new();
    for krate in DOC_SCANNED {
        scan_unlinked(&doc.join(krate), &doc, &mut found)?;
    }
    if !found.is_empty() {
        bail!(
            "{} intra-doc link(s) rendered as text (the linked crate's docs were missing when \
             rustdoc ran, or the link is not one):\n  {}",
            found.len(),
            found.join("\n  ")
        );
    }
    eprintln!(
        "doc: no intra-doc link rendered as text in {}",
        DOC_SCANNED.join(", ")
    );
    Ok(())
}

/// The workspace's target directory (`CARGO_TARGET_DIR` or a config may move it).
fn target_dir(ctx: &Ctx) -> Result<PathBuf> {
    let meta = output(ctx.cargo(["metadata", "--format-version", "1", "--no-deps"]))?;
    let meta: serde_json::Value =
        serde_json::from_str(&meta).context("cargo metadata printed no JSON")?;
    meta["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .ok_or_else(|| anyhow!("cargo metadata names no target_directory"))
}

/// Adds `page: [Name]` to `found` for each `[<code>Name</code>]` (an intra-doc link rustdoc
/// left as text) in the HTML pages under `dir`.
fn scan_unlinked(dir: &Path, root: &Path, found: &mut Vec<String>) -> Result<()> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        if path.is_dir() {
            scan_unlinked(&path, root, found)?;
        } else if path.extension().is_some_and(|e| e == "html") {
            let html = std::fs::read_to_string(&path)?;
            let page = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .display()
                .to_string();
            found.extend(unlinked_names(&html).map(|name| format!("{page}: [{name}]")));
        }
    }
    Ok(())
}

/// The names in `[<code>Name</code>]` occurrences of `html`: rustdoc's rendering of an
/// intra-doc link it could not turn into a hyperlink.
fn unlinked_names(html: &str) -> impl Iterator<Item = &str> {
    html.split("[<code>").skip(1).filter_map(|rest| {
        let (name, after) = rest.split_once("</code>]")?;
        let path_like = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        (path_like && !after.starts_with('(')).then_some(name)
    })
}

fn step_demo(ctx: &Ctx) -> Result<()> {
    run(ctx.cargo(["run", "--release", "-p", "tapeplan-planner", "--", "demo"]))
        .context("the demo failed: the runtime's bits differ from the oracle's, or it crashed")?;
    // The examples assert what they print (Plate 1's HVP; forward mode: dual tangents ==
    // recorded jvp, and against reverse mode).
    for (package, example) in [("tapeplan-core", "hvp"), ("tapeplan-tests", "forward_mode")] {
        run(ctx.cargo(["run", "-q", "-p", package, "--example", example]))
            .with_context(|| format!("example {example} failed"))?;
    }
    Ok(())
}

fn step(name: &str) -> Option<&'static Step> {
    STEPS.iter().find(|s| s.name == name)
}

/// Runs steps in order with a header each, stopping at the first failure, then prints each
/// step's time.
fn run_steps(ctx: &Ctx, names: &[&str]) -> Result<()> {
    let github = env::var_os("GITHUB_ACTIONS").is_some_and(|v| v == "true");
    let total = Instant::now();
    let mut times: Vec<(&str, Duration)> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let step = step(name).ok_or_else(|| anyhow!("no step named `{name}`"))?;
        let header = format!("[{}/{}] {}: {}", i + 1, names.len(), step.name, step.about);
        if github {
            println!("::group::{header}");
        }
        eprintln!("\n==> {header}");
        let start = Instant::now();
        let result = (step.run)(ctx);
        let took = start.elapsed();
        if github {
            println!("::endgroup::");
        }
        times.push((step.name, took));
        if let Err(e) = result {
            print_times(&times, total.elapsed());
            eprintln!(
                "\nxtask: step `{}` FAILED after {}; rerun it alone with `cargo xtask {}`",
                step.name,
                secs(took),
                step.name
            );
            return Err(e);
        }
        eprintln!("<== {} ok in {}", step.name, secs(took));
    }
    print_times(&times, total.elapsed());
    Ok(())
}

fn print_times(times: &[(&str, Duration)], total: Duration) {
    let w = times.iter().map(|(n, _)| n.len()).max().unwrap_or(0).max(5);
    eprintln!("\n{:<w$} {:>8}", "step", "time");
    for (name, took) in times {
        eprintln!("{name:<w$} {:>8}", secs(*took));
    }
    eprintln!("{:<w$} {:>8}", "total", secs(total));
}

fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// The steps `ci` runs for its arguments: every step, or from `--from STEP` on, less
/// [`QUICK_SKIPS`] with `--quick`.
fn ci_steps(args: &[String]) -> Result<Vec<&'static str>> {
    const USAGE: &str = "usage: cargo xtask ci [--quick] [--from STEP]";
    let mut quick = false;
    let mut from: Option<&str> = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--from" => {
                let step = rest
                    .next()
                    .ok_or_else(|| anyhow!("`--from` needs a step name; {USAGE}"))?;
                from = Some(step.as_str());
            }
            other => bail!("`{other}`: {USAGE}"),
        }
    }
    let start = match from {
        None => 0,
        Some(from) => CI_STEPS
            .iter()
            .position(|s| *s == from)
            .ok_or_else(|| anyhow!("`--from {from}`: ci has no step `{from}`"))?,
    };
    Ok(CI_STEPS[start..]
        .iter()
        .copied()
        .filter(|s| !(quick && QUICK_SKIPS.contains(s)))
        .collect())
}

fn verb_ci(ctx: &Ctx, args: &[String]) -> Result<()> {
    let names = ci_steps(args)?;
    let quick = args.iter().any(|a| a == "--quick");
    if env::var_os("CI").is_some() {
        eprintln!("xtask: CI={}", env::var("CI").unwrap_or_default());
    }
    run_steps(ctx, &names)?;
    if quick {
        eprintln!(
            "\nxtask: ci --quick passed (left out: {}; `cargo xtask ci` runs them)",
            QUICK_SKIPS.join(", ")
        );
    } else {
        eprintln!("\nxtask: ci passed");
    }
    Ok(())
}

fn verb_help(_: &Ctx, _: &[String]) -> Result<()> {
    println!("cargo xtask <verb>: tapeplan's project automation\n\nverbs:");
    for v in VERBS {
        println!("  {:<18} {}", v.usage, v.about);
    }
    println!(
        "\nsteps (each is a verb; `ci` runs {}; `ci --quick` leaves out {}):",
        CI_STEPS.join(", "),
        QUICK_SKIPS.join(", ")
    );
    for s in STEPS {
        println!("  {:<18} {}", s.name, s.about);
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = Ctx::new().and_then(|ctx| {
        let Some((verb, rest)) = args.split_first() else {
            verb_help(&ctx, &[])?;
            bail!("no verb given");
        };
        let verb = verb.as_str();
        if let Some(v) = VERBS.iter().find(|v| v.name == verb) {
            return (v.run)(&ctx, rest);
        }
        if matches!(verb, "-h" | "--help") {
            return verb_help(&ctx, rest);
        }
        if step(verb).is_some() {
            if !rest.is_empty() {
                bail!("step `{verb}` takes no arguments");
            }
            return run_steps(&ctx, &[verb]);
        }
        bail!("unknown verb `{verb}`: see `cargo xtask help`")
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("\nxtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_steps_exist_and_names_are_unique() {
        for name in CI_STEPS {
            assert!(step(name).is_some(), "ci names unknown step {name}");
        }
        let mut names: Vec<&str> = STEPS.iter().map(|s| s.name).collect();
        names.extend(VERBS.iter().map(|v| v.name));
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n, "a verb and a step share a name");
    }

    #[test]
    fn ci_arguments_select_steps() {
        let args = |a: &[&str]| a.iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(ci_steps(&[]).unwrap(), CI_STEPS);
        let quick = ci_steps(&args(&["--quick"])).unwrap();
        assert_eq!(quick.len(), CI_STEPS.len() - QUICK_SKIPS.len());
        for s in ["fmt", "clippy", "test", "nostd", "doc", "demo"] {
            assert!(quick.contains(&s), "--quick drops {s}");
        }
        for s in QUICK_SKIPS {
            assert!(
                CI_STEPS.contains(s),
                "--quick skips {s}, which ci does not run"
            );
            assert!(!quick.contains(s), "--quick runs {s}");
        }
        let from = ci_steps(&args(&["--from", "qemu", "--quick"])).unwrap();
        assert!(from.iter().all(|s| !QUICK_SKIPS.contains(s)));
        assert_eq!(
            ci_steps(&args(&["--from", "browser"])).unwrap(),
            ["browser", "matrix"]
        );
        let err = ci_steps(&args(&["--from", "nope"]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no step `nope`"), "{err}");
        assert!(ci_steps(&args(&["--from"])).is_err());
        assert!(ci_steps(&args(&["--fast"])).is_err());
    }

    #[test]
    fn unlinked_names_finds_links_left_as_text() {
        let html = "against [<code>Recordable</code>] so; see [<code>Run::backward</code>]. \
                    <a href=\"x\"><code>Tape</code></a> [<code>a b</code>] [<code>f</code>](x)";
        let names: Vec<&str> = unlinked_names(html).collect();
        assert_eq!(names, ["Recordable", "Run::backward"]);
        assert_eq!(unlinked_names("<code>[x]</code>").count(), 0);
    }

    #[test]
    fn nostd_targets_are_installed_by_setup() {
        for t in NOSTD_TARGETS {
            assert!(TARGETS.contains(t), "{t} is built but not installed");
        }
    }

    #[test]
    fn show_prints_env_and_args() {
        let mut cmd = Command::new("/usr/bin/cargo");
        cmd.args(["doc", "--no-deps"])
            .env("RUSTDOCFLAGS", "-D warnings");
        assert_eq!(show(&cmd), "RUSTDOCFLAGS=-D warnings cargo doc --no-deps");
    }
}
