//! `tapeplan plan`: plan a model into a .plan file and print its memory report.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};

use tapeplan_planner::io::exchange;
use tapeplan_planner::model::TrainingJob;
use tapeplan_planner::plan::remat::RematReport;
use tapeplan_planner::MemoryReport;

use super::args::ModelArgs;

/// `tapeplan plan`: plans `model` and writes the plan to `output`; for an ONNX model
/// (`--onnx`), its initial parameters and buffers beside it ([`init_path`]).
///
/// # Errors
/// An unwritable `output` (checked before planning), bad model options, an ONNX graph the
/// translation refuses, planning errors.
pub fn plan(model: &ModelArgs, output: &Path) -> Result<ExitCode> {
    tapeplan_planner::io::exchange::check_writable(output)?;
    let onnx = model.onnx_model()?;
    let init = init_path(output);
    if onnx.is_some() {
        tapeplan_planner::io::exchange::check_writable(&init)?;
    }
    let job = match &onnx {
        Some(m) => model.onnx_job(m)?,
        None => model.job()?,
    };
    let bytes = job.schedule.to_bytes();
    std::fs::write(output, &bytes).with_context(|| format!("writing {}", output.display()))?;
    if let Some(m) = &onnx {
        let nodes = m.batch_norm_in_eval();
        if !nodes.is_empty() {
            println!(
                "batch normalization with its running statistics in training (--frozen-bn eval): {} node{}: {}",
                nodes.len(),
                if nodes.len() == 1 { "" } else { "s" },
                nodes.join(", ")
            );
        }
        let st = m.initial_safetensors()?;
        std::fs::write(&init, &st).with_context(|| format!("writing {}", init.display()))?;
        println!(
            "wrote {} (the ONNX initializers: {} parameters and buffers, {} bytes; state_dict names)",
            init.display(),
            m.params().len(),
            st.len()
        );
        let renamed: Vec<(String, String)> =
            m.names().into_iter().filter(|(a, b)| a != b).collect();
        let shown: Vec<String> = renamed
            .iter()
            .take(SHOWN_NAMES)
            .map(|(a, b)| format!("{a} -> {b}"))
            .collect();
        if !renamed.is_empty() {
            let more = renamed.len().saturating_sub(SHOWN_NAMES);
            println!(
                "ONNX names that differ in the plan (a single data input is x, names over 24 bytes are shortened): {}{}",
                shown.join(", "),
                if more > 0 { format!(", and {more} more") } else { String::new() }
            );
        }
        let shortened: Vec<(String, String)> = m
            .params()
            .iter()
            .filter(|p| p.onnx_name != p.spec.name)
            .map(|p| (p.spec.name.clone(), p.onnx_name.clone()))
            .collect();
        if !shortened.is_empty() {
            let map = names_path(output);
            exchange::write_names(&map, &shortened)?;
            println!(
                "wrote {} (the {} shortened names and their state_dict keys; `export` restores the keys)",
                map.display(),
                shortened.len()
            );
        }
    }
    println!(
        "wrote {} ({} bytes, {} instructions in {} entries, math {}{})",
        output.display(),
        bytes.len(),
        job.schedule
            .entries
            .iter()
            .map(|e| e.instrs.len())
            .sum::<usize>(),
        job.schedule.entries.len(),
        job.schedule.math,
        match job.schedule.arith {
            tapeplan_core::ArithProfile::Separate => String::new(),
            a => format!(", arith {a}"),
        }
    );
    println!("memory report:");
    print_report(&reports(&job));
    print_update_order(&reports(&job));
    if let Some(r) = &job.remat {
        print_remat(r);
    }
    if let Some(line) = job.subset_report() {
        println!("{line}");
    }
    print_fusion(&job, model)?;
    Ok(ExitCode::SUCCESS)
}

/// Where `tapeplan plan --onnx` writes the initial parameters: the plan's path with
/// `.init.safetensors` appended (`model.plan` → `model.plan.init.safetensors`).
pub fn init_path(plan: &Path) -> std::path::PathBuf {
    let mut s = plan.as_os_str().to_owned();
    s.push(".init.safetensors");
    std::path::PathBuf::from(s)
}

/// How many renamed ONNX names `tapeplan plan` prints (the rest are counted; the shortened ones
/// are all in [`names_path`]'s file).
const SHOWN_NAMES: usize = 8;

