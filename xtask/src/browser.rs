//! The runtime in the browser (issue 6): the demo's assets, the WebAssembly packages, the
//! `wasm-bindgen-test` suites in Node and headless Chromium, and the end-to-end page test.
//!
//! - `web-assets`: the digits plan, the training and test data, the initial parameters and the
//!   host oracle's results of the fixed demo run, into `wasm/www/assets/` (generated, ignored).
//! - `wasm-setup`: installs what is missing (Debian's chromium and chromium-driver,
//!   wasm-bindgen-cli at the crate's version, wasm-pack, the npm packages of `wasm/e2e`).
//! - `wasm-test`: the host-free suites: `wasm-pack test --node`, the same suite in headless
//!   Chromium, and the Node package's test (`node --test`). Each must report tests run.
//! - `browser`: builds the page's package, serves `wasm/www` on 127.0.0.1, trains in headless
//!   Chromium, checks the page's digest against the host oracle's, keeps a screenshot.
//! - `serve`: serves the demo page for a person.

use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;

use anyhow::{anyhow, bail, ensure, Context, Result};
use tapeplan_planner::exec::argmax;
use tapeplan_planner::exec::Oracle;
use tapeplan_planner::io::data;
use tapeplan_planner::model::optim::Sgd;
use tapeplan_planner::model::TrainingJob;
use tapeplan_planner::model::{glorot_uniform, Activation, Loss, Mlp};
use tapeplan_runtime::protocol::{digest_f32, epoch_seed};

use crate::{output, run, show, Ctx};

/// The wasm-bindgen CLI must be the version of the `wasm-bindgen` crate (`wasm/Cargo.toml`).
const WASM_BINDGEN_VERSION: &str = "0.2.130";

/// Chromium and its WebDriver, from Debian.
const CHROMIUM: &str = "/usr/bin/chromium";
pub(crate) const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// The demo's fixed run: the digits MLP 64-32-10 tanh, softmax cross-entropy, SGD, the
/// `tapeplan demo` data split, initialization and epoch order.
struct DemoRun {
    epochs: usize,
    seed: u64,
    split_seed: u64,
    batch: usize,
    lr: f32,
}

const DEMO: DemoRun = DemoRun {
    epochs: 10,
    seed: 42,
    split_seed: 0,
    batch: 32,
    lr: 0.1,
};

/// Bumped when the assets' layout changes, so stale assets are regenerated.
const ASSETS_VERSION: u32 = 1;

fn wasm_dir(ctx: &Ctx) -> PathBuf {
    ctx.root.join("wasm")
}

fn assets_dir(ctx: &Ctx) -> PathBuf {
    ctx.root.join("wasm/www/assets")
}

fn hex(d: u64) -> String {
    format!("{d:016x}")
}

