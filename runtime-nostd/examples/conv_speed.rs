//! Time of one forward `conv` for a typical small-CNN layer (N = 1, C_in = C_out = 16, 32 × 32,
//! 3 × 3, padding 1): the reference kernel (`tapeplan_core::ops::eval`, what the scalar catalog
//! runs) against this build's catalog (`tapeplan_runtime::catalog::eval`), in ns per
//! multiply-accumulate (`N · C_out · H_out · W_out · C_in/groups · K_h · K_w`, padding taps
//! included). Both give the same bits (checked here too).
//!
//! ```sh
//! cargo run --release -p tapeplan-runtime --features simd --example conv_speed
//! RUSTFLAGS="-C target-cpu=native" cargo run --release -p tapeplan-runtime --features simd --example conv_speed
//! ```

use std::time::Instant;

use tapeplan_core::ops::Attr;
use tapeplan_core::{ConvAttr, MathProfile, Opcode, Shape};
use tapeplan_runtime::catalog;

fn main() {
    let (n, c, hw, k) = (1usize, 16usize, 32usize, 3usize);
    for (name, a) in [
        ("3x3 pad 1", ConvAttr::d2([1, 1], [1, 1], [1, 1], [1, 1], 1)),
        (
            "3x3 pad 1 depthwise",
            ConvAttr::d2([1, 1], [1, 1], [1, 1], [1, 1], 16),
        ),
    ] {
        let g = a.groups as usize;
        let xs = Shape::new(&[n, c, hw, hw]).unwrap();
        let ws = Shape::new(&[c, c / g, k, k]).unwrap();
        let e = tapeplan_core::ops::conv::output_extent(&a, xs, ws).unwrap();
        let attr = Attr::Conv(a.with_extent(&e));
        let x: Vec<f32> = (0..xs.elems())
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        let w: Vec<f32> = (0..ws.elems())
            .map(|i| ((i * 53 % 89) as f32 - 44.0) / 44.0)
            .collect();
        let macs = (n * c * e[0] * e[1] * (c / g) * k * k) as f64;
        let (mut want, mut got) = (
            vec![0.0f32; n * c * e[0] * e[1]],
            vec![0.0f32; n * c * e[0] * e[1]],
        );
        let time = |f: &mut dyn FnMut()| {
            let mut best = f64::INFINITY;
            for _ in 0..30 {
                let t = Instant::now();
                f();
                best = best.min(t.elapsed().as_secs_f64());
            }
            best
        };
        let reference = time(&mut || {
            tapeplan_core::ops::eval(
                Opcode::Conv,
                attr,
                MathProfile::Precise,
                &[&x, &w],
                &[xs, ws],
                &mut want,
            )
            .unwrap()
        });
        let cat = time(&mut || {
            catalog::eval(
                Opcode::Conv,
                attr,
                MathProfile::Precise,
                &[&x, &w],
                &[xs, ws],
                &mut got,
            )
            .unwrap()
        });
        let same = want
            .iter()
            .zip(&got)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        println!(
            "{name}: reference {:.3} ns/MAC, catalog {} {:.3} ns/MAC ({:.1}x), bits equal: {same}",
            reference / macs * 1e9,
            catalog::CATALOG,
            cat / macs * 1e9,
            reference / cat
        );
        assert!(same);
    }
}
