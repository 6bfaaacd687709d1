//! `exp`: `e^x`. Under the `precise` math profile `libm::expf(x)`; under `fast`
//! [`crate::math::fast::exp`] (micromath's approximation, about 1e-3 relative error).
//!
//! Rule: `x̄ += ḡ * y` with `y` the node's output.

use crate::Element;

use super::{unary_rule, Contributions, VjpArgs};
use crate::Recordable;

/// `e^x` (`precise`).
pub fn scalar<E: Element>(x: E) -> E {
    x.exp()
}

/// `e^x` (`fast`).
pub fn scalar_fast<E: Element>(x: E) -> E {
    x.exp_fast()
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    unary_rule(r, v, |_r, _x, y| Ok(y.clone()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        assert_eq!(super::scalar::<f32>(0.0), 1.0);
        assert_eq!(super::scalar::<f32>(f32::NEG_INFINITY), 0.0);
    }
}
