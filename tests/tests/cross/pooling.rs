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

/// 3-D pooling through the ONNX importer: a rank-5 `[N, C, D, H, W]` is held as the plan's
/// rank-4 `[N·C, D, H, W]` and pooled over `(H, W)`, then over `D`. Forward against a naive 3-D
/// reading of ONNX's definition (every tap of the box visited in row-major `(d, h, w)` order,
/// `ceil_mode`'s overhang outside the `count_include_pad` divisor, as ONNX's reference); the
/// gradient against central finite differences and, for max pool, sent to the first maximum
/// of each box in row-major `(d, h, w)` order (ties); every reader (oracle, recorded gradient,
/// runtime) the same bits.
mod onnx_3d {
    use std::collections::BTreeMap;

    use tapeplan_core::{Recordable, Run, Shape, Tensor};
    use tapeplan_planner::exec::forward::run_forward;
    use tapeplan_planner::model::onnx::proto::{
        attribute_proto::AttributeType, tensor_proto::DataType, tensor_shape_proto, type_proto,
        AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto,
        TypeProto, ValueInfoProto,
    };
    use tapeplan_planner::model::onnx::{translate, OnnxError, TranslateOptions, Translation};
    use tapeplan_planner::protocol::SplitMix64;
    use tapeplan_tests::readers::value_and_gradients;

    /// A 3-D pooling node's attributes.
    #[derive(Clone, Copy, Debug)]
    struct Pool3 {
        max: bool,
        kernel: [usize; 3],
        strides: [usize; 3],
        dilations: [usize; 3],
        /// ONNX's order: `[d_begin, h_begin, w_begin, d_end, h_end, w_end]`.
        pads: [usize; 6],
        ceil: bool,
        include: bool,
    }

