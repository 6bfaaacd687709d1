//! Packages as their ecosystems install them (issue 17): the three libraries for crates.io and
//! the WebAssembly package for npm.
//!
//! - `publish-dry-run`: `cargo publish --dry-run` of `tapeplan-core`, `tapeplan-runtime` and
//!   `tapeplan-planner` together (cargo packages them in dependency order and verifies each
//!   against its packed siblings: each builds from its `.crate` alone, as a user's build would),
//!   then checks every package's file list holds its README and both license files.
//! - `npm-pack`: builds the wasm package (`wasm-pack build --target web`, TypeScript
//!   declarations), packs it with `npm pack` into `target/npm/` and checks the tarball's file list
//!   and `package.json` (README, licenses, the module, its declarations).

use std::fs;
use std::path::Path;

use anyhow::{anyhow, bail, ensure, Context, Result};

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
    browser::require_wasm_tools(
        ctx,
        browser::WasmNeeds {
            wasm_opt: true,
            ..browser::WasmNeeds::BUILD
        },
    )?;
    let pkg = ctx.root.join("target/npm/pkg");
    browser::wasm_pack_build(ctx, "web", &pkg, false)?;
    browser::optimize(ctx, &pkg.join("tapeplan_wasm_bg.wasm"))?;
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
    smoke_test(ctx, &dest.join(filename))
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
