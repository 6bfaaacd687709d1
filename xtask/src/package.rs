//! Packages as their ecosystems install them (issue 17): the three libraries for crates.io and
//! the WebAssembly package for npm.
//!
//! - `publish-dry-run`: `cargo publish --dry-run` of `tapeplan-core`, `tapeplan-runtime` and
//!   `tapeplan-planner` together (cargo packages them in dependency order and verifies each
//!   against its packed siblings: each builds from its `.crate` alone, as a user's build would),
//!   then checks every package's file list holds its README and both license files.
//! - `npm-pack`: builds the wasm package (`wasm-pack build --target web`, TypeScript
//!   declarations), packs it with `npm pack` into `target/npm/` and checks the tarball's file list
//!   and `package.json` (README, licenses, the module, its declarations); then the small module
//!   (issue 15) for the demo's digits MLP, within its budget, checked in Node against the host.
//! - `wasm-small`: a small module for given plans (a selective build; docs/selective-build.md,
//!   "The wasm module's size").

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, ensure, Context, Result};

use tapeplan_planner::model::optim::Sgd;
use tapeplan_planner::model::{Activation, Loss, Mlp, TrainingJob};

use crate::{browser, output, run, Ctx};

/// The crates published to crates.io, in dependency order.
pub const PUBLISHED: &[&str] = &["tapeplan-core", "tapeplan-runtime", "tapeplan-planner"];

/// Files every published crate must carry besides its sources.
const CRATE_FILES: &[&str] = &["Cargo.toml", "README.md", "LICENSE-MIT", "LICENSE-APACHE"];

/// Files only one crate needs: the planner embeds the digits and MNIST-1D sets and carries
/// their attribution and MNIST-1D's license.
const CRATE_EXTRA_FILES: &[(&str, &str)] = &[
    ("tapeplan-planner", "data/digits.csv.gz"),
    ("tapeplan-planner", "data/mnist1d.csv.gz"),
    ("tapeplan-planner", "data/mnist1d.LICENSE"),
    ("tapeplan-planner", "data/README.md"),
];

/// The npm package's name (`wasm-pack` takes it from the wasm crate's name).
const NPM_NAME: &str = "tapeplan-wasm";

/// Files the npm tarball must hold (paths inside `package/`).
const NPM_FILES: &[&str] = &[
    "package.json",
    "README.md",
    "LICENSE-MIT",
    "LICENSE-APACHE",
    "tapeplan_wasm.js",
    "tapeplan_wasm.d.ts",
    "tapeplan_wasm_bg.wasm",
    "tapeplan_wasm_bg.wasm.d.ts",
];

/// Whether `listing` (one path a line) lacks any of `needed`; returns the missing ones.
fn missing<'a>(listing: &str, needed: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    needed
        .into_iter()
        .filter(|f| !listing.lines().any(|l| l.trim() == *f))
        .collect()
}

/// `publish-dry-run`: see the module docs.
pub fn step_publish_dry_run(ctx: &Ctx) -> Result<()> {
    forget_unpacked_siblings()?;
    // --allow-dirty: the check is about what the crates hold and whether they build as
    // published, not about uncommitted work in a local checkout.
    let mut cmd = ctx.cargo(["publish", "--dry-run", "--allow-dirty"]);
    for p in PUBLISHED {
        cmd.args(["-p", p]);
    }
    run(cmd).context("`cargo publish --dry-run` of the libraries failed")?;
    for p in PUBLISHED {
        let listing = output(ctx.cargo(["package", "--list", "--allow-dirty", "-p", p]))?;
        let extra = CRATE_EXTRA_FILES
            .iter()
            .filter(|(c, _)| c == p)
            .map(|(_, f)| *f);
        let lacking = missing(&listing, CRATE_FILES.iter().copied().chain(extra));
        ensure!(
            lacking.is_empty(),
            "the {p} package lacks {lacking:?} (see `cargo package --list -p {p}`)"
        );
        eprintln!(
            "{p}: {} files packaged, README and licenses included",
            listing.lines().count()
        );
    }
    Ok(())
}

