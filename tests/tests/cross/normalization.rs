//! Batch normalization (training and evaluation modes, PyTorch's and ONNX's running-statistics
//! conventions) and layer normalization, against PyTorch's / ONNX's documented formulas in `f64`;
//! gradients against `f64` finite differences; every reader the same bits.

use tapeplan_core::{Recordable, Run, RunningStats, Shape, Tape, Tensor};
use tapeplan_tests::readers::value_and_gradients;

const X: [f32; 12] = [
    0.5, -1.25, 2.0, 3.5, 0.0, -0.75, -2.0, 1.5, 4.0, 1.0, 0.25, -3.0,
];
const C_WEIGHTS: [f32; 12] = [
    0.3, -0.7, 1.1, 0.2, 0.9, -0.4, -1.3, 0.6, 0.05, 0.8, -0.2, 0.45,
];

/// `f64` batch normalization of `x: [n, c]` (row-major), PyTorch's formula: the output, the
/// batch mean and the biased variance per channel.
fn bn_f64(
    x: &[f64],
    n: usize,
    c: usize,
    w: &[f64],
    b: &[f64],
    eps: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut mean = vec![0.0; c];
    let mut var = vec![0.0; c];
    for j in 0..c {
        mean[j] = (0..n).map(|i| x[i * c + j]).sum::<f64>() / n as f64;
        var[j] = (0..n)
            .map(|i| (x[i * c + j] - mean[j]).powi(2))
            .sum::<f64>()
            / n as f64;
    }
    let y = (0..n * c)
        .map(|k| {
            let j = k % c;
            (x[k] - mean[j]) / (var[j] + eps).sqrt() * w[j] + b[j]
        })
        .collect();
    (y, mean, var)
}

fn close(got: &[f32], want: &[f64], rel: f64) {
    for (g, w) in got.iter().zip(want) {
        assert!(
            (f64::from(*g) - w).abs() <= rel * w.abs().max(1.0),
            "{got:?} vs {want:?}"
        );
    }
}

