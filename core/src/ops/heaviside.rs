//! `heaviside`: `1` where `x > 0`, NaN stays NaN, else `0`. Relu's derivative.
//!
//! Rule: none (piecewise constant; its derivative is zero wherever it exists).

use crate::Element;

use super::{Contributions, VjpArgs};
use crate::Recordable;

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

pub(crate) fn vjp<R: Recordable>(
    _r: &mut R,
    _v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    Ok([None, None, None])
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        assert_eq!(super::scalar::<f32>(3.0), 1.0);
        assert_eq!(super::scalar::<f32>(0.0), 0.0);
        assert_eq!(super::scalar::<f32>(-1.0), 0.0);
    }
}
