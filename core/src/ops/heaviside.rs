//! `heaviside`: `1` where `x > 0`, NaN stays NaN, else `0`. Relu's derivative.
//!
//! Rule: none (piecewise constant; its derivative is zero wherever it exists).

use crate::Element;

/// `heaviside(x)` with value 0 at 0.
pub fn scalar<E: Element>(x: E) -> E {
    if x > E::ZERO {
        E::ONE
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
        assert_eq!(super::scalar::<f32>(3.0), 1.0);
        assert_eq!(super::scalar::<f32>(0.0), 0.0);
        assert_eq!(super::scalar::<f32>(-1.0), 0.0);
    }
}