#[test]
fn batch_norm_training_mode_matches_pytorch_and_onnx_formulas() {
    let (n, c) = (4usize, 3usize);
    let (w, b) = ([1.5f32, -0.5, 2.0], [0.25f32, 1.0, -1.0]);
    let (rm0, rv0) = ([0.1f32, -0.2, 0.3], [1.0f32, 0.5, 2.0]);
    let eps = 1e-5f32;
    for stats in [
        RunningStats::PyTorch { momentum: 0.1 },
        RunningStats::Onnx { momentum: 0.9 },
    ] {
        let mut tape = Tape::new();
        let x = tape.input("x", Shape::matrix(n, c));
        let k = tape.input("k", Shape::matrix(n, c));
        let wt = tape.input("w", Shape::vector(c));
        let bt = tape.input("b", Shape::vector(c));
        let rm = tape.input("rm", Shape::vector(c));
        let rv = tape.input("rv", Shape::vector(c));
        let (f, out) = {
            let mut t = tape.trace();
            let out = t
                .batch_norm_train(&x, Some(&wt), Some(&bt), &rm, &rv, stats, eps)
                .unwrap();
            let yk = t.mul(&out.y, &k).unwrap();
            (t.sum_all(&yk).unwrap(), out)
        };
        let inputs = vec![
            (x, X.to_vec()),
            (k, C_WEIGHTS.to_vec()),
            (wt, w.to_vec()),
            (bt, b.to_vec()),
            (rm, rm0.to_vec()),
            (rv, rv0.to_vec()),
        ];
        let (_, grads) = value_and_gradients(&mut tape, f, &inputs);
        let mut run = Run::new(&tape);
        for (id, v) in &inputs {
            let s = tape.shape(*id).unwrap();
            run.set(*id, Tensor::new(s, v.clone()).unwrap()).unwrap();
        }
        run.forward().unwrap();
        let val = |id| run.value(id).unwrap().data.clone();

        let f64s = |v: &[f32]| v.iter().map(|&a| f64::from(a)).collect::<Vec<f64>>();
        let (xf, wf, bf) = (f64s(&X), f64s(&w), f64s(&b));
        let (y, mean, var) = bn_f64(&xf, n, c, &wf, &bf, f64::from(eps));
        close(&val(out.y), &y, 2e-6);
        let (want_rm, want_rv): (Vec<f64>, Vec<f64>) = match stats {
            RunningStats::PyTorch { momentum } => {
                let m = f64::from(momentum);
                (0..c)
                    .map(|j| {
                        let unbiased = var[j] * n as f64 / (n as f64 - 1.0);
                        (
                            (1.0 - m) * f64::from(rm0[j]) + m * mean[j],
                            (1.0 - m) * f64::from(rv0[j]) + m * unbiased,
                        )
                    })
                    .unzip()
            }
            RunningStats::Onnx { momentum } => {
                let m = f64::from(momentum);
                (0..c)
                    .map(|j| {
                        (
                            f64::from(rm0[j]) * m + mean[j] * (1.0 - m),
                            f64::from(rv0[j]) * m + var[j] * (1.0 - m),
                        )
                    })
                    .unzip()
            }
        };
        close(&val(out.running_mean), &want_rm, 1e-6);
        close(&val(out.running_var), &want_rv, 1e-6);

        // The gradient with respect to x through the batch statistics, against central
        // differences of the f64 formula of f = Σ y·k.
        let kf = f64s(&C_WEIGHTS);
        let f_of = |xs: &[f64]| {
            let (y, _, _) = bn_f64(xs, n, c, &wf, &bf, f64::from(eps));
            y.iter().zip(&kf).map(|(a, b)| a * b).sum::<f64>()
        };
        let gx = grads[0].clone().unwrap();
        for i in 0..n * c {
            let h = 1e-6;
            let (mut up, mut down) = (xf.clone(), xf.clone());
            up[i] += h;
            down[i] -= h;
            let fd = (f_of(&up) - f_of(&down)) / (2.0 * h);
            assert!(
                (f64::from(gx[i]) - fd).abs() <= 2e-5 * fd.abs().max(1.0),
                "{i}: {gx:?} vs {fd}"
            );
        }
        // Running statistics take no part in the output: no gradient reaches them.
        assert!(grads[4].is_none() && grads[5].is_none());
    }
}

#[test]
fn batch_norm_evaluation_mode_uses_the_running_statistics() {
    // [N, C, L] = [2, 2, 3].
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::new(&[2, 2, 3]).unwrap());
    let (rm, rv) = (
        tape.input("rm", Shape::vector(2)),
        tape.input("rv", Shape::vector(2)),
    );
    let wt = tape.input("w", Shape::vector(2));
    let f = {
        let mut t = tape.trace();
        let y = t
            .batch_norm_eval(&x, Some(&wt), None, &rm, &rv, 1e-5)
            .unwrap();
        let k = t.fill(1.0, Shape::new(&[2, 2, 3]).unwrap()).unwrap();
        let y = t.mul(&y, &k).unwrap();
        t.sum_all(&y).unwrap()
    };
    let (rm0, rv0, w0) = ([0.5f32, -1.0], [4.0f32, 0.25], [2.0f32, 3.0]);
    let (value, grads) = value_and_gradients(
        &mut tape,
        f,
        &[
            (x, X.to_vec()),
            (rm, rm0.to_vec()),
            (rv, rv0.to_vec()),
            (wt, w0.to_vec()),
        ],
    );
    let mut want = 0.0f64;
    for (k, &v) in X.iter().enumerate() {
        let ch = (k / 3) % 2;
        want += (f64::from(v) - f64::from(rm0[ch])) / (f64::from(rv0[ch]) + 1e-5).sqrt()
            * f64::from(w0[ch]);
    }
    assert!(
        (f64::from(value[0]) - want).abs() < 1e-5,
        "{value:?} vs {want}"
    );
    // ∂/∂x = w / sqrt(rv + eps) per channel.
    let gx = grads[0].clone().unwrap();
    for (k, g) in gx.iter().enumerate() {
        let ch = (k / 3) % 2;
        let d = f64::from(w0[ch]) / (f64::from(rv0[ch]) + 1e-5).sqrt();
        assert!((f64::from(*g) - d).abs() < 1e-6, "{gx:?}");
    }
}

