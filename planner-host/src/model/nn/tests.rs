//! The layer API against PyTorch's documented formulas: shapes, forward values computed
//! independently in `f64` loops, batch normalization's running statistics, initialization
//! bounds and determinism, and `state_dict` names.

use tapeplan_core::{NodeId, Run, Shape, Tape, Tensor};

use super::*;
use crate::model::graph::{ForwardCx, Mode, Model, ParamKind, RngLeaves};
use crate::protocol::SplitMix64;

/// What one recorded forward computed.
#[derive(Debug)]
struct Outcome {
    y: Vec<f32>,
    y_shape: Vec<usize>,
    /// Buffer updates: (index into the model's parameters, new value).
    updates: Vec<(usize, Vec<f32>)>,
}

/// Deterministic values uniform in `[-2, 2)`.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut r = SplitMix64::new(seed);
    (0..n).map(|_| 4.0 * r.next_f32() - 2.0).collect()
}

/// Records `model` at `batch` on a fresh tape, runs it with core's `Run` over `x`, the model's
/// own initial values (or `params` when given) and the generator `(key, counter)`.
fn run_model(
    model: &Sequential,
    x: &[f32],
    batch: usize,
    mode: Mode,
    params: Option<&[Vec<f32>]>,
    rng: Option<(f32, f32)>,
) -> Result<Outcome, ModelError> {
    let specs = Model::parameters(model)?;
    let inputs = model.inputs(batch)?;
    let mut tape = Tape::new();
    let xs: Vec<NodeId> = inputs
        .iter()
        .map(|i| tape.input(&i.name, i.shape))
        .collect();
    let leaves: Vec<NodeId> = specs
        .iter()
        .map(|s| tape.parameter(&s.name, s.shape))
        .collect();
    let rng_leaves = rng.map(|_| RngLeaves {
        key: tape.parameter("rng.key", Shape::SCALAR),
        counter: tape.parameter("rng.counter", Shape::SCALAR),
    });
    let fwd = model.record(
        &mut tape,
        &ForwardCx {
            batch,
            mode,
            inputs: &xs,
            params: &leaves,
            rng: rng_leaves,
        },
    )?;
    let mut run = Run::new(&tape);
    run.set(xs[0], Tensor::new(inputs[0].shape, x.to_vec())?)?;
    for (i, (leaf, spec)) in leaves.iter().zip(&specs).enumerate() {
        let v = params.map_or(spec.init.clone(), |p| p[i].clone());
        run.set(*leaf, Tensor::new(spec.shape, v)?)?;
    }
    if let (Some(l), Some((key, counter))) = (rng_leaves, rng) {
        run.set(l.key, Tensor::scalar(key))?;
        run.set(l.counter, Tensor::scalar(counter))?;
    }
    run.forward()?;
    let get = |id: NodeId| -> Tensor { run.value(id).cloned().unwrap_or(Tensor::scalar(f32::NAN)) };
    let y = get(fwd.output);
    Ok(Outcome {
        y_shape: y.shape.dims()[..y.shape.rank()].to_vec(),
        y: y.data,
        updates: fwd
            .buffer_updates
            .iter()
            .map(|&(i, v)| (i, get(v).data))
            .collect(),
    })
}

/// Asserts `got` (f32) is within `abs + rel · |want|` of `want` (f64), element by element.
fn assert_close(got: &[f32], want: &[f64], abs: f64, rel: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (f64::from(g) - w).abs();
        assert!(
            err <= abs + rel * w.abs(),
            "{what}[{i}]: got {g}, want {w} (error {err:e})"
        );
    }
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&a| f64::from(a)).collect()
}

/// PyTorch's documented output extent of a window (`nn.Conv1d`'s "Shape" section).
fn torch_extent(len: usize, k: usize, s: usize, p: usize, d: usize) -> usize {
    (len + 2 * p - d * (k - 1) - 1) / s + 1
}

/// A 1-D convolution in f64: `x [n, c_in, l]`, `w [c_out, c_in / g, k]`.
#[allow(clippy::too_many_arguments)]
fn conv1d_ref(
    x: &[f64],
    w: &[f64],
    b: &[f64],
    (n, c_in, l): (usize, usize, usize),
    (c_out, k): (usize, usize),
    (s, p, d, g): (usize, usize, usize, usize),
) -> Vec<f64> {
    let lo = torch_extent(l, k, s, p, d);
    let (cig, cog) = (c_in / g, c_out / g);
    let mut y = vec![0.0; n * c_out * lo];
    for ni in 0..n {
        for co in 0..c_out {
            let grp = co / cog;
            for o in 0..lo {
                let mut acc = b[co];
                for ci in 0..cig {
                    for t in 0..k {
                        let pos = (o * s + t * d) as isize - p as isize;
                        if pos >= 0 && (pos as usize) < l {
                            let xv = x[(ni * c_in + grp * cig + ci) * l + pos as usize];
                            acc += xv * w[(co * cig + ci) * k + t];
                        }
                    }
                }
                y[(ni * c_out + co) * lo + o] = acc;
            }
        }
    }
    y
}

