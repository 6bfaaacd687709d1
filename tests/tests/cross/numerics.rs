//! Numerics held to the field's bug reports (issue 12): each case a literal value that the
//! oracle, the recorded gradient and the runtime all reach, bit for bit.

use tapeplan_core::{Recordable, Shape, Tape};
use tapeplan_tests::readers::value_and_gradients;

/// Zero preservation (seed 003): `√(exp(a))` at `a = -150`, where `exp` underflows to `0`.
/// `√`'s rule sends `+inf` to `exp`, whose slope is `exp(a) = 0`; IEEE's `inf · 0` made the
/// gradient NaN. `mul` makes `0 · inf` a zero: the gradient is `0` (the true `e^-75 / 2`,
/// flushed as `exp` itself was). At `a = 0` the gradient is `1/2`, and `d√x/dx` at `x = 0`
/// stays `+inf`.
#[test]
fn sqrt_of_an_underflowed_exp_has_a_zero_gradient_not_nan() {
    let mut tape = Tape::new();
    let a = tape.input("a", Shape::vector(3));
    let f = {
        let mut t = tape.trace();
        let e = t.exp(&a).unwrap();
        let s = t.sqrt(&e).unwrap();
        t.sum_all(&s).unwrap()
    };
    let (value, grads) = value_and_gradients(&mut tape, f, &[(a, vec![-150.0, 0.0, -200.0])]);
    assert_eq!(value, [1.0]);
    let g = grads[0].clone().unwrap();
    assert_eq!(g[0].to_bits(), 0, "{g:?}");
    assert_eq!(g[1], 0.5);
    assert_eq!(g[2].to_bits(), 0);

    let mut tape = Tape::new();
    let x = tape.input("x", Shape::vector(2));
    let f = {
        let mut t = tape.trace();
        let s = t.sqrt(&x).unwrap();
        t.sum_all(&s).unwrap()
    };
    let (_, grads) = value_and_gradients(&mut tape, f, &[(x, vec![0.0, 0.25])]);
    assert_eq!(grads[0].clone().unwrap(), [f32::INFINITY, 1.0]);
}

/// A zero cotangent reaching an infinite local derivative: `0 · √x` at `x = 0` (a reached node
/// with a zero cotangent, not a dead branch) contributes `0`, not `0/0 = NaN`; and
/// `√(relu(x))` for `x < 0` has gradient `0` (`relu`'s slope `0` stops `√`'s `+inf`).
#[test]
fn a_zero_meeting_an_infinite_slope_contributes_zero() {
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::vector(2));
    let f = {
        let mut t = tape.trace();
        let s = t.sqrt(&x).unwrap();
        let z = t.fill(0.0, Shape::vector(2)).unwrap();
        let zs = t.mul(&z, &s).unwrap();
        let r = t.relu(&x).unwrap();
        let rs = t.sqrt(&r).unwrap();
        let both = t.add(&zs, &rs).unwrap();
        t.sum_all(&both).unwrap()
    };
    let (_, grads) = value_and_gradients(&mut tape, f, &[(x, vec![0.0, -1.0])]);
    // x = 0: 0·(+inf) from the dead-weighted branch plus relu's slope 0 times +inf: 0.
    // x = -1: √ of NaN is NaN for the first branch (√(-1)), times zero is NaN: NaN propagates.
    let g = grads[0].clone().unwrap();
    assert_eq!(g[0].to_bits(), 0, "{g:?}");
    assert!(g[1].is_nan(), "{g:?}");
}