fn le_f32(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// `web-assets`: writes the demo's assets unless they are up to date (same plan bytes, same
/// assets version).
pub fn step_web_assets(ctx: &Ctx) -> Result<()> {
    let dir = assets_dir(ctx);
    let mlp = Mlp {
        sizes: vec![64, 32, 10],
        activation: Activation::Tanh,
    };
    let job = TrainingJob::build(
        mlp,
        Loss::SoftmaxCrossEntropy,
        Sgd { lr: DEMO.lr },
        DEMO.batch,
    )
    .map_err(|e| anyhow!("planning the digits MLP: {e}"))?;
    let plan = job.schedule.to_bytes();
    let manifest_path = dir.join("manifest.json");
    let fresh = fs::read(dir.join("digits.plan")).is_ok_and(|b| b == plan)
        && fs::read_to_string(&manifest_path)
            .is_ok_and(|m| m.contains(&format!("\"assets_version\": {ASSETS_VERSION},")));
    if fresh {
        eprintln!("web assets: up to date in {}", dir.display());
        return Ok(());
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;

    let digits = data::digits()?;
    let (train, test) = digits.split_seeded(DEMO.split_seed, data::DIGITS_TRAIN_ROWS);
    ensure!(
        train.len() <= usize::from(u16::MAX) && !train.pixels.is_empty(),
        "the digits split does not fit the assets' u16 indices and u8 pixels"
    );
    let shapes = job.parameter_shapes();
    let init = glorot_uniform(&shapes, DEMO.seed);
    let mut oracle = Oracle::new(&job, &init)?;

    // The persistent region as the runtime lays it out: each parameter at its binding.
    let rt = tapeplan_runtime::Plan::parse(&plan).map_err(|e| anyhow!("plan rejected: {e}"))?;
    let image = |params: &[&[f32]]| -> Result<Vec<f32>> {
        let mut region = vec![0.0f32; rt.persistent_elems()];
        for ((name, _), values) in shapes.iter().zip(params) {
            let b = rt
                .parameter(name)
                .ok_or_else(|| anyhow!("the plan has no parameter {name}"))?;
            region
                .get_mut(b.range())
                .ok_or_else(|| anyhow!("parameter {name} outside the persistent region"))?
                .copy_from_slice(values);
        }
        Ok(region)
    };
    let init_refs: Vec<&[f32]> = init.iter().map(Vec::as_slice).collect();
    let init_digest = digest_f32(&image(&init_refs)?);

    eprintln!(
        "web assets: running the host oracle over the fixed demo run ({} epochs)…",
        DEMO.epochs
    );
    let mut order: Vec<u8> = Vec::new();
    let mut losses: Vec<f32> = Vec::new();
    for epoch in 0..DEMO.epochs {
        let idx = train.shuffled_indices(epoch_seed(DEMO.seed, epoch));
        for &i in &idx {
            order.extend((i as u16).to_le_bytes());
        }
        for (x, labels) in train.subset(&idx).batches(DEMO.batch) {
            losses.push(oracle.step(x, &labels)?);
        }
    }
    let trained: Vec<&[f32]> = oracle.params.iter().map(|t| t.data.as_slice()).collect();
    let digest = digest_f32(&image(&trained)?);

    // Test accuracy through the oracle's logits, the last batch padded with zeros (as
    // `RuntimeModel::accuracy` and the page do).
    let d_in = data::DIGITS_FEATURES;
    let mut correct = 0usize;
    for (start, labels) in (0..)
        .step_by(DEMO.batch)
        .zip(test.labels.chunks(DEMO.batch))
    {
        let n = labels.len();
        let mut x = vec![0.0f32; DEMO.batch * d_in];
        x[..n * d_in].copy_from_slice(&test.features[start * d_in..(start + n) * d_in]);
        let logits = oracle.logits(&x)?;
        let classes = logits.len() / DEMO.batch;
        for (r, &label) in labels.iter().enumerate() {
            correct +=
                usize::from(argmax(&logits[r * classes..(r + 1) * classes]) == label as usize);
        }
    }

    let files: [(&str, Vec<u8>); 8] = [
        ("digits.plan", plan.clone()),
        ("train-pixels.u8", train.pixels.clone()),
        ("train-labels.u8", train.labels.clone()),
        ("test-pixels.u8", test.pixels.clone()),
        ("test-labels.u8", test.labels.clone()),
        ("epoch-order.u16", order),
        ("init.f32", le_f32(&init.concat())),
        ("loss-trace.f32", le_f32(&losses)),
    ];
    for (name, bytes) in &files {
        fs::write(dir.join(name), bytes).with_context(|| format!("writing {name}"))?;
    }
    let mut params = String::new();
    for (i, (name, shape)) in shapes.iter().enumerate() {
        let dims: Vec<String> = shape.dims()[..shape.rank()]
            .iter()
            .map(ToString::to_string)
            .collect();
        let sep = if i + 1 < shapes.len() { "," } else { "" };
        let _ = writeln!(
            params,
            "    {{ \"name\": \"{name}\", \"shape\": [{}] }}{sep}",
            dims.join(", ")
        );
    }
    let manifest = format!(
        r#"{{
  "assets_version": {ASSETS_VERSION},
  "about": "the tapeplan digits demo's fixed run; written by `cargo xtask web-assets` from the host oracle",
  "model": "MLP 64-32-10 tanh, softmax cross-entropy, SGD lr {lr}, batch {batch}",
  "epochs": {epochs},
  "batch": {batch},
  "lr": {lr},
  "seed": {seed},
  "split_seed": {split_seed},
  "train_rows": {train_rows},
  "test_rows": {test_rows},
  "features": {d_in},
  "classes": {classes},
  "pixel_scale": {scale},
  "steps": {steps},
  "plan_bytes": {plan_bytes},
  "init_digest": "{init_digest}",
  "digest": "{digest}",
  "loss_trace_digest": "{loss_digest}",
  "first_loss": {first_loss},
  "last_loss": {last_loss},
  "test_correct": {correct},
  "test_accuracy": {accuracy},
  "parameters": [
{params}  ]
}}
"#,
        lr = DEMO.lr,
        batch = DEMO.batch,
        epochs = DEMO.epochs,
        seed = DEMO.seed,
        split_seed = DEMO.split_seed,
        train_rows = train.len(),
        test_rows = test.len(),
        classes = data::DIGITS_CLASSES,
        scale = data::DIGITS_PIXEL_SCALE,
        steps = losses.len(),
        plan_bytes = plan.len(),
        init_digest = hex(init_digest),
        digest = hex(digest),
        loss_digest = hex(digest_f32(&losses)),
        first_loss = losses.first().copied().unwrap_or(f32::NAN),
        last_loss = losses.last().copied().unwrap_or(f32::NAN),
        accuracy = correct as f64 / test.len().max(1) as f64,
    );
    fs::write(&manifest_path, manifest).context("writing manifest.json")?;
    eprintln!(
        "web assets: {} steps, host oracle digest {}, test accuracy {correct}/{} → {}",
        losses.len(),
        hex(digest),
        test.len(),
        dir.display()
    );
    Ok(())
}

