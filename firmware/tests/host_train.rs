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

    // The flash of the whole 3-epoch run, resumed by a run of 2 epochs: refused, not a
    // "resumed epochs 3" run that trains nothing and reports 12 steps.
    let (_, flash) = train_on(
        Some(RamFlash::new(vec![0xff; 8 * 4096], None)),
        &mut Vec::new(),
    );
    let mut work = [0u8; 4096];
    let mut store = CheckpointStore::new(flash.unwrap(), 0..8 * 4096, &mut work).unwrap();
    let shorter = Run { epochs: 2, ..run };
    let mut arena = vec![0.0f32; 1 << 16];
    let mut order = vec![0u16; rows.len()];
    let mut link = Vec::new();
    let mut out: Transcript<'_, _, 256> = Transcript::new(LineLink::new(&mut link));
    let e = train_resumable::<BuildOps, 4096, 256, _, _, _, _, _>(
        &mut out,
        &shorter,
        &rows,
        &mut order,
        &clock,
        &mut ClockDelay(&clock),
        &mut arena,
        0,
        &mut store,
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "checkpoint: the checkpoint has more epochs than the run"
    );
}

/// Trains `run` over `rows` into a fresh link with a 4096-element validator scratch; answers
/// the steps or the failure (its text).
fn try_train<R: Rows>(run: &Run<'_>, rows: &R, order_len: usize) -> Result<usize, String> {
    let clock = CountingClock::new();
    let mut arena = vec![0.0f32; 1 << 16];
    let mut order = vec![0u16; order_len];
    let mut link: Vec<u8> = Vec::new();
    let mut out: Transcript<'_, _, 256> = Transcript::new(LineLink::new(&mut link));
    train::<BuildOps, 4096, 256, _, _, _, _>(
        &mut out,
        run,
        rows,
        &mut order,
        &clock,
        &mut ClockDelay(&clock),
        &mut arena,
        0,
    )
    .map(|s| s.steps)
    .map_err(|e| e.to_string())
}

#[test]
fn plan_bytes_cut_flipped_or_rewritten_under_a_good_checksum_are_failures_not_panics() {
    let (cfg, plan, init, params, rows) = fixture();
    let line = cfg.to_line();
    let run = run_of(&cfg, &line, &plan, &init, &params);
    // Cut at every length: the loader refuses each.
    for len in 0..plan.len() {
        let cut = Run {
            plan: &plan[..len],
            ..run
        };
        let e = try_train(&cut, &rows, rows.len()).unwrap_err();
        assert!(e.starts_with("plan rejected"), "cut at {len}: {e}");
    }
    // One bit of every byte flipped: the checksum refuses each.
    let mut bad = plan.clone();
    for i in 0..plan.len() {
        bad[i] ^= 1 << (i % 8);
        let e = try_train(&Run { plan: &bad, ..run }, &rows, rows.len()).unwrap_err();
        assert!(e.starts_with("plan rejected"), "byte {i}: {e}");
        bad[i] = plan[i];
    }
    // The same flips with the checksum made good again: what the validator then sees is
    // hostile structure. Refused, or run to its end; never a panic.
    let mut outcomes = [0usize; 3];
    for i in (0..plan.len()).filter(|i| !(12..16).contains(i)) {
        bad[i] ^= 1 << (i % 8);
        let mut crc = tapeplan_core::format::CRC32.digest();
        crc.update(&bad[..12]);
        crc.update(&bad[16..]);
        bad[12..16].copy_from_slice(&crc.finalize().to_le_bytes());
        match try_train(&Run { plan: &bad, ..run }, &rows, rows.len()) {
            Ok(_) => outcomes[0] += 1,
            Err(e) if e.starts_with("plan rejected") => outcomes[1] += 1,
            Err(_) => outcomes[2] += 1,
        }
        bad.copy_from_slice(&plan);
    }
    eprintln!(
        "{} bytes flipped under a good checksum: {} trained, {} refused by the loader, {} failed later",
        plan.len() - 4,
        outcomes[0],
        outcomes[1],
        outcomes[2]
    );
    assert!(outcomes[1] > 0);
}

/// Rows over a slice of the fixture's, or none.
struct Some_<'d>(&'d Digits, usize);

impl Rows for Some_<'_> {
    fn len(&self) -> usize {
        self.1
    }
    fn load(&self, row: usize, dst: &mut [f32]) {
        self.0.load(row, dst);
    }
    fn label(&self, row: usize) -> f32 {
        self.0.label(row)
    }
    fn digest(&self) -> u64 {
        self.0.digest()
    }
}