/// Removes cargo's unpacked copies of the published crates from earlier dry runs.
///
/// Cargo verifies each crate against its siblings through a temporary registry in
/// `target/package/`, and unpacks their `.crate` files under `$CARGO_HOME/registry/src/<hash>/`,
/// the hash taken from that registry's path. A checkout at the same path (CI clones to one place
/// every time) gets the same hash, and cargo reuses a directory it finds there already unpacked:
/// the verify step then built `tapeplan-runtime` against an earlier run's `tapeplan-core`
/// (stop 22's CI failure). None of these crates is ever fetched from crates.io, so every
/// unpacked copy of them is a stale one.
///
/// # Errors
/// If a stale directory exists but cannot be removed.
fn forget_unpacked_siblings() -> Result<()> {
    let home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")));
    let Some(src) = home.map(|h| h.join("registry/src")) else {
        return Ok(());
    };
    let Ok(registries) = fs::read_dir(&src) else {
        return Ok(());
    };
    for registry in registries.flatten() {
        let Ok(crates) = fs::read_dir(registry.path()) else {
            continue;
        };
        for unpacked in crates.flatten() {
            let name = unpacked.file_name();
            let name = name.to_string_lossy();
            let ours = PUBLISHED.iter().any(|p| {
                name.strip_prefix(p)
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
            });
            if ours {
                fs::remove_dir_all(unpacked.path())
                    .with_context(|| format!("removing {}", unpacked.path().display()))?;
            }
        }
    }
    Ok(())
}

/// `npm-pack`: see the module docs.
pub fn step_npm_pack(ctx: &Ctx) -> Result<()> {
    browser::require_wasm_tools(ctx, browser::WasmNeeds::OPTIMIZED)?;
    let pkg = ctx.root.join("target/npm/pkg");
    browser::wasm_pack_build(ctx, "web", &pkg, false)?;
    let module = pkg.join("tapeplan_wasm_bg.wasm");
    browser::optimize(ctx, &module)?;
    eprintln!(
        "npm package: tapeplan_wasm_bg.wasm is {} B after wasm-opt -O3",
        fs::metadata(&module)?.len()
    );
    complete_package_json(&pkg)?;
    check_package_json(&pkg)?;
    let dest = ctx.root.join("target/npm");
    let mut cmd = ctx.tool("npm", ["pack", "--json", "--pack-destination"]);
    cmd.arg(&dest).current_dir(&pkg);
    let json = output(cmd).context("npm pack")?;
    let packed: serde_json::Value =
        serde_json::from_str(&json).context("npm pack --json printed no JSON")?;
    let entry = packed
        .get(0)
        .ok_or_else(|| anyhow!("npm pack --json listed no package"))?;
    let files: Vec<&str> = entry["files"]
        .as_array()
        .ok_or_else(|| anyhow!("npm pack --json has no file list"))?
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    let listing = files.join("\n");
    let lacking = missing(&listing, NPM_FILES.iter().copied());
    ensure!(
        lacking.is_empty(),
        "the npm package lacks {lacking:?}; it holds {files:?}"
    );
    let unexpected: Vec<&&str> = files.iter().filter(|f| !NPM_FILES.contains(f)).collect();
    ensure!(
        unexpected.is_empty(),
        "the npm package holds files not in the expected list: {unexpected:?}"
    );
    let filename = entry["filename"].as_str().unwrap_or("?");
    eprintln!(
        "npm package: target/npm/{filename}, {} files, {} B packed, {} B unpacked",
        files.len(),
        entry["size"].as_u64().unwrap_or(0),
        entry["unpackedSize"].as_u64().unwrap_or(0)
    );
    smoke_test(ctx, &dest.join(filename))?;
    small_module_check(ctx)
}

