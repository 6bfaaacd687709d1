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
