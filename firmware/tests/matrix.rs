//! The cross-target matrix's host cells (`cargo xtask matrix`, docs/cross-target-matrix.md):
//! each run description named in `TAPEPLAN_MATRIX_RUNS` (paths relative to the repository's
//! root, separated by `;`) trained by the library's [`tapeplan_firmware::train`], the code a
//! device runs, over an in-memory link, and its transcript (a `state` digest per step) verified
//! by the planner's `verify` against the host oracle, step by step. The runtime's catalog is the
//! build's: scalar, or with feature `simd` SSE2 / AVX2 / AVX-512 by the target features. Prints
//! one `matrix-cell RUN CATALOG IDENTICAL/STEPS` line per run. The name `hvp` instead of a
//! path is the Hessian-vector product workload (`tapeplan_planner::model::hvp`): its entry run
//! by [`tapeplan_firmware::run_entry`], each step's output digest compared with the tape
//! interpreter's. Without the variable the test checks W3's run and the HVP workload, so
//! `cargo test` keeps them honest.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::path::Path;

mod common;

use tapeplan_firmware::{
    run_entry, train, ClockDelay, CountingClock, EntryRun, LineLink, Rows, Run, Transcript,
};
use tapeplan_planner::exec::transcript::Transcript as Parsed;
use tapeplan_planner::exec::verify::verify;
use tapeplan_planner::model::RunConfig;
use tapeplan_runtime::protocol::Fnv1a64;
use tapeplan_runtime::{catalog, BuildOps, Limits};

/// `f32` rows with class labels or regression targets, as the firmware's feature `cnn` embeds
/// them.
struct F32Rows {
    features: Vec<f32>,
    labels: Vec<u8>,
    targets: Vec<f32>,
    d_in: usize,
    d_out: usize,
}

impl Rows for F32Rows {
    fn len(&self) -> usize {
        self.features.len() / self.d_in
    }
    fn load(&self, row: usize, dst: &mut [f32]) {
        dst.copy_from_slice(&self.features[row * self.d_in..(row + 1) * self.d_in]);
    }
    fn label(&self, row: usize) -> f32 {
        f32::from(self.labels[row])
    }
    fn load_target(&self, row: usize, dst: &mut [f32]) {
        if self.d_out == 0 {
            // Class labels.
            dst.fill(self.label(row));
        } else {
            dst.copy_from_slice(&self.targets[row * self.d_out..(row + 1) * self.d_out]);
        }
    }
    fn digest(&self) -> u64 {
        let mut h = Fnv1a64::new();
        h.f32s(&self.features);
        h.bytes(&self.labels);
        h.f32s(&self.targets);
        h.finish()
    }
}