/// The small module (issue 15): built for the demo's digits MLP as `cargo xtask wasm-small`
/// builds it, within [`SMALL_BUDGET_BYTES`]; the demo's fixed run in Node equals the host
/// oracle bit for bit; a plan with an opcode outside its set (the ReLU MLP's `relu`) is
/// refused at load with an error naming it.
fn small_module_check(ctx: &Ctx) -> Result<()> {
    browser::step_web_assets(ctx)?;
    let small = Small {
        plans: vec![ctx.root.join("wasm/www/assets/digits.plan")],
        core: false,
        features: None,
        wasm_opt: "-Oz".into(),
        opt_level: None,
        out: ctx.root.join("target/npm/small"),
    };
    let bytes = build_small(ctx, &small)?;
    ensure!(
        bytes <= SMALL_BUDGET_BYTES,
        "the small module for the digits MLP is {bytes} B after wasm-opt, over its budget of \
         {SMALL_BUDGET_BYTES} B (docs/selective-build.md, \"The wasm module's size\")"
    );
    check_demo_run(ctx, &small.out)?;
    let relu = TrainingJob::build(
        Mlp {
            sizes: vec![64, 32, 10],
            activation: Activation::Relu,
        },
        Loss::SoftmaxCrossEntropy,
        Sgd { lr: 0.1 },
        32,
    )
    .map_err(|e| anyhow!("planning the ReLU MLP: {e}"))?;
    let path = ctx.root.join("target/npm/relu.plan");
    fs::write(&path, relu.schedule.to_bytes())?;
    check_refuses(ctx, &small.out, &path, "Unsupported { op: Relu }")
}

/// Installs the tarball as a dependency would be (unpacked into `node_modules/tapeplan-wasm`
/// of a scratch project), imports it by its package name in Node, and checks what it computes
/// against the host: the digits plan's id and parameter names, and `digestF32` of fixed values
/// against `tapeplan_runtime::protocol::digest_f32`.
fn smoke_test(ctx: &Ctx, tarball: &Path) -> Result<()> {
    browser::step_web_assets(ctx)?;
    let plan_path = ctx.root.join("wasm/www/assets/digits.plan");
    let plan_bytes = fs::read(&plan_path)?;
    let plan = tapeplan_runtime::Plan::parse(&plan_bytes)
        .map_err(|e| anyhow!("{}: plan rejected: {e}", plan_path.display()))?;
    let values = [1.5f32, -2.0, 0.25, 1e-3, -0.0];
    let expected = format!(
        "RESULT plan_id={} parameters={} digest={:016x}",
        plan.plan_id(),
        ["w1", "b1", "w2", "b2"].join(","),
        tapeplan_runtime::protocol::digest_f32(&values)
    );
    let project = ctx.root.join("target/npm/smoke");
    if project.exists() {
        fs::remove_dir_all(&project)?;
    }
    let installed = project.join("node_modules").join(NPM_NAME);
    fs::create_dir_all(&installed)?;
    let mut untar = ctx.tool("tar", ["xzf"]);
    untar
        .arg(tarball)
        .args(["--strip-components", "1", "-C"])
        .arg(&installed);
    run(untar).context("unpacking the npm tarball")?;
    let script = format!(
        r#"import {{ readFileSync }} from "node:fs";
import {{ initSync, Trainer, digestF32 }} from "{NPM_NAME}";
const wasm = readFileSync(new URL("./node_modules/{NPM_NAME}/tapeplan_wasm_bg.wasm", import.meta.url));
initSync({{ module: wasm }});
const t = new Trainer(new Uint8Array(readFileSync({plan:?})));
const d = digestF32(new Float32Array([{values}]));
console.log(`RESULT plan_id=${{t.planId}} parameters=${{t.parameterNames().join(",")}} digest=${{d}}`);
"#,
        plan = plan_path.display().to_string(),
        values = values.map(|v| format!("{v:?}")).join(", "),
    );
    fs::write(project.join("smoke.mjs"), script)?;
    fs::write(project.join("package.json"), "{ \"type\": \"module\" }\n")?;
    let mut node = ctx.tool("node", ["smoke.mjs"]);
    node.current_dir(&project);
    let printed = output(node).context("importing the packed package in Node")?;
    let got = printed
        .lines()
        .find(|l| l.starts_with("RESULT "))
        .ok_or_else(|| anyhow!("the Node smoke test printed no RESULT line: {printed}"))?;
    ensure!(
        got == expected,
        "the packed package in Node printed `{got}`, the host expects `{expected}`"
    );
    eprintln!("npm package: imported by name in Node, {got}");
    Ok(())
}

