//! Every one of the 2^32 `f32` bit patterns through the catalog's transcendental kernels
//! (`tanh`, `exp`, `log`, `sigmoid`, `softplus`; with feature `simd`, the lane-wise ports of
//! `libm`) and through the reference kernels (`libm`'s scalar functions, `precise` profile):
//! the bits must be identical (NaN: both NaN). Also measures the reference kernels' accuracy
//! against the same function in `f64` (`libm`'s double functions) over the whole `f32` range:
//! the largest error in units in the last place of the `f32` result (`ulp` of the exact value,
//! subnormal `ulp` below `2^-126`), and where it occurs; again over the inputs whose exact value
//! is a normal `f32` magnitude (a result that flushes to zero or overflows early, as `sigmoid`'s
//! `1 / (1 + inf)` below −88.7, counts millions of subnormal ulps). Inputs whose exact value is
//! NaN, infinite or beyond `f32::MAX` are counted apart ("outside") and checked for the right
//! class.
//!
//! ```sh
//! cargo xtask mathcheck                 # or, by hand:
//! RUSTFLAGS="-C target-cpu=native" cargo run --release -p tapeplan-runtime --features simd \
//!     --example mathcheck [-- --stride N] [-- --only tanh]
//! ```
//! Exits with status 1 when any input differs.

#[path = "../tests/sweep/mod.rs"]
mod sweep;

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use tapeplan_core::Opcode;

/// Bit patterns per work item.
const CHUNK: u64 = 1 << 20;

/// The function in `f64`: what the `f32` kernel approximates.
fn exact(op: Opcode, x: f64) -> f64 {
    match op {
        Opcode::Tanh => libm::tanh(x),
        Opcode::Exp => libm::exp(x),
        Opcode::Log => libm::log(x),
        Opcode::Sigmoid => 1.0 / (1.0 + libm::exp(-x)),
        // `log(1 + e^x)`; above 30 `x + e^-x` (the same to f64 rounding, without overflow).
        Opcode::Softplus if x > 30.0 => x + libm::exp(-x),
        Opcode::Softplus => libm::log1p(libm::exp(x)),
        _ => f64::NAN,
    }
}