#[test]
fn conv_and_pool_shapes_follow_pytorch_formulas() {
    for &(l, k, s, p, d) in &[
        (40, 5, 2, 1, 1),
        (19, 3, 2, 1, 1),
        (10, 3, 2, 1, 1),
        (17, 4, 3, 2, 2),
        (8, 8, 1, 0, 1),
        (9, 2, 2, 0, 1),
    ] {
        let want = torch_extent(l, k, s, p, d);
        let conv = Conv1d::new(3, 4, k).stride(s).padding(p).dilation(d);
        assert_eq!(
            conv.output_shape(&[3, l]),
            Ok(vec![4, want]),
            "conv {l} {k} {s} {p} {d}"
        );
        let m = Sequential::new(&[3, l]).push(conv);
        let out = run_model(&m, &values(2 * 3 * l, 1), 2, Mode::Eval, None, None).unwrap();
        assert_eq!(out.y_shape, vec![2, 4, want]);
        if 2 * p <= k {
            let pool = MaxPool1d::new(k).stride(s).padding(p).dilation(d);
            assert_eq!(pool.output_shape(&[3, l]), Ok(vec![3, want]));
            let avg = AvgPool1d::new(k).stride(s).padding(p);
            assert_eq!(
                avg.output_shape(&[3, l]),
                Ok(vec![3, torch_extent(l, k, s, p, 1)])
            );
        }
    }
    let c2 = Conv2d::new(2, 6, 3)
        .kernel_size_hw([3, 5])
        .stride_hw([1, 2])
        .padding_hw([1, 2]);
    assert_eq!(
        c2.output_shape(&[2, 8, 11]),
        Ok(vec![
            6,
            torch_extent(8, 3, 1, 1, 1),
            torch_extent(11, 5, 2, 2, 1)
        ])
    );
    assert_eq!(
        MaxPool2d::new(2).output_shape(&[3, 7, 6]),
        Ok(vec![3, 3, 3])
    );
    assert_eq!(
        AdaptiveAvgPool1d::new(4).output_shape(&[3, 12]),
        Ok(vec![3, 4])
    );
    assert_eq!(
        AdaptiveAvgPool2d::new(1).output_shape(&[3, 6, 4]),
        Ok(vec![3, 1, 1])
    );
    assert_eq!(GlobalAvgPool.output_shape(&[5, 6, 4]), Ok(vec![5, 1, 1]));
    assert_eq!(Flatten.output_shape(&[25, 5]), Ok(vec![125]));
    assert_eq!(Linear::new(8, 3).output_shape(&[7, 8]), Ok(vec![7, 3]));
    assert_eq!(Embedding::new(10, 4).output_shape(&[6]), Ok(vec![6, 4]));
    assert!(AdaptiveAvgPool1d::new(5).output_shape(&[3, 12]).is_err());
    assert!(Conv1d::new(3, 4, 3)
        .groups(2)
        .output_shape(&[3, 9])
        .is_err());
    assert!(Conv1d::new(3, 4, 9).output_shape(&[3, 5]).is_err());
}

#[test]
fn widths_that_do_not_chain_are_errors_naming_the_layer() {
    let m = Sequential::new(&[1, 40])
        .push(Conv1d::new(1, 25, 5).stride(2).padding(1))
        .push(ReLU)
        .push(Flatten)
        .push_named("fc", Linear::new(125, 10));
    let e = m.output_shape().unwrap_err().to_string();
    assert!(e.contains("layer fc (Linear)"), "{e}");
    assert!(e.contains("expects 125 input features, got 475"), "{e}");
    let m = Sequential::new(&[2, 40]).push(Conv1d::new(1, 4, 3));
    let e = Model::parameters(&m).unwrap_err().to_string();
    assert!(e.contains("layer 0 (Conv1d)") && e.contains("expects 1 input channels, got 2"));
    let long = Sequential::new(&[4]).push_named("a_rather_long_layer_name", Linear::new(4, 2));
    // A key past the plan format's 24 bytes is no error: it takes its shortened plan name.
    let specs = Model::parameters(&long).unwrap();
    assert_eq!(
        specs[0].name,
        crate::model::names::plan_name("a_rather_long_layer_name.weight")
    );
    assert!(
        specs[0].name.starts_with("a_rather_long_l~"),
        "{}",
        specs[0].name
    );
    let twice = Sequential::new(&[4])
        .push_named("fc", Linear::new(4, 4))
        .push_named("fc", Linear::new(4, 2));
    assert!(Model::parameters(&twice)
        .unwrap_err()
        .to_string()
        .contains("\"fc.weight\""));
    let e = Sequential::block().push(ReLU).output_shape().unwrap_err();
    assert!(e.to_string().contains("input shape"));
    assert!(Sequential::new(&[4]).inputs(0).is_err());
}

