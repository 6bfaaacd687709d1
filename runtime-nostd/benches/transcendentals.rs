//! The transcendental kernels alone: the catalog's (`catalog::eval`; with feature `simd` the
//! lane-wise ports of `libm`) against the scalar loop the catalog ran before them (the reference
//! kernel's scalar function, `libm`, element by element in a monomorphic loop), on 1024 inputs
//! (W1's hidden layer: batch 32 × 32 units) spread over `[-4, 4]` (`log`: `(0, 8]`).
//!
//! ```sh
//! RUSTFLAGS="-C target-cpu=native" cargo bench -p tapeplan-runtime --features simd \
//!     --bench transcendentals
//! ```

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tapeplan_core::ops::{exp, log, sigmoid, softplus, tanh, Attr};
use tapeplan_core::{MathProfile, Opcode, Shape};
use tapeplan_runtime::catalog::{self, CATALOG};

const N: usize = 1024;

/// An opcode, the scalar function its loop ran before, and its inputs.
type Case<'a> = (Opcode, fn(f32) -> f32, &'a [f32]);

fn bench(c: &mut Criterion) {
    let spread: Vec<f32> = (0..N)
        .map(|i| (i as f32 * 0.618_034).fract() * 8.0 - 4.0)
        .collect();
    let positive: Vec<f32> = spread.iter().map(|v| v + 4.0 + 1.0 / 1024.0).collect();
    let cases: [Case<'_>; 5] = [
        (Opcode::Tanh, tanh::scalar, &spread),
        (Opcode::Exp, exp::scalar, &spread),
        (Opcode::Log, log::scalar, &positive),
        (Opcode::Sigmoid, sigmoid::scalar, &spread),
        (Opcode::Softplus, softplus::scalar, &spread),
    ];
    let shape = [Shape::new(&[N]).expect("shape")];
    let mut g = c.benchmark_group("transcendental_1024");
    for (op, f, x) in cases {
        let mut out = vec![0.0f32; N];
        g.bench_with_input(BenchmarkId::new(op.name(), "libm-loop"), x, |b, x| {
            b.iter(|| {
                for (o, &v) in out.iter_mut().zip(std::hint::black_box(x)) {
                    *o = f(v);
                }
                std::hint::black_box(&out);
            })
        });
        g.bench_with_input(BenchmarkId::new(op.name(), CATALOG), x, |b, x| {
            b.iter(|| {
                catalog::eval(
                    op,
                    Attr::NONE,
                    MathProfile::Precise,
                    &[std::hint::black_box(x)],
                    &shape,
                    &mut out,
                )
                .expect("eval");
                std::hint::black_box(&out);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
