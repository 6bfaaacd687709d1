//! `cargo xtask bench`: the train-step benchmarks (planner-host/benches/train_step.rs) for the
//! scalar and the SIMD catalog, then one table: median time per step, achieved GFLOP/s against
//! this machine's peak, arena bytes against the liveness lower bound. docs/benchmarks.md
//! records the results and explains the figures.

use std::env;
use std::fs;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::{run, Ctx};

/// The peak of separate (unfused) `f32` multiplies and adds on one core of the reference
/// machine (Zen 5, AVX-512): 16 lanes x (2 multiply + 2 add pipes) = 64 FLOP per cycle, at the
/// clock seen; measured at 270 GFLOP/s with a 6x4-register tile of `wide::f32x16` over L1
/// operands (docs/benchmarks.md). Override with `TAPEPLAN_PEAK_GFLOPS` on another machine.
const PEAK_GFLOPS: f64 = 270.0;

/// The workloads, in table order, with their descriptions.
const WORKLOADS: &[(&str, &str)] = &[
    ("W1", "MLP 64-32-10 tanh, softmax CE, SGD, batch 32"),
    ("W1-unfused", "W1 planned without fusion"),
    ("W1-allfused", "W1 with every chain fused (--fusion all)"),
    ("W2", "MLP 784-128-10 relu, softmax CE, SGD, batch 64"),
    ("W2-unfolded", "W2 planned without transpose folding"),
    ("W2-unfused", "W2 planned without fusion"),
    ("W2-allfused", "W2 with every chain fused (--fusion all)"),
    ("W2-fma", "W2 planned with --arith fma"),
    ("W2-adam", "W2 with Adam"),
    (
        "W2-adam-unfolded",
        "W2 with Adam, planned without transpose folding",
    ),
    ("W3", "MLP 2-16-16-1 tanh, MSE, SGD, batch 1"),
    ("W3-unfused", "W3 planned without fusion"),
    ("W3-allfused", "W3 with every chain fused (--fusion all)"),
    ("W3-run", "W3 through Session::run: records read every step"),
    (
        "W3-run-decoded",
        "W3 through Session::run, the plan decoded once and attached",
    ),
    (
        "W4",
        "MLP 64-32-10 tanh, softmax CE, Adam, batch 32, unguarded",
    ),
    ("W4-unfused", "W4 planned without fusion"),
    ("W4-allfused", "W4 with every chain fused (--fusion all)"),
];

/// One benchmark's figures.
struct Row {
    id: String,
    catalog: String,
    flops: f64,
    arena_bytes: u64,
    lower_bound_bytes: u64,
    median_ns: f64,
}

/// `cargo xtask bench [--quick]`, or `cargo xtask bench --peers …` ([`crate::peers`]).
pub(crate) fn verb_bench(ctx: &Ctx, args: &[String]) -> Result<()> {
    if let Some((first, rest)) = args.split_first() {
        if first == "--peers" {
            return crate::peers::verb_peers(ctx, rest);
        }
    }
    let quick = match args {
        [] => false,
        [q] if q == "--quick" => true,
        _ => bail!("usage: cargo xtask bench [--quick] | bench --peers [--rounds N] [--smoke]"),
    };
    let out = ctx.root.join("target").join("bench");
    fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let report = out.join("report.tsv");
    let _ = fs::remove_file(&report);
    let criterion = out.join("criterion");
    for features in [&[][..], &["--features", "simd"][..]] {
        let mut cmd = ctx.cargo(["bench", "-p", "tapeplan-planner", "--bench", "train_step"]);
        cmd.args(features);
        if quick {
            cmd.args(["--", "--warm-up-time", "1", "--measurement-time", "2"]);
        }
        // The runtime picks its vector width at compile time: build for this CPU, in a target
        // directory of its own so the flags do not rebuild the main one.
        cmd.env("RUSTFLAGS", "-C target-cpu=native")
            .env(
                "CARGO_TARGET_DIR",
                ctx.root.join("target").join("bench-native"),
            )
            .env("CRITERION_HOME", &criterion)
            .env("TAPEPLAN_BENCH_REPORT", &report);
        run(cmd)?;
    }
    let rows = read_rows(&report, &criterion)?;
    let peak = env::var("TAPEPLAN_PEAK_GFLOPS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(PEAK_GFLOPS);
    println!("{}", table(&rows, peak));
    Ok(())
}

fn read_rows(report: &Path, criterion: &Path) -> Result<Vec<Row>> {
    let text =
        fs::read_to_string(report).with_context(|| format!("reading {}", report.display()))?;
    let mut rows = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let [id, catalog, flops, arena, lower, _retain] = f[..] else {
            bail!("bad line in {}: {line:?}", report.display());
        };
        let est = criterion
            .join("train_step")
            .join(id)
            .join(catalog)
            .join("new")
            .join("estimates.json");
        let json =
            fs::read_to_string(&est).with_context(|| format!("reading {}", est.display()))?;
        rows.push(Row {
            id: id.to_string(),
            catalog: catalog.to_string(),
            flops: flops.parse()?,
            arena_bytes: arena.parse()?,
            lower_bound_bytes: lower.parse()?,
            median_ns: median_ns(&json)
                .with_context(|| format!("no median in {}", est.display()))?,
        });
    }
    Ok(rows)
}

