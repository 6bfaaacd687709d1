//! `cargo xtask firmware [--core m4f|m3|m0|all] [--bless]`: build the Cortex-M training
//! firmware (`firmware-demo/`), train under QEMU, verify every bit against the host oracle
//! (`tapeplan verify`), decode its defmt log, and check its sizes against the snapshot and
//! the budget.
//!
//! Per core it builds two firmwares: the real one, and the `size-baseline` stand-in that does
//! everything but run the plan; the runtime's flash is their difference. It also builds the
//! Cortex-M4F firmware for a real board's memory map (nRF52840-DK), which nothing runs here.
//!
//! Outputs go to `firmware-demo/target/xtask/`: `<core>.elf`, `<core>.transcript` (what the
//! device sent), `<core>.defmt` (raw frames) and `<core>.log` (decoded).

use std::collections::BTreeMap;
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{anyhow, bail, Context, Result};

use crate::{output, run, show, Ctx};

/// A core the firmware runs on under QEMU.
struct Core {
    /// Its name on the command line and in the snapshot.
    name: &'static str,
    /// What it is.
    about: &'static str,
    /// The Rust target.
    target: &'static str,
    /// QEMU's machine arguments.
    machine: &'static [&'static str],
    /// The run it trains (under `firmware-demo/models/`).
    run: &'static str,
}

const CORES: &[Core] = &[
    Core {
        name: "m4f",
        about: "Cortex-M4F, hardware float, QEMU mps2-an386",
        target: "thumbv7em-none-eabihf",
        machine: &["-machine", "mps2-an386", "-cpu", "cortex-m4"],
        run: "demo.run",
    },
    Core {
        name: "m3",
        about: "Cortex-M3, software float, QEMU lm3s6965evb",
        target: "thumbv7m-none-eabi",
        machine: &["-machine", "lm3s6965evb"],
        run: "demo.run",
    },
    Core {
        name: "m0",
        about: "Cortex-M0, software float, QEMU microbit (16 KiB RAM: the m0 run)",
        target: "thumbv6m-none-eabi",
        machine: &["-machine", "microbit"],
        run: "m0.run",
    },
];

/// The real board whose memory map CI links for (no board is attached here).
const BOARD_FEATURE: &str = "board-nrf52840dk";

/// The budget: the runtime's code (runtime, kernels, libm) on the Cortex-M4F.
const RUNTIME_BUDGET_BYTES: u64 = 24 * 1024;
/// Whether going over [`RUNTIME_BUDGET_BYTES`] fails the check (it is always reported).
///
/// On: the firmware builds the runtime without its default features (`all-ops`: the opcodes
/// beyond the MLP/optimizer/dropout core set; `catalog`: the faster kernels), so only the
/// demo's vocabulary and the reference kernels are linked.
const ENFORCE_RUNTIME_BUDGET: bool = true;
/// The core the budget applies to.
const BUDGET_CORE: &str = "m4f";
/// A figure may grow this much over its snapshot (percent) before the check fails...
const GROWTH_TOLERANCE_PCT: u64 = 15;
/// ...and by at least this many bytes (small figures jitter).
const GROWTH_SLACK_BYTES: u64 = 512;
/// The snapshot, relative to the workspace root.
const SNAPSHOT: &str = "firmware-demo/size-snapshot.txt";

/// A run under QEMU ends well within this.
const QEMU_TIMEOUT_SECS: u32 = 300;
/// `defmt-print`, installed when missing (`cargo install --locked`).
const DEFMT_PRINT_VERSION: &str = "1.2.0";

/// The figures of one core, by key (see [`KEYS`]).
type Sizes = BTreeMap<&'static str, u64>;

/// The snapshot's keys, in report order, with their labels.
const KEYS: &[(&str, &str)] = &[
    ("flash_total", "flash total"),
    ("flash_runtime", "  runtime code (runtime, kernels, libm)"),
    ("flash_plan", "  plan"),
    ("flash_data", "  data (u8 pixel counts + labels)"),
    ("flash_init", "  initial parameters"),
    (
        "flash_other",
        "  other (trainer, fmt, defmt, semihosting, vectors)",
    ),
    ("ram_arena", "RAM arena (static, sized by the plan)"),
    ("ram_statics", "    other statics"),
    ("ram_stack", "    stack high-water mark"),
];

