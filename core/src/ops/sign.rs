//! `sign`: `1` for `x > 0`, `-1` for `x < 0`, `0` for `±0` (as `+0`), NaN stays NaN. `abs`'s
//! rule speaks it.
//!
//! Rule: none (piecewise constant).

use crate::Element;

/// `sign(x)`.
pub fn scalar<E: Element>(x: E) -> E {
    if x > E::ZERO {
        E::ONE
    } else if x < E::ZERO {
        -E::ONE
    } else if x.is_nan() {
        x
    } else {
        E::ZERO
    }
}

pub(crate) use super::no_rule as vjp;

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        assert_eq!(super::scalar::<f32>(-3.0), -1.0);
        assert_eq!(super::scalar::<f32>(-0.0).to_bits(), 0);
        assert_eq!(super::scalar::<f32>(7.0), 1.0);
    }
}