/// How a small module is built (`cargo xtask wasm-small`; docs/selective-build.md, "The wasm
/// module's size").
pub struct Small {
    /// The plans the module must run: its op set is the union of theirs.
    pub plans: Vec<PathBuf>,
    /// The core set instead of a plan's opcodes (the `all-ops` feature off, no op set).
    pub core: bool,
    /// The wasm crate's features; `None`: `features_for` the plans.
    pub features: Option<String>,
    /// `wasm-opt`'s level: `-O3` or `-Oz`.
    pub wasm_opt: String,
    /// rustc's `opt-level` (`wasm/.cargo/config.toml` says `s`).
    pub opt_level: Option<String>,
    /// Where the package goes.
    pub out: PathBuf,
}

/// The small module's budget (issue 15): the demo's digits MLP after `wasm-opt -Oz`.
pub const SMALL_BUDGET_BYTES: u64 = 102_400;

/// The wasm crate's features of a small module for `plans` (docs/selective-build.md, "The wasm
/// module's size", for what each costs): `fusion` (plans are fused by default), lol_alloc's
/// allocator (`small-alloc`), `math-fast` and `arith-fma` only when a plan records those
/// profiles; no `catalog` (14 KB, the reference kernels instead: the same bits, slower), no
/// `TrainRun` (`train-run`), and the errors' variants instead of their messages. `all-ops`
/// when a plan uses an opcode outside the core set (a selective build dispatches only the
/// opcodes both in its set and in the build's vocabulary).
fn features_for(plans: &[tapeplan_runtime::Plan<'_>]) -> String {
    let mut f = vec!["fusion", "small-alloc"];
    let core = tapeplan_runtime::OpSet::CORE;
    if plans
        .iter()
        .any(|p| p.op_set().intersection(core) != p.op_set())
    {
        f.push("all-ops");
    }
    if plans
        .iter()
        .any(|p| p.math() == tapeplan_runtime::MathProfile::Fast)
    {
        f.push("math-fast");
    }
    if plans
        .iter()
        .any(|p| p.arith() == tapeplan_runtime::ArithProfile::Fma)
    {
        f.push("arith-fma");
    }
    f.join(",")
}

/// The opcodes of `plans` together, as `op_set!` takes them (`MatMul, Tanh, …`), and the
/// features they need.
fn plans_ops(paths: &[PathBuf]) -> Result<(String, String)> {
    let bytes: Vec<Vec<u8>> = paths
        .iter()
        .map(|p| fs::read(p).with_context(|| format!("reading {}", p.display())))
        .collect::<Result<_>>()?;
    let plans: Vec<tapeplan_runtime::Plan<'_>> = bytes
        .iter()
        .zip(paths)
        .map(|(b, p)| {
            tapeplan_runtime::Plan::parse_alloc(b)
                .map_err(|e| anyhow!("{}: plan rejected: {e}", p.display()))
        })
        .collect::<Result<_>>()?;
    let set = plans.iter().fold(tapeplan_runtime::OpSet::EMPTY, |acc, p| {
        acc.union(p.op_set())
    });
    Ok((set.variants().to_string(), features_for(&plans)))
}

/// Builds a small package (`--target web`, no npm tarball) as [`Small`] says, optimizes it
/// and answers the module's bytes after `wasm-opt`.
pub fn build_small(ctx: &Ctx, small: &Small) -> Result<u64> {
    browser::require_wasm_tools(ctx, browser::WasmNeeds::OPTIMIZED)?;
    let (ops, needed) = if small.core {
        (String::new(), features_for(&[]))
    } else {
        ensure!(
            !small.plans.is_empty(),
            "a small module needs --plan PLAN or --core"
        );
        plans_ops(&small.plans)?
    };
    let features = small.features.clone().unwrap_or(needed);
    eprintln!(
        "small module: op set [{}], features [{features}]",
        if small.core {
            "the build's vocabulary"
        } else {
            &ops
        }
    );
    let mut cmd = ctx.tool(
        "wasm-pack",
        ["build", "--release", "--target", "web", "--no-pack"],
    );
    cmd.arg("--out-dir")
        .arg(&small.out)
        .current_dir(ctx.root.join("wasm"))
        .env("TAPEPLAN_WASM_OPS", &ops)
        .args(["--", "--no-default-features"]);
    if !features.is_empty() {
        cmd.args(["--features", &features]);
    }
    match &small.opt_level {
        Some(level) => {
            cmd.env("CARGO_PROFILE_RELEASE_OPT_LEVEL", level);
        }
        None => {
            for package in SMALL_Z_PACKAGES {
                cmd.arg("--config")
                    .arg(format!("profile.release.package.{package}.opt-level=\"z\""));
            }
        }
    }
    run(cmd).context("wasm-pack build of the small module")?;
    let module = small.out.join("tapeplan_wasm_bg.wasm");
    let before = fs::metadata(&module)?.len();
    browser::optimize_with(ctx, &module, &small.wasm_opt)?;
    let after = fs::metadata(&module)?.len();
    eprintln!(
        "small module: {} B before wasm-opt, {after} B after wasm-opt {} ({:.1} KiB)",
        before,
        small.wasm_opt,
        after as f64 / 1024.0
    );
    Ok(after)
}

/// The crates a small module builds at `opt-level = "z"` (the rest at `"s"`, unless
/// `--opt-level` sets one level for all): the wasm crate (its glue, and the runtime's generic
/// code it instantiates), wasm-bindgen's and the allocator. The digits MLP's module: 102 396 ->
/// 97 288 B after wasm-opt, train steps 0.207 -> 0.219 ms in Node (`taskset -c 1 node
/// wasm/e2e/step-time.mjs 7 DIR_S DIR_Z`, load 2.2), 2026-12-03.
const SMALL_Z_PACKAGES: [&str; 3] = ["tapeplan-wasm", "wasm-bindgen", "lol_alloc"];

/// Trains `plan` on `data` for 2 epochs (seed 42; the initial parameters of
/// `PLAN.init.safetensors` when there is one, else an MLP's Glorot draw) in Node
/// with the `--target web` package in `pkg` (`wasm/e2e/train-plan.mjs`) and on the host
/// (`tapeplan train`), and checks both print the same report, parameter digest included.
pub fn check_trains_like_host(ctx: &Ctx, pkg: &Path, plan: &Path, data: &Path) -> Result<()> {
    let epochs = "2";
    // `tapeplan plan --onnx` writes the initial parameters beside the plan.
    let mut init = plan.as_os_str().to_owned();
    init.push(".init.safetensors");
    let init = Path::new(&init).is_file().then(|| PathBuf::from(init));
    let mut node = ctx.tool("node", ["wasm/e2e/train-plan.mjs"]);
    node.arg(plan)
        .arg(data)
        .arg(init.as_deref().unwrap_or(Path::new("-")))
        .args([epochs, "42"])
        .env("TAPEPLAN_WASM_PKG", pkg);
    let in_node = output(node).context("training in Node with the small module")?;
    let mut host = ctx.cargo([
        "run",
        "--quiet",
        "--release",
        "-p",
        "tapeplan-planner",
        "--bin",
        "tapeplan",
        "--",
        "train",
    ]);
    host.arg(plan)
        .arg("--data")
        .arg(data)
        .args(["--epochs", epochs, "--seed", "42"]);
    if let Some(init) = &init {
        host.arg("--init").arg(init);
    }
    let on_host = output(host).context("tapeplan train on the host")?;
    let digest = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("parameter digest: "))
            .map(str::to_string)
    };
    let (n, h) = (digest(&in_node), digest(&on_host));
    ensure!(
        n.is_some() && n == h,
        "the small module in Node ended on {n:?}, the host on {h:?}\nNode:\n{in_node}\nhost:\n{on_host}"
    );
    eprintln!(
        "small module: {} after {epochs} epochs in Node, as on the host",
        n.unwrap_or_default()
    );
    Ok(())
}