#[test]
fn names_and_kinds_follow_the_state_dict() {
    let m = Sequential::new(&[1, 8])
        .push_named(
            "f",
            Sequential::block()
                .push(Conv1d::new(1, 2, 3))
                .push(BatchNorm1d::new(2))
                .push(ReLU),
        )
        .push(Flatten)
        .push_named("fc", Linear::new(12, 3));
    let specs = Model::parameters(&m).unwrap();
    let got: Vec<(&str, Vec<usize>, ParamKind)> = specs
        .iter()
        .map(|p| {
            (
                p.name.as_str(),
                p.shape.dims()[..p.shape.rank()].to_vec(),
                p.kind,
            )
        })
        .collect();
    use ParamKind::{Buffer as B, Parameter as P};
    assert_eq!(
        got,
        vec![
            ("f.0.weight", vec![2, 1, 3], P),
            ("f.0.bias", vec![2], P),
            ("f.1.weight", vec![2], P),
            ("f.1.bias", vec![2], P),
            ("f.1.running_mean", vec![2], B),
            ("f.1.running_var", vec![2], B),
            ("f.1.num_batches_tracked", vec![], B),
            ("fc.weight", vec![3, 12], P),
            ("fc.bias", vec![3], P),
        ]
    );
    // The plan format holds names of at most 24 bytes: a longer key takes its shortened plan
    // name (15 bytes, `~`, 8 hex digits of its FNV-1a hash), and `names` keeps the mapping.
    let long = Sequential::new(&[1, 8])
        .push_named("features", Sequential::block().push(BatchNorm1d::new(1)));
    let specs = Model::parameters(&long).unwrap();
    let key = "features.0.num_batches_tracked"; // 30 bytes
    let short = crate::model::names::plan_name(key);
    assert!(
        short.starts_with("features.0.num_~") && short.len() == 24,
        "{short}"
    );
    assert_eq!(specs[4].name, short);
    assert_eq!(specs[3].name, "features.0.running_var");
    let names = long.names().unwrap();
    assert_eq!(names[4], (key.to_owned(), short));
    assert_eq!(names[3].0, names[3].1);
    assert_eq!(
        m.inputs(5).unwrap()[0].shape,
        Shape::new(&[5, 1, 8]).unwrap()
    );
    assert!(!m.uses_rng());
}

#[test]
fn linear_is_x_times_w_transposed_plus_b() {
    let (n, i, o) = (3, 5, 4);
    let m = Sequential::new(&[i]).push(Linear::new(i, o)).seed(3);
    let x = values(n * i, 2);
    let specs = Model::parameters(&m).unwrap();
    let (w, b) = (f64s(&specs[0].init), f64s(&specs[1].init));
    let mut want = vec![0.0; n * o];
    for r in 0..n {
        for c in 0..o {
            want[r * o + c] = b[c]
                + (0..i)
                    .map(|k| f64::from(x[r * i + k]) * w[c * i + k])
                    .sum::<f64>();
        }
    }
    let out = run_model(&m, &x, n, Mode::Eval, None, None).unwrap();
    assert_eq!(out.y_shape, vec![n, o]);
    assert_close(&out.y, &want, 1e-6, 1e-5, "linear");
    // A rank-3 input folds its leading dimension into the product.
    let m3 = Sequential::new(&[2, i])
        .push(Linear::new(i, o).bias(false))
        .seed(3);
    let x3 = values(n * 2 * i, 4);
    let w3 = f64s(&Model::parameters(&m3).unwrap()[0].init);
    let out = run_model(&m3, &x3, n, Mode::Eval, None, None).unwrap();
    assert_eq!(out.y_shape, vec![n, 2, o]);
    let want: Vec<f64> = (0..n * 2)
        .flat_map(|r| {
            let (x3, w3) = (&x3, &w3);
            (0..o).map(move |c| {
                (0..i)
                    .map(|k| f64::from(x3[r * i + k]) * w3[c * i + k])
                    .sum()
            })
        })
        .collect();
    assert_close(&out.y, &want, 1e-6, 1e-5, "linear rank 3");
}

#[test]
fn conv1d_matches_a_direct_loop_with_stride_padding_dilation_and_groups() {
    for &(c_in, c_out, l, k, s, p, d, g) in &[
        (1, 25, 40, 5, 2, 1, 1, 1),
        (4, 6, 13, 3, 2, 2, 2, 2),
        (3, 3, 9, 3, 1, 1, 1, 3),
    ] {
        let n = 2;
        let m = Sequential::new(&[c_in, l])
            .push(
                Conv1d::new(c_in, c_out, k)
                    .stride(s)
                    .padding(p)
                    .dilation(d)
                    .groups(g),
            )
            .seed(11);
        let x = values(n * c_in * l, 5);
        let specs = Model::parameters(&m).unwrap();
        let want = conv1d_ref(
            &f64s(&x),
            &f64s(&specs[0].init),
            &f64s(&specs[1].init),
            (n, c_in, l),
            (c_out, k),
            (s, p, d, g),
        );
        let out = run_model(&m, &x, n, Mode::Eval, None, None).unwrap();
        assert_eq!(out.y_shape, vec![n, c_out, torch_extent(l, k, s, p, d)]);
        assert_close(&out.y, &want, 1e-5, 1e-5, "conv1d");
    }
}