/// Log-sum-exp over a fully masked row (every element `-inf`), issue 12 numerics (a): the
/// forward is `-inf`, not NaN (`-inf − (-inf)` in the max-shifted composition, which the MLP's
/// softmax cross-entropy still speaks and which gives NaN here), and the gradient policy is
/// zero for the masked row (its value does not move under any finite change of its elements),
/// the other rows' gradient being the softmax; every reader the same bits.
#[test]
fn logsumexp_of_a_fully_masked_row_is_minus_infinity() {
    let inf = f32::INFINITY;
    let rows = vec![-inf, -inf, -inf, 0.0, -inf, libm::logf(2.0)];
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::matrix(2, 3));
    let (f, l) = {
        let mut t = tape.trace();
        let l = t.logsumexp_to(&x, Shape::matrix(2, 1)).unwrap();
        (t.sum_all(&l).unwrap(), l)
    };
    let (_, grads) = value_and_gradients(&mut tape, f, &[(x, rows.clone())]);
    let mut run = tapeplan_core::Run::new(&tape);
    run.set(
        x,
        tapeplan_core::Tensor::new(Shape::matrix(2, 3), rows.clone()).unwrap(),
    )
    .unwrap();
    run.forward().unwrap();
    let lse = run.value(l).unwrap();
    assert_eq!(lse.data[0], -inf);
    assert_eq!(lse.data[1], libm::logf(3.0), "ln(1 + 2)");
    let g = grads[0].clone().unwrap();
    assert_eq!(&g[..3], &[0.0; 3], "the masked row's gradient is zero");
    assert_eq!(g[4], 0.0, "a masked element of a live row has weight 0");
    assert!(
        (g[3] - 1.0 / 3.0).abs() < 1e-7 && (g[5] - 2.0 / 3.0).abs() < 1e-7,
        "{g:?}"
    );

    // The max-shifted composition (the MLP's cross-entropy's form) gives NaN on that row.
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::vector(3));
    let f = {
        let mut t = tape.trace();
        let m = t.max_to(&x, Shape::vector(1)).unwrap();
        let m = t.detach(&m).unwrap();
        let mb = t.broadcast(&m, Shape::vector(3)).unwrap();
        let s = t.sub(&x, &mb).unwrap();
        let e = t.exp(&s).unwrap();
        let se = t.sum_to(&e, Shape::vector(1)).unwrap();
        let l = t.log(&se).unwrap();
        let l = t.add(&l, &m).unwrap();
        t.sum_all(&l).unwrap()
    };
    let (value, _) = value_and_gradients(&mut tape, f, &[(x, vec![-inf; 3])]);
    assert!(value[0].is_nan());

    // Softmax cross-entropy through log_softmax: a masked row's log-probabilities are
    // `-inf − (-inf)`: NaN, as PyTorch's (the loss of a row with no live class is undefined);
    // a partially masked row costs `lse − x_label` = ln 3 here.
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::matrix(2, 3));
    let f = {
        let mut t = tape.trace();
        let lp = t.log_softmax(&x, 1).unwrap();
        let labels = t.fill(0.0, Shape::vector(2)).unwrap();
        let onehot = t.one_hot(&labels, 3).unwrap();
        let picked = t.mul(&onehot, &lp).unwrap();
        let total = t.sum_to(&picked, Shape::matrix(2, 1)).unwrap();
        t.neg(&total).unwrap()
    };
    let mut run = tapeplan_core::Run::new(&tape);
    run.set(
        x,
        tapeplan_core::Tensor::new(Shape::matrix(2, 3), rows).unwrap(),
    )
    .unwrap();
    run.forward().unwrap();
    let ce = &run.value(f).unwrap().data;
    assert!(ce[0].is_nan());
    assert_eq!(ce[1], libm::logf(3.0));
}

/// The plain softmax cross-entropy composition `Recordable::cross_entropy` spoke before it
/// gave fully masked rows loss 0: `−log_softmax(x)[label]` per row, then `reduction`.
fn plain_cross_entropy(
    t: &mut tapeplan_core::Trace<'_>,
    x: &tapeplan_core::NodeId,
    y: &tapeplan_core::NodeId,
    reduction: tapeplan_core::Reduction,
) -> tapeplan_core::NodeId {
    let s = t.shape_of(x);
    let lp = t.log_softmax(x, 1).unwrap();
    let onehot = t.one_hot(y, s.dim(1).unwrap()).unwrap();
    let picked = t.mul(&onehot, &lp).unwrap();
    let rows = Shape::matrix(s.dim(0).unwrap(), 1);
    let per_row = t.sum_to(&picked, rows).unwrap();
    let loss = t.neg(&per_row).unwrap();
    t.reduce(&loss, reduction).unwrap()
}