/// `cargo xtask firmware`.
pub fn verb_firmware(ctx: &Ctx, args: &[String]) -> Result<()> {
    let mut which = "all".to_string();
    let mut bless = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--core" => {
                which = it
                    .next()
                    .ok_or_else(|| anyhow!("--core needs a value: m4f, m3, m0 or all"))?
                    .clone();
            }
            "--bless" => bless = true,
            _ => bail!("usage: cargo xtask firmware [--core m4f|m3|m0|all] [--bless]"),
        }
    }
    let cores: Vec<&Core> = match which.as_str() {
        "all" => CORES.iter().collect(),
        name => vec![CORES
            .iter()
            .find(|c| c.name == name)
            .ok_or_else(|| anyhow!("--core {name}: m4f, m3, m0 or all"))?],
    };
    if bless && cores.len() != CORES.len() {
        bail!("--bless rewrites the whole snapshot: use it with --core all");
    }
    firmware(ctx, &cores, bless)
}

/// The `qemu` step of `cargo xtask ci`: every core, compared with the snapshot.
pub fn step_qemu(ctx: &Ctx) -> Result<()> {
    firmware(ctx, &CORES.iter().collect::<Vec<_>>(), false)
}

fn firmware(ctx: &Ctx, cores: &[&Core], bless: bool) -> Result<()> {
    crate::step_setup(ctx)?;
    ensure_tools(ctx)?;
    let dir = ctx.root.join("firmware-demo");
    let out = dir.join("target").join("xtask");
    fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;

    // The firmware is its own workspace: `cargo fmt --all` and clippy at the root skip it.
    let mut fmt = Command::new(&ctx.cargo);
    fmt.args(["fmt", "--", "--check"]).current_dir(&dir);
    run(fmt).context("the firmware's formatting differs: run `cargo fmt` in firmware-demo/")?;
    for features in [&[][..], &["--features", "size-baseline"][..]] {
        let mut clippy = Command::new(&ctx.cargo);
        clippy
            .args(["clippy", "--release", "--target", "thumbv7em-none-eabihf"])
            .args(features)
            .args(["--", "-D", "warnings"])
            .env_remove("CARGO_TARGET_DIR")
            .current_dir(&dir);
        run(clippy)?;
    }

    // The verifier: the host CLI, release build.
    run(ctx.cargo(["build", "--release", "-p", "tapeplan-planner"]))?;
    let target_dir = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| ctx.root.join("target"));
    let tapeplan = target_dir.join("release").join("tapeplan");

    let mut verdicts = Vec::new();
    let mut all_sizes: BTreeMap<&str, Sizes> = BTreeMap::new();
    for core in cores {
        eprintln!("\n--> {} ({}): {}", core.name, core.target, core.about);
        let elf = build(ctx, &dir, &out, core.target, &[], core.name)?;
        let baseline = build(
            ctx,
            &dir,
            &out,
            core.target,
            &["--features", "size-baseline"],
            &format!("{}-baseline", core.name),
        )?;
        let transcript_path = out.join(format!("{}.transcript", core.name));
        let transcript = run_qemu(core, &elf, &transcript_path, &out)?;
        check_defmt_log(core, &elf, &out, &transcript)?;

        let run_file = dir.join("models").join(core.run);
        let mut cmd = Command::new(&tapeplan);
        cmd.arg("verify")
            .arg(&transcript_path)
            .arg("--config")
            .arg(&run_file);
        let shown = show(&cmd);
        eprintln!("$ {shown}");
        let verified = cmd
            .output()
            .with_context(|| format!("could not start `{shown}`"))?;
        let stdout = String::from_utf8_lossy(&verified.stdout);
        print!("{stdout}");
        eprint!("{}", String::from_utf8_lossy(&verified.stderr));
        if !verified.status.success() {
            bail!(
                "{}: the device's bits differ from the host oracle's (transcript: {})",
                core.name,
                transcript_path.display()
            );
        }
        let bitwise = stdout
            .lines()
            .find(|l| l.starts_with("bitwise:"))
            .ok_or_else(|| anyhow!("`tapeplan verify` printed no bitwise line"))?;
        let params = stdout
            .lines()
            .find(|l| l.starts_with("parameters:"))
            .and_then(|l| l.split(" elements").next())
            .and_then(|l| l.strip_prefix("parameters: "))
            .unwrap_or("?");
        verdicts.push(format!(
            "{:<4} {:<22} {bitwise}; parameters {params} identical",
            core.name, core.target
        ));
        all_sizes.insert(core.name, sizes(&elf, &baseline, &transcript)?);
    }

    if cores.iter().any(|c| c.target == "thumbv7em-none-eabihf") {
        eprintln!("\n--> nrf52840-dk (thumbv7em-none-eabihf): link for a real board's memory map");
        let elf = build(
            ctx,
            &dir,
            &out,
            "thumbv7em-none-eabihf",
            &["--features", BOARD_FEATURE],
            "nrf52840-dk",
        )?;
        let s = sections(&elf)?;
        eprintln!(
            "nrf52840-dk: links: flash {} of 1048576 bytes, RAM {} of 262144 bytes (not run: no board here)",
            s.flash(),
            s.ram()
        );
    }

    let snapshot_path = ctx.root.join(SNAPSHOT);
    report_sizes(&all_sizes);
    let budget_used = all_sizes
        .get(BUDGET_CORE)
        .and_then(|s| s.get("flash_runtime"))
        .copied();
    if bless {
        fs::write(&snapshot_path, render_snapshot(&all_sizes))
            .with_context(|| format!("writing {}", snapshot_path.display()))?;
        eprintln!("wrote {}", snapshot_path.display());
    } else {
        compare_snapshot(&snapshot_path, &all_sizes)?;
    }
    if let Some(used) = budget_used {
        if used <= RUNTIME_BUDGET_BYTES {
            eprintln!(
                "budget: runtime code on {BUDGET_CORE} {used} <= {RUNTIME_BUDGET_BYTES} bytes"
            );
        } else if ENFORCE_RUNTIME_BUDGET {
            bail!(
                "the runtime's code on {BUDGET_CORE} is {used} bytes, over the budget of {RUNTIME_BUDGET_BYTES}"
            );
        } else {
            eprintln!(
                "budget: OVER: runtime code on {BUDGET_CORE} {used} > {RUNTIME_BUDGET_BYTES} bytes \
                 (reported, not enforced: every opcode's kernel is linked; see ENFORCE_RUNTIME_BUDGET \
                 in xtask/src/firmware.rs)"
            );
        }
    }

    println!();
    for v in &verdicts {
        println!("{v}");
    }
    Ok(())
}