#[test]
fn conv2d_matches_a_direct_loop() {
    let (n, c_in, c_out, h, w, kh, kw) = (2, 2, 3, 6, 7, 3, 2);
    let (sh, sw, ph, pw) = (2, 1, 1, 0);
    let m = Sequential::new(&[c_in, h, w])
        .push(
            Conv2d::new(c_in, c_out, kh)
                .kernel_size_hw([kh, kw])
                .stride_hw([sh, sw])
                .padding_hw([ph, pw]),
        )
        .seed(5);
    let x = values(n * c_in * h * w, 6);
    let specs = Model::parameters(&m).unwrap();
    let (wt, b) = (f64s(&specs[0].init), f64s(&specs[1].init));
    let (ho, wo) = (
        torch_extent(h, kh, sh, ph, 1),
        torch_extent(w, kw, sw, pw, 1),
    );
    let mut want = vec![0.0; n * c_out * ho * wo];
    for ni in 0..n {
        for co in 0..c_out {
            for oy in 0..ho {
                for ox in 0..wo {
                    let mut acc = b[co];
                    for ci in 0..c_in {
                        for ty in 0..kh {
                            for tx in 0..kw {
                                let (iy, ix) = (
                                    (oy * sh + ty) as isize - ph as isize,
                                    (ox * sw + tx) as isize - pw as isize,
                                );
                                if iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < w {
                                    let xv = f64::from(
                                        x[((ni * c_in + ci) * h + iy as usize) * w + ix as usize],
                                    );
                                    acc += xv * wt[((co * c_in + ci) * kh + ty) * kw + tx];
                                }
                            }
                        }
                    }
                    want[((ni * c_out + co) * ho + oy) * wo + ox] = acc;
                }
            }
        }
    }
    let out = run_model(&m, &x, n, Mode::Eval, None, None).unwrap();
    assert_eq!(out.y_shape, vec![n, c_out, ho, wo]);
    assert_close(&out.y, &want, 1e-5, 1e-5, "conv2d");
}

/// A 1-D pooling in f64 over `[rows, l]`: max (padding never picked) or average (padding
/// counted in the divisor, PyTorch's default).
fn pool1d_ref(
    x: &[f64],
    rows: usize,
    l: usize,
    k: usize,
    s: usize,
    p: usize,
    max: bool,
) -> Vec<f64> {
    let lo = torch_extent(l, k, s, p, 1);
    let mut y = Vec::new();
    for r in 0..rows {
        for o in 0..lo {
            let taps: Vec<f64> = (0..k)
                .filter_map(|t| {
                    let pos = (o * s + t) as isize - p as isize;
                    (pos >= 0 && (pos as usize) < l).then(|| x[r * l + pos as usize])
                })
                .collect();
            y.push(if max {
                taps.iter().copied().fold(f64::NEG_INFINITY, f64::max)
            } else {
                taps.iter().sum::<f64>() / k as f64
            });
        }
    }
    y
}

#[test]
fn pools_match_direct_loops() {
    let (n, c, l) = (2, 3, 11);
    let x = values(n * c * l, 7);
    let xf = f64s(&x);
    for &(k, s, p) in &[(2, 2, 0), (3, 2, 1), (4, 1, 2)] {
        let mx = Sequential::new(&[c, l]).push(MaxPool1d::new(k).stride(s).padding(p));
        let out = run_model(&mx, &x, n, Mode::Eval, None, None).unwrap();
        assert_close(
            &out.y,
            &pool1d_ref(&xf, n * c, l, k, s, p, true),
            0.0,
            0.0,
            "max_pool1d",
        );
        let av = Sequential::new(&[c, l]).push(AvgPool1d::new(k).stride(s).padding(p));
        let out = run_model(&av, &x, n, Mode::Eval, None, None).unwrap();
        assert_close(
            &out.y,
            &pool1d_ref(&xf, n * c, l, k, s, p, false),
            1e-6,
            1e-6,
            "avg_pool1d",
        );
    }
    // AdaptiveAvgPool1d(3) of 12 is AvgPool1d(4); global pooling is the mean per channel.
    let x12 = values(n * c * 12, 8);
    let ad = Sequential::new(&[c, 12]).push(AdaptiveAvgPool1d::new(3));
    let out = run_model(&ad, &x12, n, Mode::Eval, None, None).unwrap();
    assert_close(
        &out.y,
        &pool1d_ref(&f64s(&x12), n * c, 12, 4, 4, 0, false),
        1e-6,
        1e-6,
        "adaptive",
    );
    let gp = Sequential::new(&[c, 12]).push(GlobalAvgPool).push(Flatten);
    let out = run_model(&gp, &x12, n, Mode::Eval, None, None).unwrap();
    assert_eq!(out.y_shape, vec![n, c]);
    assert_close(
        &out.y,
        &pool1d_ref(&f64s(&x12), n * c, 12, 12, 12, 0, false),
        1e-6,
        1e-6,
        "global",
    );
    // 2-D max pooling of a [1, 1, 4, 4] ramp by 2: the bottom-right corner of each block.
    let ramp: Vec<f32> = (0..16).map(|v| v as f32).collect();
    let m2 = Sequential::new(&[1, 4, 4]).push(MaxPool2d::new(2));
    let out = run_model(&m2, &ramp, 1, Mode::Eval, None, None).unwrap();
    assert_eq!(out.y, vec![5.0, 7.0, 13.0, 15.0]);
    let a2 = Sequential::new(&[1, 4, 4]).push(AvgPool2d::new(2));
    let out = run_model(&a2, &ramp, 1, Mode::Eval, None, None).unwrap();
    assert_eq!(out.y, vec![2.5, 4.5, 10.5, 12.5]);
}

