//! The library on the host: a small digits MLP trained by [`tapeplan_firmware::train`] over an
//! in-memory link, its transcript (with the `bind` line and a `state` digest per step) verified
//! bit for bit by the planner's `verify` against the oracle; and its failures as values.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use core::cell::Cell;

use tapeplan_firmware::{train, Clock, ClockDelay, Failure, LineLink, Rows, Run, Transcript};
use tapeplan_planner::exec::transcript::Transcript as Parsed;
use tapeplan_planner::exec::verify::verify;
use tapeplan_planner::model::RunConfig;
use tapeplan_runtime::protocol::data_digest;
use tapeplan_runtime::{BuildOps, Limits};

const RUN: &str = "model=64,8,10 activation=tanh loss=ce batch=4 lr=0.1 seed=42 split_seed=0 \
                   samples=16 epochs=2";

/// A clock that ticks once per read.
struct Ticks(Cell<u64>);

impl Clock for Ticks {
    fn now_ticks(&self) -> u64 {
        self.0.set(self.0.get() + 1);
        self.0.get()
    }
    fn ticks_per_second(&self) -> u32 {
        1_000_000
    }
}

/// The digits' pixel counts, as the firmware demo embeds them.
struct Digits {
    pixels: Vec<u8>,
    labels: Vec<u8>,
    d_in: usize,
}

impl Rows for Digits {
    fn len(&self) -> usize {
        self.labels.len()
    }
    fn load(&self, row: usize, dst: &mut [f32]) {
        let px = &self.pixels[row * self.d_in..(row + 1) * self.d_in];
        for (d, &p) in dst.iter_mut().zip(px) {
            *d = f32::from(p) * 0.0625;
        }
    }
    fn label(&self, row: usize) -> f32 {
        f32::from(self.labels[row])
    }
    fn digest(&self) -> u64 {
        data_digest(&self.pixels, &self.labels)
    }
}

/// The run, its plan, initial parameters (little-endian), their names and element counts, and
/// its rows.
type Fixture = (
    RunConfig,
    Vec<u8>,
    Vec<u8>,
    Vec<(&'static str, usize)>,
    Digits,
);

/// The run's plan, initial parameters (little-endian) with their names, and rows.
fn fixture() -> Fixture {
    let cfg = RunConfig::parse(RUN).unwrap();
    let job = cfg.job().unwrap();
    let plan = job.schedule.to_bytes();
    let init: Vec<u8> = cfg
        .initial_parameters(&job)
        .unwrap()
        .iter()
        .flatten()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let params: Vec<(&'static str, usize)> = job
        .parameter_shapes()
        .into_iter()
        .map(|(n, s)| (&*Box::leak(n.into_boxed_str()), s.elems()))
        .collect();
    let train = cfg.training_set().unwrap();
    let rows = Digits {
        pixels: train.pixels.clone(),
        labels: train.labels.clone(),
        d_in: cfg.layers[0],
    };
    (cfg, plan, init, params, rows)
}

#[test]
fn a_run_trained_by_the_library_verifies_bit_for_bit_with_a_state_digest_per_step() {
    let (cfg, plan, init, params, rows) = fixture();
    let line = cfg.to_line();
    let run = Run {
        plan: &plan,
        config: &line,
        target: "x86_64 host test",
        init: &init,
        params: &params,
        batch: cfg.batch,
        epochs: cfg.epochs,
        seed: cfg.seed,
        limits: Limits::DEFAULT,
    };
    let mut arena = vec![0.0f32; 1 << 16];
    let mut order = vec![0u16; rows.len()];
    let clock = Ticks(Cell::new(0));
    let mut link: Vec<u8> = Vec::new();
    let mut out: Transcript<'_, _, 256> = Transcript::new(LineLink::new(&mut link));
    let summary = train::<BuildOps, 4096, 256, _, _, _, _>(
        &mut out,
        &run,
        &rows,
        &mut order,
        &clock,
        &mut ClockDelay(&clock),
        &mut arena,
        0,
    )
    .unwrap();
    out.end_ok().unwrap();
    assert_eq!(summary.steps, 8);
    let text = String::from_utf8(link).unwrap();
    assert!(text.contains("\nbind plan="), "{text}");
    assert_eq!(text.matches("\nstate ").count(), 8, "{text}");
    let t = Parsed::parse(&text).unwrap();
    let report = verify(&t, Some(&cfg)).unwrap();
    assert!(report.passed(), "{report}");
    assert_eq!(report.states, (8, 8));
    assert_eq!(report.identical_steps, 8);
}

#[test]
fn failures_are_values_that_name_what_was_found() {
    let (cfg, plan, init, params, rows) = fixture();
    let line = cfg.to_line();
    let run = Run {
        plan: &plan,
        config: &line,
        target: "x86_64 host test",
        init: &init,
        params: &params,
        batch: cfg.batch,
        epochs: cfg.epochs,
        seed: cfg.seed,
        limits: Limits::DEFAULT,
    };
    let clock = Ticks(Cell::new(0));
    let mut arena = vec![0.0f32; 1 << 16];
    let mut link: Vec<u8> = Vec::new();
    let mut out: Transcript<'_, _, 256> = Transcript::new(LineLink::new(&mut link));
    // An order buffer shorter than the rows.
    let mut short = vec![0u16; 3];
    let e = train::<BuildOps, 4096, 256, _, _, _, _>(
        &mut out,
        &run,
        &rows,
        &mut short,
        &clock,
        &mut ClockDelay(&clock),
        &mut arena,
        0,
    )
    .unwrap_err();
    assert!(matches!(e, Failure::OrderTooShort(3, 16)), "{e}");
    assert_eq!(
        e.to_string(),
        "the order buffer holds 3 row indices, the data has 16 rows"
    );
    // Initial values one element short.
    let cut = Run {
        init: &init[..init.len() - 4],
        ..run
    };
    let mut order = vec![0u16; rows.len()];
    let e = train::<BuildOps, 4096, 256, _, _, _, _>(
        &mut out,
        &cut,
        &rows,
        &mut order,
        &clock,
        &mut ClockDelay(&clock),
        &mut arena,
        0,
    )
    .unwrap_err();
    let last = params.last().unwrap().0;
    assert!(matches!(e, Failure::InitLength(n) if n == last), "{e}");
    // A corrupted plan is rejected before anything runs.
    let mut bad = plan.clone();
    bad[20] ^= 1;
    let broken = Run { plan: &bad, ..run };
    let e = train::<BuildOps, 4096, 256, _, _, _, _>(
        &mut out,
        &broken,
        &rows,
        &mut order,
        &clock,
        &mut ClockDelay(&clock),
        &mut arena,
        0,
    )
    .unwrap_err();
    assert!(matches!(e, Failure::Plan(_)), "{e}");
}