/// Where `tapeplan plan` writes the map from a plan's shortened parameter names to the model's
/// full `state_dict` keys: `PLAN.names.json` ([`exchange::NAMES_SUFFIX`]).
pub fn names_path(plan: &Path) -> std::path::PathBuf {
    exchange::with_suffix(plan, exchange::NAMES_SUFFIX)
}

/// The memory report of every entry, one line each.
pub fn print_report(entries: &[(String, MemoryReport)]) {
    for (name, r) in entries {
        println!(
            "  {name:<11} arena {:>8} B   entry {:>8} B   liveness lower bound {:>8} B ({:.3}x)   retain-everything {:>8} B",
            r.arena_bytes,
            r.entry_bytes,
            r.lower_bound_bytes,
            r.entry_bytes as f64 / r.lower_bound_bytes.max(1) as f64,
            r.retain_everything_bytes
        );
    }
}

/// The order line of `tapeplan plan`: for each entry whose memory-aware order saves memory (each
/// update right after its last gradient contribution; work on frozen parameters right before
/// its first reader), the entry against the same schedule in the tape's order.
pub fn print_update_order(entries: &[(String, MemoryReport)]) {
    for (name, r) in entries {
        if r.tape_order_bytes > r.entry_bytes {
            println!(
                "order: {name} memory-aware {} B, tape order {} B (-{} B, {:+.2}%)",
                r.entry_bytes,
                r.tape_order_bytes,
                r.tape_order_bytes - r.entry_bytes,
                (r.entry_bytes as f64 - r.tape_order_bytes as f64) * 100.0
                    / r.tape_order_bytes.max(1) as f64
            );
        }
    }
}

/// The rematerialization line of `tapeplan plan --arena-budget`: the arena against the
/// unbudgeted plan's, and the work it costs.
pub fn print_remat(r: &RematReport) {
    if r.recomputed_values == 0 {
        println!(
            "remat: none needed (the arena, {} B, is within the budget)",
            r.arena_bytes
        );
        return;
    }
    println!(
        "remat: arena {} B, without rematerialization {} B (-{} B, {:+.2}%); {} forward values recomputed in the backward pass: +{} instructions, +{} element operations (+{:.2}% of the plan's work)",
        r.arena_bytes,
        r.unbudgeted_arena_bytes,
        r.unbudgeted_arena_bytes - r.arena_bytes,
        (r.arena_bytes as f64 - r.unbudgeted_arena_bytes as f64) * 100.0
            / r.unbudgeted_arena_bytes.max(1) as f64,
        r.recomputed_values,
        r.extra_instrs,
        r.extra_work,
        r.extra_work as f64 * 100.0 / r.unbudgeted_work.max(1) as f64
    );
}

/// The fusion line of `tapeplan plan`: chains, registers, and the arena against the same model
/// planned unfused.
pub fn print_fusion(job: &TrainingJob, model: &ModelArgs) -> Result<()> {
    if model.fusion_policy() == tapeplan_planner::FusionPolicy::Off {
        println!("fusion: off");
        return Ok(());
    }
    let instrs = job.schedule.entries.iter().flat_map(|e| &e.instrs);
    let chains = instrs
        .clone()
        .zip(instrs.clone().skip(1))
        .filter(|(a, b)| !a.fuse_next && b.fuse_next)
        .count()
        + usize::from(instrs.clone().next().is_some_and(|i| i.fuse_next));
    let fused = instrs
        .clone()
        .zip(std::iter::once(false).chain(instrs.clone().map(|i| i.fuse_next)))
        .filter(|(i, prev)| i.fuse_next || *prev)
        .count();
    let registers = job
        .schedule
        .tensors
        .iter()
        .filter(|t| t.kind == tapeplan_core::format::TensorKind::Register)
        .count();
    let mut plain = model.clone();
    plain.no_fusion = true;
    let plain = plain.job()?;
    let (a, b) = (job.schedule.arena_elems * 4, plain.schedule.arena_elems * 4);
    println!(
        "fusion: {chains} chains ({fused} instructions), {registers} values in registers; arena {a} B, unfused {b} B ({:+.1}%)",
        (a as f64 - b as f64) * 100.0 / b.max(1) as f64
    );
    Ok(())
}

/// Every entry's name and memory report.
pub fn reports(job: &TrainingJob) -> Vec<(String, MemoryReport)> {
    job.schedule
        .entries
        .iter()
        .map(|e| (e.name.clone(), e.report))
        .collect()
}