/// Runs the demo page's fixed run (`wasm/www/assets`: the digits MLP's plan, the host's Glorot
/// initial parameters and epoch orders, `DemoRun` of `wasm/www/demo-run.js`) in Node with the
/// `--target web` package in `pkg`, and checks every loss bit for bit and the final parameter
/// digest against the host oracle's (the assets' manifest), as the page does.
pub fn check_demo_run(ctx: &Ctx, pkg: &Path) -> Result<()> {
    browser::step_web_assets(ctx)?;
    let www = ctx.root.join("wasm/www");
    let url = |p: &Path| format!("file://{}", p.display());
    let script = format!(
        r#"import {{ readFileSync }} from "node:fs";
const pkg = await import({js:?});
const {{ ASSET_FILES, DemoRun, decodeAssets, firstBitDifference }} = await import({demo:?});
pkg.initSync({{ module: readFileSync({wasm:?}) }});
const dir = {assets:?};
const manifest = JSON.parse(readFileSync(`${{dir}}/manifest.json`, "utf8"));
const files = Object.fromEntries(ASSET_FILES.map((n) => [n, new Uint8Array(readFileSync(`${{dir}}/${{n}}`))]));
const assets = decodeAssets(manifest, (n) => files[n]);
const t = new pkg.Trainer(assets.plan);
t.loadParameters(assets.init);
const run = new DemoRun(t, assets);
while (!run.done) run.next();
const diff = firstBitDifference(run.losses, assets.losses);
const ok = t.digest() === manifest.digest && diff === -1 && run.steps === manifest.steps;
console.log(`${{ok ? "SAME" : "DIFFERENT"}} steps=${{run.steps}} first_loss_difference=${{diff}} digest=${{t.digest()}} host=${{manifest.digest}}`);
"#,
        js = url(&pkg.join("tapeplan_wasm.js")),
        demo = url(&www.join("demo-run.js")),
        wasm = pkg.join("tapeplan_wasm_bg.wasm").display().to_string(),
        assets = www.join("assets").display().to_string(),
    );
    let path = pkg.join("demo-run-check.mjs");
    fs::write(&path, script)?;
    let printed = output(ctx.tool("node", [path.to_string_lossy().as_ref()]))
        .context("the demo run in Node with the small module")?;
    fs::remove_file(&path)?;
    let line = printed.trim();
    ensure!(
        line.starts_with("SAME "),
        "the small module's demo run in Node differs from the host oracle: {line}"
    );
    eprintln!("small module: the demo run in Node equals the host oracle ({line})");
    Ok(())
}