/// Is `program --version` runnable?
fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Installs QEMU and the Arm binutils (apt) and `defmt-print` (cargo) when missing.
fn ensure_tools(ctx: &Ctx) -> Result<()> {
    if !have("qemu-system-arm") || !have("arm-none-eabi-size") {
        eprintln!("installing qemu-system-arm and binutils-arm-none-eabi (apt-get)");
        let mut update = Command::new("apt-get");
        update.args(["update", "-qq"]);
        run(update).context("apt-get update failed (are you root?)")?;
        let mut install = Command::new("apt-get");
        install
            .args([
                "install",
                "-y",
                "-qq",
                "--no-install-recommends",
                "qemu-system-arm",
                "binutils-arm-none-eabi",
            ])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null());
        run(install).context("installing qemu-system-arm and binutils-arm-none-eabi failed")?;
    }
    if !have("defmt-print") {
        eprintln!("installing defmt-print {DEFMT_PRINT_VERSION} (cargo install, a few minutes)");
        run(ctx.cargo([
            "install",
            "defmt-print",
            "--locked",
            "--version",
            &format!("={DEFMT_PRINT_VERSION}"),
        ]))?;
    }
    Ok(())
}

/// Builds the firmware (release) for `target` with `extra` cargo arguments, and copies the ELF
/// to `out/<name>.elf`.
fn build(
    ctx: &Ctx,
    dir: &Path,
    out: &Path,
    target: &str,
    extra: &[&str],
    name: &str,
) -> Result<PathBuf> {
    let mut cmd = Command::new(&ctx.cargo);
    // The firmware is its own workspace with its own `target/`: a CARGO_TARGET_DIR meant for the
    // root workspace must not move its output.
    cmd.args(["build", "--release", "--target", target])
        .args(extra)
        .env_remove("CARGO_TARGET_DIR")
        .current_dir(dir);
    run(cmd).with_context(|| format!("building the firmware for {name}"))?;
    let built = dir
        .join("target")
        .join(target)
        .join("release")
        .join("tapeplan-firmware-demo");
    let elf = out.join(format!("{name}.elf"));
    fs::copy(&built, &elf)
        .with_context(|| format!("copying {} to {}", built.display(), elf.display()))?;
    Ok(elf)
}

