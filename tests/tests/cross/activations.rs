//! Activations and losses of issue 12 (compositions over the vocabulary, and the
//! `bce_with_logits` instruction): literal values by hand or in `f64` from PyTorch's documented
//! definitions, gradients at and around the kinks (PyTorch's conventions), every reader the same
//! bits (the oracle, the recorded gradient, the runtime).

use tapeplan_core::{NodeId, Recordable, Reduction, Shape, Tape, Trace};
use tapeplan_tests::readers::value_and_gradients;

/// `f` applied to `x` elementwise, summed: the values (`f` alone, unsummed) and the gradient.
fn elementwise(x: &[f32], f: impl Fn(&mut Trace<'_>, &NodeId) -> NodeId) -> (Vec<f32>, Vec<f32>) {
    let n = x.len();
    let mut tape = Tape::new();
    let xs = tape.input("x", Shape::vector(n));
    let (y, total) = {
        let mut t = tape.trace();
        let y = f(&mut t, &xs);
        (y, t.sum_all(&y).unwrap())
    };
    let (_, grads) = value_and_gradients(&mut tape, total, &[(xs, x.to_vec())]);
    let mut run = tapeplan_core::Run::new(&tape);
    run.set(
        xs,
        tapeplan_core::Tensor::new(Shape::vector(n), x.to_vec()).unwrap(),
    )
    .unwrap();
    run.forward().unwrap();
    let values = run.value(y).unwrap().data.clone();
    (values, grads[0].clone().unwrap())
}

fn close(got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!(
            (f64::from(*g) - w).abs() <= tol * w.abs().max(1.0),
            "{got:?} vs {want:?}"
        );
    }
}

#[test]
fn leaky_relu_slope_at_zero_is_the_negative_slope() {
    let (y, g) = elementwise(&[-2.0, -0.0, 0.0, 1e-30, 3.0], |t, x| {
        t.leaky_relu(x, 0.01).unwrap()
    });
    assert_eq!(y, [-0.02, -0.0, 0.0, 1e-30, 3.0]);
    assert_eq!(g, [0.01, 0.01, 0.01, 1.0, 1.0]);
}

#[test]
fn clamp_and_hardtanh_differ_only_in_the_gradient_at_the_bounds() {
    let x = [-7.0, -1.0, -0.5, 0.0, 1.0, 2.0];
    let (y, g) = elementwise(&x, |t, x| t.clamp(x, -1.0, 1.0).unwrap());
    assert_eq!(y, [-1.0, -1.0, -0.5, 0.0, 1.0, 1.0]);
    assert_eq!(g, [0.0, 1.0, 1.0, 1.0, 1.0, 0.0], "clamp: bounds included");
    let (y2, g) = elementwise(&x, |t, x| t.hardtanh(x, -1.0, 1.0).unwrap());
    assert_eq!(y2, y);
    assert_eq!(
        g,
        [0.0, 0.0, 1.0, 1.0, 0.0, 0.0],
        "hardtanh: bounds excluded"
    );
    let (y, g) = elementwise(&[-1.0, 0.0, 3.0, 6.0, 6.5], |t, x| t.relu6(x).unwrap());
    assert_eq!(y, [0.0, 0.0, 3.0, 6.0, 6.0]);
    assert_eq!(g, [0.0, 0.0, 1.0, 0.0, 0.0]);
    let (y, _) = elementwise(&[f32::NAN], |t, x| t.hardtanh(x, -1.0, 1.0).unwrap());
    assert!(y[0].is_nan());
}