/// Softmax cross-entropy over a fully masked row (issue 12 numerics, case 2): the row's loss
/// is 0 and its gradient 0 (it carries no information, as PyTorch's `ignore_index` rows), the
/// other rows keep theirs, `Mean` divides by every row (3 here), and the second derivative is
/// 0 on the masked row and finite elsewhere; every reader the same bits.
#[test]
fn cross_entropy_of_a_fully_masked_row_is_zero_with_a_zero_gradient() {
    use tapeplan_core::Reduction;
    let inf = f32::INFINITY;
    // Row 0 fully masked, row 1 partially masked (its label's class live), row 2 finite.
    let logits = vec![-inf, -inf, -inf, 0.0, -inf, libm::logf(2.0), 1.0, 2.0, 0.5];
    let labels = vec![2.0, 2.0, 0.0];
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::matrix(3, 3));
    let y = tape.input("y", Shape::vector(3));
    let (f, per_row) = {
        let mut t = tape.trace();
        let per_row = t.cross_entropy(&x, &y, Reduction::None).unwrap();
        (t.cross_entropy(&x, &y, Reduction::Mean).unwrap(), per_row)
    };
    let (value, grads) =
        value_and_gradients(&mut tape, f, &[(x, logits.clone()), (y, labels.clone())]);
    let mut run = tapeplan_core::Run::new(&tape);
    run.set(
        x,
        tapeplan_core::Tensor::new(Shape::matrix(3, 3), logits.clone()).unwrap(),
    )
    .unwrap();
    run.set(
        y,
        tapeplan_core::Tensor::new(Shape::vector(3), labels.clone()).unwrap(),
    )
    .unwrap();
    run.forward().unwrap();
    let rows = run.value(per_row).unwrap().data.clone();
    assert_eq!(
        rows[0].to_bits(),
        0,
        "the masked row's loss is +0: {rows:?}"
    );
    // Row 1: lse = ln(1 + 2) = ln 3, label logit ln 2: ln 3 − ln 2 = ln 1.5.
    assert!((rows[1] - libm::logf(1.5)).abs() < 1e-6, "{rows:?}");
    let want2 = {
        let z: f64 = [1.0f64, 2.0, 0.5].iter().map(|v| v.exp()).sum();
        z.ln() - 1.0
    };
    assert!((f64::from(rows[2]) - want2).abs() < 1e-6, "{rows:?}");
    assert_eq!(
        value[0].to_bits(),
        ((0.0 + rows[1] + rows[2]) / 3.0).to_bits(),
        "Mean divides by every row, the masked one included"
    );
    let g = grads[0].clone().unwrap();
    assert_eq!(
        &g[..3],
        &[0.0; 3],
        "the masked row's gradient is zero: {g:?}"
    );
    assert!(g.iter().all(|v| v.is_finite()), "{g:?}");
    assert_eq!(g[4], 0.0, "a masked class of a live row has probability 0");
    // Row 1: (softmax − onehot(2)) / 3 = (1/3, 0, 2/3 − 1) / 3.
    assert!(
        (g[3] - 1.0 / 9.0).abs() < 1e-7 && (g[5] + 1.0 / 9.0).abs() < 1e-7,
        "{g:?}"
    );
    assert!(grads[1].is_none(), "labels are not differentiable");

    // Second order: d/dx Σ (∂f/∂x · v), the recorded gradient differentiated again.
    let v: Vec<f32> = (0..9).map(|k| 0.25 + 0.5 * k as f32).collect();
    let gx = *tape.differentiate(f, &[x]).unwrap().get(x).unwrap();
    let vn = tape.input("v", Shape::matrix(3, 3));
    let h = {
        let mut t = tape.trace();
        let p = t.mul(&gx, &vn).unwrap();
        t.sum_all(&p).unwrap()
    };
    let (_, grads) = value_and_gradients(
        &mut tape,
        h,
        &[(x, logits.clone()), (y, labels.clone()), (vn, v)],
    );
    let hx = grads[0].clone().unwrap();
    assert_eq!(
        &hx[..3],
        &[0.0; 3],
        "the masked row's second derivative: {hx:?}"
    );
    assert!(hx.iter().all(|v| v.is_finite()), "{hx:?}");
    assert!(
        hx[6..].iter().any(|&v| v != 0.0),
        "a live row's Hessian-vector product: {hx:?}"
    );
}

/// On rows with a finite logit (partially masked ones included) the masked-row policy changes
/// no bit: `Recordable::cross_entropy` and the plain composition give the same value and
/// gradient bits for every reduction, on random logits.
#[test]
fn cross_entropy_keeps_the_plain_bits_on_rows_with_a_finite_logit() {
    use tapeplan_core::Reduction;
    let mut rng = tapeplan_runtime::protocol::SplitMix64::new(12);
    let (batch, classes) = (6, 5);
    for trial in 0..8 {
        let mut logits: Vec<f32> = (0..batch * classes)
            .map(|_| -6.0 + 12.0 * rng.next_f32())
            .collect();
        if trial % 2 == 1 {
            // Mask some classes (never a whole row, never a label's).
            for (k, l) in logits.iter_mut().enumerate() {
                if k % classes == 1 && (k / classes) % 2 == 0 {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        let labels: Vec<f32> = (0..batch).map(|r| ((r + trial) % classes) as f32).collect();
        let labels: Vec<f32> = labels
            .iter()
            .map(|&l| if l == 1.0 { 0.0 } else { l })
            .collect();
        for reduction in [Reduction::Mean, Reduction::Sum, Reduction::None] {
            let run = |new: bool| {
                let mut tape = Tape::new();
                let x = tape.input("x", Shape::matrix(batch, classes));
                let y = tape.input("y", Shape::vector(batch));
                let f = {
                    let mut t = tape.trace();
                    let l = if new {
                        t.cross_entropy(&x, &y, reduction).unwrap()
                    } else {
                        plain_cross_entropy(&mut t, &x, &y, reduction)
                    };
                    t.sum_all(&l).unwrap()
                };
                let (v, g) =
                    value_and_gradients(&mut tape, f, &[(x, logits.clone()), (y, labels.clone())]);
                let g = g[0].clone().unwrap();
                (
                    v.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    g.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                )
            };
            let (new, old) = (run(true), run(false));
            assert!(new
                .0
                .iter()
                .chain(&new.1)
                .all(|&b| f32::from_bits(b).is_finite()));
            assert_eq!(new, old, "trial {trial}, {reduction:?}");
        }
    }
}