/// The value of `"key": value` in the manifest (quotes trimmed).
fn manifest_field(ctx: &Ctx, key: &str) -> Result<String> {
    let text = fs::read_to_string(assets_dir(ctx).join("manifest.json"))
        .context("reading wasm/www/assets/manifest.json (run `cargo xtask web-assets`)")?;
    let tag = format!("\"{key}\": ");
    let at = text
        .find(&tag)
        .ok_or_else(|| anyhow!("manifest.json has no {key}"))?
        + tag.len();
    let rest = &text[at..];
    let end = rest.find([',', '\n']).unwrap_or(rest.len());
    Ok(rest[..end].trim().trim_matches('"').to_string())
}

/// Whether `program --version` runs and prints `want` (any version when `want` is empty).
fn has_tool(program: &str, want: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains(want))
}

fn npm_packages_present(ctx: &Ctx) -> bool {
    let nm = wasm_dir(ctx).join("e2e/node_modules");
    nm.join("playwright-core/package.json").is_file() && nm.join("binaryen/package.json").is_file()
}

/// What a wasm verb needs beyond the Rust toolchain.
#[derive(Clone, Copy)]
pub struct WasmNeeds {
    /// Debian's Chromium and its WebDriver (the headless test runs).
    pub chromium: bool,
    /// playwright-core from npm (the page test drives Chromium with it).
    pub playwright: bool,
    /// binaryen@132's `wasm-opt` from npm (a package to publish must be optimized).
    pub wasm_opt: bool,
}

impl WasmNeeds {
    /// Building the packages only: wasm-pack, wasm-bindgen-cli, node and npm.
    pub const BUILD: WasmNeeds = WasmNeeds {
        chromium: false,
        playwright: false,
        wasm_opt: false,
    };

    /// Building a package to publish or measure: [`WasmNeeds::BUILD`] and `wasm-opt`.
    pub const OPTIMIZED: WasmNeeds = WasmNeeds {
        wasm_opt: true,
        ..WasmNeeds::BUILD
    };
}

/// Checks that what `wasm-setup` installs and `needs` asks for is there, before any work: a
/// missing piece is named with the step that installs it (rather than, say, Node's
/// `ERR_MODULE_NOT_FOUND` from deep inside the page test).
pub fn require_wasm_tools(ctx: &Ctx, needs: WasmNeeds) -> Result<()> {
    let mut lacking: Vec<String> = Vec::new();
    if !has_tool("wasm-pack", "") {
        lacking.push("wasm-pack".into());
    }
    if !has_tool("wasm-bindgen", WASM_BINDGEN_VERSION) {
        lacking.push(format!("wasm-bindgen-cli {WASM_BINDGEN_VERSION}"));
    }
    if !(has_tool("node", "v") && has_tool("npm", "")) {
        lacking.push("node and npm".into());
    }
    if needs.chromium && !(Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists()) {
        lacking.push(format!("{CHROMIUM} and {CHROMEDRIVER}"));
    }
    let nm = wasm_dir(ctx).join("e2e/node_modules");
    if needs.playwright && !nm.join("playwright-core/package.json").is_file() {
        lacking.push("playwright-core (npm, in wasm/e2e)".into());
    }
    if needs.wasm_opt && !wasm_opt(ctx).is_file() {
        lacking.push("binaryen's wasm-opt (npm, in wasm/e2e)".into());
    }
    if lacking.is_empty() {
        return Ok(());
    }
    bail!(
        "missing {}: run `cargo xtask wasm-setup` (it installs what the wasm and browser steps \
         need), then this step again",
        lacking.join(", ")
    )
}

/// `wasm-setup`: installs each missing tool; skips what is present. Three independent lines
/// run at once: Debian's packages (Chromium, its driver, Node and npm; then npm's packages of
/// `wasm/e2e`), wasm-bindgen-cli, and wasm-pack.
///
/// Both Rust tools are built from crates.io's sources: their prebuilt release binaries come from
/// GitHub (as do `cargo binstall`'s and npm `wasm-pack`'s installer downloads), which machines
/// that reach only the package registries cannot fetch. The source builds keep the exact
/// versions (wasm-bindgen-cli must equal the crate's [`WASM_BINDGEN_VERSION`]). Building them
/// with a lighter release profile (no LTO, `opt-level = 1`, 16 codegen units) was measured to
/// save only 8% of the CPU time (wasm-bindgen-cli: 259 s against 282 s of user time), so each
/// keeps its own.
pub fn step_wasm_setup(ctx: &Ctx) -> Result<()> {
    thread::scope(|scope| {
        let system = scope.spawn(|| setup_system_packages(ctx));
        let bindgen = scope.spawn(|| {
            if has_tool("wasm-bindgen", WASM_BINDGEN_VERSION) {
                eprintln!("wasm-bindgen {WASM_BINDGEN_VERSION}: present");
                return Ok(());
            }
            // Not --locked: the CLI's lock file names versions this registry may lack.
            let version = format!("={WASM_BINDGEN_VERSION}");
            run(ctx.cargo(["install", "wasm-bindgen-cli", "--version", &version]))
                .context("installing wasm-bindgen-cli")
        });
        let pack = scope.spawn(|| {
            if has_tool("wasm-pack", "") {
                eprintln!("wasm-pack: present");
                return Ok(());
            }
            run(ctx.cargo(["install", "wasm-pack", "--locked"])).context("installing wasm-pack")
        });
        let mut errors = Vec::new();
        for (what, handle) in [
            ("chromium, node and npm packages", system),
            ("wasm-bindgen-cli", bindgen),
            ("wasm-pack", pack),
        ] {
            match handle.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => errors.push(format!("{e:#}")),
                Err(_) => errors.push(format!("installing {what} panicked")),
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            bail!("wasm-setup: {}", errors.join("; "))
        }
    })
}

