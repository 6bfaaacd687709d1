//! Pooling against an independent reading: a naive implementation written here from the
//! definitions (ONNX's `MaxPool`/`AveragePool`, PyTorch's `max_pool2d` with indices and
//! `avg_pool2d`): the input is first padded explicitly (`-inf` for the maximum, zeros for the
//! mean) and every tap of every window is visited, padding included. Forward values agree bit
//! for bit with the reference kernels, gradients too (max pool: one element per window, the
//! first maximum; average pool: against an f64 transpose), through the oracle and the runtime.
//! Hostile pooling attributes in a plan are refused by validation, never run.

use tapeplan_core::format::{plan_crc, CRC_OFFSET};
use tapeplan_core::ops::eval;
use tapeplan_core::{Attr, MathProfile, Opcode, PoolWindow, Recordable, Run, Shape, Tape, Tensor};
use tapeplan_planner::protocol::SplitMix64;
use tapeplan_planner::{plan, EntrySpec, Root};
use tapeplan_runtime::{Plan as RtPlan, Session};

/// `[planes, H, W]` with the window's geometry, pooled the naive way. Returns the output, its
/// extents, and for each window the flat input index of every tap (`None` for padding).
struct Naive {
    out_h: usize,
    out_w: usize,
    windows: Vec<Vec<Option<usize>>>,
}

fn naive_windows(planes: usize, h: usize, w: usize, win: PoolWindow) -> Naive {
    let [kh, kw] = win.kernel.map(|v| v as usize);
    let [sh, sw] = win.strides.map(|v| v as usize);
    let [dh, dw] = win.dilations.map(|v| v as usize);
    let [ph0, pw0, ph1, pw1] = win.pads.map(|v| v as usize);
    let (hp, wp) = (h + ph0 + ph1, w + pw0 + pw1);
    let out_h = (hp - ((kh - 1) * dh + 1)) / sh + 1;
    let out_w = (wp - ((kw - 1) * dw + 1)) / sw + 1;
    let mut windows = Vec::new();
    for p in 0..planes {
        for oh in 0..out_h {
            for ow in 0..out_w {
                let mut taps = Vec::new();
                for th in 0..kh {
                    for tw in 0..kw {
                        // Coordinates in the explicitly padded plane.
                        let (y, x) = (oh * sh + th * dh, ow * sw + tw * dw);
                        let real = y >= ph0 && y < ph0 + h && x >= pw0 && x < pw0 + w;
                        taps.push(real.then(|| p * h * w + (y - ph0) * w + (x - pw0)));
                    }
                }
                windows.push(taps);
            }
        }
    }
    Naive {
        out_h,
        out_w,
        windows,
    }
}

/// The naive max pool: the first tap (padding as `-inf`) holding the window's maximum.
fn naive_argmax(x: &[f32], taps: &[Option<usize>]) -> Option<usize> {
    let mut best = (None, f32::NEG_INFINITY);
    let mut first = true;
    for t in taps {
        let v = t.map_or(f32::NEG_INFINITY, |i| x[i]);
        if first || v > best.1 {
            best = (*t, v);
            first = false;
        }
    }
    best.0
}

fn windows_to_test() -> Vec<(Vec<usize>, PoolWindow)> {
    vec![
        (vec![2, 3, 9], PoolWindow::new_1d(3, 2, [1, 2])),
        (
            vec![1, 2, 8],
            PoolWindow::new_1d(2, 3, [0, 1]).with_dilations([1, 3]),
        ),
        (vec![2, 2, 6, 5], PoolWindow::new_2d([2, 2], [2, 2], [0; 4])),
        (
            vec![1, 3, 7, 6],
            PoolWindow::new_2d([3, 3], [1, 2], [1, 1, 1, 1]),
        ),
        (
            vec![1, 2, 6, 7],
            PoolWindow::new_2d([2, 3], [2, 1], [1, 0, 0, 2]).with_dilations([2, 1]),
        ),
    ]
}

fn random(rng: &mut SplitMix64, n: usize) -> Vec<f32> {
    (0..n).map(|_| -4.0 + 8.0 * rng.next_f32()).collect()
}

/// `sum(pool(x) * w)`'s gradient: the oracle's and the runtime's.
fn gradient(
    op: Opcode,
    shape: Shape,
    win: PoolWindow,
    x: &[f32],
    w: &[f32],
) -> (Vec<f32>, Vec<f32>) {
    crate::reductions::gradient(shape, x, w, |t, x| {
        if op == Opcode::MaxPool {
            t.max_pool(x, win).unwrap()
        } else {
            t.avg_pool(x, win).unwrap()
        }
    })
}

