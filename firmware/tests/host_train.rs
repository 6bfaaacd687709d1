//! The library on the host: a small digits MLP trained by [`tapeplan_firmware::train`] over an
//! in-memory link, its transcript (with the `bind` line and a `state` digest per step) verified
//! bit for bit by the planner's `verify` against the oracle; and its failures as values.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::RamFlash;
use tapeplan_firmware::checkpoint::CheckpointStore;

use tapeplan_firmware::{
    train, train_resumable, ClockDelay, CountingClock, Failure, LineLink, Rows, Run, Transcript,
};
use tapeplan_planner::exec::transcript::Transcript as Parsed;
use tapeplan_planner::exec::verify::verify;
use tapeplan_planner::model::RunConfig;
use tapeplan_runtime::protocol::data_digest;
use tapeplan_runtime::{BuildOps, Limits};

const RUN: &str = "model=64,8,10 activation=tanh loss=ce batch=4 lr=0.1 seed=42 split_seed=0 \
                   samples=16 epochs=2";

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
    let (plan, init, params) = common::run_parts(&cfg);
    let train = cfg.training_set().unwrap();
    let rows = Digits {
        pixels: train.pixels.clone(),
        labels: train.labels.clone(),
        d_in: cfg.layers[0],
    };
    (cfg, plan, init, params, rows)
}

/// The run of `cfg` on the host.
fn run_of<'a>(
    cfg: &RunConfig,
    line: &'a str,
    plan: &'a [u8],
    init: &'a [u8],
    params: &'a [(&'static str, usize)],
) -> Run<'a> {
    Run {
        plan,
        config: line,
        target: "x86_64 host test",
        init,
        params,
        batch: cfg.batch,
        epochs: cfg.epochs,
        seed: cfg.seed,
        limits: Limits::DEFAULT,
    }
}

#[test]
fn a_run_trained_by_the_library_verifies_bit_for_bit_with_a_state_digest_per_step() {
    let (cfg, plan, init, params, rows) = fixture();
    let line = cfg.to_line();
    let run = run_of(&cfg, &line, &plan, &init, &params);
    let mut arena = vec![0.0f32; 1 << 16];
    let mut order = vec![0u16; rows.len()];
    let clock = CountingClock::new();
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
    let run = run_of(&cfg, &line, &plan, &init, &params);
    let clock = CountingClock::new();
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

/// The `digest` line of a transcript.
fn digest_line(link: &[u8]) -> String {
    let text = std::str::from_utf8(link).unwrap();
    text.lines()
        .find(|l| l.starts_with("digest "))
        .unwrap_or_else(|| panic!("no digest line in {text}"))
        .to_string()
}

#[test]
fn a_run_reset_in_the_middle_of_a_checkpoint_write_resumes_to_the_uninterrupted_bits() {
    let (cfg, plan, init, params, rows) = fixture();
    let line = cfg.to_line();
    let run = Run {
        epochs: 3,
        ..run_of(&cfg, &line, &plan, &init, &params)
    };
    let clock = CountingClock::new();
    let train_on = |flash: Option<RamFlash>, link: &mut Vec<u8>| {
        let mut arena = vec![0.0f32; 1 << 16];
        let mut out: Transcript<'_, _, 256> = Transcript::new(LineLink::new(link));
        let mut order = vec![0u16; rows.len()];
        let Some(flash) = flash else {
            let r = train::<BuildOps, 4096, 256, _, _, _, _>(
                &mut out,
                &run,
                &rows,
                &mut order,
                &clock,
                &mut ClockDelay(&clock),
                &mut arena,
                0,
            );
            return (r.map(|s| s.steps), None);
        };
        let mut work = [0u8; 4096];
        let mut store = CheckpointStore::new(flash, 0..8 * 4096, &mut work).unwrap();
        let r = train_resumable::<BuildOps, 4096, 256, _, _, _, _, _>(
            &mut out,
            &run,
            &rows,
            &mut order,
            &clock,
            &mut ClockDelay(&clock),
            &mut arena,
            0,
            &mut store,
        );
        (r.map(|s| s.steps), Some(store.into_flash()))
    };
    let mut plain = Vec::new();
    let (steps, _) = train_on(None, &mut plain);
    assert_eq!(steps.unwrap(), 12);
    let expected = digest_line(&plain);

    // Saves after epochs 1, 2 and 3; the power fails at word `n` of the whole run's flash
    // writes, for cuts in each of the three saves.
    let mut full = Vec::new();
    let (_, flash) = train_on(Some(RamFlash::new(vec![0xff; 8 * 4096], None)), &mut full);
    let words_total = flash.unwrap().ops;
    assert_eq!(digest_line(&full), expected);
    let mut seen = Vec::new();
    for n in [1, words_total / 2, words_total - 1] {
        let mut first = Vec::new();
        let (r, flash) = train_on(
            Some(RamFlash::new(vec![0xff; 8 * 4096], Some(n))),
            &mut first,
        );
        let e = r.unwrap_err();
        assert!(
            matches!(e, Failure::Checkpoint("flash driver error")),
            "{e}"
        );
        let mut link = Vec::new();
        let (steps, _) = train_on(Some(RamFlash::new(flash.unwrap().bytes, None)), &mut link);
        assert_eq!(steps.unwrap(), 12, "cut at word {n} of {words_total}");
        let text = String::from_utf8(link.clone()).unwrap();
        let resumed: usize = text
            .lines()
            .find_map(|l| l.strip_prefix("info resumed epochs "))
            .map_or(0, |k| k.parse().unwrap());
        // A cut in save k resumes after epoch k - 1; the final bits are the same.
        seen.push(resumed);
        assert_eq!(
            digest_line(&link),
            expected,
            "cut at word {n}: resumed at {resumed}"
        );
    }
    // The cuts fell in the first, second and third save.
    assert_eq!(seen, [0, 1, 2]);
}