#[test]
fn batch_norm_trains_with_batch_statistics_and_updates_running_stats_as_pytorch() {
    let (n, c, l) = (4, 3, 5);
    let m = Sequential::new(&[c, l]).push(BatchNorm1d::new(c).momentum(0.1));
    let x = values(n * c * l, 9);
    let weight = vec![1.5f32, -0.5, 2.0];
    let bias = vec![0.25f32, 0.0, -1.0];
    let rm0 = vec![0.1f32, -0.2, 0.3];
    let rv0 = vec![1.0f32, 2.0, 0.5];
    let params = vec![
        weight.clone(),
        bias.clone(),
        rm0.clone(),
        rv0.clone(),
        vec![7.0],
    ];
    let out = run_model(&m, &x, n, Mode::Train, Some(&params), None).unwrap();
    let count = (n * l) as f64;
    let mut want = vec![0.0; n * c * l];
    let (mut want_rm, mut want_rv) = (vec![0.0; c], vec![0.0; c]);
    for ch in 0..c {
        let vals: Vec<(usize, f64)> = (0..n)
            .flat_map(|ni| (0..l).map(move |t| ni * c * l + ch * l + t))
            .map(|i| (i, f64::from(x[i])))
            .collect();
        let mean = vals.iter().map(|v| v.1).sum::<f64>() / count;
        let ss = vals.iter().map(|v| (v.1 - mean).powi(2)).sum::<f64>();
        let var = ss / count;
        for &(i, v) in &vals {
            want[i] =
                (v - mean) / (var + 1e-5).sqrt() * f64::from(weight[ch]) + f64::from(bias[ch]);
        }
        // PyTorch: running = (1 − momentum) · running + momentum · stat, unbiased variance.
        want_rm[ch] = 0.9 * f64::from(rm0[ch]) + 0.1 * mean;
        want_rv[ch] = 0.9 * f64::from(rv0[ch]) + 0.1 * ss / (count - 1.0);
    }
    assert_close(&out.y, &want, 1e-5, 1e-5, "batch_norm train");
    let updates: Vec<usize> = out.updates.iter().map(|u| u.0).collect();
    assert_eq!(updates, vec![2, 3, 4]);
    assert_close(&out.updates[0].1, &want_rm, 1e-6, 1e-5, "running_mean");
    assert_close(&out.updates[1].1, &want_rv, 1e-6, 1e-5, "running_var");
    assert_eq!(out.updates[2].1, vec![8.0], "num_batches_tracked");
    // Eval normalizes with the running statistics and updates nothing.
    let out = run_model(&m, &x, n, Mode::Eval, Some(&params), None).unwrap();
    assert!(out.updates.is_empty());
    let want: Vec<f64> = (0..n * c * l)
        .map(|i| {
            let ch = (i / l) % c;
            (f64::from(x[i]) - f64::from(rm0[ch])) / (f64::from(rv0[ch]) + 1e-5).sqrt()
                * f64::from(weight[ch])
                + f64::from(bias[ch])
        })
        .collect();
    assert_close(&out.y, &want, 1e-5, 1e-5, "batch_norm eval");
}

#[test]
fn batch_norm_in_eval_mode_trains_with_running_statistics_and_leaves_them() {
    let (n, c, l) = (4, 3, 5);
    let x = values(n * c * l, 9);
    let params = vec![
        vec![1.5f32, -0.5, 2.0],
        vec![0.25f32, 0.0, -1.0],
        vec![0.1f32, -0.2, 0.3],
        vec![1.0f32, 2.0, 0.5],
        vec![7.0],
    ];
    let frozen = Sequential::new(&[c, l]).push(BatchNorm1d::new(c).eval_mode(true));
    let plain = Sequential::new(&[c, l]).push(BatchNorm1d::new(c));
    let train = run_model(&frozen, &x, n, Mode::Train, Some(&params), None).unwrap();
    let eval = run_model(&plain, &x, n, Mode::Eval, Some(&params), None).unwrap();
    assert!(train.updates.is_empty(), "no running statistic is updated");
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(&train.y),
        bits(&eval.y),
        "training output = evaluation output"
    );
    // Without the switch, training normalizes with the batch's statistics: other values.
    let batch = run_model(&plain, &x, n, Mode::Train, Some(&params), None).unwrap();
    assert_ne!(bits(&batch.y), bits(&eval.y));
}