#[test]
fn hardsigmoid_and_hardswish_at_their_kinks() {
    let x = [-4.0f32, -3.0, -1.5, 0.0, 1.5, 3.0, 4.0];
    let (y, g) = elementwise(&x, |t, x| t.hardsigmoid(x, 1.0 / 6.0, 0.5).unwrap());
    let want: Vec<f64> = x
        .iter()
        .map(|&v| (f64::from(v) / 6.0 + 0.5).clamp(0.0, 1.0))
        .collect();
    close(&y, &want, 1e-7);
    let sixth = 1.0f32 / 6.0;
    assert_eq!(
        g,
        [0.0, 0.0, sixth, sixth, sixth, 0.0, 0.0],
        "0 at ±3 (PyTorch)"
    );
    // ONNX's defaults.
    let (y, _) = elementwise(&[1.0], |t, x| t.hardsigmoid(x, 0.2, 0.5).unwrap());
    assert_eq!(y, [0.7]);

    let (y, g) = elementwise(&x, |t, x| t.hardswish(x).unwrap());
    let want: Vec<f64> = x
        .iter()
        .map(|&v| {
            let v = f64::from(v);
            v * (v + 3.0).clamp(0.0, 6.0) / 6.0
        })
        .collect();
    close(&y, &want, 1e-7);
    // PyTorch's hardswish_backward: 0 below -3, x/3 + 1/2 on [-3, 3], 1 above.
    let want_g: Vec<f64> = x
        .iter()
        .map(|&v| {
            let v = f64::from(v);
            if v < -3.0 {
                0.0
            } else if v <= 3.0 {
                v / 3.0 + 0.5
            } else {
                1.0
            }
        })
        .collect();
    close(&g, &want_g, 1e-7);
    assert_eq!(g[1], -0.5);
    assert_eq!(g[5], 1.5);
}

#[test]
fn silu_and_both_gelus_against_f64() {
    let x = [-3.0f32, -1.0, -0.25, 0.0, 0.5, 2.0];
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    let (y, g) = elementwise(&x, |t, x| t.silu(x).unwrap());
    let xf: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    close(
        &y,
        &xf.iter().map(|&v| v * sig(v)).collect::<Vec<_>>(),
        3e-7,
    );
    let dsilu: Vec<f64> = xf
        .iter()
        .map(|&v| sig(v) * (1.0 + v * (1.0 - sig(v))))
        .collect();
    close(&g, &dsilu, 5e-7);

    // Exact GELU: x Φ(x), derivative Φ(x) + x φ(x). Φ via erf in f64 from libm.
    let phi = |v: f64| (-v * v / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let cdf = |v: f64| 0.5 * (1.0 + libm::erf(v / std::f64::consts::SQRT_2));
    let (y, g) = elementwise(&x, |t, x| t.gelu(x).unwrap());
    close(
        &y,
        &xf.iter().map(|&v| v * cdf(v)).collect::<Vec<_>>(),
        3e-7,
    );
    close(
        &g,
        &xf.iter().map(|&v| cdf(v) + v * phi(v)).collect::<Vec<_>>(),
        5e-7,
    );

    // Tanh GELU: PyTorch's formula in f64.
    let k = (2.0 / std::f64::consts::PI).sqrt();
    let inner = |v: f64| k * (v + 0.044715 * v * v * v);
    let (y, g) = elementwise(&x, |t, x| t.gelu_tanh(x).unwrap());
    close(
        &y,
        &xf.iter()
            .map(|&v| 0.5 * v * (1.0 + inner(v).tanh()))
            .collect::<Vec<_>>(),
        3e-7,
    );
    let dg: Vec<f64> = xf
        .iter()
        .map(|&v| {
            let t = inner(v).tanh();
            0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * v * v)
        })
        .collect();
    close(&g, &dg, 5e-7);
}