/// Runs the firmware under QEMU (time-limited): the transcript (semihosting stderr) is saved
/// to `transcript_path` and answered, the defmt frames (semihosting stdout) to `<core>.defmt`.
fn run_qemu(core: &Core, elf: &Path, transcript_path: &Path, out: &Path) -> Result<String> {
    let frames = out.join(format!("{}.defmt", core.name));
    let mut cmd = Command::new("timeout");
    cmd.arg(QEMU_TIMEOUT_SECS.to_string())
        .arg("qemu-system-arm")
        .args(core.machine)
        .args([
            "-nographic",
            "-monitor",
            "none",
            "-serial",
            "none",
            "-semihosting-config",
            "enable=on,target=native",
            "-kernel",
        ])
        .arg(elf)
        .stdin(Stdio::null());
    let shown = show(&cmd);
    eprintln!("$ {shown}");
    let start = std::time::Instant::now();
    let result = cmd
        .output()
        .with_context(|| format!("could not start `{shown}`"))?;
    fs::write(&frames, &result.stdout)?;
    fs::write(transcript_path, &result.stderr)?;
    let transcript = String::from_utf8_lossy(&result.stderr).into_owned();
    if !result.status.success() {
        let tail: Vec<&str> = transcript.lines().rev().take(5).collect();
        bail!(
            "{}: the firmware failed under QEMU ({}{}); last lines:\n{}",
            core.name,
            result.status,
            if result.status.code() == Some(124) {
                ", timed out"
            } else {
                ""
            },
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    eprintln!(
        "{}: trained under QEMU in {:.1} s; transcript {} ({} lines)",
        core.name,
        start.elapsed().as_secs_f64(),
        transcript_path.display(),
        transcript.lines().count()
    );
    Ok(transcript)
}

/// Decodes the defmt frames and checks one `epoch` line per epoch of the run.
fn check_defmt_log(core: &Core, elf: &Path, out: &Path, transcript: &str) -> Result<()> {
    let frames = out.join(format!("{}.defmt", core.name));
    let mut cmd = Command::new("defmt-print");
    cmd.arg("-e")
        .arg(elf)
        .stdin(fs::File::open(&frames).with_context(|| format!("opening {}", frames.display()))?);
    let log = output(cmd).context("decoding the defmt frames")?;
    fs::write(out.join(format!("{}.log", core.name)), &log)?;
    let epochs: usize = transcript
        .lines()
        .find_map(|l| l.strip_prefix("config "))
        .and_then(|c| c.split_whitespace().find_map(|t| t.strip_prefix("epochs=")))
        .and_then(|e| e.parse().ok())
        .ok_or_else(|| anyhow!("{}: no epochs= in the transcript's config", core.name))?;
    let epoch_lines: Vec<&str> = log.lines().filter(|l| l.contains("mean loss")).collect();
    if epoch_lines.len() != epochs + 1 {
        // One line per epoch, and the closing `done` line.
        bail!(
            "{}: the defmt log has {} loss lines, expected {} epochs and the summary",
            core.name,
            epoch_lines.len(),
            epochs
        );
    }
    let first = epoch_lines.first().copied().unwrap_or("").trim();
    let last = epoch_lines
        .get(epochs.saturating_sub(1))
        .copied()
        .unwrap_or("")
        .trim();
    eprintln!("{}: defmt: {first}", core.name);
    eprintln!("{}: defmt: {last}", core.name);
    Ok(())
}

/// Section sizes of an ELF.
struct Sections(BTreeMap<String, u64>);

impl Sections {
    fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    fn flash(&self) -> u64 {
        self.get(".vector_table") + self.get(".text") + self.get(".rodata") + self.get(".data")
    }

    fn ram(&self) -> u64 {
        self.get(".data") + self.get(".bss") + self.get(".uninit")
    }

    fn code(&self) -> u64 {
        self.get(".text") + self.get(".rodata")
    }
}

fn sections(elf: &Path) -> Result<Sections> {
    let mut cmd = Command::new("arm-none-eabi-size");
    cmd.arg("-A").arg(elf);
    let text = output(cmd)?;
    let mut map = BTreeMap::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        if let (Some(name), Some(size)) = (f.next(), f.next()) {
            if let (true, Ok(size)) = (name.starts_with('.'), size.parse::<u64>()) {
                map.insert(name.to_string(), size);
            }
        }
    }
    Ok(Sections(map))
}

/// The value after `key` in the transcript's `info` lines.
fn info(transcript: &str, key: &str) -> Result<u64> {
    transcript
        .lines()
        .filter_map(|l| l.strip_prefix("info "))
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.iter()
                .position(|w| *w == key)
                .and_then(|i| f.get(i + 1))
                .and_then(|v| v.parse().ok())
        })
        .ok_or_else(|| anyhow!("the transcript has no `info … {key} N`"))
}

