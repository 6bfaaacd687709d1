//! `mul`: `a * b`, elementwise: the IEEE-754 product, except that a zero times an infinity is a
//! zero (signed as the product of the signs), not NaN. NaN still propagates (`0 · NaN` is NaN).
//!
//! # Zero preservation
//! Every reverse rule of the form `x̄ += ḡ · slope` records this product (`unary_rule`, `mul`'s
//! own rule, `sqrt`'s), so a zero on either side of the chain rule's product wins over an
//! infinity on the other: an exactly-zero cotangent contributes exactly zero even where the local
//! derivative is infinite (`0 · d√x/dx` at `x = 0`), and an exactly-zero local derivative stops an
//! infinite cotangent (`√(exp(a))` at `a = -150`: `exp` underflows to `0`, `√`'s rule sends
//! `1 / (2 · 0) = +inf` to `exp`, whose slope is `exp(a) = 0`: IEEE gives `inf · 0 = NaN`, this
//! product gives `0`, the true gradient `e^(a/2) / 2 ≈ 1.4e-33` flushed as `exp` itself was).
//! This is the zero-preservation condition of seed 003, made a property of the one product the
//! rules speak rather than a test in each rule. PyTorch keeps IEEE's NaN here (its `exp` backward
//! is `grad * result`); a derivative that is truly infinite stays so (`d√x/dx` at `0` is `+inf`
//! for a nonzero cotangent).
//!
//! The forward product follows the same definition (one instruction, one meaning): `0 · inf` is
//! `0` wherever the plan multiplies. Plans are unchanged byte for byte (the opcode is the same);
//! only results that IEEE makes NaN from non-NaN operands change, and those never reach a
//! committed parameter (the guard refuses a non-finite step).
//!
//! Rule (product rule): `ā += ḡ * b`, `b̄ += ḡ * a`, the cotangent first. `x * x` names its
//! argument twice and so owes two contributions.

use crate::Element;

use super::{want, Contributions, VjpArgs};
use crate::Recordable;

/// `a * b`, with `0 · ±inf = ±0`.
///
/// # Arithmetic
/// The IEEE product `p = a * b`; where `p` is NaN while neither `a` nor `b` is (only `0 · inf`
/// does that), the answer is the product of the operands' zeros instead: `±0`, its sign the
/// exclusive or of the operands' signs (as IEEE signs every other product).
#[inline]
pub fn scalar<E: Element>(a: E, b: E) -> E {
    let p = a * b;
    if p.is_nan() && !a.is_nan() && !b.is_nan() {
        zero_of(a) * zero_of(b)
    } else {
        p
    }
}

/// The zero with `x`'s sign (`x` itself when it is a zero).
#[inline]
fn zero_of<E: Element>(x: E) -> E {
    if x > E::ZERO {
        E::ZERO
    } else if x < E::ZERO {
        -E::ZERO
    } else {
        x
    }
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let g = v.cotangent;
    let (a, b) = (v.args[0], v.args[1]);
    Ok([
        want(v.wants[0], || r.mul(g, b))?,
        want(v.wants[1], || r.mul(g, a))?,
        None,
    ])
}

#[cfg(test)]
mod tests {
    use super::scalar;

    #[test]
    fn literal() {
        assert_eq!(scalar::<f32>(1.5, -0.25), -0.375);
    }

    #[test]
    fn zero_times_infinity_is_a_signed_zero() {
        let bits = |a: f32, b: f32| scalar(a, b).to_bits();
        assert_eq!(bits(0.0, f32::INFINITY), 0);
        assert_eq!(bits(f32::INFINITY, 0.0), 0);
        assert_eq!(bits(-0.0, f32::INFINITY), 0x8000_0000);
        assert_eq!(bits(0.0, f32::NEG_INFINITY), 0x8000_0000);
        assert_eq!(bits(-0.0, f32::NEG_INFINITY), 0);
        assert_eq!(bits(f32::NEG_INFINITY, -0.0), 0);
        // NaN still propagates, and every other product is IEEE's.
        assert!(scalar(0.0f32, f32::NAN).is_nan());
        assert!(scalar(f32::NAN, f32::INFINITY).is_nan());
        assert_eq!(scalar(f32::INFINITY, -2.0f32), f32::NEG_INFINITY);
        assert_eq!(scalar(f32::MAX, 2.0f32), f32::INFINITY);
        assert_eq!(bits(-0.0, 3.0), 0x8000_0000);
        assert_eq!(scalar(0.0f64, f64::INFINITY).to_bits(), 0);
    }
}