#[test]
fn batch_norm2d_normalizes_over_batch_and_both_spatial_axes() {
    let (n, c, h, w) = (2, 2, 3, 2);
    let m = Sequential::new(&[c, h, w]).push(BatchNorm2d::new(c).affine(false));
    let specs = Model::parameters(&m).unwrap();
    assert_eq!(specs.len(), 3);
    let x = values(n * c * h * w, 10);
    let out = run_model(&m, &x, n, Mode::Train, None, None).unwrap();
    for ch in 0..c {
        let idx: Vec<usize> = (0..n)
            .flat_map(|ni| (0..h * w).map(move |s| (ni * c + ch) * h * w + s))
            .collect();
        let ys: Vec<f64> = idx.iter().map(|&i| f64::from(out.y[i])).collect();
        let mean = ys.iter().sum::<f64>() / ys.len() as f64;
        let var = ys.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / ys.len() as f64;
        assert!(mean.abs() < 1e-6, "channel {ch} mean {mean}");
        assert!((var - 1.0).abs() < 1e-3, "channel {ch} variance {var}");
    }
    assert_eq!(
        out.updates.iter().map(|u| u.0).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
}

#[test]
fn layer_norm_embedding_flatten_match_direct_loops() {
    let (n, t, d) = (2, 3, 4);
    let m = Sequential::new(&[t, d]).push(LayerNorm::new(&[d]));
    let x = values(n * t * d, 12);
    let mut params = Model::parameters(&m)
        .unwrap()
        .into_iter()
        .map(|p| p.init)
        .collect::<Vec<_>>();
    assert_eq!(params, vec![vec![1.0; d], vec![0.0; d]]);
    params = vec![vec![1.0, 2.0, -1.0, 0.5], vec![0.0, 0.1, 0.2, 0.3]];
    let out = run_model(&m, &x, n, Mode::Eval, Some(&params), None).unwrap();
    let mut want = Vec::new();
    for row in x.chunks(d) {
        let r = f64s(row);
        let mean = r.iter().sum::<f64>() / d as f64;
        let var = r.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / d as f64;
        for (j, v) in r.iter().enumerate() {
            want.push(
                (v - mean) / (var + 1e-5).sqrt() * f64::from(params[0][j])
                    + f64::from(params[1][j]),
            );
        }
    }
    assert_close(&out.y, &want, 1e-5, 1e-5, "layer_norm");

    let e = Sequential::new(&[3])
        .push(Embedding::new(5, 2))
        .push(Flatten);
    let table = Model::parameters(&e).unwrap()[0].init.clone();
    let ids = [4.0f32, 0.0, 2.0, 1.0, 1.0, 3.0];
    let out = run_model(&e, &ids, 2, Mode::Eval, None, None).unwrap();
    assert_eq!(out.y_shape, vec![2, 6]);
    let want: Vec<f32> = ids
        .iter()
        .flat_map(|&i| table[2 * i as usize..2 * i as usize + 2].to_vec())
        .collect();
    assert_eq!(out.y, want);
}

#[test]
fn activations_match_their_definitions() {
    let x = values(24, 13);
    let xf = f64s(&x);
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    type Definition = Box<dyn Fn(f64) -> f64>;
    let cases: Vec<(Sequential, Definition, &str)> = vec![
        (
            Sequential::new(&[24]).push(ReLU),
            Box::new(|v: f64| v.max(0.0)),
            "relu",
        ),
        (
            Sequential::new(&[24]).push(Tanh),
            Box::new(f64::tanh),
            "tanh",
        ),
        (
            Sequential::new(&[24]).push(Sigmoid),
            Box::new(sig),
            "sigmoid",
        ),
        (
            Sequential::new(&[24]).push(SiLU),
            Box::new(move |v| v * sig(v)),
            "silu",
        ),
        (
            Sequential::new(&[24]).push(GELU::new()),
            Box::new(|v: f64| 0.5 * v * (1.0 + libm::erf(v / 2f64.sqrt()))),
            "gelu",
        ),
        (
            Sequential::new(&[24]).push(GELU::tanh()),
            Box::new(|v: f64| {
                0.5 * v
                    * (1.0
                        + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v.powi(3))).tanh())
            }),
            "gelu tanh",
        ),
        (
            Sequential::new(&[24]).push(LeakyReLU::new(0.1)),
            Box::new(|v: f64| if v > 0.0 { v } else { 0.1 * v }),
            "leaky_relu",
        ),
        (
            Sequential::new(&[24]).push(ReLU6),
            Box::new(|v: f64| v.clamp(0.0, 6.0)),
            "relu6",
        ),
        (
            Sequential::new(&[24]).push(Hardtanh::new(-0.5, 1.0)),
            Box::new(|v: f64| v.clamp(-0.5, 1.0)),
            "hardtanh",
        ),
        (
            Sequential::new(&[24]).push(Hardsigmoid),
            Box::new(|v: f64| (v + 3.0).clamp(0.0, 6.0) / 6.0),
            "hardsigmoid",
        ),
        (
            Sequential::new(&[24]).push(Hardswish),
            Box::new(|v: f64| v * (v + 3.0).clamp(0.0, 6.0) / 6.0),
            "hardswish",
        ),
        (
            Sequential::new(&[24]).push(Softplus::default()),
            Box::new(|v: f64| (1.0 + v.exp()).ln()),
            "softplus",
        ),
    ];
    for (m, f, what) in cases {
        let out = run_model(&m, &x, 1, Mode::Eval, None, None).unwrap();
        let want: Vec<f64> = xf.iter().map(|&v| f(v)).collect();
        assert_close(&out.y, &want, 1e-6, 1e-5, what);
    }
    // Softmax and log-softmax along dim 1 of [4, 6] (and -1, the same axis).
    for dim in [1, -1] {
        let sm = Sequential::new(&[6]).push(Softmax::new(dim));
        let lsm = Sequential::new(&[6]).push(LogSoftmax::new(dim));
        let (a, b) = (
            run_model(&sm, &x, 4, Mode::Eval, None, None).unwrap(),
            run_model(&lsm, &x, 4, Mode::Eval, None, None).unwrap(),
        );
        let mut want_sm = Vec::new();
        let mut want_lsm = Vec::new();
        for row in xf.chunks(6) {
            let lse = row.iter().map(|v| v.exp()).sum::<f64>().ln();
            want_sm.extend(row.iter().map(|v| (v - lse).exp()));
            want_lsm.extend(row.iter().map(|v| v - lse));
        }
        assert_close(&a.y, &want_sm, 1e-6, 1e-5, "softmax");
        assert_close(&b.y, &want_lsm, 1e-6, 1e-5, "log_softmax");
    }
    assert!(Sequential::new(&[6])
        .push(Softmax::new(2))
        .output_shape()
        .is_err());
}

