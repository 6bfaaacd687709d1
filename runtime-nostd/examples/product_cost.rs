//! Times the catalog's matrix products at the shapes of W2's training step (issue 15's MLP
//! 784-128-10, batch 64: docs/benchmarks.md "W2's products"), under both arithmetic profiles,
//! and prints each product's median microseconds per call (15 samples) and GFLOP/s
//! (`2·m·k·n` per call).
//!
//! ```sh
//! RUSTFLAGS="-C target-cpu=native" taskset -c 1 \
//!     cargo run --release -p tapeplan-runtime --example product_cost --features simd
//! ```
//!
//! `ONLY=h·W2` (a prefix of the names) times only the products whose name starts with it, for
//! `perf record` of one product.

use std::time::Instant;

use tapeplan_core::ops::Attr;
use tapeplan_core::{ArithProfile, MathProfile, Opcode, Shape};
use tapeplan_runtime::catalog;

/// `(name, opcode, a's dims, b's dims)`: W2's products, forward then backward.
const PRODUCTS: &[(&str, Opcode, [usize; 2], [usize; 2])] = &[
    ("x·W1", Opcode::MatMul, [64, 784], [784, 128]),
    ("h·W2", Opcode::MatMul, [64, 128], [128, 10]),
    ("hᵀ·g (dW2)", Opcode::MatMulTn, [64, 128], [64, 10]),
    ("g·W2ᵀ (dh)", Opcode::MatMulNt, [64, 10], [128, 10]),
    ("xᵀ·ḡ (dW1)", Opcode::MatMulTn, [64, 784], [64, 128]),
];

fn main() {
    println!("catalog {}", catalog::CATALOG);
    let only = std::env::var("ONLY").ok();
    let wanted = |name: &str| only.as_deref().is_none_or(|o| name.starts_with(o));
    for &(name, op, da, db) in PRODUCTS.iter().filter(|p| wanted(p.0)) {
        let (sa, sb) = (Shape::new(&da).unwrap(), Shape::new(&db).unwrap());
        let out_shape = tapeplan_core::ops::infer(op, Attr::NONE, &[sa, sb]).unwrap();
        // Deterministic ordinary values.
        let fill = |n: usize, seed: u32| -> Vec<f32> {
            (0..n as u32)
                .map(|i| ((i.wrapping_mul(2_654_435_761) ^ seed) % 2001) as f32 / 1000.0 - 1.0)
                .collect()
        };
        let (a, b) = (fill(sa.elems(), 7), fill(sb.elems(), 11));
        let mut out = vec![0.0f32; out_shape.elems()];
        let k = if op == Opcode::MatMulTn { da[0] } else { da[1] };
        let flops = 2.0 * out_shape.elems() as f64 * k as f64;
        for arith in [ArithProfile::Separate, ArithProfile::Fma] {
            let mut run = || {
                catalog::eval_arith(
                    op,
                    Attr::NONE,
                    MathProfile::Precise,
                    arith,
                    &[&a, &b],
                    &[sa, sb],
                    &mut out,
                )
                .unwrap();
            };
            let calls = (2e8 / flops).clamp(10.0, 1e5) as usize;
            for _ in 0..calls {
                run();
            }
            let mut samples: Vec<f64> = (0..15)
                .map(|_| {
                    let t = Instant::now();
                    for _ in 0..calls {
                        run();
                    }
                    t.elapsed().as_secs_f64() / calls as f64
                })
                .collect();
            samples.sort_by(f64::total_cmp);
            let s = samples[samples.len() / 2];
            println!(
                "{name:<12} {op:<9} {da:?}x{db:?} {arith:<8} {:8.2} µs  {:6.1} GFLOP/s",
                s * 1e6,
                flops / s / 1e9
            );
        }
    }
}