/// Debian's chromium, chromium-driver, nodejs and npm (one `apt-get install` of those missing),
/// then the npm packages of `wasm/e2e` (playwright-core, binaryen).
fn setup_system_packages(ctx: &Ctx) -> Result<()> {
    let mut apt: Vec<&str> = Vec::new();
    if Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists() {
        eprintln!("chromium, chromedriver: present");
    } else {
        apt.extend(["chromium", "chromium-driver"]);
    }
    if has_tool("node", "v") && has_tool("npm", "") {
        eprintln!("node, npm: present");
    } else {
        apt.extend(["nodejs", "npm"]);
    }
    if !apt.is_empty() {
        run(ctx.tool("apt-get", ["update"]))?;
        let mut cmd = ctx.tool("apt-get", ["install", "-y"]);
        cmd.args(&apt).env("DEBIAN_FRONTEND", "noninteractive");
        run(cmd).with_context(|| format!("installing Debian's {}", apt.join(", ")))?;
    }
    if npm_packages_present(ctx) {
        eprintln!("npm packages of wasm/e2e: present");
    } else {
        let mut cmd = ctx.tool("npm", ["ci", "--no-audit", "--no-fund"]);
        cmd.current_dir(wasm_dir(ctx).join("e2e"));
        run(cmd).context("installing wasm/e2e's npm packages (playwright-core, binaryen)")?;
    }
    Ok(())
}

/// Runs `cmd`, echoing its stdout and stderr as they come, and returns both, interleaved by
/// line.
fn run_captured(mut cmd: Command) -> Result<String> {
    let shown = show(&cmd);
    eprintln!("$ {shown}");
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not start `{shown}`"))?;
    let seen = Arc::new(Mutex::new(String::new()));
    let pump = |stream: Box<dyn Read + Send>, to_stderr: bool| {
        let seen = Arc::clone(&seen);
        thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if to_stderr {
                    eprintln!("{line}");
                } else {
                    println!("{line}");
                }
                if let Ok(mut s) = seen.lock() {
                    s.push_str(&line);
                    s.push('\n');
                }
            }
        })
    };
    let out = child.stdout.take().map(|s| pump(Box::new(s), false));
    let err = child.stderr.take().map(|s| pump(Box::new(s), true));
    let status = child.wait()?;
    for t in [out, err].into_iter().flatten() {
        let _ = t.join();
    }
    let text = seen.lock().map(|s| s.clone()).unwrap_or_default();
    if !status.success() {
        bail!("`{shown}` failed ({status})");
    }
    Ok(text)
}

/// Sums the `N passed; M failed` of every `test result:` line (cargo's and
/// wasm-bindgen-test-runner's format).
fn passed_failed(text: &str) -> (usize, usize) {
    let count = |line: &str, word: &str| -> usize {
        let words: Vec<&str> = line
            .split(|c: char| c.is_whitespace() || c == ';' || c == ',' || c == '.')
            .filter(|w| !w.is_empty())
            .collect();
        words
            .windows(2)
            .find(|w| w[1] == word)
            .and_then(|w| w[0].parse().ok())
            .unwrap_or(0)
    };
    text.lines()
        .filter(|l| l.contains("test result:"))
        .fold((0, 0), |(p, f), l| {
            (p + count(l, "passed"), f + count(l, "failed"))
        })
}

/// How many `#[wasm_bindgen_test]` functions `wasm/tests/*.rs` holds.
fn wasm_test_count(ctx: &Ctx) -> Result<usize> {
    let mut n = 0;
    for entry in fs::read_dir(wasm_dir(ctx).join("tests"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "rs") {
            n += fs::read_to_string(&path)?
                .lines()
                .filter(|l| l.trim() == "#[wasm_bindgen_test]")
                .count();
        }
    }
    Ok(n)
}

/// Checks that a wasm-bindgen-test run ran every test (a browser run without
/// `WASM_BINDGEN_USE_BROWSER=1` skips them all and exits 0).
fn check_ran(text: &str, expected: usize, what: &str) -> Result<()> {
    let (passed, failed) = passed_failed(text);
    ensure!(
        failed == 0 && passed == expected,
        "{what}: {passed} passed, {failed} failed, but wasm/tests has {expected} tests: tests \
         were skipped or missing"
    );
    eprintln!("{what}: {passed} passed, 0 failed");
    Ok(())
}

