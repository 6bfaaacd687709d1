//! The accuracy of the two math profiles: every transcendental kernel's `f32` result under
//! `precise` (libm) and `fast` (micromath) against the exact function computed in `f64`
//! (`libm`'s double-precision functions on the same `f32` input), over stated ranges.
//!
//! ```sh
//! cargo run --release -p tapeplan-core --example math_profiles
//! ```
//!
//! Each range is sampled at `N` evenly spaced points (`lin`) or at `N` points evenly spaced in
//! `log2 x` (`log`); the table gives the largest absolute error, the largest relative error
//! (`|y − f(x)| / |f(x)|`, over points where `f(x) ≠ 0`) and the input where it occurs.

use tapeplan_core::ops::{exp, log, sigmoid, softplus, tanh};

/// Points per range.
const N: usize = 2_000_001;

struct Row {
    name: &'static str,
    precise: fn(f32) -> f32,
    fast: fn(f32) -> f32,
    exact: fn(f64) -> f64,
    ranges: &'static [(&'static str, f64, f64)],
}

fn sigmoid64(x: f64) -> f64 {
    1.0 / (1.0 + libm::exp(-x))
}

fn softplus64(x: f64) -> f64 {
    if x > 20.0 {
        x
    } else {
        libm::log1p(libm::exp(x))
    }
}

fn points(kind: &str, lo: f64, hi: f64) -> impl Iterator<Item = f32> + '_ {
    let log = kind == "log";
    (0..N).map(move |i| {
        let t = i as f64 / (N - 1) as f64;
        if log {
            libm::exp2(libm::log2(lo) + t * (libm::log2(hi) - libm::log2(lo))) as f32
        } else {
            (lo + t * (hi - lo)) as f32
        }
    })
}

#[derive(Default)]
struct Worst {
    abs: f64,
    abs_at: f32,
    rel: f64,
    rel_at: f32,
}

fn measure(f: fn(f32) -> f32, exact: fn(f64) -> f64, kind: &str, lo: f64, hi: f64) -> Worst {
    let mut w = Worst::default();
    for x in points(kind, lo, hi) {
        let want = exact(f64::from(x));
        let got = f64::from(f(x));
        let abs = (got - want).abs();
        if abs > w.abs {
            w.abs = abs;
            w.abs_at = x;
        }
        if want != 0.0 {
            let rel = abs / want.abs();
            if rel > w.rel {
                w.rel = rel;
                w.rel_at = x;
            }
        }
    }
    w
}

fn main() {
    let rows = [
        Row {
            name: "exp",
            precise: exp::scalar::<f32>,
            fast: exp::scalar_fast::<f32>,
            exact: libm::exp,
            ranges: &[("lin", -10.0, 10.0), ("lin", -86.0, 88.0)],
        },
        Row {
            name: "log",
            precise: log::scalar::<f32>,
            fast: log::scalar_fast::<f32>,
            exact: libm::log,
            ranges: &[
                ("lin", 0.5, 2.0),
                ("log", 2.0, 1e6),
                ("log", 1e-6, 0.5),
                ("log", 1e-30, 1e30),
            ],
        },
        Row {
            name: "tanh",
            precise: tanh::scalar::<f32>,
            fast: tanh::scalar_fast::<f32>,
            exact: libm::tanh,
            ranges: &[
                ("lin", -1.0, 1.0),
                ("lin", -10.0, 10.0),
                ("log", 1e-6, 1e-2),
            ],
        },
        Row {
            name: "sigmoid",
            precise: sigmoid::scalar::<f32>,
            fast: sigmoid::scalar_fast::<f32>,
            exact: sigmoid64,
            ranges: &[("lin", -10.0, 10.0), ("lin", -80.0, 80.0)],
        },
        Row {
            name: "softplus",
            precise: softplus::scalar::<f32>,
            fast: softplus::scalar_fast::<f32>,
            exact: softplus64,
            ranges: &[("lin", -10.0, 10.0), ("lin", -30.0, 30.0)],
        },
    ];
    println!("errors against the f64 function of the same f32 input, {N} points per range");
    println!(
        "{:<9} {:<22} {:<8} {:>11} {:>14} {:>11} {:>14}",
        "function", "range", "profile", "max abs", "at x", "max rel", "at x"
    );
    for row in &rows {
        for &(kind, lo, hi) in row.ranges {
            for (profile, f) in [("precise", row.precise), ("fast", row.fast)] {
                let w = measure(f, row.exact, kind, lo, hi);
                println!(
                    "{:<9} {:<22} {:<8} {:>11.3e} {:>14.6e} {:>11.3e} {:>14.6e}",
                    row.name,
                    format!("{kind} [{lo:e}, {hi:e}]"),
                    profile,
                    w.abs,
                    w.abs_at,
                    w.rel,
                    w.rel_at
                );
            }
        }
    }
}