fn sizes(elf: &Path, baseline: &Path, transcript: &str) -> Result<Sizes> {
    let full = sections(elf)?;
    let base = sections(baseline)?;
    let runtime = full.code().saturating_sub(base.code());
    let plan = info(transcript, "plan_bytes")?;
    let data = info(transcript, "data_bytes")?;
    let init = info(transcript, "init_bytes")?;
    let arena = info(transcript, "arena_bytes")?;
    let stack = info(transcript, "stack_bytes")?;
    let flash = full.flash();
    Ok(BTreeMap::from([
        ("flash_total", flash),
        ("flash_runtime", runtime),
        ("flash_plan", plan),
        ("flash_data", data),
        ("flash_init", init),
        (
            "flash_other",
            flash.saturating_sub(runtime + plan + data + init),
        ),
        ("ram_arena", arena),
        ("ram_statics", full.ram().saturating_sub(arena)),
        ("ram_stack", stack),
    ]))
}

fn report_sizes(all: &BTreeMap<&str, Sizes>) {
    let names: Vec<&str> = CORES
        .iter()
        .map(|c| c.name)
        .filter(|n| all.contains_key(n))
        .collect();
    eprint!("\n{:<52}", "sizes in bytes (release: opt-level \"s\", lto)");
    for n in &names {
        eprint!("{n:>9}");
    }
    eprintln!();
    for (key, label) in KEYS {
        eprint!("{label:<52}");
        for n in &names {
            eprint!("{:>9}", all[n].get(key).copied().unwrap_or(0));
        }
        eprintln!();
    }
}

fn render_snapshot(all: &BTreeMap<&str, Sizes>) -> String {
    let mut s = String::from(
        "# tapeplan-firmware-demo sizes in bytes, release profile (opt-level \"s\", lto), written by\n\
         # `cargo xtask firmware --bless`. `cargo xtask firmware` fails when a figure grows more than\n\
         # 15% (and 512 bytes) over this; it reports the runtime's code on m4f against the budget of\n\
         # 24576 bytes (see ENFORCE_RUNTIME_BUDGET in xtask/src/firmware.rs).\n\
         # flash_runtime: code + constants of the runtime, its kernels and libm (the firmware minus\n\
         # its `size-baseline` build); ram_stack: the stack's high-water mark, measured on the device.\n",
    );
    for core in CORES {
        if let Some(sizes) = all.get(core.name) {
            for (key, _) in KEYS {
                s.push_str(&format!("{} {key} {}\n", core.name, sizes[key]));
            }
        }
    }
    s
}

fn compare_snapshot(path: &Path, all: &BTreeMap<&str, Sizes>) -> Result<()> {
    let text = fs::read_to_string(path).with_context(|| {
        format!(
            "reading {} (create it with `cargo xtask firmware --bless`)",
            path.display()
        )
    })?;
    let mut snap: BTreeMap<(String, String), u64> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [core, key, value] = f[..] else {
            bail!("{}: bad line {line:?}", path.display());
        };
        let value = value
            .parse()
            .with_context(|| format!("{}: bad number in {line:?}", path.display()))?;
        snap.insert((core.to_string(), key.to_string()), value);
    }
    let mut grown = Vec::new();
    for (core, sizes) in all {
        for (key, &now) in sizes {
            match snap.get(&(core.to_string(), key.to_string())) {
                None => grown.push(format!("{core} {key}: {now}, not in the snapshot")),
                Some(&then) => {
                    let limit = then + (then * GROWTH_TOLERANCE_PCT / 100).max(GROWTH_SLACK_BYTES);
                    if now != then {
                        eprintln!(
                            "size: {core} {key}: {now} (snapshot {then}, {:+})",
                            now as i64 - then as i64
                        );
                    }
                    if now > limit {
                        grown.push(format!("{core} {key}: {now}, snapshot {then}"));
                    }
                }
            }
        }
    }
    if !grown.is_empty() {
        bail!(
            "sizes grew past the snapshot ({}):\n  {}\nif that is intended, run `cargo xtask firmware --bless` and commit it",
            path.display(),
            grown.join("\n  ")
        );
    }
    eprintln!("sizes: within the snapshot ({})", path.display());
    Ok(())
}
