//! `sigmoid`: the logistic function `1 / (1 + e^(-x))`, each operation rounded in that order,
//! with `e^(-x)` the profile's `exp`: `libm::expf(-x)` under `precise`,
//! [`crate::math::fast::exp`]`(-x)` under `fast`.
//!
//! Rule: `x̄ += ḡ · (y · (1 − y))` with `y` the node's output.

use crate::Element;

use super::{unary_rule, Contributions, VjpArgs};
use crate::Recordable;

/// `1 / (1 + e^(-x))`: exactly `0` below about −88.7 (`expf` overflows to `inf`), `1` above 17.
pub fn scalar<E: Element>(x: E) -> E {
    E::ONE / (E::ONE + (-x).exp())
}

/// `1 / (1 + e^(-x))` with the `fast` profile's `exp`: exactly `0` below about −88.7, `1`
/// above about 17.
pub fn scalar_fast<E: Element>(x: E) -> E {
    E::ONE / (E::ONE + (-x).exp_fast())
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    unary_rule(r, v, |r, _x, y| {
        let s = r.shape_of(y);
        let one = r.fill(1.0, s)?;
        let one_minus = r.sub(&one, y)?;
        r.mul(y, &one_minus)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        assert_eq!(super::scalar::<f32>(0.0), 0.5);
        assert_eq!(super::scalar::<f32>(-100.0), 0.0);
        assert_eq!(super::scalar::<f32>(100.0), 1.0);
    }
}