    fn info(name: &str, dims: Option<&[usize]>) -> ValueInfoProto {
        let shape = dims.map(|dims| TensorShapeProto {
            dim: dims
                .iter()
                .map(|&d| tensor_shape_proto::Dimension {
                    value: Some(tensor_shape_proto::dimension::Value::DimValue(d as i64)),
                    ..Default::default()
                })
                .collect(),
        });
        ValueInfoProto {
            name: Some(name.into()),
            r#type: Some(TypeProto {
                value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                    elem_type: Some(DataType::Float as i32),
                    shape,
                })),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn attr_ints(name: &str, v: &[usize]) -> AttributeProto {
        AttributeProto {
            name: Some(name.into()),
            r#type: Some(AttributeType::Ints as i32),
            ints: v.iter().map(|&x| x as i64).collect(),
            ..Default::default()
        }
    }

    fn attr_int(name: &str, i: i64) -> AttributeProto {
        AttributeProto {
            name: Some(name.into()),
            r#type: Some(AttributeType::Int as i32),
            i: Some(i),
            ..Default::default()
        }
    }

    fn model(nodes: Vec<NodeProto>, x_dims: &[usize], outputs: &[&str]) -> ModelProto {
        ModelProto {
            ir_version: Some(9),
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(19),
            }],
            graph: Some(GraphProto {
                node: nodes,
                name: Some("g".into()),
                input: vec![info("x", Some(x_dims))],
                output: outputs.iter().map(|o| info(o, None)).collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn node(op: &str, outputs: &[&str], attribute: Vec<AttributeProto>) -> NodeProto {
        NodeProto {
            op_type: Some(op.into()),
            name: Some("n".into()),
            input: vec!["x".into()],
            output: outputs.iter().map(|s| (*s).into()).collect(),
            attribute,
            ..Default::default()
        }
    }

    fn pool_model(p: &Pool3, x_dims: &[usize]) -> ModelProto {
        let mut attrs = vec![
            attr_ints("kernel_shape", &p.kernel),
            attr_ints("strides", &p.strides),
            attr_ints("dilations", &p.dilations),
            attr_ints("pads", &p.pads),
            attr_int("ceil_mode", i64::from(p.ceil)),
        ];
        if !p.max {
            attrs.push(attr_int("count_include_pad", i64::from(p.include)));
        }
        let op = if p.max { "MaxPool" } else { "AveragePool" };
        model(vec![node(op, &["y"], attrs)], x_dims, &["y"])
    }

    /// One axis of ONNX's window: the output extent (`ceil_mode` rounding up unless the last
    /// window would start in the end padding) and, per window, each tap's input position
    /// (`None`: padding) and whether it lies within the explicit padding (what
    /// `count_include_pad=1` counts; `ceil_mode`'s overhang past it does not count).
    #[allow(clippy::type_complexity)]
    fn axis(
        len: usize,
        k: usize,
        s: usize,
        d: usize,
        pads: [usize; 2],
        ceil: bool,
    ) -> Vec<Vec<(Option<usize>, bool)>> {
        let padded = len + pads[0] + pads[1];
        let span = (k - 1) * d + 1;
        let mut out = (padded - span) / s + 1;
        if ceil {
            out = (padded - span).div_ceil(s) + 1;
            if (out - 1) * s >= len + pads[0] {
                out -= 1;
            }
        }
        (0..out)
            .map(|o| {
                (0..k)
                    .map(|t| {
                        let p = o * s + t * d;
                        let real = (pads[0]..pads[0] + len).contains(&p).then(|| p - pads[0]);
                        (real, p < padded)
                    })
                    .collect()
            })
            .collect()
    }

    /// The naive 3-D pool of `x: [N, C, D, H, W]`: the output extents, its values (f64), and per
    /// window the flat indices of its real taps in row-major `(d, h, w)` order, its divisor
    /// (average) and its first maximum (max).
    struct Naive3 {
        dims: Vec<usize>,
        y: Vec<f64>,
        taps: Vec<Vec<usize>>,
        divisor: Vec<f64>,
        argmax: Vec<usize>,
    }

    fn naive3(p: &Pool3, dims: &[usize], x: &[f32]) -> Naive3 {
        let ax: Vec<_> = (0..3)
            .map(|a| {
                axis(
                    dims[2 + a],
                    p.kernel[a],
                    p.strides[a],
                    p.dilations[a],
                    [p.pads[a], p.pads[3 + a]],
                    p.ceil,
                )
            })
            .collect();
        let (dd, hh, ww) = (dims[2], dims[3], dims[4]);
        let mut n = Naive3 {
            dims: vec![dims[0], dims[1], ax[0].len(), ax[1].len(), ax[2].len()],
            y: vec![],
            taps: vec![],
            divisor: vec![],
            argmax: vec![],
        };
        for plane in 0..dims[0] * dims[1] {
            for wd in &ax[0] {
                for wh in &ax[1] {
                    for wv in &ax[2] {
                        let mut taps = Vec::new();
                        let (mut counted, mut real) = (0usize, 0usize);
                        for &(pd, cd) in wd {
                            for &(ph, ch) in wh {
                                for &(pw, cw) in wv {
                                    counted += usize::from(cd && ch && cw);
                                    if let (Some(d), Some(h), Some(w)) = (pd, ph, pw) {
                                        taps.push(((plane * dd + d) * hh + h) * ww + w);
                                        real += 1;
                                    }
                                }
                            }
                        }
                        assert!(!taps.is_empty(), "a window of padding only");
                        let mut best = taps[0];
                        for &i in &taps {
                            if x[i] > x[best] {
                                best = i;
                            }
                        }
                        let divisor = if p.include { counted } else { real } as f64;
                        let sum: f64 = taps.iter().map(|&i| f64::from(x[i])).sum();
                        n.y.push(if p.max {
                            f64::from(x[best])
                        } else {
                            sum / divisor
                        });
                        n.taps.push(taps);
                        n.divisor.push(divisor);
                        n.argmax.push(best);
                    }
                }
            }
        }
        n
    }

    fn translated(m: &ModelProto) -> Translation {
        translate(m, &TranslateOptions::default()).unwrap()
    }

    /// The configurations: per-axis kernels, strides, dilations and pads, `ceil_mode` with and
    /// without an overhang, `count_include_pad` both.
    fn configs() -> Vec<(Pool3, [usize; 5])> {
        let p = |max, kernel, strides, dilations, pads, ceil, include| Pool3 {
            max,
            kernel,
            strides,
            dilations,
            pads,
            ceil,
            include,
        };
        let mut v = vec![
            (
                p(true, [2, 2, 2], [1, 1, 1], [1, 1, 1], [0; 6], false, false),
                [1, 2, 3, 4, 4],
            ),
            (
                p(
                    true,
                    [2, 3, 2],
                    [2, 1, 2],
                    [1, 1, 2],
                    [1, 0, 1, 0, 1, 1],
                    false,
                    false,
                ),
                [2, 1, 4, 4, 5],
            ),
            (
                p(true, [2, 2, 2], [2, 2, 2], [1, 1, 1], [0; 6], true, false),
                [1, 1, 5, 5, 3],
            ),
        ];
        for include in [false, true] {
            for ceil in [false, true] {
                v.push((
                    p(
                        false,
                        [3, 2, 2],
                        [2, 2, 1],
                        [1, 2, 1],
                        [1, 1, 0, 1, 0, 1],
                        ceil,
                        include,
                    ),
                    [1, 2, 6, 6, 4],
                ));
                v.push((
                    p(
                        false,
                        [2, 2, 2],
                        [2, 2, 2],
                        [1, 1, 1],
                        [0; 6],
                        ceil,
                        include,
                    ),
                    [2, 1, 5, 3, 5],
                ));
            }
        }
        v
    }

    #[test]
    fn forward_matches_a_naive_3d_reading_through_oracle_and_runtime() {
        let mut rng = SplitMix64::new(3);
        for (p, dims) in configs() {
            let elems: usize = dims.iter().product();
            let x: Vec<f32> = (0..elems).map(|_| -4.0 + 8.0 * rng.next_f32()).collect();
            let t = translated(&pool_model(&p, &dims));
            assert_eq!(t.inputs[0].dims, dims);
            assert_eq!(
                t.inputs[0].shape,
                Shape::new(&[dims[0] * dims[1], dims[2], dims[3], dims[4]]).unwrap(),
                "held folded"
            );
            let out = run_forward(&t, &BTreeMap::from([("x".to_owned(), x.clone())])).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&out.oracle[0]), bits(&out.runtime[0]), "{p:?}");
            let n = naive3(&p, &dims, &x);
            assert_eq!(t.outputs[0].dims, n.dims, "{p:?}");
            assert_eq!(out.oracle[0].len(), n.y.len());
            for (g, w) in out.oracle[0].iter().zip(&n.y) {
                let ok = if p.max {
                    f64::from(*g) == *w
                } else {
                    (f64::from(*g) - w).abs() <= 1e-6 + 2e-6 * w.abs()
                };
                assert!(ok, "{p:?}: {g} vs {w}");
            }
        }
    }

    /// `f = Σ pool(x) · w` recorded after the translation; its value and gradients through every
    /// reader, and the oracle's `f` at other `x` for finite differences.
    struct Grad {
        t: Translation,
        f: tapeplan_core::NodeId,
        w: tapeplan_core::NodeId,
    }

    fn grad_tape(p: &Pool3, dims: &[usize]) -> Grad {
        let mut t = translated(&pool_model(p, dims));
        let y = t.outputs[0].node;
        let ys = t.tape.shape(y).unwrap();
        let w = t.tape.input("w", ys);
        let f = {
            let mut r = t.tape.trace();
            let prod = r.mul(&y, &w).unwrap();
            r.sum_all(&prod).unwrap()
        };
        Grad { t, f, w }
    }

    fn value_at(g: &Grad, x: &[f32], w: &[f32]) -> f32 {
        let mut run = Run::new(&g.t.tape);
        let (xn, xs) = (g.t.inputs[0].node, g.t.inputs[0].shape);
        run.set(xn, Tensor::new(xs, x.to_vec()).unwrap()).unwrap();
        let ws = g.t.tape.shape(g.w).unwrap();
        run.set(g.w, Tensor::new(ws, w.to_vec()).unwrap()).unwrap();
        run.forward().unwrap();
        run.value(g.f).unwrap().data[0]
    }

    /// The gradient with respect to `x` (every reader the same bits), and the analytic one of
    /// the naive reading: max pool sends each window's `w` to its first maximum, average pool
    /// `w / divisor` to each real tap.
    fn gradients(p: &Pool3, dims: &[usize], x: &[f32], w: &[f32]) -> (Grad, Vec<f32>, Vec<f64>) {
        let mut g = grad_tape(p, dims);
        let xn = g.t.inputs[0].node;
        let (_, grads) =
            value_and_gradients(&mut g.t.tape, g.f, &[(xn, x.to_vec()), (g.w, w.to_vec())]);
        let n = naive3(p, dims, x);
        let mut want = vec![0.0f64; x.len()];
        for (k, &wk) in w.iter().enumerate() {
            if p.max {
                want[n.argmax[k]] += f64::from(wk);
            } else {
                for &i in &n.taps[k] {
                    want[i] += f64::from(wk) / n.divisor[k];
                }
            }
        }
        (g, grads[0].clone().unwrap(), want)
    }

    #[test]
    fn the_gradient_matches_central_finite_differences() {
        let mut rng = SplitMix64::new(5);
        for (p, dims) in configs() {
            let elems: usize = dims.iter().product();
            // Distinct values 1/8 apart (no ties, so max pool is differentiable at x), and a
            // step of 1/64: every perturbed value is exact in f32 and no maximum changes.
            let mut x: Vec<f32> = (0..elems).map(|k| k as f32 / 8.0 - 2.0).collect();
            for k in (1..elems).rev() {
                x.swap(k, rng.below(k + 1));
            }
            let n = naive3(&p, &dims, &x);
            let w: Vec<f32> = (0..n.y.len())
                .map(|_| -1.0 + 2.0 * rng.next_f32())
                .collect();
            let (g, grad, want) = gradients(&p, &dims, &x, &w);
            let h = 1.0 / 64.0;
            for i in 0..elems {
                let mut xp = x.clone();
                xp[i] += h;
                let mut xm = x.clone();
                xm[i] -= h;
                let fd = (f64::from(value_at(&g, &xp, &w)) - f64::from(value_at(&g, &xm, &w)))
                    / (2.0 * f64::from(h));
                assert!(
                    (f64::from(grad[i]) - fd).abs() <= 1e-3,
                    "{p:?}: element {i}: gradient {} vs finite difference {fd}",
                    grad[i]
                );
                assert!(
                    (f64::from(grad[i]) - want[i]).abs() <= 1e-6,
                    "{p:?}: element {i}: gradient {} vs {}",
                    grad[i],
                    want[i]
                );
            }
        }
    }

    /// Max pool with ties: each window's cotangent goes to its first maximum in row-major
    /// `(d, h, w)` order, first by `d`, then by `(h, w)` (a composition in the other order,
    /// `D` then `(H, W)`, would pick `(d=1, h=0)` in the literal case).
    #[test]
    fn max_pool_3d_ties_send_the_gradient_to_the_first_maximum_by_d_then_h_w() {
        // One 2x2x2 window over x: [1, 1, 2, 2, 2]: the maximum 5 at (d=0, h=1, w=0),
        // (d=1, h=0, w=0) and (d=1, h=1, w=1): the first is (0, 1, 0), flat index 2.
        let p = Pool3 {
            max: true,
            kernel: [2, 2, 2],
            strides: [1, 1, 1],
            dilations: [1, 1, 1],
            pads: [0; 6],
            ceil: false,
            include: false,
        };
        let x = [1.0, 0.0, 5.0, 2.0, 5.0, 3.0, 1.0, 5.0];
        let (_, grad, _) = gradients(&p, &[1, 1, 2, 2, 2], &x, &[1.0]);
        assert_eq!(grad, [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        // Random ties (values in {0, 1, 2}) over every max configuration: the naive first
        // maximum, exactly (the cotangents are small integers, their sums exact).
        let mut rng = SplitMix64::new(9);
        for (p, dims) in configs().into_iter().filter(|(p, _)| p.max) {
            let elems: usize = dims.iter().product();
            let x: Vec<f32> = (0..elems).map(|_| rng.below(3) as f32).collect();
            let outs = naive3(&p, &dims, &x).y.len();
            let w: Vec<f32> = (0..outs).map(|_| 1.0 + rng.below(4) as f32).collect();
            let (_, grad, want) = gradients(&p, &dims, &x, &w);
            let want: Vec<f32> = want.iter().map(|&v| v as f32).collect();
            assert_eq!(grad, want, "{p:?}");
        }
    }

    /// 2-D `AveragePool` with `ceil_mode` and `count_include_pad=1` whose last window passes the
    /// end padding (the same explicit-pad step as 3-D): the divisor counts the explicit padding
    /// and not the overhang (ONNX's reference, PyTorch). Per axis (extent 4, pads `[1, 0]`,
    /// kernel 2, stride 2, 3 windows): real taps `[1, 2, 1]`, counted taps `[2, 2, 1]`; over
    /// ones the output is the outer product of `[1/2, 1, 1]` with itself.
    #[test]
    fn ceil_mode_with_count_include_pad_counts_the_explicit_padding_not_the_overhang() {
        let attrs = vec![
            attr_ints("kernel_shape", &[2, 2]),
            attr_ints("strides", &[2, 2]),
            attr_ints("pads", &[1, 1, 0, 0]),
            attr_int("ceil_mode", 1),
            attr_int("count_include_pad", 1),
        ];
        let m = model(
            vec![node("AveragePool", &["y"], attrs)],
            &[1, 1, 4, 4],
            &["y"],
        );
        let t = translated(&m);
        assert_eq!(t.outputs[0].dims, [1, 1, 3, 3]);
        let out = run_forward(&t, &BTreeMap::from([("x".to_owned(), vec![1.0; 16])])).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&out.oracle[0]), bits(&out.runtime[0]));
        let a = [0.5f32, 1.0, 1.0];
        let want: Vec<f32> = a
            .iter()
            .flat_map(|&r| a.iter().map(move |&c| r * c))
            .collect();
        assert_eq!(out.oracle[0], want);
    }

    /// Hostile 3-D pooling attributes (huge pads, kernels, strides, dilations; with
    /// `ceil_mode` and `count_include_pad=1`, the explicit-pad step) are errors, never panics.
    #[test]
    fn hostile_3d_pool_attributes_are_errors_never_panics() {
        let big = 1usize << 62;
        let cases: Vec<Vec<AttributeProto>> = vec![
            vec![
                attr_ints("kernel_shape", &[2, 2, 2]),
                attr_ints("pads", &[big, 0, 0, big, 0, 0]),
                attr_int("ceil_mode", 1),
                attr_int("count_include_pad", 1),
                attr_ints("strides", &[3, 1, 1]),
            ],
            vec![
                attr_ints("kernel_shape", &[2, 2, 2]),
                attr_ints("pads", &[70_000, 0, 0, 0, 0, 0]),
                attr_int("ceil_mode", 1),
                attr_int("count_include_pad", 1),
            ],
            vec![
                attr_ints("kernel_shape", &[2, 2, 2]),
                attr_ints("pads", &[0, 0, i64::MAX as usize, 0, 0, i64::MAX as usize]),
                attr_int("ceil_mode", 1),
                attr_int("count_include_pad", 1),
                attr_ints("strides", &[1, 1, 2]),
            ],
            vec![attr_ints("kernel_shape", &[70_000, 1, 1])],
            vec![
                attr_ints("kernel_shape", &[2, 2, 2]),
                attr_ints("strides", &[big, big, big]),
                attr_ints("dilations", &[big, 1, 1]),
            ],
            vec![attr_ints("kernel_shape", &[2, 2])],
        ];
        for attrs in cases {
            for op in ["AveragePool", "MaxPool"] {
                let attrs: Vec<AttributeProto> = attrs
                    .iter()
                    .filter(|a| op == "AveragePool" || a.name() != "count_include_pad")
                    .cloned()
                    .collect();
                let m = model(vec![node(op, &["y"], attrs)], &[1, 1, 3, 3, 3], &["y"]);
                assert!(translate(&m, &TranslateOptions::default()).is_err(), "{op}");
            }
        }
    }

    /// A rank-5 value reaches only the pooling rows: another operator, a 3-D MaxPool's
    /// Indices output and a 3-D Conv are `Unsupported`, naming the rank or the output.
    #[test]
    fn a_rank_5_value_outside_pooling_is_unsupported_naming_the_rank() {
        let unsupported = |m: ModelProto| match translate(&m, &TranslateOptions::default()) {
            Err(e @ OnnxError::Unsupported { .. }) => e.to_string(),
            Err(e) => panic!("not Unsupported: {e}"),
            Ok(_) => panic!("translated"),
        };
        let dims = [1, 2, 3, 4, 4];
        let e = unsupported(model(vec![node("Relu", &["y"], vec![])], &dims, &["y"]));
        assert!(e.contains("rank 5") && e.contains("[1, 2, 3, 4, 4]"), "{e}");
        let pool = vec![attr_ints("kernel_shape", &[2, 2, 2])];
        let e = unsupported(model(
            vec![node("MaxPool", &["y", "i"], pool.clone())],
            &dims,
            &["y", "i"],
        ));
        assert!(e.contains("Indices"), "{e}");
        // A pooling's rank-5 output is as rank-5 to the next operator.
        let mut relu = node("Relu", &["z"], vec![]);
        relu.input = vec!["y".into()];
        let e = unsupported(model(
            vec![node("MaxPool", &["y"], pool), relu],
            &dims,
            &["z"],
        ));
        assert!(e.contains("Relu") && e.contains("rank 5"), "{e}");
        // A 3-D Conv: its weight is rank 5 too.
        let mut conv = node("Conv", &["y"], vec![]);
        conv.input.push("wt".into());
        let mut m = model(vec![conv], &dims, &["y"]);
        let g = m.graph.as_mut().unwrap();
        g.initializer
            .push(tapeplan_planner::model::onnx::proto::TensorProto {
                name: Some("wt".into()),
                dims: vec![1, 2, 1, 1, 1],
                data_type: Some(DataType::Float as i32),
                float_data: vec![1.0, 2.0],
                ..Default::default()
            });
        let e = unsupported(m);
        assert!(e.contains("rank 5"), "{e}");
    }
}