/// Trains the run of `path` with the library and verifies its transcript; answers (steps
/// identical, steps).
fn cell(path: &str) -> (usize, usize) {
    let cfg = RunConfig::from_file(Path::new(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    let (plan, init, params) = common::run_parts(&cfg);
    let train_set = cfg.training_set().unwrap();
    let rows = F32Rows {
        features: train_set.features.clone(),
        labels: train_set.labels.clone(),
        targets: train_set.targets().to_vec(),
        d_in: cfg.layers[0],
        d_out: train_set.n_targets(),
    };
    let line = cfg.to_line();
    let target = format!("{} host {}", std::env::consts::ARCH, catalog::CATALOG);
    let run = Run {
        plan: &plan,
        config: &line,
        target: &target,
        init: &init,
        params: &params,
        batch: cfg.batch,
        epochs: cfg.epochs,
        seed: cfg.seed,
        limits: Limits::DEFAULT,
    };
    let arena_elems = tapeplan_runtime::Plan::parse(&plan).unwrap().arena_elems();
    let mut arena = vec![0.0f32; arena_elems];
    let mut order = vec![0u16; rows.len()];
    let clock = CountingClock::new();
    let mut link: Vec<u8> = Vec::new();
    let mut out: Transcript<'_, _, 512> = Transcript::new(LineLink::new(&mut link));
    let summary = train::<BuildOps, 4096, 512, _, _, _, _>(
        &mut out,
        &run,
        &rows,
        &mut order,
        &clock,
        &mut ClockDelay(&clock),
        &mut arena,
        0,
    )
    .unwrap_or_else(|e| panic!("{path}: {e}"));
    out.end_ok().unwrap();
    let text = String::from_utf8(link).unwrap();
    let t = Parsed::parse_in(&text, Path::new(path).parent().unwrap()).unwrap();
    let report = verify(&t, Some(&cfg)).unwrap();
    assert!(report.passed(), "{path} ({}): {report}", catalog::CATALOG);
    assert_eq!(summary.steps, cfg.total_steps(), "{path}");
    // Every step's state digest sent and equal to the oracle's.
    assert_eq!(report.states.0, cfg.total_steps(), "{path}");
    (report.states.1, cfg.total_steps())
}

/// Runs the HVP workload's entry with the library and compares every step's output digest
/// with the tape interpreter's; answers (steps identical, steps).
fn hvp_cell() -> (usize, usize) {
    use tapeplan_planner::model::hvp::{hvp_workload, HVP_ENTRY, HVP_SEED, HVP_STEPS};
    let w = hvp_workload().unwrap();
    let expected = w.expected_digests(HVP_STEPS).unwrap();
    let init = w.init_bytes();
    let params: Vec<(&'static str, usize)> = w
        .params
        .iter()
        .map(|(n, s)| (&*Box::leak(n.clone().into_boxed_str()), s.elems()))
        .collect();
    let target = format!("{} host {}", std::env::consts::ARCH, catalog::CATALOG);
    let run = EntryRun {
        plan: &w.plan,
        target: &target,
        entry: HVP_ENTRY,
        init: &init,
        params: &params,
        steps: HVP_STEPS,
        seed: HVP_SEED,
        limits: Limits::DEFAULT,
    };
    let mut arena = vec![
        0.0f32;
        tapeplan_runtime::Plan::parse(&w.plan)
            .unwrap()
            .arena_elems()
    ];
    let mut link: Vec<u8> = Vec::new();
    let mut out: Transcript<'_, _, 256> = Transcript::new(LineLink::new(&mut link));
    let steps = run_entry::<BuildOps, 4096, 256, _>(&mut out, &run, &mut arena).unwrap();
    out.end_ok().unwrap();
    let text = String::from_utf8(link).unwrap();
    let got = states_of(&text);
    assert_eq!(steps, HVP_STEPS);
    assert_eq!(got.len(), expected.len(), "{text}");
    // The products are not trivial: the digests differ from step to step.
    assert!(expected.windows(2).all(|p| p[0] != p[1]));
    let same = got.iter().zip(&expected).filter(|(a, b)| a == b).count();
    if let Some(i) = got.iter().zip(&expected).position(|(a, b)| a != b) {
        panic!(
            "hvp step {}: device {:016x} vs oracle {:016x} ({})",
            i + 1,
            got[i],
            expected[i],
            catalog::CATALOG
        );
    }
    (same, expected.len())
}

/// The digests of a transcript's `state` lines, in order.
fn states_of(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| l.strip_prefix("state "))
        .map(|l| {
            let (_, hex) = l.split_once(' ').unwrap();
            u64::from_str_radix(hex, 16).unwrap()
        })
        .collect()
}

#[test]
fn matrix_runs_verify_at_every_step() {
    // The run descriptions named below are relative to the repository's root (their own
    // paths to their folders).
    std::env::set_current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).unwrap();
    let runs = std::env::var("TAPEPLAN_MATRIX_RUNS")
        .unwrap_or_else(|_| "firmware-demo/models/w3.run;hvp".to_owned());
    for path in runs.split(';').filter(|p| !p.is_empty()) {
        let (identical, steps) = if path == "hvp" {
            hvp_cell()
        } else {
            cell(path)
        };
        assert_eq!(identical, steps, "{path}");
        println!(
            "matrix-cell {path} {} {identical}/{steps}",
            catalog::CATALOG
        );
    }
}