#[test]
fn softplus_with_beta_and_threshold_is_pytorchs_formula() {
    // PyTorch: x·β > threshold ? x : log1p(exp(x·β)) / β, each step rounded in f32.
    let pytorch = |x: f32, beta: f32, threshold: f32| {
        let bx = x * beta;
        if bx > threshold {
            x
        } else {
            libm::log1pf(libm::expf(bx)) / beta
        }
    };
    let x = [
        -30.0f32, -2.0, -0.1, 0.0, 0.3, 4.9, 5.0, 5.1, 7.3, 11.0, 40.0,
    ];
    for (beta, threshold) in [(1.0f32, 20.0f32), (2.0, 10.0), (0.5, 20.0), (4.0, 30.0)] {
        let (y, g) = elementwise(&x, |t, x| t.softplus_beta(x, beta, threshold).unwrap());
        for (k, &v) in x.iter().enumerate() {
            assert_eq!(
                y[k].to_bits(),
                pytorch(v, beta, threshold).to_bits(),
                "β={beta} threshold={threshold} x={v}"
            );
            // PyTorch's gradient: 1 above the threshold, σ(βx) below.
            let bx = f64::from(v) * f64::from(beta);
            let want = if bx > f64::from(threshold) {
                1.0
            } else {
                1.0 / (1.0 + (-bx).exp())
            };
            assert!((f64::from(g[k]) - want).abs() <= 3e-7, "{g:?} at {v}");
        }
    }
    // Above PyTorch's threshold the answer is x itself, where (βx)/β rounds twice.
    let (y, _) = elementwise(&[10.000001], |t, x| t.softplus_beta(x, 3.0, 20.0).unwrap());
    assert_eq!(y, [10.000001]);
}

/// The claim `softplus_beta` rests on: between 20 and `exp`'s overflow, `log1p(exp(t))` is `t`
/// to the last bit in `f32` (so the `softplus` instruction's own threshold, 20, agrees with
/// PyTorch's formula for any larger threshold).
#[test]
fn log1p_of_exp_is_the_identity_above_20_in_f32() {
    let mut t = 20.0f32;
    while t < 88.0 {
        assert_eq!(libm::log1pf(libm::expf(t)), t, "{t}");
        t = f32::from_bits(t.to_bits() + 997);
    }
}

#[test]
fn bce_with_logits_values_and_its_smooth_gradient() {
    // ℓ = −z ln σ(x) − (1 − z) ln(1 − σ(x)); ∂ℓ/∂x = σ(x) − z, ∂ℓ/∂z = −x.
    let xs = [-3.0f32, -0.0, 0.0, 0.0, 1e-6, 2.5];
    let zs = [0.0f32, 0.25, 0.0, 1.0, 0.5, 0.9];
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::vector(6));
    let z = tape.input("z", Shape::vector(6));
    let f = {
        let mut t = tape.trace();
        t.binary_cross_entropy_with_logits(&x, &z, Reduction::Sum)
            .unwrap()
    };
    let (value, grads) = value_and_gradients(&mut tape, f, &[(x, xs.to_vec()), (z, zs.to_vec())]);
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    let mut total = 0.0;
    for (&xv, &zv) in xs.iter().zip(&zs) {
        let (xv, zv) = (f64::from(xv), f64::from(zv));
        total += -zv * sig(xv).ln() - (1.0 - zv) * (1.0 - sig(xv)).ln();
    }
    assert!(
        (f64::from(value[0]) - total).abs() < 1e-6,
        "{value:?} vs {total}"
    );
    let gx = grads[0].clone().unwrap();
    // At x = 0 the gradient is 1/2 − z exactly: σ(0) = 1/2.
    assert_eq!(gx[1], 0.25);
    assert_eq!(gx[2], 0.5);
    assert_eq!(gx[3], -0.5);
    for k in 0..6 {
        let want = sig(f64::from(xs[k])) - f64::from(zs[k]);
        assert!((f64::from(gx[k]) - want).abs() < 1e-7, "{gx:?}");
    }
    let gz = grads[1].clone().unwrap();
    assert_eq!(gz, xs.map(|v| -v));

    // Mean reduction divides by the count, as PyTorch's default.
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::vector(2));
    let z = tape.input("z", Shape::vector(2));
    let f = {
        let mut t = tape.trace();
        t.binary_cross_entropy_with_logits(&x, &z, Reduction::Mean)
            .unwrap()
    };
    let (value, _) = value_and_gradients(&mut tape, f, &[(x, vec![0.0, 0.0]), (z, vec![1.0, 0.0])]);
    assert_eq!(value, [core::f32::consts::LN_2]);
}