/// npm's binaryen@132 (`wasm-setup` installs it); Debian's binaryen breaks these modules.
fn wasm_opt(ctx: &Ctx) -> PathBuf {
    wasm_dir(ctx).join("e2e/node_modules/.bin/wasm-opt")
}

/// The WebAssembly features the module uses, for `wasm-opt`: rustc 1.95's defaults for
/// wasm32-unknown-unknown, and simd128 (`wasm/.cargo/config.toml`).
const WASM_FEATURES: &[&str] = &[
    "--enable-simd",
    "--enable-bulk-memory",
    "--enable-multivalue",
    "--enable-mutable-globals",
    "--enable-nontrapping-float-to-int",
    "--enable-reference-types",
    "--enable-sign-ext",
];

/// Where the page's module is kept as wasm-pack built it, before `wasm-opt`, for its size.
fn unoptimized_copy(ctx: &Ctx) -> PathBuf {
    ctx.root
        .join("target/browser/tapeplan_wasm_bg.unoptimized.wasm")
}

/// Builds the page's package (`--target web` into `wasm/www/pkg`) and the Node package
/// (`--target nodejs` into `wasm/pkg-node`), with TypeScript declarations, then optimizes each
/// module with `wasm-opt -O3` (npm binaryen@132) when present. The tests then check the
/// optimized modules' bits against the host oracle.
fn build_packages(ctx: &Ctx) -> Result<()> {
    if !wasm_opt(ctx).is_file() {
        eprintln!(
            "wasm-opt (npm binaryen@132) not installed: modules stay unoptimized (`cargo xtask wasm-setup`)"
        );
    }
    for (target, dir) in [("web", "www/pkg"), ("nodejs", "pkg-node")] {
        let out_dir = wasm_dir(ctx).join(dir);
        wasm_pack_build(ctx, target, &out_dir, true)?;
        if target == "web" {
            fs::create_dir_all(ctx.root.join("target/browser"))?;
            fs::copy(out_dir.join("tapeplan_wasm_bg.wasm"), unoptimized_copy(ctx))?;
        }
        optimize(ctx, &out_dir.join("tapeplan_wasm_bg.wasm"))?;
    }
    Ok(())
}

/// `wasm-pack build --release --target TARGET --out-dir OUT_DIR` of the wasm crate (with
/// `--no-pack` when `no_pack`: no `package.json`, README or license files), the module not yet
/// optimized.
pub fn wasm_pack_build(ctx: &Ctx, target: &str, out_dir: &Path, no_pack: bool) -> Result<()> {
    let mut cmd = ctx.tool("wasm-pack", ["build", "--release", "--target", target]);
    if no_pack {
        cmd.arg("--no-pack");
    }
    cmd.arg("--out-dir").arg(out_dir).current_dir(wasm_dir(ctx));
    run(cmd).with_context(|| format!("wasm-pack build --target {target}"))
}

/// `wasm-opt -O3` over `module` in place, when npm's binaryen@132 is installed.
pub fn optimize(ctx: &Ctx, module: &Path) -> Result<()> {
    optimize_with(ctx, module, "-O3")
}

/// `wasm-opt LEVEL` (`-O3`, `-Oz`, …) over `module` in place, when npm's binaryen@132 is
/// installed.
pub fn optimize_with(ctx: &Ctx, module: &Path, level: &str) -> Result<()> {
    let opt = wasm_opt(ctx);
    if opt.is_file() {
        let mut cmd = Command::new(&opt);
        cmd.arg(level)
            .args(WASM_FEATURES)
            .arg(module)
            .arg("-o")
            .arg(module);
        run(cmd).context("wasm-opt")?;
    }
    Ok(())
}

/// `wasm-test`: the wasm-bindgen-test suite in Node and in headless Chromium, then the Node
/// package's JavaScript test.
pub fn step_wasm_test(ctx: &Ctx) -> Result<()> {
    require_wasm_tools(
        ctx,
        WasmNeeds {
            chromium: true,
            ..WasmNeeds::BUILD
        },
    )?;
    step_web_assets(ctx)?;
    let expected = wasm_test_count(ctx)?;
    ensure!(expected > 0, "wasm/tests has no #[wasm_bindgen_test]");

    let mut node = ctx.tool("wasm-pack", ["test", "--node"]);
    node.current_dir(wasm_dir(ctx));
    check_ran(&run_captured(node)?, expected, "wasm-bindgen-test in Node")?;

    let mut chrome = ctx.tool(
        "wasm-pack",
        [
            "test",
            "--headless",
            "--chrome",
            "--chromedriver",
            CHROMEDRIVER,
        ],
    );
    chrome
        .current_dir(wasm_dir(ctx))
        .env("WASM_BINDGEN_USE_BROWSER", "1");
    check_ran(
        &run_captured(chrome)?,
        expected,
        "wasm-bindgen-test in headless Chromium",
    )?;

    build_packages(ctx)?;
    let mut js = ctx.tool(
        "node",
        ["--test", "--test-reporter=tap", "wasm/e2e/package.test.mjs"],
    );
    js.env("NODE_NO_WARNINGS", "1");
    let text = run_captured(js)?;
    let tally = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|n| n.trim().parse::<usize>().ok())
    };
    let (pass, fail) = (tally("# pass ").unwrap_or(0), tally("# fail ").unwrap_or(1));
    ensure!(
        pass > 0 && fail == 0,
        "the Node package test: {pass} passed, {fail} failed"
    );
    eprintln!("the Node package test: {pass} passed, 0 failed");
    Ok(())
}