#[test]
fn max_pool_matches_the_naive_reading_forward_and_gradient() {
    let mut rng = SplitMix64::new(12);
    for (dims, win) in windows_to_test() {
        let shape = Shape::new(&dims).unwrap();
        let (planes, h, w) = match dims.len() {
            3 => (dims[0] * dims[1], 1, dims[2]),
            _ => (dims[0] * dims[1], dims[2], dims[3]),
        };
        let naive = naive_windows(planes, h, w, win);
        let x = random(&mut rng, shape.elems());
        let out_shape =
            tapeplan_core::ops::infer(Opcode::MaxPool, Attr::Pool(win), &[shape]).unwrap();
        assert_eq!(
            out_shape.elems(),
            planes * naive.out_h * naive.out_w,
            "{dims:?}"
        );
        let mut y = vec![f32::NAN; out_shape.elems()];
        eval(
            Opcode::MaxPool,
            Attr::Pool(win),
            MathProfile::Precise,
            &[&x],
            &[shape],
            &mut y,
        )
        .unwrap();
        let expected: Vec<f32> = naive
            .windows
            .iter()
            .map(|taps| x[naive_argmax(&x, taps).unwrap()])
            .collect();
        assert_eq!(y, expected, "{dims:?} {win:?}");

        let wv = random(&mut rng, out_shape.elems());
        let mut expected_grad = vec![0.0f32; x.len()];
        for (taps, g) in naive.windows.iter().zip(&wv) {
            expected_grad[naive_argmax(&x, taps).unwrap()] += g;
        }
        let (oracle, runtime) = gradient(Opcode::MaxPool, shape, win, &x, &wv);
        assert_eq!(oracle, expected_grad, "{dims:?} {win:?}");
        assert_eq!(oracle, runtime, "{dims:?} {win:?}");
    }
}

#[test]
fn avg_pool_matches_the_naive_reading_forward_and_gradient_both_divisors() {
    let mut rng = SplitMix64::new(13);
    for (dims, win) in windows_to_test() {
        for include in [false, true] {
            let win = win.with_count_include_pad(include);
            let shape = Shape::new(&dims).unwrap();
            let (planes, h, w) = match dims.len() {
                3 => (dims[0] * dims[1], 1, dims[2]),
                _ => (dims[0] * dims[1], dims[2], dims[3]),
            };
            let naive = naive_windows(planes, h, w, win);
            let x = random(&mut rng, shape.elems());
            let count = |taps: &[Option<usize>]| {
                if include {
                    taps.len()
                } else {
                    taps.iter().flatten().count()
                }
            };
            let out_shape =
                tapeplan_core::ops::infer(Opcode::AvgPool, Attr::Pool(win), &[shape]).unwrap();
            let mut y = vec![f32::NAN; out_shape.elems()];
            eval(
                Opcode::AvgPool,
                Attr::Pool(win),
                MathProfile::Precise,
                &[&x],
                &[shape],
                &mut y,
            )
            .unwrap();
            // Every tap, zeros for padding, summed in f32 from +0 in row-major window order.
            let expected: Vec<f32> = naive
                .windows
                .iter()
                .map(|taps| {
                    let s = taps.iter().fold(0.0f32, |a, t| a + t.map_or(0.0, |i| x[i]));
                    s / count(taps) as f32
                })
                .collect();
            assert_eq!(y, expected, "{dims:?} {win:?}");

            // The gradient: the transpose of the averaging, in f64.
            let wv = random(&mut rng, out_shape.elems());
            let mut expected_grad = vec![0.0f64; x.len()];
            for (taps, g) in naive.windows.iter().zip(&wv) {
                for i in taps.iter().flatten() {
                    expected_grad[*i] += *g as f64 / count(taps) as f64;
                }
            }
            let (oracle, runtime) = gradient(Opcode::AvgPool, shape, win, &x, &wv);
            for (a, b) in oracle.iter().zip(&expected_grad) {
                assert!(
                    (*a as f64 - b).abs() <= 1e-6 * (1.0 + b.abs()),
                    "{a} vs {b}"
                );
            }
            assert_eq!(oracle, runtime, "{dims:?} {win:?}");
        }
    }
}

/// The gradient of a max pool with ties goes to one element per window: the first maximum.
#[test]
fn max_pool_ties_send_the_gradient_to_the_first_maximum() {
    // [1, 1, 4], kernel 2, stride 2: windows {3, 3} (a tie: element 0) and {1, 3}; then 2x2
    // windows of equal values over a 2x3 plane (elements 0 and 1 win).
    let win = PoolWindow::new_1d(2, 2, [0, 0]);
    let s = Shape::new(&[1, 1, 4]).unwrap();
    let (oracle, runtime) = gradient(Opcode::MaxPool, s, win, &[3., 3., 1., 3.], &[1., 1.]);
    assert_eq!(oracle, [1., 0., 0., 1.]);
    assert_eq!(runtime, oracle);
    let win = PoolWindow::new_2d([2, 2], [1, 1], [0; 4]);
    let s = Shape::new(&[1, 1, 2, 3]).unwrap();
    let (oracle, runtime) = gradient(Opcode::MaxPool, s, win, &[5.; 6], &[1., 10.]);
    assert_eq!(oracle, [1., 10., 0., 0., 0., 0.]);
    assert_eq!(runtime, oracle);
}