/// Loads `plan` (an opcode outside the module's set) in Node with the package in `pkg` and
/// checks the load is refused with an error saying `want` (which names the opcode).
pub fn check_refuses(ctx: &Ctx, pkg: &Path, plan: &Path, want: &str) -> Result<()> {
    let script = format!(
        r#"import {{ readFileSync }} from "node:fs";
const pkg = await import({js:?});
pkg.initSync({{ module: readFileSync({wasm:?}) }});
try {{
  new pkg.Trainer(new Uint8Array(readFileSync({plan:?})));
  console.log("LOADED");
}} catch (e) {{
  console.log(`REFUSED ${{e.message}}`);
}}
"#,
        js = pkg.join("tapeplan_wasm.js").display().to_string(),
        wasm = pkg.join("tapeplan_wasm_bg.wasm").display().to_string(),
        plan = plan.display().to_string(),
    );
    let path = pkg.join("refuse.mjs");
    fs::write(&path, script)?;
    let printed = output(ctx.tool("node", [path.to_string_lossy().as_ref()]))?;
    fs::remove_file(&path)?;
    ensure!(
        printed.starts_with("REFUSED plan rejected: ") && printed.contains(want),
        "loading {} into the small module printed `{}`, expected a refusal saying `{want}`",
        plan.display(),
        printed.trim()
    );
    eprintln!("small module: {}", printed.trim());
    Ok(())
}

/// The plan of a run description (`firmware-demo/models/*.run`), written to
/// `target/npm/NAME.plan`: the plan file of a `plan=` run, or the job the run records.
fn run_plan(ctx: &Ctx, run: &Path) -> Result<PathBuf> {
    let cfg = tapeplan_planner::model::run::RunConfig::from_file(run)
        .map_err(|e| anyhow!("{}: {e}", run.display()))?;
    let bytes = match cfg
        .plan_bytes()
        .map_err(|e| anyhow!("{}: {e}", run.display()))?
    {
        Some(b) => b,
        None => cfg
            .job()
            .map_err(|e| anyhow!("{}: {e}", run.display()))?
            .schedule
            .to_bytes(),
    };
    let stem = run.file_stem().unwrap_or_default().to_string_lossy();
    let dir = ctx.root.join("target/npm");
    fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{stem}.plan"));
    fs::write(&path, bytes)?;
    Ok(path)
}

