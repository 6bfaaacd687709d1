//! `log`: the natural logarithm. Under the `precise` math profile `libm::logf(x)`; under `fast`
//! [`crate::math::fast::ln`] (micromath's approximation).
//!
//! Rule: `x̄ += ḡ / x`.

use crate::Element;

use super::{want, Contributions, VjpArgs};
use crate::Recordable;

/// `ln(x)` (`precise`).
pub fn scalar<E: Element>(x: E) -> E {
    x.ln()
}

/// `ln(x)` (`fast`).
pub fn scalar_fast<E: Element>(x: E) -> E {
    x.ln_fast()
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    Ok([
        want(v.wants[0], || r.div(v.cotangent, v.args[0]))?,
        None,
        None,
    ])
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        assert_eq!(super::scalar::<f32>(1.0), 0.0);
        assert_eq!(super::scalar::<f32>(0.0), f32::NEG_INFINITY);
    }
}
