//! `pow`: `x^p` for a constant exponent `p` (the attribute's `f32` bits). Under the `precise` math
//! profile `libm::powf(x, p)` (C99 Annex F semantics: `x^0 = 1` even for NaN, negative `x` with a
//! non-integer `p` is NaN); under `fast` [`crate::math::fast::powf`]: `exp(p · ln|x|)` over
//! micromath's `exp` and `ln`, with the same rules for `p = 0`, NaN and the sign.
//!
//! Rule: `x̄ += ḡ · (p · x^(p−1))`, with `p − 1` computed in `f32` when the rule runs; for
//! `p = 0` the contribution is `ḡ · 0` (PyTorch's convention: no `0 · x^-1 = NaN` at 0).

use crate::Element;

use super::{unary_rule, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Opcode, Recordable, Shape};

/// The shape rule: elementwise.
#[inline(always)]
pub(crate) fn infer(op: Opcode, _attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    super::same_shapes(op, args)
}

/// `out[i] = x[i]^p` with the profile's function, `p` the attribute.
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    let math = k.math;
    let f = super::pow_fn_of::<E>(math).ok_or(OpError::MathProfile { math })?;
    let p = E::from_f32(k.attr.scalar());
    let x = k.arg(0);
    for (o, &x) in k.out.iter_mut().zip(x) {
        *o = f(x, p);
    }
    Ok(())
}

/// `x^p` (`precise`).
pub fn scalar<E: Element>(x: E, p: E) -> E {
    x.powf(p)
}

/// `x^p` (`fast`).
pub fn scalar_fast<E: Element>(x: E, p: E) -> E {
    x.powf_fast(p)
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let p = v.attr.scalar();
    unary_rule(r, v, |r, x, _y| {
        let s = r.shape_of(x);
        if p == 0.0 {
            return r.fill(0.0, s);
        }
        let lower = r.pow_const(x, p - 1.0)?;
        let k = r.fill(p, s)?;
        r.mul(&k, &lower)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        assert_eq!(super::scalar::<f32>(1.5, 2.0), 2.25);
        assert_eq!(super::scalar::<f32>(f32::NAN, 0.0), 1.0);
        assert!(super::scalar::<f32>(-8.0, 1.0 / 3.0).is_nan());
    }
}