/// `median.point_estimate` (nanoseconds) from criterion's `estimates.json`.
fn median_ns(json: &str) -> Option<f64> {
    let at = json.find("\"median\"")?;
    let rest = &json[at..];
    let p = rest.find("\"point_estimate\"")?;
    let rest = rest[p + "\"point_estimate\"".len()..].trim_start();
    let rest = rest.strip_prefix(':')?.trim_start();
    let end = rest.find([',', '}'])?;
    rest[..end].trim().parse().ok()
}

fn table(rows: &[Row], peak: f64) -> String {
    let mut s = format!(
        "| workload | catalog | median per step | GFLOP/s | % of peak ({peak:.0}) | vs scalar | arena B | liveness lower bound B | arena / bound |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    for (id, about) in WORKLOADS {
        let scalar = rows
            .iter()
            .find(|r| r.id == *id && r.catalog == "scalar")
            .map(|r| r.median_ns);
        for r in rows.iter().filter(|r| r.id == *id) {
            let gflops = r.flops / r.median_ns;
            let speedup = scalar.map_or("".into(), |sc| format!("{:.2}x", sc / r.median_ns));
            s.push_str(&format!(
                "| {id} ({about}) | {} | {} | {gflops:.1} | {:.1}% | {speedup} | {} | {} | {:.3} |\n",
                r.catalog,
                time(r.median_ns),
                100.0 * gflops / peak,
                r.arena_bytes,
                r.lower_bound_bytes,
                r.arena_bytes as f64 / r.lower_bound_bytes.max(1) as f64
            ));
        }
    }
    s
}

/// A duration in nanoseconds, in ns, µs or ms.
pub(crate) fn time(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_criterion_median() {
        let json = r#"{"mean":{"confidence_interval":{"confidence_level":0.95,"lower_bound":1.0,"upper_bound":2.0},"point_estimate":1.5,"standard_error":0.1},"median":{"confidence_interval":{"confidence_level":0.95,"lower_bound":1.0,"upper_bound":2.0},"point_estimate":1234.5,"standard_error":0.1}}"#;
        assert_eq!(median_ns(json), Some(1234.5));
        assert_eq!(median_ns("{}"), None);
    }

    #[test]
    fn table_has_a_row_per_benchmark() {
        let row = |catalog: &str, ns| Row {
            id: "W1".into(),
            catalog: catalog.into(),
            flops: 1e6,
            arena_bytes: 100,
            lower_bound_bytes: 99,
            median_ns: ns,
        };
        let t = table(&[row("scalar", 2000.0), row("simd-avx512", 1000.0)], 270.0);
        assert!(t.contains("| simd-avx512 | 1.00 µs | 1000.0 |"), "{t}");
        assert!(t.contains("2.00x"), "{t}");
    }
}