#[test]
fn l1_and_huber_at_their_kinks() {
    let pred = [0.5f32, 2.0, -1.0, 3.0, 1.0];
    let target = [0.5f32, 1.0, 1.0, 0.0, 0.25];
    let run = |loss: &dyn Fn(&mut Trace<'_>, &NodeId, &NodeId) -> NodeId| {
        let mut tape = Tape::new();
        let p = tape.input("p", Shape::vector(5));
        let y = tape.input("y", Shape::vector(5));
        let f = {
            let mut t = tape.trace();
            loss(&mut t, &p, &y)
        };
        value_and_gradients(&mut tape, f, &[(p, pred.to_vec()), (y, target.to_vec())])
    };
    // L1, mean: (0 + 1 + 2 + 3 + 0.75) / 5; gradient sign(d)/5, 0 at d = 0.
    let (v, g) = run(&|t, p, y| t.l1_loss(p, y, Reduction::Mean).unwrap());
    assert_eq!(v, [6.75 / 5.0]);
    assert_eq!(g[0].clone().unwrap(), [0.0, 0.2, -0.2, 0.2, 0.2]);
    assert_eq!(g[1].clone().unwrap(), [0.0, -0.2, 0.2, -0.2, -0.2]);
    // Huber, δ = 1, sum: d = 0, 1, -2, 3, 0.75 → 0, 0.5 (at δ: the linear branch, 1·(1 − 0.5)),
    // 1.5, 2.5, 0.28125; gradient clamp(d, -δ, δ): 0, 1, -1, 1, 0.75.
    let (v, g) = run(&|t, p, y| t.huber_loss(p, y, 1.0, Reduction::Sum).unwrap());
    assert_eq!(v, [0.0 + 0.5 + 1.5 + 2.5 + 0.28125]);
    assert_eq!(g[0].clone().unwrap(), [0.0, 1.0, -1.0, 1.0, 0.75]);
    // Unreduced, δ = 2: d = 1 is inside (0.5 · 1 · 1), d = -2 at δ (2 · (2 − 1) = 2).
    let (v, _) = run(&|t, p, y| {
        let l = t.huber_loss(p, y, 2.0, Reduction::None).unwrap();
        t.sum_all(&l).unwrap()
    });
    assert_eq!(v, [0.0 + 0.5 + 2.0 + 4.0 + 0.28125]);
}

#[test]
fn cross_entropy_against_f64() {
    let logits = [1.0f32, 2.0, 0.5, -1.0, 0.0, 3.0];
    let labels = [1.0f32, 0.0];
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::matrix(2, 3));
    let y = tape.input("y", Shape::vector(2));
    let f = {
        let mut t = tape.trace();
        t.cross_entropy(&x, &y, Reduction::Mean).unwrap()
    };
    let (value, grads) =
        value_and_gradients(&mut tape, f, &[(x, logits.to_vec()), (y, labels.to_vec())]);
    let mut want = 0.0f64;
    let mut want_g = Vec::new();
    for (row, &label) in logits.chunks(3).zip(&labels) {
        let z: f64 = row.iter().map(|&v| f64::from(v).exp()).sum();
        want += (z.ln() - f64::from(row[label as usize])) / 2.0;
        for (k, &v) in row.iter().enumerate() {
            let p = f64::from(v).exp() / z;
            want_g.push((p - if k == label as usize { 1.0 } else { 0.0 }) / 2.0);
        }
    }
    assert!(
        (f64::from(value[0]) - want).abs() < 1e-6,
        "{value:?} vs {want}"
    );
    let g = grads[0].clone().unwrap();
    for (a, b) in g.iter().zip(&want_g) {
        assert!((f64::from(*a) - b).abs() < 1e-7, "{g:?} vs {want_g:?}");
    }
    assert!(grads[1].is_none(), "labels are not differentiable");
}
