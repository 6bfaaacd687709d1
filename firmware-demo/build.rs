//! Generates everything the firmware embeds, at build time, from a run description
//! (`models/*.run`): nothing opaque is checked in.
//!
//! - the board: exactly one board feature ([`BOARDS`]; never guessed from the target, which
//!   must be the board's core); it picks the linker's `memory.x`, the core clock and the
//!   default run;
//! - the plan: recorded and planned by `tapeplan-planner` (forward + recorded gradient + SGD
//!   update), serialized to `$OUT_DIR/train.plan`, and its arena size as a constant; or, for a
//!   `plan=PATH` run, that plan file as it is (checked against its `plan_digest`);
//! - the data: the run's training rows as raw `u8` pixel counts and labels (the digits), or
//!   with feature `cnn` (a `data=mnist1d` run, a `model=digits_cnn` run on the digits, or a
//!   `plan=` run on its CSV) as little-endian
//!   `f32` features and labels;
//! - the initial parameters: seeded Glorot-uniform (or the model's own), as little-endian
//!   `f32`s; for a `plan=` run, its model tensors from `init=PATH` or `PLAN.init.safetensors`;
//! - the op set: the opcodes the plan uses (`PlanOps`), so the runtime's selective build links
//!   only their kernels (`docs/selective-build.md`).
//!
//! Paths in a run description are relative to the description's own folder (this script reads
//! them from there, as `tapeplan verify --config` does, from wherever it is run).
//! The transcript's `config` line carries them as written.
//!
//! `TAPEPLAN_RUN=path/to/file.run` overrides the board's run; with feature `cnn` the default run
//! is `models/mnist1d.run`. The math profile is the one
//! feature of `math-precise` (default) and `math-fast` that is enabled: the plan records it and
//! the runtime links only its kernels; a run description naming the other profile is refused.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use tapeplan_planner::model::RunConfig;
use tapeplan_runtime::protocol::data_digest;
use tapeplan_runtime::MathProfile;

/// A board the firmware links for.
struct Board {
    /// Its cargo feature, and its name in the transcript's `target` line.
    name: &'static str,
    /// The Rust target of its core.
    target: &'static str,
    /// The run it trains by default, under `models/`.
    run: &'static str,
    /// The core clock SysTick counts at reset, in Hz.
    core_hz: u32,
    /// RAM, in bytes (for the build-time fit check; the linker has the last word).
    ram_bytes: usize,
}

/// Every board; the linker memory map of each is `memory/<name>.x`.
const BOARDS: &[Board] = &[
    Board {
        name: "qemu-mps2-an386",
        target: "thumbv7em-none-eabihf",
        run: "demo.run",
        core_hz: 25_000_000,
        ram_bytes: 4 << 20,
    },
    Board {
        name: "qemu-lm3s6965evb",
        target: "thumbv7m-none-eabi",
        run: "demo.run",
        core_hz: 12_000_000,
        ram_bytes: 64 << 10,
    },
    Board {
        name: "qemu-microbit",
        target: "thumbv6m-none-eabi",
        run: "m0.run",
        core_hz: 16_000_000,
        ram_bytes: 16 << 10,
    },
    Board {
        name: "nrf52840-dk",
        target: "thumbv7em-none-eabihf",
        run: "demo.run",
        core_hz: 64_000_000,
        ram_bytes: 256 << 10,
    },
    Board {
        name: "stm32f411-nucleo",
        target: "thumbv7em-none-eabihf",
        run: "demo.run",
        core_hz: 16_000_000,
        ram_bytes: 128 << 10,
    },
    Board {
        name: "rp2040",
        target: "thumbv6m-none-eabi",
        run: "demo.run",
        core_hz: 6_500_000,
        ram_bytes: 256 << 10,
    },
];