/// `browser`: the end-to-end page test.
pub fn step_browser(ctx: &Ctx) -> Result<()> {
    require_wasm_tools(
        ctx,
        WasmNeeds {
            chromium: true,
            playwright: true,
            ..WasmNeeds::BUILD
        },
    )?;
    step_web_assets(ctx)?;
    build_packages(ctx)?;
    report_sizes(ctx)?;
    let out_dir = ctx.root.join("target/browser");
    fs::create_dir_all(&out_dir)?;
    let own = own_model_host_run(ctx, &out_dir.join("own"))?;
    let server = Server::start(&ctx.root.join("wasm/www"), 0)?;
    let screenshot = out_dir.join("screenshot.png");
    let phone = out_dir.join("phone.png");
    let url = format!("http://127.0.0.1:{}/?fast", server.port);
    let mut cmd = ctx.tool("node", ["wasm/e2e/browser.mjs", &url]);
    cmd.arg(&screenshot)
        .arg(&phone)
        .args([&own.plan, &own.csv, &own.init])
        .arg(OWN_OPTIONS_JSON)
        .arg(&own.run_file)
        .env("CHROMIUM", CHROMIUM);
    let text = run_captured(cmd)?;
    let result = text
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .ok_or_else(|| anyhow!("the page test printed no RESULT line"))?;
    let get = |key: &str| -> Option<&str> {
        result
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
    };
    let digest = get("digest").unwrap_or("");
    let expected = manifest_field(ctx, "digest")?;
    ensure!(
        digest == expected,
        "browser digest: {digest} differs from the host oracle's {expected} ({result})"
    );
    ensure!(
        get("loss_trace") == Some("equal"),
        "the page's loss trace differs from the host oracle's ({result})"
    );
    let correct = manifest_field(ctx, "test_correct")?;
    ensure!(
        get("correct") == Some(correct.as_str()),
        "the page's test accuracy differs from the host oracle's {correct} correct ({result})"
    );
    let chromium_ms: f64 = get("step_ms")
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN);
    let native = output(ctx.cargo([
        "run",
        "--quiet",
        "--release",
        "-p",
        "tapeplan-wasm",
        "--example",
        "step_time",
    ]))?;
    let native_ms: f64 = native
        .lines()
        .find_map(|l| l.strip_prefix("RESULT step_ms="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(f64::NAN);
    println!(
        "browser: test accuracy {}, drawn 7 predicted as {}; screenshot {}",
        get("accuracy").unwrap_or("?"),
        get("drawn_seven_predicted").unwrap_or("?"),
        screenshot.display()
    );
    println!(
        "train step median: {:.1} us in Chromium (wasm), {:.1} us native scalar runtime: {:.2}x",
        chromium_ms * 1e3,
        native_ms * 1e3,
        chromium_ms / native_ms
    );
    println!("browser digest: {digest} matches host oracle");
    check_own_model(result, &text, &own, &phone)
}

/// The own-model run of the browser test: `tapeplan train` of the ONNX walkthrough's 1-D CNN on
/// the waves CSV with these options, and the same options as the page's form fields (JSON).
const OWN_TRAIN_ARGS: [&str; 7] = [
    "--epochs",
    "4",
    "--seed",
    "3",
    "--val-fraction",
    "0.25",
    "--standardize",
];
const OWN_OPTIONS_JSON: &str = r#"{"epochs":4,"seed":"3","splitSeed":"0","trainFraction":0.8,"valFraction":0.25,"standardize":true}"#;

/// The files of the own-model run and what `tapeplan train` printed for them.
struct OwnRun {
    plan: PathBuf,
    csv: PathBuf,
    init: PathBuf,
    /// `0x` and 16 hex digits.
    digest: String,
    /// The `epoch …` and `test …` lines.
    lines: Vec<String>,
    /// A second run of the same files, described by `tapeplan train --write-run` (its seed,
    /// split seed and epochs differ from the form's), and the digest `train` printed for it.
    run_file: PathBuf,
    run_digest: String,
}

/// Plans `planner-host/tests/data/onnx/cnn1d.onnx` (Adam, `conv1.*` frozen, batch 16) into
/// `dir`, writes 500 rows of `scripts/waves_csv.py`, and trains them with `tapeplan train` for
/// the digest the page must show.
fn own_model_host_run(ctx: &Ctx, dir: &Path) -> Result<OwnRun> {
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    fs::create_dir_all(dir)?;
    run(ctx.cargo(["build", "--release", "-q", "-p", "tapeplan-planner"]))?;
    let tapeplan = crate::target_dir(ctx)?.join("release").join("tapeplan");
    let (plan, csv) = (dir.join("cnn.plan"), dir.join("waves.csv"));
    let init = dir.join("cnn.plan.init.safetensors");
    let mut cmd = Command::new(&tapeplan);
    cmd.current_dir(&ctx.root)
        .args(["plan", "--onnx", "planner-host/tests/data/onnx/cnn1d.onnx"])
        .args(["--frozen", "conv1.*", "--optimizer", "adam", "--lr", "0.01"])
        .args(["--batch", "16", "-o"])
        .arg(&plan);
    output(cmd)?;
    let mut cmd = ctx.tool("python3", ["scripts/waves_csv.py", "500"]);
    cmd.arg(&csv);
    output(cmd)?;
    let mut cmd = Command::new(&tapeplan);
    cmd.current_dir(&ctx.root)
        .arg("train")
        .arg(&plan)
        .arg("--data")
        .arg(&csv)
        .arg("--init")
        .arg(&init)
        .args(OWN_TRAIN_ARGS);
    let text = output(cmd)?;
    let digest_of = |text: &str| -> Result<String> {
        Ok(text
            .lines()
            .find_map(|l| l.strip_prefix("parameter digest: "))
            .ok_or_else(|| {
                anyhow!("`tapeplan train` printed no `parameter digest:` line:\n{text}")
            })?
            .trim()
            .to_string())
    };
    let digest = digest_of(&text)?;
    let run_file = dir.join("own.run");
    let mut cmd = Command::new(&tapeplan);
    cmd.current_dir(dir)
        .args(["train", "cnn.plan", "--data", "waves.csv"])
        .args(["--init", "cnn.plan.init.safetensors"])
        .args(["--epochs", "2", "--seed", "5", "--split-seed", "1"])
        .args(["--write-run", "own.run"]);
    let run_digest = digest_of(&output(cmd)?)?;
    let lines = text
        .lines()
        .filter(|l| l.starts_with("epoch ") || l.starts_with("test "))
        .map(str::to_string)
        .collect();
    Ok(OwnRun {
        plan,
        csv,
        init,
        digest,
        lines,
        run_file,
        run_digest,
    })
}

/// Checks the page's own-model run against the host's (the digest and every epoch and test
/// line), its true label of a test digit, and its width at 390 px.
fn check_own_model(result: &str, text: &str, own: &OwnRun, phone: &Path) -> Result<()> {
    let get = |key: &str| -> Option<&str> {
        result
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
    };
    let page = get("own_digest").unwrap_or("");
    ensure!(
        page == own.digest,
        "the page's own-model digest {page} differs from `tapeplan train`'s {} ({result})",
        own.digest
    );
    let page_lines: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("OWN_LOG "))
        .filter(|l| l.starts_with("epoch ") || l.starts_with("test "))
        .collect();
    ensure!(
        page_lines == own.lines,
        "the page's epoch and test lines differ from `tapeplan train`'s:\npage: {page_lines:#?}\nhost: {:#?}",
        own.lines
    );
    let described = get("own_run_digest").unwrap_or("");
    ensure!(
        described == own.run_digest,
        "the page's digest {described} for the run description {} differs from `tapeplan train`'s {} ({result})",
        own.run_file.display(),
        own.run_digest
    );
    let width: usize = get("phone_scroll_width")
        .and_then(|w| w.parse().ok())
        .unwrap_or(usize::MAX);
    ensure!(
        width <= 390,
        "at 390 px the page is {width} px wide ({result})"
    );
    println!(
        "browser run description: {} (tapeplan train --write-run) trains to {described} on the page, as on the host",
        own.run_file.display()
    );
    println!(
        "browser own model: {} (the ONNX 1-D CNN, {} epoch and test lines) digest {page} equals `tapeplan train`'s; \
         at 390x844 the page is {width} px wide, screenshot {}; a test digit shows its true label ({})",
        own.plan.display(),
        own.lines.len(),
        phone.display(),
        get("truth").unwrap_or("?")
    );
    Ok(())
}

