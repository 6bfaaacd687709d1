//! Calibrates the fusion cost model (`tapeplan_planner::ChainCost`): one elementwise chain of
//! `m` members over `n` elements, `y ← y·x`, `y ← y + x`, … (each member reads the input `x` from
//! the arena and the previous value from a register tile), planned fused (`FusionPolicy::All`:
//! one chain, its intermediates in registers) and unfused (`FusionPolicy::Off`), each run through
//! `Session::run_program` of the entry decoded once, as a training loop runs it. Prints, per
//! `(m, n)`, the median nanoseconds per run of each plan (`runs` runs per sample, 15 samples,
//! interleaved fused/unfused) and their ratio; the bits of `y` are checked equal.
//!
//! ```sh
//! taskset -c 1 cargo run --release -p tapeplan-planner --example chain_cost [--features simd] \
//!     [-- MEMBERS ELEMS]
//! ```
//!
//! With `MEMBERS ELEMS`, that one chain only (to profile it).

use std::time::Instant;

use tapeplan_core::{Recordable, Shape, Tape};
use tapeplan_planner::{plan_with, EntrySpec, FusionPolicy, PlanOptions, Root, Schedule};
use tapeplan_runtime::catalog::CATALOG;
use tapeplan_runtime::{Decoded, Plan, Session};

/// The chain's plan under `fusion`.
fn chain(members: usize, elems: usize, fusion: FusionPolicy) -> Schedule {
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::vector(elems));
    let y = {
        let mut t = tape.trace();
        let mut y = t.neg(&x).unwrap();
        for i in 1..members {
            y = if i % 2 == 1 {
                t.mul(&y, &x).unwrap()
            } else {
                t.add(&y, &x).unwrap()
            };
        }
        y
    };
    let spec = EntrySpec {
        name: "f".into(),
        roots: vec![Root::Output {
            name: "y".into(),
            node: y,
        }],
        guarded: false,
    };
    let options = PlanOptions {
        fusion,
        ..PlanOptions::default()
    };
    plan_with(&tape, &[spec], options).unwrap()
}

/// One sample: nanoseconds per run of `plan` over `runs` runs, and `y`'s bits.
fn sample(plan: &Plan<'_>, x: &[f32], runs: usize) -> (f64, Vec<u32>) {
    let mut arena = vec![0.0f32; plan.arena_elems()];
    let mut buf = vec![Decoded::EMPTY; plan.n_instrs()];
    let mut s = Session::bind(plan, &mut arena).unwrap();
    let e = plan.entry("f").unwrap();
    let (bx, by) = (plan.input(e, "x").unwrap(), plan.output(e, "y").unwrap());
    let program = s.decode(e, &mut buf).unwrap();
    s.write_binding(&bx, x).unwrap();
    let t0 = Instant::now();
    for _ in 0..runs {
        s.run_program(&program).unwrap();
        std::hint::black_box(s.read_binding(&by)[0]);
    }
    let ns = t0.elapsed().as_nanos() as f64 / runs as f64;
    (
        ns,
        s.read_binding(&by).iter().map(|v| v.to_bits()).collect(),
    )
}

/// Median nanoseconds per run of each plan (15 samples each, interleaved), and `y`'s bits.
fn time(plans: [&[u8]; 2], elems: usize) -> ([f64; 2], [Vec<u32>; 2]) {
    let plans = plans.map(|b| Plan::parse(b).unwrap());
    let x: Vec<f32> = (0..elems).map(|i| 0.5 + (i % 7) as f32 * 0.0625).collect();
    let runs = (2_000_000 / (elems + 64)).clamp(200, 200_000);
    let mut samples = [Vec::new(), Vec::new()];
    let mut ys = [Vec::new(), Vec::new()];
    for _ in 0..15 {
        for (k, p) in plans.iter().enumerate() {
            let (ns, y) = sample(p, &x, runs);
            samples[k].push(ns);
            ys[k] = y;
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let [a, b] = &mut samples;
    ([median(a), median(b)], ys)
}

fn main() {
    println!("catalog {CATALOG}");
    println!("members\telems\tfused_ns\tunfused_ns\tfused/unfused");
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("usage: chain_cost [MEMBERS ELEMS]"))
        .collect();
    let (members, elems) = match args[..] {
        [m, n] => (vec![m], vec![n]),
        _ => (
            vec![2, 4, 8],
            vec![1, 16, 64, 256, 1024, 4096, 16384, 65536],
        ),
    };
    for &members in &members {
        for &elems in &elems {
            let fused = chain(members, elems, FusionPolicy::All);
            let plain = chain(members, elems, FusionPolicy::Off);
            let n_fused = fused.entries[0]
                .instrs
                .iter()
                .filter(|i| i.fuse_next)
                .count();
            assert_eq!(n_fused, members - 1, "one chain of {members}");
            let (fb, pb) = (fused.to_bytes(), plain.to_bytes());
            let ([f, u], [yf, yu]) = time([&fb, &pb], elems);
            assert_eq!(yf, yu, "the same bits fused and unfused");
            println!("{members}\t{elems}\t{f:.1}\t{u:.1}\t{:.3}", f / u);
        }
    }
}