/// `wasm-small`: `[--plan PLAN]... [--run RUN]... [--core] [--features LIST] [--wasm-opt O3|Oz]
/// [--opt-level s|z] [--out DIR] [--check] [--train DATA.csv]`. Without `--plan`, `--run` or
/// `--core`: the demo page's digits MLP (`wasm/www/assets/digits.plan`).
pub fn verb_wasm_small(ctx: &Ctx, args: &[String]) -> Result<()> {
    let mut small = Small {
        plans: Vec::new(),
        core: false,
        features: None,
        wasm_opt: "-Oz".into(),
        opt_level: None,
        out: ctx.root.join("target/npm/small"),
    };
    let mut check = false;
    let mut train: Option<PathBuf> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| anyhow!("{a} needs a value"))
        };
        match a.as_str() {
            "--plan" => small.plans.push(value()?.into()),
            "--run" => small.plans.push(run_plan(ctx, Path::new(&value()?))?),
            "--core" => small.core = true,
            "--features" => small.features = Some(value()?),
            "--wasm-opt" => small.wasm_opt = format!("-{}", value()?.trim_start_matches('-')),
            "--opt-level" => small.opt_level = Some(value()?),
            "--out" => small.out = ctx.root.join(value()?),
            "--check" => check = true,
            "--train" => train = Some(value()?.into()),
            other => bail!("wasm-small: unknown argument `{other}` (see `cargo xtask help`)"),
        }
    }
    if small.plans.is_empty() && !small.core {
        browser::step_web_assets(ctx)?;
        small
            .plans
            .push(ctx.root.join("wasm/www/assets/digits.plan"));
    }
    build_small(ctx, &small)?;
    if check {
        check_demo_run(ctx, &small.out)?;
    }
    if let Some(data) = train {
        for plan in &small.plans {
            check_trains_like_host(ctx, &small.out, plan, &data)?;
        }
    }
    Ok(())
}

/// Completes the `package.json` wasm-pack wrote: its `files` list lacks the license files and
/// the module's own declarations (`tapeplan_wasm_bg.wasm.d.ts`, which `tapeplan_wasm.d.ts`
/// imports), and it has no keywords or homepage.
fn complete_package_json(pkg: &Path) -> Result<()> {
    let path = pkg.join("package.json");
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut json: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let files = json["files"]
        .as_array_mut()
        .ok_or_else(|| anyhow!("{}: no \"files\" list", path.display()))?;
    for f in [
        "tapeplan_wasm_bg.wasm.d.ts",
        "LICENSE-MIT",
        "LICENSE-APACHE",
    ] {
        if !files.iter().any(|v| v == f) {
            files.push(f.into());
        }
    }
    json["homepage"] = "https://github.com/tapeplan/tapeplan".into();
    json["keywords"] = serde_json::json!(["neural-network", "training", "webassembly", "no-std"]);
    let text = serde_json::to_string_pretty(&json)?;
    fs::write(&path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

/// Checks the `package.json` wasm-pack wrote names the package, its module and its types.
fn check_package_json(pkg: &Path) -> Result<()> {
    let path = pkg.join("package.json");
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let field = |k: &str| json[k].as_str().unwrap_or("");
    let want = [
        ("name", NPM_NAME),
        ("types", "tapeplan_wasm.d.ts"),
        ("main", "tapeplan_wasm.js"),
        ("license", "MIT OR Apache-2.0"),
    ];
    for (key, value) in want {
        if field(key) != value {
            bail!(
                "{}: \"{key}\" is {:?}, expected {value:?}",
                path.display(),
                field(key)
            );
        }
    }
    ensure!(
        field("repository").is_empty() && json["repository"]["url"].as_str().is_some(),
        "{}: no repository url",
        path.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_names_what_a_listing_lacks() {
        let listing = "Cargo.toml\nREADME.md\nsrc/lib.rs\n";
        assert_eq!(
            missing(listing, CRATE_FILES.iter().copied()),
            vec!["LICENSE-MIT", "LICENSE-APACHE"]
        );
        assert!(missing("a\nb\n", ["a", "b"]).is_empty());
        // Whole lines only: a path that merely contains the name does not count.
        assert_eq!(
            missing("docs/README.md\n", ["README.md"]),
            vec!["README.md"]
        );
    }
}