#[test]
fn a_run_that_does_not_fit_its_plan_or_rows_is_a_failure_naming_what() {
    let (cfg, plan, init, params, rows) = fixture();
    let line = cfg.to_line();
    let run = run_of(&cfg, &line, &plan, &init, &params);
    let n = rows.len();
    // Initial values one element longer, or not whole elements.
    let mut longer = init.clone();
    longer.extend_from_slice(&[0; 4]);
    let e = try_train(
        &Run {
            init: &longer,
            ..run
        },
        &rows,
        n,
    )
    .unwrap_err();
    assert!(e.contains("initial values"), "{e}");
    let e = try_train(
        &Run {
            init: &longer[..init.len() + 2],
            ..run
        },
        &rows,
        n,
    )
    .unwrap_err();
    assert!(e.contains("initial values"), "{e}");
    // A tensor the plan lacks; a count that overflows the offsets.
    let mut named = params.clone();
    named[0].0 = "w9";
    let e = try_train(
        &Run {
            params: &named,
            ..run
        },
        &rows,
        n,
    )
    .unwrap_err();
    assert!(e.contains("w9"), "{e}");
    let mut huge = params.clone();
    huge[1].1 = usize::MAX;
    let e = try_train(
        &Run {
            params: &huge,
            ..run
        },
        &rows,
        n,
    )
    .unwrap_err();
    assert!(e.contains("initial values"), "{e}");
    // A batch other than the plan's (0 among them), rows fewer than a batch, no rows.
    for batch in [0, 1, 3, 5, usize::MAX] {
        let e = try_train(&Run { batch, ..run }, &rows, n).unwrap_err();
        assert!(e.contains(&format!("batch {batch}")), "batch {batch}: {e}");
    }
    for k in [0, 3] {
        let e = try_train(&run, &Some_(&rows, k), n).unwrap_err();
        assert!(e.contains(&format!("{k} rows")), "{k} rows: {e}");
    }
    // More rows than the order's u16 indices reach (they would wrap to other rows).
    let e = try_train(&run, &Some_(&rows, 65_537), 65_537).unwrap_err();
    assert!(e.contains("65537 rows"), "{e}");
    // A validator scratch smaller than the plan's tensor count.
    let clock = CountingClock::new();
    let mut arena = vec![0.0f32; 1 << 16];
    let mut order = vec![0u16; n];
    let mut link: Vec<u8> = Vec::new();
    let mut out: Transcript<'_, _, 256> = Transcript::new(LineLink::new(&mut link));
    let e = train::<BuildOps, 4, 256, _, _, _, _>(
        &mut out,
        &run,
        &rows,
        &mut order,
        &clock,
        &mut ClockDelay(&clock),
        &mut arena,
        0,
    )
    .unwrap_err();
    assert!(matches!(e, Failure::Plan(_)), "{e}");
    // An arena shorter than the plan's.
    let mut short = vec![0.0f32; 16];
    let e = train::<BuildOps, 4096, 256, _, _, _, _>(
        &mut out,
        &run,
        &rows,
        &mut order,
        &clock,
        &mut ClockDelay(&clock),
        &mut short,
        0,
    )
    .unwrap_err();
    assert!(matches!(e, Failure::Run(_)), "{e}");
    // An order buffer too short; zero epochs train nothing and say so in the summary.
    let e = try_train(&run, &rows, n - 1).unwrap_err();
    assert!(e.contains(&format!("{} row indices", n - 1)), "{e}");
    assert_eq!(try_train(&Run { epochs: 0, ..run }, &rows, n), Ok(0));
}

/// A link that fails at its `fail_at`-th write (0-based) and every one after it.
struct Failing {
    writes: usize,
    fail_at: usize,
}

impl embedded_io::ErrorType for Failing {
    type Error = embedded_io::ErrorKind;
}

impl embedded_io::Write for Failing {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Self::Error> {
        if self.writes >= self.fail_at {
            return Err(embedded_io::ErrorKind::BrokenPipe);
        }
        self.writes += 1;
        Ok(buf.len())
    }
    fn flush(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

#[test]
fn a_link_that_fails_at_any_write_is_a_link_failure() {
    let (cfg, plan, init, params, rows) = fixture();
    let line = cfg.to_line();
    let run = run_of(&cfg, &line, &plan, &init, &params);
    let clock = CountingClock::new();
    let mut fail_at = 0;
    loop {
        let mut link = Failing { writes: 0, fail_at };
        let mut out: Transcript<'_, _, 256> = Transcript::new(LineLink::new(&mut link));
        let mut arena = vec![0.0f32; 1 << 16];
        let mut order = vec![0u16; rows.len()];
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
        match r {
            Ok(_) => break,
            Err(Failure::Link(embedded_io::ErrorKind::BrokenPipe)) => {}
            Err(e) => panic!("write {fail_at}: {e}"),
        }
        fail_at += 1;
    }
    // Every line of the run is one write: header, config, target, plan, data, bind, two a
    // step, two an epoch, the parameters', the digest and the timings.
    assert!(fail_at > 6 + 2 * 8 + 2 * 2, "{fail_at}");
}