#[test]
fn dropout_layers_draw_their_own_streams_and_eval_is_the_identity() {
    let n = 2000;
    let m = Sequential::new(&[n])
        .push(Dropout::new(0.25))
        .push(Identity)
        .push(Dropout::new(0.25));
    assert!(m.uses_rng());
    let first = Sequential::new(&[n]).push(Dropout::new(0.25));
    let x = vec![1.0f32; n];
    let eval = run_model(&m, &x, 1, Mode::Eval, None, None).unwrap();
    assert_eq!(eval.y, x);
    let e = run_model(&first, &x, 1, Mode::Train, None, None).unwrap_err();
    assert!(e.to_string().contains("generator"), "{e}");
    let one = run_model(&first, &x, 1, Mode::Train, None, Some((7.0, 3.0))).unwrap();
    let kept = one.y.iter().filter(|&&v| v != 0.0).count();
    assert!(one.y.iter().all(|&v| v == 0.0 || v == 1.0 / 0.75));
    assert!(
        (kept as f64 / n as f64 - 0.75).abs() < 0.04,
        "kept {kept} of {n}"
    );
    // The next step draws another mask; the second layer of a model draws a third.
    let next = run_model(&first, &x, 1, Mode::Train, None, Some((7.0, 4.0))).unwrap();
    assert_ne!(one.y, next.y);
    let both = run_model(&m, &x, 1, Mode::Train, None, Some((7.0, 3.0))).unwrap();
    let second_alone: Vec<f32> = both
        .y
        .iter()
        .zip(&one.y)
        .map(|(&b, &a)| if a == 0.0 { f32::NAN } else { b / a })
        .collect();
    // Where the first layer kept, the second's mask shows through: not the first's again.
    assert!(second_alone.contains(&0.0));
    let same = Sequential::new(&[n])
        .push(Dropout::new(0.25))
        .push(Dropout::new(0.25));
    let a = run_model(&same, &x, 1, Mode::Train, None, Some((7.0, 3.0))).unwrap();
    assert_eq!(
        a.y, both.y,
        "the streams depend on the dropout index, not the layer index"
    );
}

#[test]
fn init_follows_pytorch_bounds_and_is_deterministic() {
    let m = |seed| {
        Sequential::new(&[4, 30])
            .push(Conv1d::new(4, 6, 3).groups(2))
            .push(Flatten)
            .push(Linear::new(6 * 28, 50))
            .push(BatchNorm1d::new(50))
            .push(Embedding::new(100, 100))
            .seed(seed)
    };
    let a = Model::parameters(&m(1)).unwrap();
    let b = Model::parameters(&m(1)).unwrap();
    let c = Model::parameters(&m(2)).unwrap();
    assert_eq!(a, b);
    assert_ne!(a[0].init, c[0].init);
    let check_uniform = |v: &[f32], fan_in: usize, what: &str| {
        let bound = 1.0 / (fan_in as f64).sqrt();
        assert!(
            v.iter().all(|&w| f64::from(w).abs() <= bound),
            "{what} bound"
        );
        let n = v.len() as f64;
        let mean = v.iter().map(|&w| f64::from(w)).sum::<f64>() / n;
        let var = v.iter().map(|&w| f64::from(w).powi(2)).sum::<f64>() / n;
        // U(−a, a): mean 0, variance a²/3 (within four standard errors).
        assert!(
            mean.abs() < 4.0 * bound / (3.0 * n).sqrt(),
            "{what} mean {mean}"
        );
        let var_se = bound * bound * (4.0f64 / 45.0 / n).sqrt();
        assert!(
            (var - bound * bound / 3.0).abs() < 4.0 * var_se,
            "{what} variance {var}"
        );
    };
    // Conv1d(4, 6, 3, groups=2): fan_in = 4 / 2 · 3 = 6; Linear(168, 50): fan_in = 168.
    check_uniform(&a[0].init, 6, "conv weight");
    check_uniform(&a[2].init, 168, "linear weight");
    check_uniform(&a[3].init, 168, "linear bias");
    assert_eq!(a[4].init, vec![1.0; 50]);
    assert_eq!(a[5].init, vec![0.0; 50]);
    assert_eq!(a[6].init, vec![0.0; 50]);
    assert_eq!(a[7].init, vec![1.0; 50]);
    assert_eq!(a[8].init, vec![0.0]);
    let e = &a[9].init;
    let n = e.len() as f64;
    let mean = e.iter().map(|&w| f64::from(w)).sum::<f64>() / n;
    let var = e
        .iter()
        .map(|&w| (f64::from(w) - mean).powi(2))
        .sum::<f64>()
        / n;
    assert!(mean.abs() < 0.04, "embedding mean {mean}");
    assert!((var - 1.0).abs() < 0.06, "embedding variance {var}");
    let tails = e.iter().filter(|&&w| w.abs() > 1.96).count() as f64 / n;
    assert!(
        (tails - 0.05).abs() < 0.01,
        "embedding two-sided 5% tail {tails}"
    );
}