/// Global average pooling is `mean_to` over the spatial axes.
#[test]
fn global_avg_pool_is_the_spatial_mean() {
    let mut tape = Tape::new();
    let s = Shape::new(&[1, 2, 2, 2]).unwrap();
    let x = tape.input("x", s);
    let y = tape.trace().global_avg_pool(&x).unwrap();
    assert_eq!(tape.shape(y).unwrap(), Shape::new(&[1, 2, 1, 1]).unwrap());
    let mut run = Run::new(&tape);
    run.set(
        x,
        Tensor::new(s, vec![1., 2., 3., 6., -1., -1., 0., 4.]).unwrap(),
    )
    .unwrap();
    run.forward().unwrap();
    assert_eq!(run.value(y).unwrap().data, [3.0, 0.5]);
    let mut t = tape.trace();
    assert!(t.global_avg_pool(&y).is_ok());
    let m = t.reshape(&y, Shape::matrix(2, 1)).unwrap();
    assert!(t.global_avg_pool(&m).is_err());
}

/// A planned average pool, its attribute block found in the plan and damaged word by word
/// (checksum recomputed): validation refuses the hostile values, and no mutation panics.
#[test]
fn hostile_pool_attributes_are_refused_by_validation() {
    let mut tape = Tape::new();
    let s = Shape::new(&[1, 2, 5, 5]).unwrap();
    let x = tape.input("x", s);
    let win = PoolWindow::new_2d([3, 3], [2, 2], [1, 1, 1, 1]);
    let y = tape.trace().avg_pool(&x, win).unwrap();
    let p = plan(
        &tape,
        &[EntrySpec {
            name: "f".into(),
            roots: vec![Root::Output {
                name: "y".into(),
                node: y,
            }],
            guarded: false,
        }],
    )
    .unwrap();
    let bytes = p.to_bytes();
    let run = |b: &[u8]| -> Result<Vec<f32>, ()> {
        let rt = RtPlan::parse(b).map_err(|_| ())?;
        let e = rt.entry("f").ok_or(())?;
        let mut arena = vec![0.5f32; rt.arena_elems()];
        let mut s = Session::bind(&rt, &mut arena).map_err(|_| ())?;
        s.set_input(e, "x", &[1.0; 50]).map_err(|_| ())?;
        s.run(e).map_err(|_| ())?;
        Ok(s.output(e, "y").map_err(|_| ())?.to_vec())
    };
    assert_eq!(run(&bytes).unwrap(), {
        let mut y = vec![0.0; 18];
        eval(
            Opcode::AvgPool,
            Attr::Pool(win),
            MathProfile::Precise,
            &[&[1.0; 50]],
            &[s],
            &mut y,
        )
        .unwrap();
        y
    });
    // The block: its length word 11, then the window's words, at the end of the plan.
    let words = win.words();
    let mut block = 11u32.to_le_bytes().to_vec();
    for w in words {
        block.extend_from_slice(&w.to_le_bytes());
    }
    let at = bytes
        .windows(block.len())
        .position(|w| w == block.as_slice())
        .expect("the pool block is in the plan");
    let with = |k: usize, v: u32| {
        let mut b = bytes.clone();
        let o = at + 4 + 4 * k;
        b[o..o + 4].copy_from_slice(&v.to_le_bytes());
        if let Some(c) = plan_crc(&b) {
            b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&c.to_le_bytes());
        }
        b
    };
    // Each refused: a zero kernel, stride, dilation; a kernel larger than the padded input;
    // a padded extent beyond u32; a flag word of 2; a window of padding only.
    for (k, v) in [
        (0, 0),
        (1, 0),
        (2, 0),
        (3, 0),
        (4, 0),
        (5, 0),
        (0, 8),
        (1, u32::MAX),
        (6, u32::MAX),
        (9, u32::MAX),
        (10, 2),
        (10, u32::MAX),
        (4, 7),
    ] {
        assert!(run(&with(k, v)).is_err(), "word {k} = {v:#x} accepted");
    }
    // Whatever one word holds, nothing panics; what is accepted runs inside its arena.
    let mut rng = SplitMix64::new(99);
    for k in 0..11 {
        for _ in 0..40 {
            let v = match rng.below(3) {
                0 => rng.below(8) as u32,
                1 => (rng.next_f32() * 4.0e9) as u32,
                _ => u32::MAX - rng.below(4) as u32,
            };
            let _ = run(&with(k, v));
        }
    }
}
