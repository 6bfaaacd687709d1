//! `relu`: `x` where `x > 0`; NaN stays NaN; otherwise `+0` (so `relu(-0) = +0`).
//!
//! Rule: `x̄ += ḡ * heaviside(x)`: the subgradient at 0 is 0, as in PyTorch.

use crate::Element;

use super::{unary_rule, Contributions, VjpArgs};
use crate::Recordable;

/// `relu(x)`.
pub fn scalar<E: Element>(x: E) -> E {
    if x > E::ZERO || x.is_nan() {
        x
    } else {
        E::ZERO
    }
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    unary_rule(r, v, |r, x, _y| r.heaviside(x))
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        assert_eq!(super::scalar::<f32>(2.0), 2.0);
        assert_eq!(super::scalar::<f32>(-0.0).to_bits(), 0);
        assert!(super::scalar::<f32>(f32::NAN).is_nan());
    }
}
