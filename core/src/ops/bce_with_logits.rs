//! `bce_with_logits`: binary cross-entropy of logits `x` against targets `z`, elementwise and
//! unreduced (PyTorch's `F.binary_cross_entropy_with_logits(x, z, reduction='none')`):
//! `ℓ = −z·log σ(x) − (1 − z)·log(1 − σ(x))`, computed in the stable form
//! `max(x, 0) − x·z + log1p(exp(−|x|))` (no `exp` overflow, no `log(0)`).
//!
//! An instruction, not a composition, because its rule is its own: the gradient
//! `∂ℓ/∂x = σ(x) − z` is smooth at `x = 0`, where the composition's `max(x, 0)` and `|x|` have
//! kinks whose conventional one-sided slopes (`maximum`'s tie rule, `sign(0) = 0`) would give
//! `1 − z` or `−z` instead of `1/2 − z` (DESIGN.md, "what earns an instruction": a rule needs it).
//!
//! Rule: `x̄ += ḡ · (σ(x) − z)`, `z̄ += ḡ · (−x)` (PyTorch's, targets differentiable as there).
//! Reductions (`mean`, `sum`) are compositions: [`crate::Recordable::binary_cross_entropy_with_logits`].

use crate::Element;

use super::{want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, MathProfile, Opcode, Recordable, Shape};

/// The shape rule: elementwise (`x` and `z` of one shape, the loss of that shape).
#[inline(always)]
pub(crate) fn infer(op: Opcode, _attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    super::same_shapes(op, args)
}

/// `ℓ(x, z)` under `math`.
///
/// # Arithmetic order (the definition of the bits)
/// With `p = x · z` (`mul`'s product), for `x > 0`: `(x − p) + log1p(exp(−x))`; otherwise
/// (`x ≤ 0` or NaN): `(+0 − p) + log1p(exp(x))`: exactly `max(x, 0) − x·z + log1p(exp(−|x|))`
/// term by term, split at 0 so that each branch is smooth there. `precise`: `libm::expf` and
/// `libm::log1pf`; `fast`: micromath's `exp` and `ln(1 + ·)` (the sum rounds).
pub fn scalar<E: Element>(x: E, z: E, math: MathProfile) -> E {
    let p = super::mul::scalar(x, z);
    let (lin, t) = if x > E::ZERO {
        (x - p, -x)
    } else {
        (E::ZERO - p, x)
    };
    let soft = match math {
        MathProfile::Fast => (E::ONE + t.exp_fast()).ln_fast(),
        _ => t.exp().ln_1p(),
    };
    lin + soft
}

/// `out[i] = ℓ(x[i], z[i])`.
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    let (x, z) = (k.arg(0), k.arg(1));
    for ((o, &x), &z) in k.out.iter_mut().zip(x).zip(z) {
        *o = scalar(x, z, k.math);
    }
    Ok(())
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let (x, z, g) = (v.args[0], v.args[1], v.cotangent);
    Ok([
        want(v.wants[0], || {
            let s = r.sigmoid(x)?;
            let d = r.sub(&s, z)?;
            r.mul(g, &d)
        })?,
        want(v.wants[1], || {
            let minus_x = r.neg(x)?;
            r.mul(g, &minus_x)
        })?,
        None,
    ])
}

#[cfg(test)]
mod tests {
    use crate::MathProfile;

    /// The loss's definition in `f64`: `−z·ln σ(x) − (1 − z)·ln(1 − σ(x))`.
    fn reference(x: f64, z: f64) -> f64 {
        let s = 1.0 / (1.0 + (-x).exp());
        -z * s.ln() - (1.0 - z) * (1.0 - s).ln()
    }

    #[test]
    fn literal_against_f64() {
        let l = |x: f32, z: f32| super::scalar(x, z, MathProfile::Precise);
        // At the kink of the stable form: ln 2 whatever the target.
        assert_eq!(l(0.0, 0.0), core::f32::consts::LN_2);
        assert_eq!(l(0.0, 1.0), core::f32::consts::LN_2);
        assert_eq!(l(-0.0, 0.3), core::f32::consts::LN_2);
        for &(x, z) in &[
            (2.0f32, 1.0f32),
            (2.0, 0.0),
            (-3.5, 0.25),
            (0.7, 0.9),
            (-0.01, 0.5),
        ] {
            let want = reference(f64::from(x), f64::from(z));
            let got = f64::from(l(x, z));
            assert!(
                (got - want).abs() <= 2e-7 * want.abs().max(1.0),
                "{x} {z}: {got} vs {want}"
            );
        }
        // Large logits: no overflow, no log(0); a confident right answer costs e^-100 (a
        // subnormal, log1p(t) = t there), a confident wrong one 100.
        let tiny = libm::expf(-100.0);
        assert!(tiny > 0.0);
        assert_eq!(l(100.0, 1.0), tiny);
        assert_eq!(l(100.0, 0.0), 100.0);
        assert_eq!(l(-100.0, 1.0), 100.0);
        assert_eq!(l(-100.0, 0.0), tiny);
        assert!(l(f32::NAN, 1.0).is_nan());
    }
}