#[test]
fn a_recorded_cnn_gradient_matches_central_differences_in_f64() {
    use tapeplan_core::{RunAs, TensorOf};
    // Conv → BatchNorm (training: batch statistics) → ReLU → MaxPool → Flatten → Linear, a
    // cross-entropy loss; the recorded gradient, run in f64, against central differences.
    let m = Sequential::new(&[2, 8])
        .push(Conv1d::new(2, 3, 3).padding(1))
        .push(BatchNorm1d::new(3))
        .push(Tanh)
        .push(MaxPool1d::new(2))
        .push(Flatten)
        .push_named("fc", Linear::new(12, 4))
        .seed(21);
    let batch = 3;
    let specs = Model::parameters(&m).unwrap();
    let mut tape = Tape::new();
    let x = tape.input("x", m.inputs(batch).unwrap()[0].shape);
    let labels = tape.input("labels", Shape::vector(batch));
    let leaves: Vec<NodeId> = specs
        .iter()
        .map(|s| tape.parameter(&s.name, s.shape))
        .collect();
    let fwd = m
        .record(
            &mut tape,
            &ForwardCx {
                batch,
                mode: Mode::Train,
                inputs: &[x],
                params: &leaves,
                rng: None,
            },
        )
        .unwrap();
    assert_eq!(
        fwd.buffer_updates.iter().map(|u| u.0).collect::<Vec<_>>(),
        vec![4, 5, 6]
    );
    let loss =
        crate::model::softmax_cross_entropy(&mut tape.trace(), &fwd.output, &labels).unwrap();
    let trainable: Vec<NodeId> = specs
        .iter()
        .zip(&leaves)
        .filter(|(s, _)| s.kind == ParamKind::Parameter)
        .map(|(_, l)| *l)
        .collect();
    let adjoints = tape.differentiate(loss, &trainable).unwrap();
    let xv: Vec<f64> = f64s(&values(batch * 16, 22));
    let lv = vec![0.0, 3.0, 1.0];
    let mut pv: Vec<Vec<f64>> = specs.iter().map(|s| f64s(&s.init)).collect();
    // Non-trivial BatchNorm affine parameters.
    pv[2] = vec![1.2, 0.7, -0.9];
    pv[3] = vec![0.1, -0.2, 0.3];
    let eval = |pv: &[Vec<f64>], wanted: &[NodeId]| -> Vec<Vec<f64>> {
        let mut run = RunAs::<f64>::new(&tape);
        run.set(
            x,
            TensorOf::new(tape.shape(x).unwrap(), xv.clone()).unwrap(),
        )
        .unwrap();
        run.set(
            labels,
            TensorOf::new(Shape::vector(batch), lv.clone()).unwrap(),
        )
        .unwrap();
        for ((l, s), v) in leaves.iter().zip(&specs).zip(pv) {
            run.set(*l, TensorOf::new(s.shape, v.clone()).unwrap())
                .unwrap();
        }
        run.forward().unwrap();
        wanted
            .iter()
            .map(|w| run.value(*w).unwrap().data.clone())
            .collect()
    };
    let grads: Vec<NodeId> = trainable
        .iter()
        .map(|t| *adjoints.get(*t).unwrap())
        .collect();
    let recorded = eval(&pv, &grads);
    let h = 1e-6;
    let mut checked = 0;
    for (gi, leaf) in trainable.iter().enumerate() {
        let pi = leaves.iter().position(|l| l == leaf).unwrap();
        for e in 0..pv[pi].len() {
            let mut plus = pv.clone();
            plus[pi][e] += h;
            let mut minus = pv.clone();
            minus[pi][e] -= h;
            let fd = (eval(&plus, &[loss])[0][0] - eval(&minus, &[loss])[0][0]) / (2.0 * h);
            let g = recorded[gi][e];
            assert!(
                (g - fd).abs() <= 1e-6 + 1e-5 * fd.abs(),
                "{}[{e}]: recorded {g}, central difference {fd}",
                specs[pi].name
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 18 + 3 + 3 + 3 + 48 + 4);
}