#[test]
fn layer_norm_over_the_last_axes_matches_pytorchs_formula() {
    for normalized_dims in [1usize, 2] {
        // x: [2, 2, 3], normalized over [3] or [2, 3].
        let xs = Shape::new(&[2, 2, 3]).unwrap();
        let ps = if normalized_dims == 1 {
            Shape::vector(3)
        } else {
            Shape::matrix(2, 3)
        };
        let group = ps.elems();
        let w: Vec<f32> = (0..group).map(|i| 0.5 + 0.25 * i as f32).collect();
        let b: Vec<f32> = (0..group).map(|i| -0.1 * i as f32).collect();
        let mut tape = Tape::new();
        let x = tape.input("x", xs);
        let k = tape.input("k", xs);
        let wt = tape.input("w", ps);
        let bt = tape.input("b", ps);
        let (f, y) = {
            let mut t = tape.trace();
            let y = t
                .layer_norm(&x, normalized_dims, Some(&wt), Some(&bt), 1e-5)
                .unwrap();
            let yk = t.mul(&y, &k).unwrap();
            (t.sum_all(&yk).unwrap(), y)
        };
        let inputs = vec![
            (x, X.to_vec()),
            (k, C_WEIGHTS.to_vec()),
            (wt, w.clone()),
            (bt, b.clone()),
        ];
        let (_, grads) = value_and_gradients(&mut tape, f, &inputs);
        let ln_f64 = |xs: &[f64]| -> Vec<f64> {
            xs.chunks(group)
                .flat_map(|g| {
                    let m = g.iter().sum::<f64>() / group as f64;
                    let v = g.iter().map(|a| (a - m).powi(2)).sum::<f64>() / group as f64;
                    g.iter()
                        .enumerate()
                        .map(|(i, a)| {
                            (a - m) / (v + 1e-5).sqrt() * f64::from(w[i]) + f64::from(b[i])
                        })
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        let xf: Vec<f64> = X.iter().map(|&a| f64::from(a)).collect();
        let mut run = Run::new(&tape);
        for (id, v) in &inputs {
            let s = tape.shape(*id).unwrap();
            run.set(*id, Tensor::new(s, v.clone()).unwrap()).unwrap();
        }
        run.forward().unwrap();
        close(&run.value(y).unwrap().data, &ln_f64(&xf), 2e-6);
        let gx = grads[0].clone().unwrap();
        let kf: Vec<f64> = C_WEIGHTS.iter().map(|&a| f64::from(a)).collect();
        for i in 0..12 {
            let h = 1e-6;
            let (mut up, mut down) = (xf.clone(), xf.clone());
            up[i] += h;
            down[i] -= h;
            let f = |v: &[f64]| ln_f64(v).iter().zip(&kf).map(|(a, b)| a * b).sum::<f64>();
            let fd = (f(&up) - f(&down)) / (2.0 * h);
            assert!(
                (f64::from(gx[i]) - fd).abs() <= 2e-5 * fd.abs().max(1.0),
                "{i}: {gx:?} vs {fd}"
            );
        }
    }
}

#[test]
fn normalizations_refuse_what_pytorch_refuses() {
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::matrix(1, 3));
    let v = tape.input("v", Shape::vector(3));
    let mut t = tape.trace();
    let one_per_channel = t.batch_norm_train(
        &x,
        None,
        None,
        &v,
        &v,
        RunningStats::PyTorch { momentum: 0.1 },
        1e-5,
    );
    assert!(
        one_per_channel.is_err(),
        "one value per channel: no unbiased variance"
    );
    assert!(t.layer_norm(&x, 0, None, None, 1e-5).is_err());
    assert!(t.layer_norm(&x, 3, None, None, 1e-5).is_err());
    assert!(
        t.batch_norm_eval(&v, None, None, &v, &v, 1e-5).is_err(),
        "rank 1"
    );
}
