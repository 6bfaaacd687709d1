//! Time of a typical small-CNN layer (C_in = C_out = 16, 32 × 32, 3 × 3, padding 1, batch
//! N = 1, 2, 4, 8; dense and depthwise) and of its two adjoints: the forward `conv`,
//! `conv_transpose` (the input gradient) and `conv_weight_grad` (the weight gradient). The
//! reference kernel (`tapeplan_core::ops::eval`, what the scalar catalog runs) against this
//! build's catalog (`tapeplan_runtime::catalog::eval`), in ns per multiply-accumulate
//! (`N · C_out · H_out · W_out · C_in/groups · K_h · K_w`, padding taps included; the same
//! count for all three instructions), the best of 30 runs each. Both give the same bits
//! (checked here too).
//!
//! ```sh
//! cargo run --release -p tapeplan-runtime --features simd --example conv_speed
//! RUSTFLAGS="-C target-cpu=native" cargo run --release -p tapeplan-runtime --features simd --example conv_speed
//! ```
//!
//! An optional argument restricts the batch sizes (`conv_speed 1,8`).

use std::time::Instant;

use tapeplan_core::ops::Attr;
use tapeplan_core::{ConvAttr, MathProfile, Opcode, Shape};
use tapeplan_runtime::catalog;

fn data(n: usize, a: usize, b: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * a % b) as f32 - (b / 2) as f32) / (b / 2) as f32)
        .collect()
}

/// One instruction to time: opcode, attribute, arguments, their shapes, output elements.
type Case<'a> = (Opcode, Attr, [&'a [f32]; 2], [Shape; 2], usize);

/// The best of 30 runs, in seconds.
fn time(f: &mut dyn FnMut()) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..30 {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    best
}

fn main() {
    let batches: Vec<usize> = std::env::args()
        .nth(1)
        .map(|s| s.split(',').map(|v| v.parse().unwrap()).collect())
        .unwrap_or_else(|| vec![1, 2, 4, 8]);
    let (c, hw, k) = (16usize, 32usize, 3usize);
    println!("catalog {}", catalog::CATALOG);
    println!(
        "{:<22} {:>2} {:<17} {:>9} {:>9} {:>7}  bits",
        "layer", "N", "instruction", "ref ns", "cat ns", "speed"
    );
    let dense = ConvAttr::d2([1, 1], [1, 1], [1, 1], [1, 1], 1);
    let depthwise = ConvAttr::d2([1, 1], [1, 1], [1, 1], [1, 1], 16);
    // (name, attribute, N, [C_in, C_out], input extents, kernel extents)
    type Layer = (
        &'static str,
        ConvAttr,
        usize,
        [usize; 2],
        Vec<usize>,
        Vec<usize>,
    );
    let mut layers: Vec<Layer> = Vec::new();
    for &n in &batches {
        layers.push(("3x3 pad 1", dense, n, [c, c], vec![hw, hw], vec![k, k]));
        layers.push((
            "3x3 pad 1 depthwise",
            depthwise,
            n,
            [c, c],
            vec![hw, hw],
            vec![k, k],
        ));
    }
    // The digits CNN's two layers (planner-host/examples/digits_cnn.rs), batch 32.
    layers.push((
        "digits conv1 1->16 8x8",
        dense,
        32,
        [1, 16],
        vec![8, 8],
        vec![k, k],
    ));
    layers.push((
        "digits conv2 16->32 4x4",
        dense,
        32,
        [16, 32],
        vec![4, 4],
        vec![k, k],
    ));
    // The MNIST-1D CNN's three layers (workload C1 of `cargo xtask bench --peers`), batch 100:
    // stride 2, padding 1, signals 40 -> 19 -> 10 -> 5.
    let s2 = ConvAttr::d1(2, 1, 1, 1, 1);
    layers.push(("C1 conv1 1->25 w40 k5", s2, 100, [1, 25], vec![40], vec![5]));
    layers.push((
        "C1 conv2 25->25 w19 k3",
        s2,
        100,
        [25, 25],
        vec![19],
        vec![3],
    ));
    layers.push((
        "C1 conv3 25->25 w10 k3",
        s2,
        100,
        [25, 25],
        vec![10],
        vec![3],
    ));
    for (name, a, n, [c_in, c_out], spatial, kernel) in layers {
        {
            let g = a.groups as usize;
            let c = c_out;
            let xs = Shape::new(&[&[n, c_in][..], &spatial].concat()).unwrap();
            let ws = Shape::new(&[&[c_out, c_in / g][..], &kernel].concat()).unwrap();
            let r = spatial.len();
            let e = tapeplan_core::ops::conv::output_extent(&a, xs, ws).unwrap();
            let ys = Shape::new(&[&[n, c][..], &e[..r]].concat()).unwrap();
            let (x, w, gy) = (
                data(xs.elems(), 37, 101),
                data(ws.elems(), 53, 89),
                data(ys.elems(), 29, 97),
            );
            let macs = (n * c * (c_in / g)) as f64
                * e[..r].iter().product::<usize>() as f64
                * kernel.iter().product::<usize>() as f64;
            let cases: [Case<'_>; 3] = [
                (
                    Opcode::Conv,
                    Attr::Conv(a.with_extent(&e[..r])),
                    [&x, &w],
                    [xs, ws],
                    ys.elems(),
                ),
                (
                    Opcode::ConvTranspose,
                    Attr::Conv(a.with_extent(&spatial)),
                    [&gy, &w],
                    [ys, ws],
                    xs.elems(),
                ),
                (
                    Opcode::ConvWeightGrad,
                    Attr::Conv(a.with_extent(&kernel)),
                    [&x, &gy],
                    [xs, ys],
                    ws.elems(),
                ),
            ];
            for (op, attr, args, shapes, out_elems) in cases {
                let (mut want, mut got) = (vec![0.0f32; out_elems], vec![0.0f32; out_elems]);
                let reference = time(&mut || {
                    tapeplan_core::ops::eval(
                        op,
                        attr,
                        MathProfile::Precise,
                        &args,
                        &shapes,
                        &mut want,
                    )
                    .unwrap()
                });
                let cat = time(&mut || {
                    catalog::eval(op, attr, MathProfile::Precise, &args, &shapes, &mut got).unwrap()
                });
                let same = want
                    .iter()
                    .zip(&got)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                println!(
                    "{name:<22} {n:>2} {:<17} {:>9.3} {:>9.3} {:>6.1}x  {}",
                    op.name(),
                    reference / macs * 1e9,
                    cat / macs * 1e9,
                    reference / cat,
                    if same { "equal" } else { "DIFFER" }
                );
                assert!(same, "{op} differs from its reference");
            }
        }
    }
}
