//! The cross-target matrix's WebAssembly cells: every case `cargo xtask matrix` wrote into
//! `$TAPEPLAN_MATRIX_CASES` run through the firmware library (`tapeplan_firmware::train` for
//! a run description, `tapeplan_firmware::run_entry` for the Hessian-vector product entry), its
//! `state` digest after every step compared with the host oracle's. Node:
//! `wasm-pack test --node --release`; Chromium: the same with `--headless --chrome` and
//! `WASM_BINDGEN_USE_BROWSER=1`; simd128: `--features simd` with `-C target-feature=+simd128`.
#![cfg(all(target_arch = "wasm32", matrix_cases))]

use tapeplan_firmware::{
    run_entry, train, ClockDelay, CountingClock, EntryRun, LineLink, Rows, Run, Transcript,
};
use tapeplan_runtime::protocol::Fnv1a64;
use tapeplan_runtime::{catalog, BuildOps, Limits, Plan};
use tapeplan_wasm_matrix::{states, u64s, Meta};
use wasm_bindgen_test::wasm_bindgen_test;

/// One case's files.
struct Case {
    meta: Meta<'static>,
    plan: &'static [u8],
    init: &'static [u8],
    features: &'static [u8],
    labels: &'static [u8],
    targets: &'static [u8],
    expected: &'static [u8],
}

macro_rules! case {
    ($key:literal) => {
        Case {
            meta: Meta(include_str!(concat!(
                env!("TAPEPLAN_MATRIX_CASES"),
                "/",
                $key,
                "/meta.txt"
            ))),
            plan: include_bytes!(concat!(
                env!("TAPEPLAN_MATRIX_CASES"),
                "/",
                $key,
                "/plan.bin"
            )),
            init: include_bytes!(concat!(
                env!("TAPEPLAN_MATRIX_CASES"),
                "/",
                $key,
                "/init.bin"
            )),
            features: include_bytes!(concat!(
                env!("TAPEPLAN_MATRIX_CASES"),
                "/",
                $key,
                "/features.f32"
            )),
            labels: include_bytes!(concat!(
                env!("TAPEPLAN_MATRIX_CASES"),
                "/",
                $key,
                "/labels.u8"
            )),
            targets: include_bytes!(concat!(
                env!("TAPEPLAN_MATRIX_CASES"),
                "/",
                $key,
                "/targets.f32"
            )),
            expected: include_bytes!(concat!(
                env!("TAPEPLAN_MATRIX_CASES"),
                "/",
                $key,
                "/expected.u64"
            )),
        }
    };
}

fn f32_at(bytes: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([
        bytes[4 * i],
        bytes[4 * i + 1],
        bytes[4 * i + 2],
        bytes[4 * i + 3],
    ])
}

/// A case's rows: `f32` features, and labels or targets.
struct CaseRows<'c> {
    case: &'c Case,
    d_in: usize,
    d_out: usize,
}

impl Rows for CaseRows<'_> {
    fn len(&self) -> usize {
        self.case.features.len() / 4 / self.d_in
    }
    fn load(&self, row: usize, dst: &mut [f32]) {
        for (j, d) in dst.iter_mut().enumerate() {
            *d = f32_at(self.case.features, row * self.d_in + j);
        }
    }
    fn label(&self, row: usize) -> f32 {
        f32::from(self.case.labels[row])
    }
    fn load_target(&self, row: usize, dst: &mut [f32]) {
        if self.d_out == 0 {
            // Class labels.
            dst.fill(self.label(row));
            return;
        }
        for (j, d) in dst.iter_mut().enumerate() {
            *d = f32_at(self.case.targets, row * self.d_out + j);
        }
    }
    fn digest(&self) -> u64 {
        let mut h = Fnv1a64::new();
        h.bytes(self.case.features);
        h.bytes(self.case.labels);
        h.bytes(self.case.targets);
        h.finish()
    }
}

/// The case's model tensors: `name:elems` words.
fn params(meta: &Meta<'static>) -> Vec<(&'static str, usize)> {
    meta.get("params")
        .split_whitespace()
        .map(|w| {
            let (n, e) = w.split_once(':').unwrap();
            (n, e.parse().unwrap())
        })
        .collect()
}

/// Runs the case through the library and compares every step's digest with the oracle's;
/// prints `matrix-cell KEY CATALOG SAME/STEPS`.
fn check(key: &str, case: &Case) {
    let meta = case.meta;
    let params = params(&meta);
    let target = format!("wasm32 {}", catalog::CATALOG);
    let mut arena = vec![0.0f32; Plan::parse(case.plan).unwrap().arena_elems()];
    let mut link: Vec<u8> = Vec::new();
    let mut out: Transcript<'_, _, 512> = Transcript::new(LineLink::new(&mut link));
    if meta.get("kind") == "entry" {
        let run = EntryRun {
            plan: case.plan,
            target: &target,
            entry: meta.get("entry"),
            init: case.init,
            params: &params,
            steps: meta.num("steps") as usize,
            seed: meta.num("seed"),
            limits: Limits::DEFAULT,
        };
        run_entry::<BuildOps, 4096, 512, _>(&mut out, &run, &mut arena).unwrap();
    } else {
        let rows = CaseRows {
            case,
            d_in: meta.num("d_in") as usize,
            d_out: meta.num("d_out") as usize,
        };
        let run = Run {
            plan: case.plan,
            config: meta.get("config"),
            target: &target,
            init: case.init,
            params: &params,
            batch: meta.num("batch") as usize,
            epochs: meta.num("epochs") as usize,
            seed: meta.num("seed"),
            limits: Limits::DEFAULT,
        };
        let clock = CountingClock::new();
        let mut order = vec![0u16; rows.len()];
        train::<BuildOps, 4096, 512, _, _, _, _>(
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
    }
    out.end_ok().unwrap();
    let text = String::from_utf8(link).unwrap();
    let got: Vec<u64> = states(&text).collect();
    let expected: Vec<u64> = u64s(case.expected).collect();
    assert_eq!(got.len(), expected.len(), "{key}: steps");
    if let Some(i) = got.iter().zip(&expected).position(|(a, b)| a != b) {
        panic!(
            "{key} ({}): step {}: {:016x} vs the oracle's {:016x}",
            catalog::CATALOG,
            i + 1,
            got[i],
            expected[i]
        );
    }
    wasm_bindgen_test::console_log!(
        "matrix-cell {key} {} {}/{}",
        catalog::CATALOG,
        got.len(),
        expected.len()
    );
}

#[wasm_bindgen_test]
fn matrix_w3() {
    check("w3", &case!("w3"));
}

#[wasm_bindgen_test]
fn matrix_adam_dropout() {
    check("adam_dropout", &case!("adam_dropout"));
}

#[wasm_bindgen_test]
fn matrix_mnist1d() {
    check("mnist1d", &case!("mnist1d"));
}

#[wasm_bindgen_test]
fn matrix_hvp() {
    check("hvp", &case!("hvp"));
}