/// Prints the page's .wasm size: as wasm-pack built it and as served (after `wasm-opt -O3`,
/// when binaryen is installed), raw and gzipped.
fn report_sizes(ctx: &Ctx) -> Result<()> {
    let size = |path: &Path| -> Result<(usize, usize)> {
        let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&bytes)?;
        Ok((bytes.len(), gz.finish()?.len()))
    };
    let kib = |n: usize| n as f64 / 1024.0;
    let (raw, raw_gz) = size(&unoptimized_copy(ctx))?;
    let (served, served_gz) = size(&ctx.root.join("wasm/www/pkg/tapeplan_wasm_bg.wasm"))?;
    println!(
        "wasm size: {raw} B ({:.1} KiB) raw from wasm-pack, {raw_gz} B gzipped; served: {served} B \
         ({:.1} KiB){}, {served_gz} B gzipped",
        kib(raw),
        kib(served),
        if wasm_opt(ctx).is_file() {
            " after wasm-opt -O3 (binaryen 132)"
        } else {
            " (no wasm-opt)"
        }
    );
    Ok(())
}

/// `serve [--port N]`: builds the page and serves `wasm/www` on 127.0.0.1 until interrupted.
pub fn verb_serve(ctx: &Ctx, args: &[String]) -> Result<()> {
    let port = match args {
        [] => 8000,
        [flag, p] if flag == "--port" => p.parse().context("--port takes a number")?,
        _ => bail!("usage: cargo xtask serve [--port N]"),
    };
    require_wasm_tools(ctx, WasmNeeds::BUILD)?;
    step_web_assets(ctx)?;
    build_packages(ctx)?;
    let server = Server::start(&ctx.root.join("wasm/www"), port)?;
    println!(
        "serving wasm/www on http://127.0.0.1:{}/ (Ctrl-C to stop)",
        server.port
    );
    loop {
        thread::park();
    }
}