/// The board of the one board feature enabled; an error naming the choices otherwise, or when
/// `target` is not the board's core.
fn board(target: &str) -> Result<&'static Board, String> {
    let feature = |b: &Board| format!("CARGO_FEATURE_{}", b.name.to_uppercase().replace('-', "_"));
    let chosen: Vec<&Board> = BOARDS
        .iter()
        .filter(|b| env::var_os(feature(b)).is_some())
        .collect();
    let choices: Vec<String> = BOARDS
        .iter()
        .map(|b| format!("{} ({})", b.name, b.target))
        .collect();
    let board = match chosen[..] {
        [one] => one,
        [] => {
            return Err(format!(
                "no board feature: enable exactly one of {} (`--no-default-features --features \
                 math-precise,BOARD`); the board is not guessed from the target",
                choices.join(", ")
            ))
        }
        _ => {
            let names: Vec<&str> = chosen.iter().map(|b| b.name).collect();
            return Err(format!(
                "several board features ({}): enable exactly one of {} (the default feature \
                 set has qemu-mps2-an386: add --no-default-features)",
                names.join(", "),
                choices.join(", ")
            ));
        }
    };
    if board.target != target {
        return Err(format!(
            "board {} is a {} core: build it with --target {}, not {target}",
            board.name, board.target, board.target
        ));
    }
    Ok(board)
}