/// `|got - want|` in units in the last place of `f32` at `want` (`want` finite, within the
/// `f32` range).
fn ulps(got: f32, want: f64) -> f64 {
    let e = if want == 0.0 {
        -126
    } else {
        (((want.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(-126)
    };
    (f64::from(got) - want).abs() / 2f64.powi(e - 23)
}

#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    inputs: u64,
    mismatches: u64,
    first_mismatch: Option<(f32, f32, f32)>,
    /// The largest error in ulps of a finite result, and its input.
    max_ulps: f64,
    max_at: f32,
    /// The same over exact values of normal magnitude (`>= 2^-126`).
    max_ulps_normal: f64,
    max_normal_at: f32,
    /// Inputs whose exact value is NaN, infinite or beyond `f32::MAX` (not in the ulp figure).
    outside: u64,
    /// Of those, results not of the same class (NaN for NaN, the infinity or `±MAX`-or-infinity).
    outside_wrong: u64,
}

impl Tally {
    fn merge(&mut self, o: &Tally) {
        self.inputs += o.inputs;
        self.mismatches += o.mismatches;
        if self.first_mismatch.is_none() {
            self.first_mismatch = o.first_mismatch;
        }
        if o.max_ulps > self.max_ulps {
            self.max_ulps = o.max_ulps;
            self.max_at = o.max_at;
        }
        if o.max_ulps_normal > self.max_ulps_normal {
            self.max_ulps_normal = o.max_ulps_normal;
            self.max_normal_at = o.max_normal_at;
        }
        self.outside += o.outside;
        self.outside_wrong += o.outside_wrong;
    }
}

fn chunk(op: Opcode, start: u64, end: u64, stride: u64, bufs: &mut [Vec<f32>; 3]) -> Tally {
    let [x, got, want] = bufs;
    x.clear();
    let mut b = start;
    while b < end {
        x.push(f32::from_bits(b as u32));
        b += stride;
    }
    let mut t = Tally {
        inputs: x.len() as u64,
        ..Tally::default()
    };
    // The bitwise check, then (independently) the first mismatch's details.
    if sweep::first_mismatch(op, x, got, want).is_some() {
        for ((&x, &g), &w) in x.iter().zip(got.iter()).zip(want.iter()) {
            if !sweep::same(g, w) {
                t.mismatches += 1;
                t.first_mismatch.get_or_insert((x, g, w));
            }
        }
    }
    for (&x, &r) in x.iter().zip(want.iter()) {
        let e = exact(op, f64::from(x));
        if e.is_nan() || e.is_infinite() || e.abs() > f64::from(f32::MAX) {
            t.outside += 1;
            let ok = if e.is_nan() {
                r.is_nan()
            } else {
                r.is_infinite() && (f64::from(r) > 0.0) == (e > 0.0)
                    || e.is_finite() && r.abs() == f32::MAX
            };
            t.outside_wrong += u64::from(!ok);
            continue;
        }
        let u = if r.is_finite() {
            ulps(r, e)
        } else {
            f64::INFINITY
        };
        if u > t.max_ulps {
            t.max_ulps = u;
            t.max_at = x;
        }
        if u > t.max_ulps_normal && e.abs() >= f64::from(f32::MIN_POSITIVE) {
            t.max_ulps_normal = u;
            t.max_normal_at = x;
        }
    }
    t
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut stride = 1u64;
    let mut only: Option<String> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match (a.as_str(), it.next()) {
            ("--stride", Some(n)) => match n.parse::<u64>() {
                Ok(n) if n > 0 => stride = n,
                _ => {
                    eprintln!("mathcheck: --stride takes a positive integer, found `{n}`");
                    return ExitCode::from(2);
                }
            },
            ("--only", Some(name)) => only = Some(name.clone()),
            _ => {
                eprintln!("mathcheck: unknown argument `{a}` (usage: [--stride N] [--only NAME])");
                return ExitCode::from(2);
            }
        }
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let which = if stride == 1 {
        "all 2^32 bit patterns".to_string()
    } else {
        format!("every {stride}th bit pattern")
    };
    println!(
        "catalog {} ({} lanes), {threads} threads, {which}",
        tapeplan_runtime::catalog::CATALOG,
        tapeplan_runtime::catalog::LANES,
    );
    println!(
        "{:<9} {:>11} {:>10} {:>13} {:>16} {:>13} {:>16} {:>9} {:>7}",
        "function",
        "inputs",
        "mismatches",
        "max ulp",
        "at x",
        "normal: ulp",
        "at x",
        "outside",
        "seconds"
    );
    let mut failed = false;
    for op in sweep::FUNCTIONS {
        if only.as_deref().is_some_and(|o| o != op.name()) {
            continue;
        }
        let started = Instant::now();
        let next = AtomicU64::new(0);
        let total = Mutex::new(Tally::default());
        let span = CHUNK * stride;
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    let mut bufs = [Vec::new(), Vec::new(), Vec::new()];
                    let mut mine = Tally::default();
                    loop {
                        let start = next.fetch_add(span, Ordering::Relaxed);
                        if start > u64::from(u32::MAX) {
                            break;
                        }
                        let end = (start + span).min(1 << 32);
                        mine.merge(&chunk(op, start, end, stride, &mut bufs));
                    }
                    if let Ok(mut t) = total.lock() {
                        t.merge(&mine);
                    }
                });
            }
        });
        let t = total.into_inner().unwrap_or_default();
        println!(
            "{:<9} {:>11} {:>10} {:>13.3} {:>16e} {:>13.3} {:>16e} {:>9} {:>7.1}",
            op.name(),
            t.inputs,
            t.mismatches,
            t.max_ulps,
            t.max_at,
            t.max_ulps_normal,
            t.max_normal_at,
            t.outside,
            started.elapsed().as_secs_f64()
        );
        if let Some(m) = t.first_mismatch {
            println!("  first mismatch: {}", sweep::describe(op, m));
            failed = true;
        }
        if t.outside_wrong > 0 {
            println!(
                "  {} inputs whose exact value is NaN or out of range got another class",
                t.outside_wrong
            );
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