/// A static file server on 127.0.0.1 for the page (a thread per connection; GET and HEAD).
/// It sends the cross-origin isolation headers, which give the page a fine-grained
/// `performance.now()` for timing.
struct Server {
    port: u16,
}

impl Server {
    fn start(root: &Path, port: u16) -> Result<Server> {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .with_context(|| format!("binding 127.0.0.1:{port}"))?;
        let port = listener.local_addr()?.port();
        let root = root.to_path_buf();
        thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let root = root.clone();
                thread::spawn(move || {
                    let _ = serve_one(&root, stream);
                });
            }
        });
        Ok(Server { port })
    }
}

fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("json") => "application/json",
        Some("wasm") => "application/wasm",
        Some("png") => "image/png",
        Some("svg") => "image/svg+xml",
        Some("ts") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

fn serve_one(root: &Path, mut stream: TcpStream) -> Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request = String::new();
    reader.read_line(&mut request)?;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
    }
    let mut parts = request.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or("/"));
    let path = target.split(['?', '#']).next().unwrap_or("/");
    let rel = Path::new(path.trim_start_matches('/'));
    let safe = rel.components().all(|c| matches!(c, Component::Normal(_)));
    let mut file = root.join(rel);
    if file.is_dir() {
        file = file.join("index.html");
    }
    let body = if safe && matches!(method, "GET" | "HEAD") {
        fs::read(&file).ok()
    } else {
        None
    };
    let (status, ctype, body) = match body {
        Some(b) => ("200 OK", content_type(&file), b),
        None => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            b"not found\n".to_vec(),
        ),
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nCross-Origin-Opener-Policy: same-origin\r\n\
         Cross-Origin-Embedder-Policy: require-corp\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    if method != "HEAD" {
        stream.write_all(&body)?;
    }
    stream.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_passed_and_failed_over_every_result_line() {
        let text = "running 4 tests\ntest result: ok. 4 passed; 0 failed; 0 ignored\n\
                    test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured\n";
        assert_eq!(passed_failed(text), (4, 0));
        assert_eq!(passed_failed("no tests to run"), (0, 0));
        assert_eq!(
            passed_failed("test result: FAILED. 3 passed; 1 failed; 0 ignored"),
            (3, 1)
        );
        assert!(check_ran("test result: ok. 0 passed; 0 failed; 4 ignored", 4, "x").is_err());
        assert!(check_ran("test result: ok. 4 passed; 0 failed", 4, "x").is_ok());
    }

    #[test]
    fn the_server_serves_files_and_refuses_escapes() {
        let dir = std::env::temp_dir().join(format!("xtask-serve-{}", std::process::id()));
        fs::create_dir_all(dir.join("pkg")).unwrap();
        fs::write(dir.join("index.html"), "<p>hi</p>").unwrap();
        fs::write(dir.join("pkg/m.wasm"), [0u8, 97, 115, 109]).unwrap();
        let server = Server::start(&dir, 0).unwrap();
        let get = |path: &str| {
            let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
            write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut out = String::new();
            let _ = BufReader::new(s).read_to_string(&mut out);
            out
        };
        let index = get("/?fast");
        assert!(index.starts_with("HTTP/1.1 200 OK"), "{index}");
        assert!(index.ends_with("<p>hi</p>"));
        assert!(get("/pkg/m.wasm").contains("Content-Type: application/wasm"));
        assert!(get("/../etc/passwd").starts_with("HTTP/1.1 404"));
        assert!(get("/nope.js").starts_with("HTTP/1.1 404"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