/// RAM kept for the stack and the other statics when checking that the arena fits.
const RAM_RESERVE_BYTES: usize = 4 << 10;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let out = PathBuf::from(env::var("OUT_DIR")?);
    let target = env::var("TARGET")?;
    let board = board(&target)?;

    // The memory map.
    let memory = manifest.join("memory").join(format!("{}.x", board.name));
    fs::copy(&memory, out.join("memory.x"))?;
    println!("cargo:rerun-if-changed={}", memory.display());
    println!("cargo:rustc-link-search={}", out.display());
    println!("cargo:rustc-link-arg-bins=--nmagic");
    println!("cargo:rustc-link-arg-bins=-Tlink.x");
    println!("cargo:rustc-link-arg-bins=-Tdefmt.x");

    // Feature `hvp`: the cross-target matrix's Hessian-vector product entry instead of a run.
    if env::var_os("CARGO_FEATURE_HVP").is_some() {
        return hvp(&out, board, &target);
    }

    // The run.
    println!("cargo:rerun-if-env-changed=TAPEPLAN_RUN");
    let cnn = env::var_os("CARGO_FEATURE_CNN").is_some();
    let run_path = match env::var_os("TAPEPLAN_RUN") {
        Some(p) => PathBuf::from(p),
        None if cnn => manifest.join("models").join("mnist1d.run"),
        None => manifest.join("models").join(board.run),
    };
    println!("cargo:rerun-if-changed={}", run_path.display());
    let run_text = fs::read_to_string(&run_path)
        .map_err(|e| format!("reading {}: {e}", run_path.display()))?;
    // The files a run names (`plan=`, `data=`, `init=`) are relative to the run file's folder,
    // where `tapeplan verify --config` reads them too.
    let mut cfg =
        RunConfig::from_file(&run_path).map_err(|e| format!("{}: {e}", run_path.display()))?;
    let plan_file = cfg
        .plan_bytes()
        .map_err(|e| format!("{}: {e}", run_path.display()))?;
    let math = match (
        env::var_os("CARGO_FEATURE_MATH_PRECISE").is_some(),
        env::var_os("CARGO_FEATURE_MATH_FAST").is_some(),
    ) {
        (true, false) => MathProfile::Precise,
        (false, true) => MathProfile::Fast,
        _ => {
            return Err(
                "enable exactly one math profile feature: `math-precise` (the default) \
                 or `math-fast` (`--no-default-features --features math-fast`)"
                    .into(),
            )
        }
    };
    // A run description that names a profile must name the one this firmware links.
    let names_math = run_text
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .any(|l| l.split_whitespace().any(|t| t.starts_with("math=")));
    if (names_math || plan_file.is_some()) && cfg.math != math {
        return Err(format!(
            "{}: the run asks for math={}, but this firmware is built with feature math-{math}",
            run_path.display(),
            cfg.math
        )
        .into());
    }
    cfg.math = math;
    if cfg.samples > usize::from(u16::MAX) {
        return Err("the firmware indexes samples with u16: at most 65535".into());
    }

    // The plan: the run's plan file, or the run's job recorded and planned here.
    let job = match &plan_file {
        Some(_) => None,
        None => Some(cfg.job()?),
    };
    let plan_bytes = match (&plan_file, &job) {
        (Some(bytes), _) => bytes.clone(),
        (None, Some(job)) => job.schedule.to_bytes(),
        (None, None) => return Err("no plan".into()),
    };
    // The check below runs the host's runtime (default features, fused chains included); the
    // device's runs fused chains only with this crate's feature `fusion`, and would otherwise
    // reject the plan at boot.
    let fused = tapeplan_planner::io::inspect::PlanInfo::decode(&plan_bytes).is_fused();
    if fused && env::var_os("CARGO_FEATURE_FUSION").is_none() {
        return Err(format!(
            "{}: `{cfg}` plans fused chains, but the firmware is built without its feature \
             `fusion` (its runtime would reject the plan at boot): build with `--features \
             fusion` (about 4 KiB more flash), or plan without fused chains (a run description: \
             drop `fusion=on` / `fusion=auto`; a plan file: `tapeplan plan --no-fusion`, or in the \
             library `JobOptions {{ planning: PlanOptions {{ fusion: FusionPolicy::Off, .. }}, .. }}`)",
            run_path.display()
        )
        .into());
    }
    let plan = tapeplan_runtime::Plan::parse(&plan_bytes)
        .map_err(|e| format!("the planner's plan is rejected by the runtime: {e}"))?;
    let arena_bytes = plan.arena_bytes();
    if arena_bytes + RAM_RESERVE_BYTES > board.ram_bytes {
        return Err(format!(
            "{}: the arena of `{cfg}` is {arena_bytes} bytes; with {RAM_RESERVE_BYTES} bytes for \
             the stack it does not fit the board's {} bytes of RAM (pick a smaller run)",
            run_path.display(),
            board.ram_bytes
        )
        .into());
    }
    write(&out.join("train.plan"), &plan_bytes)?;
    let plan_ops = op_set_item(&plan);

    // The data: `f32` features for MNIST-1D, the digits' CNN and any plan file's run (its
    // CSV), the digits' pixel counts otherwise.
    let mnist1d = cfg.data == tapeplan_planner::model::run::RunData::Mnist1d;
    let digits_cnn = matches!(
        cfg.model,
        tapeplan_planner::model::run::RunModel::DigitsCnn(_)
    );
    let csv = matches!(cfg.data, tapeplan_planner::model::run::RunData::Csv { .. });
    let f32_rows = mnist1d || digits_cnn || plan_file.is_some() || csv;
    if f32_rows != cnn {
        return Err(format!(
            "{}: a data=mnist1d, data=PATH, model=digits_cnn or plan= run needs the firmware's \
             feature `cnn` (its `f32` rows, all opcodes and the plan's init entry), and the \
             feature trains only those runs",
            run_path.display()
        )
        .into());
    }
    if !f32_rows && cfg.data != tapeplan_planner::model::run::RunData::Digits {
        return Err(format!(
            "{}: the firmware demo embeds the digits set's pixel counts; a run on data=PATH is verified from other targets",
            run_path.display()
        )
        .into());
    }
    let train = cfg.training_set()?;
    // The digits as pixel counts; `f32` rows as their features.
    let data_bytes: Vec<u8> = if f32_rows {
        train
            .features
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    } else {
        train.pixels.clone()
    };
    let data_file = if f32_rows {
        "features.bin"
    } else {
        "pixels.bin"
    };
    write(&out.join(data_file), &data_bytes)?;
    // A regression run's targets take the labels' place, as little-endian `f32`s (the data
    // digest hashes the features, then the labels, then the targets: one of the two is empty).
    let targets_per_row = train.n_targets();
    let label_bytes: Vec<u8> = if targets_per_row > 0 {
        train
            .targets()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    } else {
        train.labels.clone()
    };
    write(&out.join("labels.bin"), &label_bytes)?;

    // The initial parameters: the job's, in its order; a plan file's model tensors (not the
    // optimizer's state, which its `init` entry writes on the device), in binding order.
    let (shapes, init) = match &job {
        Some(job) => (job.parameter_shapes(), cfg.initial_parameters(job)?),
        None => {
            let persistent = cfg.plan_initial_persistent(&plan_bytes)?;
            let shapes = tapeplan_planner::model::run::plan_model_tensors(&plan);
            let init = shapes
                .iter()
                .map(|(name, _)| {
                    plan.parameter(name)
                        .and_then(|b| persistent.get(b.range()))
                        .map(<[f32]>::to_vec)
                        .ok_or_else(|| format!("the plan has no parameter {name}"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            (shapes, init)
        }
    };
    let init_bytes: Vec<u8> = init
        .iter()
        .flatten()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    write(&out.join("init.bin"), &init_bytes)?;

    let mut g = String::new();
    writeln!(g, "// Generated by build.rs from {}.", run_path.display())?;
    writeln!(
        g,
        "/// The run description, canonical form (the transcript's `config` line)."
    )?;
    writeln!(g, "pub const RUN: &str = {:?};", cfg.to_line())?;
    // The transcript's line buffer: 192 bytes, or the `config` line's length when a run's
    // description (a `plan=` run's paths) is longer, so no line is cut.
    writeln!(
        g,
        "/// Bytes of the transcript's line buffer (the longest line, its newline included)."
    )?;
    writeln!(
        g,
        "pub const LINE_BYTES: usize = {};",
        ("config ".len() + cfg.to_line().len() + 1).max(192)
    )?;
    board_items(&mut g, board, &target)?;
    writeln!(
        g,
        "/// The plan's arena, in `f32` elements (the plan's own figure)."
    )?;
    writeln!(g, "pub const ARENA_ELEMS: usize = {};", plan.arena_elems())?;
    writeln!(
        g,
        "/// The plan's tensor count (sizes the validator's scratch)."
    )?;
    writeln!(g, "pub const PLAN_TENSORS: usize = {};", plan.n_tensors())?;
    writeln!(
        g,
        "/// The math profile the plan records and the runtime links."
    )?;
    writeln!(g, "pub const MATH: &str = {:?};", math.name())?;
    writeln!(g, "/// The plan's id (the CRC-32 of its records).")?;
    writeln!(g, "pub const PLAN_ID: u32 = {:#010x};", plan.plan_id())?;
    writeln!(g, "/// Rows per step.")?;
    writeln!(g, "pub const BATCH: usize = {};", cfg.batch)?;
    writeln!(g, "/// Features per row.")?;
    writeln!(g, "pub const D_IN: usize = {};", cfg.layers[0])?;
    writeln!(g, "/// Training rows embedded.")?;
    writeln!(g, "pub const SAMPLES: usize = {};", cfg.samples)?;
    writeln!(g, "/// Passes over the rows.")?;
    writeln!(g, "pub const EPOCHS: usize = {};", cfg.epochs)?;
    writeln!(g, "/// Seed of the per-epoch shuffles.")?;
    writeln!(g, "pub const SEED: u64 = {};", cfg.seed)?;
    writeln!(
        g,
        "/// FNV-1a 64 of the rows' bytes then LABELS, as the host computes it."
    )?;
    writeln!(
        g,
        "pub const DATA_DIGEST: u64 = {:#018x};",
        data_digest(&data_bytes, &label_bytes)
    )?;
    writeln!(g, "/// The plan's bytes.")?;
    writeln!(
        g,
        "pub static PLAN: &[u8] = include_bytes!(concat!(env!(\"OUT_DIR\"), \"/train.plan\"));"
    )?;
    if f32_rows {
        writeln!(
            g,
            "/// Features, little-endian `f32`, `[SAMPLES, D_IN]` row-major."
        )?;
        writeln!(g, "pub static FEATURES: &[u8; SAMPLES * D_IN * 4] = include_bytes!(concat!(env!(\"OUT_DIR\"), \"/features.bin\"));")?;
    } else {
        writeln!(g, "/// Pixel counts `0..=16`, `[SAMPLES, D_IN]` row-major.")?;
        writeln!(g, "pub static PIXELS: &[u8; SAMPLES * D_IN] = include_bytes!(concat!(env!(\"OUT_DIR\"), \"/pixels.bin\"));")?;
    }
    writeln!(
        g,
        "/// Regression targets per row (0: the rows have class labels)."
    )?;
    writeln!(g, "pub const TARGETS_PER_ROW: usize = {targets_per_row};")?;
    writeln!(
        g,
        "/// Labels `0..=9`, `[SAMPLES]`; or, with `TARGETS_PER_ROW > 0`, the targets as \
         little-endian `f32`, `[SAMPLES, TARGETS_PER_ROW]`."
    )?;
    writeln!(g, "pub static LABELS: &[u8; {}] = include_bytes!(concat!(env!(\"OUT_DIR\"), \"/labels.bin\"));", label_bytes.len())?;
    writeln!(
        g,
        "/// Initial parameters, little-endian `f32`, in `INIT_PARAMS` order."
    )?;
    writeln!(
        g,
        "pub static INIT: &[u8; {}] = include_bytes!(concat!(env!(\"OUT_DIR\"), \"/init.bin\"));",
        init_bytes.len()
    )?;
    writeln!(
        g,
        "/// Each parameter's name and element count, in `INIT` order."
    )?;
    write!(g, "pub const INIT_PARAMS: &[(&str, usize)] = &[")?;
    for (name, shape) in &shapes {
        write!(g, "({name:?}, {}), ", shape.elems())?;
    }
    writeln!(g, "];")?;
    g.push_str(&plan_ops);
    write(&out.join("generated.rs"), g.as_bytes())?;
    // The files the run names, so a new plan, data or init file rebuilds the firmware.
    if let tapeplan_planner::model::run::RunModel::Plan(p) = &cfg.model {
        let mut files = vec![p.file.clone(), format!("{}.init.safetensors", p.file)];
        if let tapeplan_planner::model::run::RunData::Csv { file, .. } = &cfg.data {
            files.push(file.clone());
        }
        if let tapeplan_planner::model::run::RunInit::Safetensors { file, .. } = &cfg.init {
            files.push(file.clone());
        }
        for f in files {
            println!("cargo:rerun-if-changed={f}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
    Ok(())
}

/// Feature `hvp`: the plan of `tapeplan_planner::model::hvp` (a Hessian-vector product entry,
/// not training), its initial parameters and its step count and seed, for
/// `tapeplan_firmware::run_entry`.
fn hvp(out: &Path, board: &Board, target: &str) -> Result<(), Box<dyn std::error::Error>> {
    use tapeplan_planner::model::hvp::{hvp_workload, HVP_ENTRY, HVP_SEED, HVP_STEPS};
    let w = hvp_workload()?;
    let plan = tapeplan_runtime::Plan::parse(&w.plan)
        .map_err(|e| format!("the HVP plan is rejected by the runtime: {e}"))?;
    if plan.arena_bytes() + RAM_RESERVE_BYTES > board.ram_bytes {
        return Err(format!(
            "the HVP plan's arena is {} bytes; it does not fit the board's {} bytes of RAM",
            plan.arena_bytes(),
            board.ram_bytes
        )
        .into());
    }
    write(&out.join("train.plan"), &w.plan)?;
    let init = w.init_bytes();
    write(&out.join("init.bin"), &init)?;
    let mut g = String::new();
    writeln!(
        g,
        "// Generated by build.rs: the HVP workload (feature hvp)."
    )?;
    writeln!(g, "/// The transcript's line buffer, in bytes.")?;
    writeln!(g, "pub const LINE_BYTES: usize = 192;")?;
    board_items(&mut g, board, target)?;
    writeln!(g, "/// The plan's arena, in `f32` elements.")?;
    writeln!(g, "pub const ARENA_ELEMS: usize = {};", plan.arena_elems())?;
    writeln!(g, "/// The plan's tensor count.")?;
    writeln!(g, "pub const PLAN_TENSORS: usize = {};", plan.n_tensors())?;
    writeln!(g, "/// The entry to run.")?;
    writeln!(g, "pub const ENTRY: &str = {HVP_ENTRY:?};")?;
    writeln!(g, "/// Runs of the entry.")?;
    writeln!(g, "pub const STEPS: usize = {HVP_STEPS};")?;
    writeln!(g, "/// The seed of the inputs' stream.")?;
    writeln!(g, "pub const SEED: u64 = {HVP_SEED};")?;
    writeln!(g, "/// The plan's bytes.")?;
    writeln!(
        g,
        "pub static PLAN: &[u8] = include_bytes!(concat!(env!(\"OUT_DIR\"), \"/train.plan\"));"
    )?;
    writeln!(g, "/// Initial parameters, little-endian `f32`.")?;
    writeln!(
        g,
        "pub static INIT: &[u8; {}] = include_bytes!(concat!(env!(\"OUT_DIR\"), \"/init.bin\"));",
        init.len()
    )?;
    writeln!(
        g,
        "/// Each parameter's name and element count, in `INIT` order."
    )?;
    write!(g, "pub const INIT_PARAMS: &[(&str, usize)] = &[")?;
    for (name, shape) in &w.params {
        write!(g, "({name:?}, {}), ", shape.elems())?;
    }
    writeln!(g, "];")?;
    g.push_str(&op_set_item(&plan));
    write(&out.join("generated.rs"), g.as_bytes())?;
    println!("cargo:rerun-if-changed=build.rs");
    Ok(())
}

/// The generated items that name the board: `TARGET`, `BOARD`, `TARGET_LINE`, `CORE_HZ`.
fn board_items(g: &mut String, board: &Board, target: &str) -> std::fmt::Result {
    writeln!(g, "/// The Rust target built for.")?;
    writeln!(g, "pub const TARGET: &str = {target:?};")?;
    writeln!(g, "/// The board linked for.")?;
    writeln!(g, "pub const BOARD: &str = {:?};", board.name)?;
    writeln!(
        g,
        "/// The transcript's `target` line: the Rust target and the board."
    )?;
    writeln!(
        g,
        "pub const TARGET_LINE: &str = {:?};",
        format!("{target} {}", board.name)
    )?;
    writeln!(g, "/// The core clock SysTick counts, in Hz.")?;
    writeln!(g, "pub const CORE_HZ: u32 = {};", board.core_hz)
}

/// The selective build's op set, derived from the plan's bytes: a `PlanOps` type (see
/// `tapeplan_core::op_set!`) naming the opcodes the plan's instructions use, so the runtime
/// links only their kernels, shape rules and attribute decoders (`docs/selective-build.md`);
/// and the plan's CRC-32, which `Plan::parse` has just validated in full here, so the device
/// checks the plan's header and checksum and links none of the rest of the validator
/// (`tapeplan_core::Ops::PREVALIDATED_CRC32`).
fn op_set_item(plan: &tapeplan_runtime::Plan<'_>) -> String {
    let ops = plan.op_set();
    format!(
        "tapeplan_core::op_set!(\n    /// The plan's {} opcodes ({ops}): the runtime dispatches these only; the plan \
         itself,\n    /// validated in full by build.rs, is the only one it runs.\n    \
         pub struct PlanOps = [{}];\n    prevalidated_crc32 = {:#010x}\n);\n",
        ops.len(),
        ops.variants(),
        plan.crc32()
    )
}

/// Writes a file only when its bytes change (keeps incremental rebuilds quiet).
fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if fs::read(path).ok().as_deref() == Some(bytes) {
        return Ok(());
    }
    fs::write(path, bytes)
}
